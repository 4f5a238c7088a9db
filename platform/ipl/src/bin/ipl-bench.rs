//! `ipl-bench`: the port library next to raw sockets and other serializers, in one run.
//!
//! Prints 1-byte round-trip latency (ipl over tcp, a raw busy-polling socket pair, a raw
//! blocking socket pair), acknowledged one-way throughput of 100 KB messages (ipl `f64` slices,
//! raw TCP byte buffers), and serialization throughput for a 100 KB `f64` slice and the 1023-node
//! binary tree of four ints per node (ipl, postcard, bitcode with serde; for the slice also
//! bitcode's derive mode, which cannot encode the recursive tree). Every
//! figure is a median over repetitions; ratios against the reference measured in the same run
//! are printed next to each target.

use clap::Parser;
use hdrhistogram::Histogram;
use ipl::{Config, Connection, Ibis, PortType, ReadMessage, RegistryServer, WriteMessage};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Measure the port library against raw sockets and other serializers.
#[derive(Parser, Debug)]
#[command(name = "ipl-bench", version)]
struct Args {
    /// Round trips per latency measurement.
    #[arg(long, default_value_t = 20_000)]
    round_trips: u32,
    /// 100 KB messages per throughput round.
    #[arg(long, default_value_t = 2000)]
    messages: u32,
    /// Repetitions of each throughput and serialization measurement (the median is reported).
    #[arg(long, default_value_t = 7)]
    repeat: usize,
    /// Which parts to run: any of latency, throughput, serialization (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "latency,throughput,serialization"
    )]
    only: Vec<Part>,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

const KB100: usize = 102_400;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Latency,
    Throughput,
    Serialization,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("valid bounds")
}

/// Two ipl nodes (threads of this process) over tcp, each given its node handle and the pool.
fn ipl_pair<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce(Ibis, Vec<ipl::NodeId>) -> RA + Send,
    B: FnOnce(Ibis, Vec<ipl::NodeId>) -> RB + Send,
    RA: Send,
    RB: Send,
{
    let reg = RegistryServer::start("127.0.0.1:0", "bench").expect("registry");
    let pool = format!("bench-{}-{}", std::process::id(), rand_id());
    let cfg = |rank| {
        let mut c = Config::tcp(&pool, 2, reg.address().to_string(), "bench");
        c.rank = Some(rank);
        c
    };
    std::thread::scope(|s| {
        let hb = s.spawn(|| {
            let ibis = Ibis::join(cfg(1)).expect("join");
            let all = ibis.pool().wait_closed().expect("pool");
            b(ibis, all)
        });
        let ibis = Ibis::join(cfg(0)).expect("join");
        let all = ibis.pool().wait_closed().expect("pool");
        let ra = a(ibis, all);
        (ra, hb.join().expect("node 1"))
    })
}

fn rand_id() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn port_type() -> PortType {
    PortType::builder().connection(Connection::OneToOne).build()
}

fn ipl_round_trip(n: u32) -> Histogram<u64> {
    let (h, _) = ipl_pair(
        |ibis, all| {
            let rp = ibis.receive_port(&port_type(), "pong").expect("port");
            let sp = ibis.send_port(&port_type()).expect("port");
            sp.connect(&all[1], "ping").expect("connect");
            let mut h = hist();
            for i in 0..n + 1000 {
                let t = Instant::now();
                let mut w = sp.message();
                w.write_u8(1);
                w.finish().expect("send");
                rp.receive().expect("receive").finish();
                if i >= 1000 {
                    h.record(t.elapsed().as_nanos() as u64).expect("in range");
                }
            }
            h
        },
        |ibis, all| {
            let rp = ibis.receive_port(&port_type(), "ping").expect("port");
            let sp = ibis.send_port(&port_type()).expect("port");
            // Like a server: answer the first request by connecting back, so the reply channel
            // pairs with the request channel's socket.
            let mut first = Some(rp.receive().expect("receive"));
            sp.connect(&all[0], "pong").expect("connect");
            for _ in 0..n + 1000 {
                match first.take() {
                    Some(m) => m.finish(),
                    None => rp.receive().expect("receive").finish(),
                }
                let mut w = sp.message();
                w.write_u8(1);
                w.finish().expect("send");
            }
        },
    );
    h
}

