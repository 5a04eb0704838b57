//! php-fpm's framing of PHP's log messages on FastCGI STDERR, rebuilt from
//! php-cgi's.
//!
//! php-fpm's child sends each message PHP logs during a request (with no
//! `error_log` set) as `PHP message: TEXT`, the messages of one request
//! joined by `; `, with no newline (`sapi_cgi_log_message` → `zlog_msg`
//! with the prefix `"PHP message: "` → `sapi_cgi_log_fastcgi`, in
//! php-src `sapi/fpm/fpm/fpm_main.c`). nginx then logs
//! `FastCGI sent in stderr: "PHP message: PHP Warning:  … on line 3"`, and
//! log parsers (fail2ban filters, log shippers' php-fpm patterns) key on
//! that prefix. php-cgi sends the bare `TEXT\n` for each message
//! (`sapi/cgi/cgi_main.c`, same function), so fpmd rewrites the STDERR
//! records it relays.
//!
//! php-cgi's records do not keep message boundaries (its output buffer
//! packs and splits writes), so a message is a line, except that a line
//! PHP writes inside an uncaught exception's message (`Stack trace:`,
//! `#0 …`, `  thrown in …`, `Next …` of a chained exception) continues
//! the message before it, newline kept, as in php-fpm. The rewrite is only
//! done for spans that hold STDERR content ([`crate::fastcgi::Scan::stderr`]):
//! an answer with no log message is forwarded untouched.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Instant;

use tracing::warn;

use crate::config::PoolConfig;
use crate::fastcgi::{decode_record, encode_empty, RecordType, StreamWriter};
use crate::process::output::{said, Stream, TokenBucket, CHILD_RATE};
use crate::proxy::sapi::{End, Event, Lines};

/// php-fpm's prefix of each message.
pub const PREFIX: &[u8] = b"PHP message: ";
/// php-fpm's separator between the messages of one request.
const SEPARATOR: &[u8] = b"; ";
/// Line starts that continue the message before them (PHP's text of an
/// uncaught exception, `zend_exceptions.c`).
const CONTINUATIONS: &[&[u8]] = &[b"Stack trace:", b"#", b"  thrown in ", b"Next "];
/// Longest of [`CONTINUATIONS`]: bytes held back at a line start at most.
const HOLD_MAX: usize = 12;
/// The fatal error of a script that calls php-fpm's SAPI function, which
/// php-cgi does not have.
const FINISH_REQUEST_MISSING: &[u8] = b"Call to undefined function fastcgi_finish_request()";

/// The rewrite state of one request's STDERR stream.
#[derive(Debug, Default)]
pub struct PhpMessages {
    /// A message was already written (the next one is preceded by `; `).
    started: bool,
    /// Inside a line (its prefix decided and written).
    in_line: bool,
    /// Bytes at the start of a line, held back until they tell whether the
    /// line continues a message (at most [`HOLD_MAX`]).
    held: Vec<u8>,
    /// The last bytes of the content seen (one fewer than
    /// [`FINISH_REQUEST_MISSING`]), to find it across records.
    tail: Vec<u8>,
    /// The reframed text of one record, reused from record to record.
    text: Vec<u8>,
    /// The script called `fastcgi_finish_request()` and php-cgi has none.
    pub finish_request_missing: bool,
    /// Keep the messages for fpmd's log (`catch_workers_output`): php-fpm's
    /// child writes each to its stderr too, which php-fpm's master logs
    /// as `child N said into stderr: "NOTICE: PHP message: …"`.
    pub collect: bool,
    /// The message being read, at most [`MESSAGE_MAX`] bytes.
    current: Vec<u8>,
    /// Whole messages not yet taken ([`PhpMessages::take_done`]), at most
    /// [`MESSAGES_KEPT`].
    done: Vec<Vec<u8>>,
    /// Messages beyond [`MESSAGES_KEPT`] in this request, not kept.
    pub dropped: usize,
    /// fpmd's SAPI lines of this request, taken out of the stream first
    /// (`None`: the request has no token).
    pub sapi: Option<Lines>,
    /// STDERR content without fpmd's SAPI lines, reused.
    filtered: Vec<u8>,
    /// The request's figures, once its `sapi.php` reported them.
    pub end: Option<End>,
    /// The admin values a `.user.ini` changed that PHP could not set back
    /// ([`Event::AdminChanged`]), each once, at most
    /// [`ADMIN_CHANGED_KEPT`].
    pub admin_changed: Vec<String>,
    /// The response code the script set after its head was sent
    /// ([`Event::Status`]), the last one said.
    pub status: Option<u16>,
}

