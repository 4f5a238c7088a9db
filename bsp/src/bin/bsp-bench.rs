//! `bsp-bench`: the bulk-synchronous layer next to OpenMPI over TCP, in one run.
//!
//! For each process count P it starts P processes of itself the way `ipl-run -n P` does (a
//! registry in this process, `IPL_*` in the environment, tcp between the processes) and
//! measures an empty superstep and an 8-byte `all_reduce`; at P = 2 also message combining:
//! one million 16-byte packets per superstep, next to the same traffic sent as one `ipl`
//! message per packet. When `mpicc` is on the PATH it writes and compiles a small C program and
//! runs it with `mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -n P` to measure
//! `MPI_Barrier` and an 8-byte `MPI_Allreduce` the same way; otherwise it says it skipped MPI.
//! Every figure is the median over repetitions within a run and then over rounds (each round
//! measures bsp and then OpenMPI, so both see the same machine load); ratios are against the
//! reference measured in the same rounds.

use bsp::{Bsp, Op};
use clap::Parser;
use ipl::{Connection, PortType};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Measure the bulk-synchronous layer against OpenMPI over TCP.
#[derive(Parser, Debug, Clone)]
#[command(name = "bsp-bench", version)]
struct Args {
    /// Process counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "2,4")]
    procs: Vec<u32>,
    /// Operations per latency repetition.
    #[arg(long, default_value_t = 2000)]
    iters: u32,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 15)]
    reps: usize,
    /// Packets per superstep in the combining measurement (P = 2).
    #[arg(long, default_value_t = 1_000_000)]
    packets: u32,
    /// Supersteps measured in the combining measurement.
    #[arg(long, default_value_t = 7)]
    combining_reps: usize,
    /// Packets sent as one ipl message each, for comparison.
    #[arg(long, default_value_t = 200_000)]
    single_messages: u32,
    /// Rounds: each round runs every measurement of bsp and then of OpenMPI, so that both see
    /// the same machine load; the median over rounds is reported, with the range.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Skip OpenMPI even when mpicc is present.
    #[arg(long)]
    no_mpi: bool,
    /// A short run for demonstrations: one round of 5 repetitions, 3 combining supersteps
    /// (overrides --rounds, --reps and --combining-reps).
    #[arg(long)]
    quick: bool,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// What rank 0 of a run reports.
#[derive(Serialize, Deserialize, Debug, Default, Clone)]
struct Figures {
    procs: u32,
    /// Empty superstep, microseconds.
    sync_us: f64,
    /// 8-byte all_reduce, microseconds.
    all_reduce_us: f64,
    /// Combined packets per second per process (P = 2).
    combined_pps: Option<f64>,
    /// Packets per second per process, one ipl message each (P = 2).
    single_pps: Option<f64>,
}

#[derive(Serialize, Debug, Default, Clone)]
/// What the MPI program reports (rank 0).
struct MpiFigures {
    barrier_us: f64,
    allreduce_us: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The 16-byte packet of the combining measurement.
#[derive(Serialize, Deserialize, Clone, Copy)]
struct Pkt {
    key: u64,
    value: f64,
}

fn latency(reps: usize, iters: u32, mut op: impl FnMut() -> bsp::Result<()>) -> bsp::Result<f64> {
    for _ in 0..iters.min(500) {
        op()?;
    }
    let mut per = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..iters {
            op()?;
        }
        per.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(iters));
    }
    Ok(median(per))
}

