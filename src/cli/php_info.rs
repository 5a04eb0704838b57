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
    let (program, args) = first_pools_php_cgi(path, options);
    let e = std::process::Command::new(&program)
        .args(&args)
        .args(["-q", flag])
        .exec();
    eprintln!("fpmd: cannot run {}: {e}", program.display());
    ExitCode::FAILURE
}

/// The php-cgi of the first pool and its ini arguments, or `php-cgi` on
/// PATH with the command line's `-n`/`-d` when there is no configuration.
fn first_pools_php_cgi(
    path: Option<&Path>,
    options: &config::LoadOptions,
) -> (PathBuf, Vec<String>) {
    let pool = path
        .and_then(|p| config::load_with(p, options).ok())
        .and_then(|c| c.pools.into_iter().next());
    match pool {
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
    }
}

/// `-v`: php-fpm's version text (`PHP 8.2.36 (fpm-fcgi) (built: …)`,
/// PHP's copyright and engine lines), which scripts parse for PHP's
/// version, as the first pool's php-cgi gives it (`-n`/`-d` of the
/// command line or of that pool), its SAPI named `fpm-fcgi, fpmd
/// VERSION`: `PHP 8.2.36 (fpm-fcgi, fpmd 0.1.0) (built: …)`. When php-cgi
/// cannot be run: `fpmd VERSION` alone. Exit 0.
pub fn version(path: Option<&Path>, options: &config::LoadOptions) -> ExitCode {
    let ours = format!("fpmd {}", env!("CARGO_PKG_VERSION"));
    let (program, args) = first_pools_php_cgi(path, options);
    // Only what PHP's start-up reads from the environment: with a CGI
    // request's variables (GATEWAY_INTERFACE, SCRIPT_FILENAME…, as when a
    // PHP script runs `php-fpm -v`) php-cgi ignores its options and runs
    // the request's script instead.
    let keep = ["PATH", "PHPRC", "PHP_INI_SCAN_DIR", "HOME", "LANG", "TZ"];
    let php = std::process::Command::new(&program)
        .env_clear()
        .envs(std::env::vars_os().filter(|(k, _)| keep.iter().any(|w| k == w)))
        .args(&args)
        .arg("-v")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .filter(|text| text.starts_with("PHP ") && text.contains(" (cgi-fcgi)"));
    match php {
        Some(text) => print!(
            "{}",
            text.replacen(" (cgi-fcgi)", &format!(" (fpm-fcgi, {ours})"), 1)
        ),
        None => println!("{ours}"),
    }
    ExitCode::SUCCESS
}
