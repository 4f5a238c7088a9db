//! The registry: who is in a pool, who joined, left or died, and who won which election.
//!
//! The same bookkeeping (`state::RegistryState`) runs behind a TCP server (inside `ipl-run`,
//! in rank 0 under other launchers, or stand-alone as `ipl-server`) and behind in-process pools.

pub(crate) mod proto;
pub mod server;
pub(crate) mod state;

pub use proto::{PoolEvent, MAX_ELECTIONS, MAX_ELECTION_NAME};
pub use server::RegistryServer;
