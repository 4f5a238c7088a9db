//! Rendering checks: split independence, the balls scene's structure, and
//! pixels compared against colours computed by hand from the shading model.

use raytracer::{
    balls, nff, pixel_color, quantize, render_full, render_recursive, render_split, render_tile,
    Camera, Canvas, RenderSettings, Scene, SceneDescription, Tile, Vec3, View,
};

fn setup(desc: &SceneDescription, w: u32, h: u32) -> (Scene, Camera) {
    (
        Scene::build(desc).unwrap(),
        Camera::new(&desc.view, w, h).unwrap(),
    )
}

#[test]
fn any_split_gives_the_same_image_as_the_full_render() {
    let desc = balls(2);
    // Odd, non-square size so that quadrants have unequal halves.
    let (scene, camera) = setup(&desc, 45, 38);
    for settings in [
        RenderSettings::default(),
        RenderSettings {
            max_depth: 3,
            aa: 2,
        },
    ] {
        let full = render_full(&scene, &camera, &settings);
        for leaf in [1, 3, 7, 16, 64] {
            let split = render_split(&scene, &camera, &settings, leaf);
            assert_eq!(split, full, "leaf {leaf}");
        }
        // A plain grid of tiles rendered bottom-up also matches.
        let mut grid = Canvas::new(Tile::full(45, 38));
        for y0 in (0..38).step_by(10).rev() {
            for x0 in (0..45).step_by(13).rev() {
                let tile = Tile {
                    x0,
                    y0,
                    width: 13.min(45 - x0),
                    height: 10.min(38 - y0),
                };
                grid.paste(&render_tile(&scene, &camera, &settings, tile));
            }
        }
        assert_eq!(grid.checksum(), full.checksum());
        assert_eq!(grid, full);
    }
}

#[test]
fn a_sub_tree_renders_the_same_pixels_as_the_whole() {
    let desc = balls(1);
    let (scene, camera) = setup(&desc, 40, 40);
    let settings = RenderSettings::default();
    let full = render_full(&scene, &camera, &settings);
    let part = Tile {
        x0: 11,
        y0: 5,
        width: 17,
        height: 23,
    };
    let sub = render_recursive(&scene, &camera, &settings, part, 4);
    for y in part.y0..part.y0 + part.height {
        for x in part.x0..part.x0 + part.width {
            assert_eq!(sub.pixel(x, y), full.pixel(x, y));
        }
    }
}

#[test]
fn balls_has_91_spheres_and_3_lights_at_size_factor_2() {
    let d = balls(2);
    assert_eq!(d.spheres.len(), 91);
    assert_eq!(d.lights.len(), 3);
    assert_eq!(d.polygons.len(), 1);
    assert_eq!(balls(1).spheres.len(), 10);
    assert_eq!(balls(3).spheres.len(), 820);
    let scene = Scene::build(&d).unwrap();
    assert_eq!(scene.sphere_count(), 91);
    assert_eq!(scene.lights().len(), 3);
}

#[test]
fn children_touch_their_parent_and_shrink_by_three() {
    let d = balls(1);
    let root = &d.spheres[0];
    assert_eq!((root.center, root.radius), (Vec3::ZERO, 0.5));
    for child in &d.spheres[1..] {
        assert!((child.radius - 0.5 / 3.0).abs() < 1e-15);
        let dist = (child.center - root.center).length();
        assert!((dist - (root.radius + child.radius)).abs() < 1e-12);
    }
    // The first child printed by the SPD: s 0.272166 0.272166 0.544331 0.166667.
    let first = d.spheres[1].center;
    assert!((first - Vec3::new(0.272166, 0.272166, 0.544331)).length() < 1e-6);
}

