//! Answers fpmd gives the web server itself, as CGI responses in FastCGI
//! records: refusals (503), its own 502/504 after a verdict, php-fpm's 404
//! for a missing script, and answers to malformed requests (400, 431).
//! Must not touch: sockets (the caller writes the bytes).

use crate::fastcgi::{encode_empty, encode_end_request, encode_stream, EndRequest, RecordType};

/// One answer fpmd gives itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    /// 503 with `Retry-After`: the queue is full, the request waited longer
    /// than `request_queue_timeout`, or no child could take it.
    Unavailable(&'static str),
    /// 503: fpmd is stopping.
    Stopping,
    /// 502: the child died or broke the protocol before answering.
    BadGateway,
    /// 504: `request_terminate_timeout`.
    GatewayTimeout,
    /// php-fpm's answer when there is no script to run: 404,
    /// `File not found.`, and `Primary script unknown` on FastCGI stderr
    /// (php-src `sapi/fpm/fpm/fpm_main.c`, where `path_translated` is NULL).
    ScriptUnknown,
    /// php-fpm's 403 `Access denied.` (its `security.limit_extensions`
    /// refuses the script).
    AccessDenied,
    /// php-fpm's 404 `No input file specified.` (the script cannot be
    /// opened).
    NoInputFile,
    /// 431: the request's PARAMS (its CGI variables, mostly HTTP headers)
    /// are over fpmd's limit.
    HeadTooLarge,
}

impl Local {
    /// The HTTP status line of the answer.
    pub fn status(self) -> &'static str {
        match self {
            Local::Unavailable(_) | Local::Stopping => "503 Service Unavailable",
            Local::BadGateway => "502 Bad Gateway",
            Local::GatewayTimeout => "504 Gateway Timeout",
            Local::ScriptUnknown | Local::NoInputFile => "404 Not Found",
            Local::AccessDenied => "403 Forbidden",
            Local::HeadTooLarge => "431 Request Header Fields Too Large",
        }
    }

    /// The HTTP status code of the answer (503, …).
    pub fn code(self) -> u16 {
        crate::fastcgi::cgi::status_code(self.status().as_bytes()).unwrap_or(500)
    }

    /// Appends the whole answer to request `id` (STDERR if any, STDOUT,
    /// the empty STDOUT record, END_REQUEST) to `out`.
    pub fn encode(self, out: &mut Vec<u8>, id: u16) {
        let status = self.status();
        let text = match self {
            Local::ScriptUnknown | Local::AccessDenied | Local::NoInputFile => {
                let text = match self {
                    Local::ScriptUnknown => {
                        encode_stream(out, RecordType::Stderr, id, b"Primary script unknown");
                        encode_empty(out, RecordType::Stderr, id);
                        "File not found."
                    }
                    Local::AccessDenied => "Access denied.",
                    _ => "No input file specified.",
                };
                // Byte for byte what php-fpm 8.2 sends (with expose_php off).
                let head = format!(
                    "Status: {status}\r\nContent-type: text/html; charset=UTF-8\r\n\r\n{text}\n"
                );
                encode_stream(out, RecordType::Stdout, id, head.as_bytes());
                encode_empty(out, RecordType::Stdout, id);
                encode_end_request(out, id, EndRequest::COMPLETE);
                return;
            }
            Local::Unavailable(why) => why,
            Local::Stopping => "the server is stopping",
            Local::BadGateway => "the PHP process serving this request died",
            // The reason (request_terminate_timeout) is in fpmd's log, not
            // told to visitors.
            Local::GatewayTimeout => "the script took too long",
            Local::HeadTooLarge => "the request headers are too large",
        };
        let retry = if matches!(self, Local::Unavailable(_) | Local::Stopping) {
            "Retry-After: 1\r\n"
        } else {
            ""
        };
        let body = format!(
            "Status: {status}\r\nContent-Type: text/plain\r\n{retry}\r\n{status}: {text}\n"
        );
        encode_stream(out, RecordType::Stdout, id, body.as_bytes());
        encode_empty(out, RecordType::Stdout, id);
        encode_end_request(out, id, EndRequest::COMPLETE);
    }
}

/// Appends a whole CGI response of fpmd's own to request `id`: `status`
/// (`"200 OK"`), header lines (`"Content-Type: text/plain"`), and `body`
/// (left out when `head_only`, for a HEAD request), then END_REQUEST.
pub fn encode_response(
    out: &mut Vec<u8>,
    id: u16,
    status: &str,
    headers: &[&str],
    body: &[u8],
    head_only: bool,
) {
    let mut text = format!("Status: {status}\r\n").into_bytes();
    for h in headers {
        text.extend_from_slice(h.as_bytes());
        text.extend_from_slice(b"\r\n");
    }
    text.extend_from_slice(b"\r\n");
    if !head_only {
        text.extend_from_slice(body);
    }
    encode_stream(out, RecordType::Stdout, id, &text);
    encode_empty(out, RecordType::Stdout, id);
    encode_end_request(out, id, EndRequest::COMPLETE);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastcgi::decode_record;

    fn records(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut v = Vec::new();
        while let Some(r) = decode_record(b).unwrap() {
            v.push((r.header.kind, r.content.to_vec()));
            b = &b[r.header.record_len()..];
        }
        v
    }

    #[test]
    fn script_unknown_is_php_fpms_answer() {
        let mut out = Vec::new();
        Local::ScriptUnknown.encode(&mut out, 7);
        let r = records(&out);
        assert_eq!(r[0], (7, b"Primary script unknown".to_vec()));
        assert_eq!(r[1], (7, vec![]));
        assert_eq!(
            String::from_utf8(r[2].1.clone()).unwrap(),
            "Status: 404 Not Found\r\nContent-type: text/html; charset=UTF-8\r\n\r\nFile not found.\n"
        );
        assert_eq!(r[3], (6, vec![]));
        assert_eq!(r[4].0, 3);
    }

    #[test]
    fn refusals_say_retry_after() {
        let mut out = Vec::new();
        Local::Unavailable("the server is overloaded; retry later").encode(&mut out, 1);
        let r = records(&out);
        let text = String::from_utf8(r[0].1.clone()).unwrap();
        assert!(
            text.starts_with("Status: 503 Service Unavailable\r\n"),
            "{text}"
        );
        assert!(text.contains("Retry-After: 1\r\n"));
        let mut out = Vec::new();
        Local::GatewayTimeout.encode(&mut out, 1);
        assert!(!String::from_utf8_lossy(&out).contains("Retry-After"));
    }
}
