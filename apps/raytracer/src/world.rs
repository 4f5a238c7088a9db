//! The compiled scene: validated primitives, precomputed polygon planes and
//! the bounding-volume hierarchy, ready for ray queries.

use thiserror::Error;

use crate::bvh::{BuildItem, Bvh, Prim};
use crate::ray::Ray;
use crate::scene::{Light, Material, SceneDescription};
use crate::vec3::Vec3;

/// Why a [`SceneDescription`] could not be compiled.
#[derive(Debug, Error, PartialEq)]
pub enum SceneError {
    /// An object names a material that does not exist.
    #[error("{object} refers to material {index}, but the scene has {available} materials")]
    MissingMaterial {
        /// The object, e.g. "sphere 3".
        object: String,
        /// The material index it names.
        index: u32,
        /// How many materials there are.
        available: usize,
    },
    /// A sphere with a radius that is not a positive finite number.
    #[error("sphere {index} has radius {radius}; it must be positive and finite")]
    BadRadius {
        /// Index of the sphere.
        index: usize,
        /// Its radius.
        radius: f64,
    },
    /// A polygon with fewer than three vertices or no area.
    #[error("polygon {index} is degenerate (fewer than 3 vertices or zero area)")]
    DegeneratePolygon {
        /// Index of the polygon.
        index: usize,
    },
    /// A coordinate or colour that is infinite or NaN.
    #[error("{what} is not finite")]
    NotFinite {
        /// What holds the value, e.g. "light 1 position".
        what: String,
    },
}

#[derive(Clone, Copy, Debug)]
struct SphereData {
    center: Vec3,
    radius_sq: f64,
    inv_radius: f64,
    material: u32,
}

#[derive(Clone, Copy, Debug)]
struct PolygonData {
    normal: Vec3,
    /// Plane offset: points `p` of the plane satisfy `normal . p == offset`.
    offset: f64,
    /// The two axes kept when projecting onto the plane of largest extent.
    axes: (usize, usize),
    first: u32,
    len: u32,
    material: u32,
}

/// A ray-surface intersection.
#[derive(Clone, Copy, Debug)]
pub struct Hit {
    /// Distance along the ray.
    pub t: f64,
    /// Point of intersection.
    pub point: Vec3,
    /// Unit surface normal, facing against the ray.
    pub normal: Vec3,
    /// Index of the surface's material.
    pub material: u32,
}

/// A scene ready for tracing.
#[derive(Clone, Debug)]
pub struct Scene {
    background: Vec3,
    lights: Vec<Light>,
    materials: Vec<Material>,
    light_intensity: f64,
    spheres: Vec<SphereData>,
    polygons: Vec<PolygonData>,
    polygon_points: Vec<(f64, f64)>,
    bvh: Bvh,
}

fn check_finite(v: Vec3, what: impl FnOnce() -> String) -> Result<(), SceneError> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(SceneError::NotFinite { what: what() })
    }
}

