//! The shared-memory driver against failures and strangers: a peer killed in the middle of a
//! message (either side) ends that connection with an error and never with wrong data; bytes
//! from a process that does not know the secret never get a ring; a pool spread over hosts
//! (network namespaces) uses shared memory inside a host and tcp between hosts, both at once.
//! Child processes are this test binary re-run with a role in `IPL_TEST_ROLE`.

mod common;

use common::Net;
use ipl::{Config, Connection, Driver, Error, Ibis, PortType};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::Reaped;

/// Longest a test may take.
const LIMIT: Duration = Duration::from_secs(90);
/// Items of the long message: 36 MB of tagged u64s, far more than a ring holds.
const ITEMS: u64 = 4 << 20;

fn role() -> Option<String> {
    std::env::var("IPL_TEST_ROLE").ok()
}

fn ty() -> PortType {
    PortType::builder()
        .connection(Connection::ManyToOne)
        .build()
}

/// Entry point of the child processes; does nothing in a normal test run.
#[test]
fn child_process_entry() {
    let Some(role) = role() else { return };
    let ibis = Ibis::join(Config::from_env().expect("IPL_* environment")).expect("join");
    let all = ibis.pool().wait_closed().expect("pool fills");
    let me = ibis.id().rank() as usize;
    let rp = ibis.receive_port(&ty(), "in").expect("receive port");
    match role.as_str() {
        // Send rank 0 one long message of numbered items, then wait to be killed.
        "sender" => {
            let sp = ibis.send_port(&ty()).expect("send port");
            sp.connect(&all[0], "in").expect("connect");
            println!("connected over {}", sp.connection_drivers()[0].2);
            let mut w = sp.message();
            for i in 0..ITEMS {
                w.write_u64(i);
            }
            w.finish()
                .expect("the receiver reads until this process is killed");
            std::thread::sleep(LIMIT);
        }
        // Read the first item of a long message, say so, and wait to be killed.
        "reader" => {
            let mut m = rp.receive_timeout(LIMIT).expect("a message");
            assert_eq!(m.read_u64().expect("the first item"), 0);
            println!("reading");
            std::thread::sleep(LIMIT);
        }
        // Send every other rank its number; receive theirs; print which driver carried what.
        "mesh" => {
            for (r, n) in all.iter().enumerate().filter(|(r, _)| *r != me) {
                let sp = ibis.send_port(&ty()).expect("send port");
                sp.connect(n, "in").expect("connect");
                let slice = vec![me as u32; 100_000];
                let mut w = sp.message();
                w.write_u64(me as u64);
                w.write_slice(&slice[..]);
                w.finish().expect("send");
                println!(
                    "rank {me} to rank {r} over {}",
                    sp.connection_drivers()[0].2
                );
            }
            let mut from = Vec::new();
            for _ in 1..all.len() {
                let mut m = rp
                    .receive_timeout(Duration::from_secs(30))
                    .expect("a number");
                let r = m.read_u64().expect("the sender's rank");
                let v: Vec<u32> = m.read_slice().expect("its slice");
                assert!(v.len() == 100_000 && v.iter().all(|x| *x as u64 == r));
                from.push(r);
            }
            from.sort();
            println!("rank {me} heard from {from:?}");
            // Nobody leaves before everyone has read everything (a socket closed with bytes
            // unread resets the connection, and what the other side has not read is lost).
            let all_ty = PortType::builder()
                .connection(Connection::ManyToMany)
                .build();
            let done = ibis.receive_port(&all_ty, "done").expect("receive port");
            let sp = ibis.send_port(&all_ty).expect("send port");
            if me == 0 {
                for _ in 1..all.len() {
                    done.receive_timeout(Duration::from_secs(30)).expect("done");
                }
                for n in &all[1..] {
                    sp.connect(n, "done").expect("connect");
                }
            } else {
                sp.connect(&all[0], "done").expect("connect");
            }
            let mut w = sp.message();
            w.write_u8(1);
            w.finish().expect("send");
            if me != 0 {
                done.receive_timeout(Duration::from_secs(30)).expect("go");
            }
        }
        // Say that the port is there, and wait to be stopped and killed.
        "idle-reader" => {
            println!("ready");
            std::thread::sleep(LIMIT);
        }
        r => panic!("unknown role {r}"),
    }
}

