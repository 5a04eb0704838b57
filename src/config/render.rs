//! `fpmd -t`: the effective configuration printed as TOML, every key with
//! its resolved value or default.

use super::model::{
    Config, Global, ListenAddress, LogTarget, MinAvailable, Origins, PmMode, PoolConfig,
};
use super::source::origin_key;
use super::toml::{toml_duration, toml_key, toml_str};

impl Config {
    /// The effective configuration as TOML: every key with its resolved
    /// value or default (what `fpmd -t` prints). Loading the output again
    /// gives the same pools (all in one file).
    pub fn to_toml(&self) -> String {
        self.render(false)
    }

    /// What `fpmd -t` prints: [`to_toml`](Config::to_toml) with, at the end
    /// of each key's line, where its value comes from: `# set in FILE:LINE`
    /// or `# default` (appended to a comment the line has, after `;`), e.g.
    /// `clear_env = true # set in /etc/fpmd/pool.d/www.toml:12` (a php-fpm
    /// pool may be set in several files: each value names its own). Loads
    /// as `to_toml` does: the notes are TOML comments.
    pub fn to_toml_with_origins(&self) -> String {
        self.render(true)
    }

    fn render(&self, origins: bool) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "# fpmd effective configuration, loaded from {}\n\n",
            self.file.display()
        ));
        out.push_str("[global]\n");
        let global_start = out.len();
        match &self.global.pid {
            Some(pid) => out.push_str(&format!("pid = {}\n", toml_str(&pid.to_string_lossy()))),
            None => out.push_str("# pid: not set (no pid file)\n"),
        }
        let error_log = match &self.global.error_log {
            LogTarget::Stderr => "stderr".to_string(),
            LogTarget::File(p) => p.to_string_lossy().into_owned(),
        };
        out.push_str(&format!("error_log = {}\n", toml_str(&error_log)));
        out.push_str(&format!(
            "log_level = {}\n",
            toml_str(self.global.log_level.as_str())
        ));
        match self.global.emergency_restart {
            Some((n, d)) => out.push_str(&format!(
                "emergency_restart_threshold = {n}\nemergency_restart_interval = {}\n",
                toml_str(&humantime::format_duration(d).to_string())
            )),
            None => out.push_str("# emergency_restart_threshold: off\n"),
        }
        match self.global.process_control_timeout {
            Some(d) => out.push_str(&format!(
                "process_control_timeout = {} # default of graceful_timeout\n",
                toml_duration(d)
            )),
            None => out.push_str("# process_control_timeout: none\n"),
        }
        out.push_str(&format!(
            "control_socket = {}\n",
            toml_str(&self.global.control_socket.to_string_lossy())
        ));
        out.push_str(&format!("watch = {}\n", self.global.watch));
        out.push_str(&format!("daemonize = {}\n", self.global.daemonize));
        out.push_str(&format!(
            "log_format = {}\n",
            toml_str(self.global.log_format.as_str())
        ));
        out.push_str(&format!("log_limit = {}\n", self.global.log_limit));
        match &self.global.metrics_listen {
            Some(a) => out.push_str(&format!("metrics.listen = {}\n", toml_str(&a.to_string()))),
            None => out.push_str("# metrics.listen: not set (no metrics endpoint)\n"),
        }
        match &self.global.php_ini {
            Some(p) => out.push_str(&format!("php_ini = {}\n", toml_str(&p.to_string_lossy()))),
            None => out.push_str("# php_ini: php-cgi's own\n"),
        }
        match &self.global.php_ini_scan_dir {
            Some(d) => out.push_str(&format!("php_ini_scan_dir = {}\n", toml_str(d))),
            None => out.push_str("# php_ini_scan_dir: php-cgi's own\n"),
        }
        let warm = self.global.warm_min_available;
        out.push_str(&format!(
            "warm_min_available = {}{}\n",
            match warm {
                MinAvailable::Percent(_) => toml_str(&warm.to_string()),
                MinAvailable::Bytes(_) => warm.to_string(),
            },
            if warm == MinAvailable::DEFAULT {
                " # default"
            } else {
                ""
            }
        ));
        out.push_str(&format!(
            "warm_timeout = {}\n",
            toml_duration(self.global.warm_timeout)
        ));
        out.push_str(&format!("sched_batch = {}\n", self.global.sched_batch));
        if origins {
            let block = out.split_off(global_start);
            let o = &self.options;
            let cli = |key: &str| match key {
                "pid" => o.pid.is_some(),
                "daemonize" => o.daemonize.is_some(),
                "error_log" => o.force_stderr && !self.global.daemonize,
                "php_ini" => o.php_ini.is_some(),
                _ => false,
            };
            out.push_str(&annotate(&block, &self.origins, "", None, &cli));
        }
        for pool in &self.pools {
            out.push('\n');
            let mut block = String::new();
            pool.write_toml(&self.global, &mut block);
            if pool.no_php_ini {
                block.push_str("# no php.ini (php-cgi -n): -n on the command line\n");
            }
            if origins {
                let cli = |key: &str| {
                    self.origins.line(&pool.name, key).is_none()
                        && key.strip_prefix("php_value.").is_some_and(|name| {
                            self.options.php_defines.iter().any(|(n, _)| n == name)
                        })
                };
                block = annotate(&block, &self.origins, &pool.name, Some(&pool.name), &cli);
            }
            out.push_str(&block);
        }
        out
    }
}