/// Eye ray through the centre of pixel `(x, y)`, computed from the view
/// without the library's camera.
fn eye_ray(view: &View, w: u32, h: u32, x: u32, y: u32) -> (Vec3, Vec3) {
    let f = (view.at - view.from).normalized();
    let r = f.cross(view.up).normalized();
    let u = r.cross(f);
    let pixel = 2.0 * (view.angle.to_radians() / 2.0).tan() / h as f64;
    let sx = (x as f64 + 0.5 - w as f64 / 2.0) * pixel;
    let sy = (h as f64 / 2.0 - (y as f64 + 0.5)) * pixel;
    (view.from, (f + r * sx + u * sy).normalized())
}

/// Nearest sphere hit by brute force over the description.
fn nearest_sphere(d: &SceneDescription, o: Vec3, dir: Vec3, tmin: f64) -> Option<(f64, usize)> {
    let mut best: Option<(f64, usize)> = None;
    for (i, s) in d.spheres.iter().enumerate() {
        let oc = o - s.center;
        let b = oc.dot(dir);
        let disc = b * b - (oc.dot(oc) - s.radius * s.radius);
        if disc < 0.0 {
            continue;
        }
        let t = -b - disc.sqrt();
        if t > tmin && best.map_or(true, |(bt, _)| t < bt) {
            best = Some((t, i));
        }
    }
    best
}

/// Parameter where the ray meets the floor plane z = -0.5 inside the square.
fn floor_hit(o: Vec3, dir: Vec3) -> Option<f64> {
    let t = (-0.5 - o.z) / dir.z;
    let p = o + dir * t;
    (t > 0.0 && p.x.abs() <= 12.0 && p.y.abs() <= 12.0).then_some(t)
}

/// Whether the segment from `p` to `light` is blocked by any sphere.
fn blocked(d: &SceneDescription, p: Vec3, light: Vec3) -> bool {
    let to = light - p;
    let dist = to.length();
    let dir = to * (1.0 / dist);
    nearest_sphere(d, p, dir, 1e-7).is_some_and(|(t, _)| t < dist)
}

#[test]
fn sphere_pixels_with_an_escaping_mirror_ray_match_the_shading_formula() {
    let d = balls(2);
    let (w, h) = (65, 65);
    let (scene, camera) = setup(&d, w, h);
    let image = render_full(&scene, &camera, &RenderSettings::default());
    let m = &d.materials[1];
    let intensity = 3f64.sqrt() / 6.0;
    let (mut checked, mut partly_shadowed) = (0, 0);
    for y in 0..h {
        for x in 0..w {
            let (o, dir) = eye_ray(&d.view, w, h, x, y);
            let Some((t, index)) = nearest_sphere(&d, o, dir, 0.0) else {
                continue;
            };
            let s = &d.spheres[index];
            let p = o + dir * t;
            let n = (p - s.center) * (1.0 / s.radius);
            // Keep points whose mirror ray leaves upwards and meets no
            // sphere: its colour is then the background, one bounce deep.
            let back = dir - n * (2.0 * dir.dot(n));
            if back.z <= 0.0 || nearest_sphere(&d, p, back, 1e-7).is_some() {
                continue;
            }
            let mut expected = m.color * (intensity * m.kd);
            let mut dark = 0;
            for light in &d.lights {
                let l = (light.position - p).normalized();
                let ndl = n.dot(l);
                if ndl <= 0.0 {
                    continue;
                }
                if blocked(&d, p, light.position) {
                    dark += 1;
                    continue;
                }
                let r = n * (2.0 * ndl) - l;
                let spec = m.ks * r.dot(-dir).max(0.0).powf(m.shine);
                expected += (m.color * (m.kd * ndl) + Vec3::splat(spec)) * intensity;
            }
            expected += d.background * m.ks;
            let expected = expected.min(Vec3::splat(1.0));
            let got = pixel_color(&scene, &camera, &RenderSettings::default(), x, y);
            assert!(
                (got - expected).length() < 1e-9,
                "pixel ({x}, {y}): {got:?} vs {expected:?}"
            );
            assert_eq!(image.pixel(x, y), Some(quantize(expected)));
            checked += 1;
            partly_shadowed += usize::from(dark > 0);
        }
    }
    assert!(checked >= 200, "only {checked} pixels checked");
    assert!(
        partly_shadowed >= 50,
        "only {partly_shadowed} shadowed sphere points"
    );
}

