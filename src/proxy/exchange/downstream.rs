//! The child's half of an exchange: its response scanned and forwarded to
//! the web server record by record as it comes, PHP's messages on STDERR
//! reframed, and php-cgi's "No input file specified." END_REQUEST held
//! back until fpmd has told the web server why, as php-fpm does.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::fastcgi::cgi::{self, Head};
use crate::fastcgi::{self, scan_response, RecordType, Scan};
use crate::proxy::php_message::PhpMessages;
use crate::proxy::verdict::{ChildEnd, Sent};
use crate::sys::stream::ReadHalf;

/// The child's half of the exchange: its records scanned and forwarded to
/// the web server, PHP's messages reframed.
pub(super) struct Downstream<'a, W> {
    pub(super) id: u16,
    pub(super) child_r: &'a mut ReadHalf,
    /// Bytes read from the child and not yet forwarded.
    pub(super) child_buf: &'a mut BytesMut,
    /// The access log's copy of the response head, while it is incomplete.
    pub(super) head: Option<&'a mut Head>,
    pub(super) messages: PhpMessages,
    /// A span with PHP messages, reframed (reused from span to span).
    pub(super) reframed: Vec<u8>,
    /// php-cgi's "No input file specified.": its END_REQUEST, held back
    /// until fpmd has told the web server why (see `tell_no_input_file`).
    pub(super) held_end: Option<Vec<u8>>,
    pub(super) out: ToClient<'a, W>,
    /// The script called `fastcgi_finish_request()` (see
    /// [`crate::proxy::sapi`]): what is left to send of the response.
    pub(super) finished: Option<AfterFinish>,
    /// Set once the script called it, for the request's timers.
    pub(super) finish_flag: &'a AtomicBool,
    /// The web server asked to keep its connection (`FCGI_KEEP_CONN`).
    pub(super) keep_conn: bool,
}

/// The response after `fastcgi_finish_request()`, as php-fpm ends it
/// (`fcgi_end` and `fcgi_close` in `main/fastcgi.c`): the web server gets
/// what was written before the call, the head if PHP had not sent it yet,
/// then END_REQUEST; the rest of what the child writes goes nowhere (its
/// STDERR messages still reach fpmd's log), and the exchange lasts until
/// the child's own END_REQUEST.
#[derive(Debug, Default)]
pub(super) struct AfterFinish {
    /// The head is still to come on STDOUT.
    head_pending: bool,
    /// Of the head's end (`\r\n\r\n` or `\n\n`): the last bytes seen.
    tail: [u8; 3],
    /// END_REQUEST was sent to the web server.
    ended: bool,
}

impl AfterFinish {
    /// How many bytes of `content` (STDOUT) still belong to the head; the
    /// head ended within them when `Some`.
    fn head_in(&mut self, content: &[u8]) -> (usize, bool) {
        for (i, &b) in content.iter().enumerate() {
            let t = self.tail;
            if b == b'\n' && (t[2] == b'\n' || (t[2] == b'\r' && t[1] == b'\n')) {
                return (i + 1, true);
            }
            self.tail = [t[1], t[2], b];
        }
        (content.len(), false)
    }
}

