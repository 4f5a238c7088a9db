//! Received packets of one superstep and the cursor `recv` reads them with.

use crate::error::{Error, Result};
use crate::number::{code_name, code_size, vec_from_bytes, Number};
use crate::outbox::{packet_type_name, Outbox};
use crate::wire::{self, Cursor};
use serde::de::DeserializeOwned;
use std::any::Any;
use std::collections::VecDeque;

/// One received message (or the packets a process sent itself).
pub(crate) struct InPart {
    pub src: usize,
    pub seq: u32,
    pub packets: Vec<u8>,
    pub drma: Vec<u8>,
    pub slices: VecDeque<Box<dyn Any + Send>>,
    /// Whether the sender's numbers must be byte-swapped here.
    pub swap: bool,
    pos: usize,
    /// Packet types defined so far: name, and the address and length of the local type name
    /// that last matched it (a cache that makes the check one comparison).
    types: Vec<(String, (usize, usize))>,
}

/// What the next entry of a packet stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A serialized packet of type index `ty`, payload at `start..end`.
    Packet { ty: usize, start: usize, end: usize },
    /// A small slice of the number type `code`, raw bytes at `start..end`.
    Inline { code: u8, start: usize, end: usize },
    /// A large slice of the number type `code`: the next slice item.
    Ool { code: u8 },
}

/// What kind of packet is next, as [`Bsp::peek`](crate::Bsp::peek) tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peek {
    /// The sender.
    pub src: usize,
    /// For a packet the name of its type (`std::any::type_name` of what was sent, references
    /// removed); for a slice `[T]` with the number type `T`.
    pub type_name: String,
    /// True for a slice of numbers (read it with `recv_slice`), false for a packet.
    pub is_slice: bool,
}

impl InPart {
    pub(crate) fn new(
        src: usize,
        seq: u32,
        packets: Vec<u8>,
        drma: Vec<u8>,
        slices: VecDeque<Box<dyn Any + Send>>,
        swap: bool,
    ) -> Self {
        InPart {
            src,
            seq,
            packets,
            drma,
            slices,
            swap,
            pos: 0,
            types: Vec::new(),
        }
    }

    /// The packets a process sent to itself: handed over without touching the network.
    pub(crate) fn from_outbox(src: usize, ob: Outbox) -> Self {
        let slices = ob.slices.into_iter().map(|s| s.into_any()).collect();
        InPart::new(src, 0, ob.packets, ob.drma, slices, false)
    }

    /// The next entry, consuming type definitions on the way; with the position after it.
    pub(crate) fn next_entry(&mut self) -> std::result::Result<Option<(Entry, usize)>, String> {
        loop {
            match scan(&self.packets, self.pos)? {
                None => return Ok(None),
                Some((Raw::TypeDef { start, end }, next)) => {
                    let name = std::str::from_utf8(&self.packets[start..end])
                        .map_err(|_| "type name is not UTF-8".to_string())?
                        .to_owned();
                    self.types.push((name, (0, 0)));
                    self.pos = next;
                }
                Some((Raw::Entry(e), next)) => {
                    if let Entry::Packet { ty, .. } = e {
                        if ty >= self.types.len() {
                            return Err(format!("packet of undefined type index {ty}"));
                        }
                    }
                    return Ok(Some((e, next)));
                }
            }
        }
    }

    /// Whether type index `ty` names the local type `name`. (The same type's name may sit at
    /// different addresses in different parts of a program, so a miss of the address cache
    /// compares the text.)
    #[inline]
    fn type_is(&mut self, ty: usize, name: &'static str) -> bool {
        let key = (name.as_ptr() as usize, name.len());
        let Some((n, cached)) = self.types.get_mut(ty) else {
            return false;
        };
        if *cached == key {
            return true;
        }
        if n == name {
            *cached = key;
            return true;
        }
        false
    }
}

/// The packets of the previous superstep, in order of source pid, then of sending.
pub(crate) struct Incoming {
    pid: usize,
    superstep: u64,
    parts: Vec<InPart>,
    cur: usize,
}