/// Names of [`PhpMessages::admin_changed`] kept per request (a script can
/// forge the lines of its own request).
pub const ADMIN_CHANGED_KEPT: usize = 64;

/// Where [`PhpMessages::rewrite`] stopped: the script called
/// `fastcgi_finish_request()` in the record that ends at `at` (bytes
/// into the span); `head_pending` as [`Event::Finish`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    pub at: usize,
    pub head_pending: bool,
}

/// Bytes of one message kept for the log (php-fpm's default `log_limit`).
pub const MESSAGE_MAX: usize = 1024;
/// Messages of one request kept for the log; the rest are counted. With
/// [`MESSAGE_MAX`], at most 256 KiB per request in flight (only with
/// `catch_workers_output`); php-fpm keeps no count, and php-src's
/// bug72185-fcgi-empty-frame logs 167 messages in one request.
pub const MESSAGES_KEPT: usize = 256;

impl PhpMessages {
    /// Rewrites `span` (whole, valid records for request `id`, as
    /// [`crate::fastcgi::scan_response`] passed them) into `out`: STDOUT and
    /// END_REQUEST records are copied as they are, STDERR content is
    /// reframed as php-fpm frames it, and the empty STDERR record (the end
    /// of the stream) is written after what was held back. fpmd's SAPI
    /// lines are taken out first ([`PhpMessages::sapi`]); at the one that
    /// says the script called `fastcgi_finish_request()` the rewrite stops
    /// after that record and says where ([`Finished`]).
    pub fn rewrite(&mut self, span: &[u8], id: u16, out: &mut Vec<u8>) -> Option<Finished> {
        let mut at = 0;
        while let Ok(Some(rec)) = decode_record(&span[at..]) {
            let len = rec.header.record_len();
            if rec.header.record_type() != Some(RecordType::Stderr) {
                if rec.header.record_type() == Some(RecordType::EndRequest) {
                    self.flush_into(id, out);
                }
                out.extend_from_slice(&span[at..at + len]);
            } else if rec.content.is_empty() {
                self.flush_into(id, out);
                encode_empty(out, RecordType::Stderr, id);
            } else {
                let mut finish = None;
                let mut filtered = std::mem::take(&mut self.filtered);
                filtered.clear();
                let content = match &mut self.sapi {
                    Some(lines) => {
                        let (end, admin, status) =
                            (&mut self.end, &mut self.admin_changed, &mut self.status);
                        lines.filter(rec.content, &mut filtered, &mut |e| match e {
                            Event::Finish { head_pending } => finish = Some(head_pending),
                            Event::End(e) => *end = Some(e),
                            Event::Status(code) => *status = Some(code),
                            Event::AdminChanged(name) => {
                                if admin.len() < ADMIN_CHANGED_KEPT && !admin.contains(&name) {
                                    admin.push(name);
                                }
                            }
                        });
                        &filtered[..]
                    }
                    None => rec.content,
                };
                if !content.is_empty() {
                    self.note_finish_request(content);
                    let mut text = std::mem::take(&mut self.text);
                    text.clear();
                    self.feed(content, &mut text);
                    StreamWriter::new(RecordType::Stderr, id).write(out, &text);
                    self.text = text;
                }
                self.filtered = filtered;
                if let Some(head_pending) = finish {
                    return Some(Finished {
                        at: at + len,
                        head_pending,
                    });
                }
            }
            at += len;
        }
        debug_assert_eq!(at, span.len(), "span holds whole records only");
        None
    }