/// One process of a measured run.
fn worker(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let ibis = ipl::Ibis::join(ipl::Config::from_env()?)?;
    let mut bsp = Bsp::new(ibis)?;
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let mut fig = Figures {
        procs: p as u32,
        ..Figures::default()
    };
    // Every rep ends with the same barrier on all processes, so reps line up.
    fig.sync_us = latency(args.reps, args.iters, || bsp.sync())?;
    bsp.sync()?;
    let mut x = me as f64;
    fig.all_reduce_us = latency(args.reps, args.iters, || {
        x = bsp.all_reduce(x, Op::Sum)? * 0.5;
        Ok(())
    })?;
    if p == 2 {
        let other = 1 - me;
        let n = args.packets;
        let mut rates = Vec::new();
        for rep in 0..=args.combining_reps {
            bsp.sync()?;
            let t = Instant::now();
            for i in 0..n {
                bsp.send(
                    other,
                    &Pkt {
                        key: u64::from(i),
                        value: f64::from(i),
                    },
                )?;
            }
            bsp.sync()?;
            let mut check = 0u64;
            while let Some((_, pkt)) = bsp.recv::<Pkt>()? {
                check = check.wrapping_add(pkt.key ^ pkt.value.to_bits());
            }
            let secs = t.elapsed().as_secs_f64();
            let want: u64 = (0..n).fold(0u64, |c, i| {
                c.wrapping_add(u64::from(i) ^ f64::from(i).to_bits())
            });
            assert_eq!(check, want, "combined packets arrived wrong");
            if rep > 0 {
                rates.push(f64::from(n) / secs);
            }
        }
        let mine = median(rates);
        let both = bsp.all_reduce(mine, Op::Sum)?;
        fig.combined_pps = Some(both / 2.0);
        fig.single_pps = Some(single_messages(
            &mut bsp,
            args.single_messages,
            args.reps.min(5),
        )?);
    }
    if me == 0 {
        let out = std::env::var("BSP_BENCH_OUT")?;
        std::fs::write(out, serde_json::to_vec(&fig)?)?;
    }
    // Nobody leaves while another still measures.
    bsp.sync()?;
    Ok(())
}

/// The same traffic as the combining measurement, one ipl message per packet, both ways at
/// once: packets per second per process (median over `reps`).
fn single_messages(bsp: &mut Bsp, n: u32, reps: usize) -> Result<f64, Box<dyn std::error::Error>> {
    let ibis = bsp.ibis().clone();
    let other_node = ibis.pool().wait_closed()?[1 - bsp.pid()].clone();
    let ty = PortType::builder()
        .connection(Connection::ManyToOne)
        .build();
    let rp = ibis.receive_port(&ty, "bench/one-message-per-packet")?;
    let sp = ibis.send_port(&ty)?;
    sp.connect(&other_node, "bench/one-message-per-packet")?;
    let mut rates = Vec::new();
    for _ in 0..reps {
        bsp.sync()?;
        let t = Instant::now();
        let secs = std::thread::scope(|s| -> Result<f64, ipl::Error> {
            let reader = s.spawn(|| -> Result<u64, ipl::Error> {
                let mut check = 0u64;
                for _ in 0..n {
                    let mut m = rp.receive()?;
                    let pkt: Pkt = m.read()?;
                    m.finish();
                    check = check.wrapping_add(pkt.key);
                }
                Ok(check)
            });
            for i in 0..n {
                let mut w = sp.message();
                w.write(&Pkt {
                    key: u64::from(i),
                    value: f64::from(i),
                })?;
                w.finish()?;
            }
            let check = reader.join().expect("reader thread")?;
            assert_eq!(check, (0..u64::from(n)).sum::<u64>());
            Ok(t.elapsed().as_secs_f64())
        })?;
        rates.push(f64::from(n) / secs);
    }
    let mine = median(rates);
    Ok(bsp.all_reduce(mine, Op::Sum)? / 2.0)
}

