//! What a reload changes: `new.diff(&old)` compares two validated
//! configurations. Pure: it reports what changed and decides nothing. In
//! particular it does not say whether a changed pool needs new children:
//! the process manager decides that by comparing the spawn templates of
//! the two configurations.
//!
//! Three views:
//! - per pool name ([`PoolChange`]): added, removed, unchanged, or changed,
//!   with how its listening socket changed ([`ListenChange`]) and whether
//!   anything else did;
//! - the listening sockets ([`ListenerChanges`]): the set differences of
//!   the old and new addresses (added, kept, removed), as sozu's
//!   `ConfigState::diff` does, since an address can stay while it moves
//!   from one pool to another;
//! - `[global]` ([`GlobalChanges`]): each setting that changed, old and new.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use super::model::{
    Config, Global, Isolation, Listen, ListenAddress, LocalEndpoints, LogLevel, LogTarget,
    PoolConfig, ProcessManager,
};

/// Everything that differs between two configurations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigDiff<'a> {
    /// One entry per pool name of either configuration.
    pub pools: BTreeMap<&'a str, PoolChange<'a>>,
    /// The listening sockets.
    pub listeners: ListenerChanges<'a>,
    /// The `[global]` settings.
    pub global: GlobalChanges<'a>,
}

/// What became of one pool (by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolChange<'a> {
    /// Only in the new configuration.
    Added(&'a PoolConfig),
    /// Only in the old configuration.
    Removed(&'a PoolConfig),
    /// Equal in both (every field, [`PoolConfig::file`] included).
    Unchanged,
    /// In both, and different.
    Changed {
        old: &'a PoolConfig,
        new: &'a PoolConfig,
        /// How `listen.*` changed.
        listen: ListenChange,
        /// Whether any field outside `listen.*` changed (see
        /// [`changed_fields`] for which).
        rest_changed: bool,
    },
}

/// How a pool's `listen.*` changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ListenChange {
    /// Nothing in `listen.*`.
    Same,
    /// Same `listen.address`, but `listen.owner`, `listen.group`,
    /// `listen.mode`, `listen.backlog` or `listen.allowed_clients` changed:
    /// the socket can be kept and re-configured (chown/chmod, `listen(2)`
    /// with the new backlog, the new client list).
    Reapply,
    /// `listen.address` changed: bind the new address before closing the
    /// old one. The new address may be a socket the old configuration
    /// already has (another pool's): [`ListenerChanges`] says which to keep.
    Rebind,
}

/// The listening sockets of the two configurations, each list sorted. One
/// address is never two pools' (validation refuses it), so each address
/// here stands for one socket and the pool that owns it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenerChanges<'a> {
    /// Only in the new configuration: to bind.
    pub added: Vec<&'a ListenAddress>,
    /// In both: the socket is kept (whichever pool owns it now).
    pub kept: Vec<&'a ListenAddress>,
    /// The kept addresses whose settings (owner, group, mode, backlog,
    /// allowed clients) differ, also when the address moved to another
    /// pool: re-apply them on the kept socket.
    pub reapply: Vec<&'a ListenAddress>,
    /// Only in the old configuration: to close (and unlink) once nothing
    /// routes to it any more.
    pub removed: Vec<&'a ListenAddress>,
}

/// A setting that changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change<T> {
    pub old: T,
    pub new: T,
}

/// The `[global]` settings that changed; `None`: unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobalChanges<'a> {
    /// `pid`.
    pub pid: Option<Change<Option<&'a Path>>>,
    /// `error_log` (reopen the log at the new place).
    pub error_log: Option<Change<&'a LogTarget>>,
    /// `log_level`.
    pub log_level: Option<Change<LogLevel>>,
    /// `emergency_restart_threshold` and `emergency_restart_interval`.
    pub emergency_restart: Option<Change<Option<(u32, Duration)>>>,
    /// `process_control_timeout`. Its effect on the pools that inherit it
    /// is already in their `graceful_timeout` (a pool change).
    pub process_control_timeout: Option<Change<Option<Duration>>>,
    /// `control_socket`.
    pub control_socket: Option<Change<&'a Path>>,
    /// `watch`.
    pub watch: Option<Change<bool>>,
    /// `metrics.listen` (the endpoint moves, starts or stops).
    pub metrics_listen: Option<Change<Option<&'a ListenAddress>>>,
}

impl GlobalChanges<'_> {
    /// Nothing in `[global]` changed.
    pub fn is_empty(&self) -> bool {
        *self == GlobalChanges::default()
    }
}

