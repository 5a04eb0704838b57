//! What php-fpm makes of a request's CGI variables, and what to send
//! php-cgi so that it makes the same of them.
//!
//! Owns: a byte-for-byte emulation of php-fpm 8.2's `init_request_info()`
//! (`sapi/fpm/fpm/fpm_main.c`) and of php-cgi 8.2's (`sapi/cgi/cgi_main.c`),
//! restricted to the variables those functions read and write
//! (SCRIPT_FILENAME, PATH_TRANSLATED, PATH_INFO, SCRIPT_NAME, REDIRECT_URL,
//! DOCUMENT_ROOT, SERVER_SOFTWARE and the ORIG_* copies), and the edits to a
//! PARAMS stream that make php-cgi's version end where php-fpm's does
//! ([`for_php_cgi`]). Must not touch: sockets, tokio, logging, processes.
//! The only I/O is `stat(2)` through the injected [`FileSystem`].
//!
//! Why: the two functions differ. php-fpm strips Apache mod_proxy_fcgi's
//! `proxy:fcgi://HOST/` and `proxy:balancer://NAME/` prefixes off
//! SCRIPT_FILENAME (`apache_was_here`) and derives PATH_INFO, SCRIPT_NAME and
//! PATH_TRANSLATED from what is left; php-cgi answers 404 "No input file
//! specified." to those. php-fpm also carries the CVE-2019-11043 fix
//! (`pilen > slen`) that php-cgi's path walk lacks.
//!
//! Model. Values are C strings: php reads every variable with `strlen()`, so
//! [`Vars`] keeps each value only up to its first NUL byte (that is also what
//! `$_SERVER` shows). Lookups are "last occurrence wins", as php's FastCGI
//! hash overwrites duplicates. `cgi.fix_pathinfo` and `cgi.discard_path` are
//! [`Options`]; `doc_root` is assumed unset; only the Linux code paths are
//! followed (no Windows, no RISC OS; the Microsoft-IIS PATH_INFO fix-up of
//! php-fpm is followed because php-fpm runs it on Linux too).
//! `tsrm_realpath()` succeeding is modelled as [`FileSystem::stat`] returning
//! `Some` (the difference is only in symlink loops and permissions).

use std::borrow::Cow;
use std::fmt;

/// What `stat(2)` (following symlinks) says a path is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Regular,
    Directory,
    /// Anything else: fifo, socket, device.
    Other,
}

/// The file system as php's path walk sees it. `stat` follows symlinks and
/// returns `None` when the path does not exist or cannot be resolved (any
/// `stat(2)` error). Paths are the raw bytes of a C string (no NUL);
/// relative paths are relative to the implementation's working directory.
pub trait FileSystem {
    fn stat(&self, path: &[u8]) -> Option<FileKind>;
}

/// The real file system: `std::fs::metadata` (`stat(2)`, follows symlinks).
/// Relative paths resolve against fpmd's working directory, which need not
/// be php-fpm's (php-fpm runs from the pool's `chdir`, `/` by default).
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

impl FileSystem for RealFs {
    fn stat(&self, path: &[u8]) -> Option<FileKind> {
        use std::os::unix::ffi::OsStrExt;
        // An empty path is ENOENT for stat(2); std agrees, but be explicit.
        if path.is_empty() {
            return None;
        }
        let md = std::fs::metadata(std::ffi::OsStr::from_bytes(path)).ok()?;
        let ft = md.file_type();
        Some(if ft.is_file() {
            FileKind::Regular
        } else if ft.is_dir() {
            FileKind::Directory
        } else {
            FileKind::Other
        })
    }
}

/// The file system under a pool's `chroot`: absolute paths are inside it
/// (what the web server sends a chrooted pool, as with php-fpm), looked
/// up under the host directory. Symlinks are followed on the host side;
/// php-cgi, which runs inside, decides in the end.
#[derive(Clone, Copy, Debug)]
pub struct ChrootFs<'a>(pub &'a std::path::Path);

impl FileSystem for ChrootFs<'_> {
    fn stat(&self, path: &[u8]) -> Option<FileKind> {
        use std::os::unix::ffi::OsStrExt;
        let inside = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
        if !inside.is_absolute() {
            return RealFs.stat(path);
        }
        let host = crate::config::paths::host_path(self.0, inside);
        RealFs.stat(host.as_os_str().as_bytes())
    }
}

/// An in-memory file tree for tests: absolute paths mapped to kinds,
/// resolved the way the kernel resolves them (no symlinks): empty and `.`
/// components are skipped, `..` goes up (and stays at `/`), every component
/// before the last must be a directory (else `ENOTDIR`: `None`), and a
/// trailing `/` requires a directory. Relative and empty paths: `None`.
#[derive(Clone, Debug, Default)]
pub struct MapFs {
    entries: std::collections::BTreeMap<Vec<u8>, FileKind>,
}

impl MapFs {
    /// An empty tree: only `/` exists.
    pub fn new() -> MapFs {
        MapFs::default()
    }

    /// Adds `path` (absolute, normalised: `/a/b`, no `.`/`..`/empty
    /// components) as `kind`, and every missing ancestor as a directory.
    /// An ancestor already present as a file stays a file, which makes
    /// `path` unreachable, as on disk.
    pub fn insert(&mut self, path: &[u8], kind: FileKind) -> &mut MapFs {
        for (i, &b) in path.iter().enumerate().skip(1) {
            if b == b'/' {
                self.entries
                    .entry(path[..i].to_vec())
                    .or_insert(FileKind::Directory);
            }
        }
        if path.len() > 1 {
            self.entries.insert(path.to_vec(), kind);
        }
        self
    }

    /// Builder form of [`MapFs::insert`] for a regular file.
    pub fn file(mut self, path: &str) -> MapFs {
        self.insert(path.as_bytes(), FileKind::Regular);
        self
    }

    /// Builder form of [`MapFs::insert`] for a directory.
    pub fn dir(mut self, path: &str) -> MapFs {
        self.insert(path.as_bytes(), FileKind::Directory);
        self
    }
}

impl FileSystem for MapFs {
    fn stat(&self, path: &[u8]) -> Option<FileKind> {
        if path.first() != Some(&b'/') {
            return None;
        }
        let mut cur: Vec<u8> = Vec::new(); // "" is `/`
        let mut kind = FileKind::Directory;
        for comp in path.split(|&b| b == b'/') {
            if comp.is_empty() {
                continue;
            }
            if kind != FileKind::Directory {
                return None; // ENOTDIR
            }
            match comp {
                b"." => {}
                b".." => {
                    let cut = cur.iter().rposition(|&b| b == b'/').unwrap_or(0);
                    cur.truncate(cut);
                }
                name => {
                    cur.push(b'/');
                    cur.extend_from_slice(name);
                    kind = *self.entries.get(&cur)?;
                }
            }
        }
        if path.ends_with(b"/") && kind != FileKind::Directory {
            return None;
        }
        Some(kind)
    }
}

/// `cgi.fix_pathinfo` and `cgi.discard_path`, the two ini settings
/// `init_request_info()` reads. The same values apply to php-fpm (what is
/// emulated) and to the php-cgi children (what is planned for).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// `cgi.fix_pathinfo`, default on.
    pub fix_pathinfo: bool,
    /// `cgi.discard_path`, default off. Only read when `fix_pathinfo` is off.
    pub discard_path: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            fix_pathinfo: true,
            discard_path: false,
        }
    }
}

/// The CGI variables `init_request_info()` reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Var {
    ScriptFilename,
    PathTranslated,
    PathInfo,
    ScriptName,
    RedirectUrl,
    DocumentRoot,
    ServerSoftware,
    OrigScriptFilename,
    OrigPathInfo,
    OrigPathTranslated,
    OrigScriptName,
}

const NVARS: usize = 11;

impl Var {
    /// Every variable, in declaration order.
    pub const ALL: [Var; NVARS] = [
        Var::ScriptFilename,
        Var::PathTranslated,
        Var::PathInfo,
        Var::ScriptName,
        Var::RedirectUrl,
        Var::DocumentRoot,
        Var::ServerSoftware,
        Var::OrigScriptFilename,
        Var::OrigPathInfo,
        Var::OrigPathTranslated,
        Var::OrigScriptName,
    ];

    /// The variables `init_request_info()` may write (the others it only
    /// reads): what [`Resolved::exposed`] compares.
    pub const WRITTEN: [Var; 8] = [
        Var::ScriptFilename,
        Var::PathInfo,
        Var::PathTranslated,
        Var::ScriptName,
        Var::OrigScriptFilename,
        Var::OrigPathInfo,
        Var::OrigPathTranslated,
        Var::OrigScriptName,
    ];

    /// The parameter name, e.g. `b"SCRIPT_FILENAME"`.
    pub const fn name(self) -> &'static [u8] {
        match self {
            Var::ScriptFilename => b"SCRIPT_FILENAME",
            Var::PathTranslated => b"PATH_TRANSLATED",
            Var::PathInfo => b"PATH_INFO",
            Var::ScriptName => b"SCRIPT_NAME",
            Var::RedirectUrl => b"REDIRECT_URL",
            Var::DocumentRoot => b"DOCUMENT_ROOT",
            Var::ServerSoftware => b"SERVER_SOFTWARE",
            Var::OrigScriptFilename => b"ORIG_SCRIPT_FILENAME",
            Var::OrigPathInfo => b"ORIG_PATH_INFO",
            Var::OrigPathTranslated => b"ORIG_PATH_TRANSLATED",
            Var::OrigScriptName => b"ORIG_SCRIPT_NAME",
        }
    }

    /// The variable a parameter name stands for (exact, case-sensitive, as
    /// php's hash compares names); `None` for every other name.
    pub fn from_name(name: &[u8]) -> Option<Var> {
        Some(match name {
            b"SCRIPT_FILENAME" => Var::ScriptFilename,
            b"PATH_TRANSLATED" => Var::PathTranslated,
            b"PATH_INFO" => Var::PathInfo,
            b"SCRIPT_NAME" => Var::ScriptName,
            b"REDIRECT_URL" => Var::RedirectUrl,
            b"DOCUMENT_ROOT" => Var::DocumentRoot,
            b"SERVER_SOFTWARE" => Var::ServerSoftware,
            b"ORIG_SCRIPT_FILENAME" => Var::OrigScriptFilename,
            b"ORIG_PATH_INFO" => Var::OrigPathInfo,
            b"ORIG_PATH_TRANSLATED" => Var::OrigPathTranslated,
            b"ORIG_SCRIPT_NAME" => Var::OrigScriptName,
            _ => return None,
        })
    }
}

/// Up to the first NUL: what `strlen()`-based C code sees of a value.
fn c_str(v: &[u8]) -> &[u8] {
    match v.iter().position(|&b| b == 0) {
        Some(n) => &v[..n],
        None => v,
    }
}

