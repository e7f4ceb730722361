//! What the benchmark and the soak do to a node: exit storms in this
//! process's cgroup or a pod's, and the agent binary run as a user runs it
//! (with the cgroups of their own and the HTTP client of `test-support`),
//! and kubelet-shaped pods for it to find.

use std::{
    path::{Path, PathBuf},
    process::Child,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};
pub use test_support::{
    agent::{status_kib, Agent, Launch},
    cgroup::OwnCgroup,
    http::{get, metric},
    sh,
};

/// CPU time of a whole process (every thread, ended ones included) in ns,
/// from its CPU-time clock: exact, where utime + stime in `/proc` move in
/// 10 ms ticks (0.1 µs per exit of a 100 000-exit storm).
pub fn cpu_ns(pid: u32) -> u64 {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: plain calls with out-pointers to locals.
    unsafe {
        if libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) != 0 {
            return 0;
        }
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        if libc::clock_gettime(clock, &mut ts) != 0 {
            return 0;
        }
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

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

/// `count` kubelet-shaped pods (cgroupfs driver, burstable), each with a
/// sandbox and an app container holding one live process.
pub(crate) struct Pods {
    cgroup: OwnCgroup,
    pub(crate) containers: Vec<PathBuf>,
    processes: Vec<Child>,
}

impl Drop for Pods {
    fn drop(&mut self) {
        for p in &mut self.processes {
            let _ = p.kill();
            let _ = p.wait();
        }
        let root = self.cgroup.path().to_string();
        self.cgroup.remove(&root);
    }
}

impl Pods {
    /// Container `i` without a memory limit: for storms, which are about
    /// exits, not memory (their forks' page tables are charged to the
    /// container, whose 16 MiB a bench that has grown meanwhile exceeds).
    pub(crate) fn unlimit(&self, i: usize) -> Result<&Path> {
        let container = self.containers.get(i).context("no such container")?;
        for (file, unlimited) in [("memory.max", "max"), ("memory.limit_in_bytes", "-1")] {
            let path = container.join(file);
            if path.exists() {
                std::fs::write(&path, unlimited).with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
        Ok(container)
    }

    /// `count` kubelet-shaped pods of two containers (16 MiB each), one
    /// sleeping process in each.
    pub(crate) fn create(count: u32) -> Result<Self> {
        let mut cgroup = OwnCgroup::create("bench-pods")?;
        let mut containers = Vec::new();
        for i in 0..count {
            let pod = format!("kubepods/burstable/pod{:08x}-0000-4c3d-8e9f-0a1b2c3d4e5f", i);
            for c in 0..2u32 {
                let path = cgroup.child(&format!("{pod}/{:064x}", u64::from(i) * 2 + u64::from(c) + 1))?;
                cgroup.set_memory_limit(&path, 16 << 20)?;
                containers.push(cgroup.dir(&path));
            }
        }
        // One process per container: a shell that joins it and sleeps.
        let mut processes = Vec::new();
        for dir in &containers {
            processes.push(sh(&format!("echo $$ > {} && exec sleep 3600", dir.join("cgroup.procs").display()))?);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        for dir in &containers {
            while std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().trim().is_empty() {
                if Instant::now() > deadline {
                    bail!("the pods' processes did not start");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(Self { cgroup, containers, processes })
    }
}