impl ConfigDiff<'_> {
    /// Nothing changed at all: a reload has nothing to do.
    pub fn is_empty(&self) -> bool {
        self.pools.values().all(|c| *c == PoolChange::Unchanged)
            && self.listeners.added.is_empty()
            && self.listeners.removed.is_empty()
            && self.listeners.reapply.is_empty()
            && self.global.is_empty()
    }
}

impl Config {
    /// What changes from `old` (the running configuration) to `self` (the
    /// new one).
    pub fn diff<'a>(&'a self, old: &'a Config) -> ConfigDiff<'a> {
        let mut pools = BTreeMap::new();
        for new_pool in &self.pools {
            let change = match old.pool(&new_pool.name) {
                None => PoolChange::Added(new_pool),
                Some(old_pool) => pool_change(old_pool, new_pool),
            };
            pools.insert(new_pool.name.as_str(), change);
        }
        for old_pool in &old.pools {
            if self.pool(&old_pool.name).is_none() {
                pools.insert(old_pool.name.as_str(), PoolChange::Removed(old_pool));
            }
        }
        ConfigDiff {
            pools,
            listeners: listener_changes(old, self),
            global: global_changes(&old.global, &self.global),
        }
    }
}

/// How one pool present in both configurations changed.
pub fn pool_change<'a>(old: &'a PoolConfig, new: &'a PoolConfig) -> PoolChange<'a> {
    let fields = changed_fields(old, new);
    if fields.is_empty() {
        return PoolChange::Unchanged;
    }
    let listen = if fields.contains(&"listen.address") {
        ListenChange::Rebind
    } else if fields.iter().any(|f| f.starts_with("listen.")) {
        ListenChange::Reapply
    } else {
        ListenChange::Same
    };
    PoolChange::Changed {
        old,
        new,
        listen,
        rest_changed: fields.iter().any(|f| !f.starts_with("listen.")),
    }
}

/// The fields of [`PoolConfig`] that differ, named as the configuration
/// keys where they are one (`listen.mode`, `pm.max_children`,
/// `request_terminate_timeout`, …), else as the field: `file`, `user`
/// (`user` and `group`), `env`, `php_values` (`php_value.*` and
/// `php_flag.*`), `php_admin_values`, and `pm.mode` (with the numbers of
/// its mode: `pm.start_servers`, `pm.process_idle_timeout`, …). For log
/// lines, and the base of [`pool_change`]. `name` is not compared.
pub fn changed_fields(old: &PoolConfig, new: &PoolConfig) -> Vec<&'static str> {
    // Destructured without `..`, so that a new field cannot be forgotten.
    let PoolConfig {
        name: _,
        file,
        user,
        php_cgi,
        listen,
        chdir,
        clear_env,
        env,
        php_values,
        php_admin_values,
        pm,
        request_terminate_timeout,
        request_slowlog_timeout,
        slowlog,
        access_log,
        access_format,
        access_suppress_paths,
        request_queue_timeout,
        catch_workers_output,
        decorate_workers_output,
        fpm_sapi,
        track_finished,
        graceful_timeout,
        cgroup,
        pcntl,
        no_php_ini,
        limit_extensions,
        local,
        isolation,
        php_ini,
    } = old;
    let mut out = Vec::new();
    let mut field = |name: &'static str, changed: bool| {
        if changed {
            out.push(name);
        }
    };
    field("file", *file != new.file);
    field("php_ini", *php_ini != new.php_ini);
    field("user", *user != new.user);
    field("php_cgi", *php_cgi != new.php_cgi);
    for name in listen_fields(listen, &new.listen) {
        field(name, true);
    }
    field("chdir", *chdir != new.chdir);
    field("clear_env", *clear_env != new.clear_env);
    field("env", *env != new.env);
    field("php_values", *php_values != new.php_values);
    field(
        "php_admin_values",
        *php_admin_values != new.php_admin_values,
    );
    let ProcessManager {
        mode,
        max_children,
        max_requests,
        spawn,
        max_memory,
    } = pm;
    field("pm.mode", *mode != new.pm.mode);
    field("pm.max_children", *max_children != new.pm.max_children);
    field("pm.max_requests", *max_requests != new.pm.max_requests);
    field("pm.spawn", *spawn != new.pm.spawn);
    field("pm.max_memory", *max_memory != new.pm.max_memory);
    field(
        "request_terminate_timeout",
        *request_terminate_timeout != new.request_terminate_timeout,
    );
    field(
        "request_slowlog_timeout",
        *request_slowlog_timeout != new.request_slowlog_timeout,
    );
    field("slowlog", *slowlog != new.slowlog);
    field("access.log", *access_log != new.access_log);
    field("access.format", *access_format != new.access_format);
    field(
        "access.suppress_path",
        *access_suppress_paths != new.access_suppress_paths,
    );
    field(
        "request_queue_timeout",
        *request_queue_timeout != new.request_queue_timeout,
    );
    field(
        "catch_workers_output",
        *catch_workers_output != new.catch_workers_output,
    );
    field(
        "decorate_workers_output",
        *decorate_workers_output != new.decorate_workers_output,
    );
    field("fpm_sapi", *fpm_sapi != new.fpm_sapi);
    field(
        "request_terminate_timeout_track_finished",
        *track_finished != new.track_finished,
    );
    field(
        "graceful_timeout",
        *graceful_timeout != new.graceful_timeout,
    );
    let crate::config::CgroupLimits {
        memory_max,
        pids_max,
        cpu_weight,
    } = cgroup;
    field("cgroup.memory_max", *memory_max != new.cgroup.memory_max);
    field("cgroup.pids_max", *pids_max != new.cgroup.pids_max);
    field("cgroup.cpu_weight", *cpu_weight != new.cgroup.cpu_weight);
    field("security.pcntl", *pcntl != new.pcntl);
    field("no_php_ini", *no_php_ini != new.no_php_ini);
    field(
        "security.limit_extensions",
        *limit_extensions != new.limit_extensions,
    );
    let LocalEndpoints {
        status_path,
        ping_path,
        ping_response,
        status_listen,
    } = local;
    field(
        "pm.status_listen",
        *status_listen != new.local.status_listen,
    );
    field("pm.status_path", *status_path != new.local.status_path);
    field("ping.path", *ping_path != new.local.ping_path);
    field("ping.response", *ping_response != new.local.ping_response);
    let Isolation {
        chroot,
        rlimit_files,
        rlimit_core,
        process_priority,
        process_dumpable,
        no_new_privs,
        landlock,
    } = isolation;
    let n = &new.isolation;
    field("chroot", *chroot != n.chroot);
    field("rlimit_files", *rlimit_files != n.rlimit_files);
    field("rlimit_core", *rlimit_core != n.rlimit_core);
    field("process.priority", *process_priority != n.process_priority);
    field("process.dumpable", *process_dumpable != n.process_dumpable);
    field("no_new_privs", *no_new_privs != n.no_new_privs);
    field("landlock", *landlock != n.landlock);
    out
}

