//! The OpenMPI side: a small C program, compiled with `mpicc` and run with `mpirun --mca btl
//! vader,self` (OpenMPI's shared-memory transport, the reference of processes on one host),
//! that measures the same operations the same way (medians of repetitions, the same warm-up),
//! so that each figure has its reference from the same run.

use crate::{Args, Timing, COLLECTIVES, SIZES};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAM: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int P, rank;
static double *sbuf, *rbuf;
static int *scounts, *sdispls, *rcounts, *rdispls;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One operation: 0 barrier, 1 allreduce of n, then the collectives in bsp-bench's order. */
static void run(int op, int n) {
    switch (op) {
    case 0: MPI_Barrier(MPI_COMM_WORLD); break;
    case 1: MPI_Allreduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
    case 2: MPI_Scatter(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, 0, MPI_COMM_WORLD); break;
    case 3: MPI_Allgather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, MPI_COMM_WORLD); break;
    case 4: MPI_Scan(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
    case 5: MPI_Exscan(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
    case 6: MPI_Reduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD); break;
    case 7: MPI_Reduce_scatter_block(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
    case 8: /* all_to_all, and all_to_all_into (9): both into the caller's buffer here */
    case 9:
        for (int d = 0; d < P; d++) {
            scounts[d] = rcounts[d] = n;
            sdispls[d] = rdispls[d] = d * n;
        }
        MPI_Alltoallv(sbuf, scounts, sdispls, MPI_DOUBLE, rbuf, rcounts, rdispls, MPI_DOUBLE,
                      MPI_COMM_WORLD);
        break;
    }
}

/* Each call timed on its own between barriers: the median over reps of the mean over iters
   calls, averaged over the processes (as bsp-bench's per_call). */
static double per_call(int op, int n, int iters, int reps) {
    double *t = malloc(reps * sizeof(double));
    int warm = iters < 50 ? iters : 50;
    for (int i = 0; i < warm; i++) { run(op, n); MPI_Barrier(MPI_COMM_WORLD); }
    for (int r = 0; r < reps; r++) {
        double total = 0;
        for (int i = 0; i < iters; i++) {
            double t0 = MPI_Wtime();
            run(op, n);
            total += MPI_Wtime() - t0;
            MPI_Barrier(MPI_COMM_WORLD);
        }
        t[r] = total * 1e6 / iters;
    }
    qsort(t, reps, sizeof(double), cmp);
    double m = t[reps / 2], sum;
    free(t);
    MPI_Allreduce(&m, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / P;
}

/* Median over reps of the microseconds per operation of iters operations back to back. */
static double timed(int op, int n, int iters, int reps) {
    double *t = malloc(reps * sizeof(double));
    int warm = iters < 500 ? iters : 500;
    for (int i = 0; i < warm; i++) run(op, n);
    for (int r = 0; r < reps; r++) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) run(op, n);
        t[r] = (MPI_Wtime() - t0) * 1e6 / iters;
    }
    qsort(t, reps, sizeof(double), cmp);
    double m = t[reps / 2];
    free(t);
    MPI_Barrier(MPI_COMM_WORLD);
    return m;
}

/* bspbench's DAXPY rate, flop/s. */
static double daxpy(int n, int iters) {
    double *x = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double)),
           *z = malloc(n * sizeof(double));
    for (int i = 0; i < n; i++) x[i] = y[i] = z[i] = i;
    double alpha = 1.0 / 3.0, beta = 4.0 / 9.0;
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; it++) {
        for (int i = 0; i < n; i++) y[i] += alpha * x[i];
        for (int i = 0; i < n; i++) z[i] -= beta * x[i];
        __asm__ __volatile__("" : : "g"(y), "g"(z) : "memory");
    }
    double t = MPI_Wtime() - t0;
    if (y[n - 1] + z[n - 1] == 12345.678) printf("fool\n");
    free(x); free(y); free(z);
    return 4.0 * n * iters / (t > 1e-9 ? t : 1e-9);
}

/* Writes the values bsp-bench's processes send (see `filled` there). A zeroed buffer never
   written is backed by the kernel's one shared zero page: a peer's single copy out of it would
   read the same 4 KiB, cached, over and over, which no program's data allows. */
