//! Sequential ray tracer: renders the SPD balls scene (or an NFF file),
//! writes a PNG and prints one JSON line with timings and the image checksum.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use raytracer::{balls, nff, render_full, render_split, Camera, RenderSettings, Scene};
use serde_json::json;

/// Ray-trace the Standard Procedural Databases "balls" scene (a sphereflake
/// on a floor, three lights) or an NFF file, sequentially, and print one JSON
/// result line: parameters, seconds per phase and an FNV-1a checksum of the
/// RGB bytes.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Recursion depth of the sphereflake: 1 + 9 + ... + 9^k spheres
    /// (2 gives 91 spheres, the Satin "balls2" input; at most 7).
    #[arg(long, default_value_t = balls::DEFAULT_SIZE_FACTOR,
          value_parser = clap::value_parser!(u32).range(0..=balls::MAX_SIZE_FACTOR as i64))]
    size_factor: u32,

    /// Render this NFF file instead of the generated balls scene.
    #[arg(long, value_name = "FILE")]
    nff: Option<PathBuf>,

    /// Image width in pixels [default: the scene's resolution, 512 for balls].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536))]
    width: Option<u32>,

    /// Image height in pixels [default: the scene's resolution, 512 for balls].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536))]
    height: Option<u32>,

    /// Anti-aliasing: average K x K rays per pixel (1 = one ray through the
    /// pixel centre).
    #[arg(long, value_name = "K", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    aa: u32,

    /// Maximum ray-tree depth; the eye ray has depth 1 and each mirror
    /// reflection adds one (the SPD procedure uses 5).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=64))]
    max_depth: u32,

    /// Split the screen four ways recursively until tiles are at most this
    /// many pixels on a side (the divide-and-conquer split points); 0 renders
    /// the image as one tile, row by row. The image is identical either way.
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
}

fn run(args: Args) -> Result<(), String> {
    let total_start = Instant::now();

    let build_start = Instant::now();
    let (desc, scene_name) = match &args.nff {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read NFF file {}: {e}", path.display()))?;
            let desc = nff::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            (desc, path.display().to_string())
        }
        None => (
            balls(args.size_factor),
            format!("balls{}", args.size_factor),
        ),
    };
    if let Some(path) = &args.write_nff {
        std::fs::write(path, nff::write(&desc))
            .map_err(|e| format!("cannot write NFF file {}: {e}", path.display()))?;
    }
    let width = args.width.unwrap_or(desc.view.width);
    let height = args.height.unwrap_or(desc.view.height);
    let scene = Scene::build(&desc).map_err(|e| format!("invalid scene: {e}"))?;
    let camera =
        Camera::new(&desc.view, width, height).map_err(|e| format!("invalid camera: {e}"))?;
    let scene_seconds = build_start.elapsed().as_secs_f64();
    tracing::info!(
        spheres = scene.sphere_count(),
        polygons = scene.polygon_count(),
        lights = scene.lights().len(),
        "scene built"
    );

    let settings = RenderSettings {
        max_depth: args.max_depth,
        aa: args.aa,
    };
    let render_start = Instant::now();
    let image = if args.tile == 0 {
        render_full(&scene, &camera, &settings)
    } else {
        render_split(&scene, &camera, &settings, args.tile)
    };
    let render_seconds = render_start.elapsed().as_secs_f64();
    let checksum = image.checksum();

    let png_start = Instant::now();
    if !args.no_png {
        image.write_png(&args.output).map_err(|e| e.to_string())?;
    }
    let png_seconds = png_start.elapsed().as_secs_f64();

    let line = json!({
        "version": "sequential",
        "app": "raytracer",
        "parameters": {
            "scene": scene_name,
            "size_factor": args.nff.is_none().then_some(args.size_factor),
            "spheres": scene.sphere_count(),
            "polygons": scene.polygon_count(),
            "lights": scene.lights().len(),
            "width": width,
            "height": height,
            "aa": args.aa,
            "max_depth": args.max_depth,
            "tile": args.tile,
            "output": (!args.no_png).then(|| args.output.display().to_string()),
        },
        "nodes": 1,
        "threads": 1,
        "seconds": {
            "scene_build": scene_seconds,
            "render": render_seconds,
            "png_write": png_seconds,
        },
        "total_seconds": total_start.elapsed().as_secs_f64(),
        "checksum": format!("{checksum:016x}"),
    });
    println!("{line}");
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            ExitCode::FAILURE
        }
    }
}
