//! A deterministic ray tracer for the Standard Procedural Databases "balls"
//! scene (the sphereflake) and for NFF files of spheres and polygons.
//!
//! Pipeline: a [`SceneDescription`] (from [`balls()`] or [`nff::parse`]) is
//! compiled into a [`Scene`] (validated, with a bounding-volume hierarchy);
//! a [`Camera`] turns image coordinates into eye rays; [`render_tile`]
//! shades any rectangle of pixels ([`shade`] documents the shading model).
//! Because every pixel is a pure function of its coordinates, any split of
//! the image renders bit-identically, which is what the divide-and-conquer
//! renderer relies on: [`render_split`] is its sequential form, and
//! [`render_parallel`] runs the same split as Satin tasks ([`RenderTask`],
//! see [`parallel`]).
//!
//! ```
//! use raytracer::{balls, render_full, render_split, Camera, RenderSettings, Scene};
//!
//! let desc = balls(1); // 10 spheres
//! let scene = Scene::build(&desc).unwrap();
//! let camera = Camera::new(&desc.view, 32, 32).unwrap();
//! let settings = RenderSettings::default();
//! let image = render_full(&scene, &camera, &settings);
//! let tiled = render_split(&scene, &camera, &settings, 8);
//! assert_eq!(image.checksum(), tiled.checksum());
//! assert_eq!(image.pixels().len(), 32 * 32);
//! ```

#![warn(missing_docs)]

pub mod balls;
pub mod bvh;
pub mod camera;
pub mod canvas;
pub mod nff;
pub mod parallel;
pub mod ray;
pub mod render;
pub mod scene;
pub mod shade;
pub mod vec3;
pub mod world;

pub use balls::balls;
pub use camera::{Camera, CameraError};
pub use canvas::{Canvas, ImageError, Tile};
pub use nff::{NffError, NffErrorKind};
pub use parallel::{
    render_in_pool, render_parallel, Frame, FrameError, RenderTask, SceneSource, SharedFrame,
};
pub use render::{
    pixel_color, quantize, render_full, render_recursive, render_split, render_tile,
    RenderSettings, SettingsError,
};
pub use scene::{Light, Material, Polygon, SceneDescription, Sphere, View};
pub use vec3::Vec3;
pub use world::{Hit, Scene, SceneError};