/// This test binary as rank `rank` of a shm pool of `size` whose registry is at `server`,
/// reading large parts from its senders' memory if `single_copy`.
fn child(
    role: &str,
    server: &str,
    pool: &str,
    size_rank: (u32, u32),
    single_copy: bool,
) -> (Reaped, BufReader<std::process::ChildStdout>) {
    child_with(role, server, pool, size_rank, single_copy, &[])
}

/// [`child`] with more environment variables.
fn child_with(
    role: &str,
    server: &str,
    pool: &str,
    (size, rank): (u32, u32),
    single_copy: bool,
    envs: &[(&str, &str)],
) -> (Reaped, BufReader<std::process::ChildStdout>) {
    let mut c = Command::new(std::env::current_exe().expect("test executable"));
    c.args([
        "child_process_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("IPL_TEST_ROLE", role)
    .env("IPL_SERVER", server)
    .env("IPL_POOL", pool)
    .env("IPL_POOL_SIZE", size.to_string())
    .env("IPL_RANK", rank.to_string())
    .env("IPL_SECRET", "test-secret")
    .env("IPL_DRIVER", "shm")
    .env("IPL_SHM_SINGLE_COPY", if single_copy { "1" } else { "0" })
    .envs(envs.iter().copied())
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let mut r = Reaped::start(&mut c);
    let out = BufReader::new(r.0.stdout.take().expect("piped"));
    (r, out)
}

/// Reads lines of `out` until one contains `what`; fails the test at `deadline`.
fn wait_for_line(out: BufReader<std::process::ChildStdout>, what: &str, deadline: Instant) {
    let what = what.to_owned();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            if line.contains(&what) {
                let _ = tx.send(line);
                return;
            }
        }
    });
    rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .expect("the child said what it was doing in time");
}

/// A shm pool of `size` members whose registry runs in this process.
fn shm_net(size: u32) -> common::Net {
    Net::new(Driver::Shm, size)
}

fn join(net: &Net, rank: u32) -> Ibis {
    join_copying(net, rank, true)
}

fn join_copying(net: &Net, rank: u32, single_copy: bool) -> Ibis {
    let mut c = net.config();
    c.rank = Some(rank);
    c.shm_single_copy = single_copy;
    Ibis::join(c).expect("join")
}

#[test]
fn a_sender_killed_in_the_middle_of_a_message_leaves_an_error_and_no_wrong_data() {
    if role().is_some() {
        return;
    }
    // The receiver reads the sender's memory, or the message streams through the ring.
    for single_copy in [true, false] {
        sender_killed(single_copy);
    }
}

fn sender_killed(single_copy: bool) {
    let deadline = Instant::now() + LIMIT;
    let net = shm_net(3);
    let server = net.registry_address();
    let (mut sender, out) = child("sender", &server, &net.pool, (3, 1), true);
    let (me, honest) = std::thread::scope(|s| {
        let h = s.spawn(|| join(&net, 2));
        (
            join_copying(&net, 0, single_copy),
            h.join().expect("rank 2 joins"),
        )
    });
    let rp = me.receive_port(&ty(), "in").expect("receive port");
    let all = me.pool().wait_closed().expect("pool fills");
    wait_for_line(out, "connected over shm", deadline);
    let mut m = rp.receive_timeout(LIMIT).expect("the long message");
    assert_eq!(m.origin(), &all[1]);
    assert_eq!(m.read_u64().expect("the first item"), 0);
    // SIGKILL while the sender is blocked in the middle of its message.
    sender.0.kill().expect("kill the sender");
    let killed = Instant::now();
    let mut next = 1;
    let e = loop {
        match m.read_u64() {
            Ok(v) => {
                assert_eq!(v, next, "item {next} came back wrong");
                next += 1;
                assert!(next < ITEMS, "the whole message came from a killed sender");
            }
            Err(e) => break e,
        }
    };
    assert!(
        killed.elapsed() < Duration::from_secs(20),
        "the death took {:?} to notice",
        killed.elapsed()
    );
    assert!(
        matches!(e, Error::ConnectionLost { .. } | Error::NodeDied(_)),
        "{e}"
    );
    drop(m);
    // The port goes on serving the others.
    let sp = honest.send_port(&ty()).expect("send port");
    sp.connect(&all[0], "in").expect("connect");
    assert_eq!(sp.connection_drivers()[0].2, "shm");
    let mut w = sp.message();
    w.write_u64(4242);
    w.finish().expect("send");
    let mut m = rp
        .receive_timeout(Duration::from_secs(20))
        .expect("the honest message");
    assert_eq!(m.origin(), &all[2]);
    assert_eq!(m.read_u64().expect("its item"), 4242);
}

