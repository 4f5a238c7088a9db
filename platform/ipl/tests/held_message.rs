//! A receive on a port whose unfinished message the calling thread holds itself, over each
//! driver: an error at once rather than a wait for itself, while receives of other threads still
//! wait for the holder.

mod common;

use common::{run_pool, DRIVERS};
use ipl::{Connection, Error, PortType, ReceivePort};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// How long a step that should take microseconds may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(10);

/// A failure of the node that runs the checks, for `run_pool` to report.
fn failed(what: impl Into<String>) -> Error {
    Error::io("held-message test", std::io::Error::other(what.into()))
}

/// Checks that `r` is the error for a receive by the holder of port `port`.
fn is_held_by_caller<T>(r: ipl::Result<T>, call: &str, port: &str) -> ipl::Result<()> {
    match r {
        Err(e @ Error::HeldByCaller { .. }) => {
            let text = e.to_string();
            if !text.contains(&format!("port '{port}'")) || !text.contains("finish or drop") {
                return Err(failed(format!(
                    "{call}: the error does not say why: {text}"
                )));
            }
            Ok(())
        }
        Err(e) => Err(failed(format!("{call}: another error: {e}"))),
        Ok(_) => Err(failed(format!("{call}: no error"))),
    }
}

#[test]
fn a_receive_by_the_holder_of_a_message_fails_and_another_threads_waits_for_the_next() {
    for d in DRIVERS {
        run_pool(d, 2, move |ibis, all| {
            let t = PortType::builder().connection(Connection::OneToOne).build();
            let rp = Arc::new(ibis.receive_port(&t, "in")?);
            if ibis.id().rank() == 0 {
                let sp = ibis.send_port(&t)?;
                sp.connect(&all[1], "in")?;
                for v in [1u32, 2] {
                    let mut w = sp.message();
                    w.write_u32(v);
                    w.finish()?;
                }
                return Ok(());
            }
            // The holder runs on a thread of its own, so that a receive that waits for itself
            // shows as a missing report rather than a test that never ends.
            let (report, reports) = crossbeam_channel::bounded(1);
            let holder = {
                let rp = rp.clone();
                std::thread::spawn(move || {
                    let _ = report.send(hold_and_receive(&rp));
                })
            };
            let outcome = reports.recv_timeout(HANG).map_err(|_| {
                failed(format!(
                    "over {d:?}, a receive by the thread that holds a message of the port did \
                     not return within {HANG:?}"
                ))
            })?;
            holder.join().expect("the holding thread");
            let second = outcome?;
            if second != 2 {
                return Err(failed(format!("the other thread got {second}, not 2")));
            }
            Ok(())
        });
    }
}

/// Takes the first message and, holding it, checks every receive call of this thread, then
/// that another thread waits for it and gets the next message; returns what that one read.
fn hold_and_receive(rp: &Arc<ReceivePort>) -> ipl::Result<u32> {
    let mut first = rp.receive()?;
    if first.read_u32()? != 1 {
        return Err(failed("the first message is not 1"));
    }
    is_held_by_caller(rp.receive(), "receive", "in")?;
    let asked = Instant::now();
    is_held_by_caller(rp.receive_timeout(HANG), "receive_timeout", "in")?;
    if asked.elapsed() >= HANG {
        return Err(failed("receive_timeout waited out its time before failing"));
    }
    is_held_by_caller(rp.poll(), "poll", "in")?;

    let (started, starts) = crossbeam_channel::bounded(1);
    let (got, gets) = crossbeam_channel::bounded(1);
    let other = {
        let rp = rp.clone();
        std::thread::spawn(move || {
            let r = (|| {
                // Another thread's receive waits for the holder, here until its time is up.
                match rp.receive_timeout(Duration::from_millis(50)) {
                    Err(Error::Timeout { .. }) => {}
                    Err(e) => return Err(failed(format!("another thread's wait failed: {e}"))),
                    Ok(_) => return Err(failed("another thread got a message the holder holds")),
                }
                let _ = started.send(());
                let mut m = rp.receive()?;
                m.read_u32()
            })();
            let _ = got.send(r);
        })
    };
    starts
        .recv_timeout(HANG)
        .map_err(|_| failed("the other thread's timed receive did not end"))?;
    // Whether the other thread waits already or not, the next message is its once this one is
    // finished.
    first.finish();
    let r = gets
        .recv_timeout(HANG)
        .map_err(|_| failed("the other thread's receive did not end once the holder finished"))?;
    other.join().expect("the other receiving thread");
    r
}

