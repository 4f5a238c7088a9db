//! The messages nodes of a distributed run exchange, and their encoding on `ipl` messages.
//!
//! Every node is a member of the mesh [`MESH`] (see `ipl::Mesh`): its control port carries
//! small messages and its data port, which is always drained, carries jobs and results (the
//! `REPLY`s that carry a job, `RESULT`s and `ORPHAN_RESULT`s), and the `RETURNED` and `LEFT`
//! that must come after a leaver's last results. A message starts with its kind
//! (a `u8`) and the run it belongs to (the epoch, a `u64`: runs of one pool are numbered from 1
//! on every node, and a node that joins a running pool takes the master's numbering); the rest
//! depends on the kind:
//!
//! | kind            | direction          | fields after the epoch                              |
//! |-----------------|--------------------|-----------------------------------------------------|
//! | `STEAL`         | thief to victim    | request id `u64`, wide-area `bool`                   |
//! | `REPLY`         | victim to thief    | request id, wide-area, has-job `bool`, then job id `u64`, type name bytes, task bytes |
//! | `RESULT`        | thief to owner     | job id, ok `bool`, output bytes or error text       |
//! | `CANCEL`        | owner to thief     | job id                                               |
//! | `DONE`          | master to all      | ok `bool`, then the error text if not                |
//! | `DONE_ACK`      | all to master      | (nothing)                                            |
//! | `FAILED`        | any to master      | error text                                           |
//! | `HELLO`         | joiner to master   | (nothing)                                            |
//! | `WELCOME`       | master to joiner   | run active `bool` (the epoch is the master's)        |
//! | `ORPHANS`       | any to all         | dead node's rank `u32`, count `u32`, then per job: type name bytes, task bytes |
//! | `ORPHAN_RESULT` | any to all         | type name bytes, task bytes, output bytes            |
//! | `RETURNED`      | leaver to owner    | job id (on the data lane, like results)              |
//! | `LEAVING`       | leaver to all      | (nothing); between runs only to members it has sent something on the control lane |
//! | `ALL_DONE`      | master to all      | (nothing): every node confirmed the end of the run   |
//! | `LEFT`          | leaver to all      | (nothing), on the data lane after its last result (where it sent none, on the control lane): nothing more comes from it |

use ipl::{Link, ReadMessage};

/// Name of the mesh every node of a distributed run belongs to.
pub(crate) const MESH: &str = "satin";
/// Name of the election the master wins, so that nodes joining later can find it.
pub(crate) const MASTER_ELECTION: &str = "satin/master";
/// Most jobs one `ORPHANS` message may list.
const MAX_ORPHANS: u32 = 1 << 20;

const STEAL: u8 = 1;
const REPLY: u8 = 2;
const RESULT: u8 = 3;
const CANCEL: u8 = 4;
const DONE: u8 = 5;
const DONE_ACK: u8 = 6;
const FAILED: u8 = 7;
const HELLO: u8 = 8;
const WELCOME: u8 = 9;
const ORPHANS: u8 = 10;
const ORPHAN_RESULT: u8 = 11;
const RETURNED: u8 = 12;
const LEAVING: u8 = 13;
const ALL_DONE: u8 = 14;
const LEFT: u8 = 15;

/// A job travelling from victim to thief.
pub(crate) struct Shipped {
    /// The owner's id of the job, for the result and cancellations.
    pub(super) id: u64,
    /// Registered name of the task type.
    pub(super) type_name: String,
    /// The serialized task.
    pub(super) task: Vec<u8>,
}

/// A job, by its registered type name and task bytes: how results are kept and found (see
/// `satin::remote`).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) struct JobKey {
    pub(super) type_name: String,
    pub(super) task: Vec<u8>,
}

/// A received message.
pub(crate) enum Msg {
    Steal {
        req: u64,
        wide: bool,
    },
    Reply {
        req: u64,
        wide: bool,
        job: Option<Shipped>,
    },
    Result {
        job: u64,
        output: Result<Vec<u8>, String>,
    },
    Cancel {
        job: u64,
    },
    Done {
        failure: Option<String>,
    },
    DoneAck,
    Failed {
        reason: String,
    },
    Hello,
    Welcome {
        active: bool,
    },
    Orphans {
        dead: u32,
        jobs: Vec<JobKey>,
    },
    OrphanResult {
        job: JobKey,
        output: Vec<u8>,
    },
    Returned {
        job: u64,
    },
    Leaving,
    AllDone,
    Left,
}

