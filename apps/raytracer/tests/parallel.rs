//! The divide-and-conquer renderer on the Satin runtime: bit-identical to
//! the sequential render on 1 to 4 threads, and its tasks survive the trip
//! through bytes that a stolen job makes between processes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use raytracer::{
    balls, render_full, render_parallel, render_recursive, render_split, Canvas, Frame, FrameError,
    RenderSettings, RenderTask, SceneSource, SharedFrame, Tile,
};
use satin::remote::registered_name;
use satin::Runtime;

/// Longest one test step may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Runs `f` on a thread, failing the test if it takes longer than [`LIMIT`].
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(LIMIT)
        .unwrap_or_else(|_| panic!("{what} did not finish within {LIMIT:?}"))
}

fn frame(source: SceneSource, width: u32, height: u32, settings: RenderSettings) -> SharedFrame {
    SharedFrame::new(Frame {
        source,
        width,
        height,
        settings,
    })
    .expect("a valid frame")
}

fn sequential(f: &SharedFrame, leaf: u32) -> Canvas {
    render_split(f.scene(), f.camera(), f.settings(), leaf)
}

#[test]
fn one_to_four_threads_render_the_sequential_image() {
    within("the renders", || {
        // Odd, non-square sizes so that quadrants have unequal halves.
        let cases = [
            (SceneSource::Balls(2), 45, 38, RenderSettings::default(), 4),
            (
                SceneSource::Balls(1),
                33,
                50,
                RenderSettings {
                    max_depth: 3,
                    aa: 2,
                },
                7,
            ),
            (SceneSource::Balls(2), 20, 9, RenderSettings::default(), 0),
        ];
        for (source, w, h, settings, leaf) in cases {
            let f = frame(source, w, h, settings);
            let expected = sequential(&f, leaf);
            assert_eq!(
                expected,
                render_full(f.scene(), f.camera(), f.settings()),
                "the sequential split renders the full image"
            );
            for threads in 1..=4 {
                let runtime = Runtime::local().threads(threads);
                let image = render_parallel(&runtime, &f, leaf).expect("render");
                assert_eq!(image.checksum(), expected.checksum(), "{threads} threads");
                assert_eq!(image, expected, "{threads} threads, leaf {leaf}");
                let leaves = expected
                    .pixels()
                    .len()
                    .div_ceil(leaf.max(1).pow(2) as usize);
                assert!(
                    runtime.stats().jobs_executed as usize >= leaves,
                    "one task per leaf at least: {:?}",
                    runtime.stats()
                );
            }
        }
    });
}

#[test]
fn tasks_are_registered_and_decode_from_bytes() {
    within("the decoded renders", || {
        assert_eq!(
            registered_name::<RenderTask>().unwrap(),
            Some("raytracer::RenderTask")
        );
        let runtime = Runtime::local().threads(2);
        let remote = runtime.remote().unwrap();
        let settings = RenderSettings::default();
        let mut nff_scene = balls(1);
        nff_scene.background = raytracer::Vec3::new(0.2, 0.3, 0.4);
        for source in [
            SceneSource::Balls(2),
            SceneSource::Description(Box::new(nff_scene.clone())),
        ] {
            let f = frame(source.clone(), 40, 30, settings);
            let tile = Tile {
                x0: 7,
                y0: 3,
                width: 25,
                height: 19,
            };
            let task = RenderTask {
                frame: f.clone(),
                tile,
                leaf: 6,
            };
            let bytes = postcard::to_allocvec(&task).unwrap();
            if let SceneSource::Balls(_) = source {
                assert!(bytes.len() < 64, "a balls frame travels as its recipe");
            }
            let output = remote
                .run_serialized("raytracer::RenderTask", &bytes)
                .expect("the decoded task runs");
            let canvas: Canvas = postcard::from_bytes(&output).unwrap();
            let expected = render_recursive(f.scene(), f.camera(), f.settings(), tile, 6);
            assert_eq!(canvas.tile(), tile);
            assert_eq!(canvas, expected);
            // Decoding rebuilds the frame's scene, not another.
            let decoded: RenderTask = postcard::from_bytes(&bytes).unwrap();
            assert_eq!(decoded.frame.frame(), f.frame());
            assert_eq!(decoded.tile, tile);
        }
    });
}

