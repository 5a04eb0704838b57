//! The checks across pools: one name per pool, one pool per listen
//! address (a unix socket counts once whatever path names it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::PoolCtx;
use crate::config::model::{Global, ListenAddress, PoolConfig};
use crate::config::raw::RawPool;
use crate::config::source::SourceFile;
use crate::config::ConfigError;

/// The files of one configuration, main file first, each with the raw
/// pools it defines in document order.
pub(in crate::config) type Files = Vec<(SourceFile, Vec<(String, RawPool)>)>;
/// Every pool name is defined once, in any file, and there is a pool.
pub(in crate::config) fn check_pool_names(files: &Files) -> Result<(), ConfigError> {
    let mut seen: HashMap<String, (PathBuf, Option<usize>)> = HashMap::new();
    for (src, pools) in files {
        for (name, _) in pools {
            let line = src.find_line(&[name]);
            if let Some((first_file, first_line)) = seen.get(name) {
                let at = location(first_file, *first_line);
                return Err(ConfigError {
                    file: src.path.clone(),
                    line,
                    pool: Some(name.clone()),
                    key: None,
                    message: format!("pool '{name}' is defined twice: here and in {at}"),
                    php_fpm: None,
                });
            }
            seen.insert(name.clone(), (src.path.clone(), line));
        }
    }
    if seen.is_empty() {
        return Err(ConfigError::file_only(
            &files[0].0.path,
            "no pool defined: add a pool table such as [www] to this file or to a file matched by global.include",
        ));
    }
    Ok(())
}
/// `file:line`, or `file` when the line is not known.
pub(super) fn location(file: &Path, line: Option<usize>) -> String {
    match line {
        Some(l) => format!("{}:{l}", file.display()),
        None => file.display().to_string(),
    }
}
/// How two listen addresses collide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Collision {
    /// The same socket.
    Same,
    /// Different addresses that cannot both be bound: one TCP address is
    /// the unspecified address (`0.0.0.0`, `[::]`) of the other's family,
    /// on the same port, or one is `[::]` (bound dual-stack, as php-fpm
    /// binds it: it takes IPv4 clients too) and the other any IPv4 address
    /// on that port.
    Overlap,
}
/// Whether two listen addresses collide; unix paths are compared by
/// [`socket_identity`]. (The check resolves each address once and
/// compares with `collision_of`.)
#[cfg(test)]
pub(super) fn collision(a: &ListenAddress, b: &ListenAddress) -> Option<Collision> {
    collision_of(&identity(a), &identity(b))
}
/// `a` with a unix path as [`socket_identity`] has it.
fn identity(a: &ListenAddress) -> ListenAddress {
    match a {
        ListenAddress::Unix(p) => ListenAddress::Unix(socket_identity(p)),
        // `[::]:PORT` first; its IPv4 fallback collides with no more.
        other => other
            .tcp()
            .map_or_else(|| other.clone(), ListenAddress::Tcp),
    }
}
/// [`collision`] of two addresses already through [`identity`].
fn collision_of(a: &ListenAddress, b: &ListenAddress) -> Option<Collision> {
    match (a, b) {
        (ListenAddress::Unix(x), ListenAddress::Unix(y)) => (x == y).then_some(Collision::Same),
        (ListenAddress::Tcp(x), ListenAddress::Tcp(y)) => {
            if x == y {
                Some(Collision::Same)
            } else if x.port() == y.port()
                && ((x.is_ipv4() == y.is_ipv4()
                    && (x.ip().is_unspecified() || y.ip().is_unspecified()))
                    || (x.is_ipv6() && x.ip().is_unspecified() && y.is_ipv4())
                    || (y.is_ipv6() && y.ip().is_unspecified() && x.is_ipv4()))
            {
                Some(Collision::Overlap)
            } else {
                None
            }
        }
        _ => None,
    }
}
/// A unix socket path as the kernel will see it: its directory with `..`
/// and symlinks resolved when it exists (so `pool.d/../run/x.sock` and
/// `run/x.sock` are one socket), else the path as written.
pub(super) fn socket_identity(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}
/// Every pool listens on addresses of its own (`listen.address`, and
/// `pm.status_listen` if set): two listeners on one address (or on
/// overlapping TCP addresses) are an error at the second one's key, naming
/// the first pool and where it is set; so is a pool on fpmd's control
/// socket. `metrics.listen` collides with neither a pool's listener nor the
/// control socket (an error at `global.metrics.listen`). `pools` are in load
/// order, each with the file that defined it; `main` is the main file.
pub(in crate::config) fn check_listen_addresses(
    main: &SourceFile,
    global: &Global,
    pools: &[(&SourceFile, &PoolConfig)],
) -> Result<(), ConfigError> {
    let control = identity(&ListenAddress::Unix(global.control_socket.clone()));
    // Every listener: its pool, the key that sets it, its address.
    let mut all: Vec<(&SourceFile, &PoolConfig, [&str; 2], &ListenAddress)> = Vec::new();
    for (src, pool) in pools {
        all.push((src, pool, ["listen", "address"], &pool.listen.address));
        if let Some(a) = &pool.local.status_listen {
            all.push((src, pool, ["pm", "status_listen"], a));
        }
    }
    // Each unix path resolved once, not once per pair: with 2,000 pools
    // the pairs made 12 million readlink calls (19 s of `fpmd -t`).
    let ids: Vec<ListenAddress> = all.iter().map(|(_, _, _, a)| identity(a)).collect();
    if let Some(metrics) = &global.metrics_listen {
        let err = |message: String| ConfigError {
            file: main.path.clone(),
            line: main.find_line(&["global", "metrics", "listen"]),
            pool: None,
            key: Some("global.metrics.listen".into()),
            message,
            php_fpm: None,
        };
        let metrics_id = identity(metrics);
        if collision_of(&control, &metrics_id).is_some() {
            return Err(err(format!(
                "{metrics} is fpmd's control socket: the metrics endpoint needs an address of its own"
            )));
        }
        for ((src, pool, key, address), id) in all.iter().zip(&ids) {
            if collision_of(&metrics_id, id).is_some() {
                let at = location(&src.path, src.find_line(&[&pool.name, key[0], key[1]]));
                let what = if key[0] == "listen" {
                    "listen address"
                } else {
                    "status listen address (pm.status_listen)"
                };
                return Err(err(format!(
                    "{metrics} collides with {address}, the {what} of pool '{}' ({at}): the metrics endpoint needs an address of its own",
                    pool.name
                )));
            }
        }
    }
    for (i, (src, pool, key, address)) in all.iter().enumerate() {
        let err = |message: String| {
            PoolCtx {
                src,
                name: &pool.name,
            }
            .err(key, message)
        };
        if collision_of(&control, &ids[i]).is_some() {
            let at = match main.find_line(&["global", "control_socket"]) {
                Some(l) => format!("global.control_socket, {}:{l}", main.path.display()),
                None => "the default of global.control_socket".to_string(),
            };
            return Err(err(format!(
                "{address} is fpmd's control socket ({at}): a pool cannot listen on it"
            )));
        }
        for ((first_src, first, first_key, other), other_id) in all[..i].iter().zip(&ids) {
            let Some(how) = collision_of(other_id, &ids[i]) else {
                continue;
            };
            let at = location(
                &first_src.path,
                first_src.find_line(&[&first.name, first_key[0], first_key[1]]),
            );
            let (what, why) = match (first_key[0], key[0]) {
                ("listen", "listen") => {
                    ("listen address", "two pools cannot listen on one address")
                }
                ("listen", _) => (
                    "listen address",
                    "the status listener needs an address of its own",
                ),
                _ => (
                    "status listen address (pm.status_listen)",
                    "the status listener needs an address of its own",
                ),
            };
            let message = match how {
                Collision::Same => format!(
                    "{address} is already the {what} of pool '{}' ({at}): {why}",
                    first.name
                ),
                Collision::Overlap => format!(
                    "{address} overlaps {other}, the {what} of pool '{}' ({at}): all addresses and one of them on the same port cannot both be bound",
                    first.name
                ),
            };
            return Err(err(message));
        }
    }
    Ok(())
}