fn text(m: &mut ReadMessage) -> ipl::Result<String> {
    Ok(String::from_utf8_lossy(&m.read_bytes()?).into_owned())
}

fn key(m: &mut ReadMessage) -> ipl::Result<JobKey> {
    Ok(JobKey {
        type_name: text(m)?,
        task: m.read_bytes()?,
    })
}

/// Reads one message; returns its epoch and contents.
pub(crate) fn decode(m: &mut ReadMessage) -> ipl::Result<(u64, Msg)> {
    let kind = m.read_u8()?;
    let epoch = m.read_u64()?;
    let msg = match kind {
        STEAL => Msg::Steal {
            req: m.read_u64()?,
            wide: m.read_bool()?,
        },
        REPLY => {
            let req = m.read_u64()?;
            let wide = m.read_bool()?;
            let job = if m.read_bool()? {
                Some(Shipped {
                    id: m.read_u64()?,
                    type_name: text(m)?,
                    task: m.read_bytes()?,
                })
            } else {
                None
            };
            Msg::Reply { req, wide, job }
        }
        RESULT => {
            let job = m.read_u64()?;
            let output = if m.read_bool()? {
                Ok(m.read_bytes()?)
            } else {
                Err(text(m)?)
            };
            Msg::Result { job, output }
        }
        CANCEL => Msg::Cancel { job: m.read_u64()? },
        DONE => Msg::Done {
            failure: if m.read_bool()? { None } else { Some(text(m)?) },
        },
        DONE_ACK => Msg::DoneAck,
        FAILED => Msg::Failed { reason: text(m)? },
        HELLO => Msg::Hello,
        WELCOME => Msg::Welcome {
            active: m.read_bool()?,
        },
        ORPHANS => {
            let dead = m.read_u32()?;
            let n = m.read_u32()?;
            if n > MAX_ORPHANS {
                return Err(ipl::Error::Decode {
                    origin: m.origin().to_string(),
                    reason: format!("{n} orphan jobs listed, more than {MAX_ORPHANS}"),
                });
            }
            let mut jobs = Vec::new();
            for _ in 0..n {
                jobs.push(key(m)?);
            }
            Msg::Orphans { dead, jobs }
        }
        ORPHAN_RESULT => Msg::OrphanResult {
            job: key(m)?,
            output: m.read_bytes()?,
        },
        RETURNED => Msg::Returned { job: m.read_u64()? },
        LEAVING => Msg::Leaving,
        ALL_DONE => Msg::AllDone,
        LEFT => Msg::Left,
        other => {
            return Err(ipl::Error::Decode {
                origin: m.origin().to_string(),
                reason: format!("unknown satin message kind {other}"),
            })
        }
    };
    Ok((epoch, msg))
}

pub(crate) fn steal(l: &Link, epoch: u64, req: u64, wide: bool) -> ipl::Result<u64> {
    let mut w = l.message();
    w.write_u8(STEAL);
    w.write_u64(epoch);
    w.write_u64(req);
    w.write_bool(wide);
    w.finish()
}

/// A reply; `job` is (job id, registered type name, serialized task).
pub(crate) fn reply(
    l: &Link,
    epoch: u64,
    req: u64,
    wide: bool,
    job: Option<(u64, &str, &[u8])>,
) -> ipl::Result<u64> {
    let mut w = l.message();
    w.write_u8(REPLY);
    w.write_u64(epoch);
    w.write_u64(req);
    w.write_bool(wide);
    w.write_bool(job.is_some());
    if let Some((id, type_name, task)) = job {
        w.write_u64(id);
        w.write_bytes(type_name.as_bytes());
        w.write_bytes(task);
    }
    w.finish()
}

pub(crate) fn result(
    l: &Link,
    epoch: u64,
    job: u64,
    output: Result<&[u8], &str>,
) -> ipl::Result<u64> {
    let mut w = l.message();
    w.write_u8(RESULT);
    w.write_u64(epoch);
    w.write_u64(job);
    w.write_bool(output.is_ok());
    match output {
        Ok(bytes) => w.write_bytes(bytes),
        Err(why) => w.write_bytes(why.as_bytes()),
    }
    w.finish()
}

