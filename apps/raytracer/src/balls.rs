//! The Standard Procedural Databases "balls" scene (Eric Haines'
//! sphereflake), generated as the SPD's `balls` program generates it.
//!
//! Construction, following `balls.c` and the SPD vector library:
//!
//! * The root sphere has centre (0, 0, 0) and radius 0.5 and grows in the
//!   direction +z. Each sphere of radius `r` growing in direction `d` gets
//!   nine children of radius `r / 3`, centred at distance `r + r / 3` (so
//!   they touch it) along nine fixed directions rotated so that +z maps to
//!   `d`; each child grows away from its parent. Recursion depth is the size
//!   factor, so there are `sum 9^k, k = 0..=size_factor` spheres (91 for
//!   size factor 2). Spheres are listed depth first, parent before children.
//! * The nine directions (`create_objset`): the three unit vectors
//!   (1, 1, 0)/sqrt 2, (1, 0, -1)/sqrt 2, (0, 1, -1)/sqrt 2 rotated about the
//!   axis (1, -1, 0)/sqrt 2 by asin(2 / sqrt 6), then copied at rotations of
//!   0, 120 and 240 degrees about z: three children sit on the upper
//!   hemisphere and six around the equator, slightly below it.
//! * Rotations use the SPD's row-vector matrices (`v' = v M`), reproduced
//!   operation by operation so the sphere positions match the SPD's output.
//! * Floor: the square with corners (+-12, +-12, -0.5), colour
//!   (1, 0.75, 0.33), Kd 0.8, Ks 0. Spheres: colour (1, 0.9, 0.7), Kd 0.5,
//!   Ks 0.5, Phong exponent from a 37 degree highlight angle (the SPD's
//!   `lib_output_color` formula), no transmission.
//! * Lights at (4, 3, 2), (1, -4, 4), (-3, 1, 5); background (0.078, 0.361,
//!   0.753); eye at (2.1, 1.3, 1.7) looking at the origin with +z up, 45
//!   degree field of view, hither 0.01, 512 x 512.
//!
//! The NFF text the SPD prints rounds every number to six significant
//! digits; this generator keeps full `f64` precision.

use std::f64::consts::PI;

use crate::scene::{Light, Material, Polygon, SceneDescription, Sphere, View};
use crate::vec3::Vec3;

/// Size factor of the Satin `balls2` input: 91 spheres.
pub const DEFAULT_SIZE_FACTOR: u32 = 2;

/// Largest accepted size factor (9^8 + ... = 48 million spheres would be the
/// next step and does not fit in memory comfortably).
pub const MAX_SIZE_FACTOR: u32 = 7;

type Mat4 = [[f64; 4]; 4];
type Coord4 = [f64; 4];

fn identity() -> Mat4 {
    let mut m = [[0.0; 4]; 4];
    for (i, row) in m.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    m
}

#[derive(Clone, Copy)]
enum Axis {
    Y,
    Z,
}

/// `lib_create_rotate_matrix` for the axes `balls.c` uses.
fn rotate(axis: Axis, angle: f64) -> Mat4 {
    let (c, s) = (libm::cos(angle), libm::sin(angle));
    let mut m = [[0.0; 4]; 4];
    match axis {
        Axis::Y => {
            m[1][1] = 1.0;
            m[0][0] = c;
            m[2][2] = c;
            m[2][0] = s;
            m[0][2] = -s;
        }
        Axis::Z => {
            m[2][2] = 1.0;
            m[0][0] = c;
            m[1][1] = c;
            m[0][1] = s;
            m[1][0] = -s;
        }
    }
    m[3][3] = 1.0;
    m
}

/// `lib_create_axis_rotate_matrix`: rotation by `angle` about unit `axis`.
fn axis_rotate(axis: [f64; 3], angle: f64) -> Mat4 {
    let (c, s) = (libm::cos(angle), libm::sin(angle));
    let omc = 1.0 - c;
    let [x, y, z] = axis;
    [
        [
            x * x + (1.0 - x * x) * c,
            x * y * omc + z * s,
            x * z * omc - y * s,
            0.0,
        ],
        [
            x * y * omc - z * s,
            y * y + (1.0 - y * y) * c,
            y * z * omc + x * s,
            0.0,
        ],
        [
            x * z * omc + y * s,
            y * z * omc - x * s,
            z * z + (1.0 - z * z) * c,
            0.0,
        ],
        [0.0, 0.0, 0.0, 1.0],
    ]
}

/// `lib_transform_coord`: row vector times matrix.
fn transform(v: Coord4, m: &Mat4) -> Coord4 {
    let mut r = [0.0; 4];
    for (j, out) in r.iter_mut().enumerate() {
        *out = v[0] * m[0][j] + v[1] * m[1][j] + v[2] * m[2][j] + v[3] * m[3][j];
    }
    r
}

/// `lib_normalize_vector`: divides by the length (not multiplies by its
/// reciprocal, which would round differently).
fn normalize(v: [f64; 3]) -> [f64; 3] {
    let d = libm::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    if d > 0.0 {
        [v[0] / d, v[1] / d, v[2] / d]
    } else {
        v
    }
}

/// The nine child directions (`create_objset`).
fn child_directions() -> [Coord4; 9] {
    let dist = 1.0 / libm::sqrt(2.0);
    let mut trio: [Coord4; 3] = [
        [dist, dist, 0.0, 0.0],
        [dist, 0.0, -dist, 0.0],
        [0.0, dist, -dist, 0.0],
    ];
    let axis = normalize([1.0, -1.0, 0.0]);
    let m = axis_rotate(axis, libm::asin(2.0 / libm::sqrt(6.0)));
    for t in trio.iter_mut() {
        *t = transform(*t, &m);
    }
    let mut set = [[0.0; 4]; 9];
    for k in 0..3 {
        let m = rotate(Axis::Z, k as f64 * 2.0 * PI / 3.0);
        for (v, t) in trio.iter().enumerate() {
            set[k * 3 + v] = transform(*t, &m);
        }
    }
    set
}

