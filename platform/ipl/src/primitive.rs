//! Plain numbers that travel as raw bytes.

/// A primitive number type that can be written and read as raw bytes, singly or as a slice.
///
/// Implemented for the fixed-size integers and floats; sealed so the wire tags stay stable.
pub trait Primitive: bytemuck::Pod + sealed::Sealed + Send + Sync {
    /// Wire tag of the type.
    const TAG: u8;
    /// Name used in error messages.
    const NAME: &'static str;
    /// Reverses the byte order.
    fn swap(self) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! primitive {
    ($($t:ty => $tag:expr, $swap:expr;)*) => {
        $(
            impl sealed::Sealed for $t {}
            impl Primitive for $t {
                const TAG: u8 = $tag;
                const NAME: &'static str = stringify!($t);
                #[inline]
                fn swap(self) -> Self {
                    let f: fn($t) -> $t = $swap;
                    f(self)
                }
            }
        )*

        /// Name and size in bytes of the primitive whose [`Primitive::TAG`] is `tag`, for
        /// layers that carry the tag on their own wire (e.g. to check or describe a slice).
        pub fn primitive_by_tag(tag: u8) -> Option<(&'static str, usize)> {
            match tag {
                $($tag => Some((stringify!($t), std::mem::size_of::<$t>())),)*
                _ => None,
            }
        }
    };
}

primitive! {
    u8 => 1, |v| v;
    i8 => 2, |v| v;
    u16 => 3, u16::swap_bytes;
    i16 => 4, i16::swap_bytes;
    u32 => 5, u32::swap_bytes;
    i32 => 6, i32::swap_bytes;
    u64 => 7, u64::swap_bytes;
    i64 => 8, i64::swap_bytes;
    f32 => 9, |v| f32::from_bits(v.to_bits().swap_bytes());
    f64 => 10, |v| f64::from_bits(v.to_bits().swap_bytes());
}

/// Tag of a slice of the primitive with tag `t`.
pub(crate) const fn slice_tag(t: u8) -> u8 {
    0x20 | t
}
/// Tag of a serde object.
pub(crate) const TAG_OBJECT: u8 = 0x40;
/// Tag of a byte buffer written with `write_bytes`.
pub(crate) const TAG_BYTES: u8 = 0x41;
/// Tag of a bool.
pub(crate) const TAG_BOOL: u8 = 0x42;

/// Human-readable name of a wire tag, for error messages.
pub(crate) fn tag_name(tag: u8) -> String {
    let prim = |t: u8| primitive_by_tag(t).map(|(name, _)| name);
    match tag {
        TAG_OBJECT => "object".into(),
        TAG_BYTES => "bytes".into(),
        TAG_BOOL => "bool".into(),
        t if t & 0x20 != 0 && prim(t & 0x1f).is_some() => {
            format!("[{}] slice", prim(t & 0x1f).expect("checked"))
        }
        t => prim(t)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("unknown tag {t:#x}")),
    }
}

#[cfg(test)]
mod by_tag_tests {
    use super::*;

    fn agrees<T: Primitive>() {
        assert_eq!(
            primitive_by_tag(T::TAG),
            Some((T::NAME, std::mem::size_of::<T>()))
        );
    }

    #[test]
    fn every_primitive_is_found_by_its_tag_and_nothing_else_is() {
        agrees::<u8>();
        agrees::<i8>();
        agrees::<u16>();
        agrees::<i16>();
        agrees::<u32>();
        agrees::<i32>();
        agrees::<u64>();
        agrees::<i64>();
        agrees::<f32>();
        agrees::<f64>();
        for tag in [0, 11, 0x21, TAG_OBJECT, TAG_BYTES, TAG_BOOL, 255] {
            assert_eq!(primitive_by_tag(tag), None, "tag {tag}");
        }
    }
}