const MPI_PROGRAM: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int iters = atoi(argv[1]), reps = atoi(argv[2]);
    double *tb = malloc(reps * sizeof(double)), *ta = malloc(reps * sizeof(double));
    int warm = iters < 500 ? iters : 500;
    for (int i = 0; i < warm; i++) MPI_Barrier(MPI_COMM_WORLD);
    for (int r = 0; r < reps; r++) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) MPI_Barrier(MPI_COMM_WORLD);
        tb[r] = (MPI_Wtime() - t0) * 1e6 / iters;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double x = rank, y;
    for (int i = 0; i < warm; i++) {
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        x = y * 0.5;
    }
    for (int r = 0; r < reps; r++) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            x = y * 0.5;
        }
        ta[r] = (MPI_Wtime() - t0) * 1e6 / iters;
    }
    qsort(tb, reps, sizeof(double), cmp);
    qsort(ta, reps, sizeof(double), cmp);
    if (rank == 0) printf("barrier_us %.4f\nallreduce_us %.4f\n", tb[reps / 2], ta[reps / 2]);
    MPI_Finalize();
    return 0;
}
"#;

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// Compiles the MPI program into `dir`; None (with the reason printed) when it cannot.
fn build_mpi(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("bsp_bench_mpi.c");
    let exe = dir.join("bsp_bench_mpi");
    if let Err(e) = std::fs::write(&src, MPI_PROGRAM) {
        println!("skipped MPI: cannot write {}: {e}", src.display());
        return None;
    }
    match Command::new("mpicc")
        .arg("-O2")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
    {
        Ok(s) if s.success() => Some(exe),
        Ok(s) => {
            println!("skipped MPI: mpicc failed ({s})");
            None
        }
        Err(e) => {
            println!("skipped MPI: cannot run mpicc: {e}");
            None
        }
    }
}

fn run_mpi(exe: &Path, p: u32, args: &Args) -> Option<MpiFigures> {
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--mca",
            "btl",
            "tcp,self",
            "-n",
        ])
        .arg(p.to_string())
        .arg(exe)
        .arg(args.iters.to_string())
        .arg(args.reps.to_string())
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            println!(
                "MPI run at P = {p} failed ({}): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            return None;
        }
        Err(e) => {
            println!("cannot run mpirun: {e}");
            return None;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    Some(MpiFigures {
        barrier_us: value("barrier_us")?,
        allreduce_us: value("allreduce_us")?,
    })
}

/// Starts P processes of this program (what `ipl-run -n P` does) and returns rank 0's figures.
fn run_bsp(p: u32, dir: &Path) -> Result<Figures, Box<dyn std::error::Error>> {
    let out = dir.join(format!("bsp-{p}.json"));
    let mut command: Vec<String> = std::env::args().collect();
    command[0] = std::env::current_exe()?.to_string_lossy().into_owned();
    let launch = ipl::launch::Launch {
        nodes: p,
        clusters: 1,
        wan_latency: None,
        wan_bandwidth: None,
        command,
        env: vec![
            ("BSP_BENCH_ROLE".into(), "worker".into()),
            ("BSP_BENCH_OUT".into(), out.to_string_lossy().into_owned()),
        ],
        prefix_output: true,
    };
    let code = ipl::launch::run(&launch)?;
    if code != 0 {
        return Err(format!("the bsp run at P = {p} exited with status {code}").into());
    }
    Ok(serde_json::from_slice(&std::fs::read(&out)?)?)
}

fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut args = Args::parse();
    if args.quick {
        args.rounds = 1;
        args.reps = 5;
        args.combining_reps = 3;
    }
    if std::env::var("BSP_BENCH_ROLE").as_deref() == Ok("worker") {
        return worker(&args);
    }
    let dir = std::env::temp_dir().join(format!("bsp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mpi = if args.no_mpi {
        println!("skipped MPI: --no-mpi");
        None
    } else if on_path("mpicc") && on_path("mpirun") {
        build_mpi(&dir)
    } else {
        println!("skipped MPI: mpicc or mpirun not found on PATH");
        None
    };
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "bsp-bench: {} cores; {} rounds, each the median of {} repetitions of {} operations; \
         processes over tcp on this host{}",
        cores,
        args.rounds.max(1),
        args.reps,
        args.iters,
        if args.procs.iter().any(|&p| p as usize > cores) {
            " (runs with more processes than cores are oversubscribed)"
        } else {
            ""
        }
    );
    // results[i]: every round's figures for args.procs[i].
    let mut results: Vec<(Vec<Figures>, Vec<MpiFigures>)> = args
        .procs
        .iter()
        .map(|_| (Vec::new(), Vec::new()))
        .collect();
    for round in 0..args.rounds.max(1) {
        for (i, &p) in args.procs.iter().enumerate() {
            let fig = run_bsp(p, &dir)?;
            let m = mpi.as_ref().and_then(|exe| run_mpi(exe, p, &args));
            println!(
                "round {}, P = {p}: bsp superstep {:.2} us, all_reduce {:.2} us{}{}",
                round + 1,
                fig.sync_us,
                fig.all_reduce_us,
                m.as_ref().map_or(String::new(), |m| format!(
                    "; MPI barrier {:.2} us, allreduce {:.2} us",
                    m.barrier_us, m.allreduce_us
                )),
                fig.combined_pps.map_or(String::new(), |c| format!(
                    "; combining {:.1} M packets/s",
                    c / 1e6
                )),
            );
            results[i].0.push(fig);
            if let Some(m) = m {
                results[i].1.push(m);
            }
        }
    }
    let stat = |v: Vec<f64>| -> Option<(f64, f64, f64)> {
        if v.is_empty() {
            return None;
        }
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some((median(v), lo, hi))
    };
    let show = |v: Option<(f64, f64, f64)>| {
        v.map_or("skipped".to_string(), |(m, lo, hi)| {
            format!("{m:.2} ({lo:.1}-{hi:.1})")
        })
    };
    println!();
    println!(
        "{:<34} {:>3} {:>22} {:>22} {:>7}",
        "operation (median of rounds, range)", "P", "bsp (us)", "OpenMPI/TCP (us)", "ratio"
    );
    let mut summary = Vec::new();
    let mut combining = Vec::new();
    for (i, (figs, mpis)) in results.iter().enumerate() {
        let p = args.procs[i];
        let bs = stat(figs.iter().map(|f| f.sync_us).collect());
        let ba = stat(figs.iter().map(|f| f.all_reduce_us).collect());
        let mb = stat(mpis.iter().map(|m| m.barrier_us).collect());
        let ma = stat(mpis.iter().map(|m| m.allreduce_us).collect());
        for (name, b, m) in [
            ("empty superstep vs MPI_Barrier", bs, mb),
            ("8-byte all_reduce vs MPI_Allreduce", ba, ma),
        ] {
            println!(
                "{:<34} {:>3} {:>22} {:>22} {:>7}",
                name,
                p,
                show(b),
                show(m),
                ratio(b.map_or(0.0, |b| b.0), m.map(|m| m.0))
            );
        }
        let combined = stat(figs.iter().filter_map(|f| f.combined_pps).collect());
        let single = stat(figs.iter().filter_map(|f| f.single_pps).collect());
        summary.push(serde_json::json!({
            "procs": p,
            "bsp_superstep_us": bs.map(|s| s.0),
            "bsp_all_reduce_us": ba.map(|s| s.0),
            "mpi_barrier_us": mb.map(|s| s.0),
            "mpi_allreduce_us": ma.map(|s| s.0),
            "combined_packets_per_s": combined.map(|s| s.0),
            "single_message_packets_per_s": single.map(|s| s.0),
            "rounds": figs,
            "mpi_rounds": mpis,
        }));
        if let (Some(c), Some(s)) = (combined, single) {
            combining.push((p, c, s));
        }
    }
    for (p, c, s) in combining {
        println!();
        println!(
            "combining at P = {p}, {} 16-byte packets per superstep: {:.1} M packets/s per \
             process (rounds {:.1}-{:.1}; target >= 20 M)",
            args.packets,
            c.0 / 1e6,
            c.1 / 1e6,
            c.2 / 1e6
        );
        println!(
            "the same traffic as one ipl message per packet ({} packets each way): {:.2} M \
             packets/s per process; combining is {:.0}x faster",
            args.single_messages,
            s.0 / 1e6,
            c.0 / s.0
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&summary)?)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
