//! Wrong secrets and garbage bytes are refused; the node keeps serving its real peers.

mod common;

use common::Net;
use ipl::{Config, Connection, Driver, Error, Ibis, PortType};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn ty() -> PortType {
    PortType::builder()
        .connection(Connection::ManyToOne)
        .build()
}

/// Sends one message from `from` to port "in" of `to` and checks it arrives.
fn exchange(from: &Ibis, to: &Ibis, rp: &ipl::ReceivePort, value: u64) {
    let sp = from.send_port(&ty()).unwrap();
    sp.connect(&to.id(), "in").unwrap();
    let mut w = sp.message();
    w.write_u64(value);
    w.finish().unwrap();
    let mut m = rp.receive_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(m.read_u64().unwrap(), value);
}

fn two_nodes() -> (Net, Ibis, Ibis) {
    let net = Net::new(Driver::Tcp, 2);
    let a = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut c = net.config();
            c.rank = Some(1);
            Ibis::join(c).unwrap()
        });
        let mut c = net.config();
        c.rank = Some(0);
        let a = Ibis::join(c).unwrap();
        (a, h.join().unwrap())
    });
    (net, a.0, a.1)
}

#[test]
fn a_node_with_the_wrong_secret_cannot_join() {
    let net = Net::new(Driver::Tcp, 2);
    let mut c: Config = net.config();
    c.secret = "not-the-secret".into();
    c.connect_timeout = Duration::from_secs(5);
    let e = Ibis::join(c).err().expect("join must fail");
    assert!(
        matches!(e, Error::Auth { .. } | Error::Registry(_)),
        "unexpected error {e}"
    );
    assert!(e.to_string().contains("secret"), "{e}");
}

#[test]
fn wrong_secret_and_garbage_are_dropped_and_the_node_keeps_serving() {
    let (_net, a, b) = two_nodes();
    let rp = b.receive_port(&ty(), "in").unwrap();
    exchange(&a, &b, &rp, 1);
    let addr = b.id().address().to_string();

    // 1. A peer that does not know the secret: the node's challenge proves nothing to it, and
    //    its made-up response is refused.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (hello, nonce) = ipl::testing::wire::hello(ipl::testing::wire::Purpose::Port);
    s.write_all(&hello).unwrap();
    let mut ch = [0u8; ipl::testing::wire::CHALLENGE_LEN];
    s.read_exact(&mut ch).unwrap();
    assert!(ipl::testing::wire::answer_challenge(b"wrong", &nonce, &ch).is_err());
    s.write_all(&[0u8; ipl::testing::wire::RESPONSE_LEN])
        .unwrap();
    let mut buf = [0u8; 16];
    // The node closes the connection: read returns 0 (or a reset), never data.
    assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
    exchange(&a, &b, &rp, 2);

    // 2. Garbage instead of a hello, in several shapes.
    for junk in [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        vec![0xffu8; 100_000],
        (0..=255u8).cycle().take(5000).collect(),
        vec![],
    ] {
        let mut s = TcpStream::connect(&addr).unwrap();
        let _ = s.write_all(&junk);
        let _ = s.shutdown(std::net::Shutdown::Write);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
        assert!(
            sink.len() <= ipl::testing::wire::CHALLENGE_LEN,
            "garbage got a reply"
        );
    }
    exchange(&a, &b, &rp, 3);

    // 3. A peer that knows the secret but sends corrupt frames after connecting: that connection
    //    is dropped, the port keeps receiving from the others.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (hello, nonce) = ipl::testing::wire::hello(ipl::testing::wire::Purpose::Port);
    s.write_all(&hello).unwrap();
    let mut ch = [0u8; ipl::testing::wire::CHALLENGE_LEN];
    s.read_exact(&mut ch).unwrap();
    let resp = ipl::testing::wire::answer_challenge(b"test-secret", &nonce, &ch).unwrap();
    s.write_all(&resp).unwrap();
    let req = ipl::testing::ConnectRequest {
        from: a.id(),
        send_port: 999,
        port: "in".into(),
        port_type: ty(),
    };
    s.write_all(&ipl::testing::tcp_setup(&req)).unwrap();
    let mut reply = [0u8; 64];
    let n = s.read(&mut reply).unwrap();
    assert!(n > 0);
    s.write_all(&[0x5au8; 4096]).unwrap();
    exchange(&a, &b, &rp, 4);
    // The corrupt connection was dropped: the node closes it.
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    exchange(&a, &b, &rp, 5);
}

/// Raises this process's limit of open files to what the flood tests need (both ends of every
/// connection live in this process).
fn allow_open_files(n: u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the rlimit we pass, nothing else.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        if l.rlim_cur < n {
            assert!(
                l.rlim_max >= n,
                "this test needs {n} open files; the hard limit is {}",
                l.rlim_max
            );
            l.rlim_cur = n;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &l), 0);
        }
    }
}

