//! Users, groups and supplementary groups from the system database, the
//! rules on who pool children may run as, and the php-cgi binary lookup.

use std::ffi::CString;

use nix::unistd::{Gid, Group, Uid, User};

use super::model::Credentials;
use super::raw::IdOrName;
use super::PhpFpmWords;

/// The effective ids of the fpmd process (parameters so that tests can
/// exercise the non-root rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ids {
    pub(super) euid: u32,
    pub(super) egid: u32,
}

impl Ids {
    /// fpmd's own effective ids.
    pub(super) fn current() -> Ids {
        Ids {
            euid: nix::unistd::geteuid().as_raw(),
            egid: nix::unistd::getegid().as_raw(),
        }
    }
}

/// What the process checking a configuration may do, and the kernel's
/// limits on processes: the facts behind the non-root rules and the
/// `pm.max_children` sanity limits (`validate::check_host_limits`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Host {
    /// `CAP_CHOWN` is in the effective set (`CapEff` of `/proc/self/status`):
    /// a socket file may be given to any owner and group.
    pub(super) cap_chown: bool,
    /// `CAP_NET_BIND_SERVICE` is in the effective set: ports below
    /// `unprivileged_port_start` may be bound.
    pub(super) cap_net_bind_service: bool,
    /// The effective gid and the supplementary groups: the groups a process
    /// without `CAP_CHOWN` may give its own files to (chown(2)).
    pub(super) groups: Vec<u32>,
    /// `net.ipv4.ip_unprivileged_port_start` (`/proc/sys/net/ipv4/`, of
    /// fpmd's network namespace; it applies to IPv6 too); 1024 when
    /// unreadable (the kernel's default).
    pub(super) unprivileged_port_start: u32,
    /// The soft `RLIMIT_NPROC` (`ulimit -u`, systemd's `LimitNPROC=`):
    /// children inherit it from fpmd and the kernel refuses a fork by a
    /// user who has that many processes. `None`: unlimited.
    pub(super) nproc: Option<u64>,
    /// `/proc/sys/kernel/pid_max`: no more processes than this can exist.
    pub(super) pid_max: Option<u64>,
    /// `/proc/sys/kernel/threads-max`: every process is at least a thread.
    pub(super) threads_max: Option<u64>,
    /// The hard `RLIMIT_NOFILE` and `RLIMIT_CORE` fpmd runs with (`None`:
    /// unlimited), when fpmd lacks `CAP_SYS_RESOURCE` and so cannot raise
    /// a child's limits above them (setrlimit(2) fails with `EPERM`, in
    /// the child, before exec); `None` when it has the capability.
    pub(super) hard_limits: Option<(Option<u64>, Option<u64>)>,
}

impl Host {
    /// The facts for `ids`: read from the running process when `ids` are
    /// its own; for other ids (the tests' pretend ids) root has every
    /// capability and any other user none, and only the effective gid as
    /// group. The kernel's limits are read either way.
    pub(super) fn of(ids: Ids) -> Host {
        let read_u64 =
            |p: &str| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
        let nproc = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NPROC)
            .ok()
            .map(|(soft, _)| soft)
            .filter(|&soft| soft != libc::RLIM_INFINITY);
        let hard = |r| {
            nix::sys::resource::getrlimit(r)
                .ok()
                .map(|(_, hard)| hard)
                .filter(|&h| h != libc::RLIM_INFINITY)
        };
        let hard_limits = Some((
            hard(nix::sys::resource::Resource::RLIMIT_NOFILE),
            hard(nix::sys::resource::Resource::RLIMIT_CORE),
        ));
        let (cap_chown, cap_net_bind_service, cap_sys_resource, groups) = if ids == Ids::current() {
            let caps = effective_capabilities();
            let mut groups: Vec<u32> = nix::unistd::getgroups()
                .map(|gs| gs.into_iter().map(|g| g.as_raw()).collect())
                .unwrap_or_default();
            groups.insert(0, ids.egid);
            (
                caps & (1 << CAP_CHOWN) != 0,
                caps & (1 << CAP_NET_BIND_SERVICE) != 0,
                caps & (1 << CAP_SYS_RESOURCE) != 0,
                groups,
            )
        } else {
            (ids.euid == 0, ids.euid == 0, ids.euid == 0, vec![ids.egid])
        };
        Host {
            cap_chown,
            cap_net_bind_service,
            groups,
            unprivileged_port_start: read_u64("/proc/sys/net/ipv4/ip_unprivileged_port_start")
                .map_or(1024, |n| n.min(u32::MAX as u64) as u32),
            nproc,
            pid_max: read_u64("/proc/sys/kernel/pid_max"),
            threads_max: read_u64("/proc/sys/kernel/threads-max"),
            hard_limits: hard_limits.filter(|_| !cap_sys_resource),
        }
    }
}

