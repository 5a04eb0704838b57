//! The process manager's decisions, as pure functions of what the
//! supervisor knows: how many children to start ([`fill`]), which idle
//! children to retire ([`spares_to_retire`], [`excess`]), how long to wait after a crash at start ([`backoff`]), when
//! crashes are an emergency ([`CrashWindow`]), and how periodic passes are
//! spread over their period ([`spread`]). The supervisor gathers the
//! inputs and carries the decisions out; the tables below test every
//! decision without a process.
//!
//! Must not touch: processes, the slot table, time (it is passed in).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::PmMode;

/// A child that dies within this long of its start (or a php-cgi that
/// cannot start) counts towards the back-off ([`backoff`]).
pub const QUICK_DEATH: Duration = Duration::from_secs(1);
/// The first delay of the back-off.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// The longest delay of the back-off.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How long to wait before the next spawn after `quick_deaths` quick deaths
/// in a row (at least 1): 100 ms, doubled per further one, at most 30 s.
pub fn backoff(quick_deaths: u32) -> Duration {
    BACKOFF_FIRST
        .saturating_mul(1 << quick_deaths.saturating_sub(1).min(16))
        .min(BACKOFF_MAX)
}

/// What [`fill`] decides from: the pool's settings and the state of the
/// generation children are started for (its target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FillState {
    pub mode: PmMode,
    pub max_children: usize,
    /// Children of the target generation (exec'd, forked, or ordered from
    /// a php-cgi parent), stopping ones included; a parent is not one.
    pub mine: usize,
    /// Those of them not asked to stop.
    pub active: usize,
    /// No child was started for the target generation yet.
    pub first_round: bool,
    /// The target generation is the one requests go to (not a reload's
    /// generation still starting).
    pub current: bool,
    /// Idle children and waiting requests of the current generation.
    pub idle: usize,
    pub waiting: usize,
}

/// How many children to start for the target generation, whether each is
/// exec'd or forked by the generation's php-cgi parent (php-fpm's process
/// managers, `fpm_children.c` and `fpm_process_ctl.c`):
/// - static: up to `pm.max_children`;
/// - dynamic: `pm.start_servers` at first, then one per waiting request
///   plus what `pm.min_spare_servers` asks for, within `pm.max_children`
///   and `pm.max_spawn_rate` (no 1-second tick: a request that finds no
///   idle child starts one at once);
/// - ondemand: one per waiting request (one for a reload's new generation,
///   so that it can take over), within the same bounds.
pub fn fill(s: &FillState) -> usize {
    let room = |want: usize, rate: u32| {
        want.min(s.max_children.saturating_sub(s.mine))
            .min(rate as usize)
    };
    match s.mode {
        PmMode::Static => s.max_children.saturating_sub(s.mine),
        PmMode::Dynamic {
            start_servers,
            min_spare_servers,
            max_spawn_rate,
            ..
        } => {
            let want = if s.first_round {
                start_servers as usize
            } else {
                s.waiting + (min_spare_servers as usize).saturating_sub(s.idle)
            };
            room(want, max_spawn_rate)
        }
        PmMode::Ondemand { max_spawn_rate, .. } => {
            let want = if !s.current && s.mine == 0 {
                1
            } else {
                s.waiting
            };
            room(want, max_spawn_rate)
        }
    }
}

/// Children a dynamic pool starts for its demand within one second from
/// which it says it is busy, as php-fpm says it once its spawn rate, which
/// doubles each second the spares are short, reaches 8
/// (`fpm_process_ctl.c`: `seems busy …, spawning 8 children`).
pub const BUSY_SPAWNS: usize = 8;

/// The children a dynamic pool started for its demand (not its start)
/// in the current second, to say once per second that it is busy when
/// they reach [`BUSY_SPAWNS`]. Pure: time comes in as `now`.
#[derive(Debug, Default, Clone)]
pub struct BusyWindow {
    since: Option<Instant>,
    spawned: usize,
    said: bool,
}

