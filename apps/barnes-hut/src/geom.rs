//! Three-dimensional vectors and axis-aligned boxes.

use serde::{Deserialize, Serialize};
use std::ops::{Add, AddAssign, Index, IndexMut, Mul, Neg, Sub, SubAssign};

/// A vector in three dimensions, double precision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Vec3 {
    /// First coordinate.
    pub x: f64,
    /// Second coordinate.
    pub y: f64,
    /// Third coordinate.
    pub z: f64,
}

impl Vec3 {
    /// The zero vector.
    pub const ZERO: Vec3 = Vec3 {
        x: 0.0,
        y: 0.0,
        z: 0.0,
    };

    /// A vector from its three coordinates.
    #[inline]
    pub const fn new(x: f64, y: f64, z: f64) -> Vec3 {
        Vec3 { x, y, z }
    }

    /// A vector from an array `[x, y, z]`.
    #[inline]
    pub const fn from_array(a: [f64; 3]) -> Vec3 {
        Vec3 {
            x: a[0],
            y: a[1],
            z: a[2],
        }
    }

    /// The coordinates as an array `[x, y, z]`.
    #[inline]
    pub const fn to_array(self) -> [f64; 3] {
        [self.x, self.y, self.z]
    }

    /// Scalar product.
    #[inline]
    pub fn dot(self, o: Vec3) -> f64 {
        self.x * o.x + self.y * o.y + self.z * o.z
    }

    /// Squared Euclidean length.
    #[inline]
    pub fn norm2(self) -> f64 {
        self.dot(self)
    }

    /// Euclidean length.
    #[inline]
    pub fn norm(self) -> f64 {
        self.norm2().sqrt()
    }

    /// Component-wise minimum.
    #[inline]
    pub fn min(self, o: Vec3) -> Vec3 {
        Vec3::new(self.x.min(o.x), self.y.min(o.y), self.z.min(o.z))
    }

    /// Component-wise maximum.
    #[inline]
    pub fn max(self, o: Vec3) -> Vec3 {
        Vec3::new(self.x.max(o.x), self.y.max(o.y), self.z.max(o.z))
    }

    /// True when every coordinate is finite (neither NaN nor infinite).
    #[inline]
    pub fn is_finite(self) -> bool {
        self.x.is_finite() && self.y.is_finite() && self.z.is_finite()
    }
}

impl Add for Vec3 {
    type Output = Vec3;
    #[inline]
    fn add(self, o: Vec3) -> Vec3 {
        Vec3::new(self.x + o.x, self.y + o.y, self.z + o.z)
    }
}

impl AddAssign for Vec3 {
    #[inline]
    fn add_assign(&mut self, o: Vec3) {
        *self = *self + o;
    }
}

impl Sub for Vec3 {
    type Output = Vec3;
    #[inline]
    fn sub(self, o: Vec3) -> Vec3 {
        Vec3::new(self.x - o.x, self.y - o.y, self.z - o.z)
    }
}

impl SubAssign for Vec3 {
    #[inline]
    fn sub_assign(&mut self, o: Vec3) {
        *self = *self - o;
    }
}

impl Mul<f64> for Vec3 {
    type Output = Vec3;
    #[inline]
    fn mul(self, s: f64) -> Vec3 {
        Vec3::new(self.x * s, self.y * s, self.z * s)
    }
}

impl Neg for Vec3 {
    type Output = Vec3;
    #[inline]
    fn neg(self) -> Vec3 {
        Vec3::new(-self.x, -self.y, -self.z)
    }
}

impl Index<usize> for Vec3 {
    type Output = f64;
    /// Coordinate by axis number: 0 is x, 1 is y, 2 is z.
    ///
    /// # Panics
    /// On an axis above 2, like indexing past the end of an array.
    #[inline]
    fn index(&self, axis: usize) -> &f64 {
        match axis {
            0 => &self.x,
            1 => &self.y,
            2 => &self.z,
            _ => panic!("axis {axis} out of range for a 3-vector"),
        }
    }
}

