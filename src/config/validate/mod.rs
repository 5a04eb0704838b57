//! Raw → model: `[global]` ([`global`]) and each pool, section by
//! section, with php-fpm's defaults and checks, then the checks across
//! pools ([`across`]) and of the host ([`host`]). Every error names the
//! file, the line and the key.

use std::path::Path;

use super::keys;
use super::php::{arg_max, resolve_php_cgi};
use super::source::SourceFile;
use super::toml::dotted;
use super::users::{resolve_credentials, Ids};
use super::ConfigError;
use crate::config::model::{Global, PoolConfig};
use crate::config::raw::{Duration, RawPool};

mod across;
mod global;
mod host;
mod ini;
mod isolation;
mod listen;
mod local;
mod logs;
mod pm;
#[cfg(test)]
mod tests;

pub(super) use across::{check_listen_addresses, check_pool_names};
pub(super) use global::validate_global;
pub(super) use host::check_host_limits;

/// A configured duration, `None` when unset or 0.
fn nonzero(d: Option<Duration>) -> Option<std::time::Duration> {
    d.map(|d| d.0).filter(|d| !d.is_zero())
}
/// A unix socket path fits in `sockaddr_un.sun_path` (108 bytes, including
/// the final NUL).
fn check_socket_path(path: &Path) -> Result<(), String> {
    let len = path.as_os_str().len();
    if len > 107 {
        return Err(format!(
            "unix socket path is too long ({len} bytes, at most 107): {}",
            path.display()
        ));
    }
    Ok(())
}
/// Context for errors in one pool.
struct PoolCtx<'a> {
    src: &'a SourceFile,
    name: &'a str,
}
impl PoolCtx<'_> {
    /// An error at the pool-relative key `key` (dotted; its segments are
    /// looked up for the line, falling back to the pool's header line).
    fn err(&self, key: &[&str], message: impl Into<String>) -> ConfigError {
        let mut path = vec![self.name];
        path.extend_from_slice(key);
        let line = self
            .src
            .find_line(&path)
            .or_else(|| self.src.find_line(&[self.name]));
        let segs: Vec<String> = key.iter().map(|s| s.to_string()).collect();
        ConfigError {
            file: self.src.path.clone(),
            line,
            pool: Some(self.name.to_string()),
            key: if key.is_empty() {
                None
            } else {
                Some(dotted(&segs))
            },
            message: message.into(),
            php_fpm: None,
        }
    }
}

