//! The log files fpmd writes besides its own log (every pool's access
//! log): opened once per path, written by one writer thread for all of
//! them, so that no request ever waits on the disk, and reopened on
//! SIGUSR1 (logrotate's `mv` + signal), as php-fpm's `fpm_log_open(1)`.
//!
//! A request appends its line to the file's pending bytes (a short lock,
//! no system call) and wakes the writer thread when they were empty; the
//! writer swaps them out and writes them with one `write(2)`. Lines of one
//! file are written in the order they were appended. When a file has
//! [`MAX_PENDING`] bytes not yet written (the disk is stuck), new lines are
//! dropped and counted instead of growing memory or blocking requests.
//!
//! Owns: the open files by path, their pending lines, the writer thread.
//! Must not touch: what a line says (see [`super::access_log`]).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use tokio::sync::oneshot;
use tracing::{error, warn};

/// Bytes of lines one file may hold before the writer thread has written
/// them; past that, lines are dropped (see [`LogFile::append`]).
pub const MAX_PENDING: usize = 1 << 20;

/// One log file, shared by the requests that write to it and the writer
/// thread.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    pending: Mutex<Pending>,
    /// Only the writer thread writes and reopens it.
    file: Mutex<Out>,
    /// When drops were last reported ([`crate::log::uptime_secs`]).
    reported: AtomicUsize,
}

#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    /// In the writer's list of files to write.
    queued: bool,
    /// Lines dropped since the last report.
    dropped: u64,
}

#[derive(Debug)]
struct Out {
    file: File,
    /// When a write last failed ([`crate::log::uptime_secs`]), so that a
    /// full disk is reported once a second at most.
    failed: Option<usize>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Opens `path` for appending, creating it with mode 0600 as php-fpm does
/// (`S_IRUSR | S_IWUSR`).
fn open_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl LogFile {
    /// The file's path, as configured.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues `line` (which must end with its newline) for the writer
    /// thread. Never blocks on I/O. Returns false when the line was dropped
    /// because [`MAX_PENDING`] bytes are still waiting to be written.
    pub fn append(self: &Arc<Self>, line: &[u8]) -> bool {
        let wake = {
            let mut p = lock(&self.pending);
            if p.bytes.len() + line.len() > MAX_PENDING {
                p.dropped += 1;
                return false;
            }
            p.bytes.extend_from_slice(line);
            !std::mem::replace(&mut p.queued, true)
        };
        if wake {
            let w = writer();
            lock(&w.state).dirty.push(self.clone());
            w.wake.notify_one();
        }
        true
    }

    /// Lines dropped since the last report, at most once a second (for a
    /// warning); `None` when it is too early or nothing was dropped.
    pub fn dropped_report(&self) -> Option<u64> {
        let now = crate::log::uptime_secs();
        if self.reported.swap(now, Ordering::Relaxed) == now {
            return None;
        }
        let n = std::mem::take(&mut lock(&self.pending).dropped);
        (n > 0).then_some(n)
    }

    /// Writes what is pending (on the writer thread); `spare` is the
    /// writer's buffer, swapped with the pending bytes.
    fn write_pending(&self, spare: &mut Vec<u8>) {
        {
            let mut p = lock(&self.pending);
            std::mem::swap(&mut p.bytes, spare);
            p.queued = false;
        }
        if spare.is_empty() {
            return;
        }
        let mut out = lock(&self.file);
        match out.file.write_all(spare) {
            Ok(()) => out.failed = None,
            Err(e) => {
                let now = crate::log::uptime_secs();
                if out.failed != Some(now) {
                    error!(
                        "cannot write to {}: {e}; {} bytes of lines lost",
                        self.path.display(),
                        spare.len()
                    );
                }
                out.failed = Some(now);
            }
        }
        spare.clear();
    }

    /// Opens the path again (logrotate moved the file): lines from now on
    /// go to the new file. Errors: it cannot be opened; the old file stays.
    fn reopen(&self) -> io::Result<()> {
        let file = open_file(&self.path)?;
        lock(&self.file).file = file;
        Ok(())
    }
}

/// The files open now, by path.
fn registry() -> MutexGuard<'static, BTreeMap<PathBuf, Arc<LogFile>>> {
    static FILES: Mutex<BTreeMap<PathBuf, Arc<LogFile>>> = Mutex::new(BTreeMap::new());
    lock(&FILES)
}

/// The log file at `path`: the one already open, else it is opened now
/// (appending; created with mode 0600). Errors: it cannot be opened.
pub fn open(path: &Path) -> io::Result<Arc<LogFile>> {
    let mut files = registry();
    if let Some(f) = files.get(path) {
        return Ok(f.clone());
    }
    let file = open_file(path)?;
    // The thread that will write it (and answer reopen and sync).
    writer();
    let f = Arc::new(LogFile {
        path: path.to_path_buf(),
        pending: Mutex::new(Pending::default()),
        file: Mutex::new(Out { file, failed: None }),
        reported: AtomicUsize::new(usize::MAX),
    });
    files.insert(path.to_path_buf(), f.clone());
    Ok(f)
}

/// The open log file at `path`, if [`open`] opened it and [`retain`] kept
/// it.
pub fn get(path: &Path) -> Option<Arc<LogFile>> {
    registry().get(path).cloned()
}

/// Forgets the files whose path is not in `paths` (a reload removed them):
/// each is closed once the requests still holding it are done, after its
/// last lines are written.
pub fn retain(paths: &[&Path]) {
    retain_where(|p| paths.contains(&p));
}

