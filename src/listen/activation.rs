//! Socket activation: which pool serves on each socket systemd passed
//! (`LISTEN_FDS`, taken by [`systemd_listen_fds`](super::transfer::systemd_listen_fds)
//! first thing in `main`).
//!
//! The rules, in the order they are applied to each passed socket:
//!
//! 1. **By name.** A socket whose `FileDescriptorName=` is a pool's name
//!    serves that pool, wherever it is bound: the pool's `listen.address`
//!    is replaced by the socket's address (logged), in the configuration
//!    loaded at start and in every configuration a reload loads. A named
//!    socket fpmd cannot accept on (a datagram or connected socket,
//!    `Accept=yes`, an abstract unix name) stops the start with exit 78:
//!    the pool cannot be served as the socket unit says, and binding a
//!    socket of its own instead would serve behind systemd's back.
//! 2. **By address.** Any other usable socket is taken into the
//!    [`ListenerTable`] under its address (`getsockname`), where the pool
//!    (or `pm.status_listen`) configured on that very address finds it
//!    (unix path, or TCP `ip:port`; a bare port, php-fpm's `[::]` or
//!    `0.0.0.0`, is served by a socket on either, so systemd's
//!    `ListenStream=9000`, which is `[::]:9000`, serves `listen = 9000`).
//! 3. **No pool.** A usable socket that no pool matches is kept, unused
//!    (warned): a reload that adds its pool serves on it. systemd's
//!    convention is that a service uses what it is given; closing it would
//!    gain nothing (systemd holds its own copy and keeps queueing
//!    connections on it).
//! 4. An unusable socket no pool names is warned of and closed.
//!
//! A pool no passed socket matches binds its own as usual. Sockets from
//! systemd stay as the socket unit made them: fpmd never changes their
//! owner, mode or backlog (`SocketUser=`, `SocketMode=`, `Backlog=` rule),
//! never closes them on a reload (a pool removed by a reload leaves its
//! socket open and unused, a pool added later serves on it again), never
//! binds another in their place and never unlinks their files. A binary
//! upgrade hands them over with the others, marked as systemd's.
//!
//! Owns: the matching and the names. Must not touch: the sockets' life
//! (the table owns them).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use tracing::{info, warn};

use super::{Inherited, ListenKey, ListenerTable};
use crate::config::{Config, ListenAddress};

/// A socket systemd passed that fpmd adopted: its `FileDescriptorName=`
/// (`"unknown"` when unnamed) and the address it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activated {
    pub name: String,
    pub key: ListenKey,
}

/// The sockets adopted from systemd, to match pools by name in every
/// configuration the daemon loads.
#[derive(Debug, Clone, Default)]
pub struct Activation {
    sockets: Vec<Activated>,
}

/// A named socket that cannot serve its pool.
#[derive(Debug, thiserror::Error)]
#[error(
    "socket activation: fd {fd} (FileDescriptorName={name}) cannot serve pool '{name}': {what}"
)]
pub struct ActivationError {
    pub fd: i32,
    pub name: String,
    pub what: String,
}

impl Activation {
    /// No socket was passed.
    pub fn none() -> Activation {
        Activation::default()
    }

    /// Adopts `passed` (name and fd, as [`systemd_listen_fds`] returns
    /// them) into `table` by the rules of the module, for `config`.
    /// Errors: a socket named after a pool that fpmd cannot accept on; the
    /// sockets already adopted then stay in `table` (dropped with it).
    ///
    /// [`systemd_listen_fds`]: super::transfer::systemd_listen_fds
    pub fn adopt(
        passed: Vec<(String, OwnedFd)>,
        config: &Config,
        table: &mut ListenerTable,
    ) -> Result<Activation, ActivationError> {
        let mut sockets = Vec::new();
        for (name, fd) in passed {
            let raw = fd.as_raw_fd();
            let adopted = ListenKey::of_socket(fd.as_fd())
                .map_err(|e| e.to_string())
                .and_then(|key| {
                    table
                        .adopt(key.clone(), fd, Inherited::Systemd)
                        .map(|()| key)
                        .map_err(|e| e.to_string())
                });
            let key = match adopted {
                Ok(k) => k,
                Err(what) if config.pool(&name).is_some() => {
                    return Err(ActivationError {
                        fd: raw,
                        name,
                        what,
                    })
                }
                Err(what) => {
                    warn!("socket activation: fd {raw} (FileDescriptorName={name}) is not usable ({what}): closed");
                    continue;
                }
            };
            sockets.push(Activated { name, key });
        }
        let activation = Activation { sockets };
        for s in &activation.sockets {
            let by_address = config
                .pools
                .iter()
                .flat_map(|p| p.listeners().into_iter().map(move |(l, _)| (p, l)))
                .find(|(_, l)| l.address.is_bound_as(s.key.address()));
            match (config.pool(&s.name), by_address) {
                (Some(p), _) => info!(pool = %p.name, "socket activation: serving on {} (FileDescriptorName={})", s.key, s.name),
                (None, Some((p, _))) => info!(pool = %p.name, "socket activation: serving on {} (its listen address)", s.key),
                (None, None) => warn!(
                    "socket activation: {} (FileDescriptorName={}) matches no pool by name or address: kept open, unused, for a reload that adds its pool",
                    s.key, s.name
                ),
            }
        }
        Ok(activation)
    }

    /// Sockets handed over by the fpmd this one replaces (binary upgrade)
    /// that were systemd's there.
    pub fn from_handover(sockets: Vec<Activated>) -> Activation {
        Activation { sockets }
    }

    /// The adopted sockets.
    pub fn sockets(&self) -> &[Activated] {
        &self.sockets
    }

