//! fpmd's own log (php-fpm's `error_log`): tracing to stderr or to a file
//! that SIGUSR1 reopens (for logrotate), one line per event in php-fpm's
//! level names, with whatever a client or a child controls escaped.
//!
//! Owns: the tracing subscriber, its line format ([`PhpFpmFormat`],
//! [`EscapingFields`]), the log file handle and [`escape`]. Must not touch
//! anything else: callers decide what to log.
//!
//! A line is `TIME LEVEL MESSAGE FIELDS`: the time stamp is RFC 3339 in UTC
//! with microseconds (tests parse it), LEVEL one of php-fpm's `ALERT`,
//! `ERROR`, `WARNING`, `NOTICE`, `DEBUG` (right-aligned to 7 columns),
//! then the message and `name=value` fields. Events whose target is
//! [`RAW_TARGET`] are written as their message alone (php-fpm's
//! `decorate_workers_output = no`).
//!
//! With `log_format = "php-fpm"` a line is php-fpm's (`zlog.c`):
//! `[01-Dec-2026 19:00:00] NOTICE: text`, local time, and with
//! `log_level = "debug"` `[01-Dec-2026 19:00:00.123456] DEBUG: pid 12,
//! fpmd::daemon(), line 40: text`. The text is the event's
//! [`PHP_FPM_FIELD`] when it has one (php-fpm's wording of the same
//! event: `fpm is running, pid 12`, `Terminating ...`), else its message
//! and fields; a `pool` field becomes php-fpm's `[pool www] ` prefix and
//! `pid` is left out (php-fpm's messages name the child themselves).

pub mod escape;

use std::fmt::{self, Write as _};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::MakeWriter;

use crate::config::{LogFormat, LogLevel, LogTarget};
use escape::write_escaped;
pub use escape::{escape, escape_controls, field, Escape, Field};

/// The field that carries php-fpm's wording of an event, written instead
/// of the message under `log_format = "php-fpm"` and never shown
/// otherwise: `info!(php_fpm = "ready to handle connections", "…")`.
pub const PHP_FPM_FIELD: &str = "php_fpm";

/// Marks an event written under `log_format = "php-fpm"` only (its
/// [`PHP_FPM_FIELD`] text), not in fpmd's own format: a line php-fpm's
/// tools wait for whose fact fpmd's log already says in its own words
/// (a reload's `reloading: …` and `using inherited socket …`):
/// `info!(php_fpm = "…", php_fpm_only = true, "")`.
pub const PHP_FPM_ONLY: &str = "php_fpm_only";

/// `log_format` now: 0 fpmd's, 1 php-fpm's.
static FORMAT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
/// `log_level = "debug"` now (php-fpm's lines then carry microseconds,
/// the pid and where the event was logged).
static DEBUG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `log_limit` now, in bytes ([`crate::config::Global::log_limit`]).
static LIMIT: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(crate::config::DEFAULT_LOG_LIMIT);

