//! Reading and writing the subset of Eric Haines' Neutral File Format (NFF)
//! that sphere-and-polygon scenes use.
//!
//! Accepted lines (one entity per line, numbers separated by white space,
//! `#` starts a comment line):
//!
//! ```text
//! v                                   start of the viewpoint (optional marker)
//! from X Y Z   at X Y Z   up X Y Z    eye, target, up direction
//! angle DEGREES                       vertical field of view
//! hither DISTANCE                     near plane (default 0)
//! resolution WIDTH HEIGHT             image size (default 512 512)
//! b R G B                             background colour
//! l X Y Z [R G B]                     positional light, white if no colour
//! f R G B Kd Ks Shine T IndexOfRefraction
//! s X Y Z RADIUS                      sphere
//! p N                                 polygon, followed by N lines "X Y Z"
//! ```
//!
//! Objects take the most recent `f`. Cones, cylinders and polygon patches
//! (`c`, `pp`) are rejected as unsupported. Every error names its line.

use std::fmt::Write as _;

use thiserror::Error;

use crate::scene::{Light, Material, Polygon, SceneDescription, Sphere, View};
use crate::vec3::Vec3;

/// Largest NFF file read: 1 GiB, about ten million spheres. The whole text is held in memory
/// while it is parsed, so a file is refused beyond this, as is anything that is not a regular
/// file (a device such as `/dev/zero` would be read until memory ran out).
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// Largest image side a `resolution` line may ask for: the camera's.
pub const MAX_RESOLUTION: u32 = crate::camera::MAX_SIDE;

/// An NFF syntax or content error, with the 1-based line it was found on.
#[derive(Debug, Error, PartialEq)]
#[error("NFF line {line}: {kind}")]
pub struct NffError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub kind: NffErrorKind,
}

/// What is wrong with an NFF line.
#[derive(Debug, Error, PartialEq)]
pub enum NffErrorKind {
    /// The line starts with a keyword this reader does not know or support.
    #[error("unknown or unsupported entity '{0}'")]
    UnknownEntity(String),
    /// A keyword followed by the wrong number of values.
    #[error("'{keyword}' takes {expected} values, found {found}")]
    WrongCount {
        /// The keyword (or "vertex").
        keyword: String,
        /// How many values it takes, e.g. "3 or 6".
        expected: &'static str,
        /// How many the line has.
        found: usize,
    },
    /// A value that does not parse as a finite number.
    #[error("'{0}' is not a finite number")]
    BadNumber(String),
    /// A resolution value that is not an integer in range.
    #[error("resolution value '{0}' is not an integer between 1 and {MAX_RESOLUTION}")]
    BadResolution(String),
    /// A polygon vertex count that is not an integer of at least 3.
    #[error("polygon vertex count '{0}' is not an integer of at least 3")]
    BadVertexCount(String),
    /// The file ended before all vertices of a polygon were given.
    #[error("file ends after {found} of the polygon's {declared} vertices")]
    TruncatedPolygon {
        /// Vertices announced by the `p` line.
        declared: usize,
        /// Vertices present.
        found: usize,
    },
    /// A sphere or polygon before any `f` line.
    #[error("object before any 'f' fill line")]
    NoMaterial,
    /// A sphere with a radius that is not positive.
    #[error("sphere radius {0} is not positive")]
    BadRadius(f64),
    /// The viewpoint lacks a required field (reported at the last line).
    #[error("viewpoint has no '{0}' line")]
    MissingView(&'static str),
}

fn err(line: usize, kind: NffErrorKind) -> NffError {
    NffError { line, kind }
}

fn numbers<const N: usize>(
    line: usize,
    keyword: &str,
    expected: &'static str,
    args: &[&str],
) -> Result<[f64; N], NffError> {
    if args.len() != N {
        return Err(err(
            line,
            NffErrorKind::WrongCount {
                keyword: keyword.into(),
                expected,
                found: args.len(),
            },
        ));
    }
    let mut out = [0.0; N];
    for (o, a) in out.iter_mut().zip(args) {
        *o = number(line, a)?;
    }
    Ok(out)
}

fn number(line: usize, token: &str) -> Result<f64, NffError> {
    match token.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(err(line, NffErrorKind::BadNumber(token.into()))),
    }
}

fn vec3(v: [f64; 3]) -> Vec3 {
    Vec3::new(v[0], v[1], v[2])
}

