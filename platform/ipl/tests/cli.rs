//! The command-line programs refuse values they cannot serve with one line naming the problem
//! and exit status 2, before doing anything.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `program args` with `env` and no pool settings of the test's own environment; its exit
/// code and standard error.
fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("IPL_")) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    let (status, _, err) =
        testkit::Reaped::start(&mut cmd).output(Instant::now() + Duration::from_secs(60));
    (status.code(), err)
}

fn refused(program: &str, args: &[&str], env: &[(&str, &str)], names: &str) {
    let (code, err) = run(program, args, env);
    let name = std::path::Path::new(program)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(code, Some(2), "{name} {args:?} {env:?}: {err}");
    assert_eq!(
        err.lines().count(),
        1,
        "{name} {args:?}: not one line: {err}"
    );
    assert!(
        err.starts_with(&format!("{name}: ")),
        "{name} {args:?}: {err}"
    );
    assert!(
        err.contains(names),
        "{name} {args:?}: {err} (should name {names})"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn ipl_run_refuses_what_it_cannot_serve() {
    let run = env!("CARGO_BIN_EXE_ipl-run");
    for (args, names) in [
        (&["-n", "0", "--", "true"][..], "-n"),
        (&["-n", "-1", "--", "true"], "-1"),
        (&["-n", "5000", "--", "true"], "-n"),
        (&["-n", "2", "--clusters", "0", "--", "true"], "--clusters"),
        (
            &["-n", "2", "--grace", "500000000000y", "--", "true"],
            "--grace",
        ),
        (
            &["-n", "2", "--wan-latency", "500000000000y", "--", "true"],
            "--wan-latency",
        ),
        (&["-n", "2", "--wan-bandwidth", "-5", "--", "true"], "-5"),
        (
            &["-n", "2", "-x", "IPL_DRIVER=inproc", "--", "true"],
            "IPL_DRIVER",
        ),
        (
            &["-n", "2", "-x", "IPL_SECRET=x", "--", "true"],
            "IPL_SECRET",
        ),
        (&["-n", "2", "-x", "=x", "--", "true"], "--env"),
        (
            &["-n", "2", "-x", "IPL_SPIN=500000000000y", "--", "true"],
            "IPL_SPIN",
        ),
        (
            &["-n", "2", "-x", "IPL_MAX_MESSAGE=lots", "--", "true"],
            "IPL_MAX_MESSAGE",
        ),
        (
            &["-n", "2", "--registry-addr", "1.2.3.4", "--", "true"],
            "--registry-addr",
        ),
        (&["-n", "2"], "COMMAND"),
    ] {
        refused(run, args, &[], names);
    }
    // A log filter it cannot read is refused before any rank starts, as the options are.
    refused(
        run,
        &["-n", "1", "--", "true"],
        &[("RUST_LOG", "ipl=degub")],
        "RUST_LOG",
    );
}

#[test]
fn ipl_server_refuses_empty_secrets_and_secrets_on_the_command_line() {
    let server = env!("CARGO_BIN_EXE_ipl-server");
    let loopback = ["--bind", "127.0.0.1:0"];
    refused(
        server,
        &[&loopback[..], &["--secret", ""]].concat(),
        &[],
        "--secret",
    );
    refused(
        server,
        &[&loopback[..], &["--secret", "s3cret"]].concat(),
        &[],
        "ps",
    );
    refused(server, &loopback, &[("IPL_SECRET", "")], "empty");
    refused(server, &loopback, &[("IPL_SECRET", "  ")], "empty");
    refused(server, &loopback, &[], "IPL_SECRET");
    refused(
        server,
        &loopback,
        &[("IPL_SECRET", "s"), ("RUST_LOG", "ipl=degub")],
        "RUST_LOG",
    );
    let tmp = testkit::scratch_dir("ipl-cli");
    let dir = tmp.path();
    let empty = dir.join("empty");
    std::fs::write(&empty, "\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).unwrap();
    let empty = empty.to_str().unwrap();
    refused(
        server,
        &[&loopback[..], &["--secret-file", empty]].concat(),
        &[],
        "empty",
    );
    refused(
        server,
        &[&loopback[..], &["--secret-file", "/nonexistent/secret"]].concat(),
        &[],
        "--secret-file",
    );
    refused(
        server,
        &["--bind", "not an address"],
        &[("IPL_SECRET", "s")],
        "not an address",
    );
}

/// Like [`refused`], with the program's address space limited to 1 GiB, so that one that
/// reads a device until memory runs out fails fast rather than taking the machine's memory.
fn refused_in_bounded_memory(program: &str, args: &[&str], env: &[(&str, &str)], names: &str) {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("IPL_")) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    // SAFETY: setrlimit is async-signal-safe; it lowers the child's own limit before exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (status, _, err) =
        testkit::Reaped::start(&mut cmd).output(Instant::now() + Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{args:?}: {status:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
    assert!(err.contains(names), "{args:?}: {err} (should name {names})");
}

#[test]
fn host_and_secret_files_are_read_only_when_regular_and_small() {
    let tmp = testkit::scratch_dir("ipl-cli-files");
    let dir = tmp.path();
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid, NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let big = dir.join("big");
    std::fs::write(&big, "h\n".repeat(1 << 20)).unwrap();
    // Read until memory ran out (/dev/zero), waited for a writer that never came (a FIFO),
    // or read whole whatever its size.
    for (file, why) in [
        ("/dev/zero", "not a regular file"),
        (fifo.to_str().unwrap(), "not a regular file"),
        (big.to_str().unwrap(), "larger than"),
    ] {
        refused_in_bounded_memory(
            env!("CARGO_BIN_EXE_ipl-run"),
            &["--hostfile", file, "-n", "1", "--", "true"],
            &[],
            why,
        );
        refused_in_bounded_memory(
            env!("CARGO_BIN_EXE_ipl-server"),
            &["--bind", "127.0.0.1:0", "--secret-file", file],
            &[],
            why,
        );
    }
    let e = ipl::run_pool::read_hostfile(std::path::Path::new("/dev/zero")).unwrap_err();
    assert!(e.to_string().contains("host file /dev/zero"), "{e}");
}

#[test]
fn ipl_bench_refuses_what_it_cannot_serve() {
    let bench = env!("CARGO_BIN_EXE_ipl-bench");
    for (args, names) in [
        (&["--messages", "0"][..], "--messages"),
        (&["--messages", "-1"], "--messages"),
        (&["--round-trips", "0"], "--round-trips"),
        (&["--repeat", "0"], "--repeat"),
        (&["--only", "nothing"], "--only"),
        // Refused before any part runs, rather than after the serialization part.
        (&["--procs", "3"], "--procs"),
        (&["--procs", "2,66"], "--procs"),
    ] {
        refused(bench, args, &[], names);
    }
}

#[test]
fn a_rank_told_inproc_and_a_registry_fails_at_once() {
    // What `ipl-run -x IPL_DRIVER=inproc` (refused above) would give each rank: every rank
    // would form an in-process pool of its own and wait for the others until the join timeout.
    let started = Instant::now();
    let exe = std::env::current_exe().unwrap();
    let (code, err) = run(
        exe.to_str().unwrap(),
        &["--exact", "config_of_a_rank", "--nocapture"],
        &[
            ("IPL_TEST_CONFIG", "1"),
            ("IPL_SERVER", "127.0.0.1:9"),
            ("IPL_POOL", "p"),
            ("IPL_POOL_SIZE", "2"),
            ("IPL_RANK", "0"),
            ("IPL_SECRET", "s"),
            ("IPL_DRIVER", "inproc"),
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("IPL_DRIVER") && err.contains("inproc"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

/// What a rank sees: started by the test above (does nothing otherwise).
#[test]
fn config_of_a_rank() {
    if std::env::var_os("IPL_TEST_CONFIG").is_none() {
        return;
    }
    if let Err(e) = ipl::Ibis::join(ipl::Config::from_env().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    })) {
        eprintln!("{e}");
        std::process::exit(3);
    }
}

#[test]
fn ipl_run_refuses_a_pool_larger_than_the_open_file_limit_allows() {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ipl-run"));
    cmd.args(["-n", "64", "--", "true"]).stdin(Stdio::null());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("IPL_")) {
        cmd.env_remove(k);
    }
    // SAFETY: setrlimit is async-signal-safe; it lowers the child's own limits before exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 100,
                rlim_max: 100,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (status, _, err) =
        testkit::Reaped::start(&mut cmd).output(Instant::now() + Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("open files") && err.contains("hard limit is 100"),
        "{err}"
    );
    // Below the hard limit, the launcher raises the soft one for the pool it starts.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ipl-run"));
    cmd.args(["-n", "64", "--", "sh", "-c", "ulimit -n"])
        .stdin(Stdio::null());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("IPL_")) {
        cmd.env_remove(k);
    }
    // SAFETY: as above.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 100,
                rlim_max: 4096,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (status, out, err) =
        testkit::Reaped::start(&mut cmd).output(Instant::now() + Duration::from_secs(60));
    assert!(status.success(), "{out}\n{err}");
    let limits: Vec<u64> = out
        .lines()
        .filter_map(|l| l.split("] ").nth(1))
        .map(|v| v.trim().parse().unwrap())
        .collect();
    assert_eq!(limits.len(), 64, "{out}");
    assert!(limits.iter().all(|&l| l >= 4 * 64 + 64), "{out}");
}