    /// Bytes of a line start are held back: the next span must go through
    /// [`PhpMessages::rewrite`] even if it holds no STDERR content, so that
    /// they are written before the stream's end.
    pub fn holding(&self) -> bool {
        !self.held.is_empty() || self.sapi.as_ref().is_some_and(Lines::holding)
    }

    /// Writes what is held back (the start of a last line) as a record;
    /// the last message is then whole.
    fn flush_into(&mut self, id: u16, out: &mut Vec<u8>) {
        if let Some(lines) = self.sapi.as_mut().filter(|l| l.holding()) {
            let mut rest = Vec::new();
            lines.end(&mut rest);
            let mut text = std::mem::take(&mut self.text);
            text.clear();
            self.feed(&rest, &mut text);
            StreamWriter::new(RecordType::Stderr, id).write(out, &text);
            self.text = text;
        }
        if !self.held.is_empty() {
            let mut text = std::mem::take(&mut self.text);
            text.clear();
            self.start_line(&mut text);
            StreamWriter::new(RecordType::Stderr, id).write(out, &text);
            self.text = text;
        }
        if !self.current.is_empty() {
            self.finish_message();
        }
    }

    /// Reframes `content` into `text`.
    fn feed(&mut self, mut content: &[u8], text: &mut Vec<u8>) {
        while !content.is_empty() {
            if self.in_line {
                match content.iter().position(|&b| b == b'\n') {
                    Some(nl) => {
                        text.extend_from_slice(&content[..nl]);
                        self.keep(&content[..nl]);
                        // The newline is written only when the next line
                        // continues the message.
                        self.in_line = false;
                        content = &content[nl + 1..];
                    }
                    None => {
                        text.extend_from_slice(content);
                        self.keep(content);
                        return;
                    }
                }
                continue;
            }
            // At a line start: hold bytes until the line's kind is known.
            let room = HOLD_MAX - self.held.len();
            let take = content
                .iter()
                .take(room)
                .position(|&b| b == b'\n')
                .map_or(content.len().min(room), |nl| nl);
            self.held.extend_from_slice(&content[..take]);
            content = &content[take..];
            let line_ended = content.first() == Some(&b'\n');
            if line_ended || !self.undecided() {
                self.start_line(text);
            }
        }
    }

    /// The held bytes could still begin a continuation line.
    fn undecided(&self) -> bool {
        self.held.len() < HOLD_MAX
            && CONTINUATIONS
                .iter()
                .any(|c| c.len() > self.held.len() && c.starts_with(&self.held))
    }

    /// Writes the frame of the line whose start is held, then the held
    /// bytes; the line is then open.
    fn start_line(&mut self, text: &mut Vec<u8>) {
        let continues = self.started && CONTINUATIONS.iter().any(|c| self.held.starts_with(c));
        if continues {
            text.push(b'\n');
            self.keep(b"\n");
        } else {
            if self.started {
                text.extend_from_slice(SEPARATOR);
            }
            text.extend_from_slice(PREFIX);
            self.started = true;
            self.finish_message();
        }
        text.extend_from_slice(&self.held);
        let mut held = std::mem::take(&mut self.held);
        self.keep(&held);
        held.clear();
        self.held = held;
        self.in_line = true;
    }

