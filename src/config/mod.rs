//! Configuration: owns reading, parsing and validating fpmd's TOML files
//! (the main file and the pool files it includes) into the validated types
//! below, which are the only configuration types the rest of the daemon uses.
//!
//! The module is pure except for reading the configuration files (and
//! globbing `global.include`), resolving users and groups through the system
//! user database, checking that each pool's php-cgi binary exists and is
//! executable, checking that `chdir` is a directory, resolving the
//! directory of each unix socket (to find two pools on one socket), and
//! reading fpmd's own environment (`$VAR` in `env.*`, `PATH` for a bare
//! `php_cgi`), and reading what fpmd may do here (its capabilities and
//! groups, `RLIMIT_NPROC`, `kernel.pid_max`, `kernel.threads-max`,
//! `net.ipv4.ip_unprivileged_port_start`; `users::Host`). It must not
//! touch sockets or processes: it never binds, connects, forks or signals.
//!
//! Pipeline: file text → `toml_edit` document (`source.rs`: syntax errors,
//! lines of keys) → the check of its keys against the one key registry
//! (`keys.rs`: unknown keys, suggestions) → serde raw structs (`raw.rs`:
//! `deny_unknown_fields`, type errors, via `serde_path_to_error` for the
//! key) → validation (`validate.rs`, with `users.rs` for users, groups and
//! php-cgi; then the checks across pools) → [`Config`] (`model.rs`).
//! `render.rs` prints it back for `fpmd -t`; `diff.rs` compares two of them
//! for a reload ([`Config::diff`]).
//! Every error is a [`ConfigError`] naming the file, the line and the dotted
//! key, e.g. `pool.d/www.toml:7: [www] key 'pm.max_childre': unknown key (did
//! you mean 'pm.max_children'?)`.
//!
//! Decisions not dictated by php-fpm, written down here:
//! - relative paths (`pid`, `error_log`, `include`, a unix `listen.address`,
//!   a `php_cgi` containing `/`) are relative to the directory of the file
//!   that contains them (to the prefix with php-fpm's `-p`, see
//!   [`LoadOptions`]), and are stored absolute;
//! - a bare port in `listen.address` binds all IPv4 addresses (`0.0.0.0`),
//!   as php-fpm does;
//! - `php_value.session.save_path` (unquoted, so a nested TOML table) means
//!   the same as `php_value."session.save_path"`: nested tables under the
//!   `php_*` tables are flattened with dots into the ini name;
//! - an `env.*` value is taken from fpmd's environment only when it is
//!   exactly `$NAME` (php-fpm's `env[X] = $Y`); `"$HOME/bin"` stays literal;
//! - when fpmd does not run as root it cannot change user: `user`/`group`
//!   may then only name fpmd's own user/group (php-fpm ignores them with a
//!   notice; fpmd refuses, so that the printed configuration is the truth);
//! - what cannot work on this machine is refused here, not at start:
//!   `pm.max_children` beyond `kernel.pid_max`/`threads-max` (all pools
//!   together) or the soft `RLIMIT_NPROC` (the pools of one user), and,
//!   without the capability, a `listen.owner`/`listen.group` fpmd cannot
//!   chown to or a privileged port (`validate::check_host_limits`);
//! - two pools never share a listen address, nor overlapping TCP addresses
//!   (`0.0.0.0:9000` and `127.0.0.1:9000`): validation refuses it, naming
//!   both pools, so `fpmd -t` finds it and not only the bind;
//! - pool names may contain only ASCII letters, digits, `.`, `_` and `-`
//!   (they appear in logs, socket names and on the `fpmd status` command
//!   line); a name with a dot must be quoted in TOML: `["example.com"]`.

use std::path::{Path, PathBuf};

mod diff;
mod fpm;
mod keys;
mod model;
mod raw;
mod render;
mod source;
mod users;
mod validate;

#[cfg(test)]
mod testutil;

pub use diff::{
    changed_fields, pool_change, Change, ConfigDiff, GlobalChanges, ListenChange, ListenerChanges,
    PoolChange,
};
pub use keys::{registry, RegistryKey};
pub use model::{
    Config, Credentials, Global, Isolation, Landlock, Listen, ListenAddress, LocalEndpoints,
    LogFormat, LogLevel, LogTarget, MinAvailable, Origins, PhpIni, PmMode, PoolConfig,
    ProcessManager, Sources, Spawn, DEFAULT_LIMIT_EXTENSIONS,
};
pub use raw::{ByteSize, Duration};

use source::SourceFile;
use users::Ids;

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// A configuration error, located as precisely as possible.
///
/// Displays as `FILE[:LINE]: [[POOL] ][key 'KEY': ]MESSAGE`, e.g.
/// `pool.d/www.toml:8: [www] key 'pm.max_children': pm.max_children must be at least 1`
/// or `fpmd.toml:4: key 'global.include': invalid glob pattern …`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render_error(self))]
pub struct ConfigError {
    /// The file the error is in (as given, or as found by `global.include`).
    pub file: PathBuf,
    /// 1-based line of the offending key or value, when there is one.
    pub line: Option<usize>,
    /// The pool the error is in (its table name), for errors inside a pool.
    pub pool: Option<String>,
    /// The dotted key: pool-relative for pool keys (`pm.max_children`),
    /// `global.X` for global keys.
    pub key: Option<String>,
    /// What is wrong, in lower case.
    pub message: String,
}

