//! The commands that ask the running daemon over its control socket
//! (`fpmd reload|stop|upgrade|status`), and how the socket is found from
//! the configuration file.
//!
//! Must not touch: the daemon's state (this is the client side; the
//! daemon answers in `control::socket`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::config::{self, EXIT_CONFIG};
use crate::control::socket::{self, Answer, Request};

use super::{StatusArgs, EXIT_STILL_STOPPING};

/// `fpmd status`: the view, one frame, or the JSON. Exit 78 when the
/// control socket cannot be told from the configuration, 1 when the daemon
/// cannot be asked or the terminal fails.
pub fn status(path: &Path, options: &config::LoadOptions, args: &StatusArgs) -> ExitCode {
    use crate::observe::top;
    let socket = match control_socket_of(path, options) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fpmd: status: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let request = Request::Status {
        pool: args.pool.clone(),
    };
    let outcome = if args.json {
        top::fetch_raw(&socket, &request).and_then(|json| top::print(&format!("{json}\n")))
    } else {
        top::run(&socket, &request, args.interval, args.once)
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fpmd: status: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `fpmd -c FILE reload|stop|upgrade`: asks the running daemon. The control
/// socket is found from the configuration's `[global]` (or its default),
/// even when the rest of the file does not validate (the daemon then says
/// why the reload is refused). `stop` then waits at most `wait` for the
/// daemon to exit, as `start-stop-daemon --retry` does: `fpmd stop && fpmd
/// …` starts the new daemon once the old one has let go of its sockets and
/// its pid file; exit 75 when it is still stopping.
pub fn control_running(
    path: &Path,
    options: &config::LoadOptions,
    request: Request,
    wait: Option<Duration>,
) -> ExitCode {
    let command = request.word();
    let socket = match control_socket_of(path, options) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fpmd: {command}: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match socket::call_naming_daemon(&socket, &request) {
        Ok((Answer::Ok(text), daemon)) => {
            if !text.is_empty() {
                println!("{text}");
            }
            let (Some(wait), Some(daemon)) = (wait.filter(|w| !w.is_zero()), daemon) else {
                return ExitCode::SUCCESS;
            };
            if crate::sys::procfs::wait_exit(&daemon.pidfd, wait) {
                return ExitCode::SUCCESS;
            }
            eprintln!(
                "fpmd: {command}: fpmd (pid {}) is still stopping after {} (its in-flight requests finish first); ask again, or send SIGTERM for a fast stop",
                daemon.pid,
                humantime::format_duration(wait)
            );
            ExitCode::from(EXIT_STILL_STOPPING)
        }
        Ok((Answer::ConfigError(text), _)) => {
            eprintln!("fpmd: {command} refused: {text}");
            ExitCode::from(EXIT_CONFIG)
        }
        Ok((Answer::Error(text), _)) => {
            eprintln!("fpmd: {command} failed: {text}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("fpmd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The control socket of the configuration at `path`: its
/// `global.control_socket` when the file loads, else read leniently from
/// its `[global]` table (a pool file may be the broken one a reload is
/// about to refuse: the daemon says why), else the default when the main
/// file sets none. Errors: the main file cannot be read or is not TOML, so
/// which daemon is meant cannot be told (guessing the default could reach
/// another fpmd): the load error, with file and line. A php-fpm `.conf` is
/// read leniently as the TOML it translates to. A relative path is
/// relative to the prefix (`-p`) when there is one, as in the daemon.
fn control_socket_of(path: &Path, options: &config::LoadOptions) -> Result<PathBuf, String> {
    let err = match config::load_with(path, options) {
        Ok(c) => return Ok(c.global.control_socket),
        Err(e) => e,
    };
    let text = if options.fpm_syntax || path.extension().is_some_and(|e| e == "conf") {
        config::translate(path, options).map_err(|e| e.to_string())?
    } else {
        std::fs::read_to_string(path).map_err(|_| err.to_string())?
    };
    let table = Some(text)
        .and_then(|t| t.parse::<toml::Table>().ok())
        .ok_or_else(|| err.to_string())?;
    let global = |key: &str| {
        table
            .get("global")
            .and_then(|g| g.get(key))
            .and_then(|s| s.as_str())
            .map(PathBuf::from)
    };
    let base = match &options.prefix {
        Some(prefix) => prefix.as_path(),
        None => path.parent().unwrap_or(Path::new(".")),
    };
    let resolve = |p: PathBuf| if p.is_relative() { base.join(p) } else { p };
    // -g is relative to the prefix, else to the working directory.
    let pid = match &options.pid {
        Some(p) => Some(match &options.prefix {
            Some(prefix) if p.is_relative() => prefix.join(p),
            _ => std::path::absolute(p).unwrap_or_else(|_| p.clone()),
        }),
        None => global("pid").map(resolve),
    };
    Ok(match global("control_socket") {
        Some(p) => resolve(p),
        None => config::paths::default_path(path, pid.as_deref()),
    })
}