fn socket_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (b, _) = l.accept().expect("accept");
    a.set_nodelay(true).expect("nodelay");
    b.set_nodelay(true).expect("nodelay");
    (a, b)
}

fn read_one(s: &mut TcpStream, busy: bool, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => panic!("peer closed"),
            Ok(k) => got += k,
            Err(e) if busy && e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("read: {e}"),
        }
    }
}

fn raw_round_trip(n: u32, busy: bool) -> Histogram<u64> {
    let (mut a, mut b) = socket_pair();
    a.set_nonblocking(busy).expect("mode");
    b.set_nonblocking(busy).expect("mode");
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut x = [0u8; 1];
            for _ in 0..n + 1000 {
                read_one(&mut b, busy, &mut x);
                b.write_all(&x).expect("write");
            }
        });
        let mut h = hist();
        let mut x = [1u8; 1];
        for i in 0..n + 1000 {
            let t = Instant::now();
            a.write_all(&x).expect("write");
            read_one(&mut a, busy, &mut x);
            if i >= 1000 {
                h.record(t.elapsed().as_nanos() as u64).expect("in range");
            }
        }
        h
    })
}

/// Busy-polling round trips over two one-way connections (ping on one, pong on the other), the
/// shape of two ipl port connections: replies cannot carry the acknowledgements of requests.
fn raw_round_trip_one_way_pair(n: u32) -> Histogram<u64> {
    let (mut a_out, mut b_in) = socket_pair();
    let (mut b_out, mut a_in) = socket_pair();
    for s in [&a_out, &b_in, &b_out, &a_in] {
        s.set_nonblocking(true).expect("mode");
    }
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut x = [0u8; 1];
            for _ in 0..n + 1000 {
                read_one(&mut b_in, true, &mut x);
                b_out.write_all(&x).expect("write");
            }
        });
        let mut h = hist();
        let mut x = [1u8; 1];
        for i in 0..n + 1000 {
            let t = Instant::now();
            a_out.write_all(&x).expect("write");
            read_one(&mut a_in, true, &mut x);
            if i >= 1000 {
                h.record(t.elapsed().as_nanos() as u64).expect("in range");
            }
        }
        h
    })
}

/// MB/s of `messages` acknowledged 100 KB `f64` slices over ipl, one value per round.
fn ipl_throughput(messages: u32, rounds: usize) -> Vec<f64> {
    let (v, _) = ipl_pair(
        |ibis, all| {
            let rp = ibis.receive_port(&port_type(), "ack").expect("port");
            let sp = ibis.send_port(&port_type()).expect("port");
            sp.connect(&all[1], "data").expect("connect");
            let data: Vec<f64> = (0..KB100 / 8).map(|i| i as f64).collect();
            let mut out = Vec::new();
            for r in 0..rounds + 1 {
                let t = Instant::now();
                for _ in 0..messages {
                    let mut w = sp.message();
                    w.write_slice(&data[..]);
                    w.finish().expect("send");
                }
                rp.receive().expect("ack").finish();
                if r > 0 {
                    out.push((messages as usize * KB100) as f64 / t.elapsed().as_secs_f64() / 1e6);
                }
            }
            out
        },
        |ibis, all| {
            let rp = ibis.receive_port(&port_type(), "data").expect("port");
            let sp = ibis.send_port(&port_type()).expect("port");
            let mut buf = vec![0f64; KB100 / 8];
            for round in 0..rounds + 1 {
                for i in 0..messages {
                    let mut m = rp.receive().expect("receive");
                    m.read_slice_into(&mut buf).expect("read");
                    if round == 0 && i == 0 {
                        // Connect back once data flows, so the acks pair with the data socket.
                        sp.connect(&all[0], "ack").expect("connect");
                    }
                }
                let mut w = sp.message();
                w.write_u8(1);
                w.finish().expect("ack");
            }
        },
    );
    v
}

