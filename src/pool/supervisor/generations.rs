//! Generations: a pool's configuration epochs. [`Generations`] holds each
//! one the supervisor still has children or slots of, and the target (the
//! newest, which children are spawned for); a reload that changes how
//! children start makes a new target, which becomes current (takes the new
//! requests) once its first child serves, while the older ones drain. The
//! state type has no process in it (tested below); the supervisor's
//! methods that carry a reload out follow it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use nix::sys::signal::Signal;
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::Supervisor;
use crate::config::PoolConfig;
use crate::pool::slots::{GenId, SlotState};
use crate::pool::stats::StopReason;
use crate::pool::Reconfigured;
use crate::process::spec::template;

/// Where a reload waits for its answer.
pub(super) type Done = oneshot::Sender<Result<Reconfigured, String>>;

/// One generation as the supervisor sees it.
pub(super) struct GenState {
    pub config: Arc<PoolConfig>,
    /// Spawns made for it (dynamic: the first round is `start_servers`).
    pub spawned: u64,
    /// The reload waiting for it to become current.
    pub done: Option<Done>,
    /// The generation current when this one was started.
    pub from: GenId,
    /// Draining (no longer current): when `graceful_timeout` runs out.
    pub drain_deadline: Option<tokio::time::Instant>,
}

/// The generations of one pool, by id, and the target.
pub(super) struct Generations {
    gens: BTreeMap<GenId, GenState>,
    target: GenId,
}

impl Generations {
    /// A pool's first generation (1), with `config`.
    pub fn first(config: Arc<PoolConfig>) -> Generations {
        let mut gens = BTreeMap::new();
        gens.insert(
            GenId(1),
            GenState {
                config,
                spawned: 0,
                done: None,
                from: GenId(1),
                drain_deadline: None,
            },
        );
        Generations {
            gens,
            target: GenId(1),
        }
    }

    /// The generation children are spawned for.
    pub fn target(&self) -> GenId {
        self.target
    }

    /// The target's configuration.
    pub fn config(&self) -> Arc<PoolConfig> {
        self.gens[&self.target].config.clone()
    }

    /// `gen`'s configuration, if the supervisor still has it.
    #[cfg(test)]
    pub fn config_of(&self, gen: GenId) -> Option<&Arc<PoolConfig>> {
        self.gens.get(&gen).map(|g| &g.config)
    }

    /// A reload that starts children the same way: the target takes
    /// `config` as it is.
    pub fn retune(&mut self, config: Arc<PoolConfig>) {
        if let Some(g) = self.gens.get_mut(&self.target) {
            g.config = config;
        }
    }

    /// A new target with `config`, started while `from` is current; `done`
    /// hears when it becomes current (or is abandoned). Returns its id.
    pub fn start(&mut self, config: Arc<PoolConfig>, done: Option<Done>, from: GenId) -> GenId {
        let gen = GenId(self.target.0 + 1);
        self.gens.insert(
            gen,
            GenState {
                config,
                spawned: 0,
                done,
                from,
                drain_deadline: None,
            },
        );
        self.target = gen;
        gen
    }

    /// The target, if it is not `current`, is given up: forgotten, and
    /// `current` is the target again. Returns it and its reload.
    pub fn abandon(&mut self, current: GenId) -> Option<(GenId, Option<Done>)> {
        let gen = self.target;
        if gen == current {
            return None;
        }
        self.target = current;
        let done = self.gens.remove(&gen).and_then(|mut g| g.done.take());
        Some((gen, done))
    }

    /// `gen` became current at `now`: the older generations that are not
    /// draining yet drain until `gen`'s `graceful_timeout` (for ever
    /// without one). Returns the generation it replaced and its reload.
    pub fn switched(&mut self, gen: GenId, now: tokio::time::Instant) -> (GenId, Option<Done>) {
        let grace = self.gens.get(&gen).and_then(|g| g.config.graceful_timeout);
        for (id, g) in self.gens.iter_mut() {
            if *id < gen && g.drain_deadline.is_none() {
                g.drain_deadline = grace.map(|d| now + d);
            }
        }
        match self.gens.get_mut(&gen) {
            Some(g) => (g.from, g.done.take()),
            None => (gen, None),
        }
    }

    /// The earliest drain deadline.
    pub fn next_deadline(&self) -> Option<tokio::time::Instant> {
        self.gens.values().filter_map(|g| g.drain_deadline).min()
    }

