//! The charts of a run's traces, as PNG and SVG of the harness's usual size: the timeline
//! (Gantt rows coloured by state), the superstep breakdown (a panel per process: computation,
//! communication and waiting per superstep) and the steal matrix (counts and bytes).

use super::model::{Row, State, Steals, Step};
use crate::chart::{axis_style, check_range, err, label_style, render, titled, Chart, FAMILY};
use crate::error::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// A cell of the steal matrix: (victim, thief) on segmented axes.
type Cell = (SegmentValue<i32>, SegmentValue<i32>);

/// Columns of the timeline: states shorter than a column are shown by the state that held
/// longest in it, so a chart's size does not grow with the number of supersteps.
const COLUMNS: usize = 1200;
/// Groups of supersteps drawn at most; longer runs add consecutive supersteps up.
const MAX_BARS: usize = 120;
/// Processes drawn in the superstep breakdown at most (one panel each).
const MAX_PANELS: usize = 16;

fn state_color(s: State) -> RGBColor {
    match s {
        State::Compute => RGBColor(31, 119, 180),
        State::Send => RGBColor(255, 127, 14),
        State::Wait => RGBColor(214, 39, 40),
        State::Busy => RGBColor(44, 160, 44),
        State::Idle => RGBColor(199, 199, 199),
    }
}

/// A unit for a time axis that reaches `max_us` microseconds: (divisor, name).
fn unit(max_us: f64) -> (f64, &'static str) {
    if max_us >= 2e6 {
        (1e6, "s")
    } else if max_us >= 2e3 {
        (1e3, "ms")
    } else {
        (1.0, "µs")
    }
}

fn tick(v: f64) -> String {
    crate::chart::tick((v * 1000.0).round() / 1000.0)
}

/// A row as runs of one state, in columns of `end / COLUMNS` microseconds.
fn columns(row: &Row, end: f64) -> Vec<(State, f64, f64)> {
    let width = end / COLUMNS as f64;
    let mut time = vec![[0.0f64; State::ALL.len()]; COLUMNS];
    for s in &row.segments {
        let (a, b) = (s.start.max(0.0), s.end.min(end));
        if b <= a {
            continue;
        }
        let k = State::ALL.iter().position(|x| *x == s.state).unwrap_or(0);
        let first = ((a / width) as usize).min(COLUMNS - 1);
        let last = ((b / width) as usize).min(COLUMNS - 1);
        for (c, slot) in time.iter_mut().enumerate().take(last + 1).skip(first) {
            let (lo, hi) = (c as f64 * width, (c + 1) as f64 * width);
            slot[k] += b.min(hi) - a.max(lo);
        }
    }
    let mut runs: Vec<(State, f64, f64)> = Vec::new();
    for (c, slot) in time.iter().enumerate() {
        let Some((k, _)) = slot
            .iter()
            .enumerate()
            .max_by(|x, y| x.1.total_cmp(y.1))
            .filter(|(_, t)| **t > 0.0)
        else {
            continue;
        };
        let state = State::ALL[k];
        let (lo, hi) = (c as f64 * width, (c + 1) as f64 * width);
        match runs.last_mut() {
            Some(last) if last.0 == state && (last.2 - lo).abs() < width / 2.0 => last.2 = hi,
            _ => runs.push((state, lo, hi)),
        }
    }
    runs
}

/// Each process's (and worker's) states over time.
pub struct TimelineChart<'a> {
    /// A line under the title.
    pub subtitle: String,
    /// The rows, top first.
    pub rows: &'a [Row],
    /// The end of the run, in microseconds.
    pub end_us: f64,
}

