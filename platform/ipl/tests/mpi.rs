//! The mpi driver under a real `mpirun` (feature `mpi`): port patterns, large and many
//! messages, flow control, the errors for joins after start, and what a killed rank does.
//!
//! The ranks are this test binary re-run by `mpirun` with a role in `IPL_TEST_ROLE`; each test
//! bounds `mpirun` in time, and `mpirun` takes its ranks with it when it is killed. Without
//! `mpirun` on the PATH the tests skip, except under `CI=true`, where that is a failure.
#![cfg(feature = "mpi")]

use ipl::{Config, Connection, Driver, Ibis, NodeId, PoolEvent, PortType, ReadMessage, Receive};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::Reaped;

/// Longest one mpirun may take.
const LIMIT: Duration = Duration::from_secs(120);
/// Longest a rank waits for one message.
const WAIT: Duration = Duration::from_secs(30);

fn ty(c: Connection) -> PortType {
    PortType::builder().connection(c).build()
}

/// Runs this binary's `role` on `n` ranks under mpirun; returns (success, stdout, stderr), or
/// None where mpirun is missing outside CI.
fn run_ranks(test: &str, role: &str, n: u32) -> Option<(bool, String, String)> {
    let (cmd, ranks) =
        testkit::mpirun(test, n, &["IPL_TEST_ROLE", "IPL_DRIVER", "RUST_BACKTRACE"])?;
    Some(run_launched(cmd, ranks, role))
}