/// `n` connections to `addr` that each send one byte a second and never finish a handshake
/// (a slow-loris attack by a peer that does not know the secret); a connection the server
/// closes is opened again at once. Everything closes when this is dropped.
struct SlowLoris {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    opened: std::sync::mpsc::Receiver<()>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl SlowLoris {
    fn start(addr: std::net::SocketAddr, n: usize) -> SlowLoris {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, opened) = std::sync::mpsc::channel();
        let s2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let connect = || {
                let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
                s.set_nonblocking(true).ok()?;
                Some((s, Instant::now()))
            };
            let mut conns: Vec<Option<(TcpStream, Instant)>> = (0..n).map(|_| connect()).collect();
            let mut told = false;
            let mut reopened = 0u64;
            let tick = std::sync::mpsc::channel::<()>();
            while !s2.load(Ordering::SeqCst) {
                for c in conns.iter_mut() {
                    let alive = match c {
                        Some((s, last)) => {
                            let mut b = [0u8; 64];
                            let open = !matches!(s.read(&mut b), Ok(0))
                                && !matches!(s.read(&mut b), Err(e) if e.kind() != std::io::ErrorKind::WouldBlock);
                            if open && last.elapsed() >= Duration::from_secs(1) {
                                *last = Instant::now();
                                s.write(b"I").is_ok()
                            } else {
                                open
                            }
                        }
                        None => false,
                    };
                    if !alive {
                        *c = connect();
                        reopened += 1;
                    }
                }
                if !told && conns.iter().all(Option::is_some) {
                    told = true;
                    let _ = tx.send(());
                }
                // Paces the rounds (nothing is waited for).
                let _ = tick.1.recv_timeout(Duration::from_millis(50));
            }
            reopened
        });
        SlowLoris {
            stop,
            opened,
            thread: Some(thread),
        }
    }

    /// Waits until every connection has been opened once.
    fn wait_opened(&self) {
        self.opened
            .recv_timeout(Duration::from_secs(60))
            .expect("the slow connections were opened within 60 s");
    }
}

impl Drop for SlowLoris {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Seconds until the server at `addr` closes a connection that sends a byte a second.
fn trickle_until_closed(addr: std::net::SocketAddr, limit: Duration) -> Duration {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let started = Instant::now();
    while started.elapsed() < limit {
        if s.write_all(b"I").is_err() {
            break;
        }
        let mut b = [0u8; 64];
        match s.read(&mut b) {
            Ok(0) => break,
            Err(e)
                if e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut =>
            {
                break
            }
            _ => {}
        }
    }
    started.elapsed()
}

#[test]
fn slow_handshakes_cannot_keep_real_nodes_out_of_the_registry() {
    allow_open_files(4096);
    let net = Net::new(Driver::Tcp, 2);
    let addr = net.registry.as_ref().unwrap().address();
    // One deadline for the whole handshake, not one per read.
    let held = trickle_until_closed(addr, Duration::from_secs(30));
    assert!(
        held < Duration::from_secs(9),
        "a connection sending a byte a second held its handshake slot for {held:?}"
    );
    // More slow connections than the registry has handshake slots.
    let loris = SlowLoris::start(addr, 300);
    loris.wait_opened();
    let started = Instant::now();
    let (a, b) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut c = net.config();
            c.rank = Some(1);
            Ibis::join(c)
        });
        let mut c = net.config();
        c.rank = Some(0);
        (Ibis::join(c), h.join().unwrap())
    });
    let (a, b) = (a.expect("rank 0 joins"), b.expect("rank 1 joins"));
    a.pool().wait_closed().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "joining took {:?}",
        started.elapsed()
    );
    let rp = b.receive_port(&ty(), "in").unwrap();
    exchange(&a, &b, &rp, 1);
    drop(loris);
}

#[test]
fn slow_handshakes_cannot_keep_real_senders_from_connecting_to_a_node() {
    allow_open_files(4096);
    let (_net, a, b) = two_nodes();
    let rp = b.receive_port(&ty(), "in").unwrap();
    let addr: std::net::SocketAddr = b.id().address().parse().unwrap();
    // More slow connections than a node has handshake slots.
    let loris = SlowLoris::start(addr, 1100);
    loris.wait_opened();
    let started = Instant::now();
    exchange(&a, &b, &rp, 1);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "connecting took {:?}",
        started.elapsed()
    );
    drop(loris);
    // The node's own handshake deadline also covers the whole handshake.
    let held = trickle_until_closed(addr, Duration::from_secs(30));
    assert!(
        held < Duration::from_secs(14),
        "a connection sending a byte a second held its handshake slot for {held:?}"
    );
}