/// The values of the [`Var`]s: `None` is "not set" (php's `FCGI_GETENV`
/// returns NULL). Values never contain NUL: [`Vars::set`] and the
/// constructors cut them at the first NUL byte, as php sees them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Vars<'a> {
    vals: [Option<Cow<'a, [u8]>>; NVARS],
}

impl<'a> Vars<'a> {
    /// No variable set.
    pub fn new() -> Vars<'a> {
        Vars::default()
    }

    /// The variables among `params` (name, value) pairs; for a name given
    /// more than once the last occurrence wins, as in php's FastCGI hash.
    /// Borrows the values; allocates nothing.
    pub fn from_pairs<I: IntoIterator<Item = (&'a [u8], &'a [u8])>>(params: I) -> Vars<'a> {
        let mut vars = Vars::new();
        for (name, value) in params {
            vars.note(name, value);
        }
        vars
    }

    /// Takes in one pair of a PARAMS stream, in stream order (the last of
    /// a name wins); pairs of other names are ignored. Returns the
    /// variable the name stands for, if any.
    pub fn note(&mut self, name: &'a [u8], value: &'a [u8]) -> Option<Var> {
        let var = Var::from_name(name)?;
        self.vals[var as usize] = Some(Cow::Borrowed(c_str(value)));
        Some(var)
    }

    /// [`Vars::from_pairs`] over the content of a PARAMS stream (FCGI spec
    /// 3.4 encoding, as in [`crate::fastcgi::pairs`]); pairs after a
    /// malformed one are ignored (php rejects such a request outright).
    pub fn from_stream(stream: &'a [u8]) -> Vars<'a> {
        Vars::from_pairs(crate::fastcgi::pairs(stream).map_while(Result::ok))
    }

    /// The value of `var`, `None` when unset.
    pub fn get(&self, var: Var) -> Option<&[u8]> {
        self.vals[var as usize].as_deref()
    }

    /// Sets (`Some`) or unsets (`None`) `var`; the value is cut at its first
    /// NUL byte.
    pub fn set(&mut self, var: Var, value: Option<Cow<'a, [u8]>>) {
        self.vals[var as usize] = value.map(|v| match v {
            Cow::Borrowed(b) => Cow::Borrowed(c_str(b)),
            Cow::Owned(mut o) => {
                let n = c_str(&o).len();
                o.truncate(n);
                Cow::Owned(o)
            }
        });
    }

    /// Builder form of [`Vars::set`] with a borrowed value.
    pub fn with(mut self, var: Var, value: &'a [u8]) -> Vars<'a> {
        self.set(var, Some(Cow::Borrowed(value)));
        self
    }

    /// The same values, borrowed from `self`.
    fn borrowed(&self) -> Vars<'_> {
        Vars {
            vals: std::array::from_fn(|i| self.vals[i].as_deref().map(Cow::Borrowed)),
        }
    }

    /// php's `FCGI_PUTENV(request, NAME, value)`: `None` deletes.
    fn put(&mut self, var: Var, value: Option<&'a [u8]>) {
        self.vals[var as usize] = value.map(Cow::Borrowed);
    }

    fn put_owned(&mut self, var: Var, value: Vec<u8>) {
        self.vals[var as usize] = Some(Cow::Owned(value));
    }
}

/// Lossy text for byte strings in `Debug` output.
struct Lossy<'b>(&'b [u8]);

impl fmt::Debug for Lossy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&String::from_utf8_lossy(self.0), f)
    }
}

impl fmt::Debug for Vars<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for var in Var::ALL {
            if let Some(v) = self.get(var) {
                m.entry(&Lossy(var.name()), &Lossy(v));
            }
        }
        m.finish()
    }
}

/// What `init_request_info()` leaves behind.
#[derive(Clone, PartialEq, Eq)]
pub struct Resolved<'a> {
    /// The variables afterwards: the written ones as php leaves them in its
    /// hash (and so in `$_SERVER`), the read-only ones unchanged.
    pub vars: Vars<'a>,
    /// `SG(request_info).path_translated`: the primary script php opens,
    /// after `is_valid_path()`. `None` → php-fpm answers 404 "File not
    /// found." and logs "Primary script unknown".
    pub path_translated: Option<&'a [u8]>,
    /// `SG(request_info).request_uri`, from which PHP_SELF is built
    /// ([`Resolved::php_self`]) and which `user_dir` looks at. With
    /// `fix_pathinfo` it is the final SCRIPT_NAME; without it, PATH_INFO or
    /// else SCRIPT_NAME.
    pub request_uri: Option<&'a [u8]>,
    /// php-fpm's `apache_was_here`: a `proxy:fcgi://` or `proxy:balancer://`
    /// prefix with a path was stripped off SCRIPT_FILENAME. Always false for
    /// php-cgi.
    pub apache_was_here: bool,
    /// php-cgi only: its path walk computed PATH_INFO from before the start
    /// of the PATH_INFO buffer (`pilen < slen`, the CVE-2019-11043 shape).
    /// php-cgi's behaviour is then undefined and the other fields hold the
    /// state just before that point.
    pub undefined: bool,
}

impl Resolved<'_> {
    /// PHP_SELF as `sapi_cgi_register_variables()` builds it: request_uri
    /// followed by the final PATH_INFO with `fix_pathinfo`, request_uri
    /// alone without.
    pub fn php_self(&self, opts: &Options) -> Vec<u8> {
        let mut s = self.request_uri.unwrap_or_default().to_vec();
        if opts.fix_pathinfo {
            s.extend_from_slice(self.vars.get(Var::PathInfo).unwrap_or_default());
        }
        s
    }

    /// What a PHP script can observe of the result: the written variables,
    /// path_translated and request_uri. Two results with equal `exposed()`
    /// run the same script with the same `$_SERVER` entries for these names.
    pub fn exposed(&self) -> Exposed<'_> {
        Exposed {
            vars: Var::WRITTEN.map(|v| self.vars.get(v)),
            path_translated: self.path_translated,
            request_uri: self.request_uri,
        }
    }
}

impl fmt::Debug for Resolved<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolved")
            .field("vars", &self.vars)
            .field("path_translated", &self.path_translated.map(Lossy))
            .field("request_uri", &self.request_uri.map(Lossy))
            .field("apache_was_here", &self.apache_was_here)
            .field("undefined", &self.undefined)
            .finish()
    }
}

/// See [`Resolved::exposed`]; `vars` in the order of [`Var::WRITTEN`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Exposed<'r> {
    pub vars: [Option<&'r [u8]>; 8],
    pub path_translated: Option<&'r [u8]>,
    pub request_uri: Option<&'r [u8]>,
}

impl fmt::Debug for Exposed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (var, v) in Var::WRITTEN.iter().zip(self.vars) {
            if let Some(v) = v {
                m.entry(&Lossy(var.name()), &Lossy(v));
            }
        }
        m.entry(&"path_translated", &self.path_translated.map(Lossy));
        m.entry(&"request_uri", &self.request_uri.map(Lossy));
        m.finish()
    }
}

/// php-fpm 8.2's `init_request_info(void)` (`sapi/fpm/fpm/fpm_main.c`)
/// applied to `vars`, `stat`ing through `fs`. Never panics. The common case
/// (SCRIPT_FILENAME names an existing file, no proxy prefix) costs one
/// `stat` and allocates nothing; only a computed PATH_TRANSLATED allocates.
pub fn fpm_request_info<'a, F: FileSystem + ?Sized>(
    vars: &'a Vars<'_>,
    opts: &Options,
    fs: &F,
) -> Resolved<'a> {
    run(vars, opts, fs, Sapi::Fpm).0
}

/// php-cgi 8.2's `init_request_info(fcgi_request *)` (`sapi/cgi/cgi_main.c`
/// of 8.2.32) in FastCGI mode, applied to `vars`. Never panics: where
/// php-cgi reads out of bounds in its path walk, [`Resolved::undefined`] is
/// set instead. (The php-cgi 8.2.36 this was checked against ends such
/// requests as php-fpm does, as if it had php-fpm's `pilen > slen` guard,
/// the fix php-src PR 23411 proposes; [`for_php_cgi`] relies on neither.)
/// Its
/// `is_valid_path()` (a different one from php-fpm's) also reads past the
/// NUL of a path ending in `/` or `/.`; that is modelled as reading NUL.
pub fn cgi_request_info<'a, F: FileSystem + ?Sized>(
    vars: &'a Vars<'_>,
    opts: &Options,
    fs: &F,
) -> Resolved<'a> {
    run(vars, opts, fs, Sapi::Cgi).0
}

/// One change to the PARAMS sent to php-cgi.
#[derive(Clone, PartialEq, Eq)]
pub enum Edit<'a> {
    /// Send `NAME=value` (replacing every occurrence of NAME).
    Set(Var, Cow<'a, [u8]>),
    /// Send no `NAME` at all.
    Delete(Var),
}

impl fmt::Debug for Edit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Edit::Set(v, val) => write!(
                f,
                "Set({}={:?})",
                String::from_utf8_lossy(v.name()),
                Lossy(val)
            ),
            Edit::Delete(v) => write!(f, "Delete({})", String::from_utf8_lossy(v.name())),
        }
    }
}

impl Edit<'_> {
    /// The variable this edit is about.
    pub fn var(&self) -> Var {
        match self {
            Edit::Set(v, _) | Edit::Delete(v) => *v,
        }
    }
}

/// What fpmd does with a request, according to [`for_php_cgi`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send the request to php-cgi with [`Plan::edits`] applied.
    Forward,
    /// php-fpm's path_translated is NULL: it answers `Status: 404`, body
    /// "File not found.\n", and logs "Primary script unknown" (fpm_main.c,
    /// after `init_request_info()`). Do not forward.
    ScriptUnknown,
    /// path_translated is the empty string. php-fpm refuses it through
    /// `security.limit_extensions` (403 "Access denied.\n"); with no
    /// extension limit its child exits (status 70) in
    /// `php_request_startup()`, and php-cgi exits the same way (both checked
    /// against php 8.2.36). Do not forward.
    EmptyScript,
    /// php-fpm would fail to open path_translated (a path below a regular
    /// file) and php-cgi cannot be led to the same name: php-fpm answers
    /// `Status: 404`, body "No input file specified.\n" (after its
    /// `security.limit_extensions` check). Do not forward. Only a
    /// mod_fastcgi-style REDIRECT_URL + PATH_TRANSLATED request with a
    /// CVE-2019-11043-shaped PATH_INFO (or the Microsoft-IIS fix-up) gets
    /// here.
    NoInputFile,
}