/// Runs this binary's `role` with `launcher`, whose ranks carry the marker of `ranks`.
fn run_launched(
    mut cmd: std::process::Command,
    ranks: testkit::KillMarked,
    role: &str,
) -> (bool, String, String) {
    cmd.arg(std::env::current_exe().expect("test executable"))
        .args([
            "child_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("IPL_TEST_ROLE", role)
        .env("IPL_DRIVER", "mpi")
        .env("RUST_BACKTRACE", "1")
        .env_remove("IPL_POOL")
        .env_remove("IPL_POOL_SIZE")
        .env_remove("IPL_RANK")
        .env_remove("IPL_SERVER")
        .stdin(Stdio::null());
    let (status, out, err) = Reaped::start(&mut cmd).output(Instant::now() + LIMIT);
    // mpirun has ended: none of its ranks may be left.
    let entries = ranks.entries();
    let left = testkit::wait_unmarked(&entries, Instant::now() + Duration::from_secs(10));
    assert_eq!(
        left,
        Ok(()),
        "ranks left after the launcher ended:\n{out}\n{err}"
    );
    (status.success(), out, err)
}

/// Entry point of the ranks; does nothing in a normal test run.
#[test]
fn child_process_entry() {
    let Ok(role) = std::env::var("IPL_TEST_ROLE") else {
        return;
    };
    // RUST_LOG, where the test passes one, shows what the driver did.
    let _log = ipl::trace::init("warn", None).unwrap_or_else(|e| panic!("logging: {e}"));
    let cfg = Config::from_env().unwrap_or_else(|e| panic!("config: {e}"));
    assert_eq!(cfg.driver, Driver::Mpi);
    let ibis = Ibis::join(cfg).unwrap_or_else(|e| panic!("join: {e}"));
    let all = ibis.pool().wait_closed().expect("pool fills");
    let me = ibis.id().rank();
    match role.as_str() {
        "ports" => ports(&ibis, &all),
        "kill" => kill(&ibis, &all),
        "words" => words(&ibis, &all),
        "direct" => direct(&ibis, &all),
        "leaves" => leaves(&ibis, &all),
        "late" => late(&ibis, &all),
        "hostile" => hostile(&ibis, &all),
        other => panic!("unknown role {other}"),
    }
    let end = Instant::now();
    ibis.end().expect("leave");
    println!("rank {me}: left in {:?}", end.elapsed());
}

/// Every rank reaches this before any goes on (rank 0 gathers, then answers everyone).
fn barrier(ibis: &Ibis, all: &[NodeId], name: &str) {
    let t = ty(Connection::ManyToOne);
    let rp = ibis.receive_port(&t, name).expect("barrier port");
    let sp = ibis.send_port(&t).expect("send port");
    let me = ibis.id().rank() as usize;
    if me == 0 {
        for _ in 1..all.len() {
            rp.receive_timeout(WAIT).expect("a rank arrives").finish();
        }
        for n in &all[1..] {
            sp.connect(n, name).expect("connect");
            let mut w = sp.message();
            w.write_u8(1);
            w.finish().expect("release");
            sp.disconnect(n, name).expect("disconnect");
        }
    } else {
        sp.connect(&all[0], name).expect("connect to rank 0");
        let mut w = sp.message();
        w.write_u8(1);
        w.finish().expect("arrive");
        rp.receive_timeout(WAIT).expect("released").finish();
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

fn ports(ibis: &Ibis, all: &[NodeId]) {
    let me = ibis.id().rank() as usize;
    let n = all.len();

    // A second node in this process is refused: MPI's pool is fixed when the job starts.
    let e = Ibis::join(ibis.config().clone())
        .err()
        .expect("a second join fails");
    let e = e.to_string();
    assert!(
        e.contains("joins after start") && e.contains("malleability"),
        "{e}"
    );

    // A ring: every kind of item, small and large (800 KB, sent in pieces), exact.
    let one = ty(Connection::OneToOne);
    let rp = ibis.receive_port(&one, "ring").expect("ring port");
    barrier(ibis, all, "b0");
    let sp = ibis.send_port(&one).expect("send port");
    sp.connect(&all[(me + 1) % n], "ring")
        .expect("connect ring");
    assert_eq!(sp.connection_drivers()[0].2, "mpi");
    let big: Vec<f64> = (0..100_000).map(|i| (i + me) as f64 / 3.0).collect();
    let odd = pattern(me as u64, 17_001);
    // Sent from where it is, in pieces (one not whole), without a copy.
    let shared = ipl::Bytes::from(pattern(me as u64 + 100, 600_001));
    for round in 0..3u32 {
        let mut w = sp.message();
        w.write_u32(round);
        w.write_u64(me as u64);
        w.write_slice(&big[..]);
        w.write_bytes(&odd);
        w.write_shared_bytes(shared.clone());
        w.write(&format!("from {me}")).expect("serialize");
        w.finish().expect("send ring");
        let from = (me + n - 1) % n;
        let mut r = rp.receive_timeout(WAIT).expect("ring message");
        assert_eq!(r.origin(), &all[from]);
        assert_eq!(r.read_u32().unwrap(), round);
        assert_eq!(r.read_u64().unwrap(), from as u64);
        let got: Vec<f64> = r.read_slice().unwrap();
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, v)| *v == (i + from) as f64 / 3.0));
        assert_eq!(r.read_bytes().unwrap(), pattern(from as u64, 17_001));
        assert!(r.read_bytes().unwrap() == pattern(from as u64 + 100, 600_001));
        assert_eq!(r.read::<String>().unwrap(), format!("from {from}"));
        r.finish();
    }
    drop(sp);

    // Many to one: every rank sends numbered messages of varied sizes to rank 0, which sees
    // each sender's in order.
    let many = ty(Connection::ManyToOne);
    let gather = ibis.receive_port(&many, "gather").expect("gather port");
    barrier(ibis, all, "b1");
    let per = 200u64;
    let sp = ibis.send_port(&many).expect("send port");
    sp.connect(&all[0], "gather").expect("connect gather");
    // Rank 0 sends to itself from a thread of its own while its main thread receives.
    let sender = std::thread::spawn({
        move || {
            for i in 0..per {
                let body = pattern(i, (i as usize * 997) % 40_000);
                let mut w = sp.message();
                w.write_u64(me as u64);
                w.write_u64(i);
                w.write_bytes(&body);
                w.finish().expect("send gather");
            }
            sp
        }
    });
    if me == 0 {
        let mut next = vec![0u64; n];
        for _ in 0..per * n as u64 {
            let mut r = gather.receive_timeout(WAIT).expect("gathered message");
            let from = r.read_u64().unwrap() as usize;
            let i = r.read_u64().unwrap();
            assert_eq!(r.origin(), &all[from]);
            assert_eq!(i, next[from], "messages of rank {from} out of order");
            next[from] += 1;
            assert_eq!(
                r.read_bytes().unwrap(),
                pattern(i, (i as usize * 997) % 40_000)
            );
            r.finish();
        }
    }
    drop(sender.join().expect("sender"));

    // One to many: rank 0 multicasts; sizes from empty to 300 KB.
    let bcast_ty = ty(Connection::OneToMany);
    let bcast = ibis.receive_port(&bcast_ty, "bcast").expect("bcast port");
    barrier(ibis, all, "b2");
    let sizes = [0usize, 1, 100, 16_000, 16_500, 65_536, 300_000];
    if me == 0 {
        let sp = ibis.send_port(&bcast_ty).expect("send port");
        for node in &all[1..] {
            sp.connect(node, "bcast").expect("connect bcast");
        }
        for (k, &s) in sizes.iter().enumerate() {
            let body = pattern(k as u64, s);
            let mut w = sp.message();
            w.write_bytes(&body);
            w.finish().expect("multicast");
        }
    } else {
        for (k, &s) in sizes.iter().enumerate() {
            let mut r = bcast.receive_timeout(WAIT).expect("multicast message");
            assert_eq!(r.read_bytes().unwrap(), pattern(k as u64, s));
            r.finish();
        }
    }

    // Flow control: 24 MB to a receiver that reads only after a pause; the sender must wait for
    // it (the window is 4 MiB) and everything arrives intact.
    let flow = ibis.receive_port(&one, "flow").expect("flow port");
    barrier(ibis, all, "b3");
    if me == 0 {
        let sp = ibis.send_port(&one).expect("send port");
        sp.connect(&all[n - 1], "flow").expect("connect flow");
        let t = Instant::now();
        for i in 0..24u64 {
            let body = pattern(i, 1 << 20);
            let mut w = sp.message();
            w.write_bytes(&body);
            w.finish().expect("send flow");
        }
        println!("rank 0: 24 MB sent in {:?}", t.elapsed());
    }
    if me == n - 1 {
        std::thread::sleep(Duration::from_millis(500));
        for i in 0..24u64 {
            let mut r = flow.receive_timeout(WAIT).expect("flow message");
            assert_eq!(r.read_bytes().unwrap(), pattern(i, 1 << 20));
            r.finish();
        }
    }

    // Upcalls: every rank sends to every other's upcall port.
    let up_ty = PortType::builder()
        .connection(Connection::ManyToMany)
        .receive(Receive::Upcall)
        .build();
    let sum = Arc::new(AtomicU64::new(0));
    let s2 = sum.clone();
    let _up = ibis
        .receive_port_with_upcall(&up_ty, "up", move |mut m: ReadMessage| {
            s2.fetch_add(m.read_u64().expect("value"), Ordering::SeqCst);
            m.finish();
            Ok(())
        })
        .expect("upcall port");
    barrier(ibis, all, "b4");
    let sp = ibis.send_port(&up_ty).expect("send port");
    for node in all {
        sp.connect(node, "up").expect("connect upcall");
    }
    let mut w = sp.message();
    w.write_u64(1 + me as u64);
    w.finish().expect("send upcall");
    let want = (n * (n + 1) / 2) as u64;
    let deadline = Instant::now() + WAIT;
    while sum.load(Ordering::SeqCst) != want {
        assert!(
            Instant::now() < deadline,
            "upcalls summed {}",
            sum.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    barrier(ibis, all, "b5");

    // A receiver that closes its port: the sender learns it, and its sends fail instead of
    // piling up; the receiving side discards what was on its way.
    let gone = ibis.receive_port(&one, "gone").expect("gone port");
    barrier(ibis, all, "b6");
    let sp = ibis.send_port(&one).expect("send port");
    if me == 0 {
        sp.connect(&all[1], "gone").expect("connect gone");
        let mut w = sp.message();
        w.write_u64(7);
        w.finish().expect("first message");
    }
    if me == 1 {
        let mut r = gone.receive_timeout(WAIT).expect("first message");
        assert_eq!(r.read_u64().unwrap(), 7);
        r.finish();
    }
    drop(gone);
    barrier(ibis, all, "b7");
    if me == 0 {
        let deadline = Instant::now() + WAIT;
        let body = pattern(3, 100_000);
        let e = loop {
            let mut w = sp.message();
            w.write_bytes(&body);
            if let Err(e) = w.finish() {
                break e;
            }
            assert!(
                Instant::now() < deadline,
                "sends to a closed port kept succeeding"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        println!("rank 0: sending to a closed port: {e}");
    }
    drop(sp);
    barrier(ibis, all, "b8");
    println!("rank {me}: ports ok");
}

/// Rank 2 kills itself; ranks 0 and 1 wait for the pool to report its death, print what they
/// saw, and exit with status 1, rank 0 (which runs the registry) only once rank 1 has seen it.
fn kill(ibis: &Ibis, all: &[NodeId]) {
    let me = ibis.id().rank();
    let events = ibis.pool().subscribe();
    let t = ty(Connection::ManyToOne);
    let seen = ibis.receive_port(&t, "seen").expect("port");
    barrier(ibis, all, "k0");
    println!("rank {me} waiting");
    if me == 2 {
        // SAFETY: raise(3) with a valid signal number.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(PoolEvent::Died(n)) if n.rank() == 2 => {
                println!("rank {me}: the pool reports {n} died");
                break;
            }
            Ok(_) => {}
            Err(_) => {
                println!("rank {me}: no death reported");
                break;
            }
        }
    }
    if me == 1 {
        let sp = ibis.send_port(&t).expect("send port");
        sp.connect(&all[0], "seen").expect("connect to rank 0");
        let mut w = sp.message();
        w.write_u8(1);
        w.finish().expect("tell rank 0");
    } else if seen.receive_timeout(Duration::from_secs(30)).is_err() {
        println!("rank 0: rank 1 did not say it saw the death");
    }
    std::process::exit(1);
}

/// The word channel between every pair of ranks, in rounds: an exchange that finds the peer's
/// message within its looks or leaves the receive to `test`, a message taken early by `peek`
/// and then exchanged for, the separate post, send and test, and the errors of misuse.
fn words(ibis: &Ibis, all: &[NodeId]) {
    let me = ibis.id().rank() as usize;
    let n = all.len();
    let mut chan = ibis.word_channel().expect("the process's channel");
    assert!(ibis.word_channel().is_none(), "a second channel at once");
    let rank = |node: &NodeId| chan.rank_of(node).expect("a rank of the pool");
    assert_eq!(rank(&all[me]), me);
    let wait_test = |chan: &mut ipl::WordChannel| -> Vec<u64> {
        wait_word(chan, me).unwrap_or_else(|e| panic!("rank {me}: test: {e}"))
    };
    // Rounds of a 1-factorisation of the ranks (a round-robin tournament): in each round every
    // rank has one partner, or sits out when `n` is odd.
    let slots = n + n % 2;
    for round in 0..slots - 1 {
        let partner = if me == slots - 1 {
            round
        } else if me == round {
            slots - 1
        } else {
            (2 * round + slots - 1 - me) % (slots - 1)
        };
        if partner >= n {
            continue;
        }
        let mine = |k: u64| vec![(me as u64) << 32 | round as u64, k, u64::MAX - k];
        let theirs = |k: u64| vec![(partner as u64) << 32 | round as u64, k, u64::MAX - k];
        // Looked at once (the peer may be late) and ten thousand times.
        for (k, looks) in [(0u64, 1u32), (1, 10_000)] {
            let got = chan
                .exchange(partner, &mine(k), looks)
                .expect("exchange")
                .map(<[u64]>::to_vec);
            let got = got.unwrap_or_else(|| wait_test(&mut chan));
            assert_eq!(got, theirs(k), "rank {me}: exchange {k} with {partner}");
        }
        // Messages of one word, which go in the tag where it holds them (below MPI_TAG_UB,
        // 2^31 - 1 in OpenMPI), else as a payload, and the empty message: each must come as
        // it went, whichever way it went.
        for one in [
            vec![],
            vec![0],
            vec![1],
            vec![0x7fff_fffe],
            vec![0x7fff_ffff],
            vec![1 << 40],
            vec![u64::MAX],
        ] {
            let got = chan
                .exchange(partner, &one, 1000)
                .expect("exchange")
                .map(<[u64]>::to_vec);
            let got = got.unwrap_or_else(|| wait_test(&mut chan));
            assert_eq!(got, one, "rank {me}: {one:?} with {partner}");
        }
        // The lower rank sends first and waits until the higher has its message early; the
        // higher then exchanges, and the early message is the one it gets. Once with three
        // words, once with one that goes in the tag.
        let tagged = |pid: usize| vec![pid as u64 + 5];
        for (mine, theirs) in [(mine(2), theirs(2)), (tagged(me), tagged(partner))] {
            if me < partner {
                chan.send(partner, &mine).expect("send");
                chan.post(partner).expect("post");
                assert_eq!(
                    wait_test(&mut chan),
                    theirs,
                    "rank {me}: after the early one"
                );
            } else {
                let until = Instant::now() + WAIT;
                while chan.peek(partner).expect("peek").is_none() {
                    assert!(Instant::now() < until, "rank {me}: nothing to peek at");
                    std::thread::yield_now();
                }
                assert_eq!(
                    chan.peek(partner).expect("peek").map(<[u64]>::to_vec),
                    Some(theirs.clone()),
                    "rank {me}: what a peek shows"
                );
                let got = chan.exchange(partner, &mine, 1).expect("exchange");
                assert_eq!(
                    got.map(<[u64]>::to_vec),
                    Some(theirs),
                    "rank {me}: early one"
                );
            }
        }
        // The largest message, and the errors of misuse, which leave the channel usable.
        let big: Vec<u64> = (0..ipl::WordChannel::MAX_WORDS as u64).collect();
        let got = chan
            .exchange(partner, &big, 1000)
            .expect("exchange")
            .map(<[u64]>::to_vec);
        assert_eq!(got.unwrap_or_else(|| wait_test(&mut chan)), big);
        let too_long = vec![0u64; ipl::WordChannel::MAX_WORDS + 1];
        let e = chan.exchange(partner, &too_long, 1).expect_err("too long");
        assert!(e.to_string().contains("more than the"), "{e}");
        let e = chan.exchange(n, &mine(3), 1).expect_err("no such rank");
        assert!(e.to_string().contains("not one of the"), "{e}");
        chan.post(partner).expect("post");
        let e = chan
            .exchange(partner, &mine(3), 1)
            .expect_err("posted twice");
        assert!(e.to_string().contains("posted already"), "{e}");
        chan.cancel();
    }
    drop(chan);
    assert!(
        ibis.word_channel().is_some(),
        "the channel again once dropped"
    );
    barrier(ibis, all, "words done");
    println!("rank {me}: words ok");
}

/// Large borrowed parts between 2 ranks, every byte checked: each way in turn on one pair of
/// connections, with the receiver reading each message as it comes; then, on a fresh pair
/// (whose first large pieces go from the sender's memory at once), both ranks sending before
/// either reads, which completes only if each process takes the other's pieces when asked:
/// each rank waits in its own send until then.
fn direct(ibis: &Ibis, all: &[NodeId]) {
    const LEN: usize = 300_000;
    const EACH_WAY: u64 = 20;
    const CROSSED: u64 = 4;
    let me = ibis.id().rank() as usize;
    let other = &all[1 - me];
    let one = ty(Connection::OneToOne);
    let rp = ibis.receive_port(&one, "direct").expect("port");
    let crossed = ibis.receive_port(&one, "crossed").expect("port");
    barrier(ibis, all, "direct ports");
    let sp = ibis.send_port(&one).expect("send port");
    sp.connect(other, "direct").expect("connect");
    // Message k from rank r: made before it is sent or checked, so that a reader is back in
    // its receive at once.
    let body = |k: u64, r: usize| pattern(k * 2 + r as u64, LEN);
    let send = |sp: &ipl::SendPort, k: u64, body: &[u8]| {
        let mut w = sp.message();
        w.write_u64(k);
        w.write_bytes(body);
        w.write_u32(7);
        w.finish().expect("send");
    };
    let receive = |rp: &ipl::ReceivePort, k: u64, want: &[u8]| {
        let mut r = rp.receive_timeout(WAIT).expect("message");
        assert_eq!(r.read_u64().unwrap(), k);
        assert!(r.read_bytes().unwrap() == want, "message {k}");
        assert_eq!(r.read_u32().unwrap(), 7);
        r.finish();
    };
    for from in 0..2 {
        let bodies: Vec<Vec<u8>> = (0..EACH_WAY).map(|k| body(k, from)).collect();
        barrier(ibis, all, &format!("direct from {from}"));
        for (k, b) in bodies.iter().enumerate() {
            if me == from {
                send(&sp, k as u64, b);
            } else {
                receive(&rp, k as u64, b);
            }
        }
    }
    let mine: Vec<Vec<u8>> = (0..CROSSED).map(|k| body(k + 100, me)).collect();
    let theirs: Vec<Vec<u8>> = (0..CROSSED).map(|k| body(k + 100, 1 - me)).collect();
    let sp2 = ibis.send_port(&one).expect("send port");
    sp2.connect(other, "crossed").expect("connect");
    barrier(ibis, all, "direct crossed");
    for (k, b) in mine.iter().enumerate() {
        send(&sp2, k as u64, b);
    }
    for (k, b) in theirs.iter().enumerate() {
        receive(&crossed, k as u64, b);
    }
    barrier(ibis, all, "direct done");
    drop(sp);
    drop(sp2);
    println!("rank {me}: direct ok");
}

/// Rank 1 reads one message, closes its port and leaves at once, while rank 0 sends it 1 MB
/// parts from its memory (`IPL_MPI_SENDS=direct`) back to back. Rank 0's sends must end with
/// an error that its receiver has gone, and both must leave.
fn leaves(ibis: &Ibis, all: &[NodeId]) {
    const LEN: usize = 1 << 20;
    /// Far more than rank 1 takes to leave; a bound, so that a receiver that never goes fails
    /// the test rather than hangs it.
    const MOST: u64 = 100_000;
    let me = ibis.id().rank() as usize;
    let one = ty(Connection::OneToOne);
    let body = pattern(5, LEN);
    if me == 1 {
        let rp = ibis.receive_port(&one, "leaves").expect("port");
        barrier(ibis, all, "leaves ports");
        let mut r = rp.receive_timeout(WAIT).expect("the first message");
        assert!(r.read_bytes().unwrap() == body);
        r.finish();
        rp.close();
        println!("rank 1: leaves ok");
        return;
    }
    barrier(ibis, all, "leaves ports");
    let sp = ibis.send_port(&one).expect("send port");
    sp.connect(&all[1], "leaves").expect("connect");
    let started = Instant::now();
    let mut sent = 0u64;
    let why = loop {
        let mut w = sp.message();
        w.write_bytes(&body);
        match w.finish() {
            Ok(_) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < MOST, "rank 1 still read after {sent} messages");
    };
    println!(
        "rank 0: leaves ok: {sent} messages sent in {:?}, then: {why}",
        started.elapsed()
    );
}

/// Rank 1 closes its port and leaves; once the pool reports it gone, rank 0 sends it a piece
/// of 1 MB straight over MPI on the closed connection's bulk tag, as a send from memory would
/// that passed its look at the receiver just before the receiver left. MPI completes a piece
/// that large only once the receiving process takes it, so the piece completes only if a
/// process that leaves still discards what comes for its closed connections until every rank
/// leaves; rank 0 gives it 20 s.
fn late(ibis: &Ibis, all: &[NodeId]) {
    use ipl::testing::mpi as raw;
    let me = ibis.id().rank() as usize;
    let one = ty(Connection::OneToOne);
    let events = ibis.pool().subscribe();
    let mut chan = ibis.word_channel().expect("the process's channel");
    if me == 1 {
        let rp = ibis.receive_port(&one, "late").expect("port");
        chan.exchange(0, &[1], 1)
            .expect("tell rank 0 the port is there");
        let mut r = rp.receive_timeout(WAIT).expect("the first message");
        assert_eq!(r.read_u64().unwrap(), 7);
        r.finish();
        rp.close();
        println!("rank 1: late ok");
        return;
    }
    let got = match chan.exchange(1, &[1], 1000).expect("exchange") {
        Some(m) => m.to_vec(),
        None => wait_word(&mut chan, me).expect("rank 1's port"),
    };
    assert_eq!(got, [1]);
    // The first connection of this process: connection 0.
    let sp = ibis.send_port(&one).expect("send port");
    sp.connect(&all[1], "late").expect("connect");
    let mut w = sp.message();
    w.write_u64(7);
    w.finish().expect("the first message");
    let until = Instant::now() + WAIT;
    loop {
        match events.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(PoolEvent::Left(n)) if n.rank() == 1 => break,
            Ok(_) => {}
            Err(_) => panic!("rank 0: rank 1's leave was not reported"),
        }
    }
    let (done, finished) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if finished.recv_timeout(Duration::from_secs(20)).is_err() {
            println!("rank 0: the late piece did not complete within 20 s");
            std::process::exit(1);
        }
    });
    let (_, _, bulk) = raw::connection_tags(0);
    raw::send(1, bulk, &vec![3u8; 1 << 20]).expect("the late piece");
    let _ = done.send(());
    println!("rank 0: late ok");
}

