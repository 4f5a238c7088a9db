//! The object format: serde values as fixed-width primitives in the writer's byte order.
//!
//! Fixed widths (no varints) make encoding a straight copy of each field, which is what makes
//! object throughput high; the reader swaps bytes only when the writer's order differs from its
//! own ("receiver makes right"). Lengths are u64, enum variants u32, `Option` a one-byte tag.
//! The format is not self-describing: the reader must ask for the type the writer wrote.
//! A value nests at most [`MAX_DEPTH`] levels deep (options, sequences, maps, structs, tuples
//! and enums each count one): a reader refuses deeper ones rather than overflow its stack.

use serde::de::{self, DeserializeSeed, IntoDeserializer, SeqAccess, Visitor};
use serde::ser::{self, Serialize};
use std::fmt::Display;

/// Error raised by the object format. Boxed so that results stay one word wider than their
/// value: decoding returns through many nested calls, and a wide error slows every one of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    msg: Box<str>,
}

fn fmt_err(msg: String) -> FormatError {
    FormatError {
        msg: msg.into_boxed_str(),
    }
}

impl FormatError {
    /// The message.
    pub fn message(&self) -> &str {
        &self.msg
    }
}

impl Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for FormatError {}

impl ser::Error for FormatError {
    fn custom<T: Display>(msg: T) -> Self {
        fmt_err(msg.to_string())
    }
}

impl de::Error for FormatError {
    fn custom<T: Display>(msg: T) -> Self {
        fmt_err(msg.to_string())
    }
}

type Res<T> = std::result::Result<T, FormatError>;

/// Serializes `value` onto the end of `out`; `swap` writes the opposite of the native order.
#[inline]
pub fn encode_into<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>, swap: bool) -> Res<()> {
    value.serialize(&mut Encoder { out, swap })
}

/// Serializes `value` into a new buffer in native order.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Res<Vec<u8>> {
    let mut out = Vec::with_capacity(64);
    encode_into(value, &mut out, false)?;
    Ok(out)
}

/// Deserializes a value that occupies all of `bytes`; `swap` when the writer's order differs.
#[inline]
pub fn decode<'de, T: serde::Deserialize<'de>>(bytes: &'de [u8], swap: bool) -> Res<T> {
    // The byte order is a type parameter so the common native path has no per-value branch.
    if swap {
        decode_in::<T, true>(bytes)
    } else {
        decode_in::<T, false>(bytes)
    }
}

#[inline]
fn decode_in<'de, T: serde::Deserialize<'de>, const SWAP: bool>(bytes: &'de [u8]) -> Res<T> {
    let mut d = Decoder::<SWAP> {
        input: bytes,
        depth: 0,
    };
    let v = T::deserialize(&mut d)?;
    if !d.input.is_empty() {
        return Err(fmt_err(format!(
            "{} trailing bytes after the object",
            d.input.len()
        )));
    }
    Ok(v)
}

/// Deserializes a native-order value from `bytes`.
pub fn from_slice<'de, T: serde::Deserialize<'de>>(bytes: &'de [u8]) -> Res<T> {
    decode(bytes, false)
}

struct Encoder<'a> {
    out: &'a mut Vec<u8>,
    swap: bool,
}

macro_rules! put {
    ($self:ident, $v:expr) => {{
        let v = if $self.swap { $v.swap_bytes() } else { $v };
        $self.out.extend_from_slice(&v.to_ne_bytes());
        Ok(())
    }};
}

impl Encoder<'_> {
    fn len(&mut self, n: usize) -> Res<()> {
        put!(self, n as u64)
    }
}

/// Patches a sequence length that was not known up front.
struct Compound<'a, 'b> {
    enc: &'b mut Encoder<'a>,
    len_at: Option<usize>,
    count: u64,
}

