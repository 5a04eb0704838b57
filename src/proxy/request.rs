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
    ProtocolError, RecordType, StreamWriter, KEEP_CONN, MAX_CONTENT_LEN, ROLE_RESPONDER,
};
use crate::pool::RequestInfo;

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

/// The CGI variables fpmd itself reads for every request (body length,
/// slot table, status page, slowlog, access log): [`Request::set_params`]
/// notes where their values lie, so that [`Request::param`] finds them
/// without a scan.
pub const KNOWN: [&[u8]; 8] = [
    b"CONTENT_LENGTH",
    b"SCRIPT_FILENAME",
    b"REQUEST_URI",
    b"REQUEST_METHOD",
    b"SCRIPT_NAME",
    b"QUERY_STRING",
    b"REMOTE_USER",
    b"REMOTE_ADDR",
];

fn known_index(name: &[u8]) -> Option<usize> {
    // Length and first byte tell most names apart; then at most three
    // compares.
    let candidates: &[usize] = match (name.len(), name.first()) {
        (14, Some(b'C')) => &[0],
        (15, Some(b'S')) => &[1],
        (11, Some(b'R')) => &[2, 6, 7],
        (14, Some(b'R')) => &[3],
        (11, Some(b'S')) => &[4],
        (12, Some(b'Q')) => &[5],
        _ => return None,
    };
    candidates.iter().copied().find(|&k| KNOWN[k] == name)
}

/// A range of the head as stored in [`Request::known`].
fn span(r: Range<usize>) -> Range<u32> {
    r.start as u32..r.end as u32
}

