//! Registered arrays, put and get, after BSPlib.

mod common;

use bsp::Error;
use common::{run, try_run, Net, NETS};

#[test]
fn puts_land_at_the_end_of_the_superstep_and_gets_read_before_them() {
    for (net, p) in [
        (Net::Local, 4),
        (Net::Local, 3),
        (Net::Tcp, 3),
        (Net::Shm, 3),
    ] {
        run(net, p, |bsp| {
            let (me, p) = (bsp.pid(), bsp.nprocs());
            let n = 4 * p;
            let a = bsp.register(vec![me as f64; n])?;
            let copy = bsp.register(vec![-1.0f64; n])?;
            let next = (me + 1) % p;
            let prev = (me + p - 1) % p;
            // Write my pid into slots 4*me.. of the next process, and my own slot 0.
            bsp.put(next, a, 4 * me, &[me as f64 + 0.5; 4])?;
            bsp.put(me, a, 0, &[100.0])?;
            // Read the previous process's whole array: the values before this step's puts.
            bsp.get(prev, a, 0, n, copy, 0)?;
            // Nothing changes before the sync.
            assert_eq!(bsp.registered(a)?, &vec![me as f64; n][..]);
            bsp.sync()?;
            let mine = bsp.registered(a)?.to_vec();
            for (i, x) in mine.iter().enumerate() {
                let want = if i == 0 {
                    100.0
                } else if i / 4 == prev {
                    prev as f64 + 0.5
                } else {
                    me as f64
                };
                assert_eq!(*x, want, "pid {me} slot {i}");
            }
            assert_eq!(bsp.registered(copy)?, &vec![prev as f64; n][..]);
            Ok(())
        });
    }
}

#[test]
fn concurrent_puts_apply_in_pid_order_then_issue_order() {
    for net in NETS {
        run(net, 3, |bsp| {
            let me = bsp.pid();
            let r = bsp.register(vec![0u32; 2])?;
            // Everyone writes slot 0 of process 0; within a process the later put wins.
            bsp.put(0, r, 0, &[me as u32 * 10])?;
            bsp.put(0, r, 0, &[me as u32 * 10 + 1])?;
            bsp.put(0, r, 1, &[7])?;
            bsp.sync()?;
            if me == 0 {
                assert_eq!(bsp.registered(r)?, &[21, 7]);
            } else {
                assert_eq!(bsp.registered(r)?, &[0, 0]);
            }
            // Large puts and gets travel on the data connection and still land in order.
            let big = bsp.register(vec![0i64; 100_000])?;
            let back = bsp.register(vec![0i64; 100_000])?;
            if me == 1 {
                let data: Vec<i64> = (0..100_000).collect();
                bsp.put(2, big, 0, &data)?;
            }
            bsp.sync()?;
            if me == 0 {
                bsp.get(2, big, 0, 100_000, back, 0)?;
            }
            bsp.sync()?;
            if me == 0 {
                assert_eq!(bsp.registered(back)?[99_999], 99_999);
            }
            let v = bsp.deregister(back)?;
            assert_eq!(v.len(), 100_000);
            assert!(bsp.registered(back).is_err());
            Ok(())
        });
    }
}

#[test]
fn out_of_range_puts_and_gets_are_errors_naming_the_processes() {
    let e = try_run(Net::Local, 2, common::opts(), |bsp| {
        let r = bsp.register(vec![0u8; 4])?;
        let local = bsp.register(vec![0u8; 4])?;
        // The target range is checked at once.
        let e = bsp.get(1, r, 0, 8, local, 0).unwrap_err();
        assert!(matches!(e, Error::Drma { .. }), "{e}");
        if bsp.pid() == 0 {
            bsp.get(1, r, 2, 4, local, 0)?;
        }
        bsp.sync()?;
        Ok(())
    })
    .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Drma { pid: 0, .. }), "{text}");
    assert!(
        text.contains("2..6") && text.contains("pid 1") && text.contains("4 elements"),
        "{text}"
    );

    let e = try_run(Net::Local, 2, common::opts(), |bsp| {
        let r = bsp.register(vec![0u8; 4])?;
        if bsp.pid() == 0 {
            bsp.put(1, r, 3, &[1, 2])?;
        }
        bsp.sync()?;
        Ok(())
    })
    .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Drma { pid: 1, .. }), "{text}");
    assert!(
        text.contains("put from pid 0") && text.contains("3..5"),
        "{text}"
    );

    // A range whose end is past the largest index is named by its offset and length, not by
    // an end that does not exist.
    let far = usize::MAX - 1;
    let e = try_run(Net::Local, 2, common::opts(), move |bsp| {
        let r = bsp.register(vec![0u8; 4])?;
        let local = bsp.register(vec![0u8; 4])?;
        let e = bsp.get(1, r, 0, 4, local, far).unwrap_err();
        assert!(
            e.to_string().contains(&format!("4 elements from {far}")),
            "{e}"
        );
        if bsp.pid() == 0 {
            bsp.get(1, r, far, 4, local, 0)?;
        }
        bsp.sync()?;
        Ok(())
    })
    .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Drma { pid: 0, .. }), "{text}");
    assert!(
        text.contains(&format!("get of 4 elements from {far}")),
        "{text}"
    );

    // A handle of another process's Bsp is refused.
    let mut procs = bsp::Bsp::local(2).unwrap();
    let mut b = procs.pop().unwrap();
    let mut a = procs.pop().unwrap();
    let ra = a.register(vec![1.0f32]).unwrap();
    let rb = b.register(vec![1.0f32]).unwrap();
    assert!(a.registered(rb).is_err());
    assert!(a.put(1, rb, 0, &[2.0]).is_err());
    assert!(b.registered_mut(ra).is_err());
    assert_eq!(a.registered(ra).unwrap(), &[1.0]);
}