    /// The generations whose drain deadline has passed at `now` (each
    /// once: the deadline is cleared).
    pub fn take_due(&mut self, now: tokio::time::Instant) -> Vec<GenId> {
        let mut due = Vec::new();
        for (id, g) in self.gens.iter_mut() {
            if g.drain_deadline.is_some_and(|d| d <= now) {
                g.drain_deadline = None;
                due.push(*id);
            }
        }
        due
    }

    /// Forgets `gen` (drained: no slot and no child left). The target
    /// stays.
    pub fn forget(&mut self, gen: GenId) -> bool {
        gen != self.target && self.gens.remove(&gen).is_some()
    }

    /// Answers every reload still waiting with `why` (the pool stops).
    pub fn fail_all(&mut self, why: &str) {
        for g in self.gens.values_mut() {
            if let Some(done) = g.done.take() {
                let _ = done.send(Err(why.to_string()));
            }
        }
    }

    /// Nothing was spawned for `gen` yet (or it is gone).
    pub fn first_round(&self, gen: GenId) -> bool {
        self.gens.get(&gen).is_none_or(|g| g.spawned == 0)
    }

    /// A php-cgi was spawned for `gen`.
    pub fn note_spawn(&mut self, gen: GenId) {
        if let Some(g) = self.gens.get_mut(&gen) {
            g.spawned += 1;
        }
    }
}

impl Supervisor {
    /// Applies a new configuration: live when the children would be started
    /// the same way, else by a new generation (see the module docs of
    /// [`crate::pool`]).
    pub(super) async fn reconfigure(&mut self, config: Arc<PoolConfig>, done: Done) {
        if self.stopping.is_some() {
            let _ = done.send(Err("the pool is stopping".into()));
            return;
        }
        let old = self.config();
        if old.cgroup != config.cgroup {
            self.apply_limits(&config);
        }
        if template(&old) == template(&config) {
            let target = self.gens.target();
            self.gens.retune(config.clone());
            self.pool
                .table
                .lock()
                .unwrap()
                .configs
                .insert(target, config);
            info!(pool = %self.name(), "reloaded: new settings applied to the running children (generation {target})");
            let _ = done.send(Ok(Reconfigured::Retuned));
            self.trim_excess();
            self.fill().await;
            return;
        }
        self.new_generation(config, Some(done)).await;
    }

    /// Starts a new generation with `config`; it becomes current when its
    /// first child is ready, and `done` is answered then.
    pub(super) async fn new_generation(&mut self, config: Arc<PoolConfig>, done: Option<Done>) {
        let from = self.current();
        // A generation still starting is superseded: it never serves.
        if self.gens.target() != from {
            self.abandon_target("superseded by a newer configuration");
        }
        let gen = self.gens.start(config.clone(), done, from);
        info!(pool = %self.name(), "reloading: starting generation {gen} (generation {from} drains)");
        self.pool.table.lock().unwrap().configs.insert(gen, config);
        self.respawn_at = None;
        self.quick_deaths = 0;
        self.fill().await;
    }

    /// The generation being started never becomes current: its children are
    /// stopped, its reload is answered with `why`, and the current one
    /// serves on.
    pub(super) fn abandon_target(&mut self, why: &str) {
        let current = self.current();
        let Some((gen, done)) = self.gens.abandon(current) else {
            return;
        };
        if let Some(done) = done {
            let _ = done.send(Err(why.to_string()));
        }
        self.pool.table.lock().unwrap().configs.remove(&gen);
        self.children.forget_pending_of(gen);
        for leader in self.children.leaders_of(gen) {
            self.stop_child(leader, Signal::SIGTERM, StopReason::Retired);
        }
        warn!(pool = %self.name(), "generation {gen} abandoned ({why}); generation {current} serves on");
    }

    /// A generation became current: the older ones drain, bounded by the
    /// new generation's `graceful_timeout`.
    pub(super) fn switched(&mut self, gen: GenId) {
        let (from, done) = self.gens.switched(gen, tokio::time::Instant::now());
        if let Some(done) = done {
            let _ = done.send(Ok(Reconfigured::Respawned { from, to: gen }));
        }
        info!(pool = %self.name(), "generation {gen} serves; generation {from} drains");
        self.collect_drained();
    }

    /// Forgets generations with no slot and no child left.
    pub(super) fn collect_drained(&mut self) {
        let drained = self.pool.table.lock().unwrap().drained();
        for gen in drained {
            if self.children.has_gen(gen) || !self.gens.forget(gen) {
                continue;
            }
            self.pool.table.lock().unwrap().configs.remove(&gen);
            debug!(pool = %self.name(), "generation {gen} has drained");
        }
    }

