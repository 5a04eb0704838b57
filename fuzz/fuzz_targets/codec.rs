//! The FastCGI codec on arbitrary bytes: the streaming deframer, fed in
//! chunks of the size the first byte says, hands out exactly what decoding
//! whole records gives, and nothing of the codec panics.
#![no_main]

use fpmd::fastcgi::{
    decode_record, get_values_result, pairs, scan_response, BeginRequest, Deframer, EndRequest, Piece, MAX_CONTENT_LEN,
};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, PartialEq)]
enum Seen {
    Record(u8, u16, Vec<u8>),
    Stream(u8, u16, Vec<u8>),
    End(u8, u16),
}

fn push_stream(seen: &mut Vec<Seen>, kind: u8, id: u16, data: &[u8]) {
    match seen.last_mut() {
        Some(Seen::Stream(k, i, v)) if *k == kind && *i == id => v.extend_from_slice(data),
        _ => seen.push(Seen::Stream(kind, id, data.to_vec())),
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&first, data)) = input.split_first() else { return };
    let cut = first as usize % 97 + 1;

    // Reference: whole records.
    let mut want = Vec::new();
    let mut rest = data;
    let mut want_err = false;
    loop {
        match decode_record(rest) {
            Ok(Some(r)) => {
                let (k, id) = (r.header.kind, r.header.request_id);
                match r.header.record_type() {
                    Some(t) if t.is_stream() && r.content.is_empty() => want.push(Seen::End(k, id)),
                    Some(t) if t.is_stream() => push_stream(&mut want, k, id, r.content),
                    _ => want.push(Seen::Record(k, id, r.content.to_vec())),
                }
                let _ = BeginRequest::decode(r.content);
                let _ = EndRequest::decode(r.content);
                for p in pairs(r.content) {
                    let _ = p;
                }
                let answer = get_values_result(r.content, |_| Some("x".repeat(40)));
                assert!(answer.len() <= MAX_CONTENT_LEN);
                rest = &rest[r.header.record_len()..];
            }
            Ok(None) => break,
            Err(_) => {
                want_err = true;
                break;
            }
        }
    }

    // The deframer, in chunks.
    let mut d = Deframer::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut seen = Vec::new();
    let mut err = false;
    'feed: for chunk in data.chunks(cut) {
        buf.extend_from_slice(chunk);
        loop {
            match d.next(&buf) {
                Ok((piece, used)) => {
                    let more = piece.is_some();
                    match piece {
                        Some(Piece::Record(r)) => seen.push(Seen::Record(r.header.kind, r.header.request_id, r.content.to_vec())),
                        Some(Piece::Data { kind, request_id, data }) => {
                            assert!(!data.is_empty());
                            push_stream(&mut seen, kind as u8, request_id, data)
                        }
                        Some(Piece::End { kind, request_id }) => seen.push(Seen::End(kind as u8, request_id)),
                        None => {}
                    }
                    assert!(used <= buf.len());
                    buf.drain(..used);
                    if !more {
                        break;
                    }
                }
                Err(_) => {
                    err = true;
                    break 'feed;
                }
            }
        }
    }
    assert_eq!(err, want_err);
    // Whole records agree; the deframer may have handed out the first
    // bytes of a stream record the reference has not seen whole.
    assert!(seen.len() >= want.len());
    for (a, b) in want.iter().zip(seen.iter()) {
        match (a, b) {
            (Seen::Stream(k1, i1, v1), Seen::Stream(k2, i2, v2)) => {
                assert_eq!((k1, i1), (k2, i2));
                assert!(v2.starts_with(v1));
            }
            _ => assert_eq!(a, b),
        }
    }
    for id in [0u16, 1, u16::from_be_bytes([first, first])] {
        let s = scan_response(data, id);
        assert!(s.forwardable <= data.len());
    }
});
