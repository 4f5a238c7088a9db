//! Options at the edges of their ranges, and collectives whose processes pass values of
//! different types: errors that say so, never a panic, garbage or a hang.

use std::time::Duration;

use bsp::{Error, Options};

/// Options beyond their bounds are refused when the machine is set up, naming the option.
#[test]
fn options_beyond_their_bounds_are_config_errors() {
    for (opts, names) in [
        (
            Options {
                wait_slice: Duration::MAX,
                ..Options::default()
            },
            "wait_slice",
        ),
        (
            Options {
                departure_grace: Duration::MAX,
                ..Options::default()
            },
            "departure_grace",
        ),
        (
            Options {
                small_message: 1 << 30,
                ..Options::default()
            },
            "small_message",
        ),
        (
            Options {
                sync_timeout: Some(Duration::ZERO),
                ..Options::default()
            },
            "sync_timeout",
        ),
    ] {
        match bsp::run_local_with(2, opts, |_| Ok(())) {
            Err(Error::Config(why)) => assert!(why.contains(names), "{names}: {why}"),
            other => panic!("{names}: expected a config error, got {other:?}"),
        }
    }
}

/// A local pool of absurd size is refused before a thread or handle is made: `u32::MAX`
/// processes were accepted, and their handles allocated at once.
#[test]
fn absurd_local_pool_sizes_are_config_errors() {
    for p in [0, bsp::MAX_LOCAL_PROCS + 1, u32::MAX as usize] {
        match bsp::run_local(p, |_| Ok(())) {
            Err(Error::Config(why)) => assert!(why.contains("1 to 4096"), "{p}: {why}"),
            other => panic!("{p}: expected a config error, got {other:?}"),
        }
    }
}

/// Processes that name different roots for one broadcast, then sync: the process that
/// waits for a parent the others never made one finds the true root's part for another root,
/// or that parent's next operation, and reports a mismatch naming it, where the run used to
/// hang (no sync timeout is set).
#[test]
fn a_broadcast_whose_processes_name_different_roots_is_a_mismatch_not_a_hang() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The others learn of the failed process's departure after this grace.
        let opts = Options {
            departure_grace: Duration::from_millis(200),
            ..Options::default()
        };
        let r = bsp::run_local_with(3, opts, |bsp| {
            let root = if bsp.pid() == 2 { 1 } else { 0 };
            let v = bsp.broadcast(root, (bsp.pid() == root).then_some(7u64))?;
            bsp.sync()?;
            Ok(v)
        });
        let _ = tx.send(r);
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Err(Error::CollectiveMismatch {
            pid, peer, theirs, ..
        })) => {
            // Whichever comes first: pid 0's part, for root 0, or pid 1's next operation.
            assert_eq!(pid, 2, "{theirs}");
            match peer {
                0 => assert!(theirs.contains("root 0"), "{theirs}"),
                1 => assert!(theirs.contains("went on to sync"), "{theirs}"),
                _ => panic!("peer {peer}: {theirs}"),
            }
        }
        Ok(other) => panic!("expected a mismatch, got {other:?}"),
        Err(_) => panic!("the run hung for 60 s"),
    }
}

/// The largest options accepted still run.
#[test]
fn the_largest_options_run() {
    let opts = Options {
        wait_slice: Duration::from_secs(3600),
        departure_grace: Duration::from_secs(24 * 3600),
        small_message: 256 << 10,
        sync_timeout: Some(Duration::from_secs(20)),
        ..Options::default()
    };
    let sums = bsp::run_local_with(3, opts, |bsp| {
        bsp.all_reduce(bsp.pid() as u64, bsp::Op::Sum)
    })
    .expect("a run with the largest options");
    assert_eq!(sums, vec![3; 3]);
}

/// A broadcast or gather whose processes pass different types is a mismatch on every side
/// that can tell, not bytes decoded as the wrong type.
#[test]
fn broadcast_and_gather_of_different_types_are_mismatches() {
    let r = bsp::run_local(2, |bsp| {
        if bsp.pid() == 0 {
            let v: u64 = bsp.broadcast(0, Some(1u64))?;
            Ok(v as f64)
        } else {
            bsp.broadcast::<f64>(0, None)
        }
    });
    assert!(
        matches!(r, Err(Error::CollectiveMismatch { .. })),
        "broadcast: {r:?}"
    );
    let r = bsp::run_local(2, |bsp| {
        if bsp.pid() == 0 {
            Ok(bsp.gather(0, &-1i32)?.map(|v| v.len()))
        } else {
            Ok(bsp.gather(0, &7u32)?.map(|v| v.len()))
        }
    });
    assert!(
        matches!(r, Err(Error::CollectiveMismatch { .. })),
        "gather: {r:?}"
    );
}