/// The `listen.*` keys that differ.
fn listen_fields(old: &Listen, new: &Listen) -> Vec<&'static str> {
    let Listen {
        address,
        owner,
        group,
        mode,
        backlog,
        allowed_clients,
        acl_users,
        acl_groups,
    } = old;
    [
        ("listen.acl_users", *acl_users != new.acl_users),
        ("listen.acl_groups", *acl_groups != new.acl_groups),
        ("listen.address", *address != new.address),
        ("listen.owner", *owner != new.owner),
        ("listen.group", *group != new.group),
        ("listen.mode", *mode != new.mode),
        ("listen.backlog", *backlog != new.backlog),
        (
            "listen.allowed_clients",
            *allowed_clients != new.allowed_clients,
        ),
    ]
    .into_iter()
    .filter_map(|(name, changed)| changed.then_some(name))
    .collect()
}

/// The set differences of the two configurations' listen addresses: each
/// pool's `listen.address` and its `pm.status_listen` (a socket with the
/// pool's `listen.*` settings).
fn listener_changes<'a>(old: &'a Config, new: &'a Config) -> ListenerChanges<'a> {
    let by_address = |c: &'a Config| -> BTreeMap<&'a ListenAddress, &'a Listen> {
        c.pools
            .iter()
            .flat_map(|p| {
                let status = p.local.status_listen.as_ref().map(|a| (a, &p.listen));
                std::iter::once((&p.listen.address, &p.listen)).chain(status)
            })
            .collect()
    };
    let (old, new) = (by_address(old), by_address(new));
    let old_set: BTreeSet<_> = old.keys().copied().collect();
    let new_set: BTreeSet<_> = new.keys().copied().collect();
    let kept: Vec<_> = new_set.intersection(&old_set).copied().collect();
    let reapply = kept
        .iter()
        .copied()
        .filter(|a| {
            // A status address takes its pool's settings but not its
            // address.
            listen_fields(old[a], new[a])
                .iter()
                .any(|f| *f != "listen.address")
        })
        .collect();
    ListenerChanges {
        added: new_set.difference(&old_set).copied().collect(),
        kept,
        reapply,
        removed: old_set.difference(&new_set).copied().collect(),
    }
}

