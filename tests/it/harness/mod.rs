//! Shared fixtures of the integration tests: temporary directories, free ports,
//! real web servers (nginx, Apache, lighttpd, Caddy, h2o), real php-cgi behind the real fpmd binary, php-fpm for
//! comparisons, HTTP and raw FastCGI clients, /proc helpers, a stand-in for
//! systemd's notification socket, and tmux as a terminal.
//!
//! Rules: every test owns one `TestDir` and its own ports, so tests run in
//! parallel; nothing here sleeps to "let things settle": waits are
//! `wait_for(timeout, ...)` on a condition, with generous timeouts.
//! A missing `php-cgi`/`nginx` makes the test fail (never skip) with the
//! install hint.

#![allow(dead_code)]

pub mod apache;
pub mod caddy;
pub mod fcgi;
pub mod fpmd;
pub mod h2o;
pub mod http;
pub mod lighttpd;
pub mod mariadb;
pub mod netns;
pub mod nginx;
pub mod phpfpm;
pub mod procs;
pub mod prometheus;
pub mod systemd;
pub mod tmux;
pub mod webserver;

use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use apache::{Apache, ApacheOpts, FcgiStyle};
pub use fpmd::{log_time, Addr, Fpmd, FpmdConfig, Launch, Pool};
pub use http::{get, post, Resp};
pub use lighttpd::{Lighttpd, LighttpdOpts};
pub use mariadb::MariaDb;
pub use nginx::{Nginx, NginxOpts};
pub use phpfpm::{PhpFpm, PhpFpmOpts};
pub use systemd::{start_notified, NotifySocket};
pub use webserver::{Kind, Site, WebServer};

/// The fpmd binary under test. Cargo builds it for integration tests.
pub const FPMD_BIN: &str = env!("CARGO_BIN_EXE_fpmd");

/// The PHP scripts the tests serve; copied into every test's docroot.
pub const PHP_SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/php");

/// The longest a test waits for something that normally takes a moment
/// (a start, a stop, a reload, a request): generous, since the machine
/// may be loaded; a test fails only when it is exceeded.
pub const LONG: Duration = Duration::from_secs(30);

/// A POST body bigger than PHP's default post_max_size (8M), for the
/// comparisons with php-fpm (apache.rs, webservers.rs): both backends
/// raise post_max_size to [`POST_MAX_SIZE`].
pub const POST_LEN: usize = 20 << 20;
pub const POST_MAX_SIZE: &str = "128M";

/// The exit status of fpmd refusing a configuration (EX_CONFIG of
/// sysexits.h): `fpmd -t`, a start, `fpmd reload`, `fpmd upgrade`.
pub const EX_CONFIG: i32 = 78;

/// Slack allowed on top of a time bar named by the issue ("within 1 s").
pub const SLACK: Duration = Duration::from_millis(300);

pub const NGINX_BIN: &str = "/usr/sbin/nginx";
pub const DOKUWIKI_ROOT: &str = "/usr/share/dokuwiki";
/// Debian's `wordpress` package.
pub const WORDPRESS_ROOT: &str = "/usr/share/wordpress";
/// Debian's `php-symfony-http-foundation` package (its autoloader).
pub const SYMFONY_HTTP_FOUNDATION: &str =
    "/usr/share/php/Symfony/Component/HttpFoundation/autoload.php";

const INSTALL_HINT: &str =
    "install them with `apt-get install php-cgi php-fpm nginx apache2 dokuwiki prometheus wordpress mariadb-server php-symfony-http-foundation` (or run `make test`, which does it)";

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Absolute path of php-cgi (the `php-cgi` alternative on Debian).
pub fn php_cgi_bin() -> PathBuf {
    find_in_path("php-cgi").unwrap_or_else(|| {
        panic!("php-cgi is not installed: the integration tests need it; {INSTALL_HINT}")
    })
}

/// Fails the test (never skips) when php-cgi or nginx is missing.
pub fn require_binaries() {
    let mut missing = Vec::new();
    if find_in_path("php-cgi").is_none() {
        missing.push("php-cgi");
    }
    if !Path::new(NGINX_BIN).is_file() && find_in_path("nginx").is_none() {
        missing.push("nginx");
    }
    if !missing.is_empty() {
        panic!(
            "missing {}: the integration tests run real binaries; {INSTALL_HINT}",
            missing.join(" and ")
        );
    }
}