fn render_error(e: &ConfigError) -> String {
    let mut s = e.file.display().to_string();
    if let Some(line) = e.line {
        s.push_str(&format!(":{line}"));
    }
    s.push_str(": ");
    if let Some(pool) = &e.pool {
        s.push_str(&format!("[{pool}] "));
    }
    if let Some(key) = &e.key {
        s.push_str(&format!("key '{key}': "));
    }
    s.push_str(&e.message);
    s
}

impl ConfigError {
    fn file_only(file: &Path, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            line: None,
            pool: None,
            key: None,
            message: message.into(),
        }
    }
}

// ---------------------------------------------------------------------------
// Public entry points
// ---------------------------------------------------------------------------

/// Load, parse and validate the main configuration file at `path` and every
/// file its `global.include` matches, with the default [`LoadOptions`].
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with(path, &LoadOptions::default())
}

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
    fn resolve(&self, p: &Path) -> PathBuf {
        let p = match &self.prefix {
            Some(prefix) if p.is_relative() => prefix.join(p),
            _ => p.to_path_buf(),
        };
        source::absolutize(&p).unwrap_or(p)
    }
}

/// [`load`] with the command line's [`LoadOptions`]. A main file ending
/// in `.conf` is php-fpm's configuration (its includes too), read with
/// php-fpm's rules (see `fpm/mod.rs`); any other is fpmd's TOML.
pub fn load_with(path: &Path, options: &LoadOptions) -> Result<Config, ConfigError> {
    let ids = Ids::current();
    load_from(&FileSystem, path, ids, &users::Host::of(ids), options)
}

/// Which files a path names on fpmd's command line: `-c PATH` is the
/// configuration when PATH ends in `.toml` or `.conf`, else (a php.ini
/// file, or a directory) php-fpm's `-c`, the php.ini of the children.
pub fn is_config_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "toml" || e == "conf")
}

/// The TOML document the php-fpm configuration at `path` translates to,
/// not validated (for finding `control_socket` in a configuration a
/// reload is about to refuse). Errors: reading or translating the files.
pub fn translate(path: &Path, opts: &LoadOptions) -> Result<String, ConfigError> {
    Ok(fpm::translate(&FileSystem, path, opts)?.text)
}

/// `fpmd convert`: the php-fpm configuration at `path` as one TOML document
/// (the global table and every pool), each value's php-fpm file, line and
/// directive in a comment. It is converted only when it loads: loading the
/// output gives the same configuration (`fpmd -t` prints the same values).
/// Errors: those of [`load_with`]; a file that is not a `.conf`.
pub fn convert(path: &Path, opts: &LoadOptions) -> Result<String, ConfigError> {
    if !(opts.fpm_syntax || fpm::is_fpm_conf(path)) {
        return Err(ConfigError::file_only(
            path,
            "fpmd convert reads php-fpm's configuration: a file ending in .conf",
        ));
    }
    load_with(path, opts)?;
    Ok(fpm::translate(&FileSystem, path, opts)?.annotated())
}

/// [`load`] on files held in memory instead of the file system: `main` is
/// the main file's path, `files` maps every path (main file included) to
/// its bytes; `global.include` globs are matched against the paths of
/// `files`. Everything else (users, php-cgi, `chdir`, the directories of
/// unix sockets, fpmd's environment) is checked against the running system,
/// as [`load`] does. Errors as [`load`]: a path not in `files` is "cannot
/// read configuration file", bytes that are not UTF-8 likewise. This is the
/// configuration fuzz target's entry point (`fuzz/fuzz_targets/config.rs`).
pub fn load_from_memory(
    main: &Path,
    files: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
) -> Result<Config, ConfigError> {
    let ids = Ids::current();
    load_from(
        &Memory(files),
        main,
        ids,
        &users::Host::of(ids),
        &LoadOptions::default(),
    )
}

/// Where the configuration's files come from: the file system ([`load`]) or
/// memory ([`load_from_memory`]).
trait Reader {
    /// The text of the file at `path`. Errors: "cannot read configuration
    /// file: …" (missing, unreadable, not UTF-8).
    fn read_text(&self, path: &Path) -> Result<String, ConfigError>;
    /// The file at `path`, parsed as TOML.
    fn read(&self, path: &Path) -> Result<SourceFile, ConfigError> {
        SourceFile::parse(path, self.read_text(path)?)
    }
    /// The files (not directories) whose paths match the glob `pattern`, in
    /// any order; an error is a message naming what could not be read.
    fn glob(&self, pattern: &glob::Pattern) -> Result<Vec<PathBuf>, String>;
    /// The path with symlinks resolved, if it exists.
    fn canonicalize(&self, path: &Path) -> Option<PathBuf>;
}

