//! php-fpm's access log: `access.format` is parsed once, when the
//! configuration is read ([`Format::parse`], in
//! [`crate::config::access_format`]), into a list of pieces; each
//! request then gets one line, written with [`Format::write`] into a buffer
//! the connection reuses, specifier by specifier as php-fpm's
//! `fpm_log_write` writes it (php-src `sapi/fpm/fpm/fpm_log.c`), and handed
//! to the writer thread of [`super::reopen`].
//!
//! | specifier | what (php-fpm's meaning, fpmd's source) |
//! | --- | --- |
//! | `%C`, `%{total\|user\|system}C` | CPU of the request in %: always `0.00` (php-cgi does not tell fpmd its CPU time) |
//! | `%d`, `%{seconds\|milli\|milliseconds\|micro\|microseconds}d` | time from the request's arrival to its end: `%.3f` seconds (default), `%.3f` milliseconds, or whole microseconds (`mili`, `miliseconds` are accepted too) |
//! | `%{NAME}e` | the FastCGI parameter `NAME` as the child got it (`-` when absent) |
//! | `%f` | `SCRIPT_FILENAME` (`-` when empty) |
//! | `%l` | `CONTENT_LENGTH` as PHP reads it (`0` when absent or negative) |
//! | `%m` | `REQUEST_METHOD` (`-` when empty) |
//! | `%M`, `%{bytes\|kilo\|kilobytes\|mega\|megabytes}M` | peak memory of the request: always `0` (php-cgi does not tell fpmd) |
//! | `%n` | the pool's name |
//! | `%{NAME}o` | the response header `NAME` (case-sensitive, as php-fpm; `-` when absent and for fpmd's own answers) |
//! | `%p` | the pid of the child that served the request (fpmd's own pid for the answers fpmd gives itself) |
//! | `%P` | fpmd's pid (php-fpm: the master's) |
//! | `%q`, `%Q` | `QUERY_STRING`; `?` when it is not empty, else nothing |
//! | `%r` | php-fpm's request URI: `SCRIPT_NAME`, else the path of `REQUEST_URI` |
//! | `%R` | `REMOTE_ADDR` (`-` when absent; php-fpm prints the web server's address here, `-` on a unix socket) |
//! | `%s` | the HTTP status: the child's `Status:` line (200 without one), or fpmd's own answer (502, 503, 504, 404, …) |
//! | `%t`, `%{FORMAT}t` | when the request arrived, local time, default format `%d/%b/%Y:%H:%M:%S %z`; `FORMAT` is strftime's, as chrono reads it |
//! | `%T`, `%{FORMAT}T` | the same, when the request ended (php-fpm: when the line is written) |
//! | `%u` | `REMOTE_USER` (empty when absent) |
//! | `%%` | `%` |
//!
//! As in php-fpm, a line is cut at 1024 bytes ([`MAX_LINE`]) and an empty
//! line is not written. Unlike php-fpm, whatever the client controls
//! (parameters, URI, headers) is escaped with [`crate::log::escape`]
//! (control characters, `"`, `\`, invalid UTF-8), so that a request cannot
//! forge a line.
//!
//! Must not touch: files (see [`super::reopen`]) and the request path
//! (the proxy builds the [`Entry`]).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use crate::config::access_format::{DurationUnit, Format, Piece};
use crate::fastcgi::cgi::Head;
use crate::log::escape;

/// Longest line in bytes, without its newline (php-fpm's
/// `FPM_LOG_BUFFER`): a longer line is cut.
pub const MAX_LINE: usize = 1024;

/// What [`Format::write`] reads of one request.
pub struct Entry<'a> {
    /// The pool's name (`%n`).
    pub pool: &'a str,
    /// The request's FastCGI parameters as the child got them.
    pub params: &'a dyn Params,
    /// php-fpm's request URI (`%r`).
    pub request_uri: &'a [u8],
    /// The body length PHP reads (`%l`), in bytes.
    pub content_length: u64,
    /// The child that served the request, or fpmd (`%p`).
    pub pid: i32,
    /// The HTTP status answered (`%s`).
    pub status: u16,
    /// The child's response head (`%{…}o`); `None` for fpmd's own answers.
    pub head: Option<&'a Head>,
    /// When the request arrived (`%t`).
    pub start: SystemTime,
    /// From its arrival to its end (`%d`).
    pub duration: Duration,
    /// The peak memory and CPU its child reported (`%M`, `%C`); `None`:
    /// not known (`-`).
    pub usage: Option<crate::process::sapi::Usage>,
}

