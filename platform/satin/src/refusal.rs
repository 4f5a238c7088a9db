//! The text of a refusal that postcard drops.
//!
//! postcard's error type keeps no message: a type whose `Deserialize` (or `try_from`, with
//! `#[serde(try_from = ...)]`) refuses its bytes with `de::Error::custom(text)` comes out of
//! `postcard::from_bytes` as the bare `SerdeDeCustom` ("Serde Deserialization Error"). For an
//! output from another node, that text is what says what is wrong with it, so
//! [`custom_text`] decodes the bytes once more through a deserializer that hands the types
//! an error type of its own, which keeps the text.
//!
//! Every nested value is decoded by postcard through a deserializer it makes itself, so each
//! of postcard's deserializers, sequences, maps and enums is wrapped ([`De`], [`Seq`],
//! [`Map`], [`Enum`], [`Variant`]) and every visitor and seed handed to postcard too
//! ([`Visit`], [`Seed`]). Where a refusal of a nested type passes back through postcard, it
//! must become a postcard error again; its text waits in a thread-local ([`TEXT`]) until the
//! wrapper above takes it back.
//!
//! Only a decode that already failed with `SerdeDeCustom` comes here: outputs that decode
//! never pay for the wrappers.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess};
use serde::de::{VariantAccess, Visitor};

thread_local! {
    /// The text of a refusal on its way up through postcard, from the wrapper that turned it
    /// into a postcard error to the wrapper that gets that error back.
    static TEXT: Cell<Option<String>> = const { Cell::new(None) };
}

/// The text `de::Error::custom` was given when a value of type `V` refused `bytes`, if
/// decoding them through the wrappers fails that way again.
pub(crate) fn custom_text<V: de::DeserializeOwned>(bytes: &[u8]) -> Option<String> {
    let result = decode::<V>(bytes);
    // A type that swallowed an error may have left a text behind; it belongs to no one.
    TEXT.with(Cell::take);
    result.err().map(|Refusal(text)| text)
}

/// Decodes `bytes` as postcard would, but with errors that keep their text.
fn decode<V: de::DeserializeOwned>(bytes: &[u8]) -> Result<V, Refusal> {
    TEXT.with(Cell::take);
    let mut de = postcard::Deserializer::from_bytes(bytes);
    V::deserialize(De(&mut de))
}

