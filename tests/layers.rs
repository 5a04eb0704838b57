//! The layer check: the order of fpmd's top-level modules is written once,
//! as the table in `src/lib.rs`'s doc (`//! | 3 | [`listen`] | … |`: layer,
//! module, what it holds), and every import between two of them in `src/`
//! must run down that order, or sideways within one layer without closing
//! a cycle. A failure names the file, the line and the two modules.
//!
//! What counts as an import: a `crate::NAME` path (in a `use`, in a
//! `crate::{a, b}` group, or inline in code), and a `super::` path that
//! climbs out of its top-level module. Comments and string literals are
//! not code; test code is not the production graph and is left out: files
//! named `tests.rs` or under a `tests/` folder, and a file's inline
//! `#[cfg(test)] mod … {` module to its end. `main.rs` is above every layer.
//!
//! Also checked, so that the table is the map of the tree: `src/` holds
//! `main.rs`, `lib.rs` and folders only, and the table names exactly the
//! modules `lib.rs` declares.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// One import between two top-level modules.
#[derive(Debug, Clone)]
struct Import {
    from: String,
    to: String,
    file: String,
    line: usize,
}

/// The table of `lib.rs`'s doc: module → layer.
fn layers(lib: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for line in lib.lines() {
        let Some(row) = line.strip_prefix("//! |") else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (Some(layer), Some(module)) = (cells.first(), cells.get(1)) else {
            continue;
        };
        let Ok(layer) = layer.parse::<u32>() else {
            continue;
        };
        let name = module
            .trim_start_matches("[`")
            .trim_end_matches("`]")
            .to_string();
        assert!(
            out.insert(name.clone(), layer).is_none(),
            "lib.rs: {name} is in the layer table twice"
        );
    }
    out
}

/// The modules `lib.rs` declares (`pub mod x;`, `mod x;`).
fn declared(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(|m| m.trim().to_string())
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// A line of code with its comment and string literals taken out.
fn code_of(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push_str("\"\"");
            }
            '/' if chars.peek() == Some(&'/') => break,
            _ => out.push(c),
        }
    }
    out
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules that one line of code in the module `path`
/// (`["config", "validate"]`) imports.
fn targets(code: &str, path: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for item in inner.split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.insert(name.to_string());
                }
            }
        } else {
            out.insert(ident(after).to_string());
        }
        rest = after;
    }
    // `super::` that climbs out of the top-level module names a sibling
    // of it (`super::x` in src/a/mod.rs is crate::x).
    let mut rest = code;
    while let Some(at) = rest.find("super::") {
        let before_ok =
            at == 0 || !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':');
        let mut tail = &rest[at..];
        let mut up = 0;
        while let Some(t) = tail.strip_prefix("super::") {
            up += 1;
            tail = t;
        }
        if before_ok && up >= path.len() {
            out.insert(ident(tail).to_string());
        }
        rest = tail;
    }
    out.retain(|t| !t.is_empty() && t != "self" && Some(t) != path.first());
    out
}

/// Every import between two top-level modules in `src` (production code).
fn imports(src: &Path) -> Vec<Import> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let rel_s = rel.to_string_lossy().into_owned();
        if rel_s == "main.rs"
            || rel_s == "lib.rs"
            || rel.file_name().is_some_and(|n| n == "tests.rs")
            || rel.components().any(|c| c.as_os_str() == "tests")
        {
            continue;
        }
        let mut path: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if path.last().is_some_and(|l| l == "mod") {
            path.pop();
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim();
            if trimmed == "#[cfg(test)]"
                && lines.get(i + 1).is_some_and(|n| {
                    let n = n.trim();
                    let n = n.strip_prefix("pub ").unwrap_or(n);
                    n.starts_with("mod ") && n.ends_with('{')
                })
            {
                break;
            }
            if trimmed.starts_with("//") {
                continue;
            }
            for to in targets(&code_of(line), &path) {
                out.push(Import {
                    from: path[0].clone(),
                    to,
                    file: format!("src/{rel_s}"),
                    line: i + 1,
                });
            }
        }
    }
    out
}