#[test]
fn a_receive_from_the_disconnection_upcall_of_an_explicit_port_fails() {
    for d in DRIVERS {
        run_pool(d, 2, move |ibis, all| {
            let t = PortType::builder()
                .connection(Connection::ManyToOne)
                .connection_upcalls(true)
                .build();
            // The upcall reaches its own port through a weak reference: a strong one would keep
            // the port, which owns the upcall, alive for ever.
            let port: Arc<OnceLock<Weak<ReceivePort>>> = Arc::new(OnceLock::new());
            let (report, reports) = crossbeam_channel::bounded(1);
            let reported = Arc::new(AtomicBool::new(false));
            let rp = {
                let (port, reported) = (port.clone(), reported.clone());
                Arc::new(
                    ibis.receive_port_builder(&t, "obs")
                        .on_disconnect(move |_, _| {
                            if let Some(rp) = port.get().and_then(Weak::upgrade) {
                                let r = is_held_by_caller(rp.receive(), "receive", "obs");
                                let _ = report.try_send(r);
                                reported.store(true, Ordering::SeqCst);
                            }
                        })
                        .create()?,
                )
            };
            let _ = port.set(Arc::downgrade(&rp));
            if ibis.id().rank() == 0 {
                let sp = ibis.send_port(&t)?;
                sp.connect(&all[1], "obs")?;
                let mut w = sp.message();
                w.write_u8(9);
                w.finish()?;
                sp.disconnect(&all[1], "obs")?;
                return Ok(());
            }
            // Receives on a thread of their own, until the upcall has run inside one of them.
            let (done, dones) = crossbeam_channel::bounded(1);
            let receiver = {
                let (rp, reported) = (rp.clone(), reported.clone());
                std::thread::spawn(move || {
                    let r = (|| {
                        if rp.receive()?.read_u8()? != 9 {
                            return Err(failed("the message is not 9"));
                        }
                        let deadline = Instant::now() + HANG;
                        while !reported.load(Ordering::SeqCst) {
                            if Instant::now() >= deadline {
                                return Err(failed("the disconnection was never seen"));
                            }
                            match rp.receive_timeout(Duration::from_millis(20)) {
                                Err(Error::Timeout { .. }) => {}
                                Err(e) => return Err(e),
                                Ok(_) => return Err(failed("a message after the disconnect")),
                            }
                        }
                        Ok(())
                    })();
                    let _ = done.send(r);
                })
            };
            let r = reports.recv_timeout(HANG).map_err(|_| {
                failed(format!(
                    "over {d:?}, a receive from the disconnection upcall did not return within \
                     {HANG:?}"
                ))
            })?;
            r?;
            dones
                .recv_timeout(HANG)
                .map_err(|_| failed("the receiving thread did not end"))??;
            receiver.join().expect("the receiving thread");
            Ok(())
        });
    }
}

/// Dropping a port on the thread that holds one of its messages returns at once (it used to
/// wait a second for the port, which that thread gives back only later), and the message stays
/// readable until it is finished.
#[test]
fn dropping_a_port_on_the_thread_that_holds_its_message_does_not_wait() {
    // Well under the second the drop used to wait for itself.
    const PROMPT: Duration = Duration::from_millis(500);
    for d in DRIVERS {
        run_pool(d, 2, move |ibis, all| {
            let t = PortType::builder().connection(Connection::OneToOne).build();
            let rp = ibis.receive_port(&t, "dropped")?;
            if ibis.id().rank() == 0 {
                let sp = ibis.send_port(&t)?;
                sp.connect(&all[1], "dropped")?;
                let mut w = sp.message();
                w.write_u32(7);
                w.write_u64(11);
                w.finish()?;
                return Ok(());
            }
            let mut m = rp.receive()?;
            if m.read_u32()? != 7 {
                return Err(failed("the first item is not 7"));
            }
            let dropping = Instant::now();
            drop(rp);
            let took = dropping.elapsed();
            println!("over {d:?}, dropping the port that holds a message took {took:?}");
            if took >= PROMPT {
                return Err(failed(format!(
                    "over {d:?}, dropping the port on the thread that holds its message took \
                     {took:?}"
                )));
            }
            // The rest of the message is still there to read.
            if m.read_u64()? != 11 {
                return Err(failed("the second item is not 11"));
            }
            m.finish();
            Ok(())
        });
    }
}