/// Parses NFF text into a scene description.
pub fn parse(text: &str) -> Result<SceneDescription, NffError> {
    let mut from = None;
    let mut at = None;
    let mut up = None;
    let mut angle = None;
    let mut hither = 0.0;
    let (mut width, mut height) = (512, 512);
    let mut background = Vec3::ZERO;
    let mut lights = Vec::new();
    let mut materials: Vec<Material> = Vec::new();
    let mut spheres = Vec::new();
    let mut polygons = Vec::new();

    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split_whitespace().collect::<Vec<_>>()))
        .filter(|(_, t)| !t.is_empty() && !t[0].starts_with('#'));
    let mut last_line = text.lines().count().max(1);
    let current_material = |line: usize, materials: &Vec<Material>| {
        if materials.is_empty() {
            Err(err(line, NffErrorKind::NoMaterial))
        } else {
            Ok((materials.len() - 1) as u32)
        }
    };

    while let Some((line, tokens)) = lines.next() {
        last_line = last_line.max(line);
        let (keyword, args) = (tokens[0], &tokens[1..]);
        match keyword {
            "v" => {
                if !args.is_empty() {
                    return Err(err(
                        line,
                        NffErrorKind::WrongCount {
                            keyword: "v".into(),
                            expected: "0",
                            found: args.len(),
                        },
                    ));
                }
            }
            "from" => from = Some(vec3(numbers(line, keyword, "3", args)?)),
            "at" => at = Some(vec3(numbers(line, keyword, "3", args)?)),
            "up" => up = Some(vec3(numbers(line, keyword, "3", args)?)),
            "angle" => angle = Some(numbers::<1>(line, keyword, "1", args)?[0]),
            "hither" => hither = numbers::<1>(line, keyword, "1", args)?[0],
            "resolution" => {
                if args.len() != 2 {
                    return Err(err(
                        line,
                        NffErrorKind::WrongCount {
                            keyword: keyword.into(),
                            expected: "2",
                            found: args.len(),
                        },
                    ));
                }
                let side = |t: &str| match t.parse::<u32>() {
                    Ok(v) if (1..=MAX_RESOLUTION).contains(&v) => Ok(v),
                    _ => Err(err(line, NffErrorKind::BadResolution(t.into()))),
                };
                width = side(args[0])?;
                height = side(args[1])?;
            }
            "b" => background = vec3(numbers(line, keyword, "3", args)?),
            "l" => {
                let (position, color) = match args.len() {
                    3 => (
                        vec3(numbers(line, keyword, "3 or 6", args)?),
                        Vec3::splat(1.0),
                    ),
                    _ => {
                        let v = numbers::<6>(line, keyword, "3 or 6", args)?;
                        (Vec3::new(v[0], v[1], v[2]), Vec3::new(v[3], v[4], v[5]))
                    }
                };
                lights.push(Light { position, color });
            }
            "f" => {
                let v = numbers::<8>(line, keyword, "8", args)?;
                materials.push(Material {
                    color: Vec3::new(v[0], v[1], v[2]),
                    kd: v[3],
                    ks: v[4],
                    shine: v[5],
                    transmittance: v[6],
                    ior: v[7],
                });
            }
            "s" => {
                let v = numbers::<4>(line, keyword, "4", args)?;
                if v[3] <= 0.0 {
                    return Err(err(line, NffErrorKind::BadRadius(v[3])));
                }
                spheres.push(Sphere {
                    center: Vec3::new(v[0], v[1], v[2]),
                    radius: v[3],
                    material: current_material(line, &materials)?,
                });
            }
            "p" => {
                if args.len() != 1 {
                    return Err(err(
                        line,
                        NffErrorKind::WrongCount {
                            keyword: keyword.into(),
                            expected: "1",
                            found: args.len(),
                        },
                    ));
                }
                let declared = match args[0].parse::<usize>() {
                    Ok(n) if n >= 3 => n,
                    _ => return Err(err(line, NffErrorKind::BadVertexCount(args[0].into()))),
                };
                let material = current_material(line, &materials)?;
                // Grows with the vertices actually present, so a huge
                // declared count in a short file cannot exhaust memory.
                let mut vertices = Vec::new();
                while vertices.len() < declared {
                    let Some((vline, vtokens)) = lines.next() else {
                        return Err(err(
                            last_line,
                            NffErrorKind::TruncatedPolygon {
                                declared,
                                found: vertices.len(),
                            },
                        ));
                    };
                    last_line = last_line.max(vline);
                    vertices.push(vec3(numbers(vline, "vertex", "3", &vtokens)?));
                }
                polygons.push(Polygon { vertices, material });
            }
            other => return Err(err(line, NffErrorKind::UnknownEntity(other.into()))),
        }
    }

    let missing = |what| err(last_line, NffErrorKind::MissingView(what));
    Ok(SceneDescription {
        view: View {
            from: from.ok_or_else(|| missing("from"))?,
            at: at.ok_or_else(|| missing("at"))?,
            up: up.ok_or_else(|| missing("up"))?,
            angle: angle.ok_or_else(|| missing("angle"))?,
            hither,
            width,
            height,
        },
        background,
        lights,
        materials,
        spheres,
        polygons,
    })
}

