//! The two `init_request_info()` functions themselves, emulated line by
//! line ([`run`]): php-fpm's (`fpm_main.c`) and php-cgi's (`cgi_main.c`),
//! their steps as methods on the C's locals ([`Locals`]), with their
//! helpers (Apache's proxy prefix, the path checks, URL decoding).

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sapi {
    Fpm,
    Cgi,
}

/// What php-fpm's run did that php-cgi's would not do the same way.
#[derive(Default)]
pub(super) struct Trace<'a> {
    /// The proxy prefix or `?query` stripping changed SCRIPT_FILENAME.
    pub(super) sf_rewritten: bool,
    /// The Microsoft-IIS PATH_INFO fix-up ran (php-cgi runs it on Windows
    /// only).
    pub(super) iis: bool,
    /// The path walk found the script with a PATH_INFO shorter than the
    /// stripped part: php-fpm keeps PATH_INFO, php-cgi reads before it.
    pub(super) cve_shape: bool,
    /// The path the walk started from, when it found a script.
    pub(super) walked_from: Option<&'a [u8]>,
    /// What the `stat` of the final script path said, when one was made
    /// (see [`Plan::script_kind`]).
    pub(super) script_kind: Option<FileKind>,
}

impl Trace<'_> {
    /// php-cgi's `init_request_info()` on the same input takes the same
    /// branches to the same values: the two functions differ only in the
    /// proxy stripping (and `apache_was_here`, which needs it), the IIS
    /// fix-up, the `pilen > slen` check and `is_valid_path()` (php-cgi's
    /// rejects a subset of what php-fpm's rejects, so any path php-fpm
    /// accepts php-cgi accepts too).
    pub(super) fn cgi_agrees(&self) -> bool {
        !self.sf_rewritten && !self.iis && !self.cve_shape
    }
}

/// php-fpm's proxy prefix fix (bugs 54152, 62172): for `prefix` matched
/// case-insensitively (`strncasecmp`), drop it and the host up to the first
/// `/` (only when there is one: that sets `apache_was_here`), then cut at
/// the first `?` (whether or not a path was found).
pub(super) fn strip_proxy<'a>(sf: &'a [u8], prefix: &[u8]) -> (&'a [u8], bool) {
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
pub(super) fn fpm_is_valid_path(p: &[u8]) -> bool {
    !p.windows(2).enumerate().any(|(i, w)| {
        w == b".." && (i == 0 || p[i - 1] == b'/') && (i + 2 == p.len() || p[i + 2] == b'/')
    })
}

/// php-cgi's `is_valid_path()`, step by step. It skips the byte after a
/// `/.x` and so misses `/./../`; on a path ending in `/` or `/.` it steps
/// past the NUL and reads whatever follows, modelled here as NUL.
pub(super) fn cgi_is_valid_path(p: &[u8]) -> bool {
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
pub(super) fn raw_url_decode(s: &[u8]) -> Vec<u8> {
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
pub(super) fn concat(a: &[u8], b: Option<&[u8]>) -> Vec<u8> {
    let b = b.unwrap_or_default();
    let mut v = Vec::with_capacity(a.len() + b.len());
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v
}

/// Both `init_request_info()`s. Local names follow the C ones; comments
/// quote the C where the two differ. Every value is a C string from `input`
/// (or a slice of one), so the locals borrow; only PATH_TRANSLATED is built.
///
/// The steps, in the C's order: php-fpm's fix-ups
/// ([`Locals::iis_fixup`], [`Locals::strip_proxy_prefixes`]); without
/// `fix_pathinfo`, the pre-4.3 values; else the REDIRECT_URL swap
/// ([`Locals::redirect`]), the `stat` of the script, then either the walk
/// back through its `/`s ([`Locals::walk_back`]) or the original values
/// kept ([`Locals::keep_originals`]).
pub(super) fn run<'a, F: FileSystem + ?Sized>(
    input: &'a Vars<'_>,
    opts: &Options,
    fs: &F,
    sapi: Sapi,
) -> (Resolved<'a>, Trace<'a>) {
    let mut l = Locals::new(input, sapi);
    if l.script_path_translated.is_none() {
        return l.done(false);
    }
    l.env_path_info = input.get(Var::PathInfo);
    l.env_script_name = input.get(Var::ScriptName);

    if l.fpm {
        l.iis_fixup(input);
        l.strip_proxy_prefixes();
    }

    if !opts.fix_pathinfo {
        // "pre 4.3 behaviour, shouldn't be used but provides BC"
        l.request_uri = l.env_path_info.or(l.env_script_name);
        if !opts.discard_path && l.env_path_translated.is_some() {
            l.script_path_translated = l.env_path_translated;
        }
        return l.done(false);
    }

    let o = Orig {
        env_redirect_url: input.get(Var::RedirectUrl),
        env_document_root: input.get(Var::DocumentRoot),
        orig_path_translated: l.env_path_translated,
        orig_path_info: l.env_path_info,
        orig_script_name: l.env_script_name,
        orig_script_filename: l.env_script_filename,
    };
    let script_name_swapped = l.redirect(&o);

    let spt = l.script_path_translated.unwrap_or_default();
    let kind = if spt.is_empty() || spt.ends_with(b"/") {
        None
    } else {
        fs.stat(spt)
    };
    let walk = !spt.is_empty() && kind.is_none();
    // Without a walk the script stays `spt`: its kind is known.
    l.trace.script_kind = kind;
    if walk {
        if l.walk_back(fs, spt, &o).is_err() {
            return l.done(true);
        }
    } else {
        l.keep_originals(&o, script_name_swapped);
    }
    l.done(false)
}

/// The locals of `init_request_info()` that its steps change, named as in
/// the C.
struct Locals<'a> {
    /// php-fpm's function, else php-cgi's.
    fpm: bool,
    /// The variables as the function leaves them.
    env: Vars<'a>,
    trace: Trace<'a>,
    apache_was_here: bool,
    request_uri: Option<&'a [u8]>,
    env_script_filename: Option<&'a [u8]>,
    env_path_translated: Option<&'a [u8]>,
    script_path_translated: Option<&'a [u8]>,
    env_path_info: Option<&'a [u8]>,
    env_script_name: Option<&'a [u8]>,
}

/// The values the `fix_pathinfo` branch starts from (the C's `orig_*`
/// copies, and the two variables it reads only then).
struct Orig<'a> {
    env_redirect_url: Option<&'a [u8]>,
    env_document_root: Option<&'a [u8]>,
    orig_path_translated: Option<&'a [u8]>,
    orig_path_info: Option<&'a [u8]>,
    orig_script_name: Option<&'a [u8]>,
    orig_script_filename: Option<&'a [u8]>,
}