/// Waits on rank `me`'s word channel for the message that `exchange` did not find at once.
fn wait_word(chan: &mut ipl::WordChannel, me: usize) -> ipl::Result<Vec<u64>> {
    let until = Instant::now() + WAIT;
    loop {
        if let Some(m) = chan.test()? {
            return Ok(m.to_vec());
        }
        assert!(
            Instant::now() < until,
            "rank {me}: no message within {WAIT:?}"
        );
        std::thread::yield_now();
    }
}

/// Rank 0 speaks to rank 1 straight over MPI as a peer that sends garbage: connect requests
/// that do not decode (one of 1 MB), a frame header claiming a terabyte, a piece of a large
/// frame longer than a piece may be, notices of every wrong length, word messages that are
/// too long or not whole words or carry a payload where their tag carries their word, and a
/// word of the wrong length where a receiver's
/// confirmations come back. Rank 1 must report each as an error where its calls can see
/// one, drop the connections that carried them, and go on serving real connections: no
/// panic, no allocation of a claimed length, no hang. The ranks keep in step on the word
/// channel (step `k`: each sends `k` and waits for the other's).
fn hostile(ibis: &Ibis, all: &[NodeId]) {
    use ipl::testing::mpi as raw;
    use ipl::testing::wire::{FrameKind, Header};
    let me = ibis.id().rank() as usize;
    let other = 1 - me;
    let mut chan = ibis.word_channel().expect("the process's channel");
    let step = |chan: &mut ipl::WordChannel, k: u64| {
        let got = chan.exchange(other, &[k], 1000).expect("exchange");
        let got = match got {
            Some(m) => m.to_vec(),
            None => wait_word(chan, me).expect("step"),
        };
        assert_eq!(got, [k], "rank {me}: step {k}");
    };
    let many = ty(Connection::ManyToOne);
    let frame_header = |len: u64| {
        Header {
            kind: FrameKind::Message,
            big_endian: false,
            len,
            deliver_at_ns: 0,
        }
        .encode()
    };
    if me == 1 {
        let rp = ibis.receive_port(&many, "victim").expect("port");
        step(&mut chan, 1);
        // Garbage connect requests come, then a real connection and its message.
        let mut r = rp.receive_timeout(WAIT).expect("the first real message");
        assert_eq!(r.read_u64().unwrap(), 42);
        r.finish();
        step(&mut chan, 2);
        // A header claiming a terabyte on that connection: the port drops the connection.
        let until = Instant::now() + WAIT;
        while !rp.connected().is_empty() {
            assert!(Instant::now() < until, "the connection was not dropped");
            if rp.receive_timeout(Duration::from_millis(50)).is_ok() {
                panic!("a message from a frame claiming a terabyte");
            }
        }
        step(&mut chan, 3);
        // A second connection: a frame of 100,000 bytes whose first piece is 300,000 long.
        let mut r = rp.receive_timeout(WAIT).expect("the frame's header");
        let e = r
            .read_u64()
            .expect_err("a piece longer than a piece may be");
        assert!(e.to_string().contains("a piece of 300000 bytes"), "{e}");
        drop(r);
        step(&mut chan, 4);
        // Notices of every wrong length, then word messages that do not fit.
        chan.post(other).expect("post");
        let e = wait_word(&mut chan, me).expect_err("a word message of 4,104 bytes");
        assert!(e.to_string().contains("MPI error"), "{e}");
        println!("rank 1: a word message of 4,104 bytes: {e}");
        chan.post(other).expect("post");
        let e = wait_word(&mut chan, me).expect_err("a word message of 13 bytes");
        assert!(e.to_string().contains("13 bytes"), "{e}");
        chan.post(other).expect("post");
        let e = wait_word(&mut chan, me).expect_err("a word in a tag, with a payload");
        assert!(
            e.to_string().contains("3 bytes with a word in its tag"),
            "{e}"
        );
        // A connection of this process's (its first, connection 0), on whose back tag a word
        // of 5 bytes comes: its next large message fails, naming it.
        let sp = ibis.send_port(&many).expect("send port");
        sp.connect(&all[other], "answers").expect("connect");
        step(&mut chan, 5);
        step(&mut chan, 6);
        let mut w = sp.message();
        w.write_bytes(&[3u8; 100_000]);
        let e = w.finish().expect_err("a word of 5 bytes on the back tag");
        assert!(e.to_string().contains("a word of 5 bytes"), "{e}");
        drop(sp);
        step(&mut chan, 7);
        // Still serving: a real connection and message after all that.
        let mut r = rp
            .receive_timeout(WAIT)
            .expect("a real message after the garbage");
        assert_eq!(r.read_u64().unwrap(), 43);
        r.finish();
        step(&mut chan, 8);
        println!("rank 1: hostile ok");
        return;
    }
    let answers = ibis.receive_port(&many, "answers").expect("port");
    let victim = 1;
    step(&mut chan, 1);
    for request in [
        Vec::new(),
        vec![1, 2, 3],
        [5u32.to_le_bytes().to_vec(), vec![0xab; 100]].concat(),
        [u32::MAX.to_le_bytes().to_vec(), vec![7; 20]].concat(),
        vec![0xff; 1 << 20],
    ] {
        raw::send(victim, raw::CONNECT, &request).expect("a garbage connect request");
    }
    // A fresh connection to the victim's port, with one message of `k` on it.
    let connect_and_send = |k: u64, what: &str| {
        let sp = ibis.send_port(&many).expect("send port");
        sp.connect(&all[victim as usize], "victim")
            .unwrap_or_else(|e| panic!("connecting for {what}: {e}"));
        let mut w = sp.message();
        w.write_u64(k);
        w.finish().unwrap_or_else(|e| panic!("{what}: {e}"));
        sp
    };
    // The first real connection of this process: connection 0.
    let sp = connect_and_send(42, "the first real message");
    step(&mut chan, 2);
    let (data, _, _) = raw::connection_tags(0);
    raw::send(victim, data, &frame_header(1 << 40)).expect("a header claiming a terabyte");
    // The receiver drops the connection and says so: the next send fails.
    let until = Instant::now() + WAIT;
    let e = loop {
        let mut w = sp.message();
        w.write_u64(0);
        if let Err(e) = w.finish() {
            break e;
        }
        assert!(Instant::now() < until, "sends still go after the garbage");
        std::thread::yield_now();
    };
    assert!(e.to_string().contains("receive port closed"), "{e}");
    drop(sp);
    step(&mut chan, 3);
    let sp = ibis.send_port(&many).expect("send port");
    sp.connect(&all[victim as usize], "victim")
        .expect("the second connection");
    let (data, _, bulk) = raw::connection_tags(1);
    raw::send(victim, data, &frame_header(100_000)).expect("a large frame's header");
    raw::send(victim, bulk, &vec![9u8; 300_000]).expect("a piece of 300,000 bytes");
    step(&mut chan, 4);
    drop(sp);
    for len in [0usize, 3, 5, 11, 13, 5000] {
        raw::send(victim, raw::NOTICE, &vec![0xee; len]).expect("a notice of a wrong length");
    }
    // Notices of the right lengths about connections that do not exist.
    raw::send(victim, raw::NOTICE, &999u32.to_le_bytes()).expect("a receiver gone");
    let ask = [
        999u32.to_le_bytes().to_vec(),
        u64::MAX.to_le_bytes().to_vec(),
    ]
    .concat();
    raw::send(victim, raw::NOTICE, &ask).expect("an ask to take");
    raw::send_words(victim, raw::WORDS, &[1u8; 4104]).expect("a long word message");
    raw::send_words(victim, raw::WORDS, &[1u8; 13]).expect("a word message of 13 bytes");
    raw::send_words(victim, 7, &[1u8; 3]).expect("a word in a tag, with a payload");
    step(&mut chan, 5);
    let (_, back, _) = raw::connection_tags(0);
    raw::send(victim, back, &[0u8; 5]).expect("a word of 5 bytes on a back tag");
    step(&mut chan, 6);
    step(&mut chan, 7);
    let sp = connect_and_send(43, "a real message after the garbage");
    step(&mut chan, 8);
    drop(sp);
    drop(answers);
    println!("rank 0: hostile ok");
}

