//! The `fpmd` binary: command line, configuration loading and the runtime.
//! Errors become messages and exit codes here, at the edge.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use fpmd::cli::{parse_define, Cli, Command, StatusArgs, EXIT_STILL_STOPPING, EXIT_USAGE, USAGE};
use fpmd::control::socket::Request;
use fpmd::{config, daemon, log, EXIT_CONFIG};

/// `fpmd status`: the view, one frame, or the JSON.
fn status(path: &std::path::Path, options: &config::LoadOptions, args: &StatusArgs) -> ExitCode {
    use fpmd::observe::top;
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
fn control_running(
    path: &std::path::Path,
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
    match fpmd::control::socket::call_naming_daemon(&socket, &request) {
        Ok((fpmd::control::socket::Answer::Ok(text), daemon)) => {
            if !text.is_empty() {
                println!("{text}");
            }
            let (Some(wait), Some(daemon)) = (wait.filter(|w| !w.is_zero()), daemon) else {
                return ExitCode::SUCCESS;
            };
            if fpmd::sys::procfs::wait_exit(&daemon.pidfd, wait) {
                return ExitCode::SUCCESS;
            }
            eprintln!(
                "fpmd: {command}: fpmd (pid {}) is still stopping after {} (its in-flight requests finish first); ask again, or send SIGTERM for a fast stop",
                daemon.pid,
                humantime::format_duration(wait)
            );
            ExitCode::from(EXIT_STILL_STOPPING)
        }
        Ok((fpmd::control::socket::Answer::ConfigError(text), _)) => {
            eprintln!("fpmd: {command} refused: {text}");
            ExitCode::from(EXIT_CONFIG)
        }
        Ok((fpmd::control::socket::Answer::Error(text), _)) => {
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
fn control_socket_of(
    path: &std::path::Path,
    options: &config::LoadOptions,
) -> Result<PathBuf, String> {
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
        None => path.parent().unwrap_or(std::path::Path::new(".")),
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

/// `fpmd help [COMMAND]`: [`USAGE`], or clap's help of the command, on
/// stdout (exit 0); an unknown command is a usage error (exit 64).
fn help(command: Option<&str>) -> ExitCode {
    use clap::CommandFactory;
    let Some(name) = command else {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    };
    let mut cli = Cli::command();
    // Built, so that the subcommands have the top level's settings (no
    // help flag of clap's beside their own).
    cli.build();
    match cli.find_subcommand_mut(name) {
        Some(sub) => {
            let text = sub.render_help();
            print!("{text}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("fpmd: help: no command named '{name}'");
            eprint!("{USAGE}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// The configuration file: `-y`, or `-c` naming a `.toml`/`.conf`, else with `-p` `PREFIX/etc/fpmd.toml`
/// then `PREFIX/etc/php-fpm.conf` (php-fpm's default under its prefix),
/// else [`config::paths::find_default_config`].
fn config_path(cli: &Cli) -> Option<PathBuf> {
    if let Some(c) = &cli.fpm_config {
        return Some(c.clone());
    }
    if let Some(c) = cli.config.as_ref().filter(|c| config::is_config_file(c)) {
        return Some(c.clone());
    }
    match &cli.prefix {
        Some(prefix) => ["etc/fpmd.toml", "etc/php-fpm.conf"]
            .iter()
            .map(|f| prefix.join(f))
            .find(|p| p.is_file()),
        None => config::paths::find_default_config(),
    }
}

/// `-i`/`-m`: php-cgi's PHP information or module list, as the first
/// pool's children would see it (its php_cgi and ini arguments, `-n` and
/// `-d` included); `php-cgi` on PATH with the command line's `-n`/`-d`
/// when there is no configuration. php-fpm prints the same of its own
/// PHP; php-cgi's `-i` is HTML, php-fpm's text. Replaces this process.
fn php_cgi_info(
    path: Option<&std::path::Path>,
    options: &config::LoadOptions,
    flag: &str,
) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let pool = path
        .and_then(|p| config::load_with(p, options).ok())
        .and_then(|c| c.pools.into_iter().next());
    let (program, args) = match pool {
        Some(p) => (p.php_cgi.clone(), p.ini_args()),
        None => {
            let mut args = Vec::new();
            if options.no_php_ini {
                args.push("-n".to_string());
            }
            for (name, value) in &options.php_defines {
                args.extend(["-d".to_string(), format!("{name}={value}")]);
            }
            (PathBuf::from("php-cgi"), args)
        }
    };
    let e = std::process::Command::new(&program)
        .args(&args)
        .args(["-q", flag])
        .exec();
    eprintln!("fpmd: cannot run {}: {e}", program.display());
    ExitCode::FAILURE
}

fn main() -> ExitCode {
    // Socket activation, before anything opens a file or starts a thread:
    // the fds from 3 are still systemd's, and the LISTEN_* variables are
    // removed from the environment (so no php-cgi child sees them). Every
    // other use of fpmd (-t, reload, status ...) closes them.
    let mut activated = fpmd::listen::transfer::systemd_listen_fds();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayVersion => e.exit(),
        // A command's -h/--help: its help on stdout, exit 0.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => e.exit(),
        Err(e) => {
            // As php-fpm: the usage on a bad command line, exit 64.
            let text = e.to_string();
            eprintln!(
                "fpmd: {}",
                text.lines()
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("error: ")
            );
            eprint!("{USAGE}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if cli.help {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if let Some(Command::Help { command, .. }) = &cli.command {
        return help(command.as_deref());
    }
    let php_defines = match cli.define.iter().map(|d| parse_define(d)).collect() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("fpmd: {e}");
            eprint!("{USAGE}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // `-c PATH`: the configuration, or php-fpm's php.ini (see `Cli::config`).
    let php_ini = cli.config.clone().filter(|p| !config::is_config_file(p));
    let options = config::LoadOptions {
        prefix: cli.prefix.clone(),
        php_ini,
        pid: cli.pid.clone(),
        allow_to_run_as_root: cli.allow_to_run_as_root,
        php_defines,
        no_php_ini: cli.no_php_ini,
        daemonize: match (cli.daemonize, cli.nodaemonize) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        },
        force_stderr: cli.force_stderr,
        fpm_syntax: cli
            .fpm_config
            .as_ref()
            .is_some_and(|f| f.extension().is_none_or(|e| e != "toml")),
    };
    if cli.info || cli.modules {
        let flag = if cli.info { "-i" } else { "-m" };
        return php_cgi_info(config_path(&cli).as_deref(), &options, flag);
    }
    if let Some(Command::Convert { file, .. }) = &cli.command {
        let Some(file) = file.clone().or_else(|| config_path(&cli)) else {
            // A command line short of its argument: php-fpm's usage error.
            eprintln!("fpmd: convert: give the php-fpm configuration: fpmd convert /etc/php/8.2/fpm/php-fpm.conf");
            return ExitCode::from(EXIT_USAGE);
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
    let Some(path) = config_path(&cli) else {
        eprintln!("fpmd: no configuration file: give one with -c, or create ./fpmd.toml or /etc/fpmd/fpmd.toml");
        return ExitCode::from(EXIT_CONFIG);
    };
    match &cli.command {
        None => {}
        Some(Command::Reload(_)) => return control_running(&path, &options, Request::Reload, None),
        Some(Command::Stop(args)) => {
            return control_running(&path, &options, Request::Stop, Some(args.timeout))
        }
        Some(Command::Upgrade(_)) => {
            return control_running(&path, &options, Request::Upgrade, None)
        }
        Some(Command::Status(args)) => return status(&path, &options, args),
        Some(Command::Convert { .. } | Command::Help { .. }) => unreachable!("handled above"),
    }
    let mut handover = match cli.upgrade_fd.map(fpmd::daemon::upgrade::Handover::from_fd) {
        None => None,
        Some(Ok(h)) => Some(h),
        Some(Err(e)) => {
            eprintln!("fpmd: --upgrade-fd: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = match config::load_with(&path, &options) {
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
            let (own, systemd) = fpmd::daemon::upgrade::split_handed(handed);
            activated.extend(systemd);
            own
        }
        Some(Err(e)) => {
            eprintln!("fpmd: cannot take the listening sockets over: {e}");
            return ExitCode::FAILURE;
        }
    };
    if cli.test > 0 {
        for n in &config.notices {
            eprintln!("fpmd: {n}");
        }
        for w in &config.warnings {
            eprintln!("fpmd: warning: {w}");
        }
        print!("{}", config.to_toml_with_origins());
        eprintln!(
            "fpmd: configuration file {} test is successful",
            path.display()
        );
        return ExitCode::SUCCESS;
    }
    let log = match log::init(
        &config.global.error_log,
        &config.global.log_level,
        config.global.log_format,
    ) {
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
    // php-fpm's daemonize: detach now, while only this thread runs; the
    // process started returns only once the daemon serves (or exits).
    let detached = if config.global.daemonize && handover.is_none() {
        if matches!(config.global.error_log, config::LogTarget::Stderr) {
            tracing::warn!("daemonize with error_log = \"stderr\": the log goes to /dev/null once fpmd serves; set error_log to a file");
        }
        match fpmd::daemon::detach::detach() {
            Ok(ready) => Some(ready),
            Err(e) => {
                eprintln!("fpmd: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    // A panic (a bug) goes to the error log, not to a stderr nobody reads;
    // the connection task it happened in logs its pool and peer.
    std::panic::set_hook(Box::new(|info| tracing::error!("panic: {info}")));
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    for n in &config.notices {
        tracing::info!("{n}");
    }
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
        match daemon::run(prepared, log, handover, detached).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("{e}");
                ExitCode::FAILURE
            }
        }
    })
}
