//! The shared-memory driver: nodes on one host talk through a ring in shared memory per
//! connection ([`ring`]), handed over on a Unix socket after the secret handshake.
//!
//! A node listens on an abstract Unix socket, which only processes in its network namespace
//! can reach; nodes advertise it with a key of their host (boot id and network namespace), so
//! peers use it exactly when they share both. The connecting side proves the pool secret as on
//! tcp; the accepting side then creates the ring (a sealed memfd) and passes it back with its
//! reply. The Unix socket stays open beside the ring for the connection's life: a process
//! that dies closes it, which the other side notices as on tcp, and a side that waits (the
//! receiver for bytes, the sender for room) parks in poll(2) on it, after announcing so in
//! the ring, and is woken by a byte the other side writes.
//!
//! With single copy on ([`Config::shm_single_copy`](crate::Config::shm_single_copy), the
//! default) and a receive port that allows it, the receiver reads large parts straight from
//! the sender's memory ([`remote`], where the kernel allows it). Otherwise they stream through
//! the ring, which bounds the memory a connection takes. Either way, what waits too long for
//! the receiver while it does not read goes to a buffer of the sender's, which the receiver
//! reads from the sender's memory, so that two nodes that both send before they receive do not
//! wait for each other.

mod fdpass;
pub(crate) mod memory;
pub(crate) mod remote;
mod ring;

use super::listen::{Conn, Handoff, Inlet, Listener, HANDSHAKE_TIMEOUT};
use super::{dial, poll, Acceptor, Dialed, Driver, Frame, Sink, Stream};
use crate::error::{Error, Result};
use crate::node::NodeId;
use memory::Mapping;
use remote::Remote;
use ring::{Consumer, Producer, Ring, Signal, Wake};
use serde::{Deserialize, Serialize};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The connecting side's setup frame.
#[derive(Serialize, Deserialize)]
struct Dial {
    /// The ports' connect request.
    request: Vec<u8>,
    /// Where in the connecting process its probe lies, and the probe: whether the accepting
    /// side may read the sender's memory.
    probe_addr: u64,
    probe: [u8; 16],
}

/// The accepting side's setup frame; the ring's memfd comes with it when accepted.
#[derive(Serialize, Deserialize)]
struct Reply {
    /// The acceptor's reply.
    reply: Vec<u8>,
    /// The acceptor took the connection (and a memfd follows).
    accepted: bool,
    /// The ring's size.
    ring: u64,
    /// The receiver can read the sender's memory (what does not fit the ring may be buffered).
    remote: bool,
    /// The receiver takes large parts offered from the sender's memory (single copy).
    offers: bool,
}

/// What identifies this host to its peers: the kernel's boot id and this process's network
/// namespace. Empty when unknown (then no peer counts as on this host).
pub(crate) fn host_key() -> &'static str {
    static KEY: OnceLock<String> = OnceLock::new();
    KEY.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let net = std::fs::read_link("/proc/self/ns/net").unwrap_or_default();
        let (boot, net) = (boot.trim(), net.to_string_lossy());
        if boot.is_empty() || net.is_empty() {
            String::new()
        } else {
            format!("{boot}/{net}")
        }
    })
}

/// Opens shared-memory connections to peers on this host.
pub(crate) struct ShmDriver {
    secret: Vec<u8>,
}

/// Listens on a fresh abstract Unix socket; returns the driver, the socket's name, and the
/// listener with what takes its connections.
pub(crate) fn listener(
    secret: &str,
    ring: usize,
    single_copy: bool,
    acceptor: Arc<dyn Acceptor>,
) -> Result<(ShmDriver, String, Inlet)> {
    let name = format!("ipl-{}-{:016x}", std::process::id(), rand::random::<u64>());
    let addr = SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| Error::io("name a Unix socket", e))?;
    let l = UnixListener::bind_addr(&addr)
        .map_err(|e| Error::io(format!("listen on Unix socket @{name}"), e))?;
    l.set_nonblocking(true)
        .map_err(|e| Error::io("configure Unix socket", e))?;
    let handoff = Arc::new(Accepting {
        acceptor,
        ring,
        single_copy,
    });
    Ok((
        ShmDriver {
            secret: secret.as_bytes().to_vec(),
        },
        name,
        (Listener::Unix(mio::net::UnixListener::from_std(l)), handoff),
    ))
}

/// Hands connections that passed the handshake to the acceptor, each with a new ring.
struct Accepting {
    acceptor: Arc<dyn Acceptor>,
    ring: usize,
    /// Large parts may be read from the sender's memory.
    single_copy: bool,
}

