//! The check of a child's response before fpmd forwards it: php-cgi's
//! records are passed to the web server as they are (they are validated
//! here first), so a child can never send the web server something that is
//! not a well-formed answer to the request it was given.

use super::{decode_record, EndRequest, RecordType};

/// What the front of a child's read buffer holds, for request `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Bytes at the front that are whole, valid STDOUT/STDERR records (and
    /// the END_REQUEST, if `ended`): forward them as they are.
    pub forwardable: usize,
    /// The END_REQUEST record was among them, with this body.
    pub ended: Option<EndRequest>,
    /// Some of those records are STDERR records with content (PHP logged
    /// a message): the span is reframed before it is forwarded
    /// (`proxy::php_message`).
    pub stderr: bool,
    /// The child broke the protocol at `forwardable`: why. Nothing after
    /// that point may be forwarded, and the connection must not be reused.
    pub bad: Option<String>,
}

/// Scans `buf` (bytes read from a child) for the response to request `id`:
/// STDOUT and STDERR records for that id, then exactly one END_REQUEST
/// (FCGI spec 5.3, 5.5). Stops at the first incomplete record, at the
/// END_REQUEST, or at the first violation (another request id, another
/// record type, a malformed END_REQUEST, bytes after the END_REQUEST).
pub fn scan_response(buf: &[u8], id: u16) -> Scan {
    let mut at = 0;
    let mut stderr = false;
    loop {
        let rec = match decode_record(&buf[at..]) {
            Ok(Some(rec)) => rec,
            Ok(None) => {
                return Scan {
                    forwardable: at,
                    ended: None,
                    stderr,
                    bad: None,
                }
            }
            Err(e) => {
                return Scan {
                    forwardable: at,
                    ended: None,
                    stderr,
                    bad: Some(e.to_string()),
                }
            }
        };
        if rec.header.request_id != id {
            let why = format!(
                "record for request id {} instead of {id}",
                rec.header.request_id
            );
            return Scan {
                forwardable: at,
                ended: None,
                stderr,
                bad: Some(why),
            };
        }
        match rec.header.record_type() {
            Some(RecordType::Stdout) => at += rec.header.record_len(),
            Some(RecordType::Stderr) => {
                stderr |= rec.header.content_length > 0;
                at += rec.header.record_len();
            }
            Some(RecordType::EndRequest) => {
                let end = match EndRequest::decode(rec.content) {
                    Ok(e) => e,
                    Err(e) => {
                        return Scan {
                            forwardable: at,
                            ended: None,
                            stderr,
                            bad: Some(e.to_string()),
                        }
                    }
                };
                at += rec.header.record_len();
                let bad =
                    (at < buf.len()).then(|| format!("{} bytes after END_REQUEST", buf.len() - at));
                return Scan {
                    forwardable: at,
                    ended: Some(end),
                    stderr,
                    bad,
                };
            }
            _ => {
                let why = format!("unexpected {} record", super::type_name(rec.header.kind));
                return Scan {
                    forwardable: at,
                    ended: None,
                    stderr,
                    bad: Some(why),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastcgi::{encode_empty, encode_end_request, encode_record};

    fn response(id: u16) -> Vec<u8> {
        let mut b = Vec::new();
        encode_record(&mut b, RecordType::Stdout, id, b"Status: 200\r\n\r\nhi").unwrap();
        encode_record(&mut b, RecordType::Stderr, id, b"warning").unwrap();
        encode_empty(&mut b, RecordType::Stdout, id);
        encode_end_request(&mut b, id, EndRequest::COMPLETE);
        b
    }

    #[test]
    fn whole_response_ends() {
        let b = response(3);
        let s = scan_response(&b, 3);
        assert_eq!(
            s,
            Scan {
                forwardable: b.len(),
                ended: Some(EndRequest::COMPLETE),
                stderr: true,
                bad: None
            }
        );
        let mut quiet = Vec::new();
        encode_empty(&mut quiet, RecordType::Stderr, 3);
        assert!(
            !scan_response(&quiet, 3).stderr,
            "an empty STDERR is no message"
        );
    }

    #[test]
    fn partial_response_forwards_whole_records_only() {
        let b = response(3);
        let s = scan_response(&b[..b.len() - 3], 3);
        assert_eq!(s.ended, None);
        assert_eq!(s.bad, None);
        assert_eq!(s.forwardable, b.len() - 16);
    }

    #[test]
    fn violations() {
        let b = response(3);
        assert!(scan_response(&b, 4)
            .bad
            .unwrap()
            .contains("request id 3 instead of 4"));
        let mut extra = b.clone();
        extra.push(1);
        let s = scan_response(&extra, 3);
        assert_eq!(s.ended, Some(EndRequest::COMPLETE));
        assert!(s.bad.unwrap().contains("1 bytes after END_REQUEST"));
        let mut wrong = Vec::new();
        encode_record(&mut wrong, RecordType::Stdin, 3, b"x").unwrap();
        assert!(scan_response(&wrong, 3).bad.unwrap().contains("STDIN"));
        let mut short_end = Vec::new();
        encode_record(&mut short_end, RecordType::EndRequest, 3, b"xx").unwrap();
        assert!(scan_response(&short_end, 3).bad.is_some());
        assert!(scan_response(&[9, 9, 9, 9, 9, 9, 9, 9], 3).bad.is_some());
    }
}
