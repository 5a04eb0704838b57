//! The daemon under test: writes `fpmd.toml` + `pool.d/*.toml` in the test
//! dir from a small builder, runs the binary in the foreground with its
//! stdout/stderr in `fpmd.log`, and cleans up every process it left (by the
//! `FPMD_TEST_TAG` environment marker) on drop. For reloads: `rewrite`
//! (the files, in place), `reload` (SIGUSR2, then the log's verdict), and
//! `cli` (`fpmd -c fpmd.toml reload|upgrade|-t …`).

use super::procs::{self, ProcInfo};
use super::{php_cgi_bin, read_lossy, soft_rlimit, wait_until, TestDir, FPMD_BIN};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// Where a pool listens.
#[derive(Clone, Debug)]
pub enum Listen {
    /// `<test dir>/<pool name>.sock`
    Unix,
    UnixAt(PathBuf),
    /// Written as is into `listen.address`: "127.0.0.1:9000", "[::1]:9000", "9000".
    Tcp(String),
}

/// One pool table, written to `pool.d/<name>.toml`.
#[derive(Clone, Debug)]
pub struct Pool {
    pub name: String,
    pub listen: Listen,
    pub user: String,
    pub group: String,
    pub max_children: u32,
    pub max_requests: u32,
    /// `php_cgi`; default: the system's php-cgi (`php_cgi_bin()`).
    pub php_cgi: Option<PathBuf>,
    /// Raw TOML lines appended inside the pool table.
    pub lines: Vec<String>,
}

impl Pool {
    pub fn new(name: &str) -> Pool {
        Pool {
            name: name.to_string(),
            listen: Listen::Unix,
            user: "www-data".into(),
            group: "www-data".into(),
            max_children: 4,
            max_requests: 0,
            php_cgi: None,
            lines: Vec::new(),
        }
    }
    pub fn www() -> Pool {
        Pool::new("www")
    }
    pub fn tcp(mut self, addr: impl Into<String>) -> Pool {
        self.listen = Listen::Tcp(addr.into());
        self
    }
    pub fn unix_at(mut self, path: impl Into<PathBuf>) -> Pool {
        self.listen = Listen::UnixAt(path.into());
        self
    }
    pub fn user(mut self, user: &str, group: &str) -> Pool {
        self.user = user.into();
        self.group = group.into();
        self
    }
    pub fn max_children(mut self, n: u32) -> Pool {
        self.max_children = n;
        self
    }
    pub fn max_requests(mut self, n: u32) -> Pool {
        self.max_requests = n;
        self
    }
    /// The pool's `php_cgi` binary (e.g. a script standing in for php-cgi).
    pub fn php_cgi(mut self, path: impl Into<PathBuf>) -> Pool {
        self.php_cgi = Some(path.into());
        self
    }
    /// A raw TOML line inside the pool table, e.g. `php_admin_value.memory_limit = "96M"`.
    pub fn line(mut self, l: impl Into<String>) -> Pool {
        self.lines.push(l.into());
        self
    }
    pub fn lines(mut self, ls: &[&str]) -> Pool {
        self.lines.extend(ls.iter().map(|l| l.to_string()));
        self
    }

    /// The `listen.address` written for this pool in the test dir `dir`.
    pub fn address(&self, dir: &Path) -> String {
        match &self.listen {
            Listen::Unix => dir
                .join(format!("{}.sock", self.name))
                .display()
                .to_string(),
            Listen::UnixAt(p) => p.display().to_string(),
            Listen::Tcp(a) => a.clone(),
        }
    }

    pub fn toml(&self, dir: &Path, tag: &str) -> String {
        let mut s = String::new();
        writeln!(s, "[{}]", self.name).unwrap();
        writeln!(s, "user = {:?}", self.user).unwrap();
        writeln!(s, "group = {:?}", self.group).unwrap();
        let php_cgi = self.php_cgi.clone().unwrap_or_else(php_cgi_bin);
        writeln!(s, "php_cgi = {:?}", php_cgi.display().to_string()).unwrap();
        writeln!(s, "listen.address = {:?}", self.address(dir)).unwrap();
        if !self
            .lines
            .iter()
            .any(|l| l.trim_start().starts_with("pm.mode"))
        {
            writeln!(s, "pm.mode = \"static\"").unwrap();
        }
        writeln!(s, "pm.max_children = {}", self.max_children).unwrap();
        writeln!(s, "pm.max_requests = {}", self.max_requests).unwrap();
        // `make test` runs the suite once per spawn strategy (unless the
        // test sets one).
        let own_spawn = self
            .lines
            .iter()
            .any(|l| l.trim_start().starts_with("pm.spawn"));
        if let Ok(spawn) = std::env::var("FPMD_TEST_SPAWN") {
            if !spawn.is_empty() && !own_spawn {
                writeln!(s, "pm.spawn = {spawn:?}").unwrap();
            }
        }
        writeln!(s, "env.FPMD_TEST_TAG = {tag:?}").unwrap();
        for l in &self.lines {
            writeln!(s, "{l}").unwrap();
        }
        s
    }
}