/// The FastCGI parameters of a request.
pub trait Params {
    /// The value of `name`, if the request has it.
    fn param(&self, name: &[u8]) -> Option<&[u8]>;
}

/// fpmd's pid (`%P`), read once.
fn master_pid() -> u32 {
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID.get_or_init(std::process::id)
}

const DASH: &[u8] = b"-";

/// The value of `name`, empty when absent.
fn param<'a>(params: &'a dyn Params, name: &[u8]) -> &'a [u8] {
    params.param(name).unwrap_or_default()
}

/// `v`, or `-` when it is empty.
fn or_dash(v: &[u8]) -> &[u8] {
    if v.is_empty() {
        DASH
    } else {
        v
    }
}

impl Format {
    /// Writes the line of `e` into `out` (cleared first), with its
    /// newline. False when the line is empty (php-fpm writes nothing then).
    pub fn write(&self, e: &Entry<'_>, out: &mut String) -> bool {
        out.clear();
        let param = |name: &[u8]| param(e.params, name);
        for piece in self.pieces() {
            // Writing to a String cannot fail (a time format chrono
            // cannot render stops that piece short, nothing else).
            let _ = match piece {
                Piece::Text(t) => out.write_str(t),
                // php-fpm's `%.2f` of the CPU over the request's duration;
                // `-` when the child did not report it (README).
                Piece::Cpu(part) => match e.usage.and_then(|u| u.cpu_percent(e.duration, *part)) {
                    Some(p) => write!(out, "{p:.2}"),
                    None => out.write_str("-"),
                },
                Piece::Duration(DurationUnit::Seconds) => {
                    write!(out, "{:.3}", e.duration.as_secs_f64())
                }
                Piece::Duration(DurationUnit::Milli) => {
                    write!(out, "{:.3}", e.duration.as_secs_f64() * 1000.0)
                }
                Piece::Duration(DurationUnit::Micro) => write!(out, "{}", e.duration.as_micros()),
                Piece::Env(name) => write!(out, "{}", escape(e.params.param(name).unwrap_or(DASH))),
                Piece::ScriptFilename => {
                    write!(out, "{}", escape(or_dash(param(b"SCRIPT_FILENAME"))))
                }
                Piece::ContentLength => write!(out, "{}", e.content_length),
                Piece::Method => write!(out, "{}", escape(or_dash(param(b"REQUEST_METHOD")))),
                Piece::Memory(unit) => match e.usage {
                    Some(u) => write!(out, "{}", u.memory / unit),
                    None => out.write_str("-"),
                },
                Piece::Pool => out.write_str(if e.pool.is_empty() { "-" } else { e.pool }),
                Piece::Header(name) => {
                    let v = e.head.and_then(|h| h.header(name)).unwrap_or(DASH);
                    write!(out, "{}", escape(v))
                }
                Piece::Pid => write!(out, "{}", e.pid),
                Piece::MasterPid => write!(out, "{}", master_pid()),
                Piece::Query => write!(out, "{}", escape(param(b"QUERY_STRING"))),
                Piece::QueryMark => out.write_str(if param(b"QUERY_STRING").is_empty() {
                    ""
                } else {
                    "?"
                }),
                Piece::RequestUri => write!(out, "{}", escape(e.request_uri)),
                Piece::RemoteAddr => write!(out, "{}", escape(or_dash(param(b"REMOTE_ADDR")))),
                Piece::Status => write!(out, "{}", e.status),
                Piece::Time { end, items } => {
                    let at = if *end { e.start + e.duration } else { e.start };
                    let local = chrono::DateTime::<chrono::Local>::from(at);
                    write!(out, "{}", local.format_with_items(items.iter()))
                }
                Piece::User => write!(out, "{}", escape(param(b"REMOTE_USER"))),
            };
        }
        if out.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
        }
        if out.is_empty() {
            return false;
        }
        out.push('\n');
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::access_format::{DEFAULT_FORMAT, DEFAULT_TIME_FORMAT};
    use std::collections::BTreeMap;

