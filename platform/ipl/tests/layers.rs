//! The layering of the library's modules, read from its source: drivers (`transport`) know
//! nothing of ports, messages, the pool or the node above them. `cargo test -p ipl --test layers
//! -- --nocapture` prints which module uses which.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Modules a driver must not use: ports, messages, connection setup between ports, the node,
/// its pool and registry, and everything built on them.
const ABOVE_DRIVERS: &[&str] = &[
    "receive_port",
    "send_port",
    "message",
    "port_type",
    "connect",
    "ibis",
    "pool",
    "registry",
    "mesh",
    "launch",
    "launcher",
    "cli",
    "testing",
];

/// The module a source file defines, as a path below the crate (`transport::tcp`).
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    if parts.is_empty() {
        "lib".into()
    } else {
        parts.join("::")
    }
}

/// The crate modules a source file refers to: every `crate::a::b` path (in `use` lines and in
/// code) and every `super::x` path, resolved against `module`; comments are skipped.
fn references(module: &str, text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let parent: Vec<&str> = {
        let mut p: Vec<&str> = module.split("::").collect();
        p.pop();
        p
    };
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        for (prefix, base) in [("crate::", Vec::new()), ("super::", parent.clone())] {
            let mut rest = code;
            while let Some(at) = rest.find(prefix) {
                let before = rest[..at].chars().last();
                rest = &rest[at + prefix.len()..];
                if before.is_some_and(is_word) {
                    continue;
                }
                let mut path = base.iter().map(|s| s.to_string()).collect::<Vec<_>>();
                let mut tail = rest;
                // Take module names: lower-case words followed by `::`; a group in braces
                // names modules (and items) below the path so far.
                let mut paths = Vec::new();
                loop {
                    if let Some(group) = tail.strip_prefix('{') {
                        let inner = group.split('}').next().unwrap_or("");
                        for item in inner.split(',') {
                            let word: String =
                                item.trim().chars().take_while(|c| is_word(*c)).collect();
                            if word.chars().next().is_some_and(|c| c.is_lowercase())
                                && word != "self"
                            {
                                let mut p = path.clone();
                                p.push(word);
                                paths.push(p);
                            }
                        }
                        break;
                    }
                    let word: String = tail.chars().take_while(|c| is_word(*c)).collect();
                    let starts_lower = word.chars().next().is_some_and(|c| c.is_lowercase());
                    if word.is_empty() || !starts_lower {
                        break;
                    }
                    let after = &tail[word.len()..];
                    path.push(word.clone());
                    if !after.starts_with("::") {
                        break;
                    }
                    tail = &after[2..];
                }
                paths.push(path);
                for path in paths {
                    let Some(first) = path.first() else { continue };
                    {
                        // Down to the second level inside transport and registry; the top level
                        // elsewhere.
                        let keep = if first == "transport" || first == "registry" {
                            2
                        } else {
                            1
                        };
                        let name = path
                            .iter()
                            .take(keep)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join("::");
                        if name != module {
                            out.insert(name);
                        }
                    }
                }
            }
        }
    }
    out
}

fn table() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read the source directory") {
            let p = e.expect("directory entry").path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "bin") {
                    dirs.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut t = BTreeMap::new();
    for f in files {
        let module = module_of(f.strip_prefix(&src).expect("below src"));
        let text = std::fs::read_to_string(&f).expect("read a source file");
        // Unit tests inside a file may use anything.
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        t.insert(module.clone(), references(&module, text));
    }
    t
}

#[test]
fn drivers_use_no_port_message_pool_or_node_module() {
    let t = table();
    for (m, uses) in &t {
        println!(
            "{m:<22} uses {}",
            uses.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    assert!(
        t.keys().filter(|m| m.starts_with("transport")).count() >= 10,
        "the drivers were not found: {:?}",
        t.keys().collect::<Vec<_>>()
    );
    let mut wrong = Vec::new();
    for (m, uses) in t.iter().filter(|(m, _)| m.starts_with("transport")) {
        for u in uses {
            let top = u.split("::").next().unwrap_or(u);
            if ABOVE_DRIVERS.contains(&top) {
                wrong.push(format!("{m} uses {u}"));
            }
        }
    }
    assert!(wrong.is_empty(), "drivers reach above the seam: {wrong:?}");
}

#[test]
fn the_reader_of_module_paths_sees_crate_and_super_paths() {
    let text = "use crate::wire::{A, B};\nuse super::pipe::Pipe;\nuse super::{tcp, Stream};\nlet x = crate::receive_port::X; // crate::message::Y\nlet y = my_crate::ibis::Z;";
    let r = references("transport::inproc", text);
    let want: BTreeSet<String> = [
        "wire",
        "transport",
        "transport::pipe",
        "transport::tcp",
        "receive_port",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(r, want);
}
