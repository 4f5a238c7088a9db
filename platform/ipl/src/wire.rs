//! Bytes on the wire: the secret handshake, connection setup frames and message headers.
//!
//! Every connection (to a node or to the registry) starts with a challenge-response handshake in
//! which both sides prove knowledge of the pool secret with HMAC-SHA256 over two fresh nonces;
//! the secret itself never travels. After that a port connection carries one setup frame each
//! way (length-prefixed; the driver's, wrapping the ports' connect request and reply), then a
//! stream of frames, each a fixed 24-byte header followed by its payload.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Handshake message 1 (connector to acceptor): magic, version, purpose, nonce.
pub const HELLO_LEN: usize = 24;
/// Handshake message 2 (acceptor to connector): magic, nonce, proof of the acceptor.
pub const CHALLENGE_LEN: usize = 56;
/// Handshake message 3 (connector to acceptor): proof of the connector.
pub const RESPONSE_LEN: usize = 32;
/// Largest connect request or reply accepted.
pub const MAX_SETUP_FRAME: usize = 64 * 1024;
/// Size of a message frame header.
pub const HEADER_LEN: usize = 24;

const HELLO_MAGIC: &[u8; 4] = b"IPLh";
const CHALLENGE_MAGIC: &[u8; 4] = b"IPLc";
const VERSION: u8 = 1;

/// What a connection is for, stated in the hello so one handshake serves both uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A send port connecting to a receive port.
    Port = 1,
    /// A node talking to the registry.
    Registry = 2,
}

fn mac(secret: &[u8], role: u8, a: &[u8; 16], b: &[u8; 16]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC accepts any key length");
    m.update(&[role]);
    m.update(a);
    m.update(b);
    m
}

/// Builds the connector's hello and remembers its nonce.
pub fn hello(purpose: Purpose) -> ([u8; HELLO_LEN], [u8; 16]) {
    let nonce: [u8; 16] = rand::random();
    let mut h = [0u8; HELLO_LEN];
    h[..4].copy_from_slice(HELLO_MAGIC);
    h[4] = VERSION;
    h[5] = purpose as u8;
    h[8..24].copy_from_slice(&nonce);
    (h, nonce)
}

/// Acceptor side: checks a hello and answers with a challenge that proves our knowledge of the
/// secret. Returns the purpose, the challenge to send, and the state needed to check the reply.
pub fn accept_hello(
    secret: &[u8],
    hello: &[u8],
) -> Result<(Purpose, [u8; CHALLENGE_LEN], [u8; 32]), String> {
    if hello.len() != HELLO_LEN || &hello[..4] != HELLO_MAGIC {
        return Err("not an ipl hello (wrong magic)".into());
    }
    if hello[4] != VERSION {
        return Err(format!(
            "protocol version {} (this node speaks {VERSION})",
            hello[4]
        ));
    }
    let purpose = match hello[5] {
        1 => Purpose::Port,
        2 => Purpose::Registry,
        p => return Err(format!("unknown connection purpose {p}")),
    };
    let client: [u8; 16] = hello[8..24].try_into().expect("sized");
    let server: [u8; 16] = rand::random();
    let mut c = [0u8; CHALLENGE_LEN];
    c[..4].copy_from_slice(CHALLENGE_MAGIC);
    c[8..24].copy_from_slice(&server);
    c[24..56].copy_from_slice(&mac(secret, b'A', &client, &server).finalize().into_bytes());
    let expected: [u8; 32] = mac(secret, b'C', &client, &server)
        .finalize()
        .into_bytes()
        .into();
    Ok((purpose, c, expected))
}

