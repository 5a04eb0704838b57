//! Good requests through nginx, 3 threads per listener alongside the
//! fuzzers, taking turns at GET hello.php with a query, a POST of a random
//! body to body.php checked by md5, and a PATH_INFO request of
//! server_vars.php: every answer must be right and carry no other
//! client's marker.

use super::rng::{foreign_markers, new_marker, owner, owner_name, short, Rng};
use crate::harness::http::{agent, try_get_with, try_post_with};
use crate::harness::md5_hex;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

pub(super) const GOOD_KINDS: [&str; 3] = ["GET hello.php", "POST body.php", "PATH_INFO"];

#[derive(Default)]
pub(super) struct GoodStats {
    pub(super) done: [AtomicU64; 3],
    /// Microseconds spent, per kind.
    pub(super) micros: [AtomicU64; 3],
    pub(super) failed: AtomicU64,
    pub(super) failures: Mutex<Vec<String>>,
}

pub(super) fn good_loop(
    listener: usize,
    thread: usize,
    base: &str,
    docroot: &Path,
    deadline: Instant,
    seed: u64,
    stats: &GoodStats,
) {
    let mut rng = Rng::new(seed ^ 0x600d ^ ((listener as u64) << 40) ^ ((thread as u64) << 32));
    let a = agent();
    let mut n = 0u64;
    let mut kind = thread % 3;
    while Instant::now() < deadline {
        n += 1;
        let own = owner(listener, 0x80 + thread, n);
        let m = new_marker(&mut rng, own);
        let started = Instant::now();
        let (what, res) = match kind {
            0 => {
                let x = rng.below(1_000_000);
                let url = format!("{base}/hello.php?name={m}&x={x}");
                let want = format!("hello {m}\nQUERY_STRING=name={m}&x={x}\n");
                (url.clone(), try_get_with(&a, &url).map(|r| (r, vec![want])))
            }
            1 => {
                let len = if rng.chance(5) {
                    rng.range(100_000, 1 << 20)
                } else {
                    rng.below(64 << 10)
                };
                let body = rng.bytes(len);
                let url = format!("{base}/body.php?name={m}");
                let want = format!("{len} {}", md5_hex(&body));
                (
                    format!("{url} ({len} bytes)"),
                    try_post_with(&a, &url, &body).map(|r| (r, vec![want])),
                )
            }
            _ => {
                let url = format!("{base}/server_vars.php/p/{m}?name={m}");
                let lines = vec![
                    format!("SCRIPT_FILENAME={}/server_vars.php", docroot.display()),
                    "SCRIPT_NAME=/server_vars.php".to_string(),
                    format!("PATH_INFO=/p/{m}"),
                    format!("REQUEST_URI=/server_vars.php/p/{m}?name={m}"),
                    format!("QUERY_STRING=name={m}"),
                ];
                (url.clone(), try_get_with(&a, &url).map(|r| (r, lines)))
            }
        };
        let verdict = match res {
            Err(e) => Err(format!("transport error: {e}")),
            Ok((r, want)) => {
                let foreign = foreign_markers(&r.body, own);
                let text = r.text();
                if !foreign.is_empty() {
                    Err(format!(
                        "another client's marker {foreign:?}: {:?}",
                        short(&r.body)
                    ))
                } else if r.status != 200 {
                    Err(format!("status {}: {:?}", r.status, short(&r.body)))
                } else if kind < 2 && text != want[0] {
                    Err(format!("expected {:?}, got {:?}", want[0], short(&r.body)))
                } else if kind == 2 && !want.iter().all(|l| text.lines().any(|t| t == l)) {
                    Err(format!(
                        "expected the lines {want:?}, got {:?}",
                        short(&r.body)
                    ))
                } else {
                    Ok(())
                }
            }
        };
        stats.micros[kind].fetch_add(started.elapsed().as_micros() as u64, Relaxed);
        match verdict {
            Ok(()) => {
                stats.done[kind].fetch_add(1, Relaxed);
            }
            Err(e) => {
                stats.failed.fetch_add(1, Relaxed);
                let msg = format!("{}: {}: {e}", owner_name(own), what);
                eprintln!("GOOD REQUEST FAILED: {msg}");
                let mut f = stats.failures.lock().unwrap();
                if f.len() < 20 {
                    f.push(msg);
                }
            }
        }
        kind = (kind + 1) % 3;
    }
}