/// The outcome of [`for_php_cgi`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan<'a> {
    pub action: Action,
    /// php-fpm's path_translated (the primary script), for logs, the
    /// status page and `security.limit_extensions`, which php-fpm checks
    /// right after `init_request_info()` (403 "Access denied.").
    pub path_translated: Option<&'a [u8]>,
    /// php-fpm's request_uri (see [`Resolved::request_uri`]).
    pub request_uri: Option<&'a [u8]>,
    /// Whether php-fpm saw Apache's proxy prefix.
    pub apache_was_here: bool,
    /// Changes to the PARAMS before they go to php-cgi, at most one per
    /// variable; empty in the common case. Apply with [`rewrite_params`] or
    /// [`Plan::apply`].
    pub edits: Vec<Edit<'a>>,
    /// What `stat(2)` said `path_translated` is, when the emulation
    /// `stat`ed that very path (the one `stat` of the common case, or the
    /// walk that found a regular file); `None`: not `stat`ed
    /// (`cgi.fix_pathinfo` off, no script, or a script php-fpm keeps
    /// below a regular file after REDIRECT_URL swapped PATH_TRANSLATED in).
    pub script_kind: Option<FileKind>,
    /// REDIRECT_URL is left out of what php-cgi gets (one of the `edits`),
    /// so `$_SERVER['REDIRECT_URL']` is missing in the script; see
    /// [`for_php_cgi`]. The caller logs this at debug level.
    pub dropped_redirect_url: bool,
}

impl Plan<'_> {
    /// `vars` with the edits applied: what php-cgi sees.
    pub fn apply<'s>(&'s self, vars: &'s Vars<'_>) -> Vars<'s> {
        apply_edits(vars, &self.edits)
    }
}

fn apply_edits<'s>(vars: &'s Vars<'_>, edits: &'s [Edit<'_>]) -> Vars<'s> {
    let mut out = vars.borrowed();
    for e in edits {
        match e {
            Edit::Set(v, val) => out.set(*v, Some(Cow::Borrowed(val))),
            Edit::Delete(v) => out.set(*v, None),
        }
    }
    out
}

/// Computes what php-fpm 8.2 makes of `vars` ([`fpm_request_info`]) and the
/// edits that make php-cgi 8.2's `init_request_info()`, run with the same
/// `opts`, end with the same [`Resolved::exposed`] values. Never panics.
///
/// Cost: in the common case (no proxy prefix, or none php-fpm acts on; the
/// script exists or php-cgi's path walk would agree with php-fpm's) the
/// plan is "forward unchanged", found with the one `stat` php-fpm makes and
/// no allocation. Otherwise php-cgi is sent php-fpm's final values, which
/// php-cgi leaves alone because SCRIPT_FILENAME then names an existing file.
///
/// The one loss: php-cgi, given REDIRECT_URL, deletes PATH_INFO and
/// PATH_TRANSLATED (when SCRIPT_FILENAME exists) or swaps PATH_TRANSLATED in
/// as the script; php-fpm skips both when `apache_was_here`. When php-fpm's
/// result has PATH_INFO or PATH_TRANSLATED and REDIRECT_URL is set, the
/// plan first tries to have php-cgi redo php-fpm's path walk (it keeps
/// REDIRECT_URL when that gives the same result, checked by emulation);
/// else it drops REDIRECT_URL ([`Plan::dropped_redirect_url`]).
pub fn for_php_cgi<'a, F: FileSystem + ?Sized>(
    vars: &'a Vars<'_>,
    opts: &Options,
    fs: &F,
) -> Plan<'a> {
    let (fpm, trace) = run(vars, opts, fs, Sapi::Fpm);
    let mut plan = Plan {
        action: Action::Forward,
        path_translated: fpm.path_translated,
        request_uri: fpm.request_uri,
        apache_was_here: fpm.apache_was_here,
        edits: Vec::new(),
        dropped_redirect_url: false,
        script_kind: trace.script_kind,
    };
    let Some(p) = fpm.path_translated else {
        plan.action = Action::ScriptUnknown;
        return plan;
    };
    if p.is_empty() {
        plan.action = Action::EmptyScript;
        return plan;
    }
    if trace.cgi_agrees() {
        // php-cgi takes the same branches with the same values.
        return plan;
    }
    if opts.fix_pathinfo && fpm.vars.get(Var::ScriptFilename) != Some(p) {
        // php-fpm swapped PATH_TRANSLATED in (REDIRECT_URL), walked back to a
        // file equal to SCRIPT_FILENAME and so kept the unstripped
        // PATH_TRANSLATED as the script: a path below a regular file, which
        // php cannot open. php-cgi ends on such a name only through that
        // same walk, and here its walk would differ (the PATH_INFO php-fpm
        // keeps is shorter than what the walk strips, or the IIS fix-up ran).
        plan.action = Action::NoInputFile;
        return plan;
    }
    let redirect = vars.get(Var::RedirectUrl).is_some();
    let has_info =
        fpm.vars.get(Var::PathInfo).is_some() || fpm.vars.get(Var::PathTranslated).is_some();
    if opts.fix_pathinfo && redirect && has_info {
        if let Some(edits) = replay_walk(vars, &fpm, &trace, opts, fs) {
            plan.edits = edits;
            return plan;
        }
        plan.edits = diff(vars, &fpm.vars);
        plan.edits.push(Edit::Delete(Var::RedirectUrl));
        plan.dropped_redirect_url = true;
        return plan;
    }
    plan.edits = diff(vars, &fpm.vars);
    plan
}

/// Sets and deletes that turn `from` into `to` for the written variables.
fn diff<'a>(from: &Vars<'_>, to: &Vars<'a>) -> Vec<Edit<'a>> {
    let mut edits = Vec::new();
    for var in Var::WRITTEN {
        if from.get(var) != to.get(var) {
            edits.push(match &to.vals[var as usize] {
                Some(v) => Edit::Set(var, v.clone()),
                None => Edit::Delete(var),
            });
        }
    }
    edits
}

/// Lossless plan for REDIRECT_URL with PATH_INFO: let php-cgi walk back from
/// the same SCRIPT_FILENAME php-fpm walked back from, with PATH_INFO
/// already final and exactly as long as the part the walk strips (so that
/// php-cgi neither changes it nor reads out of bounds), PATH_TRANSLATED left
/// out (so that REDIRECT_URL does not swap it in; php-cgi recomputes it) and
/// the other results preset. Returned only when emulating php-cgi on it
/// gives php-fpm's result.
fn replay_walk<'a, F: FileSystem + ?Sized>(
    vars: &Vars<'_>,
    fpm: &Resolved<'a>,
    trace: &Trace<'a>,
    opts: &Options,
    fs: &F,
) -> Option<Vec<Edit<'a>>> {
    let from = trace.walked_from?;
    let mut target = fpm.vars.clone();
    target.put(Var::ScriptFilename, Some(from));
    target.set(Var::PathTranslated, None);
    let edits = diff(vars, &target);
    let sent = apply_edits(vars, &edits);
    let cgi = cgi_request_info(&sent, opts, fs);
    (!cgi.undefined && cgi.exposed() == fpm.exposed()).then_some(edits)
}

/// Rewrites the content of a PARAMS stream with `edits`: a `Set` replaces
/// the first occurrence of its name in place (keeping `$_SERVER`'s order)
/// and drops later ones, or is appended when the name is absent; a `Delete`
/// drops every occurrence. Other pairs are copied unchanged. Appends to
/// `out`. Error: the stream has a truncated pair (nothing after it is
/// copied).
pub fn rewrite_params(
    stream: &[u8],
    edits: &[Edit<'_>],
    out: &mut Vec<u8>,
) -> Result<(), crate::fastcgi::ProtocolError> {
    use crate::fastcgi::{encode_pair, pairs};
    let mut done = [false; NVARS];
    for pair in pairs(stream) {
        let (name, value) = pair?;
        let edit = Var::from_name(name).and_then(|v| edits.iter().find(|e| e.var() == v));
        match edit {
            None => encode_pair(out, name, value),
            Some(Edit::Delete(_)) => {}
            Some(Edit::Set(v, val)) => {
                if !done[*v as usize] {
                    done[*v as usize] = true;
                    encode_pair(out, name, val);
                }
            }
        }
    }
    for e in edits {
        if let Edit::Set(v, val) = e {
            if !done[*v as usize] {
                done[*v as usize] = true;
                encode_pair(out, v.name(), val);
            }
        }
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sapi {
    Fpm,
    Cgi,
}

/// What php-fpm's run did that php-cgi's would not do the same way.
#[derive(Default)]
struct Trace<'a> {
    /// The proxy prefix or `?query` stripping changed SCRIPT_FILENAME.
    sf_rewritten: bool,
    /// The Microsoft-IIS PATH_INFO fix-up ran (php-cgi runs it on Windows
    /// only).
    iis: bool,
    /// The path walk found the script with a PATH_INFO shorter than the
    /// stripped part: php-fpm keeps PATH_INFO, php-cgi reads before it.
    cve_shape: bool,
    /// The path the walk started from, when it found a script.
    walked_from: Option<&'a [u8]>,
    /// What the `stat` of the final script path said, when one was made
    /// (see [`Plan::script_kind`]).
    script_kind: Option<FileKind>,
}

impl Trace<'_> {
    /// php-cgi's `init_request_info()` on the same input takes the same
    /// branches to the same values: the two functions differ only in the
    /// proxy stripping (and `apache_was_here`, which needs it), the IIS
    /// fix-up, the `pilen > slen` check and `is_valid_path()` (php-cgi's
    /// rejects a subset of what php-fpm's rejects, so any path php-fpm
    /// accepts php-cgi accepts too).
    fn cgi_agrees(&self) -> bool {
        !self.sf_rewritten && !self.iis && !self.cve_shape
    }
}

/// php-fpm's proxy prefix fix (bugs 54152, 62172): for `prefix` matched
/// case-insensitively (`strncasecmp`), drop it and the host up to the first
/// `/` (only when there is one: that sets `apache_was_here`), then cut at
/// the first `?` (whether or not a path was found).
fn strip_proxy<'a>(sf: &'a [u8], prefix: &[u8]) -> (&'a [u8], bool) {
    if sf.len() < prefix.len() || !sf[..prefix.len()].eq_ignore_ascii_case(prefix) {
        return (sf, false);
    }
    let mut out = sf;
    let mut apache = false;
    if let Some(i) = sf[prefix.len()..].iter().position(|&b| b == b'/') {
        out = &sf[prefix.len() + i..];
        apache = true;
    }
    if let Some(q) = out.iter().position(|&b| b == b'?') {
        out = &out[..q];
    }
    (out, apache)
}

/// php-fpm's `is_valid_path()`: false for NULL or when any `..` is a whole
/// path component (preceded by the start or `/`, followed by the end or `/`).
fn fpm_is_valid_path(p: &[u8]) -> bool {
    !p.windows(2).enumerate().any(|(i, w)| {
        w == b".." && (i == 0 || p[i - 1] == b'/') && (i + 2 == p.len() || p[i + 2] == b'/')
    })
}

