//! What every web server of the tests has in common: it runs in the
//! foreground with its config, logs and runtime files inside the test dir,
//! listens on free ports (retried when a parallel test takes one between
//! our probe and its bind), is ready once every port accepts, is stopped
//! on drop, and shows its logs when the test fails. The per-server files
//! (nginx.rs, apache.rs, lighttpd.rs, caddy.rs, h2o.rs) only write their
//! configuration and say how the binary is called.
//!
//! For the web-server matrix (tests/it/webservers.rs) each server also
//! starts with several [`Site`]s, one port each: the same server in front
//! of fpmd and of php-fpm at once, configured alike.

use super::fpmd::Addr;
use super::{free_port, read_lossy, tcp_connectable, TestDir};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How a web server is stopped when the test is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGKILL: it has no processes of its own to clean up.
    Kill,
    /// SIGTERM, so that it stops its children and removes its shared
    /// memory (Apache); SIGKILL after 10 s; then every process it had
    /// started is killed too.
    TermThenTree,
}

/// Writes a server's configuration text, given its directory and ports.
pub type ConfigFn<'a> = &'a dyn Fn(&Path, &[u16]) -> String;
/// A server's arguments, given its directory and its configuration file.
pub type ArgsFn<'a> = &'a dyn Fn(&Path, &Path) -> Vec<OsString>;
/// A server's whole environment, given its directory.
pub type EnvFn<'a> = &'a dyn Fn(&Path) -> Vec<(String, String)>;

/// How to run one web server: what the per-server harness tells
/// [`WebServer::start`].
pub struct Launch<'a> {
    /// The program's name in messages ("nginx", "apache2", …).
    pub name: &'a str,
    /// Absolute path of the binary.
    pub bin: &'a str,
    /// How to install it (`apt-get install …`), for the failure message.
    pub hint: &'a str,
    /// File name of its configuration inside its directory.
    pub conf_file: &'a str,
    /// How many ports it listens on.
    pub ports: usize,
    /// The configuration text for its directory and these ports.
    pub config: ConfigFn<'a>,
    /// Its arguments, given its directory and the path of its configuration.
    pub args: ArgsFn<'a>,
    /// When set, its environment is cleared and holds only these (the
    /// values may name files in its directory, given as the argument).
    pub env: Option<EnvFn<'a>>,
    /// Log files it writes in its directory: emptied before each attempt
    /// (some servers append), shown when the test fails.
    pub logs: &'a [&'a str],
    pub stop: Stop,
}

/// A running web server (see the module's comment).
pub struct WebServer {
    child: Option<Child>,
    /// Its ports on 127.0.0.1, in the order its configuration was given them.
    pub ports: Vec<u16>,
    /// Its directory in the test dir (config, logs, runtime files).
    pub dir: PathBuf,
    name: String,
    logs: Vec<String>,
    stop: Stop,
}

/// What the binary printed on stdout and stderr, in its directory.
const OUTPUT: &str = "server.out";

