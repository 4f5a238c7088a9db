//! Pools formed from a parallel launcher's environment (what `srun` and `mpirun` give each
//! rank, reproduced here on one host), and `ipl-run --hostfile` through a remote shell that,
//! like `ssh`, passes no environment on. Child processes are this test binary re-run with a role
//! in `IPL_TEST_ROLE`; every child is killed when its test ends, and every wait is bounded.

use ipl::{Config, Connection, Ibis, PortType};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use testkit::Reaped;

/// Longest one test may take.
const LIMIT: Duration = Duration::from_secs(60);

fn role() -> Option<String> {
    std::env::var("IPL_TEST_ROLE").ok()
}

/// Entry point of the child processes; does nothing in a normal test run.
#[test]
fn child_process_entry() {
    let Some(role) = role() else { return };
    let cfg = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("config: {e}");
            std::process::exit(2);
        }
    };
    let ibis = match Ibis::join(cfg) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("join: {e}");
            std::process::exit(3);
        }
    };
    let all = ibis.pool().wait_closed().expect("pool fills");
    let me = ibis.id().rank();
    let ty = PortType::builder()
        .connection(Connection::ManyToOne)
        .build();
    let rp = ibis.receive_port(&ty, "ring").expect("receive port");
    match role.as_str() {
        // Pass a token around the ring; print what arrived, where, and the pool's make-up.
        "ring" => {
            let sp = ibis.send_port(&ty).expect("send port");
            sp.connect(&all[(me as usize + 1) % all.len()], "ring")
                .expect("connect to the next rank");
            if me == 0 {
                let mut w = sp.message();
                w.write_u64(1);
                w.finish().expect("send");
            }
            let mut m = rp.receive_timeout(Duration::from_secs(30)).expect("token");
            let v = m.read_u64().expect("token value");
            m.finish();
            println!(
                "rank {me} of {} in pool {} got token {v} on host {} (registry {})",
                all.len(),
                ibis.config().pool,
                std::env::var("RSH_HOST").unwrap_or_default(),
                if ibis.config().registry_bind.is_some() {
                    "here"
                } else {
                    "elsewhere"
                },
            );
            if me != 0 {
                let mut w = sp.message();
                w.write_u64(v + 1);
                w.finish().expect("send");
            }
        }
        // Wait for messages that never come until the pool fails; print the error.
        "watch" => {
            println!("rank {me} watching");
            let e = rp
                .receive_timeout(Duration::from_secs(50))
                .err()
                .expect("no message is ever sent");
            println!("rank {me}: {e}");
            std::process::exit(1);
        }
        // Look for the pool's secret on every command line of this machine while every rank
        // is up, then say how many showed it (and, on rank 0, the secret reversed, so that the
        // test can look for it without it appearing here).
        "secret-watch" => {
            let secret = ibis.config().secret.clone();
            assert!(secret.len() >= 16, "a launcher's secret");
            let shown = command_lines_with(&secret);
            println!("rank {me}: {} command lines show the secret", shown.len());
            for pid in shown {
                println!("rank {me}: the command line of process {pid} shows the secret");
            }
            // Nobody leaves before everyone has looked.
            if me == 0 {
                for _ in 1..all.len() {
                    rp.receive_timeout(Duration::from_secs(30))
                        .expect("a rank has looked")
                        .finish();
                }
                for n in &all[1..] {
                    let sp = ibis.send_port(&ty).expect("send port");
                    sp.connect(n, "ring").expect("connect");
                    let mut w = sp.message();
                    w.write_u8(1);
                    w.finish().expect("send");
                }
                println!(
                    "secret reversed: {}",
                    secret.chars().rev().collect::<String>()
                );
            } else {
                let sp = ibis.send_port(&ty).expect("send port");
                sp.connect(&all[0], "ring").expect("connect");
                let mut w = sp.message();
                w.write_u8(1);
                w.finish().expect("send");
                rp.receive_timeout(Duration::from_secs(30))
                    .expect("everyone has looked")
                    .finish();
            }
        }
        // Rank 2 says which process it is and stops itself; the others stay until they see it
        // die.
        "stop" => {
            let events = ibis.pool().subscribe();
            if me == 2 {
                println!("rank 2 is process {} and stops", std::process::id());
                // SAFETY: kill(2) of this very process.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGSTOP);
                }
            }
            let until = Instant::now() + Duration::from_secs(30);
            // The events come from the subscription on, and rank 2 may have died before.
            while !ibis.pool().dead().iter().any(|n| n.rank() == 2) {
                match events.recv_deadline(until) {
                    Ok(ipl::PoolEvent::Died(n)) if n.rank() == 2 => break,
                    Ok(_) => continue,
                    Err(_) => panic!("rank {me}: rank 2's death was not seen within 30 s"),
                }
            }
            println!("rank {me} survived");
        }
        r => panic!("unknown role {r}"),
    }
}