/// The error the wrapped types see: a text.
#[derive(Debug)]
struct Refusal(String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

impl de::Error for Refusal {
    fn custom<T: fmt::Display>(msg: T) -> Refusal {
        Refusal(msg.to_string())
    }
}

/// A refusal passing down into postcard, which keeps only that it was custom; its text waits
/// for [`up`].
fn down<E: de::Error>(r: Refusal) -> E {
    let e = E::custom(&r.0);
    TEXT.with(|t| t.set(Some(r.0)));
    e
}

/// An error of postcard's, passing up to the wrapped types: a custom one takes back the text
/// [`down`] left; any other keeps postcard's own words.
fn up<E: fmt::Display>(e: E) -> Refusal {
    let text = e.to_string();
    if text == postcard::Error::SerdeDeCustom.to_string() {
        if let Some(kept) = TEXT.with(Cell::take) {
            return Refusal(kept);
        }
    }
    Refusal(text)
}

/// A deserializer of postcard's, seen through [`Refusal`].
struct De<D>(D);

macro_rules! forward_deserialize {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, Refusal> {
            self.0.$method($($arg,)* Visit(visitor)).map_err(up)
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for De<D> {
    type Error = Refusal;

    forward_deserialize! {
        deserialize_any(); deserialize_bool(); deserialize_i8(); deserialize_i16();
        deserialize_i32(); deserialize_i64(); deserialize_i128(); deserialize_u8();
        deserialize_u16(); deserialize_u32(); deserialize_u64(); deserialize_u128();
        deserialize_f32(); deserialize_f64(); deserialize_char(); deserialize_str();
        deserialize_string(); deserialize_bytes(); deserialize_byte_buf();
        deserialize_option(); deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq(); deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier(); deserialize_ignored_any();
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// A visitor of a wrapped type, handed to postcard.
struct Visit<V>(V);

macro_rules! forward_visit {
    ($($method:ident($ty:ty);)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            self.0.$method::<Refusal>(v).map_err(down)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Visit<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    forward_visit! {
        visit_bool(bool); visit_i8(i8); visit_i16(i16); visit_i32(i32); visit_i64(i64);
        visit_i128(i128); visit_u8(u8); visit_u16(u16); visit_u32(u32); visit_u64(u64);
        visit_u128(u128); visit_f32(f32); visit_f64(f64); visit_char(char);
        visit_str(&str); visit_borrowed_str(&'de str); visit_string(String);
        visit_bytes(&[u8]); visit_borrowed_bytes(&'de [u8]); visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_none::<Refusal>().map_err(down)
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_unit::<Refusal>().map_err(down)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(De(d)).map_err(down)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.0.visit_newtype_struct(De(d)).map_err(down)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<V::Value, A::Error> {
        self.0.visit_seq(Seq(a)).map_err(down)
    }

    fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(Map(a)).map_err(down)
    }

    fn visit_enum<A: EnumAccess<'de>>(self, a: A) -> Result<V::Value, A::Error> {
        self.0.visit_enum(Enum(a)).map_err(down)
    }
}

/// A seed of a wrapped type, handed to postcard.
struct Seed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(De(d)).map_err(down)
    }
}

/// A sequence of postcard's, seen through [`Refusal`].
struct Seq<A>(A);

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Seq<A> {
    type Error = Refusal;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Refusal> {
        self.0.next_element_seed(Seed(seed)).map_err(up)
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

/// A map of postcard's, seen through [`Refusal`].
struct Map<A>(A);

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Map<A> {
    type Error = Refusal;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Refusal> {
        self.0.next_key_seed(Seed(seed)).map_err(up)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, Refusal> {
        self.0.next_value_seed(Seed(seed)).map_err(up)
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

/// An enum of postcard's, seen through [`Refusal`].
struct Enum<A>(A);

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Enum<A> {
    type Error = Refusal;
    type Variant = Variant<A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Variant<A::Variant>), Refusal> {
        self.0
            .variant_seed(Seed(seed))
            .map(|(v, variant)| (v, Variant(variant)))
            .map_err(up)
    }
}

/// A variant of postcard's, seen through [`Refusal`].
struct Variant<A>(A);

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Variant<A> {
    type Error = Refusal;

    fn unit_variant(self) -> Result<(), Refusal> {
        self.0.unit_variant().map_err(up)
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Refusal> {
        self.0.newtype_variant_seed(Seed(seed)).map_err(up)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Refusal> {
        self.0.tuple_variant(len, Visit(visitor)).map_err(up)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refusal> {
        self.0.struct_variant(fields, Visit(visitor)).map_err(up)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};

    use super::*;

    /// An even number, refused with a text when odd.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    #[serde(try_from = "u64")]
    struct Even(u64);

    impl TryFrom<u64> for Even {
        type Error = String;
        fn try_from(v: u64) -> Result<Even, String> {
            if v % 2 != 0 {
                return Err(format!("{v} is odd"));
            }
            Ok(Even(v))
        }
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    enum Shape {
        Unit,
        Newtype(Even),
        Tuple(u8, Even),
        Struct { name: String, even: Even },
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Everything {
        flag: bool,
        small: i8,
        big: i128,
        real: f64,
        letter: char,
        text: String,
        bytes: Vec<u8>,
        maybe: Option<Even>,
        none: Option<u32>,
        unit: (),
        list: Vec<Even>,
        map: BTreeMap<String, Even>,
        shapes: Vec<Shape>,
    }

    fn everything(odd: u64) -> Everything {
        Everything {
            flag: true,
            small: -3,
            big: -1 << 100,
            real: 2.5,
            letter: 'ß',
            text: "text".into(),
            bytes: vec![1, 2, 3],
            maybe: Some(Even(2)),
            none: None,
            unit: (),
            list: vec![Even(4), Even(6)],
            map: [("a".to_string(), Even(8))].into(),
            shapes: vec![
                Shape::Unit,
                Shape::Newtype(Even(10)),
                Shape::Tuple(1, Even(12)),
                Shape::Struct {
                    name: "s".into(),
                    even: Even(odd),
                },
            ],
        }
    }

    #[test]
    fn decodes_what_postcard_decodes() {
        let bytes = postcard::to_allocvec(&everything(14)).unwrap();
        assert_eq!(decode::<Everything>(&bytes).unwrap(), everything(14));
        assert_eq!(custom_text::<Everything>(&bytes), None);
    }

    #[test]
    fn keeps_the_text_of_a_refusal_at_any_depth() {
        let bytes = postcard::to_allocvec(&everything(15)).unwrap();
        let e = postcard::from_bytes::<Everything>(&bytes).unwrap_err();
        assert_eq!(e, postcard::Error::SerdeDeCustom, "postcard drops the text");
        assert_eq!(
            custom_text::<Everything>(&bytes).as_deref(),
            Some("15 is odd")
        );
        let top = postcard::to_allocvec(&7u64).unwrap();
        assert_eq!(custom_text::<Even>(&top).as_deref(), Some("7 is odd"));
        let in_map = postcard::to_allocvec(&BTreeMap::from([(1u8, 9u64)])).unwrap();
        assert_eq!(
            custom_text::<BTreeMap<u8, Even>>(&in_map).as_deref(),
            Some("9 is odd")
        );
    }

    #[test]
    fn keeps_postcards_words_for_its_own_errors() {
        let e = custom_text::<Everything>(&[]).unwrap();
        assert_eq!(e, postcard::Error::DeserializeUnexpectedEnd.to_string());
        // Nothing is left behind for the next decode on this thread.
        assert_eq!(TEXT.with(Cell::take), None);
    }
}
