//! A MariaDB server of the test's own (Debian's `mariadb-server`), for the
//! web applications of the tests (WordPress): its data directory, unix
//! socket, pid file and log are in `<test dir>/mariadb/`, it does not
//! listen on TCP (`--skip-networking`), reads no option file
//! (`--no-defaults`), and is killed on drop. It never touches the
//! system's MariaDB or its files.

use super::{wait_until, TestDir, LONG};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub const MARIADBD: &str = "/usr/sbin/mariadbd";
const INSTALL_DB: &str = "/usr/bin/mariadb-install-db";
const HINT: &str =
    "install it with `apt-get install mariadb-server` (or run `make test`, which does it)";

/// A running mariadbd with one database, [`MariaDb::DATABASE`], that
/// [`MariaDb::USER`] (password [`MariaDb::PASSWORD`]) may use from
/// `localhost`, that is over the socket.
pub struct MariaDb {
    child: Option<Child>,
    dir: PathBuf,
    /// The server's unix socket (mode 0777: the pools' users connect).
    pub socket: PathBuf,
}

impl MariaDb {
    pub const DATABASE: &'static str = "app";
    pub const USER: &'static str = "app";
    pub const PASSWORD: &'static str = "app-password";

    /// Creates the data directory (`mariadb-install-db`, a few seconds)
    /// and starts the server; returns once it accepts connections, with
    /// the database and its user created (`--init-file`).
    pub fn start(t: &TestDir) -> MariaDb {
        for bin in [MARIADBD, INSTALL_DB] {
            if !std::path::Path::new(bin).is_file() {
                panic!("{bin} is missing: Debian's mariadb-server package provides it; {HINT}");
            }
        }
        let dir = t.join("mariadb");
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("data");
        let socket = dir.join("mysqld.sock");
        // As root the server wants to be told which user it runs as: the
        // files are the test's, so the test's own user.
        let root = nix::unistd::geteuid().is_root();
        let mut install = Command::new(INSTALL_DB);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=socket", "--skip-test-db"]);
        if root {
            install.arg("--user=root");
        }
        let out = install
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {INSTALL_DB}: {e}; {HINT}"));
        if !out.status.success() {
            panic!(
                "{INSTALL_DB} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // One statement per line: the init file is read line by line.
        let (db, user, pw) = (Self::DATABASE, Self::USER, Self::PASSWORD);
        let init = dir.join("init.sql");
        std::fs::write(
            &init,
            format!(
                "CREATE DATABASE {db} CHARACTER SET utf8mb4;\n\
                 CREATE USER '{user}'@'localhost' IDENTIFIED BY '{pw}';\n\
                 GRANT ALL ON {db}.* TO '{user}'@'localhost';\n"
            ),
        )
        .unwrap();
        let log = dir.join("mariadbd.log");
        let mut cmd = Command::new(MARIADBD);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", dir.join("mariadbd.pid").display()))
            .arg(format!("--log-error={}", log.display()))
            .arg(format!("--init-file={}", init.display()))
            .args([
                "--skip-networking",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=16M",
                "--innodb-log-file-size=8M",
            ]);
        if root {
            cmd.arg("--user=root");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {MARIADBD}: {e}; {HINT}"));
        let mut m = MariaDb {
            child: Some(child),
            dir,
            socket,
        };
        // "ready for connections" comes after the init file ran.
        let ok = wait_until(LONG, || {
            m.log().contains("ready for connections")
                || m.child.as_mut().unwrap().try_wait().unwrap().is_some()
        });
        if !ok || !m.log().contains("ready for connections") {
            panic!("mariadbd did not start: {}", m.log());
        }
        if m.log().contains("ERROR: ") {
            panic!("mariadbd's init file failed: {}", m.log());
        }
        m
    }

    /// WordPress's `DB_HOST` (and mysqli's) for the socket: `localhost:/path`.
    pub fn host(&self) -> String {
        format!("localhost:{}", self.socket.display())
    }

    pub fn log(&self) -> String {
        super::read_lossy(&self.dir.join("mariadbd.log"))
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