impl BusyWindow {
    /// `spawns` children are started for demand at `now`: the number
    /// started in this second when it has just reached [`BUSY_SPAWNS`]
    /// (say it, once per second), else `None`.
    pub fn note(&mut self, now: Instant, spawns: usize) -> Option<usize> {
        if spawns == 0 {
            return None;
        }
        if self
            .since
            .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(1))
        {
            *self = BusyWindow {
                since: Some(now),
                ..BusyWindow::default()
            };
        }
        self.spawned += spawns;
        (self.spawned >= BUSY_SPAWNS && !std::mem::replace(&mut self.said, true))
            .then_some(self.spawned)
    }
}

/// Dynamic: how many idle children to retire this tick, `idle` idle ones
/// over `pm.max_spare_servers`: one, as php-fpm retires one per second.
pub fn spares_to_retire(idle: usize, max_spare_servers: u32) -> usize {
    usize::from(idle > max_spare_servers as usize)
}

/// Exec, `pm.max_children` lowered by a reload: how many idle children to
/// retire, `active` ones for `max`.
pub fn excess(active: usize, max: usize) -> usize {
    active.saturating_sub(max)
}

/// `emergency_restart_threshold` unexpected deaths within
/// `emergency_restart_interval`: the window of recent crashes.
#[derive(Debug, Clone)]
pub struct CrashWindow {
    threshold: u32,
    interval: Duration,
    crashes: VecDeque<Instant>,
}

impl CrashWindow {
    pub fn new(threshold: u32, interval: Duration) -> CrashWindow {
        CrashWindow {
            threshold,
            interval,
            crashes: VecDeque::new(),
        }
    }

    /// `emergency_restart_interval`.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// `emergency_restart_threshold`.
    pub fn threshold(&self) -> u32 {
        self.threshold
    }

    /// Notes a crash at `now`. `Some(n)`: `n` crashes within the interval
    /// reached the threshold, and the window starts afresh (the pool's
    /// children are restarted once per emergency).
    pub fn note(&mut self, now: Instant) -> Option<usize> {
        self.crashes.push_back(now);
        while self
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.interval)
        {
            self.crashes.pop_front();
        }
        if self.crashes.len() < self.threshold as usize {
            return None;
        }
        let n = self.crashes.len();
        self.crashes.clear();
        Some(n)
    }
}

