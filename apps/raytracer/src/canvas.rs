//! Tiles (rectangles of an image) and their rendered pixels: pasting, checksums, PNG.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::camera::MAX_SIDE;

/// Why an image could not be written.
#[derive(Debug, Error)]
pub enum ImageError {
    /// The file could not be created.
    #[error("cannot create image file {path}: {source}")]
    Create {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// PNG encoding or writing failed.
    #[error("cannot write PNG {path}: {source}")]
    Encode {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: png::EncodingError,
    },
}

/// A rectangle of pixels: columns `x0..x0 + width`, rows `y0..y0 + height`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tile {
    /// First column.
    pub x0: u32,
    /// First row.
    pub y0: u32,
    /// Number of columns.
    pub width: u32,
    /// Number of rows.
    pub height: u32,
}

impl Tile {
    /// The tile covering a whole `width` x `height` image.
    pub fn full(width: u32, height: u32) -> Tile {
        Tile {
            x0: 0,
            y0: 0,
            width,
            height,
        }
    }

    /// Number of pixels.
    pub fn area(&self) -> usize {
        self.width as usize * self.height as usize
    }

    /// Whether the tile has no pixels.
    pub fn is_empty(&self) -> bool {
        self.width == 0 || self.height == 0
    }

    /// Whether `other` lies entirely inside this tile.
    pub fn contains(&self, other: &Tile) -> bool {
        other.x0 >= self.x0
            && other.y0 >= self.y0
            && other.x0 as u64 + other.width as u64 <= self.x0 as u64 + self.width as u64
            && other.y0 as u64 + other.height as u64 <= self.y0 as u64 + self.height as u64
    }

    /// Whether a recursive render splits this tile further: it does while
    /// either side exceeds `leaf` (a `leaf` of 0 counts as 1).
    pub fn needs_split(&self, leaf: u32) -> bool {
        let leaf = leaf.max(1);
        self.width > leaf || self.height > leaf
    }

    /// The four quadrants (top-left, top-right, bottom-left, bottom-right),
    /// leaving out empty ones; the left and top halves get the smaller half
    /// of an odd size.
    pub fn quadrants(&self) -> impl Iterator<Item = Tile> {
        let lw = self.width / 2;
        let th = self.height / 2;
        let (rw, bh) = (self.width - lw, self.height - th);
        let (xm, ym) = (self.x0 + lw, self.y0 + th);
        [
            Tile {
                x0: self.x0,
                y0: self.y0,
                width: lw,
                height: th,
            },
            Tile {
                x0: xm,
                y0: self.y0,
                width: rw,
                height: th,
            },
            Tile {
                x0: self.x0,
                y0: ym,
                width: lw,
                height: bh,
            },
            Tile {
                x0: xm,
                y0: ym,
                width: rw,
                height: bh,
            },
        ]
        .into_iter()
        .filter(|t| !t.is_empty())
    }
}

/// The 8-bit RGB pixels of a [`Tile`], row-major.
///
/// A canvas decoded from another process (a task's result) is checked: its
/// tile must lie within an image of [`MAX_SIDE`] pixels on a side, as every
/// image the renderer makes does, and it must hold one pixel per pixel of the
/// tile, so that pasting it can neither read past its pixels nor be told to
/// cover more than an image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "CanvasWire")]
pub struct Canvas {
    tile: Tile,
    pixels: Vec<[u8; 3]>,
}

/// [`Canvas`] as decoded, before its check.
#[derive(Deserialize)]
struct CanvasWire {
    tile: Tile,
    pixels: Vec<[u8; 3]>,
}

impl TryFrom<CanvasWire> for Canvas {
    type Error = String;

