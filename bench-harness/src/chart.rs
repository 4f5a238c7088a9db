//! Charts of a result set, each as PNG and SVG: speedup and efficiency against the process
//! count per app (ideal lines, min/max bars, oversubscribed points drawn apart), the time per
//! phase as stacked bars, and `ipl-bench`'s round-trip latency percentiles.
//!
//! Text is set in a subset of DejaVu Sans compiled into the binary (`fonts/`), so the charts
//! render the same on a machine without any fonts installed.

use crate::analysis::{LatencySeries, PointSummary};
use crate::error::{Error, Result};
use crate::store::Version;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Width of every chart in pixels.
pub const WIDTH: u32 = 1000;
/// Height of every chart in pixels.
pub const HEIGHT: u32 = 700;

/// DejaVu Sans, Latin-1 subset (licence in `fonts/LICENSE-DejaVu.txt`).
static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans-subset.ttf");
pub(crate) const FAMILY: &str = "sans-serif";

/// Series colours (Tableau 10 without its red, which marks oversubscribed points).
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
];
/// Colour of oversubscribed points.
const OVER: RGBColor = RGBColor(214, 39, 40);
/// Colour of the flag on speedups above the ideal.
const ABOVE: RGBColor = RGBColor(160, 0, 160);

pub(crate) fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn ensure_font() -> Result<(), String> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok()
            && plotters::style::register_font(FAMILY, FontStyle::Bold, FONT).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err("the bundled font does not load".into())
    }
}

/// An axis label: at most six decimals, trailing zeros dropped (no `0.6000000000000001`).
pub fn tick(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

pub(crate) fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Refuses an axis that the drawing library cannot lay out: an infinite or empty range makes
/// its tick search run forever instead of failing.
pub(crate) fn check_range(axis: &str, lo: f64, hi: f64) -> Result<(), String> {
    if lo.is_finite() && hi.is_finite() && lo < hi {
        Ok(())
    } else {
        Err(format!(
            "the {axis} axis would run from {lo} to {hi}: a stored figure is out of range"
        ))
    }
}

/// A chart that can draw itself on any plotters backend.
pub(crate) trait Chart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// Draws `chart` to `<base>.png` and `<base>.svg`; returns both paths.
pub(crate) fn render(chart: &impl Chart, base: &Path) -> Result<Vec<PathBuf>> {
    let png = base.with_extension("png");
    let svg = base.with_extension("svg");
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |message: String| Error::Chart { path, message }
    };
    ensure_font().map_err(fail(&png))?;
    {
        let root = BitMapBackend::new(&png, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err).map_err(fail(&png))?;
        chart.draw(&root).map_err(fail(&png))?;
        root.present().map_err(err).map_err(fail(&png))?;
    }
    {
        let root = SVGBackend::new(&svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err).map_err(fail(&svg))?;
        chart.draw(&root).map_err(fail(&svg))?;
        root.present().map_err(err).map_err(fail(&svg))?;
    }
    Ok(vec![png, svg])
}

/// Splits off a title band with a title and a subtitle; returns the rest.
pub(crate) fn titled<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    subtitle: &str,
) -> Result<DrawingArea<DB, Shift>, String> {
    let (top, body) = root.split_vertically(78);
    let style = |size: i32| {
        TextStyle::from((FAMILY, size).into_font())
            .color(&BLACK)
            .pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            ))
    };
    let mid = (WIDTH / 2) as i32;
    top.draw(&Text::new(title.to_string(), (mid, 12), style(26)))
        .map_err(err)?;
    top.draw(&Text::new(
        subtitle.to_string(),
        (mid, 48),
        style(16).color(&RGBColor(70, 70, 70)),
    ))
    .map_err(err)?;
    Ok(body)
}

pub(crate) fn label_style() -> TextStyle<'static> {
    (FAMILY, 15).into_font().into()
}

pub(crate) fn axis_style() -> TextStyle<'static> {
    (FAMILY, 18).into_font().into()
}

/// What a scaling chart shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Sequential median / parallel median.
    Speedup,
    /// Speedup / (P x T).
    Efficiency,
}

