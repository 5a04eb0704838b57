//! A reload (php-fpm's SIGUSR2), driven by what changed
//! ([`Config::diff`]).
//!
//! A reload is all or nothing up to the point where anything changes: the
//! new configuration is read and validated whole, then every new or
//! changed address is bound or re-configured and every access log opened
//! (a failure closes what this reload bound and changes nothing else).
//! Then, from the diff of the running configuration and the new one: the
//! `[global]` settings that changed apply live; removed pools stop
//! accepting and drain; added pools start; changed pools apply their new
//! settings, all at once (live, or with a new generation of children: see
//! [`crate::pool`]); every address is routed to its pool; the addresses
//! only the old configuration had close, after serving what waits in them.
//!
//! Owns: the order of those steps and the reload's answer (the summary a
//! `fpmd reload` prints). Must not touch: how a pool changes its children.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::{error, info, warn};

use super::start::{bind_all, listen_keys, open_pool_logs, write_pid_file};
use super::stop::remove_pid_file;
use super::Daemon;
use crate::config::{Config, ConfigDiff, GlobalChanges, ListenerChanges, PoolChange};
use crate::control::socket::Answer;
use crate::control::systemd::Notify;
use crate::control::{Intent, Order};
use crate::listen::{ListenKey, Obtained};
use crate::observe::board::Phase;
use crate::pool::{Reconfigured, StopMode};

/// What a reload did, pool by pool: the lines of its answer.
type Summary = Vec<String>;

impl Daemon {
    /// Reloads for `first`, then once more if more reload orders arrived
    /// meanwhile (they are coalesced into that one, and get its answer);
    /// other orders that arrived are queued in order. A stop among them
    /// ends the coalescing.
    pub(super) async fn reload_coalescing(
        &mut self,
        first: Order,
        orders: &mut mpsc::UnboundedReceiver<Order>,
        queued: &mut VecDeque<Order>,
    ) {
        let mut answering = vec![first];
        loop {
            let answer = self.reload().await;
            for o in answering.drain(..) {
                o.answer(answer.clone());
            }
            while let Ok(o) = orders.try_recv() {
                match o.intent {
                    Intent::Reload => answering.push(o),
                    _ => queued.push_back(o),
                }
            }
            let stop_queued = queued
                .iter()
                .any(|o| matches!(o.intent, Intent::GracefulStop | Intent::FastStop));
            if answering.is_empty() || stop_queued {
                for o in answering {
                    o.answer(Answer::Error("fpmd is stopping".into()));
                }
                return;
            }
            info!("reload requests arrived during the reload: reloading once more");
        }
    }

    /// One reload (see the module docs); its answer says what became of
    /// each pool.
    pub(super) async fn reload(&mut self) -> Answer {
        self.sd.send(&[Notify::Reloading]);
        self.board.set_phase(Phase::Reloading);
        info!(
            php_fpm = "Reloading in progress ...",
            "reloading {}",
            self.config.file.display()
        );
        // php-fpm's next lines (it re-execs itself: `reloading: execvp(…)`,
        // then one `using inherited socket` per socket it held), which its
        // tools and tests wait for; fpmd's log says the same in its own
        // words. The sockets are those held now, as php-fpm's are.
        info!(
            php_fpm = %format_args!(
                "reloading: in place, pid {} (fpmd keeps its sockets and the children of unchanged pools), configuration {}",
                std::process::id(),
                self.config.file.display()
            ),
            php_fpm_only = true,
            ""
        );
        // Only in that format: thousands of pools' addresses for nothing
        // otherwise.
        let php_fpm_log = crate::log::current_format() == crate::config::LogFormat::PhpFpm;
        let held: Vec<(i32, String)> = self
            .listeners
            .fds()
            .into_iter()
            .filter(|_| php_fpm_log)
            .map(|(key, fd)| {
                (
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    key.as_str().to_string(),
                )
            })
            .collect();
        let loaded =
            crate::config::load_with(&self.config.file, &self.config.options).map(|mut c| {
                self.activation.apply(&mut c);
                super::to_run(&mut c);
                c
            });
        if let Ok(c) = &loaded {
            crate::config::log_notices(&c.notices);
        }
        let answer = match loaded {
            Ok(new) => self.apply(new).await,
            Err(e) => Answer::ConfigError(e.to_string()),
        };
        self.post_pools();
        self.board.set_phase(Phase::Ready);
        // The set of files may have changed (a pool file added or removed).
        self.rewatch();
        self.publish_pools();
        self.remetrics().await;
        self.move_control_socket();
        if matches!(answer, Answer::Ok(_)) {
            for (fd, address) in &held {
                info!(
                    php_fpm = %format_args!("using inherited socket fd={fd}, \"{address}\""),
                    php_fpm_only = true,
                    ""
                );
            }
            info!(
                php_fpm = %format_args!("fpm is running, pid {}", std::process::id()),
                php_fpm_only = true,
                ""
            );
        }
        match &answer {
            Answer::Ok(summary) => info!(
                php_fpm = "ready to handle connections",
                "reload done: {}",
                summary.replace('\n', "; ")
            ),
            Answer::ConfigError(e) => {
                error!("reload refused, the running configuration stays: {e}")
            }
            Answer::Error(e) => error!("reload failed: {e}"),
        }
        self.sd
            .send(&[Notify::Ready, Notify::Status(self.serving())]);
        answer
    }

