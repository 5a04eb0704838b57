//! FastCGI protocol codec: record headers, record bodies and name-value
//! pairs, decoded from and encoded into byte slices.
//!
//! Owns: the wire format of the FastCGI 1.0 specification
//! (<https://fastcgi-archives.github.io/FastCGI_Specification.html>, "FCGI
//! spec" below). Must not touch: sockets, tokio, processes. Every function
//! here is pure, so the codec is tested byte by byte and fed arbitrary input
//! by property tests. "Incomplete" (more bytes needed) is never an error: it
//! is `Ok(None)`.

use std::fmt;

/// Length of a record header in bytes (FCGI spec 3.3, `FCGI_HEADER_LEN`).
pub const HEADER_LEN: usize = 8;
/// The only protocol version (FCGI spec 8, `FCGI_VERSION_1`).
pub const VERSION_1: u8 = 1;
/// Largest content a single record can carry, in bytes (16-bit length).
pub const MAX_CONTENT_LEN: usize = 0xffff;
/// Largest whole record in bytes: header, content and padding.
pub const MAX_RECORD_LEN: usize = HEADER_LEN + MAX_CONTENT_LEN + 0xff;
/// Request id 0 is reserved for management records (FCGI spec 3.3).
pub const NULL_REQUEST_ID: u16 = 0;

/// `FCGI_KEEP_CONN` bit of `FCGI_BeginRequestBody.flags` (FCGI spec 5.1):
/// the application must not close the connection after the request.
pub const KEEP_CONN: u8 = 1;

/// Record types (FCGI spec 8, `FCGI_BEGIN_REQUEST` … `FCGI_UNKNOWN_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordType {
    BeginRequest = 1,
    AbortRequest = 2,
    EndRequest = 3,
    Params = 4,
    Stdin = 5,
    Stdout = 6,
    Stderr = 7,
    Data = 8,
    GetValues = 9,
    GetValuesResult = 10,
    UnknownType = 11,
}

impl RecordType {
    /// Maps a wire byte to a known type; `None` for any other value (which
    /// the receiver answers with `FCGI_UNKNOWN_TYPE` when it is a management
    /// record, FCGI spec 4.2).
    pub fn from_u8(v: u8) -> Option<RecordType> {
        use RecordType::*;
        Some(match v {
            1 => BeginRequest,
            2 => AbortRequest,
            3 => EndRequest,
            4 => Params,
            5 => Stdin,
            6 => Stdout,
            7 => Stderr,
            8 => Data,
            9 => GetValues,
            10 => GetValuesResult,
            11 => UnknownType,
            _ => return None,
        })
    }
}

/// Roles of `FCGI_BeginRequestBody.role` (FCGI spec 6).
pub const ROLE_RESPONDER: u16 = 1;
pub const ROLE_AUTHORIZER: u16 = 2;
pub const ROLE_FILTER: u16 = 3;

/// `protocolStatus` values of `FCGI_EndRequestBody` (FCGI spec 5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ProtocolStatus {
    RequestComplete = 0,
    CantMpxConn = 1,
    Overloaded = 2,
    UnknownRole = 3,
}

/// A decoded record header (FCGI spec 3.3, `FCGI_Header`). `kind` is the raw
/// type byte, so that unknown types survive decoding and can be reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: u8,
    pub request_id: u16,
    /// Content length in bytes, 0 ..= 65,535.
    pub content_length: u16,
    /// Padding after the content in bytes, 0 ..= 255.
    pub padding_length: u8,
}

impl Header {
    /// Decodes the first 8 bytes of `buf`. `Ok(None)`: fewer than 8 bytes.
    /// Errors: [`ProtocolError::BadVersion`] when the version byte is not 1.
    pub fn decode(buf: &[u8]) -> Result<Option<Header>, ProtocolError> {
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        if buf[0] != VERSION_1 {
            return Err(ProtocolError::BadVersion(buf[0]));
        }
        Ok(Some(Header {
            kind: buf[1],
            request_id: u16::from_be_bytes([buf[2], buf[3]]),
            content_length: u16::from_be_bytes([buf[4], buf[5]]),
            padding_length: buf[6],
        }))
    }

