//! A real Apache 2.4 (Debian's apache2, event MPM, mod_proxy_fcgi) in the
//! foreground, with its config, logs, pid, scoreboard, mutexes and runtime
//! files inside the test dir, on a free port. The parent runs as root (the
//! tests do), its children as www-data, as on a Debian server.
//!
//! The FastCGI side is configured in one of the ways Debian users write it
//! ([`FcgiStyle`]); the test gives the address of the FastCGI server.

use super::fpmd::Addr;
use super::{chmod, free_port, tcp_connectable, TestDir, DOKUWIKI_ROOT};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const APACHE_BIN: &str = "/usr/sbin/apache2";
pub const APACHE_MODULES: &str = "/usr/lib/apache2/modules";
const APACHE_HINT: &str =
    "install it with `apt-get install apache2` (or run `make test`, which does it)";

/// The PHP file pattern of Debian's `conf-available/php8.2-fpm.conf`.
const PHP_FILES: &str = r#".+\.ph(?:ar|p|tml)$"#;

/// How Apache hands `.php` requests to the FastCGI server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FcgiStyle {
    /// Debian's snippet (`conf-available/php8.2-fpm.conf`):
    /// `<FilesMatch ".+\.ph(?:ar|p|tml)$"> SetHandler "proxy:unix:SOCK|fcgi://localhost" </FilesMatch>`
    /// (`proxy:fcgi://HOST:PORT` for a TCP upstream).
    SetHandlerUnix,
    /// `ProxyPassMatch "^/(.*\.php(/.*)?)$" "fcgi://HOST:PORT<docroot>/$1"`
    /// (`unix:SOCK|fcgi://localhost<docroot>/$1` for a unix upstream).
    ProxyPassMatchTcp,
    /// The SetHandler style with `SetHandler "proxy:unix:SOCK|fcgi://localhost/"` and
    /// `<Proxy "fcgi://localhost/" enablereuse=on max=10></Proxy>`, as
    /// mod_proxy_fcgi's documentation writes it: Apache keeps its
    /// connections to the FastCGI server open (FCGI_KEEP_CONN).
    EnableReuse,
    /// `<Proxy "balancer://php"> BalancerMember "fcgi://HOST:PORT" </Proxy>`
    /// and `SetHandler "proxy:balancer://php"` in the FilesMatch.
    Balancer,
    /// `ProxyFCGIBackendType GENERIC` with the ProxyPassMatch form.
    Generic,
}

impl FcgiStyle {
    pub const ALL: [FcgiStyle; 5] = [
        FcgiStyle::SetHandlerUnix,
        FcgiStyle::ProxyPassMatchTcp,
        FcgiStyle::EnableReuse,
        FcgiStyle::Balancer,
        FcgiStyle::Generic,
    ];

    /// Whether the usual form of this style talks to a unix socket (else TCP).
    pub fn wants_unix(self) -> bool {
        matches!(self, FcgiStyle::SetHandlerUnix | FcgiStyle::EnableReuse)
    }
}

#[derive(Clone, Debug)]
pub struct ApacheOpts {
    pub style: FcgiStyle,
    /// The FastCGI server (unix socket or TCP).
    pub upstream: Addr,
    /// Document root; default: the test's docroot.
    pub root: Option<PathBuf>,
    /// Name of the sub directory for this instance (several Apaches in one test).
    pub name: Option<String>,
    /// Raw lines appended at the end of httpd.conf.
    pub lines: Vec<String>,
}

impl ApacheOpts {
    pub fn new(style: FcgiStyle, upstream: Addr) -> Self {
        ApacheOpts {
            style,
            upstream,
            root: None,
            name: None,
            lines: Vec::new(),
        }
    }
    pub fn root(mut self, root: impl Into<PathBuf>) -> Self {
        self.root = Some(root.into());
        self
    }
    pub fn dokuwiki(self) -> Self {
        self.root(DOKUWIKI_ROOT)
    }
    pub fn name(mut self, n: &str) -> Self {
        self.name = Some(n.into());
        self
    }
    pub fn line(mut self, l: impl Into<String>) -> Self {
        self.lines.push(l.into());
        self
    }
}

pub struct Apache {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
}

/// Fails the test (never skips) when Apache or one of the modules is missing.
pub fn require_apache() {
    if !Path::new(APACHE_BIN).is_file() {
        panic!("{APACHE_BIN} is missing: this test runs a real Apache 2.4; {APACHE_HINT}");
    }
    for m in MODULES {
        let so = Path::new(APACHE_MODULES).join(format!("mod_{m}.so"));
        if !so.is_file() {
            panic!(
                "{} is missing: this test needs Apache's mod_{m}; {APACHE_HINT}",
                so.display()
            );
        }
    }
}

