//! `[global]`: the daemon's settings, with php-fpm's defaults and checks.

use super::check_socket_path;
use super::ini::scan_dirs;
use super::logs::log_dir;
use super::nonzero;
use crate::config::model::{
    Global, ListenAddress, LogLevel, LogTarget, MinAvailable, DEFAULT_LOG_LIMIT,
    DEFAULT_WARM_TIMEOUT, MIN_LOG_LIMIT,
};
use crate::config::raw::{RawAddress, RawGlobal};
use crate::config::source::SourceFile;
use crate::config::users::Ids;
use crate::config::{ConfigError, PhpFpmLevel, PhpFpmWords};

pub(in crate::config) fn validate_global(
    src: &SourceFile,
    raw: RawGlobal,
    ids: Ids,
    opts: &crate::config::LoadOptions,
) -> Result<(Global, Vec<String>), ConfigError> {
    let err = |key: &str, message: String| global_error(src, key, message);
    let pid = match raw.pid {
        Some(p) if p.is_empty() => return Err(err("pid", "pid must not be empty".into())),
        Some(p) => Some(src.resolve(&p)),
        None => None,
    };
    let error_log = error_log(src, raw.error_log.as_deref(), opts)?;
    let log_level = raw.log_level.unwrap_or(LogLevel::Notice);
    let includes = raw.include.map(|l| l.0).unwrap_or_default();
    if includes.iter().any(|p| p.is_empty()) {
        return Err(err("include", "include must not be empty".into()));
    }
    let emergency_restart = match (
        raw.emergency_restart_threshold,
        raw.emergency_restart_interval,
    ) {
        (Some(n), Some(d)) if n > 0 && !d.0.is_zero() => Some((n, d.0)),
        _ => None,
    };
    let process_control_timeout = nonzero(raw.process_control_timeout);
    let control_socket = control_socket(
        src,
        raw.control_socket.as_deref(),
        pid.as_deref(),
        ids,
        opts,
    )?;
    let metrics_listen = metrics_listen(src, raw.metrics.listen)?;
    let php_ini = php_ini(src, raw.php_ini.as_deref(), opts)?;
    let php_ini_scan_dir = raw.php_ini_scan_dir.map(|d| scan_dirs(src, &d));
    let warm_min_available = raw
        .warm_min_available
        .map_or(MinAvailable::DEFAULT, |m| m.0);
    let log_limit = match raw.log_limit {
        None => DEFAULT_LOG_LIMIT,
        Some(n) if n < MIN_LOG_LIMIT as i64 => {
            // php-fpm's words (fpm_conf.c: fpm_conf_post_process); it
            // means "at least".
            let message = format!("log_limit must be greater than {MIN_LOG_LIMIT}");
            let words = PhpFpmWords::post_process(PhpFpmLevel::Error, message.clone());
            return Err(err("log_limit", message).with_php_fpm(words));
        }
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    };
    let warm_timeout = raw.warm_timeout.map_or(DEFAULT_WARM_TIMEOUT, |d| d.0);
    Ok((
        Global {
            php_ini,
            php_ini_scan_dir,
            warm_min_available,
            warm_timeout,
            sched_batch: raw.sched_batch.unwrap_or(true),
            pid,
            error_log,
            log_level,
            unused_error_log: None,
            emergency_restart,
            process_control_timeout,
            control_socket,
            watch: raw.watch.unwrap_or(false),
            daemonize: raw.daemonize.unwrap_or(false),
            log_format: raw.log_format.unwrap_or_default(),
            log_limit,
            metrics_listen,
        },
        includes,
    ))
}

/// An error of `global.KEY`, at the line of `[global]`'s `KEY` in `src`.
fn global_error(src: &SourceFile, key: &str, message: String) -> ConfigError {
    ConfigError {
        file: src.path.clone(),
        line: src.find_line(
            &std::iter::once("global")
                .chain(key.split('.'))
                .collect::<Vec<_>>(),
        ),
        pool: None,
        key: Some(format!("global.{key}")),
        message,
        php_fpm: None,
    }
}