/// The whole configuration: `[global]` in `fpmd.toml`, pools in `pool.d/`.
#[derive(Clone, Debug, Default)]
pub struct FpmdConfig {
    pub pools: Vec<Pool>,
    /// (file name in pool.d, full text) written as is.
    pub raw_pool_files: Vec<(String, String)>,
    pub global_lines: Vec<String>,
    /// Extra environment of the fpmd process.
    pub env: Vec<(String, String)>,
    /// `log_level` of `[global]`; default "notice".
    pub log_level: Option<String>,
    /// Soft RLIMIT_NOFILE set in the fpmd process before exec (hard limit unchanged).
    pub nofile_soft: Option<u64>,
    /// `error_log` of `[global]` (a file); default "stderr", which the
    /// harness sends to `fpmd.log`.
    pub error_log: Option<PathBuf>,
}

impl FpmdConfig {
    pub fn new() -> FpmdConfig {
        FpmdConfig::default()
    }
    pub fn pool(mut self, p: Pool) -> FpmdConfig {
        self.pools.push(p);
        self
    }
    pub fn raw_pool_file(mut self, file_name: &str, text: impl Into<String>) -> FpmdConfig {
        self.raw_pool_files
            .push((file_name.to_string(), text.into()));
        self
    }
    pub fn global(mut self, l: impl Into<String>) -> FpmdConfig {
        self.global_lines.push(l.into());
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> FpmdConfig {
        self.env.push((k.into(), v.into()));
        self
    }
    /// `log_level` of `[global]` ("debug", "notice", …).
    pub fn log_level(mut self, l: &str) -> FpmdConfig {
        self.log_level = Some(l.into());
        self
    }
    /// Starts fpmd with this soft RLIMIT_NOFILE (its hard limit stays).
    pub fn nofile_soft(mut self, n: u64) -> FpmdConfig {
        self.nofile_soft = Some(n);
        self
    }

    /// fpmd's log in a file (`[global] error_log`) instead of stderr;
    /// [`Fpmd::log`] then reads that file.
    pub fn error_log(mut self, path: impl Into<PathBuf>) -> FpmdConfig {
        self.error_log = Some(path.into());
        self
    }

    /// Writes the files; returns the path of `fpmd.toml`.
    pub fn write(&self, dir: &TestDir) -> PathBuf {
        self.write_in(dir.path(), &dir.tag())
    }

    /// Writes the files into `dir` (the test dir) for the test `tag`:
    /// `fpmd.toml`, then one file per pool and per raw pool file in
    /// `pool.d/` (each written in place, and only if its text changes);
    /// returns the path of `fpmd.toml`.
    pub fn write_in(&self, dir: &Path, tag: &str) -> PathBuf {
        let pool_d = dir.join("pool.d");
        std::fs::create_dir_all(&pool_d).unwrap();
        let main = dir.join("fpmd.toml");
        let mut g = String::new();
        writeln!(g, "[global]").unwrap();
        writeln!(g, "pid = {:?}", dir.join("fpmd.pid").display().to_string()).unwrap();
        match &self.error_log {
            Some(p) => writeln!(g, "error_log = {:?}", p.display().to_string()).unwrap(),
            None => writeln!(g, "error_log = \"stderr\"").unwrap(),
        }
        writeln!(
            g,
            "log_level = {:?}",
            self.log_level.as_deref().unwrap_or("notice")
        )
        .unwrap();
        writeln!(g, "include = \"pool.d/*.toml\"").unwrap();
        for l in &self.global_lines {
            writeln!(g, "{l}").unwrap();
        }
        // Each test's own control socket (after the test's lines, which
        // tests count lines in): fpmd's default for root,
        // /run/fpmd/fpmd.sock, would be taken by whichever test's fpmd
        // started first, and reached by every other test's `fpmd reload`.
        if !self
            .global_lines
            .iter()
            .any(|l| l.trim_start().starts_with("control_socket"))
        {
            writeln!(
                g,
                "control_socket = {:?}",
                dir.join("ctl.sock").display().to_string()
            )
            .unwrap();
        }
        write_if_changed(&main, &g);
        for p in &self.pools {
            write_if_changed(&pool_d.join(format!("{}.toml", p.name)), &p.toml(dir, tag));
        }
        for (name, text) in &self.raw_pool_files {
            write_if_changed(&pool_d.join(name), text);
        }
        main
    }

    /// The names of the files `write_in` puts in `pool.d/`.
    fn pool_file_names(&self) -> Vec<String> {
        self.pools
            .iter()
            .map(|p| format!("{}.toml", p.name))
            .chain(self.raw_pool_files.iter().map(|(n, _)| n.clone()))
            .collect()
    }
}

/// Writes `text` to `path` in place (truncate and write, as an editor
/// saving it), unless the file already holds exactly that: a rewrite
/// touches only the files that change.
fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read(path).is_ok_and(|old| old == text.as_bytes()) {
        return;
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Resolved listen address of a pool, for clients.
#[derive(Clone, Debug)]
pub enum Addr {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl Addr {
    /// A `listen.address` as clients reach it: a unix path, a port (on
    /// 127.0.0.1) or `host:port`.
    pub fn parse(address: &str) -> Addr {
        if address.starts_with('/') {
            return Addr::Unix(address.into());
        }
        if let Ok(port) = address.parse::<u16>() {
            return Addr::Tcp(SocketAddr::from(([127, 0, 0, 1], port)));
        }
        Addr::Tcp(
            address
                .to_socket_addrs()
                .unwrap_or_else(|e| panic!("bad address {address}: {e}"))
                .next()
                .unwrap(),
        )
    }

    /// As nginx wants it in an `upstream` block.
    pub fn nginx(&self) -> String {
        match self {
            Addr::Unix(p) => format!("unix:{}", p.display()),
            Addr::Tcp(a) => a.to_string(),
        }
    }

    pub fn tcp(&self) -> SocketAddr {
        match self {
            Addr::Tcp(a) => *a,
            Addr::Unix(p) => panic!("pool listens on unix socket {}, not TCP", p.display()),
        }
    }

    /// The backlog of the socket listening here, as the kernel has it
    /// (`ss`: the Send-Q of a listening socket); None when nothing listens.
    pub fn backlog(&self) -> Option<u32> {
        let (args, local) = match self {
            Addr::Unix(p) => (
                vec!["-xlnH".to_string(), "src".into(), p.display().to_string()],
                p.display().to_string(),
            ),
            Addr::Tcp(a) => (
                vec![
                    "-tlnH".to_string(),
                    "sport".into(),
                    format!("= :{}", a.port()),
                ],
                a.to_string(),
            ),
        };
        let out = Command::new("ss").args(&args).output().unwrap_or_else(|e| {
            panic!("cannot run ss ({e}): install it with `apt-get install iproute2`")
        });
        assert!(out.status.success(), "ss {args:?}: {out:?}");
        // "u_str LISTEN 0 511 /path ino * 0" / "LISTEN 0 511 127.0.0.1:9000 0.0.0.0:*"
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let at = f.iter().position(|x| *x == "LISTEN")?;
            (f.get(at + 3) == Some(&local.as_str()))
                .then(|| f.get(at + 2)?.parse().ok())
                .flatten()
        })
    }

    pub fn accepts(&self) -> bool {
        match self {
            Addr::Unix(p) => UnixStream::connect(p).is_ok(),
            Addr::Tcp(a) => TcpStream::connect_timeout(a, Duration::from_millis(500)).is_ok(),
        }
    }
}

/// How [`Fpmd::spawn_launched`] starts fpmd.
#[derive(Debug, Default)]
pub struct Launch {
    /// A launcher and its arguments put before fpmd's path (`ip netns exec
    /// NS`, `systemd-socket-activate -l ADDR`, `sh -c '… exec "$0" "$@"'`);
    /// it must exec fpmd in its own process.
    pub prefix: Vec<String>,
    /// Given to the launched process as fds 3, 4, … (as systemd passes
    /// sockets).
    pub fds: Vec<std::os::fd::OwnedFd>,
    /// Where the pools really listen (`addr(i)`, and what `wait_ready`
    /// connects to), when not at their `listen.address`.
    pub addrs: Option<Vec<Addr>>,
}

pub struct Fpmd {
    child: Option<Child>,
    pid: i32,
    status: Option<ExitStatus>,
    /// Where fpmd's log is: `fpmd.log` (its stderr), or the `error_log` file.
    log_path: PathBuf,
    /// fpmd's stdout and stderr.
    stderr_path: PathBuf,
    tag: String,
    /// The test dir and the main configuration file in it.
    dir: PathBuf,
    conf: PathBuf,
    addrs: Vec<Addr>,
    pool_names: Vec<String>,
}

impl Fpmd {
    /// Writes the config, starts fpmd and waits until every pool's socket accepts.
    pub fn start(dir: &TestDir, cfg: FpmdConfig) -> Fpmd {
        let mut f = Fpmd::spawn(dir, &cfg, &[]);
        f.wait_ready(Duration::from_secs(30));
        f
    }

