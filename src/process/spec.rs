//! How a pool's php-cgi is started: the spawn spec built from its
//! configuration, and the template that decides whether a reload needs new
//! children.
//!
//! Must not touch: processes (the spawner forks).

use std::ffi::OsString;
use std::path::PathBuf;

use crate::config::{PoolConfig, Spawn};
use crate::process::spawn::ChildSpec;

/// Builds the argv and environment of a child of `config`.
///
/// The environment follows php-fpm's `clear_env` and `env[…]`, then `USER`
/// and `HOME` of the pool's user as php-fpm sets them (see
/// [`crate::config::Credentials::home`]); on top of it
/// `PHP_FCGI_CHILDREN` (unset for exec, php-cgi's default of 0: it must not
/// fork a hidden sub-pool; for a prefork parent what makes it pre-fork,
/// each child on fpmd's order, see [`crate::process::fork_server`]) and `PHP_FCGI_MAX_REQUESTS=0` (php-cgi must not
/// retire itself: fpmd applies `pm.max_requests`) are always so, whatever
/// fpmd's own environment says, and `PHP_INI_SCAN_DIR` is set when the pool
/// sets `php_ini_scan_dir`. php-cgi reads the two only from its
/// environment, which PHP copies into `$_SERVER`: that is where php-fpm's
/// `$_SERVER` differs.
pub fn child_spec(config: &PoolConfig, endpoint: PathBuf) -> ChildSpec {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    if !config.clear_env {
        env.extend(std::env::vars_os());
    }
    for (k, v) in &config.env {
        env.push((k.into(), v.into()));
    }
    // php-fpm sets USER and HOME over env[…] when it switches user.
    let user = config.user.home.as_ref().map(|home| {
        [
            ("USER", OsString::from(&config.user.user_name)),
            ("HOME", home.into()),
        ]
    });
    env.retain(|(k, _)| {
        k != "PHP_FCGI_CHILDREN"
            && k != "PHP_FCGI_MAX_REQUESTS"
            && k != "FCGI_WEB_SERVER_ADDRS"
            && (user.is_none() || (k != "USER" && k != "HOME"))
    });
    env.extend(user.into_iter().flatten().map(|(k, v)| (k.into(), v)));
    // Prefork: a parent whose fork() waits for fpmd's orders (the fork
    // server raises PHP_FCGI_CHILDREN once loaded; 1 keeps a php-cgi that
    // ignores LD_PRELOAD from forking more than one child nobody uses).
    // php-cgi reads both from its environment only, and PHP copies its
    // environment into $_SERVER: an exec'd child gets no PHP_FCGI_CHILDREN
    // (php-cgi's default is 0).
    let fork_server = match config.pm.spawn {
        Spawn::Exec | Spawn::Shared => None,
        Spawn::Prefork => crate::process::fork_server::for_pool(config),
    };
    let death_signal = match fork_server {
        None => libc::SIGKILL,
        Some(_) => {
            env.push(("PHP_FCGI_CHILDREN".into(), "1".into()));
            libc::SIGTERM
        }
    };
    env.push(("PHP_FCGI_MAX_REQUESTS".into(), "0".into()));
    // The pool's scan directory reaches php-cgi whatever clear_env says.
    if let Some(dir) = &config.php_ini.scan_dir {
        env.retain(|(k, _)| k != "PHP_INI_SCAN_DIR");
        env.push(("PHP_INI_SCAN_DIR".into(), dir.into()));
    }
    ChildSpec {
        program: config.php_cgi.clone(),
        arg0: crate::process::spawn::process_title(&config.name),
        args: {
            let mut args = config.ini_args();
            match crate::process::sapi::ini_args(config) {
                // The status socket is the pool's: in the environment, so
                // that pools with the same ini values share a parent.
                Some(sapi) if config.pm.spawn == Spawn::Shared => {
                    if let Some((_, path)) = sapi[1].split_once('=') {
                        env.push((crate::process::sapi::STATUS_SOCKET_ENV.into(), path.into()));
                    }
                    args.extend(sapi.into_iter().skip(2));
                }
                sapi => args.extend(sapi.into_iter().flatten()),
            }
            args
        },
        env,
        sandbox: crate::process::sandbox::SandboxPlan::of(
            &config.name,
            &config.isolation,
            &config.chdir,
        ),
        uid: config.user.uid,
        gid: config.user.gid,
        groups: config.user.groups.clone(),
        endpoint,
        backlog: 8,
        death_signal,
        catch_workers_output: config.catch_workers_output,
        // Set by the supervisor, which owns the pool's cgroup.
        cgroup_procs: Vec::new(),
        fork_server,
    }
}

/// The spawn spec without its endpoint: two configurations whose templates
/// are equal start the same children, so a reload between them keeps the
/// children and applies the rest live (pm numbers under exec, timeouts,
/// logs). Anything else (ini values, environment, user, binary, working
/// directory, `pm.spawn`,
/// `catch_workers_output`, `chroot` and every other key of
/// [`crate::config::Isolation`]) needs a new generation.
pub fn template(config: &PoolConfig) -> ChildSpec {
    child_spec(config, PathBuf::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Landlock;

    #[test]
    fn every_isolation_key_changes_the_template() {
        let base = crate::pool::tests::test_config();
        let changes: [fn(&mut PoolConfig); 7] = [
            |p| p.isolation.chroot = Some("/srv/site".into()),
            |p| p.isolation.rlimit_files = Some(4096),
            |p| p.isolation.rlimit_core = Some(0),
            |p| p.isolation.process_priority = Some(5),
            |p| p.isolation.process_dumpable = true,
            |p| p.isolation.no_new_privs = true,
            |p| {
                p.isolation.landlock = Some(Landlock {
                    read: vec!["/srv".into()],
                    write: vec![],
                })
            },
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut new = base.clone();
            change(&mut new);
            assert_ne!(template(&base), template(&new), "change {i}");
        }
        assert_eq!(template(&base), template(&base.clone()));
        let spec = child_spec(&base, "/run/x.sock".into());
        assert_eq!(spec.sandbox.cwd, base.chdir);
        assert!(!spec.sandbox.no_new_privs, "no_new_privs is off by default");
    }
}
