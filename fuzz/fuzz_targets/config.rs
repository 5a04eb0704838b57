//! The configuration parser on arbitrary bytes: the same path as `fpmd -t`
//! (`fpmd::config::load`, here `load_from_memory`, which differs only in
//! reading the files from memory and globbing `global.include` over them).
//!
//! Input: NUL-separated files (TOML never contains a raw NUL): the first is
//! the main file `/fuzz/fpmd.toml`, the next ones `/fuzz/pool.d/0.toml`,
//! `/fuzz/pool.d/1.toml`, … (found by `include = "pool.d/*.toml"`).
//!
//! Properties checked:
//! - nothing panics;
//! - an error names one of the files and a line inside it (only "cannot
//!   read configuration file" and "no pool defined", which concern a whole
//!   file, have no line); a key, when given, is a non-empty dotted key;
//! - a configuration that validates renders (`Config::to_toml`, what
//!   `fpmd -t` prints), and that text loads again to the same effective
//!   configuration (same `[global]`, same pools but for the file that
//!   defined them), and renders to the same text; what `fpmd -t` prints
//!   (`to_toml_with_origins`, each value with the file and line that set
//!   it) loads to the same configuration too.
//!
//! php-fpm's ini syntax (`php-fpm.conf`, `pool.d/*.conf`) has no parser in
//! fpmd yet (`fpmd convert` is a separate issue); when it has one, feed the
//! same bytes to it here: it must never panic, and a file it converts must
//! load through this same TOML path.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fpmd::config::{load_from_memory, ConfigError, PoolConfig};
use libfuzzer_sys::fuzz_target;

const MAIN: &str = "/fuzz/fpmd.toml";
const AGAIN: &str = "/fuzz/effective/fpmd.toml";

fn check_error(e: &ConfigError, files: &BTreeMap<PathBuf, Vec<u8>>) {
    let Some(bytes) = files.get(&e.file) else {
        panic!("error names a file that was not read: {e}");
    };
    match e.line {
        Some(line) => {
            let lines = bytes.iter().filter(|&&b| b == b'\n').count() + 1;
            assert!(
                line >= 1 && line <= lines,
                "line {line} outside the file ({lines} lines): {e}"
            );
        }
        None => assert!(
            e.message.starts_with("cannot read configuration file")
                || e.message.starts_with("no pool defined"),
            "an error without a line: {e}"
        ),
    }
    if let Some(key) = &e.key {
        assert!(!key.is_empty(), "empty key: {e}");
    }
    if let Some(pool) = &e.pool {
        assert!(!pool.is_empty(), "empty pool name: {e}");
    }
    let shown = e.to_string();
    assert!(shown.starts_with(&e.file.display().to_string()), "{shown}");
}

fn without_file(p: &PoolConfig) -> PoolConfig {
    PoolConfig {
        file: PathBuf::new(),
        ..p.clone()
    }
}

/// The rendered text without its comment lines (which name the files).
fn settings(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(str::to_string)
        .collect()
}

fuzz_target!(|input: &[u8]| {
    let mut files = BTreeMap::new();
    for (i, part) in input.split(|&b| b == 0).take(8).enumerate() {
        let path = if i == 0 {
            PathBuf::from(MAIN)
        } else {
            PathBuf::from(format!("/fuzz/pool.d/{}.toml", i - 1))
        };
        files.insert(path, part.to_vec());
    }
    let config = match load_from_memory(Path::new(MAIN), &files) {
        Ok(c) => c,
        Err(e) => return check_error(&e, &files),
    };
    let text = config.to_toml();
    let again_files = BTreeMap::from([(PathBuf::from(AGAIN), text.clone().into_bytes())]);
    let again = match load_from_memory(Path::new(AGAIN), &again_files) {
        Ok(c) => c,
        Err(e) => panic!("the rendered configuration does not load: {e}\n{text}"),
    };
    assert_eq!(
        again.global, config.global,
        "[global] after a round trip\n{text}"
    );
    assert_eq!(again.pools.len(), config.pools.len());
    for (a, b) in config.pools.iter().zip(&again.pools) {
        assert_eq!(
            without_file(a),
            without_file(b),
            "pool {} after a round trip\n{text}",
            a.name
        );
    }
    assert_eq!(settings(&again.to_toml()), settings(&text));
    // What fpmd -t prints (each value with where it was set) loads to the
    // same configuration too: the notes are comments.
    let noted = config.to_toml_with_origins();
    let noted_files = BTreeMap::from([(PathBuf::from(AGAIN), noted.clone().into_bytes())]);
    let noted_again = match load_from_memory(Path::new(AGAIN), &noted_files) {
        Ok(c) => c,
        Err(e) => panic!("fpmd -t's output does not load: {e}\n{noted}"),
    };
    assert_eq!(
        noted_again.global, config.global,
        "[global] after fpmd -t's output\n{noted}"
    );
    for (a, b) in config.pools.iter().zip(&noted_again.pools) {
        assert_eq!(
            without_file(a),
            without_file(b),
            "pool {} after fpmd -t's output\n{noted}",
            a.name
        );
    }
});
