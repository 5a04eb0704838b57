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
/// nginx or Apache, configured with php-fpm's directive names. The flags
/// are php-fpm 8.2's (`fpm_main.c`); `-h` prints [`USAGE`].
#[derive(Parser, Debug)]
#[command(
    name = "fpmd",
    version,
    about,
    disable_version_flag = true,
    disable_help_flag = true,
    disable_help_subcommand = true
)]
struct Cli {
    /// Configuration file (default: ./fpmd.toml, then /etc/fpmd/fpmd.toml):
    /// fpmd's TOML, or php-fpm's configuration when it ends in `.conf`.
    /// A PATH that ends in neither `.toml` nor `.conf` (a php.ini file or a
    /// directory) is php-fpm's `-c`: the php.ini every pool's php-cgi reads
    /// unless the pool sets `php_ini`.
    #[arg(
        short = 'c',
        long = "config",
        visible_alias = "php-ini",
        value_name = "PATH",
        global = true
    )]
    config: Option<PathBuf>,
    /// php-fpm's configuration file (php-fpm's `-y`/`--fpm-config`): read
    /// as php-fpm's ini configuration whatever its name ends in, except
    /// `.toml` (fpmd's).
    #[arg(short = 'y', long = "fpm-config", value_name = "FILE", global = true)]
    fpm_config: Option<PathBuf>,
    /// Test the configuration, print the effective configuration, and exit
    /// (0 when valid, 78 when not). Given twice (`-tt`, as php-fpm), the same.
    #[arg(short = 't', long = "test", action = clap::ArgAction::Count)]
    test: u8,
    /// php-fpm's prefix: relative paths in the configuration are relative
    /// to DIR, and the default configuration is DIR/etc/fpmd.toml (then
    /// DIR/etc/php-fpm.conf).
    #[arg(short = 'p', long = "prefix", value_name = "DIR", global = true)]
    prefix: Option<PathBuf>,
    /// The pid file, instead of `[global] pid`.
    #[arg(short = 'g', long = "pid", value_name = "FILE")]
    pid: Option<PathBuf>,
    /// Stay in the foreground, whatever `daemonize` says.
    #[arg(short = 'F', long = "nodaemonize", overrides_with = "daemonize")]
    nodaemonize: bool,
    /// Detach (run in the background), whatever `daemonize` says.
    #[arg(short = 'D', long = "daemonize", overrides_with = "nodaemonize")]
    daemonize: bool,
    /// Log to stderr in the foreground, even when `error_log` is a file.
    #[arg(short = 'O', long = "force-stderr")]
    force_stderr: bool,
    /// Allow pools whose children run as root.
    #[arg(short = 'R', long = "allow-to-run-as-root")]
    allow_to_run_as_root: bool,
    /// An ini entry for every child (`-d foo=bar`, `-d foo` is `foo=1`);
    /// repeated.
    #[arg(short = 'd', long = "define", value_name = "foo[=bar]", action = clap::ArgAction::Append, global = true)]
    define: Vec<String>,
    /// The children read no php.ini (php-cgi -n).
    #[arg(short = 'n', long = "no-php-ini", global = true)]
    no_php_ini: bool,
    /// Print PHP's information (php-cgi -i of the first pool) and exit.
    #[arg(short = 'i', long = "info")]
    info: bool,
    /// Print PHP's compiled-in modules (php-cgi -m of the first pool) and exit.
    #[arg(short = 'm', long = "modules")]
    modules: bool,
    /// Accepted as php-fpm accepts it (extended information for debuggers);
    /// no effect.
    #[arg(short = 'e', hide = true)]
    _extended: bool,
    /// Print the version and exit.
    #[arg(short = 'v', short_alias = 'V', long = "version", action = clap::ArgAction::Version)]
    version: (),
    /// Print the usage and exit.
    #[arg(short = 'h', long = "help", short_alias = '?')]
    help: bool,
    /// Control the fpmd running with this configuration, over its control
    /// socket (none: run fpmd).
    #[command(subcommand)]
    command: Option<Command>,
    /// Internal: this process replaces the fpmd that started it (binary
    /// upgrade); the fd is its end of the hand-over socket.
    #[arg(long = "upgrade-fd", hide = true)]
    upgrade_fd: Option<i32>,
}

/// `-h`/`--help` of a command: its help on stdout, exit 0 (the top
/// level's `-h` is php-fpm's usage, [`USAGE`], and turns clap's own flag
/// off for every command).
#[derive(Args, Debug)]
struct HelpFlag {
    /// Print this command's help and exit.
    #[arg(short = 'h', long = "help", action = clap::ArgAction::Help)]
    help: Option<bool>,
}

/// What to ask the running fpmd.
#[derive(Subcommand, Debug)]
enum Command {
    /// Reload the configuration: waits until the new one is in force;
    /// exits 78 printing why when it does not validate.
    Reload(HelpFlag),
    /// Graceful stop (as SIGQUIT): no new connections, in-flight requests
    /// finish; waits until the daemon has exited (--timeout).
    Stop(StopArgs),
    /// Show the pools and their children: a view that refreshes itself on
    /// a terminal (q or Ctrl-C quits), one frame when stdout is not a
    /// terminal or with --once, the daemon's JSON with --json.
    Status(StatusArgs),
    /// Start the fpmd binary now on disk and hand it the sockets; the old
    /// process drains and exits.
    Upgrade(HelpFlag),
    /// Print a php-fpm configuration (FILE.conf and what it includes) as
    /// one fpmd TOML document, each value's php-fpm file, line and
    /// directive in a comment; exits 78 printing why when it does not load.
    Convert {
        /// The php-fpm configuration (default: the -c/-y file).
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
        #[command(flatten)]
        help: HelpFlag,
    },
    /// Print the usage of fpmd, or of a command.
    Help {
        /// The command (none: fpmd's usage).
        #[arg(value_name = "COMMAND")]
        command: Option<String>,
        #[command(flatten)]
        flag: HelpFlag,
    },
}

