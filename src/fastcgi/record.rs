//! Whole records: decoding one from the front of a buffer, and the encoders
//! fpmd writes with. fpmd's own records are canonical: no padding (padding
//! is optional, FCGI spec 3.3), every record at most 65,535 bytes of
//! content, streams ended by one empty record.

use super::{
    BeginRequest, EndRequest, Header, ProtocolError, RecordType, HEADER_LEN, MAX_CONTENT_LEN,
};

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
    let content = &buf[HEADER_LEN..HEADER_LEN + header.content_length as usize];
    Ok(Some(Record { header, content }))
}

/// Appends one record to `out`. Errors: [`ProtocolError::ContentTooLong`]
/// when `content` is over 65,535 bytes (nothing is appended then; streams
/// are split with [`encode_stream`] or [`StreamWriter`]).
pub fn encode_record(
    out: &mut Vec<u8>,
    kind: RecordType,
    request_id: u16,
    content: &[u8],
) -> Result<(), ProtocolError> {
    let len =
        u16::try_from(content.len()).map_err(|_| ProtocolError::ContentTooLong(content.len()))?;
    out.extend_from_slice(&Header::new(kind, request_id, len).encode());
    out.extend_from_slice(content);
    Ok(())
}

/// Appends an empty record of `kind`: the end of a stream (FCGI spec 3.3).
pub fn encode_empty(out: &mut Vec<u8>, kind: RecordType, request_id: u16) {
    out.extend_from_slice(&Header::new(kind, request_id, 0).encode());
}

/// Appends a `BEGIN_REQUEST` record.
pub fn encode_begin_request(out: &mut Vec<u8>, request_id: u16, begin: BeginRequest) {
    out.extend_from_slice(&Header::new(RecordType::BeginRequest, request_id, 8).encode());
    out.extend_from_slice(&begin.encode());
}

/// Appends an `END_REQUEST` record.
pub fn encode_end_request(out: &mut Vec<u8>, request_id: u16, end: EndRequest) {
    out.extend_from_slice(&Header::new(RecordType::EndRequest, request_id, 8).encode());
    out.extend_from_slice(&end.encode());
}

/// Appends `data` to `out` as a stream of records of type `kind` (STDOUT,
/// STDERR, STDIN …), split every 65,535 bytes. Writes nothing for empty
/// `data`: the empty record that ends a stream is [`encode_empty`].
pub fn encode_stream(out: &mut Vec<u8>, kind: RecordType, request_id: u16, data: &[u8]) {
    let mut w = StreamWriter::new(kind, request_id);
    w.write(out, data);
}

/// Writes one stream into a `Vec` as canonical records, packing content
/// into records of up to 65,535 bytes: the open record's length is patched
/// as content is appended, so many small pieces (a web server's small
/// STDIN records, or name-value pairs) cost one header per 64 KiB, not one
/// each. The `Vec` must not be changed by anyone else between calls.
#[derive(Debug, Clone)]
pub struct StreamWriter {
    kind: RecordType,
    id: u16,
    /// Offset in the output of the open record's header.
    open: Option<usize>,
}

impl StreamWriter {
    pub fn new(kind: RecordType, request_id: u16) -> StreamWriter {
        StreamWriter {
            kind,
            id: request_id,
            open: None,
        }
    }

    /// Room left in the open record, in bytes (0 when none is open).
    fn room(&self, out: &[u8]) -> usize {
        match self.open {
            Some(at) => MAX_CONTENT_LEN - u16::from_be_bytes([out[at + 4], out[at + 5]]) as usize,
            None => 0,
        }
    }

    fn grow(&mut self, out: &mut [u8], by: usize) {
        if let Some(at) = self.open {
            let len = u16::from_be_bytes([out[at + 4], out[at + 5]]) as usize + by;
            out[at + 4..at + 6].copy_from_slice(&(len as u16).to_be_bytes());
        }
    }

    fn open_record(&mut self, out: &mut Vec<u8>) {
        self.open = Some(out.len());
        out.extend_from_slice(&Header::new(self.kind, self.id, 0).encode());
    }

    /// Appends `data`, split across records wherever a record is full.
    pub fn write(&mut self, out: &mut Vec<u8>, mut data: &[u8]) {
        while !data.is_empty() {
            if self.room(out) == 0 {
                self.open_record(out);
            }
            let n = self.room(out).min(data.len());
            out.extend_from_slice(&data[..n]);
            self.grow(out, n);
            data = &data[n..];
        }
    }

