//! The pool's log files and timeouts: `slowlog`, `access.log`,
//! `access.format`, `access.suppress_path`.

use std::path::{Path, PathBuf};

use super::PoolCtx;
use crate::config::access_format::Format;
use crate::config::raw::RawPool;
use crate::config::ConfigError;

/// What a pool logs where.
pub(super) struct Logs {
    pub slowlog: Option<PathBuf>,
    pub access_log: Option<PathBuf>,
    pub access_format: Format,
    pub access_suppress_paths: Vec<String>,
}

/// `slowlog`, `access.log`, `access.format`, `access.suppress_path`.
/// Errors: a log file in a missing directory, a suppressed path that is no
/// absolute path, a format php-fpm would refuse.
pub(super) fn logs(ctx: &PoolCtx<'_>, raw: &RawPool) -> Result<Logs, ConfigError> {
    let src = ctx.src;
    let slowlog = raw.slowlog.as_deref().map(|p| src.resolve(p));
    if let Some(p) = &slowlog {
        log_dir(p).map_err(|m| ctx.err(&["slowlog"], m))?;
    }
    // An empty access.log is unset, as in php-fpm; the format is checked
    // even then (php-fpm checks it only with a log).
    let access_log = raw
        .access
        .log
        .as_deref()
        .filter(|p| !p.is_empty())
        .map(|p| src.resolve(p));
    if let Some(p) = &access_log {
        log_dir(p).map_err(|m| ctx.err(&["access", "log"], m))?;
    }
    let access_suppress_paths = raw
        .access
        .suppress_path
        .as_ref()
        .map(|l| l.0.clone())
        .unwrap_or_default();
    if let Some(p) = access_suppress_paths.iter().find(|p| !p.starts_with('/')) {
        return Err(ctx.err(
            &["access", "suppress_path"],
            format!("access.suppress_path '{p}' must begin with '/' (php-fpm's rule)"),
        ));
    }
    let access_format = match raw.access.format.as_deref() {
        None => Format::default(),
        Some(f) => Format::parse(f).map_err(|e| {
            ctx.err(
                &["access", "format"],
                format!("wrong format for access.format '{f}': {e}"),
            )
        })?,
    };
    Ok(Logs {
        slowlog,
        access_log,
        access_format,
        access_suppress_paths,
    })
}

/// A log file's directory exists: fpmd creates the file when it opens it
/// (as php-fpm does), not the directory, so a missing one would fail the
/// start (or the reload) after `-t` said the configuration is good.
pub(super) fn log_dir(path: &Path) -> Result<(), String> {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.is_dir() => Err(format!(
            "the directory of {} does not exist: create {}, or log elsewhere",
            path.display(),
            d.display()
        )),
        _ => Ok(()),
    }
}
