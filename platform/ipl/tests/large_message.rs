//! A 1 GiB slice goes over tcp and over shared memory with bounded extra memory: it is written
//! from the sender's memory and read straight into the receiver's buffer (over shared memory the
//! receiver copies it out of the sender's memory, or it streams through the bounded ring), so
//! the process's peak memory stays near the two 1 GiB buffers themselves. (Such messages need `IPL_MAX_MESSAGE` above its default.) (Alone in this file so no other test shares the process.)

mod common;

use common::run_pool_with;
use ipl::{Connection, Driver, PortType};

/// The process's peak memory (VmHWM); a status without it fails the test, which would
/// otherwise read 0 and pass whatever the peak.
fn peak_rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("no VmHWM in /proc/self/status:\n{s}"))
}

#[test]
fn one_gib_slice_streams_with_bounded_memory() {
    for (driver, single_copy) in [
        (Driver::Tcp, true),
        (Driver::Shm, true),
        (Driver::Shm, false),
    ] {
        one_gib(driver, single_copy);
    }
}

fn one_gib(driver: Driver, single_copy: bool) {
    const GIB: usize = 1 << 30;
    // The high-water mark of this process starts afresh for each run.
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak memory");
    let before = peak_rss_bytes();
    // Messages this large need a limit above the default.
    let limit = move |mut c: ipl::Config| {
        c.max_message = 2 << 30;
        c.shm_single_copy = single_copy;
        c
    };
    run_pool_with(driver, 2, limit, |ibis, all| {
        let t = PortType::builder().connection(Connection::OneToOne).build();
        let rp = ibis.receive_port(&t, "big")?;
        let n = GIB / 8;
        if ibis.id().rank() == 0 {
            let sp = ibis.send_port(&t)?;
            sp.connect(&all[1], "big")?;
            let data: Vec<u64> = (0..n as u64).collect();
            let mut w = sp.message();
            w.write_slice(&data[..]);
            w.finish()?;
        } else {
            let mut buf = vec![0u64; n];
            let mut m = rp.receive()?;
            m.read_slice_into(&mut buf)?;
            m.finish();
            assert!(buf.iter().enumerate().all(|(i, v)| *v == i as u64));
        }
        Ok(())
    });
    let extra = peak_rss_bytes().saturating_sub(before);
    // Two 1 GiB buffers are unavoidable; a copy of the message anywhere would add another GiB.
    assert!(
        extra < 2 * GIB as u64 + (256 << 20),
        "{driver:?} (single copy {single_copy}): peak memory grew by {} MiB",
        extra >> 20
    );
}
