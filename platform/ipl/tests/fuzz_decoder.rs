//! Property tests of every decoder that sees bytes from the network: no input makes them panic.

use ipl::testing::wire::{self, Header};
use ipl::testing::{ConnectReply, ConnectRequest};
use ipl::ReadMessage;
use proptest::prelude::*;

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct Nested {
    a: Vec<Option<String>>,
    b: (u8, i64, f32),
    c: std::collections::BTreeMap<u16, Vec<u8>>,
}

/// Reads `bytes` as a message with every reader in turn, as a confused receiver might.
fn read_everything(bytes: Vec<u8>, swapped: bool, ops: &[u8]) {
    let mut m = ReadMessage::from_bytes(bytes, swapped);
    for op in ops {
        let _ = match op % 13 {
            0 => m.read_u8().map(|_| ()),
            1 => m.read_i16().map(|_| ()),
            2 => m.read_u32().map(|_| ()),
            3 => m.read_f64().map(|_| ()),
            4 => m.read_bool().map(|_| ()),
            5 => m.read_slice::<f64>().map(|_| ()),
            6 => m.read_slice::<u8>().map(|_| ()),
            7 => m.read_bytes().map(|_| ()),
            8 => m.read::<String>().map(|_| ()),
            9 => m.read::<Nested>().map(|_| ()),
            10 => m.read::<Vec<(u32, char)>>().map(|_| ()),
            11 => {
                let mut buf = b"kept".to_vec();
                m.read_bytes_to(&mut buf)
            }
            _ => {
                let mut buf = [0i32; 7];
                m.read_slice_into(&mut buf)
            }
        };
    }
    m.finish();
}

/// A valid message prefix followed by arbitrary bytes reaches the deeper decoding paths.
fn with_valid_prefix(tail: &[u8]) -> Vec<u8> {
    let mut w = ipl::WriteMessage::detached();
    w.write_u32(3);
    w.write_slice(&[1.0f64, 2.0][..]);
    let mut v = w.into_bytes().unwrap();
    v.extend_from_slice(tail);
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn message_reader_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512),
                                   swapped in any::<bool>(),
                                   ops in proptest::collection::vec(any::<u8>(), 1..16)) {
        read_everything(bytes.clone(), swapped, &ops);
        read_everything(with_valid_prefix(&bytes), swapped, &ops);
    }

    #[test]
    fn object_tags_with_random_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
        // An object tag and a plausible length in front of random content.
        let mut v = vec![0x40u8];
        v.extend_from_slice(&(body.len() as u64).to_ne_bytes());
        v.extend_from_slice(&body);
        let _ = ReadMessage::from_bytes(v.clone(), false).read::<Nested>();
        let _ = ReadMessage::from_bytes(v, true).read::<Vec<String>>();
    }

    #[test]
    fn frame_headers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64), max in any::<u64>()) {
        let _ = Header::decode(&bytes, max);
    }

    #[test]
    fn setup_frames_and_handshakes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = wire::decode_setup::<ConnectRequest>(&bytes);
        let _ = ConnectReply::decode(&bytes);
        let _ = ipl::testing::tcp_reply(&bytes);
        let _ = wire::accept_hello(b"s", &bytes);
        let _ = wire::answer_challenge(b"s", &[0; 16], &bytes);
        let _ = wire::check_response(&[0; 32], &bytes);
    }

    #[test]
    fn registry_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = ipl::testing::registry::read_frame::<ipl::testing::registry::ToRegistry>(&mut &bytes[..]);
        let _ = ipl::testing::registry::read_frame::<ipl::testing::registry::FromRegistry>(&mut &bytes[..]);
    }
}

/// A list as a recursive type: each node an `i32` and maybe the next.
#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct Chain {
    a: i32,
    next: Option<Box<Chain>>,
}

/// A message holding one [`Chain`] of `len` nodes, in the object format's native order: the
/// object tag, its length, then each node's `i32` and option tag.
fn chain_message(len: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(len * 5);
    for i in 0..len {
        body.extend_from_slice(&0i32.to_ne_bytes());
        body.push(u8::from(i + 1 < len));
    }
    let mut m = vec![0x40u8];
    m.extend_from_slice(&(body.len() as u64).to_ne_bytes());
    m.extend(body);
    m
}

/// A value nested a million levels deep is an error, not a stack overflow that aborts the
/// process; one of a hundred levels reads.
#[test]
fn deeply_nested_objects_are_an_error_not_a_stack_overflow() {
    let read = |len: usize| {
        let m = chain_message(len);
        std::thread::spawn(move || {
            ReadMessage::from_bytes(m, false)
                .read::<Chain>()
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .join()
        .expect("the reading thread survives")
    };
    assert_eq!(read(100), Ok(()));
    let e = read(1_000_000).unwrap_err();
    assert!(e.contains("nested deeper than"), "{e}");
}