impl IndexMut<usize> for Vec3 {
    #[inline]
    fn index_mut(&mut self, axis: usize) -> &mut f64 {
        match axis {
            0 => &mut self.x,
            1 => &mut self.y,
            2 => &mut self.z,
            _ => panic!("axis {axis} out of range for a 3-vector"),
        }
    }
}

/// An axis-aligned box `[min, max]` in each dimension.
///
/// Used for the regions of the ORB decomposition and for bounding boxes of sets of bodies.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Aabb {
    /// The corner with the smallest coordinates.
    pub min: Vec3,
    /// The corner with the largest coordinates.
    pub max: Vec3,
}

impl Aabb {
    /// A box from its two corners.
    pub const fn new(min: Vec3, max: Vec3) -> Aabb {
        Aabb { min, max }
    }

    /// The box that contains nothing: its minimum is above its maximum, so that
    /// [`Aabb::include`] of any point yields that point.
    pub const EMPTY: Aabb = Aabb {
        min: Vec3::new(f64::INFINITY, f64::INFINITY, f64::INFINITY),
        max: Vec3::new(f64::NEG_INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY),
    };

    /// The smallest box containing all `points` ([`Aabb::EMPTY`] when there are none).
    pub fn around<I: IntoIterator<Item = Vec3>>(points: I) -> Aabb {
        points.into_iter().fold(Aabb::EMPTY, |b, p| b.include(p))
    }

    /// True when the box contains no point.
    pub fn is_empty(&self) -> bool {
        self.min.x > self.max.x || self.min.y > self.max.y || self.min.z > self.max.z
    }

    /// The box grown to contain `p`.
    #[inline]
    pub fn include(self, p: Vec3) -> Aabb {
        Aabb::new(self.min.min(p), self.max.max(p))
    }

    /// The smallest box containing both boxes (the merge of per-process bounds).
    pub fn union(self, o: Aabb) -> Aabb {
        Aabb::new(self.min.min(o.min), self.max.max(o.max))
    }

    /// Edge lengths.
    pub fn extent(&self) -> Vec3 {
        self.max - self.min
    }

    /// The axis (0, 1 or 2) along which the box is longest; the lowest such axis on ties,
    /// so that every process picks the same one.
    pub fn longest_axis(&self) -> usize {
        let e = self.extent();
        let mut axis = 0;
        for a in 1..3 {
            if e[a] > e[axis] {
                axis = a;
            }
        }
        axis
    }

    /// True when `p` lies in the closed box.
    pub fn contains(&self, p: Vec3) -> bool {
        (0..3).all(|a| p[a] >= self.min[a] && p[a] <= self.max[a])
    }

    /// Squared distance from `p` to the nearest point of the box (zero inside).
    #[inline]
    pub fn distance2_to(&self, p: Vec3) -> f64 {
        // Per axis, at most one of the two differences is positive; max() keeps it branch-free.
        let dx = (self.min.x - p.x).max(p.x - self.max.x).max(0.0);
        let dy = (self.min.y - p.y).max(p.y - self.max.y).max(0.0);
        let dz = (self.min.z - p.z).max(p.z - self.max.z).max(0.0);
        dx * dx + dy * dy + dz * dz
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_to_box_is_zero_inside_and_euclidean_outside() {
        let b = Aabb::new(Vec3::new(0.0, 0.0, 0.0), Vec3::new(1.0, 2.0, 3.0));
        assert_eq!(b.distance2_to(Vec3::new(0.5, 1.0, 1.0)), 0.0);
        assert_eq!(b.distance2_to(Vec3::new(2.0, 1.0, 1.0)), 1.0);
        assert_eq!(b.distance2_to(Vec3::new(-1.0, 4.0, 4.0)), 1.0 + 4.0 + 1.0);
    }

    #[test]
    fn longest_axis_and_union() {
        let a = Aabb::around([Vec3::new(0.0, 0.0, 0.0), Vec3::new(1.0, 5.0, 2.0)]);
        assert_eq!(a.longest_axis(), 1);
        let b = a.union(Aabb::around([Vec3::new(-10.0, 0.0, 0.0)]));
        assert_eq!(b.longest_axis(), 0);
        assert!(Aabb::EMPTY.is_empty());
        assert!(!a.is_empty());
    }
}