/// Speedup or efficiency against P for one app, one series per thread count.
pub struct ScalingChart<'a> {
    /// The app.
    pub app: &'a str,
    /// A line under the title (parameters, machine).
    pub subtitle: String,
    /// The app's points (the sequential one is left out).
    pub points: Vec<&'a PointSummary>,
    /// Thread counts swept (one series each).
    pub threads: Vec<u32>,
    /// The largest P swept (the x axis reaches it even when points are missing).
    pub max_nodes: u32,
    /// Cores of the machine (for the oversubscription label).
    pub cores: usize,
    /// Speedup or efficiency.
    pub metric: Metric,
    /// Shown in the plot when no point has a figure.
    pub empty_reason: String,
}

impl ScalingChart<'_> {
    fn value(&self, p: &PointSummary) -> Option<(f64, f64, f64)> {
        let cpus = (p.nodes * p.threads) as f64;
        let s = (p.speedup?, p.speedup_min?, p.speedup_max?);
        Some(match self.metric {
            Metric::Speedup => s,
            Metric::Efficiency => (s.0 / cpus, s.1 / cpus, s.2 / cpus),
        })
    }
}

impl Chart for ScalingChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let (what, ylabel) = match self.metric {
            Metric::Speedup => ("speedup", "speedup over the sequential version"),
            Metric::Efficiency => ("efficiency", "parallel efficiency (speedup / (P × T))"),
        };
        let body = titled(
            root,
            &format!("{}: {what} vs processes", self.app),
            &self.subtitle,
        )?;
        let x_max = self.max_nodes.max(2) as f64;
        let values: Vec<f64> = self
            .points
            .iter()
            .filter_map(|p| self.value(p))
            .map(|v| v.2)
            .collect();
        let ideal_max = match self.metric {
            Metric::Speedup => x_max * *self.threads.iter().max().unwrap_or(&1) as f64,
            Metric::Efficiency => 1.0,
        };
        let y_max = values.iter().copied().fold(ideal_max, f64::max) * 1.12;
        check_range("x", 0.0, x_max)?;
        check_range("y", 0.0, y_max)?;
        let mut chart = ChartBuilder::on(&body)
            .margin(18)
            .x_label_area_size(55)
            .y_label_area_size(75)
            .build_cartesian_2d(0f64..x_max * 1.06, 0f64..y_max)
            .map_err(err)?;
        let int_label = |v: &f64| {
            if (v - v.round()).abs() < 1e-9 {
                format!("{}", v.round() as i64)
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .x_desc("processes (P)")
            .y_desc(ylabel)
            .x_labels((x_max as usize + 1).min(17))
            .x_label_formatter(&int_label)
            .y_labels(10)
            .y_label_formatter(&|v| format!("{v:.2}"))
            .label_style(label_style())
            .axis_desc_style(axis_style())
            .light_line_style(RGBColor(240, 240, 240))
            .max_light_lines(2)
            .draw()
            .map_err(err)?;

        // Ideal lines first, under the measurements.
        match self.metric {
            Metric::Speedup => {
                for (i, &t) in self.threads.iter().enumerate() {
                    let c = if self.threads.len() == 1 {
                        BLACK
                    } else {
                        color(i)
                    };
                    let ideal = [(1.0, t as f64), (x_max, x_max * t as f64)];
                    chart
                        .draw_series(DashedLineSeries::new(
                            ideal,
                            8,
                            5,
                            c.mix(0.7).stroke_width(1),
                        ))
                        .map_err(err)?
                        .label(format!("ideal, T={t} (speedup P × {t})"))
                        .legend(move |(x, y)| {
                            DashedPathElement::new(vec![(x, y), (x + 24, y)], 5, 3, c.mix(0.7))
                        });
                }
            }
            Metric::Efficiency => {
                chart
                    .draw_series(DashedLineSeries::new(
                        [(0.0, 1.0), (x_max * 1.06, 1.0)],
                        8,
                        5,
                        BLACK.mix(0.7).stroke_width(1),
                    ))
                    .map_err(err)?
                    .label("ideal (efficiency 1)")
                    .legend(|(x, y)| {
                        DashedPathElement::new(vec![(x, y), (x + 24, y)], 5, 3, BLACK)
                    });
            }
        }

        let mut any_over = false;
        let mut any_above = false;
        for (i, &t) in self.threads.iter().enumerate() {
            let c = color(i);
            let mut pts: Vec<(&PointSummary, (f64, f64, f64))> = self
                .points
                .iter()
                .filter(|p| p.threads == t && p.version == Version::Parallel)
                .filter_map(|p| self.value(p).map(|v| (*p, v)))
                .collect();
            pts.sort_by_key(|(p, _)| p.nodes);
            let series = if t == 1 {
                "T=1 (one thread per process)".to_string()
            } else {
                format!("T={t} threads per process")
            };
            chart
                .draw_series(LineSeries::new(
                    pts.iter().map(|(p, v)| (p.nodes as f64, v.0)),
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(series)
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(0, 0), (24, 0)], c.stroke_width(2))
                        + Circle::new((12, 0), 4, c.filled())
                });
            chart
                .draw_series(pts.iter().map(|(p, v)| {
                    ErrorBar::new_vertical(p.nodes as f64, v.1, v.0, v.2, c.stroke_width(1), 12)
                }))
                .map_err(err)?;
            chart
                .draw_series(
                    pts.iter()
                        .filter(|(p, _)| !p.oversubscribed)
                        .map(|(p, v)| Circle::new((p.nodes as f64, v.0), 5, c.filled())),
                )
                .map_err(err)?;
            for (p, v) in pts.iter().filter(|(p, _)| p.oversubscribed) {
                any_over = true;
                let label = format!("oversubscribed ({}×{})", p.nodes, p.threads);
                // Labels of points on the right half go to the left, so they stay inside.
                let right_half = p.nodes as f64 > x_max * 0.6;
                let (dx, h) = if right_half {
                    (-10, plotters::style::text_anchor::HPos::Right)
                } else {
                    (10, plotters::style::text_anchor::HPos::Left)
                };
                let style = TextStyle::from((FAMILY, 13).into_font()).color(&OVER).pos(
                    plotters::style::text_anchor::Pos::new(
                        h,
                        plotters::style::text_anchor::VPos::Bottom,
                    ),
                );
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at((p.nodes as f64, v.0))
                            + TriangleMarker::new((0, 0), 8, OVER.stroke_width(2))
                            + Text::new(label, (dx, -8), style),
                    ))
                    .map_err(err)?;
            }
        }
        // Speedups above what the processors can give are flagged, not shown plainly.
        for (p, v) in self
            .points
            .iter()
            .filter(|p| p.above_ideal && p.version == Version::Parallel)
            .filter_map(|p| self.value(p).map(|v| (*p, v)))
        {
            any_above = true;
            let ideal = p.ideal(self.cores) as u64;
            let label = if p.nodes as u64 * p.threads as u64 <= self.cores as u64 {
                format!("above P × T = {ideal}")
            } else {
                format!("above {ideal} cores")
            };
            let right_half = p.nodes as f64 > x_max * 0.6;
            let (dx, h) = if right_half {
                (-12, plotters::style::text_anchor::HPos::Right)
            } else {
                (12, plotters::style::text_anchor::HPos::Left)
            };
            let style = TextStyle::from((FAMILY, 13).into_font()).color(&ABOVE).pos(
                plotters::style::text_anchor::Pos::new(h, plotters::style::text_anchor::VPos::Top),
            );
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((p.nodes as f64, v.0))
                        + Circle::new((0, 0), 9, ABOVE.stroke_width(2))
                        + Text::new(label, (dx, 8), style),
                ))
                .map_err(err)?;
        }
        // Points without a figure (failed, timed out, not parallel) are marked on the axis.
        let missing: Vec<(usize, &PointSummary)> = self
            .threads
            .iter()
            .enumerate()
            .flat_map(|(i, &t)| {
                self.points
                    .iter()
                    .filter(move |p| p.threads == t && p.version == Version::Parallel)
                    .filter(|p| self.value(p).is_none())
                    .map(move |p| (i, *p))
            })
            .collect();
        for (i, p) in &missing {
            let why = p
                .note
                .as_deref()
                .map(|n| n.split(" (").next().unwrap_or(n).to_string())
                .unwrap_or_else(|| "no figure".into());
            let y = y_max * (0.04 + 0.05 * *i as f64);
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((p.nodes as f64, y))
                        + Cross::new((0, 0), 6, color(*i).stroke_width(2))
                        + Text::new(
                            format!("P={} T={}: {why}", p.nodes, p.threads),
                            (-10, 0),
                            TextStyle::from((FAMILY, 13).into_font())
                                .color(&RGBColor(90, 90, 90))
                                .pos(plotters::style::text_anchor::Pos::new(
                                    plotters::style::text_anchor::HPos::Right,
                                    plotters::style::text_anchor::VPos::Center,
                                )),
                        ),
                ))
                .map_err(err)?;
        }
        if !missing.is_empty() {
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                .map_err(err)?
                .label("no figure for this point (see the set's summary)")
                .legend(|(x, y)| Cross::new((x + 12, y), 6, RGBColor(90, 90, 90).stroke_width(2)));
        }
        if any_over {
            let cores = self.cores;
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                .map_err(err)?
                .label(format!("oversubscribed: P × T > {cores} cores"))
                .legend(|(x, y)| TriangleMarker::new((x + 12, y), 7, OVER.stroke_width(2)));
        }
        if any_above {
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                .map_err(err)?
                .label("speedup above P × T or the cores: suspect the baseline or timing")
                .legend(|(x, y)| Circle::new((x + 12, y), 7, ABOVE.stroke_width(2)));
        }
        if values.is_empty() {
            chart
                .draw_series(std::iter::once(Text::new(
                    self.empty_reason.clone(),
                    (x_max * 0.05, y_max * 0.5),
                    (FAMILY, 17).into_font().color(&OVER),
                )))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(160, 160, 160))
            .label_font(label_style())
            .draw()
            .map_err(err)?;
        Ok(())
    }
}

