//! Name-value pairs (FCGI spec 3.4): the content of PARAMS and GET_VALUES
//! streams. Names and values are bytes, not text.

use super::{ProtocolError, StreamWriter, MAX_CONTENT_LEN};

/// Iterator over the name-value pairs of a complete PARAMS (or GET_VALUES)
/// stream. Yields [`ProtocolError::TruncatedPair`] once and stops when a
/// pair runs past the end.
pub struct Pairs<'a> {
    rest: &'a [u8],
    len: usize,
    failed: bool,
}

impl Pairs<'_> {
    /// Bytes of the stream consumed so far: the offset where the next pair
    /// starts (after a pair was yielded, where it ended).
    pub fn offset(&self) -> usize {
        self.len - self.rest.len()
    }
}

/// Iterates the name-value pairs (FCGI spec 3.4) of `stream`, the
/// concatenated content of a PARAMS stream's records.
pub fn pairs(stream: &[u8]) -> Pairs<'_> {
    Pairs {
        rest: stream,
        len: stream.len(),
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
            Some((
                (&self.rest[start..name_end], &self.rest[name_end..value_end]),
                value_end,
            ))
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

/// The length prefix of one pair: 1 byte per length below 128, else 4
/// bytes with the high bit set. Returns the bytes and how many are used.
fn prefix(name_len: usize, value_len: usize) -> ([u8; 8], usize) {
    let mut p = [0u8; 8];
    let mut n = 0;
    for len in [name_len, value_len] {
        if len < 0x80 {
            p[n] = len as u8;
            n += 1;
        } else {
            p[n..n + 4].copy_from_slice(&((len as u32) | 0x8000_0000).to_be_bytes());
            n += 4;
        }
    }
    (p, n)
}

/// Bytes one pair takes on the wire (lengths included).
pub fn pair_len(name: &[u8], value: &[u8]) -> usize {
    prefix(name.len(), value.len()).1 + name.len() + value.len()
}

/// Appends one name-value pair in the FCGI spec 3.4 encoding.
pub fn encode_pair(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    let (p, n) = prefix(name.len(), value.len());
    out.extend_from_slice(&p[..n]);
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// Appends one pair to a PARAMS stream, whole inside one record (see
/// [`StreamWriter::write_whole`]). Errors: [`ProtocolError::ContentTooLong`]
/// for a pair over 65,535 bytes, which no record can hold: php-cgi itself
/// could not read it.
pub fn write_pair(
    w: &mut StreamWriter,
    out: &mut Vec<u8>,
    name: &[u8],
    value: &[u8],
) -> Result<(), ProtocolError> {
    if name.len() > MAX_CONTENT_LEN || value.len() > MAX_CONTENT_LEN {
        return Err(ProtocolError::ContentTooLong(
            name.len().saturating_add(value.len()),
        ));
    }
    let (p, n) = prefix(name.len(), value.len());
    w.write_whole(out, &[&p[..n], name, value])
}

/// Finds the value of `name` in a complete PARAMS stream: the *last*
/// occurrence, as php-cgi's table keeps the last value of a repeated name
/// (`fcgi_hash_set` in php-src `main/fastcgi.c`). `None` when it is absent;
/// a malformed tail is ignored.
pub fn find_param<'a>(stream: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    pairs(stream)
        .map_while(Result::ok)
        .filter(|(n, _)| *n == name)
        .last()
        .map(|(_, v)| v)
}

/// Builds the content of a `GET_VALUES_RESULT` answering the names asked in a
/// `GET_VALUES` content (FCGI spec 4.1): known variables get `answer(name)`,
/// each once however often it was asked; unknown ones are left out, as the
/// spec asks. The result always fits one record: answers that would not are
/// left out.
pub fn get_values_result(query: &[u8], answer: impl Fn(&[u8]) -> Option<String>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut answered: Vec<&[u8]> = Vec::new();
    for (name, _) in pairs(query).map_while(Result::ok) {
        if answered.contains(&name) {
            continue;
        }
        if let Some(v) = answer(name) {
            if out.len() + pair_len(name, v.as_bytes()) <= MAX_CONTENT_LEN {
                encode_pair(&mut out, name, v.as_bytes());
            }
            answered.push(name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastcgi::{decode_record, RecordType};

    #[test]
    fn pairs_short_and_long_lengths() {
        let mut s = Vec::new();
        encode_pair(&mut s, b"SCRIPT_FILENAME", b"/srv/index.php");
        let long = vec![b'v'; 300];
        encode_pair(&mut s, b"LONG", &long);
        encode_pair(&mut s, b"EMPTY", b"");
        assert_eq!(s[0], 15);
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
        assert_eq!(pair_len(b"LONG", &long), 1 + 4 + 4 + 300);
    }

    #[test]
    fn last_occurrence_wins_as_in_php() {
        let mut s = Vec::new();
        encode_pair(&mut s, b"SCRIPT_FILENAME", b"/srv/a.php");
        encode_pair(&mut s, b"SCRIPT_FILENAME", b"/srv/b.php");
        assert_eq!(find_param(&s, b"SCRIPT_FILENAME"), Some(&b"/srv/b.php"[..]));
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
        // lengths near 2^31 must not overflow
        assert_eq!(
            pairs(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).count(),
            1
        );
    }

    #[test]
    fn get_values_answers_known_names_once() {
        let mut q = Vec::new();
        encode_pair(&mut q, b"FCGI_MPXS_CONNS", b"");
        encode_pair(&mut q, b"FCGI_WHATEVER", b"");
        for _ in 0..10_000 {
            encode_pair(&mut q, b"FCGI_MPXS_CONNS", b"");
        }
        let r = get_values_result(&q, |n| (n == b"FCGI_MPXS_CONNS").then(|| "0".to_string()));
        let got: Vec<_> = pairs(&r).collect::<Result<_, _>>().unwrap();
        assert_eq!(got, vec![(&b"FCGI_MPXS_CONNS"[..], &b"0"[..])]);
        // even an answer function that says yes to everything fits a record
        let mut many = Vec::new();
        for i in 0..20_000 {
            encode_pair(&mut many, format!("N{i}").as_bytes(), b"");
        }
        let r = get_values_result(&many, |_| Some("x".repeat(10)));
        assert!(r.len() <= MAX_CONTENT_LEN);
    }

    #[test]
    fn write_pair_keeps_pairs_whole_and_refuses_giants() {
        let mut out = Vec::new();
        let mut w = StreamWriter::new(RecordType::Params, 1);
        let v = vec![b'v'; 40_000];
        write_pair(&mut w, &mut out, b"A", &v).unwrap();
        write_pair(&mut w, &mut out, b"B", &v).unwrap();
        assert!(write_pair(&mut w, &mut out, b"C", &vec![0; 70_000]).is_err());
        w.end(&mut out);
        let mut rest = &out[..];
        let mut n = 0;
        while let Some(r) = decode_record(rest).unwrap() {
            // each record parses on its own, as php-cgi parses them
            assert!(pairs(r.content).all(|p| p.is_ok()));
            rest = &rest[r.header.record_len()..];
            n += 1;
        }
        assert_eq!(n, 3);
    }
}
