//! `bench-harness`: see the crate documentation (`cargo doc -p bench-harness --open`) or
//! `bench-harness --help`.

use bench_harness::cli::{self, Cli};
use clap::Parser;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn main() {
    let cli = Cli::parse();
    // Log lines as RUST_LOG says (warnings by default); one it cannot read is refused, not
    // ignored.
    let logs = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => {
            tracing_subscriber::EnvFilter::try_new(&v).unwrap_or_else(|e| {
                let _ = writeln!(
                    std::io::stderr(),
                    "error: RUST_LOG='{v}' is not a log filter such as bench_harness=debug,warn: {e}"
                );
                std::process::exit(2);
            })
        }
        _ => tracing_subscriber::EnvFilter::new("warn"),
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(logs)
        .init();
    // What a run leaves behind outside its process group comes back to the harness, which
    // ends it after the run.
    if !bench_harness::exec::adopt_orphans() {
        tracing::debug!("cannot become the reaper of orphaned descendants");
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        // SIGINT (Ctrl-C), SIGTERM and SIGHUP alike. First: kill the current run with
        // everything it started, and stop after saving what was measured, with the set marked
        // interrupted. Second: kill the current run's processes and leave at once.
        let handler = ctrlc::set_handler(move || {
            if stop.swap(true, Ordering::SeqCst) {
                bench_harness::exec::kill_current_group();
                std::process::exit(130);
            }
            let _ = writeln!(
                std::io::stderr(),
                "\ninterrupted: stopping the current run; the runs measured so far are kept"
            );
        });
        if let Err(e) = handler {
            tracing::warn!("cannot install the handler of SIGINT, SIGTERM and SIGHUP: {e}");
        }
    }
    match cli::run(cli, stop) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            std::process::exit(1);
        }
    }
}