struct FileSystem;

impl Reader for FileSystem {
    fn read_text(&self, path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path).map_err(|e| {
            ConfigError::file_only(path, format!("cannot read configuration file: {e}"))
        })
    }

    /// As php-fpm (`fpm_conf.c`, `fpm_conf_load_ini_file` and its
    /// `glob()`): a wildcard whose directory does not exist is an error
    /// ("Unable to globalize"), a pattern matching nothing is not; every
    /// match must be a file that can be read: a dangling symlink, a
    /// symlink loop, a FIFO, a socket or a device is an error naming it
    /// (php-fpm fails to open the first two; a FIFO would block the
    /// read). Directories matched are skipped.
    fn glob(&self, pattern: &glob::Pattern) -> Result<Vec<PathBuf>, String> {
        if let Some(dir) = wildcard_dir(pattern.as_str()) {
            if !dir.is_dir() {
                return Err(format!(
                    "the directory {} of the glob does not exist (php-fpm: \"Unable to globalize\"): create it or fix the pattern",
                    dir.display()
                ));
            }
        }
        let paths = glob::glob(pattern.as_str()).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for entry in paths {
            let p =
                entry.map_err(|e| format!("cannot read {}: {}", e.path().display(), e.error()))?;
            match include_kind(&p)? {
                IncludeKind::File => out.push(p),
                IncludeKind::Directory => {}
            }
        }
        Ok(out)
    }

    fn canonicalize(&self, path: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(path).ok()
    }
}

/// The literal directory a glob's first wildcard is in (`/etc/fpmd/pool.d`
/// of `/etc/fpmd/pool.d/*.toml`, `/srv` of `/srv/*/fpmd.toml`); `None`
/// for a pattern without wildcards.
fn wildcard_dir(pattern: &str) -> Option<PathBuf> {
    let first = pattern.find(['*', '?', '['])?;
    let dir = pattern[..first].rfind('/').map_or("", |i| &pattern[..i]);
    Some(PathBuf::from(
        if dir.is_empty() && pattern.starts_with('/') {
            "/"
        } else if dir.is_empty() {
            "."
        } else {
            dir
        },
    ))
}

/// What an include glob matched.
enum IncludeKind {
    File,
    Directory,
}

/// Whether `p` (matched by an include glob) is a file to read or a
/// directory to pass over. Errors: anything else, named.
fn include_kind(p: &Path) -> Result<IncludeKind, String> {
    use std::os::unix::fs::FileTypeExt;
    let shown = p.display();
    let meta = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) => {
            return Err(match std::fs::read_link(p) {
                Ok(_) if e.raw_os_error() == Some(libc::ELOOP) => {
                    format!("{shown} is a symlink loop ({e})")
                }
                Ok(target) => format!(
                    "{shown} is a dangling symlink (to {}, {e})",
                    target.display()
                ),
                Err(_) => format!("cannot read {shown}: {e}"),
            })
        }
    };
    let t = meta.file_type();
    let what = if t.is_file() {
        return Ok(IncludeKind::File);
    } else if t.is_dir() {
        return Ok(IncludeKind::Directory);
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(format!(
        "{shown} is {what}, not a configuration file: remove it or narrow the pattern"
    ))
}

struct Memory<'a>(&'a std::collections::BTreeMap<PathBuf, Vec<u8>>);

impl Reader for Memory<'_> {
    fn read_text(&self, path: &Path) -> Result<String, ConfigError> {
        let cannot = |e: &dyn std::fmt::Display| {
            ConfigError::file_only(path, format!("cannot read configuration file: {e}"))
        };
        let bytes = self
            .0
            .get(path)
            .ok_or_else(|| cannot(&std::io::Error::from(std::io::ErrorKind::NotFound)))?;
        String::from_utf8(bytes.clone()).map_err(|_| cannot(&"stream did not contain valid UTF-8"))
    }

    fn glob(&self, pattern: &glob::Pattern) -> Result<Vec<PathBuf>, String> {
        // As glob::glob walks directories: '*' never crosses a '/'.
        let options = glob::MatchOptions {
            require_literal_separator: true,
            ..glob::MatchOptions::new()
        };
        Ok(self
            .0
            .keys()
            .filter(|p| pattern.matches_path_with(p, options))
            .cloned()
            .collect())
    }

    fn canonicalize(&self, path: &Path) -> Option<PathBuf> {
        self.0.contains_key(path).then(|| path.to_path_buf())
    }
}

