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

mod fs;
#[cfg(test)]
mod tests;
mod vars;
mod walk;

pub use fs::*;
use std::borrow::Cow;
use std::fmt;
pub use vars::*;
use walk::*;

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
