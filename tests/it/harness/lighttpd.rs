//! A real lighttpd 1.4 (Debian's lighttpd, its built-in mod_fastcgi) in the
//! foreground (`-D`), with its config and logs inside the test dir, on a
//! free port. `.php` goes to the FastCGI server as the lighttpd manual
//! writes it, with `check-local` enabled (lighttpd's default: it serves
//! only scripts that exist, and splits PATH_INFO itself) or disabled (it
//! hands on whatever path ends in `.php`).

use super::fpmd::Addr;
use super::{free_port, tcp_connectable, TestDir};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

pub struct Lighttpd {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
}

/// Fails the test (never skips) when lighttpd is missing.
pub fn require_lighttpd() {
    if !Path::new(LIGHTTPD_BIN).is_file() {
        panic!("{LIGHTTPD_BIN} is missing: this test runs a real lighttpd; {LIGHTTPD_HINT}");
    }
}

impl Lighttpd {
    /// Writes `<test dir>/<name>/lighttpd.conf`, runs `lighttpd -D -f` it
    /// and waits until it accepts on its port.
    pub fn start(t: &TestDir, opts: LighttpdOpts) -> Lighttpd {
        require_lighttpd();
        let name = opts.name.clone().unwrap_or_else(|| "lighttpd".into());
        let dir = t.join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut last_err = String::new();
        // A free port can be taken by a parallel test between our probe and
        // lighttpd's bind: try a few.
        for _ in 0..5 {
            let port = free_port();
            let conf_path = dir.join("lighttpd.conf");
            std::fs::write(&conf_path, config(&dir, port, t, &opts)).unwrap();
            let out = std::fs::File::create(dir.join("lighttpd.out")).unwrap();
            let child = Command::new(LIGHTTPD_BIN)
                .arg("-D")
                .arg("-f")
                .arg(&conf_path)
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {LIGHTTPD_BIN}: {e}; {LIGHTTPD_HINT}"));
            let mut l = Lighttpd {
                child: Some(child),
                port,
                dir: dir.clone(),
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let t0 = Instant::now();
            loop {
                if let Some(st) = l.child.as_mut().unwrap().try_wait().unwrap() {
                    l.child = None;
                    last_err =
                        format!("lighttpd exited ({st}):\n{}\n{}", l.output(), l.error_log());
                    break;
                }
                if tcp_connectable(addr) {
                    return l;
                }
                if t0.elapsed() > Duration::from_secs(20) {
                    panic!(
                        "lighttpd does not answer on {addr} after 20 s:\n{}\n{}",
                        l.output(),
                        l.error_log()
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if !last_err.contains("Address already in use") {
                break;
            }
        }
        panic!("cannot start lighttpd: {last_err}");
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port, path)
    }

    /// What lighttpd itself printed (config errors end up here).
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.dir.join("lighttpd.out")).unwrap_or_default()
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

impl Drop for Lighttpd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- lighttpd error log ({}) ----\n{}{}",
                self.dir.display(),
                self.output(),
                self.error_log()
            );
        }
    }
}

fn config(dir: &Path, port: u16, t: &TestDir, o: &LighttpdOpts) -> String {
    let d = dir.display();
    let mut s = String::new();
    writeln!(s, "server.document-root = \"{}\"", t.docroot().display()).unwrap();
    writeln!(s, "server.bind = \"127.0.0.1\"\nserver.port = {port}").unwrap();
    writeln!(s, "server.errorlog = \"{d}/error.log\"").unwrap();
    writeln!(s, "server.modules = ( \"mod_fastcgi\" )").unwrap();
    writeln!(s, "index-file.names = ( \"index.php\" )").unwrap();
    writeln!(s, "mimetype.assign = ( \".txt\" => \"text/plain\" )").unwrap();
    let target = match &o.upstream {
        Addr::Unix(p) => format!("\"socket\" => \"{}\"", p.display()),
        Addr::Tcp(a) => format!("\"host\" => \"{}\", \"port\" => {}", a.ip(), a.port()),
    };
    let check = if o.check_local { "enable" } else { "disable" };
    writeln!(
        s,
        "fastcgi.server = ( \".php\" => (( {target}, \"check-local\" => \"{check}\" )) )"
    )
    .unwrap();
    s
}