impl<'a, 'b> Compound<'a, 'b> {
    fn finish(self) -> Res<()> {
        if let Some(at) = self.len_at {
            let v = if self.enc.swap {
                self.count.swap_bytes()
            } else {
                self.count
            };
            self.enc.out[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        }
        Ok(())
    }
}

impl<'a, 'b> ser::Serializer for &'b mut Encoder<'a> {
    type Ok = ();
    type Error = FormatError;
    type SerializeSeq = Compound<'a, 'b>;
    type SerializeTuple = Compound<'a, 'b>;
    type SerializeTupleStruct = Compound<'a, 'b>;
    type SerializeTupleVariant = Compound<'a, 'b>;
    type SerializeMap = Compound<'a, 'b>;
    type SerializeStruct = Compound<'a, 'b>;
    type SerializeStructVariant = Compound<'a, 'b>;

    #[inline]
    fn serialize_bool(self, v: bool) -> Res<()> {
        self.out.push(v as u8);
        Ok(())
    }
    #[inline]
    fn serialize_i8(self, v: i8) -> Res<()> {
        self.out.push(v as u8);
        Ok(())
    }
    #[inline]
    fn serialize_i16(self, v: i16) -> Res<()> {
        put!(self, v)
    }
    #[inline]
    fn serialize_i32(self, v: i32) -> Res<()> {
        put!(self, v)
    }
    #[inline]
    fn serialize_i64(self, v: i64) -> Res<()> {
        put!(self, v)
    }
    #[inline]
    fn serialize_i128(self, v: i128) -> Res<()> {
        put!(self, v)
    }
    #[inline]
    fn serialize_u8(self, v: u8) -> Res<()> {
        self.out.push(v);
        Ok(())
    }
    #[inline]
    fn serialize_u16(self, v: u16) -> Res<()> {
        put!(self, v)
    }
    #[inline]
    fn serialize_u32(self, v: u32) -> Res<()> {
        put!(self, v)
    }
    #[inline]
    fn serialize_u64(self, v: u64) -> Res<()> {
        put!(self, v)
    }
    #[inline]
    fn serialize_u128(self, v: u128) -> Res<()> {
        put!(self, v)
    }
    #[inline]
    fn serialize_f32(self, v: f32) -> Res<()> {
        put!(self, v.to_bits())
    }
    #[inline]
    fn serialize_f64(self, v: f64) -> Res<()> {
        put!(self, v.to_bits())
    }
    #[inline]
    fn serialize_char(self, v: char) -> Res<()> {
        put!(self, v as u32)
    }
    #[inline]
    fn serialize_str(self, v: &str) -> Res<()> {
        self.serialize_bytes(v.as_bytes())
    }
    #[inline]
    fn serialize_bytes(self, v: &[u8]) -> Res<()> {
        self.len(v.len())?;
        self.out.extend_from_slice(v);
        Ok(())
    }
    #[inline]
    fn serialize_none(self) -> Res<()> {
        self.out.push(0);
        Ok(())
    }
    #[inline]
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Res<()> {
        self.out.push(1);
        value.serialize(self)
    }
    #[inline]
    fn serialize_unit(self) -> Res<()> {
        Ok(())
    }
    #[inline]
    fn serialize_unit_struct(self, _: &'static str) -> Res<()> {
        Ok(())
    }
    #[inline]
    fn serialize_unit_variant(self, _: &'static str, idx: u32, _: &'static str) -> Res<()> {
        put!(self, idx)
    }
    #[inline]
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Res<()> {
        v.serialize(self)
    }
    #[inline]
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        idx: u32,
        _: &'static str,
        v: &T,
    ) -> Res<()> {
        put!(self, idx)?;
        v.serialize(self)
    }
    #[inline]
    fn serialize_seq(self, len: Option<usize>) -> Res<Self::SerializeSeq> {
        let len_at = match len {
            Some(n) => {
                self.len(n)?;
                None
            }
            None => {
                let at = self.out.len();
                self.out.extend_from_slice(&[0; 8]);
                Some(at)
            }
        };
        Ok(Compound {
            enc: self,
            len_at,
            count: 0,
        })
    }
    #[inline]
    fn serialize_tuple(self, _: usize) -> Res<Self::SerializeTuple> {
        Ok(Compound {
            enc: self,
            len_at: None,
            count: 0,
        })
    }
    #[inline]
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Res<Self::SerializeTupleStruct> {
        self.serialize_tuple(0)
    }
    #[inline]
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        idx: u32,
        _: &'static str,
        _: usize,
    ) -> Res<Self::SerializeTupleVariant> {
        put!(self, idx)?;
        self.serialize_tuple(0)
    }
    #[inline]
    fn serialize_map(self, len: Option<usize>) -> Res<Self::SerializeMap> {
        self.serialize_seq(len)
    }
    #[inline]
    fn serialize_struct(self, _: &'static str, _: usize) -> Res<Self::SerializeStruct> {
        self.serialize_tuple(0)
    }
    #[inline]
    fn serialize_struct_variant(
        self,
        _: &'static str,
        idx: u32,
        _: &'static str,
        _: usize,
    ) -> Res<Self::SerializeStructVariant> {
        put!(self, idx)?;
        self.serialize_tuple(0)
    }
}

