//! The micro-benchmarks: `ipl-bench` (port library against raw sockets, JSON figures),
//! `satin-bench` and `bsp-bench` (text reports, kept as they print them). Each is optional:
//! a benchmark whose binary is absent is skipped with a note.

use crate::apps;
use crate::config::{Micro, MicroSettings};
use crate::error::Result;
use crate::exec::CommandLine;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A micro-benchmark found in the binary directory, with what its `--help` offers.
#[derive(Debug, Clone)]
pub struct MicroProbe {
    /// Which benchmark.
    pub micro: Micro,
    /// Its binary.
    pub path: PathBuf,
    /// It writes its figures as JSON with `--json FILE`.
    pub json: bool,
    /// It has a `--quick` option.
    pub quick: bool,
}

/// Looks for `micro` in `bin_dir`; `Ok(None)` when its binary is not there.
pub fn probe(micro: Micro, bin_dir: &Path) -> Result<Option<MicroProbe>> {
    let path = match apps::locate(bin_dir, micro.binary()) {
        Ok(p) => p,
        Err(_) => return Ok(None),
    };
    // Not every benchmark answers --help (satin-bench refuses unknown arguments): its
    // failure just means no optional features.
    let help = apps::help_text(&path, Duration::from_secs(20)).unwrap_or_default();
    Ok(Some(MicroProbe {
        micro,
        json: micro == Micro::IplBench || apps::help_mentions(&help, "--json"),
        quick: apps::help_mentions(&help, "--quick"),
        path,
    }))
}

/// The command for one run: `exact` arguments where given, else those of the settings `s`;
/// `json_out` is where it writes its JSON figures if it can.
pub fn command(
    p: &MicroProbe,
    s: &MicroSettings,
    exact: Option<&[String]>,
    json_out: &Path,
) -> CommandLine {
    let mut args: Vec<String> = Vec::new();
    match (exact, p.micro) {
        (Some(e), _) => args.extend(e.iter().cloned()),
        (None, Micro::IplBench) => {
            args.extend([
                "--round-trips".into(),
                s.round_trips.to_string(),
                "--messages".into(),
                s.messages.to_string(),
                "--repeat".into(),
                s.inner_repeat.to_string(),
            ]);
        }
        (None, Micro::SatinBench) => {
            args.extend(["--reps".into(), s.inner_repeat.to_string()]);
        }
        (None, Micro::BspBench) => {
            if p.quick && *s == MicroSettings::SHORT {
                args.push("--quick".into());
            }
        }
    }
    if p.json {
        args.extend(["--json".into(), json_out.display().to_string()]);
    }
    CommandLine::new(p.path.display().to_string(), args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands() {
        let p = MicroProbe {
            micro: Micro::IplBench,
            path: "/b/ipl-bench".into(),
            json: true,
            quick: false,
        };
        assert_eq!(
            command(&p, &MicroSettings::SHORT, None, Path::new("out.json")).display(),
            "/b/ipl-bench --round-trips 3000 --messages 20 --repeat 3 --json out.json"
        );
        let p = MicroProbe {
            micro: Micro::SatinBench,
            path: "/b/satin-bench".into(),
            json: false,
            quick: false,
        };
        assert_eq!(
            command(&p, &MicroSettings::FULL, None, Path::new("x")).display(),
            "/b/satin-bench --reps 7"
        );
        let p = MicroProbe {
            micro: Micro::BspBench,
            path: "/b/bsp-bench".into(),
            json: false,
            quick: true,
        };
        assert_eq!(
            command(&p, &MicroSettings::SHORT, None, Path::new("x")).display(),
            "/b/bsp-bench --quick"
        );
        let exact = ["--size".to_string(), "3".to_string()];
        assert_eq!(
            command(&p, &MicroSettings::SHORT, Some(&exact), Path::new("x")).display(),
            "/b/bsp-bench --size 3"
        );
        assert!(probe(Micro::BspBench, Path::new("/nonexistent"))
            .unwrap()
            .is_none());
    }
}
