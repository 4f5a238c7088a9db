//! Workers as real processes over tcp: a worker process killed with SIGKILL while it holds a
//! job loses no work, and whole pools started by `ipl-run` (farm, and the bench sweep).
//!
//! This test target has its own `main` (no libtest harness): it runs the tests below in order,
//! or, when `MW_TEST_ROLE` is set, plays that role as a child process of a test. Every child is
//! killed when its test ends, however it ends. Arguments that do not start with `-` select the
//! tests whose names contain them.

use ipl::{Config, Ibis, PoolEvent, RegistryServer};
use master_worker::primes::sieve_count;
use master_worker::sweep::sweep;
use master_worker::{run_master, Client, MasterOptions, Mode, Task};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::Reaped;

const ROLE: &str = "MW_TEST_ROLE";
const LIMIT: Duration = Duration::from_secs(60);
const SECRET: &str = "mw-process-test";

/// The IPL_* environment of a node of the open tcp pool `pool`.
fn pool_env(registry: &RegistryServer, pool: &str) -> Vec<(&'static str, String)> {
    vec![
        ("IPL_SERVER", registry.address().to_string()),
        ("IPL_POOL", pool.to_string()),
        ("IPL_SECRET", SECRET.to_string()),
        ("IPL_SPIN", "20us".to_string()),
        ("IPL_CONNECT_TIMEOUT", "20s".to_string()),
    ]
}

/// Child role `hang`: take one job, say so on stdout, and hold it without working until killed.
fn hang() {
    let ibis = Ibis::join(Config::from_env().expect("IPL_* environment")).expect("join");
    let master = ibis.pool().elect("master").expect("elect");
    assert_ne!(master, ibis.id(), "the test's master was elected first");
    let mut client = Client::connect(&ibis, &master).expect("connect to the master");
    let Task::Job(job) = client.request(None).expect("first request").task else {
        panic!("the first worker of a farm gets a job");
    };
    println!("holding job {} as rank {}", job.id, ibis.id().rank());
    std::io::stdout().flush().expect("flush stdout");
    let until = Instant::now() + Duration::from_secs(120);
    while Instant::now() < until {
        std::thread::park_timeout(until - Instant::now());
    }
}

fn a_worker_process_killed_mid_job_loses_no_work() {
    let registry = RegistryServer::start("127.0.0.1:0", SECRET).expect("registry");
    let pool = format!("mw-kill-{}", std::process::id());
    let (n, chunk) = (100_000, 2_000);
    let mut cfg = Config::tcp(&pool, 1, registry.address().to_string(), SECRET);
    cfg.size = None;
    cfg.spin = Duration::from_micros(20);
    let ibis = Ibis::join(cfg).expect("master joins");
    assert_eq!(ibis.pool().elect("master").unwrap(), ibis.id());
    let events = ibis.pool().subscribe();
    let master = {
        let ibis = ibis.clone();
        std::thread::spawn(move || {
            run_master(
                &ibis,
                &MasterOptions::new(Mode::Farm { n, chunk }),
                &mut |_| {},
            )
        })
    };

    // The first worker takes a job and holds it.
    let exe = std::env::current_exe().expect("test binary");
    let mut victim = Reaped(
        Command::new(exe)
            .env(ROLE, "hang")
            .envs(pool_env(&registry, &pool))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the hanging worker"),
    );
    let line = {
        let out = victim.0.stdout.take().expect("stdout is piped");
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let mut l = String::new();
            let _ = BufReader::new(out).read_line(&mut l);
            let _ = tx.send(l);
        });
        rx.recv_timeout(LIMIT)
            .expect("the hanging worker took a job")
    };
    let victim_rank: u32 = line
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("unexpected line from the hanging worker: {line:?}"));

    // A second worker process (the real binary) joins; once it is in the pool, the first dies.
    let worker = Reaped(
        Command::new(env!("CARGO_BIN_EXE_master-worker"))
            .arg("--quiet")
            .envs(pool_env(&registry, &pool))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the worker binary"),
    );
    let worker_rank = loop {
        match events.recv_timeout(LIMIT) {
            Ok(PoolEvent::Joined(n)) if n.rank() != victim_rank => break n.rank(),
            Ok(_) => continue,
            Err(_) => panic!("the worker binary did not join within {LIMIT:?}"),
        }
    };
    victim.0.kill().expect("SIGKILL the hanging worker");

    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(master.join());
    });
    let report = rx
        .recv_timeout(LIMIT)
        .expect("the farm finished")
        .expect("master thread")
        .expect("master");
    let f = report.farm.expect("farm report");
    assert_eq!(f.primes, sieve_count(n), "{f:?}");
    assert_eq!(
        f.reassigned, 1,
        "the killed worker's job was handed on: {f:?}"
    );
    assert_eq!(f.duplicates, 0);
    assert_eq!(f.jobs_per_worker.get(&victim_rank), None);
    assert_eq!(f.jobs_per_worker.get(&worker_rank), Some(&f.jobs));
    let (status, out, _) = worker.output(Instant::now() + LIMIT);
    assert!(status.success(), "worker binary: {status}");
    assert!(out.is_empty(), "only the master prints a result: {out}");
}

