//! The streaming reader of a web server's records.
//!
//! A web server's stream records (PARAMS, STDIN, DATA …) may be of any
//! size up to 64 KiB and carry up to 255 bytes of padding. fpmd never
//! forwards them as received: it takes their content out as it arrives
//! (so a half-sent 64 KiB record costs no 64 KiB buffer), drops the padding,
//! and writes records of its own to the child. Records of other types are
//! small and handed out whole.

use super::{Header, ProtocolError, Record, RecordType, HEADER_LEN};

/// One thing read from the front of a buffer by [`Deframer::next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// A whole record of a non-stream type (BEGIN_REQUEST, ABORT_REQUEST,
    /// GET_VALUES, END_REQUEST, unknown types …), padding skipped.
    Record(Record<'a>),
    /// Some content of a non-empty stream record (at least one byte; the
    /// rest of that record's content comes in later pieces).
    Data {
        kind: RecordType,
        request_id: u16,
        data: &'a [u8],
    },
    /// An empty stream record: the end of that stream (FCGI spec 3.3).
    End { kind: RecordType, request_id: u16 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At a record boundary.
    Header,
    /// Inside the content of a stream record.
    Content {
        kind: RecordType,
        request_id: u16,
        left: u16,
        padding: u8,
    },
    /// Inside the padding of a stream record.
    Padding { left: u8 },
}

/// Reads records from the front of a buffer, keeping its place between
/// calls: the caller drops the bytes each call reports as used and calls
/// again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deframer {
    state: State,
}

impl Default for Deframer {
    fn default() -> Self {
        Deframer::new()
    }
}

impl Deframer {
    pub fn new() -> Deframer {
        Deframer {
            state: State::Header,
        }
    }

    /// True at a record boundary (no record partly read).
    pub fn at_boundary(&self) -> bool {
        self.state == State::Header
    }