impl Incoming {
    /// `parts` sorted by (src, seq). `superstep` is the one the packets are read in.
    pub(crate) fn new(pid: usize, superstep: u64, parts: Vec<InPart>) -> Self {
        Incoming {
            pid,
            superstep,
            parts,
            cur: 0,
        }
    }

    fn decode_err(&self, src: usize, reason: String) -> Error {
        Error::Decode {
            pid: self.pid,
            superstep: self.superstep,
            src,
            reason,
        }
    }

    /// The next entry, skipping exhausted parts: (part index, entry, position after it).
    fn next(&mut self) -> Result<Option<(usize, Entry, usize)>> {
        while self.cur < self.parts.len() {
            let i = self.cur;
            match self.parts[i].next_entry() {
                Ok(Some((e, next))) => return Ok(Some((i, e, next))),
                Ok(None) => self.cur += 1,
                Err(why) => {
                    let src = self.parts[i].src;
                    return Err(self.decode_err(src, why));
                }
            }
        }
        Ok(None)
    }

    fn describe(&self, part: usize, e: Entry) -> String {
        match e {
            Entry::Packet { ty, .. } => self.parts[part].types[ty].0.clone(),
            Entry::Inline { code, .. } | Entry::Ool { code } => format!("[{}]", code_name(code)),
        }
    }

    fn mismatch(&self, part: usize, e: Entry, asked: String) -> Error {
        let sent = match e {
            Entry::Packet { .. } => format!("a packet of type {}", self.describe(part, e)),
            _ => format!("a slice {}", self.describe(part, e)),
        };
        Error::TypeMismatch {
            pid: self.pid,
            superstep: self.superstep,
            src: self.parts[part].src,
            sent,
            asked,
        }
    }

    /// The common case, inline: the next entry of the current message is a short packet of a
    /// type already matched. Everything else takes [`Incoming::recv_general`].
    #[inline]
    pub(crate) fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<(usize, T)>> {
        let name = packet_type_name::<T>();
        if let Some(part) = self.parts.get_mut(self.cur) {
            let pos = part.pos;
            if let [tag, len, ..] = part.packets[pos.min(part.packets.len())..] {
                let ty = usize::from(tag & 0x7f);
                let start = pos + 2;
                let end = start + usize::from(len);
                if tag >= 0x80 && len < 0x80 && end <= part.packets.len() && part.type_is(ty, name)
                {
                    if let Ok(v) = crate::codec::decode::<T>(&part.packets[start..end], part.swap) {
                        part.pos = end;
                        return Ok(Some((part.src, v)));
                    }
                }
            }
        }
        self.recv_general()
    }

    fn recv_general<T: DeserializeOwned>(&mut self) -> Result<Option<(usize, T)>> {
        let Some((i, e, next)) = self.next()? else {
            return Ok(None);
        };
        let name = packet_type_name::<T>();
        let Entry::Packet { ty, start, end } = e else {
            return Err(self.mismatch(i, e, format!("a packet of type {name}")));
        };
        if !self.parts[i].type_is(ty, name) {
            return Err(self.mismatch(i, e, format!("a packet of type {name}")));
        }
        let part = &mut self.parts[i];
        match crate::codec::decode::<T>(&part.packets[start..end], part.swap) {
            Ok(v) => {
                part.pos = next;
                Ok(Some((part.src, v)))
            }
            Err(err) => {
                let src = part.src;
                Err(self.decode_err(src, format!("packet of type {name}: {err}")))
            }
        }
    }