/// Checks that the launcher's run of `role` on `n` ranks succeeded and that every rank said
/// "rank R: `role` ok".
fn assert_every_rank_ok(role: &str, n: u32, ok: bool, out: &str, err: &str) {
    assert!(ok, "mpirun -n {n} {role}: failed\n{out}\n{err}");
    for r in 0..n {
        assert!(
            out.contains(&format!("rank {r}: {role} ok")),
            "rank {r} of {n}:\n{out}\n{err}"
        );
    }
}

/// Runs `role` on 2, 3 and 4 ranks; each rank must say "rank R: `role` ok".
fn on_2_3_and_4_ranks(role: &str) {
    for n in [2, 3, 4] {
        let Some((ok, out, err)) = run_ranks(role, role, n) else {
            return;
        };
        assert_every_rank_ok(role, n, ok, &out, &err);
    }
}

#[test]
fn the_word_channel_between_every_pair_of_2_3_and_4_ranks() {
    on_2_3_and_4_ranks("words");
}

/// Runs the "direct" role on 2 ranks with `IPL_MPI_SENDS=sends`; returns, for each
/// connection that sent large pieces, how many went from the sender's memory, how many were
/// copied, and how many times the receiving process was asked to take them, from the driver's
/// log at each connection's close. None where mpirun is missing outside CI.
fn large_piece_counts(sends: &str) -> Option<Vec<[u64; 3]>> {
    let (mut cmd, ranks) = testkit::mpirun(
        "direct",
        2,
        &[
            "IPL_TEST_ROLE",
            "IPL_DRIVER",
            "RUST_BACKTRACE",
            "RUST_LOG",
            "IPL_MPI_SENDS",
        ],
    )?;
    cmd.env("RUST_LOG", "ipl::transport::mpi=debug,warn")
        .env("IPL_MPI_SENDS", sends);
    let (ok, out, err) = run_launched(cmd, ranks, "direct");
    assert_every_rank_ok("direct", 2, ok, &out, &err);
    // "... closes: D large pieces sent from the caller's memory, C copied, T times ..."
    let counts: Vec<[u64; 3]> = err
        .lines()
        .filter_map(|l| l.split_once("closes: ").map(|(_, rest)| rest))
        .filter(|rest| rest.contains("large pieces"))
        .map(|rest| {
            let n: Vec<u64> = rest
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect();
            [n[0], n[1], n[2]]
        })
        .collect();
    // Each rank's two connections to the other (the barriers' connections send small messages
    // only).
    let big: Vec<[u64; 3]> = counts.into_iter().filter(|c| c[0] + c[1] > 0).collect();
    assert_eq!(big.len(), 4, "{big:?}\n{err}");
    println!("IPL_MPI_SENDS={sends}: large pieces sent from memory, copied, taken: {big:?}");
    Some(big)
}

