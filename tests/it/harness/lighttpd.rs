//! A real lighttpd 1.4 (Debian's lighttpd, its built-in mod_fastcgi) in the
//! foreground (`-D`), with its config and logs inside the test dir, on a
//! free port (run by [`WebServer`]). `.php` goes to the FastCGI server as the lighttpd manual
//! writes it, with `check-local` enabled (lighttpd's default: it serves
//! only scripts that exist, and splits PATH_INFO itself) or disabled (it
//! hands on whatever path ends in `.php`).

use super::fpmd::Addr;
use super::webserver::{Launch, Site, Stop, WebServer};
use super::TestDir;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub const LIGHTTPD_BIN: &str = "/usr/sbin/lighttpd";
const LIGHTTPD_HINT: &str =
    "install it with `apt-get install lighttpd` (or run `make test`, which does it)";

#[derive(Clone, Debug)]
pub struct LighttpdOpts {
    /// The FastCGI server (unix socket or TCP).
    pub upstream: Addr,
    /// `"check-local" => "enable"` (lighttpd's default) or `"disable"`.
    pub check_local: bool,
    /// Name of the sub directory for this instance.
    pub name: Option<String>,
}

impl LighttpdOpts {
    pub fn new(upstream: Addr) -> Self {
        LighttpdOpts {
            upstream,
            check_local: true,
            name: None,
        }
    }
    pub fn check_local(mut self, on: bool) -> Self {
        self.check_local = on;
        self
    }
    pub fn name(mut self, n: &str) -> Self {
        self.name = Some(n.into());
        self
    }
}

/// A running lighttpd (see [`LighttpdOpts`]).
pub struct Lighttpd {
    server: WebServer,
    pub port: u16,
    pub dir: PathBuf,
}

/// Fails the test (never skips) when lighttpd is missing.
pub fn require_lighttpd() {
    if !Path::new(LIGHTTPD_BIN).is_file() {
        panic!("{LIGHTTPD_BIN} is missing: this test runs a real lighttpd; {LIGHTTPD_HINT}");
    }
}

/// Writes `<test dir>/<name>/lighttpd.conf` with one port per site, runs
/// `lighttpd -D -f` it and waits until it accepts on every port.
fn start_in(t: &TestDir, name: &str, sites: &[Site], check_local: bool) -> WebServer {
    let config = |dir: &Path, ports: &[u16]| config(dir, ports, sites, check_local);
    WebServer::start(
        t,
        name,
        &Launch {
            name: "lighttpd",
            bin: LIGHTTPD_BIN,
            hint: LIGHTTPD_HINT,
            conf_file: "lighttpd.conf",
            ports: sites.len(),
            config: &config,
            args: &|_, conf| vec!["-D".into(), "-f".into(), conf.into()],
            env: None,
            logs: &["error.log"],
            stop: Stop::Kill,
        },
    )
}

/// lighttpd in front of each site on a port of its own, `.php` handed to
/// the site's FastCGI server as the lighttpd manual writes it, with the
/// given `check-local`.
pub fn start_sites(t: &TestDir, sites: &[Site], check_local: bool) -> WebServer {
    start_in(t, "lighttpd-sites", sites, check_local)
}

impl Lighttpd {
    /// Runs lighttpd on the test's docroot in front of `opts.upstream`.
    pub fn start(t: &TestDir, opts: LighttpdOpts) -> Lighttpd {
        let name = opts.name.clone().unwrap_or_else(|| "lighttpd".into());
        let site = Site::new(t.docroot(), opts.upstream.clone());
        let server = start_in(t, &name, &[site], opts.check_local);
        Lighttpd {
            port: server.port(),
            dir: server.dir.clone(),
            server,
        }
    }

    pub fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    /// What lighttpd itself printed (config errors end up here).
    pub fn output(&self) -> String {
        self.server.output()
    }

    pub fn error_log(&self) -> String {
        self.server.read("error.log")
    }
}

/// The first site is the server's main one; each other is a
/// `$SERVER["socket"]` block of its own with its root and FastCGI server.
fn config(dir: &Path, ports: &[u16], sites: &[Site], check_local: bool) -> String {
    let d = dir.display();
    let mut s = String::new();
    writeln!(s, "server.bind = \"127.0.0.1\"\nserver.port = {}", ports[0]).unwrap();
    writeln!(s, "server.errorlog = \"{d}/error.log\"").unwrap();
    writeln!(s, "server.modules = ( \"mod_fastcgi\" )").unwrap();
    writeln!(s, "index-file.names = ( \"index.php\" )").unwrap();
    writeln!(s, "mimetype.assign = ( \".txt\" => \"text/plain\" )").unwrap();
    let check = if check_local { "enable" } else { "disable" };
    for (i, (port, site)) in ports.iter().zip(sites).enumerate() {
        let target = match &site.upstream {
            Addr::Unix(p) => format!("\"socket\" => \"{}\"", p.display()),
            Addr::Tcp(a) => format!("\"host\" => \"{}\", \"port\" => {}", a.ip(), a.port()),
        };
        let (open, close) = if i == 0 {
            (String::new(), "")
        } else {
            (
                format!("$SERVER[\"socket\"] == \"127.0.0.1:{port}\" {{\n"),
                "}\n",
            )
        };
        write!(s, "{open}").unwrap();
        writeln!(s, "server.document-root = \"{}\"", site.root.display()).unwrap();
        writeln!(
            s,
            "fastcgi.server = ( \".php\" => (( {target}, \"check-local\" => \"{check}\" )) )"
        )
        .unwrap();
        write!(s, "{close}").unwrap();
    }
    s
}