/// Connector side: checks the acceptor's proof and produces our own.
pub fn answer_challenge(
    secret: &[u8],
    client_nonce: &[u8; 16],
    challenge: &[u8],
) -> Result<[u8; RESPONSE_LEN], String> {
    if challenge.len() != CHALLENGE_LEN || &challenge[..4] != CHALLENGE_MAGIC {
        return Err("peer is not an ipl node (wrong challenge magic)".into());
    }
    let server: [u8; 16] = challenge[8..24].try_into().expect("sized");
    mac(secret, b'A', client_nonce, &server)
        .verify_slice(&challenge[24..56])
        .map_err(|_| "peer does not know the pool secret".to_string())?;
    Ok(mac(secret, b'C', client_nonce, &server)
        .finalize()
        .into_bytes()
        .into())
}

/// Acceptor side: checks the connector's proof in constant time.
pub fn check_response(expected: &[u8; 32], response: &[u8]) -> Result<(), String> {
    use subtle_eq::ct_eq;
    if response.len() == RESPONSE_LEN && ct_eq(expected, response) {
        Ok(())
    } else {
        Err("connector does not know the pool secret".into())
    }
}

mod subtle_eq {
    /// Compares without an early exit, so timing does not reveal how many bytes matched.
    pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// Encodes a setup frame: u32 little-endian length, then postcard.
pub fn encode_setup<T: Serialize>(v: &T) -> Vec<u8> {
    let body = postcard::to_allocvec(v).expect("setup frames always serialize");
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Finds one setup frame at the front of `buf`: Ok(None) when more bytes are needed,
/// Ok(Some((body, consumed))) when complete, Err when the bytes cannot be a setup frame.
pub fn setup_frame(buf: &[u8]) -> Result<Option<(&[u8], usize)>, String> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let n = u32::from_le_bytes(buf[..4].try_into().expect("sized")) as usize;
    if n > MAX_SETUP_FRAME {
        return Err(format!(
            "setup frame of {n} bytes exceeds {MAX_SETUP_FRAME}"
        ));
    }
    if buf.len() < 4 + n {
        return Ok(None);
    }
    Ok(Some((&buf[4..4 + n], 4 + n)))
}

/// Tries to decode one setup frame from the front of `buf`: Ok(None) when more bytes are needed,
/// Ok(Some((value, consumed))) when complete, Err when the bytes cannot be a setup frame.
pub fn decode_setup<'a, T: Deserialize<'a>>(buf: &'a [u8]) -> Result<Option<(T, usize)>, String> {
    match setup_frame(buf)? {
        None => Ok(None),
        Some((body, used)) => {
            let v = postcard::from_bytes(body).map_err(|e| format!("bad setup frame: {e}"))?;
            Ok(Some((v, used)))
        }
    }
}

/// Kinds of frame on an established port connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// One message; the payload is the message body.
    Message = 1,
    /// The sender disconnects; no payload; nothing follows.
    Close = 2,
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What follows.
    pub kind: FrameKind,
    /// The payload was written in the opposite of the reader's byte order... as seen by the
    /// writer: true when the writer wrote big-endian data.
    pub big_endian: bool,
    /// Payload length in bytes.
    pub len: u64,
    /// Wide-area emulation: nanoseconds since the Unix epoch before which the message must not
    /// be delivered; 0 for immediate delivery.
    pub deliver_at_ns: u64,
}

const FRAME_MAGIC: &[u8; 2] = b"IM";

impl Header {
    /// Serializes the header (the header itself is always little-endian).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..2].copy_from_slice(FRAME_MAGIC);
        h[2] = self.kind as u8;
        h[3] = self.big_endian as u8;
        h[8..16].copy_from_slice(&self.len.to_le_bytes());
        h[16..24].copy_from_slice(&self.deliver_at_ns.to_le_bytes());
        h
    }

    /// Parses and validates a header; `max` bounds the payload length.
    pub fn decode(b: &[u8], max: u64) -> Result<Header, String> {
        if b.len() < HEADER_LEN {
            return Err("short header".into());
        }
        if &b[..2] != FRAME_MAGIC {
            return Err(format!("bad frame magic {:02x}{:02x}", b[0], b[1]));
        }
        let kind = match b[2] {
            1 => FrameKind::Message,
            2 => FrameKind::Close,
            k => return Err(format!("unknown frame kind {k}")),
        };
        if b[3] > 1 || b[4..8] != [0; 4] {
            return Err("reserved header bits set".into());
        }
        let len = u64::from_le_bytes(b[8..16].try_into().expect("sized"));
        if len > max {
            return Err(format!("message of {len} bytes exceeds the limit of {max}"));
        }
        if kind == FrameKind::Close && len != 0 {
            return Err("close frame with a payload".into());
        }
        Ok(Header {
            kind,
            big_endian: b[3] == 1,
            len,
            deliver_at_ns: u64::from_le_bytes(b[16..24].try_into().expect("sized")),
        })
    }
}

