//! `fpmd -i` and `fpmd -m`: php-cgi's own answer, run as the first pool's
//! children would run it.
//!
//! Must not touch: the daemon (this replaces the process with php-cgi).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config;

/// `-i`/`-m`: php-cgi's PHP information or module list, as the first
/// pool's children would see it (its php_cgi and ini arguments, `-n` and
/// `-d` included); `php-cgi` on PATH with the command line's `-n`/`-d`
/// when there is no configuration. php-fpm prints the same of its own
/// PHP; php-cgi's `-i` is HTML, php-fpm's text. Replaces this process;
/// returns (exit 1) only when php-cgi cannot be run.
pub fn php_cgi_info(path: Option<&Path>, options: &config::LoadOptions, flag: &str) -> ExitCode {
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