/// php-fpm (any version, e.g. php-fpm8.2), for the tests that compare with it.
pub fn require_php_fpm() -> PathBuf {
    require_binaries();
    if let Some(p) = find_in_path("php-fpm") {
        return p;
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/sbin")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("php-fpm"))
        })
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!("php-fpm is not installed: this test compares with it; {INSTALL_HINT}")
    })
}

/// The run's spawn strategy is pre-fork (`FPMD_TEST_SPAWN` unset, empty
/// or `prefork`; `make test` runs the suite again with `exec`).
pub fn prefork() -> bool {
    std::env::var("FPMD_TEST_SPAWN").map_or(true, |s| s.is_empty() || s == "prefork")
}

pub fn require_dokuwiki() {
    require_binaries();
    if !Path::new(DOKUWIKI_ROOT).join("doku.php").is_file() {
        panic!("Debian's dokuwiki package is not installed ({DOKUWIKI_ROOT}/doku.php is missing); {INSTALL_HINT}");
    }
}

/// Debian's wordpress package (which brings php-mysql) and mariadb-server,
/// whose `mariadbd` [`MariaDb`] runs.
pub fn require_wordpress() {
    require_binaries();
    if !Path::new(WORDPRESS_ROOT).join("wp-cron.php").is_file() {
        panic!("Debian's wordpress package is not installed ({WORDPRESS_ROOT}/wp-cron.php is missing); {INSTALL_HINT}");
    }
    if !Path::new(mariadb::MARIADBD).is_file() {
        panic!(
            "Debian's mariadb-server package is not installed ({} is missing); {INSTALL_HINT}",
            mariadb::MARIADBD
        );
    }
}

/// Debian's php-symfony-http-foundation package.
pub fn require_symfony_http_foundation() {
    require_binaries();
    if !Path::new(SYMFONY_HTTP_FOUNDATION).is_file() {
        panic!("Debian's php-symfony-http-foundation package is not installed ({SYMFONY_HTTP_FOUNDATION} is missing); {INSTALL_HINT}");
    }
}

/// A per-test temporary directory, mode 0755 so that children running as
/// www-data or nobody can reach the docroot inside it.
///
/// Layout: `docroot/` (the PHP scripts, 0644; `docroot/run/` is 0777 for
/// scripts that write marks), `nginx*/`, `fpmd.toml`, `pool.d/`, `fpmd.log`.
/// Set FPMD_KEEP_TMP=1 to keep it after the test.
pub struct TestDir {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl TestDir {
    pub fn new() -> TestDir {
        require_binaries();
        let dir = tempfile::Builder::new()
            .prefix("fpmd-it-")
            .tempdir()
            .expect("create temp dir");
        let path = dir.path().to_path_buf();
        chmod(&path, 0o755);
        let docroot = path.join("docroot");
        std::fs::create_dir(&docroot).unwrap();
        chmod(&docroot, 0o755);
        for entry in std::fs::read_dir(PHP_SCRIPTS).expect("read tests/php") {
            let entry = entry.unwrap();
            let to = docroot.join(entry.file_name());
            std::fs::copy(entry.path(), &to).unwrap();
            chmod(&to, 0o644);
        }
        let run = docroot.join("run");
        std::fs::create_dir(&run).unwrap();
        chmod(&run, 0o777);
        eprintln!("test dir: {}", path.display());
        TestDir {
            dir: Some(dir),
            path,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }

    pub fn docroot(&self) -> PathBuf {
        self.path.join("docroot")
    }

    /// The marker put in the environment of fpmd and of every php-cgi of
    /// this test (`FPMD_TEST_TAG`): finds them in /proc even after fpmd died.
    pub fn tag(&self) -> String {
        self.path.display().to_string()
    }

    /// Content of `docroot/run/NAME` once it exists (see `sleep.php?mark=`).
    pub fn mark(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.docroot().join("run").join(name))
            .ok()
            .filter(|s| !s.is_empty())
    }