#[test]
fn an_invalid_frame_does_not_decode() {
    let mut bad = balls(1);
    bad.spheres[0].radius = -1.0;
    let task_bytes = {
        // Encode a valid task, then swap in an invalid scene with the same
        // encoding layout: a task is encoded as frame, tile, leaf.
        let f = Frame {
            source: SceneSource::Description(Box::new(bad.clone())),
            width: 8,
            height: 8,
            settings: RenderSettings::default(),
        };
        let mut bytes = postcard::to_allocvec(&f).unwrap();
        bytes.extend(postcard::to_allocvec(&Tile::full(8, 8)).unwrap());
        bytes.extend(postcard::to_allocvec(&4u32).unwrap());
        bytes
    };
    assert!(matches!(
        SharedFrame::new(Frame {
            source: SceneSource::Description(Box::new(bad)),
            width: 8,
            height: 8,
            settings: RenderSettings::default(),
        }),
        Err(FrameError::Scene(_))
    ));
    assert!(postcard::from_bytes::<RenderTask>(&task_bytes).is_err());
    let runtime = Runtime::local().threads(1);
    let e = runtime
        .remote()
        .unwrap()
        .run_serialized("raytracer::RenderTask", &task_bytes)
        .unwrap_err();
    assert!(
        matches!(e, satin::Error::Decode { what: "task", .. }),
        "{e}"
    );
}

#[test]
fn jobs_stolen_into_another_runtime_come_back_into_the_image() {
    within("the renders with a remote thief", || {
        let f = frame(SceneSource::Balls(2), 64, 64, RenderSettings::default());
        let expected = sequential(&f, 4);
        // Stealing races with the owner's progress: render until a round
        // saw a job travel, a few rounds at most.
        let mut travelled = 0;
        for _round in 0..5 {
            let home = Runtime::local().threads(1);
            let away = Runtime::local().threads(1);
            let (home_remote, away_remote) = (home.remote().unwrap(), away.remote().unwrap());
            let done = Arc::new(AtomicBool::new(false));
            let thief = {
                let done = Arc::clone(&done);
                std::thread::spawn(move || {
                    let start = Instant::now();
                    let mut stolen = 0;
                    while !done.load(Ordering::SeqCst) && start.elapsed() < LIMIT {
                        match home_remote.steal_oldest().expect("steal") {
                            Some(job) => {
                                let out = away_remote
                                    .run_serialized(job.type_name(), job.task())
                                    .expect("the stolen job runs away from home");
                                job.complete(&out).expect("its output decodes");
                                stolen += 1;
                            }
                            None => std::thread::yield_now(),
                        }
                    }
                    stolen
                })
            };
            let image = render_parallel(&home, &f, 4).expect("render");
            done.store(true, Ordering::SeqCst);
            let stolen = thief.join().expect("thief");
            assert_eq!(image, expected, "{stolen} jobs rendered away from home");
            assert_eq!(home.stats().jobs_sent, stolen);
            travelled += stolen;
            if travelled > 0 {
                break;
            }
        }
        assert!(travelled > 0, "no job was stolen in five renders");
    });
}

#[test]
fn a_stolen_jobs_canvas_of_another_tile_fails_the_render_naming_its_sender() {
    within("the renders with a forging thief", || {
        let f = frame(SceneSource::Balls(2), 64, 64, RenderSettings::default());
        // Within the image and one pixel per pixel, as a canvas's own decoding checks, but
        // not the tile of any job stolen from a render split to 4 x 4 tiles.
        let forged = postcard::to_allocvec(&Canvas::new(Tile::full(1, 1))).unwrap();
        // Stealing races with the owner's progress: render until a round saw a job taken.
        for _round in 0..5 {
            let home = Runtime::local().threads(1);
            let home_remote = home.remote().unwrap();
            let done = Arc::new(AtomicBool::new(false));
            let thief = {
                let (done, forged) = (Arc::clone(&done), forged.clone());
                std::thread::spawn(move || {
                    let start = Instant::now();
                    while !done.load(Ordering::SeqCst) && start.elapsed() < LIMIT {
                        if let Some(job) = home_remote.steal_oldest().expect("steal") {
                            return Some(job.complete_from(&forged, "node9"));
                        }
                        std::thread::yield_now();
                    }
                    None
                })
            };
            let render = render_parallel(&home, &f, 4);
            done.store(true, Ordering::SeqCst);
            let Some(completed) = thief.join().expect("thief") else {
                assert!(render.is_ok(), "{render:?}");
                continue;
            };
            for e in [completed.unwrap_err(), render.unwrap_err()] {
                match &e {
                    satin::Error::BadResult { node, task, reason } => {
                        assert_eq!(node, "node9", "{e}");
                        assert!(task.ends_with("RenderTask"), "{e}");
                        assert!(reason.contains("is not the task's tile"), "{e}");
                    }
                    other => panic!("expected a bad result from node9, got: {other:?}"),
                }
            }
            return;
        }
        panic!("no job was stolen in five renders");
    });
}
