//! Tunable limits of a [`Bsp`](crate::Bsp) process.

use std::time::Duration;

/// The largest [`Options::small_message`]: what the control connection of shared memory is
/// sure to hold for a receiver that is not reading (the connections' `CONTROL_MAX`).
pub(crate) const MAX_SMALL_MESSAGE: usize = 256 << 10;
/// The longest [`Options::wait_slice`]; waits multiply it, and a bound keeps them in range.
const MAX_WAIT_SLICE: Duration = Duration::from_secs(3600);
/// The longest [`Options::departure_grace`]; a wait adds it to the present time.
const MAX_DEPARTURE_GRACE: Duration = Duration::from_secs(24 * 3600);

/// Limits and timeouts of one process. `Options::default()` suits most programs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Bytes of outgoing packets (to other processes) buffered in one superstep before the
    /// largest per-destination buffers are sent early. Early sending changes nothing a program
    /// can observe: packets are still readable only after the next `sync`, in the same order.
    /// Packets to the process itself are not counted: they are the next superstep's input.
    /// Default 64 MiB.
    pub memory_budget: usize,
    /// Messages up to this many bytes travel on the control connection, which the waiting
    /// thread reads itself (lowest latency); larger ones travel on the data connection, which
    /// a receiving thread drains continuously, so that large transfers can never block each
    /// other, except up to 256 KiB where the control connection is sure to hold them for a
    /// receiver that is not reading (shared memory; see the crate's front page). Default
    /// 16 KiB; must be from 64 bytes to 256 KiB (a larger control message could fill a
    /// connection whose receiver is itself sending, and both would wait).
    pub small_message: usize,
    /// How long one wait lasts before the process checks the pool for failed peers.
    /// Default 50 ms; at most an hour.
    pub wait_slice: Duration,
    /// How long a wait goes on after a peer has left the pool normally, for messages it sent
    /// before leaving. A peer that died gets two wait slices. Default 5 s; at most a day.
    pub departure_grace: Duration,
    /// Longest one wait of a `sync` or collective (for one round's message, or for the data of
    /// a superstep) may last while every peer is alive; `None` waits as long as the peers live
    /// (the default: a slow peer is not an error). Not `Some(0)`, under which every wait would
    /// fail.
    pub sync_timeout: Option<Duration>,
    /// Whether the large collectives of numbers on the host board (see the crate's front
    /// page) may read each process's data straight from its memory, one copy where the system
    /// allows it, rather than through the board's bulk areas, two copies. A process whose
    /// data others read must keep it until all have, so it waits for them; through the bulk
    /// areas it goes on once its data is there. Where it may, all-gathers, all-to-alls and
    /// data beyond a bulk area read from memory, and so do reductions, scans and scatters of
    /// at least 16 KiB per writer; smaller ones take the bulk areas all the same, which was
    /// faster. `None` (the default): so where the host has a processor for every process;
    /// where it has fewer, only all-to-alls and scatters, whose readers do not wait for one
    /// another, read from memory, and the rest take the bulk areas (a reader waiting for a
    /// processor would hold up a scan's chain or a reduction's tree). Every process must give
    /// the same; where one says `Some(false)`, or cannot read another's memory, all take the
    /// bulk areas.
    pub single_copy: Option<bool>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memory_budget: 64 << 20,
            small_message: 16 << 10,
            wait_slice: Duration::from_millis(50),
            departure_grace: Duration::from_secs(5),
            sync_timeout: None,
            single_copy: None,
        }
    }
}

impl Options {
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.small_message < 64 {
            return Err(format!(
                "small_message must be at least 64 bytes, not {}",
                self.small_message
            ));
        }
        if self.memory_budget == 0 {
            return Err("memory_budget must not be 0".into());
        }
        if self.small_message > MAX_SMALL_MESSAGE {
            return Err(format!(
                "small_message must be at most {MAX_SMALL_MESSAGE} bytes, not {}",
                self.small_message
            ));
        }
        if self.wait_slice.is_zero() {
            return Err("wait_slice must not be 0".into());
        }
        if self.wait_slice > MAX_WAIT_SLICE {
            return Err(format!(
                "wait_slice must be at most {MAX_WAIT_SLICE:?}, not {:?}",
                self.wait_slice
            ));
        }
        if self.sync_timeout == Some(Duration::ZERO) {
            // Every wait that waits at all would fail: None is the setting for no limit.
            return Err("sync_timeout must not be 0 (None: no limit)".into());
        }
        if self.departure_grace > MAX_DEPARTURE_GRACE {
            return Err(format!(
                "departure_grace must be at most {MAX_DEPARTURE_GRACE:?}, not {:?}",
                self.departure_grace
            ));
        }
        Ok(())
    }
}
