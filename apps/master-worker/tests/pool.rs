//! The protocol with nodes as threads, on the in-process driver and on tcp: request counts,
//! farm results against the sequential count, workers leaving mid-job and joining late.

mod common;

use common::{within, Net, DRIVERS, LIMIT};
use ipl::{Driver, Ibis, NodeId};
use master_worker::primes::sieve_count;
use master_worker::protocol::{request_port_type, REQUEST_PORT};
use master_worker::{
    run, run_master, run_worker, sequential, Client, Error, MasterOptions, MasterReport, Mode,
    Outcome, Task, WorkerReport,
};
use std::thread::JoinHandle;
use std::time::Duration;

type Node<T> = JoinHandle<Result<T, String>>;

/// Joins the master first (so it wins the election) and starts it on a thread.
fn start_master(net: &Net, size: Option<u32>, opts: MasterOptions) -> (NodeId, Node<MasterReport>) {
    let ibis = Ibis::join(net.config(size)).expect("master joins");
    let id = ibis.pool().elect("master").expect("elect");
    assert_eq!(id, ibis.id(), "the first node wins the election");
    let h = std::thread::spawn(move || {
        run_master(&ibis, &opts, &mut |_| {}).map_err(|e| e.to_string())
    });
    (id, h)
}

/// Starts `count` nodes running [`run`] (they become workers).
fn start_workers(net: &Net, size: Option<u32>, count: u32) -> Vec<Node<WorkerReport>> {
    (0..count)
        .map(|_| {
            let cfg = net.config(size);
            std::thread::spawn(move || {
                let ibis = Ibis::join(cfg).map_err(|e| e.to_string())?;
                let opts = MasterOptions::new(Mode::Bench {
                    duration: Duration::from_secs(1),
                });
                match run(&ibis, &opts, &mut |_| {}).map_err(|e| e.to_string())? {
                    Outcome::Worker(w) => Ok(w),
                    Outcome::Master(_) => Err("a late node won the election".into()),
                }
            })
        })
        .collect()
}

fn finish<T>(h: Node<T>, who: &str) -> T {
    h.join()
        .unwrap_or_else(|_| panic!("{who} panicked"))
        .unwrap_or_else(|e| panic!("{who} failed: {e}"))
}

fn bench(driver: Driver) {
    let net = Net::new(driver);
    let mut opts = MasterOptions::new(Mode::Bench {
        duration: Duration::from_millis(400),
    });
    opts.report_every = Duration::from_millis(100);
    let ibis = Ibis::join(net.config(Some(4))).unwrap();
    assert_eq!(ibis.pool().elect("master").unwrap(), ibis.id());
    let workers = start_workers(&net, Some(4), 3);
    let mut progress = Vec::new();
    let Outcome::Master(r) = run(&ibis, &opts, &mut |p| progress.push(*p)).unwrap() else {
        panic!("the first node is the master");
    };
    let workers: Vec<WorkerReport> = workers.into_iter().map(|h| finish(h, "worker")).collect();
    assert_eq!(r.mode, "bench");
    assert!(r.requests > 0, "{r:?}");
    assert_eq!(
        r.requests,
        workers.iter().map(|w| w.round_trips).sum::<u64>(),
        "every request the master counted was answered to a worker, and no other"
    );
    for w in &workers {
        assert!(
            w.round_trips > 0,
            "worker {} never got a reply: {r:?}",
            w.rank
        );
        assert_eq!(r.requests_per_worker.get(&w.rank), Some(&w.round_trips));
        assert_eq!(
            w.requests,
            w.round_trips + 1,
            "one extra request, answered with stop"
        );
        assert_eq!(w.jobs, 0);
    }
    assert_eq!(r.seconds, 0.4);
    assert!((r.requests_per_second - r.requests as f64 / 0.4).abs() < 1e-6);
    // Reports every 100 ms over 400 ms (fewer when the master is descheduled for longer).
    assert!(progress.len() >= 2, "{progress:?}");
    assert!(progress.windows(2).all(|p| p[0].requests <= p[1].requests));
    // One rate per report, plus possibly the last partial interval.
    assert!(r.rates.len() == progress.len() || r.rates.len() == progress.len() + 1);
    assert_eq!(r.rates[0], progress[0].requests_per_second);
    assert!(progress
        .iter()
        .all(|p| p.workers <= 3 && p.jobs_done.is_none()));
    assert!(r.unstopped.is_empty() && r.farm.is_none());
}