/// Sets `log_limit` (at start, and on every reload).
pub fn set_limit(bytes: usize) {
    LIMIT.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// `log_limit` now: the longest line of a child's output, in bytes with
/// its prefix and newline (see [`crate::config::Global::log_limit`]).
pub fn limit() -> usize {
    LIMIT.load(std::sync::atomic::Ordering::Relaxed)
}

/// Bytes a line at `level` (php-fpm's name: `WARNING`) has before its
/// message in the current format: php-fpm's `[05-Dec-2026 00:06:31]
/// WARNING: ` (with `log_level = debug` 7 more for the microseconds; the
/// `pid N, module(), line N: ` that follows is not counted), fpmd's RFC
/// 3339 time stamp with microseconds (27 bytes), a space, the level
/// right-aligned to 7 columns and a space. For cutting a child's output to
/// `log_limit` as php-fpm does (`zlog_stream_buf_append`).
pub fn prefix_len(level: &str) -> usize {
    match current_format() {
        LogFormat::PhpFpm => {
            let micros = if DEBUG.load(std::sync::atomic::Ordering::Relaxed) {
                7
            } else {
                0
            };
            "[05-Dec-2026 00:06:31] ".len() + micros + level.len() + ": ".len()
        }
        LogFormat::Fpmd => "2026-12-05T00:06:31.123456Z ".len() + level.len().max(7) + 1,
    }
}

/// Switches the line format (at start, and when a reload changes
/// `log_format`).
pub fn set_format(format: LogFormat) {
    let n = match format {
        LogFormat::Fpmd => 0,
        LogFormat::PhpFpm => 1,
    };
    FORMAT.store(n, std::sync::atomic::Ordering::Relaxed);
}

/// The `log_format` lines are written in now (a reload may change it).
pub fn current_format() -> LogFormat {
    match FORMAT.load(std::sync::atomic::Ordering::Relaxed) {
        1 => LogFormat::PhpFpm,
        _ => LogFormat::Fpmd,
    }
}

/// Where log lines go; cheap to clone, reopenable, and retargetable by a
/// reload.
#[derive(Clone)]
pub struct LogWriter {
    sink: Arc<Mutex<Sink>>,
}

enum Sink {
    Stderr,
    File { path: PathBuf, file: File },
}

impl LogWriter {
    /// Reopens the log file (after logrotate moved it). No-op for stderr.
    /// Errors: the file cannot be opened; the old one stays in use.
    pub fn reopen(&self) -> io::Result<()> {
        let mut sink = self.sink.lock().unwrap();
        if let Sink::File { path, file } = &mut *sink {
            *file = open_append(path)?;
        }
        Ok(())
    }

    /// Sends the log to `target` from now on (a reload changed
    /// `error_log`). Errors: the new file cannot be opened; the old target
    /// stays.
    pub fn retarget(&self, target: &LogTarget) -> io::Result<()> {
        let new = match target {
            LogTarget::Stderr => Sink::Stderr,
            LogTarget::File(p) => Sink::File {
                path: p.clone(),
                file: open_append(p)?,
            },
        };
        *self.sink.lock().unwrap() = new;
        Ok(())
    }
}

/// Whole seconds since the first call (for once-a-second log lines).
pub fn uptime_secs() -> usize {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs() as usize
}

fn open_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // 0600 as php-fpm's (its lines name URIs with their query strings).
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// A handle that writes one formatted event.
pub struct LogSink<'a>(std::sync::MutexGuard<'a, Sink>);