    fn try_from(w: CanvasWire) -> Result<Canvas, String> {
        if !Tile::full(MAX_SIDE, MAX_SIDE).contains(&w.tile) {
            return Err(format!(
                "canvas tile {:?} lies outside every image ({MAX_SIDE} pixels on a side at most)",
                w.tile
            ));
        }
        if w.pixels.len() != w.tile.area() {
            return Err(format!(
                "canvas of tile {:?} holds {} pixels, not {}",
                w.tile,
                w.pixels.len(),
                w.tile.area()
            ));
        }
        Ok(Canvas {
            tile: w.tile,
            pixels: w.pixels,
        })
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

impl Canvas {
    /// A black canvas covering `tile`.
    pub fn new(tile: Tile) -> Canvas {
        Canvas {
            tile,
            pixels: vec![[0; 3]; tile.area()],
        }
    }

    /// Wraps rendered pixels.
    ///
    /// # Panics
    /// If `pixels` does not hold exactly one entry per pixel of `tile`.
    pub fn from_pixels(tile: Tile, pixels: Vec<[u8; 3]>) -> Canvas {
        assert_eq!(
            pixels.len(),
            tile.area(),
            "pixel count does not match tile {tile:?}"
        );
        Canvas { tile, pixels }
    }

    /// The tile this canvas covers.
    pub fn tile(&self) -> Tile {
        self.tile
    }

    /// The pixels, row-major.
    pub fn pixels(&self) -> &[[u8; 3]] {
        &self.pixels
    }

    /// Pixel at image coordinates `(x, y)`, if the canvas covers it.
    pub fn pixel(&self, x: u32, y: u32) -> Option<[u8; 3]> {
        let t = &self.tile;
        if x < t.x0 || y < t.y0 || x - t.x0 >= t.width || y - t.y0 >= t.height {
            return None;
        }
        let i = (y - t.y0) as usize * t.width as usize + (x - t.x0) as usize;
        Some(self.pixels[i])
    }

    /// Copies `part` into this canvas at its position.
    ///
    /// # Panics
    /// If `part`'s tile does not lie inside this canvas's tile.
    pub fn paste(&mut self, part: &Canvas) {
        let (outer, inner) = (self.tile, part.tile);
        assert!(outer.contains(&inner), "{inner:?} lies outside {outer:?}");
        let w = inner.width as usize;
        for row in 0..inner.height as usize {
            let dst_y = inner.y0 as usize - outer.y0 as usize + row;
            let dst = dst_y * outer.width as usize + (inner.x0 - outer.x0) as usize;
            self.pixels[dst..dst + w].copy_from_slice(&part.pixels[row * w..(row + 1) * w]);
        }
    }

    /// The pixels as packed RGB bytes, row-major.
    pub fn rgb_bytes(&self) -> Vec<u8> {
        self.pixels.iter().flatten().copied().collect()
    }

    /// 64-bit FNV-1a hash of the packed RGB bytes: equal images, equal sums.
    pub fn checksum(&self) -> u64 {
        self.pixels
            .iter()
            .flatten()
            .fold(FNV_OFFSET, |h, &b| (h ^ b as u64).wrapping_mul(FNV_PRIME))
    }

    /// Writes the canvas as an 8-bit RGB PNG.
    pub fn write_png(&self, path: &Path) -> Result<(), ImageError> {
        let file = File::create(path).map_err(|source| ImageError::Create {
            path: path.to_owned(),
            source,
        })?;
        let encode_err = |source| ImageError::Encode {
            path: path.to_owned(),
            source,
        };
        let mut encoder =
            png::Encoder::new(BufWriter::new(file), self.tile.width, self.tile.height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(encode_err)?;
        writer
            .write_image_data(&self.rgb_bytes())
            .map_err(encode_err)?;
        writer.finish().map_err(encode_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn received_canvases_hold_one_pixel_per_pixel_of_an_image_tile() {
        let tile = Tile {
            x0: 2,
            y0: 1,
            width: 3,
            height: 2,
        };
        let bytes =
            |tile: Tile, n: usize| postcard::to_allocvec(&(tile, vec![[7u8; 3]; n])).unwrap();
        let back: Canvas = postcard::from_bytes(&bytes(tile, 6)).unwrap();
        assert_eq!(back, Canvas::from_pixels(tile, vec![[7; 3]; 6]));
        for n in [0, 5, 7] {
            assert!(
                postcard::from_bytes::<Canvas>(&bytes(tile, n)).is_err(),
                "{n}"
            );
        }
        // A tile past any image the renderer makes, with its pixel count wrapped or not.
        for huge in [
            Tile::full(MAX_SIDE + 1, 1),
            Tile {
                x0: u32::MAX,
                y0: 0,
                width: 1,
                height: 1,
            },
        ] {
            let n = huge.area();
            assert!(
                postcard::from_bytes::<Canvas>(&bytes(huge, n)).is_err(),
                "{huge:?}"
            );
        }
        let too_many = Tile::full(65_536, 65_536);
        let wire = postcard::to_allocvec(&(too_many, Vec::<[u8; 3]>::new())).unwrap();
        let e = postcard::from_bytes::<Canvas>(&wire).unwrap_err();
        assert!(matches!(e, postcard::Error::SerdeDeCustom), "{e}");
    }

    #[test]
    fn paste_places_parts_at_their_offsets() {
        let mut full = Canvas::new(Tile::full(3, 2));
        let part = Canvas::from_pixels(
            Tile {
                x0: 1,
                y0: 1,
                width: 2,
                height: 1,
            },
            vec![[1, 2, 3], [4, 5, 6]],
        );
        full.paste(&part);
        assert_eq!(full.pixel(0, 1), Some([0, 0, 0]));
        assert_eq!(full.pixel(1, 1), Some([1, 2, 3]));
        assert_eq!(full.pixel(2, 1), Some([4, 5, 6]));
        assert_eq!(full.pixel(3, 1), None);
    }

    #[test]
    fn checksum_is_fnv1a_of_the_bytes() {
        // FNV-1a of the empty string is the offset basis; of "a" it is the
        // published test vector 0xaf63dc4c8601ec8c.
        assert_eq!(Canvas::new(Tile::full(0, 0)).checksum(), FNV_OFFSET);
        let c = Canvas::from_pixels(Tile::full(1, 1), vec![[b'a', b'b', b'c']]);
        let mut h = FNV_OFFSET;
        for b in b"abc" {
            h = (h ^ *b as u64).wrapping_mul(FNV_PRIME);
        }
        assert_eq!(c.checksum(), h);
        assert_eq!(
            (FNV_OFFSET ^ b'a' as u64).wrapping_mul(FNV_PRIME),
            0xaf63dc4c8601ec8c
        );
    }

    #[test]
    fn png_round_trips() {
        let tmp = testkit::scratch_dir("raytracer-canvas");
        let dir = tmp.path();
        let path = dir.join("t.png");
        let c = Canvas::from_pixels(Tile::full(2, 1), vec![[10, 20, 30], [40, 50, 60]]);
        c.write_png(&path).unwrap();
        let decoder = png::Decoder::new(File::open(&path).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (2, 1));
        assert_eq!(&buf[..info.buffer_size()], &c.rgb_bytes()[..]);
    }
}