/// php-cgi's `is_valid_path()`, step by step. It skips the byte after a
/// `/.x` and so misses `/./../`; on a path ending in `/` or `/.` it steps
/// past the NUL and reads whatever follows, modelled here as NUL.
fn cgi_is_valid_path(p: &[u8]) -> bool {
    let at = |i: usize| p.get(i).copied().unwrap_or(0);
    if at(0) == b'.' && at(1) == b'.' && (at(2) == 0 || at(2) == b'/') {
        return false;
    }
    let mut i = 0;
    while at(i) != 0 {
        if at(i) == b'/' {
            i += 1;
            if at(i) == b'.' {
                i += 1;
                if at(i) == b'.' {
                    i += 1;
                    if at(i) == 0 || at(i) == b'/' {
                        return false;
                    }
                }
            }
        }
        i += 1;
    }
    true
}

/// `php_raw_url_decode()`: `%XX` with two hex digits becomes that byte.
fn raw_url_decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            if let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// Concatenation for a computed PATH_TRANSLATED.
fn concat(a: &[u8], b: Option<&[u8]>) -> Vec<u8> {
    let b = b.unwrap_or_default();
    let mut v = Vec::with_capacity(a.len() + b.len());
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v
}

/// Both `init_request_info()`s. Local names follow the C ones; comments
/// quote the C where the two differ. Every value is a C string from `input`
/// (or a slice of one), so the locals borrow; only PATH_TRANSLATED is built.
fn run<'a, F: FileSystem + ?Sized>(
    input: &'a Vars<'_>,
    opts: &Options,
    fs: &F,
    sapi: Sapi,
) -> (Resolved<'a>, Trace<'a>) {
    let fpm = sapi == Sapi::Fpm;
    let mut env: Vars<'a> = input.borrowed();
    let mut trace = Trace::default();
    let mut apache_was_here = false;
    let mut request_uri: Option<&'a [u8]> = None;

    let mut env_script_filename = input.get(Var::ScriptFilename);
    let env_path_translated = input.get(Var::PathTranslated);
    // "some broken servers do not have script_filename or argv0"
    let mut script_path_translated = env_script_filename.or(env_path_translated);

    macro_rules! done {
        ($undefined:expr) => {{
            let valid = if fpm {
                fpm_is_valid_path
            } else {
                cgi_is_valid_path
            };
            let path_translated = if $undefined {
                None
            } else {
                script_path_translated.filter(|p| valid(p))
            };
            let resolved = Resolved {
                vars: env,
                path_translated,
                request_uri,
                apache_was_here,
                undefined: $undefined,
            };
            return (resolved, trace);
        }};
    }

    if script_path_translated.is_none() {
        done!(false);
    }
    let mut env_path_info = input.get(Var::PathInfo);
    let mut env_script_name = input.get(Var::ScriptName);

    if fpm {
        // "Hack for buggy IIS that sets incorrect PATH_INFO" (php-cgi: Windows only).
        let iis = input
            .get(Var::ServerSoftware)
            .is_some_and(|s| s.starts_with(b"Microsoft-IIS"));
        if let (true, Some(sn), Some(pi)) = (iis, env_script_name, env_path_info) {
            if pi.starts_with(sn) {
                trace.iis = true;
                env.put(Var::OrigPathInfo, Some(pi));
                let rest = &pi[sn.len()..];
                env_path_info = if rest.is_empty() { None } else { Some(rest) };
                env.put(Var::PathInfo, env_path_info);
            }
        }

        // Apache mod_proxy_fcgi / mod_proxy_balancer prefixes, rewritten in
        // place in SCRIPT_FILENAME's buffer (so ORIG_SCRIPT_FILENAME below
        // is the stripped value too).
        if let Some(sf) = env_script_filename {
            let (s, a) = strip_proxy(sf, b"proxy:fcgi://");
            let (s, b) = strip_proxy(s, b"proxy:balancer://");
            apache_was_here = a || b;
            if s.len() != sf.len() {
                trace.sf_rewritten = true;
                env.put(Var::ScriptFilename, Some(s));
                env_script_filename = Some(s);
                script_path_translated = Some(s);
            }
        }
    }

    if !opts.fix_pathinfo {
        // "pre 4.3 behaviour, shouldn't be used but provides BC"
        request_uri = env_path_info.or(env_script_name);
        if !opts.discard_path && env_path_translated.is_some() {
            script_path_translated = env_path_translated;
        }
        done!(false);
    }

    let env_redirect_url = input.get(Var::RedirectUrl);
    let env_document_root = input.get(Var::DocumentRoot);
    let orig_path_translated = env_path_translated;
    let orig_path_info = env_path_info;
    let orig_script_name = env_script_name;
    let orig_script_filename = env_script_filename;
    // `env_script_name != orig_script_name` is a pointer comparison in C.
    let mut script_name_swapped = false;

    // fpm: "if (!apache_was_here && env_path_translated != NULL && env_redirect_url != NULL && ..."
    if let (false, Some(pt), Some(_)) = (apache_was_here, env_path_translated, env_redirect_url) {
        if Some(pt) != script_path_translated {
            // "If we have a redirect_url then our script_filename and
            // script_name point to the php executable"
            script_path_translated = Some(pt);
            env_script_name = env_redirect_url;
            script_name_swapped = true;
        }
    }

    let spt = script_path_translated.unwrap_or_default();
    let kind = if spt.is_empty() || spt.ends_with(b"/") {
        None
    } else {
        fs.stat(spt)
    };
    let walk = !spt.is_empty() && kind.is_none();
    // Without a walk the script stays `spt`: its kind is known.
    trace.script_kind = kind;
    if walk {
        // "if the file doesn't exist, try to extract PATH_INFO out of it by
        // stat'ing back through the '/'"
        let len = spt.len();
        let mut pt = spt;
        let mut found = false;
        while let Some(cut) = pt
            .iter()
            .rposition(|&b| b == b'/')
            .or_else(|| pt.iter().rposition(|&b| b == b'\\'))
        {
            pt = &pt[..cut];
            if fs.stat(pt) != Some(FileKind::Regular) {
                continue;
            }
            found = true;
            trace.walked_from = Some(spt);
            let ptlen = pt.len();
            let slen = len - ptlen;
            let pilen = env_path_info.map_or(0, <[u8]>::len);
            let path_info: Option<&'a [u8]>;
            let tflag: bool;
            if apache_was_here {
                // "recall that PATH_INFO won't exist"
                let pi = &spt[ptlen..];
                path_info = Some(pi);
                tflag = slen != 0 && orig_path_info != Some(pi);
            } else if fpm {
                // "path_info = (env_path_info && pilen > slen) ? env_path_info + pilen - slen : NULL;"
                path_info = env_path_info
                    .filter(|_| pilen > slen)
                    .map(|pi| &pi[pilen - slen..]);
                tflag = path_info.is_some();
                trace.cve_shape = env_path_info.is_some() && pilen < slen;
            } else {
                // php-cgi: "path_info = env_path_info ? env_path_info + pilen - slen : NULL;"
                match env_path_info {
                    None => {
                        path_info = None;
                        tflag = false;
                    }
                    Some(pi) if pilen >= slen => {
                        path_info = Some(&pi[pilen - slen..]);
                        tflag = pilen != slen;
                    }
                    Some(_) => done!(true),
                }
            }

            if let (true, Some(path_info)) = (tflag, path_info) {
                if let Some(opi) = orig_path_info {
                    env.put(Var::OrigPathInfo, Some(opi));
                    // "path_info[0] = 0" cuts env_path_info when path_info
                    // points into it; with apache_was_here it points into
                    // SCRIPT_FILENAME and env_path_info stays whole.
                    let epi = env_path_info.unwrap_or_default();
                    let head = if apache_was_here {
                        epi
                    } else {
                        &epi[..pilen - slen]
                    };
                    if orig_script_name != Some(head) {
                        if let Some(osn) = orig_script_name {
                            env.put(Var::OrigScriptName, Some(osn));
                        }
                        env.put(Var::ScriptName, Some(head));
                        request_uri = Some(head);
                    } else {
                        request_uri = orig_script_name;
                    }
                } else if let (true, Some(sn)) = (apache_was_here, env_script_name) {
                    // "Using mod_proxy_fcgi and ProxyPass, apache cannot set
                    // PATH_INFO ... it is probably also in SCRIPT_NAME and need
                    // to be removed"
                    let decoded = path_info.contains(&b'%').then(|| raw_url_decode(path_info));
                    let snlen = sn.len();
                    let start = if snlen > slen && &sn[snlen - slen..] == path_info {
                        Some(snlen - slen)
                    } else {
                        decoded
                            .as_deref()
                            .filter(|d| snlen > d.len() && &sn[snlen - d.len()..] == *d)
                            .map(|d| snlen - d.len())
                    };
                    if let Some(start) = start {
                        env.put(Var::OrigScriptName, orig_script_name);
                        // "env_script_name[env_script_file_info_start] = 0" (in place)
                        env_script_name = Some(&sn[..start]);
                        env.put(Var::ScriptName, env_script_name);
                        request_uri = env_script_name;
                    }
                }
                env_path_info = Some(path_info);
                env.put(Var::PathInfo, env_path_info);
            }

            if orig_script_filename != Some(pt) {
                if let Some(osf) = orig_script_filename {
                    env.put(Var::OrigScriptFilename, Some(osf));
                }
                env.put(Var::ScriptFilename, Some(pt));
                script_path_translated = Some(pt);
                trace.script_kind = Some(FileKind::Regular);
            }

            // "figure out docroot: SCRIPT_FILENAME minus SCRIPT_NAME"
            if let Some(dr) = env_document_root {
                let l = if dr.ends_with(b"/") {
                    dr.len() - 1
                } else {
                    dr.len()
                };
                // "PATH_TRANSLATED = DOCUMENT_ROOT + PATH_INFO"
                let path_translated = concat(&dr[..l], env_path_info);
                if let Some(opt) = orig_path_translated {
                    env.put(Var::OrigPathTranslated, Some(opt));
                }
                env.put_owned(Var::PathTranslated, path_translated);
            } else if let Some(sn) = env_script_name.filter(|sn| contains(pt, sn)) {
                // "PATH_TRANSLATED = PATH_TRANSLATED - SCRIPT_NAME + PATH_INFO"
                let path_translated = concat(&pt[..pt.len() - sn.len()], env_path_info);
                if let Some(opt) = orig_path_translated {
                    env.put(Var::OrigPathTranslated, Some(opt));
                }
                env.put_owned(Var::PathTranslated, path_translated);
            }
            break;
        }
        if !found {
            // "we output 'no input file' now"
            if let Some(osf) = orig_script_filename {
                env.put(Var::OrigScriptFilename, Some(osf));
            }
            env.put(Var::ScriptFilename, None);
            script_path_translated = None;
        }
        if request_uri.is_none() {
            if orig_script_name.is_none() || orig_script_name != env_script_name {
                if let Some(osn) = orig_script_name {
                    env.put(Var::OrigScriptName, Some(osn));
                }
                env.put(Var::ScriptName, env_script_name);
                request_uri = env_script_name;
            } else {
                request_uri = orig_script_name;
            }
        }
    } else {
        // "make sure original values are remembered in ORIG_ copies if we've changed them"
        if orig_script_filename.is_none() || orig_script_filename != script_path_translated {
            if let Some(osf) = orig_script_filename {
                env.put(Var::OrigScriptFilename, Some(osf));
            }
            env.put(Var::ScriptFilename, script_path_translated);
        }
        // fpm: "if (!apache_was_here && env_redirect_url)"
        if !apache_was_here && env_redirect_url.is_some() {
            if let Some(opi) = orig_path_info {
                env.put(Var::OrigPathInfo, Some(opi));
                env.put(Var::PathInfo, None);
            }
            if let Some(opt) = orig_path_translated {
                env.put(Var::OrigPathTranslated, Some(opt));
                env.put(Var::PathTranslated, None);
            }
        }
        if script_name_swapped {
            if let Some(osn) = orig_script_name {
                env.put(Var::OrigScriptName, Some(osn));
            }
            env.put(Var::ScriptName, env_script_name);
        }
        request_uri = env_script_name;
    }
    done!(false)
}