impl Write for LogSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut *self.0 {
            Sink::Stderr => io::stderr().write(buf),
            Sink::File { file, .. } => file.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match &mut *self.0 {
            Sink::Stderr => io::stderr().flush(),
            Sink::File { file, .. } => file.flush(),
        }
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = LogSink<'a>;
    fn make_writer(&'a self) -> Self::Writer {
        LogSink(self.sink.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// php-fpm's `log_level` names mapped to tracing levels: alert and error →
/// ERROR, warning → WARN, notice → INFO, debug → DEBUG.
pub fn level_filter(level: &LogLevel) -> tracing::level_filters::LevelFilter {
    use tracing::level_filters::LevelFilter;
    match level {
        LogLevel::Alert | LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warning => LevelFilter::WARN,
        LogLevel::Notice => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
    }
}

/// Changes the level of the installed subscriber (a reload changed
/// `log_level`). No-op before [`init`].
pub fn set_level(level: &LogLevel) {
    DEBUG.store(
        *level == LogLevel::Debug,
        std::sync::atomic::Ordering::Relaxed,
    );
    if let Some(h) = LEVEL.get() {
        let _ = h.modify(|f| *f = level_filter(level));
    }
}

type LevelHandle = tracing_subscriber::reload::Handle<
    tracing::level_filters::LevelFilter,
    tracing_subscriber::Registry,
>;
static LEVEL: std::sync::OnceLock<LevelHandle> = std::sync::OnceLock::new();

/// Installs the global subscriber, writing lines in `format`. Errors: the
/// log file cannot be opened.
pub fn init(target: &LogTarget, level: &LogLevel, format: LogFormat) -> io::Result<LogWriter> {
    set_format(format);
    DEBUG.store(
        *level == LogLevel::Debug,
        std::sync::atomic::Ordering::Relaxed,
    );
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let sink = match target {
        LogTarget::Stderr => Sink::Stderr,
        LogTarget::File(p) => Sink::File {
            path: p.clone(),
            file: open_append(p)?,
        },
    };
    let writer = LogWriter {
        sink: Arc::new(Mutex::new(sink)),
    };
    let (filter, handle) = tracing_subscriber::reload::Layer::new(level_filter(level));
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .event_format(PhpFpmFormat::default())
        .fmt_fields(EscapingFields)
        .with_writer(writer.clone());
    if tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .try_init()
        .is_ok()
    {
        let _ = LEVEL.set(handle);
    }
    Ok(writer)
}

/// Target of events written as their bare message, without time stamp,
/// level or fields: `warn!(target: RAW_TARGET, "{}", escape_controls(..))`.
/// php-fpm's `decorate_workers_output = no` (a child's line as it wrote it).
pub const RAW_TARGET: &str = "fpmd::raw";

/// Target of `error!` events printed as `ALERT` (php-fpm's highest level,
/// which it uses for a configuration it cannot run with). tracing has no
/// level above ERROR, and `log_level = "alert"` filters as `"error"` does.
pub const ALERT_TARGET: &str = "fpmd::alert";

/// php-fpm's name of a level (`zlog.c` `level_names`): tracing ERROR →
/// `ERROR` (or `ALERT` for [`ALERT_TARGET`]), WARN → `WARNING`, INFO →
/// `NOTICE`, DEBUG and TRACE → `DEBUG`.
pub fn level_name(level: &tracing::Level, target: &str) -> &'static str {
    match *level {
        tracing::Level::ERROR if target == ALERT_TARGET => "ALERT",
        tracing::Level::ERROR => "ERROR",
        tracing::Level::WARN => "WARNING",
        tracing::Level::INFO => "NOTICE",
        tracing::Level::DEBUG | tracing::Level::TRACE => "DEBUG",
    }
}

/// The line format: `TIME LEVEL MESSAGE FIELDS` with tracing-subscriber's
/// RFC 3339 time stamp and php-fpm's level names ([`level_name`]); events
/// of [`RAW_TARGET`] as their message alone. Spans are not shown (fpmd
/// opens none).
#[derive(Debug, Default, Clone, Copy)]
pub struct PhpFpmFormat {
    timer: tracing_subscriber::fmt::time::SystemTime,
    /// For tests: this format and debug flag instead of the global ones.
    fixed: Option<(LogFormat, bool)>,
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for PhpFpmFormat
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        use tracing_subscriber::fmt::time::FormatTime;
        let meta = event.metadata();
        if meta.target() == RAW_TARGET {
            let format = self.fixed.map_or_else(current_format, |(f, _)| f);
            let mut message = MessageOnly {
                writer: writer.by_ref(),
                result: Ok(()),
                escape: format == LogFormat::Fpmd,
            };
            event.record(&mut message);
            message.result?;
            return writeln!(writer);
        }
        let (format, debug) = self.fixed.unwrap_or_else(|| {
            (
                current_format(),
                DEBUG.load(std::sync::atomic::Ordering::Relaxed),
            )
        });
        if format == LogFormat::PhpFpm {
            return php_fpm_line(&mut writer, event, debug);
        }
        if meta.fields().field(PHP_FPM_ONLY).is_some() {
            return Ok(());
        }
        if self.timer.format_time(&mut writer).is_err() {
            writer.write_str("<unknown time>")?;
        }
        write!(writer, " {:>7} ", level_name(meta.level(), meta.target()))?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// php-fpm's time stamp (`zlog_print_time` without microseconds), local
/// time: `05-Dec-2026 00:06:31`, for its log lines and slowlog entries.
pub fn php_fpm_time(now: &chrono::DateTime<chrono::Local>) -> impl fmt::Display + '_ {
    now.format("%d-%b-%Y %H:%M:%S")
}

/// A line as php-fpm's `zlog` writes it before its log is open (to
/// stderr): `[05-Dec-2026 00:06:31] LEVEL: text`, local time.
pub fn php_fpm_stderr_line(level: &str, text: &str) -> String {
    format!("[{}] {level}: {text}", php_fpm_time(&chrono::Local::now()))
}

/// One line in php-fpm's form (see the module's documentation).
fn php_fpm_line(
    w: &mut tracing_subscriber::fmt::format::Writer<'_>,
    event: &tracing::Event<'_>,
    debug: bool,
) -> fmt::Result {
    let meta = event.metadata();
    let now = chrono::Local::now();
    write!(w, "[{}", php_fpm_time(&now))?;
    if debug {
        write!(w, ".{:06}", now.timestamp_subsec_micros())?;
    }
    let level = level_name(meta.level(), meta.target());
    if debug {
        write!(
            w,
            "] {level}: pid {}, {}(), line {}: ",
            std::process::id(),
            meta.module_path().unwrap_or("fpmd"),
            meta.line().unwrap_or(0)
        )?;
    } else {
        write!(w, "] {level}: ")?;
    }
    let mut v = PhpFpmFields::default();
    event.record(&mut v);
    let (text, others) = match v.php_fpm {
        Some(words) => (words, String::new()),
        None => (v.message, v.others),
    };
    if let Some(pool) = v.pool.filter(|_| !text.starts_with("[pool ")) {
        write!(w, "[pool {pool}] ")?;
    }
    w.write_str(&text)?;
    w.write_str(&others)?;
    writeln!(w)
}

/// The fields of an event, for [`php_fpm_line`]: escaped as
/// [`EscapingFields`] escapes them.
#[derive(Default)]
struct PhpFpmFields {
    message: String,
    php_fpm: Option<String>,
    pool: Option<String>,
    /// ` name=value` of the other fields but `pid`.
    others: String,
}

impl tracing::field::Visit for PhpFpmFields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        let escaped = |quotes: bool| {
            let mut s = String::new();
            let _ = write!(
                Escaping {
                    inner: &mut s,
                    quotes
                },
                "{value:?}"
            );
            s
        };
        match field.name() {
            "message" => self.message = escaped(false),
            PHP_FPM_FIELD => self.php_fpm = Some(escaped(false)),
            "pool" => self.pool = Some(escaped(true)),
            "pid" => {}
            name => {
                let _ = write!(
                    self.others,
                    " {}={}",
                    name.trim_start_matches("r#"),
                    escaped(true)
                );
            }
        }
    }
}