const MODULES: [&str; 12] = [
    "mpm_event",
    "authz_core",
    "dir",
    "mime",
    "alias",
    "rewrite",
    "setenvif",
    "proxy",
    "proxy_fcgi",
    "proxy_balancer",
    "lbmethod_byrequests",
    "slotmem_shm",
];

impl Apache {
    /// Writes `<test dir>/<name>/httpd.conf`, runs `apache2 -DFOREGROUND -f`
    /// it and waits until it accepts on its port.
    pub fn start(t: &TestDir, opts: ApacheOpts) -> Apache {
        require_apache();
        let name = opts.name.clone().unwrap_or_else(|| "apache".into());
        let dir = t.join(&name);
        std::fs::create_dir_all(dir.join("run")).unwrap();
        chmod(&dir, 0o755);
        let mut last_err = String::new();
        // A free port can be taken by a parallel test between our probe and
        // Apache's bind: try a few.
        for _ in 0..5 {
            let port = free_port();
            let conf_path = dir.join("httpd.conf");
            std::fs::write(&conf_path, config(&dir, port, t, &opts)).unwrap();
            // Apache appends to its logs: start each attempt with empty ones.
            for f in ["error.log", "access.log"] {
                let _ = std::fs::remove_file(dir.join(f));
            }
            let out = std::fs::File::create(dir.join("apache.out")).unwrap();
            let child = Command::new(APACHE_BIN)
                .arg("-DFOREGROUND")
                .arg("-f")
                .arg(&conf_path)
                .env_clear()
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                .env("LANG", "C")
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {APACHE_BIN}: {e}; {APACHE_HINT}"));
            let mut a = Apache {
                child: Some(child),
                port,
                dir: dir.clone(),
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let t0 = Instant::now();
            loop {
                if let Some(st) = a.child.as_mut().unwrap().try_wait().unwrap() {
                    a.child = None;
                    last_err = format!("apache2 exited ({st}):\n{}\n{}", a.output(), a.error_log());
                    break;
                }
                if tcp_connectable(addr) {
                    return a;
                }
                if t0.elapsed() > Duration::from_secs(20) {
                    panic!(
                        "apache2 does not answer on {addr} after 20 s:\n{}\n{}",
                        a.output(),
                        a.error_log()
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if !last_err.contains("Address already in use") {
                break;
            }
        }
        panic!("cannot start apache2: {last_err}");
    }

    /// Writes the config as `start` would and has `apache2 -t` check it,
    /// without starting anything.
    pub fn check_config(t: &TestDir, opts: &ApacheOpts) -> Result<(), String> {
        require_apache();
        let dir = t.join(opts.name.as_deref().unwrap_or("apache"));
        std::fs::create_dir_all(dir.join("run")).unwrap();
        let conf_path = dir.join("httpd.conf");
        std::fs::write(&conf_path, config(&dir, free_port(), t, opts)).unwrap();
        let out = Command::new(APACHE_BIN)
            .arg("-t")
            .arg("-f")
            .arg(&conf_path)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LANG", "C")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {APACHE_BIN}: {e}; {APACHE_HINT}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() && text.contains("Syntax OK") {
            Ok(())
        } else {
            Err(format!(
                "apache2 -t ({}): {text}\n{}",
                out.status,
                std::fs::read_to_string(&conf_path).unwrap_or_default()
            ))
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port, path)
    }

    /// What apache2 itself printed (config errors end up here).
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.dir.join("apache.out")).unwrap_or_default()
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }
}

impl Drop for Apache {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGTERM: the parent stops its www-data children and removes
            // its shared memory, semaphores and pid file; SIGKILL if it hangs.
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let kids = super::procs::descendants(c.id() as i32);
            if !super::wait_until(Duration::from_secs(10), || {
                c.try_wait().ok().flatten().is_some()
            }) {
                let _ = c.kill();
                let _ = c.wait();
            }
            for k in kids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(k.pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        if std::thread::panicking() {
            eprintln!(
                "---- apache error log ({}) ----\n{}{}",
                self.dir.display(),
                self.output(),
                self.error_log()
            );
        }
    }
}

/// `SetHandler`/`BalancerMember` target for the upstream: `unix:SOCK|fcgi://localhost`
/// or `fcgi://HOST:PORT`.
fn handler_url(a: &Addr) -> String {
    match a {
        Addr::Unix(p) => format!("unix:{}|fcgi://localhost", p.display()),
        Addr::Tcp(s) => format!("fcgi://{s}"),
    }
}

fn config(dir: &Path, port: u16, t: &TestDir, o: &ApacheOpts) -> String {
    let d = dir.display();
    let root = o.root.clone().unwrap_or_else(|| t.docroot());
    let r = root.display();
    let mut s = String::new();
    writeln!(
        s,
        "ServerRoot \"{d}\"\nServerName 127.0.0.1\nListen 127.0.0.1:{port}"
    )
    .unwrap();
    writeln!(s, "PidFile \"{d}/run/httpd.pid\"\nDefaultRuntimeDir \"{d}/run\"\nScoreBoardFile \"{d}/run/scoreboard\"")
        .unwrap();
    writeln!(s, "Mutex \"file:{d}/run\" default").unwrap();
    writeln!(
        s,
        "ErrorLog \"{d}/error.log\"\nLogLevel warn proxy_fcgi:info"
    )
    .unwrap();
    writeln!(s, "User www-data\nGroup www-data").unwrap();
    for m in MODULES {
        writeln!(s, "LoadModule {m}_module {APACHE_MODULES}/mod_{m}.so").unwrap();
    }
    // One child process: a test's requests share its connection pool (and
    // there is no second process to open connections of its own).
    writeln!(
        s,
        "StartServers 1\nServerLimit 1\nThreadLimit 16\nThreadsPerChild 16\nMaxRequestWorkers 16"
    )
    .unwrap();
    writeln!(
        s,
        "MinSpareThreads 1\nMaxSpareThreads 16\nMaxConnectionsPerChild 0"
    )
    .unwrap();
    writeln!(s, "Timeout 120\nKeepAlive On").unwrap();
    writeln!(s, "TypesConfig /etc/mime.types").unwrap();
    writeln!(
        s,
        "LogFormat \"%h \\\"%r\\\" %>s %b %D\" short\nCustomLog \"{d}/access.log\" short"
    )
    .unwrap();
    writeln!(s, "DocumentRoot \"{r}\"").unwrap();
    writeln!(
        s,
        "<Directory />\n  AllowOverride None\n  Require all denied\n</Directory>"
    )
    .unwrap();
    writeln!(
        s,
        "<Directory \"{r}\">\n  Options FollowSymLinks\n  AllowOverride None\n  Require all granted\n</Directory>"
    )
    .unwrap();
    writeln!(s, "DirectoryIndex index.php doku.php").unwrap();
    // As Debian's snippet: pass the Authorization header on.
    writeln!(
        s,
        "SetEnvIfNoCase ^Authorization$ \"(.+)\" HTTP_AUTHORIZATION=$1"
    )
    .unwrap();
    let up = &o.upstream;
    match o.style {
        FcgiStyle::SetHandlerUnix => {
            writeln!(
                s,
                "<FilesMatch \"{PHP_FILES}\">\n  SetHandler \"proxy:{}\"\n</FilesMatch>",
                handler_url(up)
            )
            .unwrap();
        }
        FcgiStyle::EnableReuse => {
            let (handler, worker) = match up {
                Addr::Unix(p) => (
                    format!("unix:{}|fcgi://localhost/", p.display()),
                    "fcgi://localhost/".to_string(),
                ),
                Addr::Tcp(a) => (format!("fcgi://{a}/"), format!("fcgi://{a}/")),
            };
            writeln!(s, "<Proxy \"{worker}\" enablereuse=on max=10>\n</Proxy>").unwrap();
            writeln!(
                s,
                "<FilesMatch \"{PHP_FILES}\">\n  SetHandler \"proxy:{handler}\"\n</FilesMatch>"
            )
            .unwrap();
        }
        FcgiStyle::Balancer => {
            writeln!(
                s,
                "<Proxy \"balancer://php\">\n  BalancerMember \"{}\"\n</Proxy>",
                handler_url(up)
            )
            .unwrap();
            writeln!(s, "<FilesMatch \"{PHP_FILES}\">\n  SetHandler \"proxy:balancer://php\"\n</FilesMatch>").unwrap();
        }
        FcgiStyle::ProxyPassMatchTcp | FcgiStyle::Generic => {
            if o.style == FcgiStyle::Generic {
                writeln!(s, "ProxyFCGIBackendType GENERIC").unwrap();
            }
            writeln!(
                s,
                "ProxyPassMatch \"^/(.*\\.php(/.*)?)$\" \"{}{r}/$1\"",
                handler_url(up)
            )
            .unwrap();
        }
    }
    // As Debian's snippet: no raw PHP sources, no nameless `.php`.
    writeln!(
        s,
        "<FilesMatch \".+\\.phps$\">\n  Require all denied\n</FilesMatch>"
    )
    .unwrap();
    writeln!(
        s,
        "<FilesMatch \"^\\.ph(?:ar|p|ps|tml)$\">\n  Require all denied\n</FilesMatch>"
    )
    .unwrap();
    for l in &o.lines {
        writeln!(s, "{l}").unwrap();
    }
    s
}