    /// The next piece at the front of `buf`, and the number of bytes of
    /// `buf` used (the caller drops them after handling the piece). Padding
    /// and stream headers are consumed silently, so the piece is `None`
    /// when more bytes are needed, and some bytes may be used even then.
    ///
    /// Errors: [`ProtocolError::BadVersion`]; the deframer is then stuck
    /// (the connection must be closed).
    pub fn next<'a>(&mut self, buf: &'a [u8]) -> Result<(Option<Piece<'a>>, usize), ProtocolError> {
        let mut used = 0;
        loop {
            let rest = &buf[used..];
            match self.state {
                State::Padding { left } => {
                    let n = (left as usize).min(rest.len());
                    used += n;
                    if n < left as usize {
                        self.state = State::Padding {
                            left: left - n as u8,
                        };
                        return Ok((None, used));
                    }
                    self.state = State::Header;
                }
                State::Content {
                    kind,
                    request_id,
                    left,
                    padding,
                } => {
                    if rest.is_empty() {
                        return Ok((None, used));
                    }
                    let n = (left as usize).min(rest.len());
                    let left = left - n as u16;
                    self.state = if left > 0 {
                        State::Content {
                            kind,
                            request_id,
                            left,
                            padding,
                        }
                    } else if padding > 0 {
                        State::Padding { left: padding }
                    } else {
                        State::Header
                    };
                    return Ok((
                        Some(Piece::Data {
                            kind,
                            request_id,
                            data: &rest[..n],
                        }),
                        used + n,
                    ));
                }
                State::Header => {
                    let Some(h) = Header::decode(rest)? else {
                        return Ok((None, used));
                    };
                    match h.record_type() {
                        Some(kind) if kind.is_stream() => {
                            used += HEADER_LEN;
                            if h.content_length == 0 {
                                self.state = if h.padding_length > 0 {
                                    State::Padding {
                                        left: h.padding_length,
                                    }
                                } else {
                                    State::Header
                                };
                                return Ok((
                                    Some(Piece::End {
                                        kind,
                                        request_id: h.request_id,
                                    }),
                                    used,
                                ));
                            }
                            self.state = State::Content {
                                kind,
                                request_id: h.request_id,
                                left: h.content_length,
                                padding: h.padding_length,
                            };
                        }
                        _ => {
                            if rest.len() < h.record_len() {
                                return Ok((None, used));
                            }
                            let content = &rest[HEADER_LEN..HEADER_LEN + h.content_length as usize];
                            return Ok((
                                Some(Piece::Record(Record { header: h, content })),
                                used + h.record_len(),
                            ));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastcgi::{decode_record, Header};
    use proptest::prelude::*;

    /// What a deframer makes of `data` fed in pieces of the given sizes:
    /// stream content merged per (type, id) run, whole records, ends.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Seen {
        Record(u8, u16, Vec<u8>),
        Data(u8, u16, Vec<u8>),
        End(u8, u16),
    }

    fn feed(data: &[u8], cuts: &[usize]) -> (Vec<Seen>, Option<ProtocolError>, bool) {
        let mut d = Deframer::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut seen: Vec<Seen> = Vec::new();
        let mut pos = 0;
        let mut i = 0;
        while pos < data.len() {
            let n = cuts[i % cuts.len()].min(data.len() - pos);
            buf.extend_from_slice(&data[pos..pos + n]);
            pos += n;
            i += 1;
            loop {
                match d.next(&buf) {
                    Ok((piece, used)) => {
                        let more = piece.is_some();
                        match piece {
                            Some(Piece::Record(r)) => seen.push(Seen::Record(
                                r.header.kind,
                                r.header.request_id,
                                r.content.to_vec(),
                            )),
                            Some(Piece::Data {
                                kind,
                                request_id,
                                data,
                            }) => match seen.last_mut() {
                                Some(Seen::Data(k, id, v))
                                    if *k == kind as u8 && *id == request_id =>
                                {
                                    v.extend_from_slice(data)
                                }
                                _ => seen.push(Seen::Data(kind as u8, request_id, data.to_vec())),
                            },
                            Some(Piece::End { kind, request_id }) => {
                                seen.push(Seen::End(kind as u8, request_id))
                            }
                            None => {}
                        }
                        buf.drain(..used);
                        if !more {
                            break;
                        }
                    }
                    Err(e) => return (seen, Some(e), false),
                }
            }
        }
        (seen, None, d.at_boundary() && buf.is_empty())
    }

    /// The same, from whole records decoded at once (the reference).
    fn reference(data: &[u8]) -> (Vec<Seen>, Option<ProtocolError>) {
        let mut seen: Vec<Seen> = Vec::new();
        let mut rest = data;
        loop {
            match decode_record(rest) {
                Ok(Some(r)) => {
                    let k = r.header.kind;
                    let id = r.header.request_id;
                    match r.header.record_type() {
                        Some(t) if t.is_stream() && r.content.is_empty() => {
                            seen.push(Seen::End(k, id))
                        }
                        Some(t) if t.is_stream() => match seen.last_mut() {
                            Some(Seen::Data(k2, id2, v)) if *k2 == k && *id2 == id => {
                                v.extend_from_slice(r.content)
                            }
                            _ => seen.push(Seen::Data(k, id, r.content.to_vec())),
                        },
                        _ => seen.push(Seen::Record(k, id, r.content.to_vec())),
                    }
                    rest = &rest[r.header.record_len()..];
                }
                Ok(None) => return (seen, None),
                Err(e) => return (seen, Some(e)),
            }
        }
    }

    fn rec(kind: u8, id: u16, content: &[u8], padding: u8) -> Vec<u8> {
        let mut v = Header {
            kind,
            request_id: id,
            content_length: content.len() as u16,
            padding_length: padding,
        }
        .encode()
        .to_vec();
        v.extend_from_slice(content);
        v.extend(std::iter::repeat_n(0xaa, padding as usize));
        v
    }

    #[test]
    fn padding_is_dropped_and_ends_are_seen() {
        let mut b = rec(1, 1, &[0, 1, 1, 0, 0, 0, 0, 0], 3);
        b.extend(rec(4, 1, b"pairs", 200));
        b.extend(rec(4, 1, b"", 255));
        b.extend(rec(5, 1, b"body", 4));
        b.extend(rec(5, 1, b"", 255));
        for cut in [1, 2, 3, 7, 8, 9, 64, 4096] {
            let (seen, err, clean) = feed(&b, &[cut]);
            assert_eq!(err, None);
            assert!(clean, "cut {cut}");
            assert_eq!(
                seen,
                vec![
                    Seen::Record(1, 1, vec![0, 1, 1, 0, 0, 0, 0, 0]),
                    Seen::Data(4, 1, b"pairs".to_vec()),
                    Seen::End(4, 1),
                    Seen::Data(5, 1, b"body".to_vec()),
                    Seen::End(5, 1),
                ],
                "cut {cut}"
            );
        }
    }

    #[test]
    fn stream_content_comes_out_before_the_record_is_whole() {
        let mut d = Deframer::new();
        let mut b = Header {
            kind: 5,
            request_id: 2,
            content_length: 60_000,
            padding_length: 0,
        }
        .encode()
        .to_vec();
        b.extend_from_slice(&[7; 100]);
        let (piece, used) = d.next(&b).unwrap();
        assert_eq!(
            piece,
            Some(Piece::Data {
                kind: RecordType::Stdin,
                request_id: 2,
                data: &[7; 100][..]
            })
        );
        assert_eq!(used, 108);
        assert!(!d.at_boundary());
        assert_eq!(d.next(&[]).unwrap(), (None, 0));
    }

    #[test]
    fn bad_version_is_an_error() {
        let mut d = Deframer::new();
        assert_eq!(
            d.next(&[2, 1, 0, 1, 0, 0, 0, 0]),
            Err(ProtocolError::BadVersion(2))
        );
    }

    proptest! {
        /// Arbitrary bytes in arbitrary chunks never panic, and give what
        /// decoding whole records gives.
        #[test]
        fn arbitrary_bytes_match_whole_record_decoding(data in proptest::collection::vec(any::<u8>(), 0..4096),
                                                       cuts in proptest::collection::vec(1usize..300, 1..32)) {
            let (seen, err, _) = feed(&data, &cuts);
            let (want, want_err) = reference(&data);
            if err.is_some() || want_err.is_some() {
                prop_assert_eq!(err, want_err);
                // what came out before the error is a prefix of the reference
                prop_assert!(seen.len() <= want.len() + 1);
            } else {
                // the reference stops at an incomplete record; the deframer
                // may already have handed out its first stream bytes
                prop_assert!(seen.len() >= want.len());
                for (a, b) in want.iter().zip(seen.iter()) {
                    match (a, b) {
                        (Seen::Data(k1, i1, v1), Seen::Data(k2, i2, v2)) => {
                            prop_assert_eq!((k1, i1), (k2, i2));
                            prop_assert!(v2.starts_with(v1));
                        }
                        _ => prop_assert_eq!(a, b),
                    }
                }
            }
        }

        /// Well-formed records with random padding and cuts: exact match.
        #[test]
        fn padded_records_exact(recs in proptest::collection::vec((1u8..=11, 1u16..4, proptest::collection::vec(any::<u8>(), 0..600), any::<u8>()), 0..20),
                                cuts in proptest::collection::vec(1usize..100, 1..16)) {
            let mut data = Vec::new();
            for (k, id, c, p) in &recs {
                // non-stream records need 8-byte bodies only for BEGIN/END; any content is fine here
                data.extend(rec(*k, *id, c, *p));
            }
            let (seen, err, clean) = feed(&data, &cuts);
            prop_assert_eq!(err, None);
            prop_assert!(clean);
            prop_assert_eq!(seen, reference(&data).0);
        }
    }
}