/// Sends of large borrowed parts go from the sender's memory while the connection is in step
/// (`IPL_MPI_SENDS=direct`: from the start, whatever the timing of this debug build), and two
/// ranks that both send before they read do not wait for each other: each process takes the
/// other's pieces.
#[test]
fn large_parts_go_from_the_senders_memory_and_crossed_sends_complete() {
    let Some(big) = large_piece_counts("direct") else {
        return;
    };
    assert!(big.iter().all(|c| c[0] >= 2), "{big:?}");
    // The crossed sends made each receiving process take pieces.
    let took = big.iter().filter(|c| c[2] >= 1).count();
    assert!(took >= 2, "{big:?}");
}

/// With `IPL_MPI_SENDS=copied` every large piece is copied, and nothing is taken: the same
/// exchanges, crossed ones included, complete exactly.
#[test]
fn with_copied_sends_every_large_piece_is_copied() {
    let Some(big) = large_piece_counts("copied") else {
        return;
    };
    assert!(big.iter().all(|c| c[0] == 0 && c[2] == 0), "{big:?}");
}

/// A receiver that closes its port and leaves while its sender sends large parts from its
/// caller's memory: what is in flight to the closed port is discarded by the leaving process
/// (its drain), so the sender's sends complete and the next one fails, naming the closed port.
/// A send from memory that nobody took would keep the sender waiting 30 s and then end its
/// process: the run would fail, or take longer than the bound here.
#[test]
fn a_receiver_that_leaves_while_large_sends_are_in_flight_lets_them_complete() {
    let Some((mut cmd, ranks)) = testkit::mpirun(
        "leaves",
        2,
        &[
            "IPL_TEST_ROLE",
            "IPL_DRIVER",
            "RUST_BACKTRACE",
            "IPL_MPI_SENDS",
        ],
    ) else {
        return;
    };
    cmd.env("IPL_MPI_SENDS", "direct");
    let started = Instant::now();
    let (ok, out, err) = run_launched(cmd, ranks, "leaves");
    assert_every_rank_ok("leaves", 2, ok, &out, &err);
    for r in 0..2 {
        assert!(out.contains(&format!("rank {r}: left in")), "{out}\n{err}");
    }
    println!("{out}");
    // Well within the sender's 30 s wait for a receiving process that does not take.
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "took {:?}\n{out}\n{err}",
        started.elapsed()
    );
}

