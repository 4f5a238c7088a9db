//! Real processes: this test binary re-run with a role in `BSP_TEST_ROLE`, forming a tcp pool
//! with a registry in the test process. Every child is killed when its test ends, however it
//! ends, and every wait is bounded.

mod common;

use bsp::{Bsp, Error, Options};
use ipl::{Config, Ibis, RegistryServer};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Kills the child when the test ends, unless [`wait_exit`] took it over.
struct Reaped(Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Reaped {
    fn kill(&mut self) {
        self.0.as_mut().expect("running").kill().unwrap();
    }
}

fn role() -> Option<String> {
    std::env::var("BSP_TEST_ROLE").ok()
}

fn opts() -> Options {
    Options {
        sync_timeout: Some(Duration::from_secs(40)),
        ..Options::default()
    }
}

/// Entry point of the child processes; does nothing in a normal test run.
#[test]
fn child_process_entry() {
    let Some(role) = role() else { return };
    let ibis = Ibis::join(Config::from_env().expect("IPL_* environment")).expect("join");
    let mut bsp = Bsp::with_options(ibis, opts()).expect("bsp");
    match role.as_str() {
        "program" => {
            common::program::program(&mut bsp).expect("the program");
            println!("\nprogram-ok {}", bsp.pid());
        }
        "checks" => {
            common::checks::collectives(&mut bsp, 3).expect("small collectives");
            common::checks::collectives(&mut bsp, 1 << 17).expect("1 MB collectives");
            common::checks::groups(&mut bsp).expect("groups");
            println!("\nprogram-ok {}", bsp.pid());
        }
        // Supersteps and small collectives of processes of one host over shared memory: on
        // the host board, which every process says it used.
        "board" => {
            common::program::program(&mut bsp).expect("the program");
            common::checks::collectives(&mut bsp, 3).expect("small collectives");
            let used = bsp.stats().board_operations;
            assert!(used > 0, "pid {}: no operation on the board", bsp.pid());
            println!("\nprogram-ok {}", bsp.pid());
        }
        "gets" => {
            common::program::gets_every_superstep(&mut bsp, 2000).expect("the gets");
            println!("\nprogram-ok {}", bsp.pid());
        }
        // Supersteps until one fails; report how.
        "sync-loop" => loop {
            let r = bsp.sync().and_then(|()| bsp.all_reduce(1u32, bsp::Op::Sum));
            if let Err(e) = r {
                println!("\nsync-failed: {e}");
                break;
            }
        },
        r => panic!("unknown role {r}"),
    }
}

/// Starts rank `rank` of a pool of `size` with role `role` (over ipl's `driver`, or the
/// default); its stdout lines go to `lines`.
fn child(
    role: &str,
    driver: Option<&str>,
    registry: &RegistryServer,
    pool: &str,
    size: u32,
    rank: u32,
    lines: mpsc::Sender<(u32, String)>,
) -> Reaped {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "child_process_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("BSP_TEST_ROLE", role)
    .env("IPL_SERVER", registry.address().to_string())
    .env("IPL_POOL", pool)
    .env("IPL_POOL_SIZE", size.to_string())
    .env("IPL_RANK", rank.to_string())
    .env("IPL_SECRET", "bsp-processes")
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    if let Some(d) = driver {
        c.env("IPL_DRIVER", d);
    }
    let mut child = c.spawn().unwrap();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = lines.send((rank, line));
        }
    });
    Reaped(Some(child))
}

/// Waits for `child` to exit within `limit` (killing it if it does not); its exit code.
fn wait_exit(child: &mut Reaped, limit: Duration) -> i32 {
    let mut c = child.0.take().expect("running");
    let pid = c.id() as i32;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(c.wait().map(|s| s.code().unwrap_or(-1)));
    });
    match rx.recv_timeout(limit) {
        Ok(code) => code.unwrap(),
        Err(_) => {
            // SAFETY: kill(2) on a child that has not been reaped (its waiter is still waiting).
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            panic!("child {pid} did not exit within {limit:?}");
        }
    }
}

