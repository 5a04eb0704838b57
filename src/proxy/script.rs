//! The primary script of a request, as php-fpm finds it: the glue between
//! the proxy and [`super::request_info`] (php-fpm's `init_request_info`,
//! emulated). Decides what fpmd changes in the PARAMS so that PHP under
//! php-cgi sees the CGI variables php-fpm would give it (Apache's
//! `proxy:fcgi://` forms above all), and answers itself, as php-fpm
//! answers, when there is no script to run or the script may not run.
//!
//! The checks made before any child sees a request (php-cgi has none of
//! them): `security.limit_extensions` on the resolved script path, the
//! script is a regular file, SCRIPT_FILENAME (or the PATH_TRANSLATED php
//! would run) holds no NUL byte, and PHP_VALUE / PHP_ADMIN_VALUE from the
//! web server are removed (see [`IniParam`]). Must not touch: sockets.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tracing::{info, warn};

use super::local::Local;
use super::request::Edit;
use super::request_info::{
    for_php_cgi, Action, ChrootFs, Edit as InfoEdit, FileKind, FileSystem, RealFs, Var, Vars,
};
use crate::config::PoolConfig;
use crate::log::field;

/// The pool's settings that change how the script is found.
#[derive(Debug, Clone)]
pub struct Options {
    pub info: super::request_info::Options,
    /// The status page and ping: requests for them are no scripts.
    pub local: crate::config::LocalEndpoints,
    /// `security.limit_extensions`, as bytes; empty: no limit.
    pub limit_extensions: Vec<Box<[u8]>>,
    /// `chroot`: SCRIPT_FILENAME is a path inside it (as with php-fpm),
    /// so fpmd looks for the script under it.
    pub root: Option<std::path::PathBuf>,
    /// The pool's children run fpmd's `sapi.php`
    /// ([`crate::process::sapi::ini_args`]): each request gets a token.
    pub sapi: bool,
    /// The access log shows each request's peak memory or CPU (`%M`,
    /// `%C`): every request is to report them.
    pub usage_shown: bool,
    /// The access log shows `%s` or suppresses paths: `sapi.php` reports a
    /// response code the script set after its head was sent.
    pub code_shown: bool,
}

impl Default for Options {
    /// PHP's and php-fpm's defaults: `cgi.fix_pathinfo` on,
    /// `security.limit_extensions` `.php .phar`, no status page.
    fn default() -> Options {
        Options {
            info: Default::default(),
            local: Default::default(),
            limit_extensions: crate::config::DEFAULT_LIMIT_EXTENSIONS
                .iter()
                .map(|e| e.as_bytes().into())
                .collect(),
            root: None,
            sapi: false,
            usage_shown: false,
            code_shown: false,
        }
    }
}

impl Options {
    /// `cgi.fix_pathinfo` and `cgi.discard_path` as the pool's
    /// `php_admin_value`/`php_value` set them (admin values win), else
    /// PHP's defaults (on, off). A value set only in a php.ini is not seen:
    /// set it in the pool too.
    pub fn of(config: &PoolConfig) -> Options {
        let flag = |name: &str, default: bool| {
            let v = config
                .php_admin_values
                .get(name)
                .or_else(|| config.php_values.get(name));
            match v.map(|v| v.trim().to_ascii_lowercase()) {
                Some(v) if matches!(v.as_str(), "1" | "on" | "yes" | "true") => true,
                Some(v) if matches!(v.as_str(), "0" | "off" | "no" | "false" | "none" | "") => {
                    false
                }
                _ => default,
            }
        };
        Options {
            info: super::request_info::Options {
                fix_pathinfo: flag("cgi.fix_pathinfo", true),
                discard_path: flag("cgi.discard_path", false),
            },
            local: config.local.clone(),
            limit_extensions: config
                .limit_extensions
                .iter()
                .map(|e| e.as_bytes().into())
                .collect(),
            root: config.isolation.chroot.clone(),
            sapi: crate::process::sapi::ini_args(config).is_some(),
            usage_shown: config.access_log.is_some() && config.access_format.shows_usage(),
            code_shown: config.access_log.is_some()
                && (config.access_format.shows_status()
                    || !config.access_suppress_paths.is_empty()),
        }
    }