    /// Appends `parts` to one record, never splitting them between two
    /// (php-cgi parses each PARAMS record on its own, so a name-value pair
    /// must not straddle records: `fcgi_get_params` in php-src
    /// `main/fastcgi.c`). Errors: [`ProtocolError::ContentTooLong`] when the
    /// parts together exceed 65,535 bytes; nothing is appended then.
    pub fn write_whole(&mut self, out: &mut Vec<u8>, parts: &[&[u8]]) -> Result<(), ProtocolError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total > MAX_CONTENT_LEN {
            return Err(ProtocolError::ContentTooLong(total));
        }
        if total == 0 {
            return Ok(());
        }
        if self.room(out) < total {
            self.open_record(out);
        }
        for p in parts {
            out.extend_from_slice(p);
        }
        self.grow(out, total);
        Ok(())
    }

    /// Ends the stream with its empty record.
    pub fn end(self, out: &mut Vec<u8>) {
        encode_empty(out, self.kind, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record of `buf` as (type, id, content).
    fn records(mut buf: &[u8]) -> Vec<(u8, u16, Vec<u8>)> {
        let mut v = Vec::new();
        while let Some(r) = decode_record(buf).unwrap() {
            v.push((r.header.kind, r.header.request_id, r.content.to_vec()));
            buf = &buf[r.header.record_len()..];
        }
        assert!(buf.is_empty(), "trailing bytes");
        v
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
            let mut out = Vec::new();
            encode_record(&mut out, kind, 7, b"xyz").unwrap();
            assert_eq!(out, [1, t, 0, 7, 0, 3, 0, 0, b'x', b'y', b'z']);
        }
    }

    #[test]
    fn too_long_content_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        let big = vec![0u8; 65_536];
        assert_eq!(
            encode_record(&mut out, RecordType::GetValuesResult, 0, &big),
            Err(ProtocolError::ContentTooLong(65_536))
        );
        assert!(out.is_empty());
        encode_record(&mut out, RecordType::Stdout, 1, &big[..65_535]).unwrap();
        assert_eq!(out.len(), 8 + 65_535);
    }

    #[test]
    fn fixed_records() {
        let mut out = Vec::new();
        encode_begin_request(&mut out, 3, BeginRequest { role: 1, flags: 1 });
        encode_end_request(&mut out, 3, EndRequest::COMPLETE);
        encode_empty(&mut out, RecordType::Stdin, 3);
        assert_eq!(
            records(&out),
            vec![
                (1, 3, vec![0, 1, 1, 0, 0, 0, 0, 0]),
                (3, 3, vec![0; 8]),
                (5, 3, vec![])
            ]
        );
    }

    #[test]
    fn streams_split_at_65535() {
        let data = vec![7u8; 65_536];
        let mut out = Vec::new();
        encode_stream(&mut out, RecordType::Stdout, 1, &data);
        let recs = records(&out);
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].2.len(), 65_535);
        assert_eq!(recs[1].2.len(), 1);
        let mut none = Vec::new();
        encode_stream(&mut none, RecordType::Stdout, 1, &[]);
        assert!(none.is_empty());
    }

    #[test]
    fn stream_writer_packs_small_pieces_into_one_record() {
        let mut out = b"prefix".to_vec();
        let mut w = StreamWriter::new(RecordType::Stdin, 9);
        for _ in 0..1000 {
            w.write(&mut out, b"0123456789");
        }
        w.end(&mut out);
        let recs = records(&out[6..]);
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].2.len(), 10_000);
        assert_eq!(recs[1], (5, 9, vec![]));
    }

    #[test]
    fn stream_writer_whole_parts_never_straddle() {
        let mut out = Vec::new();
        let mut w = StreamWriter::new(RecordType::Params, 1);
        let a = vec![b'a'; 40_000];
        let b = vec![b'b'; 30_000];
        w.write_whole(&mut out, &[b"x", &a]).unwrap();
        w.write_whole(&mut out, &[b"y", &b]).unwrap();
        assert!(w.write_whole(&mut out, &[&vec![0; 65_536]]).is_err());
        w.write_whole(&mut out, &[b"", b""]).unwrap();
        w.end(&mut out);
        let recs = records(&out);
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].2.len(), 40_001);
        assert_eq!(recs[1].2.len(), 30_001);
        assert_eq!(recs[2].2.len(), 0);
    }
}
