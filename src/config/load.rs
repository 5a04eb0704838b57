//! Reading the configuration: the files (from the file system, or from
//! memory for the fuzz target), the main file's `include` globs, and the
//! pipeline from the main file's document to a validated [`Config`]
//! (structure, deserialization, validation of `[global]` and of each pool,
//! the checks across pools and of the host).

use std::path::{Path, PathBuf};

use super::source::{self, SourceFile};
use super::users::{self, Ids};
use super::{
    fpm, raw, structure, validate, Config, ConfigError, LoadOptions, LogTarget, Origins, Sources,
};

/// Where the configuration's files come from: the file system ([`load`]) or
/// memory ([`load_from_memory`]).
pub(super) trait Reader {
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

pub(super) struct FileSystem;

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
pub(super) fn wildcard_dir(pattern: &str) -> Option<PathBuf> {
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

pub(super) struct Memory<'a>(pub(super) &'a std::collections::BTreeMap<PathBuf, Vec<u8>>);

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

#[cfg(test)]
pub(super) fn load_as(path: &Path, ids: Ids) -> Result<Config, ConfigError> {
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
pub(super) fn load_from(
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
    structure::check_structure(&main, true)?;
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
        let configured = std::mem::replace(&mut global.error_log, LogTarget::Stderr);
        if let LogTarget::File(p) = configured {
            global.unused_error_log = Some(p);
        }
    }

    let mut files = vec![(main, raw_main.pools)];
    let (included, warnings) = find_includes(reader, &files[0].0, &includes)?;
    for inc in included {
        let src = read(&inc)?;
        structure::check_structure(&src, false)?;
        let raw = raw::deserialize_file(&src)?;
        files.push((src, raw.pools));
    }

    validate::check_pool_names(&files)?;

    // Each pool straight into its Arc: a Vec<PoolConfig> collected into
    // Vec<Arc<PoolConfig>> would keep its buffer, ~1 KiB a pool.
    let mut pools = Vec::new();
    let mut origin = Vec::new();
    let mut reads = super::php::ReadsCache::default();
    for (i, (src, raw_pools)) in files.iter_mut().enumerate() {
        for (name, raw) in std::mem::take(raw_pools) {
            pools.push(std::sync::Arc::new(validate::validate_pool(
                src, &name, raw, ids, &global, options, &mut reads,
            )?));
            origin.push(i);
        }
    }
    pools.shrink_to_fit();
    let located: Vec<_> = origin
        .iter()
        .map(|&i| &files[i].0)
        .zip(pools.iter().map(|p| &**p))
        .collect();
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
        php_fpm: None,
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
