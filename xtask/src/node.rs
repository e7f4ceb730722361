//! What the benchmark and the soak do to a node: exit storms in this
//! process's cgroup or a pod's, and the agent binary run as a user runs it
//! (with the cgroups of their own and the HTTP client of `test-support`).

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};
pub use test_support::{
    agent::{status_kib, Agent, Launch},
    cgroup::OwnCgroup,
    http::{get, metric},
    sh,
};

/// Runs `forks` fork+_exit+waitpid pairs split over `workers` threads.
pub fn storm(forks: u32, workers: u32) -> Result<Duration> {
    let start = Instant::now();
    let per = forks / workers.max(1);
    let extra = forks % workers.max(1);
    let handles: Vec<_> = (0..workers.max(1))
        .map(|w| {
            let n = per + u32::from(w < extra);
            std::thread::spawn(move || -> bool {
                for _ in 0..n {
                    // SAFETY: the child calls only _exit, which is
                    // async-signal-safe; the parent reaps it.
                    let pid = unsafe { libc::fork() };
                    if pid == 0 {
                        unsafe { libc::_exit(0) };
                    }
                    if pid < 0 {
                        return false;
                    }
                    let mut status = 0;
                    unsafe { libc::waitpid(pid, &mut status, 0) };
                }
                true
            })
        })
        .collect();
    for h in handles {
        if !h.join().map_err(|_| anyhow::anyhow!("storm worker panicked"))? {
            bail!("fork failed during the storm");
        }
    }
    Ok(start.elapsed())
}

/// A storm whose processes live in the cgroup of `procs` (a pod's
/// container, which the kernel tracks): every exit is streamed, unlike a
/// host storm's, which the kernel only counts.
pub fn storm_in(procs: &Path, forks: u32, workers: u32) -> Result<Duration> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::ffi::CString::new(procs.as_os_str().as_bytes())?;
    let start = Instant::now();
    let mut children = Vec::new();
    for w in 0..workers.max(1) {
        let n = forks / workers.max(1) + u32::from(w < forks % workers.max(1));
        // SAFETY: the child makes async-signal-safe calls only (open,
        // write, close, fork, waitpid, _exit); the parent reaps it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            unsafe {
                // "0" moves the writing process (v1 and v2 alike).
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, b"0\n".as_ptr().cast(), 2) < 0 {
                    libc::_exit(2);
                }
                libc::close(fd);
                for _ in 0..n {
                    let c = libc::fork();
                    if c == 0 {
                        libc::_exit(0);
                    }
                    if c < 0 {
                        libc::_exit(3);
                    }
                    let mut status = 0;
                    libc::waitpid(c, &mut status, 0);
                }
                libc::_exit(0);
            }
        }
        if pid < 0 {
            bail!("fork failed");
        }
        children.push(pid);
    }
    let mut failed = false;
    for pid in children {
        let mut status = 0;
        // SAFETY: waitpid of our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        failed |= !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
    if failed {
        bail!("a storm worker failed (cannot join {} or fork)", procs.display());
    }
    Ok(start.elapsed())
}

pub fn workers() -> u32 {
    std::thread::available_parallelism().map_or(2, |n| n.get() as u32)
}

/// The agent binary as a user runs it, warnings only in its log (`log`,
/// or a file of its own).
pub fn start_agent(bin: &Path, args: &[String], log: Option<&Path>) -> Result<Agent> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Agent::start(Launch { log_level: "warn", log, ..Launch::new(bin, &args) })
}