/// `fpmd stop [--timeout D]`.
#[derive(Args, Debug)]
struct StopArgs {
    /// How long to wait for the daemon to exit (in-flight requests finish
    /// first): "60s", "2m", or seconds; 0: do not wait. Past it, exit 75
    /// with the daemon still stopping.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_timeout)]
    timeout: Duration,
    #[command(flatten)]
    help: HelpFlag,
}

/// `--timeout`: a number of seconds or a duration such as "2m"; 0 allowed.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Ok(Duration::from_secs_f64(secs)),
        Ok(_) => Err("not a duration".into()),
        Err(_) => humantime::parse_duration(text.trim()).map_err(|e| e.to_string()),
    }
}

/// `fpmd stop` gave up waiting for the daemon to exit (`EX_TEMPFAIL`: it is
/// still stopping; ask again).
const EXIT_STILL_STOPPING: u8 = 75;

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
    #[command(flatten)]
    help: HelpFlag,
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
    match fpmd::ctl::call_naming_daemon(&socket, &request) {
        Ok((fpmd::ctl::Answer::Ok(text), daemon)) => {
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
        Ok((fpmd::ctl::Answer::ConfigError(text), _)) => {
            eprintln!("fpmd: {command} refused: {text}");
            ExitCode::from(EXIT_CONFIG)
        }
        Ok((fpmd::ctl::Answer::Error(text), _)) => {
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

/// What `-h` prints (on stdout, exit 0) and an unknown option prints (on
/// stderr, exit 64): php-fpm 8.2's usage (`fpm_main.c`, `php_cgi_usage`)
/// with fpmd's names, then fpmd's commands.
const USAGE: &str = "\
Usage: fpmd [-n] [-e] [-h] [-i] [-m] [-v] [-t] [-p <prefix>] [-g <pid>] [-c <file>] [-d foo[=bar]] [-y <file>] [-D] [-F [-O]] [-R]
       fpmd [-c <file>] reload|upgrade
       fpmd [-c <file>] stop [--timeout 60s]
       fpmd [-c <file>] status [POOL] [--json] [--once] [--interval 1s]
       fpmd convert [php-fpm.conf]
       fpmd help [COMMAND]
  -c, -y, --fpm-config <file>
                   Specify alternative path to fpmd's configuration file
                   (default: ./fpmd.toml, then /etc/fpmd/fpmd.toml).
  -n               No php.ini file will be used (the children's php-cgi -n)
  -d foo[=bar]     Define INI entry foo with value 'bar' (for every child)
  -e               Accepted, as php-fpm (no effect)
  -h, --help       This help
  -i               PHP information (php-cgi -i of the first pool)
  -m               Show compiled in modules (php-cgi -m of the first pool)
  -v, --version    Version number
  -p, --prefix <dir>
                   Specify alternative prefix path: relative paths in the
                   configuration, and its default <dir>/etc/fpmd.toml.
  -g, --pid <file>
                   Specify the PID file location.
  -t, --test       Test the configuration, print it and exit (0, or 78)
  -D, --daemonize  force to run in background, and ignore daemonize option from config file
  -F, --nodaemonize
                   force to stay in foreground, and ignore daemonize option from config file
  -O, --force-stderr
                   force output to stderr in nodaemonize even if error_log is a file
  -R, --allow-to-run-as-root
                   Allow pool to run as root (disabled by default)
Commands (to the fpmd running with this configuration):
  reload           Reload the configuration (exit 78 when it does not validate)
  stop             Graceful stop (as SIGQUIT); waits until fpmd has exited
                   (exit 75 when it still stops after --timeout)
  upgrade          Start the fpmd binary now on disk in place of the running one
  status           The pools and their children, live
Other commands:
  convert          Print a php-fpm configuration as fpmd's TOML
  help             This help, or a command's (fpmd help status)
Every command takes -h/--help.
";

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

/// php-fpm's exit status for a bad command line (`EX_USAGE`).
const EXIT_USAGE: u8 = 64;

/// `-d foo=bar` → `(foo, bar)`, `-d foo` → `(foo, 1)`, as PHP's
/// `cgi_main.c` defines a command-line ini entry. Errors: an empty name.
fn parse_define(text: &str) -> Result<(String, String), String> {
    let (name, value) = text.split_once('=').unwrap_or((text, "1"));
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("-d {text:?}: no ini name"));
    }
    Ok((name.to_string(), value.to_string()))
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
    let mut handover = match cli.upgrade_fd.map(fpmd::upgrade::Handover::from_fd) {
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
        match fpmd::detach::detach() {
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
        let intents = match control::intents() {
            Ok(i) => i,
            Err(e) => {
                eprintln!("fpmd: cannot install signal handlers: {e}");
                return ExitCode::FAILURE;
            }
        };
        match daemon::run(prepared, intents, log, handover, detached).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("{e:#}");
                ExitCode::FAILURE
            }
        }
    })
}
