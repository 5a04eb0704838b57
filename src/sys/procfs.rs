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

/// The child processes of `pid`'s main thread, running or not yet reaped
/// (`/proc/PID/task/PID/children`). `None`: cannot tell.
pub fn children(pid: i32) -> Option<Vec<i32>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    Some(
        text.split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
    )
}

/// The child processes of `pid`, forked by any of its threads
/// (`/proc/PID/task/*/children`); none when it cannot tell.
pub fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    out
}

/// The session id of `pid`, from `/proc/PID/stat` (equal to `pid` for a
/// process that called `setsid()`).
pub fn session_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid pgrp session …"
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(3)?.parse().ok()
}

/// The parent pid of `pid`, from `/proc/PID/stat`.
pub fn parent_of(pid: i32) -> Option<i32> {
    state_and_parent(pid).map(|(_, ppid)| ppid)
}

/// The state letter (as [`state`]) and the parent's pid of `pid`, from one
/// read of `/proc/PID/stat`; `None`: no such process.
pub fn state_and_parent(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid …": comm may contain spaces and parentheses.
    let mut after = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = after.next()?.chars().next()?;
    Some((state, after.next()?.parse().ok()?))
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

/// The state letter of `pid` (`/proc/PID/stat`: `R`, `S`, `D`, `T`
/// stopped by a signal, `t` stopped by a tracer, `Z`, …).
pub fn state(pid: i32) -> Option<char> {
    state_and_parent(pid).map(|(state, _)| state)
}

/// The system call `pid` is blocked in and its first argument
/// (`/proc/PID/syscall`); `None`: running, or cannot tell.
pub fn syscall(pid: i32) -> Option<(libc::c_long, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    let mut it = text.split_whitespace();
    let nr = it.next()?.parse().ok()?;
    let arg0 = u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?;
    Some((nr, arg0))
}

/// What fd `fd` of `pid` refers to (`/proc/PID/fd/FD`, e.g.
/// `socket:[1234]`).
pub fn fd_target(pid: i32, fd: u64) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()
}

/// Whether `pid` holds an fd on `target` (as [`fd_target`] names it).
pub fn holds(pid: i32, target: &std::path::Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == target))
}

/// The executable of `pid` (`/proc/PID/exe`).
pub fn exe(pid: i32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// A pidfd of process `pid` (`pidfd_open(2)`, Linux ≥ 5.3): a handle that
/// names this very process, never a later one given the same pid. Errors:
/// the process is gone (`ESRCH`), or the kernel lacks the call (`ENOSYS`).
pub fn pidfd_open(pid: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw as i32) })
}

/// Waits at most `timeout` for the process of `pidfd` to exit (a zombie
/// counts as exited: it holds nothing any more). Returns whether it did.
pub fn wait_exit(pidfd: &std::os::fd::OwnedFd, timeout: std::time::Duration) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32)
            .unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(n) if n > 0 => return true,
            Ok(_) => return false,
            Err(nix::errno::Errno::EINTR) if !left.is_zero() => continue,
            Err(_) => return false,
        }
    }
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
        assert!(matches!(state(me), Some('R' | 'S')), "{:?}", state(me));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .unwrap();
        let t0 = std::time::Instant::now();
        while state(pid) != Some('T') && t0.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(state(pid), Some('T'));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(exe(me), std::env::current_exe().ok());
        assert!(fd_target(me, 99999).is_none());
        assert!(!alive(i32::MAX));
    }
}