/// When, within `period`, the `k`-th periodic pass started runs first (and
/// then every `period`): offset by the fractional part of k × 0.618… (the
/// golden ratio's inverse) of the period, which spreads any number of
/// passes evenly. Hundreds of pools start together; without it their
/// scale-down and health passes (reading `/proc` for every process) would
/// all run in the same few milliseconds of every second, on the threads
/// that accept and proxy requests (200 pools: ~40 ms of CPU a second,
/// measured), and a request arriving then would wait for all of them.
pub fn spread(k: u64, period: Duration) -> Duration {
    period.mul_f64((k as f64 * 0.618_033_988_749_895).fract())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(mode: PmMode) -> FillState {
        FillState {
            mode,
            max_children: 8,
            mine: 0,
            active: 0,
            first_round: false,
            current: true,
            idle: 0,
            waiting: 0,
        }
    }

    const DYNAMIC: PmMode = PmMode::Dynamic {
        start_servers: 2,
        min_spare_servers: 1,
        max_spare_servers: 3,
        max_spawn_rate: 4,
    };
    const ONDEMAND: PmMode = PmMode::Ondemand {
        process_idle_timeout: Duration::from_secs(10),
        max_spawn_rate: 4,
    };

    #[test]
    fn fill_decides_per_mode() {
        // (state, spawns): the same whether children are exec'd or forked.
        let s = |mode| state(mode);
        let table: Vec<(&str, FillState, usize)> = vec![
            ("static: up to max", s(PmMode::Static), 8),
            (
                "static, 5 there",
                FillState {
                    mine: 5,
                    active: 5,
                    ..s(PmMode::Static)
                },
                3,
            ),
            (
                "static, full",
                FillState {
                    mine: 8,
                    active: 8,
                    ..s(PmMode::Static)
                },
                0,
            ),
            (
                "dynamic at start: start_servers",
                FillState {
                    first_round: true,
                    ..s(DYNAMIC)
                },
                2,
            ),
            (
                "dynamic: waiting + min spare",
                FillState {
                    waiting: 2,
                    mine: 2,
                    active: 2,
                    ..s(DYNAMIC)
                },
                3,
            ),
            (
                "dynamic: spare enough",
                FillState {
                    idle: 1,
                    mine: 2,
                    active: 2,
                    ..s(DYNAMIC)
                },
                0,
            ),
            (
                "dynamic: max_spawn_rate",
                FillState {
                    waiting: 10,
                    ..s(DYNAMIC)
                },
                4,
            ),
            (
                "dynamic: max_children",
                FillState {
                    waiting: 3,
                    mine: 7,
                    active: 7,
                    ..s(DYNAMIC)
                },
                1,
            ),
            (
                "ondemand: one per waiting request",
                FillState {
                    waiting: 3,
                    ..s(ONDEMAND)
                },
                3,
            ),
            ("ondemand: nothing waits", s(ONDEMAND), 0),
            (
                "ondemand: a reload's generation takes over",
                FillState {
                    current: false,
                    ..s(ONDEMAND)
                },
                1,
            ),
            (
                "ondemand: rate",
                FillState {
                    waiting: 9,
                    ..s(ONDEMAND)
                },
                4,
            ),
        ];
        for (what, st, spawns) in table {
            assert_eq!(fill(&st), spawns, "{what}");
        }
    }

    #[test]
    fn scale_down_picks() {
        // (idle, max spare) -> retire
        for (idle, max, retire) in [(0, 3, 0), (3, 3, 0), (4, 3, 1), (9, 3, 1)] {
            assert_eq!(
                spares_to_retire(idle, max),
                retire,
                "{idle} idle over {max}"
            );
        }
        for (active, max, n) in [(5, 8, 0), (8, 8, 0), (8, 5, 3)] {
            assert_eq!(excess(active, max), n);
        }
    }

    #[test]
    fn backoff_doubles_from_100ms_to_30s() {
        let ms = |n| backoff(n).as_millis();
        assert_eq!([ms(1), ms(2), ms(3), ms(4)], [100, 200, 400, 800]);
        assert_eq!(ms(9), 25_600);
        assert_eq!(ms(10), 30_000, "capped");
        assert_eq!(ms(40), 30_000, "no overflow");
        assert_eq!(ms(0), 100, "as the first");
    }

    #[test]
    fn crash_window_counts_within_the_interval() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = CrashWindow::new(3, s(10));
        assert_eq!(w.note(t0), None);
        assert_eq!(w.note(t0 + s(5)), None);
        // The first is out of the window by now: still two.
        assert_eq!(w.note(t0 + s(12)), None);
        assert_eq!(w.note(t0 + s(13)), Some(3), "5, 12, 13 within 10 s");
        // A fresh window after an emergency.
        assert_eq!(w.note(t0 + s(14)), None);
        assert_eq!(w.note(t0 + s(15)), None);
        assert_eq!(w.note(t0 + s(16)), Some(3));
    }

    #[test]
    fn spread_fills_the_period_evenly() {
        let p = Duration::from_secs(1);
        let mut at: Vec<u128> = (0..10).map(|k| spread(k, p).as_millis()).collect();
        assert_eq!(at[0], 0);
        assert!(at.iter().all(|ms| *ms < 1000));
        at.sort();
        let gaps: Vec<u128> = at.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| *g >= 30 && *g <= 160), "{at:?}");
    }

    /// Busy is said once a second, when the children started for demand
    /// in that second reach 8, with their number.
    #[test]
    fn busy_is_said_once_a_second_at_eight_spawns() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut w = BusyWindow::default();
        assert_eq!(w.note(at(0), 3), None);
        assert_eq!(w.note(at(100), 0), None);
        assert_eq!(w.note(at(200), 4), None);
        assert_eq!(w.note(at(300), 2), Some(9));
        assert_eq!(w.note(at(400), 5), None, "once in that second");
        assert_eq!(w.note(at(1300), 7), None, "a new second starts from 0");
        assert_eq!(w.note(at(1400), 1), Some(8));
    }
}
