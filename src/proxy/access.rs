//! A request's access log line, in php-fpm's format ([`AccessLog`]):
//! what the proxy knows of the request when it ends, handed to
//! [`crate::observe::access_log`]; `access.suppress_path` applied.

use std::sync::Arc;

use super::request::Request;
use tracing::warn;

use super::*;

/// A connection's access log: the pool's file and the buffers every line
/// reuses.
pub(super) struct AccessLog {
    pub(super) file: Arc<crate::observe::reopen::LogFile>,
    pub(super) line: String,
    /// The child's response head (`%s`, `%{…}o`).
    pub(super) head: crate::fastcgi::cgi::Head,
}

impl AccessLog {
    /// The access log of `config`, if it has one (the daemon opened the
    /// file); the buffers of `old` are kept.
    pub(super) fn of(
        config: &crate::config::PoolConfig,
        old: Option<AccessLog>,
    ) -> Option<AccessLog> {
        let file = crate::observe::reopen::get(config.access_log.as_deref()?)?;
        let (line, head) = match old {
            Some(a) => (a.line, a.head),
            None => (String::new(), Default::default()),
        };
        Some(AccessLog { file, line, head })
    }

    /// Writes the line of `req`, answered as `answered` (nothing when
    /// nobody answered it, or when the pool's `access.suppress_path`
    /// leaves it out), in the pool's `access.format`.
    pub(super) fn write(
        &mut self,
        pool: &str,
        config: &crate::config::PoolConfig,
        req: &Request,
        answered: Answered,
    ) {
        let format = &config.access_format;
        let Some(began) = req.began else { return };
        let (pid, status, head) = match answered {
            Answered::Nobody => return,
            Answered::Fpmd(code) => (std::process::id() as i32, code, None),
            Answered::Child { pid, reply } => (
                pid,
                // php-fpm's `%s`: the script's last response code, also
                // one set after its head was sent.
                reply.unwrap_or_else(|| {
                    req.script_status
                        .or_else(|| self.head.status())
                        .unwrap_or(200)
                }),
                Some(&self.head),
            ),
        };
        if suppressed(&config.access_suppress_paths, req, status) {
            return;
        }
        let duration = began.elapsed();
        let now = std::time::SystemTime::now();
        let entry = crate::observe::access_log::Entry {
            pool,
            params: req,
            request_uri: req.script_path(),
            content_length: req.content_length(),
            pid,
            status,
            head,
            start: now.checked_sub(duration).unwrap_or(now),
            duration,
            usage: req.usage,
        };
        if format.write(&entry, &mut self.line) && !self.file.append(self.line.as_bytes()) {
            if let Some(n) = self.file.dropped_report() {
                warn!(pool = %pool, "access log {}: writing does not keep up; {n} lines dropped",
                    self.file.path().display());
            }
        }
    }
}

/// php-fpm's `fpm_access_log_suppress` (`sapi/fpm/fpm/fpm_log.c`): a
/// `GET` or `HEAD` without a query string or a body, answered 2xx, whose
/// request URI (`%r`) is exactly one of `paths`.
pub(super) fn suppressed(paths: &[String], req: &Request, status: u16) -> bool {
    !paths.is_empty()
        && req.param(b"QUERY_STRING").is_none_or(|q| q.is_empty())
        && matches!(req.param(b"REQUEST_METHOD"), Some(b"GET" | b"HEAD"))
        && (200..=299).contains(&status)
        && req.content_length() == 0
        && paths.iter().any(|p| p.as_bytes() == req.script_path())
}