    /// The 8 wire bytes of this header (reserved byte 0).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let id = self.request_id.to_be_bytes();
        let len = self.content_length.to_be_bytes();
        [
            VERSION_1,
            self.kind,
            id[0],
            id[1],
            len[0],
            len[1],
            self.padding_length,
            0,
        ]
    }

    /// Bytes of the whole record: header + content + padding.
    pub fn record_len(&self) -> usize {
        HEADER_LEN + self.content_length as usize + self.padding_length as usize
    }

    /// The known record type, if the type byte is one.
    pub fn record_type(&self) -> Option<RecordType> {
        RecordType::from_u8(self.kind)
    }
}

/// A whole record borrowed from a buffer: its header and its content
/// (padding already skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub header: Header,
    pub content: &'a [u8],
}

/// Decodes one whole record from the front of `buf`.
///
/// `Ok(None)`: the record is not complete yet (read more bytes). On success
/// the record occupies `record.header.record_len()` bytes of `buf`.
/// Errors: [`ProtocolError::BadVersion`].
pub fn decode_record(buf: &[u8]) -> Result<Option<Record<'_>>, ProtocolError> {
    let Some(header) = Header::decode(buf)? else {
        return Ok(None);
    };
    if buf.len() < header.record_len() {
        return Ok(None);
    }
    let start = HEADER_LEN;
    let end = start + header.content_length as usize;
    Ok(Some(Record {
        header,
        content: &buf[start..end],
    }))
}

/// Errors a peer's bytes can cause. Each one closes the connection that
/// carried them, and only that one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("record with protocol version {0}, expected 1")]
    BadVersion(u8),
    #[error("name-value pair runs past the end of its PARAMS stream")]
    TruncatedPair,
    #[error("BEGIN_REQUEST body is {0} bytes, expected 8")]
    BadBeginRequest(usize),
    #[error("END_REQUEST body is {0} bytes, expected 8")]
    BadEndRequest(usize),
}

/// `FCGI_BeginRequestBody` (FCGI spec 5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BeginRequest {
    pub role: u16,
    pub flags: u8,
}

impl BeginRequest {
    /// Decodes the 8-byte body of a `BEGIN_REQUEST` record.
    pub fn decode(content: &[u8]) -> Result<BeginRequest, ProtocolError> {
        if content.len() != 8 {
            return Err(ProtocolError::BadBeginRequest(content.len()));
        }
        Ok(BeginRequest {
            role: u16::from_be_bytes([content[0], content[1]]),
            flags: content[2],
        })
    }

    /// True when the web server asked to keep the connection open.
    pub fn keep_conn(&self) -> bool {
        self.flags & KEEP_CONN != 0
    }

    /// The 8 body bytes.
    pub fn encode(&self) -> [u8; 8] {
        let r = self.role.to_be_bytes();
        [r[0], r[1], self.flags, 0, 0, 0, 0, 0]
    }
}

/// `FCGI_EndRequestBody` (FCGI spec 5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndRequest {
    /// The application's exit status (CGI exit code).
    pub app_status: u32,
    pub protocol_status: u8,
}

impl EndRequest {
    /// Decodes the 8-byte body of an `END_REQUEST` record.
    pub fn decode(content: &[u8]) -> Result<EndRequest, ProtocolError> {
        if content.len() != 8 {
            return Err(ProtocolError::BadEndRequest(content.len()));
        }
        Ok(EndRequest {
            app_status: u32::from_be_bytes([content[0], content[1], content[2], content[3]]),
            protocol_status: content[4],
        })
    }

    /// The 8 body bytes.
    pub fn encode(&self) -> [u8; 8] {
        let a = self.app_status.to_be_bytes();
        [a[0], a[1], a[2], a[3], self.protocol_status, 0, 0, 0]
    }
}

/// Appends one record to `out`. `content` must be at most 65,535 bytes
/// (panics otherwise: callers split streams with [`encode_stream`]). No
/// padding is written (padding is optional, FCGI spec 3.3).
pub fn encode_record(out: &mut Vec<u8>, kind: RecordType, request_id: u16, content: &[u8]) {
    assert!(
        content.len() <= MAX_CONTENT_LEN,
        "record content over 65,535 bytes"
    );
    let header = Header {
        kind: kind as u8,
        request_id,
        content_length: content.len() as u16,
        padding_length: 0,
    };
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(content);
}

/// Appends `data` to `out` as a stream of records of type `kind` (STDOUT,
/// STDERR, STDIN, PARAMS …), split every 65,535 bytes. Writes nothing for
/// empty `data`: the empty record that ends a stream is written separately
/// with `encode_record(out, kind, id, &[])`.
pub fn encode_stream(out: &mut Vec<u8>, kind: RecordType, request_id: u16, data: &[u8]) {
    for chunk in data.chunks(MAX_CONTENT_LEN) {
        encode_record(out, kind, request_id, chunk);
    }
}