/// What is wrong with `imports` under `layers`: an import of a module the
/// table does not have, an import up the order, and every cycle among the
/// modules of one layer. One line each, naming file, line and modules.
fn violations(layers: &BTreeMap<String, u32>, imports: &[Import]) -> Vec<String> {
    let mut out = Vec::new();
    let mut sideways: BTreeMap<&str, BTreeMap<&str, &Import>> = BTreeMap::new();
    for i in imports {
        let (Some(from), Some(to)) = (layers.get(&i.from), layers.get(&i.to)) else {
            let missing = if layers.contains_key(&i.from) {
                &i.to
            } else {
                &i.from
            };
            out.push(format!(
                "{}:{}: {} -> {}: {missing} is not in lib.rs's layer table",
                i.file, i.line, i.from, i.to
            ));
            continue;
        };
        if from < to {
            out.push(format!(
                "{}:{}: upward import: {} (layer {from}) -> {} (layer {to})",
                i.file, i.line, i.from, i.to
            ));
        } else if from == to {
            sideways
                .entry(&i.from)
                .or_default()
                .entry(&i.to)
                .or_insert(i);
        }
    }
    // A cycle can only run within one layer once nothing runs upward.
    let mut reported: BTreeSet<Vec<&str>> = BTreeSet::new();
    for start in sideways.keys().copied() {
        let mut stack: Vec<(&str, Vec<&Import>)> = vec![(start, Vec::new())];
        while let Some((at, path)) = stack.pop() {
            for (next, import) in sideways.get(at).into_iter().flatten() {
                let mut p = path.clone();
                p.push(import);
                if *next == start {
                    let mut key: Vec<&str> = p.iter().map(|i| i.from.as_str()).collect();
                    key.sort();
                    if reported.insert(key) {
                        let how: Vec<String> = p
                            .iter()
                            .map(|i| format!("{} -> {} ({}:{})", i.from, i.to, i.file, i.line))
                            .collect();
                        out.push(format!("import cycle: {}", how.join(", ")));
                    }
                } else if !p.iter().any(|i| i.from == *next) {
                    stack.push((next, p));
                }
            }
        }
    }
    out
}

#[test]
fn src_holds_main_lib_and_folders_only_and_lib_rs_maps_them() {
    let lib = std::fs::read_to_string(Path::new(SRC).join("lib.rs")).unwrap();
    let mut loose: Vec<String> = std::fs::read_dir(SRC)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| n != "main.rs" && n != "lib.rs")
        .collect();
    loose.sort();
    assert!(
        loose.is_empty(),
        "files at the root of src/ (want folders): {loose:?}"
    );
    let table: BTreeSet<String> = layers(&lib).into_keys().collect();
    let declared = declared(&lib);
    assert_eq!(
        table, declared,
        "lib.rs's layer table and its `pub mod`s differ"
    );
}

#[test]
fn imports_run_down_the_layers_without_a_cycle() {
    let lib = std::fs::read_to_string(Path::new(SRC).join("lib.rs")).unwrap();
    let layers = layers(&lib);
    assert!(!layers.is_empty(), "no layer table in src/lib.rs");
    let imports = imports(Path::new(SRC));
    assert!(!imports.is_empty(), "no import found: the scan is broken");
    let bad = violations(&layers, &imports);
    assert!(
        bad.is_empty(),
        "the layers of src/lib.rs are broken:\n{}",
        bad.join("\n")
    );
}

/// The check itself, on a planted upward import and a planted cycle.
#[test]
fn the_check_finds_an_upward_import_and_a_cycle() {
    let layers: BTreeMap<String, u32> = [("low", 1), ("mid", 2), ("mid2", 2), ("high", 3)]
        .into_iter()
        .map(|(m, l)| (m.to_string(), l))
        .collect();
    let at = |from: &str, to: &str, line| Import {
        from: from.into(),
        to: to.into(),
        file: format!("src/{from}/mod.rs"),
        line,
    };
    assert!(violations(&layers, &[at("high", "low", 1), at("mid", "mid2", 2)]).is_empty());
    let bad = violations(&layers, &[at("low", "high", 7)]);
    assert_eq!(
        bad,
        ["src/low/mod.rs:7: upward import: low (layer 1) -> high (layer 3)"]
    );
    let bad = violations(&layers, &[at("mid", "mid2", 3), at("mid2", "mid", 9)]);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("import cycle: ")
            && bad[0].contains("mid -> mid2 (src/mid/mod.rs:3)")
            && bad[0].contains("mid2 -> mid (src/mid2/mod.rs:9)"),
        "{bad:?}"
    );
    // The scan: use groups, inline paths, super:: out of the module, and
    // neither comments nor strings.
    let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let t = targets(
        &code_of("use crate::{config::X, pool}; let s = \"crate::daemon\"; // crate::proxy"),
        &path(&["listen", "table"]),
    );
    assert_eq!(t, ["config", "pool"].map(String::from).into());
    assert_eq!(
        targets("x = super::super::log::f();", &path(&["listen", "table"])),
        ["log".to_string()].into()
    );
    assert!(targets("use super::bind;", &path(&["listen", "table"])).is_empty());
    assert_eq!(
        targets("use super::config;", &path(&["listen"])),
        ["config".to_string()].into()
    );
}