macro_rules! compound_impl {
    ($trait:ident, $method:ident $(, $key:ident)?) => {
        impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = FormatError;
            #[inline]
            fn $method<T: Serialize + ?Sized>(&mut self, $($key: &'static str,)? value: &T) -> Res<()> {
                $(let _ = $key;)?
                self.count += 1;
                value.serialize(&mut *self.enc)
            }
            fn end(self) -> Res<()> {
                self.finish()
            }
        }
    };
}

compound_impl!(SerializeSeq, serialize_element);
compound_impl!(SerializeTuple, serialize_element);
compound_impl!(SerializeTupleStruct, serialize_field);
compound_impl!(SerializeTupleVariant, serialize_field);
compound_impl!(SerializeStruct, serialize_field, key);
compound_impl!(SerializeStructVariant, serialize_field, key);

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = FormatError;
    #[inline]
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Res<()> {
        self.count += 1;
        key.serialize(&mut *self.enc)
    }
    #[inline]
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Res<()> {
        value.serialize(&mut *self.enc)
    }
    #[inline]
    fn end(self) -> Res<()> {
        self.finish()
    }
}

/// The deepest nesting a value may have when it is read: a recursive type (`Option<Box<T>>`
/// in `T`) from the network could otherwise nest until the reader's stack overflows, which
/// aborts the process. Each level costs some hundreds of bytes of stack; 512 keep well within
/// a thread's 2 MiB.
pub const MAX_DEPTH: u32 = 512;

struct Decoder<'de, const SWAP: bool> {
    input: &'de [u8],
    /// Levels of nesting entered and not yet left (see [`MAX_DEPTH`]).
    depth: u32,
}

impl<'de, const SWAP: bool> Decoder<'de, SWAP> {
    /// Reads one nested level with `f`, refusing one deeper than [`MAX_DEPTH`].
    #[inline]
    fn nested<R>(&mut self, f: impl FnOnce(&mut Self) -> Res<R>) -> Res<R> {
        if self.depth >= MAX_DEPTH {
            return Err(fmt_err(format!(
                "object nested deeper than {MAX_DEPTH} levels"
            )));
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }
}

macro_rules! get {
    ($self:ident, $t:ty) => {{
        const N: usize = std::mem::size_of::<$t>();
        if $self.input.len() < N {
            return Err(fmt_err(format!(
                "object truncated: needed {} bytes, {} left",
                N,
                $self.input.len()
            )));
        }
        let (head, rest) = $self.input.split_at(N);
        $self.input = rest;
        let v = <$t>::from_ne_bytes(head.try_into().expect("length checked"));
        if SWAP {
            v.swap_bytes()
        } else {
            v
        }
    }};
}

impl<'de, const SWAP: bool> Decoder<'de, SWAP> {
    #[inline]
    fn len(&mut self) -> Res<usize> {
        let n = get!(self, u64);
        // Each element takes at least one byte except for zero-sized ones; a length beyond the
        // remaining input is corrupt for everything but unit sequences, which nobody sends large.
        if n > self.input.len() as u64 && n > (1 << 20) {
            return Err(fmt_err(format!(
                "length {n} exceeds the {} bytes left",
                self.input.len()
            )));
        }
        Ok(n as usize)
    }
    fn bytes(&mut self) -> Res<&'de [u8]> {
        let n = self.len()?;
        if n > self.input.len() {
            return Err(fmt_err(format!(
                "byte string of {n} bytes but {} left",
                self.input.len()
            )));
        }
        let (head, rest) = self.input.split_at(n);
        self.input = rest;
        Ok(head)
    }
    #[inline]
    fn byte(&mut self) -> Res<u8> {
        Ok(get!(self, u8))
    }
}