    struct Vars(BTreeMap<&'static [u8], &'static [u8]>);

    impl Params for Vars {
        fn param(&self, name: &[u8]) -> Option<&[u8]> {
            self.0.get(name).copied()
        }
    }

    fn vars() -> Vars {
        Vars(BTreeMap::from([
            (&b"REMOTE_ADDR"[..], &b"192.0.2.7"[..]),
            (b"REMOTE_USER", b"alice"),
            (b"REQUEST_METHOD", b"POST"),
            (b"SCRIPT_FILENAME", b"/srv/www/index.php"),
            (b"QUERY_STRING", b"a=1&b=2"),
            (b"HTTP_USER_AGENT", b"curl/8 \"quoted\"\n"),
            (b"EMPTY", b""),
        ]))
    }

    const START: u64 = 1_700_000_000;

    fn line_with(format: &str, v: &Vars, head: Option<&Head>) -> String {
        let f = Format::parse(format).unwrap_or_else(|e| panic!("{format}: {e}"));
        let e = Entry {
            pool: "www",
            params: v,
            request_uri: b"/index.php",
            content_length: 42,
            pid: 1234,
            status: 404,
            head,
            start: SystemTime::UNIX_EPOCH + Duration::from_secs(START),
            duration: Duration::from_micros(1_234_567),
            usage: Some(crate::process::sapi::Usage {
                memory: 50 << 20,
                cpu: Some((
                    Duration::from_micros(308_642),
                    Duration::from_micros(61_728),
                )),
            }),
        };
        let mut out = String::from("left over");
        if !f.write(&e, &mut out) {
            return String::new();
        }
        assert!(out.ends_with('\n'), "{out:?}");
        out.pop();
        out
    }

    fn line(format: &str) -> String {
        line_with(format, &vars(), None)
    }

    #[test]
    fn memory_and_cpu_not_reported_are_dashes() {
        let f = Format::parse("%M %{kilo}M %C %{user}C").unwrap();
        let v = vars();
        let e = Entry {
            pool: "www",
            params: &v,
            request_uri: b"/",
            content_length: 0,
            pid: 1,
            status: 200,
            head: None,
            start: SystemTime::UNIX_EPOCH,
            duration: Duration::from_millis(5),
            usage: None,
        };
        let mut out = String::new();
        assert!(f.write(&e, &mut out));
        assert_eq!(out, "- - - -\n");
    }

    #[test]
    fn every_specifier() {
        let cases: &[(&str, &str)] = &[
            ("%%", "%"),
            // 0.370370 s of 1.234567 s; user 0.308642, system 0.061728.
            ("%C", "30.00"),
            ("%{total}C %{user}C %{SYSTEM}C", "30.00 25.00 5.00"),
            ("%d", "1.235"),
            ("%{seconds}d", "1.235"),
            (
                "%{mili}d %{milli}d %{miliseconds}d %{milliseconds}d",
                "1234.567 1234.567 1234.567 1234.567",
            ),
            ("%{micro}d %{microseconds}d", "1234567 1234567"),
            ("%{REMOTE_ADDR}e %{MISSING}e [%{EMPTY}e]", "192.0.2.7 - []"),
            ("%f", "/srv/www/index.php"),
            ("%l", "42"),
            ("%m", "POST"),
            (
                "%M %{bytes}M %{kilo}M %{kilobytes}M %{mega}M %{megabytes}M",
                "52428800 52428800 51200 51200 50 50",
            ),
            ("%n", "www"),
            ("%p", "1234"),
            ("%q", "a=1&b=2"),
            ("%Q", "?"),
            ("%r%Q%q", "/index.php?a=1&b=2"),
            ("%R", "192.0.2.7"),
            ("%s", "404"),
            ("%{%s}t", "1700000000"),
            ("%{%s}T", "1700000001"),
            ("%u", "alice"),
            ("%{}m", "POST"),
            ("plain text, no specifier", "plain text, no specifier"),
            ("trailing %", "trailing "),
            ("ünïcode %m ✓", "ünïcode POST ✓"),
        ];
        for (format, want) in cases {
            assert_eq!(line(format), *want, "format {format:?}");
        }
        assert_eq!(line("%P"), std::process::id().to_string());
    }

