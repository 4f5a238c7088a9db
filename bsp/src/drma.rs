//! Distributed memory access after BSPlib: registered arrays, `put` and `get`.
//!
//! Every process registers its arrays in the same order; the n-th registration of each process
//! forms one distributed array, and a [`Reg`] handle names it on every process (lengths may
//! differ between processes). A `put` is written into the destination's array at the end of the
//! superstep; a `get` reads the source's array at the end of the superstep and writes into a
//! local registered array. Order at the end of a superstep, on every process:
//! 1. gets are served from the array as it is when its owner enters `sync` (before this
//!    superstep's puts);
//! 2. puts are applied, in order of source pid and, per source, in the order issued (a later
//!    put to the same place wins);
//! 3. the data of this process's gets is written into its registered arrays.

use crate::error::{Error, Result};
use crate::inbox::InPart;
use crate::net::Ctx;
use crate::number::{code_name, code_size, swap_elements, Number};
use crate::op;
use crate::superstep::Bsp;
use crate::wire::{self, put_varint, Cursor, Header};
use std::any::Any;
use std::collections::BTreeMap;
use std::marker::PhantomData;

/// Round number of get replies within the sync operation (after the barrier's rounds).
const GET_ROUND: u32 = u32::MAX;

/// Handle of a registered array of `T`, returned by [`Bsp::register`]. It names the array of
/// the same registration on every process.
pub struct Reg<T> {
    id: u32,
    instance: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Reg<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Reg<T> {}

impl<T> std::fmt::Debug for Reg<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reg#{}<{}>", self.id, std::any::type_name::<T>())
    }
}

impl<T> Reg<T> {
    /// The registration's number (its position in registration order).
    pub fn id(&self) -> u32 {
        self.id
    }
}