    /// Adds `bytes` to the message being read, when collecting.
    fn keep(&mut self, bytes: &[u8]) {
        if self.collect {
            let room = MESSAGE_MAX.saturating_sub(self.current.len());
            self.current
                .extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
    }

    /// The message being read is whole.
    fn finish_message(&mut self) {
        if !self.collect || self.current.is_empty() {
            return;
        }
        let m = std::mem::take(&mut self.current);
        if self.done.len() < MESSAGES_KEPT {
            self.done.push(m);
        } else {
            self.dropped += 1;
        }
    }

    /// The whole messages read so far (when collecting), each without
    /// php-fpm's `PHP message: ` prefix; the last one once the stream has
    /// ended.
    pub fn take_done(&mut self) -> Vec<Vec<u8>> {
        self.finish_message();
        std::mem::take(&mut self.done)
    }

    fn note_finish_request(&mut self, content: &[u8]) {
        if self.finish_request_missing {
            return;
        }
        let needle = FINISH_REQUEST_MISSING;
        let keep = needle.len() - 1;
        let has = |hay: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
        // Across the boundary: the tail and the start of `content`; then
        // `content` itself, without copying it.
        let edge = content.len().min(keep);
        self.tail.extend_from_slice(&content[..edge]);
        self.finish_request_missing = has(&self.tail) || has(content);
        if content.len() >= keep {
            self.tail.clear();
            self.tail
                .extend_from_slice(&content[content.len() - keep..]);
        } else if self.tail.len() > keep {
            self.tail.drain(..self.tail.len() - keep);
        }
    }
}

/// The pools whose `fastcgi_finish_request()` call was logged.
static FINISH_REQUEST_LOGGED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Logs, once per pool, that a script of `pool` (`script`, client text,
/// escaped by the log formatter) called `fastcgi_finish_request()`, which
/// its php-cgi did not have: `fpm_sapi = false`, or a `.user.ini` that
/// replaced fpmd's `auto_prepend_file` (see `crate::process::sapi`). The
/// call is then a fatal error (500), and a call guarded by
/// `function_exists()` runs the rest of the script before the response
/// ends. README "fastcgi_finish_request" says what to do.
pub fn log_finish_request_missing(pool: &str, script: &[u8]) {
    let mut logged = FINISH_REQUEST_LOGGED
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if logged.contains(pool) {
        return;
    }
    logged.insert(pool.to_string());
    warn!(pool = %pool, script = %String::from_utf8_lossy(script),
        "the script called fastcgi_finish_request(), which php-cgi does not have without fpmd's sapi.php (fpm_sapi = false, or a .user.ini whose auto_prepend_file replaces it): the request failed with a fatal error (README: fastcgi_finish_request). Logged once per pool");
}

/// The bucket all pools' PHP messages share ([`log_php_messages`]).
static PHP_MESSAGE_BUCKET: std::sync::Mutex<Option<TokenBucket>> = std::sync::Mutex::new(None);

/// Logs the messages PHP sent on FastCGI STDERR during one request of
/// `pool`'s child `pid` (`catch_workers_output = true`), as php-fpm's
/// master logs what its child's zlog wrote to stderr: one line per line of
/// a message, `[pool www] child 1234 said into stderr: "NOTICE: PHP
/// message: PHP Warning:  …"` (the prefix on a message's first line only),
/// or with `decorate_workers_output = false` the bare `NOTICE: PHP
/// message: …`. `dropped`: messages of the request
/// not kept ([`MESSAGES_KEPT`]). Rate: one
/// [`CHILD_RATE`] bucket for all pools; what it drops is summed up in the
/// next line it lets through.
pub fn log_php_messages(pool: &PoolConfig, pid: i32, messages: &[Vec<u8>], dropped: usize) {
    let now = Instant::now();
    let mut bucket = PHP_MESSAGE_BUCKET.lock().unwrap_or_else(|e| e.into_inner());
    let bucket = bucket.get_or_insert_with(|| TokenBucket::new(CHILD_RATE, now));
    let mut line = Vec::with_capacity(128);
    for message in messages {
        for (i, text) in message.split(|&b| b == b'\n').enumerate() {
            line.clear();
            if i == 0 {
                line.extend_from_slice(b"NOTICE: ");
                line.extend_from_slice(PREFIX);
            }
            line.extend_from_slice(text);
            if bucket.admit(now, line.len()) {
                if let Some((d, _)) = bucket.take_dropped() {
                    warn!(
                        "PHP messages over fpmd's log rate: {} lines ({} bytes) not logged",
                        d.lines, d.bytes
                    );
                }
                said(
                    &pool.name,
                    pool.decorate_workers_output,
                    pid,
                    Stream::Stderr,
                    &line,
                    false,
                );
            }
        }
    }
    if dropped > 0 {
        warn!(
            "[pool {}] child {pid}: {dropped} more PHP messages of one request not logged (fpmd logs {} a request)",
            pool.name,
            MESSAGES_KEPT
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastcgi::{encode_end_request, encode_record, EndRequest};

    /// The STDERR text of `out`, and its other records in order.
    fn stderr_of(out: &[u8]) -> (Vec<u8>, Vec<RecordType>) {
        let mut text = Vec::new();
        let mut kinds = Vec::new();
        let mut at = 0;
        while let Ok(Some(r)) = decode_record(&out[at..]) {
            let kind = r.header.record_type().unwrap();
            if kind == RecordType::Stderr {
                text.extend_from_slice(r.content);
            }
            kinds.push(kind);
            at += r.header.record_len();
        }
        (text, kinds)
    }

    /// Feeds `pieces` as separate STDERR records (one span each), then the
    /// stream's end.
    fn run(pieces: &[&[u8]]) -> (Vec<u8>, PhpMessages) {
        let mut m = PhpMessages::default();
        let mut out = Vec::new();
        // An empty record would end the stream: a cut there sends none.
        for p in pieces.iter().filter(|p| !p.is_empty()) {
            let mut span = Vec::new();
            encode_record(&mut span, RecordType::Stderr, 1, p).unwrap();
            m.rewrite(&span, 1, &mut out);
        }
        let mut end = Vec::new();
        encode_empty(&mut end, RecordType::Stderr, 1);
        encode_end_request(&mut end, 1, EndRequest::COMPLETE);
        m.rewrite(&end, 1, &mut out);
        let (text, kinds) = stderr_of(&out);
        assert_eq!(kinds.last(), Some(&RecordType::EndRequest));
        (text, m)
    }

    #[test]
    fn messages_are_prefixed_and_joined_as_php_fpm_does() {
        let (text, _) = run(&[
            b"PHP Warning:  Undefined variable $x in /a.php on line 3\nPHP Notice:  n in /a.php on line 4\n",
        ]);
        assert_eq!(
            text,
            b"PHP message: PHP Warning:  Undefined variable $x in /a.php on line 3; PHP message: PHP Notice:  n in /a.php on line 4"
        );
    }

    #[test]
    fn the_same_text_whatever_the_record_boundaries() {
        let whole: &[u8] = b"PHP Fatal error:  Uncaught Exception: boom in /a.php:3\nStack trace:\n#0 {main}\n  thrown in /a.php on line 3\nuser line\nStack\n";
        let want = b"PHP message: PHP Fatal error:  Uncaught Exception: boom in /a.php:3\nStack trace:\n#0 {main}\n  thrown in /a.php on line 3; PHP message: user line; PHP message: Stack".to_vec();
        for cut in 0..whole.len() {
            for cut2 in cut..whole.len() {
                let (text, _) = run(&[&whole[..cut], &whole[cut..cut2], &whole[cut2..]]);
                assert_eq!(
                    String::from_utf8_lossy(&text),
                    String::from_utf8_lossy(&want),
                    "cuts at {cut}, {cut2}"
                );
            }
        }
    }

    #[test]
    fn stdout_is_copied_and_order_kept() {
        let mut span = Vec::new();
        encode_record(&mut span, RecordType::Stdout, 1, b"Status: 200\r\n\r\nA").unwrap();
        encode_record(&mut span, RecordType::Stderr, 1, b"one\n").unwrap();
        encode_record(&mut span, RecordType::Stdout, 1, b"B").unwrap();
        encode_empty(&mut span, RecordType::Stdout, 1);
        encode_end_request(&mut span, 1, EndRequest::COMPLETE);
        let mut out = Vec::new();
        PhpMessages::default().rewrite(&span, 1, &mut out);
        let mut want = Vec::new();
        encode_record(&mut want, RecordType::Stdout, 1, b"Status: 200\r\n\r\nA").unwrap();
        encode_record(&mut want, RecordType::Stderr, 1, b"PHP message: one").unwrap();
        encode_record(&mut want, RecordType::Stdout, 1, b"B").unwrap();
        encode_empty(&mut want, RecordType::Stdout, 1);
        encode_end_request(&mut want, 1, EndRequest::COMPLETE);
        assert_eq!(out, want);
    }

    #[test]
    fn a_last_line_without_newline_is_written_before_the_end() {
        let (text, _) = run(&[b"first\nSta"]);
        assert_eq!(text, b"PHP message: first; PHP message: Sta");
    }

    #[test]
    fn messages_are_collected_whole_for_the_log() {
        let mut m = PhpMessages {
            collect: true,
            ..PhpMessages::default()
        };
        let mut out = Vec::new();
        let mut span = Vec::new();
        encode_record(
            &mut span,
            RecordType::Stderr,
            1,
            b"PHP Warning:  a\nStack trace:\n#0 {main}\nsec",
        )
        .unwrap();
        m.rewrite(&span, 1, &mut out);
        assert_eq!(
            m.take_done(),
            vec![
                b"PHP Warning:  a\nStack trace:\n#0 {main}".to_vec(),
                b"sec".to_vec()
            ]
        );
        let long = vec![b'x'; 3000];
        let mut span = Vec::new();
        encode_record(&mut span, RecordType::Stderr, 1, &long).unwrap();
        m.rewrite(&span, 1, &mut out);
        assert_eq!(m.take_done(), vec![vec![b'x'; MESSAGE_MAX]]);
        let many = "m\n".repeat(MESSAGES_KEPT + 5);
        let mut span = Vec::new();
        encode_record(&mut span, RecordType::Stderr, 1, many.as_bytes()).unwrap();
        m.rewrite(&span, 1, &mut out);
        assert_eq!(m.take_done().len(), MESSAGES_KEPT);
        assert_eq!(m.dropped, 5);
        let (_, quiet) = run(&[b"not kept\n"]);
        assert!(
            quiet.done.is_empty() && quiet.current.is_empty(),
            "only when collecting"
        );
    }

    #[test]
    fn a_missing_fastcgi_finish_request_is_noticed_across_records() {
        let (_, m) = run(&[
            b"PHP Fatal error:  Uncaught Error: Call to undefined function fastcgi_fin",
            b"ish_request() in /a.php:2\n",
        ]);
        assert!(m.finish_request_missing);
        let (_, m) = run(&[b"PHP Warning: something else\n"]);
        assert!(!m.finish_request_missing);
    }

    /// `sapi.php`'s `admin-changed` lines leave the stream and name each
    /// ini name once.
    #[test]
    fn admin_changed_lines_are_taken_out_and_kept_once() {
        const T: &[u8; 32] = b"0123456789abcdef0123456789abcdef";
        let line = |name: &str| {
            [
                b"\x1b[fpmd ",
                &T[..],
                b" admin-changed ",
                name.as_bytes(),
                b"]\n",
            ]
            .concat()
        };
        let mut m = PhpMessages {
            sapi: Some(Lines::new(*T)),
            ..PhpMessages::default()
        };
        let mut text = line("upload_max_filesize");
        text.extend_from_slice(b"PHP Warning:  a\n");
        text.extend(line("post_max_size"));
        text.extend(line("upload_max_filesize"));
        let mut span = Vec::new();
        encode_record(&mut span, RecordType::Stderr, 1, &text).unwrap();
        encode_empty(&mut span, RecordType::Stderr, 1);
        let mut out = Vec::new();
        assert_eq!(m.rewrite(&span, 1, &mut out), None);
        assert_eq!(stderr_of(&out).0, b"PHP message: PHP Warning:  a");
        assert_eq!(m.admin_changed, ["upload_max_filesize", "post_max_size"]);
    }
}
