//! The pinhole camera: eye rays for continuous image coordinates.

use thiserror::Error;

use crate::ray::Ray;
use crate::scene::View;
use crate::vec3::Vec3;

/// The largest image side: 4096 pixels (an image of 4096 x 4096 takes 48 MiB of RGB bytes and
/// 384 MiB of colours while it is rendered).
pub const MAX_SIDE: u32 = 4096;

/// Why a camera could not be set up from a [`View`].
#[derive(Debug, Error, PartialEq)]
pub enum CameraError {
    /// Width or height is zero.
    #[error("image size {width}x{height} has no pixels")]
    EmptyImage {
        /// Requested width.
        width: u32,
        /// Requested height.
        height: u32,
    },
    /// Width or height is above [`MAX_SIDE`].
    #[error("image size {width}x{height} is larger than {MAX_SIDE} pixels on a side")]
    TooLarge {
        /// Requested width.
        width: u32,
        /// Requested height.
        height: u32,
    },
    /// `from` and `at` coincide, so there is no view direction.
    #[error("viewpoint 'from' equals 'at': no view direction")]
    NoViewDirection,
    /// `up` is zero or parallel to the view direction.
    #[error("'up' vector is zero or parallel to the view direction")]
    BadUp,
    /// The field of view is not strictly between 0 and 180 degrees.
    #[error("field of view {0} degrees is not strictly between 0 and 180")]
    BadAngle(f64),
    /// A viewpoint value is infinite or NaN.
    #[error("viewpoint contains a value that is not finite")]
    NotFinite,
}

/// Eye-ray generator for one image size.
///
/// The image plane sits at distance 1 in front of the eye. Pixels are square;
/// the vertical field of view spans the full image height, as the SPD's
/// `lib_create_view_matrix` defines it. Pixel `(x, y)` covers
/// `[x, x + 1) x [y, y + 1)` in image coordinates, `y` growing downwards.
#[derive(Clone, Debug)]
pub struct Camera {
    eye: Vec3,
    forward: Vec3,
    right: Vec3,
    up: Vec3,
    pixel_size: f64,
    hither: f64,
    width: u32,
    height: u32,
}

impl Camera {
    /// Sets up the camera of `view` for a `width` x `height` image (which
    /// may differ from the resolution the view proposes).
    pub fn new(view: &View, width: u32, height: u32) -> Result<Camera, CameraError> {
        if width == 0 || height == 0 {
            return Err(CameraError::EmptyImage { width, height });
        }
        if width > MAX_SIDE || height > MAX_SIDE {
            return Err(CameraError::TooLarge { width, height });
        }
        if !(view.from.is_finite()
            && view.at.is_finite()
            && view.up.is_finite()
            && view.angle.is_finite()
            && view.hither.is_finite())
        {
            return Err(CameraError::NotFinite);
        }
        if !(view.angle > 0.0 && view.angle < 180.0) {
            return Err(CameraError::BadAngle(view.angle));
        }
        let dir = view.at - view.from;
        if dir.length() == 0.0 {
            return Err(CameraError::NoViewDirection);
        }
        let forward = dir.normalized();
        let right = forward.cross(view.up);
        if right.length() == 0.0 {
            return Err(CameraError::BadUp);
        }
        let right = right.normalized();
        let up = right.cross(forward);
        let half = libm::tan(view.angle.to_radians() * 0.5);
        Ok(Camera {
            eye: view.from,
            forward,
            right,
            up,
            pixel_size: 2.0 * half / height as f64,
            hither: view.hither.max(0.0),
            width,
            height,
        })
    }

    /// Image width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Image height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The eye position.
    pub fn eye(&self) -> Vec3 {
        self.eye
    }

    /// The eye ray through image point `(fx, fy)`; `(width / 2, height / 2)`
    /// is the centre of the image, on the line from the eye to `at`.
    pub fn ray(&self, fx: f64, fy: f64) -> Ray {
        let x = (fx - 0.5 * self.width as f64) * self.pixel_size;
        let y = (0.5 * self.height as f64 - fy) * self.pixel_size;
        let dir = (self.forward + self.right * x + self.up * y).normalized();
        Ray::new(self.eye, dir)
    }

    /// Smallest ray parameter an eye ray accepts: the hither plane lies at
    /// distance `hither` along the view direction, so along a slanted ray it
    /// is further away.
    pub fn near_limit(&self, ray: &Ray) -> f64 {
        self.hither / ray.dir.dot(self.forward)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> View {
        View {
            from: Vec3::new(0.0, -5.0, 0.0),
            at: Vec3::ZERO,
            up: Vec3::new(0.0, 0.0, 1.0),
            angle: 90.0,
            hither: 0.5,
            width: 4,
            height: 4,
        }
    }

    #[test]
    fn centre_ray_points_at_target_and_edges_span_the_angle() {
        let cam = Camera::new(&view(), 4, 4).unwrap();
        let c = cam.ray(2.0, 2.0);
        assert!((c.dir - Vec3::new(0.0, 1.0, 0.0)).length() < 1e-15);
        // 90 degrees across the full height: the top edge is 45 degrees up.
        let top = cam.ray(2.0, 0.0);
        assert!((top.dir.z - top.dir.y).abs() < 1e-12 && top.dir.z > 0.0);
        // Right of the image is +x when looking along +y with z up.
        assert!(cam.ray(4.0, 2.0).dir.x > 0.0);
        assert!((cam.near_limit(&c) - 0.5).abs() < 1e-15);
    }

    #[test]
    fn invalid_views_are_rejected() {
        let mut v = view();
        v.up = Vec3::new(0.0, 1.0, 0.0);
        assert_eq!(Camera::new(&v, 4, 4).unwrap_err(), CameraError::BadUp);
        let mut v = view();
        v.at = v.from;
        assert_eq!(
            Camera::new(&v, 4, 4).unwrap_err(),
            CameraError::NoViewDirection
        );
        assert!(matches!(
            Camera::new(&view(), 0, 4),
            Err(CameraError::EmptyImage { .. })
        ));
        assert!(Camera::new(&view(), MAX_SIDE, MAX_SIDE).is_ok());
        assert_eq!(
            Camera::new(&view(), 4, MAX_SIDE + 1).unwrap_err(),
            CameraError::TooLarge {
                width: 4,
                height: MAX_SIDE + 1
            }
        );
        let mut v = view();
        v.angle = 180.0;
        assert_eq!(
            Camera::new(&v, 4, 4).unwrap_err(),
            CameraError::BadAngle(180.0)
        );
    }
}