#[test]
fn a_receiver_killed_in_the_middle_of_a_message_fails_the_send_instead_of_hanging() {
    if role().is_some() {
        return;
    }
    for single_copy in [true, false] {
        receiver_killed(single_copy);
    }
}

fn receiver_killed(single_copy: bool) {
    let deadline = Instant::now() + LIMIT;
    let net = shm_net(2);
    let server = net.registry_address();
    let (mut reader, out) = child("reader", &server, &net.pool, (2, 1), single_copy);
    let me = join(&net, 0);
    let all = me.pool().wait_closed().expect("pool fills");
    let sp = me.send_port(&ty()).expect("send port");
    sp.connect(&all[1], "in").expect("connect");
    assert_eq!(sp.connection_drivers()[0].2, "shm");
    let killer = std::thread::spawn(move || {
        wait_for_line(out, "reading", deadline);
        reader.0.kill().expect("kill the reader");
        (Instant::now(), reader)
    });
    let mut w = sp.message();
    for i in 0..ITEMS {
        w.write_u64(i);
    }
    let r = w.finish();
    let (killed, _reader) = killer.join().expect("the killer thread");
    let e = r.expect_err("a message half read by a killed process cannot be sent");
    assert!(
        killed.elapsed() < Duration::from_secs(20),
        "the send took {:?} after the kill to fail",
        killed.elapsed()
    );
    assert!(e.to_string().contains("node1"), "{e}");
}

/// The name of a node's shared-memory socket.
fn endpoint(n: &ipl::NodeId) -> SocketAddr {
    SocketAddr::from_abstract_name(n.reach().shm.as_bytes()).expect("an abstract name")
}

/// Sends `bytes` to the socket and reads until it closes; returns what came back.
fn poke(addr: &SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = UnixStream::connect_addr(addr).expect("connect to the node's Unix socket");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut back = Vec::new();
    let _ = s.read_to_end(&mut back);
    back
}

fn exchange(from: &Ibis, rp: &ipl::ReceivePort, to: &ipl::NodeId, v: u64) {
    let sp = from.send_port(&ty()).unwrap();
    sp.connect(to, "in").unwrap();
    assert_eq!(sp.connection_drivers()[0].2, "shm");
    let mut w = sp.message();
    w.write_u64(v);
    w.finish().unwrap();
    let mut m = rp.receive_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(m.read_u64().unwrap(), v);
}