fn run_program(role: &str, size: u32) {
    run_program_on(role, size, None)
}

fn run_program_on(role: &str, size: u32, driver: Option<&str>) {
    let registry = RegistryServer::start("127.0.0.1:0", "bsp-processes").unwrap();
    let pool = format!("bsp-proc-{}-{size}", std::process::id());
    let (tx, rx) = mpsc::channel();
    let mut children: Vec<Reaped> = (0..size)
        .map(|rank| child(role, driver, &registry, &pool, size, rank, tx.clone()))
        .collect();
    drop(tx);
    let mut ok = vec![false; size as usize];
    let deadline = Instant::now() + Duration::from_secs(60);
    while ok.iter().any(|o| !o) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((rank, line)) if line == format!("program-ok {rank}") => ok[rank as usize] = true,
            Ok(_) => {}
            Err(_) => panic!("the program did not finish on every process: {ok:?}"),
        }
    }
    for c in &mut children {
        assert_eq!(wait_exit(c, Duration::from_secs(30)), 0);
    }
}

#[test]
fn two_processes_run_the_checking_program() {
    if role().is_some() {
        return;
    }
    run_program("program", 2);
}

#[test]
fn four_processes_run_the_checking_program() {
    if role().is_some() {
        return;
    }
    run_program("program", 4);
}

/// Separate processes of one host find pid 0's board through its descriptor (the threads of
/// the other tests share a process) and use it.
#[test]
fn three_processes_of_one_host_share_the_board() {
    if role().is_some() {
        return;
    }
    run_program_on("board", 3, Some("shm"));
}

#[test]
fn four_processes_serve_gets_of_peers_still_in_the_sync() {
    if role().is_some() {
        return;
    }
    run_program("gets", 4);
}

#[test]
fn three_processes_run_every_collective_and_group_small_and_large() {
    if role().is_some() {
        return;
    }
    run_program("checks", 3);
}

#[test]
fn a_killed_process_ends_sync_on_the_others_within_15s() {
    if role().is_some() {
        return;
    }
    let registry = RegistryServer::start("127.0.0.1:0", "bsp-processes").unwrap();
    let pool = format!("bsp-kill-{}", std::process::id());
    let (tx, rx) = mpsc::channel();
    let mut children: Vec<Reaped> = (1..4)
        .map(|rank| child("sync-loop", None, &registry, &pool, 4, rank, tx.clone()))
        .collect();
    drop(tx);
    let mut cfg = Config::tcp(&pool, 4, registry.address().to_string(), "bsp-processes");
    cfg.rank = Some(0);
    let mut bsp = Bsp::with_options(Ibis::join(cfg).unwrap(), opts()).unwrap();
    // Everyone is running supersteps.
    let step = |bsp: &mut Bsp| bsp.sync().and_then(|()| bsp.all_reduce(1u32, bsp::Op::Sum));
    for _ in 0..20 {
        assert_eq!(step(&mut bsp).unwrap(), 4);
    }
    children[1].kill(); // rank 2, SIGKILL: no goodbye
    let killed = Instant::now();
    let e = loop {
        if let Err(e) = step(&mut bsp) {
            break e;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "sync went on for 15 s"
        );
    };
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert!(
        matches!(
            e,
            Error::PeerGone {
                peer: 2,
                died: true,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("process 2"), "{e}");
    // The other processes report the same failure.
    let mut reported = Vec::new();
    while reported.len() < 2 {
        let left = Duration::from_secs(15).saturating_sub(killed.elapsed());
        match rx.recv_timeout(left) {
            Ok((rank, line)) if line.starts_with("sync-failed:") => {
                assert!(line.contains("process 2"), "rank {rank}: {line}");
                reported.push(rank);
            }
            Ok(_) => {}
            Err(_) => panic!("only {reported:?} reported the failure within 15 s"),
        }
    }
    reported.sort_unstable();
    assert_eq!(reported, vec![1, 3]);
    for c in children.iter_mut() {
        wait_exit(c, Duration::from_secs(10));
    }
}