fn raw_throughput(messages: u32, rounds: usize) -> Vec<f64> {
    let (mut a, mut b) = socket_pair();
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut buf = vec![0u8; KB100];
            for _ in 0..rounds + 1 {
                for _ in 0..messages {
                    b.read_exact(&mut buf).expect("read");
                }
                b.write_all(&[1]).expect("ack");
            }
        });
        let data = vec![7u8; KB100];
        let mut out = Vec::new();
        for r in 0..rounds + 1 {
            let t = Instant::now();
            for _ in 0..messages {
                a.write_all(&data).expect("write");
            }
            a.read_exact(&mut [0u8; 1]).expect("ack");
            if r > 0 {
                out.push((messages as usize * KB100) as f64 / t.elapsed().as_secs_f64() / 1e6);
            }
        }
        out
    })
}

/// The tree of seed 000 table 6.2: 1023 nodes of four ints.
/// (bitcode's derive mode cannot encode recursive types, so the tree uses its serde mode.)
#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Tree {
    a: i32,
    b: i32,
    c: i32,
    d: i32,
    left: Option<Box<Tree>>,
    right: Option<Box<Tree>>,
}

fn tree(depth: u32, n: &mut i32) -> Option<Box<Tree>> {
    if depth == 0 {
        return None;
    }
    *n += 1;
    let v = *n;
    Some(Box::new(Tree {
        a: v,
        b: -v,
        c: v * 3,
        d: v ^ 0x55,
        left: tree(depth - 1, n),
        right: tree(depth - 1, n),
    }))
}

/// One serialization measurement: a library writing and reading one kind of data.
struct SerCase<'a> {
    data: &'static str,
    lib: &'static str,
    payload: usize,
    write: Box<dyn Fn() -> Vec<u8> + 'a>,
    read: Box<dyn Fn(Vec<u8>) + 'a>,
}

impl<'a> SerCase<'a> {
    fn new(
        data: &'static str,
        lib: &'static str,
        payload: usize,
        write: impl Fn() -> Vec<u8> + 'a,
        read: impl Fn(Vec<u8>) + 'a,
    ) -> Self {
        SerCase {
            data,
            lib,
            payload,
            write: Box::new(write),
            read: Box::new(read),
        }
    }

    /// MB/s of payload for writing (producing bytes) and reading them back. Each message is
    /// read right after it is written, as a received message is read while it is fresh.
    fn measure(&self) -> (f64, f64) {
        let iters = (20_000_000 / self.payload).max(50);
        // Warm up first, so the allocator serves this case's sizes from its caches rather
        // than from whatever the previous case left behind.
        for _ in 0..iters / 10 {
            (self.read)((self.write)());
        }
        let (mut w, mut r) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..iters {
            let t0 = Instant::now();
            let bytes = (self.write)();
            let t1 = Instant::now();
            (self.read)(bytes);
            r += t1.elapsed();
            w += t1 - t0;
        }
        let mb = (iters * self.payload) as f64 / 1e6;
        (mb / w.as_secs_f64(), mb / r.as_secs_f64())
    }
}

/// Per-repetition write and read rates of one case.
type Rates = (Vec<f64>, Vec<f64>);

