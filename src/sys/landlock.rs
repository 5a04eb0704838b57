//! Whether the kernel can confine a process with Landlock: the probe that
//! `fpmd -t` runs for a pool with `landlock.*` (the ruleset itself is built
//! in [`crate::process::sandbox`]).
//!
//! Must not touch: anything but the query.

use std::io;

/// Whether the running kernel has Landlock (ABI 1 or later). Errors: a
/// message for `fpmd -t` saying it does not and why.
pub fn landlock_supported() -> Result<(), String> {
    // LANDLOCK_CREATE_RULESET_VERSION: returns the ABI version.
    // SAFETY: a query with a null attribute pointer, as the man page says.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    if v < 1 {
        let e = io::Error::last_os_error();
        return Err(format!(
            "this kernel does not support Landlock ({e}; it needs Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK and landlock in the lsm= boot list)"
        ));
    }
    Ok(())
}