/// Bits of `linux/capability.h` (the libc crate does not define them).
const CAP_CHOWN: u32 = 0;
const CAP_NET_BIND_SERVICE: u32 = 10;
const CAP_SYS_RESOURCE: u32 = 24;

/// The effective capability set (`CapEff:` of `/proc/self/status`, a hex
/// mask of `CAP_*` bits); 0 when unreadable.
fn effective_capabilities() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(hex.trim(), 16).ok()
        })
        .unwrap_or(0)
}

/// A user's name for messages: its passwd name, else the number.
pub(super) fn user_name(uid: u32) -> String {
    match User::from_uid(Uid::from_raw(uid)) {
        Ok(Some(u)) => u.name,
        _ => uid.to_string(),
    }
}

/// A group's name for messages: its group name, else the number.
pub(super) fn group_name_of(gid: u32) -> String {
    group_name(gid)
}

/// A user or group name that cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LookupError {
    /// The system database has no such name: `unknown user 'NAME'`.
    Unknown {
        /// `"user"` or `"group"`.
        what: &'static str,
        name: String,
    },
    /// The lookup itself failed: `cannot look up user 'NAME': ERRNO`.
    Failed(String),
}

impl std::fmt::Display for LookupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LookupError::Unknown { what, name } => write!(f, "unknown {what} '{name}'"),
            LookupError::Failed(m) => f.write_str(m),
        }
    }
}

impl LookupError {
    /// How php-fpm reports it for pool `pool` (`fpm_unix.c`:
    /// `fpm_unix_get_passwd`, `fpm_unix_get_group`): `[pool www] cannot
    /// get uid for user 'NAME'`, at `ERROR` while `fpm_init` checks the
    /// users. `syserror`: logged with `ZLOG_SYSERROR`, as php-fpm does for
    /// `listen.owner` and `listen.group`, whose errno (none) is appended as
    /// `: Success (0)`. `None` for a failed lookup.
    pub(super) fn php_fpm(&self, pool: &str, syserror: bool) -> Option<PhpFpmWords> {
        let LookupError::Unknown { what, name } = self else {
            return None;
        };
        let id = if *what == "user" { "uid" } else { "gid" };
        let errno = if syserror { ": Success (0)" } else { "" };
        Some(PhpFpmWords::init(format!(
            "[pool {pool}] cannot get {id} for {what} '{name}'{errno}"
        )))
    }
}

fn lookup_user(u: &IdOrName) -> Result<(Option<User>, u32), LookupError> {
    match u {
        IdOrName::Name(n) => match User::from_name(n) {
            Ok(Some(user)) => {
                let uid = user.uid.as_raw();
                Ok((Some(user), uid))
            }
            Ok(None) => Err(LookupError::Unknown {
                what: "user",
                name: n.clone(),
            }),
            Err(e) => Err(LookupError::Failed(format!(
                "cannot look up user '{n}': {e}"
            ))),
        },
        IdOrName::Id(id) => Ok((User::from_uid(Uid::from_raw(*id)).ok().flatten(), *id)),
    }
}

fn lookup_group(g: &IdOrName) -> Result<(String, u32), LookupError> {
    match g {
        IdOrName::Name(n) => match Group::from_name(n) {
            Ok(Some(group)) => Ok((group.name, group.gid.as_raw())),
            Ok(None) => Err(LookupError::Unknown {
                what: "group",
                name: n.clone(),
            }),
            Err(e) => Err(LookupError::Failed(format!(
                "cannot look up group '{n}': {e}"
            ))),
        },
        IdOrName::Id(id) => Ok((group_name(*id), *id)),
    }
}

