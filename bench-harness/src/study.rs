//! The wide-area simulation study of `satin-dist-bench study`: its CSV, read and checked, for
//! the chart of the speedup against the one-way latency between locations (a line per number
//! of locations and stealing policy, with the speedup of one location, no wide-area link, as
//! the reference) that the chart module draws.
//!
//! ```text
//! target/release/satin-dist-bench study --csv study.csv
//! target/release/bench-harness study-chart study.csv      # study.csv -> study-speedup.{png,svg}
//! ```

use crate::error::{Error, Result};

/// One configuration of the study.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyRow {
    /// Number of locations the processes were spread over.
    pub locations: u32,
    /// One-way latency between locations, in milliseconds (0 for one location).
    pub latency_ms: u32,
    /// `random` or `cluster-aware`.
    pub policy: String,
    /// Processes.
    pub nodes: u32,
    /// The run's time.
    pub seconds: f64,
    /// One process's time over `seconds`.
    pub speedup: f64,
}

/// The study's rows, and its closing note on the crash run if it had one.
#[derive(Debug, Clone, PartialEq)]
pub struct Study {
    /// Every configuration, in file order.
    pub rows: Vec<StudyRow>,
    /// The crash run's line (`# crash: ...`), without the `# `.
    pub crash: Option<String>,
}

/// Most rows a study file may hold.
const MAX_ROWS: usize = 10_000;

/// Parses and checks the CSV `text` written by `satin-dist-bench study --csv`; `origin` names
/// it in errors, which name the line.
pub fn parse(text: &str, origin: &str) -> Result<Study> {
    let bad = |line: usize, why: String| Error::InvalidArgument {
        what: "study file".into(),
        value: format!("{origin} line {line}"),
        reason: why,
    };
    let mut lines = text.lines().enumerate();
    let header = lines.next().map(|(_, l)| l.trim()).unwrap_or("");
    let columns: Vec<&str> = header.split(',').collect();
    let want = [
        "locations",
        "latency_ms",
        "policy",
        "nodes",
        "seconds",
        "speedup",
    ];
    if columns.len() < want.len() || columns[..want.len()] != want {
        return Err(bad(
            1,
            format!(
                "the header is not that of satin-dist-bench study ({}...)",
                want.join(",")
            ),
        ));
    }
    let mut rows = Vec::new();
    let mut crash = None;
    for (i, line) in lines {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(note) = line.strip_prefix('#') {
            crash = Some(note.trim().to_string());
            continue;
        }
        if rows.len() == MAX_ROWS {
            return Err(bad(n, format!("more than {MAX_ROWS} rows")));
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < want.len() {
            return Err(bad(
                n,
                format!("{} fields, expected at least {}", f.len(), want.len()),
            ));
        }
        let int = |k: usize, name: &str, max: u32| -> Result<u32> {
            match f[k].trim().parse::<u32>() {
                Ok(v) if v <= max => Ok(v),
                _ => Err(bad(
                    n,
                    format!("{name} '{}' is not a whole number up to {max}", f[k]),
                )),
            }
        };
        let real = |k: usize, name: &str| -> Result<f64> {
            match f[k].trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(v),
                _ => Err(bad(
                    n,
                    format!("{name} '{}' is not a positive number", f[k]),
                )),
            }
        };
        let row = StudyRow {
            locations: int(0, "locations", 4096)?,
            latency_ms: int(1, "latency_ms", 3_600_000)?,
            policy: f[2].trim().to_string(),
            nodes: int(3, "nodes", 1 << 20)?,
            seconds: real(4, "seconds")?,
            speedup: real(5, "speedup")?,
        };
        if row.locations == 0 || row.nodes == 0 {
            return Err(bad(n, "locations and nodes must be at least 1".into()));
        }
        if !["random", "cluster-aware"].contains(&row.policy.as_str()) {
            return Err(bad(
                n,
                format!("policy '{}' is not random or cluster-aware", row.policy),
            ));
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(bad(2, "no rows".into()));
    }
    Ok(Study { rows, crash })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "locations,latency_ms,policy,nodes,seconds,speedup,t1_seconds\n\
        1,0,random,64,12.5,62.0,775\n\
        4,100,random,64,30.0,25.8,775\n\
        4,100,cluster-aware,64,13.0,59.6,775\n\
        # crash: 16 of 64 killed, 14.0 s against 12.5 s crash-free\n";

    #[test]
    fn a_study_file_parses() {
        let s = parse(GOOD, "s.csv").unwrap();
        assert_eq!(s.rows.len(), 3);
        assert_eq!(s.rows[2].policy, "cluster-aware");
        assert_eq!(s.rows[1].latency_ms, 100);
        assert!(s.crash.unwrap().starts_with("crash: 16 of 64"));
    }

    #[test]
    fn bad_files_are_refused_with_the_line() {
        for (text, needle) in [
            ("a,b\n1,2\n", "header"),
            (
                "locations,latency_ms,policy,nodes,seconds,speedup\n",
                "no rows",
            ),
            (
                "locations,latency_ms,policy,nodes,seconds,speedup\n1,0,fast,64,1,2\n",
                "line 2",
            ),
            (
                "locations,latency_ms,policy,nodes,seconds,speedup\n1,0,random,0,1,2\n",
                "at least 1",
            ),
            (
                "locations,latency_ms,policy,nodes,seconds,speedup\n1,0,random,64,inf,2\n",
                "seconds",
            ),
        ] {
            let e = parse(text, "s.csv").unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }
}