/// Median seconds per phase as a stacked bar per point (like the profile tables of the
/// Barnes-Hut report).
pub struct PhaseChart<'a> {
    /// The app.
    pub app: &'a str,
    /// A line under the title.
    pub subtitle: String,
    /// The app's points, sequential first.
    pub points: Vec<&'a PointSummary>,
    /// Cores of the machine.
    pub cores: usize,
}

/// Name of the part of the total that no phase accounts for.
pub const OTHER_PHASE: &str = "other (total minus phases)";

impl PhaseChart<'_> {
    /// The phases in stacking order, `other` last when some point has a noticeable rest.
    pub fn phases(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for p in &self.points {
            for k in p.phases.keys() {
                if !names.contains(k) {
                    names.push(k.clone());
                }
            }
        }
        crate::analysis::order_phases(&mut names);
        if self.points.iter().any(|p| self.rest(p) > 0.0) {
            names.push(OTHER_PHASE.into());
        }
        names
    }

    /// The part of a point's median total not covered by its phases (0 when under 1%).
    fn rest(&self, p: &PointSummary) -> f64 {
        let total = p.median.unwrap_or(0.0);
        let sum: f64 = p.phases.values().sum();
        let rest = total - sum;
        if rest > 0.01 * total {
            rest
        } else {
            0.0
        }
    }

    /// Median seconds of `phase` at point `p` (the rest of the total for [`OTHER_PHASE`]).
    pub fn value(&self, p: &PointSummary, phase: &str) -> f64 {
        if phase == OTHER_PHASE {
            self.rest(p)
        } else {
            p.phases.get(phase).copied().unwrap_or(0.0)
        }
    }
}

