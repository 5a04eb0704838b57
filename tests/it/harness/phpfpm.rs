//! Real php-fpm (Debian's php-fpmX.Y), foreground, with its own config in
//! the test dir and a static pool of one child on a unix socket: the
//! reference that fpmd must behave like.

use super::{require_php_fpm, wait_until, TestDir};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct PhpFpm {
    child: Option<Child>,
    pub socket: PathBuf,
    dir: PathBuf,
    tag: String,
}

impl PhpFpm {
    pub fn start(t: &TestDir) -> PhpFpm {
        let bin = require_php_fpm();
        let dir = t.join("php-fpm");
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("fpm.sock");
        let tag = format!("{}#php-fpm", t.tag());
        let conf = format!(
            "[global]\npid = {d}/php-fpm.pid\nerror_log = {d}/php-fpm.log\ndaemonize = no\n\n\
             [ref]\nuser = www-data\ngroup = www-data\nlisten = {s}\nlisten.mode = 0666\n\
             pm = static\npm.max_children = 1\nenv[FPMD_TEST_TAG] = \"{tag}\"\n",
            d = dir.display(),
            s = socket.display()
        );
        let conf_path = dir.join("php-fpm.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let out = std::fs::File::create(dir.join("php-fpm.out")).unwrap();
        let child = Command::new(&bin)
            .args(["-F", "-R", "-y"])
            .arg(&conf_path)
            .env("FPMD_TEST_TAG", &tag)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        let mut p = PhpFpm {
            child: Some(child),
            socket,
            dir,
            tag,
        };
        let ok = wait_until(Duration::from_secs(20), || {
            UnixStream::connect(&p.socket).is_ok()
                || p.child.as_mut().unwrap().try_wait().unwrap().is_some()
        });
        if !ok || UnixStream::connect(&p.socket).is_err() {
            panic!("php-fpm did not start: {}", p.log());
        }
        p
    }

    pub fn upstream(&self) -> String {
        format!("unix:{}", self.socket.display())
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
            for k in kids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(k.pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        super::procs::kill_tagged(&self.tag);
    }
}
