//! `[global]`: the daemon's settings, with php-fpm's defaults and checks.

use super::check_socket_path;
use super::ini::scan_dirs;
use super::logs::log_dir;
use super::nonzero;
use crate::config::model::{Global, ListenAddress, LogLevel, LogTarget, MinAvailable};
use crate::config::raw::{RawAddress, RawGlobal};
use crate::config::source::SourceFile;
use crate::config::users::Ids;
use crate::config::ConfigError;

pub(in crate::config) fn validate_global(
    src: &SourceFile,
    raw: RawGlobal,
    ids: Ids,
    opts: &crate::config::LoadOptions,
) -> Result<(Global, Vec<String>), ConfigError> {
    let err = |key: &str, message: String| ConfigError {
        file: src.path.clone(),
        line: src.find_line(
            &std::iter::once("global")
                .chain(key.split('.'))
                .collect::<Vec<_>>(),
        ),
        pool: None,
        key: Some(format!("global.{key}")),
        message,
    };
    let pid = match raw.pid {
        Some(p) if p.is_empty() => return Err(err("pid", "pid must not be empty".into())),
        Some(p) => Some(src.resolve(&p)),
        None => None,
    };
    let error_log = match raw.error_log.as_deref() {
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
    let control_socket = match raw.control_socket.as_deref() {
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
            let pid_file = given.as_deref().or(pid.as_deref());
            crate::config::paths::default_path_as(&src.path, pid_file, ids.euid == 0)
        }
    };
    check_socket_path(&control_socket).map_err(|m| err("control_socket", m))?;
    let metrics_listen = match raw.metrics.listen {
        None => None,
        Some(RawAddress::Tcp(addr)) => Some(ListenAddress::Tcp(addr)),
        Some(RawAddress::Unix(p)) => {
            let path = src.resolve(&p);
            check_socket_path(&path).map_err(|m| err("metrics.listen", m))?;
            Some(ListenAddress::Unix(path))
        }
    };
    let php_ini = match (&opts.php_ini, raw.php_ini.as_deref()) {
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
    let php_ini_scan_dir = raw.php_ini_scan_dir.map(|d| scan_dirs(src, &d));
    let warm_min_available = raw
        .warm_min_available
        .map_or(MinAvailable::DEFAULT, |m| m.0);
    Ok((
        Global {
            php_ini,
            php_ini_scan_dir,
            warm_min_available,
            pid,
            error_log,
            log_level,
            emergency_restart,
            process_control_timeout,
            control_socket,
            watch: raw.watch.unwrap_or(false),
            daemonize: raw.daemonize.unwrap_or(false),
            log_format: raw.log_format.unwrap_or_default(),
            metrics_listen,
        },
        includes,
    ))
}