/// Writes a scene description as NFF. Numbers are printed in Rust's
/// shortest round-trip form, so [`parse`] reads back exactly the same
/// values. Polygons come before spheres; an `f` line precedes each object
/// whose material differs from the previous object's.
pub fn write(desc: &SceneDescription) -> String {
    let mut s = String::new();
    let v = &desc.view;
    let p3 = |s: &mut String, k: &str, v: Vec3| {
        let _ = writeln!(s, "{k} {} {} {}", v.x, v.y, v.z);
    };
    s.push_str("v\n");
    p3(&mut s, "from", v.from);
    p3(&mut s, "at", v.at);
    p3(&mut s, "up", v.up);
    let _ = writeln!(s, "angle {}", v.angle);
    let _ = writeln!(s, "hither {}", v.hither);
    let _ = writeln!(s, "resolution {} {}", v.width, v.height);
    p3(&mut s, "b", desc.background);
    for l in &desc.lights {
        let (p, c) = (l.position, l.color);
        let _ = writeln!(s, "l {} {} {} {} {} {}", p.x, p.y, p.z, c.x, c.y, c.z);
    }
    let mut current: Option<u32> = None;
    let mut fill = |s: &mut String, index: u32| {
        if current != Some(index) {
            current = Some(index);
            if let Some(m) = desc.materials.get(index as usize) {
                let c = m.color;
                let _ = writeln!(
                    s,
                    "f {} {} {} {} {} {} {} {}",
                    c.x, c.y, c.z, m.kd, m.ks, m.shine, m.transmittance, m.ior
                );
            }
        }
    };
    for p in &desc.polygons {
        fill(&mut s, p.material);
        let _ = writeln!(s, "p {}", p.vertices.len());
        for v in &p.vertices {
            let _ = writeln!(s, "{} {} {}", v.x, v.y, v.z);
        }
    }
    for sp in &desc.spheres {
        fill(&mut s, sp.material);
        let c = sp.center;
        let _ = writeln!(s, "s {} {} {} {}", c.x, c.y, c.z, sp.radius);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = "\
# a comment
v
from 0 -5 1
at 0 0 0
up 0 0 1
angle 40
hither 0.1
resolution 64 48
b 0.1 0.2 0.3
l 1 2 3
l 4 5 6 0.5 0.5 0.5
f 1 0 0 0.7 0.3 20 0 1
s 0 0 0 1
p 3
-1 -1 -1
1 -1 -1
0 1 -1
";

    #[test]
    fn parses_every_supported_entity() {
        let d = parse(SMALL).unwrap();
        assert_eq!(d.view.from, Vec3::new(0.0, -5.0, 1.0));
        assert_eq!((d.view.width, d.view.height), (64, 48));
        assert_eq!(d.view.hither, 0.1);
        assert_eq!(d.background, Vec3::new(0.1, 0.2, 0.3));
        assert_eq!(d.lights.len(), 2);
        assert_eq!(d.lights[0].color, Vec3::splat(1.0));
        assert_eq!(d.lights[1].color, Vec3::splat(0.5));
        assert_eq!(d.materials[0].shine, 20.0);
        assert_eq!(d.spheres.len(), 1);
        assert_eq!(d.polygons[0].vertices.len(), 3);
    }

    fn error_of(text: &str) -> NffError {
        parse(text).unwrap_err()
    }

    #[test]
    fn errors_name_the_offending_line() {
        let bad_number = SMALL.replace("s 0 0 0 1", "s 0 zero 0 1");
        assert_eq!(
            error_of(&bad_number),
            err(13, NffErrorKind::BadNumber("zero".into()))
        );
        let short = SMALL.replace("f 1 0 0 0.7 0.3 20 0 1", "f 1 0 0");
        assert!(matches!(
            error_of(&short),
            NffError {
                line: 12,
                kind: NffErrorKind::WrongCount { found: 3, .. }
            }
        ));
        let cone = format!("{SMALL}c 0 0 0 1 0 0 1 1\n");
        assert_eq!(
            error_of(&cone),
            err(18, NffErrorKind::UnknownEntity("c".into()))
        );
        let truncated = SMALL.replace("p 3", "p 4");
        assert_eq!(
            error_of(&truncated),
            err(
                17,
                NffErrorKind::TruncatedPolygon {
                    declared: 4,
                    found: 3
                }
            )
        );
        let no_fill = SMALL.replace("f 1 0 0 0.7 0.3 20 0 1\n", "");
        assert_eq!(error_of(&no_fill), err(12, NffErrorKind::NoMaterial));
        let no_at = SMALL.replace("at 0 0 0\n", "");
        assert_eq!(error_of(&no_at), err(16, NffErrorKind::MissingView("at")));
        let infinite = SMALL.replace("angle 40", "angle inf");
        assert_eq!(
            error_of(&infinite),
            err(6, NffErrorKind::BadNumber("inf".into()))
        );
        let res = SMALL.replace("resolution 64 48", "resolution 64 0");
        assert_eq!(
            error_of(&res),
            err(8, NffErrorKind::BadResolution("0".into()))
        );
        let radius = SMALL.replace("s 0 0 0 1", "s 0 0 0 -1");
        assert_eq!(error_of(&radius), err(13, NffErrorKind::BadRadius(-1.0)));
    }

    #[test]
    fn write_then_parse_gives_back_the_scene() {
        let d = parse(SMALL).unwrap();
        let again = parse(&write(&d)).unwrap();
        assert_eq!(again, d);
    }
}