/// A large piece that reaches a rank after it has left the pool completes (see the `late`
/// role): before, the rank stopped taking anything at once, and the sender waited for ever.
#[test]
fn a_piece_sent_to_a_rank_that_has_left_completes() {
    let Some((ok, out, err)) = run_ranks("late", "late", 2) else {
        return;
    };
    assert_every_rank_ok("late", 2, ok, &out, &err);
}

/// Bad input from another rank over MPI (see the `hostile` role) gets clear errors where the
/// receiving process's calls can see them, in its log where they cannot, and never a panic, a
/// hang or an allocation of a claimed length.
#[test]
fn garbage_from_another_rank_is_refused_and_the_rank_goes_on() {
    let Some((ok, out, err)) = run_ranks("hostile", "hostile", 2) else {
        return;
    };
    assert_every_rank_ok("hostile", 2, ok, &out, &err);
    for logged in [
        "a connect request of more than 65536 bytes",
        "bytes that do not decode",
    ] {
        assert!(err.contains(logged), "not logged: {logged}\n{err}");
    }
    println!("{out}");
}

#[test]
fn port_patterns_messages_and_flow_control_on_2_3_and_4_ranks() {
    on_2_3_and_4_ranks("ports");
}

/// Slurm's srun starts the ranks itself (OpenMPI finds its peers through PMIx): the same port
/// checks on 2 ranks. Needs a running Slurm (`scripts/slurm-local`, which `.ci/run` starts).
#[test]
fn port_patterns_under_srun_with_pmix() {
    let srun = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("srun"))
            .find(|p| p.is_file())
    });
    let Some(srun) = srun else {
        assert!(
            !testkit::netns::required(),
            "CI=true but no srun on the PATH (.ci/run starts scripts/slurm-local)"
        );
        eprintln!("port_patterns_under_srun_with_pmix: skipped: no srun on the PATH");
        return;
    };
    let (mark, value) = testkit::marker("srun");
    let mut cmd = std::process::Command::new(srun);
    cmd.args(["--mpi=pmix", "--overcommit", "--export=ALL", "-n", "2"])
        .env(&mark, &value);
    let (ok, out, err) = run_launched(
        cmd,
        testkit::KillMarked::new(vec![format!("{mark}={value}")]),
        "ports",
    );
    assert!(ok, "srun -n 2: failed\n{out}\n{err}");
    for r in 0..2 {
        assert!(
            out.contains(&format!("rank {r}: ports ok")),
            "rank {r}:\n{out}\n{err}"
        );
    }
}

