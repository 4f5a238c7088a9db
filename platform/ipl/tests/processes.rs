//! Real processes: a killed node is noticed by the others; `ipl-run` launches, prefixes and
//! propagates failures. Child processes are this test binary re-run with a role in
//! `IPL_TEST_ROLE`; every child is killed at the end of its test.

use ipl::{Config, Connection, Ibis, PoolEvent, PortType, RegistryServer};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the child when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn role() -> Option<String> {
    std::env::var("IPL_TEST_ROLE").ok()
}

/// Entry point of the child processes; does nothing in a normal test run.
#[test]
fn child_process_entry() {
    let Some(role) = role() else { return };
    let ibis = Ibis::join(Config::from_env().unwrap()).unwrap();
    let events = ibis.pool().subscribe();
    if role == "grow" {
        // The first launch's ranks see two nodes join; the joiners say which ranks they got.
        let me = ibis.id().rank();
        let until = Instant::now() + Duration::from_secs(60);
        let member_ranks = |keep: fn(u32) -> bool| -> std::collections::BTreeSet<u32> {
            let members = ibis.pool().members();
            members
                .iter()
                .map(|n| n.rank())
                .filter(|&r| keep(r))
                .collect()
        };
        if ibis.pool().size().is_none() {
            println!("joined as rank {me}");
            // Stays until the first launch's ranks have gone, which they do once they have
            // seen both joiners: a joiner that left at once could be gone before one of them
            // looked (neither among its members nor in its events since it subscribed).
            let mut first = member_ranks(|r| r < 2);
            while !first.is_empty() {
                match events.recv_deadline(until) {
                    Ok(PoolEvent::Left(n) | PoolEvent::Died(n)) => {
                        first.remove(&n.rank());
                    }
                    Ok(_) => continue,
                    // The end of the wait or of the pool's registry ends it too.
                    Err(_) => break,
                }
            }
            return;
        }
        // The joiners may be in before this node subscribed: the members it knows after
        // subscribing, then the events, leave no gap.
        let mut joined = member_ranks(|r| r >= 2);
        while joined.len() < 2 {
            match events.recv_deadline(until) {
                Ok(PoolEvent::Joined(n)) if n.rank() >= 2 => {
                    joined.insert(n.rank());
                }
                Ok(_) => continue,
                Err(_) => panic!("rank {me} saw only {joined:?} join within 60 s"),
            }
        }
        let joined: Vec<u32> = joined.into_iter().collect();
        println!("rank {me} saw ranks {joined:?} join");
        return;
    }
    if role == "join-stop" {
        // The member whose rank IPL_TEST_STOP names (one that joined the running pool) stops
        // itself; every other member stays until it sees that member die.
        let stop: u32 = std::env::var("IPL_TEST_STOP").unwrap().parse().unwrap();
        let me = ibis.id().rank();
        if me == stop {
            println!("rank {me} stops");
            // SAFETY: kill(2) of this very process.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGSTOP);
            }
        }
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            // The events come from the subscription on, and the member may have died before.
            if ibis.pool().dead().iter().any(|n| n.rank() == stop) {
                break;
            }
            match events.recv_deadline(until) {
                Ok(PoolEvent::Died(n)) if n.rank() == stop => break,
                Ok(_) => continue,
                Err(_) => panic!("rank {me}: rank {stop}'s death was not seen within 30 s"),
            }
        }
        println!("rank {me} survived");
        return;
    }
    let all = ibis.pool().wait_closed().unwrap();
    let me = ibis.id().rank();
    let ty = PortType::builder()
        .connection(Connection::ManyToOne)
        .build();
    let rp = ibis.receive_port(&ty, "ring").unwrap();
    match role.as_str() {
        // Wait until killed, serving nothing.
        "idle" => {
            let _ = rp.receive_timeout(Duration::from_secs(120));
        }
        // Pass a token around the ring and print what was received.
        "ring" => {
            let sp = ibis.send_port(&ty).unwrap();
            sp.connect(&all[(me as usize + 1) % all.len()], "ring")
                .unwrap();
            if me == 0 {
                let mut w = sp.message();
                w.write_u64(1);
                w.finish().unwrap();
            }
            let mut m = rp.receive_timeout(Duration::from_secs(60)).unwrap();
            let v = m.read_u64().unwrap();
            m.finish();
            println!("token {v} at {}", ibis.id().location());
            if me != 0 {
                let mut w = sp.message();
                w.write_u64(v + 1);
                w.finish().unwrap();
            }
            // Stay until everyone has passed the token on: rank 0 receives it last, and leaves
            // once it has.
            if me != 0 {
                let until = Instant::now() + Duration::from_secs(60);
                loop {
                    match events.recv_deadline(until) {
                        Ok(PoolEvent::Left(n) | PoolEvent::Died(n)) if n.rank() == 0 => break,
                        Ok(_) => continue,
                        Err(e) => panic!("rank {me}: rank 0 did not leave within 60 s: {e}"),
                    }
                }
            }
        }
        // Rank 1 fails; the others would wait for a long time.
        "fail" => {
            if me == 1 {
                std::process::exit(3);
            }
            let _ = rp.receive_timeout(Duration::from_secs(120));
        }
        // A process group of two: this rank and a child of its own; both wait to be killed.
        "family" => {
            let mut sleeper = Command::new("sleep")
                .arg("120")
                .stdin(Stdio::null())
                .spawn()
                .unwrap();
            println!("family of rank {me} ready");
            let _ = rp.receive_timeout(Duration::from_secs(120));
            let _ = sleeper.kill();
            let _ = sleeper.wait();
        }
        // Rank 2 dies by a signal (with "survive-stop" it stops and never answers again);
        // with "survive-fail" rank 1 also fails. The others carry on and succeed once they see
        // the death.
        "survive" | "survive-fail" | "survive-stop" => {
            match me {
                // SAFETY: kill(2) of this very process.
                2 if role == "survive-stop" => unsafe {
                    libc::kill(libc::getpid(), libc::SIGSTOP);
                },
                // SAFETY: kill(2) of this very process.
                2 => unsafe {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                },
                1 if role == "survive-fail" => std::process::exit(3),
                _ => {}
            }
            let until = Instant::now() + Duration::from_secs(30);
            loop {
                // The events come from the subscription on, and rank 2 may have died before.
                if ibis.pool().dead().iter().any(|n| n.rank() == 2) {
                    break;
                }
                match events.recv_deadline(until) {
                    Ok(PoolEvent::Died(n)) if n.rank() == 2 => break,
                    Ok(_) => continue,
                    Err(_) => panic!("rank 2's death was not seen within 30 s"),
                }
            }
            println!("rank {me} survived");
        }
        r => panic!("unknown role {r}"),
    }
}

