//! `access.format`, php-fpm's access log format, read when the
//! configuration is: [`Format::parse`] turns the text into the pieces that
//! [`crate::observe::access_log`] writes each request's line with
//! (`Format::write`), as php-fpm's `fpm_log_write` reads it in its test
//! mode (php-src `sapi/fpm/fpm/fpm_log.c`). The specifiers and what each
//! writes are listed there.
//!
//! Must not touch: requests and files (a configuration value only).

use std::sync::{Arc, LazyLock};

use chrono::format::{Item, StrftimeItems};

/// php-fpm's default `access.format` (`fpm_conf.c`).
pub const DEFAULT_FORMAT: &str = "%R - %u %t \"%m %r\" %s";
/// php-fpm's time format of `%t` and `%T` without `{…}` (`fpm_log.c`).
pub const DEFAULT_TIME_FORMAT: &str = "%d/%b/%Y:%H:%M:%S %z";
/// A parsed `access.format`. Compares (and displays) as its text. Shared:
/// every pool with php-fpm's default holds the one parsed at first use.
#[derive(Debug, Clone)]
pub struct Format(Arc<Parsed>);

#[derive(Debug)]
struct Parsed {
    source: String,
    pieces: Vec<Piece>,
}

/// [`DEFAULT_FORMAT`], parsed once.
static DEFAULT: LazyLock<Format> =
    LazyLock::new(|| Format::parse_new(DEFAULT_FORMAT).expect("php-fpm's default format parses"));

impl PartialEq for Format {
    fn eq(&self, other: &Format) -> bool {
        self.0.source == other.0.source
    }
}

impl Eq for Format {}

impl Default for Format {
    /// php-fpm's default, [`DEFAULT_FORMAT`].
    fn default() -> Format {
        DEFAULT.clone()
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.source)
    }
}

/// Why an `access.format` is refused: php-fpm's messages (`fpm_log.c`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("Invalid token in the access.format (%{0})")]
    InvalidToken(char),
    #[error("missing closing embrace in the access.format")]
    MissingEmbrace,
    #[error("embrace is not allowed for modifier %{0}")]
    EmbraceNotAllowed(char),
    #[error("only {allowed} are allowed as a modifier for %{spec} ('{modifier}')")]
    Modifier {
        spec: char,
        allowed: &'static str,
        modifier: String,
    },
    #[error("the name of the {what} must be set between embraces for %{spec}")]
    NameMissing { spec: char, what: &'static str },
    #[error("invalid time format '{0}' for %{1} (strftime's format, as chrono reads it)")]
    TimeFormat(String, char),
}

/// One piece of a parsed format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Text(String),
    /// `%C`, `%{total}C`, `%{user}C`, `%{system}C`: the request's CPU as a
    /// percentage of its duration; `Some(true)` user only, `Some(false)`
    /// system only.
    Cpu(Option<bool>),
    Duration(DurationUnit),
    Env(Vec<u8>),
    ScriptFilename,
    ContentLength,
    Method,
    /// `%M`, `%{bytes}M`, `%{kilo}M`, `%{mega}M`: the request's peak
    /// memory, divided by this (1, 1024, 1048576).
    Memory(u64),
    Pool,
    Header(Vec<u8>),
    Pid,
    MasterPid,
    Query,
    QueryMark,
    RequestUri,
    RemoteAddr,
    Status,
    /// `%t` (`end` false) or `%T`.
    Time {
        end: bool,
        items: Vec<Item<'static>>,
    },
    User,
}

/// The unit of `%d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DurationUnit {
    Seconds,
    Milli,
    Micro,
}

fn time_items(format: &str, spec: char) -> Result<Vec<Item<'static>>, FormatError> {
    StrftimeItems::new(format)
        .parse_to_owned()
        .map_err(|_| FormatError::TimeFormat(format.to_string(), spec))
}

impl Format {
    /// The format shows a request's peak memory or CPU (`%M`, `%C`).
    pub fn shows_usage(&self) -> bool {
        self.pieces()
            .iter()
            .any(|p| matches!(p, Piece::Memory(_) | Piece::Cpu(_)))
    }

    /// The format shows the response code (`%s`).
    pub fn shows_status(&self) -> bool {
        self.pieces().iter().any(|p| matches!(p, Piece::Status))
    }

    /// Parses an `access.format` as php-fpm's `fpm_log_write` reads it in
    /// its test mode (`fpm_conf.c` checks the format that way): `%X`
    /// specifiers, each optionally preceded by `{modifier}` (only `C`, `d`,
    /// `e`, `M`, `o`, `t` and `T` take one; an empty `{}` is none); a `%`
    /// at the very end prints nothing. Errors: an unknown specifier, a
    /// `{` without `}` (or a `}` that ends the format), a modifier on a
    /// specifier that takes none or not that one, `%e`/`%o` without a
    /// name, a time format chrono cannot read.
    pub fn parse(format: &str) -> Result<Format, FormatError> {
        if format == DEFAULT_FORMAT {
            return Ok(Format::default());
        }
        Format::parse_new(format)
    }