/// `error_log`: stderr (unset or `"stderr"`) or a file, resolved, whose
/// directory must exist unless `-O` keeps the log on stderr. Errors:
/// `"syslog"` (not supported yet), an empty value, a missing directory.
fn error_log(
    src: &SourceFile,
    error_log: Option<&str>,
    opts: &crate::config::LoadOptions,
) -> Result<LogTarget, ConfigError> {
    let err = |key: &str, message: String| global_error(src, key, message);
    let error_log = match error_log {
        None | Some("stderr") => LogTarget::Stderr,
        Some("syslog") => {
            return Err(err(
                "error_log",
                "error_log = \"syslog\" is not supported yet".into(),
            ))
        }
        Some("") => {
            return Err(err(
                "error_log",
                "error_log must not be empty (use \"stderr\" or a file path)".into(),
            ))
        }
        Some(p) => {
            let p = src.resolve(p);
            // -O: the file is not used in the foreground.
            if !opts.force_stderr {
                log_dir(&p).map_err(|m| err("error_log", m))?;
            }
            LogTarget::File(p)
        }
    };
    Ok(error_log)
}

/// `control_socket`, resolved; unset, the default for the pid file
/// (`-g`'s, else `pid`) and the user. Errors: an empty value, a path
/// longer than `sun_path` allows.
fn control_socket(
    src: &SourceFile,
    control_socket: Option<&str>,
    pid: Option<&std::path::Path>,
    ids: Ids,
    opts: &crate::config::LoadOptions,
) -> Result<std::path::PathBuf, ConfigError> {
    let err = |key: &str, message: String| global_error(src, key, message);
    let control_socket = match control_socket {
        Some("") => {
            return Err(err(
                "control_socket",
                "control_socket must not be empty".into(),
            ))
        }
        Some(p) => src.resolve(p),
        // `crate::config::paths::default_path_as`: as root in /run/fpmd for the
        // packaged directory, else beside the pid file (-g's, else
        // `pid`'s), else beside the main file.
        None => {
            let given = opts.pid.as_deref().map(|p| opts.resolve(p));
            let pid_file = given.as_deref().or(pid);
            crate::config::paths::default_path_as(&src.path, pid_file, ids.euid == 0)
        }
    };
    check_socket_path(&control_socket).map_err(|m| err("control_socket", m))?;
    Ok(control_socket)
}

/// `metrics.listen`: a TCP address, or a Unix socket path, resolved.
/// Errors: a path longer than `sun_path` allows.
fn metrics_listen(
    src: &SourceFile,
    listen: Option<RawAddress>,
) -> Result<Option<ListenAddress>, ConfigError> {
    let err = |key: &str, message: String| global_error(src, key, message);
    let metrics_listen = match listen {
        None => None,
        Some(RawAddress::Tcp(addr)) => Some(ListenAddress::Tcp(addr)),
        Some(RawAddress::Port(port)) => Some(ListenAddress::Port(port)),
        Some(RawAddress::Unix(p)) => {
            let path = src.resolve(&p);
            check_socket_path(&path).map_err(|m| err("metrics.listen", m))?;
            Some(ListenAddress::Unix(path))
        }
    };
    Ok(metrics_listen)
}

/// The php.ini every pool reads by default: `-c`'s (resolved against the
/// working directory), else `php_ini` (resolved; empty: none). Errors: the
/// file or directory does not exist (at `-c`, or at the key).
fn php_ini(
    src: &SourceFile,
    php_ini: Option<&str>,
    opts: &crate::config::LoadOptions,
) -> Result<Option<std::path::PathBuf>, ConfigError> {
    let err = |key: &str, message: String| global_error(src, key, message);
    let php_ini = match (&opts.php_ini, php_ini) {
        (Some(cli), _) => Some(crate::config::source::absolutize(cli).map_err(|e| {
            ConfigError::file_only(cli, format!("cannot resolve php.ini path: {e}"))
        })?),
        (None, Some("")) | (None, None) => None,
        (None, Some(p)) => Some(src.resolve(p)),
    };
    if let Some(p) = &php_ini {
        if !p.exists() {
            let message = format!("php.ini file or directory does not exist: {}", p.display());
            return Err(match &opts.php_ini {
                Some(cli) => ConfigError::file_only(cli, message),
                None => err("php_ini", message),
            });
        }
    }
    Ok(php_ini)
}