impl Scene {
    /// Validates the description and builds the acceleration structure.
    pub fn build(desc: &SceneDescription) -> Result<Scene, SceneError> {
        let nmat = desc.materials.len();
        let check_material = |object: String, index: u32| {
            if (index as usize) < nmat {
                Ok(())
            } else {
                Err(SceneError::MissingMaterial {
                    object,
                    index,
                    available: nmat,
                })
            }
        };
        check_finite(desc.background, || "background colour".into())?;
        for (i, l) in desc.lights.iter().enumerate() {
            check_finite(l.position, || format!("light {i} position"))?;
            check_finite(l.color, || format!("light {i} colour"))?;
        }
        for (i, m) in desc.materials.iter().enumerate() {
            let all = [m.kd, m.ks, m.shine, m.transmittance, m.ior];
            if !m.color.is_finite() || all.iter().any(|v| !v.is_finite()) {
                return Err(SceneError::NotFinite {
                    what: format!("material {i}"),
                });
            }
        }

        let mut items = Vec::with_capacity(desc.spheres.len() + desc.polygons.len());
        let mut spheres = Vec::with_capacity(desc.spheres.len());
        for (i, s) in desc.spheres.iter().enumerate() {
            check_finite(s.center, || format!("sphere {i} centre"))?;
            if !(s.radius > 0.0 && s.radius.is_finite()) {
                return Err(SceneError::BadRadius {
                    index: i,
                    radius: s.radius,
                });
            }
            check_material(format!("sphere {i}"), s.material)?;
            spheres.push(SphereData {
                center: s.center,
                radius_sq: s.radius * s.radius,
                inv_radius: 1.0 / s.radius,
                material: s.material,
            });
            let r = Vec3::splat(s.radius);
            items.push(BuildItem {
                prim: Prim::Sphere(i as u32),
                min: s.center - r,
                max: s.center + r,
            });
        }

        let mut polygons = Vec::with_capacity(desc.polygons.len());
        let mut polygon_points = Vec::new();
        for (i, p) in desc.polygons.iter().enumerate() {
            for (k, v) in p.vertices.iter().enumerate() {
                check_finite(*v, || format!("polygon {i} vertex {k}"))?;
            }
            check_material(format!("polygon {i}"), p.material)?;
            if p.vertices.len() < 3 {
                return Err(SceneError::DegeneratePolygon { index: i });
            }
            // Newell's method: a robust normal even for non-convex polygons.
            let mut n = Vec3::ZERO;
            for (k, a) in p.vertices.iter().enumerate() {
                let b = p.vertices[(k + 1) % p.vertices.len()];
                n += Vec3::new(
                    (a.y - b.y) * (a.z + b.z),
                    (a.z - b.z) * (a.x + b.x),
                    (a.x - b.x) * (a.y + b.y),
                );
            }
            let len = n.length();
            if !(len > 0.0 && len.is_finite()) {
                return Err(SceneError::DegeneratePolygon { index: i });
            }
            let normal = n * (1.0 / len);
            let centroid = p.vertices.iter().fold(Vec3::ZERO, |acc, v| acc + *v)
                * (1.0 / p.vertices.len() as f64);
            let (ax, ay, az) = (normal.x.abs(), normal.y.abs(), normal.z.abs());
            let axes = if ax >= ay && ax >= az {
                (1, 2)
            } else if ay >= az {
                (2, 0)
            } else {
                (0, 1)
            };
            let first = polygon_points.len() as u32;
            polygon_points.extend(p.vertices.iter().map(|v| (v[axes.0], v[axes.1])));
            polygons.push(PolygonData {
                normal,
                offset: normal.dot(centroid),
                axes,
                first,
                len: p.vertices.len() as u32,
                material: p.material,
            });
            let (min, max) = p.vertices.iter().fold(
                (Vec3::splat(f64::INFINITY), Vec3::splat(f64::NEG_INFINITY)),
                |(lo, hi), v| (lo.min(*v), hi.max(*v)),
            );
            items.push(BuildItem {
                prim: Prim::Polygon(i as u32),
                min,
                max,
            });
        }

        let bvh = Bvh::build(items);
        tracing::debug!(
            spheres = spheres.len(),
            polygons = polygons.len(),
            "scene compiled"
        );
        Ok(Scene {
            background: desc.background,
            lights: desc.lights.clone(),
            materials: desc.materials.clone(),
            light_intensity: desc.light_intensity(),
            spheres,
            polygons,
            polygon_points,
            bvh,
        })
    }

    /// Number of spheres.
    pub fn sphere_count(&self) -> usize {
        self.spheres.len()
    }

    /// Number of polygons.
    pub fn polygon_count(&self) -> usize {
        self.polygons.len()
    }

    /// The lights.
    pub fn lights(&self) -> &[Light] {
        &self.lights
    }

    /// The materials.
    pub fn materials(&self) -> &[Material] {
        &self.materials
    }

    /// Colour of rays that hit nothing.
    pub fn background(&self) -> Vec3 {
        self.background
    }

    /// Intensity of each light and of the ambient term, see
    /// [`SceneDescription::light_intensity`].
    pub fn light_intensity(&self) -> f64 {
        self.light_intensity
    }

