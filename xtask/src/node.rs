//! What the benchmark and the soak do to a node: exit storms, cgroups of
//! their own (inside this process's cgroup, removed on drop), and the agent
//! binary run as a user runs it, read through /metrics and /proc.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

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

/// A cgroup inside this process's own memory cgroup (v1) or unified
/// cgroup (v2). Dropping it kills what is left inside and removes it and
/// every cgroup made under it, deepest first.
pub struct OwnCgroup {
    root: PathBuf,
    v2: bool,
    made: Vec<PathBuf>,
}

impl OwnCgroup {
    pub fn create(name: &str) -> Result<Self> {
        let own = std::fs::read_to_string("/proc/self/cgroup")?;
        let v1 = own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _ = parts.next();
            let controllers = parts.next()?;
            controllers.split(',').any(|c| c == "memory").then(|| parts.next()).flatten()
        });
        let (mount, path, v2) = match v1 {
            Some(p) => ("/sys/fs/cgroup/memory", p.to_string(), false),
            None => {
                let p = own.lines().find_map(|l| l.strip_prefix("0::")).context("no cgroup in /proc/self/cgroup")?;
                ("/sys/fs/cgroup", p.to_string(), true)
            }
        };
        let root = Path::new(mount)
            .join(path.trim_start_matches('/'))
            .join(format!("sandwatch-{name}-{}", std::process::id()));
        std::fs::create_dir(&root).with_context(|| format!("cannot create {}", root.display()))?;
        Ok(Self { root: root.clone(), v2, made: vec![root] })
    }

    /// Creates `rel` (and its parents) below this cgroup; returns its dir.
    pub fn child(&mut self, rel: &str) -> Result<PathBuf> {
        let mut dir = self.root.clone();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            dir = dir.join(part);
            if !dir.exists() {
                std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
                self.made.push(dir.clone());
            }
        }
        Ok(dir)
    }

    pub fn dir(&self) -> &Path {
        &self.root
    }

    pub fn limit_memory(&self, dir: &Path, bytes: u64) -> Result<()> {
        let file = if self.v2 { "memory.max" } else { "memory.limit_in_bytes" };
        std::fs::write(dir.join(file), bytes.to_string()).with_context(|| format!("cannot limit {}", dir.display()))
    }

    /// Kills what is inside `dir` (only processes we started can be there)
    /// and removes it and everything made below it.
    pub fn remove(&mut self, dir: &Path) {
        let mut below: Vec<PathBuf> = self.made.iter().filter(|d| d.starts_with(dir)).cloned().collect();
        below.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in &below {
            remove_dir(d);
        }
        self.made.retain(|d| !d.starts_with(dir));
    }
}

fn remove_dir(dir: &Path) {
    for _ in 0..100 {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            // SAFETY: kill(2) of a process inside our own cgroup.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("could not remove cgroup {}", dir.display());
}

impl Drop for OwnCgroup {
    fn drop(&mut self) {
        let root = self.root.clone();
        self.remove(&root);
    }
}

/// `sh -c script`, with nothing on its stdio.
pub fn sh(script: &str) -> Result<Child> {
    Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start sh")
}

/// The agent binary on a free loopback port.
pub struct Agent {
    child: Child,
    pub addr: SocketAddr,
    log: Option<PathBuf>,
}

impl Agent {
    /// Starts the agent; with `log`, its stderr goes to that file.
    pub fn start(bin: &Path, extra: &[String], log: Option<&Path>) -> Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path)?),
            None => Stdio::inherit(),
        };
        let child = Command::new(bin)
            .args(["--listen", &addr.to_string(), "--log-level", "warn"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut agent = Self { child, addr, log: log.map(Path::to_path_buf) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Some(status) = agent.child.try_wait()? {
                bail!("agent exited early with {status}: {}", agent.log_text());
            }
            if get(addr, "/readyz").is_some_and(|(code, _)| code == 200) {
                return Ok(agent);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = agent.child.kill();
        bail!("agent not ready within 30 s")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        self.log.as_ref().and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default()
    }

    pub fn metrics(&self) -> Result<String> {
        get(self.addr, "/metrics").map(|(_, t)| t).context("scrape failed")
    }

    /// One series' value now (0 if absent or unreachable).
    pub fn value(&self, series: &str) -> f64 {
        self.metrics().ok().and_then(|t| metric(&t, series)).unwrap_or(0.0)
    }

    /// A `kB` field of /proc/<pid>/status (VmHWM: peak RSS, VmRSS: now).
    pub fn status_kib(&self, field: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Sends `signal` to the agent (by its pid).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) of the agent we started, by its pid.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// SIGTERM; fails unless the agent exits 0. Returns its log.
    pub fn stop(mut self) -> Result<String> {
        self.signal(libc::SIGTERM);
        let status = self.child.wait()?;
        let log = self.log_text();
        if !status.success() {
            bail!("agent exited with {status} after SIGTERM: {log}");
        }
        Ok(log)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let code = resp.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, resp.split_once("\r\n\r\n")?.1.to_string()))
}

pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}