impl Chart for PhaseChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let body = titled(
            root,
            &format!("{}: time per phase", self.app),
            &self.subtitle,
        )?;
        let n = self.points.len().max(1) as i32;
        let phases = self.phases();
        let totals: Vec<f64> = self
            .points
            .iter()
            .map(|p| phases.iter().map(|ph| self.value(p, ph)).sum())
            .collect();
        let (scale, unit) = time_unit(totals.iter().copied().fold(0.0, f64::max));
        let y_max = totals.iter().copied().fold(0.0, f64::max).max(1e-9) * scale * 1.15;
        check_range("y", 0.0, y_max)?;
        let labels: Vec<String> = self
            .points
            .iter()
            .map(|p| {
                let l = p.label();
                if p.oversubscribed {
                    format!("{l} *")
                } else {
                    l
                }
            })
            .collect();
        let mut chart = ChartBuilder::on(&body)
            .margin(18)
            .x_label_area_size(55)
            .y_label_area_size(80)
            .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..y_max)
            .map_err(err)?;
        let fmt = |v: &SegmentValue<i32>| match v {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("version and processes × threads (* oversubscribed)")
            .y_desc(format!("median time ({unit})"))
            .x_labels(n as usize + 1)
            .x_label_formatter(&fmt)
            .y_labels(10)
            .y_label_formatter(&|v| tick(*v))
            .label_style(label_style())
            .axis_desc_style(axis_style())
            .light_line_style(RGBColor(240, 240, 240))
            .max_light_lines(2)
            .draw()
            .map_err(err)?;
        let right = |i: i32| {
            if i + 1 < n {
                SegmentValue::Exact(i + 1)
            } else {
                SegmentValue::Last
            }
        };
        for (k, phase) in phases.iter().enumerate() {
            let c = color(k);
            let bars: Vec<Rectangle<(SegmentValue<i32>, f64)>> = self
                .points
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let below: f64 =
                        phases[..k].iter().map(|ph| self.value(p, ph)).sum::<f64>() * scale;
                    let v = self.value(p, phase) * scale;
                    let mut r = Rectangle::new(
                        [
                            (SegmentValue::Exact(i as i32), below),
                            (right(i as i32), below + v),
                        ],
                        c.filled(),
                    );
                    r.set_margin(0, 0, 14, 14);
                    r
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(err)?
                .label(phase.replace('_', " "))
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
        }
        // Oversubscribed bars get a red outline.
        let outlines: Vec<Rectangle<(SegmentValue<i32>, f64)>> = self
            .points
            .iter()
            .enumerate()
            .filter(|(_, p)| p.oversubscribed)
            .map(|(i, _)| {
                let mut r = Rectangle::new(
                    [
                        (SegmentValue::Exact(i as i32), 0.0),
                        (right(i as i32), totals[i] * scale),
                    ],
                    OVER.stroke_width(3),
                );
                r.set_margin(0, 0, 12, 12);
                r
            })
            .collect();
        if !outlines.is_empty() {
            let cores = self.cores;
            chart
                .draw_series(outlines)
                .map_err(err)?
                .label(format!("* oversubscribed: P × T > {cores} cores"))
                .legend(|(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 14, y + 6)], OVER.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(160, 160, 160))
            .label_font(label_style())
            .draw()
            .map_err(err)?;
        Ok(())
    }
}

