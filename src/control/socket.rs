//! The control socket: how `fpmd reload`, `fpmd stop` and `fpmd status`
//! talk to the running daemon.
//!
//! Owns: the unix socket at `[global] control_socket`, its one-line
//! protocol, and the client side the subcommands use. Must not touch: what
//! a command does (the daemon does it and writes the answer).
//!
//! Protocol (text, one request per connection): the client sends one line,
//! `reload`, `stop`, `status [POOL]` or `upgrade`; the daemon answers with
//! a first line `ok`, `error` or `error config`, then the lines of the
//! message, then closes. `status` answers JSON (see
//! [`crate::observe::board`]) and is answered on the socket's own task, so
//! that it is answered while a reload runs too. Only root (or fpmd's own
//! user) may connect: the socket is mode 0600 and every peer's credentials
//! are checked.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;

use super::{Intent, Order, Orders};
use tracing::{debug, warn};

/// A request from `fpmd CMD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Reload,
    Stop,
    /// Every pool, or only `pool`.
    Status {
        pool: Option<String>,
    },
    Upgrade,
}

impl Request {
    /// The request word on the wire and on the command line.
    pub fn word(&self) -> &'static str {
        match self {
            Request::Reload => "reload",
            Request::Stop => "stop",
            Request::Status { .. } => "status",
            Request::Upgrade => "upgrade",
        }
    }

    /// The request line, without its newline: the word, then the pool of
    /// a `status POOL`.
    pub fn line(&self) -> String {
        match self {
            Request::Status { pool: Some(p) } => format!("status {p}"),
            r => r.word().to_string(),
        }
    }

    /// Reads a request line (see [`Request::line`]); None when it is no
    /// request, or has arguments its word does not take.
    pub fn parse(line: &str) -> Option<Request> {
        let mut words = line.split_whitespace();
        let word = words.next()?;
        let arg = words.next();
        if words.next().is_some() {
            return None;
        }
        Some(match (word, arg) {
            ("reload", None) => Request::Reload,
            ("stop", None) => Request::Stop,
            ("status", pool) => Request::Status {
                pool: pool.map(String::from),
            },
            ("upgrade", None) => Request::Upgrade,
            _ => return None,
        })
    }
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Ok(String),
    /// The new configuration does not validate (`fpmd` exits 78).
    ConfigError(String),
    Error(String),
}

impl Answer {
    fn encode(&self) -> String {
        let (head, text) = match self {
            Answer::Ok(t) => ("ok", t),
            Answer::ConfigError(t) => ("error config", t),
            Answer::Error(t) => ("error", t),
        };
        let mut s = format!("{head}\n{text}");
        if !s.ends_with('\n') {
            s.push('\n');
        }
        s
    }

    fn decode(text: &str) -> Answer {
        let (head, rest) = text.split_once('\n').unwrap_or((text, ""));
        let rest = rest.trim_end_matches('\n').to_string();
        match head.trim() {
            "ok" => Answer::Ok(rest),
            "error config" => Answer::ConfigError(rest),
            _ => Answer::Error(rest),
        }
    }
}

/// Answers `status [POOL]` (the pool, or None for all) without waiting for
/// the daemon's loop.
pub type StatusFn = Arc<dyn Fn(Option<&str>) -> Answer + Send + Sync>;

/// Binds the control socket at `path` (its directory is created 0755 if
/// missing; a stale socket is replaced, a live one refused) and serves it:
/// `status` requests are answered by `status`, every other request reaches
/// `orders` as its [`Intent`] with the reply. Errors: the path cannot be
/// bound.
pub fn serve(path: &Path, orders: Orders, status: StatusFn) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{}: another fpmd answers on it", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    let me = nix::unistd::Uid::effective().as_raw();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let allowed = stream
                .peer_cred()
                .map(|c| c.uid() == 0 || c.uid() == me)
                .unwrap_or(false);
            if !allowed {
                warn!("control socket: refused a connection from a user other than root");
                continue;
            }
            let orders = orders.clone();
            let status = status.clone();
            tokio::spawn(async move {
                if let Err(e) = answer_one(stream, orders, status).await {
                    debug!("control socket: {e}");
                }
            });
        }
    });
    Ok(())
}

async fn answer_one(stream: UnixStream, orders: Orders, status: StatusFn) -> io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut line = String::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        BufReader::new(r).read_line(&mut line),
    )
    .await;
    let answer = match (read, Request::parse(&line)) {
        (Ok(Ok(_)), Some(Request::Status { pool })) => status(pool.as_deref()),
        (Ok(Ok(_)), Some(request)) => {
            let intent = match request {
                Request::Reload => Intent::Reload,
                Request::Stop => Intent::GracefulStop,
                Request::Upgrade => Intent::Upgrade,
                Request::Status { .. } => unreachable!("answered above"),
            };
            let (reply, rx) = oneshot::channel();
            let order = Order {
                intent,
                reply: Some(reply),
            };
            if orders.send(order).is_err() {
                Answer::Error("fpmd is stopping".into())
            } else {
                rx.await
                    .unwrap_or_else(|_| Answer::Error("fpmd is stopping".into()))
            }
        }
        _ => Answer::Error(format!(
            "unknown request {:?}: reload, stop, status [POOL] or upgrade",
            line.trim()
        )),
    };
    w.write_all(answer.encode().as_bytes()).await?;
    w.shutdown().await
}

