//! The slowlog: one entry per request that ran longer than
//! `request_slowlog_timeout`, written while it still runs (php-fpm's
//! `fpm_request_check_timed_out`), through the writer thread of
//! [`super::reopen`] like the access logs.
//!
//! Must not touch: requests (the proxy notices the timeout and passes
//! what the request is).

use std::time::Duration;

use tracing::warn;

/// Writes one slowlog entry for `pid`, running `info` for `elapsed`
/// (php-fpm's `slowlog`, without the backtrace: php-cgi cannot be traced
/// without ptrace, and fpmd does not need it to know the script, the URI
/// and the time): a warning in fpmd's log, and the entry appended to the
/// pool's `slowlog` file when it has one.
pub fn write(
    config: &crate::config::PoolConfig,
    pid: i32,
    info: &crate::pool::RequestInfo,
    elapsed: Duration,
) {
    let name = &config.name;
    let crate::pool::RequestInfo {
        script,
        uri,
        method,
        ..
    } = info;
    // php-fpm's fpm_request_check_timed_out.
    let php_fpm = format!(
        "child {pid}, script '{script}' (request: \"{method} {uri}\") executing too slow ({:.6} sec), logging",
        elapsed.as_secs_f64()
    );
    warn!(pool = %name, pid, script = %script, uri = %uri, php_fpm = %php_fpm, "slow request: running for {:.3} s (request_slowlog_timeout)", elapsed.as_secs_f64());
    let Some(path) = &config.slowlog else {
        return;
    };
    // The entry's fields come from the client: escaped, so that a URI
    // cannot forge an entry.
    let (script, uri, method) = (
        crate::log::escape(script.as_bytes()),
        crate::log::escape(uri.as_bytes()),
        crate::log::escape(method.as_bytes()),
    );
    // The entry's head as php-fpm writes it (fpm_php_trace_dump:
    // zlog_print_time's "[05-Dec-2026 01:05:24] ", a space, the pool)
    // under log_format = "php-fpm"; else an RFC 3339 time in UTC.
    let head = match crate::log::current_format() {
        crate::config::LogFormat::PhpFpm => {
            format!(
                "[{}]  [pool {name}] pid {pid}",
                crate::log::php_fpm_time(&chrono::Local::now())
            )
        }
        crate::config::LogFormat::Fpmd => format!(
            "[{}] [pool {name}] pid {pid}",
            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        ),
    };
    let entry = format!(
        "\n{head}\nscript_filename = {script}\nrequest_uri = {uri}\nrequest_method = {method}\nelapsed = {:.3} s\n",
        elapsed.as_secs_f64()
    );
    // Through the writer thread (no request waits on the disk); the file
    // is opened once, 0600 as php-fpm's (it names URIs with their query
    // strings), and reopened with the access logs on SIGUSR1.
    match super::reopen::open(path) {
        Ok(file) => {
            if !file.append(entry.as_bytes()) {
                warn!(pool = %name, "slowlog {} is not being written fast enough: an entry was dropped", path.display());
            }
        }
        Err(e) => warn!(pool = %name, "cannot write slowlog {}: {e}", path.display()),
    }
}