    /// Writes the config and starts `fpmd -c <dir>/fpmd.toml <extra_args>` without waiting.
    pub fn spawn(dir: &TestDir, cfg: &FpmdConfig, extra_args: &[&str]) -> Fpmd {
        Fpmd::spawn_launched(dir, cfg, extra_args, Launch::default())
    }

    /// [`Fpmd::spawn`] as `launch` says: through a launcher (which must
    /// exec fpmd in its own process, so that the pid is fpmd's), with fds
    /// of the test at 3, 4, …, and the pools' real addresses.
    pub fn spawn_launched(
        dir: &TestDir,
        cfg: &FpmdConfig,
        extra_args: &[&str],
        launch: Launch,
    ) -> Fpmd {
        let conf = cfg.write(dir);
        let addrs = launch.addrs.clone().unwrap_or_else(|| {
            cfg.pools
                .iter()
                .map(|p| Addr::parse(&p.address(dir.path())))
                .collect()
        });
        let pool_names = cfg.pools.iter().map(|p| p.name.clone()).collect();
        let mut args = vec!["-c".to_string(), conf.display().to_string()];
        args.extend(extra_args.iter().map(|a| a.to_string()));
        Fpmd::launch(dir, cfg, conf, &args, addrs, pool_names, launch)
    }