/// Writes the `message` field only (for [`RAW_TARGET`]), control
/// characters escaped in fpmd's format; as it is in php-fpm's (php-fpm
/// writes a child's undecorated output byte for byte).
struct MessageOnly<'a> {
    writer: tracing_subscriber::fmt::format::Writer<'a>,
    result: fmt::Result,
    escape: bool,
}

impl tracing::field::Visit for MessageOnly<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if field.name() == "message" && self.result.is_ok() && !self.escape {
            self.result = write!(self.writer, "{value:?}");
        } else if field.name() == "message" && self.result.is_ok() {
            self.result = write!(
                Escaping {
                    inner: &mut self.writer,
                    quotes: false
                },
                "{value:?}"
            );
        }
    }
}

/// The field format: the message first as the macros put it, with control
/// characters escaped (a message never spans two lines nor carries a
/// terminal escape); then ` name=value` per field, the value escaped with
/// [`escape`]'s rules (quotes and backslashes too): URIs, script names and
/// peers come from clients.
#[derive(Debug, Default, Clone, Copy)]
pub struct EscapingFields;

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for EscapingFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> fmt::Result {
        let mut v = FieldVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut v);
        v.result
    }
}

struct FieldVisitor<'a> {
    writer: tracing_subscriber::fmt::format::Writer<'a>,
    first: bool,
    result: fmt::Result,
}

impl tracing::field::Visit for FieldVisitor<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if self.result.is_err() || field.name() == PHP_FPM_FIELD {
            return;
        }
        let sep = if self.first { "" } else { " " };
        self.first = false;
        self.result = match field.name() {
            "message" => self.writer.write_str(sep).and_then(|()| {
                write!(
                    Escaping {
                        inner: &mut self.writer,
                        quotes: false
                    },
                    "{value:?}"
                )
            }),
            name => write!(self.writer, "{sep}{}=", name.trim_start_matches("r#")).and_then(|()| {
                write!(
                    Escaping {
                        inner: &mut self.writer,
                        quotes: true
                    },
                    "{value:?}"
                )
            }),
        };
    }
}

/// A `fmt::Write` that escapes what goes through it (see [`escape`]).
struct Escaping<'a, W: fmt::Write> {
    inner: &'a mut W,
    /// Escape `"` and `\` too.
    quotes: bool,
}

