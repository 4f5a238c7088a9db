//! Whitted-style shading with NFF surface parameters.
//!
//! At a surface with colour `C` and fill parameters `Kd`, `Ks`, `shine`:
//!
//! ```text
//! colour = I * Kd * C                                   (ambient)
//!        + sum over lights l that are in front of the surface and not shadowed:
//!            I * L_l * (Kd * C * (N.L) + Ks * max(0, R.V)^shine)
//!        + Ks * trace(mirror ray)                       (while depth < max depth)
//! ```
//!
//! `I` is [`SceneDescription::light_intensity`](crate::SceneDescription::light_intensity),
//! `L_l` the light's colour, `N` the unit normal, `R` the light direction
//! mirrored about `N`, `V` the direction back along the incoming ray. As the
//! SPD testing procedure asks, no shadow ray is cast for a light behind the
//! surface, and the eye ray has depth 1. Transmittance and index of
//! refraction are ignored (no refraction rays).

use crate::bvh::Prim;
use crate::ray::Ray;
use crate::vec3::Vec3;
use crate::world::Scene;

/// Distance along secondary rays below which hits are taken to be the
/// surface the ray starts from. Far below the smallest feature of the balls
/// scene (sphere radius 0.5 / 3^size_factor) and far above f64 rounding at
/// the scene's scale.
pub const SELF_HIT_EPSILON: f64 = 1e-7;

/// The primitive that last blocked a shadow ray, per light: a hint that
/// spares most shadow rays in shadowed regions their traversal. It changes
/// only the speed of [`trace`], never its result, so one cache may serve
/// any sequence of rays.
#[derive(Clone, Debug)]
pub struct ShadowCache {
    last: Vec<Option<Prim>>,
}

impl ShadowCache {
    /// An empty cache for the lights of `scene`.
    pub fn new(scene: &Scene) -> ShadowCache {
        ShadowCache {
            last: vec![None; scene.lights().len()],
        }
    }
}

/// Traces `ray` (at recursion depth `depth`, the eye ray being depth 1) and
/// returns its linear, unclamped colour.
pub fn trace(
    scene: &Scene,
    ray: &Ray,
    tmin: f64,
    depth: u32,
    max_depth: u32,
    cache: &mut ShadowCache,
) -> Vec3 {
    let Some(hit) = scene.intersect(ray, tmin, f64::INFINITY) else {
        return scene.background();
    };
    let m = &scene.materials()[hit.material as usize];
    let intensity = scene.light_intensity();
    let n = hit.normal;
    let view = -ray.dir;
    let mut color = m.color * (intensity * m.kd);
    for (light, last) in scene.lights().iter().zip(cache.last.iter_mut()) {
        let to_light = light.position - hit.point;
        let dist = to_light.length();
        let l = to_light * (1.0 / dist);
        let n_dot_l = n.dot(l);
        if n_dot_l <= 0.0 || n_dot_l.is_nan() {
            continue;
        }
        let shadow = Ray::new(hit.point, l);
        if let Some(blocker) = scene.occluder(&shadow, SELF_HIT_EPSILON, dist, *last) {
            *last = Some(blocker);
            continue;
        }
        let mut local = m.color * (m.kd * n_dot_l);
        if m.ks > 0.0 {
            let r = n * (2.0 * n_dot_l) - l;
            let r_dot_v = r.dot(view);
            if r_dot_v > 0.0 {
                local += Vec3::splat(m.ks * libm::pow(r_dot_v, m.shine));
            }
        }
        color += local.mul_elem(light.color * intensity);
    }
    if m.ks > 0.0 && depth < max_depth {
        let dir = ray.dir - n * (2.0 * ray.dir.dot(n));
        let reflected = trace(
            scene,
            &Ray::new(hit.point, dir),
            SELF_HIT_EPSILON,
            depth + 1,
            max_depth,
            cache,
        );
        color += reflected * m.ks;
    }
    color
}