/// `./fpmd.toml` if it exists, else `/etc/fpmd/fpmd.toml` if it exists.
pub fn find_default_config() -> Option<PathBuf> {
    ["fpmd.toml", "/etc/fpmd/fpmd.toml"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

#[cfg(test)]
fn load_as(path: &Path, ids: Ids) -> Result<Config, ConfigError> {
    load_from(
        &FileSystem,
        path,
        ids,
        &users::Host::of(ids),
        &LoadOptions::default(),
    )
}

/// The whole pipeline; `ids` and `host` say what fpmd may do here (tests
/// pretend), `options` what the command line changes.
fn load_from(
    reader: &dyn Reader,
    path: &Path,
    ids: Ids,
    host: &users::Host,
    options: &LoadOptions,
) -> Result<Config, ConfigError> {
    let prefix = match &options.prefix {
        Some(p) => Some(source::absolutize(p).map_err(|e| {
            ConfigError::file_only(
                path,
                format!("cannot resolve the prefix (-p) {}: {e}", p.display()),
            )
        })?),
        None => None,
    };
    let with_prefix = |mut src: SourceFile| {
        if let Some(prefix) = &prefix {
            src.dir = prefix.clone();
        }
        src
    };
    if options.fpm_syntax || fpm::is_fpm_conf(path) {
        let t = fpm::translate(reader, path, options)?;
        let mut config = SourceFile::parse(path, t.text.clone())
            .and_then(|main| {
                load_document(reader, with_prefix(main), &with_prefix, ids, host, options)
            })
            .map_err(|e| t.map_error(e))?;
        t.fix_up(&mut config);
        return Ok(config);
    }
    let main = with_prefix(reader.read(path)?);
    load_document(reader, main, &with_prefix, ids, host, options)
}

/// The pipeline from the main file's document on; `with_prefix` gives an
/// included file the directory its relative paths are relative to.
fn load_document(
    reader: &dyn Reader,
    main: SourceFile,
    with_prefix: &dyn Fn(SourceFile) -> SourceFile,
    ids: Ids,
    host: &users::Host,
    options: &LoadOptions,
) -> Result<Config, ConfigError> {
    let path = main.path.clone();
    let path = path.as_path();
    let read = |p: &Path| -> Result<SourceFile, ConfigError> { Ok(with_prefix(reader.read(p)?)) };
    keys::check_structure(&main, true)?;
    let raw_main = raw::deserialize_file(&main)?;
    let (mut global, includes) =
        validate::validate_global(&main, raw_main.global.unwrap_or_default(), ids, options)?;
    if let Some(pid) = &options.pid {
        global.pid = Some(options.resolve(pid));
    }
    if let Some(d) = options.daemonize {
        global.daemonize = d;
    }
    if options.force_stderr && !global.daemonize {
        global.error_log = LogTarget::Stderr;
    }

    let mut files = vec![(main, raw_main.pools)];
    let (included, warnings) = find_includes(reader, &files[0].0, &includes)?;
    for inc in included {
        let src = read(&inc)?;
        keys::check_structure(&src, false)?;
        let raw = raw::deserialize_file(&src)?;
        files.push((src, raw.pools));
    }

    validate::check_pool_names(&files)?;

    let mut pools = Vec::new();
    let mut origin = Vec::new();
    for (i, (src, raw_pools)) in files.iter_mut().enumerate() {
        for (name, raw) in std::mem::take(raw_pools) {
            pools.push(validate::validate_pool(
                src, &name, raw, ids, &global, options,
            )?);
            origin.push(i);
        }
    }
    let located: Vec<_> = origin.iter().map(|&i| &files[i].0).zip(&pools).collect();
    validate::check_listen_addresses(&files[0].0, &global, &located)?;
    validate::check_host_limits(&files[0].0, &global, &located, ids, host)?;
    let sources = Sources {
        files: files.iter().map(|(src, _)| src.path.clone()).collect(),
        include_globs: includes
            .iter()
            .map(|pat| full_glob(&files[0].0, pat))
            .collect(),
    };
    let mut origins = Origins::default();
    if let Some(t) = files[0].0.doc.get("global").and_then(|i| i.as_table_like()) {
        origins
            .0
            .insert(String::new(), source::key_lines(&files[0].0, t));
    }
    for (pool, &i) in pools.iter().zip(&origin) {
        let src = &files[i].0;
        if let Some(t) = src.doc.get(&pool.name).and_then(|i| i.as_table_like()) {
            origins
                .0
                .insert(pool.name.clone(), source::key_lines(src, t));
        }
    }
    Ok(Config {
        file: path.to_path_buf(),
        global,
        pools,
        sources,
        origins,
        options: options.clone(),
        warnings,
        notices: Vec::new(),
    })
}

/// An include pattern as a glob over the file system: relative ones are
/// relative to the main file's directory (its directory as given, for
/// messages), or to the prefix (`-p`) when there is one.
fn full_glob(main: &SourceFile, pat: &str) -> String {
    let given = main.path.parent().unwrap_or(Path::new(""));
    let display_dir = if source::absolutize(given).is_ok_and(|d| d == main.dir) {
        given
    } else {
        main.dir.as_path()
    };
    if Path::new(pat).is_absolute() || display_dir.as_os_str().is_empty() {
        pat.to_string()
    } else {
        let dir = glob::Pattern::escape(&display_dir.to_string_lossy());
        format!("{}/{pat}", dir.trim_end_matches('/'))
    }
}

/// The files matched by the include patterns, relative to the main file's
/// directory, sorted by name within each pattern, without duplicates and
/// without the main file itself; and a warning per pattern that matches
/// nothing (php-fpm's "Nothing matches the include pattern").
fn find_includes(
    reader: &dyn Reader,
    main: &SourceFile,
    patterns: &[String],
) -> Result<(Vec<PathBuf>, Vec<String>), ConfigError> {
    let err = |message: String| ConfigError {
        file: main.path.clone(),
        line: main.find_line(&["global", "include"]),
        pool: None,
        key: Some("global.include".into()),
        message,
    };
    let main_canon = reader.canonicalize(&main.path);
    let mut out: Vec<PathBuf> = Vec::new();
    let mut canon_seen = Vec::new();
    let mut warnings = Vec::new();
    for pat in patterns {
        let full = glob::Pattern::new(&full_glob(main, pat))
            .map_err(|e| err(format!("invalid glob pattern \"{pat}\": {e}")))?;
        let mut matched = reader
            .glob(&full)
            .map_err(|m| err(format!("include \"{pat}\": {m}")))?;
        matched.sort();
        if matched.is_empty() {
            warnings
                .push(err(format!("nothing matches the include pattern \"{pat}\"")).to_string());
        }
        for p in matched {
            let canon = reader.canonicalize(&p);
            if canon.is_some() && (canon == main_canon || canon_seen.contains(&canon)) {
                continue;
            }
            canon_seen.push(canon);
            out.push(p);
        }
    }
    Ok((out, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::render::toml_str;
    use crate::config::testutil::*;
    use std::net::{IpAddr, Ipv6Addr, SocketAddr};

    #[test]
    fn full_config_with_includes() {
        let main = r#"# fpmd.toml
[global]
pid = "run/fpmd.pid"
error_log = "log/fpmd.log"
log_level = "debug"
include = "pool.d/*.toml"
process_control_timeout = "10s"
control_socket = "run/fpmd.sock"
watch = true

[main]
user = "nobody"
group = "nogroup"
php_cgi = "/bin/sh"
listen.address = "127.0.0.1:9000"
pm.max_children = 2
"#;
        let b = r#"[bbb]
user = "nobody"
group = "nogroup"
php_cgi = "/bin/true"
listen.address = "/tmp/bbb.sock"
listen.owner = "nobody"
listen.group = 0
listen.mode = "0600"
listen.backlog = 128
pm.mode = "static"
pm.max_children = 4
pm.max_requests = 500
chdir = "/tmp"
clear_env = false
env.PATH = "/usr/bin:/bin"
php_admin_value.memory_limit = "128M"
php_value."session.save_path" = "/var/lib/php/sessions"
php_admin_flag.log_errors = true
"#;
        let a = "[aaa]\nuser = 65534\ngroup = \"65534\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"[::1]:9001\"\nlisten.allowed_clients = [\"127.0.0.1\", \"::1\"]\npm.max_children = 1\n";
        let (dir, c) = load_ok(
            main,
            &[
                ("pool.d/b.toml", b),
                ("pool.d/a.toml", a),
                ("pool.d/notes.txt", "not toml"),
                ("log/.keep", ""),
            ],
        );
        let d = dir.path();
        let (uid, gid) = nobody();
        assert_eq!(c.file, d.join("fpmd.toml"));
        assert_eq!(
            c.global,
            Global {
                pid: Some(d.join("run/fpmd.pid")),
                error_log: LogTarget::File(d.join("log/fpmd.log")),
                log_level: LogLevel::Debug,
                emergency_restart: None,
                process_control_timeout: Some(std::time::Duration::from_secs(10)),
                control_socket: d.join("run/fpmd.sock"),
                watch: true,
                daemonize: false,
                log_format: LogFormat::Fpmd,
                metrics_listen: None,
                php_ini: None,
                php_ini_scan_dir: None,
                warm_min_available: MinAvailable::DEFAULT,
            }
        );
        let names: Vec<&str> = c.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["main", "aaa", "bbb"],
            "main file first, then includes sorted by name"
        );
        assert_eq!(c.pools[0].file, d.join("fpmd.toml"));
        assert_eq!(c.pools[1].file, d.join("pool.d/a.toml"));
        assert_eq!(c.pools[2].file, d.join("pool.d/b.toml"));

        let main_pool = c.pool("main").unwrap();
        assert_eq!(
            main_pool.listen.address,
            ListenAddress::Tcp("127.0.0.1:9000".parse().unwrap())
        );
        assert_eq!(main_pool.listen.owner, None, "no owner default for TCP");

        let aaa = c.pool("aaa").unwrap();
        assert_eq!(aaa.user.uid, uid);
        assert_eq!(aaa.user.user_name, "nobody");
        assert_eq!(aaa.user.gid, gid);
        assert_eq!(aaa.user.group_name, "nogroup");
        assert_eq!(
            aaa.listen.address,
            ListenAddress::Tcp(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 9001))
        );
        assert_eq!(
            aaa.listen.allowed_clients,
            Some(vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()])
        );

        let bbb = c.pool("bbb").unwrap();
        let expected = PoolConfig {
            name: "bbb".into(),
            file: d.join("pool.d/b.toml"),
            user: Credentials {
                user_name: "nobody".into(),
                uid,
                gid,
                group_name: "nogroup".into(),
                groups: bbb.user.groups.clone(),
                home: bbb.user.home.clone(),
            },
            php_cgi: PathBuf::from("/bin/true"),
            listen: Listen {
                address: ListenAddress::Unix("/tmp/bbb.sock".into()),
                owner: Some(uid),
                group: Some(0),
                mode: 0o600,
                backlog: 128,
                allowed_clients: None,
                acl_users: Vec::new(),
                acl_groups: Vec::new(),
            },
            chdir: "/tmp".into(),
            clear_env: false,
            env: [("PATH".to_string(), "/usr/bin:/bin".to_string())].into(),
            php_values: [(
                "session.save_path".to_string(),
                "/var/lib/php/sessions".to_string(),
            )]
            .into(),
            php_admin_values: [
                ("log_errors".to_string(), "1".to_string()),
                ("memory_limit".to_string(), "128M".to_string()),
            ]
            .into(),
            pm: ProcessManager {
                mode: PmMode::Static,
                max_children: 4,
                max_requests: 500,
                spawn: Spawn::Prefork,
                max_memory: None,
            },
            request_terminate_timeout: None,
            request_slowlog_timeout: None,
            slowlog: None,
            access_log: None,
            access_format: Default::default(),
            access_suppress_paths: Vec::new(),
            request_queue_timeout: None,
            catch_workers_output: false,
            decorate_workers_output: true,
            graceful_timeout: Some(std::time::Duration::from_secs(10)),
            cgroup: Default::default(),
            pcntl: false,
            no_php_ini: false,
            limit_extensions: vec![".php".into(), ".phar".into()],
            local: LocalEndpoints {
                ping_response: "pong".into(),
                ..Default::default()
            },
            isolation: Default::default(),
            php_ini: bbb.php_ini.clone(),
        };
        assert_eq!(bbb, &expected);
        assert!(bbb.user.groups.contains(&gid));
    }

    #[test]
    fn defaults() {
        let (dir, c) = load_ok("[www]\nuser = \"nobody\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"www.d/www.sock\"\npm.max_children = 3\n", &[("www.d/.keep", "")]);
        let (uid, gid) = nobody();
        assert_eq!(
            c.global,
            Global {
                pid: None,
                error_log: LogTarget::Stderr,
                log_level: LogLevel::Notice,
                emergency_restart: None,
                process_control_timeout: None,
                control_socket: dir.path().join("fpmd.sock"),
                watch: false,
                daemonize: false,
                log_format: LogFormat::Fpmd,
                metrics_listen: None,
                php_ini: None,
                php_ini_scan_dir: None,
                warm_min_available: MinAvailable::DEFAULT,
            }
        );
        let p = &c.pools[0];
        assert_eq!(
            p.user.gid, gid,
            "group defaults to the user's primary group"
        );
        assert_eq!(p.user.group_name, "nogroup");
        assert_eq!(p.user.groups, vec![gid]);
        assert_eq!(
            p.listen.address,
            ListenAddress::Unix(dir.path().join("www.d/www.sock")),
            "relative to the file's directory"
        );
        assert_eq!(p.listen.owner, Some(uid));
        assert_eq!(p.listen.group, Some(gid));
        assert_eq!(p.listen.mode, 0o660);
        assert_eq!(p.listen.backlog, 511);
        assert_eq!(p.listen.allowed_clients, None);
        assert_eq!(p.chdir, PathBuf::from("/"));
        assert!(p.clear_env);
        assert!(p.env.is_empty() && p.php_values.is_empty() && p.php_admin_values.is_empty());
        assert_eq!(
            p.pm,
            ProcessManager {
                mode: PmMode::Static,
                max_children: 3,
                max_requests: 0,
                spawn: Spawn::Prefork,
                max_memory: None
            }
        );
        assert_eq!(p.graceful_timeout, None);
        assert!(!p.pcntl);
        assert_eq!(
            p.ini_args(),
            [
                "-d".to_string(),
                format!(
                    "disable_functions=${{disable_functions}},{}",
                    crate::config::model::PCNTL_FUNCTIONS.join(",")
                )
            ]
        );
        assert_eq!(p.cgroup, crate::cgroup::Limits::default());
    }

    #[test]
    fn include_forms() {
        // An array of patterns, an absolute pattern, a self-match and duplicates.
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a/one.toml", &pool("one", ""));
        write(dir.path(), "b/two.toml", &pool("two", ""));
        let abs = format!("{}/b/*.toml", dir.path().display());
        let main = write(
            dir.path(),
            "fpmd.toml",
            &format!(
                "[global]\ninclude = [\"a/*.toml\", {}, \"*.toml\", \"a/one.toml\"]\n",
                toml_str(&abs)
            ),
        );
        let c = load(&main).unwrap();
        let names: Vec<&str> = c.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["one", "two"]);
        assert!(load(&dir.path().join("missing.toml"))
            .unwrap_err()
            .message
            .starts_with("cannot read configuration file: "));
    }

    /// The fuzz target's entry point: the same pipeline as `load`, the
    /// files and the include glob in memory.
    #[test]
    fn load_from_memory_as_load() {
        let files: std::collections::BTreeMap<PathBuf, Vec<u8>> = [
            ("/m/fpmd.toml", INCLUDE_MAIN.to_string()),
            ("/m/pool.d/b.toml", pool("b", "")),
            ("/m/pool.d/a.toml", pool("a", "")),
            ("/m/pool.d/sub/c.toml", pool("c", "")),
            ("/m/pool.d/d.conf", pool("d", "")),
        ]
        .into_iter()
        .map(|(p, t)| (PathBuf::from(p), t.into_bytes()))
        .collect();
        let c = load_from_memory(Path::new("/m/fpmd.toml"), &files).unwrap();
        let names: Vec<&str> = c.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "b"], "sorted, '*' stops at '/', only *.toml");
        assert_eq!(c.pools[0].file, PathBuf::from("/m/pool.d/a.toml"));
        let e = load_from_memory(Path::new("/m/other.toml"), &files).unwrap_err();
        assert!(
            e.message.starts_with("cannot read configuration file: "),
            "{e}"
        );
        let bad = [(
            PathBuf::from("/m/fpmd.toml"),
            b"[www]\nuser = \"\xff\"\n".to_vec(),
        )]
        .into();
        let e = load_from_memory(Path::new("/m/fpmd.toml"), &bad).unwrap_err();
        assert_eq!(
            e.message,
            "cannot read configuration file: stream did not contain valid UTF-8"
        );
        // As load() says it of the same bytes on disk.
        let dir = tempfile::tempdir().unwrap();
        let on_disk = dir.path().join("fpmd.toml");
        std::fs::write(&on_disk, &bad[Path::new("/m/fpmd.toml")]).unwrap();
        assert_eq!(load(&on_disk).unwrap_err().message, e.message);
    }

    /// The command line's options: `-p` for relative paths and includes,
    /// `-g`, `-d` below the pool's values, `-n`, `-D`/`-F` over
    /// `daemonize`, `-O` over `error_log` unless detaching; kept in the
    /// configuration and printed as set on the command line.
    #[test]
    fn load_options() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("prefix");
        std::fs::create_dir_all(prefix.join("run")).unwrap();
        write(
            dir.path(),
            "etc/fpmd.toml",
            "[global]\npid = \"run/fpmd.pid\"\nerror_log = \"log/fpmd.log\"\ninclude = \"pool.d/*.toml\"\ndaemonize = true\n",
        );
        write(
            &prefix,
            "pool.d/www.toml",
            &pool("www", "php_value.memory_limit = \"1G\"\n")
                .replace("/tmp/www.sock", "run/www.sock"),
        );
        let main = dir.path().join("etc/fpmd.toml");
        let mut options = LoadOptions {
            prefix: Some(prefix.clone()),
            php_defines: vec![
                ("memory_limit".into(), "8M".into()),
                ("html_errors".into(), "1".into()),
                ("html_errors".into(), "0".into()),
            ],
            no_php_ini: true,
            force_stderr: true,
            ..Default::default()
        };
        let c = load_with(&main, &options).unwrap();
        assert_eq!(c.options, options);
        assert_eq!(c.global.pid, Some(prefix.join("run/fpmd.pid")));
        assert_eq!(
            c.global.error_log,
            LogTarget::File(prefix.join("log/fpmd.log")),
            "-O: not when detaching"
        );
        assert!(c.global.daemonize);
        let www = &c.pools[0];
        assert_eq!(
            www.file,
            prefix.join("pool.d/www.toml"),
            "include relative to the prefix"
        );
        assert_eq!(
            www.listen.address,
            ListenAddress::Unix(prefix.join("run/www.sock"))
        );
        assert_eq!(
            www.php_values["memory_limit"], "1G",
            "the pool's own value wins"
        );
        assert_eq!(www.php_values["html_errors"], "0", "the last -d wins");
        assert_eq!(&www.ini_args()[..3], ["-n", "-d", "html_errors=0"]);
        let text = c.to_toml_with_origins();
        assert!(
            text.contains("php_value.html_errors = \"0\" # set on the command line\n"),
            "{text}"
        );
        assert!(
            text.contains("php_value.memory_limit = \"1G\" # set in "),
            "{text}"
        );
        assert!(text.contains("# no php.ini (php-cgi -n)"), "{text}");

        options.daemonize = Some(false);
        options.pid = Some("other.pid".into());
        let c = load_with(&main, &options).unwrap();
        assert!(!c.global.daemonize, "-F");
        assert_eq!(
            c.global.error_log,
            LogTarget::Stderr,
            "-O in the foreground"
        );
        assert_eq!(
            c.global.pid,
            Some(prefix.join("other.pid")),
            "-g relative to the prefix"
        );
        let text = c.to_toml_with_origins();
        for key in ["pid", "error_log", "daemonize"] {
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{key} = "))
                    && l.ends_with("# set on the command line")),
                "{key}: {text}"
            );
        }
        assert_eq!(
            options.to_args(false),
            [
                "-p",
                prefix.to_str().unwrap(),
                "-g",
                "other.pid",
                "-d",
                "memory_limit=8M",
                "-d",
                "html_errors=1",
                "-d",
                "html_errors=0",
                "-n",
                "-F",
                "-O"
            ]
            .map(std::ffi::OsString::from)
        );
        assert!(!options.to_args(true).contains(&"-O".into()));
    }

    /// What an include glob may match: a dangling symlink, a symlink loop,
    /// a FIFO or a socket is an error at `global.include` naming it; a
    /// directory is passed over; a glob whose directory is missing is an
    /// error, one that matches nothing in an existing directory is not (as
    /// php-fpm).
    #[test]
    fn include_matches_that_cannot_be_read() {
        type Make = fn(&Path);
        let cases: [(&str, Make); 4] = [
            ("is a dangling symlink (to /nonexistent", |d| {
                std::os::unix::fs::symlink("/nonexistent", d.join("pool.d/x.toml")).unwrap()
            }),
            ("is a symlink loop", |d| {
                std::os::unix::fs::symlink("x.toml", d.join("pool.d/x.toml")).unwrap()
            }),
            ("is a FIFO, not a configuration file", |d| {
                nix::unistd::mkfifo(&d.join("pool.d/x.toml"), nix::sys::stat::Mode::S_IRWXU)
                    .unwrap()
            }),
            ("is a socket, not a configuration file", |d| {
                std::os::unix::net::UnixListener::bind(d.join("pool.d/x.toml")).unwrap();
            }),
        ];
        for (message, make) in cases {
            let dir = tempfile::tempdir().unwrap();
            let main = write(dir.path(), "fpmd.toml", &format!("# main\n{INCLUDE_MAIN}"));
            write(dir.path(), "pool.d/a.toml", &pool("a", ""));
            make(dir.path());
            let e = load(&main).unwrap_err();
            assert_eq!(
                (e.line, e.key.as_deref()),
                (Some(3), Some("global.include")),
                "{e}"
            );
            let x = dir.path().join("pool.d/x.toml");
            assert!(
                e.message.starts_with(&format!(
                    "include \"pool.d/*.toml\": {} {message}",
                    x.display()
                )),
                "{e}"
            );
        }
        // A directory is passed over; nothing matched is no error, but a
        // warning naming the pattern's line.
        let dir = tempfile::tempdir().unwrap();
        let main = write(
            dir.path(),
            "fpmd.toml",
            &format!("{INCLUDE_MAIN}\n{}", pool("m", "")),
        );
        std::fs::create_dir_all(dir.path().join("pool.d/sub.toml")).unwrap();
        let c = load(&main).unwrap();
        assert_eq!(c.pools.len(), 1);
        assert_eq!(
            c.warnings,
            [format!(
                "{}:2: key 'global.include': nothing matches the include pattern \"pool.d/*.toml\"",
                main.display()
            )]
        );
        // The glob's directory is missing.
        std::fs::remove_dir_all(dir.path().join("pool.d")).unwrap();
        let e = load(&main).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("global.include"));
        assert!(
            e.message.contains(&format!(
                "the directory {} of the glob does not exist",
                dir.path().join("pool.d").display()
            )),
            "{e}"
        );
        // A plain path that does not exist matches nothing, as in php-fpm.
        let main = write(
            dir.path(),
            "fpmd.toml",
            &format!("[global]\ninclude = \"nothere/x.toml\"\n{}", pool("m", "")),
        );
        assert!(load(&main).is_ok());
        assert_eq!(wildcard_dir("/a/b/*.toml"), Some(PathBuf::from("/a/b")));
        assert_eq!(wildcard_dir("/a/*/x.toml"), Some(PathBuf::from("/a")));
        assert_eq!(wildcard_dir("/*.toml"), Some(PathBuf::from("/")));
        assert_eq!(wildcard_dir("*.toml"), Some(PathBuf::from(".")));
        assert_eq!(wildcard_dir("/a/b.toml"), None);
    }

    #[test]
    fn find_default_config_returns_an_existing_file() {
        if let Some(p) = find_default_config() {
            assert!(p.is_file());
        }
    }

    #[test]
    fn error_display_shapes() {
        let e = ConfigError {
            file: "fpmd.toml".into(),
            line: Some(4),
            pool: None,
            key: Some("global.include".into()),
            message: "x".into(),
        };
        assert_eq!(e.to_string(), "fpmd.toml:4: key 'global.include': x");
        let e = ConfigError {
            file: "fpmd.toml".into(),
            line: None,
            pool: None,
            key: None,
            message: "no pool defined".into(),
        };
        assert_eq!(e.to_string(), "fpmd.toml: no pool defined");
        let e = ConfigError {
            file: "pool.d/www.toml".into(),
            line: Some(1),
            pool: Some("www".into()),
            key: None,
            message: "m".into(),
        };
        assert_eq!(e.to_string(), "pool.d/www.toml:1: [www] m");
    }
}