#[test]
fn strangers_and_wrong_secrets_on_the_unix_socket_get_no_ring() {
    if role().is_some() {
        return;
    }
    let net = shm_net(2);
    let (a, b) = std::thread::scope(|s| {
        let h = s.spawn(|| join(&net, 1));
        (join(&net, 0), h.join().unwrap())
    });
    let rp = b.receive_port(&ty(), "in").unwrap();
    let to = b.id();
    exchange(&a, &rp, &to, 1);
    let addr = endpoint(&to);
    // 1. Garbage instead of a hello, in several shapes: closed without an answer.
    for junk in [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        vec![0xffu8; 100_000],
        (0..=255u8).cycle().take(5000).collect(),
        vec![],
    ] {
        let back = poke(&addr, &junk);
        assert!(
            back.len() <= ipl::testing::wire::CHALLENGE_LEN,
            "garbage got a reply"
        );
    }
    exchange(&a, &rp, &to, 2);
    // 2. A process that does not know the secret: the node's challenge proves nothing to it,
    //    and its made-up response is refused before any ring is made.
    let mut s = UnixStream::connect_addr(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (hello, nonce) = ipl::testing::wire::hello(ipl::testing::wire::Purpose::Port);
    s.write_all(&hello).unwrap();
    let mut ch = [0u8; ipl::testing::wire::CHALLENGE_LEN];
    s.read_exact(&mut ch).unwrap();
    assert!(ipl::testing::wire::answer_challenge(b"wrong", &nonce, &ch).is_err());
    s.write_all(&[0u8; ipl::testing::wire::RESPONSE_LEN])
        .unwrap();
    // The node may have closed the connection already.
    let _ = s.write_all(&[0u8; 64]);
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "a wrong secret got {} bytes", rest.len());
    exchange(&a, &rp, &to, 3);
    // 3. The right secret, then a setup frame that does not decode: dropped as well.
    let mut s = UnixStream::connect_addr(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (hello, nonce) = ipl::testing::wire::hello(ipl::testing::wire::Purpose::Port);
    s.write_all(&hello).unwrap();
    s.read_exact(&mut ch).unwrap();
    let resp = ipl::testing::wire::answer_challenge(b"test-secret", &nonce, &ch).unwrap();
    s.write_all(&resp).unwrap();
    s.write_all(&ipl::testing::wire::encode_setup(&"not a dial frame"))
        .unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "a bad setup frame got {} bytes",
        rest.len()
    );
    exchange(&a, &rp, &to, 4);
}