    /// Starts `fpmd ARGS` on a configuration file the test wrote itself
    /// (`conf`, e.g. a php-fpm `.conf` given with `-y`; of `cfg` only the
    /// environment, `error_log` and `nofile_soft` count) and waits until
    /// every address of `addrs` accepts and fpmd is ready.
    pub fn start_file(
        dir: &TestDir,
        cfg: &FpmdConfig,
        conf: &Path,
        args: &[&str],
        addrs: Vec<Addr>,
    ) -> Fpmd {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let mut f = Fpmd::launch(
            dir,
            cfg,
            conf.to_path_buf(),
            &args,
            addrs,
            Vec::new(),
            Launch::default(),
        );
        f.wait_ready(Duration::from_secs(30));
        f
    }

    fn launch(
        dir: &TestDir,
        cfg: &FpmdConfig,
        conf: PathBuf,
        args: &[String],
        addrs: Vec<Addr>,
        pool_names: Vec<String>,
        launch: Launch,
    ) -> Fpmd {
        let stderr_path = dir.join("fpmd.log");
        let log_path = match &cfg.error_log {
            Some(p) => dir.path().join(p),
            None => stderr_path.clone(),
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stderr_path)
            .unwrap();
        let mut cmd = match launch.prefix.split_first() {
            None => Command::new(FPMD_BIN),
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(FPMD_BIN);
                c
            }
        };
        cmd.args(args);
        cmd.current_dir(dir.path());
        cmd.env_remove("RUST_LOG");
        cmd.env("FPMD_TEST_TAG", dir.tag());
        // fpmd's runtime directory (its children's sockets) goes in the
        // test dir, which goes with the test: a SIGKILLed fpmd cannot
        // remove it itself.
        cmd.env("TMPDIR", dir.path());
        for (k, v) in &cfg.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let Some(soft) = cfg.nofile_soft {
            soft_rlimit(&mut cmd, libc::RLIMIT_NOFILE, soft);
        }
        if !launch.fds.is_empty() {
            use std::os::fd::AsRawFd;
            use std::os::unix::process::CommandExt;
            let raw: Vec<i32> = launch.fds.iter().map(|f| f.as_raw_fd()).collect();
            // SAFETY: dup, dup2 and fcntl are async-signal-safe; the fds
            // are first moved above the target range so that no dup2
            // overwrites one not yet placed.
            unsafe {
                cmd.pre_exec(move || {
                    let mut moved = Vec::with_capacity(raw.len());
                    for &fd in &raw {
                        let m = libc::fcntl(fd, libc::F_DUPFD, 100);
                        if m < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        moved.push(m);
                    }
                    for (i, &m) in moved.iter().enumerate() {
                        // dup2 clears close-on-exec on the new fd.
                        if libc::dup2(m, 3 + i as i32) < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        libc::close(m);
                    }
                    Ok(())
                });
            }
        }
        let program = launch.prefix.first().map_or(FPMD_BIN, |p| p.as_str());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        drop(launch.fds);
        let pid = child.id() as i32;
        Fpmd {
            child: Some(child),
            pid,
            status: None,
            log_path,
            stderr_path,
            tag: dir.tag(),
            dir: dir.path().to_path_buf(),
            conf,
            addrs,
            pool_names,
        }
    }