static void fill(double *buf, size_t n) {
    for (size_t i = 0; i < n; i++) buf[i] = (double)(i % 1000) + 1.0;
}

static int dest_of(int s, int i) { return P == 1 ? 0 : (s + 1 + i % (P - 1)) % P; }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (argc > 1 && strcmp(argv[1], "lat") == 0 && argc == 8) {
        int iters = atoi(argv[2]), coll = atoi(argv[3]), big = atoi(argv[4]);
        int reps = atoi(argv[5]), small = atoi(argv[6]) / 8, large = atoi(argv[7]) / 8;
        size_t most = (size_t)P * (size_t)large;
        sbuf = calloc(most, sizeof(double));
        rbuf = calloc(most, sizeof(double));
        fill(sbuf, most);
        fill(rbuf, most);
        scounts = malloc(P * sizeof(int)); sdispls = malloc(P * sizeof(int));
        rcounts = malloc(P * sizeof(int)); rdispls = malloc(P * sizeof(int));
        /* Untimed, as many barriers as one measurement makes, as bsp-bench settles before its
           first superstep. */
        for (long i = 0; i < (long)iters * reps; i++) MPI_Barrier(MPI_COMM_WORLD);
        double b = timed(0, 0, iters, reps);
        double a = timed(1, 1, iters, reps);
        if (rank == 0) printf("barrier_us %.4f\nallreduce_us %.4f\n", b, a);
        int sizes[2] = {small, large};
        for (int k = 0; k < 2; k++)
            for (int op = 2; op <= 9; op++) {
                double us = per_call(op, sizes[k], k == 0 ? coll : big, reps);
                if (rank == 0) printf("coll %d %d %.4f\n", op - 2, sizes[k] * 8, us);
            }
    } else if (argc > 1 && strcmp(argv[1], "probe") == 0 && argc == 4) {
        int niters = atoi(argv[2]), maxh = atoi(argv[3]);
        double r = daxpy(1024, niters), sum;
        MPI_Allreduce(&r, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) printf("r %.1f\n", sum / P);
        sbuf = calloc(maxh + 1, sizeof(double));
        rbuf = calloc(maxh * P + 1, sizeof(double));
        fill(sbuf, maxh + 1);
        fill(rbuf, maxh * P + 1);
        scounts = malloc(P * sizeof(int)); sdispls = malloc(P * sizeof(int));
        rcounts = malloc(P * sizeof(int)); rdispls = malloc(P * sizeof(int));
        for (int variant = 0; variant < 2; variant++)
            for (int h = 0; h <= maxh; h++) {
                for (int d = 0; d < P; d++) scounts[d] = rcounts[d] = 0;
                for (int i = 0; i < h; i++) scounts[dest_of(rank, i)]++;
                for (int s = 0; s < P; s++)
                    for (int i = 0; i < h; i++)
                        if (dest_of(s, i) == rank) rcounts[s]++;
                sdispls[0] = rdispls[0] = 0;
                for (int d = 1; d < P; d++) {
                    sdispls[d] = sdispls[d - 1] + scounts[d - 1];
                    rdispls[d] = rdispls[d - 1] + rcounts[d - 1];
                }
                int *sc = malloc(P * sizeof(int)), *rc = malloc(P * sizeof(int));
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = 0;
                /* Iteration -1 is an untimed warm-up, as in bsp-bench's probe. */
                for (int it = -1; it < niters; it++) {
                    if (it == 0) t0 = MPI_Wtime();
                    /* Variant 0 learns the counts first, as a BSP superstep does. */
                    if (variant == 0) {
                        memcpy(sc, scounts, P * sizeof(int));
                        MPI_Alltoall(sc, 1, MPI_INT, rc, 1, MPI_INT, MPI_COMM_WORLD);
                    }
                    MPI_Alltoallv(sbuf, scounts, sdispls, MPI_DOUBLE, rbuf,
                                  variant == 0 ? rc : rcounts, rdispls, MPI_DOUBLE,
                                  MPI_COMM_WORLD);
                }
                double t = (MPI_Wtime() - t0) / niters;
                free(sc); free(rc);
                if (rank == 0) printf("t%d %d %.9f\n", variant, h, t);
            }
    } else if (rank == 0) {
        fprintf(stderr, "usage: lat ITERS COLL_ITERS BIG_ITERS REPS SMALL LARGE | probe NITERS MAXH\n");
    }
    MPI_Finalize();
    return 0;
}
"#;