#[test]
fn a_pool_over_two_hosts_uses_shared_memory_inside_each_and_tcp_between() {
    if role().is_some() {
        return;
    }
    let hosts = match testkit::netns::Hosts::new(2) {
        Ok(h) => h,
        Err(why) if testkit::netns::required() => panic!("CI=true but no namespace hosts: {why}"),
        Err(why) => {
            eprintln!("skipping: cannot make namespace hosts: {why}");
            return;
        }
    };
    let deadline = Instant::now() + LIMIT;
    let hostfile = hosts.dir.join("hosts");
    std::fs::write(
        &hostfile,
        format!(
            "{} slots=2\n{} slots=2\n",
            testkit::netns::Hosts::addr(0),
            testkit::netns::Hosts::addr(1)
        ),
    )
    .unwrap();
    let rsh = hosts.rsh();
    // ipl-run (and the registry) on host 0; ranks 0 and 1 there, 2 and 3 on host 1.
    let mut cmd = hosts.exec(0, std::path::Path::new(env!("CARGO_BIN_EXE_ipl-run")));
    cmd.args(["--hostfile", hostfile.to_str().unwrap()])
        .args(["--rsh", rsh.to_str().unwrap()])
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args([
            "child_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_remove("IPL_DRIVER")
        .env("IPL_TEST_ROLE", "mesh")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (status, out, err) = Reaped::start(&mut cmd).output(deadline);
    assert!(status.success(), "{status}\n{out}\n{err}");
    let host = |r: usize| r / 2;
    for me in 0..4 {
        for other in (0..4).filter(|o| *o != me) {
            let want = if host(me) == host(other) {
                "shm"
            } else {
                "tcp"
            };
            let line = format!("rank {me} to rank {other} over {want}");
            assert!(out.contains(&line), "no '{line}' in:\n{out}\n{err}");
        }
        let others: Vec<usize> = (0..4).filter(|o| *o != me).collect();
        assert!(
            out.contains(&format!("rank {me} heard from {others:?}")),
            "rank {me} did not hear from everyone:\n{out}\n{err}"
        );
    }
}

#[test]
fn a_connection_says_how_much_it_holds_for_a_receiver_that_does_not_read() {
    if role().is_some() {
        return;
    }
    for driver in [Driver::Shm, Driver::Tcp] {
        let net = Net::new(driver, 2);
        let (a, b) = std::thread::scope(|s| {
            let h = s.spawn(|| {
                let mut c = net.config();
                c.rank = Some(1);
                Ibis::join(c).expect("join")
            });
            let mut c = net.config();
            c.rank = Some(0);
            (
                Ibis::join(c).expect("join"),
                h.join().expect("rank 1 joins"),
            )
        });
        let _rp = b.receive_port(&ty(), "in").expect("receive port");
        let all = a.pool().wait_closed().expect("pool fills");
        let sp = a.send_port(&ty()).expect("send port");
        sp.connect(&all[1], "in").expect("connect");
        let room = sp.unread_capacity();
        assert_eq!(room.len(), 1);
        match driver {
            // The ring, and the buffers the receiver reads from this process's memory.
            Driver::Shm => assert_eq!(room[0].2, (256 << 10) + (4 << 20), "{driver:?}"),
            _ => assert_eq!(room[0].2, 0, "{driver:?}"),
        }
    }
}

#[test]
fn buffers_lent_to_a_stopped_receiver_are_freed_when_the_pool_declares_it_dead() {
    if role().is_some() {
        return;
    }
    let deadline = Instant::now() + LIMIT;
    // The stopped receiver is declared dead this long after its last heartbeat.
    let death = Duration::from_secs(5);
    let net = shm_net(2);
    let server = net.registry_address();
    let (mut receiver, out) = child_with(
        "idle-reader",
        &server,
        &net.pool,
        (2, 1),
        true,
        &[("IPL_HEARTBEAT", "100ms"), ("IPL_DEATH_TIMEOUT", "5s")],
    );
    let mut c = net.config();
    c.rank = Some(0);
    c.heartbeat = Duration::from_millis(100);
    c.death_timeout = death;
    let me = Ibis::join(c).expect("join");
    let events = me.pool().subscribe();
    let all = me.pool().wait_closed().expect("pool fills");
    let peer = all[1].clone();
    wait_for_line(out, "ready", deadline);
    let sp = me.send_port(&ty()).expect("send port");
    sp.connect(&peer, "in").expect("connect");
    assert_eq!(sp.connection_drivers()[0].2, "shm");
    let ring = 256 << 10;
    if sp.unread_capacity()[0].2 <= ring {
        // Buffers are lent only to a receiver that can read this process's memory.
        assert!(
            !testkit::netns::required(),
            "CI=true but the receiver cannot read this process's memory (process_vm_readv)"
        );
        eprintln!("skipped: the receiver cannot read this process's memory here");
        return;
    }
    // SAFETY: kill(2) of our own child, which `receiver` reaps.
    let rc = unsafe { libc::kill(receiver.0.id() as i32, libc::SIGSTOP) };
    assert_eq!(rc, 0, "stop the receiver");
    let stopped = Instant::now();
    // Four rings' worth: what does not fit the ring is lent from this process's memory.
    let items = vec![7u64; 4 * ring as usize / 8];
    let mut w = sp.message();
    w.write_slice(&items[..]);
    w.finish().expect("a message the ring and the buffers hold");
    // Closing keeps the connection, whose buffers the receiver has not read, among the
    // orphans: the stopped receiver keeps its socket open.
    drop(sp);
    let orphans = ipl::testing::shm_orphans(&peer);
    assert_eq!(
        orphans,
        1,
        "orphans {:?} after the stop (the receiver is declared dead after {death:?})",
        stopped.elapsed()
    );
    loop {
        // The events come from the subscription on, and the death may have come before.
        if me.pool().dead().contains(&peer) {
            break;
        }
        match events.recv_deadline(deadline) {
            Ok(ipl::PoolEvent::Died(n)) if n == peer => break,
            Ok(_) => continue,
            Err(_) => panic!("the stopped receiver was not declared dead in time"),
        }
    }
    // The pool frees them before anybody hears of the death.
    assert_eq!(
        ipl::testing::shm_orphans(&peer),
        0,
        "orphans after the death"
    );
    let _ = receiver.0.kill();
}
