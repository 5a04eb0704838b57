//! The proxy's side of fpmd's SAPI lines (`crate::process::sapi`): a
//! random token per request, and the filter that takes the lines carrying
//! it out of the child's STDERR stream before anything reaches the web
//! server.
//!
//! A line is `ESC [fpmd TOKEN VERB ARGS] LF`, written by `sapi.php` with
//! `error_log(…, 4)`, which php-cgi sends as one STDERR write
//! (`sapi_cgi_log_message`); php-cgi's output buffer may pack it with
//! other messages into one record or split it across two, so the filter
//! works on lines, across records. A line with another token, or that is
//! not well formed, is text and goes through as it is: a script printing
//! these bytes itself (it can only know its own request's token) changes
//! nothing for any other request.
//!
//! Must not touch: the records (the caller reframes what the filter lets
//! through).

use std::collections::BTreeSet;
use std::sync::Mutex;

use tracing::warn;

use crate::config::PoolConfig;
pub use crate::process::sapi::{End, Usage};

/// A request's token: 32 lowercase hex digits (128 random bits).
pub type Token = [u8; 32];

/// The start of every line, up to the token.
const START: &[u8] = b"\x1b[fpmd ";
/// The longest line taken as one of fpmd's (its newline excluded); a
/// longer one is text. An `admin-changed` line holds an ini name of up to
/// 200 bytes.
const LINE_MAX: usize = 256;

/// Random bytes from the kernel's random source, taken 4 KiB at a time
/// per thread (one `getrandom` call for 256 tokens, not one a request)
/// and used once each.
struct RandomBytes {
    buf: [u8; 4096],
    /// Bytes of `buf` already used.
    used: usize,
}

thread_local! {
    static RANDOM: std::cell::RefCell<RandomBytes> = const {
        std::cell::RefCell::new(RandomBytes { buf: [0; 4096], used: 4096 })
    };
}

/// Fills `out` with bytes of the kernel's random source (`getrandom`,
/// which does not block once its pool is initialised); false if it
/// failed.
fn random_bytes(out: &mut [u8]) -> bool {
    RANDOM.with_borrow_mut(|r| {
        if r.used + out.len() > r.buf.len() {
            let n = unsafe {
                // SAFETY: `r.buf` is a valid, writable buffer of its length.
                libc::getrandom(r.buf.as_mut_ptr().cast(), r.buf.len(), 0)
            };
            if n != r.buf.len() as isize {
                return false;
            }
            r.used = 0;
        }
        out.copy_from_slice(&r.buf[r.used..r.used + out.len()]);
        // Used bytes are not kept: a later reader of the buffer (a core
        // dump) learns no past token.
        r.buf[r.used..r.used + out.len()].fill(0);
        r.used += out.len();
        true
    })
}

/// A new token: 16 bytes of the kernel's random source, in hex. None if
/// it failed: the request then runs without one (`sapi.php` then stays
/// silent).
pub fn new_token() -> Option<Token> {
    let mut raw = [0u8; 16];
    if !random_bytes(&mut raw) {
        return None;
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut t = [0u8; 32];
    for (i, b) in raw.iter().enumerate() {
        t[2 * i] = HEX[(b >> 4) as usize];
        t[2 * i + 1] = HEX[(b & 15) as usize];
    }
    Some(t)
}

/// What a request's `sapi.php` told fpmd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `fastcgi_finish_request()`: the response ends now. `head_pending`:
    /// PHP had not sent its head yet; it follows on STDOUT with one byte
    /// of body that is not the script's (`sapi.php` printed it to make PHP
    /// send the head).
    Finish { head_pending: bool },
    /// The script ended: its peak memory and the CPU times.
    End(End),
    /// A `.user.ini` changed the pool's `php_admin_value` of this ini name,
    /// and PHP cannot set it back at run time (PHP_INI_PERDIR), so the
    /// script runs with the file's value ("admin-changed NAME"; see
    /// `sapi.php`'s `admin()`). Client text: a script can forge it for its
    /// own request, so [`log_admin_changed`] logs only the pool's names.
    AdminChanged(String),
    /// The script's response code changed after PHP sent its head
    /// (`http_response_code()` after output; "status CODE", 100-999):
    /// php-fpm's access log `%s` logs this last code
    /// (`SG(sapi_headers).http_response_code` when the request ends).
    Status(u16),
}

/// The filter of one request's STDERR stream.
#[derive(Debug)]
pub struct Lines {
    token: Token,
    /// The stream is at the start of a line.
    at_start: bool,
    /// The start of a line that may be one of fpmd's, held back.
    held: Vec<u8>,
}

impl Lines {
    /// The filter for the request whose token is `token`.
    pub fn new(token: Token) -> Lines {
        Lines {
            token,
            at_start: true,
            held: Vec::new(),
        }
    }