fn change<T: PartialEq>(old: T, new: T) -> Option<Change<T>> {
    (old != new).then_some(Change { old, new })
}

fn global_changes<'a>(old: &'a Global, new: &'a Global) -> GlobalChanges<'a> {
    // Destructured without `..`, so that a new setting cannot be forgotten.
    let Global {
        pid,
        error_log,
        log_level,
        emergency_restart,
        process_control_timeout,
        control_socket,
        watch,
        daemonize: _,        // read at start only
        log_format: _,       // applied by the daemon on every reload
        unused_error_log: _, // created at start only
        log_limit: _,        // applied by the daemon on every reload
        metrics_listen,
        php_ini: _,
        php_ini_scan_dir: _,
        warm_min_available: _, // applied by the daemon on every reload
        warm_timeout: _,       // applied by the daemon on every reload
        sched_batch: _,        // applied by the daemon on every reload
    } = old;
    GlobalChanges {
        pid: change(pid.as_deref(), new.pid.as_deref()),
        error_log: change(error_log, &new.error_log),
        log_level: change(*log_level, new.log_level),
        emergency_restart: change(*emergency_restart, new.emergency_restart),
        process_control_timeout: change(*process_control_timeout, new.process_control_timeout),
        control_socket: change(control_socket.as_path(), new.control_socket.as_path()),
        watch: change(*watch, new.watch),
        metrics_listen: change(metrics_listen.as_ref(), new.metrics_listen.as_ref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testutil::*;
    use crate::config::{Credentials, PmMode, Spawn};

    fn unix(path: &str) -> ListenAddress {
        ListenAddress::Unix(path.into())
    }

    fn tcp(addr: &str) -> ListenAddress {
        ListenAddress::Tcp(addr.parse().unwrap())
    }

    fn base(name: &str) -> PoolConfig {
        PoolConfig {
            name: name.into(),
            file: format!("/etc/fpmd/pool.d/{name}.toml").into(),
            user: Credentials {
                user_name: "www-data".into(),
                uid: 33,
                gid: 33,
                group_name: "www-data".into(),
                groups: vec![33],
                home: Some("/var/www".into()),
            },
            php_cgi: "/usr/bin/php-cgi".into(),
            listen: Listen {
                address: unix(&format!("/tmp/{name}.sock")),
                owner: Some(33),
                group: Some(33),
                mode: 0o660,
                backlog: 511,
                allowed_clients: None,
                acl_users: Vec::new(),
                acl_groups: Vec::new(),
            },
            chdir: "/".into(),
            clear_env: true,
            env: BTreeMap::new(),
            php_values: BTreeMap::new(),
            php_admin_values: BTreeMap::new(),
            pm: ProcessManager {
                mode: PmMode::Static,
                max_children: 4,
                max_requests: 0,
                spawn: Spawn::Prefork,
                max_memory: None,
            },
            request_terminate_timeout: None,
            request_slowlog_timeout: None,
            slowlog: None,
            access_log: None,
            access_format: Default::default(),
            access_suppress_paths: Vec::new(),
            request_queue_timeout: None,
            catch_workers_output: false,
            decorate_workers_output: true,
            fpm_sapi: true,
            track_finished: false,
            graceful_timeout: None,
            cgroup: Default::default(),
            pcntl: false,
            no_php_ini: false,
            limit_extensions: vec![".php".into(), ".phar".into()],
            local: Default::default(),
            isolation: Default::default(),
            php_ini: Default::default(),
        }
    }

    fn global() -> Global {
        Global {
            pid: None,
            error_log: LogTarget::Stderr,
            log_level: LogLevel::Notice,
            unused_error_log: None,
            emergency_restart: None,
            process_control_timeout: None,
            control_socket: "/run/fpmd/fpmd.sock".into(),
            watch: false,
            daemonize: false,
            log_format: Default::default(),
            log_limit: crate::config::DEFAULT_LOG_LIMIT,
            metrics_listen: None,
            php_ini: None,
            php_ini_scan_dir: None,
            warm_min_available: crate::config::MinAvailable::DEFAULT,
            warm_timeout: crate::config::DEFAULT_WARM_TIMEOUT,
            sched_batch: true,
        }
    }

    fn config(pools: Vec<PoolConfig>) -> Config {
        Config {
            file: "/etc/fpmd/fpmd.toml".into(),
            global: global(),
            pools: pools.into_iter().map(std::sync::Arc::new).collect(),
            sources: Default::default(),
            origins: Default::default(),
            options: Default::default(),
            warnings: Vec::new(),
            notices: Vec::new(),
        }
    }

    /// Every field of a pool changed alone, with the name
    /// `changed_fields` gives it (some fields in more than one way).
    type Mutation = fn(&mut PoolConfig);

    fn one_field_changes() -> Vec<(&'static str, Mutation)> {
        vec![
            ("file", |p| p.file = "/etc/fpmd/fpmd.toml".into()),
            ("user", |p| p.user.uid = 34),
            ("user", |p| p.user.user_name = "other".into()),
            ("user", |p| p.user.gid = 34),
            ("user", |p| p.user.group_name = "other".into()),
            ("user", |p| p.user.groups.push(100)),
            ("php_cgi", |p| p.php_cgi = "/usr/bin/php-cgi8.3".into()),
            ("listen.address", |p| {
                p.listen.address = unix("/run/fpmd/other.sock")
            }),
            ("listen.address", |p| {
                p.listen.address = tcp("127.0.0.1:9000")
            }),
            ("listen.owner", |p| p.listen.owner = Some(0)),
            ("listen.owner", |p| p.listen.owner = None),
            ("listen.group", |p| p.listen.group = Some(0)),
            ("listen.mode", |p| p.listen.mode = 0o600),
            ("listen.backlog", |p| p.listen.backlog = 128),
            ("listen.allowed_clients", |p| {
                p.listen.allowed_clients = Some(vec!["127.0.0.1".parse().unwrap()])
            }),
            ("chdir", |p| p.chdir = "/srv".into()),
            ("clear_env", |p| p.clear_env = false),
            ("env", |p| {
                p.env.insert("A".into(), "1".into());
            }),
            ("php_values", |p| {
                p.php_values.insert("memory_limit".into(), "64M".into());
            }),
            ("php_admin_values", |p| {
                p.php_admin_values
                    .insert("memory_limit".into(), "64M".into());
            }),
            ("pm.mode", |p| {
                p.pm.mode = PmMode::Dynamic {
                    start_servers: 2,
                    min_spare_servers: 1,
                    max_spare_servers: 3,
                    max_spawn_rate: 32,
                }
            }),
            ("pm.mode", |p| {
                p.pm.mode = PmMode::Ondemand {
                    process_idle_timeout: Duration::from_secs(10),
                    max_spawn_rate: 32,
                }
            }),
            ("pm.max_children", |p| p.pm.max_children = 8),
            ("pm.max_requests", |p| p.pm.max_requests = 500),
            ("pm.spawn", |p| p.pm.spawn = Spawn::Exec),
            ("pm.max_memory", |p| p.pm.max_memory = Some(64 << 20)),
            ("request_terminate_timeout", |p| {
                p.request_terminate_timeout = Some(Duration::from_secs(30))
            }),
            ("request_slowlog_timeout", |p| {
                p.request_slowlog_timeout = Some(Duration::from_secs(5))
            }),
            ("slowlog", |p| p.slowlog = Some("/var/log/slow.log".into())),
            ("access.log", |p| {
                p.access_log = Some("/var/log/access.log".into())
            }),
            ("access.format", |p| {
                p.access_format = crate::config::access_format::Format::parse("%m %r").unwrap()
            }),
            ("request_queue_timeout", |p| {
                p.request_queue_timeout = Some(Duration::from_secs(1))
            }),
            ("catch_workers_output", |p| p.catch_workers_output = true),
            ("decorate_workers_output", |p| {
                p.decorate_workers_output = false
            }),
            ("fpm_sapi", |p| p.fpm_sapi = false),
            ("request_terminate_timeout_track_finished", |p| {
                p.track_finished = true
            }),
            ("graceful_timeout", |p| {
                p.graceful_timeout = Some(Duration::from_secs(10))
            }),
            ("cgroup.memory_max", |p| {
                p.cgroup.memory_max = Some(256 << 20)
            }),
            ("cgroup.pids_max", |p| p.cgroup.pids_max = Some(64)),
            ("cgroup.cpu_weight", |p| p.cgroup.cpu_weight = Some(200)),
            ("security.pcntl", |p| p.pcntl = true),
            ("no_php_ini", |p| p.no_php_ini = true),
            ("security.limit_extensions", |p| {
                p.limit_extensions = vec![".php".into()]
            }),
            ("chroot", |p| p.isolation.chroot = Some("/srv/a".into())),
            ("rlimit_files", |p| p.isolation.rlimit_files = Some(4096)),
            ("rlimit_core", |p| p.isolation.rlimit_core = Some(u64::MAX)),
            ("process.priority", |p| {
                p.isolation.process_priority = Some(5)
            }),
            ("process.dumpable", |p| p.isolation.process_dumpable = true),
            ("no_new_privs", |p| p.isolation.no_new_privs = true),
            ("landlock", |p| {
                p.isolation.landlock = Some(crate::config::Landlock {
                    read: vec!["/srv".into()],
                    write: vec![],
                })
            }),
        ]
    }

    #[test]
    fn every_field_changed_alone_classifies_right() {
        let all = [
            "file",
            "user",
            "php_cgi",
            "listen.address",
            "listen.owner",
            "listen.group",
            "listen.mode",
            "listen.backlog",
            "listen.allowed_clients",
            "chdir",
            "clear_env",
            "env",
            "php_values",
            "php_admin_values",
            "pm.mode",
            "pm.max_children",
            "pm.max_requests",
            "pm.spawn",
            "pm.max_memory",
            "request_terminate_timeout",
            "request_slowlog_timeout",
            "slowlog",
            "access.log",
            "access.format",
            "request_queue_timeout",
            "catch_workers_output",
            "decorate_workers_output",
            "fpm_sapi",
            "request_terminate_timeout_track_finished",
            "graceful_timeout",
            "cgroup.memory_max",
            "cgroup.pids_max",
            "cgroup.cpu_weight",
            "security.pcntl",
            "no_php_ini",
            "security.limit_extensions",
            "chroot",
            "rlimit_files",
            "rlimit_core",
            "process.priority",
            "process.dumpable",
            "no_new_privs",
            "landlock",
        ];
        let covered: BTreeSet<_> = one_field_changes().iter().map(|(f, _)| *f).collect();
        assert_eq!(covered, all.into_iter().collect(), "one change per field");

        let other = base("b");
        for (field, mutate) in one_field_changes() {
            let old = base("a");
            let mut new = old.clone();
            mutate(&mut new);
            assert_ne!(old, new, "{field}: the mutation changes nothing");
            assert_eq!(changed_fields(&old, &new), [field]);
            let listen = match field {
                "listen.address" => ListenChange::Rebind,
                f if f.starts_with("listen.") => ListenChange::Reapply,
                _ => ListenChange::Same,
            };
            let rest_changed = !field.starts_with("listen.");
            assert_eq!(
                pool_change(&old, &new),
                PoolChange::Changed {
                    old: &old,
                    new: &new,
                    listen,
                    rest_changed
                },
                "{field}"
            );

            // The same change inside a whole configuration.
            let (c_old, c_new) = (
                config(vec![old.clone(), other.clone()]),
                config(vec![new.clone(), other.clone()]),
            );
            let d = c_new.diff(&c_old);
            assert!(!d.is_empty(), "{field}");
            assert!(d.global.is_empty(), "{field}");
            assert_eq!(d.pools.len(), 2);
            assert_eq!(d.pools["b"], PoolChange::Unchanged, "{field}");
            assert!(
                matches!(d.pools["a"], PoolChange::Changed { listen: l, rest_changed: r, .. } if l == listen && r == rest_changed),
                "{field}: {:?}",
                d.pools["a"]
            );
            let l = &d.listeners;
            match listen {
                ListenChange::Rebind => {
                    assert_eq!(l.added, [&new.listen.address], "{field}");
                    assert_eq!(l.removed, [&old.listen.address], "{field}");
                    assert_eq!(l.kept, [&other.listen.address], "{field}");
                    assert!(l.reapply.is_empty(), "{field}");
                }
                ListenChange::Reapply => {
                    assert!(l.added.is_empty() && l.removed.is_empty(), "{field}");
                    assert_eq!(l.kept.len(), 2, "{field}");
                    assert_eq!(l.reapply, [&old.listen.address], "{field}");
                }
                ListenChange::Same => {
                    assert!(l.added.is_empty() && l.removed.is_empty(), "{field}");
                    assert_eq!(l.kept.len(), 2, "{field}");
                    assert!(l.reapply.is_empty(), "{field}");
                }
            }
        }
    }

    #[test]
    fn unchanged_added_removed() {
        let c = config(vec![base("a"), base("b")]);
        let same = c.clone();
        let d = c.diff(&same);
        assert!(d.is_empty());
        assert!(d.pools.values().all(|p| *p == PoolChange::Unchanged));
        assert_eq!(
            d.listeners,
            ListenerChanges {
                kept: vec![&c.pools[0].listen.address, &c.pools[1].listen.address],
                ..ListenerChanges::default()
            }
        );

        let old = config(vec![base("a"), base("b")]);
        let new = config(vec![base("b"), base("c")]);
        let d = new.diff(&old);
        assert_eq!(d.pools.keys().copied().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(d.pools["a"], PoolChange::Removed(&old.pools[0]));
        assert_eq!(d.pools["b"], PoolChange::Unchanged);
        assert_eq!(d.pools["c"], PoolChange::Added(&new.pools[1]));
        assert_eq!(d.listeners.added, [&unix("/tmp/c.sock")]);
        assert_eq!(d.listeners.kept, [&unix("/tmp/b.sock")]);
        assert_eq!(d.listeners.removed, [&unix("/tmp/a.sock")]);
        assert!(!d.is_empty());
        // Order of the pools in the files does not matter.
        let swapped = config(vec![base("b"), base("a")]);
        assert!(swapped.diff(&old).is_empty());
    }

    #[test]
    fn addresses_that_move_between_pools_are_kept() {
        // a and b swap their sockets: both pools rebind, no socket is
        // bound or closed; b's socket gets a's settings and a's b's.
        let old = config(vec![base("a"), base("b")]);
        let mut a = base("a");
        let mut b = base("b");
        a.listen.address = unix("/tmp/b.sock");
        b.listen.address = unix("/tmp/a.sock");
        b.listen.mode = 0o600;
        let new = config(vec![a, b]);
        let d = new.diff(&old);
        for name in ["a", "b"] {
            assert!(
                matches!(
                    d.pools[name],
                    PoolChange::Changed {
                        listen: ListenChange::Rebind,
                        ..
                    }
                ),
                "{name}: {:?}",
                d.pools[name]
            );
        }
        assert!(d.listeners.added.is_empty() && d.listeners.removed.is_empty());
        assert_eq!(d.listeners.kept.len(), 2);
        assert_eq!(d.listeners.reapply, [&unix("/tmp/a.sock")]);

        // a moves to TCP and a new pool c takes a's old socket with the
        // same settings: the socket is kept as it is.
        let mut a = base("a");
        a.listen.address = tcp("127.0.0.1:9000");
        let mut c = base("c");
        c.listen.address = unix("/tmp/a.sock");
        let new = config(vec![a, base("b"), c]);
        let d = new.diff(&old);
        assert_eq!(d.pools["c"], PoolChange::Added(&new.pools[2]));
        assert_eq!(d.listeners.added, [&tcp("127.0.0.1:9000")]);
        assert_eq!(
            d.listeners.kept,
            [&unix("/tmp/a.sock"), &unix("/tmp/b.sock")]
        );
        assert!(d.listeners.reapply.is_empty() && d.listeners.removed.is_empty());
    }

    #[test]
    fn several_changes_at_once() {
        let old = base("a");
        let mut new = base("a");
        new.listen.mode = 0o600;
        new.listen.backlog = 64;
        new.pm.max_children = 8;
        new.env.insert("A".into(), "1".into());
        assert_eq!(
            changed_fields(&old, &new),
            ["listen.mode", "listen.backlog", "env", "pm.max_children"]
        );
        assert_eq!(
            pool_change(&old, &new),
            PoolChange::Changed {
                old: &old,
                new: &new,
                listen: ListenChange::Reapply,
                rest_changed: true
            }
        );
        new.listen.address = tcp("[::1]:9000");
        assert!(matches!(
            pool_change(&old, &new),
            PoolChange::Changed {
                listen: ListenChange::Rebind,
                rest_changed: true,
                ..
            }
        ));
    }

    #[test]
    fn status_listen_addresses_are_listeners_too() {
        let old = config(vec![base("a")]);
        let mut with_status = base("a");
        with_status.local.status_listen = Some(tcp("127.0.0.1:9001"));
        let new = config(vec![with_status.clone()]);
        let d = new.diff(&old);
        assert_eq!(d.listeners.added, [&tcp("127.0.0.1:9001")]);
        assert_eq!(d.listeners.kept, [&unix("/tmp/a.sock")]);
        assert!(d.listeners.reapply.is_empty() && d.listeners.removed.is_empty());
        // Removed again; and the pool's listen.* settings reach its status
        // socket as they reach its main one.
        let back = old.diff(&new);
        assert_eq!(back.listeners.removed, [&tcp("127.0.0.1:9001")]);
        let mut stricter = with_status;
        stricter.listen.mode = 0o600;
        let newer = config(vec![stricter]);
        let d = newer.diff(&new);
        assert_eq!(
            d.listeners.reapply,
            [&unix("/tmp/a.sock"), &tcp("127.0.0.1:9001")]
        );
    }

    #[test]
    fn every_global_setting_changed_alone() {
        type Case = (fn(&mut Global), for<'a> fn(&'a Global) -> GlobalChanges<'a>);
        let cases: Vec<Case> = vec![
            (
                |g| g.pid = Some("/run/fpmd.pid".into()),
                |_| GlobalChanges {
                    pid: Some(Change {
                        old: None,
                        new: Some(Path::new("/run/fpmd.pid")),
                    }),
                    ..Default::default()
                },
            ),
            (
                |g| g.error_log = LogTarget::File("/var/log/fpmd.log".into()),
                |new| GlobalChanges {
                    error_log: Some(Change {
                        old: &LogTarget::Stderr,
                        new: &new.error_log,
                    }),
                    ..Default::default()
                },
            ),
            (
                |g| g.log_level = LogLevel::Debug,
                |_| GlobalChanges {
                    log_level: Some(Change {
                        old: LogLevel::Notice,
                        new: LogLevel::Debug,
                    }),
                    ..Default::default()
                },
            ),
            (
                |g| g.emergency_restart = Some((10, Duration::from_secs(60))),
                |_| GlobalChanges {
                    emergency_restart: Some(Change {
                        old: None,
                        new: Some((10, Duration::from_secs(60))),
                    }),
                    ..Default::default()
                },
            ),
            (
                |g| g.process_control_timeout = Some(Duration::from_secs(10)),
                |_| GlobalChanges {
                    process_control_timeout: Some(Change {
                        old: None,
                        new: Some(Duration::from_secs(10)),
                    }),
                    ..Default::default()
                },
            ),
            (
                |g| g.control_socket = "/run/fpmd/other.sock".into(),
                |_| GlobalChanges {
                    control_socket: Some(Change {
                        old: Path::new("/run/fpmd/fpmd.sock"),
                        new: Path::new("/run/fpmd/other.sock"),
                    }),
                    ..Default::default()
                },
            ),
            (
                |g| g.watch = true,
                |_| GlobalChanges {
                    watch: Some(Change {
                        old: false,
                        new: true,
                    }),
                    ..Default::default()
                },
            ),
            (
                |g| g.metrics_listen = Some(tcp("127.0.0.1:9253")),
                |g| GlobalChanges {
                    metrics_listen: Some(Change {
                        old: None,
                        new: g.metrics_listen.as_ref(),
                    }),
                    ..Default::default()
                },
            ),
        ];
        for (mutate, expected) in cases {
            let old = config(vec![base("a")]);
            let mut new = old.clone();
            mutate(&mut new.global);
            let d = new.diff(&old);
            assert_eq!(d.global, expected(&new.global));
            assert!(!d.global.is_empty() && !d.is_empty());
            assert_eq!(d.pools["a"], PoolChange::Unchanged);
        }
    }

    #[test]
    fn loaded_configurations() {
        // Two configurations in two directories, so every pool's `file`
        // differs (pool a also moved from a.toml to b.toml). The new
        // process_control_timeout reaches pool a, which inherits it, and
        // not pool own, which sets its own graceful_timeout.
        let main = |timeout: &str| {
            format!("[global]\nprocess_control_timeout = {timeout}\ninclude = \"pool.d/*.toml\"\n")
        };
        let own = pool("own", "graceful_timeout = \"1m\"\n");
        let (_d1, old) = load_ok(
            &main("\"10s\""),
            &[("pool.d/a.toml", &pool("a", "")), ("pool.d/own.toml", &own)],
        );
        let (_d2, new) = load_ok(
            &main("\"20s\""),
            &[("pool.d/b.toml", &pool("a", "")), ("pool.d/own.toml", &own)],
        );
        let d = new.diff(&old);
        assert_eq!(
            d.global.process_control_timeout,
            Some(Change {
                old: Some(Duration::from_secs(10)),
                new: Some(Duration::from_secs(20))
            })
        );
        let (
            PoolChange::Changed {
                old: o,
                new: n,
                listen,
                rest_changed,
            },
            PoolChange::Changed {
                old: o2, new: n2, ..
            },
        ) = (d.pools["a"], d.pools["own"])
        else {
            panic!("{d:?}");
        };
        assert_eq!((listen, rest_changed), (ListenChange::Same, true));
        assert_eq!(changed_fields(o, n), ["file", "graceful_timeout"]);
        assert_eq!(changed_fields(o2, n2), ["file"]);
    }
}