fn group_name(gid: u32) -> String {
    match Group::from_gid(Gid::from_raw(gid)) {
        Ok(Some(g)) => g.name,
        _ => gid.to_string(),
    }
}

pub(super) fn resolve_uid(u: &IdOrName) -> Result<u32, LookupError> {
    lookup_user(u).map(|(_, uid)| uid)
}

pub(super) fn resolve_gid(g: &IdOrName) -> Result<u32, LookupError> {
    lookup_group(g).map(|(_, gid)| gid)
}

/// What the refusal of root children says to do instead.
const ALLOW_ROOT_HINT: &str =
    "pool children must not run as root unless fpmd is started with -R (--allow-to-run-as-root)";

/// The children's `user` or `group` (`key`, with `label` uid/gid): never id
/// 0 unless `allow_root` (as php-fpm without -R: `fpm_unix.c`), and only
/// fpmd's own id when fpmd is not root (`hint` says what to do then).
#[allow(clippy::too_many_arguments)]
fn check_pool_id(
    key: &'static str,
    label: &str,
    name: &str,
    id: u32,
    root: bool,
    allow_root: bool,
    own: u32,
    hint: &str,
) -> Result<(), (&'static str, String)> {
    if root && id == 0 && !allow_root {
        return Err((
            key,
            format!("{key} '{name}' ({label} 0) is not allowed: {ALLOW_ROOT_HINT}"),
        ));
    }
    if !root && id != own {
        return Err((
            key,
            format!("cannot run the pool as {key} '{name}' ({label} {id}): fpmd is not running as root (it runs as {label} {own}); {hint}"),
        ));
    }
    Ok(())
}