/// `block` (one table's `key = value` lines, under the header `[within]`
/// when given) with where each value comes from appended at the end of
/// the line its value ends on (see [`Config::to_toml_with_origins`]);
/// a key no file sets and `cli` names came from the command line. The
/// block is parsed as TOML, so a line inside a multi-line string is never
/// taken for a key.
fn annotate(
    block: &str,
    origins: &Origins,
    table: &str,
    within: Option<&str>,
    cli: &dyn Fn(&str) -> bool,
) -> String {
    type Leaf = (Vec<String>, std::ops::Range<usize>);
    fn leaves(t: &dyn toml_edit::TableLike, segs: &mut Vec<String>, out: &mut Vec<Leaf>) {
        for (key, item) in t.iter() {
            segs.push(key.to_string());
            match item.as_table_like() {
                Some(sub) => leaves(sub, segs, out),
                None => {
                    if let Some(span) = item.span() {
                        out.push((segs.clone(), span));
                    }
                }
            }
            segs.pop();
        }
    }
    let Ok(doc) = toml_edit::ImDocument::parse(block) else {
        return block.to_string();
    };
    let root: &dyn toml_edit::TableLike = match within {
        None => doc.as_table(),
        Some(name) => match doc.get(name).and_then(|i| i.as_table_like()) {
            Some(t) => t,
            None => return block.to_string(),
        },
    };
    let mut found = Vec::new();
    leaves(root, &mut Vec::new(), &mut found);
    // (end of the value's line, note), inserted from the last one back.
    let mut notes: Vec<(usize, String)> = found
        .into_iter()
        .map(|(segs, span)| {
            let eol = block[span.end..]
                .find('\n')
                .map_or(block.len(), |i| span.end + i);
            let has_comment = block[span.end..eol].contains('#');
            let key = origin_key(&segs);
            let origin = match origins.at(table, &key) {
                _ if cli(&key) => "set on the command line".to_string(),
                Some((file, l)) => format!("set in {}:{l}", file.display()),
                None => "default".to_string(),
            };
            (
                eol,
                format!("{}{origin}", if has_comment { "; " } else { " # " }),
            )
        })
        .collect();
    notes.sort_by_key(|(at, _)| *at);
    let mut out = block.to_string();
    for (at, note) in notes.into_iter().rev() {
        out.insert_str(at, &note);
    }
    out
}

