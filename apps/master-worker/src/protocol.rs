//! The messages between workers and the master, and the port types that carry them.
//!
//! A worker owns one receive port for replies ([`REPLY_PORT`]) and one send port connected to
//! the master's request port ([`REQUEST_PORT`]). It sends a [`Request`] naming itself and its
//! reply port (plus the result of its previous job, if any) and waits for the [`Reply`], which
//! always carries a [`Primitives`] object (one value of every primitive type, derived from the
//! worker and the request number so the worker can check it) and a [`Task`]: ask again (the
//! request-rate benchmark), a [`Job`] (the task farm), or stop.

use ipl::{Connection, PortType, Receive, Serialization};
use serde::{Deserialize, Serialize};

/// Name of the master's receive port for requests.
pub const REQUEST_PORT: &str = "mw-requests";

/// Name of each worker's receive port for replies (one worker per node).
pub const REPLY_PORT: &str = "mw-reply";

/// Name of the election that decides which node is the master.
pub const MASTER_ELECTION: &str = "master";

/// Port type of the master's request port: many workers to one master, explicit receive,
/// objects, with connection upcalls so that the master sees workers disconnect.
pub fn request_port_type() -> PortType {
    PortType::builder()
        .connection(Connection::ManyToOne)
        .receive(Receive::Explicit)
        .serialization(Serialization::Object)
        .connection_upcalls(true)
        .build()
}

/// Port type of a worker's reply port: the master's per-worker send port to that worker.
pub fn reply_port_type() -> PortType {
    PortType::builder()
        .connection(Connection::OneToOne)
        .receive(Receive::Explicit)
        .serialization(Serialization::Object)
        .build()
}

/// What a worker sends to the master.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The worker's rank in the pool (must match the message's origin).
    pub worker: u32,
    /// The name of the worker's reply port on its node.
    pub reply_port: String,
    /// Number of this request among the worker's requests, from 0.
    pub seq: u64,
    /// The result of the job the previous reply carried, if it carried one.
    pub result: Option<JobResult>,
    /// The worker stops after this request and wants no reply.
    pub leaving: bool,
}

/// What the master answers to a [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// One value of every primitive type, see [`Primitives::for_request`].
    pub data: Primitives,
    /// What the worker does next.
    pub task: Task,
}

/// The worker's next step, carried by a [`Reply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Task {
    /// Send another request (the request-rate benchmark).
    Again,
    /// Run this job and send its result with the next request (the task farm).
    Job(Job),
    /// The run is over: send nothing more.
    Stop,
}

/// One job of the task farm: count the primes in `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Job {
    /// The job's index among the farm's jobs.
    pub id: u64,
    /// First number of the range.
    pub start: u64,
    /// One past the last number of the range.
    pub end: u64,
}

impl Job {
    /// Runs the job: counts the primes in its range.
    pub fn run(&self) -> JobResult {
        JobResult {
            job: self.id,
            value: crate::primes::count_primes(self.start, self.end),
        }
    }
}

/// The result of a [`Job`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobResult {
    /// The job's index.
    pub job: u64,
    /// The number of primes in the job's range.
    pub value: u64,
}

/// The benchmark's data object: a single value of each primitive type.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Primitives {
    /// A `bool`.
    pub a_bool: bool,
    /// A `u8`.
    pub a_u8: u8,
    /// An `i8`.
    pub an_i8: i8,
    /// A `u16`.
    pub a_u16: u16,
    /// An `i16`.
    pub an_i16: i16,
    /// A `u32`.
    pub a_u32: u32,
    /// An `i32`.
    pub an_i32: i32,
    /// A `u64`.
    pub a_u64: u64,
    /// An `i64`.
    pub an_i64: i64,
    /// An `f32`.
    pub an_f32: f32,
    /// An `f64`.
    pub an_f64: f64,
    /// A `char`.
    pub a_char: char,
}

impl Primitives {
    /// The values the master sends in answer to request `seq` of `worker`. Every field depends
    /// on both, so a reply meant for another worker or another request does not match.
    pub fn for_request(worker: u32, seq: u64) -> Primitives {
        let mix = seq
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(u64::from(worker).wrapping_mul(0xbf58_476d_1ce4_e5b9));
        Primitives {
            a_bool: mix & 1 == 1,
            a_u8: (mix >> 8) as u8,
            an_i8: (mix >> 16) as i8,
            a_u16: (mix >> 24) as u16,
            an_i16: (mix >> 32) as i16,
            a_u32: (mix >> 16) as u32,
            an_i32: (mix >> 24) as i32,
            a_u64: mix,
            an_i64: !mix as i64,
            // Exact in both widths: small integers over a power of two.
            an_f32: (seq % 1024) as f32 / 8.0 - f32::from(worker as u16 % 64),
            an_f64: seq as f64 * 0.25 + f64::from(worker),
            a_char: char::from_u32(0x3b1 + ((mix >> 40) % 25) as u32).unwrap_or('?'),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_round_trips_through_a_message_in_both_byte_orders() {
        for swapped in [false, true] {
            let reply = Reply {
                data: Primitives::for_request(7, 123_456),
                task: Task::Job(Job {
                    id: 3,
                    start: 300,
                    end: 400,
                }),
            };
            let mut w = if swapped {
                ipl::WriteMessage::detached_swapped()
            } else {
                ipl::WriteMessage::detached()
            };
            w.write(&reply).unwrap();
            let mut r = ipl::ReadMessage::from_bytes(w.into_bytes().unwrap(), swapped);
            let back: Reply = r.read().unwrap();
            assert_eq!(back, reply);
        }
    }

    #[test]
    fn primitives_differ_between_workers_and_requests() {
        let a = Primitives::for_request(1, 10);
        assert_eq!(a, Primitives::for_request(1, 10));
        assert_ne!(a, Primitives::for_request(2, 10));
        assert_ne!(a, Primitives::for_request(1, 11));
        assert!(a.a_char.is_alphabetic());
    }
}
