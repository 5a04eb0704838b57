//! What a pool's PHP says of itself in every response: the `X-Powered-By`
//! header its php-cgi sends (`PHP/8.2.36` when `expose_php` is on, nothing
//! when off). php-fpm's status and ping pages are answered by PHP in a
//! child, so they carry it; fpmd answers them itself and adds the same
//! header, learned by running the pool's php-cgi once, as its children
//! run (binary, ini arguments, environment, user and group), in CGI mode
//! on an empty script.
//!
//! Owns: that one short-lived process. Must not touch: the children, the
//! sandbox (the probe reads php.ini files as the children do; it runs no
//! script of the site: the script is empty, and `auto_prepend_file` and
//! `auto_append_file` are cleared).

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::PoolConfig;

/// How long the probe may take before it is killed (and the header left
/// out).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The `X-Powered-By: …` header line (without line end) the php-cgi of
/// `config` sends, or `None` when it sends none (`expose_php` off) or the
/// probe fails (logged at debug by the caller).
pub fn powered_by(config: &PoolConfig) -> Result<Option<String>, String> {
    let spec = crate::process::spec::template(config);
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .args(["-d", "auto_prepend_file=", "-d", "auto_append_file="])
        .env_clear()
        .envs(
            spec.env
                .iter()
                .filter(|(k, _)| k != "PHP_FCGI_CHILDREN" && k != "PHP_FCGI_MAX_REQUESTS")
                .map(|(k, v)| (k, v)),
        )
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if nix::unistd::geteuid().is_root() {
        use std::os::unix::process::CommandExt;
        cmd.uid(spec.uid).gid(spec.gid);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{}: {e}", spec.program.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"<?php\n");
    }
    // fpmd's reaper waits for every child (waitpid(-1)): the probe is
    // done when php-cgi closes its stdout, not when it is waited for.
    let Some(mut stdout) = child.stdout.take() else {
        return Err("no stdout".into());
    };
    use std::os::fd::AsRawFd;
    nix::fcntl::fcntl(
        stdout.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stdout.read(&mut buf) {
            Ok(0) => break,
            Ok(n) if out.len() < 64 * 1024 => out.extend_from_slice(&buf[..n]),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    // Its stdout is still open, so it has not exited and
                    // cannot have been reaped: the pid is still its own.
                    let _ = child.kill();
                    return Err(format!(
                        "{} did not answer within {PROBE_TIMEOUT:?}",
                        spec.program.display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(header_of(&out))
}

/// The `X-Powered-By` line in the head of a CGI response.
fn header_of(out: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(out);
    text.lines()
        .map(|l| l.trim_end_matches('\r'))
        .take_while(|l| !l.is_empty())
        .find(|l| {
            l.split_once(':')
                .is_some_and(|(name, _)| name.eq_ignore_ascii_case("x-powered-by"))
        })
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_in_the_head_only() {
        assert_eq!(
            header_of(
                b"X-Powered-By: PHP/8.2.36\r\nContent-type: text/html; charset=UTF-8\r\n\r\n"
            ),
            Some("X-Powered-By: PHP/8.2.36".into())
        );
        assert_eq!(
            header_of(b"Content-type: text/html\r\n\r\nX-Powered-By: no\r\n"),
            None
        );
        assert_eq!(header_of(b""), None);
    }
}