/// As log lines say it: "1234 bytes", "an unknown number of bytes".
impl std::fmt::Display for Owed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owed::Exact(n) => write!(f, "{n}"),
            Owed::UntilEnd => f.write_str("an unknown number of"),
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
    /// Where the values of the [`KNOWN`] variables lie in `head`.
    /// (Offsets as u32: a head is far below 4 GiB, and the request stays
    /// small to move.)
    known: [Option<Range<u32>>; KNOWN.len()],
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
    /// When its BEGIN_REQUEST was read; noted only for a pool that writes
    /// an access log (`%d`, `%t`).
    pub began: Option<std::time::Instant>,
    /// fpmd found the script as a regular file (see
    /// [`super::script::Plan::script_found`]).
    pub script_found: bool,
    /// The token of fpmd's SAPI lines for this request (see
    /// [`crate::proxy::sapi`]), when its pool runs `sapi.php`.
    pub sapi_token: Option<crate::proxy::sapi::Token>,
    /// The peak memory and CPU its child reported (`%M`, `%C`).
    pub usage: Option<crate::process::sapi::Usage>,
    /// The response code the script set after its head was sent, which
    /// php-fpm's `%s` logs (see [`crate::process::sapi::Report`]).
    pub script_status: Option<u16>,
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
    /// The request's script path as php-fpm matches it against
    /// `pm.status_path`, `ping.path` and `access.suppress_path` (and as
    /// `%r` logs it): `SCRIPT_NAME`, else the path of `REQUEST_URI`.
    pub fn script_path(&self) -> &[u8] {
        match self.param(b"SCRIPT_NAME") {
            Some(s) if !s.is_empty() => s,
            _ => {
                let uri = self.param(b"REQUEST_URI").unwrap_or_default();
                uri.split(|b| *b == b'?').next().unwrap_or_default()
            }
        }
    }
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
            known: Default::default(),
            owed: Owed::Exact(0),
            body: 0,
            excess: 0,
            child_stdin_ended: false,
            client_stdin_done: false,
            began: None,
            script_found: false,
            sapi_token: None,
            usage: None,
            script_status: None,
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
    /// `observe` sees every pair of `raw` as it is read, edits aside (so
    /// that the caller needs no pass of its own). Returns the pairs dropped
    /// because no record can hold them (over 65,535 bytes: php-cgi could
    /// not read them either). Called again before any body was buffered,
    /// it replaces the PARAMS it wrote.
    ///
    /// One pass over `raw`: runs of consecutive whole pairs are copied as
    /// they are, one record per 64 KiB, and the values of the [`KNOWN`]
    /// variables are located on the way.
    ///
    /// Errors: [`ProtocolError::TruncatedPair`] for a malformed stream
    /// (php-fpm closes such a connection too); `head` has no PARAMS then.
    pub fn set_params<'r>(
        &mut self,
        raw: &'r [u8],
        edits: &[Edit],
        mut observe: impl FnMut(&'r [u8], &'r [u8]),
    ) -> Result<Dropped, ProtocolError> {
        let start = self.params.start;
        self.head.truncate(start);
        self.params = start..start;
        self.child_stdin_ended = false;
        let mut w = StreamWriter::new(RecordType::Params, self.id);
        let mut dropped = Vec::new();
        // The run of raw pairs not yet copied, and where its known values lie.
        let mut run = 0..0;
        let mut pending: [Option<Range<usize>>; KNOWN.len()] = Default::default();
        self.known = Default::default();
        let mut flush = |head: &mut Vec<u8>,
                         known: &mut [Option<Range<u32>>; KNOWN.len()],
                         pending: &mut [Option<Range<usize>>; KNOWN.len()],
                         run: &Range<usize>| {
            if run.is_empty() {
                return;
            }
            // A run is at most one record's worth: this cannot fail.
            let _ = w.write_whole(head, &[&raw[run.clone()]]);
            // Raw offset `run.end` is now `head.len()`; a value lies in
            // the run, so `r.start >= run.start` and nothing underflows.
            let end = head.len();
            for (k, p) in known.iter_mut().zip(pending.iter_mut()) {
                if let Some(r) = p.take() {
                    *k = Some(span(r.start + end - run.end..r.end + end - run.end));
                }
            }
        };
        let mut it = pairs(raw);
        loop {
            let pair_start = it.offset();
            let (name, value) = match it.next() {
                None => break,
                Some(Ok(pair)) => pair,
                Some(Err(e)) => {
                    self.head.truncate(start);
                    self.known = Default::default();
                    self.owed = Owed::Exact(0);
                    return Err(e);
                }
            };
            observe(name, value);
            let pair_end = it.offset();
            let whole = pair_end - pair_start;
            if whole > MAX_CONTENT_LEN || edits.iter().any(|e| e.name == name) {
                flush(&mut self.head, &mut self.known, &mut pending, &run);
                run = pair_end..pair_end;
                if whole > MAX_CONTENT_LEN {
                    dropped.push((name.to_vec(), name.len() + value.len()));
                }
                continue;
            }
            if pair_end - run.start > MAX_CONTENT_LEN {
                flush(&mut self.head, &mut self.known, &mut pending, &run);
                run = pair_start..pair_start;
            }
            run.end = pair_end;
            if let Some(k) = known_index(name) {
                pending[k] = Some(pair_end - value.len()..pair_end);
            }
        }
        flush(&mut self.head, &mut self.known, &mut pending, &run);
        for e in edits {
            let Some(v) = &e.value else { continue };
            if write_pair(&mut w, &mut self.head, &e.name, v).is_err() {
                dropped.push((e.name.clone(), e.name.len() + v.len()));
            } else if let Some(k) = known_index(&e.name) {
                self.known[k] = Some(span(self.head.len() - v.len()..self.head.len()));
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
    /// that name, as in php-cgi's table). Free for the [`KNOWN`] names; a
    /// scan of the PARAMS for the others.
    pub fn param(&self, name: &[u8]) -> Option<&[u8]> {
        if let Some(k) = known_index(name) {
            return self.known[k]
                .clone()
                .and_then(|r| self.head.get(r.start as usize..r.end as usize));
        }
        self.scan_param(name)
    }

    /// [`Request::param`] by reading the PARAMS records.
    fn scan_param(&self, name: &[u8]) -> Option<&[u8]> {
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

    /// What the request is, for the slot table and the slowlog: the
    /// script, URI and method as text (invalid UTF-8 shows as U+FFFD).
    pub fn info(&self) -> RequestInfo {
        let mut info = RequestInfo::default();
        self.fill_info(&mut info);
        info
    }

    /// Writes what the request is into `info` (reusing its buffers).
    pub fn fill_info(&self, info: &mut RequestInfo) {
        let p = |n: &[u8]| self.param(n).unwrap_or_default();
        info.set(
            p(b"SCRIPT_FILENAME"),
            p(b"REQUEST_URI"),
            p(b"REQUEST_METHOD"),
            p(b"REMOTE_USER"),
            self.content_length(),
        );
    }

    /// The body length PHP reads, in bytes: `CONTENT_LENGTH` as `atol`
    /// reads it, 0 when it is absent or negative (the status page's and
    /// the access log's `content length`).
    pub fn content_length(&self) -> u64 {
        match self.owed {
            Owed::Exact(n) => n,
            Owed::UntilEnd => 0,
        }
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
    /// when it ended short of `CONTENT_LENGTH`: the child gets no empty
    /// STDIN record (php-cgi would wait for the rest) but end of input.
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

impl crate::observe::access_log::Params for Request {
    fn param(&self, name: &[u8]) -> Option<&[u8]> {
        Request::param(self, name)
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
        let dropped = r.set_params(&p, &[], |_, _| {}).unwrap();
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
    fn known_values_are_where_a_scan_finds_them() {
        // Runs split across records, repeated names, an edited name, a
        // dropped giant and a name skipped by an edit.
        let fill = vec![b'f'; 30_000];
        let giant = vec![b'g'; 70_000];
        let p = raw(&[
            (b"REQUEST_URI", b"/first"),
            (b"F1", &fill),
            (b"SCRIPT_FILENAME", b"/srv/a.php"),
            (b"F2", &fill),
            (b"REQUEST_METHOD", b"GET"),
            (b"F3", &fill),
            (b"REQUEST_URI", b"/second"),
            (b"REQUEST_URI", &giant),
            (b"CONTENT_LENGTH", b"0"),
            (b"SCRIPT_FILENAME", b"/srv/b.php"),
            (b"X", b"1"),
        ]);
        for edits in [
            vec![],
            vec![Edit {
                name: b"SCRIPT_FILENAME".to_vec(),
                value: Some(b"/srv/c.php".to_vec()),
            }],
            vec![Edit {
                name: b"REQUEST_METHOD".to_vec(),
                value: None,
            }],
        ] {
            let mut r = Request::begin(3, true, Vec::new());
            let dropped = r.set_params(&p, &edits, |_, _| {}).unwrap();
            assert_eq!(dropped.len(), 1);
            for k in KNOWN {
                assert_eq!(
                    r.param(k),
                    r.scan_param(k),
                    "{}",
                    String::from_utf8_lossy(k)
                );
            }
            assert_eq!(r.param(b"REQUEST_URI"), Some(&b"/second"[..]));
            let script = r.param(b"SCRIPT_FILENAME");
            assert!(script == Some(b"/srv/b.php") || script == Some(b"/srv/c.php"));
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
        r.set_params(&p, &edits, |_, _| {}).unwrap();
        assert_eq!(r.param(b"SCRIPT_FILENAME"), Some(&b"/srv/a.php"[..]));
        assert_eq!(r.param(b"X"), None);
    }

    #[test]
    fn params_set_again_replace_the_first_and_observe_sees_every_pair() {
        let p = raw(&[(b"SCRIPT_FILENAME", b"/a.php"), (b"X", b"1")]);
        let mut r = Request::begin(1, true, Vec::new());
        let mut seen = Vec::new();
        r.set_params(&p, &[], |n, v| seen.push((n, v))).unwrap();
        assert_eq!(
            seen,
            vec![(&b"SCRIPT_FILENAME"[..], &b"/a.php"[..]), (b"X", b"1")]
        );
        let edit = Edit {
            name: b"SCRIPT_FILENAME".to_vec(),
            value: Some(b"/b.php".to_vec()),
        };
        r.set_params(&p, &[edit], |_, _| {}).unwrap();
        assert_eq!(r.param(b"SCRIPT_FILENAME"), Some(&b"/b.php"[..]));
        let recs = records(&r.head);
        assert_eq!(
            recs.iter().filter(|(k, _)| *k == 4).count(),
            2,
            "one PARAMS record and the end"
        );
        assert_eq!(
            recs.iter().filter(|(k, _)| *k == 5).count(),
            1,
            "one empty STDIN"
        );
    }

    #[test]
    fn malformed_params_are_refused() {
        let mut r = Request::begin(1, false, Vec::new());
        assert_eq!(
            r.set_params(&[5, 10, b'x'], &[], |_, _| {}),
            Err(ProtocolError::TruncatedPair)
        );
    }

    #[test]
    fn body_is_cut_at_content_length_and_ended() {
        let mut r = Request::begin(2, true, Vec::new());
        r.set_params(&raw(&[(b"CONTENT_LENGTH", b"10")]), &[], |_, _| {})
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
        r.set_params(&raw(&[(b"REQUEST_METHOD", b"POST")]), &[], |_, _| {})
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
        r.set_params(&raw(&[(b"CONTENT_LENGTH", b"10")]), &[], |_, _| {})
            .unwrap();
        r.buffer_body(b"abc");
        assert!(!r.end_client_stdin(), "3 of 10 bytes");
        let mut u = Request::begin(3, true, Vec::new());
        u.set_params(&raw(&[(b"CONTENT_LENGTH", b"-1")]), &[], |_, _| {})
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
            |_, _| {},
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