/// A pool's table, validated section by section: the model [`PoolConfig`].
/// Errors: the first key (in this order) that php-fpm or the kernel would
/// refuse, with file, line and key. `reads`: this load's files PHP reads.
pub(super) fn validate_pool(
    src: &SourceFile,
    name: &str,
    mut raw: RawPool,
    ids: Ids,
    global: &Global,
    options: &super::LoadOptions,
    reads: &mut crate::config::php::ReadsCache,
) -> Result<PoolConfig, ConfigError> {
    let ctx = PoolCtx { src, name };
    not_yet(&ctx)?;
    let pm = pm::process_manager(&ctx, &raw.pm)?;
    let cgroup = isolation::cgroup(&ctx, &raw.cgroup, &pm, ids)?;
    let logs = logs::logs(&ctx, &raw)?;
    // Every name first, in php-fpm's order (`fpm_unix_test_config`: user,
    // group, listen.owner, listen.group): an unknown one is what `-t`
    // reports before anything else about these keys (also not as root,
    // where php-fpm's `-t` checks them too).
    // php-fpm logs the listen ones with their errno (`: Success (0)`).
    let names = [
        (&["user"][..], raw.user.as_ref(), true, false),
        (&["group"][..], raw.group.as_ref(), false, false),
        (
            &["listen", "owner"][..],
            raw.listen.owner.as_ref(),
            true,
            true,
        ),
        (
            &["listen", "group"][..],
            raw.listen.group.as_ref(),
            false,
            true,
        ),
    ];
    for (key, name, is_user, syserror) in names {
        if let Some(n @ crate::config::raw::IdOrName::Name(_)) = name {
            let found = if is_user {
                super::users::resolve_uid(n).map(drop)
            } else {
                super::users::resolve_gid(n).map(drop)
            };
            found.map_err(|e| {
                let err = ctx.err(key, e.to_string());
                match e.php_fpm(ctx.name, syserror) {
                    Some(words) => err.with_php_fpm(words),
                    None => err,
                }
            })?;
        }
    }
    let user = resolve_credentials(
        raw.user.as_ref(),
        raw.group.as_ref(),
        ids,
        options.allow_to_run_as_root,
    )
    .map_err(|(key, msg)| ctx.err(&[key], msg))?;
    let php_cgi = resolve_php_cgi(raw.php_cgi.as_deref(), &src.dir, std::env::var_os("PATH"))
        .map_err(|m| ctx.err(&["php_cgi"], m))?;
    let (chroot, chdir) = isolation::root_and_dir(&ctx, &raw, ids)?;
    if chroot.is_some() && pm.spawn == super::Spawn::Shared {
        return Err(ctx.err(
            &["pm", "spawn"],
            "pm.spawn = \"shared\" cannot be used with chroot: the shared php-cgi parent runs outside every pool's root (use \"prefork\")",
        ));
    }
    let isolation = isolation::isolation(&ctx, &raw, chroot, ids)?;
    let listen = listen::listen(&ctx, std::mem::take(&mut raw.listen), &user)?;
    let env = ini::env(&ctx, raw.env.take())?;
    let (php_values, php_admin_values) = ini::php_values(&ctx, &mut raw, options)?;
    let status_listen = match raw.pm.status_listen.take() {
        None => None,
        Some(a) => Some(listen::address(&ctx, a, &["pm", "status_listen"])?),
    };
    let local = local::local_endpoints(raw.pm.status_path.take(), raw.ping, status_listen)
        .map_err(|(key, msg)| ctx.err(&key, msg))?;
    let limit_extensions = local::limit_extensions(raw.security.limit_extensions)
        .map_err(|m| ctx.err(&["security", "limit_extensions"], m))?;
    let php_ini = ini::resolve_php_ini(
        &ctx,
        (raw.php_ini.as_deref(), raw.php_ini_scan_dir.as_deref()),
        global,
        (&php_cgi, reads),
        &env,
        isolation.chroot.as_deref(),
    )?;
    let pool = PoolConfig {
        name: name.to_string(),
        file: src.path.clone(),
        user,
        php_cgi,
        listen,
        chdir,
        clear_env: raw.clear_env.unwrap_or(true),
        env,
        php_values,
        php_admin_values,
        pm,
        request_terminate_timeout: nonzero(raw.request_terminate_timeout),
        request_slowlog_timeout: nonzero(raw.request_slowlog_timeout),
        slowlog: logs.slowlog,
        access_log: logs.access_log,
        access_format: logs.access_format,
        access_suppress_paths: logs.access_suppress_paths,
        request_queue_timeout: nonzero(raw.request_queue_timeout),
        catch_workers_output: raw.catch_workers_output.unwrap_or(false),
        decorate_workers_output: raw.decorate_workers_output.unwrap_or(true),
        fpm_sapi: raw.fpm_sapi.unwrap_or(true),
        track_finished: raw
            .request_terminate_timeout_track_finished
            .unwrap_or(false),
        graceful_timeout: match raw.graceful_timeout {
            Some(d) => nonzero(Some(d)),
            None => global.process_control_timeout,
        },
        cgroup,
        pcntl: raw.security.pcntl.unwrap_or(false),
        no_php_ini: options.no_php_ini,
        limit_extensions,
        local,
        isolation,
        php_ini,
    };
    ini::check_exec_size(&ctx, &pool, arg_max())?;
    Ok(pool)
}

/// Keys that are known but not implemented yet: refused when set, so
/// that a configuration never silently means something else.
fn not_yet(ctx: &PoolCtx<'_>) -> Result<(), ConfigError> {
    for key in keys::not_yet_pool_keys() {
        let segs: Vec<&str> = key.split('.').collect();
        let path: Vec<&str> = std::iter::once(ctx.name)
            .chain(segs.iter().copied())
            .collect();
        if ctx.src.has_key(&path) {
            return Err(ctx.err(&segs, format!("{key} is not supported yet")));
        }
    }
    Ok(())
}
