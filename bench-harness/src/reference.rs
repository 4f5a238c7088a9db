//! Published figures the measurements are compared with: the speedups of the Suel/Blackston
//! Barnes-Hut C code (gcc -O3) on the DAS cluster, from the appendix of the Barnes-Hut porting
//! report (seed 003, "Appendix A: Performance results"). The other workloads' papers give
//! their speedups as figures only, so they have no reference numbers here.

use serde::{Deserialize, Serialize};

/// A reference speedup for one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// Where the number comes from.
    pub source: String,
    /// The reference speedup at this point.
    pub speedup: f64,
}

/// Processor counts of the reference table's columns.
pub const SUEL_CPUS: [u32; 6] = [1, 2, 4, 8, 16, 32];

/// Suel C code speedups: (bodies, speedup for each of [`SUEL_CPUS`]).
pub const SUEL_SPEEDUPS: [(u64, [f64; 6]); 4] = [
    (1000, [1.00, 1.77, 2.75, 2.89, 2.20, 0.41]),
    (3000, [1.00, 1.91, 3.55, 5.87, 6.92, 5.29]),
    (10000, [1.00, 1.97, 3.82, 7.11, 12.32, 5.87]),
    (30000, [1.00, 1.98, 3.90, 7.62, 14.51, 25.64]),
];

/// The reference speedup of `app` with result-line `parameters` at `nodes` processes of
/// `threads` threads, if one was published for exactly that problem and processor count.
///
/// ```
/// use bench_harness::reference::lookup;
/// let p = serde_json::json!({"n": 10000});
/// assert_eq!(lookup("barnes-hut", &p, 8, 1).unwrap().speedup, 7.11);
/// assert!(lookup("barnes-hut", &p, 3, 1).is_none());
/// assert!(lookup("sor", &p, 8, 1).is_none());
/// ```
pub fn lookup(
    app: &str,
    parameters: &serde_json::Value,
    nodes: u32,
    threads: u32,
) -> Option<Reference> {
    if app != "barnes-hut" {
        return None;
    }
    let bodies = parameters.get("n")?.as_u64()?;
    let cpus = nodes.checked_mul(threads)?;
    let col = SUEL_CPUS.iter().position(|&c| c == cpus)?;
    let (_, row) = SUEL_SPEEDUPS.iter().find(|(b, _)| *b == bodies)?;
    Some(Reference {
        source: format!("Suel C code, {bodies} bodies, {cpus} CPUs"),
        speedup: row[col],
    })
}