/// php-cgi's walk computed PATH_INFO from before the start of its buffer:
/// its behaviour is undefined from there on (see [`Resolved::undefined`]).
struct Undefined;

impl<'a> Locals<'a> {
    fn new(input: &'a Vars<'_>, sapi: Sapi) -> Self {
        let env_script_filename = input.get(Var::ScriptFilename);
        let env_path_translated = input.get(Var::PathTranslated);
        Locals {
            fpm: sapi == Sapi::Fpm,
            env: input.borrowed(),
            trace: Trace::default(),
            apache_was_here: false,
            request_uri: None,
            env_script_filename,
            env_path_translated,
            // "some broken servers do not have script_filename or argv0"
            script_path_translated: env_script_filename.or(env_path_translated),
            env_path_info: None,
            env_script_name: None,
        }
    }

    /// The function's end: `path_translated` is SCRIPT_FILENAME's final
    /// value if `is_valid_path()` (the fpm or the cgi one) accepts it.
    fn done(self, undefined: bool) -> (Resolved<'a>, Trace<'a>) {
        let valid = if self.fpm {
            fpm_is_valid_path
        } else {
            cgi_is_valid_path
        };
        let path_translated = if undefined {
            None
        } else {
            self.script_path_translated.filter(|p| valid(p))
        };
        let resolved = Resolved {
            vars: self.env,
            path_translated,
            request_uri: self.request_uri,
            apache_was_here: self.apache_was_here,
            undefined,
        };
        (resolved, self.trace)
    }

    /// "Hack for buggy IIS that sets incorrect PATH_INFO" (php-cgi: Windows only).
    fn iis_fixup(&mut self, input: &'a Vars<'_>) {
        let iis = input
            .get(Var::ServerSoftware)
            .is_some_and(|s| s.starts_with(b"Microsoft-IIS"));
        if let (true, Some(sn), Some(pi)) = (iis, self.env_script_name, self.env_path_info) {
            if pi.starts_with(sn) {
                self.trace.iis = true;
                self.env.put(Var::OrigPathInfo, Some(pi));
                let rest = &pi[sn.len()..];
                self.env_path_info = if rest.is_empty() { None } else { Some(rest) };
                self.env.put(Var::PathInfo, self.env_path_info);
            }
        }
    }

    /// Apache mod_proxy_fcgi / mod_proxy_balancer prefixes, rewritten in
    /// place in SCRIPT_FILENAME's buffer (so ORIG_SCRIPT_FILENAME below
    /// is the stripped value too).
    fn strip_proxy_prefixes(&mut self) {
        if let Some(sf) = self.env_script_filename {
            let (s, a) = strip_proxy(sf, b"proxy:fcgi://");
            let (s, b) = strip_proxy(s, b"proxy:balancer://");
            self.apache_was_here = a || b;
            if s.len() != sf.len() {
                self.trace.sf_rewritten = true;
                self.env.put(Var::ScriptFilename, Some(s));
                self.env_script_filename = Some(s);
                self.script_path_translated = Some(s);
            }
        }
    }