fn main() {
    let args = Args::parse();
    let mut json = serde_json::Map::new();
    let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;

    // Serialization first: it is sensitive to the allocator's state, which the network parts'
    // large buffers change.
    if args.only.contains(&Part::Serialization) {
        eprintln!("serialization...");
        let data: Vec<f64> = (0..KB100 / 8).map(|i| i as f64 * 0.5).collect();
        let mut n = 0;
        let t = tree(10, &mut n).expect("tree");
        assert_eq!(n, 1023);
        let tree_payload = 1023 * 16;
        let into = std::cell::RefCell::new(vec![0f64; KB100 / 8]);
        let cases: Vec<SerCase> = vec![
            SerCase::new(
                "f64 100 KB",
                "ipl",
                KB100,
                || {
                    let mut w = WriteMessage::detached();
                    w.write_slice(&data[..]);
                    w.into_bytes().expect("encode")
                },
                |b| {
                    // read_slice_into exists to fill a buffer the reader already has.
                    let mut out = into.borrow_mut();
                    ReadMessage::from_bytes(b, false)
                        .read_slice_into(&mut out[..])
                        .expect("decode");
                    std::hint::black_box(&out);
                },
            ),
            SerCase::new(
                "f64 100 KB",
                "postcard",
                KB100,
                || postcard::to_allocvec(&data).expect("encode"),
                |b| {
                    std::hint::black_box(postcard::from_bytes::<Vec<f64>>(&b).expect("decode"));
                },
            ),
            SerCase::new(
                "f64 100 KB",
                "bitcode serde",
                KB100,
                || bitcode::serialize(&data).expect("encode"),
                |b| {
                    std::hint::black_box(bitcode::deserialize::<Vec<f64>>(&b).expect("decode"));
                },
            ),
            SerCase::new(
                "f64 100 KB",
                "bitcode derive",
                KB100,
                || bitcode::encode(&data),
                |b| {
                    std::hint::black_box(bitcode::decode::<Vec<f64>>(&b).expect("decode"));
                },
            ),
            SerCase::new(
                "tree 1023",
                "ipl",
                tree_payload,
                || {
                    let mut w = WriteMessage::detached();
                    w.write(&t).expect("encode");
                    w.into_bytes().expect("encode")
                },
                |b| {
                    std::hint::black_box(
                        ReadMessage::from_bytes(b, false)
                            .read::<Tree>()
                            .expect("decode"),
                    );
                },
            ),
            SerCase::new(
                "tree 1023",
                "postcard",
                tree_payload,
                || postcard::to_allocvec(&t).expect("encode"),
                |b| {
                    std::hint::black_box(postcard::from_bytes::<Tree>(&b).expect("decode"));
                },
            ),
            SerCase::new(
                "tree 1023",
                "bitcode serde",
                tree_payload,
                || bitcode::serialize(&t).expect("encode"),
                |b| {
                    std::hint::black_box(bitcode::deserialize::<Tree>(&b).expect("decode"));
                },
            ),
        ];
        // Every case once per round, in turn, so that load changes hit them all alike.
        let reps = args.repeat.max(1);
        let mut rates: Vec<Rates> = cases.iter().map(|_| (Vec::new(), Vec::new())).collect();
        for rep in 0..reps {
            // A different case goes first in each round.
            for k in 0..cases.len() {
                let i = (k + rep) % cases.len();
                let (w, rd) = cases[i].measure();
                rates[i].0.push(w);
                rates[i].1.push(rd);
            }
        }
        println!("serialization throughput (MB/s of payload)   write       read");
        for (c, (w, rd)) in cases.iter().zip(&rates) {
            let (w, rd) = (median(w.clone()), median(rd.clone()));
            println!(
                "  {:<12} {:<16}              {w:>8.0}   {rd:>8.0}",
                c.data, c.lib
            );
            json.insert(
                format!(
                    "ser_{}_{}",
                    c.data.replace(' ', "_"),
                    c.lib.replace(' ', "_")
                ),
                serde_json::json!({"write": w, "read": rd}),
            );
        }
        // Per repetition: ipl over the fastest other library on the tree; then the median.
        let tree_rows: Vec<usize> = (0..cases.len())
            .filter(|&i| cases[i].data == "tree 1023")
            .collect();
        let ipl_row = *tree_rows
            .iter()
            .find(|&&i| cases[i].lib == "ipl")
            .expect("ipl row");
        let ratio = |pick: fn(&Rates) -> &Vec<f64>| {
            median(
                (0..reps)
                    .map(|k| {
                        let best = tree_rows
                            .iter()
                            .filter(|&&i| i != ipl_row)
                            .map(|&i| pick(&rates[i])[k])
                            .fold(0.0, f64::max);
                        pick(&rates[ipl_row])[k] / best
                    })
                    .collect(),
            )
        };
        let (wr, rr) = (ratio(|r| &r.0), ratio(|r| &r.1));
        println!(
            "  tree: ipl / fastest other: write {wr:.2}x, read {rr:.2}x, medians over {reps} rounds (target >= 1.00x)"
        );
        json.insert("tree_ratio_write".into(), wr.into());
        json.insert("tree_ratio_read".into(), rr.into());
    }
    if args.only.contains(&Part::Latency) {
        // Alternate short blocks of each kind so that load changing during the run (this is
        // often a shared machine) affects ipl and its references alike; report the medians of
        // all round trips and the median of the per-block ratios.
        let blocks = args.repeat.max(1) as u32;
        let per = (args.round_trips / blocks).max(100);
        eprintln!("round trips ({blocks} blocks of {per} each)...");
        let (mut ipl_rt, mut busy_rt, mut block_rt, mut pair_rt) = (hist(), hist(), hist(), hist());
        let mut ratios = Vec::new();
        for _ in 0..blocks {
            let i = ipl_round_trip(per);
            let b = raw_round_trip(per, true);
            ratios.push(us(&i, 0.5) / us(&b, 0.5));
            ipl_rt.add(&i).expect("same bounds");
            busy_rt.add(&b).expect("same bounds");
            block_rt
                .add(raw_round_trip(per, false))
                .expect("same bounds");
            pair_rt
                .add(raw_round_trip_one_way_pair(per))
                .expect("same bounds");
        }
        println!("1-byte round trip (us)           median      p99");
        for (name, h) in [
            ("ipl over tcp", &ipl_rt),
            ("raw tcp, busy polling", &busy_rt),
            ("raw tcp, blocking", &block_rt),
            ("raw tcp, busy, 2 one-way", &pair_rt),
        ] {
            println!("  {name:<28} {:>8.2} {:>8.2}", us(h, 0.5), us(h, 0.99));
            json.insert(
                format!("rtt_us_{}", name.replace([' ', ','], "_")),
                serde_json::json!({"median": us(h, 0.5), "p99": us(h, 0.99)}),
            );
        }
        let rt_ratio = median(ratios.clone());
        println!(
            "  ipl / busy-polling raw: {rt_ratio:.2}x, median of {blocks} alternating blocks (target <= 1.20x)"
        );
        json.insert("rtt_ratio_ipl_over_busy_raw".into(), rt_ratio.into());
        json.insert("rtt_ratio_blocks".into(), ratios.into());
    }
    if args.only.contains(&Part::Throughput) {
        eprintln!("throughput...");
        let (mut ipl_all, mut raw_all, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.repeat.max(1) {
            let i = median(ipl_throughput(args.messages, 1));
            let r = median(raw_throughput(args.messages, 1));
            ratios.push(i / r);
            ipl_all.push(i);
            raw_all.push(r);
        }
        let (ipl_tp, raw_tp, tp_ratio) = (median(ipl_all), median(raw_all), median(ratios.clone()));
        println!("acked one-way throughput, 100 KB messages (MB/s)");
        println!("  ipl f64 slices               {ipl_tp:>8.0}");
        println!("  raw tcp byte buffers         {raw_tp:>8.0}");
        println!(
            "  ipl / raw: {tp_ratio:.2}x, median of {} alternating rounds (target >= 0.90x)",
            ratios.len()
        );
        json.insert("throughput_mb_s_ipl_f64".into(), ipl_tp.into());
        json.insert("throughput_mb_s_raw_tcp".into(), raw_tp.into());
        json.insert("throughput_ratio".into(), tp_ratio.into());
        json.insert("throughput_ratio_rounds".into(), ratios.into());
    }
    if let Some(path) = args.json {
        let text = serde_json::to_string_pretty(&serde_json::Value::Object(json)).expect("json");
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("ipl-bench: cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
    }
}
