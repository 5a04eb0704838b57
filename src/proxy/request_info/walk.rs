//! The two `init_request_info()` functions themselves, emulated line by
//! line ([`run`]): php-fpm's (`fpm_main.c`) and php-cgi's (`cgi_main.c`),
//! with their helpers (Apache's proxy prefix, the path checks, URL
//! decoding).

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
pub(super) fn run<'a, F: FileSystem + ?Sized>(
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
pub(super) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}
