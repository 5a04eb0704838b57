//! The `fpmd` binary: the command line's table of contents. Each command
//! other than running the daemon is one function of [`fpmd::cli`]; the
//! daemon starts here, in [`start_daemon`]. Errors become messages and exit
//! codes here, at the edge.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::ExitCode;

use fpmd::cli::{self, Cli, Command, USAGE};
use fpmd::control::socket::Request;
use fpmd::{config, daemon, log, EXIT_CONFIG};

fn main() -> ExitCode {
    // Socket activation, before anything opens a file or starts a thread:
    // the fds from 3 are still systemd's, and the LISTEN_* variables are
    // removed from the environment (so no php-cgi child sees them). Every
    // other use of fpmd (-t, reload, status ...) closes them.
    let activated = fpmd::listen::transfer::systemd_listen_fds();
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    if cli.help {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if let Some(Command::Help { command, .. }) = &cli.command {
        return cli::help(command.as_deref());
    }
    let options = match cli::load_options(&cli) {
        Ok(o) => o,
        Err(code) => return code,
    };
    if cli.version {
        return cli::version(cli::config_path(&cli).as_deref(), &options);
    }
    if cli.info || cli.modules {
        let flag = if cli.info { "-i" } else { "-m" };
        return cli::php_cgi_info(cli::config_path(&cli).as_deref(), &options, flag);
    }
    if let Some(Command::Convert { file, .. }) = &cli.command {
        return cli::convert(&cli, file.as_ref(), &options);
    }
    let Some(path) = cli::config_path(&cli) else {
        eprintln!("fpmd: no configuration file: give one with -c, or create ./fpmd.toml or /etc/fpmd/fpmd.toml");
        return ExitCode::from(EXIT_CONFIG);
    };
    match &cli.command {
        None => {}
        Some(Command::Reload(_)) => {
            return cli::control_running(&path, &options, Request::Reload, None)
        }
        Some(Command::Stop(args)) => {
            return cli::control_running(&path, &options, Request::Stop, Some(args.timeout))
        }
        Some(Command::Upgrade(_)) => {
            return cli::control_running(&path, &options, Request::Upgrade, None)
        }
        Some(Command::Status(args)) => return cli::status(&path, &options, args),
        Some(Command::Convert { .. } | Command::Help { .. }) => unreachable!("handled above"),
    }
    start_daemon(&cli, path, options, activated)
}

/// `fpmd [-t] …` with no command: loads the configuration at `path` (or
/// takes it over from the fpmd that started this one, `--upgrade-fd`),
/// prints it and exits with `-t`, else opens the log, detaches when
/// `daemonize` says so, and runs the daemon on one thread until it stops.
/// `activated`: systemd's sockets. Exit 78 when the configuration does not
/// load or its error log cannot be opened, 1 when the daemon cannot start
/// or fails.
fn start_daemon(
    cli: &Cli,
    path: PathBuf,
    options: config::LoadOptions,
    mut activated: Vec<(String, OwnedFd)>,
) -> ExitCode {
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
        Err(e) if config::is_php_fpm_config(&path, &options) => {
            for (level, line) in e.php_fpm_lines(&path) {
                eprintln!("{}", log::php_fpm_stderr_line(level.as_str(), &line));
            }
            if let Some(h) = handover.take() {
                h.refuse(&e.to_string());
            }
            return ExitCode::from(EXIT_CONFIG);
        }
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
    if cli.test > 0 && config::is_php_fpm_config(&path, &options) {
        // php-fpm's words: its notices, -tt's dump, its verdict.
        for n in &config.notices {
            eprintln!("{}", log::php_fpm_stderr_line(config::notice_level(n), n));
        }
        for w in &config.warnings {
            eprintln!("{}", log::php_fpm_stderr_line("WARNING", w));
        }
        if cli.test > 1 {
            for line in config::php_fpm_dump(&config) {
                eprintln!("{}", log::php_fpm_stderr_line("NOTICE", &line));
            }
        }
        // fpmd's own reading, on stdout (php-fpm writes nothing there).
        print!("{}", config.to_toml_with_origins());
        eprintln!(
            "{}",
            log::php_fpm_stderr_line(
                "NOTICE",
                &format!("configuration file {} test is successful", path.display())
            )
        );
        return ExitCode::SUCCESS;
    }
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
    log::set_limit(config.global.log_limit);
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
    config::log_notices(&config.notices);
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
    let php_fpm_log = config.global.log_format == config::LogFormat::PhpFpm;
    let log_on_stderr = matches!(config.global.error_log, config::LogTarget::Stderr);
    runtime.block_on(async {
        let prepared = match daemon::prepare_inherited(config, inherited, activated) {
            Ok(p) => p,
            Err(e) => {
                match (&e, php_fpm_log) {
                    // php-fpm's lines (fpm_sockets.c, then fpm.c's fpm_init).
                    (daemon::PrepareError::Bind(b), true) => {
                        tracing::error!("{}", b.php_fpm_line());
                        tracing::error!("FPM initialization failed");
                    }
                    _ => tracing::error!("{e}"),
                }
                if !log_on_stderr {
                    eprintln!("fpmd: {e}");
                }
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
