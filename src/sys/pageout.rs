//! Giving start-up pages back to the kernel: `MADV_PAGEOUT` over file-backed
//! mappings, of fpmd itself and of a php-cgi pre-fork parent.
//!
//! Owns: reading a process's `/proc/PID/maps` for its file-backed mappings,
//! and the `madvise(2)` / `process_madvise(2)` calls. Must not touch: when
//! to do it (the daemon at start, the pool supervisor once a parent is
//! ready to fork).
//!
//! Why the pre-fork parent: php-cgi loads every extension (libcrypto,
//! libstdc++, ICU, …) and touches their pages while starting, then only
//! forks children on fpmd's order and waits for them. The pages it alone
//! maps stay resident for nothing: 13.5 of its 17 MiB PSS with Debian's
//! extensions, where php-fpm's master holds 2.1 MiB per pool.
//! `MADV_PAGEOUT` reclaims a page only where this process is its one mapper
//! (pages the children use stay), and only clean file pages without swap:
//! nothing is lost, a page used again is read back from the page cache.

use std::io;
use std::os::fd::AsRawFd;

/// The file-backed mappings of `maps` (the text of `/proc/PID/maps`) as
/// `(start, length)` in bytes; `exe`: only those of this file; `writable`:
/// also the writable ones (their private copies are anonymous memory,
/// which `MADV_PAGEOUT` leaves alone without swap).
fn file_mappings(maps: &str, exe: Option<&str>, writable: bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms), Some(_), Some(_), Some(inode), Some(path)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        if inode == "0" || !path.starts_with('/') || (!writable && perms.contains('w')) {
            continue;
        }
        if exe.is_some_and(|e| !line.ends_with(e)) {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        if let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) {
            if end > start {
                out.push((start, end - start));
            }
        }
    }
    out
}

/// `MADV_PAGEOUT` over the mappings of fpmd's own executable (Linux ≥ 5.4;
/// a no-op elsewhere), with `MADV_RANDOM`, which turns off fault-around
/// for them: a page of code that runs again brings back that page only,
/// not the 64 KiB around it.
pub fn release_own_startup_pages() {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    for (start, len) in file_mappings(&maps, Some(exe.to_string_lossy().as_ref()), false) {
        // SAFETY: advice on a read-only mapping of our own executable; the
        // kernel keeps the mapping and refaults pages on use.
        unsafe {
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_RANDOM);
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_PAGEOUT);
        }
    }
}

/// `process_madvise(MADV_PAGEOUT)` over every file-backed mapping of
/// process `pid` (Linux ≥ 5.10; needs `CAP_SYS_NICE` and ptrace access to
/// it: fpmd as root). Errors: the process is gone (`ESRCH`), the kernel
/// lacks the calls (`ENOSYS`), or fpmd may not (`EPERM`).
pub fn page_out_process(pid: i32) -> io::Result<()> {
    let pidfd = crate::sys::procfs::pidfd_open(pid)?;
    // Read after the pidfd is open: the maps are this process's, not a
    // later one's with the same pid.
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let ranges = file_mappings(&maps, None, true);
    let iov: Vec<libc::iovec> = ranges
        .iter()
        .map(|&(start, len)| libc::iovec {
            iov_base: start as *mut libc::c_void,
            iov_len: len,
        })
        .collect();
    // The kernel takes at most UIO_MAXIOV (1024) ranges a call.
    for chunk in iov.chunks(1024) {
        // SAFETY: the iovecs name ranges of the other process's address
        // space, which the kernel checks; our memory is only read.
        let n = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                pidfd.as_raw_fd(),
                chunk.as_ptr(),
                chunk.len(),
                libc::MADV_PAGEOUT,
                0u32,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            // A mapping unmapped meanwhile ends the call early (ENOMEM);
            // what was advised before it stands.
            if e.raw_os_error() == Some(libc::ENOMEM) {
                continue;
            }
            return Err(e);
        }
    }
    Ok(())
}

/// How often fpmd's own heap is trimmed ([`trim_heap_periodically`]).
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// `malloc_trim(0)` once every [`TRIM_EVERY`], for ever: the memory glibc
/// keeps for fpmd's threads after a burst (each pool's first requests,
/// warm parents starting, a reload) goes back to the kernel instead of
/// staying resident in every arena: with 200 pools each served once, the
/// manager's PSS otherwise grows from 8.5 to 12.6 MiB and stays there.
pub async fn trim_heap_periodically() {
    let mut tick = tokio::time::interval(TRIM_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // SAFETY: glibc's malloc_trim only releases free memory; it is
        // thread-safe (it takes each arena's lock).
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a80000 r--p 00000000 08:01 1234 /usr/bin/php8.2
55d0c0a80000-55d0c0f00000 r-xp 00080000 08:01 1234 /usr/bin/php8.2
55d0c1000000-55d0c1010000 rw-p 00500000 08:01 1234 /usr/bin/php8.2
55d0c2000000-55d0c2400000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000100000 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libicuuc.so.72
7f0000200000-7f0000300000 rw-p 00000000 00:00 0
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0 [stack]
";

    #[test]
    fn file_mappings_are_those_with_an_inode_and_a_path() {
        assert_eq!(
            file_mappings(MAPS, None, true),
            vec![
                (0x55d0c0a00000, 0x80000),
                (0x55d0c0a80000, 0x480000),
                (0x55d0c1000000, 0x10000),
                (0x7f0000000000, 0x100000),
            ]
        );
        assert_eq!(
            file_mappings(MAPS, Some("/usr/bin/php8.2"), false),
            vec![(0x55d0c0a00000, 0x80000), (0x55d0c0a80000, 0x480000)]
        );
    }

    #[test]
    fn a_gone_process_is_an_error() {
        // pid_max is at most 2^22: this pid never exists.
        let e = page_out_process(i32::MAX).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH), "{e}");
    }
}