/// Appends an `END_REQUEST` record.
pub fn encode_end_request(out: &mut Vec<u8>, request_id: u16, end: EndRequest) {
    encode_record(out, RecordType::EndRequest, request_id, &end.encode());
}

/// Appends one name-value pair in the FCGI spec 3.4 encoding: each length in
/// 1 byte when below 128, otherwise 4 bytes with the high bit set.
pub fn encode_pair(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    for len in [name.len(), value.len()] {
        if len < 0x80 {
            out.push(len as u8);
        } else {
            out.extend_from_slice(&((len as u32) | 0x8000_0000).to_be_bytes());
        }
    }
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// Iterator over the name-value pairs of a complete PARAMS (or GET_VALUES)
/// stream. Yields [`ProtocolError::TruncatedPair`] once and stops when a
/// pair runs past the end.
pub struct Pairs<'a> {
    rest: &'a [u8],
    failed: bool,
}

/// Iterates the name-value pairs (FCGI spec 3.4) of `stream`, the
/// concatenated content of a PARAMS stream's records.
pub fn pairs(stream: &[u8]) -> Pairs<'_> {
    Pairs {
        rest: stream,
        failed: false,
    }
}

fn read_len(buf: &[u8]) -> Option<(usize, usize)> {
    let first = *buf.first()?;
    if first < 0x80 {
        Some((first as usize, 1))
    } else {
        let b = buf.get(..4)?;
        Some((
            (u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff) as usize,
            4,
        ))
    }
}

impl<'a> Iterator for Pairs<'a> {
    type Item = Result<(&'a [u8], &'a [u8]), ProtocolError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        let parsed = (|| {
            let (nlen, a) = read_len(self.rest)?;
            let (vlen, b) = read_len(&self.rest[a..])?;
            let start = a + b;
            let name_end = start.checked_add(nlen)?;
            let value_end = name_end.checked_add(vlen)?;
            if value_end > self.rest.len() {
                return None;
            }
            let pair = (&self.rest[start..name_end], &self.rest[name_end..value_end]);
            Some((pair, value_end))
        })();
        match parsed {
            Some((pair, used)) => {
                self.rest = &self.rest[used..];
                Some(Ok(pair))
            }
            None => {
                self.failed = true;
                Some(Err(ProtocolError::TruncatedPair))
            }
        }
    }
}

/// Finds the value of `name` in a complete PARAMS stream; `None` when it is
/// absent or the stream is malformed before it.
pub fn find_param<'a>(stream: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    pairs(stream)
        .map_while(Result::ok)
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// Builds the content of a `GET_VALUES_RESULT` answering the names asked in a
/// `GET_VALUES` content (FCGI spec 4.1): known variables get `answer(name)`,
/// unknown ones are left out, as the spec asks.
pub fn get_values_result(query: &[u8], answer: impl Fn(&[u8]) -> Option<String>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, _) in pairs(query).map_while(Result::ok) {
        if let Some(v) = answer(name) {
            encode_pair(&mut out, name, v.as_bytes());
        }
    }
    out
}