    /// php-fpm's `fpm_php_limit_extensions`: `path` may run when no limit
    /// is set, or when it is longer than one of the endings and ends with
    /// it (byte for byte).
    pub fn extension_allowed(&self, path: &[u8]) -> bool {
        self.limit_extensions.is_empty()
            || self
                .limit_extensions
                .iter()
                .any(|e| path.len() > e.len() && path.ends_with(e))
    }
}

/// The FastCGI params through which php-fpm lets the web server set ini
/// values per request (`fastcgi_ini_parser` in php-src
/// `sapi/fpm/fpm/fpm_main.c`). php-cgi ignores them; fpmd removes them
/// from what a child gets, so that no php-cgi build can apply them, and
/// logs each ini name once per pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum IniParam {
    /// `PHP_VALUE`: php-fpm applies it as `php_value`.
    Value,
    /// `PHP_ADMIN_VALUE`: php-fpm applies it as `php_admin_value`.
    AdminValue,
}

impl IniParam {
    /// The param's name, e.g. `PHP_VALUE`.
    pub const fn name(self) -> &'static str {
        match self {
            IniParam::Value => "PHP_VALUE",
            IniParam::AdminValue => "PHP_ADMIN_VALUE",
        }
    }

    /// The pool key that sets such a value for good.
    const fn pool_key(self) -> &'static str {
        match self {
            IniParam::Value => "php_value",
            IniParam::AdminValue => "php_admin_value",
        }
    }

    fn from_name(name: &[u8]) -> Option<IniParam> {
        match name {
            b"PHP_VALUE" => Some(IniParam::Value),
            b"PHP_ADMIN_VALUE" => Some(IniParam::AdminValue),
            _ => None,
        }
    }
}

/// What the proxy notes of a request's PARAMS while it copies them (one
/// pass): the variables that find the script, whether the last
/// SCRIPT_FILENAME and PATH_TRANSLATED held a NUL byte, and the PHP_VALUE
/// and PHP_ADMIN_VALUE params.
#[derive(Debug, Default)]
pub struct Seen<'a> {
    /// The CGI variables php's `init_request_info()` reads.
    pub vars: Vars<'a>,
    /// The last SCRIPT_FILENAME had a NUL byte (php reads it up to there).
    nul_script_filename: bool,
    /// The last PATH_TRANSLATED had a NUL byte.
    nul_path_translated: bool,
    /// Every PHP_VALUE / PHP_ADMIN_VALUE pair (rare: nothing is kept in
    /// the common case).
    ini: Vec<(IniParam, &'a [u8])>,
}

impl<'a> Seen<'a> {
    /// Nothing seen yet.
    pub fn new() -> Seen<'a> {
        Seen::default()
    }

    /// Takes in one pair, in stream order.
    pub fn note(&mut self, name: &'a [u8], value: &'a [u8]) {
        match self.vars.note(name, value) {
            Some(v @ (Var::ScriptFilename | Var::PathTranslated)) => {
                // Vars keeps the value up to its first NUL.
                let nul = self.vars.get(v).map_or(0, <[u8]>::len) != value.len();
                if v == Var::ScriptFilename {
                    self.nul_script_filename = nul;
                } else {
                    self.nul_path_translated = nul;
                }
            }
            Some(_) => {}
            None => {
                if name.starts_with(b"PHP_") {
                    if let Some(p) = IniParam::from_name(name) {
                        self.ini.push((p, value));
                    }
                }
            }
        }
    }

    /// Whether php would run a script path that held a NUL byte: php reads
    /// SCRIPT_FILENAME up to the NUL (`code.txt\0.php` runs `code.txt`),
    /// and PATH_TRANSLATED becomes the script when SCRIPT_FILENAME is
    /// absent, when REDIRECT_URL is set (with `cgi.fix_pathinfo`), or with
    /// `cgi.fix_pathinfo` and `cgi.discard_path` off.
    fn nul_in_script(&self, opts: &super::request_info::Options) -> bool {
        let pt_is_script = self.vars.get(Var::ScriptFilename).is_none()
            || (opts.fix_pathinfo && self.vars.get(Var::RedirectUrl).is_some())
            || (!opts.fix_pathinfo && !opts.discard_path);
        self.nul_script_filename || (self.nul_path_translated && pt_is_script)
    }
}

/// Why fpmd refused a script with `403 Access denied.`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// `security.limit_extensions` (php-fpm's own check).
    Extension,
    /// The script is a directory.
    Directory,
    /// The script is a fifo, socket or device.
    NotRegular,
    /// SCRIPT_FILENAME (or the PATH_TRANSLATED php would run) has a NUL
    /// byte.
    Nul,
}