/// A message with no fields after the epoch.
fn bare(l: &Link, kind: u8, epoch: u64) -> ipl::Result<u64> {
    let mut w = l.message();
    w.write_u8(kind);
    w.write_u64(epoch);
    w.finish()
}

/// A message whose only field is a job id.
fn about_job(l: &Link, kind: u8, epoch: u64, job: u64) -> ipl::Result<u64> {
    let mut w = l.message();
    w.write_u8(kind);
    w.write_u64(epoch);
    w.write_u64(job);
    w.finish()
}

pub(crate) fn cancel(l: &Link, epoch: u64, job: u64) -> ipl::Result<u64> {
    about_job(l, CANCEL, epoch, job)
}

pub(crate) fn returned(l: &Link, epoch: u64, job: u64) -> ipl::Result<u64> {
    about_job(l, RETURNED, epoch, job)
}

pub(crate) fn done(l: &Link, epoch: u64, failure: Option<&str>) -> ipl::Result<u64> {
    let mut w = l.message();
    w.write_u8(DONE);
    w.write_u64(epoch);
    w.write_bool(failure.is_none());
    if let Some(why) = failure {
        w.write_bytes(why.as_bytes());
    }
    w.finish()
}

pub(crate) fn done_ack(l: &Link, epoch: u64) -> ipl::Result<u64> {
    bare(l, DONE_ACK, epoch)
}

pub(crate) fn all_done(l: &Link, epoch: u64) -> ipl::Result<u64> {
    bare(l, ALL_DONE, epoch)
}

pub(crate) fn failed(l: &Link, epoch: u64, reason: &str) -> ipl::Result<u64> {
    let mut w = l.message();
    w.write_u8(FAILED);
    w.write_u64(epoch);
    w.write_bytes(reason.as_bytes());
    w.finish()
}

pub(crate) fn hello(l: &Link) -> ipl::Result<u64> {
    bare(l, HELLO, 0)
}

pub(crate) fn welcome(l: &Link, epoch: u64, active: bool) -> ipl::Result<u64> {
    let mut w = l.message();
    w.write_u8(WELCOME);
    w.write_u64(epoch);
    w.write_bool(active);
    w.finish()
}

pub(crate) fn orphans(l: &Link, epoch: u64, dead: u32, jobs: &[JobKey]) -> ipl::Result<u64> {
    let mut w = l.message();
    w.write_u8(ORPHANS);
    w.write_u64(epoch);
    w.write_u32(dead);
    w.write_u32(jobs.len() as u32);
    for j in jobs {
        w.write_bytes(j.type_name.as_bytes());
        w.write_bytes(&j.task);
    }
    w.finish()
}

pub(crate) fn orphan_result(l: &Link, epoch: u64, job: &JobKey, output: &[u8]) -> ipl::Result<u64> {
    let mut w = l.message();
    w.write_u8(ORPHAN_RESULT);
    w.write_u64(epoch);
    w.write_bytes(job.type_name.as_bytes());
    w.write_bytes(&job.task);
    w.write_bytes(output);
    w.finish()
}

pub(crate) fn leaving(l: &Link, epoch: u64) -> ipl::Result<u64> {
    bare(l, LEAVING, epoch)
}

