//! The wide-area filter adds latency and limits bandwidth between locations, not inside one.

mod common;

use common::{run_pool_with, DRIVERS};
use ipl::{Connection, PortType, WanLink};
use std::time::{Duration, Instant};

/// Four nodes: ranks 0 and 1 in `near`, ranks 2 and 3 in `far`. Returns, per rank, the measured
/// round trip to rank 0 (rank 0 reports zero).
fn round_trips(driver: ipl::Driver, link: WanLink, bytes: usize) -> Vec<Duration> {
    run_pool_with(
        driver,
        4,
        move |mut c| {
            c.location = if c.rank.unwrap() < 2 { "near" } else { "far" }.into();
            c.wan = link;
            c
        },
        move |ibis, all| {
            let t = PortType::builder()
                .connection(Connection::ManyToOne)
                .build();
            let rp = ibis.receive_port(&t, "echo")?;
            let me = ibis.id().rank();
            let sp = ibis.send_port(&t)?;
            if me == 0 {
                // Each echo goes back as soon as its message is in: a near round trip does not
                // wait for the far messages (which a loaded machine may delay further).
                for _ in 0..3 {
                    let mut m = rp.receive()?;
                    let from = m.origin().clone();
                    let data: Vec<u8> = m.read_bytes()?;
                    m.finish();
                    let back = ibis.send_port(&t)?;
                    back.connect(&from, "echo")?;
                    let mut w = back.message();
                    w.write_bytes(&data);
                    w.finish()?;
                }
                Ok(Duration::ZERO)
            } else {
                sp.connect(&all[0], "echo")?;
                let data = vec![7u8; bytes];
                let start = Instant::now();
                let mut w = sp.message();
                w.write_bytes(&data);
                w.finish()?;
                let mut m = rp.receive()?;
                assert_eq!(m.read_bytes()?.len(), bytes);
                Ok(start.elapsed())
            }
        },
    )
}

#[test]
fn latency_is_added_between_locations_only() {
    for d in DRIVERS {
        let link = WanLink {
            latency: Duration::from_millis(50),
            bandwidth: None,
        };
        let rt = round_trips(d, link, 8);
        // Rank 1 shares rank 0's location: no added latency. Ranks 2 and 3 pay 50 ms each way.
        assert!(
            rt[1] < Duration::from_millis(100),
            "{d:?}: near round trip {:?}",
            rt[1]
        );
        for far in &rt[2..] {
            assert!(
                *far >= Duration::from_millis(100),
                "{d:?}: far round trip {far:?}"
            );
        }
    }
}

#[test]
fn bandwidth_is_limited_between_locations() {
    for d in DRIVERS {
        let link = WanLink {
            latency: Duration::ZERO,
            bandwidth: Some(10_000_000),
        };
        // 1 MB each way at 10 MB/s: at least 200 ms for the far ranks.
        let rt = round_trips(d, link, 1_000_000);
        assert!(
            rt[1] < Duration::from_millis(200),
            "{d:?}: near {:?}",
            rt[1]
        );
        for far in &rt[2..] {
            assert!(*far >= Duration::from_millis(200), "{d:?}: far {far:?}");
        }
    }
}
