//! Helpers of the configuration tests: files in a fresh directory, a valid
//! pool, and the check of an error's file, line, pool, key and message.

use std::path::{Path, PathBuf};

use nix::unistd::{Group, User};
use tempfile::TempDir;

use super::{load, Config, ConfigError};

pub(super) fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

/// A valid pool body (8 lines after the header), with `extra` appended.
pub(super) fn pool(name: &str, extra: &str) -> String {
    format!(
        "[{name}]\nuser = \"nobody\"\ngroup = \"nogroup\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/tmp/{name}.sock\"\npm.max_children = 5\n{extra}"
    )
}

/// Loads `main` (as fpmd.toml) plus `files` in a fresh directory.
pub(super) fn try_load(
    main: &str,
    files: &[(&str, &str)],
) -> (TempDir, Result<Config, ConfigError>) {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        write(dir.path(), rel, text);
    }
    let main = write(dir.path(), "fpmd.toml", main);
    let r = load(&main);
    (dir, r)
}

pub(super) fn load_ok(main: &str, files: &[(&str, &str)]) -> (TempDir, Config) {
    let (dir, r) = try_load(main, files);
    (dir, r.unwrap_or_else(|e| panic!("unexpected error: {e}")))
}

pub(super) fn load_err(main: &str, files: &[(&str, &str)]) -> (TempDir, ConfigError) {
    let (dir, r) = try_load(main, files);
    match r {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => (dir, e),
    }
}

/// Checks file (relative to the temp dir), line, pool, key and message.
pub(super) fn assert_err(
    dir: &TempDir,
    e: &ConfigError,
    file: &str,
    line: Option<usize>,
    pool: Option<&str>,
    key: Option<&str>,
    msg: &str,
) {
    assert_eq!(e.file, dir.path().join(file), "file of {e}");
    assert_eq!(e.line, line, "line of {e}");
    assert_eq!(e.pool.as_deref(), pool, "pool of {e}");
    assert_eq!(e.key.as_deref(), key, "key of {e}");
    assert_eq!(e.message, msg, "message of {e}");
}

pub(super) const INCLUDE_MAIN: &str = "[global]\ninclude = \"pool.d/*.toml\"\n";

pub(super) fn nobody() -> (u32, u32) {
    let u = User::from_name("nobody").unwrap().unwrap();
    let g = Group::from_name("nogroup").unwrap().unwrap();
    (u.uid.as_raw(), g.gid.as_raw())
}
