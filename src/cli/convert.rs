//! `fpmd convert [FILE]`: a php-fpm configuration printed as fpmd's TOML.
//!
//! Must not touch: the daemon (this only reads the files and prints).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::{self, EXIT_CONFIG};

use super::{config_path, Cli, EXIT_USAGE};

/// `fpmd convert [FILE]`: `file`, else the configuration file of `cli`
/// ([`config_path`]: `-c`/`-y`, or the default), translated by
/// [`config::convert`] and printed on stdout (exit 0). No file at all is
/// php-fpm's usage error (exit 64); a file that does not load prints why
/// (exit 78).
pub fn convert(cli: &Cli, file: Option<&PathBuf>, options: &config::LoadOptions) -> ExitCode {
    let Some(file) = file.cloned().or_else(|| config_path(cli)) else {
        // A command line short of its argument: php-fpm's usage error.
        eprintln!("fpmd: convert: give the php-fpm configuration: fpmd convert /etc/php/8.2/fpm/php-fpm.conf");
        return ExitCode::from(EXIT_USAGE);
    };
    match config::convert(&file, options) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fpmd: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}
