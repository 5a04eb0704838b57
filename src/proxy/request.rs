//! One request as fpmd will send it to a child: canonical records built
//! from what the web server sent, and the body accounting that decides
//! whether the child's connection stays clean.
//!
//! The child's connection is shared by every client in turn, so nothing a
//! client sent goes to the child as it was framed: fpmd writes its own
//! BEGIN_REQUEST (with `FCGI_KEEP_CONN`), re-encodes the PARAMS with each
//! name-value pair whole inside one record (php-cgi parses records one by
//! one), drops every byte of padding, and sends at most `CONTENT_LENGTH`
//! bytes of STDIN followed by the empty STDIN record. Must not touch:
//! sockets.

use std::ops::Range;

use crate::fastcgi::pairs::write_pair;
use crate::fastcgi::{
    decode_record, encode_begin_request, encode_empty, find_param, pairs, BeginRequest,
    ProtocolError, RecordType, StreamWriter, KEEP_CONN, ROLE_RESPONDER,
};

/// How much body the child is owed, from `CONTENT_LENGTH` as PHP reads it
/// (`atol`, php-src `sapi/cgi/cgi_main.c` `init_request_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owed {
    /// Exactly this many bytes (0 when `CONTENT_LENGTH` is absent or not a
    /// number: PHP then reads no body, whatever the web server sends).
    Exact(u64),
    /// A negative `CONTENT_LENGTH` (Caddy sends -1 for chunked uploads):
    /// PHP reads STDIN to its end and then on, past the empty STDIN record:
    /// only the end of its input (fpmd half-closes the connection) stops it.
    UntilEnd,
}

impl Owed {
    /// Parses a `CONTENT_LENGTH` value as C's `atol` does: leading white
    /// space, an optional sign, digits up to the first non-digit; overflow
    /// saturates (glibc's `strtol`).
    pub fn from_content_length(v: Option<&[u8]>) -> Owed {
        let Some(v) = v else { return Owed::Exact(0) };
        let mut s = v
            .iter()
            .skip_while(|b| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
            .peekable();
        let negative = match s.peek() {
            Some(b'-') => {
                s.next();
                true
            }
            Some(b'+') => {
                s.next();
                false
            }
            _ => false,
        };
        let mut n: u64 = 0;
        for b in s.take_while(|b| b.is_ascii_digit()) {
            n = n.saturating_mul(10).saturating_add(u64::from(b - b'0'));
        }
        let n = n.min(i64::MAX as u64);
        if negative && n > 0 {
            Owed::UntilEnd
        } else {
            Owed::Exact(n)
        }
    }
}

/// A request whose head (BEGIN_REQUEST and PARAMS) has been read.
#[derive(Debug)]
pub struct Request {
    pub id: u16,
    /// The web server asked to keep its connection (`FCGI_KEEP_CONN`).
    pub keep_conn: bool,
    /// The child-bound bytes not yet written: BEGIN_REQUEST, the PARAMS
    /// stream, and the STDIN records received before dispatch.
    pub head: Vec<u8>,
    /// Where the PARAMS records lie in `head` (for [`Request::param`]; kept
    /// valid after `head` was written: it is cleared only for reuse).
    params: Range<usize>,
    /// Body owed to the child.
    pub owed: Owed,
    /// STDIN content bytes given to the child so far (in `head`, or written).
    pub body: u64,
    /// Bytes of the web server's STDIN past `CONTENT_LENGTH`, dropped.
    pub excess: u64,
    /// The empty STDIN record is in `head` or written: the child has all
    /// it was owed.
    pub child_stdin_ended: bool,
    /// The web server's STDIN stream has ended.
    pub client_stdin_done: bool,
    stdin: StreamWriter,
}

/// Name-value pairs dropped while re-encoding PARAMS: their names, and how
/// many bytes each took.
pub type Dropped = Vec<(Vec<u8>, usize)>;

/// An edit of the PARAMS made by fpmd (php-fpm's rewriting of Apache's
/// `proxy:fcgi://` variables): every pair of this name is left out, and
/// the value, if any, is appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub name: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

impl Request {
    /// Starts a request: the child-bound BEGIN_REQUEST (role RESPONDER,
    /// `FCGI_KEEP_CONN` set whatever the web server asked: the child's
    /// connection is fpmd's) goes first into `head`, a buffer reused from
    /// the previous request.
    pub fn begin(id: u16, keep_conn: bool, mut head: Vec<u8>) -> Request {
        head.clear();
        encode_begin_request(
            &mut head,
            id,
            BeginRequest {
                role: ROLE_RESPONDER,
                flags: KEEP_CONN,
            },
        );
        let at = head.len();
        Request {
            id,
            keep_conn,
            head,
            params: at..at,
            owed: Owed::Exact(0),
            body: 0,
            excess: 0,
            child_stdin_ended: false,
            client_stdin_done: false,
            stdin: StreamWriter::new(RecordType::Stdin, id),
        }
    }

