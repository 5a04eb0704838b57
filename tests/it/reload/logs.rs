//! Item 8 and C14: logrotate (mv + SIGUSR1). New lines of the error log
//! and the slowlog go to new files, none to the renamed ones, no process
//! holds a renamed log; after a reload the log still goes where it went
//! (the reopened file; fd 2 for `error_log = "stderr"`).

use super::helpers::*;
use crate::harness::*;
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A stack whose fpmd logs to `error.log` and whose pool writes a slowlog
/// entry for every request over 250 ms.
fn logging_stack() -> (Stack, PathBuf, PathBuf) {
    let dir = TestDir::new();
    let error_log = dir.join("error.log");
    let slowlog = dir.join("slow.log");
    let p = pool("www", "64M").lines(&[
        r#"request_slowlog_timeout = "250ms""#,
        &format!("slowlog = {:?}", slowlog.display().to_string()),
    ]);
    let fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(p).error_log(&error_log));
    let nginx = Nginx::start(&dir, NginxOpts::default().upstream(fpmd.upstream(0)));
    (Stack { nginx, fpmd, dir }, error_log, slowlog)
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", p.display()))
}

/// `n` slow requests (4 at a time), `/sleep.php?ms=400&id=slow-<tag>-<i>`.
fn slow_requests(s: &Stack, tag: &str, n: usize) -> Vec<String> {
    let uris: Vec<String> = (0..n)
        .map(|i| format!("/sleep.php?ms=400&id=slow-{tag}-{i}"))
        .collect();
    for chunk in uris.chunks(4) {
        let running: Vec<_> = chunk.iter().map(|u| (u, get_async(s.url(u)))).collect();
        for (u, h) in running {
            let (r, _) = h.join().unwrap();
            let r = r.unwrap_or_else(|e| panic!("{u}: {e}"));
            assert_eq!(r.status, 200, "{u}: {}", r.text());
        }
    }
    uris
}

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

/// mv error.log and slow.log aside, SIGUSR1; waits until the new error log
/// says it was reopened. Returns the moved paths.
fn rotate(s: &Stack, error_log: &Path, slowlog: &Path) -> (PathBuf, PathBuf) {
    let (e1, s1) = (with_suffix(error_log, ".1"), with_suffix(slowlog, ".1"));
    std::fs::rename(error_log, &e1).unwrap();
    std::fs::rename(slowlog, &s1).unwrap();
    s.fpmd.signal(Signal::SIGUSR1);
    wait_for(
        LONGER,
        "fpmd to log to a new error.log after SIGUSR1",
        || read_lossy(error_log).contains("log file reopened"),
    );
    (e1, s1)
}

#[test]
fn logrotate_mv_and_sigusr1_move_new_lines_to_new_files_without_a_restart() {
    let (s, error_log, slowlog) = logging_stack();
    let before = s.fpmd.wait_workers(4, LONGER);
    let first = slow_requests(&s, "before", 2);
    wait_for(LONGER, "the first slowlog entries", || {
        count(&read_lossy(&slowlog), "slow-before-") == 2
            && count(&read_lossy(&error_log), "slow-before-") == 2
    });
    let (e1, s1) = rotate(&s, &error_log, &slowlog);
    let (e1_text, s1_text) = (read_lossy(&e1), read_lossy(&s1));
    let uris = slow_requests(&s, "after", 10);
    wait_for(LONGER, "10 new slowlog entries and error log lines", || {
        count(&read_lossy(&slowlog), "slow-after-") == 10
            && count(&read_lossy(&error_log), "slow-after-") == 10
    });
    for u in &uris {
        assert_eq!(
            count(&read_lossy(&slowlog), &format!("{u}\n")),
            1,
            "{u} in slow.log"
        );
    }
    assert_eq!(
        read_lossy(&e1),
        e1_text,
        "lines were added to the moved error log"
    );
    assert_eq!(
        read_lossy(&s1),
        s1_text,
        "entries were added to the moved slowlog"
    );
    assert_eq!(count(&s1_text, "slow-before-"), first.len());
    let held = procs::fds_on(&[&e1, &s1]);
    assert!(held.is_empty(), "the moved files are still open: {held:?}");
    // logrotate then deletes them: nothing holds a deleted log either.
    std::fs::remove_file(&e1).unwrap();
    std::fs::remove_file(&s1).unwrap();
    let held = procs::fds_on(&[&e1, &s1]);
    assert!(held.is_empty(), "deleted logs still open: {held:?}");
    assert_eq!(s.fpmd.workers(), before, "children were restarted");
}