fn child(role: &str, envs: &[(&str, String)]) -> Reaped {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "child_process_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("IPL_TEST_ROLE", role)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    for (k, v) in envs {
        c.env(k, v);
    }
    Reaped(c.spawn().unwrap())
}

/// A node whose registry stops sees its event streams end at once, rather than waiting for
/// events that can no longer come, and a mesh's failed send stops waiting for the departure
/// behind it.
#[test]
fn the_event_stream_of_a_node_that_loses_its_registry_ends_at_once() {
    if role().is_some() {
        return;
    }
    // Far below the waits a lost registry used to cost: the stream never ended, and a loop
    // over it waited out its own deadline.
    const PROMPT: Duration = Duration::from_secs(5);
    let secret = "loss-test";
    let registry = RegistryServer::start("127.0.0.1:0", secret).unwrap();
    let pool = format!("loss-{}", std::process::id());
    let mut cfg = Config::tcp(&pool, 1, registry.address().to_string(), secret);
    cfg.rank = Some(0);
    let ibis = Ibis::join(cfg).unwrap();
    ibis.pool().wait_closed().unwrap();
    let events = ibis.pool().subscribe();
    let mesh = ipl::Mesh::builder(&ibis, "loss")
        .data_upcall(|_| Ok(()))
        .patience(Duration::from_secs(60))
        .build()
        .unwrap();
    let stopped = Instant::now();
    drop(registry);
    let ended = loop {
        match events.recv_timeout(PROMPT.saturating_sub(stopped.elapsed())) {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    let took = stopped.elapsed();
    println!("the wait on the event stream ended ({ended:?}) {took:?} after the registry stopped");
    assert_eq!(
        ended,
        crossbeam_channel::RecvTimeoutError::Disconnected,
        "the stream did not end within {PROMPT:?}"
    );
    let e = ibis.pool().check_alive(&[]).unwrap_err();
    assert!(matches!(e, ipl::Error::Registry(_)), "{e}");
    // A stream taken after the loss is ended from the start.
    assert_eq!(
        ibis.pool().subscribe().recv_timeout(PROMPT),
        Err(crossbeam_channel::RecvTimeoutError::Disconnected)
    );
    // A failed send no longer waits its patience for a departure the pool cannot report.
    let asked = Instant::now();
    let e = mesh.send_error(
        &ibis.id(),
        "sending to myself",
        ipl::Error::Closed("a test's send".into()),
    );
    let took = asked.elapsed();
    println!("the mesh's send error came {took:?} after it was asked for");
    assert!(took < PROMPT, "the send error took {took:?}: {e}");
    let text = e.to_string();
    assert!(
        text.contains("can no longer tell") && text.contains("a test's send"),
        "{text}"
    );
    mesh.close();
}

#[test]
fn a_killed_process_is_noticed_by_the_others_within_15s() {
    if role().is_some() {
        return;
    }
    let secret = "kill-test";
    let registry = RegistryServer::start("127.0.0.1:0", secret).unwrap();
    let pool = format!("kill-{}", std::process::id());
    let envs = |rank: u32| {
        vec![
            ("IPL_SERVER", registry.address().to_string()),
            ("IPL_POOL", pool.clone()),
            ("IPL_POOL_SIZE", "3".to_string()),
            ("IPL_RANK", rank.to_string()),
            ("IPL_SECRET", secret.to_string()),
        ]
    };
    let mut victim = child("idle", &envs(1));
    let _other = child("idle", &envs(2));
    let mut cfg = Config::tcp(&pool, 3, registry.address().to_string(), secret);
    cfg.rank = Some(0);
    let ibis = Ibis::join(cfg).unwrap();
    let events = ibis.pool().subscribe();
    let all = ibis.pool().wait_closed().unwrap();
    assert_eq!(all.len(), 3);
    // SIGKILL: no chance to say goodbye.
    victim.0.kill().unwrap();
    let killed = Instant::now();
    let dead = loop {
        match events.recv_timeout(Duration::from_secs(15).saturating_sub(killed.elapsed())) {
            Ok(PoolEvent::Died(n)) => break n,
            Ok(_) => continue,
            Err(_) => panic!("death not noticed within 15 s"),
        }
    };
    assert_eq!(dead.rank(), 1);
    assert!(!ibis.pool().is_alive(&all[1]));
    let e = ibis.pool().check_alive(&all).unwrap_err();
    assert!(e.to_string().contains("node1"), "{e}");
    // A send to the dead node fails with an error naming it rather than hanging.
    let ty = PortType::builder()
        .connection(Connection::ManyToOne)
        .build();
    let sp = ibis.send_port(&ty).unwrap();
    let e = sp.connect(&all[1], "ring").unwrap_err();
    assert!(e.to_string().contains("node1"), "{e}");
}

#[test]
fn a_hung_process_is_declared_dead_after_the_death_timeout() {
    if role().is_some() {
        return;
    }
    let secret = "hang-test";
    let registry = RegistryServer::start("127.0.0.1:0", secret).unwrap();
    let pool = format!("hang-{}", std::process::id());
    let envs = vec![
        ("IPL_SERVER", registry.address().to_string()),
        ("IPL_POOL", pool.clone()),
        ("IPL_POOL_SIZE", "2".to_string()),
        ("IPL_RANK", "1".to_string()),
        ("IPL_SECRET", secret.to_string()),
        ("IPL_HEARTBEAT", "200ms".to_string()),
        ("IPL_DEATH_TIMEOUT", "1s".to_string()),
    ];
    let hung = child("idle", &envs);
    let mut cfg = Config::tcp(&pool, 2, registry.address().to_string(), secret);
    cfg.rank = Some(0);
    let ibis = Ibis::join(cfg).unwrap();
    let events = ibis.pool().subscribe();
    ibis.pool().wait_closed().unwrap();
    // SIGSTOP keeps the connection open but stops the heartbeats.
    // SAFETY: plain kill(2) on our own child.
    unsafe {
        libc::kill(hung.0.id() as i32, libc::SIGSTOP);
    }
    let stopped = Instant::now();
    loop {
        match events.recv_timeout(Duration::from_secs(15).saturating_sub(stopped.elapsed())) {
            Ok(PoolEvent::Died(n)) => {
                assert_eq!(n.rank(), 1);
                break;
            }
            Ok(_) => continue,
            Err(_) => panic!("hung node not declared dead within 15 s"),
        }
    }
    // Not before its death timeout: the heartbeats had to stop for a full second.
    assert!(stopped.elapsed() >= Duration::from_millis(900));
}

#[test]
fn a_stopped_registry_cuts_its_nodes_off_after_their_death_timeout() {
    if role().is_some() {
        return;
    }
    let secret = "stopped-registry-test";
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ipl-server"));
    cmd.args(["--bind", "127.0.0.1:0"])
        .env("IPL_SECRET", secret)
        .env("RUST_LOG", "off")
        .stdin(Stdio::null());
    let mut server = testkit::Reaped::start(&mut cmd);
    let lines = testkit::lines(server.0.stdout.take().unwrap());
    let (addr, _) = lines
        .recv_timeout(Duration::from_secs(30))
        .expect("ipl-server prints its address");
    let pool = format!("stopped-registry-{}", std::process::id());
    let mut cfg = Config::tcp(&pool, 1, addr.trim().to_string(), secret);
    cfg.rank = Some(0);
    cfg.heartbeat = Duration::from_millis(200);
    cfg.death_timeout = Duration::from_secs(1);
    let ibis = Ibis::join(cfg).unwrap();
    ibis.pool().wait_closed().unwrap();
    let ty = PortType::builder()
        .connection(Connection::ManyToOne)
        .build();
    let rp = ibis.receive_port(&ty, "ring").unwrap();
    // SIGSTOP keeps the registry's connection open, but it answers nothing: it can no longer
    // tell this node of a peer's death.
    // SAFETY: plain kill(2) on our own child.
    unsafe {
        libc::kill(server.0.id() as i32, libc::SIGSTOP);
    }
    let stopped = Instant::now();
    let e = rp
        .receive_timeout(Duration::from_secs(20))
        .err()
        .expect("no message is ever sent");
    assert!(matches!(e, ipl::Error::Registry(_)), "{e}");
    assert!(e.to_string().contains(&addr.trim().to_string()), "{e}");
    assert!(
        stopped.elapsed() < Duration::from_secs(10),
        "cut off only after {:?}",
        stopped.elapsed()
    );
    drop(rp);
    drop(ibis);
}

/// Runs `ipl-run ARGS -- (this test binary in ROLE)`: its exit code, standard output and error,
/// and how long it took.
fn ipl_run_all(args: &[&str], role: &str) -> (i32, String, String, Duration) {
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ipl-run"));
    cmd.args(args)
        .arg("--")
        .arg(exe)
        .args([
            "child_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("IPL_TEST_ROLE", role);
    let (status, out, err) =
        testkit::Reaped::start(&mut cmd).output(started + Duration::from_secs(90));
    (status.code().unwrap_or(-1), out, err, started.elapsed())
}

fn ipl_run(args: &[&str], role: &str) -> (i32, String, Duration) {
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ipl-run"));
    cmd.args(args)
        .arg("--")
        .arg(exe)
        .args([
            "child_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("IPL_TEST_ROLE", role)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let child = Reaped(cmd.spawn().unwrap());
    let (tx, rx) = crossbeam_channel::bounded(1);
    let mut child = child;
    let mut out = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        let _ = tx.send(s);
    });
    let output = rx
        .recv_timeout(Duration::from_secs(90))
        .expect("ipl-run did not finish within 90 s");
    let status = child.0.wait().unwrap();
    (status.code().unwrap_or(-1), output, started.elapsed())
}

#[test]
fn ipl_run_starts_a_pool_and_prefixes_output() {
    if role().is_some() {
        return;
    }
    let (code, out, _) = ipl_run(&["-n", "3", "--clusters", "3"], "ring");
    assert_eq!(code, 0, "{out}");
    for (rank, token) in [(0, 3), (1, 1), (2, 2)] {
        let prefix = format!("[{rank}] ");
        let text = format!("token {token} at cluster{rank}");
        assert!(
            out.lines()
                .any(|l| l.starts_with(&prefix) && l.contains(&text)),
            "missing '{prefix}...{text}' in:\n{out}"
        );
    }
}

#[test]
fn ipl_run_returns_the_first_failure_and_kills_the_rest() {
    if role().is_some() {
        return;
    }
    let (code, _, took) = ipl_run(&["-n", "3"], "fail");
    assert_eq!(code, 3);
    assert!(
        took < Duration::from_secs(60),
        "the others were not killed: {took:?}"
    );
}

#[test]
fn sigterm_sighup_and_sigint_to_ipl_run_leave_no_process_behind() {
    if role().is_some() {
        return;
    }
    for (sig, name) in [
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
    ] {
        let (k, v) = testkit::marker("signals");
        let mark = format!("{k}={v}");
        let _cleanup = testkit::KillMarked::new(vec![mark.clone()]);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ipl-run"));
        cmd.args(["-n", "2", "-x", &mark, "--"])
            .arg(std::env::current_exe().unwrap())
            .args([
                "child_process_entry",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("IPL_TEST_ROLE", "family")
            .stdin(Stdio::null());
        let mut run = testkit::Reaped::start(&mut cmd);
        let out = testkit::lines(run.0.stdout.take().unwrap());
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut ready = 0;
        while ready < 2 {
            let (line, _) = out
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("both ranks and their children start");
            ready += line.contains("ready") as usize;
        }
        // Every rank and its child, in its process group.
        // (Read again for a moment should a process be caught half-way through starting.)
        let settle = Instant::now() + Duration::from_secs(5);
        let mut family = testkit::marked(&[&mark]);
        while family.len() != 4 && Instant::now() < settle {
            std::thread::park_timeout(Duration::from_millis(20));
            family = testkit::marked(&[&mark]);
        }
        let commands: Vec<String> = family
            .iter()
            .map(|p| std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default())
            .collect();
        assert_eq!(family.len(), 4, "{name}: {commands:?}");
        // SAFETY: kill(2) of the launcher this test started.
        unsafe {
            libc::kill(run.0.id() as i32, sig);
        }
        let status = loop {
            if let Some(s) = run.0.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "ipl-run ignored {name}");
            std::thread::park_timeout(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(128 + sig), "{name}");
        if let Err(left) =
            testkit::wait_unmarked(&[&mark], Instant::now() + Duration::from_secs(10))
        {
            panic!("{name} to ipl-run left processes behind: {left:?}");
        }
    }
}

#[test]
fn tolerate_failures_keeps_the_survivors_going_and_judges_them() {
    if role().is_some() {
        return;
    }
    // Rank 2 is killed: the others see it, finish, and the run succeeds.
    let (code, out, err, _) = ipl_run_all(&["-n", "3", "--tolerate-failures"], "survive");
    assert_eq!(code, 0, "{out}\n{err}");
    let survived = |out: &str, rank: u32| {
        out.lines().any(|l| {
            l.starts_with(&format!("[{rank}] ")) && l.contains(&format!("rank {rank} survived"))
        })
    };
    for rank in [0, 1] {
        assert!(survived(&out, rank), "{out}");
    }
    assert!(
        err.contains("rank 2 was killed by signal 9; the others go on"),
        "{err}"
    );
    // A survivor that fails fails the run, with its status.
    let (code, out, err, _) = ipl_run_all(&["-n", "3", "--tolerate-failures"], "survive-fail");
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(survived(&out, 0), "{out}");
    assert!(
        err.contains("rank 1 exited with status 3: the program failed"),
        "{err}"
    );
    // Without the flag the launcher fails fast: the death stops everything.
    let (code, out, err, _) = ipl_run_all(&["-n", "3"], "survive");
    assert_eq!(code, 137, "{out}\n{err}");
    assert!(err.contains("stopping the others"), "{err}");
}

#[test]
fn a_stopped_rank_is_killed_once_the_registry_declares_it_dead() {
    if role().is_some() {
        return;
    }
    // Rank 2 stops itself: the registry declares it dead after a second without heartbeats,
    // the others see that and succeed, and the launcher, which would wait for the stopped
    // process for ever, kills it.
    let quick = [("IPL_HEARTBEAT", "200ms"), ("IPL_DEATH_TIMEOUT", "1s")];
    let run = |args: &[&str]| {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ipl-run"));
        cmd.args(args)
            .arg("--")
            .arg(exe)
            .args([
                "child_process_entry",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("IPL_TEST_ROLE", "survive-stop")
            .envs(quick);
        let (status, out, err) =
            testkit::Reaped::start(&mut cmd).output(Instant::now() + Duration::from_secs(60));
        (status.code().unwrap_or(-1), out, err)
    };
    let (code, out, err) = run(&["-n", "3", "--tolerate-failures"]);
    assert_eq!(code, 0, "{out}\n{err}");
    for rank in [0, 1] {
        assert!(out.contains(&format!("rank {rank} survived")), "{out}");
    }
    assert!(
        err.contains("rank 2 stopped answering the registry"),
        "{err}"
    );
    assert!(
        err.contains("rank 2 was killed by signal 9; the others go on"),
        "{err}"
    );
    // Without the flag its death fails the run, as a crash does.
    let (code, out, err) = run(&["-n", "3"]);
    assert_eq!(code, 137, "{out}\n{err}");
    assert!(
        err.contains("rank 2 stopped answering the registry"),
        "{err}"
    );
}

/// An address on loopback with a port free a moment ago, for a launcher's registry.
fn free_local_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// `ipl-run ARGS` starting this test binary's child entry in pool `pool`, with `envs`.
fn launch_pool(args: &[&str], pool: &str, envs: &[(&str, &str)]) -> testkit::Reaped {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ipl-run"));
    cmd.args(args)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["child_process_entry", "--exact", "--nocapture"])
        .env("IPL_POOL", pool)
        .envs(envs.iter().copied());
    testkit::Reaped::start(&mut cmd)
}

/// A pool of two started by one `ipl-run`, and a second `ipl-run --join JOIN_ARGS` adding
/// processes to it, where the member of rank `stop` (a joiner) stops itself: the joining
/// launcher's exit code and output. The first launch must succeed.
fn join_and_stop(stop: u32, join_args: &[&str]) -> (i32, String, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let addr = free_local_addr();
    let pool = format!("join-stop-{}-{stop}", std::process::id());
    let stop = stop.to_string();
    let launch = |args: &[&str]| {
        launch_pool(
            args,
            &pool,
            &[
                ("IPL_TEST_ROLE", "join-stop"),
                ("IPL_TEST_STOP", &stop),
                ("IPL_SECRET", "join-stop-secret"),
                ("IPL_HEARTBEAT", "200ms"),
                ("IPL_DEATH_TIMEOUT", "1s"),
            ],
        )
    };
    let first = launch(&["-n", "2", "--registry-addr", &addr]);
    let joined = launch(&[&["--join", addr.as_str()], join_args].concat());
    let (status, out, err) = joined.output(deadline);
    let (first_status, first_out, first_err) = first.output(deadline);
    assert!(first_status.success(), "{first_out}\n{first_err}");
    for rank in [0, 1] {
        assert!(
            first_out.contains(&format!("rank {rank} survived")),
            "{first_out}"
        );
    }
    assert!(out.contains(&format!("rank {stop} stops")), "{out}\n{err}");
    (status.code().unwrap_or(-1), out, err)
}

#[test]
fn a_stopped_rank_of_a_joining_launch_is_killed_once_the_registry_declares_it_dead() {
    if role().is_some() {
        return;
    }
    // The joining launcher has no registry of its own; the pool's, in the first launcher,
    // declares the stopped joiner dead, and the joining launcher, which would wait for it for
    // ever, kills it.
    let (code, out, err) = join_and_stop(3, &["-n", "2", "--tolerate-failures"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("rank 2 survived"), "{out}");
    assert!(
        err.contains("(joined as rank 3) stopped answering the registry"),
        "{err}"
    );
    assert!(
        err.contains("(joined) was killed by signal 9; the others go on"),
        "{err}"
    );
    // Without the flag its death fails the run, as a crash does.
    let (code, out, err) = join_and_stop(2, &["-n", "1"]);
    assert_eq!(code, 137, "{out}\n{err}");
    assert!(
        err.contains("rank +0 (joined as rank 2) stopped answering the registry"),
        "{err}"
    );
}

#[test]
fn ipl_run_join_adds_processes_to_a_running_pool() {
    if role().is_some() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    let addr = free_local_addr();
    let pool = format!("grow-{}", std::process::id());
    let launch = |args: &[&str]| {
        launch_pool(
            args,
            &pool,
            &[("IPL_TEST_ROLE", "grow"), ("IPL_SECRET", "grow-secret")],
        )
    };
    let first = launch(&["-n", "2", "--registry-addr", &addr]);
    // The first pool is up once its registry answers; --join waits for it as any node does.
    let joined = launch(&["--join", &addr, "-n", "2"]);
    let (status, out, err) = joined.output(deadline);
    if !status.success() {
        // What the first launch's registry said about the failed join: its launcher is
        // stopped (SIGTERM, which it forwards) and its output shown with the joiners'.
        // SAFETY: a plain system call on a child of this process, not yet waited for.
        unsafe { libc::kill(first.0.id() as i32, libc::SIGTERM) };
        let (_, first_out, first_err) = first.output(deadline);
        panic!("the joiners failed:\n{out}\n{err}\nthe first launch:\n{first_out}\n{first_err}");
    }
    let mut ranks: Vec<u32> = out
        .lines()
        .filter_map(|l| l.split("joined as rank ").nth(1))
        .map(|r| r.trim().parse().unwrap())
        .collect();
    ranks.sort();
    assert_eq!(ranks, [2, 3], "{out}");
    assert!(
        out.lines()
            .all(|l| !l.contains("joined") || l.starts_with("[+")),
        "{out}"
    );
    let (status, out, err) = first.output(deadline);
    assert!(status.success(), "{out}\n{err}");
    for rank in [0, 1] {
        assert!(
            out.contains(&format!("[{rank}] rank {rank} saw ranks [2, 3] join")),
            "{out}"
        );
    }
    // Without the pool's name and secret, --join refuses at once.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ipl-run"));
    cmd.args(["--join", &addr, "-n", "1", "--", "true"])
        .env_remove("IPL_POOL")
        .env_remove("IPL_SECRET");
    let (status, _, err) = testkit::Reaped::start(&mut cmd).output(deadline);
    assert_eq!(status.code(), Some(2));
    assert!(err.contains("IPL_POOL and IPL_SECRET"), "{err}");
}
