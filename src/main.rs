//! The `fpmd` binary: command line, configuration loading and the runtime.
//! Errors become messages and exit codes here, at the edge.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use fpmd::ctl::Request;
use fpmd::{config, control, daemon, log, EXIT_CONFIG};

/// FastCGI process manager for PHP: runs stock php-cgi children behind
/// nginx or Apache, configured with php-fpm's directive names.
#[derive(Parser, Debug)]
#[command(name = "fpmd", version, about, disable_version_flag = true)]
struct Cli {
    /// Configuration file (default: ./fpmd.toml, then /etc/fpmd/fpmd.toml):
    /// fpmd's TOML, or php-fpm's configuration when it ends in `.conf`.
    /// A PATH that ends in neither `.toml` nor `.conf` (a php.ini file or a
    /// directory) is php-fpm's `-c`: the php.ini every pool's php-cgi reads
    /// unless the pool sets `php_ini`.
    #[arg(short = 'c', long = "config", value_name = "PATH", global = true)]
    config: Option<PathBuf>,
    /// php-fpm's configuration file (php-fpm's `-y`/`--fpm-config`): the
    /// same as `-c FILE`.
    #[arg(short = 'y', long = "fpm-config", value_name = "FILE", global = true)]
    fpm_config: Option<PathBuf>,
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
    /// Print a php-fpm configuration (FILE.conf and what it includes) as
    /// one fpmd TOML document, each value's php-fpm file, line and
    /// directive in a comment; exits 78 printing why when it does not load.
    Convert {
        /// The php-fpm configuration (default: the -c/-y file).
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
    },
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
/// another fpmd): the load error, with file and line. A php-fpm `.conf` is
/// read leniently as the TOML it translates to.
fn control_socket_of(path: &std::path::Path) -> Result<PathBuf, String> {
    let err = match config::load(path) {
        Ok(c) => return Ok(c.global.control_socket),
        Err(e) => e,
    };
    let text = if path.extension().is_some_and(|e| e == "conf") {
        config::translate(path, &config::LoadOptions::default()).map_err(|e| e.to_string())?
    } else {
        std::fs::read_to_string(path).map_err(|_| err.to_string())?
    };
    let table = Some(text)
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
    let cli = Cli::parse();
    // `-c PATH`: the configuration, or php-fpm's php.ini (see `Cli::config`).
    let (config_arg, php_ini) = match cli.config.clone() {
        Some(p) if !config::is_config_file(&p) => (None, Some(p)),
        other => (other, None),
    };
    let options = config::LoadOptions {
        prefix: None,
        php_ini,
    };
    if let Some(Command::Convert { file }) = &cli.command {
        let Some(file) = file.clone().or(cli.fpm_config.clone()).or(config_arg) else {
            eprintln!("fpmd: convert: give the php-fpm configuration: fpmd convert /etc/php/8.2/fpm/php-fpm.conf");
            return ExitCode::from(EXIT_CONFIG);
        };
        return match config::convert(&file, &options) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("fpmd: {e}");
                ExitCode::from(EXIT_CONFIG)
            }
        };
    }
    let Some(path) = cli
        .fpm_config
        .clone()
        .or(config_arg)
        .or_else(config::find_default_config)
    else {
        eprintln!("fpmd: no configuration file: give one with -c, or create ./fpmd.toml or /etc/fpmd/fpmd.toml");
        return ExitCode::from(EXIT_CONFIG);
    };
    match &cli.command {
        None => {}
        Some(Command::Reload) => return control_running(&path, Request::Reload),
        Some(Command::Stop) => return control_running(&path, Request::Stop),
        Some(Command::Upgrade) => return control_running(&path, Request::Upgrade),
        Some(Command::Status(args)) => return status(&path, args),
        Some(Command::Convert { .. }) => unreachable!("handled above"),
    }
    let mut handover = match cli.upgrade_fd.map(fpmd::upgrade::Handover::from_fd) {
        None => None,
        Some(Ok(h)) => Some(h),
        Some(Err(e)) => {
            eprintln!("fpmd: --upgrade-fd: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = match config::load_with_options(&path, &options) {
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
        for n in &config.notices {
            eprintln!("fpmd: {n}");
        }
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
    for n in &config.notices {
        tracing::info!("{n}");
    }
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