impl<W: fmt::Write> fmt::Write for Escaping<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        write_escaped(self.inner, s, self.quotes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Collects what a subscriber with fpmd's format writes.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn capture(f: impl FnOnce()) -> String {
        capture_as(PhpFpmFormat::default(), f)
    }

    fn capture_as(format: PhpFpmFormat, f: impl FnOnce()) -> String {
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::level_filters::LevelFilter::DEBUG)
            .with_ansi(false)
            .event_format(format)
            .fmt_fields(EscapingFields)
            .with_writer(move || out.clone())
            .finish();
        tracing::subscriber::with_default(sub, f);
        let bytes = buf.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn php_fpm_level_names_and_time_stamp() {
        let out = capture(|| {
            tracing::error!("e");
            tracing::error!(target: ALERT_TARGET, "a");
            tracing::warn!("w");
            tracing::info!(pool = "www", pid = 12, "n");
            tracing::debug!("d");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5, "{out}");
        for (line, level, rest) in [
            (lines[0], "ERROR", "e"),
            (lines[1], "ALERT", "a"),
            (lines[2], "WARNING", "w"),
            (lines[3], "NOTICE", "n pool=www pid=12"),
            (lines[4], "DEBUG", "d"),
        ] {
            let mut words = line.split_whitespace();
            let time = words.next().unwrap();
            assert!(humantime::parse_rfc3339(time).is_ok(), "{line}");
            assert_eq!(words.next(), Some(level), "{line}");
            assert!(line.ends_with(&format!("{level} {rest}")), "{line}");
        }
    }

    #[test]
    fn messages_and_fields_are_escaped_raw_lines_bare() {
        let uri = "/x\n2026-01-01T00:00:00Z  NOTICE forged \"q\"";
        let out = capture(|| {
            tracing::warn!(uri = %uri, "slow \x1b[2J \"{}\"", "m");
            tracing::warn!(target: RAW_TARGET, "{}", "{\"json\":1}");
            tracing::warn!(target: RAW_TARGET, "a\nb");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(
            lines[0].ends_with(
                r#"WARNING slow \x1b[2J "m" uri=/x\n2026-01-01T00:00:00Z  NOTICE forged \"q\""#
            ),
            "{}",
            lines[0]
        );
        assert_eq!(lines[1], r#"{"json":1}"#);
        assert_eq!(lines[2], r"a\nb");
    }

    /// `log_format = "php-fpm"`: zlog.c's time stamp and `LEVEL: `, the
    /// event's php-fpm wording, `[pool NAME] ` from the field, no pid, the
    /// other fields kept where there is no php-fpm wording; with debug,
    /// microseconds and where it was logged. The fpmd format never shows
    /// the php-fpm wording.
    #[test]
    fn php_fpm_lines() {
        let php_fpm = PhpFpmFormat {
            fixed: Some((LogFormat::PhpFpm, false)),
            ..Default::default()
        };
        let out = capture_as(php_fpm, || {
            tracing::info!(
                php_fpm = "ready to handle connections",
                "fpmd 1 ready (2 pools)"
            );
            tracing::warn!(
                pool = "www",
                pid = 12,
                "child 12 exited on signal 9 (SIGKILL) after 1.000000 seconds from start"
            );
            tracing::warn!("[pool www] child 12 said into stderr: \"x\"");
            tracing::error!(pool = "www", uri = "/a\nb", "cannot");
            tracing::error!(target: ALERT_TARGET, "a");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5, "{out}");
        let re = |l: &str| {
            let b = l.as_bytes();
            // [01-Dec-2026 19:00:00]
            b[0] == b'['
                && b[3] == b'-'
                && b[7] == b'-'
                && b[12] == b' '
                && b[21] == b']'
                && b[22] == b' '
        };
        for l in &lines {
            assert!(re(l), "{l}");
        }
        let rest: Vec<&str> = lines.iter().map(|l| &l[23..]).collect();
        assert_eq!(
            rest,
            [
                "NOTICE: ready to handle connections",
                "WARNING: [pool www] child 12 exited on signal 9 (SIGKILL) after 1.000000 seconds from start",
                "WARNING: [pool www] child 12 said into stderr: \"x\"",
                "ERROR: [pool www] cannot uri=/a\\nb",
                "ALERT: a",
            ]
        );
        let debug = PhpFpmFormat {
            fixed: Some((LogFormat::PhpFpm, true)),
            ..Default::default()
        };
        let out = capture_as(debug, || tracing::debug!("d"));
        let line = out.trim_end();
        assert_eq!(line.as_bytes()[21], b'.', "{line}");
        assert!(
            line[28..].starts_with(&format!(
                "] DEBUG: pid {}, fpmd::log::tests(), line ",
                std::process::id()
            )),
            "{line}"
        );
        assert!(line.ends_with(": d"), "{line}");
        let out = capture(|| tracing::info!(php_fpm = "Terminating ...", "fast stop"));
        assert!(out.trim_end().ends_with("NOTICE fast stop"), "{out}");
    }

    /// A line for php-fpm's tools only (`php_fpm_only`) is written under
    /// `log_format = "php-fpm"` and nowhere in fpmd's own format.
    #[test]
    fn php_fpm_only_lines_are_php_fpms() {
        let event = || {
            tracing::info!(
                php_fpm = "using inherited socket fd=7, \"/run/www.sock\"",
                php_fpm_only = true,
                ""
            );
            tracing::info!("after");
        };
        let as_php_fpm = PhpFpmFormat {
            fixed: Some((LogFormat::PhpFpm, false)),
            ..Default::default()
        };
        let out = capture_as(as_php_fpm, event);
        let lines: Vec<&str> = out.lines().map(|l| &l[23..]).collect();
        assert_eq!(
            lines,
            [
                "NOTICE: using inherited socket fd=7, \"/run/www.sock\"",
                "NOTICE: after"
            ]
        );
        let as_fpmd = PhpFpmFormat {
            fixed: Some((LogFormat::Fpmd, false)),
            ..Default::default()
        };
        let out = capture_as(as_fpmd, event);
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.trim_end().ends_with("NOTICE after"), "{out}");
    }
}
