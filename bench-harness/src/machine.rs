//! The machine and source revision a result set was measured on (what `scripts/machine-info`
//! prints, gathered in code so every result set carries it).

use crate::exec::{self, CommandLine, Exit};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

/// The machine a measurement ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Host name.
    pub hostname: String,
    /// Cores available to this process.
    pub cores: usize,
    /// CPU model name.
    pub cpu: String,
    /// Total memory in bytes (0 when unknown).
    pub memory_bytes: u64,
    /// Operating system (distribution name where known).
    pub os: String,
    /// Kernel release.
    pub kernel: String,
    /// `rustc --version`.
    pub rustc: String,
    /// Load average (1, 5, 15 minutes) when the measurement started.
    pub load_average: String,
}

/// The source revision of the measured programs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitInfo {
    /// `git rev-parse HEAD`, or `unknown`.
    pub revision: String,
    /// The work tree had uncommitted changes.
    pub modified: bool,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let c = CommandLine::new(program, args.iter().map(|s| s.to_string()));
    let o = exec::run_captured(&c, Duration::from_secs(30)).ok()?;
    (o.exit == Exit::Code(0)).then(|| o.stdout.trim().to_string())
}

/// The CPU model from `/proc/cpuinfo` text.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// Total memory in bytes from `/proc/meminfo` text.
pub fn total_memory(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .and_then(|kb| kb.checked_mul(1024))
}

/// The `PRETTY_NAME` from `/etc/os-release` text.
pub fn os_name(os_release: &str) -> Option<String> {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_string())
}

impl Machine {
    /// Describes this machine.
    pub fn current() -> Machine {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Machine {
            hostname: read("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|| "unknown".into()),
            cores,
            cpu: read("/proc/cpuinfo")
                .and_then(|s| cpu_model(&s))
                .unwrap_or_else(|| "unknown".into()),
            memory_bytes: read("/proc/meminfo")
                .and_then(|s| total_memory(&s))
                .unwrap_or(0),
            os: read("/etc/os-release")
                .and_then(|s| os_name(&s))
                .unwrap_or_else(|| std::env::consts::OS.to_string()),
            kernel: read("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|| "unknown".into()),
            rustc: command_output("rustc", &["--version"]).unwrap_or_else(|| "unknown".into()),
            load_average: read("/proc/loadavg")
                .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|| "unknown".into()),
        }
    }

    /// Memory in GiB, for people.
    pub fn memory_gib(&self) -> f64 {
        self.memory_bytes as f64 / (1u64 << 30) as f64
    }
}

impl GitInfo {
    /// The revision of the repository holding `dir` (`unknown` outside a repository).
    pub fn of(dir: &Path) -> GitInfo {
        let d = dir.display().to_string();
        let revision = command_output("git", &["-C", &d, "rev-parse", "HEAD"])
            .unwrap_or_else(|| "unknown".into());
        let modified = command_output(
            "git",
            &["-C", &d, "status", "--porcelain", "--untracked-files=no"],
        )
        .is_some_and(|s| !s.is_empty());
        GitInfo { revision, modified }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: X\nmodel name\t: Example CPU @ 3.00GHz\n";
        assert_eq!(cpu_model(cpuinfo).unwrap(), "Example CPU @ 3.00GHz");
        assert_eq!(
            total_memory("MemTotal:       2048 kB\nMemFree: 1 kB\n"),
            Some(2048 * 1024)
        );
        // More kB than bytes a u64 holds: unknown, not a panic or a wrapped figure.
        assert_eq!(
            total_memory(&format!("MemTotal: {} kB\n", u64::MAX / 2)),
            None
        );
        assert_eq!(
            os_name("NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n").unwrap(),
            "Debian GNU/Linux 12 (bookworm)"
        );
        assert_eq!(cpu_model(""), None);
    }

    #[test]
    fn this_machine_is_described() {
        let m = Machine::current();
        assert!(m.cores >= 1);
        assert!(m.memory_bytes > 0);
        let g = GitInfo::of(Path::new(env!("CARGO_MANIFEST_DIR")));
        assert!(
            g.revision.len() == 40 || g.revision == "unknown",
            "{}",
            g.revision
        );
    }
}
