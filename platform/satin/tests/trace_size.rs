//! A traced run's trace grows with steals and time, not with spawns: fib(26) spawns about 600
//! times as often as fib(12) and writes a trace of about the same size.
//!
//! Each traced run happens in a child process (this test binary run again), since a process
//! has one trace.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CHILD: &str = "SATIN_TRACE_SIZE_CHILD";
const TEST: &str = "trace_does_not_grow_with_spawns";

#[derive(serde::Serialize, serde::Deserialize)]
struct Fib(u32);

impl satin::Task for Fib {
    type Output = u64;
    fn run(self, cx: &mut satin::Context) -> u64 {
        if self.0 < 2 {
            return u64::from(self.0);
        }
        let a = cx.spawn(Fib(self.0 - 1));
        let b = cx.spawn(Fib(self.0 - 2));
        cx.sync();
        a.take() + b.take()
    }
}
satin::register!(Fib);

/// In the child: fib(n) on one worker, traced to `dir`; prints the spawns and the run's time.
fn child(n: u32, dir: &Path) {
    let _trace = ipl::trace::init("warn", Some(dir)).expect("trace");
    let rt = satin::Runtime::local().threads(1);
    let start = Instant::now();
    rt.run(Fib(n)).expect("run");
    let took = start.elapsed();
    println!("spawns {} ms {}", rt.stats().spawns, took.as_millis());
}

/// Runs the child; returns the directory of its trace (removed when dropped), its trace file,
/// its spawns and its run's milliseconds.
fn traced(n: u32) -> (testkit::TempDir, PathBuf, u64, u64) {
    let tmp = testkit::scratch_dir(&format!("satin-trace-size-{n}"));
    let dir = tmp.path();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, format!("{n},{}", dir.display()))
        .env_remove("IPL_TRACE")
        .stdout(std::process::Stdio::piped());
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut child = cmd.spawn().unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the traced child did not finish in time");
        }
        std::thread::park_timeout(Duration::from_millis(20));
    };
    assert!(status.success());
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    // The test runner may print its own words before ours on the line.
    let at = out.rfind("spawns ").expect("the child's figures");
    let words: Vec<&str> = out[at..].split_whitespace().collect();
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    (
        tmp,
        files.into_iter().next().unwrap(),
        words[1].parse().unwrap(),
        words[3].parse().unwrap(),
    )
}

/// The satin events of a trace file (each event is one line of the file).
fn satin_events(file: &Path) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.trim_end().ends_with(']'), "a finished trace");
    text.lines()
        .filter(|l| l.contains("\"cat\":\"ibis::satin\""))
        .count()
}

#[test]
fn trace_does_not_grow_with_spawns() {
    if let Ok(spec) = std::env::var(CHILD) {
        let (n, dir) = spec.split_once(',').unwrap();
        child(n.parse().unwrap(), Path::new(dir));
        return;
    }
    let (_small_dir, small, small_spawns, _) = traced(12);
    let (_big_dir, big, big_spawns, big_ms) = traced(26);
    assert!(
        big_spawns > 500 * small_spawns,
        "{small_spawns} and {big_spawns} spawns"
    );
    let (small_events, big_events) = (satin_events(&small), satin_events(&big));
    // One worker steals nothing; the bigger run may add a count per 10 ms interval it lasts,
    // and an idle period at each end.
    assert!(
        big_events <= small_events + (big_ms / 10) as usize + 4,
        "{small_events} events for {small_spawns} spawns, {big_events} for {big_spawns} \
         spawns in {big_ms} ms"
    );
    assert!(
        big_events < 1000,
        "{big_events} events for {big_spawns} spawns"
    );
}
