//! The divide-and-conquer renderer on the Satin runtime.
//!
//! A [`RenderTask`] renders one tile: a tile larger than the leaf size
//! spawns one child per quadrant ([`Tile::quadrants`]), runs the last one
//! itself, syncs, and pastes the children's canvases into its own; a leaf
//! renders its pixels with [`render_tile`]. These are the split points of
//! [`render_recursive`](crate::render_recursive), so the image is
//! bit-identical to the sequential render however the work is spread.
//!
//! Tasks are plain data so that a stolen one can travel to another process:
//! the tile, the leaf size and a [`SharedFrame`], which serializes as the
//! [`Frame`] it was built from (the scene's *recipe*, a few bytes for the
//! balls scene) and is rebuilt on arrival. A process decoding many tasks of
//! one frame builds its scene once.
//!
//! ```
//! use raytracer::{render_split, Frame, RenderSettings, SceneSource, SharedFrame};
//!
//! let frame = Frame {
//!     source: SceneSource::Balls(1),
//!     width: 48,
//!     height: 40,
//!     settings: RenderSettings::default(),
//! };
//! let shared = SharedFrame::new(frame)?;
//! let runtime = satin::Runtime::local().threads(2);
//! let image = raytracer::render_parallel(&runtime, &shared, 8)?;
//! let sequential = render_split(shared.scene(), shared.camera(), shared.settings(), 8);
//! assert_eq!(image.checksum(), sequential.checksum());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::balls::balls;
use crate::camera::{Camera, CameraError};
use crate::canvas::{Canvas, Tile};
use crate::render::{render_tile, RenderSettings, SettingsError};
use crate::scene::SceneDescription;
use crate::world::{Scene, SceneError};

/// Where the scene of a [`Frame`] comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SceneSource {
    /// The SPD balls scene of this size factor ([`balls()`]), generated
    /// wherever it is needed.
    Balls(u32),
    /// A scene given in full, such as one read from an NFF file.
    Description(Box<SceneDescription>),
}

impl SceneSource {
    /// The scene description.
    pub fn description(&self) -> Cow<'_, SceneDescription> {
        match self {
            SceneSource::Balls(size_factor) => Cow::Owned(balls(*size_factor)),
            SceneSource::Description(desc) => Cow::Borrowed(desc),
        }
    }
}

/// Everything a render needs besides the tile: the scene, the image size
/// and how rays are traced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// The scene (its view is the camera).
    pub source: SceneSource,
    /// Image width in pixels.
    pub width: u32,
    /// Image height in pixels.
    pub height: u32,
    /// Ray-tracing settings.
    pub settings: RenderSettings,
}