struct Counted<'a, 'de, const SWAP: bool> {
    de: &'a mut Decoder<'de, SWAP>,
    left: usize,
}

impl<'de, const SWAP: bool> SeqAccess<'de> for Counted<'_, 'de, SWAP> {
    type Error = FormatError;
    #[inline]
    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Res<Option<T::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.de).map(Some)
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de, const SWAP: bool> de::MapAccess<'de> for Counted<'_, 'de, SWAP> {
    type Error = FormatError;
    #[inline]
    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Res<Option<K::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.de).map(Some)
    }
    #[inline]
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Res<V::Value> {
        seed.deserialize(&mut *self.de)
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de, const SWAP: bool> de::EnumAccess<'de> for &mut Decoder<'de, SWAP> {
    type Error = FormatError;
    type Variant = Self;
    #[inline]
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Res<(V::Value, Self)> {
        let idx = get!(self, u32);
        let v = seed.deserialize(idx.into_deserializer())?;
        Ok((v, self))
    }
}

impl<'de, const SWAP: bool> de::VariantAccess<'de> for &mut Decoder<'de, SWAP> {
    type Error = FormatError;
    #[inline]
    fn unit_variant(self) -> Res<()> {
        Ok(())
    }
    #[inline]
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Res<T::Value> {
        seed.deserialize(self)
    }
    #[inline]
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Res<V::Value> {
        visitor.visit_seq(Counted {
            de: self,
            left: len,
        })
    }
    #[inline]
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Res<V::Value> {
        visitor.visit_seq(Counted {
            de: self,
            left: fields.len(),
        })
    }
}

macro_rules! de_prim {
    ($method:ident, $visit:ident, $t:ty) => {
        #[inline]
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
            visitor.$visit(get!(self, $t))
        }
    };
}

