//! `listen.*` and `pm.status_listen`: the pool's sockets, as php-fpm reads
//! its `listen` directives (owner, group and mode of a unix socket, its
//! ACL, the backlog, the clients a TCP socket accepts).

use super::{check_socket_path, PoolCtx};
use crate::config::model::{Credentials, Listen, ListenAddress};
use crate::config::raw::{AllowedClients, IdOrName, RawAddress, RawListen, StrList};
use crate::config::users::{resolve_gid, resolve_uid, LookupError};
use crate::config::ConfigError;

/// The pool's `listen.*`. A unix socket is owned by the pool's user and
/// group unless `listen.owner`/`listen.group` or an ACL say otherwise.
pub(super) fn listen(
    ctx: &PoolCtx<'_>,
    l: RawListen,
    user: &Credentials,
) -> Result<Listen, ConfigError> {
    let address = match l.address {
        None => return Err(ctx.err(&["listen", "address"], "required key is missing")),
        Some(a) => address(ctx, a, &["listen", "address"])?,
    };
    let is_unix = matches!(address, ListenAddress::Unix(_));
    let owner = match &l.owner {
        Some(o) => Some(resolve_uid(o).map_err(|e| ctx.err(&["listen", "owner"], e.to_string()))?),
        None if is_unix => Some(user.uid),
        None => None,
    };
    let group = match &l.group {
        Some(g) => Some(resolve_gid(g).map_err(|e| ctx.err(&["listen", "group"], e.to_string()))?),
        None if is_unix => Some(user.gid),
        None => None,
    };
    let backlog = match l.backlog {
        None => 511,
        Some(0) => return Err(ctx.err(&["listen", "backlog"], "listen.backlog must be at least 1")),
        Some(n) if n > i32::MAX as u32 => {
            return Err(ctx.err(
                &["listen", "backlog"],
                format!("listen.backlog must be at most {}", i32::MAX),
            ))
        }
        Some(n) => n,
    };
    let allowed_clients = match l.allowed_clients {
        Some(AllowedClients(list)) if list.is_empty() => {
            return Err(ctx.err(&["listen", "allowed_clients"], "listen.allowed_clients is empty (it would refuse every client); remove it to allow any"))
        }
        Some(AllowedClients(list)) => Some(list),
        None => None,
    };
    let acl_users = acl_ids(ctx, l.acl_users, "acl_users", resolve_uid)?;
    let acl_groups = acl_ids(ctx, l.acl_groups, "acl_groups", resolve_gid)?;
    let (owner, group) = if acl_users.is_empty() && acl_groups.is_empty() {
        (owner, group)
    } else {
        if let Some(key) = [("owner", l.owner.is_some()), ("group", l.group.is_some())]
            .into_iter()
            .find_map(|(k, set)| set.then_some(k))
        {
            return Err(ctx.err(&["listen", key], format!("listen.{key} has no effect with listen.acl_users or listen.acl_groups (php-fpm ignores it then): remove one of them")));
        }
        if !is_unix {
            return Err(ctx.err(
                &[
                    "listen",
                    if acl_users.is_empty() {
                        "acl_groups"
                    } else {
                        "acl_users"
                    },
                ],
                "an ACL needs a unix socket",
            ));
        }
        (None, None)
    };
    Ok(Listen {
        address,
        owner,
        group,
        mode: l.mode.map_or(0o660, |m| m.0),
        backlog,
        allowed_clients,
        acl_users,
        acl_groups,
    })
}

/// A listen address of the pool (at `key`): TCP as written, a unix socket
/// relative to the file's directory and short enough for `sun_path`.
pub(super) fn address(
    ctx: &PoolCtx<'_>,
    raw: RawAddress,
    key: &[&str],
) -> Result<ListenAddress, ConfigError> {
    Ok(match raw {
        RawAddress::Tcp(addr) => ListenAddress::Tcp(addr),
        RawAddress::Port(port) => ListenAddress::Port(port),
        RawAddress::Unix(p) => {
            let path = ctx.src.resolve(&p);
            check_socket_path(&path).map_err(|m| ctx.err(key, m))?;
            ListenAddress::Unix(path)
        }
    })
}

/// `listen.acl_users`/`acl_groups` (php-fpm's
/// `fpm_unix_resolve_socket_premissions`): names or ids, separated by
/// commas, resolved with `resolve`.
pub(super) fn acl_ids(
    ctx: &PoolCtx<'_>,
    list: Option<StrList>,
    key: &str,
    resolve: fn(&IdOrName) -> Result<u32, LookupError>,
) -> Result<Vec<u32>, ConfigError> {
    let mut out = Vec::new();
    for item in list.map(|l| l.0).unwrap_or_default() {
        for name in item.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let id = match name.parse::<u32>() {
                Ok(n) => IdOrName::Id(n),
                Err(_) => IdOrName::Name(name.to_string()),
            };
            out.push(resolve(&id).map_err(|e| ctx.err(&["listen", key], e.to_string()))?);
        }
    }
    Ok(out)
}