/// A registered array, its element type erased.
pub(crate) trait Slot: Send {
    fn code(&self) -> u8;
    fn len(&self) -> usize;
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<T: Number> Slot for Vec<T> {
    fn code(&self) -> u8 {
        T::TAG
    }
    fn len(&self) -> usize {
        self.as_slice().len()
    }
    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// A get issued in this superstep, waiting for its data.
pub(crate) struct PendingGet {
    src: usize,
    into: u32,
    into_offset: usize,
    len: usize,
    code: u8,
}

/// A range of a registration, checked: `offset..offset + len` within `have` elements.
fn range(offset: usize, len: usize, have: usize) -> Option<std::ops::Range<usize>> {
    let end = offset.checked_add(len)?;
    (end <= have).then_some(offset..end)
}

/// A requested range for an error: `offset..end`, or, where the end is past the largest
/// index, the offset and the length, rather than an end that would be wrong.
fn shown(offset: usize, len: usize) -> String {
    match offset.checked_add(len) {
        Some(end) => format!("{offset}..{end}"),
        None => format!("{len} elements from {offset}"),
    }
}

impl Bsp {
    fn own<T: Number>(&self, reg: Reg<T>, what: &str) -> Result<u32> {
        let ok = reg.instance == self.instance
            && matches!(self.regs.get(reg.id as usize), Some(Some(s)) if s.code() == T::TAG);
        if ok {
            Ok(reg.id)
        } else {
            Err(Error::Usage {
                pid: self.pid,
                what: format!(
                    "{what}: {reg:?} is not a registration of this process (deregistered, or \
                     from another Bsp)"
                ),
            })
        }
    }

    /// Registers `data` as this process's part of a distributed array. Every process registers
    /// its arrays in the same order; the handle names the array of the same position on every
    /// process. Usable as a put target in the same superstep.
    pub fn register<T: Number>(&mut self, data: Vec<T>) -> Result<Reg<T>> {
        let id = u32::try_from(self.regs.len()).map_err(|_| Error::Usage {
            pid: self.pid,
            what: "register: more than 2^32 registrations".into(),
        })?;
        self.regs.push(Some(Box::new(data)));
        Ok(Reg {
            id,
            instance: self.instance,
            _t: PhantomData,
        })
    }

    /// Ends a registration and returns the array. Puts that arrive for it later are errors at
    /// this process; the registration's number is not reused.
    pub fn deregister<T: Number>(&mut self, reg: Reg<T>) -> Result<Vec<T>> {
        let id = self.own(reg, "deregister")?;
        let slot = self.regs[id as usize].take().expect("checked by own");
        Ok(*slot
            .into_any()
            .downcast::<Vec<T>>()
            .expect("element type checked by own"))
    }

    /// This process's part of a registered array.
    pub fn registered<T: Number>(&self, reg: Reg<T>) -> Result<&[T]> {
        let id = self.own(reg, "registered")?;
        let slot = self.regs[id as usize].as_ref().expect("checked by own");
        Ok(slot
            .as_any()
            .downcast_ref::<Vec<T>>()
            .expect("element type checked by own"))
    }

    /// This process's part of a registered array, writable.
    pub fn registered_mut<T: Number>(&mut self, reg: Reg<T>) -> Result<&mut [T]> {
        let id = self.own(reg, "registered_mut")?;
        let slot = self.regs[id as usize].as_mut().expect("checked by own");
        Ok(slot
            .as_any_mut()
            .downcast_mut::<Vec<T>>()
            .expect("element type checked by own"))
    }

    /// Writes `data` into process `dest`'s part of `reg` at `offset`, at the end of this
    /// superstep. The data is copied now. A range outside the destination's array is an error
    /// reported by the destination's `sync`.
    pub fn put<T: Number>(
        &mut self,
        dest: usize,
        reg: Reg<T>,
        offset: usize,
        data: &[T],
    ) -> Result<()> {
        if dest >= self.nprocs {
            return Err(self.bad_pid("put", dest));
        }
        let id = self.own(reg, "put")?;
        let n = self.out[dest].push_put(id, offset, data);
        self.buffered(dest, n)
    }

    /// Reads `len` elements at `offset` of process `src`'s part of `reg` at the end of this
    /// superstep (before the superstep's puts there) and writes them into this process's part
    /// of `into` at `into_offset`. A range outside the source's array is an error of this
    /// process's `sync`.
    pub fn get<T: Number>(
        &mut self,
        src: usize,
        reg: Reg<T>,
        offset: usize,
        len: usize,
        into: Reg<T>,
        into_offset: usize,
    ) -> Result<()> {
        if src >= self.nprocs {
            return Err(self.bad_pid("get", src));
        }
        let id = self.own(reg, "get")?;
        let into_id = self.own(into, "get (target)")?;
        let have = self.regs[into_id as usize].as_ref().map_or(0, |s| s.len());
        if range(into_offset, len, have).is_none() {
            return Err(Error::Drma {
                pid: self.pid,
                superstep: self.superstep,
                what: format!(
                    "get into registration {into_id} at {}: it has {have} elements",
                    shown(into_offset, len)
                ),
            });
        }
        let n = self.out[src].push_get(id, T::TAG, offset, len);
        self.gets.push(PendingGet {
            src,
            into: into_id,
            into_offset,
            len,
            code: T::TAG,
        });
        self.buffered(src, n)
    }

    fn drma_error(&self, what: String) -> Error {
        Error::Drma {
            pid: self.pid,
            superstep: self.superstep,
            what,
        }
    }

    /// Serves the gets in `parts`, applies the puts, then receives this process's get data.
    /// Runs the whole exchange even after a local error, so that peers waiting for replies are
    /// not left waiting; the first error is returned at the end.
    pub(crate) fn drma_phase(&mut self, parts: &[InPart], seq: u64, ctx: &Ctx) -> Result<()> {
        let any_drma = parts.iter().any(|p| !p.drma.is_empty());
        if !any_drma && self.gets.is_empty() {
            return Ok(());
        }
        let mut first: Option<Error> = None;
        let mut replies: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
        // Senders whose requests could not be read: their replies end with the refusal of the
        // first part that could not (see `serve_gets`), and none of their puts is applied.
        let mut unreadable: Vec<usize> = Vec::new();
        if any_drma {
            for part in parts.iter().filter(|p| !p.drma.is_empty()) {
                if unreadable.contains(&part.src) {
                    continue;
                }
                if let Err(e) = self.serve_gets(part, &mut replies) {
                    unreadable.push(part.src);
                    first.get_or_insert(e);
                }
            }
            for (&to, payload) in &replies {
                if to != self.pid {
                    let hdr = Header {
                        kind: 0,
                        flags: wire::native_flag(),
                        op: op::GET_REPLY,
                        round: GET_ROUND,
                        epoch: seq,
                        aux: 0,
                        comm: 0,
                    };
                    self.send_round(to, hdr, payload, ctx)?;
                }
            }
            let readable = |p: &&InPart| !p.drma.is_empty() && !unreadable.contains(&p.src);
            for part in parts.iter().filter(readable) {
                if let Err(e) = self.apply_puts(part) {
                    first.get_or_insert(e);
                }
            }
        }
        if self.gets.is_empty() {
            return first.map_or(Ok(()), Err);
        }
        let gets = std::mem::take(&mut self.gets);
        let mut srcs: Vec<usize> = gets.iter().map(|g| g.src).collect();
        srcs.sort_unstable();
        srcs.dedup();
        for src in srcs {
            // Another process's reply is read from its message, without a copy.
            let (own, received) = if src == self.pid {
                (replies.remove(&src).unwrap_or_default(), None)
            } else {
                let msg = self.recv_round(src, seq, GET_ROUND, (op::GET_REPLY, 0), ctx)?;
                (Vec::new(), Some(msg))
            };
            let (payload, swap) = match &received {
                Some(msg) => (msg.payload(), msg.swapped()),
                None => (&own[..], false),
            };
            let mine = gets.iter().filter(|g| g.src == src);
            if let Err(e) = self.apply_replies(src, mine, payload, swap) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Reads one part's remote-memory stream and appends the data its gets ask for to the
    /// reply for the part's sender. A stream that cannot be read is an error here, and ends the
    /// sender's reply with a refusal: the sender may be waiting for the data of gets past the
    /// point where it stopped making sense, and learns now that none comes. A sender that asked
    /// for nothing does not wait, and leaves the reply unread.
    fn serve_gets(&self, part: &InPart, replies: &mut BTreeMap<usize, Vec<u8>>) -> Result<()> {
        let Err(why) = self.serve_stream(part, replies) else {
            return Ok(());
        };
        refuse(
            replies.entry(part.src).or_default(),
            &format!(
                "pid {} could not read the remote-memory requests of pid {}: {why}",
                self.pid, part.src
            ),
        );
        Err(Error::Decode {
            pid: self.pid,
            superstep: self.superstep,
            src: part.src,
            reason: format!("remote-memory requests: {why}"),
        })
    }

    /// [`serve_gets`](Bsp::serve_gets) up to the first entry that cannot be read.
    fn serve_stream(
        &self,
        part: &InPart,
        replies: &mut BTreeMap<usize, Vec<u8>>,
    ) -> std::result::Result<(), String> {
        let mut c = Cursor::new(&part.drma, 0);
        while !c.at_end() {
            match c.u8()? {
                wire::PUT => {
                    let (_, code, _, n) = put_head(&mut c)?;
                    let size = code_size(code).ok_or_else(|| format!("number code {code}"))?;
                    c.bytes(n.saturating_mul(size))?;
                }
                wire::GET => {
                    let (reg, code, offset, n) = put_head(&mut c)?;
                    let out = replies.entry(part.src).or_default();
                    match self.regs.get(reg as usize).and_then(|s| s.as_ref()) {
                        Some(slot) if slot.code() == code => match range(offset, n, slot.len()) {
                            Some(r) => {
                                let size = code_size(code).expect("registered type");
                                out.push(0);
                                out.extend_from_slice(&slot.bytes()[r.start * size..r.end * size]);
                            }
                            None => refuse(
                                out,
                                &format!(
                                    "get of {} from registration {reg} of pid {}: \
                                         it has {} elements",
                                    shown(offset, n),
                                    self.pid,
                                    slot.len()
                                ),
                            ),
                        },
                        Some(slot) => refuse(
                            out,
                            &format!(
                                "get of {} from registration {reg} of pid {}, which holds {}",
                                code_name(code),
                                self.pid,
                                code_name(slot.code())
                            ),
                        ),
                        None => refuse(
                            out,
                            &format!(
                                "get from registration {reg}, which pid {} does not have",
                                self.pid
                            ),
                        ),
                    }
                }
                t => return Err(format!("unknown entry {t:#x}")),
            }
        }
        Ok(())
    }

    /// Applies the puts of one part.
    fn apply_puts(&mut self, part: &InPart) -> Result<()> {
        let bad = |why: String| Error::Decode {
            pid: self.pid,
            superstep: self.superstep,
            src: part.src,
            reason: format!("remote-memory requests: {why}"),
        };
        let mut c = Cursor::new(&part.drma, 0);
        let mut first = None;
        while !c.at_end() {
            let tag = c.u8().map_err(bad)?;
            let (reg, code, offset, n) = put_head(&mut c).map_err(bad)?;
            if tag == wire::GET {
                continue;
            }
            let size = code_size(code).ok_or_else(|| bad(format!("number code {code}")))?;
            let data = c.bytes(n.saturating_mul(size)).map_err(bad)?;
            let pid = self.pid;
            let problem = match self.regs.get_mut(reg as usize).and_then(|s| s.as_mut()) {
                Some(slot) if slot.code() == code => match range(offset, n, slot.len()) {
                    Some(r) => {
                        let dst = &mut slot.bytes_mut()[r.start * size..r.end * size];
                        dst.copy_from_slice(data);
                        if part.swap {
                            swap_elements(dst, size);
                        }
                        None
                    }
                    None => Some(format!(
                        "put from pid {} to {} of registration {reg}: pid {pid} has {} \
                         elements",
                        part.src,
                        shown(offset, n),
                        slot.len()
                    )),
                },
                Some(slot) => Some(format!(
                    "put of {} from pid {} to registration {reg}, which holds {} here",
                    code_name(code),
                    part.src,
                    code_name(slot.code())
                )),
                None => Some(format!(
                    "put from pid {} to registration {reg}, which pid {pid} does not have",
                    part.src
                )),
            };
            if let Some(what) = problem {
                first.get_or_insert(self.drma_error(what));
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Writes the data of the gets to `src`, in the order they were issued.
    fn apply_replies<'a>(
        &mut self,
        src: usize,
        gets: impl Iterator<Item = &'a PendingGet>,
        payload: &[u8],
        swap: bool,
    ) -> Result<()> {
        let bad = |why: String| Error::Decode {
            pid: self.pid,
            superstep: self.superstep,
            src,
            reason: format!("get reply: {why}"),
        };
        let mut c = Cursor::new(payload, 0);
        let mut first = None;
        for g in gets {
            // A reply that ends after a refusal refuses the gets past it: `src` could not read
            // this process's requests there (see `serve_gets`).
            if first.is_some() && c.at_end() {
                break;
            }
            match c.u8().map_err(bad)? {
                0 => {
                    let size = code_size(g.code).expect("a number type");
                    let data = c.bytes(g.len * size).map_err(bad)?;
                    let Some(slot) = self.regs.get_mut(g.into as usize).and_then(|s| s.as_mut())
                    else {
                        first.get_or_insert(self.drma_error(format!(
                            "get into registration {}, deregistered before the sync",
                            g.into
                        )));
                        continue;
                    };
                    let Some(r) = range(g.into_offset, g.len, slot.len()) else {
                        continue;
                    };
                    let dst = &mut slot.bytes_mut()[r.start * size..r.end * size];
                    dst.copy_from_slice(data);
                    if swap {
                        swap_elements(dst, size);
                    }
                }
                _ => {
                    let why = refusal(&mut c).map_err(bad)?;
                    first.get_or_insert(self.drma_error(why));
                }
            }
        }
        // A refusal past the last get: `src` served every get and could not read what came
        // after them.
        if first.is_none() && !c.at_end() {
            let e = match c.u8().map_err(bad)? {
                0 => bad("data past the last get".into()),
                _ => self.drma_error(refusal(&mut c).map_err(bad)?),
            };
            first = Some(e);
        }
        first.map_or(Ok(()), Err)
    }
}

/// Reads the fixed fields of a put or get entry: registration, number code, offset, count.
fn put_head(c: &mut Cursor<'_>) -> std::result::Result<(u32, u8, usize, usize), String> {
    let reg = u32::try_from(c.varint()?).map_err(|_| "registration number too large")?;
    let code = c.u8()?;
    let offset = c.usize()?;
    let n = c.usize()?;
    Ok((reg, code, offset, n))
}

/// Reads the reason of a refusal in a get reply, after its mark.
fn refusal(c: &mut Cursor<'_>) -> std::result::Result<String, String> {
    let n = c.usize()?;
    Ok(String::from_utf8_lossy(c.bytes(n)?).into_owned())
}

/// Appends a refusal to a get reply.
fn refuse(out: &mut Vec<u8>, why: &str) {
    out.push(1);
    put_varint(out, why.len() as u64);
    out.extend_from_slice(why.as_bytes());
}

#[cfg(test)]
mod tests {
    use crate::{Error, Options};
    use std::time::{Duration, Instant};

    /// A get request its server cannot read fails the sync at both ends at once: the server
    /// names the stream it could not read, and the process that asked is refused the data it
    /// waits for, where it used to wait for it until the time limit. The unreadable entry
    /// comes between two gets, so that the refusal stands for the second, or after both, so
    /// that it follows their data.
    #[test]
    fn an_unreadable_get_request_fails_both_ends_at_once() {
        let limit = Duration::from_secs(10);
        for between in [true, false] {
            let opts = Options {
                sync_timeout: Some(limit),
                departure_grace: limit,
                ..Options::default()
            };
            let each = crate::run_local_with(2, opts, move |bsp| {
                let me = bsp.pid() as u64;
                let a = bsp.register(vec![me + 10; 4])?;
                let into = bsp.register(vec![0u64; 4])?;
                if me == 1 {
                    bsp.get(0, a, 0, 2, into, 0)?;
                    if between {
                        bsp.out[0].drma.push(0xee);
                    }
                    bsp.get(0, a, 2, 2, into, 2)?;
                    if !between {
                        bsp.out[0].drma.push(0xee);
                    }
                }
                let start = Instant::now();
                let synced = bsp.sync();
                let took = start.elapsed();
                Ok((synced, took, bsp.registered(into)?.to_vec()))
            })
            .expect("the run");
            let [(server, t0, _), (asker, t1, got)] = <[_; 2]>::try_from(each).expect("2");
            match server {
                Err(Error::Decode {
                    pid: 0,
                    src: 1,
                    reason,
                    ..
                }) => {
                    assert!(reason.contains("unknown entry 0xee"), "{reason}")
                }
                other => panic!("between {between}: the server got {other:?}"),
            }
            match asker {
                Err(Error::Drma { pid: 1, what, .. }) => assert!(
                    what.contains("pid 0 could not read the remote-memory requests of pid 1"),
                    "{what}"
                ),
                other => panic!("between {between}: the process that asked got {other:?}"),
            }
            for t in [t0, t1] {
                assert!(t < limit / 2, "between {between}: a sync of {t:?}");
            }
            // The data of the gets the server read before the unreadable entry came.
            let want: &[u64] = if between { &[10, 10, 0, 0] } else { &[10; 4] };
            assert_eq!(got, want, "between {between}");
        }
    }
}
