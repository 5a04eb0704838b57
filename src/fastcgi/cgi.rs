//! The head of a CGI response (RFC 3875 6.2): the header lines a child
//! writes on STDOUT before the blank line, collected as the response is
//! forwarded, for the access log's `%s` (the `Status:` line) and `%{…}o`
//! (a response header).
//!
//! Must not touch: anything but bytes (it reads records fpmd has already
//! validated and forwarded; it never changes them).

use super::{decode_record, RecordType};

/// Bytes of a response head kept; a longer head is cut there (its later
/// lines are then not found by [`Head::header`] or [`Head::status`]).
pub const MAX_HEAD: usize = 8 * 1024;

/// The head of one response, collected from its STDOUT stream. Reused from
/// request to request ([`Head::clear`]).
#[derive(Debug, Default, Clone)]
pub struct Head {
    /// The header lines seen so far (each ends with `\n` or `\r\n`, the
    /// last one perhaps cut), never the blank line or the body.
    buf: Vec<u8>,
    /// The blank line was seen (or [`MAX_HEAD`] reached): nothing more is
    /// collected.
    done: bool,
}

impl Head {
    pub fn new() -> Head {
        Head::default()
    }

    /// Forgets the previous response.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.done = false;
    }

    /// Whether the whole head (or [`MAX_HEAD`] of it) has been collected.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Takes the content of one STDOUT record.
    pub fn feed(&mut self, stdout: &[u8]) {
        if self.done || stdout.is_empty() {
            return;
        }
        let from = self.buf.len().saturating_sub(3);
        let room = MAX_HEAD - self.buf.len();
        self.buf
            .extend_from_slice(&stdout[..stdout.len().min(room)]);
        // The blank line: "\n\n" or "\n\r\n" (php-cgi writes CRLF), or a
        // response that starts with one (no header at all).
        if self.buf.first() == Some(&b'\n') || self.buf.starts_with(b"\r\n") {
            self.buf.clear();
            self.done = true;
            return;
        }
        let mut i = from;
        while let Some(n) = memchr::memchr(b'\n', &self.buf[i..]) {
            let at = i + n + 1;
            match &self.buf[at..] {
                [b'\n', ..] | [b'\r', b'\n', ..] => {
                    self.buf.truncate(at);
                    self.done = true;
                    return;
                }
                _ => i = at,
            }
        }
        if self.buf.len() >= MAX_HEAD {
            self.done = true;
        }
    }

    /// Takes whole records a child sent for request `id` (as forwarded:
    /// already checked by [`super::scan_response`]); only their STDOUT
    /// content counts.
    pub fn feed_records(&mut self, mut records: &[u8], id: u16) {
        while !self.done {
            let Ok(Some(rec)) = decode_record(records) else {
                return;
            };
            if rec.header.request_id == id && rec.header.kind == RecordType::Stdout as u8 {
                self.feed(rec.content);
            }
            records = &records[rec.header.record_len()..];
        }
    }

    /// The header lines, without their line ends.
    pub fn lines(&self) -> impl Iterator<Item = &[u8]> {
        self.buf
            .split(|b| *b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .filter(|l| !l.is_empty())
    }

    /// The code of the `Status:` line (`Status: 404 Not Found` → 404), if
    /// the head has one; a CGI response without one means 200 (RFC 3875
    /// 6.3.3).
    pub fn status(&self) -> Option<u16> {
        self.lines().find_map(|l| {
            let (name, value) = l.split_at(l.iter().position(|b| *b == b':')?);
            name.eq_ignore_ascii_case(b"Status")
                .then(|| status_code(&value[1..]))
                .flatten()
        })
    }

    /// The value of the first header line that `%{name}o` matches, as
    /// php-fpm finds it in `fpm_log.c` (case `'o'`): a line that contains
    /// `name` (case-sensitive), has `": "` right after the first
    /// `name.len()` bytes and something after that. An empty `name`
    /// matches nothing.
    pub fn header(&self, name: &[u8]) -> Option<&[u8]> {
        if name.is_empty() {
            return None;
        }
        self.lines().find_map(|l| {
            let matches = l.len() > name.len() + 2
                && memchr::memmem::find(l, name).is_some()
                && &l[name.len()..name.len() + 2] == b": ";
            matches.then(|| &l[name.len() + 2..])
        })
    }
}

