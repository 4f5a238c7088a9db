//! Command lines for parallel runs under each launcher, and the check that the launcher is
//! there before a sweep starts.

use crate::config::{LauncherKind, SweepConfig};
use crate::error::{Error, Result};
use crate::exec::{self, CommandLine};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A launcher with its settings from the sweep.
#[derive(Debug, Clone)]
pub struct Launcher {
    /// Which launcher.
    pub kind: LauncherKind,
    /// The `ipl-run` binary (for `local` and `hostfile`).
    pub ipl_run: PathBuf,
    /// Host file for `hostfile`.
    pub hostfile: Option<PathBuf>,
    /// Remote shell for `hostfile` (`ipl-run --rsh`); None: ipl-run's default.
    pub rsh: Option<String>,
    /// `--clusters` for `ipl-run`.
    pub clusters: Option<u32>,
    /// `--wan-latency` for `ipl-run`.
    pub wan_latency: Option<String>,
    /// Extra launcher arguments, put before the program (and before `ipl-run`'s `--`).
    pub extra: Vec<String>,
}

impl Launcher {
    /// The launcher a sweep asks for, with `ipl-run` looked for in `bin_dir`.
    pub fn from_config(c: &SweepConfig, bin_dir: &Path) -> Launcher {
        Launcher {
            kind: c.launcher,
            ipl_run: bin_dir.join("ipl-run"),
            hostfile: c.hostfile.clone(),
            rsh: c.rsh.clone(),
            clusters: c.clusters,
            wan_latency: c.wan_latency.clone(),
            extra: c.launcher_args.clone(),
        }
    }

    /// The command that runs `program args` as `nodes` processes of `threads` threads each.
    ///
    /// ```
    /// use bench_harness::config::LauncherKind;
    /// use bench_harness::launch::Launcher;
    /// let l = Launcher {
    ///     kind: LauncherKind::Local,
    ///     ipl_run: "target/release/ipl-run".into(),
    ///     hostfile: None,
    ///     rsh: None,
    ///     clusters: Some(2),
    ///     wan_latency: Some("20ms".into()),
    ///     extra: Vec::new(),
    /// };
    /// let c = l.command(4, 1, "target/release/sor".as_ref(), &["-n".into(), "512".into()]);
    /// assert_eq!(
    ///     c.display(),
    ///     "target/release/ipl-run -n 4 --clusters 2 --wan-latency 20ms -- target/release/sor -n 512"
    /// );
    /// ```
    pub fn command(
        &self,
        nodes: u32,
        threads: u32,
        program: &Path,
        args: &[String],
    ) -> CommandLine {
        let program = program.display().to_string();
        let mut v: Vec<String> = Vec::new();
        let launcher = match self.kind {
            LauncherKind::Local | LauncherKind::Hostfile => {
                v.extend(["-n".into(), nodes.to_string()]);
                if let Some(h) = &self.hostfile {
                    v.extend(["--hostfile".into(), h.display().to_string()]);
                }
                if let Some(r) = &self.rsh {
                    v.extend(["--rsh".into(), r.clone()]);
                }
                if let Some(c) = self.clusters {
                    v.extend(["--clusters".into(), c.to_string()]);
                }
                if let Some(w) = &self.wan_latency {
                    v.extend(["--wan-latency".into(), w.clone()]);
                }
                v.extend(self.extra.iter().cloned());
                v.push("--".into());
                self.ipl_run.display().to_string()
            }
            LauncherKind::Mpirun => {
                v.extend(["-n".into(), nodes.to_string()]);
                v.extend(self.extra.iter().cloned());
                "mpirun".to_string()
            }
            LauncherKind::Srun => {
                v.extend(["-n".into(), nodes.to_string()]);
                if threads > 1 {
                    v.push(format!("--cpus-per-task={threads}"));
                }
                v.extend(self.extra.iter().cloned());
                "srun".to_string()
            }
        };
        v.push(program);
        v.extend(args.iter().cloned());
        CommandLine::new(launcher, v)
    }