/// Why a [`Frame`] could not be prepared for rendering.
#[derive(Debug, Error, PartialEq)]
pub enum FrameError {
    /// The scene is invalid.
    #[error("invalid scene: {0}")]
    Scene(#[from] SceneError),
    /// The view and image size give no camera.
    #[error("invalid camera: {0}")]
    Camera(#[from] CameraError),
    /// The ray-tracing settings are out of range.
    #[error("invalid settings: {0}")]
    Settings(#[from] SettingsError),
}

struct Prepared {
    frame: Frame,
    scene: Scene,
    camera: Camera,
}

/// The frame this process decoded last (see [`SharedFrame::decoded`]), or the
/// one it last rendered in a pool: the master decodes its tasks again to check
/// the canvases that come back ([`Task::check_output`](satin::Task::check_output) of [`RenderTask`]), and finds its
/// own frame here instead of building its scene a second time.
static LAST_DECODED: Mutex<Option<SharedFrame>> = Mutex::new(None);

/// A [`Frame`] with its scene and camera built, shared by every task of one
/// render (cloning is cheap).
///
/// Serializes as its [`Frame`]; deserializing builds the scene again, or
/// reuses the one this process built for the frame it decoded last.
#[derive(Clone)]
pub struct SharedFrame(Arc<Prepared>);

impl SharedFrame {
    /// Builds the scene and camera of `frame`.
    ///
    /// # Errors
    /// If the scene is invalid, the camera cannot be set up (an image size above
    /// [`MAX_SIDE`](crate::camera::MAX_SIDE)), or the settings are out of range
    /// ([`RenderSettings::validate`]).
    pub fn new(frame: Frame) -> Result<SharedFrame, FrameError> {
        frame.settings.validate()?;
        let desc = frame.source.description();
        let scene = Scene::build(&desc)?;
        let camera = Camera::new(&desc.view, frame.width, frame.height)?;
        drop(desc);
        Ok(SharedFrame(Arc::new(Prepared {
            frame,
            scene,
            camera,
        })))
    }

    /// The frame this was built from.
    pub fn frame(&self) -> &Frame {
        &self.0.frame
    }

    /// The scene, ready to trace.
    pub fn scene(&self) -> &Scene {
        &self.0.scene
    }

    /// The camera for the frame's image size.
    pub fn camera(&self) -> &Camera {
        &self.0.camera
    }

    /// The ray-tracing settings.
    pub fn settings(&self) -> &RenderSettings {
        &self.0.frame.settings
    }

    /// The tile covering the whole image.
    pub fn full_tile(&self) -> Tile {
        Tile::full(self.0.frame.width, self.0.frame.height)
    }

    /// [`SharedFrame::new`], reusing the frame this process decoded last if
    /// it is the same one: a process that receives many tasks of one render
    /// builds its scene once.
    fn decoded(frame: Frame) -> Result<SharedFrame, FrameError> {
        // A panic while building leaves at worst a stale entry behind.
        let mut last = LAST_DECODED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(shared) = last.as_ref().filter(|s| s.0.frame == frame) {
            return Ok(shared.clone());
        }
        let shared = SharedFrame::new(frame)?;
        tracing::debug!(
            spheres = shared.scene().sphere_count(),
            "built the scene of a received frame"
        );
        *last = Some(shared.clone());
        Ok(shared)
    }
}

impl std::fmt::Debug for SharedFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SharedFrame").field(&self.0.frame).finish()
    }
}

impl Serialize for SharedFrame {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.frame.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SharedFrame {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SharedFrame, D::Error> {
        let frame = Frame::deserialize(deserializer)?;
        SharedFrame::decoded(frame).map_err(serde::de::Error::custom)
    }
}

/// The Satin task that renders `tile` of `frame`, splitting it four ways
/// while it is larger than `leaf` x `leaf` pixels (see
/// [`Tile::needs_split`]); its output is the tile's [`Canvas`].
///
/// A task decoded from another process is checked ([`RenderTask::validate`]):
/// its frame as [`SharedFrame::new`] checks one, and its tile against the
/// frame's image, so that a corrupt or forged task cannot make a worker
/// allocate a canvas larger than the image the command line allows.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(try_from = "RenderTaskWire")]
pub struct RenderTask {
    /// What is rendered.
    pub frame: SharedFrame,
    /// The pixels this task covers.
    pub tile: Tile,
    /// Largest side of a tile that is rendered without splitting.
    pub leaf: u32,
}

/// [`RenderTask`] as decoded, before its check.
#[derive(Deserialize)]
struct RenderTaskWire {
    frame: SharedFrame,
    tile: Tile,
    leaf: u32,
}

impl TryFrom<RenderTaskWire> for RenderTask {
    type Error = String;