    /// Copies `content` (STDERR bytes, in order) into `out` without the
    /// lines that carry the token, each of which becomes an event for
    /// `on`. The start of a line that may be one is held until the line
    /// is decided.
    pub fn filter(&mut self, mut content: &[u8], out: &mut Vec<u8>, on: &mut impl FnMut(Event)) {
        while !content.is_empty() {
            if self.held.is_empty() && !self.at_start {
                // Inside a text line: up to its end, as it is.
                match memchr(b'\n', content) {
                    Some(nl) => {
                        out.extend_from_slice(&content[..=nl]);
                        content = &content[nl + 1..];
                        self.at_start = true;
                    }
                    None => {
                        out.extend_from_slice(content);
                        return;
                    }
                }
                continue;
            }
            // At a line start, or holding one back.
            let nl = memchr(b'\n', content);
            let upto = nl.unwrap_or(content.len());
            self.held.extend_from_slice(&content[..upto]);
            self.at_start = false;
            let could_be = self.held.len() <= LINE_MAX
                && (START.starts_with(&self.held[..self.held.len().min(START.len())]));
            match nl {
                Some(nl) => {
                    content = &content[nl + 1..];
                    self.at_start = true;
                    match self.parse() {
                        Some(ev) => on(ev),
                        None => {
                            out.extend_from_slice(&self.held);
                            out.push(b'\n');
                        }
                    }
                    self.held.clear();
                }
                None => {
                    content = &[];
                    if !could_be {
                        out.extend_from_slice(&self.held);
                        self.held.clear();
                    }
                }
            }
        }
    }

    /// The stream ended: what is held back is text, for `out`.
    pub fn end(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.held);
        self.at_start = true;
    }

    /// Bytes are held back (the next STDERR bytes or the stream's end
    /// decide them).
    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// The held line as one of fpmd's, if it is one with this token (and
    /// no longer than [`LINE_MAX`], as when it comes in pieces).
    fn parse(&self) -> Option<Event> {
        if self.held.len() > LINE_MAX {
            return None;
        }
        let line = self.held.strip_prefix(START)?;
        let rest = line.strip_prefix(&self.token[..])?;
        let rest = rest.strip_prefix(b" ")?.strip_suffix(b"]")?;
        let text = std::str::from_utf8(rest).ok()?;
        let mut words = text.split(' ');
        match words.next()? {
            "finish" => Some(Event::Finish {
                head_pending: false,
            }),
            "finish-head" => Some(Event::Finish { head_pending: true }),
            "end" => {
                // end MEMORY USER SYSTEM [USER0 SYSTEM0]; "-" for an
                // unknown time.
                let memory = words.next()?.parse().ok()?;
                let mut times = || -> Option<Option<(u64, u64)>> {
                    let (u, s) = (words.next()?, words.next()?);
                    Some(u.parse().ok().zip(s.parse().ok()))
                };
                let cpu = times()?;
                let started = times().flatten();
                Some(Event::End(End {
                    memory,
                    cpu,
                    started,
                }))
            }
            "status" => {
                let code = words
                    .next()?
                    .parse()
                    .ok()
                    .filter(|c| (100..=999).contains(c))?;
                if words.next().is_some() {
                    return None;
                }
                Some(Event::Status(code))
            }
            "admin-changed" => {
                let name = words.next().filter(|n| !n.is_empty())?;
                if words.next().is_some() {
                    return None;
                }
                Some(Event::AdminChanged(name.to_string()))
            }
            _ => None,
        }
    }
}

/// The (pool, ini name) pairs [`log_admin_changed`] logged.
static ADMIN_CHANGED_LOGGED: Mutex<BTreeSet<(String, String)>> = Mutex::new(BTreeSet::new());

/// Logs, once per pool and name, that a request of `pool`'s child `pid`
/// ran with a `.user.ini`'s value of the pool's `php_admin_value` (or
/// `php_admin_flag`) `names`, which PHP cannot set back at run time
/// (PHP_INI_PERDIR), where php-fpm locks it ([`Event::AdminChanged`]).
/// Names that are not among the pool's admin values (a forged line) are
/// not logged, which bounds the memory to the pools' admin names.
pub fn log_admin_changed(pool: &PoolConfig, pid: i32, names: &[String]) {
    let admin = crate::process::sapi::admin_names(pool);
    let mut logged = ADMIN_CHANGED_LOGGED
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for name in names {
        if !admin.contains(&name.as_str()) {
            continue;
        }
        if !logged.insert((pool.name.clone(), name.clone())) {
            continue;
        }
        warn!(pool = %pool.name, pid,
            "a .user.ini changed the pool's php_admin_value '{name}', which PHP cannot set back at run time (PHP_INI_PERDIR): the script ran with the .user.ini's value; php-fpm locks it (README: php_admin_value). Logged once per pool and name");
    }
}

