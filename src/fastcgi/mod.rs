//! FastCGI protocol codec: record headers, record bodies and name-value
//! pairs, decoded from and encoded into byte slices.
//!
//! Owns: the wire format of the FastCGI 1.0 specification
//! (<https://fastcgi-archives.github.io/FastCGI_Specification.html>, "FCGI
//! spec" below). Must not touch: sockets, tokio, processes. Every function
//! here is pure, so the codec is tested byte by byte and fed arbitrary input
//! by property tests and `cargo fuzz` (`fuzz/`). "Incomplete" (more bytes
//! needed) is never an error: it is `Ok(None)`. Nothing here panics on any
//! input.
//!
//! - [`record`]: whole records, and the writers fpmd uses to send its own
//!   canonical records (no padding, streams packed up to 65,535 bytes).
//! - [`deframe`]: the streaming reader of a web server's records, which
//!   hands out stream content as it arrives and drops padding.
//! - [`pairs`]: name-value pairs (PARAMS, GET_VALUES).
//! - [`scan`]: the check of a child's response before it is forwarded.
//! - [`cgi`]: the head of the CGI response inside a child's STDOUT (its
//!   `Status:` line and headers, for the access log).

use std::fmt;

pub mod cgi;
pub mod deframe;
pub mod pairs;
pub mod record;
pub mod scan;

pub use deframe::{Deframer, Piece};
pub use pairs::{encode_pair, find_param, get_values_result, pair_len, pairs, Pairs};
pub use record::{
    decode_record, encode_begin_request, encode_empty, encode_end_request, encode_record,
    encode_stream, Record, StreamWriter,
};
pub use scan::{scan_response, Scan};

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

    /// Stream types (FCGI spec 3.3: PARAMS, STDIN, STDOUT, STDERR, DATA):
    /// their content may come in any number of records and ends with an
    /// empty one.
    pub fn is_stream(self) -> bool {
        matches!(
            self,
            RecordType::Params
                | RecordType::Stdin
                | RecordType::Stdout
                | RecordType::Stderr
                | RecordType::Data
        )
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
        let Some(b) = buf.get(..HEADER_LEN) else {
            return Ok(None);
        };
        if b[0] != VERSION_1 {
            return Err(ProtocolError::BadVersion(b[0]));
        }
        Ok(Some(Header {
            kind: b[1],
            request_id: u16::from_be_bytes([b[2], b[3]]),
            content_length: u16::from_be_bytes([b[4], b[5]]),
            padding_length: b[6],
        }))
    }

    /// The header of a record fpmd writes: no padding.
    pub fn new(kind: RecordType, request_id: u16, content_length: u16) -> Header {
        Header {
            kind: kind as u8,
            request_id,
            content_length,
            padding_length: 0,
        }
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
    #[error("record content of {0} bytes does not fit a record (at most 65,535)")]
    ContentTooLong(usize),
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
    /// A normal end: status 0, `FCGI_REQUEST_COMPLETE`.
    pub const COMPLETE: EndRequest = EndRequest {
        app_status: 0,
        protocol_status: ProtocolStatus::RequestComplete as u8,
    };

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

/// The name of a record type byte for messages: `STDIN`, or `type 42`.
pub fn type_name(kind: u8) -> String {
    match RecordType::from_u8(kind) {
        Some(t) => t.to_string(),
        None => format!("type {kind}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn record_types_and_streams() {
        for t in 1u8..=11 {
            let kind = RecordType::from_u8(t).unwrap();
            assert_eq!(kind as u8, t);
            assert!(!kind.to_string().is_empty());
            assert_eq!(kind.is_stream(), (4..=8).contains(&t));
        }
        assert_eq!(RecordType::from_u8(0), None);
        assert_eq!(RecordType::from_u8(12), None);
        assert_eq!(type_name(5), "STDIN");
        assert_eq!(type_name(42), "type 42");
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
    }
}
