//! Reading /proc: process trees, php-cgi detection, environment tags.
//! Read-only apart from `kill_tagged`, which the fixtures use to clean up.

use std::collections::{HashMap, HashSet};

#[derive(Debug, Clone)]
pub struct ProcInfo {
    pub pid: i32,
    pub ppid: i32,
    pub state: char,
    pub comm: String,
    pub exe: Option<String>,
}

impl ProcInfo {
    pub fn is_php_cgi(&self) -> bool {
        let exe_name = self
            .exe
            .as_deref()
            .and_then(|e| e.rsplit('/').next())
            .unwrap_or("");
        // /proc/PID/exe may say "(deleted)" after an upgrade; comm is cut at 15 chars.
        exe_name.starts_with("php-cgi") || self.comm.starts_with("php-cgi")
    }

    pub fn alive(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

pub fn info(pid: i32) -> Option<ProcInfo> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid ..."; comm may contain spaces and parentheses.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_string();
    let mut rest = stat[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.display().to_string());
    Some(ProcInfo {
        pid,
        ppid,
        state,
        comm,
        exe,
    })
}

pub fn all() -> Vec<ProcInfo> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
            if let Some(i) = info(pid) {
                v.push(i);
            }
        }
    }
    v
}

/// Every descendant of `root` (children, grandchildren, ...), not `root` itself.
pub fn descendants(root: i32) -> Vec<ProcInfo> {
    let procs = all();
    let mut by_parent: HashMap<i32, Vec<&ProcInfo>> = HashMap::new();
    for p in &procs {
        by_parent.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut seen = HashSet::new();
    while let Some(pid) = stack.pop() {
        for c in by_parent.get(&pid).map(|v| v.as_slice()).unwrap_or(&[]) {
            if seen.insert(c.pid) {
                out.push((*c).clone());
                stack.push(c.pid);
            }
        }
    }
    out
}

/// Live php-cgi processes among `procs` that serve requests: a php-cgi that
/// is itself the parent of php-cgi processes (php-cgi's own pre-fork
/// manager, `PHP_FCGI_CHILDREN>0`) is not counted, even before it has
/// forked them.
pub fn workers_among(procs: &[ProcInfo]) -> Vec<i32> {
    let php: Vec<&ProcInfo> = procs
        .iter()
        .filter(|p| p.is_php_cgi() && p.alive())
        .collect();
    let parents: HashSet<i32> = php.iter().map(|p| p.ppid).collect();
    let php_pids: HashSet<i32> = php.iter().map(|p| p.pid).collect();
    let prefork_parent = |p: &ProcInfo| {
        !php_pids.contains(&p.ppid)
            && environ(p.pid)
                .iter()
                .any(|(k, v)| k == "PHP_FCGI_CHILDREN" && v != "0")
    };
    let mut v: Vec<i32> = php
        .iter()
        .filter(|p| !parents.contains(&p.pid) && !prefork_parent(p))
        .map(|p| p.pid)
        .collect();
    v.sort();
    v
}

pub fn environ(pid: i32) -> Vec<(String, String)> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    raw.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .filter_map(|kv| {
            let s = String::from_utf8_lossy(kv);
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

pub fn has_tag(pid: i32, tag: &str) -> bool {
    environ(pid)
        .iter()
        .any(|(k, v)| k == "FPMD_TEST_TAG" && v == tag)
}

/// Live processes (any program) whose environment carries `FPMD_TEST_TAG=tag`.
pub fn tagged(tag: &str) -> Vec<ProcInfo> {
    let me = std::process::id() as i32;
    all()
        .into_iter()
        .filter(|p| p.pid != me && p.alive() && has_tag(p.pid, tag))
        .collect()
}

/// Live php-cgi processes carrying the tag.
pub fn tagged_php(tag: &str) -> Vec<i32> {
    tagged(tag)
        .into_iter()
        .filter(|p| p.is_php_cgi())
        .map(|p| p.pid)
        .collect()
}

/// SIGKILLs every live process carrying the tag, again and again until none
/// is left (a php-cgi pre-fork parent may fork between a scan and its kill).
pub fn kill_tagged(tag: &str) {
    for _ in 0..50 {
        let left = tagged(tag);
        if left.is_empty() {
            return;
        }
        kill_all(&left);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// SIGKILLs each of `procs` (those already gone are no error: the point
/// is that none is left).
pub fn kill_all(procs: &[ProcInfo]) {
    for p in procs {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

pub fn alive(pid: i32) -> bool {
    info(pid).is_some_and(|i| i.alive())
}

pub fn describe(procs: &[ProcInfo]) -> String {
    procs
        .iter()
        .map(|p| {
            format!(
                "{} (ppid {}, {}, {})",
                p.pid,
                p.ppid,
                p.state,
                p.exe.as_deref().unwrap_or(&p.comm)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Resident memory of a process in bytes (/proc/PID/status VmRSS).
pub fn vm_rss(pid: i32) -> Option<u64> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = st.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// Bytes a process has read with read(2) and friends so far (/proc/PID/io
/// `rchar`: files, pipes and sockets), e.g. to see a child receive a body.
pub fn rchar(pid: i32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Open file descriptors of a process (entries of /proc/PID/fd).
pub fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The arguments of a process (/proc/PID/cmdline); empty once it is gone.
pub fn cmdline(pid: i32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// Every open descriptor, of any process, on one of `paths` (also after
/// the file was renamed to it or deleted: the kernel then shows
/// "PATH (deleted)"), as `ls -l /proc/*/fd` lists them: (pid, fd, target).
pub fn fds_on(paths: &[&std::path::Path]) -> Vec<(i32, String, String)> {
    let mut out = Vec::new();
    for p in all() {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{}/fd", p.pid)) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.display().to_string();
            let bare = target.strip_suffix(" (deleted)").unwrap_or(&target);
            if paths.iter().any(|q| std::path::Path::new(bare) == *q) {
                out.push((p.pid, fd.file_name().to_string_lossy().into_owned(), target));
            }
        }
    }
    out
}
