//! Facts about processes read from `/proc`.
//!
//! Owns: nothing but these reads. Must not touch: signals or state.

/// Resident memory of `pid` in bytes (`/proc/PID/statm`, RSS pages).
pub fn resident_bytes(pid: i32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096) as u64;
    Some(pages * page)
}

/// The parent pid of `pid`, from `/proc/PID/stat`.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid …": comm may contain spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(1)?.parse().ok()
}

/// Whether `pid` is blocked in `accept()` (`/proc/PID/syscall`): an
/// exec'd php-cgi that got there has finished its PHP start-up. `None`:
/// cannot tell (no such file, or no permission).
pub fn in_accept(pid: i32) -> Option<bool> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    let first = text.split_whitespace().next()?;
    Some(
        first
            .parse::<libc::c_long>()
            .is_ok_and(|n| n == libc::SYS_accept || n == libc::SYS_accept4),
    )
}

/// Whether `pid` exists and is not a zombie (`/proc/PID/stat` state).
pub fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, None | Some("Z") | Some("X"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id() as i32;
        assert!(resident_bytes(me).unwrap() > 0);
        assert_eq!(parent_of(me), Some(nix::unistd::getppid().as_raw()));
        assert_eq!(parent_of(i32::MAX), None);
        // This test is running, not in accept().
        assert_ne!(in_accept(me), Some(true));
        assert!(alive(me));
        assert!(!alive(i32::MAX));
    }
}
