//! The messages nodes of a distributed run exchange, and their encoding on `ipl` messages.
//!
//! Every node has two receive ports, each with its upcall thread: [`CONTROL_PORT`] for small
//! messages and [`DATA_PORT`] for jobs and results (the `REPLY`s that carry a job, and
//! `RESULT`s), and two send ports connected to each other node's. A message starts with its
//! kind (a `u8`) and the run it belongs to (the epoch, a `u64`: runs of one pool are numbered
//! from 1 on every node); the rest depends on the kind:
//!
//! | kind       | direction        | fields after the epoch                                     |
//! |------------|------------------|------------------------------------------------------------|
//! | `STEAL`    | thief to victim  | request id `u64`, wide-area `bool`                          |
//! | `REPLY`    | victim to thief  | request id, wide-area, has-job `bool`, then job id `u64`, type name bytes, task bytes |
//! | `RESULT`   | thief to owner   | job id, ok `bool`, output bytes or error text              |
//! | `CANCEL`   | owner to thief   | job id                                                      |
//! | `DONE`     | master to all    | ok `bool`, then the error text if not                       |
//! | `DONE_ACK` | all to master    | (nothing)                                                   |
//! | `FAILED`   | any to master    | error text                                                  |

use ipl::{ReadMessage, SendPort};

/// Name of every node's receive port for small messages.
pub(crate) const CONTROL_PORT: &str = "satin";
/// Name of every node's receive port for jobs and results.
pub(crate) const DATA_PORT: &str = "satin/data";
/// Name of the election that picks the master.
pub(crate) const MASTER_ELECTION: &str = "satin/master";

const STEAL: u8 = 1;
const REPLY: u8 = 2;
const RESULT: u8 = 3;
const CANCEL: u8 = 4;
const DONE: u8 = 5;
const DONE_ACK: u8 = 6;
const FAILED: u8 = 7;

/// A job travelling from victim to thief.
pub(crate) struct Shipped {
    /// The owner's id of the job, for the result and cancellations.
    pub(crate) id: u64,
    /// Registered name of the task type.
    pub(crate) type_name: String,
    /// The serialized task.
    pub(crate) task: Vec<u8>,
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
}

fn text(m: &mut ReadMessage) -> ipl::Result<String> {
    Ok(String::from_utf8_lossy(&m.read_bytes()?).into_owned())
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
        other => {
            return Err(ipl::Error::Decode {
                origin: m.origin().to_string(),
                reason: format!("unknown satin message kind {other}"),
            })
        }
    };
    Ok((epoch, msg))
}

pub(crate) fn steal(sp: &SendPort, epoch: u64, req: u64, wide: bool) -> ipl::Result<u64> {
    let mut w = sp.message();
    w.write_u8(STEAL);
    w.write_u64(epoch);
    w.write_u64(req);
    w.write_bool(wide);
    w.finish()
}

/// A reply; `job` is (job id, registered type name, serialized task).
pub(crate) fn reply(
    sp: &SendPort,
    epoch: u64,
    req: u64,
    wide: bool,
    job: Option<(u64, &str, &[u8])>,
) -> ipl::Result<u64> {
    let mut w = sp.message();
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
    sp: &SendPort,
    epoch: u64,
    job: u64,
    output: Result<&[u8], &str>,
) -> ipl::Result<u64> {
    let mut w = sp.message();
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

pub(crate) fn cancel(sp: &SendPort, epoch: u64, job: u64) -> ipl::Result<u64> {
    let mut w = sp.message();
    w.write_u8(CANCEL);
    w.write_u64(epoch);
    w.write_u64(job);
    w.finish()
}

pub(crate) fn done(sp: &SendPort, epoch: u64, failure: Option<&str>) -> ipl::Result<u64> {
    let mut w = sp.message();
    w.write_u8(DONE);
    w.write_u64(epoch);
    w.write_bool(failure.is_none());
    if let Some(why) = failure {
        w.write_bytes(why.as_bytes());
    }
    w.finish()
}

pub(crate) fn done_ack(sp: &SendPort, epoch: u64) -> ipl::Result<u64> {
    let mut w = sp.message();
    w.write_u8(DONE_ACK);
    w.write_u64(epoch);
    w.finish()
}

pub(crate) fn failed(sp: &SendPort, epoch: u64, reason: &str) -> ipl::Result<u64> {
    let mut w = sp.message();
    w.write_u8(FAILED);
    w.write_u64(epoch);
    w.write_bytes(reason.as_bytes());
    w.finish()
}