impl PoolConfig {
    /// One pool's table as TOML, appended to `out`: a comment naming the
    /// pool and its file, the table's header, then its keys section by
    /// section.
    fn write_toml(&self, global: &Global, out: &mut String) {
        let c = &self.user;
        out.push_str(&format!(
            "# pool {}, defined in {}\n",
            self.name,
            self.file.display()
        ));
        out.push_str(&format!("[{}]\n", toml_key(&self.name)));
        out.push_str(&format!(
            "user = {} # uid {}\n",
            toml_str(&c.user_name),
            c.uid
        ));
        let groups: Vec<String> = c.groups.iter().map(|g| g.to_string()).collect();
        out.push_str(&format!(
            "group = {} # gid {}, supplementary groups {}\n",
            toml_str(&c.group_name),
            c.gid,
            if groups.is_empty() {
                "none".to_string()
            } else {
                groups.join(",")
            }
        ));
        out.push_str(&format!(
            "php_cgi = {}\n",
            toml_str(&self.php_cgi.to_string_lossy())
        ));
        self.write_listen(out);
        self.write_isolation(out);
        self.write_pm(out);
        self.write_timeouts(global, out);
        self.write_cgroup(out);
        self.write_security_and_output(out);
        self.write_logs(out);
        self.write_local_pages(out);
        self.write_php_ini(out);
        self.write_values(out);
    }

    /// `listen.*`: the address; the socket's owner, group and mode (noted as
    /// ignored for TCP); the backlog; `allowed_clients`; the ACLs.
    fn write_listen(&self, out: &mut String) {
        let l = &self.listen;
        out.push_str(&format!(
            "listen.address = {}\n",
            toml_str(&l.address.to_string())
        ));
        let tcp_note = if !matches!(l.address, ListenAddress::Unix(_)) {
            " # ignored for TCP"
        } else {
            ""
        };
        if let Some(owner) = l.owner {
            out.push_str(&format!("listen.owner = {owner}{tcp_note}\n"));
        }
        if let Some(group) = l.group {
            out.push_str(&format!("listen.group = {group}{tcp_note}\n"));
        }
        out.push_str(&format!("listen.mode = \"{:04o}\"{tcp_note}\n", l.mode));
        out.push_str(&format!("listen.backlog = {}\n", l.backlog));
        match &l.allowed_clients {
            Some(list) => {
                let items: Vec<String> = list.iter().map(|ip| toml_str(&ip.to_string())).collect();
                let note = if matches!(l.address, ListenAddress::Unix(_)) {
                    " # ignored for unix sockets"
                } else {
                    ""
                };
                out.push_str(&format!(
                    "listen.allowed_clients = [{}]{note}\n",
                    items.join(", ")
                ));
            }
            None => out.push_str("# listen.allowed_clients: any\n"),
        }
        for (key, ids) in [("acl_users", &l.acl_users), ("acl_groups", &l.acl_groups)] {
            if !ids.is_empty() {
                let list: Vec<String> = ids.iter().map(u32::to_string).collect();
                out.push_str(&format!(
                    "listen.{key} = {} # ids\n",
                    toml_str(&list.join(","))
                ));
            }
        }
    }