impl Chart for TimelineChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let body = titled(root, "Timeline: what each process did", &self.subtitle)?;
        let n = self.rows.len().max(1) as i32;
        let end = self.end_us.max(1.0);
        let (div, unit) = unit(end);
        check_range("time", 0.0, end / div)?;
        let mut chart = ChartBuilder::on(&body)
            .margin(18)
            .x_label_area_size(50)
            .y_label_area_size(150)
            .build_cartesian_2d(0f64..end / div, (0..n - 1).into_segmented())
            .map_err(err)?;
        // Row 0 on top.
        let label = |v: &SegmentValue<i32>| match v {
            SegmentValue::CenterOf(i) => self
                .rows
                .get((n - 1 - i) as usize)
                .map(|r| r.label.clone())
                .unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(format!("time since the run started ({unit})"))
            .x_labels(10)
            .x_label_formatter(&|v| tick(*v))
            .y_labels(n as usize + 1)
            .y_label_formatter(&label)
            .label_style(label_style())
            .axis_desc_style(axis_style())
            .light_line_style(RGBColor(240, 240, 240))
            .max_light_lines(2)
            .draw()
            .map_err(err)?;
        let top = |i: i32| {
            if i + 1 < n {
                SegmentValue::Exact(i + 1)
            } else {
                SegmentValue::Last
            }
        };
        let mut seen = Vec::new();
        for (r, row) in self.rows.iter().enumerate() {
            let y = n - 1 - r as i32;
            let bars: Vec<Rectangle<(f64, SegmentValue<i32>)>> = columns(row, end)
                .into_iter()
                .map(|(state, a, b)| {
                    if !seen.contains(&state) {
                        seen.push(state);
                    }
                    let mut rect = Rectangle::new(
                        [(a / div, SegmentValue::Exact(y)), (b / div, top(y))],
                        state_color(state).filled(),
                    );
                    rect.set_margin(3, 3, 0, 0);
                    rect
                })
                .collect();
            chart.draw_series(bars).map_err(err)?;
        }
        seen.sort();
        for state in seen {
            let c = state_color(state);
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, SegmentValue<i32>)>>())
                .map_err(err)?
                .label(state.name())
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
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

/// Per process and superstep: computation, communication and waiting.
pub struct SuperstepChart<'a> {
    /// A line under the title.
    pub subtitle: String,
    /// Each process's label and supersteps.
    pub processes: &'a [(String, Vec<Step>)],
}

impl SuperstepChart<'_> {
    /// Supersteps per bar, so that at most [`MAX_BARS`] bars are drawn.
    fn group(&self) -> u64 {
        let steps = self
            .processes
            .iter()
            .filter_map(|(_, s)| s.last().map(|l| l.step + 1))
            .max()
            .unwrap_or(1);
        steps.div_ceil(MAX_BARS as u64).max(1)
    }

    /// A process's bars: (first superstep of the group, compute, comm, wait) in microseconds.
    fn bars(&self, steps: &[Step]) -> Vec<(u64, [f64; 3])> {
        let g = self.group();
        let mut out: Vec<(u64, [f64; 3])> = Vec::new();
        for s in steps {
            let first = s.step / g * g;
            let v = [s.compute_us, s.comm_us, s.wait_us];
            match out.last_mut() {
                Some((f, acc)) if *f == first => {
                    for k in 0..3 {
                        acc[k] += v[k];
                    }
                }
                _ => out.push((first, v)),
            }
        }
        out
    }
}

const PARTS: [(&str, RGBColor); 3] = [
    ("compute", RGBColor(31, 119, 180)),
    ("communication (send, collectives)", RGBColor(255, 127, 14)),
    ("waiting in sync", RGBColor(214, 39, 40)),
];