#[test]
fn bench_counts_every_request_on_both_drivers() {
    for d in DRIVERS {
        within(LIMIT, &format!("bench over {d:?}"), move || bench(d));
    }
}

fn farm(driver: Driver) {
    let net = Net::new(driver);
    let (n, chunk) = (100_000, 2_000);
    let (_, master) = start_master(&net, Some(4), MasterOptions::new(Mode::Farm { n, chunk }));
    let workers = start_workers(&net, Some(4), 3);
    let r = finish(master, "master");
    let workers: Vec<WorkerReport> = workers.into_iter().map(|h| finish(h, "worker")).collect();
    let f = r.farm.expect("farm report");
    assert_eq!(f.primes, sieve_count(n));
    assert_eq!(f.primes, sequential::farm(n, chunk));
    assert_eq!((f.jobs, f.reassigned, f.duplicates), (50, 0, 0));
    assert_eq!(f.jobs_per_worker.values().sum::<u64>(), 50);
    assert_eq!(workers.iter().map(|w| w.jobs).sum::<u64>(), 50);
    assert_eq!(workers.iter().map(|w| w.primes).sum::<u64>(), f.primes);
    assert_eq!(r.requests, 50);
}

#[test]
fn farm_equals_the_sequential_count_on_both_drivers() {
    for d in DRIVERS {
        within(LIMIT, &format!("farm over {d:?}"), move || farm(d));
    }
}

fn leaving_mid_job(driver: Driver) {
    let net = Net::new(driver);
    let (n, chunk) = (60_000, 2_000);
    // An open pool: the master serves whoever comes.
    let (master_id, master) = start_master(&net, None, MasterOptions::new(Mode::Farm { n, chunk }));
    let a = Ibis::join(net.config(None)).unwrap();
    // B joins now (so that it does not reuse A's rank) but starts working only after A is gone.
    let b = Ibis::join(net.config(None)).unwrap();
    let (a_rank, b_rank) = (a.id().rank(), b.id().rank());

    let mut client = Client::connect(&a, &master_id).unwrap();
    let Task::Job(first) = client.request(None).unwrap().task else {
        panic!("the only worker gets a job");
    };
    let Task::Job(held) = client.request(Some(first.run())).unwrap().task else {
        panic!("the only worker gets a second job");
    };
    assert_ne!(first.id, held.id);
    // A leaves holding `held`, without a word to the master.
    drop(client);
    a.end().unwrap();

    let b_report = within(LIMIT, "worker B", move || run_worker(&b, &master_id)).unwrap();
    let r = finish(master, "master");
    let f = r.farm.expect("farm report");
    assert_eq!(f.primes, sieve_count(n), "{f:?}");
    assert_eq!(f.reassigned, 1, "A's job went to B: {f:?}");
    assert_eq!(f.duplicates, 0);
    assert_eq!(f.jobs_per_worker.get(&a_rank), Some(&1));
    assert_eq!(f.jobs_per_worker.get(&b_rank), Some(&(f.jobs - 1)));
    assert_eq!(b_report.jobs, f.jobs - 1, "B ran every job but A's first");
}

#[test]
fn a_worker_leaving_mid_job_loses_and_duplicates_nothing() {
    for d in DRIVERS {
        within(LIMIT, &format!("leaving over {d:?}"), move || {
            leaving_mid_job(d)
        });
    }
}