/// The three-digit code at the start of a status (`" 404 Not Found"`,
/// `"503 Service Unavailable"`), after optional blanks.
pub fn status_code(status: &[u8]) -> Option<u16> {
    let s = status.trim_ascii_start();
    match s {
        [a, b, c, rest @ ..]
            if [a, b, c].iter().all(|d| d.is_ascii_digit())
                && rest.first().is_none_or(|x| !x.is_ascii_digit()) =>
        {
            Some(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
        }
        _ => None,
    }
}

/// php-cgi's answer when it cannot open the primary script
/// (`php_fopen_primary_script` failed, or its own `stat` found nothing:
/// `cgi_main.c`): the body after a `Status: 404` head. php-fpm answers the
/// same, and also logs why (`Unable to open primary script: PATH
/// (ERROR)`), which php-cgi does not.
pub const NO_INPUT_FILE: &[u8] = b"No input file specified.\n";

/// Whether the records of `span` (a child's last span for request `id`,
/// ending with its END_REQUEST) hold the whole of php-cgi's
/// [`NO_INPUT_FILE`] answer, and no STDERR (after which a STDERR record of
/// fpmd's would break the stream): the STDOUT of the request starts with
/// `Status: 404` and ends with the blank line and [`NO_INPUT_FILE`]. A
/// response spread over several reads is not recognised (php-cgi writes
/// this one in one piece).
pub fn is_no_input_file(mut span: &[u8], id: u16) -> bool {
    let mut stdout: Vec<&[u8]> = Vec::new();
    let mut len = 0;
    while let Ok(Some(rec)) = decode_record(span) {
        if rec.header.request_id == id {
            match RecordType::from_u8(rec.header.kind) {
                Some(RecordType::Stdout) => {
                    len += rec.content.len();
                    if len > 512 {
                        return false;
                    }
                    stdout.push(rec.content);
                }
                Some(RecordType::Stderr) => return false,
                _ => {}
            }
        }
        span = &span[rec.header.record_len()..];
    }
    let text = stdout.concat();
    text.starts_with(b"Status: 404")
        && (text.ends_with(b"\r\n\r\nNo input file specified.\n")
            || text.ends_with(b"\n\nNo input file specified.\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastcgi::{encode_end_request, encode_record, EndRequest};

    fn head_of(chunks: &[&[u8]]) -> Head {
        let mut h = Head::new();
        for c in chunks {
            h.feed(c);
        }
        h
    }

    /// php-cgi's answer to a script it cannot open, byte for byte as php-cgi
    /// 8.2 sends it (records, END_REQUEST): recognised; any other 404, a
    /// STDERR record, or another request's records: not.
    #[test]
    fn no_input_file_answer() {
        let answer = |id: u16, body: &[u8], stderr: bool| {
            let mut out = Vec::new();
            let mut stdout = b"Status: 404 Not Found\r\nX-Powered-By: PHP/8.2\r\nContent-type: text/html; charset=UTF-8\r\n\r\n".to_vec();
            stdout.extend_from_slice(body);
            crate::fastcgi::encode_stream(&mut out, RecordType::Stdout, id, &stdout);
            if stderr {
                crate::fastcgi::encode_stream(&mut out, RecordType::Stderr, id, b"PHP Warning: x");
            }
            crate::fastcgi::encode_empty(&mut out, RecordType::Stdout, id);
            encode_end_request(&mut out, id, EndRequest::COMPLETE);
            out
        };
        assert!(is_no_input_file(&answer(1, NO_INPUT_FILE, false), 1));
        assert!(!is_no_input_file(&answer(1, NO_INPUT_FILE, false), 2));
        assert!(!is_no_input_file(&answer(1, NO_INPUT_FILE, true), 1));
        assert!(!is_no_input_file(&answer(1, b"Not here.\n", false), 1));
        let mut big = vec![b'x'; 600];
        big.extend_from_slice(NO_INPUT_FILE);
        assert!(
            !is_no_input_file(&answer(1, &big, false), 1),
            "a page that ends so"
        );
    }

    #[test]
    fn status_line_and_default() {
        let h = head_of(&[b"Status: 404 Not Found\r\nContent-type: text/html\r\n\r\nbody"]);
        assert!(h.done());
        assert_eq!(h.status(), Some(404));
        let h = head_of(&[b"X-Powered-By: PHP\r\nContent-type: text/html\r\n\r\n"]);
        assert_eq!(h.status(), None, "no Status line: 200");
        let h = head_of(&[b"content-type: x\nstatus:302\n\nbody"]);
        assert_eq!(h.status(), Some(302), "any case, LF only, no blank");
        let h = head_of(&[b"Status: abc\r\n\r\n"]);
        assert_eq!(h.status(), None);
    }

    #[test]
    fn head_split_across_records_and_body_ignored() {
        let h = head_of(&[
            b"Stat",
            b"us: 201 Created\r",
            b"\n",
            b"\r",
            b"\nStatus: 500\r\n",
        ]);
        assert!(h.done());
        assert_eq!(h.status(), Some(201));
        assert_eq!(h.lines().count(), 1);
        let h = head_of(&[b"\r\nStatus: 500\r\n\r\n"]);
        assert!(h.done());
        assert_eq!(h.status(), None, "no head at all: the rest is body");
    }

    #[test]
    fn long_heads_are_cut() {
        let mut h = Head::new();
        h.feed(b"Status: 418 I'm a teapot\r\n");
        for _ in 0..1000 {
            h.feed(b"X-Filler: 0123456789\r\n");
        }
        assert!(h.done());
        assert_eq!(h.status(), Some(418));
        assert!(h.buf.len() <= MAX_HEAD);
    }

    #[test]
    fn headers_as_php_fpm_matches_them() {
        let h = head_of(&[
            b"X-Powered-By: PHP/8.2\r\nContent-type: text/html; charset=UTF-8\r\nX-Empty: \r\n\r\n",
        ]);
        assert_eq!(
            h.header(b"Content-type"),
            Some(&b"text/html; charset=UTF-8"[..])
        );
        assert_eq!(h.header(b"Content-Type"), None, "case-sensitive");
        assert_eq!(h.header(b"Powered-By"), None, "at the start only");
        assert_eq!(h.header(b"X-Empty"), None, "nothing after ': '");
        assert_eq!(h.header(b""), None);
    }

    #[test]
    fn records_of_other_types_and_ids_are_skipped() {
        let mut b = Vec::new();
        encode_record(&mut b, RecordType::Stderr, 1, b"Status: 500\r\n\r\n").unwrap();
        encode_record(&mut b, RecordType::Stdout, 1, b"Status: 403 Forbidden\r\n").unwrap();
        encode_record(&mut b, RecordType::Stdout, 1, b"\r\nbody").unwrap();
        encode_end_request(&mut b, 1, EndRequest::COMPLETE);
        let mut h = Head::new();
        h.feed_records(&b[..b.len() - 3], 1);
        assert_eq!(h.status(), Some(403));
        let mut h = Head::new();
        h.feed_records(&b, 2);
        assert_eq!(h.status(), None);
    }

    #[test]
    fn status_codes() {
        assert_eq!(status_code(b"503 Service Unavailable"), Some(503));
        assert_eq!(status_code(b"  200"), Some(200));
        assert_eq!(status_code(b"2000"), None);
        assert_eq!(status_code(b"20"), None);
    }
}