    /// [`Format::parse`], into a format of its own.
    fn parse_new(format: &str) -> Result<Format, FormatError> {
        let b = format.as_bytes();
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] != b'%' {
                let next = memchr::memchr(b'%', &b[i..]).map_or(b.len(), |n| i + n);
                text.push_str(&format[i..next]);
                i = next;
                continue;
            }
            i += 1;
            let mut modifier = "";
            while b.get(i) == Some(&b'{') {
                let close = memchr::memchr(b'}', &b[i + 1..])
                    .map(|n| i + 1 + n)
                    .filter(|c| c + 1 < b.len())
                    .ok_or(FormatError::MissingEmbrace)?;
                modifier = &format[i + 1..close];
                i = close + 1;
            }
            let Some(spec) = format[i..].chars().next() else {
                break;
            };
            i += spec.len_utf8();
            let is = |names: &[&str]| names.iter().any(|n| modifier.eq_ignore_ascii_case(n));
            let bad = |allowed| FormatError::Modifier {
                spec,
                allowed,
                modifier: modifier.to_string(),
            };
            let piece = match spec {
                '%' => Piece::Text("%".into()),
                'C' if modifier.is_empty() || is(&["total"]) => Piece::Cpu(None),
                'C' if is(&["user"]) => Piece::Cpu(Some(true)),
                'C' if is(&["system"]) => Piece::Cpu(Some(false)),
                'C' => return Err(bad("'total', 'user' or 'system'")),
                'd' if modifier.is_empty() || is(&["seconds"]) => {
                    Piece::Duration(DurationUnit::Seconds)
                }
                'd' if is(&["milliseconds", "milli", "miliseconds", "mili"]) => {
                    Piece::Duration(DurationUnit::Milli)
                }
                'd' if is(&["microseconds", "micro"]) => Piece::Duration(DurationUnit::Micro),
                'd' => {
                    return Err(bad(
                        "'seconds', 'milli', 'milliseconds', 'micro' or 'microseconds'",
                    ))
                }
                'e' | 'o' if modifier.is_empty() => {
                    let what = if spec == 'e' {
                        "environment variable"
                    } else {
                        "header"
                    };
                    return Err(FormatError::NameMissing { spec, what });
                }
                'e' => Piece::Env(modifier.as_bytes().to_vec()),
                'o' => Piece::Header(modifier.as_bytes().to_vec()),
                'f' => Piece::ScriptFilename,
                'l' => Piece::ContentLength,
                'm' => Piece::Method,
                'M' if modifier.is_empty() || is(&["bytes"]) => Piece::Memory(1),
                'M' if is(&["kilo", "kilobytes"]) => Piece::Memory(1024),
                'M' if is(&["mega", "megabytes"]) => Piece::Memory(1024 * 1024),
                'M' => return Err(bad("'bytes', 'kilo', 'kilobytes', 'mega' or 'megabytes'")),
                'n' => Piece::Pool,
                'p' => Piece::Pid,
                'P' => Piece::MasterPid,
                'q' => Piece::Query,
                'Q' => Piece::QueryMark,
                'r' => Piece::RequestUri,
                'R' => Piece::RemoteAddr,
                's' => Piece::Status,
                't' | 'T' => Piece::Time {
                    end: spec == 'T',
                    items: time_items(
                        if modifier.is_empty() {
                            DEFAULT_TIME_FORMAT
                        } else {
                            modifier
                        },
                        spec,
                    )?,
                },
                'u' => Piece::User,
                other => return Err(FormatError::InvalidToken(other)),
            };
            let takes_modifier = matches!(spec, 'C' | 'd' | 'e' | 'M' | 'o' | 't' | 'T');
            if !modifier.is_empty() && !takes_modifier {
                return Err(FormatError::EmbraceNotAllowed(spec));
            }
            match piece {
                Piece::Text(t) => text.push_str(&t),
                piece => {
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    pieces.push(piece);
                }
            }
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(Format(Arc::new(Parsed {
            source: format.to_string(),
            pieces,
        })))
    }

    /// The format's text, as configured.
    pub fn as_str(&self) -> &str {
        &self.0.source
    }

    /// What a line is made of, in order.
    pub(crate) fn pieces(&self) -> &[Piece] {
        &self.0.pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_with_the_default_format_share_one() {
        let a = Format::default();
        assert!(Arc::ptr_eq(&a.0, &Format::default().0));
        assert!(Arc::ptr_eq(&a.0, &Format::parse(DEFAULT_FORMAT).unwrap().0));
        let other = Format::parse("%m %r").unwrap();
        assert!(!Arc::ptr_eq(&a.0, &other.0));
        assert_eq!(other.as_str(), "%m %r");
        assert_eq!(other.pieces().len(), 3);
    }
}
