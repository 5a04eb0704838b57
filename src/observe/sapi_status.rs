//! The status `fpm_get_status()` reads (see `crate::process::sapi`): one
//! unix socket per pool beside `sapi.php`, mode 0600 and owned by the
//! pool's user, so that only that pool's children (and root) can connect;
//! each connection gets the pool's full status as php-fpm's JSON status
//! page (`?json&full`), then the end of the stream. `sapi.php` turns it
//! into the array php-fpm's `fpm_get_status()` returns
//! (`fpm_status_export_to_zval` in `sapi/fpm/fpm/fpm_status.c`).
//!
//! Owns: the sockets and their accept tasks. Must not touch: dispatch (a
//! status sample takes the slot table's lock once).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::pool::Pool;

/// The pools' status sockets.
#[derive(Default)]
pub struct StatusSockets {
    served: BTreeMap<String, Served>,
}

/// The pool a socket answers for, once it is known (the socket is bound
/// before the pool starts, so that its first children, chrooted ones
/// included, find it).
type PoolSlot = Arc<Mutex<Option<Arc<Pool>>>>;

/// One pool's socket.
struct Served {
    path: PathBuf,
    /// The owner it was given (uid, gid).
    owner: (u32, u32),
    pool: PoolSlot,
    task: JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

impl StatusSockets {
    /// Makes sure pool `name` has its socket (at
    /// [`crate::process::sapi::status_socket`]), owned by `owner` (uid,
    /// gid): called before the pool starts its children. Without
    /// `sapi.php` installed there is nothing to do. A socket that cannot
    /// be made is logged (that pool's `fpm_get_status()` then returns
    /// false).
    pub fn open(&mut self, name: &str, owner: (u32, u32)) {
        let Some(installed) = crate::process::sapi::installed() else {
            return;
        };
        if self.served.get(name).is_none_or(|s| s.task.is_finished()) {
            let dir = installed.path.parent().unwrap_or(Path::new("/"));
            let path = crate::process::sapi::status_socket(dir, name);
            let pool: PoolSlot = Arc::default();
            match serve(&path, pool.clone()) {
                Ok(task) => {
                    self.served.insert(
                        name.to_string(),
                        Served {
                            path,
                            owner: (u32::MAX, u32::MAX),
                            pool,
                            task,
                        },
                    );
                }
                Err(e) => {
                    warn!(pool = %name, "fpm_get_status() will return false: cannot listen on {}: {e}", path.display());
                    return;
                }
            }
        }
        let Some(s) = self.served.get_mut(name) else {
            return;
        };
        if s.owner != owner {
            match std::os::unix::fs::chown(&s.path, Some(owner.0), Some(owner.1)) {
                Ok(()) => s.owner = owner,
                Err(e) => {
                    warn!(pool = %name, "cannot give {} to the pool's user ({e}): fpm_get_status() may return false", s.path.display())
                }
            }
        }
    }

    /// Serves exactly `pools` now: each pool's socket opened (see
    /// [`StatusSockets::open`]; its owner brought in line with the pool's
    /// user after a reload) and answering for it, the sockets of pools
    /// that are gone removed.
    pub fn set_pools(&mut self, pools: impl IntoIterator<Item = Arc<Pool>>) {
        let mut keep = BTreeMap::new();
        for pool in pools {
            let name = pool.name().to_string();
            let config = pool.config();
            self.open(&name, (config.user.uid, config.user.gid));
            if let Some(s) = self.served.remove(&name) {
                *s.pool.lock().unwrap_or_else(|e| e.into_inner()) = Some(pool.clone());
                keep.insert(name, s);
            }
        }
        // Dropping the rest stops them and removes their files.
        self.served = keep;
    }
}

/// Binds `path` (0600) and answers each connection with the status of the
/// pool in `slot` (none yet: the connection is closed).
fn serve(path: &Path, slot: PoolSlot) -> std::io::Result<JoinHandle<()>> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(tokio::spawn(async move {
        // poll_accept, not accept(): tokio's accept() future (184 bytes)
        // would make every pool's task 384 bytes, not 256.
        while let Ok((mut conn, _)) = std::future::poll_fn(|cx| listener.poll_accept(cx)).await {
            let pool = slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let Some(pool) = pool else { continue };
            tokio::spawn(async move {
                let text = crate::observe::status::render(
                    &pool.status(true),
                    crate::observe::status::Format::Json,
                    true,
                    SystemTime::now(),
                );
                let _ = conn.write_all(text.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    }))
}