#[test]
fn a_killed_rank_ends_the_job_and_mpirun_names_it() {
    let t = Instant::now();
    let Some((ok, out, err)) = run_ranks("kill", "kill", 3) else {
        return;
    };
    assert!(
        !ok,
        "mpirun succeeded although rank 2 was killed\n{out}\n{err}"
    );
    for r in 0..3 {
        assert!(
            out.contains(&format!("rank {r} waiting")),
            "rank {r}:\n{out}\n{err}"
        );
    }
    let all = format!("{out}\n{err}");
    assert!(
        all.contains("signal 9"),
        "mpirun does not name the signal:\n{all}"
    );
    // The others are ended by mpirun, well before their 60 s receive timeout.
    assert!(
        t.elapsed() < Duration::from_secs(50),
        "took {:?}:\n{all}",
        t.elapsed()
    );
    println!("{all}");
}

/// With `mpirun --enable-recovery` the job outlives a rank: the others then see the death
/// through the registry, as on the other drivers, and name the rank.
#[test]
fn under_enable_recovery_the_others_see_a_killed_rank_die() {
    let Some((mut cmd, ranks)) = testkit::mpirun(
        "recovery",
        3,
        &["IPL_TEST_ROLE", "IPL_DRIVER", "RUST_BACKTRACE"],
    ) else {
        return;
    };
    cmd.arg("--enable-recovery");
    let (_, out, err) = run_launched(cmd, ranks, "kill");
    for r in [0, 1] {
        assert!(
            out.contains(&format!("rank {r}: the pool reports node2@")),
            "rank {r}:\n{out}\n{err}"
        );
    }
}

#[test]
fn the_driver_outside_mpirun_is_a_clear_error() {
    let e = Config::from_lookup(|k| (k == "IPL_DRIVER").then(|| "mpi".to_string()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("mpirun or srun"), "{e}");
}
