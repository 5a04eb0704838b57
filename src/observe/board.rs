//! What `fpmd status` reads: the daemon's phase and its pools, shared
//! between the daemon (which keeps it up to date) and the control socket's
//! task (which answers `status [POOL]` from it, also while a reload runs).
//!
//! Owns: the JSON document of the control socket's `status`. Must not
//! touch: the pools (it only samples them) or what the daemon decides.
//!
//! The document: `{"fpmd": {...}, "pools": [...]}`. `fpmd` holds `pid`,
//! `version`, `phase` (`ready`, `reloading`, `upgrading`, `stopping`),
//! `start time` (epoch seconds), `start since` (seconds) and `config` (the
//! main configuration file). Each pool is php-fpm's `?json&full` object
//! (see [`super::status`]) plus fpmd's `generation` (the current one) and
//! `max children` (`pm.max_children`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::control::socket::Answer;
use crate::pool::{Pool, PoolStatus};

/// What the daemon is doing, as `fpmd status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Serving with the configuration in force.
    Ready,
    /// Reading and applying a new configuration.
    Reloading,
    /// Starting the fpmd binary on disk to hand the sockets over.
    Upgrading,
    /// No new connections; in-flight requests finish, then fpmd exits.
    Stopping,
}

impl Phase {
    /// The phase's name in the status document.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Ready => "ready",
            Phase::Reloading => "reloading",
            Phase::Upgrading => "upgrading",
            Phase::Stopping => "stopping",
        }
    }
}

/// The daemon's own facts in the status document.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonInfo {
    pub pid: u32,
    pub version: &'static str,
    pub phase: Phase,
    pub start_time: SystemTime,
    /// The main configuration file.
    pub config: PathBuf,
}

/// The shared board: the daemon's phase and the pools it serves.
pub struct Board {
    inner: Mutex<Inner>,
}

struct Inner {
    info: DaemonInfo,
    pools: Vec<Arc<Pool>>,
}

impl Board {
    /// A board for this process, started now, in phase `Ready` with no pool.
    pub fn new(config: PathBuf) -> Arc<Board> {
        Arc::new(Board {
            inner: Mutex::new(Inner {
                info: DaemonInfo {
                    pid: std::process::id(),
                    version: env!("CARGO_PKG_VERSION"),
                    phase: Phase::Ready,
                    start_time: SystemTime::now(),
                    config,
                },
                pools: Vec::new(),
            }),
        })
    }

    pub fn set_phase(&self, phase: Phase) {
        self.inner.lock().unwrap().info.phase = phase;
    }

    /// The pools being served now, in the order `status` lists them.
    pub fn set_pools(&self, pools: impl IntoIterator<Item = Arc<Pool>>) {
        self.inner.lock().unwrap().pools = pools.into_iter().collect();
    }

    /// The answer to `status` (every pool) or `status POOL`: the JSON
    /// document, or an error naming the known pools.
    pub fn answer(&self, pool: Option<&str>) -> Answer {
        let (info, pools) = {
            let inner = self.inner.lock().unwrap();
            (inner.info.clone(), inner.pools.clone())
        };
        let chosen: Vec<&Arc<Pool>> = match pool {
            None => pools.iter().collect(),
            Some(name) => {
                let found: Vec<_> = pools.iter().filter(|p| p.name() == name).collect();
                if found.is_empty() {
                    let known: Vec<&str> = pools.iter().map(|p| p.name()).collect();
                    return Answer::Error(unknown_pool(name, &known));
                }
                found
            }
        };
        let samples: Vec<PoolStatus> = chosen.iter().map(|p| p.status(true)).collect();
        Answer::Ok(document(&info, &samples, SystemTime::now()).to_string())
    }
}

/// The error for `status NAME` when no pool has that name.
fn unknown_pool(name: &str, known: &[&str]) -> String {
    if known.is_empty() {
        format!("no pool named '{name}': fpmd serves no pool now")
    } else {
        format!(
            "no pool named '{name}'; the pools are: {}",
            known.join(", ")
        )
    }
}

fn epoch(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The status document for `info` and the pool samples, taken at `now`.
pub fn document(info: &DaemonInfo, pools: &[PoolStatus], now: SystemTime) -> serde_json::Value {
    let pools: Vec<serde_json::Value> = pools
        .iter()
        .map(|s| {
            let mut o = super::status::json_object(s, true, now);
            o.insert("generation".into(), s.generation.into());
            o.insert("max children".into(), s.max_children.into());
            serde_json::Value::Object(o)
        })
        .collect();
    serde_json::json!({
        "fpmd": {
            "pid": info.pid,
            "version": info.version,
            "phase": info.phase.as_str(),
            "start time": epoch(info.start_time),
            "start since": epoch(now).saturating_sub(epoch(info.start_time)),
            "config": info.config.display().to_string(),
        },
        "pools": pools,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn document_has_the_daemon_and_every_pool_with_its_children() {
        let start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let info = DaemonInfo {
            pid: 7,
            version: "9.9.9",
            phase: Phase::Reloading,
            start_time: start,
            config: "/etc/fpmd/fpmd.toml".into(),
        };
        let mut api = super::super::status::tests::sample();
        api.pool = "api".into();
        api.processes.clear();
        let pools = [super::super::status::tests::sample(), api];
        let d = document(&info, &pools, start + Duration::from_secs(65));
        assert_eq!(d["fpmd"]["pid"], 7);
        assert_eq!(d["fpmd"]["version"], "9.9.9");
        assert_eq!(d["fpmd"]["phase"], "reloading");
        assert_eq!(d["fpmd"]["start since"], 65);
        assert_eq!(d["fpmd"]["config"], "/etc/fpmd/fpmd.toml");
        assert_eq!(d["pools"][0]["pool"], "www");
        assert_eq!(d["pools"][0]["process manager"], "static");
        assert_eq!(d["pools"][0]["max children"], 4);
        assert_eq!(d["pools"][0]["generation"], 1);
        let p = &d["pools"][0]["processes"][0];
        assert_eq!(p["request uri"], "/sleep.php?ms=2500&a=<b>");
        assert_eq!(p["state"], "Running");
        assert_eq!(p["generation"], 1);
        assert_eq!(d["pools"][1]["pool"], "api");
        assert_eq!(d["pools"][1]["processes"], serde_json::json!([]));
    }

    #[test]
    fn an_unknown_pool_names_the_known_ones() {
        assert_eq!(
            unknown_pool("wwww", &["api", "www"]),
            "no pool named 'wwww'; the pools are: api, www"
        );
        assert!(unknown_pool("x", &[]).contains("no pool now"));
    }

    #[test]
    fn a_board_answers_with_its_phase() {
        let b = Board::new("/x/fpmd.toml".into());
        b.set_phase(Phase::Stopping);
        let Answer::Ok(text) = b.answer(None) else {
            panic!("status of an empty board fails");
        };
        let d: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(d["fpmd"]["phase"], "stopping");
        assert_eq!(d["fpmd"]["pid"], std::process::id());
        assert_eq!(d["pools"], serde_json::json!([]));
        assert!(matches!(b.answer(Some("www")), Answer::Error(e) if e.contains("'www'")));
    }
}