/// What to do with a request's PARAMS before they go to php-cgi.
#[derive(Debug, Default)]
pub struct Plan<'a> {
    /// Changes to the PARAMS (none in the common case).
    pub edits: Vec<Edit>,
    /// fpmd answers the request itself, as php-fpm would: there is no
    /// script to run, or it may not run.
    pub answer: Option<Local>,
    /// Why the answer is `403 Access denied.`, and the script path
    /// refused (php's view of it: up to any NUL).
    pub denied: Option<(Denied, &'a [u8])>,
    /// REDIRECT_URL was left out: php-cgi would otherwise undo PATH_INFO
    /// (see [`super::request_info::for_php_cgi`]).
    pub dropped_redirect_url: bool,
    /// fpmd found the script, a regular file (as root, or under the
    /// chroot): if php-cgi then cannot open it, the pool's user may not.
    pub script_found: bool,
}

/// The plan for a request whose PARAMS were `seen`. Costs one `stat` of
/// the script in the common case (nginx, the script exists), like
/// php-fpm's own `realpath`; that `stat` also tells a regular file from a
/// directory or device (a second `stat` only with `cgi.fix_pathinfo` off).
pub fn plan<'a>(seen: &'a Seen<'_>, opts: &Options) -> Plan<'a> {
    match &opts.root {
        None => plan_in(seen, opts, &RealFs),
        Some(root) => plan_in(seen, opts, &ChrootFs(root)),
    }
}

/// [`plan`] over the file system `fs`.
pub fn plan_in<'a, F: FileSystem + ?Sized>(seen: &'a Seen<'_>, opts: &Options, fs: &F) -> Plan<'a> {
    let p = for_php_cgi(&seen.vars, &opts.info, fs);
    let mut denied = None;
    let mut script_found = false;
    let mut answer = match p.action {
        Action::Forward => None,
        Action::ScriptUnknown => Some(Local::ScriptUnknown),
        // php-fpm refuses an empty script name with its default
        // security.limit_extensions (".php .phar"); without a limit its
        // child exits, and php-cgi's too.
        Action::EmptyScript => Some(Local::AccessDenied),
        Action::NoInputFile => Some(Local::NoInputFile),
    };
    if let Some(script) = p.path_translated.filter(|s| !s.is_empty()) {
        // php-fpm checks the extension right after init_request_info(),
        // before it opens the script (fpm_main.c).
        let why = if seen.nul_in_script(&opts.info) {
            Some(Denied::Nul)
        } else if !opts.extension_allowed(script) {
            Some(Denied::Extension)
        } else if p.action == Action::Forward {
            let kind = match p.script_kind {
                Some(k) => Some(k),
                // cgi.fix_pathinfo off: nothing was stat'ed.
                None => fs.stat(script),
            };
            script_found = kind == Some(FileKind::Regular);
            match kind {
                Some(FileKind::Directory) => Some(Denied::Directory),
                Some(FileKind::Other) => Some(Denied::NotRegular),
                // Missing: php-cgi answers "No input file specified." as
                // php-fpm does.
                Some(FileKind::Regular) | None => None,
            }
        } else {
            None
        };
        if let Some(why) = why {
            denied = Some((why, script));
            answer = Some(Local::AccessDenied);
        }
    }
    let mut edits: Vec<Edit> = if answer.is_some() {
        Vec::new()
    } else {
        p.edits
            .iter()
            .map(|e| match e {
                InfoEdit::Set(var, value) => Edit {
                    name: var.name().to_vec(),
                    value: Some(value.to_vec()),
                },
                InfoEdit::Delete(var) => Edit {
                    name: var.name().to_vec(),
                    value: None,
                },
            })
            .collect()
    };
    if answer.is_none() {
        for param in [IniParam::Value, IniParam::AdminValue] {
            if seen.ini.iter().any(|(p, _)| *p == param) {
                edits.push(Edit {
                    name: param.name().as_bytes().to_vec(),
                    value: None,
                });
            }
        }
    }
    Plan {
        edits,
        answer,
        denied,
        dropped_redirect_url: p.dropped_redirect_url && answer.is_none(),
        script_found: script_found && answer.is_none(),
    }
}

