//! `results/README.md` describes each committed result set as its records show: every set has
//! a row, every row gives the load average its set recorded, no row calls a loaded set quiet,
//! every quoted speedup above P x T is flagged, and the wide-area experiment is labelled the
//! demonstration it is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn results_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../results")
}

/// The committed sets: every directory under `results/`, with the first load average its
/// `README.md` records at the start.
fn sets() -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(results_dir()).expect("results/") {
        let e = e.unwrap();
        if !e.file_type().unwrap().is_dir() {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let readme = std::fs::read_to_string(e.path().join("README.md"))
            .unwrap_or_else(|err| panic!("results/{name}/README.md: {err}"));
        let load = readme
            .lines()
            .find_map(|l| {
                let rest = l.split("load average at start").nth(1)?;
                let first = rest.trim_start_matches(':').split_whitespace().next()?;
                first.parse::<f64>().ok()
            })
            .unwrap_or_else(|| panic!("results/{name}/README.md records no load average"));
        out.insert(name, load);
    }
    out
}

/// The rows of the table of committed sets: (first cell, whole row).
fn rows() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(results_dir().join("README.md")).expect("README");
    let table = text
        .split("## Committed sets")
        .nth(1)
        .expect("a section of committed sets");
    table
        .lines()
        .skip_while(|l| !l.starts_with("| set"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let first = l.split('|').nth(1).unwrap_or_default().to_string();
            (first, l.to_string())
        })
        .collect()
}

/// The sets a row names: `name/` cells, where `-suffix/` continues the previous name's
/// prefix (`apps-20261122-0844-sor/`, `-raytracer/`).
fn named(first_cell: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for part in first_cell.split('`').skip(1).step_by(2) {
        let part = part.trim_end_matches('/');
        if let Some(suffix) = part.strip_prefix('-') {
            let prev = names.last().expect("a full name first").clone();
            let stem = &prev[..prev.rfind('-').expect("a dash")];
            names.push(format!("{stem}-{suffix}"));
        } else {
            names.push(part.to_string());
        }
    }
    names
}

#[test]
fn every_set_has_a_row_with_the_load_its_records_show() {
    let sets = sets();
    let rows = rows();
    let mut described: Vec<String> = Vec::new();
    for (first, row) in &rows {
        let names = named(first);
        assert!(!names.is_empty(), "a row names no set: {row}");
        assert!(
            row.contains("load average"),
            "the row of {names:?} does not give the load average its records show: {row}"
        );
        for n in &names {
            let load = *sets
                .get(n)
                .unwrap_or_else(|| panic!("a row names {n}, which is not in results/"));
            // The start load, as the set's README gives it, to one decimal, in the row's
            // machine cell.
            let cell = row.split('|').nth(3).unwrap_or_default();
            let loads = cell.split_once("load average").map_or("", |(_, l)| l);
            assert!(
                figures(loads).iter().any(|x| (x - load).abs() <= 0.051),
                "{n}: its records show load average {load} at the start; the row says: {row}"
            );
            let quiet = [
                "quiet",
                "no other work",
                "nothing else running",
                "idle machine",
            ];
            if let Some(word) = quiet.iter().find(|w| row.to_lowercase().contains(*w)) {
                assert!(
                    load < 0.5,
                    "{n}: the row calls it '{word}' but its load average at the start was {load}"
                );
            }
            described.push(n.clone());
        }
    }
    for n in sets.keys() {
        assert!(
            described.contains(n),
            "results/{n}/ has no row in results/README.md"
        );
    }
}

/// A figure such as `1.94,` or `**2.18**`, not a name such as `fib(40)`.
fn number(w: &str) -> Option<f64> {
    let t = w.trim_matches(|c: char| "*,;:()".contains(c));
    (!t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .then(|| t.parse::<f64>().ok())
        .flatten()
}

/// Every figure in `text`.
fn figures(text: &str) -> Vec<f64> {
    text.split_whitespace().filter_map(number).collect()
}

/// Speedups quoted in `row` with their processor count: `X on N threads`, `X on N processes`,
/// `P = N X` (the forms the rows use), with what follows them.
fn quoted_speedups(row: &str) -> Vec<(f64, u32, String)> {
    let words: Vec<&str> = row.split_whitespace().collect();
    let mut out = Vec::new();
    for i in 0..words.len() {
        let rest = words[i..]
            .iter()
            .take(14)
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        // "2.18 on 2 threads"
        if i + 3 < words.len()
            && words[i + 1] == "on"
            && (words[i + 3].starts_with("thread") || words[i + 3].starts_with("process"))
        {
            if let (Some(x), Some(n)) = (number(words[i]), number(words[i + 2])) {
                out.push((x, n as u32, rest.clone()));
            }
        }
        // "P = 2 1.94"
        if words[i].trim_start_matches('(') == "P" && i + 3 < words.len() && words[i + 1] == "=" {
            if let (Some(n), Some(x)) = (number(words[i + 2]), number(words[i + 3])) {
                if words[i + 3].contains('.') {
                    out.push((x, n as u32, rest));
                }
            }
        }
    }
    out
}

#[test]
fn quoted_speedups_above_p_times_t_are_flagged() {
    for (first, row) in rows() {
        for (x, n, context) in quoted_speedups(&row) {
            if x > n as f64 {
                assert!(
                    context.contains("above P × T"),
                    "{first}: speedup {x} on {n} quoted without a flag: {context}"
                );
            }
        }
    }
    // The check finds what it looks for.
    assert_eq!(
        quoted_speedups("fib(40) 2.18 on 2 threads, **above P × T = 2**")[0].0,
        2.18
    );
    assert_eq!(quoted_speedups("(P = 2 1.94, P = 4 CPU/seq 1.12)")[0].1, 2);
}

#[test]
fn the_wide_area_experiment_is_labelled_a_demonstration() {
    let text = std::fs::read_to_string(results_dir().join("README.md")).unwrap();
    assert!(
        text.contains("## The wide-area experiment is a demonstration, not a measurement"),
        "no section on what the wide-area experiment can and cannot show"
    );
    for (first, row) in rows() {
        // The 4-process experiment is a demonstration; the 64-process study says it is a
        // simulation.
        if row.contains("wide-area") {
            assert!(
                row.contains("demonstration") || row.contains("a simulation"),
                "{first}: wide-area figures quoted as a measurement: {row}"
            );
        }
    }
}
