//! Rays with a precomputed reciprocal direction for box tests.

use crate::vec3::Vec3;

/// A ray `origin + t * dir` with unit `dir`.
#[derive(Clone, Copy, Debug)]
pub struct Ray {
    /// Start point.
    pub origin: Vec3,
    /// Unit direction.
    pub dir: Vec3,
    /// Component-wise `1 / dir`, so that slab tests multiply instead of divide.
    pub inv_dir: Vec3,
}

impl Ray {
    /// Builds a ray; `dir` must already have unit length.
    pub fn new(origin: Vec3, dir: Vec3) -> Ray {
        Ray {
            origin,
            dir,
            inv_dir: Vec3::new(1.0 / dir.x, 1.0 / dir.y, 1.0 / dir.z),
        }
    }

    /// The point at parameter `t`.
    pub fn at(&self, t: f64) -> Vec3 {
        self.origin + self.dir * t
    }
}