fn retain_where(keep: impl Fn(&Path) -> bool) {
    registry().retain(|p, _| keep(p));
}

/// What the writer thread did for a [`reopen`] or [`sync`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Done {
    /// Files reopened.
    pub reopened: Vec<PathBuf>,
    /// Files that could not be reopened (they stay open as they were), and
    /// why.
    pub failed: Vec<(PathBuf, String)>,
}

/// Asks the writer thread to write every pending line, then to reopen
/// every open log file. The answer comes once it is done: lines appended
/// after that go to the new files (lines appended meanwhile go to the old
/// or the new one, none is lost).
pub fn reopen() -> oneshot::Receiver<Done> {
    job(true)
}

/// Asks the writer thread to write every pending line (before fpmd exits);
/// answered once they are written.
pub fn sync() -> oneshot::Receiver<Done> {
    job(false)
}

fn job(reopen: bool) -> oneshot::Receiver<Done> {
    let (tx, rx) = oneshot::channel();
    if WRITER.get().is_none() {
        // No file was ever opened: nothing to write or reopen.
        let _ = tx.send(Done::default());
        return rx;
    }
    let w = writer();
    lock(&w.state).jobs.push(Job { reopen, done: tx });
    w.wake.notify_one();
    rx
}

struct Job {
    reopen: bool,
    done: oneshot::Sender<Done>,
}

/// The writer thread's inbox.
struct Writer {
    state: Mutex<Inbox>,
    wake: Condvar,
}

#[derive(Default)]
struct Inbox {
    /// Files with pending bytes.
    dirty: Vec<Arc<LogFile>>,
    jobs: Vec<Job>,
}

static WRITER: OnceLock<Writer> = OnceLock::new();

/// The writer, its thread started on first use.
fn writer() -> &'static Writer {
    let mut first = false;
    let w = WRITER.get_or_init(|| {
        first = true;
        Writer {
            state: Mutex::new(Inbox::default()),
            wake: Condvar::new(),
        }
    });
    if first {
        let started = std::thread::Builder::new()
            .name("fpmd-logs".into())
            .spawn(move || run(w));
        if let Err(e) = started {
            warn!("cannot start the log writer thread: {e}; access log lines will be dropped");
        }
    }
    w
}

fn run(w: &'static Writer) {
    let mut spare = Vec::new();
    let mut dirty = Vec::new();
    let mut jobs = Vec::new();
    loop {
        {
            let mut inbox = lock(&w.state);
            while inbox.dirty.is_empty() && inbox.jobs.is_empty() {
                inbox = w.wake.wait(inbox).unwrap_or_else(|e| e.into_inner());
            }
            std::mem::swap(&mut inbox.dirty, &mut dirty);
            std::mem::swap(&mut inbox.jobs, &mut jobs);
        }
        for f in dirty.drain(..) {
            f.write_pending(&mut spare);
        }
        if jobs.is_empty() {
            continue;
        }
        let files: Vec<Arc<LogFile>> = registry().values().cloned().collect();
        let mut done = Done::default();
        let reopen = jobs.iter().any(|j| j.reopen);
        for f in &files {
            f.write_pending(&mut spare);
            if !reopen {
                continue;
            }
            match f.reopen() {
                Ok(()) => done.reopened.push(f.path.clone()),
                Err(e) => done.failed.push((f.path.clone(), e.to_string())),
            }
        }
        for j in jobs.drain(..) {
            let _ = j.done.send(done.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap_or_default()
    }

    fn wait(rx: oneshot::Receiver<Done>) -> Done {
        rx.blocking_recv().expect("the writer thread answers")
    }

    #[test]
    fn lines_in_order_then_reopened_after_a_move() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let f = open(&path).unwrap();
        assert!(Arc::ptr_eq(&f, &open(&path).unwrap()), "one per path");
        assert!(Arc::ptr_eq(&f, &get(&path).unwrap()));
        for i in 0..100 {
            assert!(f.append(format!("line {i}\n").as_bytes()));
        }
        wait(sync());
        let want: String = (0..100).map(|i| format!("line {i}\n")).collect();
        assert_eq!(read(&path), want);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        let moved = dir.path().join("access.log.1");
        std::fs::rename(&path, &moved).unwrap();
        assert!(f.append(b"before the reopen\n"));
        let done = wait(reopen());
        assert!(done.reopened.contains(&path), "{done:?}");
        assert!(f.append(b"after\n"));
        wait(sync());
        assert_eq!(read(&moved), format!("{want}before the reopen\n"));
        assert_eq!(read(&path), "after\n");

        retain_where(|p| p != path);
        assert!(get(&path).is_none());
        assert!(f.append(b"still held\n"), "a holder may still write");
        drop(f);
    }

    #[test]
    fn a_stuck_file_drops_and_counts_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stuck.log");
        let f = open(&path).unwrap();
        // Hold the file so that the writer cannot write: pending bytes
        // pile up to the bound.
        let held = lock(&f.file);
        let mut line = vec![b'x'; 1023];
        line.push(b'\n');
        let mut dropped = 0;
        for _ in 0..(MAX_PENDING / line.len() + 10) * 2 {
            if !f.append(&line) {
                dropped += 1;
            }
        }
        assert!(dropped >= 10, "{dropped} dropped");
        assert_eq!(f.dropped_report(), Some(dropped));
        assert_eq!(f.dropped_report(), None, "once a second");
        drop(held);
        wait(sync());
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        assert_eq!(len % line.len(), 0, "whole lines only");
        retain_where(|p| p != path);
    }
}
