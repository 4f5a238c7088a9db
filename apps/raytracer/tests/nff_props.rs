//! Property tests of the NFF reader: it never panics, its errors point at a
//! real line, and what the writer prints it reads back exactly.

use proptest::prelude::*;
use raytracer::nff::{parse, write};
use raytracer::{Light, Material, Polygon, SceneDescription, Sphere, Vec3, View};

/// Tokens that steer random input into every branch of the reader.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("v".to_string()),
        Just("from".to_string()),
        Just("at".to_string()),
        Just("up".to_string()),
        Just("angle".to_string()),
        Just("hither".to_string()),
        Just("resolution".to_string()),
        Just("b".to_string()),
        Just("l".to_string()),
        Just("f".to_string()),
        Just("s".to_string()),
        Just("p".to_string()),
        Just("pp".to_string()),
        Just("#".to_string()),
        Just("nan".to_string()),
        Just("-inf".to_string()),
        Just("1e999".to_string()),
        (0u32..5).prop_map(|n| n.to_string()),
        any::<u32>().prop_map(|n| n.to_string()),
        (-1e3f64..1e3).prop_map(|x| x.to_string()),
        "[a-z0-9.+-]{1,6}",
    ]
}

fn line() -> impl Strategy<Value = String> {
    prop::collection::vec(token(), 0..9).prop_map(|t| t.join(" "))
}

fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![-1e6f64..1e6, Just(0.0), Just(-0.0), Just(1e-300)]
}

fn vec3() -> impl Strategy<Value = Vec3> {
    (finite(), finite(), finite()).prop_map(|(x, y, z)| Vec3::new(x, y, z))
}

fn scene() -> impl Strategy<Value = SceneDescription> {
    let view = (
        vec3(),
        vec3(),
        vec3(),
        finite(),
        finite(),
        1u32..=raytracer::camera::MAX_SIDE,
        1u32..=raytracer::camera::MAX_SIDE,
    )
        .prop_map(|(from, at, up, angle, hither, width, height)| View {
            from,
            at,
            up,
            angle,
            hither,
            width,
            height,
        });
    let material = (vec3(), finite(), finite(), finite(), finite(), finite()).prop_map(
        |(color, kd, ks, shine, transmittance, ior)| Material {
            color,
            kd,
            ks,
            shine,
            transmittance,
            ior,
        },
    );
    let light = (vec3(), vec3()).prop_map(|(position, color)| Light { position, color });
    (
        view,
        vec3(),
        prop::collection::vec(light, 0..4),
        prop::collection::vec(material, 1..4),
    )
        .prop_flat_map(|(view, background, lights, materials)| {
            let n = materials.len() as u32;
            let sphere =
                (vec3(), 1e-9f64..1e6, 0..n).prop_map(|(center, radius, material)| Sphere {
                    center,
                    radius,
                    material,
                });
            let polygon = (prop::collection::vec(vec3(), 3..7), 0..n)
                .prop_map(|(vertices, material)| Polygon { vertices, material });
            (
                Just((view, background, lights, materials)),
                prop::collection::vec(sphere, 0..6),
                prop::collection::vec(polygon, 0..3),
            )
        })
        .prop_map(
            |((view, background, lights, materials), spheres, polygons)| SceneDescription {
                view,
                background,
                lights,
                materials,
                spheres,
                polygons,
            },
        )
}

/// Spheres and polygons, each paired with its material.
type Resolved = (Vec<(Sphere, Material)>, Vec<(Polygon, Material)>);

/// Each object's material by value, so that descriptions can be compared
/// when the writer has renumbered the materials.
fn resolved(d: &SceneDescription) -> Resolved {
    let m = |i: u32| d.materials[i as usize].clone();
    (
        d.spheres
            .iter()
            .map(|s| {
                (
                    Sphere {
                        material: 0,
                        ..s.clone()
                    },
                    m(s.material),
                )
            })
            .collect(),
        d.polygons
            .iter()
            .map(|p| {
                (
                    Polygon {
                        material: 0,
                        ..p.clone()
                    },
                    m(p.material),
                )
            })
            .collect(),
    )
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC*") {
        let _ = parse(&text);
    }

    #[test]
    fn near_miss_input_errors_name_an_existing_line(lines in prop::collection::vec(line(), 0..30)) {
        let text = lines.join("\n");
        if let Err(e) = parse(&text) {
            let message = e.to_string();
            prop_assert!(e.line >= 1 && e.line <= lines.len().max(1), "{}", message);
            let prefix = format!("NFF line {}:", e.line);
            prop_assert!(message.starts_with(&prefix), "{}", message);
        }
    }

    #[test]
    fn written_scenes_read_back_exactly(d in scene()) {
        let back = parse(&write(&d)).unwrap();
        prop_assert_eq!(&back.view, &d.view);
        prop_assert_eq!(back.background, d.background);
        prop_assert_eq!(&back.lights, &d.lights);
        prop_assert_eq!(resolved(&back), resolved(&d));
    }
}
