//! The `fpmd` binary: command line, configuration loading and the runtime.
//! Errors become messages and exit codes here, at the edge.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use fpmd::ctl::Request;
use fpmd::{config, control, daemon, log, EXIT_CONFIG};

#[cfg(test)]
mod man_pages;

/// FastCGI process manager for PHP: runs stock php-cgi children behind
/// nginx or Apache, configured with php-fpm's directive names.
#[derive(Parser, Debug)]
#[command(name = "fpmd", version, about, disable_version_flag = true)]
struct Cli {
    /// Configuration file (default: ./fpmd.toml, then /etc/fpmd/fpmd.toml).
    /// `-y`/`--fpm-config` is accepted too, as php-fpm spells it.
    #[arg(
        short = 'c',
        long = "config",
        value_name = "FILE",
        visible_short_alias = 'y',
        visible_alias = "fpm-config",
        global = true
    )]
    config: Option<PathBuf>,
    /// Test the configuration, print the effective configuration, and exit
    /// (0 when valid, 78 when not). Given twice (`-tt`, as php-fpm), the same.
    #[arg(short = 't', long = "test", action = clap::ArgAction::Count)]
    test: u8,
    /// Stay in the foreground: accepted for php-fpm compatibility; fpmd
    /// always runs in the foreground (use systemd or another supervisor).
    #[arg(short = 'F', long = "nodaemonize")]
    _foreground: bool,
    /// Print the version and exit.
    #[arg(short = 'v', short_alias = 'V', long = "version", action = clap::ArgAction::Version)]
    version: (),
    /// Control the fpmd running with this configuration, over its control
    /// socket (none: run fpmd).
    #[command(subcommand)]
    command: Option<Command>,
    /// Internal: this process replaces the fpmd that started it (binary
    /// upgrade); the fd is its end of the hand-over socket.
    #[arg(long = "upgrade-fd", hide = true)]
    upgrade_fd: Option<i32>,
}

/// What to ask the running fpmd.
#[derive(Subcommand, Debug)]
enum Command {
    /// Reload the configuration: waits until the new one is in force;
    /// exits 78 printing why when it does not validate.
    Reload,
    /// Graceful stop (as SIGQUIT): no new connections, in-flight requests
    /// finish.
    Stop,
    /// Show the pools and their children: a view that refreshes itself on
    /// a terminal (q or Ctrl-C quits), one frame when stdout is not a
    /// terminal or with --once, the daemon's JSON with --json.
    Status(StatusArgs),
    /// Start the fpmd binary now on disk and hand it the sockets; the old
    /// process drains and exits.
    Upgrade,
}

/// `fpmd status [POOL] [--json] [--once] [--interval D]`.
#[derive(Args, Debug)]
struct StatusArgs {
    /// Only this pool.
    #[arg(value_name = "POOL")]
    pool: Option<String>,
    /// Print the daemon's status document (JSON: `fpmd` and `pools`, each
    /// pool as php-fpm's `?json&full` page) once and exit.
    #[arg(long)]
    json: bool,
    /// Print one frame of the view and exit (also when stdout is not a
    /// terminal).
    #[arg(long)]
    once: bool,
    /// How often the view refreshes: "1s", "500ms", or seconds (at least
    /// 100 ms).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_interval)]
    interval: Duration,
}

/// `--interval`: a number of seconds or a duration such as "500ms".
fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = match text.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Duration::from_secs_f64(secs),
        Ok(_) => return Err("not a duration".into()),
        Err(_) => humantime::parse_duration(text.trim()).map_err(|e| e.to_string())?,
    };
    if d < Duration::from_millis(100) {
        return Err("at least 100ms".into());
    }
    Ok(d)
}

