//! `pm.*`: the process manager, checked and defaulted as php-fpm's
//! `fpm_conf.c` does.

use super::PoolCtx;
use crate::config::model::{PmMode, ProcessManager, Spawn};
use crate::config::raw::{ByteSize, RawPm, RawPmMode};
use crate::config::{ConfigError, PhpFpmLevel, PhpFpmWords};

/// `pm.mode`, `pm.max_children`, the spare servers, `pm.start_servers`,
/// `pm.process_idle_timeout`, `pm.max_spawn_rate`, `pm.max_requests`,
/// `pm.spawn`, `pm.max_memory`. Errors: a required key missing, a value
/// out of php-fpm's bounds; each with php-fpm's ALERT where php-fpm
/// refuses the same configuration (not `pm.max_spawn_rate = 0`, which
/// php-fpm refuses only with `pm = dynamic` and after the spare servers;
/// a `.conf`'s `pm.start_servers = 0` is taken as unset before this, as
/// php-fpm takes it).
pub(super) fn process_manager(
    ctx: &PoolCtx<'_>,
    raw: &RawPm,
) -> Result<ProcessManager, ConfigError> {
    // php-fpm takes an unset pm.max_children as 0 and refuses both.
    let positive = || alert(ctx, "pm.max_children must be a positive value");
    let max_children = match raw.max_children {
        None => {
            return Err(ctx
                .err(&["pm", "max_children"], "required key is missing")
                .with_php_fpm(positive()))
        }
        Some(0) => {
            return Err(ctx
                .err(
                    &["pm", "max_children"],
                    "pm.max_children must be at least 1",
                )
                .with_php_fpm(positive()))
        }
        Some(n) => n,
    };
    let max_spawn_rate = match raw.max_spawn_rate {
        Some(0) => {
            return Err(ctx.err(
                &["pm", "max_spawn_rate"],
                "pm.max_spawn_rate must be at least 1",
            ))
        }
        Some(n) => n,
        None => 32,
    };
    let mode = match raw.mode.unwrap_or(RawPmMode::Static) {
        RawPmMode::Static => PmMode::Static,
        RawPmMode::Dynamic => dynamic(ctx, raw, max_children, max_spawn_rate)?,
        RawPmMode::Ondemand => {
            let idle = raw
                .process_idle_timeout
                .map(|d| d.0)
                .unwrap_or(std::time::Duration::from_secs(10));
            if idle.is_zero() {
                return Err(ctx
                    .err(
                        &["pm", "process_idle_timeout"],
                        "pm.process_idle_timeout must be more than 0",
                    )
                    .with_php_fpm(alert(
                        ctx,
                        "pm.process_idle_timeout(0s) must be greater than 0s",
                    )));
            }
            PmMode::Ondemand {
                process_idle_timeout: idle,
                max_spawn_rate,
            }
        }
    };
    Ok(ProcessManager {
        mode,
        max_children,
        max_requests: raw.max_requests.unwrap_or(0),
        spawn: raw.spawn.unwrap_or(Spawn::Prefork),
        max_memory: match raw.max_memory {
            None | Some(ByteSize(0)) => None,
            Some(ByteSize(n)) => Some(n),
        },
    })
}

/// `pm.mode = "dynamic"`: the spare servers (required) and
/// `pm.start_servers` (default: halfway between them), as php-fpm checks
/// them.
pub(super) fn dynamic(
    ctx: &PoolCtx<'_>,
    raw: &RawPm,
    max_children: u32,
    max_spawn_rate: u32,
) -> Result<PmMode, ConfigError> {
    // php-fpm takes an unset spare server count as 0 and refuses both;
    // its words for the others follow its order of checks
    // (fpm_conf_process_all_pools).
    let spare = |key: &str, value: Option<u32>| {
        let positive = || alert(ctx, format!("pm.{key}(0) must be a positive value"));
        match value {
            None => Err(ctx
                .err(&["pm", key], "required with pm.mode = \"dynamic\"")
                .with_php_fpm(positive())),
            Some(0) => Err(ctx
                .err(&["pm", key], format!("pm.{key} must be at least 1"))
                .with_php_fpm(positive())),
            Some(n) => Ok(n),
        }
    };
    let min = spare("min_spare_servers", raw.min_spare_servers)?;
    let max = spare("max_spare_servers", raw.max_spare_servers)?;
    let greater = || {
        alert(ctx, format!("pm.min_spare_servers({min}) and pm.max_spare_servers({max}) cannot be greater than pm.max_children({max_children})"))
    };
    if max > max_children {
        return Err(ctx.err(&["pm", "max_spare_servers"],
            format!("pm.max_spare_servers ({max}) must not be greater than pm.max_children ({max_children})"))
            .with_php_fpm(greater()));
    }
    if min > max {
        let words = if min > max_children {
            greater()
        } else {
            alert(
                ctx,
                format!(
                    "pm.max_spare_servers({max}) must not be less than pm.min_spare_servers({min})"
                ),
            )
        };
        return Err(ctx.err(&["pm", "min_spare_servers"],
            format!("pm.min_spare_servers ({min}) must not be greater than pm.max_spare_servers ({max})"))
            .with_php_fpm(words));
    }
    let start = raw.start_servers.unwrap_or(min + (max - min) / 2);
    if start < min || start > max {
        let err = ctx.err(&["pm", "start_servers"],
            format!("pm.start_servers ({start}) must be between pm.min_spare_servers ({min}) and pm.max_spare_servers ({max})"));
        // (A php-fpm .conf's pm.start_servers = 0 is "not set" by now, as
        // php-fpm takes it; only fpmd's own format refuses 0 here.)
        return Err(err.with_php_fpm(alert(ctx, format!("pm.start_servers({start}) must not be less than pm.min_spare_servers({min}) and not greater than pm.max_spare_servers({max})"))));
    }
    Ok(PmMode::Dynamic {
        start_servers: start,
        min_spare_servers: min,
        max_spare_servers: max,
        max_spawn_rate,
    })
}

/// php-fpm's `ALERT` of `fpm_conf_process_all_pools` for the pool:
/// `[pool NAME] TEXT`, then `failed to post process the configuration`.
fn alert(ctx: &PoolCtx<'_>, text: impl std::fmt::Display) -> PhpFpmWords {
    PhpFpmWords::post_process(PhpFpmLevel::Alert, format!("[pool {}] {text}", ctx.name))
}