impl WebServer {
    /// Makes `<test dir>/<dir_name>/`, writes the configuration there,
    /// starts the binary and waits until every port accepts; tries other
    /// ports when one was taken meanwhile. Panics with the install hint when
    /// the binary is missing, and with its output when it does not start.
    pub fn start(t: &TestDir, dir_name: &str, l: &Launch) -> WebServer {
        if !Path::new(l.bin).is_file() {
            panic!(
                "{} is missing: this test runs a real {}; {}",
                l.bin, l.name, l.hint
            );
        }
        let dir = t.join(dir_name);
        std::fs::create_dir_all(&dir).unwrap();
        super::chmod(&dir, 0o755);
        let mut last_err = String::new();
        for _ in 0..5 {
            let ports: Vec<u16> = (0..l.ports).map(|_| free_port()).collect();
            let conf = dir.join(l.conf_file);
            std::fs::write(&conf, (l.config)(&dir, &ports)).unwrap();
            for f in l.logs {
                let _ = std::fs::remove_file(dir.join(f));
            }
            let out = std::fs::File::create(dir.join(OUTPUT)).unwrap();
            let mut cmd = Command::new(l.bin);
            cmd.args((l.args)(&dir, &conf)).current_dir(&dir);
            if let Some(env) = l.env {
                cmd.env_clear().envs(env(&dir));
            }
            let child = cmd
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}; {}", l.bin, l.hint));
            let mut s = WebServer {
                child: Some(child),
                ports: ports.clone(),
                dir: dir.clone(),
                name: l.name.to_string(),
                logs: l.logs.iter().map(|f| f.to_string()).collect(),
                stop: l.stop,
            };
            let t0 = Instant::now();
            let mut waiting = ports.clone();
            loop {
                if let Some(st) = s.child.as_mut().unwrap().try_wait().unwrap() {
                    s.child = None;
                    last_err = format!("{} exited ({st}):\n{}", l.name, s.logs_text());
                    break;
                }
                waiting.retain(|p| !tcp_connectable(SocketAddr::from(([127, 0, 0, 1], *p))));
                if waiting.is_empty() {
                    return s;
                }
                if t0.elapsed() > Duration::from_secs(20) {
                    panic!(
                        "{} does not answer on port(s) {waiting:?} after 20 s:\n{}",
                        l.name,
                        s.logs_text()
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if !last_err.contains("already in use") {
                break;
            }
        }
        panic!("cannot start {}: {last_err}", l.name);
    }

    /// Its first port.
    pub fn port(&self) -> u16 {
        self.ports[0]
    }

    /// `http://127.0.0.1:PORT/path` on its first port.
    pub fn url(&self, path: &str) -> String {
        self.url_at(0, path)
    }

    /// `http://127.0.0.1:PORT/path` on its i-th port (the i-th site).
    pub fn url_at(&self, i: usize, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.ports[i], path)
    }

    /// A file of its directory (a log), empty when there is none.
    pub fn read(&self, file: &str) -> String {
        read_lossy(&self.dir.join(file))
    }

    /// What the binary printed (config errors end up here).
    pub fn output(&self) -> String {
        self.read(OUTPUT)
    }

    /// Its output and every log, each under a title.
    pub fn logs_text(&self) -> String {
        let mut s = format!("--- {OUTPUT} ---\n{}", self.output());
        for f in &self.logs {
            s.push_str(&format!("--- {f} ---\n{}", self.read(f)));
        }
        s
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            match self.stop {
                Stop::Kill => {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                Stop::TermThenTree => {
                    let pid = nix::unistd::Pid::from_raw(c.id() as i32);
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                    let kids = super::procs::descendants(c.id() as i32);
                    if !super::wait_until(Duration::from_secs(10), || {
                        c.try_wait().ok().flatten().is_some()
                    }) {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    super::procs::kill_all(&kids);
                }
            }
        }
        if std::thread::panicking() {
            eprintln!(
                "---- {} logs ({}) ----\n{}",
                self.name,
                self.dir.display(),
                self.logs_text()
            );
        }
    }
}

/// One site of a web server in the matrix: its own port, a document root
/// and the FastCGI server it hands PHP to.
#[derive(Clone, Debug)]
pub struct Site {
    pub root: PathBuf,
    pub upstream: Addr,
}

impl Site {
    pub fn new(root: impl Into<PathBuf>, upstream: Addr) -> Site {
        Site {
            root: root.into(),
            upstream,
        }
    }

    /// The upstream's unix socket; the matrix's documented configurations
    /// all talk to one, as Debian's php-fpm pool listens on one.
    pub fn socket(&self) -> &Path {
        match &self.upstream {
            Addr::Unix(p) => p,
            Addr::Tcp(a) => panic!("the matrix talks to unix sockets, not {a}"),
        }
    }
}

/// The web servers of the matrix, each configured as its documentation or
/// Debian's default snippet hands PHP to php-fpm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Debian's `snippets/fastcgi-php.conf` (which includes `fastcgi.conf`).
    Nginx,
    /// Debian's `conf-available/php8.2-fpm.conf`: `SetHandler
    /// "proxy:unix:SOCK|fcgi://localhost"` in a FilesMatch.
    Apache,
    /// Caddy's `php_fastcgi unix//SOCK`.
    Caddy,
    /// lighttpd's `mod_fastcgi`, `"check-local" => "enable"` (its default)
    /// or `"disable"`.
    Lighttpd { check_local: bool },
    /// h2o's `file.custom-handler` with `fastcgi.connect` (type unix).
    H2o,
}

impl Kind {
    /// Starts this server with one port per site, in the order given.
    pub fn start(self, t: &TestDir, sites: &[Site]) -> WebServer {
        match self {
            Kind::Nginx => super::nginx::start_sites(t, sites),
            Kind::Apache => super::apache::start_sites(t, sites),
            Kind::Caddy => super::caddy::start_sites(t, sites),
            Kind::Lighttpd { check_local } => super::lighttpd::start_sites(t, sites, check_local),
            Kind::H2o => super::h2o::start_sites(t, sites),
        }
    }
}