/// A unit for times up to `max_secs`: (factor from seconds, name).
pub fn time_unit(max_secs: f64) -> (f64, &'static str) {
    if max_secs >= 1.0 {
        (1.0, "s")
    } else if max_secs >= 1e-3 {
        (1e3, "ms")
    } else {
        (1e6, "µs")
    }
}

/// Round-trip latency percentiles per transport from `ipl-bench`.
pub struct LatencyChart<'a> {
    /// The series.
    pub series: &'a [LatencySeries],
    /// A line under the title.
    pub subtitle: String,
}

/// How a percentile is written on the axis.
pub fn percentile_label(p: f64) -> String {
    if p == 50.0 {
        "50% (median)".into()
    } else {
        format!("{p}%")
    }
}

impl LatencyChart<'_> {
    /// Every percentile any series has, ascending.
    pub fn percentiles(&self) -> Vec<f64> {
        let mut ps: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        ps.sort_by(f64::total_cmp);
        ps.dedup();
        ps
    }
}

impl Chart for LatencyChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let body = titled(
            root,
            "1-byte round-trip latency: ipl vs raw TCP",
            &self.subtitle,
        )?;
        let ps = self.percentiles();
        let n = ps.len().max(1) as i32;
        let all = || self.series.iter().flat_map(|s| s.points.iter());
        let y_max = all().map(|p| p.3).fold(0.0, f64::max).max(1e-3) * 1.6;
        let y_min = all()
            .map(|p| p.2)
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min)
            .min(y_max / 10.0)
            * 0.6;
        check_range("y", y_min, y_max)?;
        let mut chart = ChartBuilder::on(&body)
            .margin(18)
            .x_label_area_size(55)
            .y_label_area_size(75)
            .build_cartesian_2d((0..n - 1).into_segmented(), (y_min..y_max).log_scale())
            .map_err(err)?;
        let fmt = |v: &SegmentValue<i32>| match v {
            SegmentValue::CenterOf(i) => ps
                .get(*i as usize)
                .map(|p| percentile_label(*p))
                .unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("percentile")
            .y_desc("round-trip time (µs, log scale)")
            .x_labels(n as usize + 1)
            .x_label_formatter(&fmt)
            .y_labels(12)
            .y_label_formatter(&|v| tick(*v))
            .label_style(label_style())
            .axis_desc_style(axis_style())
            .light_line_style(RGBColor(240, 240, 240))
            .max_light_lines(2)
            .draw()
            .map_err(err)?;
        let index = |p: f64| ps.iter().position(|&q| q == p).unwrap_or(0) as i32;
        for (k, s) in self.series.iter().enumerate() {
            let c = color(k);
            let pts: Vec<(SegmentValue<i32>, (f64, f64, f64))> = s
                .points
                .iter()
                .map(|&(p, med, lo, hi)| (SegmentValue::CenterOf(index(p)), (med, lo, hi)))
                .collect();
            chart
                .draw_series(LineSeries::new(
                    pts.iter().map(|(x, v)| (x.clone(), v.0)),
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(0, 0), (24, 0)], c.stroke_width(2))
                        + Circle::new((12, 0), 4, c.filled())
                });
            chart
                .draw_series(pts.iter().map(|(x, v)| {
                    ErrorBar::new_vertical(x.clone(), v.1, v.0, v.2, c.stroke_width(1), 12)
                }))
                .map_err(err)?;
            chart
                .draw_series(
                    pts.iter()
                        .map(|(x, v)| Circle::new((x.clone(), v.0), 5, c.filled())),
                )
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(160, 160, 160))
            .label_font(label_style())
            .draw()
            .map_err(err)?;
        Ok(())
    }
}

