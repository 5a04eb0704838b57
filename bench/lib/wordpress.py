"""A MariaDB of the bench's own and a WordPress site on it (Debian's packages).

As the integration tests do (tests/it/harness/mariadb.rs, sapi_apps.rs):

  MariaDb    mariadbd (Debian's mariadb-server) with its data directory,
             unix socket, pid file and log in TMP/mariadb: created by
             `mariadb-install-db`, no option file read (--no-defaults), no
             TCP (--skip-networking), one database and its user made by an
             --init-file. It runs like everything the benches start
             (procs.Managed: its own session, PDEATHSIG) and is stopped
             with SIGTERM, its graceful shutdown.
  WordPress  Debian's wordpress in TMP/www/wp: the top-level scripts copied
             (PHP resolves symlinks, so wp-load.php must be in the copy to
             find the copy's wp-config.php), wp-includes and wp-admin linked,
             a wp-content of its own whose only theme is a link to Debian's
             twentytwentyone (wordpress-theme-twentytwentyone), and a
             wp-config.php of its own. Nothing is written to /etc/wordpress
             (Debian's own wp-config.php, which reads
             /etc/wordpress/config-HOST.php, is not used).

The site is installed once (wp_install() from php-cgi on the command line,
bench/wordpress/install.php) and serves every backend.
"""

import os
import shutil
import signal
import subprocess
import time

from . import procs
from .procs import BenchError

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"
WORDPRESS_ROOT = "/usr/share/wordpress"
THEME = "twentytwentyone"
THEME_DIR = f"{WORDPRESS_ROOT}/wp-content/themes/{THEME}"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/
INSTALL_PHP = os.path.join(HERE, "wordpress", "install.php")


def missing():
    """What is missing for the WordPress workloads, as a list of
    (path, the Debian package that has it)."""
    need = [(MARIADBD, "mariadb-server"), (INSTALL_DB, "mariadb-server"),
            (f"{WORDPRESS_ROOT}/wp-settings.php", "wordpress"),
            (f"{THEME_DIR}/style.css", "wordpress-theme-twentytwentyone")]
    return [(p, pkg) for p, pkg in need if not os.path.exists(p)]