/// `fpmd status`: the view, one frame, or the JSON.
fn status(path: &std::path::Path, args: &StatusArgs) -> ExitCode {
    use fpmd::observe::top;
    let socket = match control_socket_of(path) {
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
/// why the reload is refused).
fn control_running(path: &std::path::Path, request: Request) -> ExitCode {
    let command = request.word();
    let socket = match control_socket_of(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fpmd: {command}: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match fpmd::ctl::call(&socket, &request) {
        Ok(fpmd::ctl::Answer::Ok(text)) => {
            if !text.is_empty() {
                println!("{text}");
            }
            ExitCode::SUCCESS
        }
        Ok(fpmd::ctl::Answer::ConfigError(text)) => {
            eprintln!("fpmd: {command} refused: {text}");
            ExitCode::from(EXIT_CONFIG)
        }
        Ok(fpmd::ctl::Answer::Error(text)) => {
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
/// another fpmd): the load error, with file and line.
fn control_socket_of(path: &std::path::Path) -> Result<PathBuf, String> {
    let err = match config::load(path) {
        Ok(c) => return Ok(c.global.control_socket),
        Err(e) => e,
    };
    let table = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .ok_or_else(|| err.to_string())?;
    let set = table
        .get("global")
        .and_then(|g| g.get("control_socket"))
        .and_then(|s| s.as_str())
        .map(PathBuf::from);
    Ok(match set {
        Some(p) if p.is_relative() => path.parent().unwrap_or(std::path::Path::new(".")).join(p),
        Some(p) => p,
        None => fpmd::ctl::default_path(path),
    })
}

fn main() -> ExitCode {
    // Socket activation, before anything opens a file or starts a thread:
    // the fds from 3 are still systemd's, and the LISTEN_* variables are
    // removed from the environment (so no php-cgi child sees them). Every
    // other use of fpmd (-t, reload, status ...) closes them.
    let mut activated = fpmd::listen::transfer::systemd_listen_fds();
    let cli = Cli::parse();
    let Some(path) = cli.config.clone().or_else(config::find_default_config) else {
        eprintln!("fpmd: no configuration file: give one with -c, or create ./fpmd.toml or /etc/fpmd/fpmd.toml");
        return ExitCode::from(EXIT_CONFIG);
    };
    match &cli.command {
        None => {}
        Some(Command::Reload) => return control_running(&path, Request::Reload),
        Some(Command::Stop) => return control_running(&path, Request::Stop),
        Some(Command::Upgrade) => return control_running(&path, Request::Upgrade),
        Some(Command::Status(args)) => return status(&path, args),
    }
    let mut handover = match cli.upgrade_fd.map(fpmd::upgrade::Handover::from_fd) {
        None => None,
        Some(Ok(h)) => Some(h),
        Some(Err(e)) => {
            eprintln!("fpmd: --upgrade-fd: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = match config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fpmd: {e}");
            if let Some(h) = handover.take() {
                h.refuse(&e.to_string());
            }
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let inherited = match handover.as_mut().map(|h| h.accept()) {
        None => Vec::new(),
        Some(Ok(handed)) => {
            // systemd's sockets, as if systemd had passed them here.
            let (own, systemd) = fpmd::upgrade::split_handed(handed);
            activated.extend(systemd);
            own
        }
        Some(Err(e)) => {
            eprintln!("fpmd: cannot take the listening sockets over: {e}");
            return ExitCode::FAILURE;
        }
    };
    if cli.test > 0 {
        print!("{}", config.to_toml_with_origins());
        eprintln!(
            "fpmd: configuration file {} test is successful",
            path.display()
        );
        return ExitCode::SUCCESS;
    }
    let log = match log::init(&config.global.error_log, &config.global.log_level) {
        Ok(l) => l,
        Err(e) => {
            let path = match &config.global.error_log {
                config::LogTarget::File(p) => p.display().to_string(),
                config::LogTarget::Stderr => "stderr".into(),
            };
            eprintln!(
                "fpmd: {}: key 'global.error_log': cannot open {path}: {e}",
                config.file.display()
            );
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    // A panic (a bug) goes to the error log, not to a stderr nobody reads;
    // the connection task it happened in logs its pool and peer.
    std::panic::set_hook(Box::new(|info| tracing::error!("panic: {info}")));
    // One thread: the FastCGI hop is I/O-bound, and on small machines the
    // cores belong to php-cgi and the web server.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fpmd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let prepared = match daemon::prepare_inherited(config, inherited, activated) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("{e}");
                eprintln!("fpmd: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        };
        let intents = match control::intents() {
            Ok(i) => i,
            Err(e) => {
                eprintln!("fpmd: cannot install signal handlers: {e}");
                return ExitCode::FAILURE;
            }
        };
        match daemon::run(prepared, intents, log, handover).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("{e:#}");
                ExitCode::FAILURE
            }
        }
    })
}