/// Draws a speedup or efficiency chart to `<base>.png` and `<base>.svg`.
pub fn scaling(chart: &ScalingChart<'_>, base: &Path) -> Result<Vec<PathBuf>> {
    render(chart, base)
}

/// Draws a phase chart to `<base>.png` and `<base>.svg`.
pub fn phases(chart: &PhaseChart<'_>, base: &Path) -> Result<Vec<PathBuf>> {
    render(chart, base)
}

/// Draws a latency chart to `<base>.png` and `<base>.svg`.
pub fn latency(chart: &LatencyChart<'_>, base: &Path) -> Result<Vec<PathBuf>> {
    render(chart, base)
}

/// The wide-area simulation study: speedup against the one-way latency between locations.
struct StudyChart<'a>(&'a crate::study::Study);

impl Chart for StudyChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let rows = &self.0.rows;
        let nodes = rows.iter().map(|r| r.nodes).max().unwrap_or(1);
        let subtitle = format!(
            "{nodes} processes whose leaves sleep their cost (simulated processors); speedup \
             over one process of the same tree"
        );
        let body = titled(
            root,
            "wide-area stealing: speedup vs one-way latency",
            &subtitle,
        )?;
        let x_max = rows.iter().map(|r| r.latency_ms).max().unwrap_or(0).max(10) as f64 * 1.08;
        let y_max = rows.iter().map(|r| r.speedup).fold(nodes as f64, f64::max) * 1.1;
        check_range("x", 0.0, x_max)?;
        check_range("y", 0.0, y_max)?;
        let mut chart = ChartBuilder::on(&body)
            .margin(18)
            .x_label_area_size(55)
            .y_label_area_size(75)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("one-way latency between locations (ms)")
            .y_desc("speedup over one process")
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .label_style(label_style())
            .axis_desc_style(axis_style())
            .light_line_style(RGBColor(240, 240, 240))
            .max_light_lines(2)
            .draw()
            .map_err(err)?;
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, nodes as f64), (x_max, nodes as f64)],
                8,
                5,
                BLACK.mix(0.5).stroke_width(1),
            ))
            .map_err(err)?
            .label(format!("ideal ({nodes})"))
            .legend(|(x, y)| DashedPathElement::new(vec![(x, y), (x + 24, y)], 5, 3, BLACK));
        if let Some(single) = rows.iter().find(|r| r.locations == 1) {
            let c = RGBColor(90, 90, 90);
            chart
                .draw_series(DashedLineSeries::new(
                    [(0.0, single.speedup), (x_max, single.speedup)],
                    4,
                    3,
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(format!("1 location ({:.1})", single.speedup))
                .legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 24, y)], 3, 2, c.stroke_width(2))
                });
        }
        let mut series: Vec<(u32, &str)> = rows
            .iter()
            .filter(|r| r.locations > 1)
            .map(|r| (r.locations, r.policy.as_str()))
            .collect();
        series.sort();
        series.dedup();
        for (i, (locations, policy)) in series.iter().enumerate() {
            let c = color(i);
            let mut pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.locations == *locations && r.policy == *policy)
                .map(|r| (r.latency_ms as f64, r.speedup))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            // Random stealing dashed, cluster-aware solid: the comparison the study makes.
            let width = if *policy == "cluster-aware" { 3 } else { 2 };
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(width)))
                .map_err(err)?
                .label(format!("{locations} locations, {policy}"))
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(0, 0), (24, 0)], c.stroke_width(width))
                        + Circle::new((12, 0), 4, c.filled())
                });
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 5, c.filled())))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font(label_style())
            .draw()
            .map_err(err)?;
        Ok(())
    }
}