impl Chart for SuperstepChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let body = titled(
            root,
            "Supersteps: computation, communication and waiting per process",
            &self.subtitle,
        )?;
        let shown = &self.processes[..self.processes.len().min(MAX_PANELS)];
        let g = self.group();
        let all: Vec<Vec<(u64, [f64; 3])>> = shown.iter().map(|(_, s)| self.bars(s)).collect();
        let y_max_us = all
            .iter()
            .flatten()
            .map(|(_, v)| v.iter().sum::<f64>())
            .fold(0.0, f64::max)
            .max(1.0);
        let (div, unit) = unit(y_max_us);
        let y_max = y_max_us / div * 1.1;
        let x_max = all
            .iter()
            .flatten()
            .map(|(f, _)| f / g + 1)
            .max()
            .unwrap_or(1) as f64;
        check_range("y", 0.0, y_max)?;
        let (legend, panels) = body.split_vertically(36);
        // The legend as one line of coloured boxes.
        let mut x = 90;
        for (name, c) in PARTS {
            legend
                .draw(&Rectangle::new([(x, 10), (x + 14, 24)], c.filled()))
                .map_err(err)?;
            legend
                .draw(&Text::new(name.to_string(), (x + 20, 9), label_style()))
                .map_err(err)?;
            x += 40 + 9 * name.len() as i32;
        }
        let areas = panels.split_evenly((shown.len().max(1), 1));
        for (k, ((label, _), bars)) in shown.iter().zip(&all).enumerate() {
            let last = k + 1 == shown.len();
            let mut chart = ChartBuilder::on(&areas[k])
                .margin_left(18)
                .margin_right(18)
                .margin_top(4)
                .x_label_area_size(if last { 45 } else { 0 })
                .y_label_area_size(110)
                .build_cartesian_2d(0f64..x_max, 0f64..y_max)
                .map_err(err)?;
            let x_label = |v: &f64| tick(*v * g as f64);
            let y_label = |v: &f64| tick(*v);
            let mut mesh = chart.configure_mesh();
            mesh.disable_x_mesh()
                .y_desc(format!("{label} ({unit})"))
                .y_labels(3)
                .y_label_formatter(&y_label)
                .label_style(label_style())
                .axis_desc_style((FAMILY, 15))
                .light_line_style(RGBColor(240, 240, 240))
                .max_light_lines(1);
            if last {
                mesh.x_desc(if g == 1 {
                    "superstep".to_string()
                } else {
                    format!("superstep (bars add up groups of {g})")
                })
                .x_labels(12)
                .x_label_formatter(&x_label);
            } else {
                mesh.x_labels(0);
            }
            mesh.draw().map_err(err)?;
            for (part, (_, c)) in PARTS.iter().enumerate() {
                let rects: Vec<Rectangle<(f64, f64)>> = bars
                    .iter()
                    .map(|(first, v)| {
                        let x = (first / g) as f64;
                        let below: f64 = v[..part].iter().sum::<f64>() / div;
                        Rectangle::new(
                            [(x + 0.1, below), (x + 0.9, below + v[part] / div)],
                            c.filled(),
                        )
                    })
                    .collect();
                chart.draw_series(rects).map_err(err)?;
            }
        }
        Ok(())
    }
}

/// Who stole from whom: jobs and bytes.
pub struct StealChart<'a> {
    /// A line under the title.
    pub subtitle: String,
    /// The matrix.
    pub steals: &'a Steals,
}

fn heat(v: u64, max: u64) -> RGBColor {
    if v == 0 || max == 0 {
        return RGBColor(250, 250, 250);
    }
    let f = (v as f64 / max as f64).sqrt().clamp(0.08, 1.0);
    let mix = |lo: f64, hi: f64| (lo + (hi - lo) * f) as u8;
    RGBColor(mix(222.0, 8.0), mix(235.0, 69.0), mix(247.0, 148.0))
}

fn quantity(v: u64) -> String {
    match v {
        v if v >= 10_000_000 => format!("{:.0}M", v as f64 / 1e6),
        v if v >= 10_000 => format!("{:.0}k", v as f64 / 1e3),
        v => v.to_string(),
    }
}