/// The ini names a PHP_VALUE / PHP_ADMIN_VALUE value sets, as php-fpm
/// reads it (`zend_parse_ini_string`, one `name=value` per line): each
/// line's text before `=`, trimmed; empty lines, `;` comments and
/// `[section]` lines name nothing. Only for naming them in the log.
pub fn ini_names(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b'\n').filter_map(|line| {
        let name = line.split(|&b| b == b'=').next().unwrap_or_default();
        let name = name.trim_ascii();
        (!name.is_empty() && !name.starts_with(b";") && !name.starts_with(b"[")).then_some(name)
    })
}

/// At most this many (param, ini name) pairs are remembered per pool as
/// logged; past it one line says further names are not logged.
pub const INI_NAMES_LOGGED: usize = 64;

/// One pool's record of the ini names it logged.
struct IniLogged {
    pool: String,
    /// The (param, ini name) pairs already logged.
    logged: BTreeSet<(IniParam, Vec<u8>)>,
    /// The "further names" line was written.
    full: bool,
}

/// Every pool's [`IniLogged`].
static INI_LOGGED: Mutex<Vec<IniLogged>> = Mutex::new(Vec::new());

/// Logs, once per pool and (param, ini name), that the web server tried
/// to set ini values per request and that fpmd removed them (see
/// [`IniParam`]). Memory: at most [`INI_NAMES_LOGGED`] names per pool.
pub fn log_ini_params(pool: &str, seen: &Seen<'_>) {
    if seen.ini.is_empty() {
        return;
    }
    let mut all = INI_LOGGED.lock().unwrap_or_else(|e| e.into_inner());
    let at = match all.iter().position(|l| l.pool == pool) {
        Some(i) => i,
        None => {
            all.push(IniLogged {
                pool: pool.to_string(),
                logged: BTreeSet::new(),
                full: false,
            });
            all.len() - 1
        }
    };
    let IniLogged { logged, full, .. } = &mut all[at];
    for &(param, value) in &seen.ini {
        for name in ini_names(value) {
            let key = (param, name.to_vec());
            if logged.contains(&key) {
                continue;
            }
            if logged.len() >= INI_NAMES_LOGGED {
                if !*full {
                    *full = true;
                    warn!(pool = %pool, "{} names set through PHP_VALUE / PHP_ADMIN_VALUE were logged; further names are removed without a log line", INI_NAMES_LOGGED);
                }
                return;
            }
            let name_text = field(name).to_string();
            warn!(pool = %pool,
                "{} from the web server tries to set '{name_text}': ignored (php-cgi cannot apply per-request values; fpmd removes the param); set {}.{name_text} in the pool",
                param.name(), param.pool_key());
            logged.insert(key);
        }
    }
}

/// Lines of "access denied" per second at most (a scanner must not flood
/// the log); the ones over it are counted and reported with the next.
const DENIED_PER_SECOND: usize = 10;
static DENIED_SECOND: AtomicUsize = AtomicUsize::new(usize::MAX);
static DENIED_IN_SECOND: AtomicUsize = AtomicUsize::new(0);
static DENIED_UNLOGGED: AtomicUsize = AtomicUsize::new(0);

