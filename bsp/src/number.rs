//! Plain number types (sent as raw memory) and reduction operators.

use std::any::Any;

mod sealed {
    pub trait Sealed {}
}

/// A plain number type: `u8`, `i8`, `u16`, `i16`, `u32`, `i32`, `u64`, `i64`, `f32`, `f64`.
///
/// Slices of numbers travel as raw memory (no serialization), registered arrays hold numbers,
/// and the built-in reduction operators of [`Op`] work on them.
pub trait Number:
    ipl::Primitive + PartialOrd + Default + std::fmt::Debug + sealed::Sealed + 'static
{
    /// Sum; wrapping for integers, so that overflow is deterministic rather than a panic.
    fn add(self, other: Self) -> Self;
    /// Product; wrapping for integers.
    fn mul(self, other: Self) -> Self;
}

macro_rules! ints {
    ($($t:ty)*) => {$(
        impl sealed::Sealed for $t {}
        impl Number for $t {
            #[inline]
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline]
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
        }
    )*};
}
ints!(u8 i8 u16 i16 u32 i32 u64 i64);

macro_rules! floats {
    ($($t:ty)*) => {$(
        impl sealed::Sealed for $t {}
        impl Number for $t {
            #[inline]
            fn add(self, o: Self) -> Self { self + o }
            #[inline]
            fn mul(self, o: Self) -> Self { self * o }
        }
    )*};
}
floats!(f32 f64);

/// Size in bytes of the number type with wire code `code` (its `ipl::Primitive::TAG`), if it
/// is one.
pub(crate) fn code_size(code: u8) -> Option<usize> {
    ipl::primitive_by_tag(code).map(|(_, size)| size)
}

/// Name of the number type with wire code `code`.
pub(crate) fn code_name(code: u8) -> &'static str {
    ipl::primitive_by_tag(code).map_or("an unknown number type", |(name, _)| name)
}

/// Copies raw bytes of numbers into a new vector, swapping their byte order when asked.
pub(crate) fn vec_from_bytes<T: Number>(bytes: &[u8], swap: bool) -> Vec<T> {
    let mut v = Vec::with_capacity(bytes.len() / std::mem::size_of::<T>());
    extend_from_bytes(&mut v, bytes, swap);
    v
}

/// Appends the numbers whose bytes `bytes` holds (a trailing part of a number is ignored),
/// swapping each when `swap`. One copy, into memory that is not written before.
pub(crate) fn extend_from_bytes<T: Number>(dst: &mut Vec<T>, bytes: &[u8], swap: bool) {
    let size = std::mem::size_of::<T>();
    let bytes = &bytes[..bytes.len() / size * size];
    let start = dst.len();
    match bytemuck::try_cast_slice::<u8, T>(bytes) {
        // Aligned for `T`: a plain copy.
        Ok(numbers) => dst.extend_from_slice(numbers),
        Err(_) => dst.extend(
            bytes
                .chunks_exact(size)
                .map(bytemuck::pod_read_unaligned::<T>),
        ),
    }
    if swap {
        for x in &mut dst[start..] {
            *x = x.swap();
        }
    }
}

/// Reverses the byte order of every `size`-byte element of `bytes`.
pub(crate) fn swap_elements(bytes: &mut [u8], size: usize) {
    if size > 1 {
        for e in bytes.chunks_exact_mut(size) {
            e.reverse();
        }
    }
}

/// A vector of numbers kept until it is sent, written from its own memory.
pub(crate) trait OutVec: Send {
    fn code(&self) -> u8;
    fn write_to<'a>(&'a self, w: &mut ipl::WriteMessage<'a>);
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

impl<T: Number> OutVec for Vec<T> {
    fn code(&self) -> u8 {
        T::TAG
    }
    fn write_to<'a>(&'a self, w: &mut ipl::WriteMessage<'a>) {
        w.write_slice(&self[..]);
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        Box::new(*self)
    }
}