#[test]
fn shadowed_floor_pixels_match_the_shading_formula() {
    let d = balls(2);
    let (w, h) = (65, 65);
    let (scene, camera) = setup(&d, w, h);
    let image = render_full(&scene, &camera, &RenderSettings::default());
    let floor = &d.materials[0];
    let intensity = 3f64.sqrt() / 6.0;
    let mut checked = 0;
    for y in 0..h {
        for x in 0..w {
            let (o, dir) = eye_ray(&d.view, w, h, x, y);
            let Some(t) = floor_hit(o, dir) else { continue };
            if nearest_sphere(&d, o, dir, 0.0).is_some_and(|(ts, _)| ts < t) {
                continue;
            }
            let p = o + dir * t;
            let shadowed: Vec<bool> = d
                .lights
                .iter()
                .map(|l| blocked(&d, p, l.position))
                .collect();
            // Only points in partial shadow: some lights blocked, some not.
            if shadowed.iter().all(|&s| s) || !shadowed.iter().any(|&s| s) {
                continue;
            }
            let n = Vec3::new(0.0, 0.0, 1.0);
            let mut expected = floor.color * (intensity * floor.kd);
            for (light, &dark) in d.lights.iter().zip(&shadowed) {
                let ndl = n.dot((light.position - p).normalized());
                if !dark && ndl > 0.0 {
                    expected += floor.color * (floor.kd * ndl * intensity);
                }
            }
            let got = pixel_color(&scene, &camera, &RenderSettings::default(), x, y);
            assert!((got - expected).length() < 1e-12, "pixel ({x}, {y})");
            assert_eq!(image.pixel(x, y), Some(quantize(expected)));
            checked += 1;
        }
    }
    assert!(
        checked >= 500,
        "only {checked} partially shadowed floor pixels"
    );
}

#[test]
fn rays_that_miss_everything_get_the_background() {
    let mut d = balls(2);
    // Look straight up from above the sphereflake: nothing but sky.
    d.view.from = Vec3::new(0.0, 0.0, 3.0);
    d.view.at = Vec3::new(0.0, 0.0, 10.0);
    d.view.up = Vec3::new(0.0, 1.0, 0.0);
    let (scene, camera) = setup(&d, 16, 16);
    let image = render_full(&scene, &camera, &RenderSettings::default());
    let bg = d.background;
    let by_hand = [bg.x, bg.y, bg.z].map(|c| (c * 255.0 + 0.5).floor() as u8);
    assert_eq!(by_hand, [20, 92, 192]);
    assert!(image.pixels().iter().all(|p| *p == by_hand));
}

#[test]
fn anti_aliasing_averages_sub_pixel_samples() {
    let d = balls(2);
    let (scene, camera) = setup(&d, 20, 20);
    let settings = RenderSettings {
        max_depth: 5,
        aa: 3,
    };
    // The 3 x 3 samples of pixel (7, 9) are the centre samples of the
    // corresponding pixels of an image three times as large.
    let big = Camera::new(&d.view, 60, 60).unwrap();
    let one = RenderSettings::default();
    let mut sum = Vec3::ZERO;
    for sy in 0..3 {
        for sx in 0..3 {
            sum += pixel_color(&scene, &big, &one, 21 + sx, 27 + sy);
        }
    }
    let got = pixel_color(&scene, &camera, &settings, 7, 9);
    assert!((got - sum * (1.0 / 9.0)).length() < 1e-12);
}

#[test]
fn the_scene_survives_an_nff_round_trip_bit_for_bit() {
    let d = balls(2);
    let parsed = nff::parse(&nff::write(&d)).unwrap();
    let settings = RenderSettings::default();
    let (a, ca) = setup(&d, 40, 40);
    let (b, cb) = setup(&parsed, 40, 40);
    assert_eq!(
        render_full(&a, &ca, &settings).checksum(),
        render_full(&b, &cb, &settings).checksum()
    );
}