/// Sends `request` to the daemon listening at `path` and waits for its
/// answer (a reload answers once the new configuration is in force).
/// Errors: nobody listens there (fpmd is not running, or runs with another
/// `control_socket`).
pub fn call(path: &Path, request: &Request) -> io::Result<Answer> {
    call_within(path, request, None)
}

/// [`call`], giving up (`TimedOut`) when the daemon has not answered
/// within `timeout` (None: wait as long as it takes).
pub fn call_within(
    path: &Path,
    request: &Request,
    timeout: Option<Duration>,
) -> io::Result<Answer> {
    let s = connect(path)?;
    exchange(s, request, timeout)
}

/// The daemon that answers on a control socket: its pid and a pidfd of it
/// ([`crate::sys::procfs::pidfd_open`]), taken from the connection's peer
/// credentials before any request is sent, so that the pidfd is the
/// daemon's even once it has exited.
pub struct Daemon {
    pub pid: i32,
    pub pidfd: std::os::fd::OwnedFd,
}

/// [`call`], also naming the daemon that answered (see [`Daemon`]): `fpmd
/// stop` waits for its exit. `None` for the daemon when its pid cannot be
/// told or it has exited already.
pub fn call_naming_daemon(path: &Path, request: &Request) -> io::Result<(Answer, Option<Daemon>)> {
    let s = connect(path)?;
    let daemon = nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| c.pid())
        .filter(|pid| *pid > 0)
        .and_then(|pid| {
            crate::sys::procfs::pidfd_open(pid)
                .ok()
                .map(|pidfd| Daemon { pid, pidfd })
        });
    Ok((exchange(s, request, None)?, daemon))
}

fn connect(path: &Path) -> io::Result<std::os::unix::net::UnixStream> {
    std::os::unix::net::UnixStream::connect(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot reach fpmd at {}: {e}", path.display()),
        )
    })
}

/// Writes `request` on `s` and reads the whole answer.
fn exchange(
    mut s: std::os::unix::net::UnixStream,
    request: &Request,
    timeout: Option<Duration>,
) -> io::Result<Answer> {
    use std::io::{Read, Write};
    s.set_read_timeout(timeout)?;
    s.set_write_timeout(timeout)?;
    s.write_all(format!("{}\n", request.line()).as_bytes())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| {
        let timed_out = matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        );
        if timed_out {
            io::Error::new(io::ErrorKind::TimedOut, "fpmd did not answer in time")
        } else {
            e
        }
    })?;
    Ok(Answer::decode(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip() {
        for a in [
            Answer::Ok("reloaded\npool www: respawned".into()),
            Answer::ConfigError("f.toml:3: bad".into()),
            Answer::Error(String::new()),
        ] {
            assert_eq!(Answer::decode(&a.encode()), a);
        }
        assert_eq!(Request::parse("reload\n"), Some(Request::Reload));
        assert_eq!(Request::parse("nope"), None);
        assert_eq!(Request::parse("reload www"), None);
        assert_eq!(Request::parse("status a b"), None);
        for r in [
            Request::Status { pool: None },
            Request::Status {
                pool: Some("www".into()),
            },
            Request::Upgrade,
        ] {
            assert_eq!(Request::parse(&format!("{}\n", r.line())), Some(r));
        }
    }

    #[tokio::test]
    async fn serves_one_request_per_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/ctl.sock");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Order>();
        let status: StatusFn = Arc::new(|pool| Answer::Ok(format!("status of {pool:?}")));
        serve(&path, tx.clone(), status.clone()).unwrap();
        assert!(
            serve(&path, tx, status).is_err(),
            "a live socket is not stolen"
        );
        tokio::spawn(async move {
            while let Some(o) = rx.recv().await {
                let did = format!("did {:?}", o.intent);
                o.answer(Answer::Ok(did));
            }
        });
        let p = path.clone();
        let got = tokio::task::spawn_blocking(move || call(&p, &Request::Stop))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, Answer::Ok("did GracefulStop".into()));
        let p = path.clone();
        let got = tokio::task::spawn_blocking(move || {
            let pool = Some("www".to_string());
            call_within(&p, &Request::Status { pool }, Some(Duration::from_secs(30)))
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(got, Answer::Ok("status of Some(\"www\")".into()));
        let p = path.clone();
        let bad = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut s = std::os::unix::net::UnixStream::connect(&p).unwrap();
            s.write_all(b"dance\n").unwrap();
            let mut t = String::new();
            s.read_to_string(&mut t).unwrap();
            t
        })
        .await
        .unwrap();
        assert!(bad.starts_with("error\nunknown request \"dance\""), "{bad}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
