//! Channel pairing: a reply channel rides on the request channel's socket, and the two
//! directions close independently. (Alone in this file: it counts the process's sockets.)

mod common;

use common::Net;
use ipl::{Connection, Driver, Ibis, PortType};
use std::time::Duration;

fn sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter(|t| t.to_string_lossy().starts_with("socket:"))
                .count()
        })
        .unwrap_or(0)
}

fn send(sp: &ipl::SendPort, v: u32) {
    let mut w = sp.message();
    w.write_u32(v);
    w.finish().unwrap();
}

fn recv(rp: &ipl::ReceivePort) -> u32 {
    let mut m = rp.receive_timeout(Duration::from_secs(20)).unwrap();
    m.read_u32().unwrap()
}

#[test]
fn reply_channel_pairs_and_directions_close_independently() {
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
    let t = PortType::builder().connection(Connection::OneToOne).build();
    let requests = b.receive_port(&t, "requests").unwrap();
    let replies = a.receive_port(&t, "replies").unwrap();

    let to_b = a.send_port(&t).unwrap();
    to_b.connect(&b.id(), "requests").unwrap();
    send(&to_b, 1);
    assert_eq!(recv(&requests), 1);

    // The reply channel: without pairing it would add a socket at each end.
    let before = sockets();
    let to_a = b.send_port(&t).unwrap();
    to_a.connect(&a.id(), "replies").unwrap();
    for i in 0..100 {
        send(&to_a, i);
        assert_eq!(recv(&replies), i);
        send(&to_b, i + 1000);
        assert_eq!(recv(&requests), i + 1000);
    }
    assert_eq!(
        sockets(),
        before,
        "the reply channel opened sockets of its own"
    );

    // Closing the request direction leaves the reply direction working.
    to_b.disconnect(&b.id(), "requests").unwrap();
    assert!(requests
        .receive_timeout(Duration::from_millis(200))
        .is_err());
    send(&to_a, 7);
    assert_eq!(recv(&replies), 7);

    // A new request channel works beside the reply channel still on the old socket.
    to_b.connect(&b.id(), "requests").unwrap();
    send(&to_b, 8);
    assert_eq!(recv(&requests), 8);
    to_a.disconnect(&a.id(), "replies").unwrap();
    send(&to_b, 9);
    assert_eq!(recv(&requests), 9);
}