class MariaDb:
    """mariadbd in TMP/mariadb with DATABASE, usable by USER over the socket."""
    DATABASE = "wordpress"
    USER = "wordpress"
    PASSWORD = "bench-password"

    def __init__(self, tmp):
        self.dir = os.path.join(tmp, "mariadb")
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)  # the pools (www-data) reach the socket
        self.data = os.path.join(self.dir, "data")
        self.socket = os.path.join(self.dir, "mysqld.sock")
        self.log_path = os.path.join(self.dir, "mariadbd.log")
        self.out_path = os.path.join(self.dir, "mariadbd.out")
        self.proc = None
        self.name = "mariadbd"

    def start(self, timeout=60.0):
        """mariadb-install-db, then mariadbd; returns once it accepts
        connections, the database and its user made."""
        # As root the server must be told which user it runs as: its files
        # are root's, so root.
        user = ["--user=root"] if os.geteuid() == 0 else []
        try:
            r = procs.run([INSTALL_DB, "--no-defaults", f"--datadir={self.data}",
                           "--auth-root-authentication-method=socket", "--skip-test-db"] + user,
                          timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{INSTALL_DB} still running after {timeout:.0f} s (killed)")
        if r.returncode != 0:
            raise BenchError(f"{INSTALL_DB} failed ({r.returncode}):\n{r.stdout[-2000:]}")
        init = os.path.join(self.dir, "init.sql")
        # One statement per line: the init file is read line by line.
        with open(init, "w") as f:
            f.write(f"CREATE DATABASE {self.DATABASE} CHARACTER SET utf8mb4;\n"
                    f"CREATE USER '{self.USER}'@'localhost' IDENTIFIED BY '{self.PASSWORD}';\n"
                    f"GRANT ALL ON {self.DATABASE}.* TO '{self.USER}'@'localhost';\n")
        argv = [MARIADBD, "--no-defaults", f"--datadir={self.data}", f"--socket={self.socket}",
                f"--pid-file={self.dir}/mariadbd.pid", f"--log-error={self.log_path}",
                f"--init-file={init}", "--skip-networking", "--skip-log-bin",
                "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M"] + user
        self.proc = procs.Managed("mariadbd", argv, self.out_path, signal.SIGTERM)
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = self.log()
            # "ready for connections" comes after the init file ran.
            if "ready for connections" in text:
                if "ERROR: " in text:
                    raise BenchError(f"mariadbd's init file failed:\n{self.tail()}")
                self.proc.snapshot()
                return
            if not self.proc.running():
                raise BenchError(f"mariadbd exited with status {self.proc.proc.returncode} "
                                 f"while starting:\n{self.tail()}")
            time.sleep(0.1)
        raise BenchError(f"mariadbd not ready after {timeout:.0f} s:\n{self.tail()}")

    def host(self):
        """WordPress's DB_HOST (and mysqli's) for the socket: `localhost:/path`."""
        return f"localhost:{self.socket}"

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def tail(self, n=15):
        return "\n".join(procs.tail(self.log_path, n) + procs.tail(self.out_path, n))

    def stop(self):
        """SIGTERM (mariadbd's shutdown); returns what went wrong, if anything."""
        if self.proc is None or self.proc.stopped:
            return []
        out = []
        left = self.proc.stop(timeout=30.0)
        if left:
            out.append(f"mariadbd: {len(left)} process(es) still alive after it exited (killed): "
                       + procs.leftovers_text(left))
        rc = self.proc.proc.returncode
        if rc != 0:
            out.append(f"mariadbd exited with status {rc} after SIGTERM (expected 0):\n{self.tail(5)}")
        return out

    def logs(self):
        return [self.log_path, self.out_path]


# Secret keys and salts: fixed, the bench's site is thrown away with its temp dir.
KEYS = ("AUTH_KEY", "SECURE_AUTH_KEY", "LOGGED_IN_KEY", "NONCE_KEY",
        "AUTH_SALT", "SECURE_AUTH_SALT", "LOGGED_IN_SALT", "NONCE_SALT")


def wp_config(db):
    """The site's wp-config.php. WP_HOME from the request's Host: nginx has
    a server block (and port) per backend and mode, and a home on another
    port would make WordPress redirect every page to it."""
    keys = "".join(f"define('{k}', 'fpmd bench {k.lower()}');\n" for k in KEYS)
    return f"""<?php
// Written by bench/lib/wordpress.py for this run's database.
define('DB_NAME', '{db.DATABASE}');
define('DB_USER', '{db.USER}');
define('DB_PASSWORD', '{db.PASSWORD}');
define('DB_HOST', '{db.host()}');
define('DB_CHARSET', 'utf8mb4');
define('DB_COLLATE', '');
{keys}$fpmd_bench_host = isset($_SERVER['HTTP_HOST']) ? $_SERVER['HTTP_HOST'] : '127.0.0.1';
define('WP_HOME', 'http://' . $fpmd_bench_host . '/wp');
define('WP_SITEURL', 'http://' . $fpmd_bench_host . '/wp');
define('WP_CONTENT_DIR', __DIR__ . '/wp-content');
define('WP_DEFAULT_THEME', '{THEME}');
// No page view runs cron (it would request wp-cron.php over HTTP), nothing
// goes out to the network, nothing updates itself.
define('DISABLE_WP_CRON', true);
define('WP_HTTP_BLOCK_EXTERNAL', true);
define('AUTOMATIC_UPDATER_DISABLED', true);
define('WP_AUTO_UPDATE_CORE', false);
$table_prefix = 'wp_';
if (!defined('ABSPATH')) {{
    define('ABSPATH', __DIR__ . '/');
}}
require_once ABSPATH . 'wp-settings.php';
"""


def install(www, db, timeout=120.0):
    """The site in WWW/wp on db's database, installed with THEME active;
    returns its directory."""
    root = os.path.join(www, "wp")
    os.makedirs(root)
    for name in sorted(os.listdir(WORDPRESS_ROOT)):
        src = os.path.join(WORDPRESS_ROOT, name)
        if name in ("wp-includes", "wp-admin"):
            os.symlink(src, os.path.join(root, name))
        elif name.endswith(".php") and name != "wp-config.php":
            shutil.copy(src, os.path.join(root, name))
    themes = os.path.join(root, "wp-content", "themes")
    os.makedirs(themes)
    os.makedirs(os.path.join(root, "wp-content", "plugins"))
    os.symlink(THEME_DIR, os.path.join(themes, THEME))
    with open(os.path.join(root, "wp-config.php"), "w") as f:
        f.write(wp_config(db))
    shutil.copy(INSTALL_PHP, os.path.join(root, "fpmd-bench-install.php"))
    for d, _dirs, files in os.walk(root):
        os.chmod(d, 0o755)
        for name in files:
            os.chmod(os.path.join(d, name), 0o644)
    env = dict(os.environ, HTTP_HOST="127.0.0.1", FPMD_BENCH_THEME=THEME)
    try:
        r = procs.run(["php-cgi", "-q", "fpmd-bench-install.php"], cwd=root, env=env,
                      timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BenchError(f"WordPress install (php-cgi fpmd-bench-install.php) still running "
                         f"after {timeout:.0f} s (killed)")
    if r.returncode != 0 or not r.stdout.rstrip().endswith("ok"):
        raise BenchError(f"WordPress install failed ({r.returncode}):\n{r.stdout[-2000:]}")
    os.unlink(os.path.join(root, "fpmd-bench-install.php"))
    return root