    /// `graceful_timeout` ran out for a draining generation: its children
    /// still busy are killed, each logged with what it was running.
    pub(super) fn drain_deadline_passed(&mut self) {
        let due = self.gens.take_due(tokio::time::Instant::now());
        for gen in due {
            let grace = self.config().graceful_timeout.unwrap_or_default();
            let busy: Vec<(i32, Instant, Option<crate::pool::RequestInfo>)> = {
                let t = self.pool.table.lock().unwrap();
                t.busy_of(gen)
                    .map(|(_, s)| match &s.state {
                        SlotState::Busy { since } => {
                            (s.child.pid().as_raw(), *since, Some(s.request.clone()))
                        }
                        _ => (s.child.pid().as_raw(), Instant::now(), None),
                    })
                    .collect()
            };
            for (pid, since, request) in busy {
                let r = request.unwrap_or_default();
                warn!(pool = %self.name(), pid, script = %r.script, uri = %r.uri,
                    "child of generation {gen} still busy {:.1} s after the reload, past graceful_timeout = {:.1} s: killing it",
                    since.elapsed().as_secs_f64(), grace.as_secs_f64());
                self.stop_child(pid, Signal::SIGKILL, StopReason::Retired);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn config(grace: Option<u64>) -> Arc<PoolConfig> {
        let mut c = crate::pool::tests::test_config();
        c.graceful_timeout = grace.map(Duration::from_secs);
        Arc::new(c)
    }

    #[test]
    fn a_reload_starts_a_target_that_switches_or_is_abandoned() {
        let mut g = Generations::first(config(None));
        assert_eq!(g.target(), GenId(1));
        assert!(g.first_round(GenId(1)));
        g.note_spawn(GenId(1));
        assert!(!g.first_round(GenId(1)));

        let (done, mut answer) = oneshot::channel();
        let two = g.start(config(Some(5)), Some(done), GenId(1));
        assert_eq!((two, g.target()), (GenId(2), GenId(2)));
        assert!(g.first_round(two));
        // Abandoned while 1 is current: 1 is the target again, the
        // reload hears why.
        let (gen, done) = g.abandon(GenId(1)).expect("abandoned");
        assert_eq!((gen, g.target()), (GenId(2), GenId(1)));
        done.unwrap().send(Err("php-cgi died".into())).unwrap();
        assert_eq!(answer.try_recv().unwrap(), Err("php-cgi died".into()));
        assert!(
            g.abandon(GenId(1)).is_none(),
            "the current one is never abandoned"
        );
        assert!(g.config_of(GenId(2)).is_none());

        // The next one gets the next id, and switches.
        let three = g.start(config(Some(5)), None, GenId(1));
        assert_eq!(three, GenId(2), "the abandoned id is free again");
        let now = tokio::time::Instant::now();
        assert_eq!(g.switched(three, now).0, GenId(1));
        assert_eq!(g.next_deadline(), Some(now + Duration::from_secs(5)));
        assert!(g.take_due(now).is_empty());
        assert_eq!(g.take_due(now + Duration::from_secs(5)), [GenId(1)]);
        assert_eq!(g.next_deadline(), None, "each deadline once");
        assert!(g.forget(GenId(1)));
        assert!(!g.forget(three), "the target stays");
    }

    #[test]
    fn only_older_generations_drain_and_without_grace_for_ever() {
        let mut g = Generations::first(config(None));
        g.start(config(None), None, GenId(1));
        let three = g.start(config(Some(2)), None, GenId(1));
        let now = tokio::time::Instant::now();
        g.switched(three, now);
        let due = g.take_due(now + Duration::from_secs(2));
        assert_eq!(due, [GenId(1), GenId(2)]);
        // A switch to a generation without graceful_timeout: no deadline.
        let four = g.start(config(None), None, three);
        g.switched(four, now);
        assert_eq!(g.next_deadline(), None);
    }

    #[test]
    fn stopping_answers_every_waiting_reload() {
        let mut g = Generations::first(config(None));
        let (done, mut answer) = oneshot::channel();
        g.start(config(None), Some(done), GenId(1));
        g.fail_all("the pool is stopping");
        assert_eq!(
            answer.try_recv().unwrap(),
            Err("the pool is stopping".into())
        );
    }
}