impl Handoff for Accepting {
    fn accepted(&self, conn: Conn, _peer: &str, setup: &[u8], rest: &[u8]) -> Result<(), String> {
        let Conn::Unix(s) = conn else {
            return Err("not a Unix socket".into());
        };
        if !rest.is_empty() {
            return Err("bytes after the setup frame".into());
        }
        let dial: Dial =
            postcard::from_bytes(setup).map_err(|e| format!("bad setup frame: {e}"))?;
        let admission = self.acceptor.admit(&dial.request);
        let Some(inbox) = admission.inbox else {
            let reply = Reply {
                reply: admission.reply,
                accepted: false,
                ring: 0,
                remote: false,
                offers: false,
            };
            return fdpass::send(s.as_raw_fd(), &crate::wire::encode_setup(&reply), None)
                .map_err(|e| e.to_string());
        };
        let remote = fdpass::peer_pid(&s)
            .ok()
            .and_then(|pid| Remote::open(pid, dial.probe_addr, &dial.probe));
        let (map, fd) = Mapping::create(Ring::mapping_len(self.ring))
            .map_err(|e| format!("cannot create shared memory: {e}"))?;
        let ring = Ring::new(map).map_err(|e| e.to_string())?;
        let reply = Reply {
            reply: admission.reply,
            accepted: true,
            ring: self.ring as u64,
            remote: remote.is_some(),
            offers: remote.is_some() && self.single_copy && admission.single_copy,
        };
        fdpass::send(
            s.as_raw_fd(),
            &crate::wire::encode_setup(&reply),
            Some(fd.as_raw_fd()),
        )
        .map_err(|e| e.to_string())?;
        drop(fd);
        let s = UnixStream::from(s);
        inbox.attach(Box::new(ShmIn {
            consumer: Consumer::new(ring),
            sock: s,
            remote,
            peer_closed: false,
        }));
        Ok(())
    }
}

impl Driver for ShmDriver {
    fn connect(&self, peer: &NodeId, request: &[u8]) -> Result<Dialed> {
        let io_err = |what: &str, e: io::Error| Error::io(format!("{what} {peer}"), e);
        let addr = SocketAddr::from_abstract_name(peer.shm().as_bytes())
            .map_err(|e| io_err("name the Unix socket of", e))?;
        let s = UnixStream::connect_addr(&addr).map_err(|e| Error::ConnectionLost {
            peer: peer.to_string(),
            reason: format!("connect to its Unix socket: {e}"),
        })?;
        s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(|e| io_err("configure socket to", e))?;
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let (probe_addr, probe) = remote::probe();
        let setup = postcard::to_allocvec(&Dial {
            request: request.to_vec(),
            probe_addr,
            probe,
        })
        .expect("setup frames always serialize");
        dial::prove(&s, &self.secret, &setup, deadline, peer)?;
        let (body, fd) = read_reply(&s, deadline, peer)?;
        let reply: Reply = postcard::from_bytes(&body).map_err(|e| Error::Decode {
            origin: peer.to_string(),
            reason: format!("bad setup frame: {e}"),
        })?;
        let decode = |reason: String| Error::Decode {
            origin: peer.to_string(),
            reason,
        };
        let sink: Option<Box<dyn Sink>> = match (reply.accepted, fd) {
            (false, _) => None,
            (true, None) => return Err(decode("an acceptance without shared memory".into())),
            (true, Some(fd)) => {
                let cap = usize::try_from(reply.ring)
                    .ok()
                    .filter(|c| {
                        c.is_power_of_two() && (ring::MIN_RING..=ring::MAX_RING).contains(c)
                    })
                    .ok_or_else(|| decode(format!("a ring of {} bytes", reply.ring)))?;
                let map = Mapping::open(&fd, Ring::mapping_len(cap))
                    .map_err(|e| decode(format!("its shared memory: {e}")))?;
                let ring = Ring::new(map).map_err(|e| decode(e.to_string()))?;
                s.set_nonblocking(true)
                    .map_err(|e| io_err("configure socket to", e))?;
                Some(Box::new(ShmOut {
                    producer: Producer::new(ring, reply.remote, reply.offers),
                    sock: s,
                    peer_closed: false,
                    peer: peer.clone(),
                }))
            }
        };
        Ok(Dialed {
            reply: reply.reply,
            sink,
            driver: "shm",
        })
    }
}

/// Reads the reply's setup frame and the memfd that comes with it.
fn read_reply(
    s: &UnixStream,
    deadline: Instant,
    peer: &NodeId,
) -> Result<(Vec<u8>, Option<OwnedFd>)> {
    let mut buf = Vec::new();
    let mut fds = Vec::new();
    loop {
        let mut tmp = [0u8; 1024];
        let n = fdpass::recv(s.as_raw_fd(), &mut tmp, &mut fds, deadline)
            .map_err(|e| dial::cut(peer, "no reply to the connect request", e))?;
        if n == 0 {
            return Err(dial::cut(
                peer,
                "connection closed before the reply to the connect request",
                "end of stream",
            ));
        }
        buf.extend_from_slice(&tmp[..n]);
        match crate::wire::setup_frame(&buf) {
            Ok(Some((body, used))) if used == buf.len() => return Ok((body.to_vec(), fds.pop())),
            Ok(Some(_)) => {
                return Err(Error::Decode {
                    origin: peer.to_string(),
                    reason: "bytes after the setup frame".into(),
                })
            }
            Ok(None) => continue,
            Err(e) => {
                return Err(Error::Decode {
                    origin: peer.to_string(),
                    reason: e,
                })
            }
        }
    }
}

