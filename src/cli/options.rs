//! From the command line to what every command needs: the parse, with
//! php-fpm's usage error; the [`config::LoadOptions`] the flags make; the
//! configuration file the flags and the defaults name.
//!
//! Must not touch: the daemon (this only reads the command line and the
//! file system).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::config;

use super::{parse_define, Cli, EXIT_USAGE, USAGE};

/// The command line, parsed. `-v`/`--version` and a command's `-h` print
/// and exit 0 here (clap's); a bad command line prints clap's first line
/// and [`USAGE`] on stderr, as php-fpm does, and is `Err` with exit 64.
pub fn parse() -> Result<Cli, ExitCode> {
    match Cli::try_parse() {
        Ok(cli) => Ok(cli),
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayVersion => e.exit(),
        // A command's -h/--help: its help on stdout, exit 0.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => e.exit(),
        Err(e) => {
            // As php-fpm: the usage on a bad command line, exit 64; its
            // first line is the usage's (php-src bug78323.phpt reads it),
            // what was wrong comes last.
            let text = e.to_string();
            eprint!("{USAGE}");
            eprintln!(
                "fpmd: {}",
                text.lines()
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("error: ")
            );
            Err(ExitCode::from(EXIT_USAGE))
        }
    }
}

/// The flags that change how the configuration loads: `-p`, `-c` naming a
/// php.ini, `-g`, `-R`, `-d`, `-n`, `-D`/`-F` (the last given wins, none:
/// the file's `daemonize`), `-O`, and `-y` naming php-fpm's syntax. Errors:
/// a `-d` with no name, printed with [`USAGE`] on stderr, exit 64.
pub fn load_options(cli: &Cli) -> Result<config::LoadOptions, ExitCode> {
    let php_defines = match cli.define.iter().map(|d| parse_define(d)).collect() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("fpmd: {e}");
            eprint!("{USAGE}");
            return Err(ExitCode::from(EXIT_USAGE));
        }
    };
    // `-c PATH`: the configuration, or php-fpm's php.ini (see `Cli::config`).
    let php_ini = cli.config.clone().filter(|p| !config::is_config_file(p));
    Ok(config::LoadOptions {
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
    })
}

/// The configuration file: `-y`, or `-c` naming a `.toml`/`.conf`, else with `-p` `PREFIX/etc/fpmd.toml`
/// then `PREFIX/etc/php-fpm.conf` (php-fpm's default under its prefix),
/// else [`config::paths::find_default_config`].
pub fn config_path(cli: &Cli) -> Option<PathBuf> {
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
