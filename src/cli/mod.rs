//! fpmd's command line: php-fpm 8.2's flags (`fpm_main.c`) and fpmd's
//! commands, as clap parses them ([`Cli`]), the usage text `-h` prints
//! ([`USAGE`]) and the exit statuses of a usage error and of a `stop` that
//! gave up waiting; and what each command other than running the daemon
//! does, one function each, which `main.rs` calls:
//!
//! | command | function |
//! | --- | --- |
//! | the parse, `-c`/`-y`/`-p`/`-d`… | [`parse`], [`load_options`], [`config_path`] (`options.rs`) |
//! | `-h`, `fpmd help [COMMAND]` | [`help`] (`help.rs`) |
//! | `-i`, `-m` | [`php_cgi_info`] (`php_info.rs`) |
//! | `fpmd convert [FILE]` | [`convert`] (`convert.rs`) |
//! | `fpmd reload\|stop\|upgrade` | [`control_running`] (`running.rs`) |
//! | `fpmd status` | [`status`] (`running.rs`) |
//!
//! Must not touch: the daemon (these read the command line and the files,
//! print, or ask the running daemon over its control socket).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

mod convert;
mod help;
#[cfg(test)]
mod man_pages;
mod options;
mod php_info;
mod running;

pub use convert::convert;
pub use help::help;
pub use options::{config_path, load_options, parse};
pub use php_info::{php_cgi_info, version};
pub use running::{control_running, status};

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
pub struct Cli {
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
    pub config: Option<PathBuf>,
    /// php-fpm's configuration file (php-fpm's `-y`/`--fpm-config`): read
    /// as php-fpm's ini configuration whatever its name ends in, except
    /// `.toml` (fpmd's).
    #[arg(short = 'y', long = "fpm-config", value_name = "FILE", global = true)]
    pub fpm_config: Option<PathBuf>,
    /// Test the configuration, print the effective configuration, and exit
    /// (0 when valid, 78 when not). Given twice (`-tt`, as php-fpm), the same.
    #[arg(short = 't', long = "test", action = clap::ArgAction::Count)]
    pub test: u8,
    /// php-fpm's prefix: relative paths in the configuration are relative
    /// to DIR, and the default configuration is DIR/etc/fpmd.toml (then
    /// DIR/etc/php-fpm.conf).
    #[arg(short = 'p', long = "prefix", value_name = "DIR", global = true)]
    pub prefix: Option<PathBuf>,
    /// The pid file, instead of `[global] pid`.
    #[arg(short = 'g', long = "pid", value_name = "FILE")]
    pub pid: Option<PathBuf>,
    /// Stay in the foreground, whatever `daemonize` says.
    #[arg(short = 'F', long = "nodaemonize", overrides_with = "daemonize")]
    pub nodaemonize: bool,
    /// Detach (run in the background), whatever `daemonize` says.
    #[arg(short = 'D', long = "daemonize", overrides_with = "nodaemonize")]
    pub daemonize: bool,
    /// Log to stderr in the foreground, even when `error_log` is a file.
    #[arg(short = 'O', long = "force-stderr")]
    pub force_stderr: bool,
    /// Allow pools whose children run as root.
    #[arg(short = 'R', long = "allow-to-run-as-root")]
    pub allow_to_run_as_root: bool,
    /// An ini entry for every child (`-d foo=bar`, `-d foo` is `foo=1`);
    /// repeated.
    #[arg(short = 'd', long = "define", value_name = "foo[=bar]", action = clap::ArgAction::Append, global = true)]
    pub define: Vec<String>,
    /// The children read no php.ini (php-cgi -n).
    #[arg(short = 'n', long = "no-php-ini", global = true)]
    pub no_php_ini: bool,
    /// Print PHP's information (php-cgi -i of the first pool) and exit.
    #[arg(short = 'i', long = "info")]
    pub info: bool,
    /// Print PHP's compiled-in modules (php-cgi -m of the first pool) and exit.
    #[arg(short = 'm', long = "modules")]
    pub modules: bool,
    /// Accepted as php-fpm accepts it (extended information for debuggers);
    /// no effect.
    #[arg(short = 'e', hide = true)]
    pub _extended: bool,
    /// Print the version and exit: php-fpm's `-v` (PHP's version, as the
    /// first pool's php-cgi says it) naming fpmd and its version.
    #[arg(short = 'v', short_alias = 'V', long = "version")]
    pub version: bool,
    /// Print the usage and exit.
    #[arg(short = 'h', long = "help", short_alias = '?')]
    pub help: bool,
    /// Control the fpmd running with this configuration, over its control
    /// socket (none: run fpmd).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Internal: this process replaces the fpmd that started it (binary
    /// upgrade); the fd is its end of the hand-over socket.
    #[arg(long = "upgrade-fd", hide = true)]
    pub upgrade_fd: Option<i32>,
}