    fn try_from(w: RenderTaskWire) -> Result<RenderTask, String> {
        let task = RenderTask {
            frame: w.frame,
            tile: w.tile,
            leaf: w.leaf,
        };
        task.validate()?;
        Ok(task)
    }
}

impl RenderTask {
    /// Checks that the tile is a non-empty part of the frame's image (whose
    /// size and settings [`SharedFrame::new`] checked).
    ///
    /// # Errors
    /// What is wrong, in words.
    pub fn validate(&self) -> Result<(), String> {
        let image = self.frame.full_tile();
        if self.tile.area() == 0 || !image.contains(&self.tile) {
            return Err(format!(
                "tile {:?} is not a non-empty part of the {}x{} image",
                self.tile, image.width, image.height
            ));
        }
        Ok(())
    }
}

impl satin::Task for RenderTask {
    type Output = Canvas;

    fn run(self, cx: &mut satin::Context) -> Canvas {
        let RenderTask { frame, tile, leaf } = self;
        if !tile.needs_split(leaf) {
            return render_tile(frame.scene(), frame.camera(), frame.settings(), tile);
        }
        let mut quadrants: Vec<Tile> = tile.quadrants().collect();
        let last = quadrants
            .pop()
            .expect("a tile larger than the leaf size has quadrants");
        let children: Vec<_> = quadrants
            .into_iter()
            .map(|q| {
                cx.spawn(RenderTask {
                    frame: frame.clone(),
                    tile: q,
                    leaf,
                })
            })
            .collect();
        let mut canvas = Canvas::new(tile);
        canvas.paste(&cx.call(RenderTask {
            frame,
            tile: last,
            leaf,
        }));
        cx.sync();
        for child in children {
            canvas.paste(&child.take());
        }
        canvas
    }

    const CHECKS_OUTPUT: bool = true;

