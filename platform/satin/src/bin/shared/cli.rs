//! Command-line handling shared by the satin benchmarks: a value the benchmark cannot serve is
//! refused with one line on stderr and exit status 2, and a failed run is reported as one line
//! with exit status 1.

use std::fmt::Display;
use std::process::ExitCode;

/// Parses the command line, or exits: with the help or version text and status 0, or with a
/// one-line error and status 2.
pub fn parse_or_exit<T: clap::Parser>() -> T {
    match T::try_parse() {
        Ok(args) => args,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                std::process::exit(0);
            }
            // clap's message, up to its blank line (then come usage and hints), on one line.
            let text = e.to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(|l| l.trim().trim_start_matches("error: "))
                .filter(|l| !l.starts_with("tip:"))
                .collect();
            eprintln!("{}: {}", program(), message.join(" "));
            std::process::exit(2);
        }
    }
}

/// The exit status of a benchmark's run: success, or status 1 with the error on one line.
pub fn report<E: Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: {e}", program());
            ExitCode::FAILURE
        }
    }
}

fn program() -> String {
    std::env::args()
        .next()
        .and_then(|p| {
            std::path::Path::new(&p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "satin-bench".into())
}