/// Draws the study's chart to `<base>.png` and `<base>.svg`.
pub fn study(study: &crate::study::Study, base: &Path) -> Result<Vec<PathBuf>> {
    render(&StudyChart(study), base)
}

/// Reads, checks and charts the study in `csv`: `study-speedup.png` and `.svg` in `out`
/// (default: beside the file). Returns the charts' paths.
pub fn study_file(csv: &Path, out: Option<&Path>) -> Result<Vec<PathBuf>> {
    // The rows' bound, read within a bound of its own: 10,000 rows of a few numbers each.
    let text =
        crate::input::read_text_bounded(csv, 64 << 20).map_err(|why| Error::InvalidArgument {
            what: "study file".into(),
            value: csv.display().to_string(),
            reason: why,
        })?;
    let parsed = crate::study::parse(&text, &csv.display().to_string())?;
    let dir = match out {
        Some(d) => d.to_path_buf(),
        None => csv
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(".")),
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    study(&parsed, &dir.join("study-speedup"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_study_file_is_charted_beside_it() {
        let tmp = testkit::scratch_dir("study-chart");
        let csv = tmp.path().join("study.csv");
        let study = "locations,latency_ms,policy,nodes,seconds,speedup,t1_seconds\n\
            1,0,random,64,12.5,62.0,775\n\
            4,100,random,64,30.0,25.8,775\n\
            4,100,cluster-aware,64,13.0,59.6,775\n";
        std::fs::write(&csv, study).unwrap();
        let paths = study_file(&csv, None).unwrap();
        assert_eq!(paths.len(), 2);
        for p in &paths {
            assert_eq!(p.parent(), Some(tmp.path()));
            assert!(
                std::fs::metadata(p).unwrap().len() > 1000,
                "{}",
                p.display()
            );
        }
    }

    #[test]
    fn ticks() {
        assert_eq!(tick(0.6000000000000001), "0.6");
        assert_eq!(tick(1000.0), "1000");
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(time_unit(0.5), (1e3, "ms"));
        assert_eq!(time_unit(2e-4), (1e6, "µs"));
        assert_eq!(time_unit(3.0), (1.0, "s"));
        assert_eq!(percentile_label(50.0), "50% (median)");
        assert_eq!(percentile_label(99.9), "99.9%");
    }
}