    /// A canvas computed in another process must cover this task's tile: its own
    /// [`Deserialize`] sees that it holds one pixel per pixel of some tile, but only the task
    /// knows which tile, and the parent's paste would put another one in the wrong place or
    /// panic, blaming the parent instead of the process that sent it.
    fn check_output(&self, canvas: &Canvas) -> Result<(), String> {
        if canvas.tile() != self.tile {
            return Err(format!(
                "canvas of tile {:?} is not the task's tile {:?}",
                canvas.tile(),
                self.tile
            ));
        }
        Ok(())
    }
}

satin::register!(RenderTask, "raytracer::RenderTask");

/// Renders the whole image of `frame` on `runtime`, splitting down to
/// `leaf` x `leaf` tiles; bit-identical to
/// [`render_split`](crate::render_split) with the same leaf size.
///
/// # Errors
/// What the runtime reports (a task panicked, no threads).
pub fn render_parallel(
    runtime: &satin::Runtime,
    frame: &SharedFrame,
    leaf: u32,
) -> Result<Canvas, satin::Error> {
    runtime.run(RenderTask {
        frame: frame.clone(),
        tile: frame.full_tile(),
        leaf,
    })
}

/// Renders the whole image of `frame` on a runtime spread over an `ipl` pool:
/// every node calls it with the same frame; the master returns the image and
/// the others `None` once it is done. Bit-identical to
/// [`render_split`](crate::render_split) with the same leaf size.
///
/// # Errors
/// What the runtime reports (a task panicked, a node died or left).
pub fn render_in_pool(
    runtime: &satin::PoolRuntime,
    frame: &SharedFrame,
    leaf: u32,
) -> Result<Option<Canvas>, satin::Error> {
    // Tasks of this frame decoded here, stolen ones or those decoded again to check a canvas
    // that came back, then share its scene.
    *LAST_DECODED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(frame.clone());
    runtime.run(RenderTask {
        frame: frame.clone(),
        tile: frame.full_tile(),
        leaf,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(settings: RenderSettings) -> Frame {
        Frame {
            source: SceneSource::Balls(1),
            width: 32,
            height: 24,
            settings,
        }
    }

    /// A task's bytes as another process would send them, whatever its fields hold:
    /// a [`SharedFrame`] travels as its [`Frame`].
    fn task_bytes(frame: &Frame, tile: Tile, leaf: u32) -> Vec<u8> {
        postcard::to_allocvec(&(frame, tile, leaf)).unwrap()
    }

    #[test]
    fn a_task_travels_and_comes_back_checked() {
        let f = frame(RenderSettings::default());
        let tile = Tile {
            x0: 8,
            y0: 4,
            width: 16,
            height: 8,
        };
        let back: RenderTask = postcard::from_bytes(&task_bytes(&f, tile, 8)).unwrap();
        assert_eq!((back.frame.frame(), back.tile, back.leaf), (&f, tile, 8));
        // The same bytes as the task itself encodes to.
        let bytes = postcard::to_allocvec(&back).unwrap();
        assert_eq!(bytes, task_bytes(&f, tile, 8));
    }

    #[test]
    fn received_settings_out_of_the_command_lines_range_are_refused() {
        let full = Tile::full(32, 24);
        for (settings, want) in [
            (
                RenderSettings {
                    aa: 1_000_000,
                    max_depth: 5,
                },
                "anti-aliasing 1000000 (--aa) must be between 1 and 16",
            ),
            (
                RenderSettings {
                    aa: 0,
                    max_depth: 5,
                },
                "anti-aliasing 0 (--aa)",
            ),
            (
                RenderSettings {
                    aa: 2,
                    max_depth: u32::MAX,
                },
                "the maximum ray depth 4294967295 (--max-depth) must be between 1 and 64",
            ),
        ] {
            let f = frame(settings);
            // postcard keeps no message of a custom error: SharedFrame::new gives it.
            assert!(postcard::from_bytes::<RenderTask>(&task_bytes(&f, full, 8)).is_err());
            let e = SharedFrame::new(f).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
        }
        // The command line's own limits pass.
        let most = RenderSettings {
            aa: crate::render::MAX_AA,
            max_depth: crate::render::MAX_DEPTH,
        };
        assert_eq!(most.validate(), Ok(()));
        assert!(postcard::from_bytes::<RenderTask>(&task_bytes(&frame(most), full, 8)).is_ok());
    }

    #[test]
    fn a_canvas_from_elsewhere_must_cover_its_tasks_tile() {
        use satin::Task;
        let task = RenderTask {
            frame: SharedFrame::new(frame(RenderSettings::default())).unwrap(),
            tile: Tile {
                x0: 8,
                y0: 4,
                width: 16,
                height: 8,
            },
            leaf: 8,
        };
        const { assert!(RenderTask::CHECKS_OUTPUT) };
        assert_eq!(task.check_output(&Canvas::new(task.tile)), Ok(()));
        // Within the image and consistent in itself, but not the tile asked for: its parent's
        // paste would put it in the wrong place, or panic.
        for tile in [
            Tile { x0: 0, ..task.tile },
            Tile {
                width: 8,
                ..task.tile
            },
            Tile::full(32, 24),
        ] {
            let e = task.check_output(&Canvas::new(tile)).unwrap_err();
            assert!(e.contains("is not the task's tile"), "{e}");
        }
    }

    #[test]
    fn received_tiles_outside_the_image_are_refused() {
        let f = frame(RenderSettings::default());
        let shared = SharedFrame::new(f.clone()).unwrap();
        for tile in [
            Tile::full(4_000_000_000, 4_000_000_000),
            Tile::full(33, 24),
            Tile {
                x0: u32::MAX,
                y0: 0,
                width: 10,
                height: 1,
            },
            Tile {
                x0: 4,
                y0: 4,
                width: 0,
                height: 4,
            },
        ] {
            let bytes = task_bytes(&f, tile, 8);
            assert!(
                postcard::from_bytes::<RenderTask>(&bytes).is_err(),
                "{tile:?}"
            );
            let task = RenderTask {
                frame: shared.clone(),
                tile,
                leaf: 8,
            };
            let e = task.validate().unwrap_err();
            assert!(
                e.contains("is not a non-empty part of the 32x24 image"),
                "{e}"
            );
        }
    }
}