    #[test]
    fn missing_values_as_php_fpm_prints_them() {
        let none = Vars(BTreeMap::new());
        let l = line_with("%R|%u|%m|%f|%q|%Q|%{X}e|%{X}o", &none, None);
        assert_eq!(l, "-||-|-|||-|-");
        assert_eq!(line_with("%u%q", &none, None), "", "an empty line");
    }

    #[test]
    fn php_fpms_default_format() {
        let l = line(DEFAULT_FORMAT);
        // 192.0.2.7 - alice 14/Nov/2023:22:13:20 +0000 "POST /index.php" 404
        let (head, rest) = l.split_at("192.0.2.7 - alice ".len());
        assert_eq!(head, "192.0.2.7 - alice ");
        assert!(rest.ends_with(" \"POST /index.php\" 404"), "{l}");
        let time = &rest[..rest.len() - " \"POST /index.php\" 404".len()];
        let parsed = chrono::DateTime::parse_from_str(time, DEFAULT_TIME_FORMAT)
            .unwrap_or_else(|e| panic!("{time}: {e}"));
        assert_eq!(parsed.timestamp(), START as i64);
        assert_eq!(Format::default().as_str(), DEFAULT_FORMAT);
    }

    #[test]
    fn response_headers() {
        let mut h = Head::new();
        h.feed(b"Status: 404 Not Found\r\nContent-type: text/html\r\nX-Id: a\"b\r\n\r\nbody");
        let l = line_with("%{Content-type}o|%{X-Id}o|%{Location}o", &vars(), Some(&h));
        assert_eq!(l, "text/html|a\\\"b|-");
    }

    #[test]
    fn client_text_is_escaped_and_long_lines_cut() {
        assert_eq!(
            line("%{HTTP_USER_AGENT}e"),
            "curl/8 \\\"quoted\\\"\\n",
            "no line can be forged"
        );
        let long = "é".repeat(600);
        let l = line(&long);
        assert!(l.len() <= MAX_LINE && l.len() > MAX_LINE - 2, "{}", l.len());
        assert!(l.chars().all(|c| c == 'é'));
    }

    #[test]
    fn invalid_formats_are_php_fpms_errors() {
        let cases: &[(&str, &str)] = &[
            ("%x", "Invalid token in the access.format (%x)"),
            ("%{abc", "missing closing embrace in the access.format"),
            ("%{abc}", "missing closing embrace in the access.format"),
            ("%{x}s", "embrace is not allowed for modifier %s"),
            ("%{x}%", "embrace is not allowed for modifier %%"),
            ("%{x}C", "only 'total', 'user' or 'system' are allowed as a modifier for %C ('x')"),
            ("%{hours}d", "only 'seconds', 'milli', 'milliseconds', 'micro' or 'microseconds' are allowed as a modifier for %d ('hours')"),
            ("%{giga}M", "only 'bytes', 'kilo', 'kilobytes', 'mega' or 'megabytes' are allowed as a modifier for %M ('giga')"),
            ("%e", "the name of the environment variable must be set between embraces for %e"),
            ("%{}o", "the name of the header must be set between embraces for %o"),
            ("%{%}t", "invalid time format '%' for %t (strftime's format, as chrono reads it)"),
            ("%{x}z", "Invalid token in the access.format (%z)"),
        ];
        for (format, want) in cases {
            let e = Format::parse(format).expect_err(format);
            assert_eq!(e.to_string(), *want, "format {format:?}");
        }
    }

    #[test]
    fn formats_compare_as_text() {
        let a = Format::parse("%m %r").unwrap();
        assert_eq!(a, Format::parse("%m %r").unwrap());
        assert_ne!(a, Format::parse("%m  %r").unwrap());
        assert_eq!(a.to_string(), "%m %r");
        // Two modifiers: the last one counts, as in php-fpm.
        assert_eq!(line("%{x}{micro}d"), "1234567");
    }
}
