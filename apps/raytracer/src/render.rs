//! Rendering pixels, tiles and whole images.
//!
//! Every pixel is a pure function of the scene, the camera, the settings and
//! its coordinates, so an image rendered in any split into tiles, in any
//! order, on any number of workers, is bit-identical to the sequential one.
//! [`render_split`] is the sequential form of the divide-and-conquer
//! renderer: it splits the screen in four ([`Tile::quadrants`]) until tiles
//! are no larger than the leaf size ([`Tile::needs_split`]), renders the
//! leaves with [`render_tile`] and pastes the results together
//! ([`Canvas::paste`]). A parallel version spawns at the same points.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::camera::Camera;
use crate::canvas::{Canvas, Tile};
use crate::shade::{trace, ShadowCache};
use crate::vec3::Vec3;
use crate::world::Scene;

/// The most anti-aliasing rays per pixel side ([`RenderSettings::aa`]): 16 x 16 rays.
pub const MAX_AA: u32 = 16;

/// The longest ray tree ([`RenderSettings::max_depth`]).
pub const MAX_DEPTH: u32 = 64;

/// A [`RenderSettings`] field out of range.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SettingsError {
    /// `aa` is 0 or above [`MAX_AA`].
    #[error("anti-aliasing {0} (--aa) must be between 1 and {MAX_AA}")]
    Aa(u32),
    /// `max_depth` is 0 or above [`MAX_DEPTH`].
    #[error("the maximum ray depth {0} (--max-depth) must be between 1 and {MAX_DEPTH}")]
    MaxDepth(u32),
}

/// How rays are traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderSettings {
    /// Longest ray tree: the eye ray has depth 1, each mirror bounce adds 1.
    /// The SPD testing procedure uses 5.
    pub max_depth: u32,
    /// Anti-aliasing: each pixel averages `aa` x `aa` rays through the
    /// centres of a regular grid of sub-pixels (1: one ray through the pixel
    /// centre).
    pub aa: u32,
}

impl RenderSettings {
    /// Checks both fields against the limits the command line enforces ([`MAX_AA`],
    /// [`MAX_DEPTH`]): settings decoded from another process pass here, and an `aa` in the
    /// millions would trace its square of rays per pixel.
    ///
    /// # Errors
    /// The first field out of range.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if !(1..=MAX_AA).contains(&self.aa) {
            return Err(SettingsError::Aa(self.aa));
        }
        if !(1..=MAX_DEPTH).contains(&self.max_depth) {
            return Err(SettingsError::MaxDepth(self.max_depth));
        }
        Ok(())
    }
}

impl Default for RenderSettings {
    fn default() -> Self {
        RenderSettings {
            max_depth: 5,
            aa: 1,
        }
    }
}

/// Linear colour of pixel `(x, y)`: the mean of its samples, each clamped to
/// `[0, 1]` before averaging.
pub fn pixel_color(
    scene: &Scene,
    camera: &Camera,
    settings: &RenderSettings,
    x: u32,
    y: u32,
) -> Vec3 {
    pixel_color_cached(scene, camera, settings, x, y, &mut ShadowCache::new(scene))
}

fn pixel_color_cached(
    scene: &Scene,
    camera: &Camera,
    settings: &RenderSettings,
    x: u32,
    y: u32,
    cache: &mut ShadowCache,
) -> Vec3 {
    let k = settings.aa.max(1);
    let max_depth = settings.max_depth.max(1);
    let step = 1.0 / k as f64;
    let mut sum = Vec3::ZERO;
    for sy in 0..k {
        let fy = y as f64 + (sy as f64 + 0.5) * step;
        for sx in 0..k {
            let fx = x as f64 + (sx as f64 + 0.5) * step;
            let ray = camera.ray(fx, fy);
            let c = trace(scene, &ray, camera.near_limit(&ray), 1, max_depth, cache);
            sum += c.max(Vec3::ZERO).min(Vec3::splat(1.0));
        }
    }
    sum * (1.0 / (k * k) as f64)
}

/// Converts a colour in `[0, 1]` to 8-bit RGB, rounding to nearest.
pub fn quantize(c: Vec3) -> [u8; 3] {
    let q = |v: f64| (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8;
    [q(c.x), q(c.y), q(c.z)]
}

/// Renders the pixels of `tile`. Pure: the result depends only on the
/// arguments, never on how the image is split.
pub fn render_tile(
    scene: &Scene,
    camera: &Camera,
    settings: &RenderSettings,
    tile: Tile,
) -> Canvas {
    let mut pixels = Vec::with_capacity(tile.area());
    let mut cache = ShadowCache::new(scene);
    for y in tile.y0..tile.y0 + tile.height {
        for x in tile.x0..tile.x0 + tile.width {
            pixels.push(quantize(pixel_color_cached(
                scene, camera, settings, x, y, &mut cache,
            )));
        }
    }
    Canvas::from_pixels(tile, pixels)
}

/// Renders the whole image in one pass, row by row.
pub fn render_full(scene: &Scene, camera: &Camera, settings: &RenderSettings) -> Canvas {
    render_tile(
        scene,
        camera,
        settings,
        Tile::full(camera.width(), camera.height()),
    )
}

/// Renders the whole image by recursive four-way splitting down to tiles of
/// at most `leaf` x `leaf` pixels.
pub fn render_split(
    scene: &Scene,
    camera: &Camera,
    settings: &RenderSettings,
    leaf: u32,
) -> Canvas {
    render_recursive(
        scene,
        camera,
        settings,
        Tile::full(camera.width(), camera.height()),
        leaf,
    )
}

/// Renders `tile` by recursive four-way splitting down to `leaf`.
pub fn render_recursive(
    scene: &Scene,
    camera: &Camera,
    settings: &RenderSettings,
    tile: Tile,
    leaf: u32,
) -> Canvas {
    if !tile.needs_split(leaf) {
        return render_tile(scene, camera, settings, tile);
    }
    let mut canvas = Canvas::new(tile);
    for quadrant in tile.quadrants() {
        canvas.paste(&render_recursive(scene, camera, settings, quadrant, leaf));
    }
    canvas
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quadrants_partition_the_tile() {
        for (w, h) in [(1, 1), (1, 7), (5, 3), (8, 8), (9, 2)] {
            let t = Tile {
                x0: 3,
                y0: 4,
                width: w,
                height: h,
            };
            let qs: Vec<_> = t.quadrants().collect();
            assert_eq!(qs.iter().map(Tile::area).sum::<usize>(), t.area());
            for (i, a) in qs.iter().enumerate() {
                assert!(t.contains(a));
                for b in &qs[i + 1..] {
                    let disjoint = a.x0 + a.width <= b.x0
                        || b.x0 + b.width <= a.x0
                        || a.y0 + a.height <= b.y0
                        || b.y0 + b.height <= a.y0;
                    assert!(disjoint, "{a:?} overlaps {b:?}");
                }
            }
        }
    }

    #[test]
    fn splitting_stops_at_the_leaf_size() {
        let t = Tile::full(9, 4);
        assert!(t.needs_split(8));
        assert!(!t.needs_split(9));
        assert!(Tile::full(2, 2).needs_split(0));
        assert!(!Tile::full(1, 1).needs_split(0));
    }

    #[test]
    fn quantize_rounds_and_clamps() {
        assert_eq!(quantize(Vec3::new(0.0, 1.0, 0.5)), [0, 255, 128]);
        assert_eq!(quantize(Vec3::new(-1.0, 2.0, 1.0 / 255.0)), [0, 255, 1]);
    }
}
