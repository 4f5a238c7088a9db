//! Node descriptors: the SHA-1 states that make a UTS tree reproducible in any order.
//!
//! Every node carries the 20-byte SHA-1 digest that identifies it. The root's digest is the
//! hash of 16 zero bytes followed by the root seed (4 bytes, big-endian); child `i`'s is the
//! hash of its parent's 20 bytes followed by `i` (4 bytes, big-endian). A node's random value
//! is its last four digest bytes, read big-endian, with the sign bit cleared: a number in
//! `0..2^31` that the tree shape turns into a number of children. This is the splittable
//! generator of the UTS benchmark (Olivier et al., LCPC 2006), so the trees, and the node
//! counts published for them, are the same as those of every other UTS implementation.
//!
//! Both messages fit in one 64-byte SHA-1 block with their padding, so a descriptor costs one
//! run of the compression function, which the `sha1` crate runs with the CPU's SHA
//! instructions where there are some.

use serde::{Deserialize, Serialize};

/// The SHA-1 initial state (FIPS 180-4, 5.3.1).
const SHA1_IV: [u32; 5] = [
    0x6745_2301,
    0xefcd_ab89,
    0x98ba_dcfe,
    0x1032_5476,
    0xc3d2_e1f0,
];

/// The length in bits of a child's message: the parent's 20 bytes and the 4-byte index.
const CHILD_MESSAGE_BITS: u32 = 24 * 8;

/// The length in bits of the root's message: 16 zero bytes and the 4-byte seed.
const ROOT_MESSAGE_BITS: u32 = 20 * 8;

/// A node's SHA-1 digest, as the five big-endian words of the hash state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Descriptor(pub [u32; 5]);

impl Descriptor {
    /// The root's descriptor for `seed` (`-r`).
    pub fn root(seed: i32) -> Descriptor {
        let mut words = [0u32; 16];
        words[4] = seed as u32;
        words[5] = 0x8000_0000;
        words[15] = ROOT_MESSAGE_BITS;
        Descriptor(hash_block(&words))
    }

    /// The descriptor of child number `index` (counted from 0).
    #[inline]
    pub fn child(&self, index: u32) -> Descriptor {
        ChildHasher::new(self).child(index)
    }

    /// The node's random value in `0..2^31`: the last four digest bytes, big-endian, without
    /// the sign bit (`rng_rand` of the reference code).
    #[inline(always)]
    pub fn rand(&self) -> u32 {
        self.0[4] & 0x7fff_ffff
    }

    /// The digest as the 20 bytes SHA-1 defines.
    pub fn to_bytes(&self) -> [u8; 20] {
        let mut bytes = [0u8; 20];
        for (chunk, word) in bytes.chunks_exact_mut(4).zip(self.0) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        bytes
    }
}

/// Hashes the children of one parent: the message block is laid out once, and each child
/// changes only the four bytes of its index.
pub struct ChildHasher {
    block: [u8; 64],
}

impl ChildHasher {
    /// Prepares the block `parent || index || padding || length`.
    #[inline]
    pub fn new(parent: &Descriptor) -> ChildHasher {
        let mut words = [0u32; 16];
        words[..5].copy_from_slice(&parent.0);
        words[6] = 0x8000_0000;
        words[15] = CHILD_MESSAGE_BITS;
        ChildHasher {
            block: words_to_block(&words),
        }
    }

    /// The descriptor of child `index`.
    #[inline]
    pub fn child(&mut self, index: u32) -> Descriptor {
        self.block[20..24].copy_from_slice(&index.to_be_bytes());
        let mut state = SHA1_IV;
        sha1::compress(&mut state, std::slice::from_ref((&self.block).into()));
        Descriptor(state)
    }

    /// The descriptor of child `index`, hashed `rounds` times over (`-g`, the compute
    /// granularity: the reference code derives each child that many times, all with the same
    /// result, to make nodes more expensive).
    pub fn child_rounds(&mut self, index: u32, rounds: u32) -> Descriptor {
        let mut d = self.child(index);
        for _ in 1..rounds {
            // The block must be hashed again, not the result reused: that is the work asked for.
            std::hint::black_box(&mut self.block);
            d = self.child(index);
        }
        d
    }
}

fn words_to_block(words: &[u32; 16]) -> [u8; 64] {
    let mut block = [0u8; 64];
    for (chunk, word) in block.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    block
}

fn hash_block(words: &[u32; 16]) -> [u32; 5] {
    let block = words_to_block(words);
    let mut state = SHA1_IV;
    sha1::compress(&mut state, std::slice::from_ref((&block).into()));
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SHA-1 of the FIPS 180 test message "abc", through the same block layout.
    #[test]
    fn the_compression_function_is_sha1() {
        let mut words = [0u32; 16];
        words[0] = u32::from_be_bytes(*b"abc\x80");
        words[15] = 24;
        assert_eq!(
            hash_block(&words),
            [
                0xa999_3e36,
                0x4706_816a,
                0xba3e_2571,
                0x7850_c26c,
                0x9cd0_d89d
            ]
        );
    }

    #[test]
    fn bytes_are_big_endian_words() {
        let d = Descriptor([0x0102_0304, 0, 0, 0, 0x8a0b_0c0d]);
        assert_eq!(&d.to_bytes()[..4], &[1, 2, 3, 4]);
        assert_eq!(d.rand(), 0x0a0b_0c0d);
    }

    #[test]
    fn granularity_repeats_the_same_hash() {
        let root = Descriptor::root(7);
        let mut h = ChildHasher::new(&root);
        assert_eq!(h.child_rounds(3, 5), root.child(3));
        assert_ne!(root.child(3), root.child(4));
        assert_ne!(Descriptor::root(7), Descriptor::root(8));
    }
}