    pub(crate) fn recv_slice<T: Number>(&mut self) -> Result<Option<(usize, Vec<T>)>> {
        let Some((i, e, next)) = self.next()? else {
            return Ok(None);
        };
        let asked = format!("a slice [{}]", T::NAME);
        match e {
            Entry::Inline { code, start, end } if code == T::TAG => {
                let part = &mut self.parts[i];
                let v = vec_from_bytes::<T>(&part.packets[start..end], part.swap);
                part.pos = next;
                Ok(Some((part.src, v)))
            }
            Entry::Ool { code } if code == T::TAG => {
                let part = &mut self.parts[i];
                let Some(any) = part.slices.pop_front() else {
                    let src = part.src;
                    return Err(self.decode_err(src, "slice entry without its slice".into()));
                };
                match any.downcast::<Vec<T>>() {
                    Ok(v) => {
                        part.pos = next;
                        Ok(Some((part.src, *v)))
                    }
                    Err(any) => {
                        part.slices.push_front(any);
                        let src = part.src;
                        Err(self.decode_err(
                            src,
                            "slice item does not match its entry's number type".into(),
                        ))
                    }
                }
            }
            _ => Err(self.mismatch(i, e, asked)),
        }
    }

    pub(crate) fn next_is<T: ?Sized>(&mut self) -> Result<bool> {
        let Some((i, e, _)) = self.next()? else {
            return Ok(false);
        };
        Ok(match e {
            Entry::Packet { ty, .. } => self.parts[i].type_is(ty, packet_type_name::<T>()),
            Entry::Inline { .. } | Entry::Ool { .. } => false,
        })
    }

    pub(crate) fn peek(&mut self) -> Result<Option<Peek>> {
        let Some((i, e, _)) = self.next()? else {
            return Ok(None);
        };
        Ok(Some(Peek {
            src: self.parts[i].src,
            type_name: self.describe(i, e),
            is_slice: !matches!(e, Entry::Packet { .. }),
        }))
    }

    /// Whether any process's packets arrived (whose buffers [`into_buffers`] hands back).
    ///
    /// [`into_buffers`]: Incoming::into_buffers
    pub(crate) fn has_parts(&self) -> bool {
        !self.parts.is_empty()
    }

    /// The packet buffers, for reuse.
    pub(crate) fn into_buffers(self) -> impl Iterator<Item = Vec<u8>> {
        self.parts.into_iter().map(|p| p.packets)
    }

    /// Packets and slices not read yet.
    pub(crate) fn unread(&self) -> usize {
        let mut n = 0;
        for (i, p) in self.parts.iter().enumerate().skip(self.cur) {
            let mut pos = if i == self.cur { p.pos } else { 0 };
            while let Ok(Some((raw, next))) = scan(&p.packets, pos) {
                if let Raw::Entry(_) = raw {
                    n += 1;
                }
                pos = next;
            }
        }
        n
    }
}

/// An entry of a packet stream as it is on the wire.
enum Raw {
    TypeDef { start: usize, end: usize },
    Entry(Entry),
}