pub(crate) fn left(l: &Link, epoch: u64) -> ipl::Result<u64> {
    bare(l, LEFT, epoch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipl::WriteMessage;
    use proptest::prelude::*;

    /// One message of every kind, written field by field as the table at the top of this
    /// module lays them out, with the fields a decode must give back.
    fn every_kind() -> Vec<(Vec<u8>, &'static str)> {
        let msg = |kind: u8, fill: &dyn Fn(&mut WriteMessage<'_>), expect: &'static str| {
            let mut w = WriteMessage::detached();
            w.write_u8(kind);
            w.write_u64(7);
            fill(&mut w);
            (w.into_bytes().expect("a detached message"), expect)
        };
        vec![
            msg(
                STEAL,
                &|w| {
                    w.write_u64(3);
                    w.write_bool(true);
                },
                "steal 3 true",
            ),
            msg(
                REPLY,
                &|w| {
                    w.write_u64(3);
                    w.write_bool(false);
                    w.write_bool(true);
                    w.write_u64(9);
                    w.write_bytes(b"Fib");
                    w.write_bytes(&[1, 2, 3]);
                },
                "reply 3 false 9 Fib [1, 2, 3]",
            ),
            msg(
                REPLY,
                &|w| {
                    w.write_u64(4);
                    w.write_bool(true);
                    w.write_bool(false);
                },
                "reply 4 true none",
            ),
            msg(
                RESULT,
                &|w| {
                    w.write_u64(9);
                    w.write_bool(true);
                    w.write_bytes(&[5, 6]);
                },
                "result 9 [5, 6]",
            ),
            msg(
                RESULT,
                &|w| {
                    w.write_u64(9);
                    w.write_bool(false);
                    w.write_bytes(b"it broke");
                },
                "result 9 error it broke",
            ),
            msg(CANCEL, &|w| w.write_u64(9), "cancel 9"),
            msg(DONE, &|w| w.write_bool(true), "done ok"),
            msg(
                DONE,
                &|w| {
                    w.write_bool(false);
                    w.write_bytes(b"why");
                },
                "done why",
            ),
            msg(DONE_ACK, &|_| {}, "done-ack"),
            msg(FAILED, &|w| w.write_bytes(b"why"), "failed why"),
            msg(HELLO, &|_| {}, "hello"),
            msg(WELCOME, &|w| w.write_bool(true), "welcome true"),
            msg(
                ORPHANS,
                &|w| {
                    w.write_u32(2);
                    w.write_u32(2);
                    for t in [&b"a"[..], b"bc"] {
                        w.write_bytes(b"Fib");
                        w.write_bytes(t);
                    }
                },
                "orphans of 2: Fib [97] Fib [98, 99]",
            ),
            msg(
                ORPHAN_RESULT,
                &|w| {
                    w.write_bytes(b"Fib");
                    w.write_bytes(&[1]);
                    w.write_bytes(&[2]);
                },
                "orphan-result Fib [1] [2]",
            ),
            msg(RETURNED, &|w| w.write_u64(9), "returned 9"),
            msg(LEAVING, &|_| {}, "leaving"),
            msg(ALL_DONE, &|_| {}, "all-done"),
            msg(LEFT, &|_| {}, "left"),
        ]
    }

    /// A decoded message in words, to compare with what was written.
    fn words(m: &Msg) -> String {
        match m {
            Msg::Steal { req, wide } => format!("steal {req} {wide}"),
            Msg::Reply { req, wide, job } => match job {
                Some(j) => format!("reply {req} {wide} {} {} {:?}", j.id, j.type_name, j.task),
                None => format!("reply {req} {wide} none"),
            },
            Msg::Result { job, output } => match output {
                Ok(o) => format!("result {job} {o:?}"),
                Err(e) => format!("result {job} error {e}"),
            },
            Msg::Cancel { job } => format!("cancel {job}"),
            Msg::Done { failure } => match failure {
                None => "done ok".into(),
                Some(f) => format!("done {f}"),
            },
            Msg::DoneAck => "done-ack".into(),
            Msg::Failed { reason } => format!("failed {reason}"),
            Msg::Hello => "hello".into(),
            Msg::Welcome { active } => format!("welcome {active}"),
            Msg::Orphans { dead, jobs } => {
                let jobs: Vec<String> = jobs
                    .iter()
                    .map(|j| format!("{} {:?}", j.type_name, j.task))
                    .collect();
                format!("orphans of {dead}: {}", jobs.join(" "))
            }
            Msg::OrphanResult { job, output } => {
                format!("orphan-result {} {:?} {output:?}", job.type_name, job.task)
            }
            Msg::Returned { job } => format!("returned {job}"),
            Msg::Leaving => "leaving".into(),
            Msg::AllDone => "all-done".into(),
            Msg::Left => "left".into(),
        }
    }

    /// Every kind decodes to what was written; every message cut short anywhere is an error
    /// (never a panic, nor a message read from what is not there).
    #[test]
    fn every_kind_decodes_whole_and_refuses_every_cut() {
        for (bytes, expect) in every_kind() {
            let mut m = ReadMessage::from_bytes(bytes.clone(), false);
            let (epoch, msg) = decode(&mut m).unwrap_or_else(|e| panic!("{expect}: {e}"));
            assert_eq!((epoch, words(&msg).as_str()), (7, expect));
            for cut in 0..bytes.len() {
                let mut m = ReadMessage::from_bytes(bytes[..cut].to_vec(), false);
                assert!(
                    decode(&mut m).is_err(),
                    "{expect}: {cut} of {} bytes decoded",
                    bytes.len()
                );
            }
        }
    }

    /// Lengths that claim more than a message can hold are errors that say so, before any
    /// memory is set aside for them.
    #[test]
    fn absurd_counts_and_lengths_are_errors() {
        let mut w = WriteMessage::detached();
        w.write_u8(ORPHANS);
        w.write_u64(1);
        w.write_u32(2);
        w.write_u32(u32::MAX);
        let mut m = ReadMessage::from_bytes(w.into_bytes().expect("bytes"), false);
        let e = decode(&mut m)
            .err()
            .expect("u32::MAX orphans decoded")
            .to_string();
        assert!(e.contains("orphan jobs listed"), "{e}");
        // A task whose length field claims a terabyte, in a message of a few bytes.
        let mut bytes = every_kind()[1].0.clone();
        let at = bytes.len() - 3 - 8;
        bytes[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let mut m = ReadMessage::from_bytes(bytes, false);
        let e = decode(&mut m)
            .err()
            .expect("a terabyte task decoded")
            .to_string();
        assert!(e.contains("1099511627776 bytes announced"), "{e}");
        let mut w = WriteMessage::detached();
        w.write_u8(99);
        w.write_u64(1);
        let mut m = ReadMessage::from_bytes(w.into_bytes().expect("bytes"), false);
        let e = decode(&mut m).err().expect("kind 99 decoded").to_string();
        assert!(e.contains("unknown satin message kind 99"), "{e}");
    }

    /// A value of one of the types the messages carry.
    #[derive(Debug, Clone)]
    enum Value {
        U8(u8),
        U32(u32),
        U64(u64),
        Bool(bool),
        Bytes(Vec<u8>),
    }

    /// Small numbers and lengths more often than not, where the decoder's choices lie.
    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            (0u8..20).prop_map(Value::U8),
            prop_oneof![0u32..5, any::<u32>()].prop_map(Value::U32),
            prop_oneof![0u64..5, any::<u64>()].prop_map(Value::U64),
            any::<bool>().prop_map(Value::Bool),
            proptest::collection::vec(any::<u8>(), 0..16).prop_map(Value::Bytes),
        ]
    }

    proptest! {
        /// Any bytes at all decode to a message or an error.
        #[test]
        fn any_bytes_decode_or_fail(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut m = ReadMessage::from_bytes(bytes, false);
            let _ = decode(&mut m);
        }

        /// Any well-formed values, of any types in any order, after a known kind and an
        /// epoch (the branches past the first check): a message or an error.
        #[test]
        fn any_values_after_a_known_kind_decode_or_fail(
            kind in 1u8..=15,
            values in proptest::collection::vec(value(), 0..12),
        ) {
            let mut w = WriteMessage::detached();
            w.write_u8(kind);
            w.write_u64(7);
            for v in &values {
                match v {
                    Value::U8(x) => w.write_u8(*x),
                    Value::U32(x) => w.write_u32(*x),
                    Value::U64(x) => w.write_u64(*x),
                    Value::Bool(x) => w.write_bool(*x),
                    Value::Bytes(x) => w.write_bytes(x),
                }
            }
            let mut m = ReadMessage::from_bytes(w.into_bytes().expect("bytes"), false);
            let _ = decode(&mut m);
        }

        /// Every message with one byte changed: a message or an error.
        #[test]
        fn every_kind_with_a_byte_changed_decodes_or_fails(
            which in 0usize..18,
            at in any::<prop::sample::Index>(),
            to in any::<u8>(),
        ) {
            let mut bytes = every_kind()[which].0.clone();
            let i = at.index(bytes.len());
            bytes[i] = to;
            let mut m = ReadMessage::from_bytes(bytes, false);
            let _ = decode(&mut m);
        }
    }
}
