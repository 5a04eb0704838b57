//! The `fpmd` binary: command line, configuration loading and the runtime.
//! Errors become messages and exit codes here, at the edge.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use fpmd::{config, control, daemon, log, EXIT_CONFIG};

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
        visible_alias = "fpm-config"
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
    /// socket: `reload` (waits until the new configuration is in force;
    /// exits 78 printing why when it does not validate), `stop` (graceful),
    /// `status`, `upgrade` (starts the fpmd binary now on disk, hands it
    /// the sockets; the old process drains and exits).
    #[arg(value_name = "COMMAND", value_parser = ["reload", "stop", "status", "upgrade"])]
    command: Option<String>,
    /// Internal: this process replaces the fpmd that started it (binary
    /// upgrade); the fd is its end of the hand-over socket.
    #[arg(long = "upgrade-fd", hide = true)]
    upgrade_fd: Option<i32>,
}

/// `fpmd -c FILE reload|stop|status`: asks the running daemon. The control
/// socket is found from the configuration's `[global]` (or its default),
/// even when the rest of the file does not validate (the daemon then says
/// why the reload is refused).
fn control_running(path: &std::path::Path, command: &str) -> ExitCode {
    let Some(request) = fpmd::ctl::Request::parse(command) else {
        eprintln!("fpmd: unknown command {command:?}");
        return ExitCode::from(64);
    };
    let socket = control_socket_of(path);
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
/// its `[global]` table (the file may be the broken one a reload is about
/// to refuse), else the default.
fn control_socket_of(path: &std::path::Path) -> PathBuf {
    if let Ok(c) = config::load(path) {
        return c.global.control_socket;
    }
    let set = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .and_then(|t| {
            t.get("global")?
                .get("control_socket")?
                .as_str()
                .map(PathBuf::from)
        });
    match set {
        Some(p) if p.is_relative() => path.parent().unwrap_or(std::path::Path::new(".")).join(p),
        Some(p) => p,
        None => fpmd::ctl::default_path(path),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(path) = cli.config.clone().or_else(config::find_default_config) else {
        eprintln!("fpmd: no configuration file: give one with -c, or create ./fpmd.toml or /etc/fpmd/fpmd.toml");
        return ExitCode::from(EXIT_CONFIG);
    };
    if let Some(command) = &cli.command {
        return control_running(&path, command);
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
        Some(Ok(fds)) => fds,
        Some(Err(e)) => {
            eprintln!("fpmd: cannot take the listening sockets over: {e}");
            return ExitCode::FAILURE;
        }
    };
    if cli.test > 0 {
        print!("{}", config.to_toml());
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
        let prepared = match daemon::prepare_inherited(config, inherited) {
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
