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
//! php-src `sapi/fpm/fpm/fpm_conf.c`); the line scanner is `scan.rs`, the
//! directive table `directives.rs`. Must not touch: anything after the
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
pub(crate) mod scan;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::source::normalize;
use super::toml::{dotted, toml_key, toml_str};
use super::{Config, ConfigError, LoadOptions, Reader};
use directives::{Action, Kind};
use scan::Statement;

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
    }
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
        return Err(ConfigError::file_only(
            main,
            "No pool defined. at least one pool section must be specified in config file (php-fpm's words)",
        ));
    }
    r.emit(main, &dir)
}

impl Reading<'_> {
    fn read_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        if self.depth >= 5 {
            return Err(ConfigError::file_only(
                path,
                "failed to include more than 5 files recursively",
            ));
        }
        let text = self.reader.read_text(path)?;
        self.files.push(path.to_path_buf());
        self.depth += 1;
        for (i, line) in text.split('\n').enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            let at = |directive: &str| Origin {
                file: path.to_path_buf(),
                line: i + 1,
                directive: directive.to_string(),
            };
            let pool = self.current.map(|c| self.pools[c].name.clone());
            let scanned = scan::scan_line(line, &|name| std::env::var(name).ok())
                .map_err(|m| error(&at(""), pool.as_deref(), None, m))?;
            for name in &scanned.unknown_constants {
                self.notices.push(format!(
                    "{}: WARNING: '{name}' is kept as written: php-fpm would replace it by the PHP constant of that name, whose value fpmd cannot know (quote it to mean the text)",
                    place(&at(""))
                ));
            }
            for statement in scanned.statements {
                if let Statement::Array { key, .. } = &statement {
                    for (name, value) in &scanned.replaced_constants {
                        if value == key {
                            self.notices.push(format!(
                                "{}: WARNING: the key [{name}] is the PHP constant {name}, which php-fpm replaces by its value: this is [{value}], as in php-fpm; write ['{name}'] to mean the name",
                                place(&at(""))
                            ));
                        }
                    }
                }
                self.statement(statement, &at)?;
            }
        }
        self.depth -= 1;
        Ok(())
    }

    fn statement(
        &mut self,
        statement: Statement,
        at: &dyn Fn(&str) -> Origin,
    ) -> Result<(), ConfigError> {
        let pool_name = self.current.map(|c| self.pools[c].name.clone());
        let pool = pool_name.as_deref();
        match statement {
            Statement::Section(name) => {
                if name.eq_ignore_ascii_case("global") {
                    self.current = None;
                } else if let Some(i) = self
                    .pools
                    .iter()
                    .position(|p| p.name.eq_ignore_ascii_case(&name))
                {
                    self.current = Some(i);
                } else {
                    self.pools.push(PoolIni {
                        at: at(&format!("[{name}]")),
                        name,
                        scalars: Vec::new(),
                        arrays: Vec::new(),
                        suppress: Vec::new(),
                    });
                    self.current = Some(self.pools.len() - 1);
                }
            }
            Statement::NoValue(name) => {
                return Err(error(&at(&name), pool, Some(&name), "value is NULL for a ZEND_INI_PARSER_ENTRY (php-fpm's words: a directive needs '= value')"));
            }
            Statement::Entry { name, value } if name == "include" => {
                self.include(&value, &at("include"))?;
            }
            Statement::Entry { name, value } => {
                let origin = at(&name);
                let (table, other, other_name) = match self.current {
                    None => (directives::GLOBAL, directives::POOL, "a pool"),
                    Some(_) => (directives::POOL, directives::GLOBAL, "the [global]"),
                };
                let Some((canonical, _)) = directives::find(table, &name) else {
                    let hint = if directives::find(other, &name).is_some() {
                        format!(" ('{name}' belongs in {other_name} section)")
                    } else if directives::ARRAYS.contains(&name.as_str()) {
                        format!(" (write {name}[NAME] = value)")
                    } else if let Some(s) =
                        super::structure::closest(&name, table.iter().map(|(n, _)| *n))
                    {
                        format!(" (did you mean '{s}'?)")
                    } else {
                        String::new()
                    };
                    return Err(error(
                        &origin,
                        pool,
                        Some(&name),
                        format!("unknown entry '{name}'{hint}"),
                    ));
                };
                let value = match pool {
                    Some(p) => value.replace("$pool", p),
                    None if value.contains("$pool")
                        && matches!(directives::find(table, &name), Some((_, Action::To(_, k) | Action::PoolDefault(_, k) | Action::Notice(k, _))) if is_string(k)) =>
                    {
                        return Err(error(
                            &origin,
                            None,
                            Some(&name),
                            "Can't use '$pool' when the pool is not defined",
                        ));
                    }
                    None => value,
                };
                let entry = (canonical.to_string(), Val { value, at: origin });
                let list = match self.current {
                    None => &mut self.global,
                    Some(c) => &mut self.pools[c].scalars,
                };
                list.retain(|(k, _)| *k != entry.0);
                list.push(entry);
            }
            Statement::Array { name, key, value } => {
                let origin = at(&format!("{name}[{key}]"));
                if name == "access.suppress_path" {
                    if !key.is_empty() {
                        return Err(error(
                            &origin,
                            pool,
                            Some(&origin.directive),
                            "Keys provided to field 'access.suppress_path' are ignored",
                        ));
                    }
                    if !value.starts_with('/') {
                        return Err(error(
                            &origin,
                            pool,
                            Some(&origin.directive),
                            "Values provided to field 'access.suppress_path' must begin with '/'",
                        ));
                    }
                } else if key.is_empty() {
                    return Err(error(
                        &origin,
                        pool,
                        Some(&origin.directive),
                        format!("You must provide a key for field '{name}'"),
                    ));
                }
                let Some(c) = self.current else {
                    return Err(error(
                        &origin,
                        None,
                        Some(&origin.directive),
                        "Array are not allowed in the global section",
                    ));
                };
                let family = match name.as_str() {
                    "env" => "env",
                    "php_value" | "php_flag" => "php_value",
                    "php_admin_value" | "php_admin_flag" => "php_admin_value",
                    "access.suppress_path" => {
                        let p = &mut self.pools[c];
                        p.suppress.push(Val { value, at: origin });
                        return Ok(());
                    }
                    _ => {
                        return Err(error(
                            &origin,
                            pool,
                            Some(&name),
                            format!("unknown directive '{name}'"),
                        ));
                    }
                };
                let value = if name.ends_with("_flag") {
                    match boolean(&value) {
                        Some(b) => if b { "1" } else { "0" }.to_string(),
                        None => {
                            return Err(error(
                                &origin,
                                pool,
                                Some(&origin.directive),
                                format!(
                                    "error while parsing '{name}[{key}]' : invalid boolean value"
                                ),
                            ))
                        }
                    }
                } else {
                    if family == "env" && value.is_empty() {
                        return Err(error(&origin, pool, Some(&origin.directive), "empty value"));
                    }
                    value.replace("$pool", &self.pools[c].name)
                };
                let p = &mut self.pools[c];
                if let Some((_, _, first)) =
                    p.arrays.iter().find(|(f, k, _)| *f == family && *k == key)
                {
                    self.notices.push(format!(
                        "{}: WARNING: [{}] {} has no effect: php-fpm applies the first value of {family}[{key}] (at {}), and so does fpmd",
                        place(&origin), p.name, origin.directive, place(&first.at)
                    ));
                } else {
                    p.arrays.push((family, key, Val { value, at: origin }));
                }
            }
        }
        Ok(())
    }

    fn include(&mut self, value: &str, at: &Origin) -> Result<(), ConfigError> {
        let pool = self.current.map(|c| self.pools[c].name.clone());
        let full = if value.starts_with('/') {
            value.to_string()
        } else {
            format!(
                "{}/{value}",
                glob::Pattern::escape(&self.prefix.to_string_lossy()).trim_end_matches('/')
            )
        };
        let pattern = glob::Pattern::new(&full).map_err(|e| {
            error(
                at,
                pool.as_deref(),
                Some("include"),
                format!("invalid glob pattern '{value}': {e}"),
            )
        })?;
        let mut matched = self
            .reader
            .glob(&pattern)
            .map_err(|m| error(at, pool.as_deref(), Some("include"), m))?;
        matched.sort();
        self.include_globs.push(full.clone());
        if matched.is_empty() {
            let wildcard = full.contains(['*', '?', '[']);
            let dir: PathBuf = Path::new(&full)
                .components()
                .take_while(|c| !c.as_os_str().to_string_lossy().contains(['*', '?', '[']))
                .collect();
            let dir = if wildcard {
                dir
            } else {
                dir.parent().map(Path::to_path_buf).unwrap_or_default()
            };
            if wildcard && self.reader.canonicalize(&dir).is_none() {
                return Err(error(at, pool.as_deref(), Some("include"), format!(
                    "Unable to globalize '{full}' (ret=2) (php-fpm's words: the directory {} does not exist)", dir.display()
                )));
            }
            self.notices.push(format!(
                "{}: WARNING: Nothing matches the include pattern '{full}'",
                place(at)
            ));
        }
        for file in matched {
            self.read_file(&file)?;
        }
        Ok(())
    }

    /// The TOML document.
    fn emit(mut self, main: &Path, main_dir: &Path) -> Result<Translation, ConfigError> {
        let mut out = Emitter::default();
        out.line("[global]".into(), None);
        let mut pool_defaults: Vec<(&'static str, String, Origin)> = Vec::new();
        let mut process_max: Option<(i64, Origin)> = None;
        let global = std::mem::take(&mut self.global);
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
        for (name, val) in &global {
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
        // What this php-fpm's children read (see the module docs): the
        // php.ini beside the file, else Debian's php-fpmX.Y's compiled-in
        // PHP_CONFIG_FILE_PATH for the X.Y of the php-cgi the pools run.
        let fpm_dir = |php_cgi: Option<&str>| -> Option<PathBuf> {
            let cgi =
                super::php::resolve_php_cgi(php_cgi, main_dir, std::env::var_os("PATH")).ok()?;
            let v = super::php::debian_php_version(&cgi)?;
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
        let mut sections = BTreeMap::new();
        let mut children: i64 = 0;
        let pools = std::mem::take(&mut self.pools);
        for p in &pools {
            out.line(format!("\n[{}]", toml_key(&p.name)), Some(p.at.clone()));
            sections.insert(p.name.clone(), p.at.clone());
            let saved_prefix = self.prefix.clone();
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
            let chrooted = p
                .scalars
                .iter()
                .any(|(n, v)| n == "chroot" && !v.value.is_empty());
            let mut set: Vec<&str> = Vec::new();
            for (name, val) in &p.scalars {
                let (_, action) = directives::find(directives::POOL, name).expect("stored by name");
                let at = &val.at;
                match action {
                    Action::To(key, kind) => {
                        if let Some(v) =
                            self.convert(kind, &val.value, at, Some(&p.name), name, Some(main_dir))?
                        {
                            if key == "pm.max_children" {
                                children += v.parse::<i64>().unwrap_or(0);
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
            if !set.contains(&"pm.mode") {
                return Err(error(
                    &p.at,
                    Some(&p.name),
                    Some("pm"),
                    "the process manager is missing (static, dynamic or ondemand)",
                ));
            }
            for (key, v, at) in &pool_defaults {
                if !set.contains(key) {
                    out.line(format!("{key} = {v}"), Some(at.clone()));
                }
            }
            if !set.contains(&"listen.backlog") {
                out.line(format!("listen.backlog = {}", somaxconn()), None);
            }
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
            if let Some(first) = p.suppress.first() {
                let list: Vec<String> = p.suppress.iter().map(|v| toml_str(&v.value)).collect();
                out.line(
                    format!("access.suppress_path = [{}]", list.join(", ")),
                    Some(first.at.clone()),
                );
            }
            self.prefix = saved_prefix;
        }
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

fn is_string(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Str | Kind::Text | Kind::Path | Kind::Listen | Kind::Chroot | Kind::ErrorLog
    )
}

/// php-fpm's `FPM_PHP_INI_TO_EXPAND` (`sapi/fpm/fpm/fpm_php.h`): php
/// values that are paths, made absolute against the prefix.
const INI_TO_EXPAND: &[&str] = &[
    "error_log",
    "extension_dir",
    "mime_magic.magicfile",
    "sendmail_path",
    "session.cookie_path",
    "session_pgsql.sem_file_name",
    "soap.wsdl_cache_dir",
    "uploadprogress.file.filename_template",
    "xdebug.output_dir",
    "xdebug.profiler_output_dir",
    "xdebug.trace_output_dir",
    "xmms.path",
    "axis2.client_home",
    "blenc.key_file",
    "coin_acceptor.device",
];

/// `fpm_conf_set_boolean`'s values (after the scanner made yes/on/true
/// `1` and no/off/false/none empty).
fn boolean(v: &str) -> Option<bool> {
    match v {
        "1" | "yes" | "true" | "on" => Some(true),
        "" | "0" | "no" | "none" | "false" | "off" => Some(false),
        _ => None,
    }
}

/// `fpm_conf_set_integer`: an optional leading `-` and digits (empty is 0).
fn integer(v: &str) -> Option<i64> {
    let digits = v.strip_prefix('-').unwrap_or(v);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if digits.is_empty() {
        return Some(0);
    }
    v.parse().ok()
}

/// `fpm_conf_set_time`: seconds.
fn time(v: &str) -> Result<i64, &'static str> {
    let atoi = |s: &str| -> i64 {
        let t = s.trim_start();
        let end = t
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
            .map_or(t.len(), |(i, _)| i);
        t[..end].parse().unwrap_or(0)
    };
    let Some(last) = v.chars().last() else {
        return Err("invalid time value");
    };
    let body = &v[..v.len() - last.len_utf8()];
    Ok(match last {
        's' => atoi(body),
        'm' => 60 * atoi(body),
        'h' => 3600 * atoi(body),
        'd' => 86400 * atoi(body),
        c if c.is_ascii_digit() => atoi(v),
        _ => return Err("unknown suffix used in time value"),
    })
}

/// The kernel's largest `listen(2)` backlog (what php-fpm's -1 gets).
fn somaxconn() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096)
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

impl Translation {
    fn origin_of(&self, line: usize) -> Option<&Origin> {
        self.lines.get(line.checked_sub(1)?)?.as_ref()
    }

    /// An error of the TOML pipeline, located in the php-fpm files.
    pub(super) fn map_error(&self, e: ConfigError) -> ConfigError {
        if e.file != self.main {
            return e;
        }
        let message = self.map_places(&e.message);
        let origin = e
            .line
            .and_then(|l| self.origin_of(l))
            .filter(|o| !o.directive.starts_with('['))
            .or_else(|| e.pool.as_ref().and_then(|p| self.sections.get(p)))
            .or_else(|| e.line.and_then(|l| self.origin_of(l)));
        match origin {
            Some(o) => ConfigError {
                file: o.file.clone(),
                line: Some(o.line),
                key: match &e.key {
                    Some(_) if !o.directive.starts_with('[') => Some(o.directive.clone()),
                    k => k.clone(),
                },
                pool: e.pool,
                message,
            },
            None => ConfigError {
                line: None,
                message,
                ..e
            },
        }
    }

    /// `MAIN:LINE` in a message → the php-fpm file and line.
    fn map_places(&self, message: &str) -> String {
        let needle = format!("{}:", self.main.display());
        let mut out = String::new();
        let mut rest = message;
        while let Some(i) = rest.find(&needle) {
            out.push_str(&rest[..i]);
            let after = &rest[i + needle.len()..];
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            match after[..digits]
                .parse::<usize>()
                .ok()
                .and_then(|l| self.origin_of(l))
            {
                Some(o) => out.push_str(&format!("{}:{}", o.file.display(), o.line)),
                None => out.push_str(&rest[i..i + needle.len() + digits]),
            }
            rest = &after[digits..];
        }
        out.push_str(rest);
        out
    }

    /// The loaded configuration, told where each value really came from.
    pub(super) fn fix_up(&self, config: &mut Config) {
        for pool in &mut config.pools {
            if let Some(at) = self.sections.get(&pool.name) {
                pool.file = at.file.clone();
            }
        }
        for keys in config.origins.0.values_mut() {
            let mapped = std::mem::take(keys)
                .into_iter()
                .filter_map(|(k, (_, line))| {
                    self.origin_of(line).map(|o| (k, (o.file.clone(), o.line)))
                })
                .collect();
            *keys = mapped;
        }
        config.sources.files = self.files.clone();
        config.sources.include_globs = self.include_globs.clone();
        config.notices = self.notices.clone();
    }

    /// `fpmd convert`'s output: the document with where each line came
    /// from as a comment (`# www.conf:12 pm.max_children`).
    pub(super) fn annotated(&self) -> String {
        let mut out = format!(
            "# fpmd configuration converted from {}\n# Paths are absolute; values php-fpm has by default that fpmd's defaults differ from are written out.\n",
            self.main.display()
        );
        for n in &self.notices {
            out.push_str(&format!("# {n}\n"));
        }
        out.push('\n');
        for (i, line) in self.text.lines().enumerate() {
            out.push_str(line);
            match self.lines.get(i).and_then(|o| o.as_ref()) {
                Some(o) if line.starts_with('[') => {
                    out.push_str(&format!(" # {}:{}", o.file.display(), o.line))
                }
                Some(o) => out.push_str(&format!(
                    " # {}:{} {}",
                    o.file.display(),
                    o.line,
                    o.directive
                )),
                None if line.starts_with("listen.backlog") => {
                    out.push_str(" # php-fpm's default -1: the kernel's maximum")
                }
                None if line.starts_with("control_socket") => {
                    out.push_str(" # the default of the daemon started on the php-fpm configuration")
                }
                None if line.starts_with("php_ini") => {
                    out.push_str(" # what php-fpm reads: the php.ini beside its configuration, else its compiled-in one")
                }
                None => {}
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests;