/// Reads the entry at `pos` of a packet stream; with the position after it.
fn scan(buf: &[u8], pos: usize) -> std::result::Result<Option<(Raw, usize)>, String> {
    let mut c = Cursor::new(buf, pos);
    if c.at_end() {
        return Ok(None);
    }
    let tag = c.u8()?;
    let raw = match tag {
        t if t >= 0x80 => {
            let ty = (t & 0x7f) as usize;
            let n = c.usize()?;
            let start = c.pos;
            c.bytes(n)?;
            Raw::Entry(Entry::Packet {
                ty,
                start,
                end: c.pos,
            })
        }
        wire::WIDE_PACKET => {
            let ty = c.usize()?;
            let n = c.usize()?;
            let start = c.pos;
            c.bytes(n)?;
            Raw::Entry(Entry::Packet {
                ty,
                start,
                end: c.pos,
            })
        }
        wire::TYPE_DEF => {
            let n = c.usize()?;
            let start = c.pos;
            c.bytes(n)?;
            Raw::TypeDef { start, end: c.pos }
        }
        wire::SLICE_INLINE => {
            let code = c.u8()?;
            let size = code_size(code).ok_or_else(|| format!("unknown number type code {code}"))?;
            let n = c.usize()?;
            let bytes = n
                .checked_mul(size)
                .ok_or_else(|| "slice length overflows".to_string())?;
            let start = c.pos;
            c.bytes(bytes)?;
            Raw::Entry(Entry::Inline {
                code,
                start,
                end: c.pos,
            })
        }
        wire::SLICE_OOL => {
            let code = c.u8()?;
            code_size(code).ok_or_else(|| format!("unknown number type code {code}"))?;
            Raw::Entry(Entry::Ool { code })
        }
        t => return Err(format!("unknown packet entry {t:#x} at byte {pos}")),
    };
    Ok(Some((raw, c.pos)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_than_127_types_use_wide_entries() {
        let mut ob = Outbox::default();
        let names: Vec<&'static str> = (0..130)
            .map(|i| &*Box::leak(format!("t{i}").into_boxed_str()))
            .collect();
        for (i, n) in names.iter().enumerate() {
            ob.push_packet(n, &(i as u32)).unwrap();
        }
        let mut p = InPart::from_outbox(0, ob.take());
        let mut seen = 0;
        while let Some((e, next)) = p.next_entry().unwrap() {
            let Entry::Packet { ty, start, end } = e else {
                panic!("unexpected {e:?}")
            };
            assert_eq!(ty, seen);
            assert_eq!(p.types[ty].0, names[seen]);
            assert_eq!(p.packets[p.pos] == wire::WIDE_PACKET, ty >= 127);
            let v: u32 = crate::codec::decode(&p.packets[start..end], false).unwrap();
            assert_eq!(v, seen as u32);
            p.pos = next;
            seen += 1;
        }
        assert_eq!(seen, 130);
    }

    #[test]
    fn a_wrong_type_is_an_error_and_leaves_the_packet_unread() {
        let mut ob = Outbox::default();
        ob.push_packet(packet_type_name::<u32>(), &7u32).unwrap();
        ob.push_slice(&[1.5f64, 2.5]);
        ob.push_vec((0..1000).map(|i| i as f32).collect::<Vec<f32>>());
        ob.push_packet(packet_type_name::<str>(), "text").unwrap();
        let mut inc = Incoming::new(3, 9, vec![InPart::from_outbox(3, ob.take())]);
        assert_eq!(inc.unread(), 4);
        let e = inc.recv::<u64>().unwrap_err().to_string();
        assert!(
            e.contains("u32") && e.contains("u64") && e.contains("pid 3"),
            "{e}"
        );
        assert!(e.contains("superstep 9"), "{e}");
        assert!(inc.next_is::<u32>().unwrap());
        assert_eq!(inc.recv::<u32>().unwrap(), Some((3, 7)));
        let e = inc.recv::<u32>().unwrap_err().to_string();
        assert!(e.contains("[f64]"), "{e}");
        assert!(inc.recv_slice::<f32>().is_err());
        assert_eq!(inc.recv_slice::<f64>().unwrap(), Some((3, vec![1.5, 2.5])));
        let p = inc.peek().unwrap().unwrap();
        assert!(p.is_slice && p.type_name == "[f32]", "{p:?}");
        let (_, big) = inc.recv_slice::<f32>().unwrap().unwrap();
        assert_eq!(big.len(), 1000);
        assert_eq!(big[999], 999.0);
        // A str is read as a String: they serialize alike.
        assert!(inc.next_is::<str>().unwrap());
        assert!(inc.recv::<Vec<u8>>().is_err());
        assert_eq!(inc.unread(), 1);
        assert_eq!(inc.recv::<String>().unwrap(), Some((3, "text".to_string())));
        assert_eq!(inc.unread(), 0);
    }

    #[test]
    fn corrupt_streams_are_errors_not_panics() {
        for bytes in [
            vec![0x80u8, 1, 0],
            vec![wire::TYPE_DEF, 200],
            vec![wire::SLICE_INLINE, 99, 1, 0],
            vec![wire::SLICE_OOL, 10],
            vec![0x33],
        ] {
            let part = InPart::new(1, 0, bytes, Vec::new(), VecDeque::new(), false);
            let mut inc = Incoming::new(0, 0, vec![part]);
            assert!(inc.recv::<u8>().is_err());
            assert!(inc.recv_slice::<f64>().is_err());
        }
    }
}