fn memchr(b: u8, s: &[u8]) -> Option<usize> {
    s.iter().position(|&c| c == b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const T: &Token = b"0123456789abcdef0123456789abcdef";

    fn run(pieces: &[&[u8]]) -> (Vec<u8>, Vec<Event>) {
        let mut l = Lines::new(*T);
        let mut out = Vec::new();
        let mut evs = Vec::new();
        for p in pieces {
            l.filter(p, &mut out, &mut |e| evs.push(e));
        }
        l.end(&mut out);
        (out, evs)
    }

    fn line(verb: &str) -> Vec<u8> {
        let mut v = START.to_vec();
        v.extend_from_slice(T);
        v.extend_from_slice(format!(" {verb}]\n").as_bytes());
        v
    }

    #[test]
    fn lines_with_the_token_become_events_and_leave_the_stream() {
        let mut s = b"PHP Warning:  a\n".to_vec();
        s.extend(line("finish"));
        s.extend_from_slice(b"late\n");
        s.extend(line("end 2097152 1500 250"));
        s.extend(line("end 4096 1500 250 1000 200"));
        s.extend(line("end 4096 - -"));
        let (out, evs) = run(&[&s]);
        assert_eq!(out, b"PHP Warning:  a\nlate\n");
        let end = |cpu, started| {
            Event::End(End {
                memory: 2097152,
                cpu,
                started,
            })
        };
        assert_eq!(
            evs,
            vec![
                Event::Finish {
                    head_pending: false
                },
                end(Some((1500, 250)), None),
                Event::End(End {
                    memory: 4096,
                    cpu: Some((1500, 250)),
                    started: Some((1000, 200)),
                }),
                Event::End(End {
                    memory: 4096,
                    cpu: None,
                    started: None,
                }),
            ]
        );
        let Event::End(with_start) = evs[2] else {
            unreachable!()
        };
        assert_eq!(
            with_start.usage().cpu,
            Some((Duration::from_micros(500), Duration::from_micros(50)))
        );
        // No start figure, or totals that went back: unknown.
        let Event::End(without) = evs[1] else {
            unreachable!()
        };
        assert_eq!(without.usage().cpu, None);
        let back = End {
            started: Some((2000, 0)),
            ..without
        };
        assert_eq!(back.usage().cpu, None);
    }

    #[test]
    fn the_same_whatever_the_record_boundaries() {
        let mut s = b"x\n".to_vec();
        s.extend(line("finish-head"));
        s.extend_from_slice(b"tail without newline");
        let whole = run(&[&s]);
        for cut in 0..s.len() {
            for cut2 in cut..s.len() {
                let got = run(&[&s[..cut], &s[cut..cut2], &s[cut2..]]);
                assert_eq!(got, whole, "cut at {cut} and {cut2}");
            }
        }
        assert_eq!(whole.1, vec![Event::Finish { head_pending: true }]);
        assert_eq!(whole.0, b"x\ntail without newline");
    }

    #[test]
    fn another_token_or_a_bad_line_is_text() {
        let forged = b"\x1b[fpmd ffffffffffffffffffffffffffffffff finish]\n";
        let bad = [START, &T[..], b" finish"].concat();
        let mut s = forged.to_vec();
        s.extend_from_slice(&bad);
        s.push(b'\n');
        s.extend_from_slice(&[START, &T[..], b" end x y z]\n"].concat());
        let (out, evs) = run(&[&s]);
        assert!(evs.is_empty());
        assert_eq!(out, s);
    }

    #[test]
    fn status_is_one_http_code() {
        let s = line("status 500");
        let (out, evs) = run(&[&s]);
        assert!(out.is_empty());
        assert_eq!(evs, [Event::Status(500)]);
        for bad in [
            "status",
            "status 99",
            "status 1000",
            "status 500 x",
            "status x",
        ] {
            let s = line(bad);
            let (out, evs) = run(&[&s]);
            assert!(evs.is_empty(), "{bad}");
            assert_eq!(out, s, "{bad}");
        }
    }

    #[test]
    fn admin_changed_names_one_ini_name() {
        let mut s = line("admin-changed upload_max_filesize");
        s.extend(line("admin-changed opcache.jit_buffer_size"));
        let (out, evs) = run(&[&s]);
        assert!(out.is_empty());
        assert_eq!(
            evs,
            [
                Event::AdminChanged("upload_max_filesize".into()),
                Event::AdminChanged("opcache.jit_buffer_size".into()),
            ]
        );
        // No name, two names, or a name past the longest line: text.
        let long = format!("admin-changed {}", "x".repeat(LINE_MAX));
        for bad in [
            "admin-changed",
            "admin-changed ",
            "admin-changed a b",
            &long,
        ] {
            let s = line(bad);
            let (out, evs) = run(&[&s]);
            assert!(evs.is_empty(), "{bad}");
            assert_eq!(out, s, "{bad}");
        }
        // The longest ini name sapi.php may send fits.
        let s = line(&format!("admin-changed {}", "x".repeat(200)));
        assert_eq!(run(&[&s]).1.len(), 1);
    }

    #[test]
    fn a_long_line_is_not_held() {
        let mut l = Lines::new(*T);
        let mut out = Vec::new();
        let mut s = START.to_vec();
        s.extend(std::iter::repeat_n(b'a', 300));
        l.filter(&s, &mut out, &mut |_| panic!("no event"));
        assert!(!l.holding());
        assert_eq!(out, s);
    }

    #[test]
    fn tokens_are_hex_and_differ() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_ne!(a, b);
        // Past a refill of the per-thread buffer too.
        let many: std::collections::HashSet<Token> =
            (0..1000).map(|_| new_token().unwrap()).collect();
        assert_eq!(many.len(), 1000);
        assert!(a
            .iter()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
}
