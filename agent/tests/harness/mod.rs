//! Shared pieces of the privileged tests: cgroups inside the test's own
//! subtree (removed on drop, even when a test fails), child processes, the
//! agent binary under test, and a minimal HTTP client for /metrics.
#![allow(dead_code)]

pub mod containerd;
pub mod cri;
pub mod kubelet;

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
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

/// The image `cargo xtask image` built: `SANDWATCH_IMAGE` (set by `cargo
/// xtask test`), else where `cargo xtask image` writes it.
pub fn image_archive() -> PathBuf {
    let path = std::env::var_os("SANDWATCH_IMAGE").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../target/image/sandwatch-{}.oci.tar", env!("CARGO_PKG_VERSION")))
    });
    assert!(path.is_file(), "no image at {}: run `cargo xtask image` (`cargo xtask test` builds it)", path.display());
    path
}

/// The agent's settings from its flags, through the agent's own parse path.
pub fn settings(args: &[&str]) -> sandwatch::config::Settings {
    match sandwatch::cli::parse(std::iter::once("sandwatch").chain(args.iter().copied())) {
        Ok(sandwatch::cli::Invocation::Agent(settings)) => *settings,
        other => panic!("{args:?} are no agent flags: {other:?}"),
    }
}

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
        let path = format!("{}/sandwatch-test-{}-{name}", own.trim_end_matches('/'), std::process::id());
        delegate_memory(&layout, &own);
        std::fs::create_dir(layout.dir(&path))
            .unwrap_or_else(|e| panic!("cannot create cgroup {}: {e}", layout.dir(&path).display()));
        Self { layout, path, children: Vec::new() }
    }

    /// Creates a nested cgroup (removed before this one).
    pub fn child(&mut self, rel: &str) -> String {
        let mut path = self.path.clone();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            let parent = path;
            path = format!("{parent}/{part}");
            if !self.layout.dir(&path).exists() {
                delegate_memory(&self.layout, &parent);
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
        std::fs::write(&target, bytes.to_string()).unwrap_or_else(|e| panic!("cannot write {}: {e}", target.display()));
        if self.layout.mode != CgroupMode::V2 {
            // Without swap accounting the limit is the whole story; with it,
            // keep the OOM from being delayed by swapping.
            let _ = std::fs::write(self.layout.dir(path).join("memory.swappiness"), "0");
        }
    }

    /// The kernel's own count of OOM kills of processes in `path` (and
    /// below): `oom_kill` of `memory.events` on v2, of `memory.oom_control`
    /// on v1.
    pub fn oom_kills(&self, path: &str) -> u64 {
        let file = match self.layout.mode {
            CgroupMode::V1Memory { .. } => "memory.oom_control",
            CgroupMode::V2 => "memory.events",
        };
        let target = self.layout.dir(path).join(file);
        let text = std::fs::read_to_string(&target).unwrap_or_else(|e| panic!("cannot read {}: {e}", target.display()));
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill ").and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no oom_kill line in {}: {text}", target.display()))
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
        // What a runtime created inside and a failed test left behind.
        Self::remove_below(&self.layout, &self.path);
        Self::remove(&self.layout, &self.path);
        // On v1 a runtime (runc, cgroupfs driver) creates the same path in
        // every hierarchy; this test's part of it goes too.
        if self.layout.mode != CgroupMode::V2 {
            let Some(root) = self.layout.mount.parent() else { return };
            let Ok(hierarchies) = std::fs::read_dir(root) else { return };
            for h in hierarchies.flatten() {
                let dir = h.path().join(self.path.trim_start_matches('/'));
                if h.path() != self.layout.mount && dir.is_dir() {
                    remove_empty_tree(&dir);
                }
            }
        }
    }
}

impl TestCgroup {
    /// Removes every cgroup below `path`, deepest first.
    fn remove_below(layout: &CgroupLayout, path: &str) {
        let Ok(entries) = std::fs::read_dir(layout.dir(path)) else { return };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let sub = format!("{path}/{}", e.file_name().to_string_lossy());
                Self::remove_below(layout, &sub);
                Self::remove(layout, &sub);
            }
        }
    }
}

/// rmdir of a tree of cgroups without processes (a hierarchy whose
/// processes were killed through the memory one), deepest first.
fn remove_empty_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_tree(&e.path());
            }
        }
    }
    if std::fs::remove_dir(dir).is_err() && dir.exists() {
        eprintln!("warning: could not remove cgroup {}", dir.display());
    }
}

/// On v2, children get a memory controller only if their parent delegates
/// it. A cgroup that holds processes (other than the root) cannot delegate;
/// then `set_memory_limit` fails and says which file is missing.
fn delegate_memory(layout: &CgroupLayout, parent: &str) {
    if layout.mode == CgroupMode::V2 {
        let _ = std::fs::write(layout.dir(parent).join("cgroup.subtree_control"), "+memory");
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
    sh(&format!("echo $$ > {} && exec dd if=/dev/zero of=/dev/null bs={mib}M count=1", procs_file.display()))
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
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// GET over plain HTTP/1.0; returns (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    http_get_timeout(addr, path, Duration::from_secs(5))
}

/// GET over plain HTTP/1.0 within `timeout` for connecting and for each read.
pub fn http_get_timeout(addr: SocketAddr, path: &str, timeout: Duration) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout.min(Duration::from_secs(2))).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
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

