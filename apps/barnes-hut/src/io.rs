//! Reading and writing bodies as text.
//!
//! # Format
//!
//! UTF-8 text, one record per line, fields separated by spaces or tabs:
//!
//! ```text
//! # barnes-hut bodies: id mass x y z vx vy vz
//! 2
//! 0 0.5 1.0 0.0 0.0 0.0 0.5 0.0
//! 1 0.5 -1.0 0.0 0.0 0.0 -0.5 0.0
//! ```
//!
//! - Lines whose first non-blank character is `#`, and blank lines, are ignored anywhere.
//! - The first other line holds the number of bodies `n`.
//! - Exactly `n` body lines follow, each with eight fields: `id` (an unsigned integer,
//!   unique in the file), `mass` (finite, not negative), then position `x y z` and velocity
//!   `vx vy vz` (finite numbers). Numbers are in any form Rust's `f64` parser accepts
//!   (`1`, `-0.25`, `6.25e-7`).
//! - No number is larger in magnitude than [`MAX_MAGNITUDE`] (1e75).
//!
//! Accelerations, potentials and costs are not stored: they are recomputed from positions.
//! The writer prints every number in its shortest form that reads back to the same `f64`,
//! so a written file reads back bit for bit.

use crate::body::Body;
use crate::geom::Vec3;
use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The largest magnitude of a mass, position or velocity coordinate read: 1e75.
///
/// Finite is not enough: the simulation squares differences of positions (`|d|²` of every
/// interaction, up to `12 x²` for coordinates of magnitude `x`), sums mass moments `m x` over
/// all bodies for the centres of mass, and sums products of three inputs, `m v²` for the
/// kinetic energy and `m |Δx|²` for the run's summary. Near 1e308 the first of these
/// overflows to infinity and the positions become NaN. At 1e75 the squares stay below 1e152
/// and the triple products below 1e226, so that their sums stay finite for any number of
/// bodies that fits in memory.
pub const MAX_MAGNITUDE: f64 = 1e75;

/// Names of the eight fields of a body line, for error messages.
const FIELDS: [&str; 8] = ["id", "mass", "x", "y", "z", "vx", "vy", "vz"];

/// What is wrong with a line of a bodies file.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum LineError {
    /// The line is not UTF-8.
    #[error("not valid UTF-8 text")]
    NotUtf8,
    /// The count line does not hold one non-negative integer.
    #[error("expected the number of bodies (one non-negative integer), found `{0}`")]
    BadCount(String),
    /// A body line has the wrong number of fields.
    #[error("expected 8 fields (id mass x y z vx vy vz), found {0}")]
    FieldCount(usize),
    /// The id field is not an unsigned integer.
    #[error("id `{0}` is not a non-negative integer")]
    BadId(String),
    /// A numeric field does not parse.
    #[error("{field} `{text}` is not a number")]
    BadNumber {
        /// Field name.
        field: &'static str,
        /// The offending text.
        text: String,
    },
    /// A numeric field is NaN or infinite.
    #[error("{field} is {value}, but must be finite")]
    NotFinite {
        /// Field name.
        field: &'static str,
        /// The value read.
        value: f64,
    },
    /// A number is finite but larger in magnitude than [`MAX_MAGNITUDE`].
    #[error(
        "body {body} (id {id}): {field} is {value:e}, but its magnitude must be at most \
         {MAX_MAGNITUDE:e}: larger values overflow the force computation"
    )]
    TooLarge {
        /// The body's index in the file, from 0.
        body: usize,
        /// The body's id.
        id: u64,
        /// Field name.
        field: &'static str,
        /// The value read.
        value: f64,
    },
    /// A mass is negative.
    #[error("mass {0} is negative")]
    NegativeMass(f64),
    /// Two bodies share an id.
    #[error("id {0} appears twice")]
    DuplicateId(u64),
    /// More body lines than the count announced.
    #[error("more bodies than the {0} announced by the count line")]
    TooManyBodies(usize),
    /// The file ended before the count line.
    #[error("the file ends before the line with the number of bodies")]
    MissingCount,
    /// The file ended before all bodies were read.
    #[error("the file ends after {found} of the {expected} bodies announced")]
    TooFewBodies {
        /// Bodies announced by the count line.
        expected: usize,
        /// Bodies found.
        found: usize,
    },
}