/// Logs a refusal with php-fpm's message (`fpm_php_limit_extensions`,
/// NOTICE level), rate-limited to [`DENIED_PER_SECOND`] lines a second
/// over all pools; `script` is client text (escaped by the log
/// formatter).
pub fn log_denied(pool: &str, peer: &str, uri: &[u8], why: Denied, script: &[u8]) {
    let now = crate::log::uptime_secs();
    if DENIED_SECOND.swap(now, Ordering::Relaxed) != now {
        DENIED_IN_SECOND.store(0, Ordering::Relaxed);
    }
    if DENIED_IN_SECOND.fetch_add(1, Ordering::Relaxed) >= DENIED_PER_SECOND {
        DENIED_UNLOGGED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let unlogged = DENIED_UNLOGGED.swap(0, Ordering::Relaxed);
    let more = if unlogged > 0 {
        format!(" ({unlogged} more refusals were not logged)")
    } else {
        String::new()
    };
    let uri = field(uri);
    info!(pool = %pool, peer = %peer, uri = %uri, "{}{more}", why.message(field(script)));
}

impl Denied {
    /// The refusal as text: php-fpm's own for [`Denied::Extension`]
    /// (`fpm_php_limit_extensions`), the same form for the others.
    pub fn message(self, script: impl std::fmt::Display) -> String {
        let why = match self {
            Denied::Extension => "see security.limit_extensions",
            Denied::Directory => "it is a directory",
            Denied::NotRegular => "not a regular file",
            Denied::Nul => "its path has a NUL byte where php would end it",
        };
        format!("Access to the script '{script}' has been denied ({why})")
    }
}

/// Appends php-fpm's whole answer to a denied script to `out`: the
/// message on FastCGI STDERR (php-fpm's child logs it there, so the web
/// server's error log shows it; control characters escaped), then
/// [`Local::AccessDenied`].
pub fn encode_denied(out: &mut Vec<u8>, id: u16, why: Denied, script: &[u8]) {
    use crate::fastcgi::{encode_empty, encode_stream, RecordType};
    let text = why.message(crate::log::escape_controls(script));
    encode_stream(out, RecordType::Stderr, id, text.as_bytes());
    encode_empty(out, RecordType::Stderr, id);
    Local::AccessDenied.encode(out, id);
}

#[cfg(test)]
mod tests {
    use super::super::request_info::MapFs;
    use super::*;

    fn seen(pairs: &[(&'static str, &'static [u8])]) -> Seen<'static> {
        let mut s = Seen::new();
        for (n, v) in pairs {
            s.note(n.as_bytes(), v);
        }
        s
    }

    fn tree() -> MapFs {
        let mut fs = MapFs::new()
            .file("/srv/www/index.php")
            .file("/srv/www/code.txt")
            .file("/srv/www/uploads/a.jpg")
            .file("/srv/www/x.phar")
            .dir("/srv/www/dir.php");
        fs.insert(b"/srv/www/fifo.php", FileKind::Other);
        fs.insert(b"/etc/passwd", FileKind::Regular);
        fs
    }

    fn answer(pairs: &[(&'static str, &'static [u8])], opts: &Options) -> Option<Denied> {
        let s = seen(pairs);
        let p = plan_in(&s, opts, &tree());
        let d = p.denied.map(|(d, _)| d);
        assert_eq!(
            d.is_some(),
            p.answer == Some(Local::AccessDenied) && d.is_some()
        );
        d
    }

    #[test]
    fn limit_extensions_as_php_fpm() {
        let o = Options::default();
        assert!(o.extension_allowed(b"/a.php"));
        assert!(o.extension_allowed(b"/a.phar"));
        assert!(!o.extension_allowed(b".php"), "the path must be longer");
        assert!(!o.extension_allowed(b"/a.PHP"), "case-sensitive");
        assert!(!o.extension_allowed(b"/a.php/"));
        assert!(!o.extension_allowed(b"/a.jpg"));
        let none = Options {
            limit_extensions: Vec::new(),
            ..Options::default()
        };
        assert!(none.extension_allowed(b"/etc/passwd"));
    }

    #[test]
    fn scripts_refused_before_any_child() {
        let o = Options::default();
        let sf = |v: &'static [u8]| vec![("SCRIPT_FILENAME", v)];
        assert_eq!(answer(&sf(b"/srv/www/index.php"), &o), None);
        assert_eq!(answer(&sf(b"/srv/www/x.phar"), &o), None);
        assert_eq!(answer(&sf(b"/etc/passwd"), &o), Some(Denied::Extension));
        assert_eq!(
            answer(&sf(b"/srv/www/code.txt"), &o),
            Some(Denied::Extension)
        );
        assert_eq!(
            answer(&sf(b"/srv/www/code.txt\0.php"), &o),
            Some(Denied::Nul)
        );
        assert_eq!(
            answer(&sf(b"/srv/www/dir.php"), &o),
            Some(Denied::Directory)
        );
        assert_eq!(
            answer(&sf(b"/srv/www/fifo.php"), &o),
            Some(Denied::NotRegular)
        );
        // The upload hole: the walk ends on a.jpg.
        assert_eq!(
            answer(&sf(b"/srv/www/uploads/a.jpg/x.php"), &o),
            Some(Denied::Extension)
        );
        // Missing scripts stay php-fpm's 404s.
        let s = seen(&sf(b"/srv/www/missing.php"));
        assert_eq!(plan_in(&s, &o, &tree()).answer, Some(Local::ScriptUnknown));
        // With no limit, only the file checks remain.
        let none = Options {
            limit_extensions: Vec::new(),
            ..Options::default()
        };
        assert_eq!(answer(&sf(b"/srv/www/code.txt"), &none), None);
        assert_eq!(
            answer(&sf(b"/srv/www/code.txt\0.php"), &none),
            Some(Denied::Nul)
        );
        assert_eq!(
            answer(&sf(b"/srv/www/dir.php"), &none),
            Some(Denied::Directory)
        );
        // A NUL in a later SCRIPT_FILENAME counts (the last wins), an
        // earlier one does not.
        assert_eq!(
            answer(
                &[
                    ("SCRIPT_FILENAME", b"/srv/www/a\0.php"),
                    ("SCRIPT_FILENAME", b"/srv/www/index.php")
                ],
                &o
            ),
            None
        );
    }

    #[test]
    fn path_translated_with_nul_counts_where_php_runs_it() {
        let o = Options::default();
        // The script is SCRIPT_FILENAME: PATH_TRANSLATED is only a variable.
        assert_eq!(
            answer(
                &[
                    ("SCRIPT_FILENAME", b"/srv/www/index.php"),
                    ("PATH_TRANSLATED", b"/srv/www/x\0y")
                ],
                &o
            ),
            None
        );
        // No SCRIPT_FILENAME: php runs PATH_TRANSLATED.
        assert_eq!(
            answer(&[("PATH_TRANSLATED", b"/srv/www/code.txt\0.php")], &o),
            Some(Denied::Nul)
        );
        // cgi.fix_pathinfo = 0: PATH_TRANSLATED is the script.
        let off = Options {
            info: super::super::request_info::Options {
                fix_pathinfo: false,
                discard_path: false,
            },
            ..Options::default()
        };
        assert_eq!(
            answer(
                &[
                    ("SCRIPT_FILENAME", b"/srv/www/index.php"),
                    ("PATH_TRANSLATED", b"/srv/www/code.txt\0.php")
                ],
                &off
            ),
            Some(Denied::Nul)
        );
        // ... and it is stat'ed there: a directory is refused.
        assert_eq!(
            answer(&[("SCRIPT_FILENAME", b"/srv/www/dir.php")], &off),
            Some(Denied::Directory)
        );
    }

    #[test]
    fn php_value_is_removed_and_named() {
        let s = seen(&[
            ("SCRIPT_FILENAME", b"/srv/www/index.php"),
            (
                "PHP_VALUE",
                b"allow_url_include=On\nauto_prepend_file=php://input",
            ),
            (
                "PHP_ADMIN_VALUE",
                b"; comment\n\n memory_limit = 1G \n[x]\nopen_basedir",
            ),
        ]);
        let p = plan_in(&s, &Options::default(), &tree());
        assert_eq!(p.answer, None);
        let names: Vec<&[u8]> = p.edits.iter().map(|e| &e.name[..]).collect();
        assert_eq!(names, [&b"PHP_VALUE"[..], b"PHP_ADMIN_VALUE"]);
        assert!(p.edits.iter().all(|e| e.value.is_none()));
        let v: Vec<&[u8]> = ini_names(s.ini[0].1).collect();
        assert_eq!(v, [&b"allow_url_include"[..], b"auto_prepend_file"]);
        let v: Vec<&[u8]> = ini_names(s.ini[1].1).collect();
        assert_eq!(v, [&b"memory_limit"[..], b"open_basedir"]);
        // The common request has no edit and keeps nothing.
        let s = seen(&[
            ("SCRIPT_FILENAME", b"/srv/www/index.php"),
            ("PHP_SELF", b"x"),
        ]);
        let p = plan_in(&s, &Options::default(), &tree());
        assert!(p.edits.is_empty() && s.ini.is_empty());
    }

    #[test]
    fn ini_log_memory_is_bounded() {
        let pool = "ini-log-bound-test";
        let value: String = (0..200).map(|i| format!("n{i}=1\n")).collect();
        let value: &'static [u8] = Box::leak(value.into_bytes().into_boxed_slice());
        let s = seen(&[("PHP_VALUE", value)]);
        log_ini_params(pool, &s);
        log_ini_params(pool, &s);
        let all = INI_LOGGED.lock().unwrap();
        let l = all.iter().find(|l| l.pool == pool).unwrap();
        assert_eq!(l.logged.len(), INI_NAMES_LOGGED);
        assert!(l.full);
    }
}