    /// Makes `new` the running configuration (see the module docs).
    async fn apply(&mut self, new: Config) -> Answer {
        for w in &new.warnings {
            warn!("{w}");
        }
        // Listeners and access logs first: nothing else changes if one
        // cannot be had.
        let obtained = match self.obtain(&new) {
            Ok(o) => o,
            Err(e) => return Answer::ConfigError(e),
        };
        let old = std::mem::replace(&mut self.config, new);
        let new = self.config.clone();
        let diff = new.diff(&old);
        self.apply_global(&diff.global, &new);
        let mut summary = Summary::new();
        self.remove_pools(&diff, &mut summary).await;
        let failed = self
            .add_and_change_pools(&new, &old, &diff, &mut summary)
            .await;
        self.reroute(&new, &diff.listeners, &obtained).await;
        retain_pool_logs(&self.config);
        drop(diff);
        share_unchanged(&mut self.config, &old);
        if failed {
            Answer::Error(summary.join("\n"))
        } else {
            Answer::Ok(summary.join("\n"))
        }
    }

    /// Binds or re-configures every address of `new` and opens its access
    /// logs. Errors: the first that cannot be had; the sockets and logs
    /// are then as the running configuration has them.
    fn obtain(&mut self, new: &Config) -> Result<Vec<(ListenKey, Obtained)>, String> {
        let got = bind_all(&mut self.listeners, new)
            .map_err(|e| e.to_string())
            .and_then(|o| open_pool_logs(new).map(|()| o));
        if got.is_err() {
            self.listeners.retain(&listen_keys(&self.config));
            // Put the kept sockets' options back.
            let _ = bind_all(&mut self.listeners, &self.config);
            retain_pool_logs(&self.config);
        }
        got
    }

    /// The `[global]` settings that apply live: those that changed
    /// (`changes`), and those applied on every reload (`log_format`,
    /// `warm_min_available`, `warm_timeout`, `sched_batch`).
    fn apply_global(&mut self, changes: &GlobalChanges<'_>, new: &Config) {
        if let Some(c) = changes.log_level {
            crate::log::set_level(&c.new);
        }
        crate::log::set_format(new.global.log_format);
        crate::log::set_limit(new.global.log_limit);
        crate::pool::warm::configure(new.global.warm_min_available);
        crate::pool::warm::configure_timeout(new.global.warm_timeout);
        crate::sys::sched::apply(new.global.sched_batch);
        if let Some(c) = changes.error_log {
            if let Err(e) = self.log.retarget(c.new) {
                error!(
                    "cannot switch the log to {:?}: {e}; it stays where it was",
                    c.new
                );
            }
        }
        if changes.pid.is_some() {
            if let Some(p) = self.pid_file.take() {
                remove_pid_file(&p);
            }
            self.pid_file = write_pid_file(new).unwrap_or_else(|e| {
                error!("{e}");
                None
            });
        }
    }

    /// Removed pools: their addresses stop accepting (what waits in them is
    /// served first), they take no new request, and they stop once their
    /// requests are done.
    async fn remove_pools(&mut self, diff: &ConfigDiff<'_>, summary: &mut Summary) {
        let removed: Vec<_> = diff
            .pools
            .values()
            .filter_map(|c| match c {
                PoolChange::Removed(p) => Some(*p),
                _ => None,
            })
            .collect();
        let closing: Vec<ListenKey> = removed
            .iter()
            .flat_map(|p| p.listeners())
            .map(|(l, _)| ListenKey::new(&l.address))
            .filter(|k| {
                diff.listeners
                    .removed
                    .iter()
                    .any(|a| ListenKey::new(a) == *k)
            })
            .collect();
        self.routes.close(&mut self.listeners, &closing).await;
        for p in removed {
            if let Some(h) = self.pools.remove(&p.name) {
                info!(pool = %p.name, "removed by the reload: no new requests; it stops once its requests are done");
                self.removed
                    .push(tokio::spawn(h.stop(StopMode::Graceful, p.graceful_timeout)));
            }
            summary.push(format!("pool {}: removed", p.name));
        }
    }