/// C14 (the error log and the slowlog; the access log: access_log.rs): 10
/// lines in the new files and 0 in the renamed ones; within 1 s no process
/// holds a renamed log; after a reload the log still goes where it went
/// (the reopened file; fd 2 for `error_log = "stderr"`).
#[test]
fn c14_log_reopen_and_log_targets_after_reload() {
    let (mut s, error_log, slowlog) = logging_stack();
    s.fpmd.wait_workers(4, LONGER);
    slow_requests(&s, "before", 1);
    wait_for(LONGER, "the first slowlog entry", || {
        count(&read_lossy(&slowlog), "slow-before-") == 1
    });
    let t_signal = Instant::now();
    let (e1, s1) = rotate(&s, &error_log, &slowlog);
    let mut held = Vec::new();
    let released = wait_until(Duration::from_secs(1) + SLACK, || {
        held = procs::fds_on(&[&e1, &s1]);
        held.is_empty()
    });
    eprintln!(
        "renamed logs released {:?} after SIGUSR1",
        t_signal.elapsed()
    );
    assert!(released, "within 1 s of SIGUSR1 still open: {held:?}");
    let (e1_len, s1_len) = (read_lossy(&e1).len(), read_lossy(&s1).len());
    slow_requests(&s, "c14", 10);
    wait_for(LONGER, "10 new slowlog entries", || {
        count(&read_lossy(&slowlog), "slow-c14-") == 10
    });
    wait_for(LONGER, "10 new error log lines", || {
        count(&read_lossy(&error_log), "slow-c14-") == 10
    });
    assert_eq!(count(&read_lossy(&s1), "slow-c14-"), 0);
    assert_eq!(count(&read_lossy(&e1), "slow-c14-"), 0);
    // A reload: the log goes on in the reopened file.
    let line = s.fpmd.reload_ok();
    assert!(
        read_lossy(&error_log).contains(&line),
        "the reload was not logged to the reopened error log"
    );
    assert_eq!(
        (read_lossy(&e1).len(), read_lossy(&s1).len()),
        (e1_len, s1_len)
    );
    slow_requests(&s, "c14r", 2);
    wait_for(LONGER, "slowlog entries after the reload", || {
        count(&read_lossy(&slowlog), "slow-c14r-") == 2
    });
    assert!(procs::fds_on(&[&e1, &s1]).is_empty());

    // error_log = "stderr": after a reload and SIGUSR1, lines still go to fd 2.
    let dir = TestDir::new();
    let p = pool("www", "64M").line(r#"request_slowlog_timeout = "250ms""#);
    let mut fpmd = Fpmd::start(&dir, FpmdConfig::new().pool(p.clone()));
    let nginx = Nginx::start(&dir, NginxOpts::default().upstream(fpmd.upstream(0)));
    fpmd.rewrite(&FpmdConfig::new().pool(p.line("php_admin_value.max_execution_time = 60")));
    let line = fpmd.reload_ok();
    fpmd.signal(Signal::SIGUSR1);
    let stderr_log = dir.join("fpmd.log");
    wait_for(LONGER, "SIGUSR1 logged on stderr", || {
        read_lossy(&stderr_log).contains("log file reopened")
    });
    let r = get(&nginx.url("/sleep.php?ms=400&id=on-stderr"));
    assert_eq!(r.status, 200);
    wait_for(
        LONGER,
        "the slow request logged on fd 2 after the reload",
        || read_lossy(&stderr_log).contains("id=on-stderr"),
    );
    assert!(read_lossy(&stderr_log).contains(&line));
}