    #[inline]
    fn hit_sphere(&self, index: u32, ray: &Ray, tmin: f64, tmax: f64) -> Option<f64> {
        let s = &self.spheres[index as usize];
        let oc = ray.origin - s.center;
        let b = oc.dot(ray.dir);
        let c = oc.dot(oc) - s.radius_sq;
        let disc = b * b - c;
        if disc < 0.0 {
            return None;
        }
        // Only the near root: spheres are opaque and seen from outside, so
        // a ray that starts inside one (or on it, leaving) does not hit it.
        let t = -b - disc.sqrt();
        (t > tmin && t < tmax).then_some(t)
    }

    #[inline]
    fn hit_polygon(&self, index: u32, ray: &Ray, tmin: f64, tmax: f64) -> Option<f64> {
        let p = &self.polygons[index as usize];
        let denom = p.normal.dot(ray.dir);
        if denom == 0.0 {
            return None;
        }
        let t = (p.offset - p.normal.dot(ray.origin)) / denom;
        if !(t > tmin && t < tmax) {
            return None;
        }
        let hit = ray.at(t);
        let (u, v) = (hit[p.axes.0], hit[p.axes.1]);
        let pts = &self.polygon_points[p.first as usize..(p.first + p.len) as usize];
        // Even-odd crossing test in the projected plane.
        let mut inside = false;
        let mut j = pts.len() - 1;
        for i in 0..pts.len() {
            let (ui, vi) = pts[i];
            let (uj, vj) = pts[j];
            if (vi > v) != (vj > v) && u < (uj - ui) * (v - vi) / (vj - vi) + ui {
                inside = !inside;
            }
            j = i;
        }
        inside.then_some(t)
    }

    /// The nearest surface the ray hits with `tmin < t < tmax`.
    pub fn intersect(&self, ray: &Ray, tmin: f64, tmax: f64) -> Option<Hit> {
        let mut best: Option<(f64, Prim)> = None;
        self.bvh.traverse(ray, tmin, tmax, |prim, limit| {
            match self.hit_prim(prim, ray, tmin, limit) {
                Some(t) => {
                    best = Some((t, prim));
                    Some(t)
                }
                None => Some(limit),
            }
        });
        let (t, prim) = best?;
        let point = ray.at(t);
        let (normal, material) = match prim {
            Prim::Sphere(i) => {
                let s = &self.spheres[i as usize];
                ((point - s.center) * s.inv_radius, s.material)
            }
            Prim::Polygon(i) => {
                let p = &self.polygons[i as usize];
                // Polygons are two-sided: face the normal towards the ray.
                let n = if p.normal.dot(ray.dir) > 0.0 {
                    -p.normal
                } else {
                    p.normal
                };
                (n, p.material)
            }
        };
        Some(Hit {
            t,
            point,
            normal,
            material,
        })
    }

    /// Whether any surface blocks the ray within `tmin < t < tmax`.
    pub fn occluded(&self, ray: &Ray, tmin: f64, tmax: f64) -> bool {
        self.occluder(ray, tmin, tmax, None).is_some()
    }

    /// A primitive that blocks the ray within `tmin < t < tmax`, if any.
    /// `hint` is tried first: neighbouring shadow rays towards one light are
    /// usually blocked by the same primitive, which then saves the
    /// traversal. Whether a primitive is returned does not depend on the
    /// hint; which one may.
    pub fn occluder(&self, ray: &Ray, tmin: f64, tmax: f64, hint: Option<Prim>) -> Option<Prim> {
        if let Some(prim) = hint {
            if self.hit_prim(prim, ray, tmin, tmax).is_some() {
                return Some(prim);
            }
        }
        let mut blocker = None;
        self.bvh.traverse(ray, tmin, tmax, |prim, limit| {
            if self.hit_prim(prim, ray, tmin, limit).is_some() {
                blocker = Some(prim);
                None
            } else {
                Some(limit)
            }
        });
        blocker
    }

    #[inline]
    fn hit_prim(&self, prim: Prim, ray: &Ray, tmin: f64, tmax: f64) -> Option<f64> {
        match prim {
            Prim::Sphere(i) => self.hit_sphere(i, ray, tmin, tmax),
            Prim::Polygon(i) => self.hit_polygon(i, ray, tmin, tmax),
        }
    }
}
