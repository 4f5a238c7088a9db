//! The packet format: serde values as fixed-width numbers in the writer's byte order.
//!
//! The same layout as `ipl`'s object format (lengths u64, enum variants u32, `Option` a one-byte
//! tag, no field names), written here so that the encoder and decoder inline into the code that
//! sends and reads packets: with millions of small packets per superstep the cost of a call per
//! field is most of the cost of a packet. The writer always uses its own byte order (each
//! message says which); the reader swaps when the orders differ.

use serde::de::{self, DeserializeSeed, IntoDeserializer, SeqAccess, Visitor};
use serde::ser::{self, Serialize};
use std::fmt::Display;

/// Why a value could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodecError(pub String);

impl Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CodecError {}

impl ser::Error for CodecError {
    fn custom<T: Display>(msg: T) -> Self {
        CodecError(msg.to_string())
    }
}

impl de::Error for CodecError {
    fn custom<T: Display>(msg: T) -> Self {
        CodecError(msg.to_string())
    }
}

type Res<T> = std::result::Result<T, CodecError>;

/// Appends `value` to `out` in this machine's byte order.
#[inline]
pub(crate) fn encode_into<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Res<()> {
    value.serialize(&mut Encoder { out })
}

/// Encodes `value` into a new buffer.
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> Res<Vec<u8>> {
    let mut out = Vec::with_capacity(64);
    encode_into(value, &mut out)?;
    Ok(out)
}

/// Decodes a value that occupies all of `bytes`; `swap` when the writer's byte order differs.
#[inline]
pub(crate) fn decode<'de, T: serde::Deserialize<'de>>(bytes: &'de [u8], swap: bool) -> Res<T> {
    let mut d = Decoder { input: bytes, swap };
    let v = T::deserialize(&mut d)?;
    if !d.input.is_empty() {
        return Err(CodecError(format!(
            "{} bytes left over after the value",
            d.input.len()
        )));
    }
    Ok(v)
}

struct Encoder<'a> {
    out: &'a mut Vec<u8>,
}

impl Encoder<'_> {
    #[inline]
    fn put<const N: usize>(&mut self, b: [u8; N]) -> Res<()> {
        self.out.extend_from_slice(&b);
        Ok(())
    }

    #[inline]
    fn len(&mut self, n: usize) -> Res<()> {
        self.put((n as u64).to_ne_bytes())
    }
}

/// A sequence, tuple, map or struct being written; patches the length of a sequence whose
/// length was not known up front.
struct Compound<'a, 'b> {
    enc: &'b mut Encoder<'a>,
    len_at: Option<usize>,
    count: u64,
}

impl Compound<'_, '_> {
    #[inline]
    fn finish(self) -> Res<()> {
        if let Some(at) = self.len_at {
            self.enc.out[at..at + 8].copy_from_slice(&self.count.to_ne_bytes());
        }
        Ok(())
    }
}

impl<'a, 'b> ser::Serializer for &'b mut Encoder<'a> {
    type Ok = ();
    type Error = CodecError;
    type SerializeSeq = Compound<'a, 'b>;
    type SerializeTuple = Compound<'a, 'b>;
    type SerializeTupleStruct = Compound<'a, 'b>;
    type SerializeTupleVariant = Compound<'a, 'b>;
    type SerializeMap = Compound<'a, 'b>;
    type SerializeStruct = Compound<'a, 'b>;
    type SerializeStructVariant = Compound<'a, 'b>;

