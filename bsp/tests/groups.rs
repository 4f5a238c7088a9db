//! Groups made by `split`: 2 and 3 colors, nesting, group supersteps between supersteps of the
//! whole machine, and operations called in different orders reported as errors, not hangs.

mod common;

use bsp::{Error, Op, Options};
use common::{run, try_run, Net};
use std::time::Duration;

const SHAPES: [(Net, usize); 7] = [
    (Net::Local, 1),
    (Net::Local, 2),
    (Net::Local, 3),
    (Net::Local, 5),
    (Net::Local, 8),
    (Net::Tcp, 3),
    (Net::Shm, 3),
];

#[test]
fn splits_nest_and_group_supersteps_interleave_with_the_machine() {
    for (net, p) in SHAPES {
        run(net, p, common::checks::groups);
    }
}

#[test]
fn every_collective_works_inside_groups() {
    run(Net::Local, 8, |bsp| {
        let me = bsp.pid();
        // Three groups of sizes 3, 3 and 2, each checked like the whole machine, and the
        // machine itself afterwards.
        let mut g = bsp.split(me % 3, me)?;
        common::checks::collectives(&mut g, 5)?;
        common::checks::collectives(bsp, 2)?;
        Ok(())
    });
}

#[test]
fn remote_memory_works_inside_groups() {
    run(Net::Local, 4, |bsp| {
        let me = bsp.pid();
        let mut g = bsp.split(me / 2, 0)?;
        let (gp, n) = (g.pid(), g.nprocs());
        let reg = g.register(vec![0u32; n])?;
        g.sync()?;
        g.put((gp + 1) % n, reg, gp, &[me as u32 + 10])?;
        g.sync()?;
        let other = g.world_pids()[(gp + 1) % n] as u32;
        let mut want = vec![0u32; n];
        want[(gp + 1) % n] = other + 10;
        assert_eq!(g.registered(reg)?, &want[..]);
        Ok(())
    });
}

fn opts() -> Options {
    Options {
        departure_grace: Duration::from_millis(200),
        ..common::opts()
    }
}

#[test]
fn a_group_operation_against_a_machine_operation_is_an_error_naming_both() {
    let e = try_run(Net::Local, 2, opts(), |bsp| {
        let mut g = bsp.split(0, 0)?;
        if bsp.pid() == 0 {
            g.sync()?;
            bsp.sync()?;
        } else {
            bsp.sync()?;
            g.sync()?;
        }
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(e, Error::CollectiveMismatch { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("group") && text.contains("whole machine"),
        "{text}"
    );
    assert!(text.contains("sync"), "{text}");
}

#[test]
fn different_group_operations_at_the_same_point_are_an_error_naming_both() {
    let e = try_run(Net::Local, 3, opts(), |bsp| {
        let me = bsp.pid();
        let mut g = bsp.split(0, me)?;
        if me == 1 {
            g.all_reduce(1u32, Op::Sum)?;
        } else {
            g.all_gather(&me)?;
        }
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(e, Error::CollectiveMismatch { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("all_reduce") && text.contains("all_gather"),
        "{text}"
    );
}

#[test]
fn two_groups_run_their_supersteps_at_the_same_time_over_tcp() {
    run(Net::Tcp, 4, |bsp| {
        let me = bsp.pid();
        let mut g = bsp.split(me % 2, me)?;
        // Both groups run their own supersteps at the same time.
        for i in 0..20u64 {
            g.send((g.pid() + 1) % 2, &i)?;
            g.sync()?;
            assert_eq!(g.recv::<u64>()?.map(|(_, v)| v), Some(i));
        }
        let s = g.all_reduce(me as u32, Op::Sum)?;
        assert_eq!(s, if me % 2 == 0 { 2 } else { 4 });
        bsp.sync()?;
        Ok(())
    });
}

#[test]
fn a_group_on_another_thread_runs_beside_the_machine() {
    for net in [Net::Local, Net::Tcp, Net::Shm] {
        run(net, 3, |bsp| {
            let me = bsp.pid();
            let mut g = bsp.split(0, me)?;
            std::thread::scope(|s| -> bsp::Result<()> {
                // The group's supersteps on one thread, the machine's on this one, at once:
                // each waits on the connections only a slice at a time, so neither starves
                // the other.
                let group = s.spawn(move || -> bsp::Result<u64> {
                    let mut sum = 0;
                    for i in 0..30u64 {
                        g.send((g.pid() + 1) % g.nprocs(), &i)?;
                        g.sync()?;
                        sum += g.recv::<u64>()?.map_or(0, |(_, v)| v);
                        sum += g.all_reduce(1u64, Op::Sum)?;
                    }
                    Ok(sum)
                });
                for _ in 0..30 {
                    bsp.sync()?;
                    assert_eq!(bsp.all_reduce(1u32, Op::Sum)?, 3);
                }
                let sum = group.join().expect("the group's thread")?;
                assert_eq!(sum, (0..30).sum::<u64>() + 30 * 3);
                Ok(())
            })
        });
    }
}

#[test]
fn supersteps_and_packets_of_a_dropped_group_stay_in_the_process_counters() {
    let stats = run(Net::Local, 4, |bsp| {
        let me = bsp.pid();
        {
            let mut g = bsp.split(me % 2, me)?;
            for _ in 0..3 {
                g.send(1 - g.pid(), &7u8)?;
                g.sync()?;
            }
            // Counted in this handle's view, through the process's counters and its own.
            assert_eq!(g.stats().supersteps, 3);
            // A packet and no sync after it: still counted once the handle is gone.
            g.send(1 - g.pid(), &7u8)?;
        }
        bsp.sync()?;
        Ok(bsp.stats())
    });
    for s in stats {
        assert_eq!(s.supersteps, 4, "3 of the group and 1 of the machine");
        assert_eq!(s.packets_sent, 4);
    }
}