/// `strstr(hay, needle) != NULL` (an empty needle is found).
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DEF: Options = Options {
        fix_pathinfo: true,
        discard_path: false,
    };
    const NOFIX: Options = Options {
        fix_pathinfo: false,
        discard_path: false,
    };
    const NOFIX_DISCARD: Options = Options {
        fix_pathinfo: false,
        discard_path: true,
    };

    /// The tree every table row runs against. scripts/check_request_info.py
    /// builds the same tree under another root for the real programs.
    fn tree() -> MapFs {
        MapFs::new()
            .file("/srv/www/index.php")
            .file("/srv/www/a..b.php")
            .file("/srv/www/uploads/a.jpg")
            .file("/srv/www/sub/x.php")
            .file("/srv/cgi-bin/php")
    }

    fn vars(input: &[(&'static str, &'static str)]) -> Vars<'static> {
        Vars::from_pairs(input.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
    }

    /// Expected exposed values: variable names, plus the pseudo-names
    /// `path_translated` and `request_uri`; what is not listed is unset.
    fn expected(e: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = e
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        v.sort();
        v
    }

    fn actual(r: &Resolved<'_>) -> Vec<(String, String)> {
        let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let mut v: Vec<(String, String)> = Var::WRITTEN
            .iter()
            .filter_map(|var| r.vars.get(*var).map(|val| (s(var.name()), s(val))))
            .collect();
        if let Some(p) = r.path_translated {
            v.push(("path_translated".into(), s(p)));
        }
        if let Some(u) = r.request_uri {
            v.push(("request_uri".into(), s(u)));
        }
        v.sort();
        v
    }

    /// One request. `fpm` is php-fpm's result (derived from fpm_main.c);
    /// `cgi` php-cgi's on the same input where the row is about the
    /// difference (`None`: not asserted; `Some(UNDEFINED)`: out-of-bounds
    /// read); `edits` the variables the plan changes.
    struct Row {
        name: &'static str,
        opts: Options,
        input: &'static [(&'static str, &'static str)],
        fpm: &'static [(&'static str, &'static str)],
        cgi: Option<&'static [(&'static str, &'static str)]>,
        action: Action,
        edits: &'static [&'static str],
        dropped: bool,
    }

    const UNDEFINED: &[(&str, &str)] = &[("undefined", "")];

    const NGINX: &[(&str, &str)] = &[("SCRIPT_NAME", "/index.php"), ("DOCUMENT_ROOT", "/srv/www")];

    // Rows marked "real" were also run through php-fpm 8.2.36 and php-cgi
    // 8.2.36 (Debian packages) by scripts/check_request_info.py: php-fpm's
    // $_SERVER matched `fpm`, php-cgi's matched `cgi` where given, and
    // php-cgi fed the planned PARAMS matched `fpm`. All rows are real
    // unless a comment says otherwise.
    const ROWS: &[Row] = &[
        // nginx, `fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name`.
        Row {
            name: "nginx /index.php",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "nginx /index.php/foo/bar with fastcgi_split_path_info",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/foo/bar"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/foo/bar"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "nginx /index.php/foo/bar without split: the walk finds index.php, PATH_INFO stays unset",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/index.php/foo/bar"), ("SCRIPT_NAME", "/index.php/foo/bar"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/foo/bar"),
                ("SCRIPT_NAME", "/index.php/foo/bar"),
                ("PATH_TRANSLATED", "/srv/www"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php/foo/bar"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "nginx without split, no DOCUMENT_ROOT, SCRIPT_NAME not inside the script path: no PATH_TRANSLATED",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/index.php/foo/bar"), ("SCRIPT_NAME", "/index.php/foo/bar")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/foo/bar"),
                ("SCRIPT_NAME", "/index.php/foo/bar"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php/foo/bar"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "PATH_INFO = whole URI (mod_fastcgi style): the walk keeps its last slen bytes",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/index.php/foo/bar"), ("SCRIPT_NAME", "/index.php/foo/bar"), ("PATH_INFO", "/index.php/foo/bar"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/foo/bar"),
                ("PATH_INFO", "/foo/bar"),
                ("ORIG_PATH_INFO", "/index.php/foo/bar"),
                ("SCRIPT_NAME", "/index.php"),
                ("ORIG_SCRIPT_NAME", "/index.php/foo/bar"),
                ("PATH_TRANSLATED", "/srv/www/foo/bar"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "missing script: 404 File not found",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/nope.php"), ("SCRIPT_NAME", "/nope.php"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("ORIG_SCRIPT_FILENAME", "/srv/www/nope.php"), ("SCRIPT_NAME", "/nope.php"), ("request_uri", "/nope.php")],
            cgi: Some(&[("ORIG_SCRIPT_FILENAME", "/srv/www/nope.php"), ("SCRIPT_NAME", "/nope.php"), ("request_uri", "/nope.php")]),
            action: Action::ScriptUnknown,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "no SCRIPT_FILENAME, no PATH_TRANSLATED",
            opts: DEF,
            input: NGINX,
            fpm: &[("SCRIPT_NAME", "/index.php")],
            cgi: None,
            action: Action::ScriptUnknown,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "directory: realpath succeeds, php fails to open it",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/sub"), ("SCRIPT_NAME", "/sub"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/sub"), ("SCRIPT_NAME", "/sub"), ("path_translated", "/srv/www/sub"), ("request_uri", "/sub")],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "trailing slash on a file: walked back to it",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/index.php/"), ("SCRIPT_NAME", "/index.php/"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/"),
                ("SCRIPT_NAME", "/index.php/"),
                ("PATH_TRANSLATED", "/srv/www"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php/"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "trailing slash on a directory: no regular file on the way back",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/sub/"), ("SCRIPT_NAME", "/sub/"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("ORIG_SCRIPT_FILENAME", "/srv/www/sub/"), ("SCRIPT_NAME", "/sub/"), ("request_uri", "/sub/")],
            cgi: None,
            action: Action::ScriptUnknown,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "`..` segment: the file exists but is_valid_path refuses it (both php-fpm and php-cgi)",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/sub/../index.php"), ("SCRIPT_NAME", "/sub/../index.php"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/sub/../index.php"), ("SCRIPT_NAME", "/sub/../index.php"), ("request_uri", "/sub/../index.php")],
            cgi: Some(&[("SCRIPT_FILENAME", "/srv/www/sub/../index.php"), ("SCRIPT_NAME", "/sub/../index.php"), ("request_uri", "/sub/../index.php")]),
            action: Action::ScriptUnknown,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "`/./../`: php-fpm refuses it, php-cgi's is_valid_path misses it",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/./../www/index.php"), ("SCRIPT_NAME", "/index.php"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/./../www/index.php"), ("SCRIPT_NAME", "/index.php"), ("request_uri", "/index.php")],
            cgi: Some(&[("SCRIPT_FILENAME", "/srv/www/./../www/index.php"), ("SCRIPT_NAME", "/index.php"), ("request_uri", "/index.php"), ("path_translated", "/srv/www/./../www/index.php")]),
            action: Action::ScriptUnknown,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "`..` inside a name is fine",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/a..b.php"), ("SCRIPT_NAME", "/a..b.php")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/a..b.php"), ("SCRIPT_NAME", "/a..b.php"), ("path_translated", "/srv/www/a..b.php"), ("request_uri", "/a..b.php")],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "/uploads/a.jpg/x.php, no PATH_INFO: both walk back to a.jpg (security.limit_extensions is what stops it)",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/uploads/a.jpg/x.php"), ("SCRIPT_NAME", "/uploads/a.jpg/x.php"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/uploads/a.jpg"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/uploads/a.jpg/x.php"),
                ("SCRIPT_NAME", "/uploads/a.jpg/x.php"),
                ("PATH_TRANSLATED", "/srv/www"),
                ("path_translated", "/srv/www/uploads/a.jpg"),
                ("request_uri", "/uploads/a.jpg/x.php"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "/uploads/a.jpg/x.php with nginx's empty PATH_INFO: php-fpm keeps it, php-cgi reads before it",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/uploads/a.jpg/x.php"), ("SCRIPT_NAME", "/uploads/a.jpg/x.php"), ("PATH_INFO", ""), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/uploads/a.jpg"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/uploads/a.jpg/x.php"),
                ("SCRIPT_NAME", "/uploads/a.jpg/x.php"),
                ("PATH_INFO", ""),
                ("PATH_TRANSLATED", "/srv/www"),
                ("path_translated", "/srv/www/uploads/a.jpg"),
                ("request_uri", "/uploads/a.jpg/x.php"),
            ],
            cgi: Some(UNDEFINED),
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME", "PATH_TRANSLATED", "ORIG_SCRIPT_FILENAME"],
            dropped: false,
        },
        Row {
            name: "CVE-2019-11043: %0a breaks fastcgi_split_path_info, PATH_INFO empty, long tail",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/index.php/PHP\nis_the_shortest"), ("SCRIPT_NAME", "/index.php/PHP\nis_the_shortest"), ("PATH_INFO", ""), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/PHP\nis_the_shortest"),
                ("SCRIPT_NAME", "/index.php/PHP\nis_the_shortest"),
                ("PATH_INFO", ""),
                ("PATH_TRANSLATED", "/srv/www"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php/PHP\nis_the_shortest"),
            ],
            cgi: Some(UNDEFINED),
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME", "PATH_TRANSLATED", "ORIG_SCRIPT_FILENAME"],
            dropped: false,
        },
        Row {
            name: "PATH_INFO shorter than the stripped part, not empty",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/index.php/foo/bar"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/x"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/foo/bar"),
                ("SCRIPT_NAME", "/index.php"),
                ("PATH_INFO", "/x"),
                ("PATH_TRANSLATED", "/srv/www/x"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php"),
            ],
            cgi: Some(UNDEFINED),
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME", "PATH_TRANSLATED", "ORIG_SCRIPT_FILENAME"],
            dropped: false,
        },
        Row {
            name: "PATH_INFO exactly as long as the stripped part: left alone by both",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/index.php/foo"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/bar"), ("DOCUMENT_ROOT", "/srv/www/")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/foo"),
                ("SCRIPT_NAME", "/index.php"),
                ("PATH_INFO", "/bar"),
                ("PATH_TRANSLATED", "/srv/www/bar"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "REDIRECT_URL without PATH_TRANSLATED (nginx-like): both delete PATH_INFO",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/foo"), ("REDIRECT_URL", "/foo"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("ORIG_PATH_INFO", "/foo"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        // Apache mod_proxy_fcgi, ProxyFCGIBackendType FPM.
        Row {
            name: "Apache proxy:fcgi://localhost/srv/www/index.php",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")],
            cgi: Some(&[("ORIG_SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("request_uri", "/index.php")]),
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME"],
            dropped: false,
        },
        Row {
            name: "Apache proxy:fcgi://127.0.0.1:9000/...",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://127.0.0.1:9000/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME"],
            dropped: false,
        },
        Row {
            name: "Apache proxy:fcgi:// with ?query (RewriteRule)",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php?foo=bar"), ("SCRIPT_NAME", "/index.php"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME"],
            dropped: false,
        },
        Row {
            name: "Apache proxy:balancer://php/...",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:balancer://php/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME"],
            dropped: false,
        },
        Row {
            name: "PROXY:FCGI:// in capitals (strncasecmp)",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "PROXY:FCGI://localhost/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME"],
            dropped: false,
        },
        Row {
            name: "proxy:fcgi://localhost with no path: not stripped, not found",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost"), ("SCRIPT_NAME", "/index.php"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("ORIG_SCRIPT_FILENAME", "proxy:fcgi://localhost"), ("SCRIPT_NAME", "/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::ScriptUnknown,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "proxy:fcgi://localhost?q with no path: the query is cut all the same",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost?q=1"), ("SCRIPT_NAME", "/index.php")],
            fpm: &[("ORIG_SCRIPT_FILENAME", "proxy:fcgi://localhost"), ("SCRIPT_NAME", "/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::ScriptUnknown,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "Apache, PATH_INFO derived from SCRIPT_FILENAME, SCRIPT_NAME ends with it",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php/foo/bar"), ("SCRIPT_NAME", "/index.php/foo/bar"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/foo/bar"),
                ("PATH_INFO", "/foo/bar"),
                ("SCRIPT_NAME", "/index.php"),
                ("ORIG_SCRIPT_NAME", "/index.php/foo/bar"),
                ("PATH_TRANSLATED", "/srv/www/foo/bar"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME", "PATH_INFO", "PATH_TRANSLATED", "SCRIPT_NAME", "ORIG_SCRIPT_FILENAME", "ORIG_SCRIPT_NAME"],
            dropped: false,
        },
        Row {
            name: "Apache, derived PATH_INFO, DOCUMENT_ROOT with trailing slash",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php/foo/bar"), ("SCRIPT_NAME", "/index.php/foo/bar"), ("DOCUMENT_ROOT", "/srv/www/")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/foo/bar"),
                ("PATH_INFO", "/foo/bar"),
                ("SCRIPT_NAME", "/index.php"),
                ("ORIG_SCRIPT_NAME", "/index.php/foo/bar"),
                ("PATH_TRANSLATED", "/srv/www/foo/bar"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME", "PATH_INFO", "PATH_TRANSLATED", "SCRIPT_NAME", "ORIG_SCRIPT_FILENAME", "ORIG_SCRIPT_NAME"],
            dropped: false,
        },
        Row {
            name: "Apache, derived PATH_INFO, no DOCUMENT_ROOT: SCRIPT_FILENAME minus SCRIPT_NAME",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php/foo/bar"), ("SCRIPT_NAME", "/index.php/foo/bar")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/foo/bar"),
                ("PATH_INFO", "/foo/bar"),
                ("SCRIPT_NAME", "/index.php"),
                ("ORIG_SCRIPT_NAME", "/index.php/foo/bar"),
                ("PATH_TRANSLATED", "/srv/www/foo/bar"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME", "PATH_INFO", "PATH_TRANSLATED", "SCRIPT_NAME", "ORIG_SCRIPT_FILENAME", "ORIG_SCRIPT_NAME"],
            dropped: false,
        },
        Row {
            name: "Apache, derived PATH_INFO, SCRIPT_NAME without it: SCRIPT_NAME kept",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php/foo/bar"), ("SCRIPT_NAME", "/index.php"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/foo/bar"),
                ("PATH_INFO", "/foo/bar"),
                ("SCRIPT_NAME", "/index.php"),
                ("PATH_TRANSLATED", "/srv/www/foo/bar"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME", "PATH_INFO", "PATH_TRANSLATED", "ORIG_SCRIPT_FILENAME"],
            dropped: false,
        },
        Row {
            name: "Apache, percent-encoded derived PATH_INFO matches SCRIPT_NAME once decoded",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php/f%6Fo"), ("SCRIPT_NAME", "/index.php/foo"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/f%6Fo"),
                ("PATH_INFO", "/f%6Fo"),
                ("SCRIPT_NAME", "/index.php"),
                ("ORIG_SCRIPT_NAME", "/index.php/foo"),
                ("PATH_TRANSLATED", "/srv/www/f%6Fo"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME", "PATH_INFO", "PATH_TRANSLATED", "SCRIPT_NAME", "ORIG_SCRIPT_FILENAME", "ORIG_SCRIPT_NAME"],
            dropped: false,
        },
        Row {
            name: "Apache, derived PATH_INFO and a different PATH_INFO sent: SCRIPT_NAME becomes the sent PATH_INFO",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php/foo"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/bar"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/foo"),
                ("PATH_INFO", "/foo"),
                ("ORIG_PATH_INFO", "/bar"),
                ("SCRIPT_NAME", "/bar"),
                ("ORIG_SCRIPT_NAME", "/index.php"),
                ("PATH_TRANSLATED", "/srv/www/foo"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/bar"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME", "PATH_INFO", "PATH_TRANSLATED", "SCRIPT_NAME", "ORIG_SCRIPT_FILENAME", "ORIG_PATH_INFO", "ORIG_SCRIPT_NAME"],
            dropped: false,
        },
        Row {
            name: "Apache, REDIRECT_URL without PATH_INFO: REDIRECT_URL kept",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("REDIRECT_URL", "/some/pretty/url"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME"],
            dropped: false,
        },
        Row {
            name: "Apache, REDIRECT_URL with PATH_INFO and PATH_TRANSLATED sent: REDIRECT_URL dropped",
            opts: DEF,
            input: &[
                ("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php"),
                ("SCRIPT_NAME", "/index.php"),
                ("PATH_INFO", "/foo"),
                ("PATH_TRANSLATED", "/srv/www/foo"),
                ("REDIRECT_URL", "/foo"),
                ("DOCUMENT_ROOT", "/srv/www"),
            ],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/foo"), ("PATH_TRANSLATED", "/srv/www/foo"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME", "REDIRECT_URL"],
            dropped: true,
        },
        Row {
            name: "Apache, REDIRECT_URL with PATH_INFO derived by the walk: php-cgi redoes the walk, REDIRECT_URL kept",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php/foo"), ("SCRIPT_NAME", "/index.php/foo"), ("REDIRECT_URL", "/foo"), ("DOCUMENT_ROOT", "/srv/www")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/www/index.php/foo"),
                ("PATH_INFO", "/foo"),
                ("SCRIPT_NAME", "/index.php"),
                ("ORIG_SCRIPT_NAME", "/index.php/foo"),
                ("PATH_TRANSLATED", "/srv/www/foo"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME", "PATH_INFO", "SCRIPT_NAME", "ORIG_SCRIPT_FILENAME", "ORIG_SCRIPT_NAME"],
            dropped: false,
        },
        Row {
            name: "Apache with cgi.fix_pathinfo=0: stripped all the same; PATH_TRANSLATED is the script",
            opts: NOFIX,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/foo"), ("PATH_TRANSLATED", "/srv/www/foo")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/foo"), ("PATH_TRANSLATED", "/srv/www/foo"), ("path_translated", "/srv/www/foo"), ("request_uri", "/foo")],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME"],
            dropped: false,
        },
        Row {
            // not real: no pool with cgi.discard_path=1 was set up
            name: "Apache with cgi.fix_pathinfo=0 and cgi.discard_path=1",
            opts: NOFIX_DISCARD,
            input: &[("SCRIPT_FILENAME", "proxy:fcgi://localhost/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/foo"), ("PATH_TRANSLATED", "/srv/www/foo")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/foo"), ("PATH_TRANSLATED", "/srv/www/foo"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/foo")],
            cgi: None,
            action: Action::Forward,
            edits: &["SCRIPT_FILENAME"],
            dropped: false,
        },
        Row {
            name: "nginx with cgi.fix_pathinfo=0, no split: nothing is walked",
            opts: NOFIX,
            input: &[("SCRIPT_FILENAME", "/srv/www/index.php/foo"), ("SCRIPT_NAME", "/index.php/foo")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php/foo"), ("SCRIPT_NAME", "/index.php/foo"), ("path_translated", "/srv/www/index.php/foo"), ("request_uri", "/index.php/foo")],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        // Apache mod_fastcgi / mod_cgi style: SCRIPT_FILENAME is the php binary.
        Row {
            name: "mod_fastcgi Action: PATH_TRANSLATED swapped in by REDIRECT_URL, then walked",
            opts: DEF,
            input: &[
                ("SCRIPT_FILENAME", "/srv/cgi-bin/php"),
                ("SCRIPT_NAME", "/cgi-bin/php"),
                ("PATH_INFO", "/index.php/foo"),
                ("PATH_TRANSLATED", "/srv/www/index.php/foo"),
                ("REDIRECT_URL", "/index.php/foo"),
                ("DOCUMENT_ROOT", "/srv/www"),
            ],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/cgi-bin/php"),
                ("PATH_INFO", "/foo"),
                ("ORIG_PATH_INFO", "/index.php/foo"),
                ("SCRIPT_NAME", "/index.php"),
                ("ORIG_SCRIPT_NAME", "/cgi-bin/php"),
                ("PATH_TRANSLATED", "/srv/www/foo"),
                ("ORIG_PATH_TRANSLATED", "/srv/www/index.php/foo"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "mod_fastcgi Action, script exists: PATH_INFO and PATH_TRANSLATED deleted, SCRIPT_NAME = REDIRECT_URL",
            opts: DEF,
            input: &[
                ("SCRIPT_FILENAME", "/srv/cgi-bin/php"),
                ("SCRIPT_NAME", "/cgi-bin/php"),
                ("PATH_INFO", "/index.php"),
                ("PATH_TRANSLATED", "/srv/www/index.php"),
                ("REDIRECT_URL", "/index.php"),
                ("DOCUMENT_ROOT", "/srv/www"),
            ],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("ORIG_SCRIPT_FILENAME", "/srv/cgi-bin/php"),
                ("ORIG_PATH_INFO", "/index.php"),
                ("SCRIPT_NAME", "/index.php"),
                ("ORIG_SCRIPT_NAME", "/cgi-bin/php"),
                ("ORIG_PATH_TRANSLATED", "/srv/www/index.php"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "REDIRECT_URL + PATH_TRANSLATED under SCRIPT_FILENAME, empty PATH_INFO: php-fpm keeps the unopenable PATH_TRANSLATED as the script",
            opts: DEF,
            input: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("SCRIPT_NAME", "/index.php"),
                ("PATH_INFO", ""),
                ("PATH_TRANSLATED", "/srv/www/index.php/foo"),
                ("REDIRECT_URL", "/index.php/foo"),
                ("DOCUMENT_ROOT", "/srv/www"),
            ],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("PATH_INFO", ""),
                ("SCRIPT_NAME", "/index.php/foo"),
                ("ORIG_SCRIPT_NAME", "/index.php"),
                ("PATH_TRANSLATED", "/srv/www"),
                ("ORIG_PATH_TRANSLATED", "/srv/www/index.php/foo"),
                ("path_translated", "/srv/www/index.php/foo"),
                ("request_uri", "/index.php/foo"),
            ],
            cgi: Some(UNDEFINED),
            action: Action::NoInputFile,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "the same without PATH_INFO: php-cgi agrees",
            opts: DEF,
            input: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("SCRIPT_NAME", "/index.php"),
                ("PATH_TRANSLATED", "/srv/www/index.php/foo"),
                ("REDIRECT_URL", "/index.php/foo"),
                ("DOCUMENT_ROOT", "/srv/www"),
            ],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("SCRIPT_NAME", "/index.php/foo"),
                ("ORIG_SCRIPT_NAME", "/index.php"),
                ("PATH_TRANSLATED", "/srv/www"),
                ("ORIG_PATH_TRANSLATED", "/srv/www/index.php/foo"),
                ("path_translated", "/srv/www/index.php/foo"),
                ("request_uri", "/index.php/foo"),
            ],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "SCRIPT_FILENAME missing, PATH_TRANSLATED used instead",
            opts: DEF,
            input: &[("PATH_TRANSLATED", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("PATH_TRANSLATED", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "Microsoft-IIS SERVER_SOFTWARE: php-fpm cuts SCRIPT_NAME off PATH_INFO (on Linux too)",
            opts: DEF,
            input: &[("SERVER_SOFTWARE", "Microsoft-IIS/10.0"), ("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/index.php/foo")],
            fpm: &[
                ("SCRIPT_FILENAME", "/srv/www/index.php"),
                ("SCRIPT_NAME", "/index.php"),
                ("PATH_INFO", "/foo"),
                ("ORIG_PATH_INFO", "/index.php/foo"),
                ("path_translated", "/srv/www/index.php"),
                ("request_uri", "/index.php"),
            ],
            cgi: Some(&[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("PATH_INFO", "/index.php/foo"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")]),
            action: Action::Forward,
            edits: &["PATH_INFO", "ORIG_PATH_INFO"],
            dropped: false,
        },
        Row {
            name: "empty SCRIPT_FILENAME: no stat, path_translated \"\"",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", ""), ("SCRIPT_NAME", "/index.php")],
            fpm: &[("SCRIPT_FILENAME", ""), ("SCRIPT_NAME", "/index.php"), ("path_translated", ""), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::EmptyScript,
            edits: &[],
            dropped: false,
        },
        Row {
            name: "a NUL byte ends the value",
            opts: DEF,
            input: &[("SCRIPT_FILENAME", "/srv/www/index.php\0/junk"), ("SCRIPT_NAME", "/index.php")],
            fpm: &[("SCRIPT_FILENAME", "/srv/www/index.php"), ("SCRIPT_NAME", "/index.php"), ("path_translated", "/srv/www/index.php"), ("request_uri", "/index.php")],
            cgi: None,
            action: Action::Forward,
            edits: &[],
            dropped: false,
        },
    ];

    fn check_row(row: &Row, fs: &MapFs) {
        let input = vars(row.input);
        let fpm = fpm_request_info(&input, &row.opts, fs);
        assert_eq!(actual(&fpm), expected(row.fpm), "php-fpm: {}", row.name);
        assert!(!fpm.undefined);
        let cgi = cgi_request_info(&input, &row.opts, fs);
        match row.cgi {
            Some(UNDEFINED) => assert!(
                cgi.undefined,
                "php-cgi should read out of bounds: {}",
                row.name
            ),
            Some(e) => assert_eq!(actual(&cgi), expected(e), "php-cgi: {}", row.name),
            None => {}
        }
        let plan = for_php_cgi(&input, &row.opts, fs);
        assert_eq!(plan.action, row.action, "action: {}", row.name);
        assert_eq!(plan.path_translated, fpm.path_translated);
        assert_eq!(
            plan.dropped_redirect_url, row.dropped,
            "dropped: {}",
            row.name
        );
        let mut names: Vec<&str> = plan
            .edits
            .iter()
            .map(|e| std::str::from_utf8(e.var().name()).unwrap())
            .collect();
        let mut want = row.edits.to_vec();
        names.sort();
        want.sort();
        assert_eq!(names, want, "edits: {} {:?}", row.name, plan.edits);
        if plan.action == Action::Forward {
            let sent = plan.apply(&input);
            let got = cgi_request_info(&sent, &row.opts, fs);
            assert!(!got.undefined, "{}", row.name);
            assert_eq!(
                got.exposed(),
                fpm.exposed(),
                "php-cgi on the plan: {}",
                row.name
            );
            assert_eq!(got.php_self(&row.opts), fpm.php_self(&row.opts));
        }
    }

    #[test]
    fn table() {
        let fs = tree();
        for row in ROWS {
            check_row(row, &fs);
        }
    }

    /// Stat calls, to show the common case makes one.
    struct Counting<'f>(&'f MapFs, std::cell::Cell<usize>);

    impl FileSystem for Counting<'_> {
        fn stat(&self, path: &[u8]) -> Option<FileKind> {
            self.1.set(self.1.get() + 1);
            self.0.stat(path)
        }
    }

    #[test]
    fn common_case_is_one_stat_and_no_edits() {
        let fs = tree();
        let counting = Counting(&fs, std::cell::Cell::new(0));
        let mut params = Vec::new();
        for (n, v) in [
            ("SCRIPT_FILENAME", "/srv/www/index.php"),
            ("SCRIPT_NAME", "/index.php"),
            ("REQUEST_URI", "/index.php?x"),
            ("DOCUMENT_ROOT", "/srv/www"),
        ] {
            crate::fastcgi::encode_pair(&mut params, n.as_bytes(), v.as_bytes());
        }
        let input = Vars::from_stream(&params);
        let plan = for_php_cgi(&input, &DEF, &counting);
        assert_eq!(counting.1.get(), 1);
        assert_eq!(plan.action, Action::Forward);
        // That stat also says what the script is (no second stat).
        assert_eq!(plan.script_kind, Some(FileKind::Regular));
        assert!(plan.edits.is_empty() && plan.edits.capacity() == 0);
        assert_eq!(plan.path_translated, Some(&b"/srv/www/index.php"[..]));
        // Everything in the result borrows from the input.
        let fpm = fpm_request_info(&input, &DEF, &counting);
        assert!(fpm
            .vars
            .vals
            .iter()
            .all(|v| matches!(v, None | Some(Cow::Borrowed(_)))));
    }

    #[test]
    fn last_occurrence_wins_and_names_are_exact() {
        let v = Vars::from_pairs([
            (&b"SCRIPT_FILENAME"[..], &b"/a"[..]),
            (b"script_filename", b"/b"),
            (b"SCRIPT_FILENAME", b"/c"),
            (b"PATH_INFO\0", b"/x"),
        ]);
        assert_eq!(v.get(Var::ScriptFilename), Some(&b"/c"[..]));
        assert_eq!(v.get(Var::PathInfo), None);
        for var in Var::ALL {
            assert_eq!(Var::from_name(var.name()), Some(var));
        }
    }

    #[test]
    fn rewrite_params_replaces_in_place_drops_duplicates_and_appends() {
        let mut s = Vec::new();
        for (n, v) in [
            ("A", "1"),
            ("SCRIPT_FILENAME", "proxy:fcgi://h/x"),
            ("REDIRECT_URL", "/r"),
            ("SCRIPT_FILENAME", "dup"),
            ("B", "2"),
        ] {
            crate::fastcgi::encode_pair(&mut s, n.as_bytes(), v.as_bytes());
        }
        let edits = [
            Edit::Set(Var::ScriptFilename, Cow::Borrowed(&b"/x"[..])),
            Edit::Delete(Var::RedirectUrl),
            Edit::Set(Var::PathInfo, Cow::Borrowed(&b"/p"[..])),
        ];
        let mut out = Vec::new();
        rewrite_params(&s, &edits, &mut out).unwrap();
        let got: Vec<(&[u8], &[u8])> = crate::fastcgi::pairs(&out).map(Result::unwrap).collect();
        assert_eq!(
            got,
            vec![
                (&b"A"[..], &b"1"[..]),
                (b"SCRIPT_FILENAME", b"/x"),
                (b"B", b"2"),
                (b"PATH_INFO", b"/p")
            ]
        );
        assert!(rewrite_params(&[0x05], &edits, &mut Vec::new()).is_err());
    }

    #[test]
    fn map_fs_resolves_like_the_kernel() {
        let fs = tree();
        assert_eq!(fs.stat(b"/srv/www/index.php"), Some(FileKind::Regular));
        assert_eq!(fs.stat(b"/srv//www/./index.php"), Some(FileKind::Regular));
        assert_eq!(
            fs.stat(b"/srv/www/sub/../index.php"),
            Some(FileKind::Regular)
        );
        assert_eq!(fs.stat(b"/../srv/www"), Some(FileKind::Directory));
        assert_eq!(fs.stat(b"/"), Some(FileKind::Directory));
        assert_eq!(fs.stat(b"/srv/www/index.php/"), None);
        assert_eq!(fs.stat(b"/srv/www/index.php/."), None);
        assert_eq!(fs.stat(b"/srv/www/index.php/../index.php"), None);
        assert_eq!(fs.stat(b"/srv/www/sub/"), Some(FileKind::Directory));
        assert_eq!(fs.stat(b"srv/www"), None);
        assert_eq!(fs.stat(b""), None);
    }

    #[test]
    fn real_fs_stats() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.php");
        std::fs::write(&file, "<?php").unwrap();
        use std::os::unix::ffi::OsStrExt;
        let d = dir.path().as_os_str().as_bytes();
        let f = file.as_os_str().as_bytes();
        assert_eq!(RealFs.stat(d), Some(FileKind::Directory));
        assert_eq!(RealFs.stat(f), Some(FileKind::Regular));
        assert_eq!(RealFs.stat(&[f, b"/x"].concat()), None);
        assert_eq!(RealFs.stat(b"/dev/null"), Some(FileKind::Other));
        assert_eq!(RealFs.stat(b""), None);
        assert_eq!(RealFs.stat(b"/tmp\0x"), None);
    }

    #[test]
    fn is_valid_path_variants() {
        for p in [
            "..",
            "../a",
            "/a/..",
            "/a/../b",
            "a/..",
            "//..",
            "/srv/./../x",
        ] {
            assert!(!fpm_is_valid_path(p.as_bytes()), "{p}");
        }
        for p in ["", "/", "/a..b", "/...", "/a/.../b", "..a", "/.a./"] {
            assert!(fpm_is_valid_path(p.as_bytes()), "{p}");
        }
        // php-cgi's misses what follows `/.x` and a `..` after a `//`.
        assert!(cgi_is_valid_path(b"/srv/./../x"));
        assert!(cgi_is_valid_path(b"//.."));
        assert!(!cgi_is_valid_path(b"/a/../b"));
        assert!(!cgi_is_valid_path(b".."));
        assert!(!cgi_is_valid_path(b"/a/.."));
    }

    #[test]
    fn raw_url_decode_like_php() {
        assert_eq!(raw_url_decode(b"/f%6Fo%2"), b"/foo%2");
        assert_eq!(raw_url_decode(b"%41%zz+%"), b"A%zz+%");
        assert_eq!(raw_url_decode(b"%00"), b"\0");
    }

    // Generated requests over a generated tree. Names come from a small
    // alphabet so that paths collide with the tree, SCRIPT_NAME ends with
    // PATH_INFO, and so on.
    const NAMES: &[&str] = &[
        "srv",
        "www",
        "index.php",
        "a.jpg",
        "x",
        "foo",
        "f%6Fo",
        "..",
        ".",
        "",
    ];

    fn path() -> impl Strategy<Value = String> {
        (
            proptest::collection::vec(proptest::sample::select(NAMES), 0..5),
            any::<bool>(),
        )
            .prop_map(|(c, slash)| {
                let mut p = String::new();
                for n in c {
                    p.push('/');
                    p.push_str(n);
                }
                if slash {
                    p.push('/');
                }
                p
            })
    }

    /// A path that often starts at the tree's one certain script.
    fn script_path() -> impl Strategy<Value = String> {
        prop_oneof![
            path(),
            path().prop_map(|t| format!("/srv/www/index.php{t}")),
            path().prop_map(|t| format!("/index.php{t}"))
        ]
    }

    fn script_filename() -> impl Strategy<Value = String> {
        let prefix = proptest::sample::select(
            &[
                "",
                "",
                "",
                "proxy:fcgi://localhost",
                "proxy:fcgi://127.0.0.1:9000",
                "PROXY:FCGI://h",
                "proxy:balancer://php",
                "proxy:fcgi://h?",
                "x",
            ][..],
        );
        let query = proptest::sample::select(&["", "", "?a=b"][..]);
        (prefix, script_path(), query).prop_map(|(p, s, q)| format!("{p}{s}{q}"))
    }

    fn opt<S: Strategy<Value = String>>(s: S) -> impl Strategy<Value = Option<String>> {
        proptest::option::weighted(0.5, s)
    }

    fn tree_strategy() -> impl Strategy<Value = MapFs> {
        proptest::collection::vec(
            (
                proptest::collection::vec(
                    proptest::sample::select(&["srv", "www", "index.php", "a.jpg", "x", "foo"][..]),
                    1..5,
                ),
                any::<bool>(),
            ),
            0..8,
        )
        .prop_map(|entries| {
            let mut fs = MapFs::new().file("/srv/www/index.php");
            for (comps, file) in entries {
                let p = format!("/{}", comps.join("/"));
                fs.insert(
                    p.as_bytes(),
                    if file {
                        FileKind::Regular
                    } else {
                        FileKind::Directory
                    },
                );
            }
            fs
        })
    }

    type Input = [Option<String>; 8];

    fn input_strategy() -> impl Strategy<Value = Input> {
        (
            opt(script_filename()),
            opt(script_path()),
            opt(path()),
            opt(script_path()),
            opt(path()),
            opt(
                proptest::sample::select(&["/srv/www", "/srv/www/", "", "/srv"][..])
                    .prop_map(String::from),
            ),
            opt(
                proptest::sample::select(&["nginx", "Microsoft-IIS/10.0"][..])
                    .prop_map(String::from),
            ),
            opt(path()),
        )
            .prop_map(|(a, b, c, d, e, f, g, h)| [a, b, c, d, e, f, g, h])
    }

    const INPUT_VARS: [Var; 8] = [
        Var::ScriptFilename,
        Var::PathTranslated,
        Var::PathInfo,
        Var::ScriptName,
        Var::RedirectUrl,
        Var::DocumentRoot,
        Var::ServerSoftware,
        Var::OrigPathInfo,
    ];

    fn input_vars(input: &Input) -> Vars<'_> {
        let mut v = Vars::new();
        for (var, val) in INPUT_VARS.iter().zip(input) {
            if let Some(val) = val {
                v.set(*var, Some(Cow::Borrowed(val.as_bytes())));
            }
        }
        v
    }

    fn json_str(s: &str) -> String {
        let mut o = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => o.push_str("\\\""),
                '\\' => o.push_str("\\\\"),
                c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
                c => o.push(c),
            }
        }
        o.push('"');
        o
    }

    fn json_pairs<'p>(pairs: impl Iterator<Item = (&'p str, &'p str)>) -> String {
        let items: Vec<String> = pairs
            .map(|(n, v)| format!("[{},{}]", json_str(n), json_str(v)))
            .collect();
        format!("[{}]", items.join(","))
    }

    /// Prints the table, one `ROW {json}` line per row, for
    /// scripts/check_request_info.py, which runs it through the real
    /// php-fpm and php-cgi.
    #[test]
    #[ignore]
    fn dump_rows_for_real_php() {
        let fs = tree();
        for row in ROWS {
            let input = vars(row.input);
            let plan = for_php_cgi(&input, &row.opts, &fs);
            let mut stream = Vec::new();
            for (n, v) in row.input {
                crate::fastcgi::encode_pair(&mut stream, n.as_bytes(), v.as_bytes());
            }
            let mut planned = Vec::new();
            rewrite_params(&stream, &plan.edits, &mut planned).unwrap();
            let planned: Vec<(String, String)> = crate::fastcgi::pairs(&planned)
                .map(|p| p.unwrap())
                .map(|(n, v)| {
                    (
                        String::from_utf8_lossy(n).into_owned(),
                        String::from_utf8_lossy(v).into_owned(),
                    )
                })
                .collect();
            let cgi = match row.cgi {
                None => "null".to_string(),
                Some(UNDEFINED) => json_str("undefined"),
                Some(e) => json_pairs(e.iter().copied()),
            };
            println!(
                "ROW {{\"name\":{},\"fix_pathinfo\":{},\"discard_path\":{},\"action\":{},\"input\":{},\"planned\":{},\"fpm\":{},\"cgi\":{}}}",
                json_str(row.name),
                row.opts.fix_pathinfo,
                row.opts.discard_path,
                json_str(&format!("{:?}", plan.action)),
                json_pairs(row.input.iter().copied()),
                json_pairs(planned.iter().map(|(n, v)| (n.as_str(), v.as_str()))),
                json_pairs(row.fpm.iter().copied()),
                cgi
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

        /// php-cgi fed the plan ends where php-fpm does.
        #[test]
        fn php_cgi_on_the_plan_matches_php_fpm(fs in tree_strategy(), input in input_strategy(), fix in any::<bool>(), discard in any::<bool>()) {
            let opts = Options { fix_pathinfo: fix, discard_path: discard };
            let v = input_vars(&input);
            let fpm = fpm_request_info(&v, &opts, &fs);
            let plan = for_php_cgi(&v, &opts, &fs);
            prop_assert_eq!(plan.path_translated, fpm.path_translated);
            prop_assert_eq!(plan.request_uri, fpm.request_uri);
            // The kind the plan reports is what a stat of the script says.
            if let (Some(k), Some(p)) = (plan.script_kind, plan.path_translated) {
                prop_assert_eq!(fs.stat(p), Some(k));
            }
            match plan.action {
                Action::ScriptUnknown => prop_assert!(fpm.path_translated.is_none()),
                Action::EmptyScript => prop_assert_eq!(fpm.path_translated, Some(&b""[..])),
                Action::NoInputFile => {
                    let p = fpm.path_translated.unwrap();
                    prop_assert_ne!(fs.stat(p), Some(FileKind::Regular));
                }
                Action::Forward => {
                    let sent = plan.apply(&v);
                    let cgi = cgi_request_info(&sent, &opts, &fs);
                    prop_assert!(!cgi.undefined);
                    prop_assert_eq!(cgi.exposed(), fpm.exposed());
                    prop_assert_eq!(cgi.php_self(&opts), fpm.php_self(&opts));
                    if plan.dropped_redirect_url {
                        prop_assert!(v.get(Var::RedirectUrl).is_some());
                        prop_assert!(sent.get(Var::RedirectUrl).is_none());
                    } else {
                        prop_assert_eq!(sent.get(Var::RedirectUrl), v.get(Var::RedirectUrl));
                    }
                    // The same through the PARAMS encoding.
                    let mut stream = Vec::new();
                    for var in Var::ALL {
                        if let Some(val) = v.get(var) {
                            crate::fastcgi::encode_pair(&mut stream, var.name(), val);
                        }
                    }
                    let mut out = Vec::new();
                    rewrite_params(&stream, &plan.edits, &mut out).unwrap();
                    prop_assert_eq!(Vars::from_stream(&out), sent);
                }
            }
        }

        /// Arbitrary bytes never panic any entry point.
        #[test]
        fn arbitrary_bytes_never_panic(vals in proptest::collection::vec(proptest::option::of(proptest::collection::vec(any::<u8>(), 0..24)), NVARS), fix in any::<bool>(), discard in any::<bool>()) {
            let fs = tree();
            let mut v = Vars::new();
            for (var, val) in Var::ALL.iter().zip(&vals) {
                v.set(*var, val.as_deref().map(Cow::Borrowed));
            }
            let opts = Options { fix_pathinfo: fix, discard_path: discard };
            let _ = fpm_request_info(&v, &opts, &fs);
            let _ = cgi_request_info(&v, &opts, &fs);
            let plan = for_php_cgi(&v, &opts, &fs);
            let _ = cgi_request_info(&plan.apply(&v), &opts, &fs);
        }
    }
}
