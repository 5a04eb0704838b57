//! php-fpm's own configuration files, read directly: a main file ending in
//! `.conf` (`fpmd -y /etc/php/8.2/fpm/php-fpm.conf`) and every file its
//! `include` globs match are read with php-fpm 8.2's rules and translated
//! into the TOML document fpmd's own files are, one line per setting, with
//! a map from each line back to the php-fpm file, line and directive. That
//! document then goes through the same pipeline as a TOML file (key
//! registry, serde, validation), so every check applies, and every error
//! is mapped back: `www.conf:12: [www] key 'pm.max_children': …`.
//! `fpmd convert` prints the same document with those origins as comments.
//!
//! Owns: php-fpm's reading rules (`fpm_conf_load_ini_file`,
//! `fpm_conf_ini_parser_*`, `fpm_conf_set_*`, `fpm_evaluate_full_path` in
//! php-src `sapi/fpm/fpm/fpm_conf.c`). This file holds the types and
//! [`translate`]; the line scanner is `scan.rs`, the directive table
//! `directives.rs`, the reading of the files into sections `read.rs`, the
//! TOML document written from them `emit.rs`, php-fpm's readings of a
//! value `values.rs`, and the way back from the document to the php-fpm
//! files `translation.rs`. Must not touch: anything after the
//! translation (that is the TOML pipeline's), sockets, processes.
//!
//! php-fpm's rules, followed:
//! - each line is parsed on its own by PHP's ini scanner (`scan.rs`);
//! - `[global]` (any case) switches to the global section, any other name
//!   opens a pool, or reopens it when a pool of that name (compared
//!   case-insensitively; the first spelling names it) exists; a section
//!   may be empty; directives before any section are global;
//! - scalar directive names compare case-insensitively; the last value of
//!   a directive wins. In the arrays (`env[…]`, `php_value[…]`, …) the
//!   FIRST value of a key wins: php-fpm prepends each to a list that it
//!   applies in order, so the oldest is applied last (a warning says so);
//!   `php_flag[x]` is `php_value[x]` = `1`/`0`, `php_admin_flag[x]`
//!   likewise;
//! - `include` (anywhere) is a glob, relative to the prefix, whose files
//!   are read at that point, continuing the current section; a pattern
//!   matching nothing is a warning, unless it has a wildcard and its
//!   directory does not exist (an error, php-fpm's "Unable to globalize");
//!   at most 5 files deep;
//! - `$pool` is replaced by the pool's name in every string directive and
//!   every array value of a pool (an error in `[global]`); `$prefix` at
//!   the start of `chroot` is the prefix;
//! - relative paths (`pid`, `error_log`, `include`, `access.log`,
//!   `slowlog`, `chroot`, `chdir`, a unix `listen` without `/`, and the
//!   php values php-fpm expands: `error_log`, `sendmail_path`, … when the
//!   pool has no chroot) are relative to the pool's `prefix`, else the
//!   prefix: php-fpm's `-p` ([`LoadOptions::prefix`]), which for fpmd
//!   defaults to the main file's directory (php-fpm's default is its
//!   install prefix, `/usr` on Debian, where no configuration lives);
//! - an empty string directive is unset; a negative `listen.backlog`, and
//!   an unset one (php-fpm's default -1), is the kernel's maximum
//!   (`net.core.somaxconn`), as `listen(2)` makes of -1;
//! - a pool without `pm` is an error, as in php-fpm.
//!
//! Decisions of fpmd's own:
//! - PHP constants are evaluated only from `scan::constant`'s table (the
//!   `E_*` error levels with `| & ^ ~ !`, the `LC_*` locale categories, a
//!   few fixed core values); an unknown `PHP_…` or `E_…` name is kept as
//!   written with a warning (php-fpm would use the php binary's value). A
//!   replaced constant in an array key (`env[LC_ALL]` becomes `env[6]`, as
//!   php-fpm makes it) is done as php-fpm does, with a warning that says
//!   to write `env['LC_ALL']`;
//! - `${NAME:-default}` gives `default` when NAME is unset (PHP 8.3's
//!   syntax; PHP 8.2 reads a variable called `NAME:-default`, empty);
//!   `${NAME}` reads fpmd's environment only (PHP would also look at its
//!   php.ini's values first);
//! - every directive of php-fpm 8.2 is in `directives.rs`: mapped, made
//!   a default of every pool (global `rlimit_*`, `process.priority`:
//!   php-fpm's children inherit the master's), checked (`process.max`),
//!   accepted with a notice when it cannot change what fpmd does, or
//!   refused with what to do instead. fpmd's own keys (`php_cgi`,
//!   `control_socket`, `pm.spawn`, …) may be written in a `.conf` as well;
//! - when the main file's directory holds `php.ini` (and `conf.d/`), as
//!   Debian's `/etc/php/8.2/fpm` does, they become `global.php_ini` and
//!   `global.php_ini_scan_dir`, so the children read what that php-fpm
//!   read; else, when the first pool's php-cgi is Debian's `php-cgiX.Y`,
//!   what Debian's `php-fpmX.Y` has compiled in (`/etc/php/X.Y/fpm`, its
//!   `PHP_CONFIG_FILE_PATH`, and `conf.d` there); else php-cgi reads its
//!   own; `$PHPRC` in fpmd's environment wins over both for the php.ini,
//!   as PHP reads it first;
//! - the log is written in php-fpm's format (`log_format = "php-fpm"`);
//! - `listen.acl_users`/`acl_groups` and `access.suppress_path[]` are
//!   honoured (see `listen/bind.rs` and the access log); php-fpm applies
//!   every pool's suppressed paths to every pool's log, fpmd each pool's
//!   to its own.

