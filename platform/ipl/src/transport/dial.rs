//! The connecting side of a handshake: prove knowledge of the pool secret, then send the
//! driver's setup frame. The accepting side is in [`super::listen`].

use crate::error::{Error, Result};
use crate::node::NodeId;
use crate::wire::{self, ByDeadline, TimedRead};
use std::io::{Read, Write};
use std::time::Instant;

/// A node that cuts the handshake short is overloaded, or leaving; it cannot know yet whether
/// our secret is right. Callers retry these while the node lives.
pub(crate) fn cut(peer: &NodeId, what: &str, e: impl std::fmt::Display) -> Error {
    Error::ConnectionLost {
        peer: peer.to_string(),
        reason: format!("{what} ({e}): the node may be overloaded or leaving"),
    }
}

/// Runs the handshake on `s` (blocking, each write bounded by the socket's write timeout, the
/// reads by `deadline`) and sends `setup` (the body of the setup frame).
pub(crate) fn prove<S>(
    s: &S,
    secret: &[u8],
    setup: &[u8],
    deadline: Instant,
    peer: &NodeId,
) -> Result<()>
where
    S: TimedRead,
    for<'a> &'a S: Write,
{
    let io_err = |what: &str, e: std::io::Error| Error::io(format!("{what} {peer}"), e);
    let (hello, nonce) = wire::hello(wire::Purpose::Port);
    let mut w = s;
    w.write_all(&hello)
        .map_err(|e| io_err("handshake with", e))?;
    let mut ch = [0u8; wire::CHALLENGE_LEN];
    ByDeadline {
        stream: s,
        deadline,
    }
    .read_exact(&mut ch)
    .map_err(|e| cut(peer, "no answer to the handshake", e))?;
    let resp = wire::answer_challenge(secret, &nonce, &ch).map_err(|reason| Error::Auth {
        peer: peer.to_string(),
        reason,
    })?;
    let mut out = resp.to_vec();
    out.extend_from_slice(&(setup.len() as u32).to_le_bytes());
    out.extend_from_slice(setup);
    w.write_all(&out)
        .map_err(|e| io_err("connect request to", e))?;
    Ok(())
}

/// Reads the peer's setup frame (its reply) from `s` by `deadline`; returns its body.
pub(crate) fn reply<S: TimedRead>(s: &S, deadline: Instant, peer: &NodeId) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut r = ByDeadline {
        stream: s,
        deadline,
    };
    loop {
        let mut tmp = [0u8; 1024];
        let n = r
            .read(&mut tmp)
            .map_err(|e| cut(peer, "no reply to the connect request", e))?;
        if n == 0 {
            return Err(cut(
                peer,
                "connection closed before the reply to the connect request",
                "end of stream",
            ));
        }
        buf.extend_from_slice(&tmp[..n]);
        match wire::setup_frame(&buf) {
            Ok(Some((body, _))) => return Ok(body.to_vec()),
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
