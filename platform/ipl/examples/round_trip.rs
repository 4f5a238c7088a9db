//! One-byte round trips between the first two processes of a pool, the way a user's program
//! makes them: rank 0 sends and waits for the answer, rank 1 answers.
//!
//! ```text
//! cargo build --release -p ipl --example round_trip --bin ipl-run
//! target/release/ipl-run -n 2 -- target/release/examples/round_trip 200000
//! IPL_DRIVER=tcp target/release/ipl-run -n 2 -- target/release/examples/round_trip 20000
//! ```
//!
//! It prints the median over five runs of the given number of round trips. `ipl-bench`
//! measures the same next to OpenMPI and raw sockets; this example is small enough to count
//! the instructions of a message under callgrind (see `scripts/count-instructions`).
//!
//! A second argument K makes both sides do K dependent atomic read-modify-writes before each
//! send, on the path from a message's arrival to the answer: run with 0 and with K in turns,
//! the difference is what such instructions cost there (the port's locks and reference counts
//! are of that kind).

use ipl::{Connection, Ibis, PortType};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u32 = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|_| format!("'{a}' is not a number of round trips"))?,
        None => 100_000,
    };
    let extra: u32 = match std::env::args().nth(2) {
        Some(a) => a
            .parse()
            .map_err(|_| format!("'{a}' is not a number of read-modify-writes"))?,
        None => 0,
    };
    let ibis = Ibis::join(ipl::Config::from_env()?)?;
    let all = ibis.pool().wait_closed()?;
    let me = ibis.id().rank() as usize;
    if me > 1 {
        return Ok(());
    }
    let peer = all.get(me ^ 1).ok_or("a pool of one process")?.clone();
    let pt = PortType::builder().connection(Connection::OneToOne).build();
    let (mine, theirs) = if me == 0 {
        ("answer", "question")
    } else {
        ("question", "answer")
    };
    let rp = ibis.receive_port(&pt, mine)?;
    let sp = ibis.send_port(&pt)?;
    // A peer that fails never answers: every wait has an end.
    let patience = Duration::from_secs(60);
    let runs = 5;
    if me == 0 {
        sp.connect(&peer, theirs)?;
        let mut per_trip = Vec::new();
        for _ in 0..runs {
            let start = Instant::now();
            for _ in 0..n {
                read_modify_writes(extra);
                send_byte(&sp)?;
                rp.receive_timeout(patience)?.finish();
            }
            per_trip.push(start.elapsed().as_nanos() as f64 / f64::from(n.max(1)));
        }
        per_trip.sort_by(f64::total_cmp);
        println!(
            "1-byte round trip: {:.1} ns (median of {runs} runs of {n}; fastest {:.1}, slowest {:.1})",
            per_trip[runs / 2],
            per_trip[0],
            per_trip[runs - 1]
        );
    } else {
        // Connects back once the first question is there, as a server would.
        let mut first = Some(rp.receive_timeout(patience)?);
        sp.connect(&peer, theirs)?;
        for _ in 0..runs * n as usize {
            match first.take() {
                Some(m) => m.finish(),
                None => rp.receive_timeout(patience)?.finish(),
            }
            read_modify_writes(extra);
            send_byte(&sp)?;
        }
    }
    Ok(())
}

/// Creates, writes and sends a 1-byte message: out of line, so that `callgrind
/// --toggle-collect=round_trip::send_byte` counts all of it, whatever the port library inlines.
#[inline(never)]
fn send_byte(sp: &ipl::SendPort) -> ipl::Result<u64> {
    let mut m = sp.message();
    m.write_u8(1);
    m.finish()
}

/// `k` dependent atomic read-modify-writes (see the module documentation); none by default.
fn read_modify_writes(k: u32) {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    for _ in 0..k {
        COUNTER.fetch_add(1, Ordering::AcqRel);
    }
}