/// Whether process `pid` has ended (gone, or a zombie nobody has reaped yet).
fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which may hold anything but ends with ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

/// The processes whose command line holds `text`.
fn command_lines_with(text: &str) -> Vec<i32> {
    command_lines()
        .into_iter()
        .filter(|(_, line)| line.contains(text))
        .map(|(pid, _)| pid)
        .collect()
}

/// Every process's command line, its words joined by spaces.
fn command_lines() -> Vec<(i32, String)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            v.push((pid, String::from_utf8_lossy(&c).replace('\0', " ")));
        }
    }
    v
}

/// This test binary as a child in `role`, with exactly the environment `env` (no inherited
/// `IPL_*`, `SLURM_*` or `OMPI_*` variables).
fn child(role: &str, env: &[(String, String)]) -> Reaped {
    let mut c = Command::new(std::env::current_exe().expect("test executable"));
    c.args([
        "child_process_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env_clear()
    .env("IPL_TEST_ROLE", role)
    .envs(env.iter().cloned())
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    Reaped(c.spawn().expect("start a child"))
}

fn vars(v: &[(&str, String)]) -> Vec<(String, String)> {
    v.iter().map(|(k, x)| (k.to_string(), x.clone())).collect()
}

/// What `srun -n SIZE` on one node gives rank `rank` of job `job`.
fn srun_env(job: &str, rank: u32, size: u32) -> Vec<(String, String)> {
    vars(&[
        ("SLURM_PROCID", rank.to_string()),
        ("SLURM_STEP_ID", "0".into()),
        ("SLURM_JOB_ID", job.into()),
        ("SLURM_STEP_NUM_TASKS", size.to_string()),
        ("SLURM_NTASKS", size.to_string()),
        ("SLURM_STEP_NUM_NODES", "1".into()),
        ("SLURM_STEP_NODELIST", "thishost".into()),
    ])
}

/// What OpenMPI 4's `mpirun -n SIZE` on one host gives rank `rank` of job `job`.
fn mpirun_env(job: &str, rank: u32, size: u32) -> Vec<(String, String)> {
    vars(&[
        ("OMPI_COMM_WORLD_RANK", rank.to_string()),
        ("OMPI_COMM_WORLD_SIZE", size.to_string()),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", size.to_string()),
        ("OMPI_MCA_ess_base_jobid", job.into()),
        ("PMIX_RANK", rank.to_string()),
        (
            "OMPI_MCA_orte_hnp_uri",
            format!("{job}.0;tcp://192.0.2.99:4000"),
        ),
    ])
}

/// A job id no other test run uses.
fn job(tag: &str) -> String {
    format!("{}{tag}{:x}", std::process::id(), rand_u32())
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    t.subsec_nanos() ^ (t.as_secs() as u32).rotate_left(13)
}

fn check_ring(children: Vec<Reaped>, deadline: Instant, pool_prefix: &str) {
    let outs: Vec<_> = children.into_iter().map(|c| c.output(deadline)).collect();
    let mut pools = Vec::new();
    for (rank, (status, out, err)) in outs.iter().enumerate() {
        assert!(status.success(), "rank {rank}: {status}\n{out}\n{err}");
        let token = if rank == 0 { outs.len() } else { rank };
        let want = format!("rank {rank} of {} in pool ", outs.len());
        // The line may follow the test harness's own words ("test child_process_entry ... ").
        let line = out
            .lines()
            .find_map(|l| l.find(&want).map(|i| &l[i..]))
            .unwrap_or_else(|| panic!("rank {rank} printed no ring line:\n{out}\n{err}"));
        assert!(line.contains(&format!("got token {token} ")), "{line}");
        // Rank 0 runs the registry, the others reach it.
        let registry = if rank == 0 { "here" } else { "elsewhere" };
        assert!(line.ends_with(&format!("(registry {registry})")), "{line}");
        pools.push(
            line.split(" in pool ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .to_string(),
        );
    }
    assert!(pools.iter().all(|p| p == &pools[0]), "{pools:?}");
    assert!(pools[0].starts_with(pool_prefix), "{pools:?}");
}

#[test]
fn srun_and_mpirun_ranks_form_one_pool_from_the_launcher_environment() {
    if role().is_some() {
        return;
    }
    let deadline = Instant::now() + LIMIT;
    let j = job("s");
    let ranks: Vec<Reaped> = (0..3).map(|r| child("ring", &srun_env(&j, r, 3))).collect();
    check_ring(ranks, deadline, &format!("slurm-{j}.0"));
    let j = job("o");
    // Started in reverse: rank 0's registry comes up last, and the others wait for it.
    let mut ranks: Vec<Reaped> = (0..3)
        .rev()
        .map(|r| child("ring", &mpirun_env(&j, r, 3)))
        .collect();
    ranks.reverse();
    check_ring(ranks, deadline, &format!("openmpi-{j}"));
}

#[test]
fn without_rank_0_the_others_fail_within_the_connect_timeout() {
    if role().is_some() {
        return;
    }
    let started = Instant::now();
    let mut env = srun_env(&job("m"), 1, 2);
    env.push(("IPL_CONNECT_TIMEOUT".into(), "2s".into()));
    let (status, out, err) = child("ring", &env).output(started + LIMIT);
    assert_eq!(status.code(), Some(3), "{out}\n{err}");
    assert!(err.contains("cannot reach the registry"), "{err}");
    assert!(
        err.contains("rank 0 of this slurm job runs the registry"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn rank_0_placed_away_from_the_registry_address_fails_at_once() {
    if role().is_some() {
        return;
    }
    let started = Instant::now();
    let mut env = mpirun_env(&job("a"), 0, 2);
    // Two hosts: rank 0 must be on the host running mpirun (192.0.2.99, not this one).
    env.retain(|(k, _)| k != "OMPI_COMM_WORLD_LOCAL_SIZE");
    env.push(("OMPI_COMM_WORLD_LOCAL_SIZE".into(), "1".into()));
    let (status, out, err) = child("ring", &env).output(started + LIMIT);
    assert_eq!(status.code(), Some(3), "{out}\n{err}");
    assert!(err.contains("192.0.2.99"), "{err}");
    assert!(err.contains("not an address of this host"), "{err}");
    assert!(err.contains("IPL_SERVER"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn absurd_launcher_values_are_refused_with_the_variable_named() {
    if role().is_some() {
        return;
    }
    let mut env = srun_env(&job("b"), 5, 2);
    env.push(("IPL_CONNECT_TIMEOUT".into(), "2s".into()));
    let (status, _, err) = child("ring", &env).output(Instant::now() + LIMIT);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("SLURM_PROCID"), "{err}");
    assert!(err.contains("outside the job of 2"), "{err}");
}

#[test]
fn the_death_of_rank_0_and_its_registry_is_named_by_the_others() {
    if role().is_some() {
        return;
    }
    let deadline = Instant::now() + LIMIT;
    let j = job("k");
    let mut ranks: Vec<Reaped> = (0..3)
        .map(|r| child("watch", &srun_env(&j, r, 3)))
        .collect();
    // Wait until every rank is in the pool and watching.
    let outs: Vec<_> = ranks
        .iter_mut()
        .skip(1)
        .map(|c| {
            let (tx, rx) = mpsc::channel();
            let mut out = c.0.stdout.take().expect("piped");
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut byte = [0u8; 1];
                while let Ok(1) = out.read(&mut byte) {
                    buf.push(byte[0]);
                    if byte[0] == b'\n' {
                        let _ =
                            tx.send((String::from_utf8_lossy(&buf).into_owned(), Instant::now()));
                        buf.clear();
                    }
                }
            });
            rx
        })
        .collect();
    // The first line containing `what`, before `until`.
    let line_with = |rx: &mpsc::Receiver<(String, Instant)>, what: &str, until: Instant| loop {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok((line, at)) if line.contains(what) => break Some((line, at)),
            Ok(_) => continue,
            Err(_) => break None,
        }
    };
    for (i, rx) in outs.iter().enumerate() {
        line_with(rx, "watching", deadline)
            .unwrap_or_else(|| panic!("rank {} never watched", i + 1));
    }
    ranks[0].0.kill().expect("kill rank 0");
    let killed = Instant::now();
    for (i, rx) in outs.iter().enumerate() {
        let (line, at) = line_with(
            rx,
            &format!("rank {}: ", i + 1),
            killed + Duration::from_secs(15),
        )
        .unwrap_or_else(|| panic!("rank {} did not notice within 15 s", i + 1));
        assert!(at.duration_since(killed) < Duration::from_secs(15));
        assert!(line.contains("node0"), "rank {}: {line}", i + 1);
    }
    for (i, r) in ranks.iter_mut().enumerate().skip(1) {
        let status = wait_until(&mut r.0, deadline);
        assert_eq!(status.code(), Some(1), "rank {i}");
    }
}

fn wait_until(c: &mut Child, deadline: Instant) -> ExitStatus {
    loop {
        if let Some(s) = c.try_wait().expect("try_wait") {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "child still running at the deadline"
        );
        std::thread::park_timeout(Duration::from_millis(20));
    }
}

/// A remote shell for one machine that behaves like `ssh` towards the environment: the
/// command runs with only PATH, and RSH_HOST says which host it was meant for.
fn local_rsh(dir: &std::path::Path) -> PathBuf {
    let p = dir.join("rsh");
    std::fs::write(
        &p,
        "#!/bin/sh\nhost=$1\nshift\nexec env -i PATH=/usr/bin:/bin RSH_HOST=\"$host\" \"$@\"\n",
    )
    .expect("write rsh");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

/// A remote shell for one machine that runs the command as on another host: in a session of
/// its own, which a kill of the remote shell's process group does not reach, with only PATH
/// and RSH_HOST in its environment, and with the remote shell's standard input, which closes
/// only when the launcher lets go of it (as ssh's does when its connection goes).
fn detached_rsh(dir: &std::path::Path) -> PathBuf {
    let p = dir.join("rsh");
    std::fs::write(
        &p,
        "#!/bin/sh\nhost=$1\nshift\nexec 3<&0\n\
         setsid env -i PATH=/usr/bin:/bin RSH_HOST=\"$host\" \"$@\" <&3 3<&- &\n\
         exec 3<&-\nwait $!\n",
    )
    .expect("write rsh");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

fn scratch(name: &str) -> testkit::TempDir {
    testkit::scratch_dir(&format!("ipl-launchers-{name}"))
}

fn ipl_run(args: &[&str], role: &str) -> Reaped {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ipl-run"));
    c.args(args)
        .arg("--")
        .arg(std::env::current_exe().expect("test executable"))
        .args([
            "child_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_remove("IPL_SERVER")
        .env_remove("IPL_POOL_SIZE")
        .env("IPL_TEST_ROLE", role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Reaped(c.spawn().expect("start ipl-run"))
}

#[test]
fn ipl_run_hostfile_starts_ranks_through_the_remote_shell() {
    if role().is_some() {
        return;
    }
    let tmp = scratch("hostfile");
    let dir = tmp.path();
    let rsh = local_rsh(dir);
    let hosts = dir.join("hosts");
    std::fs::write(
        &hosts,
        "# two hosts\n127.0.0.1 slots=2\nlocalhost   # one more\n",
    )
    .unwrap();
    let (status, out, err) = ipl_run(
        &[
            "--hostfile",
            hosts.to_str().unwrap(),
            "--rsh",
            rsh.to_str().unwrap(),
        ],
        "ring",
    )
    .output(Instant::now() + LIMIT);
    assert!(status.success(), "{status}\n{out}\n{err}");
    // Three ranks (the slots), placed in file order; the pool's variables reached them on the
    // command line, since the remote shell passed no environment on.
    for (rank, host, token) in [
        (0, "127.0.0.1", 3),
        (1, "127.0.0.1", 1),
        (2, "localhost", 2),
    ] {
        let want = format!("rank {rank} of 3 in pool run-");
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("[{rank}] ")) && l.contains(&want))
            .unwrap_or_else(|| panic!("no line for rank {rank}:\n{out}\n{err}"));
        assert!(
            line.contains(&format!(
                "got token {token} on host {host} (registry elsewhere)"
            )),
            "{line}"
        );
    }
    // A malformed host file is refused, naming the line.
    std::fs::write(&hosts, "127.0.0.1\nlocalhost slots=two\n").unwrap();
    let (status, out, err) = ipl_run(
        &[
            "--hostfile",
            hosts.to_str().unwrap(),
            "--rsh",
            rsh.to_str().unwrap(),
        ],
        "ring",
    )
    .output(Instant::now() + LIMIT);
    assert_eq!(status.code(), Some(2), "{out}\n{err}");
    assert!(err.contains("line 2"), "{err}");
    assert!(err.contains("'two' is not a number of slots"), "{err}");
    // A remote shell that cannot run the command: the launcher fails, naming the rank and host.
    std::fs::write(&hosts, "localhost\n").unwrap();
    let (status, _, err) = ipl_run(
        &["--hostfile", hosts.to_str().unwrap(), "--rsh", "/bin/false"],
        "ring",
    )
    .output(Instant::now() + LIMIT);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("rank 0 on localhost exited with status 1"),
        "{err}"
    );
}

#[test]
fn a_stopped_remote_rank_is_killed_on_its_host_not_only_its_remote_shell() {
    if role().is_some() {
        return;
    }
    let tmp = scratch("stopped-remote");
    let dir = tmp.path();
    let rsh = detached_rsh(dir);
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "127.0.0.1 slots=3\n").unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_ipl-run"));
    c.args(["--tolerate-failures", "--hostfile"])
        .arg(&hosts)
        .arg("--rsh")
        .arg(&rsh)
        .arg("--")
        .arg(std::env::current_exe().expect("test executable"))
        .args([
            "child_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_remove("IPL_SERVER")
        .env_remove("IPL_POOL_SIZE")
        .env("IPL_TEST_ROLE", "stop")
        // Travel to the ranks on their command lines, as the launcher's IPL_* settings do.
        .env("IPL_HEARTBEAT", "200ms")
        .env("IPL_DEATH_TIMEOUT", "1s")
        .stdin(Stdio::null());
    let (status, out, err) = Reaped::start(&mut c).output(Instant::now() + LIMIT);
    let pid: i32 = out
        .lines()
        .find_map(|l| l.split("rank 2 is process ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("rank 2 named no process:\n{out}\n{err}"));
    // Killed here whatever the outcome: a stopped process left behind would stay for ever.
    struct Left(i32);
    impl Drop for Left {
        fn drop(&mut self) {
            if !ended(self.0) {
                // SAFETY: kill(2) of the test's own rank, still there (not reaped, so its pid
                // is not reused).
                unsafe {
                    libc::kill(self.0, libc::SIGKILL);
                }
            }
        }
    }
    let left = Left(pid);
    assert!(status.success(), "{status}\n{out}\n{err}");
    assert!(
        err.contains("rank 2 on 127.0.0.1 stopped answering the registry"),
        "{err}"
    );
    for rank in [0, 1] {
        assert!(out.contains(&format!("rank {rank} survived")), "{out}");
    }
    // A stopped process on its host kept its output open, and the launcher waited for it.
    assert!(!err.contains("some output was still open"), "{err}");
    // Killing the remote shell must reach the process on its host.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ended(pid) && Instant::now() < deadline {
        std::thread::park_timeout(Duration::from_millis(20));
    }
    assert!(
        ended(pid),
        "rank 2 (process {pid}) is still on its host, stopped, after its remote shell was \
         killed\n{err}"
    );
    drop(left);
}

#[test]
fn a_hostfile_run_shows_the_secret_on_no_command_line_and_in_no_log() {
    if role().is_some() {
        return;
    }
    let hosts = match testkit::netns::Hosts::new(3) {
        Ok(h) => h,
        Err(why) if testkit::netns::required() => panic!("CI=true but no namespace hosts: {why}"),
        Err(why) => {
            eprintln!("skipping: cannot make namespace hosts: {why}");
            return;
        }
    };
    let deadline = Instant::now() + LIMIT;
    let rsh = hosts.rsh();
    let hostfile = hosts.dir.join("hosts");
    std::fs::write(
        &hostfile,
        format!(
            "{}\n{}\n",
            testkit::netns::Hosts::addr(1),
            testkit::netns::Hosts::addr(2)
        ),
    )
    .unwrap();
    // Every command line of this machine, as often as it can be read, during the run.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut seen = std::collections::HashSet::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                seen.extend(command_lines().into_iter().map(|(_, l)| l));
            }
            seen
        })
    };
    // ipl-run (and its registry) on host 0, with debug logs; one rank on each other host.
    let mut cmd = hosts.exec(0, Path::new(env!("CARGO_BIN_EXE_ipl-run")));
    cmd.arg("--hostfile")
        .arg(&hostfile)
        .arg("--rsh")
        .arg(&rsh)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args([
            "child_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("RUST_LOG", "ipl=debug")
        .env("IPL_TEST_ROLE", "secret-watch")
        .stdin(Stdio::null());
    let (status, out, err) = testkit::Reaped::start(&mut cmd).output(deadline);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = watcher.join().unwrap();
    assert!(status.success(), "{status}\n{out}\n{err}");
    let secret: String = out
        .lines()
        .find_map(|l| l.split("secret reversed: ").nth(1))
        .unwrap_or_else(|| panic!("rank 0 did not report:\n{out}\n{err}"))
        .trim()
        .chars()
        .rev()
        .collect();
    assert_eq!(secret.len(), 32, "{out}");
    for rank in 0..2 {
        assert!(
            out.contains(&format!("rank {rank}: 0 command lines show the secret")),
            "{out}"
        );
    }
    assert!(
        seen.len() > 10,
        "the command lines were read: {} seen",
        seen.len()
    );
    let shown: Vec<&String> = seen.iter().filter(|l| l.contains(&secret)).collect();
    assert!(shown.is_empty(), "command lines with the secret: {shown:?}");
    assert!(
        err.contains("DEBUG"),
        "debug logs were on (the check below means something): {err}"
    );
    assert!(!err.contains(&secret), "the secret is in a log:\n{err}");
    assert!(
        !out.contains(&secret),
        "the secret is in the output:\n{out}"
    );
}
