//! The bench harness: runs the platform's workloads and micro-benchmarks over process and
//! thread counts and records the runs (work in progress).

#![warn(missing_docs)]

pub mod analysis;
pub mod apps;
pub mod config;
pub mod error;
pub mod exec;
pub mod launch;
pub mod machine;
pub mod micro;
pub mod reference;
pub mod store;

pub use error::{Error, Result};
