//! fpmd's own log (php-fpm's `error_log`): tracing to stderr or to a file
//! that SIGUSR1 reopens (for logrotate).
//!
//! Owns: the tracing subscriber and the log file handle. Must not touch
//! anything else.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::MakeWriter;

use crate::config::{LogLevel, LogTarget};

/// Where log lines go; cheap to clone, reopenable.
#[derive(Clone)]
pub struct LogWriter {
    file: Option<Arc<(PathBuf, Mutex<File>)>>,
}

impl LogWriter {
    /// Reopens the log file (after logrotate moved it). No-op for stderr.
    /// Errors: the file cannot be opened; the old one stays in use.
    pub fn reopen(&self) -> io::Result<()> {
        if let Some(f) = &self.file {
            let new = open_append(&f.0)?;
            *f.1.lock().unwrap() = new;
        }
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// A handle that writes one formatted event.
pub enum LogSink<'a> {
    Stderr(io::Stderr),
    File(std::sync::MutexGuard<'a, File>),
}

impl Write for LogSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            LogSink::Stderr(s) => s.write(buf),
            LogSink::File(f) => f.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            LogSink::Stderr(s) => s.flush(),
            LogSink::File(f) => f.flush(),
        }
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = LogSink<'a>;
    fn make_writer(&'a self) -> Self::Writer {
        match &self.file {
            None => LogSink::Stderr(io::stderr()),
            Some(f) => LogSink::File(f.1.lock().unwrap()),
        }
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

/// Installs the global subscriber. Errors: the log file cannot be opened.
pub fn init(target: &LogTarget, level: &LogLevel) -> io::Result<LogWriter> {
    let writer = match target {
        LogTarget::Stderr => LogWriter { file: None },
        LogTarget::File(p) => LogWriter {
            file: Some(Arc::new((p.clone(), Mutex::new(open_append(p)?)))),
        },
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level_filter(level))
        .with_target(false)
        .with_ansi(false)
        .with_writer(writer.clone())
        .try_init();
    Ok(writer)
}