    /// Takes the head buffer back for the next request.
    pub fn into_buffer(self) -> Vec<u8> {
        self.head
    }

    /// Re-encodes the web server's PARAMS stream `raw` (its records'
    /// content, concatenated) into `head`, each pair whole in one record,
    /// with `edits` applied; learns the body owed from `CONTENT_LENGTH`.
    /// Returns the pairs dropped because no record can hold them (over
    /// 65,535 bytes: php-cgi could not read them either).
    ///
    /// Errors: [`ProtocolError::TruncatedPair`] for a malformed stream
    /// (php-fpm closes such a connection too).
    pub fn set_params(&mut self, raw: &[u8], edits: &[Edit]) -> Result<Dropped, ProtocolError> {
        if let Some(Err(e)) = pairs(raw).find(|p| p.is_err()) {
            return Err(e);
        }
        let start = self.head.len();
        let mut w = StreamWriter::new(RecordType::Params, self.id);
        let mut dropped = Vec::new();
        let mut push = |head: &mut Vec<u8>, name: &[u8], value: &[u8]| {
            if write_pair(&mut w, head, name, value).is_err() {
                dropped.push((name.to_vec(), name.len() + value.len()));
            }
        };
        for (name, value) in pairs(raw).map_while(Result::ok) {
            if !edits.iter().any(|e| e.name == name) {
                push(&mut self.head, name, value);
            }
        }
        for e in edits {
            if let Some(v) = &e.value {
                push(&mut self.head, &e.name, v);
            }
        }
        w.end(&mut self.head);
        self.params = start..self.head.len();
        self.owed = Owed::from_content_length(self.param(b"CONTENT_LENGTH"));
        if self.owed == Owed::Exact(0) {
            // Nothing to read: the child gets the end of STDIN at once.
            self.end_child_stdin();
        }
        Ok(dropped)
    }

    /// The value of a CGI variable as the child sees it (the last pair of
    /// that name, as in php-cgi's table).
    pub fn param(&self, name: &[u8]) -> Option<&[u8]> {
        let mut rest = self.head.get(self.params.clone()).unwrap_or_default();
        let mut found = None;
        while let Ok(Some(rec)) = decode_record(rest) {
            if let Some(v) = find_param(rec.content, name) {
                found = Some(v);
            }
            rest = &rest[rec.header.record_len()..];
        }
        found
    }

    /// Bytes of body the child may still take (`u64::MAX` for a body of
    /// unknown length).
    pub fn remaining(&self) -> u64 {
        match self.owed {
            Owed::Exact(n) => n.saturating_sub(self.body),
            Owed::UntilEnd => u64::MAX,
        }
    }

    /// Notes that `n` more body bytes went to the child; at `CONTENT_LENGTH`
    /// the child's STDIN is complete. Returns true when that happened now
    /// (the caller sends the empty STDIN record, see
    /// [`Request::stdin_end_record`]).
    pub fn sent_body(&mut self, n: u64) -> bool {
        self.body += n;
        matches!(self.owed, Owed::Exact(owed) if self.body >= owed)
            && !std::mem::replace(&mut self.child_stdin_ended, true)
    }

    /// Before dispatch: appends what the web server sent of its body to
    /// `head`, at most what the child is owed (the rest is dropped and
    /// counted in `excess`); at `CONTENT_LENGTH` the empty STDIN record
    /// follows. Returns the bytes kept.
    pub fn buffer_body(&mut self, data: &[u8]) -> usize {
        if self.child_stdin_ended {
            self.excess += data.len() as u64;
            return 0;
        }
        let take = (self.remaining().min(data.len() as u64)) as usize;
        self.stdin.write(&mut self.head, &data[..take]);
        self.excess += (data.len() - take) as u64;
        if self.sent_body(take as u64) {
            encode_empty(&mut self.head, RecordType::Stdin, self.id);
        }
        take
    }