    /// The child's confinement: `chroot`, `chdir`, the rlimits,
    /// `process.priority`, `process.dumpable`, `no_new_privs`, Landlock.
    fn write_isolation(&self, out: &mut String) {
        let iso = &self.isolation;
        match &iso.chroot {
            Some(p) => out.push_str(&format!("chroot = {}\n", toml_str(&p.to_string_lossy()))),
            None => out.push_str("# chroot: none\n"),
        }
        out.push_str(&format!(
            "chdir = {}{}\n",
            toml_str(&self.chdir.to_string_lossy()),
            if iso.chroot.is_some() {
                " # inside the chroot"
            } else {
                ""
            }
        ));
        match iso.rlimit_files {
            Some(n) => out.push_str(&format!("rlimit_files = {n}\n")),
            None => out.push_str("# rlimit_files: inherited from fpmd\n"),
        }
        match iso.rlimit_core {
            Some(u64::MAX) => out.push_str("rlimit_core = \"unlimited\"\n"),
            Some(n) => out.push_str(&format!("rlimit_core = {n} # bytes\n")),
            None => out.push_str("# rlimit_core: inherited from fpmd\n"),
        }
        match iso.process_priority {
            Some(n) => out.push_str(&format!("process.priority = {n}\n")),
            None => out.push_str("# process.priority: inherited from fpmd\n"),
        }
        out.push_str(&format!(
            "process.dumpable = {}\nno_new_privs = {}\n",
            iso.process_dumpable, iso.no_new_privs
        ));
        match &iso.landlock {
            Some(l) => {
                let list = |v: &[std::path::PathBuf]| {
                    v.iter()
                        .map(|p| toml_str(&p.to_string_lossy()))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                out.push_str(&format!(
                    "landlock.read = [{}]\nlandlock.write = [{}]\n",
                    list(&l.read),
                    list(&l.write)
                ));
            }
            None => out.push_str("# landlock: none\n"),
        }
    }

    /// `clear_env`, then the process manager: `pm.mode` and its mode's keys,
    /// `pm.max_children`, `pm.max_requests`, `pm.spawn`, `pm.max_memory`.
    fn write_pm(&self, out: &mut String) {
        out.push_str(&format!("clear_env = {}\n", self.clear_env));
        out.push_str(&format!("pm.mode = {}\n", toml_str(self.pm.mode.as_str())));
        match self.pm.mode {
            PmMode::Static => {}
            PmMode::Dynamic {
                start_servers,
                min_spare_servers,
                max_spare_servers,
                max_spawn_rate,
            } => {
                out.push_str(&format!("pm.start_servers = {start_servers}\npm.min_spare_servers = {min_spare_servers}\n"));
                out.push_str(&format!("pm.max_spare_servers = {max_spare_servers}\npm.max_spawn_rate = {max_spawn_rate}\n"));
            }
            PmMode::Ondemand {
                process_idle_timeout,
                max_spawn_rate,
            } => {
                out.push_str(&format!(
                    "pm.process_idle_timeout = {}\n",
                    toml_str(&humantime::format_duration(process_idle_timeout).to_string())
                ));
                out.push_str(&format!("pm.max_spawn_rate = {max_spawn_rate}\n"));
            }
        }
        out.push_str(&format!("pm.max_children = {}\n", self.pm.max_children));
        out.push_str(&format!("pm.max_requests = {}\n", self.pm.max_requests));
        out.push_str(&format!(
            "pm.spawn = {}\n",
            toml_str(self.pm.spawn.as_str())
        ));
        match self.pm.max_memory {
            Some(n) => out.push_str(&format!("pm.max_memory = {n} # bytes\n")),
            None => out.push_str("# pm.max_memory: no limit\n"),
        }
    }

    /// The request timers, then `graceful_timeout` (noted when it is
    /// `global.process_control_timeout`'s, or 0 so that it is not).
    fn write_timeouts(&self, global: &Global, out: &mut String) {
        let dur = |name: &str, d: Option<std::time::Duration>, out: &mut String| match d {
            Some(d) => out.push_str(&format!(
                "{name} = {}\n",
                toml_str(&humantime::format_duration(d).to_string())
            )),
            None => out.push_str(&format!("# {name}: off\n")),
        };
        dur(
            "request_terminate_timeout",
            self.request_terminate_timeout,
            out,
        );
        dur("request_slowlog_timeout", self.request_slowlog_timeout, out);
        dur("request_queue_timeout", self.request_queue_timeout, out);
        match (self.graceful_timeout, global.process_control_timeout) {
            (Some(d), inherited) => out.push_str(&format!(
                "graceful_timeout = {}{}\n",
                toml_duration(d),
                if inherited == Some(d) {
                    " # as global.process_control_timeout"
                } else {
                    ""
                }
            )),
            // 0 here, so that global.process_control_timeout does not apply.
            (None, Some(_)) => {
                out.push_str("graceful_timeout = 0 # none, not global.process_control_timeout\n")
            }
            (None, None) => out.push_str("# graceful_timeout: none\n"),
        }
    }

    /// `cgroup.*`: the pool's memory, pids and cpu weight limits.
    fn write_cgroup(&self, out: &mut String) {
        match self.cgroup.memory_max {
            Some(n) => out.push_str(&format!("cgroup.memory_max = {n} # bytes\n")),
            None => out.push_str("# cgroup.memory_max: no limit\n"),
        }
        match self.cgroup.pids_max {
            Some(n) => out.push_str(&format!("cgroup.pids_max = {n}\n")),
            None => out.push_str("# cgroup.pids_max: no limit\n"),
        }
        match self.cgroup.cpu_weight {
            Some(n) => out.push_str(&format!("cgroup.cpu_weight = {n}\n")),
            None => out.push_str("# cgroup.cpu_weight: 100 (the kernel's default)\n"),
        }
    }

    /// `security.pcntl`, the children's output (`catch_workers_output`,
    /// `decorate_workers_output`), `security.limit_extensions`.
    fn write_security_and_output(&self, out: &mut String) {
        out.push_str(&format!("security.pcntl = {}\n", self.pcntl));
        out.push_str(&format!(
            "catch_workers_output = {}\n",
            self.catch_workers_output
        ));
        out.push_str(&format!(
            "decorate_workers_output = {}\n",
            self.decorate_workers_output
        ));
        out.push_str(&format!("fpm_sapi = {}\n", self.fpm_sapi));
        out.push_str(&format!(
            "request_terminate_timeout_track_finished = {}\n",
            self.track_finished
        ));
        let exts: Vec<String> = self.limit_extensions.iter().map(|e| toml_str(e)).collect();
        out.push_str(&format!(
            "security.limit_extensions = [{}]{}\n",
            exts.join(", "),
            if exts.is_empty() {
                " # any file may run as a script"
            } else {
                ""
            }
        ));
    }

    /// The slow log and the access log (`access.*`).
    fn write_logs(&self, out: &mut String) {
        match &self.slowlog {
            Some(p) => out.push_str(&format!(
                "slowlog = {}\n",
                toml_str(&p.display().to_string())
            )),
            None => out.push_str("# slowlog: entries go to fpmd's log\n"),
        }
        match &self.access_log {
            Some(p) => out.push_str(&format!(
                "access.log = {}\n",
                toml_str(&p.display().to_string())
            )),
            None => out.push_str("# access.log: none (no access log)\n"),
        }
        out.push_str(&format!(
            "access.format = {}\n",
            toml_str(self.access_format.as_str())
        ));
        if !self.access_suppress_paths.is_empty() {
            let paths: Vec<String> = self
                .access_suppress_paths
                .iter()
                .map(|p| toml_str(p))
                .collect();
            out.push_str(&format!("access.suppress_path = [{}]\n", paths.join(", ")));
        }
    }

    /// The pages fpmd answers itself: `pm.status_*`, `ping.*`.
    fn write_local_pages(&self, out: &mut String) {
        match &self.local.status_path {
            Some(p) => out.push_str(&format!("pm.status_path = {}\n", toml_str(p))),
            None => out.push_str("# pm.status_path: no status page\n"),
        }
        if let Some(a) = &self.local.status_listen {
            out.push_str(&format!(
                "pm.status_listen = {}\n",
                toml_str(&a.to_string())
            ));
        }
        match &self.local.ping_path {
            Some(p) => out.push_str(&format!("ping.path = {}\n", toml_str(p))),
            None => out.push_str("# ping.path: no ping page\n"),
        }
        // Also without a ping page: a ping.response set alone is part of
        // the configuration (and of a reload's diff).
        out.push_str(&format!(
            "ping.response = {}\n",
            toml_str(&self.local.ping_response)
        ));
    }

    /// `php_ini`, `php_ini_scan_dir`, and the ini files PHP reads, in order.
    fn write_php_ini(&self, out: &mut String) {
        let ini = &self.php_ini;
        match &ini.file {
            Some(p) => out.push_str(&format!("php_ini = {}\n", toml_str(&p.to_string_lossy()))),
            None => out.push_str("# php_ini: php-cgi's compiled-in search\n"),
        }
        match &ini.scan_dir {
            Some(d) => out.push_str(&format!("php_ini_scan_dir = {}\n", toml_str(d))),
            None => out.push_str("# php_ini_scan_dir: php-cgi's compiled-in directory\n"),
        }
        match &ini.reads {
            Some(files) if files.is_empty() => out.push_str("# PHP reads no ini file\n"),
            Some(files) => {
                out.push_str("# PHP reads, in this order:\n");
                for f in files.iter() {
                    out.push_str(&format!("#   {}\n", f.display()));
                }
            }
            None => out.push_str("# PHP reads: php-cgi's compiled-in php.ini and scan directory (unknown to fpmd for this binary)\n"),
        }
    }

    /// `env.*`, `php_value.*` and `php_admin_value.*`.
    fn write_values(&self, out: &mut String) {
        for (name, value) in &self.env {
            out.push_str(&format!("env.{} = {}\n", toml_key(name), toml_str(value)));
        }
        for (name, value) in &self.php_values {
            out.push_str(&format!(
                "php_value.{} = {}\n",
                toml_key(name),
                toml_str(value)
            ));
        }
        for (name, value) in &self.php_admin_values {
            out.push_str(&format!(
                "php_admin_value.{} = {}\n",
                toml_key(name),
                toml_str(value)
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load;
    use crate::config::testutil::*;

    #[test]
    fn to_toml_round_trips() {
        let main =
            "[global]\npid = \"fpmd.pid\"\nlog_level = \"warning\"\ninclude = \"pool.d/*.toml\"\n";
        let extra = "listen.allowed_clients = \"127.0.0.1\"\nenv.\"odd name\" = \"quote \\\" and backslash \\\\\"\nphp_value.\"session.save_path\" = \"/tmp\"\nphp_flag.display_errors = \"on\"\nphp_admin_value.memory_limit = \"1G\"\npm.max_requests = 9\naccess.log = \"log/a.access.log\"\naccess.format = \"%{mili}d \\\"%r\\\" %{%H:%M}t\"\n";
        // The isolation keys too (chroot only where fpmd would be root).
        let chroot = if nix::unistd::geteuid().is_root() {
            "chroot = \"/usr\"\n"
        } else {
            ""
        };
        let extra = format!("{extra}{chroot}rlimit_files = 1024\nrlimit_core = \"unlimited\"\nprocess.priority = 3\nprocess.dumpable = true\nlandlock.read = [\"/bin\"]\nlandlock.write = []\n");
        let extra = extra.as_str();
        let (dir, c) = load_ok(
            main,
            &[
                ("pool.d/a.toml", &pool("a", extra)),
                (
                    "pool.d/b.toml",
                    &pool("b", "").replace("\"/tmp/b.sock\"", "9000"),
                ),
                ("pool.d/log/.keep", ""),
            ],
        );
        let text = c.to_toml();
        assert!(
            text.contains(&format!(
                "# pool a, defined in {}\n[a]\n",
                dir.path().join("pool.d/a.toml").display()
            )),
            "{text}"
        );
        assert!(
            text.contains("listen.mode = \"0660\"\n") && text.contains("pm.mode = \"static\"\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "access.log = \"{}\"\naccess.format = '%{{mili}}d \"%r\" %{{%H:%M}}t'\n",
                dir.path().join("pool.d/log/a.access.log").display()
            )),
            "{text}"
        );
        assert!(
            text.contains(
                "# access.log: none (no access log)\naccess.format = '%R - %u %t \"%m %r\" %s'\n"
            ),
            "{text}"
        );
        let again = write(dir.path(), "effective/fpmd.toml", &text);
        let c2 = load(&again).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(c2.global, c.global);
        assert_eq!(c2.pools.len(), c.pools.len());
        for (p1, p2) in c.pools.iter().zip(&c2.pools) {
            assert_eq!(
                PoolConfig {
                    file: p2.file.clone(),
                    ..(**p1).clone()
                },
                **p2
            );
        }
        assert_eq!(
            c2.to_toml()
                .replace(&again.display().to_string(), "X")
                .lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>(),
            text.replace(&c.file.display().to_string(), "X")
                .lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>()
        );
    }

    /// C16: `fpmd -t` says which file (and line) set each value, or that
    /// it is the default; the notes are comments, so the text still loads.
    #[test]
    fn origins_name_the_file_and_line_or_default() {
        let extra = "clear_env = false\nenv.FOO = \"$PATH\"\nphp_flag.display_errors = \"on\"\nphp_value.session.save_path = \"/tmp\"\nenv.\"x # y\" = \"a # b\"\n";
        let main = "[global]\ninclude = \"pool.d/*.toml\"\nlog_level = \"debug\"\n";
        let (dir, c) = load_ok(main, &[("pool.d/www.toml", &pool("www", extra))]);
        let text = c.to_toml_with_origins();
        let www = dir.path().join("pool.d/www.toml").display().to_string();
        let fpmd = dir.path().join("fpmd.toml").display().to_string();
        for line in [
            format!("clear_env = false # set in {www}:7\n"),
            format!("user = \"nobody\" # uid {}; set in {www}:2\n", nobody().0),
            format!("pm.max_children = 5 # set in {www}:6\n"),
            "listen.backlog = 511 # default\n".to_string(),
            "pm.spawn = \"prefork\" # default\n".to_string(),
            format!("php_value.display_errors = \"1\" # set in {www}:9\n"),
            format!("php_value.\"session.save_path\" = \"/tmp\" # set in {www}:10\n"),
            format!("env.\"x # y\" = \"a # b\" # set in {www}:11\n"),
            format!("log_level = \"debug\" # set in {fpmd}:3\n"),
            "watch = false # default\n".to_string(),
        ] {
            assert!(text.contains(&line), "{line:?} not in\n{text}");
        }
        assert!(
            text.contains(&format!(
                "env.FOO = {} # set in {www}:8\n",
                toml_str(&std::env::var("PATH").unwrap())
            )),
            "{text}"
        );
        // A value over several lines is noted once, after its end; a line
        // inside it that looks like a key is part of the value.
        {
            let (dir, c) = load_ok(&pool("www", "env.X = \"a\\nb = 1\\n\"\n"), &[]);
            let text = c.to_toml_with_origins();
            let fpmd = dir.path().join("fpmd.toml").display().to_string();
            assert!(
                text.contains(&format!("a\nb = 1\n\"\"\" # set in {fpmd}:7\n")),
                "{text}"
            );
            let again = write(dir.path(), "again/fpmd.toml", &text);
            assert_eq!(load(&again).unwrap().pools[0].env["X"], "a\nb = 1\n");
        }
        // The same effective configuration as without the notes.
        let again = write(dir.path(), "again/fpmd.toml", &text);
        let c2 = load(&again).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(c2.global, c.global);
        assert_eq!(
            PoolConfig {
                file: c.pools[0].file.clone(),
                ..(*c2.pools[0]).clone()
            },
            *c.pools[0]
        );
        // Printed again, every value is set in that one file.
        let text2 = c2.to_toml_with_origins();
        assert!(
            text2.contains(&format!("clear_env = false # set in {}:", again.display())),
            "{text2}"
        );
        assert_eq!(text.lines().count(), text2.lines().count());
    }

    /// Found by the config fuzz target: a `ping.response` without
    /// `ping.path` was not printed, so the printed configuration loaded
    /// back with `pong`.
    #[test]
    fn ping_response_without_ping_path_is_printed() {
        let (dir, c) = load_ok(&pool("www", "ping.response = \"alive\"\n"), &[]);
        let text = c.to_toml();
        assert!(
            text.contains("# ping.path: no ping page\nping.response = \"alive\"\n"),
            "{text}"
        );
        let again = write(dir.path(), "again/fpmd.toml", &text);
        assert_eq!(load(&again).unwrap().pools[0].local, c.pools[0].local);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

            /// Any ini name/value and env name/value survive to_toml → load.
            #[test]
            fn to_toml_escapes(name in "[a-z_][a-z0-9_.]{0,12}[a-z0-9_]", value in "[^\\x00\\n\\r]{0,20}", env_name in "[A-Za-z_ .-]{1,10}", env_value in "[^\\x00$]{0,20}") {
                let extra = format!(
                    "php_value.{} = {}\nenv.{} = {}\n",
                    toml_key(&name), toml_str(&value), toml_key(&env_name), toml_str(&env_value)
                );
                let (dir, c) = load_ok(&pool("www", &extra), &[]);
                prop_assert_eq!(&c.pools[0].php_values[&name], &value);
                let again = write(dir.path(), "again/fpmd.toml", &c.to_toml());
                let c2 = load(&again).unwrap();
                prop_assert_eq!(&c2.pools[0].php_values, &c.pools[0].php_values);
                prop_assert_eq!(&c2.pools[0].env, &c.pools[0].env);
            }
        }
    }
}