impl<W: AsyncWrite + Unpin> Downstream<'_, W> {
    /// Forwards the child's records as they come, until its END_REQUEST,
    /// end of file or garbage (with why).
    pub(super) async fn pump(&mut self) -> (ChildEnd, Option<String>) {
        loop {
            let scan = scan_response(self.child_buf, self.id);
            if scan.forwardable > 0 {
                self.forward(&scan).await;
            }
            if let Some(why) = scan.bad {
                return (ChildEnd::Garbage, Some(why));
            }
            if scan.ended.is_some() {
                return (ChildEnd::Ended, None);
            }
            if self.child_buf.capacity() - self.child_buf.len() < fastcgi::HEADER_LEN {
                self.child_buf.reserve(fastcgi::MAX_RECORD_LEN);
            }
            match self.child_r.read_buf(self.child_buf).await {
                Ok(0) | Err(_) => return (ChildEnd::Eof, None),
                Ok(_) => {}
            }
        }
    }

    /// Forwards the whole records `scan` found at the front of the buffer:
    /// as they are, reframed when PHP logged messages, or without php-cgi's
    /// END_REQUEST when it answered "No input file specified." (held back).
    async fn forward(&mut self, scan: &Scan) {
        let id = self.id;
        if self.finished.is_some() {
            self.after_finish(0..scan.forwardable).await;
            self.child_buf.advance(scan.forwardable);
            return;
        }
        let span = &self.child_buf[..scan.forwardable];
        if let Some(h) = self.head.as_deref_mut().filter(|h| !h.done()) {
            h.feed_records(span, id);
        }
        let mut finish = None;
        let span = if scan.ended.is_some() && cgi::is_no_input_file(span, id) {
            let end = last_record_at(span);
            self.held_end = Some(span[end..].to_vec());
            &span[..end]
        } else if scan.stderr || self.messages.holding() {
            self.reframed.clear();
            finish = self.messages.rewrite(span, id, &mut self.reframed);
            &self.reframed[..]
        } else {
            span
        };
        let whole = scan.ended.is_some() && self.held_end.is_none() && finish.is_none();
        self.out.send(span, whole).await;
        if let Some(f) = finish {
            self.finish_flag.store(true, Ordering::Relaxed);
            let mut after = AfterFinish {
                head_pending: f.head_pending,
                ..Default::default()
            };
            if !f.head_pending {
                self.end_response(&mut after).await;
            }
            self.finished = Some(after);
            self.after_finish(f.at..scan.forwardable).await;
        }
        self.child_buf.advance(scan.forwardable);
    }

    /// Sends the web server END_REQUEST (complete, status 0, as php-fpm's
    /// `fcgi_end`) after `fastcgi_finish_request()`.
    async fn end_response(&mut self, after: &mut AfterFinish) {
        let mut out = Vec::with_capacity(16);
        fastcgi::encode_end_request(
            &mut out,
            self.id,
            fastcgi::EndRequest {
                app_status: 0,
                protocol_status: fastcgi::ProtocolStatus::RequestComplete as u8,
            },
        );
        self.out.send(&out, true).await;
        if !self.keep_conn && !self.out.gone {
            // As php-fpm's fcgi_close: the web server that did not ask to
            // keep the connection sees it end (nginx waits for that).
            let _ = self.out.writer.shutdown().await;
        }
        after.ended = true;
    }

    /// Handles the records in `range` of the buffer after the script
    /// called `fastcgi_finish_request()` (see [`AfterFinish`]).
    async fn after_finish(&mut self, range: std::ops::Range<usize>) {
        let id = self.id;
        let mut after = self.finished.take().unwrap_or_default();
        let mut at = range.start;
        let mut to_client = Vec::new();
        let mut discard = std::mem::take(&mut self.reframed);
        while at < range.end {
            let Ok(Some(rec)) = fastcgi::decode_record(&self.child_buf[at..range.end]) else {
                break;
            };
            let len = rec.header.record_len();
            match rec.header.record_type() {
                Some(RecordType::Stdout) if after.head_pending && !after.ended => {
                    let (n, done) = after.head_in(rec.content);
                    fastcgi::encode_stream(
                        &mut to_client,
                        RecordType::Stdout,
                        id,
                        &rec.content[..n],
                    );
                    if done {
                        after.head_pending = false;
                    }
                }
                Some(RecordType::Stderr) => {
                    // Into fpmd's log only; the web server has its answer.
                    discard.clear();
                    let _ = self
                        .messages
                        .rewrite(&self.child_buf[at..at + len], id, &mut discard);
                }
                Some(RecordType::EndRequest) if !after.ended => {
                    // The head never came whole: the answer ends with the
                    // script, as it would without the call.
                    to_client.extend_from_slice(&self.child_buf[at..at + len]);
                    after.ended = true;
                    self.out.send(&to_client, true).await;
                    to_client.clear();
                }
                _ => {}
            }
            at += len;
        }
        self.reframed = discard;
        if !to_client.is_empty() {
            self.out.send(&to_client, false).await;
        }
        if !after.ended && !after.head_pending {
            self.end_response(&mut after).await;
        }
        self.finished = Some(after);
    }
}

/// The web server's writer during the exchange, and what reached it.
pub(super) struct ToClient<'a, W> {
    pub(super) writer: &'a mut W,
    pub(super) sent: Sent,
    /// A write failed: the web server is gone, nothing more is written.
    pub(super) gone: bool,
}

impl<W: AsyncWrite + Unpin> ToClient<'_, W> {
    /// Writes `bytes` unless the web server is gone; `whole`: they end the
    /// response (its END_REQUEST included).
    pub(super) async fn send(&mut self, bytes: &[u8], whole: bool) {
        if self.gone {
            return;
        }
        if self.writer.write_all(bytes).await.is_err() {
            self.gone = true;
        } else {
            self.sent = if whole { Sent::Whole } else { Sent::Partial };
        }
    }
}

/// Where the last record of `span` (whole records) starts.
fn last_record_at(span: &[u8]) -> usize {
    let mut at = 0;
    while let Ok(Some(rec)) = fastcgi::decode_record(&span[at..]) {
        let len = rec.header.record_len();
        if at + len >= span.len() {
            break;
        }
        at += len;
    }
    at
}

/// What fpmd sends after php-cgi's [`cgi::NO_INPUT_FILE`] answer: php-fpm's
/// log line on STDERR, `Unable to open primary script: PATH (ERROR)`
/// (`fpm_main.c`; nginx writes it to its error log), then the child's
/// END_REQUEST record `end`. The error is "Permission denied" when fpmd
/// found the script (`found`): it exists, and php-cgi, as the pool's user,
/// could not open it; else "No such file or directory".
pub(super) fn tell_no_input_file(id: u16, script: &[u8], found: bool, end: &[u8]) -> Vec<u8> {
    let why = if found {
        "Permission denied"
    } else {
        "No such file or directory"
    };
    let mut line = b"Unable to open primary script: ".to_vec();
    line.extend_from_slice(script);
    line.extend_from_slice(format!(" ({why})").as_bytes());
    let mut out = Vec::with_capacity(line.len() + 32);
    fastcgi::encode_stream(&mut out, RecordType::Stderr, id, &line);
    fastcgi::encode_empty(&mut out, RecordType::Stderr, id);
    out.extend_from_slice(end);
    out
}
