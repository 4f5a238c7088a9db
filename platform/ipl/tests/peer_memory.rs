//! A peer that knows the secret decides what it claims in length fields, not how much memory a
//! node commits: a frame over the node's message limit is refused and only that connection
//! dropped, and what a reader allocates follows the bytes that really arrive. (Alone in this
//! file: it counts the process's memory and allocations.)

mod common;

use common::Net;
use ipl::testing::wire::{self, FrameKind, Header};
use ipl::{Connection, Driver, Ibis, NodeId, PortType, ReceivePort};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Records the largest single allocation made by threads that ask for it.
struct Watched;

thread_local! {
    static WATCHED: Cell<bool> = const { Cell::new(false) };
}
static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on unchanged to the system allocator; the bookkeeping around it
// touches only an atomic and a thread-local cell, and never allocates.
unsafe impl GlobalAlloc for Watched {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as for `alloc`; `ptr` and `layout` come from this allocator, i.e. `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn note(size: usize) {
    if WATCHED.try_with(Cell::get).unwrap_or(false) {
        LARGEST.fetch_max(size, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Watched = Watched;

/// The tests measure the whole process: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn ty() -> PortType {
    PortType::builder()
        .connection(Connection::ManyToOne)
        .build()
}

/// Resident memory of this process now, and at its peak.
fn rss() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or_else(|| panic!("no {name} in /proc/self/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn two_nodes() -> (Net, Ibis, Ibis) {
    let net = Net::new(Driver::Tcp, 2);
    let (a, b) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut c = net.config();
            c.rank = Some(1);
            Ibis::join(c).unwrap()
        });
        let mut c = net.config();
        c.rank = Some(0);
        (Ibis::join(c).unwrap(), h.join().unwrap())
    });
    a.pool().wait_closed().unwrap();
    (net, a, b)
}

/// A raw connection to port "in" of `to` that passed the handshake with the pool's secret,
/// claiming to come from `from`.
fn raw_sender(from: &Ibis, to: &Ibis) -> TcpStream {
    let mut s = TcpStream::connect(to.id().address()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (hello, nonce) = wire::hello(wire::Purpose::Port);
    s.write_all(&hello).unwrap();
    let mut ch = [0u8; wire::CHALLENGE_LEN];
    s.read_exact(&mut ch).unwrap();
    let resp = wire::answer_challenge(b"test-secret", &nonce, &ch).unwrap();
    s.write_all(&resp).unwrap();
    let req = ipl::testing::ConnectRequest {
        from: from.id(),
        send_port: 4242,
        port: "in".into(),
        port_type: ty(),
    };
    s.write_all(&ipl::testing::tcp_setup(&req)).unwrap();
    let mut buf = Vec::new();
    let reply = loop {
        let mut b = [0u8; 256];
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "the node closed the connection before its reply");
        buf.extend_from_slice(&b[..n]);
        if let Some(r) = ipl::testing::tcp_reply(&buf).unwrap() {
            break r;
        }
    };
    assert!(
        matches!(reply, ipl::testing::ConnectReply::Accepted { .. }),
        "{reply:?}"
    );
    s
}

/// A frame header claiming `len` payload bytes, then the start of an item of the kind `item`
/// writes, whose own length field is patched to claim everything that follows in the frame
/// (`unit` bytes per element).
fn frame_start(len: u64, unit: u64, item: impl FnOnce(&mut ipl::WriteMessage<'_>)) -> Vec<u8> {
    let mut w = ipl::WriteMessage::detached();
    item(&mut w);
    let mut body = w.into_bytes().unwrap();
    // Tag byte, then the u64 length in native order.
    body.truncate(9);
    body[1..9].copy_from_slice(&((len - 9) / unit).to_ne_bytes());
    let mut out = Header {
        kind: FrameKind::Message,
        big_endian: cfg!(target_endian = "big"),
        len,
        deliver_at_ns: 0,
    }
    .encode()
    .to_vec();
    out.extend_from_slice(&body);
    out
}

/// Writes one item of a message.
type WriteItem = fn(&mut ipl::WriteMessage<'_>);

/// Sends `value` from `from` to port "in" of `to` and checks that it arrives.
fn honest(from: &Ibis, to: &NodeId, rp: &ReceivePort, value: u64) {
    let sp = from.send_port(&ty()).unwrap();
    sp.connect(to, "in").unwrap();
    let mut w = sp.message();
    w.write_u64(value);
    w.finish().unwrap();
    let mut m = rp.receive_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(m.read_u64().unwrap(), value);
}

#[test]
fn a_header_claiming_a_terabyte_is_refused_and_memory_stays_bounded() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (_net, a, b) = two_nodes();
    let rp = b.receive_port(&ty(), "in").unwrap();
    honest(&a, &b.id(), &rp, 1);
    let (_, peak_before) = rss();

    // The node serves its port while the peer claims a terabyte and streams what it can.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut read = 0;
            while !stop.load(Ordering::SeqCst) {
                match rp.receive_timeout(Duration::from_millis(100)) {
                    Ok(mut m) => {
                        if let Ok(v) = m.read_bytes() {
                            read += v.len();
                        }
                    }
                    Err(ipl::Error::Timeout { .. }) => {}
                    Err(e) => panic!("the port failed: {e}"),
                }
            }
            (rp, read)
        })
    };
    let mut s = raw_sender(&a, &b);
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = Instant::now();
    let mut sent = 0u64;
    let mut outcome = s.write_all(&frame_start(1 << 40, 1, |w| w.write_bytes(b"")));
    let chunk = vec![0x5au8; 1 << 20];
    while outcome.is_ok() && sent < 512 << 20 && started.elapsed() < Duration::from_secs(30) {
        outcome = s.write_all(&chunk);
        sent += chunk.len() as u64;
    }
    // The node dropped the connection: the peer could not hand it the terabyte's first
    // half gigabyte.
    assert!(
        outcome.is_err(),
        "the node took {} MiB of a terabyte message",
        sent >> 20
    );
    stop.store(true, Ordering::SeqCst);
    let (rp, read) = server.join().unwrap();
    assert_eq!(read, 0, "a part of the terabyte message was delivered");
    let (_, peak_after) = rss();
    assert!(
        peak_after.saturating_sub(peak_before) < 64 << 20,
        "resident memory grew by {} MiB while a peer claimed a terabyte ({} MiB sent)",
        (peak_after - peak_before) >> 20,
        sent >> 20
    );
    // The node still serves its other peers.
    honest(&a, &b.id(), &rp, 2);
}

#[test]
fn what_a_reader_allocates_follows_the_bytes_that_arrive() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (_net, a, b) = two_nodes();
    let rp = b.receive_port(&ty(), "in").unwrap();
    honest(&a, &b.id(), &rp, 1);
    // Claims of 60 MiB (under the node's limit) of which 1 MiB arrives before the peer goes.
    let claim = 60 << 20;
    let items: [(&str, u64, WriteItem); 3] = [
        ("bytes", 1, |w| w.write_bytes(b"")),
        ("a slice", 8, |w| w.write_slice::<f64>(&[])),
        ("an object", 1, |w| w.write(&0u8).unwrap()),
    ];
    for (what, unit, item) in items {
        let mut s = raw_sender(&a, &b);
        s.write_all(&frame_start(claim, unit, item)).unwrap();
        s.write_all(&vec![0u8; 1 << 20]).unwrap();
        drop(s);
        let mut m = rp.receive_timeout(Duration::from_secs(20)).unwrap();
        LARGEST.store(0, Ordering::SeqCst);
        WATCHED.with(|w| w.set(true));
        let r = match what {
            "bytes" => m.read_bytes().map(|v| v.len()),
            "a slice" => m.read_slice::<f64>().map(|v| v.len()),
            _ => m.read::<Vec<u8>>().map(|v| v.len()),
        };
        WATCHED.with(|w| w.set(false));
        drop(m);
        let e = r.expect_err("the peer went before sending its claim");
        assert!(e.is_peer_failure(), "{what}: {e}");
        let largest = LARGEST.load(Ordering::SeqCst);
        assert!(
            largest <= 4 << 20,
            "reading {what} of which 1 MiB of a claimed 60 MiB arrived allocated {} KiB at once",
            largest >> 10
        );
    }
    honest(&a, &b.id(), &rp, 2);
}