/// `output_object`: emits the sphere `center` (w = radius) and, while
/// `depth > 0`, its children grown along `direction` (w = radius ratio).
fn grow(depth: u32, center: Coord4, direction: Coord4, set: &[Coord4; 9], out: &mut Vec<Sphere>) {
    out.push(Sphere {
        center: Vec3::new(center[0], center[1], center[2]),
        radius: center[3],
        material: 1,
    });
    if depth == 0 {
        return;
    }
    // The threshold absorbs directions a rounding error short of +-z, as in
    // SPD 3.14.
    let m = if direction[2] >= 0.9999 {
        identity()
    } else if direction[2] <= -0.9999 {
        rotate(Axis::Y, PI)
    } else {
        let z = [0.0, 0.0, 1.0];
        let d = [direction[0], direction[1], direction[2]];
        let axis = normalize([
            z[1] * d[2] - z[2] * d[1],
            z[2] * d[0] - z[0] * d[2],
            z[0] * d[1] - z[1] * d[0],
        ]);
        let angle = libm::acos(z[0] * d[0] + z[1] * d[1] + z[2] * d[2]);
        axis_rotate(axis, angle)
    };
    let scale = center[3] * (1.0 + direction[3]);
    for v in set {
        let mut child = transform(*v, &m);
        for k in 0..3 {
            child[k] = child[k] * scale + center[k];
        }
        child[3] = center[3] * direction[3];
        let child_dir = [
            (child[0] - center[0]) / scale,
            (child[1] - center[1]) / scale,
            (child[2] - center[2]) / scale,
            direction[3],
        ];
        grow(depth - 1, child, child_dir, set, out);
    }
}

/// The Phong exponent the SPD derives from a highlight angle: the angle in
/// degrees at which the highlight falls to half its maximum.
pub fn phong_exponent(angle_degrees: f64) -> f64 {
    let a = PI * angle_degrees / 180.0;
    if a <= 0.0 {
        100000.0
    } else if a >= PI / 4.0 {
        0.000001
    } else {
        -(libm::log(2.0) / libm::log(libm::cos(2.0 * a)))
    }
}

/// Number of spheres at a size factor: `sum 9^k, k = 0..=size_factor`.
pub fn sphere_count(size_factor: u32) -> usize {
    (0..=size_factor).map(|k| 9usize.pow(k)).sum()
}

/// Generates the balls scene at `size_factor` (clamped to
/// [`MAX_SIZE_FACTOR`]).
pub fn balls(size_factor: u32) -> SceneDescription {
    let size_factor = size_factor.min(MAX_SIZE_FACTOR);
    let radius = 1.0;
    let floor = Polygon {
        vertices: vec![
            Vec3::new(12.0 * radius, 12.0 * radius, -radius / 2.0),
            Vec3::new(-12.0 * radius, 12.0 * radius, -radius / 2.0),
            Vec3::new(-12.0 * radius, -12.0 * radius, -radius / 2.0),
            Vec3::new(12.0 * radius, -12.0 * radius, -radius / 2.0),
        ],
        material: 0,
    };
    let materials = vec![
        Material {
            color: Vec3::new(1.0, 0.75, 0.33),
            kd: 0.8,
            ks: 0.0,
            shine: phong_exponent(0.0),
            transmittance: 0.0,
            ior: 1.0,
        },
        Material {
            color: Vec3::new(1.0, 0.9, 0.7),
            kd: 0.5,
            ks: 0.5,
            shine: phong_exponent(37.0),
            transmittance: 0.0,
            ior: 1.0,
        },
    ];
    let white = Vec3::splat(1.0);
    let lights = [(4.0, 3.0, 2.0), (1.0, -4.0, 4.0), (-3.0, 1.0, 5.0)]
        .into_iter()
        .map(|(x, y, z)| Light {
            position: Vec3::new(x, y, z),
            color: white,
        })
        .collect();
    let set = child_directions();
    let mut spheres = Vec::with_capacity(sphere_count(size_factor));
    grow(
        size_factor,
        [0.0, 0.0, 0.0, radius / 2.0],
        [0.0, 0.0, 1.0, 1.0 / 3.0],
        &set,
        &mut spheres,
    );
    SceneDescription {
        view: View {
            from: Vec3::new(2.1, 1.3, 1.7),
            at: Vec3::ZERO,
            up: Vec3::new(0.0, 0.0, 1.0),
            angle: 45.0,
            hither: 0.01,
            width: 512,
            height: 512,
        },
        background: Vec3::new(0.078, 0.361, 0.753),
        lights,
        materials,
        spheres,
        polygons: vec![floor],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_directions_are_unit_and_split_three_up_six_around() {
        let set = child_directions();
        for d in &set {
            let len = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
            assert!((len - 1.0).abs() < 1e-12);
        }
        let up = set.iter().filter(|d| d[2] > 0.5).count();
        let around = set.iter().filter(|d| d[2].abs() < 0.5).count();
        assert_eq!((up, around), (3, 6));
    }

    #[test]
    fn phong_exponent_follows_the_spd_formula() {
        assert_eq!(phong_exponent(0.0), 100000.0);
        assert_eq!(phong_exponent(45.0), 0.000001);
        // cos(74 degrees)^p = 1/2.
        let p = phong_exponent(37.0);
        assert!((74f64.to_radians().cos().powf(p) - 0.5).abs() < 1e-12);
    }
}
