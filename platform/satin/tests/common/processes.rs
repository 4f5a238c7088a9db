//! Pools of real processes for the tests: the test binary re-run with a role, its members
//! joining a tcp pool whose registry runs in the test process. Every child is killed when its
//! test ends, however it ends, and every wait is bounded.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use ipl::RegistryServer;

/// The secret of every test pool.
pub const SECRET: &str = "satin-processes";

/// Kills the child when the test ends, unless it was waited for.
pub struct Reaped(pub Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Reaped {
    /// Sends `signal` to the child, if it still runs.
    pub fn signal(&self, signal: i32) {
        if let Some(c) = &self.0 {
            // SAFETY: kill(2) on our child, which has not been reaped (we hold it).
            unsafe {
                libc::kill(c.id() as i32, signal);
            }
        }
    }

    /// Waits for the child to exit before `deadline` and returns its exit code (-1 for a
    /// signal). Kills it and fails the test if it does not exit.
    pub fn wait_exit(&mut self, deadline: Instant) -> i32 {
        let limit = deadline.saturating_duration_since(Instant::now());
        let mut c = self.0.take().expect("running");
        let pid = c.id() as i32;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(c.wait().map(|s| s.code().unwrap_or(-1)));
        });
        match rx.recv_timeout(limit) {
            Ok(code) => code.unwrap(),
            Err(_) => {
                // SAFETY: kill(2) on our child, which has not been reaped yet (its waiter waits).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
                panic!("child {pid} did not exit within {limit:?}");
            }
        }
    }
}

/// The role this process plays, if it is a child.
pub fn role() -> Option<String> {
    std::env::var("SATIN_TEST_ROLE").ok()
}

/// A pool name no other test of this process uses.
pub fn unique_pool(what: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "satin-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A pool of processes: the registry, the children (by slot: the order they were started in)
/// and the lines they print, with their slot.
pub struct Processes {
    pub registry: RegistryServer,
    pub pool: String,
    pub children: Vec<Reaped>,
    lines_tx: Sender<(usize, String)>,
    pub lines: Receiver<(usize, String)>,
    /// Lines read and handed back ([`Processes::put_back`]), read again before new ones.
    again: VecDeque<(usize, String)>,
    /// Every line seen so far, for failure messages.
    pub seen: Vec<(usize, String)>,
}

impl Processes {
    /// A new pool named after `what`, with no processes yet.
    pub fn new(what: &str) -> Processes {
        let registry = RegistryServer::start("127.0.0.1:0", SECRET).expect("registry");
        let (lines_tx, lines) = mpsc::channel();
        Processes {
            registry,
            pool: unique_pool(what),
            children: Vec::new(),
            lines_tx,
            lines,
            again: VecDeque::new(),
            seen: Vec::new(),
        }
    }

    /// Starts this test binary as a child running `test` (the test function that holds the
    /// child entry point) with `env`; `size` and `rank` make it a member of the closed pool,
    /// `None` a node joining it later. Returns its slot.
    pub fn start(
        &mut self,
        test: &str,
        size: Option<u32>,
        rank: Option<u32>,
        env: &[(&str, String)],
    ) -> usize {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env("IPL_SERVER", self.registry.address().to_string())
            .env("IPL_POOL", &self.pool)
            .env("IPL_SECRET", SECRET)
            .env_remove("IPL_POOL_SIZE")
            .env_remove("IPL_RANK")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        match size {
            Some(size) => c.env("IPL_POOL_SIZE", size.to_string()),
            None => c.env("IPL_JOIN_RUNNING", "1"),
        };
        if let Some(rank) = rank {
            c.env("IPL_RANK", rank.to_string());
        }
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let slot = self.children.len();
        let tx = self.lines_tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send((slot, line));
            }
        });
        self.children.push(Reaped(Some(child)));
        slot
    }

    /// The next line of any child, before `deadline`; fails the test otherwise.
    pub fn next_line(&mut self, deadline: Instant, waiting_for: &str) -> (usize, String) {
        if let Some(l) = self.again.pop_front() {
            return l;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(l) => {
                self.seen.push(l.clone());
                l
            }
            Err(_) => panic!(
                "no line within the time limit while waiting for {waiting_for}; lines so far: {:#?}",
                self.seen
            ),
        }
    }

    /// Hands `lines`, read earlier, back: [`Processes::next_line`] gives them again, in this
    /// order, before any new line.
    pub fn put_back(&mut self, lines: Vec<(usize, String)>) {
        self.again.extend(lines);
    }

    /// Reads lines until `pick` returns something for one, before `deadline`.
    pub fn until<R>(
        &mut self,
        deadline: Instant,
        waiting_for: &str,
        mut pick: impl FnMut(usize, &str) -> Option<R>,
    ) -> R {
        loop {
            let (slot, line) = self.next_line(deadline, waiting_for);
            if let Some(r) = pick(slot, &line) {
                return r;
            }
        }
    }
}

/// Seconds since `t`, for messages.
pub fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}
