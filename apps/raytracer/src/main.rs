//! Ray tracer: renders the SPD balls scene (or an NFF file) sequentially
//! (`--seq`) or as Satin divide-and-conquer tasks, writes a PNG and prints
//! one JSON line with timings and the image checksum.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use raytracer::{
    balls, nff, render_full, render_in_pool, render_parallel, render_split, Camera, Canvas, Frame,
    FrameError, ImageError, RenderSettings, Scene, SceneSource, SharedFrame,
};
use serde_json::json;
use thiserror::Error;

/// Ray-trace the Standard Procedural Databases "balls" scene (a sphereflake
/// on a floor, three lights) or an NFF file and print one JSON result line:
/// parameters, seconds per phase and an FNV-1a checksum of the RGB bytes.
///
/// Without --seq the screen is split four ways recursively into Satin tasks
/// that --threads worker threads share by work stealing; the image is
/// bit-identical to the sequential one. Under `ipl-run -n N` (or any IPL_*
/// pool of N > 1 nodes) the tasks are spread over the N processes, which
/// steal from each other (--steal); the master prints the result line.
#[derive(Parser, Debug)]
#[command(version, allow_negative_numbers = true)]
struct Args {
    /// Render sequentially (the correctness oracle and speedup baseline)
    /// instead of with the divide-and-conquer runtime.
    #[arg(long)]
    seq: bool,

    /// Worker threads of the divide-and-conquer runtime (per process).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    threads: u32,

    /// How idle processes of a multi-process run look for work: `random`
    /// (ask a random process and wait for the answer) or `cluster-aware`
    /// (at most one asynchronous request to another location at a time,
    /// random requests inside the own location meanwhile).
    #[arg(long, default_value = "cluster-aware", value_parser = parse_steal)]
    steal: satin::Steal,

    /// Recursion depth of the sphereflake: 1 + 9 + ... + 9^k spheres
    /// (2 gives 91 spheres, the Satin "balls2" input; at most 7).
    #[arg(long, default_value_t = balls::DEFAULT_SIZE_FACTOR,
          value_parser = clap::value_parser!(u32).range(0..=balls::MAX_SIZE_FACTOR as i64))]
    size_factor: u32,

    /// Render this NFF file instead of the generated balls scene.
    #[arg(long, value_name = "FILE")]
    nff: Option<PathBuf>,

    /// Image width in pixels, at most 4096 [default: the scene's resolution, 512 for balls].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=raytracer::camera::MAX_SIDE as i64))]
    width: Option<u32>,

    /// Image height in pixels, at most 4096 [default: the scene's resolution, 512 for
    /// balls].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=raytracer::camera::MAX_SIDE as i64))]
    height: Option<u32>,

    /// Anti-aliasing: average K x K rays per pixel (1 = one ray through the
    /// pixel centre).
    #[arg(long, value_name = "K", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=raytracer::render::MAX_AA as i64))]
    aa: u32,

    /// Maximum ray-tree depth; the eye ray has depth 1 and each mirror
    /// reflection adds one (the SPD procedure uses 5).
    #[arg(long, default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=raytracer::render::MAX_DEPTH as i64))]
    max_depth: u32,

    /// Split the screen four ways recursively until tiles are at most this
    /// many pixels on a side (the divide-and-conquer split points: the
    /// parallel render's leaf tasks); 0 renders the image as one tile, row by
    /// row (pixel-sized leaves in parallel). The image is identical either
    /// way.
    #[arg(long, default_value_t = 64)]
    tile: u32,

    /// Where to write the PNG.
    #[arg(long, short, default_value = "raytracer.png")]
    output: PathBuf,

    /// Skip writing the PNG (the checksum is still computed).
    #[arg(long)]
    no_png: bool,

    /// Also write the scene as an NFF file (full-precision numbers).
    #[arg(long, value_name = "FILE")]
    write_nff: Option<PathBuf>,

    /// Write a trace of each process (steals, idle periods, counts per
    /// interval) to a file of its own in DIR, as IPL_TRACE=DIR does;
    /// `bench-harness timeline DIR` merges and draws them.
    #[arg(long, value_name = "DIR")]
    trace: Option<PathBuf>,
}