/// One event record as a client reads it off the wire: every line must be
/// a typed record of a kind this build knows, and its fields are read by
/// their JSON names.
#[derive(Debug, Clone)]
pub struct WireRecord {
    pub record: sandwatch::telemetry::records::Record,
    pub json: serde_json::Value,
}

macro_rules! text_fields {
    ($($name:ident),*) => {$(
        pub fn $name(&self) -> Option<&str> {
            self.json.get(stringify!($name)).and_then(|v| v.as_str())
        }
    )*};
}

macro_rules! number_fields {
    ($($name:ident: $t:ty),*) => {$(
        pub fn $name(&self) -> Option<$t> {
            self.json.get(stringify!($name)).and_then(|v| v.as_u64()).and_then(|v| <$t>::try_from(v).ok())
        }
    )*};
}

impl WireRecord {
    pub fn parse(line: &str) -> Self {
        let record = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?} is no record: {e}"));
        let json = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?} is no JSON: {e}"));
        Self { record, json }
    }

    pub fn kind(&self) -> &str {
        self.json["kind"].as_str().unwrap_or("")
    }

    pub fn node(&self) -> &str {
        &self.record.node
    }

    pub fn time(&self) -> &str {
        &self.record.time
    }

    text_fields!(
        pod_uid,
        namespace,
        pod,
        container,
        container_id,
        victim_role,
        qos_class,
        comm,
        trigger_comm,
        outcome,
        reason,
        cause,
        source,
        runtime,
        stage
    );
    number_fields!(pid: u32, trigger_pid: u32, rss_bytes: u64, limit_bytes: u64, count: u64, window_seconds: u64);
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
        Self::start_wrapped(&[], extra)
    }

    /// Starts the agent through `wrapper` (e.g. `unshare --cgroup --`),
    /// which must exec it so the pid stays the agent's.
    pub fn start_wrapped(wrapper: &[&str], extra: &[&str]) -> Self {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        // A file, not a pipe: a chatty agent must never block on its log.
        let log = std::env::temp_dir().join(format!("sandwatch-test-{}-{}.log", std::process::id(), addr.port()));
        let log_file = std::fs::File::create(&log).expect("agent log file");
        let bin = env!("CARGO_BIN_EXE_sandwatch");
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = cmd
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

    /// The agent's event records so far (`GET /events`, the history).
    pub fn records(&self) -> Vec<WireRecord> {
        let (status, body) = http_get(self.addr, "/events").expect("GET /events");
        assert_eq!(status, 200, "{body}");
        body.lines().filter(|l| !l.trim().is_empty()).map(WireRecord::parse).collect()
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

/// A container id made of one repeated byte: `cid(1)` = "0101…01" (64 hex).
pub fn cid(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

/// A kubelet-shaped pod inside the test's own cgroup: the pod cgroup
/// (burstable QoS) and `containers` container cgroups named `cid(1..)`,
/// created in order (the first is the sandbox by the registry's rule), each
/// limited to 32 MiB. Inits join their cgroup, then wait on a FIFO until
/// the test triggers them. Everything is killed and removed on drop.
pub struct KubePod {
    pub cg: TestCgroup,
    pub tmp: PathBuf,
    pub pod_path: String,
    pub paths: Vec<String>,
    inits: Vec<Option<Child>>,
}

impl KubePod {
    pub fn build(name: &str, uid: &str, systemd: bool, containers: u8) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let mut cg = TestCgroup::create(name);
        let pod_rel = if systemd {
            let uid_ = uid.replace('-', "_");
            format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice")
        } else {
            format!("kubepods/burstable/pod{uid}")
        };
        let pod_path = cg.child(&pod_rel);
        let paths: Vec<String> = (1..=containers)
            .map(|n| {
                let leaf = if systemd { format!("cri-containerd-{}.scope", cid(n)) } else { cid(n) };
                let p = cg.child(&format!("{pod_rel}/{leaf}"));
                cg.set_memory_limit(&p, 32 << 20);
                p
            })
            .collect();
        let tmp = std::env::temp_dir().join(format!("sandwatch-pod-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&tmp).expect("temp dir");
        // A sandbox process called `pause` (a copy of dd, so that it can be
        // made to run out of memory).
        let pause = tmp.join("pause");
        std::fs::copy("/bin/dd", &pause).expect("copy dd");
        std::fs::set_permissions(&pause, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        for i in 0..paths.len() {
            let fifo = tmp.join(format!("go{i}"));
            let c = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).expect("path");
            // SAFETY: mkfifo on a path we own.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        }
        let inits = paths.iter().map(|_| None).collect();
        Self { cg, tmp, pod_path, paths, inits }
    }

    pub fn pause_binary(&self) -> String {
        self.tmp.join("pause").display().to_string()
    }

    fn procs(&self, i: usize) -> String {
        self.cg.procs_file(&self.paths[i]).display().to_string()
    }

    fn fifo(&self, i: usize) -> String {
        self.tmp.join(format!("go{i}")).display().to_string()
    }

    /// Starts container `i`'s init: it joins the cgroup, waits for
    /// [`KubePod::trigger`], then runs `then` (a shell snippet).
    pub fn start_init(&mut self, i: usize, then: &str) {
        let script = format!("echo $$ > {} && read x < {} && {then}", self.procs(i), self.fifo(i));
        self.inits[i] = Some(sh(&script));
        for _ in 0..200 {
            if !std::fs::read_to_string(self.procs(i)).unwrap_or_default().trim().is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("init of container {i} never joined its cgroup");
    }

    pub fn init_pid(&self, i: usize) -> u32 {
        self.inits[i].as_ref().map(Child::id).expect("init started")
    }

    /// Lets init `i` go on.
    pub fn trigger(&self, i: usize) {
        std::fs::write(self.fifo(i), "go\n").expect("write fifo");
    }

    pub fn cgroup_id(&self, i: usize) -> u64 {
        self.cg.id_of(&self.paths[i])
    }

    /// The kernel's count of OOM kills in container `i`.
    pub fn oom_kills(&self, i: usize) -> u64 {
        self.cg.oom_kills(&self.paths[i])
    }

    /// Sets container `i`'s `memory.oom.group` as kubelet does on cgroup
    /// v2; false on v1, which has no such setting.
    pub fn set_oom_group(&self, i: usize, on: bool) -> bool {
        if self.cg.layout.mode != CgroupMode::V2 {
            return false;
        }
        let file = self.cg.layout.dir(&self.paths[i]).join("memory.oom.group");
        std::fs::write(&file, if on { "1" } else { "0" })
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
        true
    }
}

impl Drop for KubePod {
    fn drop(&mut self) {
        for c in self.inits.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.tmp);
        // TestCgroup's drop kills what is left and removes the tree.
    }
}

/// A real Prometheus server on loopback, scraping `target` every second,
/// with its own temporary configuration and storage. Killed on drop.
pub struct PrometheusProcess {
    child: Child,
    pub addr: SocketAddr,
    dir: PathBuf,
}

impl PrometheusProcess {
    pub fn start(target: SocketAddr) -> Self {
        let dir = std::env::temp_dir().join(format!("sandwatch-prom-{}-{}", std::process::id(), target.port()));
        std::fs::create_dir_all(dir.join("data")).expect("prometheus dir");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: sandwatch\n    static_configs:\n      - targets: ['{target}']\n"
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("prometheus.yml");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus (Debian package prometheus, installed by cargo xtask setup)");
        let mut p = Self { child, addr, dir };
        let start = Instant::now();
        while !matches!(http_get(p.addr, "/-/ready"), Some((200, _))) {
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("prometheus exited with {status}: {}", p.log());
            }
            assert!(start.elapsed() < Duration::from_secs(30), "prometheus not ready: {}", p.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query, optionally at `time` (Unix seconds); returns
    /// (labels, value) per series.
    pub fn query(&self, promql: &str, time: Option<f64>) -> Vec<(serde_json::Value, f64)> {
        let mut path = format!("/api/v1/query?query={}", percent_encode(promql));
        if let Some(t) = time {
            path.push_str(&format!("&time={t:.3}"));
        }
        let (status, body) = http_get(self.addr, &path).expect("query prometheus");
        assert_eq!(status, 200, "{promql}: {body}");
        let json: serde_json::Value = serde_json::from_str(&body).expect("prometheus JSON");
        json["data"]["result"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .filter_map(|r| {
                        let v = r["value"][1].as_str()?.parse::<f64>().ok()?;
                        Some((r["metric"].clone(), v))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The raw answer to an instant query: (HTTP status, body).
    pub fn raw_query(&self, promql: &str) -> (u16, String) {
        http_get(self.addr, &format!("/api/v1/query?query={}", percent_encode(promql))).expect("query prometheus")
    }

    /// The single value of a query that returns one series, if any.
    pub fn scalar(&self, promql: &str, time: Option<f64>) -> Option<f64> {
        self.query(promql, time).first().map(|(_, v)| *v)
    }

    /// Polls `promql` until `ok(value)` or `timeout`; returns the last value.
    pub fn wait_for(&self, promql: &str, timeout: Duration, ok: impl Fn(f64) -> bool) -> Option<f64> {
        let start = Instant::now();
        loop {
            let v = self.scalar(promql, None);
            if v.is_some_and(&ok) || start.elapsed() > timeout {
                return v;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for PrometheusProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
