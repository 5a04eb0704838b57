//! Warm parents of ondemand pools: how long one is kept, and whether the
//! system's memory allows it.
//!
//! php-fpm's ondemand cold start is a fork of its loaded master; fpmd's,
//! without a php-cgi parent, is an exec of php-cgi with every extension
//! (35–60 ms). So an ondemand pool under `pm.spawn = "prefork"` keeps its
//! parent once its last child is gone (its children are forked on order,
//! [`crate::process::fork_server`]; it holds none of its own) for
//! `warm_timeout`, and while the system's `MemAvailable` stays above the
//! global `warm_min_available`. Below it, pools stop the parents that have
//! no child, and the next request execs one again.
//!
//! Owns: the one process-wide answer to "does memory allow warm parents"
//! (read from `/proc/meminfo` once a second by [`monitor`]) and
//! `warm_timeout`. Must not touch: the pools (each supervisor asks).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::config::MinAvailable;

/// `warm_min_available` as the monitor applies it.
static MIN_AVAILABLE: Mutex<MinAvailable> = Mutex::new(MinAvailable::DEFAULT);
/// Memory is short: no warm parent is kept or started.
static SHORT: AtomicBool = AtomicBool::new(false);

/// How often `/proc/meminfo` is read.
const PERIOD: Duration = Duration::from_secs(1);

/// Whether memory allows ondemand pools to keep a warm parent.
pub fn allowed() -> bool {
    !SHORT.load(Ordering::Relaxed)
}

/// Sets `warm_min_available` (at start and on every reload) and applies it
/// at once.
pub fn configure(min: MinAvailable) {
    *MIN_AVAILABLE.lock().unwrap() = min;
    update();
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`, in bytes.
fn meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
        Some(kib * 1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

/// Whether memory is short: `available` below `min` (of `total`); once
/// short, it stays so until `available` is 1/16 of `total` above the
/// threshold, so that a parent started and stopped does not flap.
fn short(min: MinAvailable, total: u64, available: u64, was_short: bool) -> bool {
    let threshold = match min {
        MinAvailable::Percent(p) => total / 100 * u64::from(p),
        MinAvailable::Bytes(b) => b,
    };
    if was_short {
        available < threshold.saturating_add(total / 16)
    } else {
        available < threshold
    }
}

fn update() {
    let min = *MIN_AVAILABLE.lock().unwrap();
    let Some((total, available)) = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| meminfo(&t))
    else {
        return;
    };
    let was = SHORT.load(Ordering::Relaxed);
    let now = short(min, total, available, was);
    if now != was {
        SHORT.store(now, Ordering::Relaxed);
        let mib = |b: u64| b >> 20;
        if now {
            tracing::warn!("memory is short (MemAvailable {} MiB of {} MiB, below warm_min_available = {min}): ondemand pools stop their idle php-cgi parents", mib(available), mib(total));
        } else {
            tracing::info!("memory allows warm php-cgi parents again (MemAvailable {} MiB of {} MiB, warm_min_available = {min})", mib(available), mib(total));
        }
    }
}

/// Reads `/proc/meminfo` once a [`PERIOD`], for ever.
pub async fn monitor() {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        update();
    }
}

/// `warm_timeout` as the ondemand pools apply it, in milliseconds: how long
/// a pool under `pm.spawn = "prefork"` keeps its php-cgi parent after its
/// last child went away. Default [`crate::config::DEFAULT_WARM_TIMEOUT`].
static TIMEOUT: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(crate::config::DEFAULT_WARM_TIMEOUT.as_millis() as u64);

/// Sets `warm_timeout` (at start and on every reload): how long an ondemand
/// pool under `pm.spawn = "prefork"` keeps its loaded php-cgi parent, with
/// no children, after its last child went away; `0`: no warm parent at all
/// (php-fpm's ondemand). Kept to the millisecond (longer ones saturate).
pub fn configure_timeout(d: Duration) {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    TIMEOUT.store(ms, Ordering::Relaxed);
}

/// `warm_timeout`, to the millisecond: how long an idle ondemand pool under
/// `pm.spawn = "prefork"` keeps its php-cgi parent once its last child went
/// away, so that the next request forks a child (~2 ms) rather than
/// exec'ing php-cgi (~40 ms). [`Duration::ZERO`]: keep none (php-fpm's
/// ondemand: no process once idle).
pub fn timeout() -> Duration {
    Duration::from_millis(TIMEOUT.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_are_bytes() {
        let text = "MemTotal:       24683520 kB\nMemFree:        24577092 kB\nMemAvailable:   24478624 kB\n";
        assert_eq!(meminfo(text), Some((24683520 * 1024, 24478624 * 1024)));
        assert_eq!(meminfo("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn short_has_hysteresis() {
        let g = 1u64 << 30;
        let min = MinAvailable::Percent(25);
        assert!(!short(min, 16 * g, 5 * g, false));
        assert!(short(min, 16 * g, 3 * g, false));
        // 4 GiB is the threshold; back only above 4 + 1 GiB.
        assert!(short(min, 16 * g, 4 * g + g / 2, true));
        assert!(!short(min, 16 * g, 5 * g + 1, true));
        assert!(short(MinAvailable::Bytes(2 * g), 16 * g, g, false));
        assert!(!short(MinAvailable::Bytes(0), 16 * g, 0, false));
        assert!(short(MinAvailable::Percent(100), 16 * g, 15 * g, false));
    }
}