impl<'de, const SWAP: bool> de::Deserializer<'de> for &mut Decoder<'de, SWAP> {
    type Error = FormatError;

    #[inline]
    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Res<V::Value> {
        Err(fmt_err(
            "the object format is not self-describing; read the type that was written".into(),
        ))
    }
    #[inline]
    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        match self.byte()? {
            0 => visitor.visit_bool(false),
            1 => visitor.visit_bool(true),
            b => Err(fmt_err(format!("invalid bool byte {b}"))),
        }
    }
    #[inline]
    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        visitor.visit_i8(self.byte()? as i8)
    }
    #[inline]
    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        visitor.visit_u8(self.byte()?)
    }
    de_prim!(deserialize_i16, visit_i16, i16);
    de_prim!(deserialize_i32, visit_i32, i32);
    de_prim!(deserialize_i64, visit_i64, i64);
    de_prim!(deserialize_i128, visit_i128, i128);
    de_prim!(deserialize_u16, visit_u16, u16);
    de_prim!(deserialize_u32, visit_u32, u32);
    de_prim!(deserialize_u64, visit_u64, u64);
    de_prim!(deserialize_u128, visit_u128, u128);
    #[inline]
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        visitor.visit_f32(f32::from_bits(get!(self, u32)))
    }
    #[inline]
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        visitor.visit_f64(f64::from_bits(get!(self, u64)))
    }
    #[inline]
    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        let c = get!(self, u32);
        visitor
            .visit_char(char::from_u32(c).ok_or_else(|| fmt_err(format!("invalid char {c:#x}")))?)
    }
    #[inline]
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        let b = self.bytes()?;
        visitor.visit_borrowed_str(
            std::str::from_utf8(b).map_err(|e| fmt_err(format!("invalid UTF-8: {e}")))?,
        )
    }
    #[inline]
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        self.deserialize_str(visitor)
    }
    #[inline]
    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        visitor.visit_borrowed_bytes(self.bytes()?)
    }
    #[inline]
    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        self.deserialize_bytes(visitor)
    }
    #[inline]
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        match self.byte()? {
            0 => visitor.visit_none(),
            1 => self.nested(|d| visitor.visit_some(d)),
            b => Err(fmt_err(format!("invalid option tag {b}"))),
        }
    }
    #[inline]
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        visitor.visit_unit()
    }
    #[inline]
    fn deserialize_unit_struct<V: Visitor<'de>>(self, _: &'static str, v: V) -> Res<V::Value> {
        v.visit_unit()
    }
    #[inline]
    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, v: V) -> Res<V::Value> {
        self.nested(|d| v.visit_newtype_struct(d))
    }
    #[inline]
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        let left = self.len()?;
        self.nested(|de| visitor.visit_seq(Counted { de, left }))
    }
    #[inline]
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Res<V::Value> {
        self.nested(|de| visitor.visit_seq(Counted { de, left: len }))
    }
    #[inline]
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        len: usize,
        visitor: V,
    ) -> Res<V::Value> {
        self.deserialize_tuple(len, visitor)
    }
    #[inline]
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        let left = self.len()?;
        self.nested(|de| visitor.visit_map(Counted { de, left }))
    }
    #[inline]
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Res<V::Value> {
        self.deserialize_tuple(fields.len(), visitor)
    }
    #[inline]
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Res<V::Value> {
        self.nested(|d| visitor.visit_enum(d))
    }
    #[inline]
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        visitor.visit_u32(get!(self, u32))
    }
    #[inline]
    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Res<V::Value> {
        Err(fmt_err(
            "the object format cannot skip unknown values".into(),
        ))
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};
    use std::collections::BTreeMap;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Shape {
        Dot,
        Circle(f64),
        Rect { w: u32, h: i16 },
        Pair(u8, String),
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Everything {
        a: bool,
        b: i8,
        c: u64,
        d: f32,
        e: char,
        f: String,
        g: Option<Box<Everything>>,
        h: Vec<Shape>,
        i: BTreeMap<String, (u16, i128)>,
        j: (),
    }

    fn sample() -> Everything {
        Everything {
            a: true,
            b: -3,
            c: u64::MAX - 7,
            d: 1.5,
            e: 'λ',
            f: "hello".into(),
            g: Some(Box::new(Everything {
                a: false,
                b: 0,
                c: 1,
                d: -0.0,
                e: 'x',
                f: String::new(),
                g: None,
                h: vec![],
                i: BTreeMap::new(),
                j: (),
            })),
            h: vec![
                Shape::Dot,
                Shape::Circle(2.5),
                Shape::Rect { w: 3, h: -4 },
                Shape::Pair(9, "p".into()),
            ],
            i: [("k".to_string(), (7u16, -1i128))].into_iter().collect(),
            j: (),
        }
    }

    #[test]
    fn round_trips_in_both_byte_orders() {
        let v = sample();
        for swap in [false, true] {
            let mut buf = Vec::new();
            encode_into(&v, &mut buf, swap).unwrap();
            let back: Everything = decode(&buf, swap).unwrap();
            assert_eq!(back, v);
        }
    }

    #[test]
    fn swapped_encoding_differs_from_native() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        encode_into(&0x0102_0304u32, &mut a, false).unwrap();
        encode_into(&0x0102_0304u32, &mut b, true).unwrap();
        assert_eq!(a.iter().rev().copied().collect::<Vec<_>>(), b);
    }

    #[test]
    fn unknown_length_sequences_are_patched() {
        struct Unsized(Vec<u32>);
        impl Serialize for Unsized {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.iter().filter(|_| true))
            }
        }
        let bytes = to_vec(&Unsized(vec![1, 2, 3])).unwrap();
        let back: Vec<u32> = from_slice(&bytes).unwrap();
        assert_eq!(back, vec![1, 2, 3]);
    }

    #[test]
    fn truncated_and_trailing_input_are_errors() {
        let bytes = to_vec(&sample()).unwrap();
        for cut in 0..bytes.len() {
            assert!(from_slice::<Everything>(&bytes[..cut]).is_err());
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(from_slice::<Everything>(&long).is_err());
    }
}
