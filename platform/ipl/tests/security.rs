//! Wrong secrets and garbage bytes are refused; the node keeps serving its real peers.

mod common;

use common::Net;
use ipl::{Config, Connection, Driver, Error, Ibis, PortType};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

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
    let (hello, nonce) = ipl::wire::hello(ipl::wire::Purpose::Port);
    s.write_all(&hello).unwrap();
    let mut ch = [0u8; ipl::wire::CHALLENGE_LEN];
    s.read_exact(&mut ch).unwrap();
    assert!(ipl::wire::answer_challenge(b"wrong", &nonce, &ch).is_err());
    s.write_all(&[0u8; ipl::wire::RESPONSE_LEN]).unwrap();
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
            sink.len() <= ipl::wire::CHALLENGE_LEN,
            "garbage got a reply"
        );
    }
    exchange(&a, &b, &rp, 3);

    // 3. A peer that knows the secret but sends corrupt frames after connecting: that connection
    //    is dropped, the port keeps receiving from the others.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (hello, nonce) = ipl::wire::hello(ipl::wire::Purpose::Port);
    s.write_all(&hello).unwrap();
    let mut ch = [0u8; ipl::wire::CHALLENGE_LEN];
    s.read_exact(&mut ch).unwrap();
    let resp = ipl::wire::answer_challenge(b"test-secret", &nonce, &ch).unwrap();
    s.write_all(&resp).unwrap();
    let req = ipl::wire::ConnectRequest {
        from: a.id(),
        send_port: 999,
        port: "in".into(),
        port_type: ty(),
        back_link: None,
    };
    s.write_all(&ipl::wire::encode_setup(&req)).unwrap();
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
