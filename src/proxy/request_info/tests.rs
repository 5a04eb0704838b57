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
fn real_fs_takes_a_found_file_as_found_for_a_second_and_nothing_else() {
    use super::fs::FOUND_TTL;
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gone.php");
    let later = dir.path().join("later.php");
    let f = file.as_os_str().as_bytes();
    let l = later.as_os_str().as_bytes();
    std::fs::write(&file, "<?php").unwrap();
    assert_eq!(RealFs.stat(f), Some(FileKind::Regular));
    std::fs::remove_file(&file).unwrap();
    // Within the second: still a file (php-cgi would then say "No input
    // file specified."), without a stat.
    assert_eq!(RealFs.stat(f), Some(FileKind::Regular));
    // A missing file is not remembered: created, it is found at once.
    assert_eq!(RealFs.stat(l), None);
    std::fs::write(&later, "<?php").unwrap();
    assert_eq!(RealFs.stat(l), Some(FileKind::Regular));
    // A directory is not remembered either.
    std::fs::create_dir(dir.path().join("d")).unwrap();
    let d = dir.path().join("d");
    assert_eq!(
        RealFs.stat(d.as_os_str().as_bytes()),
        Some(FileKind::Directory)
    );
    std::fs::remove_dir(&d).unwrap();
    assert_eq!(RealFs.stat(d.as_os_str().as_bytes()), None);
    // Past the second, the removed file is looked at again.
    std::thread::sleep(FOUND_TTL + std::time::Duration::from_millis(50));
    assert_eq!(RealFs.stat(f), None);
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
        opt(proptest::sample::select(&["nginx", "Microsoft-IIS/10.0"][..]).prop_map(String::from)),
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
