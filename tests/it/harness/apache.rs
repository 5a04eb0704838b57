//! A real Apache 2.4 (Debian's apache2, event MPM, mod_proxy_fcgi) in the
//! foreground, with its config, logs, pid, scoreboard, mutexes and runtime
//! files inside the test dir, on a free port (run by [`WebServer`]). The parent runs as root (the
//! tests do), its children as www-data, as on a Debian server.
//!
//! The FastCGI side is configured in one of the ways Debian users write it
//! ([`FcgiStyle`]); the test gives the address of the FastCGI server.

use super::fpmd::Addr;
use super::webserver::{ConfigFn, Launch, Site, Stop, WebServer};
use super::{chmod, free_port, TestDir, DOKUWIKI_ROOT};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// A running Apache (see [`ApacheOpts`]).
pub struct Apache {
    server: WebServer,
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

/// How Apache is run: `-DFOREGROUND -f CONF`, in a clean environment.
fn launch<'a>(config: ConfigFn<'a>, ports: usize) -> Launch<'a> {
    Launch {
        name: "apache2",
        bin: APACHE_BIN,
        hint: APACHE_HINT,
        conf_file: "httpd.conf",
        ports,
        config,
        args: &|_, conf| vec!["-DFOREGROUND".into(), "-f".into(), conf.into()],
        env: Some(&|_| {
            vec![
                ("PATH".into(), "/usr/sbin:/usr/bin:/sbin:/bin".into()),
                ("LANG".into(), "C".into()),
            ]
        }),
        // Apache appends to its logs: each attempt starts with empty ones.
        logs: &["error.log", "access.log"],
        // The parent stops its www-data children and removes its shared
        // memory, semaphores and pid file.
        stop: Stop::TermThenTree,
    }
}

/// Makes `<test dir>/<name>/run/`, where Apache keeps its runtime files.
fn make_dir(t: &TestDir, name: &str) {
    let dir = t.join(name);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    chmod(&dir, 0o755);
}

/// Apache in front of each site on a port of its own (a `<VirtualHost>`
/// each), PHP handed on as Debian's `conf-available/php8.2-fpm.conf`
/// does: `<FilesMatch ".+\.ph(?:ar|p|tml)$"> SetHandler
/// "proxy:unix:SOCK|fcgi://localhost" </FilesMatch>` (not the commented-out
/// variant that first checks that the file exists), with the snippet's
/// `Authorization` pass-through and its two denying FilesMatch.
pub fn start_sites(t: &TestDir, sites: &[Site]) -> WebServer {
    require_apache();
    make_dir(t, "apache-sites");
    let config = |dir: &Path, ports: &[u16]| {
        let mut s = preamble(dir, ports);
        for (port, site) in ports.iter().zip(sites) {
            let r = site.root.display();
            writeln!(s, "<VirtualHost 127.0.0.1:{port}>\n  DocumentRoot \"{r}\"").unwrap();
            writeln!(s, "  <Directory \"{r}\">\n    Options FollowSymLinks\n    AllowOverride None\n    Require all granted\n  </Directory>").unwrap();
            writeln!(
                s,
                "  <FilesMatch \"{PHP_FILES}\">\n    SetHandler \"proxy:unix:{}|fcgi://localhost\"\n  </FilesMatch>",
                site.socket().display()
            )
            .unwrap();
            writeln!(s, "</VirtualHost>").unwrap();
        }
        denials(&mut s);
        s
    };
    WebServer::start(t, "apache-sites", &launch(&config, sites.len()))
}

impl Apache {
    /// Writes `<test dir>/<name>/httpd.conf`, runs `apache2 -DFOREGROUND -f`
    /// it and waits until it accepts on its port.
    pub fn start(t: &TestDir, opts: ApacheOpts) -> Apache {
        require_apache();
        let name = opts.name.clone().unwrap_or_else(|| "apache".into());
        make_dir(t, &name);
        let server = WebServer::start(
            t,
            &name,
            &launch(&|dir, ports| config(dir, ports[0], t, &opts), 1),
        );
        Apache {
            port: server.port(),
            dir: server.dir.clone(),
            server,
        }
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
        self.server.url(path)
    }

    /// What apache2 itself printed (config errors end up here).
    pub fn output(&self) -> String {
        self.server.output()
    }

    pub fn error_log(&self) -> String {
        self.server.read("error.log")
    }

    pub fn access_log(&self) -> String {
        self.server.read("access.log")
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

/// Everything but the sites: server root, ports, modules, one event-MPM
/// child, logs, `<Directory />` denied, and Debian's `Authorization`
/// pass-through.
fn preamble(dir: &Path, ports: &[u16]) -> String {
    let d = dir.display();
    let mut s = String::new();
    writeln!(s, "ServerRoot \"{d}\"\nServerName 127.0.0.1").unwrap();
    for port in ports {
        writeln!(s, "Listen 127.0.0.1:{port}").unwrap();
    }
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
    writeln!(
        s,
        "<Directory />\n  AllowOverride None\n  Require all denied\n</Directory>"
    )
    .unwrap();
    writeln!(s, "DirectoryIndex index.php doku.php").unwrap();
    // As Debian's snippet: pass the Authorization header on.
    writeln!(
        s,
        "SetEnvIfNoCase ^Authorization$ \"(.+)\" HTTP_AUTHORIZATION=$1"
    )
    .unwrap();
    s
}

/// As Debian's snippet: no raw PHP sources, no nameless `.php`.
fn denials(s: &mut String) {
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
}

fn config(dir: &Path, port: u16, t: &TestDir, o: &ApacheOpts) -> String {
    let root = o.root.clone().unwrap_or_else(|| t.docroot());
    let r = root.display();
    let mut s = preamble(dir, &[port]);
    writeln!(s, "DocumentRoot \"{r}\"").unwrap();
    writeln!(
        s,
        "<Directory \"{r}\">\n  Options FollowSymLinks\n  AllowOverride None\n  Require all granted\n</Directory>"
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
    denials(&mut s);
    for l in &o.lines {
        writeln!(s, "{l}").unwrap();
    }
    s
}