/// What stopped a run.
#[derive(Debug, Error)]
enum AppError {
    /// The image cannot be written where --output says: found before any work.
    #[error("--output {path}: cannot write the image there: {source}")]
    Output {
        /// The path given.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An input or output file could not be read or written.
    #[error("cannot {what} {path}: {source}")]
    File {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The NFF file does not parse.
    #[error("{path}: {source}")]
    Nff {
        /// The file.
        path: String,
        /// Where and why.
        #[source]
        source: raytracer::NffError,
    },
    /// The scene or camera is invalid.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The PNG could not be written.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The `IPL_*` environment does not describe a pool.
    #[error("cannot read the pool configuration from the IPL_* environment: {0}")]
    Config(#[source] ipl::Error),
    /// Joining the pool failed.
    #[error("cannot join the pool: {0}")]
    Join(#[source] ipl::Error),
    /// The divide-and-conquer runtime failed.
    #[error("parallel render: {0}")]
    Satin(#[from] satin::Error),
}

fn parse_steal(s: &str) -> Result<satin::Steal, String> {
    match s {
        "random" => Ok(satin::Steal::Random),
        "cluster-aware" => Ok(satin::Steal::ClusterAware),
        _ => Err(format!(
            "unknown stealing policy '{s}': expected 'random' or 'cluster-aware'"
        )),
    }
}

/// The output image, claimed before the render: an empty temporary file beside it is created
/// up front, so that an unwritable path fails before any work, and the PNG is written to it
/// and renamed over the output at the end. Every process claims it, since any of them may be
/// elected to write it; the others' claims are removed when dropped.
struct PendingImage(ipl::cli::ClaimedFile);

impl PendingImage {
    fn claim(path: &Path) -> Result<PendingImage, AppError> {
        ipl::cli::ClaimedFile::claim(path)
            .map(PendingImage)
            .map_err(|source| AppError::Output {
                path: path.display().to_string(),
                source,
            })
    }

    fn write(self, image: &Canvas) -> Result<(), AppError> {
        image.write_png(self.0.temp())?;
        let path = self.0.path().display().to_string();
        self.0.commit().map_err(|source| AppError::File {
            what: "write image file",
            path,
            source,
        })
    }
}

/// The pool the parallel version runs on (one node without IPL_* variables).
fn join_pool() -> Result<ipl::Ibis, AppError> {
    let config = ipl::Config::from_env().map_err(AppError::Config)?;
    ipl::Ibis::join(config).map_err(AppError::Join)
}

/// A finished render and how long its phases took.
struct Rendered {
    image: Canvas,
    scene_seconds: f64,
    render_seconds: f64,
    spheres: usize,
    polygons: usize,
    lights: usize,
    /// The runtime's statistics and the seconds it took to start (a runtime over several
    /// processes starts within its first run, so it has no separate figure).
    stats: Option<(satin::Stats, Option<f64>)>,
}

impl Rendered {
    fn new(
        image: Canvas,
        scene: &Scene,
        (scene_seconds, render_seconds): (f64, f64),
        stats: Option<(satin::Stats, Option<f64>)>,
    ) -> Rendered {
        Rendered {
            image,
            scene_seconds,
            render_seconds,
            spheres: scene.sphere_count(),
            polygons: scene.polygon_count(),
            lights: scene.lights().len(),
            stats,
        }
    }
}

fn render_sequential(
    desc: &raytracer::SceneDescription,
    width: u32,
    height: u32,
    settings: &RenderSettings,
    tile: u32,
) -> Result<Rendered, AppError> {
    let build_start = Instant::now();
    let scene = Scene::build(desc).map_err(FrameError::from)?;
    let camera = Camera::new(&desc.view, width, height).map_err(FrameError::from)?;
    let scene_seconds = build_start.elapsed().as_secs_f64();
    let render_start = Instant::now();
    let image = if tile == 0 {
        render_full(&scene, &camera, settings)
    } else {
        render_split(&scene, &camera, settings, tile)
    };
    let render_seconds = render_start.elapsed().as_secs_f64();
    Ok(Rendered::new(
        image,
        &scene,
        (scene_seconds, render_seconds),
        None,
    ))
}

/// Renders over every process of `ibis`'s pool; `None` on the nodes other than the master.
fn render_in_processes(
    ibis: ipl::Ibis,
    frame: Frame,
    threads: u32,
    tile: u32,
    steal: satin::Steal,
) -> Result<Option<Rendered>, AppError> {
    let build_start = Instant::now();
    let shared = SharedFrame::new(frame)?;
    let scene_seconds = build_start.elapsed().as_secs_f64();
    let runtime = satin::Runtime::in_pool(ibis)
        .threads(threads as usize)
        .steal(steal);
    let render_start = Instant::now();
    let image = render_in_pool(&runtime, &shared, tile)?;
    let render_seconds = render_start.elapsed().as_secs_f64();
    Ok(image.map(|image| {
        Rendered::new(
            image,
            shared.scene(),
            (scene_seconds, render_seconds),
            Some((runtime.stats(), None)),
        )
    }))
}

fn render_with_satin(frame: Frame, threads: u32, tile: u32) -> Result<Rendered, AppError> {
    let build_start = Instant::now();
    let shared = SharedFrame::new(frame)?;
    let scene_seconds = build_start.elapsed().as_secs_f64();
    let start = Instant::now();
    let runtime = satin::Runtime::local().threads(threads as usize);
    runtime.start()?;
    let start_seconds = start.elapsed().as_secs_f64();
    let render_start = Instant::now();
    let image = render_parallel(&runtime, &shared, tile)?;
    let render_seconds = render_start.elapsed().as_secs_f64();
    Ok(Rendered::new(
        image,
        shared.scene(),
        (scene_seconds, render_seconds),
        Some((runtime.stats(), Some(start_seconds))),
    ))
}

fn run(args: Args) -> Result<(), AppError> {
    let total_start = Instant::now();
    let output = if args.no_png {
        None
    } else {
        Some(PendingImage::claim(&args.output)?)
    };
    let pool = if args.seq { None } else { Some(join_pool()?) };

    let (source, scene_name) = match &args.nff {
        Some(path) => {
            let text = ipl::cli::read_small_file(path, nff::MAX_FILE_BYTES).map_err(|source| {
                AppError::File {
                    what: "read NFF file",
                    path: path.display().to_string(),
                    source,
                }
            })?;
            let desc = nff::parse(&text).map_err(|source| AppError::Nff {
                path: path.display().to_string(),
                source,
            })?;
            (
                SceneSource::Description(Box::new(desc)),
                path.display().to_string(),
            )
        }
        None => (
            SceneSource::Balls(args.size_factor),
            format!("balls{}", args.size_factor),
        ),
    };
    let desc = source.description();
    if let Some(path) = &args.write_nff {
        std::fs::write(path, nff::write(&desc)).map_err(|source| AppError::File {
            what: "write NFF file",
            path: path.display().to_string(),
            source,
        })?;
    }
    let width = args.width.unwrap_or(desc.view.width);
    let height = args.height.unwrap_or(desc.view.height);
    let settings = RenderSettings {
        max_depth: args.max_depth,
        aa: args.aa,
    };
    let threads = if args.seq { 1 } else { args.threads };

    let nodes = pool.as_ref().map_or(1, |ibis| {
        let p = ibis.pool();
        p.size().map_or_else(|| p.members().len(), |n| n as usize)
    });
    let rendered = match pool.clone() {
        None => render_sequential(&desc, width, height, &settings, args.tile)?,
        Some(ibis) => {
            drop(desc);
            let frame = Frame {
                source,
                width,
                height,
                settings,
            };
            if nodes > 1 {
                match render_in_processes(ibis, frame, threads, args.tile, args.steal)? {
                    Some(rendered) => rendered,
                    // The master reports; the other processes only helped.
                    None => return Ok(()),
                }
            } else {
                render_with_satin(frame, threads, args.tile)?
            }
        }
    };
    tracing::info!(
        spheres = rendered.spheres,
        polygons = rendered.polygons,
        lights = rendered.lights,
        render_seconds = rendered.render_seconds,
        stats = ?rendered.stats,
        "rendered"
    );
    let checksum = rendered.image.checksum();

    let png_start = Instant::now();
    if let Some(output) = output {
        output.write(&rendered.image)?;
    }
    let png_seconds = png_start.elapsed().as_secs_f64();

    let mut line = json!({
        "version": if args.seq { "sequential" } else { "parallel" },
        "app": "raytracer",
        "parameters": {
            "scene": scene_name,
            "size_factor": args.nff.is_none().then_some(args.size_factor),
            "spheres": rendered.spheres,
            "polygons": rendered.polygons,
            "lights": rendered.lights,
            "width": width,
            "height": height,
            "aa": args.aa,
            "max_depth": args.max_depth,
            "tile": args.tile,
            "output": (!args.no_png).then(|| args.output.display().to_string()),
        },
        "nodes": nodes,
        "threads": threads,
        "seconds": {
            "scene_build": rendered.scene_seconds,
            "render": rendered.render_seconds,
            "png_write": png_seconds,
        },
        "total_seconds": total_start.elapsed().as_secs_f64(),
        "checksum": format!("{checksum:016x}"),
    });
    if let Some((stats, start_seconds)) = rendered.stats {
        if let Some(start_seconds) = start_seconds {
            line["seconds"]["runtime_start"] = json!(start_seconds);
        }
        line["satin"] = json!({
            "spawns": stats.spawns,
            "jobs_executed": stats.jobs_executed,
            "local_steals": stats.local_steals,
            "remote_steal_attempts": stats.remote_steal_attempts,
            "remote_steals": stats.remote_steals,
            "jobs_sent": stats.jobs_sent,
            "idle_seconds": stats.idle.as_secs_f64(),
        });
    }
    println!("{line}");
    drop(pool);
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Logs as RUST_LOG says; the trace, if asked for, is complete when this guard drops.
    let _trace = match ipl::trace::init("warn", args.trace.as_deref()) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        // Printed whatever RUST_LOG filters: a fatal error is never silent.
        Err(e @ AppError::Output { .. }) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
