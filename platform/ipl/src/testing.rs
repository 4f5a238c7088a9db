//! Internals that tests of the wire protocol need: the handshake, frames, setup frames and
//! registry frames, to speak to a node byte by byte (as a stranger, a peer with the wrong
//! secret, or a peer that sends garbage). Not part of the library's interface.

/// The handshake and frame formats.
pub mod wire {
    pub use crate::wire::{
        accept_hello, answer_challenge, check_response, decode_setup, encode_setup, hello,
        setup_frame, FrameKind, Header, Purpose, CHALLENGE_LEN, HEADER_LEN, HELLO_LEN,
        MAX_SETUP_FRAME, RESPONSE_LEN,
    };
}

/// Frames between nodes and the registry.
pub mod registry {
    pub use crate::registry::proto::{read_frame, write_frame, FromRegistry, ToRegistry};
}

pub use crate::connect::{ConnectReply, ConnectRequest};
pub use crate::node::Reach;

/// The setup frame (with its length prefix) a send port sends over tcp after the handshake.
pub fn tcp_setup(req: &ConnectRequest) -> Vec<u8> {
    crate::wire::encode_setup(&crate::transport::tcp::Dial {
        from: req.from.address().to_owned(),
        back_link: None,
        request: req.encode(),
    })
}

/// Reads the tcp driver's reply from the front of `buf`: `Ok(None)` when more bytes are
/// needed.
pub fn tcp_reply(buf: &[u8]) -> Result<Option<ConnectReply>, String> {
    match crate::wire::decode_setup::<crate::transport::tcp::Reply>(buf)? {
        None => Ok(None),
        Some((r, _)) => ConnectReply::decode(&r.reply).map(Some),
    }
}

/// Raw MPI messages to a process on the mpi driver, to speak to it as a peer that sends
/// garbage: its tags, and a send of any bytes with any tag.
#[cfg(feature = "mpi")]
pub mod mpi {
    pub use crate::transport::mpi::raw_peer::{
        connection_tags, send, send_words, CONNECT, NOTICE, WORDS,
    };
}

/// How many closed shared-memory connections of this process to `peer` still hold buffers
/// that `peer` has not read (they are freed when it reads them, closes its end, or the pool
/// declares it dead).
pub fn shm_orphans(peer: &crate::NodeId) -> usize {
    crate::transport::shm::orphans::count(peer)
}