/// `-h`/`--help` of a command: its help on stdout, exit 0 (the top
/// level's `-h` is php-fpm's usage, [`USAGE`], and turns clap's own flag
/// off for every command).
#[derive(Args, Debug)]
pub struct HelpFlag {
    /// Print this command's help and exit.
    #[arg(short = 'h', long = "help", action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

/// What to ask the running fpmd.
#[derive(Subcommand, Debug)]
pub enum Command {
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
pub struct StopArgs {
    /// How long to wait for the daemon to exit (in-flight requests finish
    /// first): "60s", "2m", or seconds; 0: do not wait. Past it, exit 75
    /// with the daemon still stopping.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_timeout)]
    pub timeout: Duration,
    #[command(flatten)]
    pub help: HelpFlag,
}

/// `--timeout`: a number of seconds or a duration such as "2m"; 0 allowed.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Ok(Duration::from_secs_f64(secs)),
        Ok(_) => Err("not a duration".into()),
        Err(_) => humantime::parse_duration(text.trim()).map_err(|e| e.to_string()),
    }
}

/// `fpmd stop` gave up waiting for the daemon to exit (`EX_TEMPFAIL`: it is
/// still stopping; ask again).
pub const EXIT_STILL_STOPPING: u8 = 75;

/// `fpmd status [POOL] [--json] [--once] [--interval D]`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Only this pool.
    #[arg(value_name = "POOL")]
    pub pool: Option<String>,
    /// Print the daemon's status document (JSON: `fpmd` and `pools`, each
    /// pool as php-fpm's `?json&full` page) once and exit.
    #[arg(long)]
    pub json: bool,
    /// Print one frame of the view and exit (also when stdout is not a
    /// terminal).
    #[arg(long)]
    pub once: bool,
    /// How often the view refreshes: "1s", "500ms", or seconds (at least
    /// 100 ms).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    #[command(flatten)]
    pub help: HelpFlag,
}

/// `--interval`: a number of seconds or a duration such as "500ms".
pub fn parse_interval(text: &str) -> Result<Duration, String> {
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

/// What `-h` prints (on stdout, exit 0) and an unknown option prints (on
/// stderr, exit 64): php-fpm 8.2's usage (`fpm_main.c`, `php_cgi_usage`)
/// with fpmd's names, then fpmd's commands.
pub const USAGE: &str = "\
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

/// php-fpm's exit status for a bad command line (`EX_USAGE`).
pub const EXIT_USAGE: u8 = 64;

/// `-d foo=bar` → `(foo, bar)`, `-d foo` → `(foo, 1)`, as PHP's
/// `cgi_main.c` defines a command-line ini entry. Errors: an empty name.
pub fn parse_define(text: &str) -> Result<(String, String), String> {
    let (name, value) = text.split_once('=').unwrap_or((text, "1"));
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("-d {text:?}: no ini name"));
    }
    Ok((name.to_string(), value.to_string()))
}