    /// fpm: "if (!apache_was_here && env_path_translated != NULL &&
    /// env_redirect_url != NULL && ...": the script becomes
    /// PATH_TRANSLATED and SCRIPT_NAME becomes REDIRECT_URL. Returns
    /// whether it did (`env_script_name != orig_script_name` is a pointer
    /// comparison in C).
    fn redirect(&mut self, o: &Orig<'a>) -> bool {
        if let (false, Some(pt), Some(_)) = (
            self.apache_was_here,
            self.env_path_translated,
            o.env_redirect_url,
        ) {
            if Some(pt) != self.script_path_translated {
                // "If we have a redirect_url then our script_filename and
                // script_name point to the php executable"
                self.script_path_translated = Some(pt);
                self.env_script_name = o.env_redirect_url;
                return true;
            }
        }
        false
    }

    /// "if the file doesn't exist, try to extract PATH_INFO out of it by
    /// stat'ing back through the '/'" of `spt`; without a script on the
    /// way, "no input file". Errors: php-cgi's behaviour became undefined.
    fn walk_back<F: FileSystem + ?Sized>(
        &mut self,
        fs: &F,
        spt: &'a [u8],
        o: &Orig<'a>,
    ) -> Result<(), Undefined> {
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
            self.found(spt, pt, o)?;
            break;
        }
        if !found {
            // "we output 'no input file' now"
            if let Some(osf) = o.orig_script_filename {
                self.env.put(Var::OrigScriptFilename, Some(osf));
            }
            self.env.put(Var::ScriptFilename, None);
            self.script_path_translated = None;
        }
        if self.request_uri.is_none() {
            if o.orig_script_name.is_none() || o.orig_script_name != self.env_script_name {
                if let Some(osn) = o.orig_script_name {
                    self.env.put(Var::OrigScriptName, Some(osn));
                }
                self.env.put(Var::ScriptName, self.env_script_name);
                self.request_uri = self.env_script_name;
            } else {
                self.request_uri = o.orig_script_name;
            }
        }
        Ok(())
    }

    /// The walk found the script at `pt`, a prefix of `spt`: what follows
    /// it is PATH_INFO, the script is SCRIPT_FILENAME, and PATH_TRANSLATED
    /// is computed. Errors: php-cgi's behaviour became undefined.
    fn found(&mut self, spt: &'a [u8], pt: &'a [u8], o: &Orig<'a>) -> Result<(), Undefined> {
        self.trace.walked_from = Some(spt);
        let ptlen = pt.len();
        let slen = spt.len() - ptlen;
        let pilen = self.env_path_info.map_or(0, <[u8]>::len);
        let (path_info, tflag) = self.split_path_info(spt, ptlen, slen, o)?;

        if let (true, Some(path_info)) = (tflag, path_info) {
            self.set_path_info(path_info, pilen, slen, o);
        }

        if o.orig_script_filename != Some(pt) {
            if let Some(osf) = o.orig_script_filename {
                self.env.put(Var::OrigScriptFilename, Some(osf));
            }
            self.env.put(Var::ScriptFilename, Some(pt));
            self.script_path_translated = Some(pt);
            self.trace.script_kind = Some(FileKind::Regular);
        }

        self.path_translated(pt, o);
        Ok(())
    }

    /// The walk's PATH_INFO for a script `spt[..ptlen]` (`slen` bytes cut
    /// off its end), and whether it is set (the C's `tflag`), the three
    /// ways: with `apache_was_here`, php-fpm's, php-cgi's.
    fn split_path_info(
        &mut self,
        spt: &'a [u8],
        ptlen: usize,
        slen: usize,
        o: &Orig<'a>,
    ) -> Result<(Option<&'a [u8]>, bool), Undefined> {
        let env_path_info = self.env_path_info;
        let pilen = env_path_info.map_or(0, <[u8]>::len);
        let path_info: Option<&'a [u8]>;
        let tflag: bool;
        if self.apache_was_here {
            // "recall that PATH_INFO won't exist"
            let pi = &spt[ptlen..];
            path_info = Some(pi);
            tflag = slen != 0 && o.orig_path_info != Some(pi);
        } else if self.fpm {
            // "path_info = (env_path_info && pilen > slen) ? env_path_info + pilen - slen : NULL;"
            path_info = env_path_info
                .filter(|_| pilen > slen)
                .map(|pi| &pi[pilen - slen..]);
            tflag = path_info.is_some();
            self.trace.cve_shape = env_path_info.is_some() && pilen < slen;
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
                Some(_) => return Err(Undefined),
            }
        }
        Ok((path_info, tflag))
    }

    /// The walk's PATH_INFO is set (`tflag`): ORIG_PATH_INFO kept and
    /// SCRIPT_NAME cut before PATH_INFO, or, behind Apache's proxy,
    /// PATH_INFO taken off SCRIPT_NAME's end. `pilen`: the length of
    /// PATH_INFO before; `slen`: the bytes the walk cut.
    fn set_path_info(&mut self, path_info: &'a [u8], pilen: usize, slen: usize, o: &Orig<'a>) {
        if let Some(opi) = o.orig_path_info {
            self.env.put(Var::OrigPathInfo, Some(opi));
            // "path_info[0] = 0" cuts env_path_info when path_info
            // points into it; with apache_was_here it points into
            // SCRIPT_FILENAME and env_path_info stays whole.
            let epi = self.env_path_info.unwrap_or_default();
            let head = if self.apache_was_here {
                epi
            } else {
                &epi[..pilen - slen]
            };
            if o.orig_script_name != Some(head) {
                if let Some(osn) = o.orig_script_name {
                    self.env.put(Var::OrigScriptName, Some(osn));
                }
                self.env.put(Var::ScriptName, Some(head));
                self.request_uri = Some(head);
            } else {
                self.request_uri = o.orig_script_name;
            }
        } else if let (true, Some(sn)) = (self.apache_was_here, self.env_script_name) {
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
                self.env.put(Var::OrigScriptName, o.orig_script_name);
                // "env_script_name[env_script_file_info_start] = 0" (in place)
                self.env_script_name = Some(&sn[..start]);
                self.env.put(Var::ScriptName, self.env_script_name);
                self.request_uri = self.env_script_name;
            }
        }
        self.env_path_info = Some(path_info);
        self.env.put(Var::PathInfo, self.env_path_info);
    }

    /// "figure out docroot: SCRIPT_FILENAME minus SCRIPT_NAME", for the
    /// script found at `pt`.
    fn path_translated(&mut self, pt: &'a [u8], o: &Orig<'a>) {
        if let Some(dr) = o.env_document_root {
            let l = if dr.ends_with(b"/") {
                dr.len() - 1
            } else {
                dr.len()
            };
            // "PATH_TRANSLATED = DOCUMENT_ROOT + PATH_INFO"
            let path_translated = concat(&dr[..l], self.env_path_info);
            if let Some(opt) = o.orig_path_translated {
                self.env.put(Var::OrigPathTranslated, Some(opt));
            }
            self.env.put_owned(Var::PathTranslated, path_translated);
        } else if let Some(sn) = self.env_script_name.filter(|sn| contains(pt, sn)) {
            // "PATH_TRANSLATED = PATH_TRANSLATED - SCRIPT_NAME + PATH_INFO"
            let path_translated = concat(&pt[..pt.len() - sn.len()], self.env_path_info);
            if let Some(opt) = o.orig_path_translated {
                self.env.put(Var::OrigPathTranslated, Some(opt));
            }
            self.env.put_owned(Var::PathTranslated, path_translated);
        }
    }

    /// No walk: "make sure original values are remembered in ORIG_ copies
    /// if we've changed them"; `script_name_swapped`: [`Locals::redirect`]
    /// swapped SCRIPT_NAME.
    fn keep_originals(&mut self, o: &Orig<'a>, script_name_swapped: bool) {
        if o.orig_script_filename.is_none() || o.orig_script_filename != self.script_path_translated
        {
            if let Some(osf) = o.orig_script_filename {
                self.env.put(Var::OrigScriptFilename, Some(osf));
            }
            self.env
                .put(Var::ScriptFilename, self.script_path_translated);
        }
        // fpm: "if (!apache_was_here && env_redirect_url)"
        if !self.apache_was_here && o.env_redirect_url.is_some() {
            if let Some(opi) = o.orig_path_info {
                self.env.put(Var::OrigPathInfo, Some(opi));
                self.env.put(Var::PathInfo, None);
            }
            if let Some(opt) = o.orig_path_translated {
                self.env.put(Var::OrigPathTranslated, Some(opt));
                self.env.put(Var::PathTranslated, None);
            }
        }
        if script_name_swapped {
            if let Some(osn) = o.orig_script_name {
                self.env.put(Var::OrigScriptName, Some(osn));
            }
            self.env.put(Var::ScriptName, self.env_script_name);
        }
        self.request_uri = self.env_script_name;
    }
}

/// `strstr(hay, needle) != NULL` (an empty needle is found).
pub(super) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}
