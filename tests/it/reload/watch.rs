//! Item 7: `watch = true`. An edit of a pool file starts a reload within
//! 1 s, writes beside the configuration do not postpone it, a broken save
//! is refused and changes nothing, and one edit is one reload even when
//! the reload is slow.

use super::helpers::*;
use crate::harness::fpmd::RELOAD_ENDS;
use crate::harness::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Waits until fpmd says it is ready: it installs the configuration
/// watcher just before, so an edit made earlier (when fpmd is slow to
/// start, on a loaded machine) could go unseen. `log` reads its log.
fn wait_watching(log: impl Fn() -> String) {
    wait_for(LONGER, "fpmd ready (its watcher installed)", || {
        log().contains("ready to handle connections")
    });
}

/// `watch = true`: an edit of a pool file (only that file is written, in
/// place) starts a reload within 1 s; a broken save is refused, logged with
/// file and line, and changes nothing; the next good save applies.
/// (fpmd logs to `log/error.log`, out of the watched directories.)
#[test]
fn watch_reloads_an_edited_pool_file_and_ignores_a_broken_save() {
    let dir = TestDir::new();
    // The log where the watcher does not look (not beside fpmd.toml, which
    // is another test's matter), since the test reads it.
    std::fs::create_dir(dir.join("log")).unwrap();
    let error_log = dir.join("log/error.log");
    let cfg = |p: Pool| {
        FpmdConfig::new()
            .global("watch = true")
            .error_log(&error_log)
            .pool(p)
    };
    let fpmd = Fpmd::start(&dir, cfg(pool("www", "64M")));
    let nginx = Nginx::start(&dir, NginxOpts::default().upstream(fpmd.upstream(0)));
    let mut s = Stack { nginx, fpmd, dir };
    let first = s.fpmd.wait_workers(4, LONGER);
    wait_watching(|| read_lossy(&error_log));
    assert_eq!(memory_limit(&s.nginx), "64M");

    let main_before = std::fs::read(s.fpmd.conf()).unwrap();
    let mark = s.fpmd.log_len();
    let edited = SystemTime::now();
    s.fpmd.rewrite(&cfg(pool("www", "96M")));
    assert_eq!(
        std::fs::read(s.fpmd.conf()).unwrap(),
        main_before,
        "the edit touched fpmd.toml"
    );
    let mut started = None;
    let served = wait_memory_limit(&s.nginx, "96M", LONGER);
    for l in s.fpmd.log_lines_since(mark) {
        if l.contains("reloading ") && started.is_none() {
            started = Some(stamp_of(&l));
        }
    }
    let ends: Vec<String> = s
        .fpmd
        .log_lines_since(mark)
        .into_iter()
        .filter(|l| RELOAD_ENDS.iter().any(|e| l.contains(e)))
        .collect();
    let started = started.expect("no reload logged, yet the new value is served");
    let picked_up = started.duration_since(edited).unwrap_or_default();
    eprintln!(
        "edit → reload started after {picked_up:?} (log time), new value served after {served:?}; reloads: {ends:#?}"
    );
    assert!(
        ends.iter().any(|l| l.contains("reload done")),
        "no reload done: {ends:#?}"
    );
    assert!(
        picked_up <= Duration::from_secs(1) + SLACK,
        "the edit was picked up only after {picked_up:?} (bar: 1 s)"
    );

    // A broken save: nothing changes, the log says why. The children to
    // compare with are the new generation's four, once the old ones have
    // drained away (right after "reload done" both may be there).
    let mut before = Vec::new();
    wait_for(
        LONGER,
        "the first generation's children gone, 4 new ones",
        || {
            before = s.fpmd.workers();
            before.len() == 4 && !before.iter().any(|p| first.contains(p))
        },
    );
    let broken = pool("www", "128M").line(r#"request_slowlog_timeout = "2s"#);
    let at = format!(
        "www.toml:{}",
        line_of(&broken.toml(s.dir.path(), &s.dir.tag()), "request_slowlog")
    );
    let mark = s.fpmd.log_len();
    s.fpmd.rewrite(&cfg(broken));
    wait_for(
        LONGER,
        "the broken save refused, naming its file and line",
        || {
            s.fpmd
                .log_lines_since(mark)
                .iter()
                .any(|l| l.contains("reload refused") && l.contains(&at))
        },
    );
    let lines = s.fpmd.log_lines_since(mark);
    eprintln!("broken save: {lines:#?}");
    assert!(
        !lines.iter().any(|l| l.contains("reload done")),
        "the broken save was applied: {lines:#?}"
    );
    assert_eq!(memory_limit(&s.nginx), "96M");
    assert_eq!(s.fpmd.workers(), before, "children changed");
    s.fpmd.assert_running();

    // Fixed again: applied.
    s.fpmd.rewrite(&cfg(pool("www", "128M")));
    let served = wait_memory_limit(&s.nginx, "128M", LONGER);
    eprintln!("fixed file served after {served:?}");
}

/// The reloads fpmd started after log offset `mark`, with their time.
fn reloads_since(fpmd: &Fpmd, mark: usize) -> Vec<String> {
    fpmd.log_lines_since(mark)
        .into_iter()
        .filter(|l| l.contains("NOTICE reloading "))
        .collect()
}

/// `watch = true` with another file beside fpmd.toml written every 20 ms
/// (a log, say): the edit of a pool file still starts a reload within 1 s.
#[test]
fn watch_is_not_postponed_by_writes_beside_the_configuration() {
    let cfg = |p: Pool| FpmdConfig::new().global("watch = true").pool(p);
    let mut s = Stack::start_with(cfg(pool("www", "64M")), NginxOpts::default());
    s.fpmd.wait_workers(4, LONGER);
    wait_watching(|| s.fpmd.log());
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let (stop, path) = (stop.clone(), s.dir.join("busy.log"));
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::File::create(&path).unwrap();
            while !stop.load(Ordering::Relaxed) {
                writeln!(f, "a line of some other program's log").unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let mark = s.fpmd.log_len();
    let edited = SystemTime::now();
    s.fpmd.rewrite(&cfg(pool("www", "96M")));
    // Waits over HTTP: reading fpmd's log (beside fpmd.toml) would be one
    // more writer... of events, at least.
    let served = wait_until(Duration::from_secs(10), || {
        ini(&s.nginx, "memory_limit").is_ok_and(|v| v == "96M")
    });
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    eprintln!("new value served within 10 s: {served}");
    let first = reloads_since(&s.fpmd, mark).first().cloned();
    let first = first.unwrap_or_else(|| {
        panic!(
            "no reload 10 s after the pool file was edited, while busy.log was written beside fpmd.toml; log:\n{}",
            s.fpmd.log_since(mark)
        )
    });
    let after = stamp_of(&first).duration_since(edited).unwrap_or_default();
    eprintln!("reload started {after:?} after the edit: {first}");
    assert!(
        after <= Duration::from_secs(1) + SLACK,
        "the edit was picked up only after {after:?} (bar: 1 s)"
    );
    wait_memory_limit(&s.nginx, "96M", LONGER);
}

/// `watch = true`: one edit is one reload, even when the reload lasts
/// longer than the watcher's debounce (here a new php_cgi that takes 300 ms
/// to start): fpmd reading its own files is no change.
#[test]
fn watch_one_edit_is_one_reload_even_when_the_reload_is_slow() {
    let dir = TestDir::new();
    let slow = slow_php_cgi(&dir);
    let cfg = |p: Pool| FpmdConfig::new().global("watch = true").pool(p);
    let fpmd = Fpmd::start(&dir, cfg(pool("www", "64M")));
    let nginx = Nginx::start(&dir, NginxOpts::default().upstream(fpmd.upstream(0)));
    let mut s = Stack { nginx, fpmd, dir };
    s.fpmd.wait_workers(4, LONGER);
    wait_watching(|| s.fpmd.log());
    let mark = s.fpmd.log_len();
    s.fpmd.rewrite(&cfg(pool("www", "96M").php_cgi(&slow)));
    wait_memory_limit(&s.nginx, "96M", LONGER);
    // Whatever a second reload would need to show up.
    run_for(&mut s.fpmd, Duration::from_secs(2));
    let reloads = reloads_since(&s.fpmd, mark);
    eprintln!("{} reloads for one edit: {reloads:#?}", reloads.len());
    assert_eq!(
        reloads.len(),
        1,
        "one edit, {} reloads; log:\n{}",
        reloads.len(),
        s.fpmd.log_since(mark)
    );
}