/// What the MPI program reports (rank 0) in a latency run.
#[derive(Serialize, Debug, Default, Clone)]
pub struct MpiFigures {
    pub barrier_us: f64,
    pub allreduce_us: f64,
    pub collectives: Vec<Timing>,
}

/// What the MPI program reports in a probe run: the rate and the times of h-relations, with
/// the counts exchanged first (`t_counts`) and known in advance (`t_known`).
#[derive(Serialize, Debug, Default, Clone)]
pub struct MpiProbe {
    pub r: f64,
    pub t_counts: Vec<f64>,
    pub t_known: Vec<f64>,
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// Compiles the MPI program into `dir`; `Err(why)` when it cannot (no mpicc, a failed build).
pub fn build(dir: &Path) -> Result<PathBuf, String> {
    if !(on_path("mpicc") && on_path("mpirun")) {
        return Err("mpicc or mpirun not found on PATH".into());
    }
    let src = dir.join("bsp_bench_mpi.c");
    let exe = dir.join("bsp_bench_mpi");
    std::fs::write(&src, PROGRAM).map_err(|e| format!("cannot write {}: {e}", src.display()))?;
    match Command::new("mpicc")
        .arg("-O2")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
    {
        Ok(s) if s.success() => Ok(exe),
        Ok(s) => Err(format!("mpicc failed ({s})")),
        Err(e) => Err(format!("cannot run mpicc: {e}")),
    }
}

/// Runs the program on `p` processes with `args`; its standard output, or `None` (with the
/// reason printed) when the run failed.
fn run(exe: &Path, p: u32, args: &[String]) -> Option<String> {
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--mca",
            "btl",
            "vader,self",
            "-n",
        ])
        .arg(p.to_string())
        .arg(exe)
        .args(args)
        .output();
    match out {
        Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => {
            println!(
                "MPI run at P = {p} failed ({}): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            None
        }
        Err(e) => {
            println!("cannot run mpirun: {e}");
            None
        }
    }
}

/// The latency run: barrier, 8-byte allreduce and every collective at both sizes.
pub fn latency(exe: &Path, p: u32, args: &Args) -> Option<MpiFigures> {
    let text = run(
        exe,
        p,
        &[
            "lat".into(),
            args.iters.to_string(),
            args.coll_iters.to_string(),
            args.big_iters.to_string(),
            args.reps.to_string(),
            SIZES[0].to_string(),
            SIZES[1].to_string(),
        ],
    )?;
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let mut collectives = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let ["coll", op, bytes, us] = f[..] {
            let (Ok(op), Ok(bytes), Ok(us)) = (op.parse::<usize>(), bytes.parse(), us.parse())
            else {
                continue;
            };
            if let Some((name, _)) = COLLECTIVES.get(op) {
                collectives.push(Timing {
                    name: name.to_string(),
                    bytes,
                    us,
                });
            }
        }
    }
    Some(MpiFigures {
        barrier_us: value("barrier_us")?,
        allreduce_us: value("allreduce_us")?,
        collectives,
    })
}

/// The probe run: `bspbench`'s measurement with `MPI_Alltoallv` for the h-relations.
pub fn probe(exe: &Path, p: u32, niters: u32, max_h: usize) -> Option<MpiProbe> {
    let text = run(
        exe,
        p,
        &["probe".into(), niters.to_string(), max_h.to_string()],
    )?;
    let mut fig = MpiProbe {
        t_counts: vec![f64::NAN; max_h + 1],
        t_known: vec![f64::NAN; max_h + 1],
        ..MpiProbe::default()
    };
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f[..] {
            ["r", r] => fig.r = r.parse().ok()?,
            [variant @ ("t0" | "t1"), h, t] => {
                let (h, t): (usize, f64) = (h.parse().ok()?, t.parse().ok()?);
                let list = if variant == "t0" {
                    &mut fig.t_counts
                } else {
                    &mut fig.t_known
                };
                *list.get_mut(h)? = t;
            }
            _ => {}
        }
    }
    let complete = |t: &[f64]| t.iter().all(|x| x.is_finite());
    (fig.r > 0.0 && complete(&fig.t_counts) && complete(&fig.t_known)).then_some(fig)
}
