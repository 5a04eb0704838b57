//! [`LoadOptions`]: what the command line changes in how the
//! configuration files load (php-fpm's `-p`, `-g`, `-d`, `-n`, `-c`, …).

use std::path::{Path, PathBuf};

use super::source;

/// What php-fpm's command line changes in how the files load (php-src
/// `sapi/fpm/fpm/fpm_main.c`, `fpm_conf.c`). The default changes nothing.
/// The loaded [`Config`] keeps them ([`Config::options`]), so a reload
/// reads the files the same way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// `-p/--prefix DIR`: relative paths in the files (`pid`, `error_log`,
    /// `include`, unix `listen.address`, `php_cgi`, …) are relative to DIR
    /// instead of the directory of the file that holds them, as php-fpm
    /// makes them relative to its prefix (`fpm_conf_expand_path`).
    pub prefix: Option<PathBuf>,
    /// `-g/--pid FILE`: the pid file, instead of `[global] pid` (relative:
    /// to the prefix, else to the working directory).
    pub pid: Option<PathBuf>,
    /// `-R/--allow-to-run-as-root`: a pool may run its children as root
    /// (no `user`, or uid/gid 0) when fpmd runs as root; refused without it,
    /// as php-fpm refuses it (`fpm_unix.c`: "please specify user and group
    /// other than root").
    pub allow_to_run_as_root: bool,
    /// `-d name=value` (repeated; `-d name` is `name=1`, as PHP's
    /// `cgi_main.c`): ini values of every pool's children, below the pool's
    /// own `php_value`/`php_admin_value` of the same name (php-fpm sets
    /// them in the master's ini, which a pool's values override).
    pub php_defines: Vec<(String, String)>,
    /// `-n`: the children read no php.ini (`php-cgi -n`).
    pub no_php_ini: bool,
    /// `-D/--daemonize` (`Some(true)`) or `-F/--nodaemonize`
    /// (`Some(false)`): instead of `[global] daemonize`.
    pub daemonize: Option<bool>,
    /// php-fpm's `-c`: the php.ini file or directory every pool's php-cgi
    /// gets as `-c`, unless the pool sets `php_ini` (it wins over
    /// `global.php_ini`). `None`: `global.php_ini`, else php-cgi's own.
    pub php_ini: Option<PathBuf>,
    /// php-fpm's `-y FILE` naming a file that does not end in `.toml`:
    /// FILE is php-fpm's configuration whatever its name ends in
    /// (php-src's FPM tests name theirs `.ini`). A binary upgrade passes
    /// the file with `-y` again, which gives the same.
    pub fpm_syntax: bool,
    /// `-O/--force-stderr`: log to stderr, whatever `error_log` says,
    /// unless fpmd detaches (php-fpm's `fpm_use_error_log`, `fpm_stdio.c`:
    /// in the foreground with -O its error_log file is not used).
    pub force_stderr: bool,
}

impl LoadOptions {
    /// The command line that loads the same way, for the fpmd a binary
    /// upgrade starts: never detaching (`-F`: it is started by the daemon,
    /// which is detached already when `daemonized`), `-O` only when the
    /// daemon runs in the foreground.
    pub fn to_args(&self, daemonized: bool) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        if let Some(p) = &self.prefix {
            args.extend(["-p".into(), p.into()]);
        }
        if let Some(p) = &self.pid {
            args.extend(["-g".into(), p.into()]);
        }
        if self.allow_to_run_as_root {
            args.push("-R".into());
        }
        for (name, value) in &self.php_defines {
            args.extend(["-d".into(), format!("{name}={value}").into()]);
        }
        if self.no_php_ini {
            args.push("-n".into());
        }
        if let Some(ini) = &self.php_ini {
            args.extend(["-c".into(), ini.into()]);
        }
        args.push("-F".into());
        if self.force_stderr && !daemonized {
            args.push("-O".into());
        }
        args
    }

    /// A command-line path: relative ones are relative to the prefix, else
    /// to the working directory; made absolute.
    pub(super) fn resolve(&self, p: &Path) -> PathBuf {
        let p = match &self.prefix {
            Some(prefix) if p.is_relative() => prefix.join(p),
            _ => p.to_path_buf(),
        };
        source::absolutize(&p).unwrap_or(p)
    }
}