fn late_worker(driver: Driver) {
    let net = Net::new(driver);
    let (n, chunk) = (60_000, 2_000);
    let (master_id, master) = start_master(&net, None, MasterOptions::new(Mode::Farm { n, chunk }));
    let a = Ibis::join(net.config(None)).unwrap();
    let a_rank = a.id().rank();
    let mut client = Client::connect(&a, &master_id).unwrap();
    let mut result = None;
    for _ in 0..3 {
        let Task::Job(j) = client.request(result.take()).unwrap().task else {
            panic!("the only worker gets jobs");
        };
        result = Some(j.run());
    }
    // A hands in its third result and stops; it stays in the pool.
    client.leave(result).unwrap();

    // B joins after the farm has started and A has stopped.
    let b = Ibis::join(net.config(None)).unwrap();
    let b_rank = b.id().rank();
    assert_ne!(a_rank, b_rank);
    let b_report = within(LIMIT, "worker B", move || run_worker(&b, &master_id)).unwrap();
    let r = finish(master, "master");
    drop(a);
    let f = r.farm.expect("farm report");
    assert_eq!(f.primes, sieve_count(n), "{f:?}");
    assert_eq!((f.reassigned, f.duplicates), (0, 0));
    assert_eq!(f.jobs_per_worker.get(&a_rank), Some(&3));
    assert_eq!(b_report.jobs, f.jobs - 3, "the late worker did the rest");
    assert_eq!(f.jobs_per_worker.get(&b_rank), Some(&(f.jobs - 3)));
}

#[test]
fn a_late_worker_gets_the_remaining_jobs_on_both_drivers() {
    for d in DRIVERS {
        within(LIMIT, &format!("late worker over {d:?}"), move || {
            late_worker(d)
        });
    }
}

#[test]
fn a_farm_without_workers_fails_naming_the_unfinished_jobs() {
    within(LIMIT, "lonely master", || {
        let net = Net::new(Driver::Inproc);
        let mut opts = MasterOptions::new(Mode::Farm {
            n: 1000,
            chunk: 100,
        });
        opts.worker_timeout = Duration::from_millis(200);
        let (_, master) = start_master(&net, None, opts);
        let e = master.join().unwrap().unwrap_err();
        assert!(e.contains("10 of 10 jobs"), "{e}");
    });
}

#[test]
fn a_worker_whose_master_leaves_gets_master_gone() {
    within(LIMIT, "orphaned worker", || {
        let net = Net::new(Driver::Tcp);
        // A master that takes the request and leaves without answering.
        let m = Ibis::join(net.config(None)).unwrap();
        let rp = m.receive_port(&request_port_type(), REQUEST_PORT).unwrap();
        let w = Ibis::join(net.config(None)).unwrap();
        let mut client = Client::connect(&w, &m.id()).unwrap();
        let leaver = std::thread::spawn(move || {
            rp.receive().unwrap().finish();
            drop(rp);
            m.end().unwrap();
        });
        match client.request(None) {
            Err(Error::MasterGone { worker, .. }) => assert_eq!(worker, w.id().rank()),
            other => panic!("expected MasterGone, got {other:?}"),
        }
        leaver.join().unwrap();
    });
}

#[test]
fn a_result_larger_than_its_jobs_range_is_ignored_and_the_job_runs_again() {
    within(LIMIT, "impossible result", || {
        let net = Net::new(Driver::Inproc);
        let (n, chunk) = (20_000, 2_000);
        let (master_id, master) =
            start_master(&net, None, MasterOptions::new(Mode::Farm { n, chunk }));
        let a = Ibis::join(net.config(None)).unwrap();
        let mut client = Client::connect(&a, &master_id).unwrap();
        let Task::Job(first) = client.request(None).unwrap().task else {
            panic!("the only worker gets a job");
        };
        // More primes than the range has numbers: a worker that misbehaves, and a count that
        // the honest result of the same job would overflow.
        let bogus = master_worker::JobResult {
            job: first.id,
            value: u64::MAX,
        };
        let Task::Job(again) = client.request(Some(bogus)).unwrap().task else {
            panic!("the only worker gets a job");
        };
        let Task::Job(held) = client.request(Some(again.run())).unwrap().task else {
            panic!("the only worker gets a job");
        };
        assert_eq!(
            again, first,
            "the job whose result was refused is handed out again"
        );
        client.leave(Some(held.run())).unwrap();

        let b = Ibis::join(net.config(None)).unwrap();
        within(LIMIT, "worker B", move || run_worker(&b, &master_id)).unwrap();
        let r = finish(master, "master");
        drop(a);
        let f = r.farm.expect("farm report");
        assert_eq!(f.primes, sieve_count(n), "{f:?}");
        assert_eq!(f.duplicates, 0, "{f:?}");
    });
}