impl fmt::Display for RecordType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            RecordType::BeginRequest => "BEGIN_REQUEST",
            RecordType::AbortRequest => "ABORT_REQUEST",
            RecordType::EndRequest => "END_REQUEST",
            RecordType::Params => "PARAMS",
            RecordType::Stdin => "STDIN",
            RecordType::Stdout => "STDOUT",
            RecordType::Stderr => "STDERR",
            RecordType::Data => "DATA",
            RecordType::GetValues => "GET_VALUES",
            RecordType::GetValuesResult => "GET_VALUES_RESULT",
            RecordType::UnknownType => "UNKNOWN_TYPE",
        };
        f.write_str(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_round_trip_bytes() {
        let h = Header {
            kind: 6,
            request_id: 0x0102,
            content_length: 0x0304,
            padding_length: 5,
        };
        assert_eq!(h.encode(), [1, 6, 1, 2, 3, 4, 5, 0]);
        assert_eq!(Header::decode(&h.encode()).unwrap(), Some(h));
        assert_eq!(h.record_len(), 8 + 0x0304 + 5);
    }

    #[test]
    fn header_incomplete_and_bad_version() {
        assert_eq!(Header::decode(&[1, 1, 0, 1, 0, 8, 0]).unwrap(), None);
        assert_eq!(
            Header::decode(&[2, 1, 0, 1, 0, 8, 0, 0]),
            Err(ProtocolError::BadVersion(2))
        );
    }

    #[test]
    fn record_needs_content_and_padding() {
        let mut buf = vec![1, 5, 0, 1, 0, 3, 2, 0, b'a', b'b', b'c', 0];
        assert_eq!(
            decode_record(&buf).unwrap(),
            None,
            "one padding byte missing"
        );
        buf.push(0);
        let rec = decode_record(&buf).unwrap().unwrap();
        assert_eq!(rec.header.record_type(), Some(RecordType::Stdin));
        assert_eq!(rec.content, b"abc");
        assert_eq!(rec.header.record_len(), 13);
    }

    #[test]
    fn every_record_type_round_trips() {
        for t in 1u8..=11 {
            let kind = RecordType::from_u8(t).unwrap();
            assert_eq!(kind as u8, t);
            let mut out = Vec::new();
            encode_record(&mut out, kind, 7, b"xyz");
            assert_eq!(out, [1, t, 0, 7, 0, 3, 0, 0, b'x', b'y', b'z']);
            let rec = decode_record(&out).unwrap().unwrap();
            assert_eq!(rec.header.record_type(), Some(kind));
            assert_eq!(rec.header.request_id, 7);
            assert_eq!(rec.content, b"xyz");
            assert!(!kind.to_string().is_empty());
        }
        assert_eq!(RecordType::from_u8(0), None);
        assert_eq!(RecordType::from_u8(12), None);
        assert_eq!(RecordType::from_u8(255), None);
    }

    #[test]
    fn begin_request_body() {
        let b = BeginRequest {
            role: ROLE_RESPONDER,
            flags: KEEP_CONN,
        };
        assert_eq!(b.encode(), [0, 1, 1, 0, 0, 0, 0, 0]);
        let d = BeginRequest::decode(&b.encode()).unwrap();
        assert!(d.keep_conn());
        assert_eq!(d.role, ROLE_RESPONDER);
        assert!(!BeginRequest::decode(&[0, 2, 0, 0, 0, 0, 0, 0])
            .unwrap()
            .keep_conn());
        assert_eq!(
            BeginRequest::decode(&[0, 1]),
            Err(ProtocolError::BadBeginRequest(2))
        );
    }

    #[test]
    fn end_request_body() {
        let e = EndRequest {
            app_status: 0x01020304,
            protocol_status: ProtocolStatus::Overloaded as u8,
        };
        assert_eq!(e.encode(), [1, 2, 3, 4, 2, 0, 0, 0]);
        assert_eq!(EndRequest::decode(&e.encode()).unwrap(), e);
        assert_eq!(
            EndRequest::decode(&[0; 9]),
            Err(ProtocolError::BadEndRequest(9))
        );
        let mut out = Vec::new();
        encode_end_request(&mut out, 3, e);
        assert_eq!(&out[..8], &[1, 3, 0, 3, 0, 8, 0, 0]);
    }

    #[test]
    fn pairs_short_and_long_lengths() {
        let mut s = Vec::new();
        encode_pair(&mut s, b"SCRIPT_FILENAME", b"/srv/index.php");
        let long = vec![b'v'; 300];
        encode_pair(&mut s, b"LONG", &long);
        encode_pair(&mut s, b"EMPTY", b"");
        assert_eq!(s[0], 15);
        assert_eq!(&s[s.len() - 7..s.len() - 5], &[5, 0]);
        let got: Vec<_> = pairs(&s).collect::<Result<_, _>>().unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].1.len(), 300);
        assert_eq!(find_param(&s, b"EMPTY"), Some(&b""[..]));
        assert_eq!(
            find_param(&s, b"SCRIPT_FILENAME"),
            Some(&b"/srv/index.php"[..])
        );
        assert_eq!(find_param(&s, b"NOPE"), None);
        // the 4-byte form of 300 has the high bit set
        let pos = 2 + 15 + 14;
        assert_eq!(s[pos], 4);
        assert_eq!(&s[pos + 1..pos + 5], &[0x80, 0, 1, 44]);
    }

    #[test]
    fn truncated_pair_is_an_error_once() {
        let mut s = Vec::new();
        encode_pair(&mut s, b"A", b"1");
        s.extend_from_slice(&[5, 10, b'x']);
        let got: Vec<_> = pairs(&s).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1], Err(ProtocolError::TruncatedPair));
        assert_eq!(
            pairs(&[0x80, 0]).collect::<Vec<_>>(),
            vec![Err(ProtocolError::TruncatedPair)]
        );
    }

    #[test]
    fn get_values_answers_known_names_only() {
        let mut q = Vec::new();
        encode_pair(&mut q, b"FCGI_MPXS_CONNS", b"");
        encode_pair(&mut q, b"FCGI_WHATEVER", b"");
        let r = get_values_result(&q, |n| (n == b"FCGI_MPXS_CONNS").then(|| "0".to_string()));
        let got: Vec<_> = pairs(&r).collect::<Result<_, _>>().unwrap();
        assert_eq!(got, vec![(&b"FCGI_MPXS_CONNS"[..], &b"0"[..])]);
    }

    #[test]
    fn streams_split_at_65535() {
        let data = vec![7u8; 65_536];
        let mut out = Vec::new();
        encode_stream(&mut out, RecordType::Stdout, 1, &data);
        let first = decode_record(&out).unwrap().unwrap();
        assert_eq!(first.content.len(), 65_535);
        let second = decode_record(&out[first.header.record_len()..])
            .unwrap()
            .unwrap();
        assert_eq!(second.content.len(), 1);
        let mut none = Vec::new();
        encode_stream(&mut none, RecordType::Stdout, 1, &[]);
        assert!(none.is_empty());
    }

    proptest! {
        /// Arbitrary bytes fed in arbitrary chunks never panic, and whatever
        /// decodes is the same as decoding the whole buffer at once.
        #[test]
        fn arbitrary_bytes_in_arbitrary_chunks(data in proptest::collection::vec(any::<u8>(), 0..2048),
                                               cuts in proptest::collection::vec(1usize..64, 1..64)) {
            let whole = decode_all(&data);
            let mut buf = Vec::new();
            let mut got = Vec::new();
            let mut err = None;
            let mut pos = 0;
            let mut i = 0;
            while pos < data.len() && err.is_none() {
                let n = cuts[i % cuts.len()].min(data.len() - pos);
                buf.extend_from_slice(&data[pos..pos + n]);
                pos += n;
                i += 1;
                loop {
                    match decode_record(&buf) {
                        Ok(Some(rec)) => {
                            let len = rec.header.record_len();
                            for p in pairs(rec.content) { let _ = p; }
                            let _ = BeginRequest::decode(rec.content);
                            let _ = EndRequest::decode(rec.content);
                            got.push((rec.header, rec.content.to_vec()));
                            buf.drain(..len);
                        }
                        Ok(None) => break,
                        Err(e) => { err = Some(e); break; }
                    }
                }
            }
            prop_assert_eq!(whole, (got, err));
        }

        /// Records and pairs encoded by us decode to what went in.
        #[test]
        fn encode_decode_round_trip(kind in 1u8..=11, id in any::<u16>(),
                                    content in proptest::collection::vec(any::<u8>(), 0..3000),
                                    names in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..200),
                                                                        proptest::collection::vec(any::<u8>(), 0..300)), 0..8)) {
            let mut out = Vec::new();
            encode_record(&mut out, RecordType::from_u8(kind).unwrap(), id, &content);
            let rec = decode_record(&out).unwrap().unwrap();
            prop_assert_eq!(rec.header.request_id, id);
            prop_assert_eq!(rec.content, &content[..]);
            let mut s = Vec::new();
            for (n, v) in &names { encode_pair(&mut s, n, v); }
            let back: Vec<(Vec<u8>, Vec<u8>)> = pairs(&s).map(|p| { let (n, v) = p.unwrap(); (n.to_vec(), v.to_vec()) }).collect();
            prop_assert_eq!(back, names);
        }
    }

    type Decoded = (Vec<(Header, Vec<u8>)>, Option<ProtocolError>);

    fn decode_all(data: &[u8]) -> Decoded {
        let mut got = Vec::new();
        let mut rest = data;
        loop {
            match decode_record(rest) {
                Ok(Some(rec)) => {
                    got.push((rec.header, rec.content.to_vec()));
                    rest = &rest[rec.header.record_len()..];
                }
                Ok(None) => return (got, None),
                Err(e) => return (got, Some(e)),
            }
        }
    }
}