    /// Checks that the launcher can run: `ipl-run` exists (and takes `--hostfile` for the
    /// hostfile launcher), or `mpirun`/`srun` are on `PATH`. `example` is shown in the error.
    pub fn check_available(&self, example: &CommandLine) -> Result<()> {
        match self.kind {
            LauncherKind::Local | LauncherKind::Hostfile => {
                if !self.ipl_run.is_file() {
                    return Err(Error::BinaryNotFound {
                        program: "ipl-run".into(),
                        dir: self
                            .ipl_run
                            .parent()
                            .map(Path::to_path_buf)
                            .unwrap_or_default(),
                    });
                }
                if self.kind == LauncherKind::Hostfile {
                    let help = crate::apps::help_text(&self.ipl_run, Duration::from_secs(30))?;
                    if !crate::apps::help_mentions(&help, "--hostfile") {
                        return Err(Error::LauncherUnsupported {
                            launcher: "hostfile".into(),
                            reason: format!(
                                "{} does not accept --hostfile (not implemented in this build \
                                 of ipl-run); the command would have been: {}",
                                self.ipl_run.display(),
                                example.display()
                            ),
                        });
                    }
                    if let Some(h) = &self.hostfile {
                        if !h.is_file() {
                            return Err(Error::invalid(
                                "--hostfile",
                                h.display().to_string(),
                                "no such file",
                            ));
                        }
                    }
                }
                Ok(())
            }
            LauncherKind::Mpirun | LauncherKind::Srun => {
                let program = self.kind.name();
                if exec::which(program).is_none() {
                    return Err(Error::LauncherNotInstalled {
                        program: program.into(),
                        example: example.display(),
                    });
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launcher(kind: LauncherKind) -> Launcher {
        Launcher {
            kind,
            ipl_run: "/b/ipl-run".into(),
            hostfile: (kind == LauncherKind::Hostfile).then(|| "hosts.txt".into()),
            rsh: (kind == LauncherKind::Hostfile).then(|| "ip netns exec".into()),
            clusters: None,
            wan_latency: None,
            extra: Vec::new(),
        }
    }

    #[test]
    fn command_lines() {
        let args = ["-n".to_string(), "64".to_string()];
        let p = Path::new("/b/sor");
        assert_eq!(
            launcher(LauncherKind::Local)
                .command(2, 1, p, &args)
                .display(),
            "/b/ipl-run -n 2 -- /b/sor -n 64"
        );
        assert_eq!(
            launcher(LauncherKind::Hostfile)
                .command(8, 1, p, &args)
                .display(),
            "/b/ipl-run -n 8 --hostfile hosts.txt --rsh 'ip netns exec' -- /b/sor -n 64"
        );
        assert_eq!(
            launcher(LauncherKind::Mpirun)
                .command(4, 2, p, &args)
                .display(),
            "mpirun -n 4 /b/sor -n 64"
        );
        assert_eq!(
            launcher(LauncherKind::Srun)
                .command(4, 2, p, &args)
                .display(),
            "srun -n 4 --cpus-per-task=2 /b/sor -n 64"
        );
    }

    #[test]
    fn extra_launcher_arguments_go_before_the_program() {
        let args = ["-n".to_string(), "64".to_string()];
        let p = Path::new("/b/sor");
        let with = |kind, extra: &[&str]| {
            let mut l = launcher(kind);
            l.extra = extra.iter().map(|s| s.to_string()).collect();
            l.command(4, 1, p, &args).display()
        };
        assert_eq!(
            with(
                LauncherKind::Mpirun,
                &["--oversubscribe", "--allow-run-as-root"]
            ),
            "mpirun -n 4 --oversubscribe --allow-run-as-root /b/sor -n 64"
        );
        assert_eq!(
            with(LauncherKind::Srun, &["--overcommit"]),
            "srun -n 4 --overcommit /b/sor -n 64"
        );
        assert_eq!(
            with(LauncherKind::Local, &["--grace", "1s"]),
            "/b/ipl-run -n 4 --grace 1s -- /b/sor -n 64"
        );
    }

    #[test]
    fn missing_launchers_are_named() {
        let l = launcher(LauncherKind::Local);
        let ex = l.command(2, 1, Path::new("/b/sor"), &[]);
        let e = l.check_available(&ex).unwrap_err().to_string();
        assert!(e.contains("ipl-run not found in /b"), "{e}");
        if exec::which("mpirun").is_none() {
            let l = launcher(LauncherKind::Mpirun);
            let ex = l.command(2, 1, Path::new("/b/sor"), &[]);
            let e = l.check_available(&ex).unwrap_err().to_string();
            assert!(e.contains("'mpirun' is not installed"), "{e}");
            assert!(e.contains("mpirun -n 2 /b/sor"), "{e}");
        }
    }
}