/// The `ipl-run` launcher: next to the `master-worker` binary, built there if missing.
fn ipl_run() -> PathBuf {
    testkit::ipl_run_beside(Path::new(env!("CARGO_BIN_EXE_master-worker")))
}

fn ipl_run_starts_a_farm_of_processes() {
    let run = Reaped(
        Command::new(ipl_run())
            .args(["-n", "3", "--no-prefix", "--"])
            .arg(env!("CARGO_BIN_EXE_master-worker"))
            .args(["--mode", "farm", "--n", "100000", "--chunk", "5000", "-q"])
            .env("IPL_SPIN", "20us")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ipl-run"),
    );
    let (status, out, _) = run.output(Instant::now() + LIMIT);
    assert!(status.success(), "{status}: {out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "one result line: {out}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON");
    assert_eq!(v["app"], "master-worker");
    assert_eq!(v["mode"], "farm");
    assert_eq!(v["nodes"], 3);
    // ipl-run's ranks on one host talk through shared memory.
    assert_eq!(v["parameters"]["driver"], "shm");
    assert_eq!(v["checksum"], sieve_count(100_000));
    assert_eq!(v["farm"]["jobs"], 20);
    assert!(v["seconds"]["run"].as_f64().is_some() && v["total_seconds"].as_f64().is_some());
}

/// A farm of four processes under `ipl-run --tolerate-failures`: a worker killed with SIGKILL
/// while the farm runs costs nothing but its job, which another worker redoes. The result is
/// exact and the launcher succeeds.
fn a_farm_under_ipl_run_tolerate_failures_survives_a_killed_worker() {
    let n = 20_000_000;
    let (k, v) = testkit::marker("mw-tolerate");
    let mark = format!("{k}={v}");
    let _cleanup = testkit::KillMarked::new(vec![mark.clone()]);
    let mut run = Reaped(
        Command::new(ipl_run())
            .args(["-n", "4", "--tolerate-failures", "-x", &mark, "--"])
            .arg(env!("CARGO_BIN_EXE_master-worker"))
            .args(["--mode", "farm", "--n", &n.to_string(), "--chunk", "50000"])
            .args(["--report-every", "0.1"])
            .env("IPL_SPIN", "20us")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ipl-run"),
    );
    let out = testkit::read_all(run.0.stdout.take().expect("piped"));
    let err = testkit::lines(run.0.stderr.take().expect("piped"));
    let deadline = Instant::now() + LIMIT;
    // The master's progress lines say which rank it is and that jobs are being done.
    let mut seen = Vec::new();
    let master: u32 = loop {
        let (line, _) = err
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no progress from the master: {seen:#?}"));
        let done = line.contains(" jobs done)") && !line.contains(" 0 jobs done");
        if let (true, Some(rank)) = (done, line.strip_prefix('[')) {
            break rank
                .split(']')
                .next()
                .and_then(|r| r.parse().ok())
                .expect("a rank prefix");
        }
        seen.push(line);
    };
    let victim = (0..4).find(|r| *r != master).expect("a worker");
    let rank = format!("IPL_RANK={victim}");
    let pids = testkit::marked(&[&mark, &rank]);
    assert_eq!(pids.len(), 1, "worker {victim}: {pids:?}");
    // SAFETY: kill(2) of a worker process this test started.
    unsafe {
        libc::kill(pids[0], libc::SIGKILL);
    }
    let status = loop {
        if let Some(s) = run.0.try_wait().expect("wait for ipl-run") {
            break s;
        }
        assert!(Instant::now() < deadline, "the farm did not finish");
        std::thread::park_timeout(Duration::from_millis(20));
    };
    let rest: Vec<String> = err.try_iter().map(|(l, _)| l).collect();
    let rest = rest.join("\n");
    let out = out
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .expect("the output ends");
    assert!(status.success(), "{status}\n{out}\n{rest}");
    assert!(
        rest.contains(&format!(
            "rank {victim} was killed by signal 9; the others go on"
        )),
        "{rest}"
    );
    let line = out
        .lines()
        .find(|l| l.contains("\"app\":\"master-worker\""))
        .unwrap_or_else(|| panic!("no result line: {out}"));
    let line = line.split_once("] ").map_or(line, |(_, l)| l);
    let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
    assert_eq!(v["checksum"], sieve_count(n), "{v}");
    assert_eq!(v["nodes"], 4);
    assert!(
        v["farm"]["jobs_per_worker"][victim.to_string()]
            .as_u64()
            .unwrap_or(0)
            < 400
    );
}

/// A message over `IPL_MAX_MESSAGE` ends the run with an error naming the limit, instead of
/// both sides waiting for ever.
fn a_message_over_the_limit_fails_the_run_naming_it() {
    let started = Instant::now();
    let run = Reaped(
        Command::new(ipl_run())
            .args(["-n", "2", "-x", "IPL_MAX_MESSAGE=40", "--"])
            .arg(env!("CARGO_BIN_EXE_master-worker"))
            .args(["--mode", "farm", "--n", "100000", "--chunk", "5000", "-q"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ipl-run"),
    );
    let (status, out, err) = run.output(started + LIMIT);
    assert!(!status.success(), "{out}\n{err}");
    assert!(
        err.contains("exceeds the limit of 40 bytes") && err.contains("IPL_MAX_MESSAGE"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

fn the_sweep_measures_each_worker_count_under_ipl_run() {
    let args: Vec<String> = ["--seconds", "0.4", "--report-every", "0.1"]
        .map(String::from)
        .to_vec();
    let env = vec![("IPL_SPIN".to_string(), "20us".to_string())];
    let mut seen = Vec::new();
    let points = sweep(
        &ipl_run(),
        Path::new(env!("CARGO_BIN_EXE_master-worker")),
        &[1, 3],
        &args,
        &env,
        LIMIT,
        |p| seen.push(p.workers),
    )
    .expect("sweep");
    assert_eq!(seen, [1, 3]);
    for p in &points {
        assert!(p.requests > 0, "{p:?}");
        assert!(
            (p.requests_per_second - p.requests as f64 / 0.4).abs() < 1e-6,
            "{p:?}"
        );
        assert!(p.rates.len() >= 2, "{p:?}");
        // On tcp, as the sweep's result line says, not on the default shared memory.
        assert_eq!(p.driver, "tcp", "{p:?}");
    }
}

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        match role.as_str() {
            "hang" => hang(),
            r => panic!("unknown role {r}"),
        }
        return;
    }
    let tests: [(&str, fn()); 5] = [
        (
            "a_worker_process_killed_mid_job_loses_no_work",
            a_worker_process_killed_mid_job_loses_no_work,
        ),
        (
            "ipl_run_starts_a_farm_of_processes",
            ipl_run_starts_a_farm_of_processes,
        ),
        (
            "the_sweep_measures_each_worker_count_under_ipl_run",
            the_sweep_measures_each_worker_count_under_ipl_run,
        ),
        (
            "a_farm_under_ipl_run_tolerate_failures_survives_a_killed_worker",
            a_farm_under_ipl_run_tolerate_failures_survives_a_killed_worker,
        ),
        (
            "a_message_over_the_limit_fails_the_run_naming_it",
            a_message_over_the_limit_fails_the_run_naming_it,
        ),
    ];
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let list = std::env::args().any(|a| a == "--list");
    let mut failed = Vec::new();
    let mut ran = 0;
    for (name, test) in tests {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        if list {
            println!("{name}: test");
            continue;
        }
        ran += 1;
        let started = Instant::now();
        let ok = std::panic::catch_unwind(test).is_ok();
        println!(
            "test {name} ... {} ({:.1} s)",
            if ok { "ok" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        if !ok {
            failed.push(name);
        }
    }
    if list {
        return;
    }
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        ran - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        std::process::exit(1);
    }
}
