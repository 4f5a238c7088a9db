//! Measuring the request rate over worker counts: one `ipl-run -n W+1 -- master-worker --mode
//! bench` per count, workers as processes on tcp.

use crate::error::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Finds the `ipl-run` launcher: `$IPL_RUN` if set, else next to the running executable or one
/// directory up (where Cargo puts binaries when the running executable is a test in `deps/`).
/// Cargo builds it with `cargo build -p ipl --bin ipl-run` (also done by
/// `cargo test --workspace`).
pub fn find_ipl_run() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("IPL_RUN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("ipl-run"), dir.parent()?.join("ipl-run")]
        .into_iter()
        .find(|p| p.is_file())
}

/// One measured point of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    /// Worker processes (the pool has one more node, the master).
    pub workers: u32,
    /// Requests the master answered per second over the whole run.
    pub requests_per_second: f64,
    /// Requests answered.
    pub requests: u64,
    /// Requests per second in each report interval.
    pub rates: Vec<f64>,
    /// The driver the pool ran on, as the master reported it (`tcp` unless `env` said
    /// otherwise).
    pub driver: String,
}

/// Runs `program` (the `master-worker` binary) in bench mode under `ipl_run` once per entry of
/// `workers`, passing `args` after `--mode bench` and `env` to every process, and reads the
/// master's JSON line. The processes talk over tcp (`IPL_DRIVER=tcp`, which `env` may
/// override), as on a cluster, rather than over the shared memory that processes of one host
/// would take by default. Each run is killed (with its processes) when it takes longer than
/// `limit`.
pub fn sweep(
    ipl_run: &Path,
    program: &Path,
    workers: &[u32],
    args: &[String],
    env: &[(String, String)],
    limit: Duration,
    mut each: impl FnMut(&SweepPoint),
) -> Result<Vec<SweepPoint>> {
    let mut points = Vec::with_capacity(workers.len());
    for &w in workers {
        if w == 0 {
            return Err(Error::Param {
                name: "--sweep",
                reason: "worker counts must be positive".into(),
            });
        }
        let mut cmd = Command::new(ipl_run);
        cmd.arg("-n")
            .arg((w + 1).to_string())
            .arg("--no-prefix")
            .arg("--")
            .arg(program)
            .args(["--mode", "bench", "--quiet"])
            .args(args)
            .env("IPL_DRIVER", "tcp")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let what = format!(
            "{} -n {} -- {}",
            ipl_run.display(),
            w + 1,
            program.display()
        );
        let line = run_for_line(cmd, limit, &what)?;
        let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| Error::Launch {
            context: what.clone(),
            reason: format!("result line is not JSON ({e}): {line}"),
        })?;
        let field = |k: &str| {
            v.get(k).cloned().ok_or_else(|| Error::Launch {
                context: what.clone(),
                reason: format!("result line has no '{k}': {line}"),
            })
        };
        let point = SweepPoint {
            workers: w,
            requests_per_second: field("requests_per_second")?.as_f64().unwrap_or(f64::NAN),
            requests: field("requests")?.as_u64().unwrap_or(0),
            rates: serde_json::from_value(field("rates")?).unwrap_or_default(),
            driver: field("parameters")?["driver"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        };
        each(&point);
        points.push(point);
    }
    Ok(points)
}

/// Runs `cmd` and returns the first stdout line that is a master-worker result, killing the
/// command if it runs longer than `limit` or fails.
fn run_for_line(mut cmd: Command, limit: Duration, what: &str) -> Result<String> {
    let launch = |reason: String| Error::Launch {
        context: what.to_owned(),
        reason,
    };
    let mut child = cmd.spawn().map_err(|e| launch(e.to_string()))?;
    let mut out = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let mut s = String::new();
        let r = std::io::Read::read_to_string(&mut out, &mut s).map(|_| s);
        let _ = tx.send(r);
    });
    let output = match rx.recv_timeout(limit) {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(launch(format!("reading its output: {e}")));
        }
        Err(_) => {
            // ipl-run's processes die with it (parent-death signal).
            let _ = child.kill();
            let _ = child.wait();
            return Err(launch(format!("did not finish within {limit:?}")));
        }
    };
    let status = child.wait().map_err(|e| launch(e.to_string()))?;
    if !status.success() {
        return Err(launch(format!("exited with {status}; output:\n{output}")));
    }
    output
        .lines()
        .find(|l| l.starts_with('{') && l.contains("\"app\":\"master-worker\""))
        .map(str::to_owned)
        .ok_or_else(|| launch(format!("no result line in its output:\n{output}")))
}