/// Resolves `user`/`group` into credentials; on error returns the key
/// (`"user"` or `"group"`) and the message. `allow_root` (`-R`): as root,
/// no `user` means root's own credentials, and uid/gid 0 are allowed.
pub(super) fn resolve_credentials(
    user: Option<&IdOrName>,
    group: Option<&IdOrName>,
    ids: Ids,
    allow_root: bool,
) -> Result<Credentials, (&'static str, String)> {
    let root = ids.euid == 0;
    let (entry, uid) = match user {
        Some(u) => lookup_user(u).map_err(|e| ("user", e.to_string()))?,
        None if root && !allow_root => {
            return Err((
                "user",
                format!("user is required when fpmd runs as root ({ALLOW_ROOT_HINT})"),
            ))
        }
        None => (
            User::from_uid(Uid::from_raw(ids.euid)).ok().flatten(),
            ids.euid,
        ),
    };
    let user_name = entry
        .as_ref()
        .map_or_else(|| uid.to_string(), |u| u.name.clone());
    check_pool_id(
        "user",
        "uid",
        &user_name,
        uid,
        root,
        allow_root,
        ids.euid,
        "remove 'user' to run the pool as fpmd's own user",
    )?;
    let (group_name, gid) = match group {
        Some(g) => lookup_group(g).map_err(|e| ("group", e.to_string()))?,
        None => {
            let gid = if root {
                // With -R, a user with no passwd entry keeps fpmd's own
                // group, as php-fpm's children keep the master's.
                entry
                    .as_ref()
                    .map(|u| u.gid.as_raw())
                    .or(allow_root.then_some(ids.egid))
            } else {
                Some(ids.egid)
            };
            match gid {
                Some(gid) => (self::group_name(gid), gid),
                None => {
                    return Err((
                        "user",
                        format!("user {uid} has no passwd entry, so 'group' must be set"),
                    ))
                }
            }
        }
    };
    check_pool_id(
        "group",
        "gid",
        &group_name,
        gid,
        root,
        allow_root,
        ids.egid,
        "remove 'group'",
    )?;
    let mut groups: Vec<u32> = match entry
        .as_ref()
        .and_then(|u| CString::new(u.name.as_bytes()).ok())
    {
        Some(cname) => nix::unistd::getgrouplist(&cname, Gid::from_raw(gid))
            .map(|gs| gs.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_else(|_| vec![gid]),
        None => vec![gid],
    };
    let mut seen = Vec::new();
    groups.retain(|g| {
        let new = !seen.contains(g);
        seen.push(*g);
        new
    });
    // As php-fpm (`fpm_unix_conf_wp`): only as root, for a user named.
    let home = match (&entry, user) {
        (Some(u), Some(_)) if root => Some(u.dir.clone()),
        _ => None,
    };
    Ok(Credentials {
        user_name,
        uid,
        gid,
        group_name,
        groups,
        home,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::php::resolve_php_cgi;
    use crate::config::testutil::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    #[test]
    fn php_cgi_default_is_looked_up_on_path() {
        let dir = tempfile::tempdir().unwrap();
        let bin = write(dir.path(), "bin/php-cgi", "#!/bin/sh\n");
        write(dir.path(), "other/php-cgi", "not executable");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([
            dir.path().join("nope"),
            dir.path().join("other"),
            dir.path().join("bin"),
        ])
        .unwrap();
        assert_eq!(
            resolve_php_cgi(None, Path::new("/"), Some(path.clone())),
            Ok(bin.clone())
        );
        assert_eq!(
            resolve_php_cgi(Some("php-cgi"), Path::new("/"), Some(path.clone())),
            Ok(bin.clone())
        );
        // A path with a '/' is relative to the file's directory.
        assert_eq!(
            resolve_php_cgi(Some("./bin/php-cgi"), dir.path(), None),
            Ok(bin)
        );
        let e = resolve_php_cgi(Some("php-cgi9.9"), Path::new("/"), Some(path)).unwrap_err();
        assert!(
            e.starts_with("php-cgi binary not found: 'php-cgi9.9' is not in PATH"),
            "{e}"
        );
        let e = resolve_php_cgi(Some("other/php-cgi"), dir.path(), None).unwrap_err();
        assert!(
            e.starts_with("php-cgi binary not found: ") && e.ends_with("is not executable"),
            "{e}"
        );
        let e = resolve_php_cgi(Some("/tmp"), dir.path(), None).unwrap_err();
        assert_eq!(e, "php-cgi binary not found: /tmp is not a regular file");
    }

    #[test]
    fn unknown_user_and_group() {
        let www = "[www]\nphp_cgi = \"/bin/sh\"\nuser = \"nosuchuser\"\nlisten.address = \"/run/www.sock\"\npm.max_children = 1\n";
        let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/www.toml", www)]);
        assert_err(
            &dir,
            &e,
            "pool.d/www.toml",
            Some(3),
            Some("www"),
            Some("user"),
            "unknown user 'nosuchuser'",
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}:3: [www] key 'user': unknown user 'nosuchuser'",
                dir.path().join("pool.d/www.toml").display()
            )
        );
        let (dir, e) = load_err(&pool("www", "").replace("nogroup", "nosuchgroup"), &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(3),
            Some("www"),
            Some("group"),
            "unknown group 'nosuchgroup'",
        );
    }

    #[test]
    fn root_rules() {
        // fpmd runs as root in the test environment; the rules are exercised directly too.
        let root = Ids { euid: 0, egid: 0 };
        assert_eq!(
            resolve_credentials(None, None, root, false),
            Err((
                "user",
                "user is required when fpmd runs as root (pool children must not run as root unless fpmd is started with -R (--allow-to-run-as-root))".to_string()
            ))
        );
        assert_eq!(
            resolve_credentials(Some(&IdOrName::Name("root".into())), None, root, false),
            Err((
                "user",
                "user 'root' (uid 0) is not allowed: pool children must not run as root unless fpmd is started with -R (--allow-to-run-as-root)"
                    .to_string()
            ))
        );
        assert_eq!(
            resolve_credentials(
                Some(&IdOrName::Name("nobody".into())),
                Some(&IdOrName::Id(0)),
                root,
                false
            )
            .unwrap_err()
            .0,
            "group"
        );
        // A uid without a passwd entry needs a group.
        assert_eq!(
            resolve_credentials(Some(&IdOrName::Id(4_000_000)), None, root, false)
                .unwrap_err()
                .0,
            "user"
        );
        let c = resolve_credentials(
            Some(&IdOrName::Id(4_000_000)),
            Some(&IdOrName::Id(4_000_000)),
            root,
            false,
        )
        .unwrap();
        assert_eq!(
            (
                c.user_name.as_str(),
                c.group_name.as_str(),
                c.groups.as_slice()
            ),
            ("4000000", "4000000", &[4_000_000][..])
        );

        if nix::unistd::geteuid().is_root() {
            let (dir, e) = load_err("\n[www]\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/x/y.sock\"\npm.max_children = 1\n", &[]);
            assert_err(
                &dir,
                &e,
                "fpmd.toml",
                Some(2),
                Some("www"),
                Some("user"),
                "user is required when fpmd runs as root (pool children must not run as root unless fpmd is started with -R (--allow-to-run-as-root))",
            );
            let (dir, e) = load_err(&pool("www", "").replace("\"nobody\"", "\"root\""), &[]);
            assert_err(
                &dir,
                &e,
                "fpmd.toml",
                Some(2),
                Some("www"),
                Some("user"),
                "user 'root' (uid 0) is not allowed: pool children must not run as root unless fpmd is started with -R (--allow-to-run-as-root)",
            );
        }
    }

    /// `-R`: as root, no `user` is root, and uid/gid 0 are allowed.
    #[test]
    fn allow_to_run_as_root() {
        let root = Ids { euid: 0, egid: 0 };
        let c = resolve_credentials(None, None, root, true).unwrap();
        assert_eq!(
            (c.uid, c.gid, c.user_name.as_str(), c.group_name.as_str()),
            (0, 0, "root", "root")
        );
        let c = resolve_credentials(
            Some(&IdOrName::Name("root".into())),
            Some(&IdOrName::Id(0)),
            root,
            true,
        )
        .unwrap();
        assert_eq!((c.uid, c.gid), (0, 0));
        // A uid with no passwd entry and no group keeps fpmd's group, as
        // php-fpm's children keep the master's (php-src
        // socket-uds-numeric-ugid); without -R it must name a group.
        let c = resolve_credentials(Some(&IdOrName::Id(4_000_001)), None, root, true).unwrap();
        assert_eq!((c.uid, c.gid), (4_000_001, 0));
        assert!(resolve_credentials(Some(&IdOrName::Id(4_000_001)), None, root, false).is_err());
        // Not as root, -R changes nothing: only fpmd's own ids.
        let (uid, gid) = nobody();
        let ids = Ids {
            euid: uid,
            egid: gid,
        };
        assert_eq!(
            resolve_credentials(Some(&IdOrName::Id(0)), None, ids, true)
                .unwrap_err()
                .0,
            "user"
        );
    }

    #[test]
    fn non_root_rules() {
        let (uid, gid) = nobody();
        let ids = Ids {
            euid: uid,
            egid: gid,
        };
        let c = resolve_credentials(None, None, ids, false).unwrap();
        assert_eq!(
            (c.user_name.as_str(), c.uid, c.gid, c.group_name.as_str()),
            ("nobody", uid, gid, "nogroup")
        );
        assert!(resolve_credentials(
            Some(&IdOrName::Name("nobody".into())),
            Some(&IdOrName::Name("nogroup".into())),
            ids,
            false
        )
        .is_ok());
        let (key, msg) =
            resolve_credentials(Some(&IdOrName::Name("daemon".into())), None, ids, false)
                .unwrap_err();
        assert_eq!(key, "user");
        assert!(
            msg.starts_with("cannot run the pool as user 'daemon'"),
            "{msg}"
        );
        let (key, _) = resolve_credentials(None, Some(&IdOrName::Name("root".into())), ids, false)
            .unwrap_err();
        assert_eq!(key, "group");
    }

    #[test]
    fn missing_php_cgi() {
        let www = "[www]\nuser = \"nobody\"\ngroup = \"nogroup\"\nlisten.address = \"/run/www.sock\"\npm.max_children = 1\nphp_cgi = \"/nonexistent/php-cgi\"\n";
        let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/www.toml", www)]);
        assert_err(
            &dir,
            &e,
            "pool.d/www.toml",
            Some(6),
            Some("www"),
            Some("php_cgi"),
            "php-cgi binary not found: /nonexistent/php-cgi",
        );
    }
}
