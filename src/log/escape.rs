//! Text a client or a child controls, made safe for one log line: control
//! characters, quotes and invalid UTF-8 escaped ([`escape`],
//! [`escape_controls`]), or invalid UTF-8 replaced ([`Field`]), so that
//! nobody can forge a log line or send escape codes to a terminal.
//!
//! Must not touch: where the text goes (the log, the access log, the
//! slowlog write it).

use std::fmt;

/// Renders bytes for one log line, inside double quotes: newline, CR and
/// tab as `\n`, `\r`, `\t`; other C0 controls, ESC and DEL as `\xNN`
/// (lowercase hex); C1 controls (U+0080–U+009F, which some terminals obey)
/// as `\u{NN}`; `\` and `"` as `\\` and `\"`; each byte of invalid UTF-8
/// as `\xNN`; everything else as is. Allocates nothing; a run of bytes
/// that needs no escaping is written with one `write_str`.
///
/// For client- and child-supplied text: a child's line (php-fpm's
/// `said into stderr: "…"`), a request URI.
pub fn escape(bytes: &[u8]) -> Escape<'_> {
    Escape {
        bytes,
        quotes: true,
    }
}

/// As [`escape`], but `"` and `\` are left as they are: for text that is
/// not between quotes and should stay as the writer meant it (a child's raw
/// line under `decorate_workers_output = false`, often JSON). Control
/// characters and invalid UTF-8 are still escaped, so it cannot forge a
/// line nor reach a terminal; `\x1b` written literally looks the same as
/// an escaped ESC.
pub fn escape_controls(bytes: &[u8]) -> Escape<'_> {
    Escape {
        bytes,
        quotes: false,
    }
}

/// Display of [`escape`] / [`escape_controls`].
#[derive(Debug, Clone, Copy)]
pub struct Escape<'a> {
    bytes: &'a [u8],
    quotes: bool,
}

impl fmt::Display for Escape<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.bytes;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => return write_escaped(f, s, self.quotes),
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    if let Ok(s) = std::str::from_utf8(valid) {
                        write_escaped(f, s, self.quotes)?;
                    }
                    let bad = e.error_len().unwrap_or(after.len()).min(after.len());
                    for b in &after[..bad] {
                        write!(f, "\\x{b:02x}")?;
                    }
                    rest = &after[bad..];
                }
            }
        }
    }
}

/// Client-supplied bytes as text for a log field or message: invalid
/// UTF-8 shows as U+FFFD. fpmd's log formatter escapes control
/// characters, quotes and backslashes in every field and message
/// ([`super::EscapingFields`]), so a client cannot forge log lines or
/// send escape codes to a terminal; files written outside the formatter
/// (the slowlog) use [`escape`].
pub struct Field<'a>(pub &'a [u8]);

/// See [`Field`].
pub fn field(b: &[u8]) -> Field<'_> {
    Field(b)
}

impl fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str("\u{fffd}")?;
            }
        }
        Ok(())
    }
}

/// Writes `s` with [`escape`]'s rules (`quotes`: also `"` and `\`).
pub(crate) fn write_escaped<W: fmt::Write + ?Sized>(
    out: &mut W,
    s: &str,
    quotes: bool,
) -> fmt::Result {
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let c1 = b == 0xc2 && bytes.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n));
        let plain = (0x20..0x7f).contains(&b) && !(quotes && (b == b'"' || b == b'\\'))
            || (b >= 0x80 && !c1);
        if plain {
            i += 1;
            continue;
        }
        // `i` is a char boundary: every escaped char starts with this byte.
        out.write_str(&s[start..i])?;
        match b {
            b'\n' => out.write_str("\\n")?,
            b'\r' => out.write_str("\\r")?,
            b'\t' => out.write_str("\\t")?,
            b'"' => out.write_str("\\\"")?,
            b'\\' => out.write_str("\\\\")?,
            0xc2 => {
                write!(out, "\\u{{{:x}}}", bytes[i + 1])?;
                i += 1;
            }
            _ => write!(out, "\\x{b:02x}")?,
        }
        i += 1;
        start = i;
    }
    out.write_str(&s[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_text() {
        assert_eq!(field(b"/index.php?a=1").to_string(), "/index.php?a=1");
        assert_eq!(field(b"caf\xc3\xa9 \xff").to_string(), "caf\u{e9} \u{fffd}");
    }

    fn esc(b: &[u8]) -> String {
        escape(b).to_string()
    }

    #[test]
    fn escape_plain_ascii_is_unchanged() {
        assert_eq!(
            esc(b"GET /index.php?a=1&b=2 HTTP/1.1"),
            "GET /index.php?a=1&b=2 HTTP/1.1"
        );
        assert_eq!(esc(b""), "");
        assert_eq!(
            esc("caf\u{e9} \u{1f418} \u{2028}".as_bytes()),
            "caf\u{e9} \u{1f418} \u{2028}"
        );
    }

    #[test]
    fn escape_controls_quotes_backslashes() {
        assert_eq!(esc(b"a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(esc(b"\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
        assert_eq!(esc(b"\x00\x07\x7f"), "\\x00\\x07\\x7f");
        assert_eq!(esc(b"say \"hi\" \\o/"), "say \\\"hi\\\" \\\\o/");
        assert_eq!(esc("\u{9b}31m".as_bytes()), "\\u{9b}31m");
        assert_eq!(esc("\u{80}\u{9f}\u{a0}".as_bytes()), "\\u{80}\\u{9f}\u{a0}");
    }

    #[test]
    fn escape_invalid_utf8_bytewise() {
        assert_eq!(esc(b"\xff\xfe"), "\\xff\\xfe");
        assert_eq!(esc(b"ok\xc3"), "ok\\xc3", "truncated sequence at the end");
        assert_eq!(esc(b"a\xe2\x82b"), "a\\xe2\\x82b");
        assert_eq!(esc(b"\xc2"), "\\xc2", "a lone C1 lead byte");
        assert_eq!(esc(b"\xed\xa0\x80x"), "\\xed\\xa0\\x80x", "a surrogate");
    }

    #[test]
    fn escape_controls_leaves_quotes_and_backslashes() {
        let json = br#"{"msg":"a \"b\"","path":"C:\\x"}"#;
        assert_eq!(
            escape_controls(json).to_string(),
            String::from_utf8_lossy(json)
        );
        assert_eq!(
            escape_controls(b"x\ny\x1b\xff").to_string(),
            "x\\ny\\x1b\\xff"
        );
    }

    proptest::proptest! {
        /// Whatever the bytes, one line of printable text, and plain input
        /// comes back as it went in.
        #[test]
        fn escape_is_one_printable_line(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let s = esc(&bytes);
            proptest::prop_assert!(s.chars().all(|c| !c.is_control()), "{s:?}");
            let plain = bytes.iter().all(|b| (0x20..0x7f).contains(b) && *b != b'"' && *b != b'\\');
            if plain {
                proptest::prop_assert_eq!(s.as_bytes(), &bytes[..]);
            }
        }
    }
}