    #[inline]
    fn serialize_bool(self, v: bool) -> Res<()> {
        self.put([v as u8])
    }
    #[inline]
    fn serialize_i8(self, v: i8) -> Res<()> {
        self.put(v.to_ne_bytes())
    }
    #[inline]
    fn serialize_i16(self, v: i16) -> Res<()> {
        self.put(v.to_ne_bytes())
    }
    #[inline]
    fn serialize_i32(self, v: i32) -> Res<()> {
        self.put(v.to_ne_bytes())
    }
    #[inline]
    fn serialize_i64(self, v: i64) -> Res<()> {
        self.put(v.to_ne_bytes())
    }
    #[inline]
    fn serialize_i128(self, v: i128) -> Res<()> {
        self.put(v.to_ne_bytes())
    }
    #[inline]
    fn serialize_u8(self, v: u8) -> Res<()> {
        self.put([v])
    }
    #[inline]
    fn serialize_u16(self, v: u16) -> Res<()> {
        self.put(v.to_ne_bytes())
    }
    #[inline]
    fn serialize_u32(self, v: u32) -> Res<()> {
        self.put(v.to_ne_bytes())
    }
    #[inline]
    fn serialize_u64(self, v: u64) -> Res<()> {
        self.put(v.to_ne_bytes())
    }
    #[inline]
    fn serialize_u128(self, v: u128) -> Res<()> {
        self.put(v.to_ne_bytes())
    }
    #[inline]
    fn serialize_f32(self, v: f32) -> Res<()> {
        self.put(v.to_bits().to_ne_bytes())
    }
    #[inline]
    fn serialize_f64(self, v: f64) -> Res<()> {
        self.put(v.to_bits().to_ne_bytes())
    }
    #[inline]
    fn serialize_char(self, v: char) -> Res<()> {
        self.put((v as u32).to_ne_bytes())
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
        self.put([0])
    }
    #[inline]
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Res<()> {
        self.put([1])?;
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
        self.put(idx.to_ne_bytes())
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
        self.put(idx.to_ne_bytes())?;
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
                self.put([0; 8])?;
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
        self.put(idx.to_ne_bytes())?;
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
        self.put(idx.to_ne_bytes())?;
        self.serialize_tuple(0)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

macro_rules! compound_impl {
    ($trait:ident, $method:ident $(, $key:ident)?) => {
        impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = CodecError;
            #[inline]
            fn $method<T: Serialize + ?Sized>(
                &mut self,
                $($key: &'static str,)?
                value: &T,
            ) -> Res<()> {
                $(let _ = $key;)?
                self.count += 1;
                value.serialize(&mut *self.enc)
            }
            #[inline]
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
    type Error = CodecError;
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

struct Decoder<'de> {
    input: &'de [u8],
    swap: bool,
}

#[cold]
fn truncated(needed: usize, left: usize) -> CodecError {
    CodecError(format!(
        "value truncated: needed {needed} bytes, {left} left"
    ))
}

macro_rules! get {
    ($self:ident, $t:ty) => {{
        const N: usize = std::mem::size_of::<$t>();
        let Some((head, rest)) = $self.input.split_first_chunk::<N>() else {
            return Err(truncated(N, $self.input.len()));
        };
        $self.input = rest;
        let v = <$t>::from_ne_bytes(*head);
        if $self.swap {
            v.swap_bytes()
        } else {
            v
        }
    }};
}

impl<'de> Decoder<'de> {
    #[inline]
    fn len(&mut self) -> Res<usize> {
        let n = get!(self, u64);
        // Every element but a zero-sized one takes a byte; a length beyond the input is corrupt
        // except for long sequences of units, which nobody sends.
        if n > self.input.len() as u64 && n > (1 << 20) {
            return Err(CodecError(format!(
                "length {n} exceeds the {} bytes left",
                self.input.len()
            )));
        }
        Ok(n as usize)
    }
    #[inline]
    fn bytes(&mut self) -> Res<&'de [u8]> {
        let n = self.len()?;
        if n > self.input.len() {
            return Err(truncated(n, self.input.len()));
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

struct Counted<'a, 'de> {
    de: &'a mut Decoder<'de>,
    left: usize,
}

impl<'de> SeqAccess<'de> for Counted<'_, 'de> {
    type Error = CodecError;
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

impl<'de> de::MapAccess<'de> for Counted<'_, 'de> {
    type Error = CodecError;
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

impl<'de> de::EnumAccess<'de> for &mut Decoder<'de> {
    type Error = CodecError;
    type Variant = Self;
    #[inline]
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Res<(V::Value, Self)> {
        let idx = get!(self, u32);
        let v = seed.deserialize(idx.into_deserializer())?;
        Ok((v, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Decoder<'de> {
    type Error = CodecError;
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

impl<'de> de::Deserializer<'de> for &mut Decoder<'de> {
    type Error = CodecError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Res<V::Value> {
        Err(CodecError(
            "the packet format is not self-describing; read the type that was sent".into(),
        ))
    }
    #[inline]
    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        match self.byte()? {
            0 => visitor.visit_bool(false),
            1 => visitor.visit_bool(true),
            b => Err(CodecError(format!("invalid bool byte {b}"))),
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
        visitor.visit_char(
            char::from_u32(c).ok_or_else(|| CodecError(format!("invalid char {c:#x}")))?,
        )
    }
    #[inline]
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        let b = self.bytes()?;
        visitor.visit_borrowed_str(
            std::str::from_utf8(b).map_err(|e| CodecError(format!("invalid UTF-8: {e}")))?,
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
            1 => visitor.visit_some(self),
            b => Err(CodecError(format!("invalid option tag {b}"))),
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
        v.visit_newtype_struct(self)
    }
    #[inline]
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        let left = self.len()?;
        visitor.visit_seq(Counted { de: self, left })
    }
    #[inline]
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Res<V::Value> {
        visitor.visit_seq(Counted {
            de: self,
            left: len,
        })
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
        visitor.visit_map(Counted { de: self, left })
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
        visitor.visit_enum(self)
    }
    #[inline]
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Res<V::Value> {
        visitor.visit_u32(get!(self, u32))
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Res<V::Value> {
        Err(CodecError(
            "the packet format cannot skip unknown values".into(),
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
        k: [u8; 3],
        #[serde(with = "serde_bytes_like")]
        l: Vec<u8>,
    }

    /// Serializes a byte vector with `serialize_bytes`, as `serde_bytes` would.
    mod serde_bytes_like {
        pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(v)
        }
        pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Vec<u8>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("bytes")
                }
                fn visit_borrowed_bytes<E>(self, v: &'de [u8]) -> Result<Vec<u8>, E> {
                    Ok(v.to_vec())
                }
            }
            d.deserialize_bytes(V)
        }
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
                k: [0; 3],
                l: vec![],
            })),
            h: vec![
                Shape::Dot,
                Shape::Circle(2.5),
                Shape::Rect { w: 3, h: -4 },
                Shape::Pair(9, "p".into()),
            ],
            i: [("k".to_string(), (7u16, -1i128))].into_iter().collect(),
            j: (),
            k: [1, 2, 3],
            l: vec![9, 8, 7, 6],
        }
    }

    /// The bytes of `v` as a machine of the other byte order writes them.
    fn swapped_u32(v: u32) -> Vec<u8> {
        v.swap_bytes().to_ne_bytes().to_vec()
    }

    #[test]
    fn round_trips() {
        let v = sample();
        let mut buf = Vec::new();
        encode_into(&v, &mut buf).unwrap();
        let back: Everything = decode(&buf, false).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn the_reader_swaps_numbers_of_the_other_byte_order() {
        let mut buf = Vec::new();
        encode_into(&(0x0102_0304u32, -2i64, 0.75f64, Some('z')), &mut buf).unwrap();
        // The same value as written by a machine of the other byte order.
        let mut other = swapped_u32(0x0102_0304);
        other.extend_from_slice(&(-2i64).swap_bytes().to_ne_bytes());
        other.extend_from_slice(&0.75f64.to_bits().swap_bytes().to_ne_bytes());
        other.push(1);
        other.extend_from_slice(&('z' as u32).swap_bytes().to_ne_bytes());
        assert_ne!(buf, other);
        let v: (u32, i64, f64, Option<char>) = decode(&other, true).unwrap();
        assert_eq!(v, (0x0102_0304, -2, 0.75, Some('z')));
    }

    #[test]
    fn the_layout_matches_ipls_object_format() {
        let v = sample();
        let mut ours = Vec::new();
        encode_into(&v, &mut ours).unwrap();
        assert_eq!(ours, ipl::serial::to_vec(&v).unwrap());
    }

    #[test]
    fn unknown_length_sequences_are_patched() {
        struct Unsized(Vec<u32>);
        impl Serialize for Unsized {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.iter().filter(|_| true))
            }
        }
        let mut bytes = Vec::new();
        encode_into(&Unsized(vec![1, 2, 3]), &mut bytes).unwrap();
        let back: Vec<u32> = decode(&bytes, false).unwrap();
        assert_eq!(back, vec![1, 2, 3]);
    }

    #[test]
    fn truncated_trailing_and_corrupt_input_are_errors() {
        let mut bytes = Vec::new();
        encode_into(&sample(), &mut bytes).unwrap();
        for cut in 0..bytes.len() {
            assert!(decode::<Everything>(&bytes[..cut], false).is_err());
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(decode::<Everything>(&long, false).is_err());
        assert!(decode::<bool>(&[2], false).is_err());
        assert!(decode::<Option<u8>>(&[3, 0], false).is_err());
        assert!(decode::<char>(&0xd800u32.to_ne_bytes(), false).is_err());
        assert!(decode::<String>(&[1, 0, 0, 0, 0, 0, 0, 0, 0xff], false).is_err());
        assert!(decode::<Vec<u8>>(&u64::MAX.to_ne_bytes(), false).is_err());
    }
}