    /// The pid a script wrote to `run/NAME` (see `sleep.php?mark=`); panics
    /// when it is missing or not a pid.
    pub fn marked_pid(&self, name: &str) -> i32 {
        let m = self
            .mark(name)
            .unwrap_or_else(|| panic!("run/{name} is missing"));
        m.trim()
            .parse()
            .unwrap_or_else(|_| panic!("run/{name} holds {m:?}, not a pid"))
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::env::var_os("FPMD_KEEP_TMP").is_some() {
            if let Some(d) = self.dir.take() {
                eprintln!("keeping {}", d.keep().display());
            }
        }
    }
}

pub fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

/// Writes `text` as an executable script at `path`, atomically (new file
/// renamed over the old one).
pub fn write_script(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    chmod(&tmp, 0o755);
    std::fs::rename(&tmp, path).unwrap();
}

/// The text of a file (a log), invalid UTF-8 replaced; empty while there
/// is no such file.
pub fn read_lossy(p: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned()
}

/// The inode number of a file (a unix socket's tells it from its
/// replacement); panics when there is none.
pub fn inode(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
        .ino()
}

/// Makes `cmd`'s child set its soft limit of `resource` (a
/// `libc::RLIMIT_*`) to `soft`, at most its hard limit, before exec.
pub fn soft_rlimit(
    cmd: &mut std::process::Command,
    resource: libc::__rlimit_resource_t,
    soft: u64,
) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getrlimit/setrlimit are async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(resource, &mut lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            lim.rlim_cur = soft.min(lim.rlim_max);
            if libc::setrlimit(resource, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The MD5 of `b` in lower-case hex, as PHP's `md5()` prints it.
pub fn md5_hex(b: &[u8]) -> String {
    use md5::{Digest, Md5};
    Md5::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// The pid a test script's answer starts with (pid.php, sleep.php and
/// usleep.php print `getmypid()` first); panics naming the answer when it
/// does not start with one.
pub fn pid_of(body: &str) -> i32 {
    try_pid_of(body).unwrap_or_else(|| panic!("no pid in {body:?}"))
}

/// [`pid_of`], or None when the answer does not start with a pid (a load
/// loop records it and goes on).
pub fn try_pid_of(body: &str) -> Option<i32> {
    body.split_whitespace().next()?.parse().ok()
}

/// A TCP port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    free_port_on("127.0.0.1:0")
}

/// A TCP port that was free a moment ago on [::1].
pub fn free_port_v6() -> u16 {
    free_port_on("[::1]:0")
}

fn free_port_on(addr: &str) -> u16 {
    let l = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    l.local_addr().unwrap().port()
}

pub fn tcp_connectable(addr: SocketAddr) -> bool {
    std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}

/// Polls `cond` every few ms until it holds; returns the time it took.
/// Panics with `what` after `timeout`.
pub fn wait_for(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    loop {
        if cond() {
            return t0.elapsed();
        }
        if t0.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Like `wait_for` but returns false on timeout instead of panicking.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t0.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Checks that `cond` keeps holding for `period` (used only to assert that
/// something does NOT happen, e.g. a second log line).
pub fn holds_for(period: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < period {
        if !cond() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// The usual stack: one fpmd (with the given pools) behind one nginx whose
/// upstream is the first pool's listen address.
pub struct Stack {
    pub nginx: Nginx,
    pub fpmd: Fpmd,
    pub dir: TestDir,
}

impl Stack {
    pub fn start(pool: Pool) -> Stack {
        Stack::start_with(FpmdConfig::new().pool(pool), NginxOpts::default())
    }

    pub fn start_with(cfg: FpmdConfig, mut opts: NginxOpts) -> Stack {
        let dir = TestDir::new();
        let fpmd = Fpmd::start(&dir, cfg);
        if opts.upstream.is_none() {
            opts.upstream = Some(fpmd.upstream(0));
        }
        let nginx = Nginx::start(&dir, opts);
        Stack { nginx, fpmd, dir }
    }

    pub fn url(&self, path: &str) -> String {
        self.nginx.url(path)
    }
}
