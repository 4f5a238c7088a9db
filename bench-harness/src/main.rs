//! `bench-harness`: see the crate documentation (`cargo doc -p bench-harness --open`) or
//! `bench-harness --help`.

use bench_harness::cli::{self, Cli};
use clap::Parser;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        // First Ctrl-C: kill the current run and stop after saving what was measured.
        // Second: leave at once.
        let handler = ctrlc::set_handler(move || {
            if stop.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
            eprintln!("\ninterrupted: stopping the current run; the runs measured so far are kept");
        });
        if let Err(e) = handler {
            tracing::warn!("cannot install the Ctrl-C handler: {e}");
        }
    }
    match cli::run(cli, stop) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}
