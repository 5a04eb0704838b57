//! The CGI variables `init_request_info()` reads and writes ([`Var`]),
//! as php reads them: C strings, the last occurrence of a name wins
//! ([`Vars`]); [`Options`] are `cgi.fix_pathinfo` and `cgi.discard_path`.

use std::borrow::Cow;
use std::fmt;

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

pub(super) const NVARS: usize = 11;

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
pub(super) fn c_str(v: &[u8]) -> &[u8] {
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
    pub(super) vals: [Option<Cow<'a, [u8]>>; NVARS],
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
    pub(super) fn borrowed(&self) -> Vars<'_> {
        Vars {
            vals: std::array::from_fn(|i| self.vals[i].as_deref().map(Cow::Borrowed)),
        }
    }

    /// php's `FCGI_PUTENV(request, NAME, value)`: `None` deletes.
    pub(super) fn put(&mut self, var: Var, value: Option<&'a [u8]>) {
        self.vals[var as usize] = value.map(Cow::Borrowed);
    }

    pub(super) fn put_owned(&mut self, var: Var, value: Vec<u8>) {
        self.vals[var as usize] = Some(Cow::Owned(value));
    }
}

/// Lossy text for byte strings in `Debug` output.
pub(super) struct Lossy<'b>(pub(super) &'b [u8]);

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
