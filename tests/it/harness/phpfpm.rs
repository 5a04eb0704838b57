//! Real php-fpm (Debian's php-fpmX.Y), foreground, with its own config in
//! the test dir and a static pool (by default one child on a unix socket):
//! the reference that fpmd must behave like.

use super::fpmd::Addr;
use super::{require_php_fpm, wait_until, TestDir};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct PhpFpmOpts {
    /// Listen on `127.0.0.1:PORT` instead of `<test dir>/php-fpm/fpm.sock`.
    pub tcp_port: Option<u16>,
    /// `pm.max_children` of the static pool; default 1.
    pub max_children: u32,
    /// Raw lines appended to the pool section, e.g. `php_admin_value[post_max_size] = 128M`.
    pub lines: Vec<String>,
    /// `listen` as written (`10.0.0.2:9000`), instead of the unix socket
    /// or `tcp_port`.
    pub listen: Option<String>,
    /// A launcher put before php-fpm (`ip netns exec NS`); it must exec
    /// php-fpm in its own process.
    pub prefix: Vec<String>,
    /// Arguments after php-fpm's own (`-c php.ini`, `-d name=value`).
    pub args: Vec<String>,
    /// Extra environment of the php-fpm process (`PHP_INI_SCAN_DIR`).
    pub env: Vec<(String, String)>,
}

impl Default for PhpFpmOpts {
    fn default() -> Self {
        PhpFpmOpts {
            tcp_port: None,
            max_children: 1,
            lines: Vec::new(),
            listen: None,
            prefix: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
        }
    }
}

impl PhpFpmOpts {
    pub fn tcp(mut self, port: u16) -> Self {
        self.tcp_port = Some(port);
        self
    }
    pub fn max_children(mut self, n: u32) -> Self {
        self.max_children = n;
        self
    }
    /// `listen` as written (see [`PhpFpmOpts::listen`]).
    pub fn listen_on(mut self, l: impl Into<String>) -> Self {
        self.listen = Some(l.into());
        self
    }
    /// Run php-fpm through `prefix` (see [`PhpFpmOpts::prefix`]).
    pub fn launched_by(mut self, prefix: Vec<String>) -> Self {
        self.prefix = prefix;
        self
    }
    pub fn line(mut self, l: impl Into<String>) -> Self {
        self.lines.push(l.into());
        self
    }
    /// An argument after php-fpm's own (see [`PhpFpmOpts::args`]).
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }
    /// A variable of php-fpm's environment.
    pub fn env(mut self, k: &str, v: impl Into<String>) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
}

pub struct PhpFpm {
    child: Option<Child>,
    /// The unix socket it listens on (or would, when it listens on TCP).
    pub socket: PathBuf,
    addr: Addr,
    dir: PathBuf,
    tag: String,
}

impl PhpFpm {
    pub fn start(t: &TestDir) -> PhpFpm {
        PhpFpm::start_with(t, PhpFpmOpts::default())
    }

    pub fn start_with(t: &TestDir, o: PhpFpmOpts) -> PhpFpm {
        let bin = require_php_fpm();
        let dir = t.join("php-fpm");
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("fpm.sock");
        let (addr, listen) = match o.tcp_port {
            _ if o.listen.is_some() => {
                let l = o.listen.clone().unwrap();
                (Addr::parse(&l), l)
            }
            Some(port) => {
                let a = SocketAddr::from(([127, 0, 0, 1], port));
                (Addr::Tcp(a), a.to_string())
            }
            None => (Addr::Unix(socket.clone()), socket.display().to_string()),
        };
        let tag = format!("{}#php-fpm", t.tag());
        let mut conf = format!(
            "[global]\npid = {d}/php-fpm.pid\nerror_log = {d}/php-fpm.log\ndaemonize = no\n\n\
             [ref]\nuser = www-data\ngroup = www-data\nlisten = {listen}\nlisten.mode = 0666\n\
             pm = static\npm.max_children = {n}\nenv[FPMD_TEST_TAG] = \"{tag}\"\n",
            d = dir.display(),
            n = o.max_children,
        );
        for l in &o.lines {
            writeln!(conf, "{l}").unwrap();
        }
        let conf_path = dir.join("php-fpm.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let out = std::fs::File::create(dir.join("php-fpm.out")).unwrap();
        let mut cmd = match o.prefix.split_first() {
            None => Command::new(&bin),
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(&bin);
                c
            }
        };
        let child = cmd
            .args(["-F", "-R", "-y"])
            .arg(&conf_path)
            .args(&o.args)
            .envs(o.env.iter().map(|(k, v)| (k, v)))
            .env("FPMD_TEST_TAG", &tag)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        let mut p = PhpFpm {
            child: Some(child),
            socket,
            addr,
            dir,
            tag,
        };
        let ok = wait_until(Duration::from_secs(20), || {
            p.addr.accepts() || p.child.as_mut().unwrap().try_wait().unwrap().is_some()
        });
        if !ok || !p.addr.accepts() {
            panic!(
                "php-fpm did not start listening on {:?}: {}",
                p.addr,
                p.log()
            );
        }
        p
    }

    /// Waits at most `timeout` for the master to exit; its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let t0 = std::time::Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return Some(st);
            }
            if t0.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Where it listens, as an nginx upstream server.
    pub fn upstream(&self) -> String {
        self.addr.nginx()
    }

    /// Where it listens.
    pub fn addr(&self) -> Addr {
        self.addr.clone()
    }

    /// The master's pid.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// Live children of the master (its pool's workers), sorted.
    pub fn children(&self) -> Vec<i32> {
        let mut v: Vec<i32> = super::procs::descendants(self.pid())
            .into_iter()
            .filter(|p| p.alive())
            .map(|p| p.pid)
            .collect();
        v.sort();
        v
    }

    pub fn log(&self) -> String {
        let a = std::fs::read_to_string(self.dir.join("php-fpm.out")).unwrap_or_default();
        let b = std::fs::read_to_string(self.dir.join("php-fpm.log")).unwrap_or_default();
        format!("{a}{b}")
    }
}

impl Drop for PhpFpm {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // php-fpm's children overwrite their environment with their
            // process title, so the tag does not find them: kill by tree.
            let kids = super::procs::descendants(c.id() as i32);
            let _ = c.kill();
            let _ = c.wait();
            super::procs::kill_all(&kids);
        }
        super::procs::kill_tagged(&self.tag);
    }
}
