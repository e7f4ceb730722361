//! Shared pieces of the privileged tests: cgroups inside the test's own
//! subtree (removed on drop, even when a test fails), child processes, the
//! agent binary under test, and a minimal HTTP client for /metrics.
#![allow(dead_code)]

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use sandwatch::{
    events::Event,
    probes::{
        cgroups::{own_cgroup, CgroupLayout, CgroupMode},
        reader::EventStream,
    },
};

/// Fails the test unless it runs as root: privileged tests never skip.
pub fn require_root() {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "privileged tests need root (they load eBPF programs and create cgroups); run `cargo xtask test` as root"
    );
}

/// A cgroup created inside this process's own memory cgroup (v1) or
/// unified cgroup (v2). Dropping it kills what is left inside and removes
/// it, children first.
pub struct TestCgroup {
    pub layout: CgroupLayout,
    /// Relative to the hierarchy root, as the kernel's tracepoints show it.
    pub path: String,
    children: Vec<String>,
}

impl TestCgroup {
    pub fn create(name: &str) -> Self {
        let layout = CgroupLayout::detect().expect("cgroup layout");
        let own = own_cgroup(&layout).expect("own cgroup in /proc/self/cgroup");
        let path = format!(
            "{}/sandwatch-test-{}-{name}",
            own.trim_end_matches('/'),
            std::process::id()
        );
        std::fs::create_dir(layout.dir(&path))
            .unwrap_or_else(|e| panic!("cannot create cgroup {}: {e}", layout.dir(&path).display()));
        Self {
            layout,
            path,
            children: Vec::new(),
        }
    }

    /// Creates a nested cgroup (removed before this one).
    pub fn child(&mut self, rel: &str) -> String {
        let mut path = self.path.clone();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            path = format!("{path}/{part}");
            if !self.layout.dir(&path).exists() {
                std::fs::create_dir(self.layout.dir(&path))
                    .unwrap_or_else(|e| panic!("cannot create cgroup {path}: {e}"));
                self.children.push(path.clone());
            }
        }
        path
    }

    pub fn dir(&self) -> PathBuf {
        self.layout.dir(&self.path)
    }

    pub fn id(&self) -> u64 {
        self.layout.cgroup_id(&self.path).expect("cgroup id")
    }

    pub fn id_of(&self, path: &str) -> u64 {
        self.layout.cgroup_id(path).expect("cgroup id")
    }

    pub fn procs_file(&self, path: &str) -> PathBuf {
        self.layout.dir(path).join("cgroup.procs")
    }

    pub fn set_memory_limit(&self, path: &str, bytes: u64) {
        let file = match self.layout.mode {
            CgroupMode::V1Memory { .. } => "memory.limit_in_bytes",
            CgroupMode::V2 => "memory.max",
        };
        let target = self.layout.dir(path).join(file);
        std::fs::write(&target, bytes.to_string())
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", target.display()));
        if self.layout.mode != CgroupMode::V2 {
            // Without swap accounting the limit is the whole story; with it,
            // keep the OOM from being delayed by swapping.
            let _ = std::fs::write(self.layout.dir(path).join("memory.swappiness"), "0");
        }
    }

    /// Removes one cgroup: kill what is inside (only processes this test
    /// started can be there), wait for them to go, rmdir.
    fn remove(layout: &CgroupLayout, path: &str) {
        let dir = layout.dir(path);
        for _ in 0..100 {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            let pids: Vec<i32> = procs.lines().filter_map(|l| l.trim().parse().ok()).collect();
            for pid in &pids {
                // SAFETY: plain kill(2) of a pid inside our own test cgroup.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: could not remove cgroup {}", dir.display());
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for child in self.children.iter().rev() {
            Self::remove(&self.layout, child);
        }
        Self::remove(&self.layout, &self.path);
    }
}

/// Runs `sh -c script` and returns the child.
pub fn sh(script: &str) -> Child {
    Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sh")
}

/// A process that joins `procs_file`'s cgroup and then tries to allocate and
/// touch `mib` MiB (dd's block buffer), so a smaller limit OOM-kills it.
pub fn memory_hog(procs_file: &std::path::Path, mib: u64) -> Child {
    sh(&format!(
        "echo $$ > {} && exec dd if=/dev/zero of=/dev/null bs={mib}M count=1",
        procs_file.display()
    ))
}

/// Pulls events from the stream until `done` says so or `timeout` passes;
/// returns the events that `keep` selected, in arrival order.
pub async fn collect(
    stream: &mut EventStream,
    timeout: Duration,
    mut keep: impl FnMut(&Event) -> bool,
    mut done: impl FnMut(&[Event]) -> bool,
) -> Vec<Event> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut kept = Vec::new();
    while !done(&kept) {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(event)) => {
                if keep(&event) {
                    kept.push(event);
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    kept
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// GET over plain HTTP/1.0; returns (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let status = resp.split_whitespace().nth(1)?.parse().ok()?;
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// Value of one exact series (`name{labels}`) in a text exposition.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The agent binary, started on a free loopback port; killed on drop if a
/// test fails before stopping it.
pub struct AgentProcess {
    pub child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
}

impl AgentProcess {
    pub fn start(extra: &[&str]) -> Self {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        // A file, not a pipe: a chatty agent must never block on its log.
        let log = std::env::temp_dir().join(format!("sandwatch-test-{}-{}.log", std::process::id(), addr.port()));
        let log_file = std::fs::File::create(&log).expect("agent log file");
        let child = Command::new(env!("CARGO_BIN_EXE_sandwatch"))
            .args(["--listen", &addr.to_string(), "--log-level", "info"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("spawn sandwatch");
        let mut agent = Self { child, addr, log };
        agent.wait_ready(Duration::from_secs(20));
        agent
    }

    fn wait_ready(&mut self, timeout: Duration) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("sandwatch exited early with {status}: {}", self.log_text());
            }
            if matches!(http_get(self.addr, "/readyz"), Some((200, _))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("sandwatch was not ready within {timeout:?}");
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn metrics(&self) -> String {
        http_get(self.addr, "/metrics").expect("scrape /metrics").1
    }

    /// SIGTERM, then wait up to `timeout`; returns the exit status and stderr.
    pub fn terminate(mut self, timeout: Duration) -> (std::process::ExitStatus, String) {
        // SAFETY: kill(2) of the child we started, by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return (status, self.log_text());
            }
            assert!(start.elapsed() < timeout, "sandwatch did not exit within {timeout:?} of SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}