/// An error reading bodies.
#[derive(Debug, Error)]
pub enum ReadError {
    /// The text is malformed; `line` counts from 1.
    #[error("line {line}: {error}")]
    Line {
        /// Line number, from 1 (one past the last line for a file that ends too early).
        line: usize,
        /// What is wrong with it.
        error: LineError,
    },
    /// The input could not be read.
    #[error("cannot read bodies: {0}")]
    Io(#[from] std::io::Error),
    /// The file could not be opened.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is well formed but holds no bodies, which no simulation can start from.
    #[error("{0} holds no bodies: a simulation needs at least one")]
    NoBodies(PathBuf),
}

impl ReadError {
    /// The line number of a format error.
    pub fn line(&self) -> Option<usize> {
        match self {
            ReadError::Line { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// An error writing bodies.
#[derive(Debug, Error)]
pub enum WriteError {
    /// The file could not be created.
    #[error("cannot create {path}: {source}")]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Writing failed.
    #[error("cannot write bodies: {0}")]
    Io(#[from] std::io::Error),
}

/// Parses bodies from text in the format of the module documentation.
pub fn parse_bodies(text: &str) -> Result<Vec<Body>, ReadError> {
    parse_lines(text.split('\n').map(Ok::<&str, LineError>))
}

/// Reads bodies from `reader` in the format of the module documentation, to its end: bound an
/// untrusted reader yourself (`Read::take`); [`read_file`] bounds what it reads.
pub fn read_bodies<R: Read>(mut reader: R) -> Result<Vec<Body>, ReadError> {
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes)?;
    parse_bytes(&bytes)
}

/// The largest bodies file read: 16 GiB, some eighty million bodies in the writer's form.
/// The whole text is held in memory while it is parsed, so a larger file is refused, as is
/// anything that is not a regular file (a device such as `/dev/zero` would be read until
/// memory ran out, and a FIFO without a writer would never open).
pub const MAX_FILE_BYTES: u64 = 16 << 30;

/// Reads bodies from the file at `path`: a regular file of at most [`MAX_FILE_BYTES`].
pub fn read_file(path: &Path) -> Result<Vec<Body>, ReadError> {
    let bytes =
        ipl::cli::read_bounded_file(path, MAX_FILE_BYTES).map_err(|source| ReadError::Open {
            path: path.to_owned(),
            source,
        })?;
    parse_bytes(&bytes)
}

/// [`parse_bodies`] of text that may not be UTF-8 throughout: a line that is not fails.
fn parse_bytes(bytes: &[u8]) -> Result<Vec<Body>, ReadError> {
    parse_lines(
        bytes
            .split(|&b| b == b'\n')
            .map(|l| std::str::from_utf8(l).map_err(|_| LineError::NotUtf8)),
    )
}

fn parse_lines<'a, I>(lines: I) -> Result<Vec<Body>, ReadError>
where
    I: Iterator<Item = Result<&'a str, LineError>>,
{
    let mut expected: Option<usize> = None;
    let mut bodies = Vec::new();
    let mut ids = HashSet::new();
    let mut segments = 0;
    let mut last_segment_empty = true;
    for (i, line) in lines.enumerate() {
        let number = i + 1;
        segments = number;
        last_segment_empty = matches!(line, Ok(""));
        let fail = |error| ReadError::Line {
            line: number,
            error,
        };
        let line = line.map_err(fail)?;
        let content = line.trim();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        let Some(n) = expected else {
            let n = content
                .parse::<usize>()
                .map_err(|_| fail(LineError::BadCount(content.to_owned())))?;
            expected = Some(n);
            // The count is untrusted: reserve no more than a modest amount up front.
            bodies.reserve(n.min(1 << 16));
            continue;
        };
        if bodies.len() == n {
            return Err(fail(LineError::TooManyBodies(n)));
        }
        let body = parse_body(content, bodies.len()).map_err(fail)?;
        if !ids.insert(body.id) {
            return Err(fail(LineError::DuplicateId(body.id)));
        }
        bodies.push(body);
    }
    // Errors about a missing ending point one past the last line. Text ending in a newline
    // splits into a last, empty segment that is not a line of its own.
    let end = if last_segment_empty {
        segments.max(1)
    } else {
        segments + 1
    };
    match expected {
        None => Err(ReadError::Line {
            line: end,
            error: LineError::MissingCount,
        }),
        Some(n) if bodies.len() < n => Err(ReadError::Line {
            line: end,
            error: LineError::TooFewBodies {
                expected: n,
                found: bodies.len(),
            },
        }),
        Some(_) => Ok(bodies),
    }
}

/// The body at index `index` of the file.
fn parse_body(content: &str, index: usize) -> Result<Body, LineError> {
    let fields: Vec<&str> = content.split_whitespace().collect();
    if fields.len() != FIELDS.len() {
        return Err(LineError::FieldCount(fields.len()));
    }
    let id = fields[0]
        .parse::<u64>()
        .map_err(|_| LineError::BadId(fields[0].to_owned()))?;
    let mut v = [0.0f64; 7];
    for (k, slot) in v.iter_mut().enumerate() {
        let field = FIELDS[k + 1];
        let text = fields[k + 1];
        let x = text.parse::<f64>().map_err(|_| LineError::BadNumber {
            field,
            text: text.to_owned(),
        })?;
        if !x.is_finite() {
            return Err(LineError::NotFinite { field, value: x });
        }
        if x.abs() > MAX_MAGNITUDE {
            return Err(LineError::TooLarge {
                body: index,
                id,
                field,
                value: x,
            });
        }
        *slot = x;
    }
    if v[0] < 0.0 {
        return Err(LineError::NegativeMass(v[0]));
    }
    Ok(Body::new(
        id,
        v[0],
        Vec3::new(v[1], v[2], v[3]),
        Vec3::new(v[4], v[5], v[6]),
    ))
}

/// Writes `bodies`, in the given order, in the format of the module documentation.
pub fn write_bodies<W: Write>(writer: W, bodies: &[Body]) -> Result<(), WriteError> {
    let mut w = BufWriter::new(writer);
    writeln!(w, "# barnes-hut bodies: id mass x y z vx vy vz")?;
    writeln!(w, "{}", bodies.len())?;
    for b in bodies {
        writeln!(
            w,
            "{} {} {} {} {} {} {} {}",
            b.id, b.mass, b.pos.x, b.pos.y, b.pos.z, b.vel.x, b.vel.y, b.vel.z
        )?;
    }
    w.flush()?;
    Ok(())
}

/// Writes `bodies` to the file at `path`, replacing it.
pub fn write_file(path: &Path, bodies: &[Body]) -> Result<(), WriteError> {
    let f = File::create(path).map_err(|source| WriteError::Create {
        path: path.to_owned(),
        source,
    })?;
    write_bodies(f, bodies)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plummer;

    fn line_error(text: &str) -> (usize, LineError) {
        match parse_bodies(text) {
            Err(ReadError::Line { line, error }) => (line, error),
            other => panic!("expected a line error, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_is_exact() {
        let bodies = plummer::generate(50, 8);
        let mut out = Vec::new();
        write_bodies(&mut out, &bodies).unwrap();
        let back = read_bodies(&out[..]).unwrap();
        assert_eq!(back, bodies);
    }

    #[test]
    fn comments_and_blank_lines_are_ignored() {
        let text = "\n# header\n  2 \n\n0 1 0 0 0 0 0 0\n # between\n7\t1 1 2 3 4 5 6\n";
        let b = parse_bodies(text).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b[1].id, 7);
        assert_eq!(b[1].vel, Vec3::new(4.0, 5.0, 6.0));
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let good = "# c\n3\n0 1 0 0 0 0 0 0\n1 1 1 0 0 0 0 0\n2 1 2 0 0 0 0 0\n";
        assert!(parse_bodies(good).is_ok());
        let bad_number = good.replace("1 1 1 0 0", "1 1 1 zero 0");
        assert_eq!(
            line_error(&bad_number),
            (
                4,
                LineError::BadNumber {
                    field: "y",
                    text: "zero".into()
                }
            )
        );
        let short = good.replace("2 1 2 0 0 0 0 0", "2 1 2 0 0 0 0");
        assert_eq!(line_error(&short), (5, LineError::FieldCount(7)));
        let dup = good.replace("2 1 2 0", "1 1 2 0");
        assert_eq!(line_error(&dup), (5, LineError::DuplicateId(1)));
        let neg = good.replace("0 1 0 0", "0 -1 0 0");
        assert_eq!(line_error(&neg), (3, LineError::NegativeMass(-1.0)));
        let nan = good.replace("1 1 1 0 0 0 0 0", "1 1 1 0 0 0 NaN 0");
        assert!(matches!(
            line_error(&nan),
            (4, LineError::NotFinite { field: "vy", .. })
        ));
        assert_eq!(line_error("two\n"), (1, LineError::BadCount("two".into())));
        assert_eq!(
            line_error("2\n0 1 0 0 0 0 0 0\n"),
            (
                3,
                LineError::TooFewBodies {
                    expected: 2,
                    found: 1
                }
            )
        );
        assert_eq!(
            line_error("1\n0 1 0 0 0 0 0 0\n1 1 0 0 0 0 0 0\n"),
            (3, LineError::TooManyBodies(1))
        );
        assert_eq!(line_error("# only\n"), (2, LineError::MissingCount));
        let msg = parse_bodies(&bad_number).unwrap_err().to_string();
        assert_eq!(msg, "line 4: y `zero` is not a number");
    }

    #[test]
    fn values_that_would_overflow_are_refused_with_their_body_and_field() {
        let good = "2\n0 1 0 0 0 0 0 0\n7 1 1 0 0 0 0 0\n";
        for (field, line) in [
            ("mass", "7 1e308 1 0 0 0 0 0"),
            ("x", "7 1 1e308 0 0 0 0 0"),
            ("z", "7 1 1 0 -1e308 0 0 0"),
            ("vy", "7 1 1 0 0 0 1e76 0"),
        ] {
            let text = good.replace("7 1 1 0 0 0 0 0", line);
            match line_error(&text) {
                (
                    3,
                    LineError::TooLarge {
                        body, id, field: f, ..
                    },
                ) => {
                    assert_eq!((body, id, f), (1, 7, field), "{line}")
                }
                other => panic!("{line}: {other:?}"),
            }
        }
        let text = good.replace("7 1 1 0 0 0 0 0", "7 1 1e308 0 0 0 0 0");
        let msg = parse_bodies(&text).unwrap_err().to_string();
        assert_eq!(
            msg,
            "line 3: body 1 (id 7): x is 1e308, but its magnitude must be at most 1e75: larger \
             values overflow the force computation"
        );
        // The bound itself is accepted.
        let at = good.replace("7 1 1 0 0 0 0 0", "7 1e75 -1e75 1e75 1e75 -1e75 1e75 1e75");
        assert!(parse_bodies(&at).is_ok());
    }

    #[test]
    fn invalid_utf8_is_an_error_on_its_line() {
        let bytes = b"1\n0 1 0 0 \xff 0 0 0\n";
        let e = read_bodies(&bytes[..]).unwrap_err();
        assert_eq!(e.line(), Some(2));
    }

    #[test]
    fn files_round_trip_and_missing_files_are_named() {
        let tmp = testkit::scratch_dir("bh-io");
        let dir = tmp.path();
        let path = dir.join("bodies.txt");
        let bodies = plummer::generate(10, 1);
        write_file(&path, &bodies).unwrap();
        assert_eq!(read_file(&path).unwrap(), bodies);
        std::fs::remove_dir_all(dir).unwrap();
        let e = read_file(&path).unwrap_err();
        assert!(e.to_string().contains("bodies.txt"), "{e}");
    }
}
