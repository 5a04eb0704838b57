//! Writing a [`Reading`] as the TOML document fpmd's own files are, one
//! line per setting, each line's origin kept by [`Emitter`]: the global
//! section, what the children read, each pool, `process.max`; each value
//! converted as `fpm_conf_set_*` reads it.
//!
//! Must not touch: the reading of the files (`read.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::super::source::normalize;
use super::super::toml::{dotted, toml_key, toml_str};
use super::directives::{self, Action, Kind};
use super::values::{boolean, integer, somaxconn, time, INI_TO_EXPAND};
use super::{error, place, ConfigError, Origin, PoolIni, Reading, Translation, Val};

/// A global directive php-fpm gives every pool: the pool key, its TOML
/// value, where it was set.
type PoolDefault = (&'static str, String, Origin);

/// `process.max`'s value and where it was set.
type ProcessMax = (i64, Origin);

impl Reading<'_> {
    /// The TOML document: `[global]` with what php-fpm has by default that
    /// fpmd's differs from, then each pool, then the `process.max` check.
    /// Errors: a value of the wrong kind, a refused directive, a pool
    /// without `pm`, `process.max` exceeded, each at its file and line.
    pub(super) fn emit(mut self, main: &Path, main_dir: &Path) -> Result<Translation, ConfigError> {
        let mut out = Emitter::default();
        out.line("[global]".into(), None);
        let global = std::mem::take(&mut self.global);
        let (pool_defaults, process_max) = self.emit_global(&global, main, &mut out)?;
        self.emit_php_ini(&global, main_dir, &mut out);
        let mut sections = BTreeMap::new();
        let mut children: i64 = 0;
        let pools = std::mem::take(&mut self.pools);
        for p in &pools {
            out.line(format!("\n[{}]", toml_key(&p.name)), Some(p.at.clone()));
            sections.insert(p.name.clone(), p.at.clone());
            self.emit_pool(p, &pool_defaults, main_dir, &mut children, &mut out)?;
        }
        self.check_process_max(process_max, children)?;
        let (text, lines) = out.finish();
        Ok(Translation {
            text,
            lines,
            sections,
            files: self.files,
            include_globs: self.include_globs,
            notices: self.notices,
            main: main.to_path_buf(),
        })
    }

    /// The global directives, into `out` or, for those php-fpm gives every
    /// pool, the returned pool defaults (key, TOML value, origin); and
    /// `process.max` with its origin, checked once the pools are known.
    fn emit_global(
        &mut self,
        global: &[(String, Val)],
        main: &Path,
        out: &mut Emitter,
    ) -> Result<(Vec<PoolDefault>, Option<ProcessMax>), ConfigError> {
        let mut pool_defaults: Vec<PoolDefault> = Vec::new();
        let mut process_max: Option<ProcessMax> = None;
        // php-fpm's configuration, php-fpm's log lines: the tools and
        // scripts that read its log keep working.
        if !global.iter().any(|(n, _)| n == "log_format") {
            out.line("log_format = \"php-fpm\"".into(), None);
        }
        // The control socket this file's daemon has by default
        // (`ctl::default_path`), written out so that its conversion, loaded
        // from another path, keeps it: `fpmd reload` then reaches the
        // daemon whichever of the two files it names. With a pid file it
        // is beside that, which the conversion keeps anyway.
        let set = |name: &str| global.iter().any(|(n, _)| n == name);
        if !set("control_socket") && !set("pid") {
            let socket = crate::config::paths::default_path(main, None);
            out.line(
                format!("control_socket = {}", toml_str(&socket.to_string_lossy())),
                None,
            );
        }
        for (name, val) in global {
            let (_, action) = directives::find(directives::GLOBAL, name).expect("stored by name");
            let at = &val.at;
            match action {
                Action::To(key, kind) => {
                    if let Some(v) = self.convert(kind, &val.value, at, None, name, None)? {
                        out.line(format!("{} = {v}", key), Some(at.clone()));
                    }
                }
                Action::PoolDefault(key, kind) => {
                    if let Some(v) = self.convert(kind, &val.value, at, None, name, None)? {
                        pool_defaults.push((key, v, at.clone()));
                    }
                }
                Action::Notice(kind, why) => {
                    self.convert(kind, &val.value, at, None, name, None)?;
                    self.notices.push(format!(
                        "{}: NOTICE: '{name}' is accepted and has no effect: {why}",
                        place(at)
                    ));
                }
                Action::Refuse(why) => {
                    return Err(error(
                        at,
                        None,
                        Some(name),
                        format!("not supported by fpmd: {why}"),
                    ));
                }
                Action::ProcessMax => {
                    let v = self
                        .convert(Kind::Int, &val.value, at, None, name, None)?
                        .unwrap_or_default();
                    let n: i64 = v.parse().unwrap_or(0);
                    if n < 0 {
                        return Err(error(at, None, Some(name), "process_max can't be negative"));
                    }
                    process_max = Some((n, at.clone()));
                }
                Action::Prefix => unreachable!("a pool directive"),
            }
        }
        Ok((pool_defaults, process_max))
    }

    /// `php_ini` and `php_ini_scan_dir`, unless the file sets them: what
    /// this php-fpm's children read.
    fn emit_php_ini(&self, global: &[(String, Val)], main_dir: &Path, out: &mut Emitter) {
        // What this php-fpm's children read (see the module docs): the
        // php.ini beside the file, else Debian's php-fpmX.Y's compiled-in
        // PHP_CONFIG_FILE_PATH for the X.Y of the php-cgi the pools run.
        let fpm_dir = |php_cgi: Option<&str>| -> Option<PathBuf> {
            let cgi =
                super::super::php::resolve_php_cgi(php_cgi, main_dir, std::env::var_os("PATH"))
                    .ok()?;
            let v = super::super::php::debian_php_version(&cgi)?;
            Some(PathBuf::from(format!("/etc/php/{v}/fpm")))
        };
        let first_cgi = self.pools.first().and_then(|p| {
            p.scalars
                .iter()
                .find(|(n, _)| n == "php_cgi")
                .map(|(_, v)| v.value.clone())
        });
        let ini_dir = [Some(main_dir.to_path_buf()), fpm_dir(first_cgi.as_deref())]
            .into_iter()
            .flatten()
            .find(|d| self.reader.canonicalize(&d.join("php.ini")).is_some());
        // PHP reads $PHPRC (a php.ini or its directory) before any other
        // place (`php_ini.c`, every SAPI): php-fpm started with it set
        // gives its children that php.ini, and so does fpmd.
        let phprc = std::env::var_os("PHPRC")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        let set = |key: &str| global.iter().any(|(n, _)| n == key);
        if !set("php_ini") {
            let ini = phprc.or_else(|| ini_dir.as_ref().map(|d| d.join("php.ini")));
            if let Some(ini) = ini {
                out.line(
                    format!("php_ini = {}", toml_str(&ini.to_string_lossy())),
                    None,
                );
            }
        }
        if !set("php_ini_scan_dir") {
            if let Some(dir) = &ini_dir {
                let confd = dir.join("conf.d");
                let scan = if self.reader.canonicalize(&confd).is_some() {
                    confd.to_string_lossy().into_owned()
                } else {
                    String::new()
                };
                out.line(format!("php_ini_scan_dir = {}", toml_str(&scan)), None);
            }
        }
    }

    /// One pool's keys, after its header: its scalars (the `prefix` it
    /// sets applies to its paths), the pool defaults it does not set, the
    /// kernel's backlog, its arrays and `access.suppress_path`. Its
    /// `pm.max_children` is added to `children`.
    fn emit_pool(
        &mut self,
        p: &PoolIni,
        pool_defaults: &[PoolDefault],
        main_dir: &Path,
        children: &mut i64,
        out: &mut Emitter,
    ) -> Result<(), ConfigError> {
        let saved_prefix = self.prefix.clone();
        self.enter_prefix(p)?;
        let chrooted = p
            .scalars
            .iter()
            .any(|(n, v)| n == "chroot" && !v.value.is_empty());
        let set = self.emit_scalars(p, main_dir, children, out)?;
        if !set.contains(&"pm.mode") {
            return Err(error(
                &p.at,
                Some(&p.name),
                Some("pm"),
                "the process manager is missing (static, dynamic or ondemand)",
            ));
        }
        if !set.contains(&"pm.start_servers") {
            self.start_servers_notice(p);
        }
        for (key, v, at) in pool_defaults {
            if !set.contains(key) {
                out.line(format!("{key} = {v}"), Some(at.clone()));
            }
        }
        if !set.contains(&"listen.backlog") {
            out.line(format!("listen.backlog = {}", somaxconn()), None);
        }
        self.emit_arrays(p, chrooted, out);
        if let Some(first) = p.suppress.first() {
            let list: Vec<String> = p.suppress.iter().map(|v| toml_str(&v.value)).collect();
            out.line(
                format!("access.suppress_path = [{}]", list.join(", ")),
                Some(first.at.clone()),
            );
        }
        self.prefix = saved_prefix;
        Ok(())
    }

    /// php-fpm's notice for a `dynamic` pool without `pm.start_servers`
    /// (`fpm_conf.c`: `[pool www] pm.start_servers is not set. It's been set
    /// to 2.`), with the value it and fpmd both take, halfway between the
    /// spare servers (a pool whose spares are not numbers fails later, at
    /// their keys).
    fn start_servers_notice(&mut self, p: &PoolIni) {
        let value = |key: &str| {
            p.scalars
                .iter()
                .rev()
                .find(|(n, _)| n == key)
                .map(|(_, v)| v.value.trim().to_string())
        };
        if value("pm").as_deref() != Some("dynamic") {
            return;
        }
        let spare = |key: &str| value(key).and_then(|v| v.parse::<i64>().ok());
        if let (Some(min), Some(max)) =
            (spare("pm.min_spare_servers"), spare("pm.max_spare_servers"))
        {
            self.notices.push(format!(
                "[pool {}] pm.start_servers is not set. It's been set to {}.",
                p.name,
                min + (max - min) / 2
            ));
        }
    }

    /// The pool's `prefix`, when it sets one, becomes the prefix of its
    /// paths. Errors: it is not a directory.
    fn enter_prefix(&mut self, p: &PoolIni) -> Result<(), ConfigError> {
        if let Some((_, v)) = p.scalars.iter().find(|(n, _)| n == "prefix") {
            if !v.value.is_empty() {
                let dir = normalize(&self.prefix.join(&v.value));
                if self.reader.canonicalize(&dir).is_none() {
                    return Err(error(
                        &v.at,
                        Some(&p.name),
                        Some("prefix"),
                        format!(
                            "the prefix '{}' does not exist or is not a directory",
                            dir.display()
                        ),
                    ));
                }
                self.prefix = dir;
            }
        }
        Ok(())
    }

    /// The pool's scalar directives, into `out`; the keys written.
    fn emit_scalars(
        &mut self,
        p: &PoolIni,
        main_dir: &Path,
        children: &mut i64,
        out: &mut Emitter,
    ) -> Result<Vec<&'static str>, ConfigError> {
        let mut set: Vec<&'static str> = Vec::new();
        for (name, val) in &p.scalars {
            let (_, action) = directives::find(directives::POOL, name).expect("stored by name");
            let at = &val.at;
            match action {
                Action::To(key, kind) => {
                    if let Some(v) =
                        self.convert(kind, &val.value, at, Some(&p.name), name, Some(main_dir))?
                    {
                        if key == "pm.max_children" {
                            *children += v.parse::<i64>().unwrap_or(0);
                        }
                        if key == "pm.start_servers" && v == "0" {
                            // php-fpm takes 0 as not set (fpm_conf.c:
                            // `if (!config->pm_start_servers)`): the
                            // default, with its notice.
                            continue;
                        }
                        out.line(format!("{key} = {v}"), Some(at.clone()));
                        set.push(key);
                    }
                }
                Action::Notice(kind, why) => {
                    self.convert(kind, &val.value, at, Some(&p.name), name, None)?;
                    self.notices.push(format!(
                        "{}: NOTICE: [{}] '{name}' is accepted and has no effect: {why}",
                        place(at),
                        p.name
                    ));
                }
                Action::Refuse(why) => {
                    return Err(error(
                        at,
                        Some(&p.name),
                        Some(name),
                        format!("not supported by fpmd: {why}"),
                    ));
                }
                Action::Prefix => {}
                Action::PoolDefault(..) | Action::ProcessMax => {
                    unreachable!("global directives")
                }
            }
        }
        Ok(set)
    }

    /// The pool's `env[…]`, `php_value[…]` and `php_admin_value[…]`, the
    /// path values php-fpm expands made absolute unless the pool is
    /// chrooted.
    fn emit_arrays(&self, p: &PoolIni, chrooted: bool, out: &mut Emitter) {
        for (family, key, val) in &p.arrays {
            let mut value = val.value.clone();
            // php-fpm leaves php_admin_value[error_log] = syslog alone.
            let syslog = *family == "php_admin_value"
                && key.eq_ignore_ascii_case("error_log")
                && value.eq_ignore_ascii_case("syslog");
            let expand = *family != "env"
                && !chrooted
                && INI_TO_EXPAND.iter().any(|k| k.eq_ignore_ascii_case(key))
                && !value.is_empty()
                && !value.starts_with('/');
            if expand && !syslog {
                value = normalize(&self.prefix.join(&value))
                    .to_string_lossy()
                    .into_owned();
            }
            out.line(
                format!(
                    "{} = {}",
                    dotted(&[family.to_string(), key.clone()]),
                    toml_str(&value)
                ),
                Some(val.at.clone()),
            );
        }
    }

    /// `process.max`, when set above 0: the pools' `pm.max_children` may
    /// not add up to more (php-fpm's check); a notice says it holds.
    fn check_process_max(
        &mut self,
        process_max: Option<ProcessMax>,
        children: i64,
    ) -> Result<(), ConfigError> {
        if let Some((n, at)) = process_max {
            if n > 0 && children > n {
                return Err(error(&at, None, Some("process.max"), format!(
                "the pools' pm.max_children add up to {children}, more than process.max = {n}: fpmd runs every child it is given, so lower pm.max_children (or raise process.max)"
            )));
            }
            self.notices.push(format!(
                "{}: NOTICE: 'process.max' holds: the pools' pm.max_children add up to {children}",
                place(&at)
            ));
        }
        Ok(())
    }

    /// A value of `kind` as a TOML value; `None`: unset (an empty string).
    fn convert(
        &self,
        kind: Kind,
        v: &str,
        at: &Origin,
        pool: Option<&str>,
        name: &str,
        _main_dir: Option<&Path>,
    ) -> Result<Option<String>, ConfigError> {
        let err = |m: String| error(at, pool, Some(name), m);
        let path = |p: &str| {
            normalize(&self.prefix.join(p))
                .to_string_lossy()
                .into_owned()
        };
        Ok(Some(match kind {
            Kind::Str if v.is_empty() => return Ok(None),
            Kind::Str | Kind::Text => toml_str(v),
            Kind::Path | Kind::Listen | Kind::Chroot | Kind::ErrorLog if v.is_empty() => return Ok(None),
            Kind::Path => toml_str(&path(v)),
            Kind::ErrorLog if v.eq_ignore_ascii_case("syslog") => {
                return Err(err("not supported by fpmd: error_log = syslog; write a file path, or leave error_log out for stderr (journald keeps it under systemd)".into()))
            }
            Kind::ErrorLog => toml_str(&path(v)),
            Kind::Listen => {
                let unix = !v.contains(':') && !v.bytes().all(|b| b.is_ascii_digit());
                if unix {
                    toml_str(&path(v))
                } else {
                    toml_str(v)
                }
            }
            Kind::Chroot => {
                let v = match v.find("$prefix") {
                    Some(0) => {
                        let rest = v["$prefix".len()..].trim_start_matches('/');
                        if rest.is_empty() { self.prefix.to_string_lossy().into_owned() } else { path(rest) }
                    }
                    Some(_) => return Err(err("'$prefix' must be use at the beginning of the value (php-fpm's words)".into())),
                    None => path(v),
                };
                toml_str(&v)
            }
            Kind::Int | Kind::Backlog | Kind::Rlimit => {
                if kind == Kind::Rlimit && v == "unlimited" {
                    return Ok(Some(toml_str("unlimited")));
                }
                let n = integer(v).ok_or_else(|| err(format!("'{v}' is not a valid number (greater or equal than zero)")))?;
                if kind == Kind::Backlog && n < 0 {
                    somaxconn().to_string()
                } else {
                    n.to_string()
                }
            }
            Kind::Bool => boolean(v).ok_or_else(|| err(format!("invalid boolean value '{v}' (yes/no, on/off, true/false, 1/0)")))?.to_string(),
            Kind::Time => time(v).map_err(|m| err(format!("{m} '{v}' (seconds, or a number with s, m, h or d)")))?.to_string(),
            Kind::Pm => match v.to_ascii_lowercase().as_str() {
                m @ ("static" | "dynamic" | "ondemand") => toml_str(m),
                _ => return Err(err(format!("invalid process manager '{v}' (static, dynamic or ondemand)"))),
            },
            Kind::LogLevel => match v.to_ascii_lowercase().as_str() {
                l @ ("alert" | "error" | "warning" | "notice" | "debug") => toml_str(l),
                _ => return Err(err(format!("invalid value for 'log_level': '{v}' (alert, error, warning, notice or debug)"))),
            },
        }))
    }
}

#[derive(Default)]
struct Emitter {
    text: String,
    lines: Vec<Option<Origin>>,
}

impl Emitter {
    fn line(&mut self, text: String, origin: Option<Origin>) {
        for (i, l) in text.split('\n').enumerate() {
            self.text.push_str(l);
            self.text.push('\n');
            // The origin goes with the last line of the text.
            let last = i == text.split('\n').count() - 1;
            self.lines.push(if last { origin.clone() } else { None });
        }
    }

    fn finish(self) -> (String, Vec<Option<Origin>>) {
        (self.text, self.lines)
    }
}
