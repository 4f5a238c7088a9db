//! The packet format: the port library's object format (`ipl::serial`), so that packets and
//! ipl objects share one layout: serde values as fixed-width numbers in the writer's byte order.
//! The writer always uses its own byte order (each message says which); the reader swaps when
//! the orders differ.

use serde::Serialize;
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

impl From<ipl::serial::FormatError> for CodecError {
    fn from(e: ipl::serial::FormatError) -> Self {
        CodecError(e.message().to_owned())
    }
}

type Res<T> = std::result::Result<T, CodecError>;

/// Appends `value` to `out` in this machine's byte order.
#[inline]
pub(crate) fn encode_into<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Res<()> {
    Ok(ipl::serial::encode_into(value, out, false)?)
}

/// Encodes `value` into a new buffer.
#[inline]
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> Res<Vec<u8>> {
    Ok(ipl::serial::to_vec(value)?)
}

/// Decodes a value that occupies all of `bytes`; `swap` when the writer's byte order differs.
#[inline]
pub(crate) fn decode<'de, T: serde::Deserialize<'de>>(bytes: &'de [u8], swap: bool) -> Res<T> {
    Ok(ipl::serial::decode(bytes, swap)?)
}