fn matrix<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    labels: &[String],
    values: &[Vec<u64>],
) -> Result<(), String> {
    let n = labels.len().max(1) as i32;
    let max = values.iter().flatten().copied().max().unwrap_or(0);
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FAMILY, 18))
        .margin(14)
        .x_label_area_size(60)
        .y_label_area_size(90)
        .build_cartesian_2d((0..n - 1).into_segmented(), (0..n - 1).into_segmented())
        .map_err(err)?;
    let name = |v: &SegmentValue<i32>, flip: bool| match v {
        SegmentValue::CenterOf(i) => {
            let i = if flip { n - 1 - i } else { *i };
            labels.get(i as usize).cloned().unwrap_or_default()
        }
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("victim (robbed)")
        .y_desc("thief")
        .x_labels(n as usize + 1)
        .y_labels(n as usize + 1)
        .x_label_formatter(&|v| name(v, false))
        .y_label_formatter(&|v| name(v, true))
        .label_style(label_style())
        .axis_desc_style(axis_style())
        .draw()
        .map_err(err)?;
    let next = |i: i32| {
        if i + 1 < n {
            SegmentValue::Exact(i + 1)
        } else {
            SegmentValue::Last
        }
    };
    let cells: Vec<Rectangle<(SegmentValue<i32>, SegmentValue<i32>)>> = values
        .iter()
        .enumerate()
        .flat_map(|(thief, row)| {
            row.iter().enumerate().map(move |(victim, v)| {
                let (x, y) = (victim as i32, n - 1 - thief as i32);
                let mut r = Rectangle::new(
                    [
                        (SegmentValue::Exact(x), SegmentValue::Exact(y)),
                        (next(x), next(y)),
                    ],
                    heat(*v, max).filled(),
                );
                r.set_margin(1, 1, 1, 1);
                r
            })
        })
        .collect();
    chart.draw_series(cells).map_err(err)?;
    if n <= 16 {
        let texts: Vec<Text<Cell, String>> = values
            .iter()
            .enumerate()
            .flat_map(|(thief, row)| {
                row.iter().enumerate().map(move |(victim, v)| {
                    let (x, y) = (victim as i32, n - 1 - thief as i32);
                    let dark = *v > 0 && (*v as f64 / max.max(1) as f64) > 0.3;
                    let style = TextStyle::from((FAMILY, 15).into_font())
                        .color(if dark { &WHITE } else { &BLACK })
                        .pos(plotters::style::text_anchor::Pos::new(
                            plotters::style::text_anchor::HPos::Center,
                            plotters::style::text_anchor::VPos::Center,
                        ));
                    Text::new(
                        quantity(*v),
                        (SegmentValue::CenterOf(x), SegmentValue::CenterOf(y)),
                        style,
                    )
                })
            })
            .collect();
        chart.draw_series(texts).map_err(err)?;
    }
    Ok(())
}

impl Chart for StealChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let body = titled(root, "Steals: who took work from whom", &self.subtitle)?;
        let (left, right) = body.split_horizontally(crate::chart::WIDTH / 2);
        matrix(
            &left,
            "jobs stolen",
            &self.steals.labels,
            &self.steals.count,
        )?;
        matrix(
            &right,
            "bytes of the stolen jobs",
            &self.steals.labels,
            &self.steals.bytes,
        )?;
        Ok(())
    }
}

/// Draws the timeline to `<base>.png` and `<base>.svg`.
pub fn timeline(chart: &TimelineChart<'_>, base: &Path) -> Result<Vec<PathBuf>> {
    render(chart, base)
}

/// Draws the superstep breakdown to `<base>.png` and `<base>.svg`.
pub fn supersteps(chart: &SuperstepChart<'_>, base: &Path) -> Result<Vec<PathBuf>> {
    render(chart, base)
}

/// Draws the steal matrix to `<base>.png` and `<base>.svg`.
pub fn steals(chart: &StealChart<'_>, base: &Path) -> Result<Vec<PathBuf>> {
    render(chart, base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::model::Segment;

    #[test]
    fn short_states_give_way_to_the_longest_in_their_column() {
        let end = COLUMNS as f64 * 10.0;
        let row = Row {
            label: "rank 0".into(),
            segments: vec![
                Segment {
                    state: State::Compute,
                    start: 0.0,
                    end: 17.0,
                },
                Segment {
                    state: State::Wait,
                    start: 17.0,
                    end: 20.0,
                },
                Segment {
                    state: State::Send,
                    start: 20.0,
                    end: 40.0,
                },
            ],
        };
        let runs = columns(&row, end);
        assert_eq!(
            runs,
            [(State::Compute, 0.0, 20.0), (State::Send, 20.0, 40.0)]
        );
    }
}