    /// Whether any socket was passed.
    pub fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }

    /// Points every pool named like an adopted socket at that socket's
    /// address (rule 1 of the module), logging each replaced
    /// `listen.address`. Call it on every configuration loaded, before its
    /// sockets are obtained.
    pub fn apply(&self, config: &mut Config) {
        for s in &self.sockets {
            let Some(pool) = config.pools.iter_mut().find(|p| p.name == s.name) else {
                continue;
            };
            if ListenKey::new(&pool.listen.address) == s.key {
                continue;
            }
            info!(pool = %pool.name, "listen.address {} is replaced by the socket systemd passed as FileDescriptorName={}: {}", pool.listen.address, s.name, s.key);
            if matches!(s.key.address(), ListenAddress::Unix(_))
                && pool.listen.allowed_clients.is_some()
            {
                warn!(pool = %pool.name, "listen.allowed_clients does not apply to the unix socket systemd passed");
            }
            std::sync::Arc::make_mut(pool).listen.address = s.key.address().clone();
        }
        // A bare port is served by a socket bound as it (systemd's
        // `ListenStream=9000` is `[::]:9000`, or `0.0.0.0:9000` without
        // IPv6), which is kept under its own address.
        for pool in config.pools.iter_mut() {
            if !matches!(pool.listen.address, ListenAddress::Port(_)) {
                continue;
            }
            let bound = self
                .sockets
                .iter()
                .find(|s| pool.listen.address.is_bound_as(s.key.address()));
            if let Some(s) = bound {
                std::sync::Arc::make_mut(pool).listen.address = s.key.address().clone();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ListenAddress;
    use std::path::Path;

    fn config(dir: &Path, tcp: std::net::SocketAddr) -> Config {
        let main = dir.join("fpmd.toml");
        let pool = |name: &str, address: &str| {
            format!("[{name}]\nuser = \"nobody\"\ngroup = \"nogroup\"\nphp_cgi = \"/bin/sh\"\nlisten.address = {address:?}\npm.max_children = 1\n")
        };
        let text = format!(
            "{}{}",
            pool("www", &dir.join("configured.sock").display().to_string()),
            pool("api", &tcp.to_string())
        );
        std::fs::write(&main, text).unwrap();
        crate::config::load(&main).unwrap()
    }

    fn unix(path: &Path) -> OwnedFd {
        OwnedFd::from(std::os::unix::net::UnixListener::bind(path).unwrap())
    }

    /// By name (wherever bound), by address, none (kept), unusable and
    /// unnamed (closed); the named pool's address is replaced.
    #[test]
    fn sockets_are_matched_by_name_then_address() {
        let dir = tempfile::tempdir().unwrap();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp_addr = tcp.local_addr().unwrap();
        let mut config = config(dir.path(), tcp_addr);
        let www = dir.path().join("www.sock");
        let late = dir.path().join("late.sock");
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let passed = vec![
            ("www".to_string(), unix(&www)),
            ("unknown".to_string(), OwnedFd::from(tcp)),
            ("late".to_string(), unix(&late)),
            ("unknown".to_string(), OwnedFd::from(udp)),
        ];
        let mut table = ListenerTable::new();
        let activation = Activation::adopt(passed, &config, &mut table).unwrap();
        let names: Vec<(&str, String)> = activation
            .sockets()
            .iter()
            .map(|s| (s.name.as_str(), s.key.to_string()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("www", www.display().to_string()),
                ("unknown", tcp_addr.to_string()),
                ("late", late.display().to_string()),
            ]
        );
        assert_eq!(table.len(), 3, "the UDP socket was kept");
        for s in activation.sockets() {
            assert_eq!(table.inherited(&s.key), Some(Inherited::Systemd));
        }

        activation.apply(&mut config);
        let address = |name: &str| config.pool(name).unwrap().listen.address.clone();
        assert_eq!(address("www"), ListenAddress::Unix(www.clone()));
        assert_eq!(address("api"), ListenAddress::Tcp(tcp_addr));
    }

    /// systemd's `ListenStream=PORT` (`[::]:PORT`) serves a pool whose
    /// address is that bare port.
    #[test]
    fn a_bare_port_is_served_by_systemds_socket_on_it() {
        let dir = tempfile::tempdir().unwrap();
        let any6 = std::net::TcpListener::bind("[::]:0").unwrap();
        let port = any6.local_addr().unwrap().port();
        let mut config = config(dir.path(), "127.0.0.1:1".parse().unwrap());
        std::sync::Arc::make_mut(&mut config.pools[1])
            .listen
            .address = ListenAddress::Port(port);
        let mut table = ListenerTable::new();
        let passed = vec![("unknown".to_string(), OwnedFd::from(any6))];
        let activation = Activation::adopt(passed, &config, &mut table).unwrap();
        activation.apply(&mut config);
        let api = &config.pool("api").unwrap().listen;
        assert_eq!(
            api.address,
            ListenAddress::Tcp(format!("[::]:{port}").parse().unwrap())
        );
        assert_eq!(
            table.obtain("api", api).unwrap(),
            crate::listen::Obtained::Kept
        );
    }

    /// A socket named after a pool that fpmd cannot accept on is an error
    /// naming the fd and the pool.
    #[test]
    fn a_named_unusable_socket_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path(), "127.0.0.1:9".parse().unwrap());
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&udp);
        let mut table = ListenerTable::new();
        let e = Activation::adopt(
            vec![("api".into(), OwnedFd::from(udp))],
            &config,
            &mut table,
        )
        .unwrap_err();
        assert_eq!((e.fd, e.name.as_str()), (fd, "api"));
        assert!(e.what.contains("not a stream socket"), "{e}");
        assert!(table.is_empty());
    }
}