/// Writes a wake-up byte; a full socket already holds one, and a closed one shows in the
/// reads of this side.
fn poke(s: &UnixStream) {
    let one = 1u8;
    // SAFETY: sends one byte from a valid u8 on a socket we own; MSG_NOSIGNAL keeps a closed
    // socket from raising SIGPIPE.
    unsafe {
        libc::send(
            s.as_raw_fd(),
            (&one as *const u8).cast(),
            1,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        );
    }
}

/// Reads the wake-up bytes that arrived; false when the other side closed its end.
fn drain(s: &UnixStream) -> bool {
    let mut s = s;
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) if n < buf.len() => return true,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
}

/// The receiving end of a connection.
struct ShmIn {
    consumer: Consumer,
    sock: UnixStream,
    /// The sender's memory, when it can be read.
    remote: Option<Remote>,
    /// The sender closed its end of the socket (left or died).
    peer_closed: bool,
}

impl ShmIn {
    fn check_peer(&mut self) {
        if !self.peer_closed && !drain(&self.sock) {
            self.peer_closed = true;
        }
    }
}

impl Stream for ShmIn {
    fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        let mut signal = Signal::default();
        let n = self.consumer.read(dst, self.remote.as_ref(), &mut signal)?;
        if signal.wake {
            poke(&self.sock);
        }
        if n > 0 || dst.is_empty() {
            return Ok(n);
        }
        if self.peer_closed {
            // Everything the sender published before it went has been read.
            return Ok(0);
        }
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn ready(&self) -> bool {
        self.peer_closed || self.consumer.has_data()
    }

    fn prepare_park(&mut self) -> bool {
        self.consumer.prepare_park()
    }

    fn wait_fds(&self, fds: &mut Vec<libc::pollfd>) {
        if !self.peer_closed {
            fds.push(poll::entry(self.sock.as_raw_fd(), libc::POLLIN));
        }
    }

    fn woken(&mut self) {
        self.check_peer();
    }

    fn wait(&mut self, d: Duration) {
        if self.peer_closed || !self.consumer.prepare_park() {
            return;
        }
        poll::wait_one(self.sock.as_raw_fd(), libc::POLLIN, d);
        self.check_peer();
    }

    fn shutdown(&mut self) {
        self.consumer.close();
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }
}

impl Drop for ShmOut {
    fn drop(&mut self) {
        if self.peer_closed {
            // The receiving process closed its end: it reads nothing any more.
            self.producer.release();
        }
    }
}

/// The sending end of a connection.
struct ShmOut {
    producer: Producer,
    sock: UnixStream,
    /// The receiver closed its end of the socket (its port closed, or it died).
    peer_closed: bool,
    /// The receiving node, whose death frees what it has not read (see [`orphans::forget`]).
    peer: NodeId,
}