    pub fn wait_ready(&mut self, timeout: Duration) {
        let t0 = Instant::now();
        for a in self.addrs.clone() {
            loop {
                if a.accepts() {
                    break;
                }
                if let Some(st) = self.try_wait() {
                    panic!(
                        "fpmd exited ({st}) before listening on {a:?}; its log:\n{}",
                        self.log()
                    );
                }
                if t0.elapsed() > timeout {
                    panic!(
                        "fpmd does not accept on {a:?} after {timeout:?}; its log:\n{}",
                        self.log()
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // Its sockets accept before it logs that it is ready: a test that
        // marks the log now must not find that line after its mark.
        while !self.log().contains("ready to handle connections") {
            if let Some(st) = self.try_wait() {
                panic!(
                    "fpmd exited ({st}) before it was ready; its log:\n{}",
                    self.log()
                );
            }
            if t0.elapsed() > timeout {
                panic!(
                    "fpmd did not log \"ready to handle connections\" within {timeout:?}; its log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Listen address of the i-th pool of the builder config.
    pub fn addr(&self, i: usize) -> Addr {
        self.addrs[i].clone()
    }

    /// The i-th pool's address as an nginx upstream server.
    pub fn upstream(&self, i: usize) -> String {
        self.addrs[i].nginx()
    }

    pub fn log(&self) -> String {
        read_lossy(&self.log_path)
    }

    /// Current length of the log, to read what comes after with `log_since`.
    pub fn log_len(&self) -> usize {
        std::fs::metadata(&self.log_path)
            .map(|m| m.len() as usize)
            .unwrap_or(0)
    }

    pub fn log_since(&self, offset: usize) -> String {
        let all = std::fs::read(&self.log_path).unwrap_or_default();
        String::from_utf8_lossy(&all[offset.min(all.len())..]).into_owned()
    }

    /// Non-empty log lines written after `offset`.
    pub fn log_lines_since(&self, offset: usize) -> Vec<String> {
        self.log_since(offset)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(String::from)
            .collect()
    }

    /// Every php-cgi process below fpmd (children or grandchildren), alive or zombie.
    pub fn children(&self) -> Vec<ProcInfo> {
        procs::descendants(self.pid)
            .into_iter()
            .filter(|p| p.is_php_cgi())
            .collect()
    }

    /// Live php-cgi processes below fpmd that serve requests (see `procs::workers_among`).
    pub fn workers(&self) -> Vec<i32> {
        procs::workers_among(&procs::descendants(self.pid))
    }

    /// The live workers whose environment has `key=value` (a pool's
    /// `env.KEY = "value"` tells its children from the other pools').
    pub fn workers_with_env(&self, key: &str, value: &str) -> Vec<i32> {
        self.workers()
            .into_iter()
            .filter(|pid| {
                procs::environ(*pid)
                    .iter()
                    .any(|(k, v)| k == key && v == value)
            })
            .collect()
    }

    /// Waits until exactly `n` live workers exist; returns their pids.
    pub fn wait_workers(&self, n: usize, timeout: Duration) -> Vec<i32> {
        let mut last = Vec::new();
        if wait_until(timeout, || {
            last = self.workers();
            last.len() == n
        }) {
            return last;
        }
        panic!(
            "expected {n} php-cgi workers under fpmd within {timeout:?}, have {}: {}\nfpmd log:\n{}",
            last.len(),
            procs::describe(&procs::descendants(self.pid)),
            self.log()
        );
    }

    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.pid), sig)
            .unwrap_or_else(|e| panic!("kill -{sig} {}: {e}", self.pid));
    }

    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Some(c) = self.child.as_mut() {
                self.status = c.try_wait().unwrap();
            }
        }
        self.status
    }

    pub fn running(&mut self) -> bool {
        self.try_wait().is_none()
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.try_wait() {
                return Some(s);
            }
            if t0.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Panics unless fpmd is still running (with its log).
    pub fn assert_running(&mut self) {
        if let Some(st) = self.try_wait() {
            panic!("fpmd exited unexpectedly ({st}); its log:\n{}", self.log());
        }
    }

    /// Every live process (php-cgi or other) carrying this test's tag, fpmd included.
    pub fn tagged(&self) -> Vec<ProcInfo> {
        procs::tagged(&self.tag)
    }

    /// The main configuration file (`<test dir>/fpmd.toml`).
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// Rewrites the configuration files in place with `cfg` (as
    /// [`Fpmd::spawn`] wrote them; pool files of `pool.d/` that `cfg` does
    /// not have are removed), for a reload. `addr(i)` and `upstream(i)`
    /// follow the new pools. fpmd is not told: see [`Fpmd::reload`].
    pub fn rewrite(&mut self, cfg: &FpmdConfig) {
        cfg.write_in(&self.dir, &self.tag);
        let keep = cfg.pool_file_names();
        for e in std::fs::read_dir(self.dir.join("pool.d"))
            .unwrap()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".toml") && !keep.contains(&name) {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        self.addrs = cfg
            .pools
            .iter()
            .map(|p| Addr::parse(&p.address(&self.dir)))
            .collect();
        self.pool_names = cfg.pools.iter().map(|p| p.name.clone()).collect();
    }

    /// Sends SIGUSR2 and waits until fpmd's log says how the reload ended
    /// ("reload done", "reload refused" or "reload failed"); returns that
    /// line. Panics (with the log) when fpmd exits or no such line comes
    /// within 60 s. Reloads requested meanwhile by others are not told
    /// apart: call it when no other reload runs.
    pub fn reload(&mut self) -> String {
        let mark = self.log_len();
        self.signal(Signal::SIGUSR2);
        self.wait_reload_end(mark, Duration::from_secs(60))
    }

    /// [`Fpmd::reload`], and panics unless the line says "reload done".
    pub fn reload_ok(&mut self) -> String {
        let line = self.reload();
        assert!(
            line.contains("reload done"),
            "the reload did not succeed: {line}\\nfpmd log:\\n{}",
            self.log()
        );
        line
    }

    /// The first line after `offset` of the log that ends a reload.
    pub fn wait_reload_end(&mut self, offset: usize, timeout: Duration) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(l) = self
                .log_lines_since(offset)
                .into_iter()
                .find(|l| RELOAD_ENDS.iter().any(|e| l.contains(e)))
            {
                return l;
            }
            if let Some(st) = self.try_wait() {
                panic!(
                    "fpmd exited ({st}) during a reload; its log:\\n{}",
                    self.log()
                );
            }
            if t0.elapsed() > timeout {
                panic!(
                    "no end of the reload in fpmd's log after {timeout:?}; its log:\\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Runs `fpmd -c <fpmd.toml> ARGS` (e.g. `reload`, `-t`) and waits for
    /// it (killed after 60 s).
    pub fn cli(&self, args: &[&str]) -> CliRun {
        cli(&self.dir, &self.conf, &self.tag, args)
    }

    /// Waits until the control socket the harness gives fpmd
    /// (`<test dir>/ctl.sock`, unless the test set its own) is there: fpmd
    /// binds it once its pools have started, after their sockets accept.
    pub fn wait_control_socket(&mut self, timeout: Duration) {
        let path = self.dir.join("ctl.sock");
        let t0 = Instant::now();
        while !path.exists() {
            if let Some(st) = self.try_wait() {
                panic!(
                    "fpmd exited ({st}) before binding {}; its log:\n{}",
                    path.display(),
                    self.log()
                );
            }
            if t0.elapsed() > timeout {
                panic!(
                    "no control socket {} after {timeout:?}; fpmd's log:\n{}",
                    path.display(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The pid in the pid file (`<test dir>/fpmd.pid`), if it holds one.
    pub fn pid_file(&self) -> Option<i32> {
        std::fs::read_to_string(self.dir.join("fpmd.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }
}

/// What ends a reload in fpmd's log (`daemon.rs`).
pub const RELOAD_ENDS: [&str; 3] = ["reload done", "reload refused", "reload failed"];

/// A finished run of the fpmd command line.
#[derive(Debug)]
pub struct CliRun {
    pub args: Vec<String>,
    /// None: killed after the timeout.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl CliRun {
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }
    /// stdout and stderr together, for messages.
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl std::fmt::Display for CliRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = match &self.status {
            Some(s) => describe_status(s),
            None => "killed after 60 s".into(),
        };
        write!(
            f,
            "fpmd {}: {st}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.args.join(" "),
            self.stdout,
            self.stderr
        )
    }
}

/// Runs `fpmd -c CONF ARGS` in `dir` with the test's tag and waits for it
/// (at most 60 s, then it is killed); its output is captured.
pub fn cli(dir: &Path, conf: &Path, tag: &str, args: &[&str]) -> CliRun {
    let conf = conf.display().to_string();
    let mut all = vec!["-c", conf.as_str()];
    all.extend_from_slice(args);
    let mut run = run_fpmd(dir, tag, &all);
    run.args.drain(..2);
    run
}

/// Runs `fpmd ARGS` (no `-c` added) in `dir` with the test's tag and waits
/// for it (at most 60 s, then it is killed); its output is captured.
pub fn run_fpmd(dir: &Path, tag: &str, args: &[&str]) -> CliRun {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out_path = dir.join(format!("cli.{n}.out"));
    let err_path = dir.join(format!("cli.{n}.err"));
    let out = std::fs::File::create(&out_path).unwrap();
    let err = std::fs::File::create(&err_path).unwrap();
    let mut child = Command::new(FPMD_BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("NOTIFY_SOCKET")
        .env("FPMD_TEST_TAG", tag)
        // A daemon started here (-D) keeps its runtime directory in the
        // test dir (see `Fpmd::launch`).
        .env("TMPDIR", dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {FPMD_BIN}: {e}"));
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |p: &Path| {
        let s = read_lossy(p);
        let _ = std::fs::remove_file(p);
        s
    };
    CliRun {
        args: args.iter().map(|a| a.to_string()).collect(),
        status,
        stdout: read(&out_path),
        stderr: read(&err_path),
    }
}

/// The time stamp that starts a line of fpmd's log (RFC 3339, UTC:
/// `2026-12-01T11:15:34.970188Z`).
pub fn log_time(line: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339(line.split_whitespace().next()?).ok()
}

/// `exit code N` or `signal N` of a status.
pub fn describe_status(st: &ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => format!("{st}"),
    }
}

impl Drop for Fpmd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if self.status.is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        procs::kill_tagged(&self.tag);
        if std::thread::panicking() && self.stderr_path != self.log_path {
            let out = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
            if !out.is_empty() {
                eprintln!(
                    "---- fpmd stdout/stderr ({}) ----\n{out}",
                    self.stderr_path.display()
                );
            }
        }
        if std::thread::panicking() {
            // A flood test can leave a log of 100 MiB: show its ends only.
            const SHOW: usize = 32 << 10;
            let log = self.log();
            if log.len() <= 2 * SHOW {
                eprintln!("---- fpmd log ({}) ----\n{log}", self.log_path.display());
            } else {
                let (mut a, mut b) = (SHOW, log.len() - SHOW);
                while !log.is_char_boundary(a) {
                    a -= 1;
                }
                while !log.is_char_boundary(b) {
                    b += 1;
                }
                eprintln!(
                    "---- fpmd log ({}, {} bytes; first and last {SHOW} shown) ----\n{}\n[...]\n{}",
                    self.log_path.display(),
                    log.len(),
                    &log[..a],
                    &log[b..]
                );
            }
        }
    }
}