/// A socket read under one deadline for a whole exchange, however the peer spreads its bytes:
/// a peer sending a byte now and then cannot hold a connection (and the handshake slot it
/// occupies) open past the deadline, as it could with a timeout per read.
pub(crate) struct ByDeadline<'a, S> {
    /// The socket.
    pub(crate) stream: &'a S,
    /// When reading gives up.
    pub(crate) deadline: std::time::Instant,
}

/// A socket whose reads can time out.
pub(crate) trait TimedRead {
    /// Sets the longest a read waits.
    fn set_read_timeout(&self, d: Option<std::time::Duration>) -> std::io::Result<()>;
    /// Reads what is there, waiting at most the read timeout.
    fn read_some(&self, buf: &mut [u8]) -> std::io::Result<usize>;
}

impl TimedRead for std::net::TcpStream {
    fn set_read_timeout(&self, d: Option<std::time::Duration>) -> std::io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, d)
    }
    fn read_some(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut s = self;
        std::io::Read::read(&mut s, buf)
    }
}

impl TimedRead for std::os::unix::net::UnixStream {
    fn set_read_timeout(&self, d: Option<std::time::Duration>) -> std::io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, d)
    }
    fn read_some(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut s = self;
        std::io::Read::read(&mut s, buf)
    }
}

impl<S: TimedRead> std::io::Read for ByDeadline<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let passed = || {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the handshake's deadline passed",
            )
        };
        let left = self
            .deadline
            .saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(passed());
        }
        self.stream.set_read_timeout(Some(left))?;
        match self.stream.read_some(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(passed()),
            r => r,
        }
    }
}

/// Nanoseconds since the Unix epoch (the clock the wide-area emulation stamps messages with).
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_succeeds_with_the_same_secret_only() {
        for (a, b, ok) in [(b"s1", b"s1", true), (b"s1", b"s2", false)] {
            let (h, nonce) = hello(Purpose::Port);
            let (p, challenge, expected) = accept_hello(a, &h).unwrap();
            assert_eq!(p, Purpose::Port);
            match answer_challenge(b, &nonce, &challenge) {
                Ok(resp) => {
                    assert!(ok);
                    check_response(&expected, &resp).unwrap();
                }
                Err(e) => {
                    assert!(!ok);
                    assert!(e.contains("secret"));
                }
            }
        }
    }

    #[test]
    fn a_forged_response_is_rejected() {
        let (h, _) = hello(Purpose::Registry);
        let (_, _, expected) = accept_hello(b"secret", &h).unwrap();
        assert!(check_response(&expected, &[0u8; 32]).is_err());
        assert!(check_response(&expected, &[0u8; 3]).is_err());
    }

    #[test]
    fn headers_round_trip_and_garbage_is_refused() {
        let h = Header {
            kind: FrameKind::Message,
            big_endian: true,
            len: 12345,
            deliver_at_ns: 99,
        };
        assert_eq!(Header::decode(&h.encode(), u64::MAX).unwrap(), h);
        assert!(Header::decode(&h.encode(), 100).is_err());
        assert!(Header::decode(b"GET / HTTP/1.1\r\nHost: xx", u64::MAX).is_err());
        assert!(accept_hello(b"x", b"GET / HTTP/1.1\r\nHost: xx").is_err());
    }
}