    /// Starts the added pools and tells every changed pool its new
    /// settings, all at once; returns whether a changed pool failed to
    /// apply them (it then serves on with its old settings, which stay in
    /// the running configuration, so that the next reload of the same file
    /// tries the change again rather than finding it "unchanged").
    async fn add_and_change_pools(
        &mut self,
        new: &Config,
        old_config: &Config,
        diff: &ConfigDiff<'_>,
        summary: &mut Summary,
    ) -> bool {
        let mut changes = Vec::new();
        for p in &new.pools {
            match diff.pools.get(p.name.as_str()) {
                Some(PoolChange::Added(_)) => {
                    self.start_pool(p);
                    summary.push(format!("pool {}: added", p.name));
                }
                Some(PoolChange::Changed { old, new, .. }) => {
                    let fields = crate::config::changed_fields(old, new);
                    info!(pool = %new.name, "changed: {}", fields.join(", "));
                    changes.push((*old, p.clone()));
                }
                Some(PoolChange::Unchanged | PoolChange::Removed(_)) | None => {
                    summary.push(format!("pool {}: unchanged", p.name))
                }
            }
        }
        let pools = &self.pools;
        let results = futures_util::future::join_all(changes.iter().map(|(old, config)| async {
            match pools.get(&config.name) {
                Some(h) => (*old, h.reconfigure(config.clone()).await),
                None => (*old, Err("the pool is gone".to_string())),
            }
        }))
        .await;
        let mut failed = false;
        for (old, r) in results {
            let name = &old.name;
            match r {
                Ok(Reconfigured::Retuned) => summary.push(format!("pool {name}: children kept")),
                Ok(Reconfigured::Respawned { from, to }) => summary.push(format!(
                    "pool {name}: new children (generation {from} → {to})"
                )),
                Err(e) => {
                    failed = true;
                    summary.push(format!(
                        "pool {name}: FAILED, its old children serve on: {e}"
                    ));
                    let kept = old_config.pools.iter().find(|p| p.name == *name);
                    let i = self.config.pools.iter().position(|p| p.name == *name);
                    if let (Some(kept), Some(i)) = (kept, i) {
                        self.config.pools[i] = kept.clone();
                    }
                }
            }
        }
        failed
    }

    /// Routes every address of `new` to its pool (a socket the reload
    /// bound anew, `obtained`, gets a new accept loop), then closes the
    /// addresses only the old configuration had.
    async fn reroute(
        &mut self,
        new: &Config,
        listeners: &ListenerChanges<'_>,
        obtained: &[(ListenKey, Obtained)],
    ) {
        for (key, o) in obtained {
            if *o == Obtained::Rebound {
                self.routes.unroute(key).await;
            }
        }
        for p in &new.pools {
            self.route(p);
        }
        let closing: Vec<ListenKey> = listeners
            .removed
            .iter()
            .map(|a| ListenKey::new(a))
            .collect();
        self.routes.close(&mut self.listeners, &closing).await;
        for k in self.listeners.retain(&listen_keys(new)) {
            info!("no longer listening on {k}");
        }
    }
}

/// A pool whose settings a reload left as they were keeps running on the
/// `Arc` of `old`, the configuration before it: `config`, the running one,
/// takes that `Arc` back instead of the copy it loaded, so that the pool's
/// settings stay in memory once.
fn share_unchanged(config: &mut Config, old: &Config) {
    for p in &mut config.pools {
        if let Some(o) = old.pools.iter().find(|o| o.name == p.name) {
            if !Arc::ptr_eq(o, p) && **o == **p {
                *p = o.clone();
            }
        }
    }
}

/// Closes the access logs and slowlogs that no pool of `config` writes
/// (once the requests still holding them are done).
fn retain_pool_logs(config: &Config) {
    let paths: Vec<&std::path::Path> = config
        .pools
        .iter()
        .flat_map(|p| [p.access_log.as_deref(), p.slowlog.as_deref()])
        .flatten()
        .collect();
    crate::observe::reopen::retain(&paths);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[a]` and `[b]` on TCP ports of their own; `b_children`: b's
    /// `pm.max_children`.
    fn load(dir: &std::path::Path, b_children: u32) -> Config {
        let user = crate::pool::tests::test_user();
        let pool = |name: &str, port: u16, children: u32| {
            format!("[{name}]\nuser = {user:?}\nlisten.address = \"127.0.0.1:{port}\"\npm.max_children = {children}\nphp_cgi = \"/bin/true\"\n")
        };
        let path = dir.join("fpmd.toml");
        std::fs::write(&path, pool("a", 1, 2) + &pool("b", 2, b_children)).unwrap();
        crate::config::load(&path).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_pool_a_reload_left_as_it_was_keeps_one_copy_of_its_settings() {
        let dir = tempfile::tempdir().unwrap();
        let old = load(dir.path(), 2);
        let mut new = load(dir.path(), 3);
        share_unchanged(&mut new, &old);
        assert!(Arc::ptr_eq(&new.pools[0], &old.pools[0]), "a: unchanged");
        assert!(!Arc::ptr_eq(&new.pools[1], &old.pools[1]), "b: changed");
        assert_eq!(new.pools[1].pm.max_children, 3);
    }
}
