//! A traced run's trace grows with its supersteps, not with the packets they carry: the same
//! program with 1 and with 2000 packets per superstep writes the same events.
//!
//! Each traced run happens in a child process (this test binary run again), since a process
//! has one trace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CHILD: &str = "BSP_TRACE_SIZE_CHILD";
const TEST: &str = "trace_grows_with_supersteps_not_packets";

/// In the child: `steps` supersteps of `packets` packets to the other process, traced to `dir`.
fn child(steps: usize, packets: usize, dir: &Path) {
    let _trace = ipl::trace::init("warn", Some(dir)).expect("trace");
    bsp::run_local(2, |bsp| {
        let other = 1 - bsp.pid();
        for _ in 0..steps {
            for k in 0..packets {
                bsp.send(other, &(k as u64))?;
            }
            bsp.sync()?;
            let mut n = 0;
            while bsp.recv::<u64>()?.is_some() {
                n += 1;
            }
            assert_eq!(n, packets);
        }
        Ok(())
    })
    .expect("run");
}

/// Runs the child and returns the [`events`] of its trace file, read before the directory that
/// holds it is removed.
fn traced(steps: usize, packets: usize, name: &str) -> (BTreeMap<String, usize>, u64) {
    let tmp = testkit::scratch_dir(&format!("bsp-trace-size-{name}"));
    let dir = tmp.path();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, format!("{steps},{packets},{}", dir.display()))
        .env_remove("IPL_TRACE");
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
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    events(&files[0])
}

/// Events per name, and the file's size.
fn events(file: &Path) -> (BTreeMap<String, usize>, u64) {
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).expect("valid JSON");
    let mut counts = BTreeMap::new();
    for e in doc.as_array().unwrap() {
        *counts
            .entry(e["name"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    (counts, std::fs::metadata(file).unwrap().len())
}

#[test]
fn trace_grows_with_supersteps_not_packets() {
    if let Ok(spec) = std::env::var(CHILD) {
        let mut it = spec.splitn(3, ',');
        let steps = it.next().unwrap().parse().unwrap();
        let packets = it.next().unwrap().parse().unwrap();
        child(steps, packets, Path::new(it.next().unwrap()));
        return;
    }
    let (few, few_size) = traced(20, 1, "few");
    let (many, many_size) = traced(20, 2000, "many");
    let (longer, _) = traced(40, 1, "longer");
    let bsp = |c: &BTreeMap<String, usize>| -> BTreeMap<String, usize> {
        c.iter()
            .filter(|(k, _)| k.starts_with("bsp."))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    // Two processes, 20 syncs each, an event per sync.
    assert_eq!(bsp(&few)["bsp.superstep"], 2 * 20, "{few:?}");
    assert_eq!(bsp(&few), bsp(&many), "packets add no events");
    // Outside bsp, what a run records (thread names, connection events) depends on timing by
    // an event or two; 2000 packets a superstep would add tens of thousands.
    let total = |c: &BTreeMap<String, usize>| c.values().sum::<usize>() as i64;
    assert!(
        (total(&many) - total(&few)).abs() <= 4,
        "1 packet per superstep: {few:?}\n2000 packets per superstep: {many:?}"
    );
    // Only the figures in the args grow (bytes: "20" against "40000").
    assert!(
        (many_size as f64) < few_size as f64 * 1.05,
        "{few_size} bytes with 1 packet per superstep, {many_size} with 2000"
    );
    assert_eq!(
        bsp(&longer)["bsp.superstep"],
        2 * bsp(&few)["bsp.superstep"]
    );
}