impl Sink for ShmOut {
    fn write(&mut self, frame: &Frame<'_>, offset: u64) -> io::Result<u64> {
        if self.peer_closed {
            // A receiver may read the rest of a frame from this process's memory and then go:
            // what it read counts. Nothing more is written.
            let done = self.producer.settled(offset);
            if done == frame.len {
                return Ok(done - offset);
            }
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the receiving process closed the connection",
            ));
        }
        let mut wake = Wake::default();
        let n = self.producer.write(frame, offset, &mut wake)?;
        if wake.consumer {
            poke(&self.sock);
        }
        Ok(n)
    }

    fn prepare_wait(&mut self) -> bool {
        self.producer.prepare_wait()
    }

    fn wait_fds(&self, fds: &mut Vec<libc::pollfd>) -> bool {
        fds.push(poll::entry(self.sock.as_raw_fd(), libc::POLLIN));
        true
    }

    fn woken(&mut self) {
        self.peer_closed |= !drain(&self.sock);
    }

    fn wake_at(&self) -> Option<Instant> {
        self.producer.wake_at()
    }

    fn unread_capacity(&self) -> u64 {
        self.producer.unread_capacity()
    }

    fn wait(&mut self, d: Duration) {
        poll::wait_one(self.sock.as_raw_fd(), libc::POLLIN, d);
        self.peer_closed |= !drain(&self.sock);
    }

    fn close(mut self: Box<Self>, close: &[u8]) {
        let chunks = std::cell::OnceCell::new();
        let parts: [&[u8]; 0] = [];
        let mut header = [0u8; crate::wire::HEADER_LEN];
        header.copy_from_slice(&close[..crate::wire::HEADER_LEN.min(close.len())]);
        let frame = Frame {
            header,
            parts: &parts,
            owned: &[],
            len: close.len() as u64,
            chunks: &chunks,
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut done = 0;
        while done < frame.len && Instant::now() < deadline {
            match self.write(&frame, done) {
                Ok(n) => done += n,
                Err(_) => break,
            }
            if done < frame.len && self.prepare_wait() {
                self.wait(Duration::from_millis(10));
            }
        }
        if !self.peer_closed && self.producer.lending() {
            // The receiver has still to read buffers of ours, which must outlive its reading:
            // they wait among the orphans, and the send port goes on. It sees the end of the
            // socket once it has read them all.
            let _ = self.sock.shutdown(std::net::Shutdown::Write);
            orphans::keep(*self);
        } else {
            let _ = self.sock.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Closed connections whose receivers have still to read buffers of this process; freed once
/// the receiver has read them, closed its end, or been declared dead by the pool.
pub(crate) mod orphans {
    use super::{drain, ShmOut};
    use crate::node::NodeId;
    use crate::transport::poll;
    use parking_lot::Mutex;
    use std::collections::VecDeque;
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    /// How many dead peers are remembered, for connections to them closed after their death
    /// was learnt; the oldest are forgotten first (a connection closes soon after its peer is
    /// declared dead, as its sends fail).
    const DEAD_REMEMBERED: usize = 1024;

    struct Orphans {
        outs: Vec<ShmOut>,
        /// Peers the pool declared dead, newest last.
        dead: VecDeque<NodeId>,
    }

    static ORPHANS: Mutex<Orphans> = Mutex::new(Orphans {
        outs: Vec::new(),
        dead: VecDeque::new(),
    });

    /// Frees what the receivers have read, or will never read (they closed their end, or the
    /// pool declared them dead).
    fn reap(o: &mut Orphans) {
        let dead = &o.dead;
        o.outs.retain_mut(|out| {
            if dead.contains(&out.peer) {
                // Dropped as closed by its peer, which frees the buffers (see `forget`).
                out.peer_closed = true;
                return false;
            }
            out.peer_closed |= !drain(&out.sock);
            !out.peer_closed && out.producer.lending()
        });
    }

    /// Keeps `o` until its receiver has read what it lent.
    pub(super) fn keep(o: ShmOut) {
        let mut v = ORPHANS.lock();
        v.outs.push(o);
        reap(&mut v);
    }

    /// The pool declared `peer` dead: frees the buffers it has not read, now and for
    /// connections to it closed later. A peer that is stopped rather than gone keeps its
    /// socket open, so without this they would stay allocated for as long as this process
    /// lives, and [`linger`] would wait for them.
    ///
    /// Should the peer run again and read those buffers (with `process_vm_readv`), the
    /// kernel checks the addresses against this process's mappings: it reads freed or reused
    /// memory, or fails, and nothing of this process is touched. What it reads does not count
    /// either way: the pool has declared it dead, so its part is over.
    pub(crate) fn forget(peer: &NodeId) {
        let mut v = ORPHANS.lock();
        if !v.dead.contains(peer) {
            if v.dead.len() == DEAD_REMEMBERED {
                v.dead.pop_front();
            }
            v.dead.push_back(peer.clone());
        }
        reap(&mut v);
    }

    /// How many closed connections to `peer` still hold buffers it has not read.
    pub(crate) fn count(peer: &NodeId) -> usize {
        let mut v = ORPHANS.lock();
        reap(&mut v);
        v.outs.iter().filter(|o| &o.peer == peer).count()
    }

    /// Waits until the receivers have read what this process lent them, until `deadline`:
    /// a process that leaves takes its memory along, so it leaves after its receivers have
    /// read what they were sent (as a socket's buffers are delivered after a tcp sender
    /// exits), unless they read nothing for that long.
    pub(crate) fn linger(deadline: Instant) {
        let mut fds = Vec::new();
        loop {
            let mut v = ORPHANS.lock();
            reap(&mut v);
            let now = Instant::now();
            if v.outs.is_empty() || now >= deadline {
                if !v.outs.is_empty() {
                    tracing::warn!(
                        "leaving while {} receivers have not read what they were sent",
                        v.outs.len()
                    );
                }
                return;
            }
            fds.clear();
            for o in v.outs.iter_mut() {
                o.producer.prepare_wait();
                fds.push(poll::entry(o.sock.as_raw_fd(), libc::POLLIN));
            }
            drop(v);
            let _ = poll::wait(&mut fds, (deadline - now).min(Duration::from_millis(10)));
        }
    }
}