    /// Before dispatch: the web server's STDIN stream ended. Returns false
    /// when it ended short of `CONTENT_LENGTH` (the request must not run:
    /// php-cgi would wait for the rest).
    pub fn end_client_stdin(&mut self) -> bool {
        self.client_stdin_done = true;
        if !self.child_stdin_ended && self.owed == Owed::UntilEnd {
            self.end_child_stdin();
        }
        self.child_stdin_ended
    }

    fn end_child_stdin(&mut self) {
        if !self.child_stdin_ended {
            self.child_stdin_ended = true;
            encode_empty(&mut self.head, RecordType::Stdin, self.id);
        }
    }

    /// The empty STDIN record of this request.
    pub fn stdin_end_record(&self) -> [u8; 8] {
        crate::fastcgi::Header::new(RecordType::Stdin, self.id, 0).encode()
    }

    /// Bytes of `head` that are body (for the memory budget): everything
    /// after the PARAMS.
    pub fn buffered_body(&self) -> usize {
        self.head.len().saturating_sub(self.params.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastcgi::{encode_pair, Deframer, Piece};

    fn raw(pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut v = Vec::new();
        for (n, val) in pairs {
            encode_pair(&mut v, n, val);
        }
        v
    }

    /// The records of `head` as (type, content), each whole.
    fn records(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut v = Vec::new();
        while let Some(r) = decode_record(b).unwrap() {
            assert_eq!(r.header.padding_length, 0, "fpmd writes no padding");
            v.push((r.header.kind, r.content.to_vec()));
            b = &b[r.header.record_len()..];
        }
        assert!(b.is_empty());
        v
    }

    #[test]
    fn content_length_as_atol_reads_it() {
        assert_eq!(Owed::from_content_length(None), Owed::Exact(0));
        assert_eq!(Owed::from_content_length(Some(b"")), Owed::Exact(0));
        assert_eq!(Owed::from_content_length(Some(b"123")), Owed::Exact(123));
        assert_eq!(Owed::from_content_length(Some(b"  12abc")), Owed::Exact(12));
        assert_eq!(Owed::from_content_length(Some(b"+7")), Owed::Exact(7));
        assert_eq!(Owed::from_content_length(Some(b"-1")), Owed::UntilEnd);
        assert_eq!(Owed::from_content_length(Some(b"-0")), Owed::Exact(0));
        assert_eq!(Owed::from_content_length(Some(b"abc")), Owed::Exact(0));
        assert_eq!(
            Owed::from_content_length(Some(b"99999999999999999999999")),
            Owed::Exact(i64::MAX as u64)
        );
    }

    #[test]
    fn params_are_re_encoded_whole_and_the_last_value_wins() {
        let mut r = Request::begin(5, true, Vec::new());
        let big = vec![b'x'; 40_000];
        let giant = vec![b'y'; 70_000];
        let p = raw(&[
            (b"A", &big),
            (b"B", &big),
            (b"G", &giant),
            (b"CONTENT_LENGTH", b"3"),
            (b"CONTENT_LENGTH", b"4"),
        ]);
        let dropped = r.set_params(&p, &[]).unwrap();
        assert_eq!(dropped, vec![(b"G".to_vec(), 70_001)]);
        assert_eq!(r.owed, Owed::Exact(4));
        assert_eq!(r.param(b"A").map(<[u8]>::len), Some(40_000));
        let recs = records(&r.head);
        assert_eq!(recs[0], (1, vec![0, 1, KEEP_CONN, 0, 0, 0, 0, 0]));
        // two PARAMS records (40 KB pairs do not share one), then the end
        assert_eq!(recs.iter().filter(|(k, _)| *k == 4).count(), 3);
        for (k, c) in &recs {
            if *k == 4 {
                assert!(
                    pairs(c).all(|p| p.is_ok()),
                    "each PARAMS record parses on its own"
                );
            }
        }
    }

    #[test]
    fn edits_replace_every_pair_of_a_name() {
        let mut r = Request::begin(1, false, Vec::new());
        let p = raw(&[
            (b"SCRIPT_FILENAME", b"proxy:fcgi://localhost/srv/a.php"),
            (b"X", b"1"),
            (b"SCRIPT_FILENAME", b"again"),
        ]);
        let edits = [
            Edit {
                name: b"SCRIPT_FILENAME".to_vec(),
                value: Some(b"/srv/a.php".to_vec()),
            },
            Edit {
                name: b"X".to_vec(),
                value: None,
            },
        ];
        r.set_params(&p, &edits).unwrap();
        assert_eq!(r.param(b"SCRIPT_FILENAME"), Some(&b"/srv/a.php"[..]));
        assert_eq!(r.param(b"X"), None);
    }

    #[test]
    fn malformed_params_are_refused() {
        let mut r = Request::begin(1, false, Vec::new());
        assert_eq!(
            r.set_params(&[5, 10, b'x'], &[]),
            Err(ProtocolError::TruncatedPair)
        );
    }

    #[test]
    fn body_is_cut_at_content_length_and_ended() {
        let mut r = Request::begin(2, true, Vec::new());
        r.set_params(&raw(&[(b"CONTENT_LENGTH", b"10")]), &[])
            .unwrap();
        assert!(!r.child_stdin_ended);
        assert_eq!(r.buffer_body(b"0123"), 4);
        assert_eq!(r.buffer_body(b"456789abcdef"), 6);
        assert!(r.child_stdin_ended);
        assert_eq!(r.excess, 6);
        assert_eq!(r.buffer_body(b"more"), 0);
        assert_eq!(r.excess, 10);
        assert!(r.end_client_stdin());
        let recs = records(&r.head);
        let stdin: Vec<_> = recs.iter().filter(|(k, _)| *k == 5).collect();
        assert_eq!(stdin, vec![&(5, b"0123456789".to_vec()), &(5, vec![])]);
    }

    #[test]
    fn no_content_length_means_no_body_for_the_child() {
        let mut r = Request::begin(2, true, Vec::new());
        r.set_params(&raw(&[(b"REQUEST_METHOD", b"POST")]), &[])
            .unwrap();
        assert!(r.child_stdin_ended, "empty STDIN at once");
        assert_eq!(r.buffer_body(b"chunked body"), 0);
        assert_eq!(r.excess, 12);
        let n = records(&r.head).iter().filter(|(k, _)| *k == 5).count();
        assert_eq!(n, 1);
    }

    #[test]
    fn short_body_is_reported_and_until_end_is_ended_by_the_client() {
        let mut r = Request::begin(2, true, Vec::new());
        r.set_params(&raw(&[(b"CONTENT_LENGTH", b"10")]), &[])
            .unwrap();
        r.buffer_body(b"abc");
        assert!(!r.end_client_stdin(), "3 of 10 bytes");
        let mut u = Request::begin(3, true, Vec::new());
        u.set_params(&raw(&[(b"CONTENT_LENGTH", b"-1")]), &[])
            .unwrap();
        assert_eq!(u.owed, Owed::UntilEnd);
        assert_eq!(u.buffer_body(&[1; 100_000]), 100_000);
        assert!(!u.child_stdin_ended);
        assert!(u.end_client_stdin());
        let recs = records(&u.head);
        let body: usize = recs
            .iter()
            .filter(|(k, _)| *k == 5)
            .map(|(_, c)| c.len())
            .sum();
        assert_eq!(body, 100_000);
        assert_eq!(recs.last().unwrap(), &(5, vec![]));
    }

    #[test]
    fn what_the_child_gets_parses_as_one_clean_request() {
        // The canonical head read back with the deframer: one BEGIN, whole
        // PARAMS, STDIN, and nothing after the empty STDIN record.
        let mut r = Request::begin(9, false, Vec::new());
        r.set_params(
            &raw(&[(b"CONTENT_LENGTH", b"5"), (b"SCRIPT_FILENAME", b"/x.php")]),
            &[],
        )
        .unwrap();
        r.buffer_body(b"hello world");
        let mut d = Deframer::new();
        let mut at = 0;
        let mut ends = 0;
        while at < r.head.len() {
            let (p, used) = d.next(&r.head[at..]).unwrap();
            if let Some(Piece::End {
                kind: RecordType::Stdin,
                ..
            }) = p
            {
                ends += 1;
            }
            at += used;
            if p.is_none() {
                break;
            }
        }
        assert_eq!(at, r.head.len());
        assert_eq!(ends, 1);
    }
}