mod directives;
mod dump;
mod emit;
mod read;
pub(crate) mod scan;
mod translation;
mod values;

pub use dump::php_fpm_dump;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{ConfigError, LoadOptions, PhpFpmWords, Reader};
#[cfg(test)]
use values::somaxconn;

/// Whether `path` is read as php-fpm's configuration: it ends in `.conf`.
pub(super) fn is_fpm_conf(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "conf")
}

/// Where a line of the translation came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Origin {
    pub(super) file: PathBuf,
    pub(super) line: usize,
    /// As php-fpm names it: `pm.max_children`, `php_value[memory_limit]`.
    pub(super) directive: String,
}

/// A php-fpm configuration as TOML, with where each line came from.
pub(super) struct Translation {
    /// The TOML document.
    pub(super) text: String,
    /// The origin of each line of `text` (index: line - 1); `None` for a
    /// table header or a default php-fpm has that fpmd's differs from.
    lines: Vec<Option<Origin>>,
    /// Where each pool (by its TOML name) was first opened.
    sections: BTreeMap<String, Origin>,
    /// Every file read, the main file first.
    pub(super) files: Vec<PathBuf>,
    /// The include patterns as absolute globs.
    pub(super) include_globs: Vec<String>,
    /// Notices and warnings, each `FILE:LINE: …`.
    pub(super) notices: Vec<String>,
    /// The main file (the path of the TOML document in errors).
    main: PathBuf,
}

struct Val {
    value: String,
    at: Origin,
}

struct PoolIni {
    name: String,
    at: Origin,
    scalars: Vec<(String, Val)>,
    /// (family: `env`, `php_value`, `php_admin_value`; key; value).
    arrays: Vec<(&'static str, String, Val)>,
    /// `access.suppress_path[] = …`, in order.
    suppress: Vec<Val>,
}

struct Reading<'r> {
    reader: &'r dyn Reader,
    prefix: PathBuf,
    global: Vec<(String, Val)>,
    pools: Vec<PoolIni>,
    current: Option<usize>,
    files: Vec<PathBuf>,
    include_globs: Vec<String>,
    notices: Vec<String>,
    depth: usize,
}

fn error(
    at: &Origin,
    pool: Option<&str>,
    key: Option<&str>,
    message: impl Into<String>,
) -> ConfigError {
    ConfigError {
        file: at.file.clone(),
        line: Some(at.line),
        pool: pool.map(str::to_string),
        key: key.map(str::to_string),
        message: message.into(),
        php_fpm: None,
    }
}

/// An error php-fpm reports in these very words as it reads the file
/// (`fpm_conf.c`'s ini parser: `[FILE:LINE] MESSAGE`, then `failed to
/// load configuration file`).
fn own_words(
    at: &Origin,
    pool: Option<&str>,
    key: Option<&str>,
    message: impl Into<String>,
) -> ConfigError {
    let e = error(at, pool, key, message);
    let words = PhpFpmWords::read(e.message.clone());
    e.with_php_fpm(words)
}

fn place(at: &Origin) -> String {
    format!("{}:{}", at.file.display(), at.line)
}

/// Reads `main` and its includes and translates them (see the module
/// docs). `opts.prefix`: php-fpm's `-p`; `None` is `main`'s directory.
/// Errors: a file that cannot be read, a syntax error, a directive
/// php-fpm would refuse or fpmd refuses, each at its file and line.
pub(super) fn translate(
    reader: &dyn Reader,
    main: &Path,
    opts: &LoadOptions,
) -> Result<Translation, ConfigError> {
    let dir = super::source::absolutize(main.parent().unwrap_or(Path::new("")))
        .map_err(|e| ConfigError::file_only(main, format!("cannot resolve directory: {e}")))?;
    let prefix = match &opts.prefix {
        Some(p) => super::source::absolutize(p)
            .map_err(|e| ConfigError::file_only(main, format!("cannot resolve the prefix: {e}")))?,
        None => dir.clone(),
    };
    let mut r = Reading {
        reader,
        prefix,
        global: Vec::new(),
        pools: Vec::new(),
        current: None,
        files: Vec::new(),
        include_globs: Vec::new(),
        notices: Vec::new(),
        depth: 0,
    };
    r.read_file(main)?;
    if r.pools.is_empty() {
        let message = "No pool defined. at least one pool section must be specified in config file (php-fpm's words)";
        return Err(ConfigError::file_only(main, message).with_php_fpm(PhpFpmWords::read(message)));
    }
    r.emit(main, &dir)
}

#[cfg(test)]
mod tests;