/// Reads a slice of the number type `code` from a message into a new vector (straight from the
/// connection into the vector's memory for large slices).
pub(crate) fn read_vec(code: u8, m: &mut ipl::ReadMessage) -> ipl::Result<Box<dyn Any + Send>> {
    fn boxed<T: Number>(m: &mut ipl::ReadMessage) -> ipl::Result<Box<dyn Any + Send>> {
        Ok(Box::new(m.read_slice::<T>()?))
    }
    match code {
        1 => boxed::<u8>(m),
        2 => boxed::<i8>(m),
        3 => boxed::<u16>(m),
        4 => boxed::<i16>(m),
        5 => boxed::<u32>(m),
        6 => boxed::<i32>(m),
        7 => boxed::<u64>(m),
        8 => boxed::<i64>(m),
        9 => boxed::<f32>(m),
        10 => boxed::<f64>(m),
        c => Err(ipl::Error::Decode {
            origin: m.origin().to_string(),
            reason: format!("unknown number type code {c}"),
        }),
    }
}

/// A reduction operator for [`Bsp::all_reduce`](crate::Bsp::all_reduce) and
/// [`Bsp::all_reduce_slice`](crate::Bsp::all_reduce_slice).
///
/// Values are combined in pid order along a fixed tree, `combine(lower pids, higher pids)`, so
/// an associative operator need not be commutative, and every process gets a bit-identical
/// result (floating-point sums included: the order of additions is the same everywhere).
#[derive(Clone, Copy, Debug)]
pub enum Op<T> {
    /// Sum (wrapping for integers).
    Sum,
    /// Product (wrapping for integers).
    Prod,
    /// Minimum; on ties and NaN the value of the lower pid wins.
    Min,
    /// Maximum; on ties and NaN the value of the lower pid wins.
    Max,
    /// A user function `f(lower, higher)`; it must be associative.
    Custom(fn(T, T) -> T),
}

impl<T: Number> Op<T> {
    #[inline]
    pub(crate) fn apply(&self, lower: T, higher: T) -> T {
        match self {
            Op::Sum => lower.add(higher),
            Op::Prod => lower.mul(higher),
            Op::Min => min_of(lower, higher),
            Op::Max => max_of(lower, higher),
            Op::Custom(f) => f(lower, higher),
        }
    }

    pub(crate) fn code(&self) -> u8 {
        match self {
            Op::Sum => 1,
            Op::Prod => 2,
            Op::Min => 3,
            Op::Max => 4,
            Op::Custom(_) => 5,
        }
    }
}

/// [`Op::Min`]: on ties and NaN the lower pid's value.
#[inline(always)]
pub(crate) fn min_of<T: PartialOrd>(lower: T, higher: T) -> T {
    if higher < lower {
        higher
    } else {
        lower
    }
}

/// [`Op::Max`]: on ties and NaN the lower pid's value.
#[inline(always)]
pub(crate) fn max_of<T: PartialOrd>(lower: T, higher: T) -> T {
    if higher > lower {
        higher
    } else {
        lower
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_come_from_bytes_at_any_alignment_and_in_either_order() {
        let values: Vec<f64> = (0..100).map(|i| i as f64 * 1.5 - 7.0).collect();
        let bytes: &[u8] = bytemuck::cast_slice(&values);
        // One byte in front shifts the numbers off their alignment; a trailing byte is no
        // number and is ignored.
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(bytes);
        shifted.push(9);
        for b in [bytes, &shifted[1..]] {
            assert_eq!(vec_from_bytes::<f64>(b, false), values);
            let mut v = vec![1.0f64];
            extend_from_bytes(&mut v, b, false);
            assert_eq!(v[0], 1.0);
            assert_eq!(v[1..], values[..]);
        }
        let swapped: Vec<u8> = bytes
            .chunks_exact(8)
            .flat_map(|c| c.iter().rev().copied())
            .collect();
        assert_eq!(vec_from_bytes::<f64>(&swapped, true), values);
        let mut words: Vec<u8> = [1u32, 2].iter().flat_map(|w| w.to_ne_bytes()).collect();
        words.push(3);
        assert_eq!(vec_from_bytes::<u32>(&words, false), [1, 2]);
    }
}
