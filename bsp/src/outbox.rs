//! Combining buffers: everything one process sends one destination in one superstep.

use crate::number::{Number, OutVec};
use crate::wire::{self, put_varint, varint_len};
use serde::Serialize;

/// Normalizes a type name so that types that serialize alike name the same packet type: `T`,
/// `&T` and `&mut T`; `str` and `String`; `[T]` and `Vec<T>`.
#[inline]
pub(crate) fn packet_type_name<T: ?Sized>() -> &'static str {
    let n = std::any::type_name::<T>();
    if n.starts_with(['&', '[']) || n == "str" {
        normalize(n)
    } else {
        n
    }
}

fn normalize(mut n: &'static str) -> &'static str {
    loop {
        if let Some(r) = n.strip_prefix("&mut ") {
            n = r;
        } else if let Some(r) = n.strip_prefix('&') {
            n = r;
        } else {
            break;
        }
    }
    if n == "str" {
        return std::any::type_name::<String>();
    }
    if n.starts_with('[') && n.ends_with(']') && !n.contains(';') {
        // A slice: the same name as a vector of its elements, computed once per type.
        return slice_as_vec_name(n);
    }
    n
}

/// `alloc::vec::Vec<T>` for the slice type name `[T]`, interned.
fn slice_as_vec_name(slice: &'static str) -> &'static str {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashMap<&'static str, &'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .expect("name table");
    names.entry(slice).or_insert_with(|| {
        let vec = std::any::type_name::<Vec<u8>>();
        let prefix = vec.strip_suffix("<u8>").unwrap_or("alloc::vec::Vec");
        Box::leak(format!("{prefix}<{}>", &slice[1..slice.len() - 1]).into_boxed_str())
    })
}

/// The packets, remote-memory requests and large slices for one destination, not sent yet.
#[derive(Default)]
pub(crate) struct Outbox {
    pub packets: Vec<u8>,
    pub drma: Vec<u8>,
    pub slices: Vec<Box<dyn OutVec>>,
    pub slice_bytes: usize,
    /// Types defined in this message so far, by index.
    types: Vec<&'static str>,
    /// The last type used: (name address, name length, index).
    last: Option<(usize, usize, u32)>,
}

impl Outbox {
    /// Bytes this buffer will put on the wire.
    pub(crate) fn bytes(&self) -> usize {
        self.packets.len() + self.drma.len() + self.slice_bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.packets.is_empty() && self.drma.is_empty() && self.slices.is_empty()
    }

    /// Empties the buffer after it was sent, keeping its memory for the next superstep.
    pub(crate) fn clear(&mut self) {
        self.packets.clear();
        self.drma.clear();
        self.slices.clear();
        self.forget_types();
    }

    /// [`clear`](Outbox::clear) for a buffer that [`is_empty`](Outbox::is_empty): only the
    /// type table is left to reset (every superstep does this to the buffer to the process
    /// itself, which mostly holds nothing).
    #[inline]
    pub(crate) fn forget_types(&mut self) {
        self.slice_bytes = 0;
        self.types.clear();
        self.last = None;
    }

    /// Hands the contents over (packets to oneself), leaving an empty buffer.
    pub(crate) fn take(&mut self) -> Outbox {
        std::mem::take(self)
    }

    /// The index of packet type `name` in this message, defining it on first use.
    #[inline]
    fn type_index(&mut self, name: &'static str) -> u32 {
        let key = (name.as_ptr() as usize, name.len());
        if let Some((p, l, i)) = self.last {
            if (p, l) == key {
                return i;
            }
        }
        let i = match self.types.iter().position(|t| *t == name) {
            Some(i) => i as u32,
            None => {
                self.packets.push(wire::TYPE_DEF);
                put_varint(&mut self.packets, name.len() as u64);
                self.packets.extend_from_slice(name.as_bytes());
                self.types.push(name);
                (self.types.len() - 1) as u32
            }
        };
        self.last = Some((key.0, key.1, i));
        i
    }

    /// Appends a serialized packet; returns the bytes added.
    #[inline]
    pub(crate) fn push_packet<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        v: &T,
    ) -> Result<usize, crate::codec::CodecError> {
        let start = self.packets.len();
        let t = self.type_index(name);
        if t < 0x7f {
            self.packets.push(0x80 | t as u8);
        } else {
            self.packets.push(wire::WIDE_PACKET);
            put_varint(&mut self.packets, u64::from(t));
        }
        let len_at = self.packets.len();
        self.packets.push(0);
        if let Err(e) = crate::codec::encode_into(v, &mut self.packets) {
            self.packets.truncate(start);
            return Err(e);
        }
        let n = self.packets.len() - len_at - 1;
        if n < 0x80 {
            self.packets[len_at] = n as u8;
        } else {
            // Make room for a longer length in front of the payload.
            let k = varint_len(n as u64);
            self.packets.resize(self.packets.len() + k - 1, 0);
            self.packets
                .copy_within(len_at + 1..len_at + 1 + n, len_at + k);
            let mut lenbuf = Vec::with_capacity(k);
            put_varint(&mut lenbuf, n as u64);
            self.packets[len_at..len_at + k].copy_from_slice(&lenbuf);
        }
        Ok(self.packets.len() - start)
    }

    /// Appends a slice of numbers, copying it; returns the bytes added.
    pub(crate) fn push_slice<T: Number>(&mut self, s: &[T]) -> usize {
        let bytes = std::mem::size_of_val(s);
        if bytes >= wire::OOL_MIN {
            self.push_vec(s.to_vec())
        } else {
            let start = self.packets.len();
            self.packets.push(wire::SLICE_INLINE);
            self.packets.push(T::TAG);
            put_varint(&mut self.packets, s.len() as u64);
            self.packets.extend_from_slice(bytemuck::cast_slice(s));
            self.packets.len() - start
        }
    }

    /// Appends a vector of numbers without copying it when it is large; returns the bytes added.
    pub(crate) fn push_vec<T: Number>(&mut self, v: Vec<T>) -> usize {
        let bytes = std::mem::size_of_val(&v[..]);
        if bytes < wire::OOL_MIN {
            return self.push_slice(&v);
        }
        self.packets.push(wire::SLICE_OOL);
        self.packets.push(T::TAG);
        self.slice_bytes += bytes;
        self.slices.push(Box::new(v));
        bytes + 2
    }

    /// Appends a put of `data` at `offset` of registration `reg`; returns the bytes added.
    pub(crate) fn push_put<T: Number>(&mut self, reg: u32, offset: usize, data: &[T]) -> usize {
        let start = self.drma.len();
        self.drma.push(wire::PUT);
        put_varint(&mut self.drma, u64::from(reg));
        self.drma.push(T::TAG);
        put_varint(&mut self.drma, offset as u64);
        put_varint(&mut self.drma, data.len() as u64);
        self.drma.extend_from_slice(bytemuck::cast_slice(data));
        self.drma.len() - start
    }

    /// Appends a request for `len` numbers at `offset` of registration `reg`.
    pub(crate) fn push_get(&mut self, reg: u32, code: u8, offset: usize, len: usize) -> usize {
        let start = self.drma.len();
        self.drma.push(wire::GET);
        put_varint(&mut self.drma, u64::from(reg));
        self.drma.push(code);
        put_varint(&mut self.drma, offset as u64);
        put_varint(&mut self.drma, len as u64);
        self.drma.len() - start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbox::{InPart, Incoming};

    fn part(ob: &mut Outbox) -> InPart {
        InPart::from_outbox(0, ob.take())
    }

    #[test]
    fn type_names_ignore_references_and_borrowed_forms() {
        assert_eq!(packet_type_name::<&u32>(), packet_type_name::<u32>());
        assert_eq!(
            packet_type_name::<&mut &String>(),
            packet_type_name::<String>()
        );
        assert_eq!(packet_type_name::<&str>(), packet_type_name::<String>());
        assert_eq!(
            packet_type_name::<[(u8, f64)]>(),
            packet_type_name::<Vec<(u8, f64)>>()
        );
        assert_ne!(packet_type_name::<[u8; 3]>(), packet_type_name::<Vec<u8>>());
    }

    #[test]
    fn long_packets_get_longer_length_prefixes() {
        let mut ob = Outbox::default();
        let long = vec![7u8; 300];
        ob.push_packet(packet_type_name::<Vec<u8>>(), &long)
            .unwrap();
        ob.push_packet(packet_type_name::<u16>(), &5u16).unwrap();
        let mut inc = Incoming::new(0, 1, vec![part(&mut ob)]);
        assert_eq!(inc.recv::<Vec<u8>>().unwrap(), Some((0, long)));
        assert_eq!(inc.recv::<u16>().unwrap(), Some((0, 5)));
        assert_eq!(inc.recv::<u16>().unwrap(), None);
    }
}
