//! Scene descriptions: the plain data an NFF file or the balls generator
//! produces, before any acceleration structure is built.

use serde::{Deserialize, Serialize};

use crate::vec3::Vec3;

/// The NFF viewpoint (`v` block).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct View {
    /// Eye position.
    pub from: Vec3,
    /// Point looked at; it appears in the centre of the image.
    pub at: Vec3,
    /// Up direction; need not be perpendicular to the view direction.
    pub up: Vec3,
    /// Vertical field of view in degrees, measured across the full image
    /// height (with square pixels the horizontal extent follows).
    pub angle: f64,
    /// Distance from the eye to the near clipping plane: eye rays ignore
    /// surfaces closer than this along the view direction.
    pub hither: f64,
    /// Image width in pixels proposed by the scene.
    pub width: u32,
    /// Image height in pixels proposed by the scene.
    pub height: u32,
}

/// A positional light.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Light {
    /// Light position.
    pub position: Vec3,
    /// Light colour; NFF lights without a colour are white (1, 1, 1).
    pub color: Vec3,
}

/// NFF fill parameters (`f` line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Material {
    /// Surface colour, components in 0..=1.
    pub color: Vec3,
    /// Diffuse coefficient; also scales the ambient term (NFF has no Ka).
    pub kd: f64,
    /// Specular coefficient: weight of the mirror reflection and of the
    /// Phong highlight.
    pub ks: f64,
    /// Phong exponent of the highlight.
    pub shine: f64,
    /// Transmittance. Parsed and kept, but not rendered: no scene this
    /// renderer targets is transparent, so no refraction rays are traced.
    pub transmittance: f64,
    /// Index of refraction; kept for completeness, unused like
    /// [`Material::transmittance`].
    pub ior: f64,
}

/// A sphere with the index of its material in [`SceneDescription::materials`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sphere {
    /// Centre.
    pub center: Vec3,
    /// Radius, > 0.
    pub radius: f64,
    /// Index into [`SceneDescription::materials`].
    pub material: u32,
}

/// A planar polygon with the index of its material.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Polygon {
    /// Vertices in order; at least three, all in one plane.
    pub vertices: Vec<Vec3>,
    /// Index into [`SceneDescription::materials`].
    pub material: u32,
}

/// Everything needed to render a scene, in the terms of the NFF format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SceneDescription {
    /// Camera and proposed resolution.
    pub view: View,
    /// Colour of rays that hit nothing.
    pub background: Vec3,
    /// Positional lights.
    pub lights: Vec<Light>,
    /// Fill materials, referenced by index from the objects.
    pub materials: Vec<Material>,
    /// Spheres.
    pub spheres: Vec<Sphere>,
    /// Polygons.
    pub polygons: Vec<Polygon>,
}

impl SceneDescription {
    /// Intensity of each light and of the ambient term.
    ///
    /// NFF leaves light intensities unspecified; the SPD documentation
    /// proposes `sqrt(n) / (2 n)` for `n` lights, which keeps a surface lit by
    /// all lights from saturating, and the same value for the ambient light.
    pub fn light_intensity(&self) -> f64 {
        let n = self.lights.len().max(1) as f64;
        n.sqrt() / (2.0 * n)
    }
}
