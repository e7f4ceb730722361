//! Shared pieces of the end-to-end tests, over what they share with
//! xtask (the `test-support` crate): cgroups inside the test's own subtree
//! (removed on drop, even when a test fails), child processes, the agent
//! binary under test, and a minimal HTTP client for its endpoints.
#![allow(dead_code, unused_imports)] // each test binary uses a part of it

pub mod containerd;
pub mod cri;
pub mod kubelet;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use sandwatch::{
    events::Event,
    probes::{
        cgroups::{CgroupLayout, CgroupMode},
        reader::EventStream,
    },
};
pub use test_support::http::{get as http_get, get_timeout as http_get_timeout, get_unix as http_get_unix, metric};
use test_support::{
    agent::{Agent, Launch},
    cgroup::OwnCgroup,
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
/// unified cgroup (v2), with the agent's view of the layout. Dropping it
/// kills what is left inside and removes it and everything below.
pub struct TestCgroup {
    pub layout: CgroupLayout,
    /// Relative to the hierarchy root, as the kernel's tracepoints show it.
    pub path: String,
    cg: OwnCgroup,
}

impl TestCgroup {
    pub fn create(name: &str) -> Self {
        let layout = CgroupLayout::detect().expect("cgroup layout");
        let cg = OwnCgroup::create(&format!("test-{name}")).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(cg.mount(), layout.mount, "the agent and the tests see the same hierarchy");
        Self { layout, path: cg.path().to_string(), cg }
    }

    /// Creates a nested cgroup (removed before this one).
    pub fn child(&mut self, rel: &str) -> String {
        self.cg.child(rel).unwrap_or_else(|e| panic!("{e:#}"))
    }

    pub fn dir(&self) -> PathBuf {
        self.cg.dir(&self.path)
    }

    pub fn id(&self) -> u64 {
        self.id_of(&self.path)
    }

    pub fn id_of(&self, path: &str) -> u64 {
        self.cg.id(path).unwrap_or_else(|e| panic!("{e:#}"))
    }

    pub fn procs_file(&self, path: &str) -> PathBuf {
        self.cg.procs_file(path)
    }

    pub fn set_memory_limit(&self, path: &str, bytes: u64) {
        self.cg.set_memory_limit(path, bytes).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// The memory `path` uses now (`memory.current`, v1
    /// `memory.usage_in_bytes`); `None` when it cannot be read.
    pub fn memory_usage(&self, path: &str) -> Option<u64> {
        let dir = self.layout.dir(path);
        ["memory.current", "memory.usage_in_bytes"]
            .iter()
            .find_map(|f| std::fs::read_to_string(dir.join(f)).ok()?.trim().parse().ok())
    }

    pub fn limit_swap(&self, path: &str, bytes: u64) {
        self.cg.limit_swap(path, bytes).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// v1: the failures counted at the limits of `path` (`memory.failcnt`
    /// and `memory.memsw.failcnt`).
    pub fn limit_failures(&self, path: &str) -> u64 {
        ["memory.failcnt", "memory.memsw.failcnt"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(self.cg.dir(path).join(f)).ok())
            .filter_map(|t| t.trim().parse::<u64>().ok())
            .sum()
    }

    pub fn unlimit_memory(&self, path: &str) {
        self.cg.unlimit_memory(path).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// The kernel's own count of OOM kills of processes in `path` (and below).
    pub fn oom_kills(&self, path: &str) -> u64 {
        self.cg.oom_kills(path).unwrap_or_else(|e| panic!("{e:#}"))
    }
}

/// The kubelet-shaped cgroups on this node now: a real node runs other
/// pods, so a node-wide gauge is asserted as what was there before a test
/// made its own, plus what it made. Counted as the kernel shows them to
/// the agent at start-up (every pod and container cgroup; a container
/// with a process has its init), with the agent's own path parser.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodePods {
    pub sandboxes: f64,
    pub containers: f64,
    /// Containers with a process in them.
    pub processes: f64,
    /// Containers killed as a whole on OOM (`memory.oom.group`, v2).
    pub oom_group: f64,
}

pub fn node_pods() -> NodePods {
    use std::collections::HashSet;
    let layout = CgroupLayout::detect().expect("cgroup layout");
    let (mut pods, mut containers) = (HashSet::new(), HashSet::new());
    let mut found = NodePods::default();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(layout.dir(&rel)) else { continue };
        for entry in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            let path = format!("{rel}/{}", entry.file_name().to_string_lossy());
            if let Some(pod) = sandwatch::model::cgroup_path::parse(&path) {
                pods.insert(pod.pod_uid.clone());
                if let Some(c) = pod.container_id {
                    if containers.insert((pod.pod_uid, c)) {
                        found.containers += 1.0;
                        let procs = std::fs::read_to_string(entry.path().join("cgroup.procs")).unwrap_or_default();
                        found.processes += f64::from(u8::from(!procs.trim().is_empty()));
                        found.oom_group += f64::from(u8::from(layout.oom_group(&path) == Some(true)));
                    }
                }
            }
            stack.push(path);
        }
    }
    found.sandboxes = pods.len() as f64;
    found
}

/// Runs `sh -c script` and returns the child.
pub fn sh(script: &str) -> Child {
    test_support::sh(script).expect("spawn sh")
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
    test_support::free_port().expect("free port")
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
        stage,
        workload,
        workload_kind,
        limit,
        constraint,
        sender,
        sender_comm,
        sender_unit,
        sender_namespace,
        sender_pod,
        sender_container,
        sender_container_id,
        direction,
        runtime_reason
    );
    number_fields!(
        pid: u32,
        trigger_pid: u32,
        rss_bytes: u64,
        limit_bytes: u64,
        count: u64,
        window_seconds: u64,
        exit_code: u8,
        signal: u8,
        sender_pid: u32,
        stop_signal: u8,
        grace_ms: u64,
        kernel_exit_code: u32,
        runtime_exit_code: u32,
        task_exit_status: u32
    );
}

/// The agent binary, started on a free loopback port; killed on drop if a
/// test fails before stopping it.
pub struct AgentProcess {
    agent: Agent,
    pub addr: SocketAddr,
}

impl AgentProcess {
    pub fn start(extra: &[&str]) -> Self {
        Self::start_wrapped(&[], extra)
    }

    /// Starts the agent through `wrapper` (e.g. `unshare --cgroup --`),
    /// which must exec it so the pid stays the agent's.
    pub fn start_wrapped(wrapper: &[&str], extra: &[&str]) -> Self {
        Self::launch(wrapper, "info", extra)
    }

    /// Starts the agent logging at `level` (`trace`: every event it
    /// handles, one line each).
    pub fn start_logging(level: &str, extra: &[&str]) -> Self {
        Self::launch(&[], level, extra)
    }

    fn launch(wrapper: &[&str], log_level: &str, extra: &[&str]) -> Self {
        let bin = Path::new(env!("CARGO_BIN_EXE_sandwatch"));
        // Tests read a pod's series as soon as its event is counted: no hold
        // at 0 unless a test asks for one (what the hold is for, Prometheus
        // counting a series' first event, is tested in alerts.rs with a
        // real Prometheus, and the shipped default in daemonset.rs).
        let mut args = extra.to_vec();
        if !args.contains(&"--pod-series-hold") {
            args.extend(["--pod-series-hold", "0"]);
        }
        let launch = Launch { wrapper, log_level, ready_within: Duration::from_secs(20), ..Launch::new(bin, &args) };
        let agent = Agent::start(launch).unwrap_or_else(|e| panic!("{e:#}"));
        Self { addr: agent.addr, agent }
    }

    pub fn pid(&self) -> u32 {
        self.agent.pid()
    }

    pub fn log_text(&self) -> String {
        self.agent.log_text()
    }

    /// The agent's log once a line satisfies `line` (the log is written
    /// after the counters move, by another thread), or the log after
    /// `timeout` for the caller's assertion to show.
    pub fn wait_log(&self, timeout: Duration, line: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let log = self.log_text();
            if log.lines().any(&line) || start.elapsed() > timeout {
                return log;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `signal` to the agent (by its pid).
    pub fn signal(&self, signal: i32) {
        self.agent.signal(signal);
    }

    /// Stops the agent, every thread of it (`suspend`); SIGCONT resumes it.
    pub fn suspend(&self) {
        suspend(self.pid());
    }

    pub fn metrics(&self) -> String {
        self.agent.metrics().unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Where it serves `/events`.
    pub fn events_at(&self) -> &test_support::agent::EventsAt {
        &self.agent.events
    }

    /// GET `path_and_query` on the events listener.
    pub fn events_get(&self, path_and_query: &str) -> Option<(u16, String)> {
        self.agent.events_get(path_and_query)
    }

    /// The agent's event records so far (`GET /events`, the history).
    pub fn records(&self) -> Vec<WireRecord> {
        let (status, body) = self.events_get("/events").expect("GET /events");
        assert_eq!(status, 200, "{body}");
        body.lines().filter(|l| !l.trim().is_empty()).map(WireRecord::parse).collect()
    }

    /// SIGTERM, then wait up to `timeout`; returns the exit status and its log.
    pub fn terminate(mut self, timeout: Duration) -> (ExitStatus, String) {
        self.agent.terminate(timeout).unwrap_or_else(|e| panic!("{e:#}"))
    }
}

/// A shell command that grows anonymous memory as an application leaks:
/// `start_mib` at once, then `mib_per_s` a second (busybox's awk, the
/// host's static busybox or the test image's: 1 KiB strings, about
/// 1.07 MiB per MiB asked), until the OOM killer takes it.
pub fn grower(start_mib: u32, mib_per_s: u32) -> String {
    format!(
        "exec /bin/busybox awk 'BEGIN {{ s = sprintf(\"%01000d\", 0); for (n = 0; n < {start} * 1024; n++) a[n] = s n; \
         while (1) {{ for (i = 0; i < {rate} * 1024; i++) a[n++] = s n; system(\"sleep 1\") }} }}'",
        start = start_mib,
        rate = mib_per_s
    )
}

/// A shell command that holds `mib` of anonymous memory and sleeps.
pub fn holder(mib: u32) -> String {
    format!(
        "exec /bin/busybox awk 'BEGIN {{ s = sprintf(\"%01000d\", 0); for (n = 0; n < {mib} * 1024; n++) a[n] = s n; \
         system(\"sleep 1000\") }}'"
    )
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
        Self::build_qos(name, uid, systemd, containers, "burstable")
    }

    /// The same in QoS class `qos` (`burstable`, `besteffort`, or
    /// `guaranteed`: right under the kubelet's root).
    pub fn build_qos(name: &str, uid: &str, systemd: bool, containers: u8, qos: &str) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let mut cg = TestCgroup::create(name);
        let uid_ = uid.replace('-', "_");
        let pod_rel = match (systemd, qos) {
            (true, "guaranteed") => format!("kubepods.slice/kubepods-pod{uid_}.slice"),
            (true, _) => format!("kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid_}.slice"),
            (false, "guaranteed") => format!("kubepods/pod{uid}"),
            (false, _) => format!("kubepods/{qos}/pod{uid}"),
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
        // `then` is one group after the trigger: a bare `a & b` in it would
        // otherwise split the and-list, and `b` run at once, outside the
        // cgroup (a global-OOM allocator charged to the root, seen in CI).
        let script = format!("echo $$ > {} && read x < {} && {{ {then}\n}}", self.procs(i), self.fifo(i));
        self.inits[i] = Some(sh(&script));
        for _ in 0..200 {
            if !std::fs::read_to_string(self.procs(i)).unwrap_or_default().trim().is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("init of container {i} never joined its cgroup");
    }

    /// As a tenant with a writable cgroupfs does (systemd in a
    /// container, a nested runtime, a CI runner): a chain of `depth`
    /// cgroups nested below container `i`'s; returns the deepest one's
    /// directory. Removed with the pod.
    pub fn nest_chain(&self, i: usize, depth: usize) -> PathBuf {
        let mut dir = self.cg.layout.dir(&self.paths[i]);
        for level in 0..depth {
            dir = dir.join(format!("n{level}"));
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        }
        dir
    }

    /// `count` cgroups side by side below container `i`'s, each with
    /// `prefix` and its number for a name. Removed with the pod.
    pub fn nest_many(&self, i: usize, prefix: &str, count: usize) {
        let dir = self.cg.layout.dir(&self.paths[i]);
        for n in 0..count {
            let d = dir.join(format!("{prefix}{n}"));
            std::fs::create_dir(&d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
        }
    }

    /// The pids in container `i`'s own cgroup.
    pub fn pids(&self, i: usize) -> Vec<u32> {
        std::fs::read_to_string(self.procs(i))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
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

/// (where, expression) for each dashboard target and alert rule, with
/// Grafana's variables replaced the way Grafana would for "All".
pub fn shipped_queries() -> Vec<(String, String)> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{root}/dashboards/sandwatch.json")).expect("dashboard"))
            .expect("dashboard JSON");
    let mut out = Vec::new();
    for panel in dash["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let expr = expr
                    .replace("$node", ".*")
                    .replace("$namespace", ".*")
                    .replace("$__rate_interval", "1m")
                    .replace("$__range", "10m");
                out.push((format!("dashboard panel {:?}", panel["title"]), expr));
            }
        }
    }
    let rules = std::fs::read_to_string(format!("{root}/deploy/prometheus/rules.yml")).expect("rules");
    for expr in rules.lines().filter_map(|l| l.trim().strip_prefix("expr: ")) {
        out.push(("alert rule".to_string(), expr.to_string()));
    }
    assert!(out.len() >= 20, "{out:?}");
    out
}

/// Whether a panel's expression shows only what the runtime names (the
/// workload families, its version): its data is checked where a real CRI
/// names pods.
pub fn needs_runtime_names(expr: &str) -> bool {
    expr.contains("sandwatch_workload_") || expr.contains("sandwatch_runtime_info")
}

/// Whether a shipped expression shows data only once a warned container
/// was OOM-killed (how long before): the CRI's pressure test checks those
/// panels after its kill.
pub fn needs_warned_kill(expr: &str) -> bool {
    expr.contains("sandwatch_pod_oom_kills_warned_seconds_total")
}

/// Whether a shipped expression shows data only while a container is under
/// memory pressure (per-pod series exist only then): the CRI's pressure
/// test checks those panels as it warns.
pub fn needs_live_pressure(expr: &str) -> bool {
    expr.contains("sandwatch_pod_memory_")
}

/// Our programs' names as the kernel keeps them (15 bytes:
/// `sched_process_e` is the exit's and the exec's).
pub const PROGRAMS: [&str; 9] = [
    "sched_process_e",
    "sched_process_f",
    "mark_victim",
    "mark_victim_tas",
    "oom_control",
    "cgroup_mkdir",
    "cgroup_rmdir",
    "cgroup_attach_t",
    "signal_generate",
];

/// The ids of our programs that process `pid` holds (its descriptors'
/// fdinfo): an agent's own, whatever the agents of the tests beside it
/// load meanwhile.
pub fn programs_held_by(pid: u32) -> Vec<u32> {
    let held: std::collections::BTreeSet<u32> = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|info| info.lines().find_map(|l| l.strip_prefix("prog_id:")?.trim().parse().ok()))
        .collect();
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| held.contains(&p.id()) && p.name_as_str().is_some_and(|n| PROGRAMS.contains(&n)))
        .map(|p| p.id())
        .collect()
}

/// Waits up to 5 s for the kernel to free programs `ids` (it frees one in
/// deferred work once its last reference goes); those still loaded.
pub fn wait_unloaded(ids: &[u32]) -> Vec<u32> {
    let loaded = || -> Vec<u32> {
        aya::programs::loaded_programs().filter_map(Result::ok).map(|p| p.id()).filter(|id| ids.contains(id)).collect()
    };
    let start = Instant::now();
    while !loaded().is_empty() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    loaded()
}

/// The scrape config the Prometheus Operator renders from
/// deploy/kubernetes/servicemonitor.yaml, for one agent at `target` on
/// `node`, every second: the labels it gives every target of a
/// ServiceMonitor's endpoint (`namespace`, `service`, `pod`, `container`,
/// `endpoint`, and `job` from the Service), the endpoint's relabeled
/// `node`, its path and its `honorLabels`. Targets' labels are static here,
/// with the values the Service's pods have in a cluster; a scraped label of
/// the same name is kept only with `honorLabels`, or else becomes
/// `exported_<name>`, as in kube-prometheus-stack.
pub fn operator_scrape_config(target: SocketAddr, node: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/servicemonitor.yaml");
    let text = std::fs::read_to_string(&path).expect("servicemonitor.yaml");
    let monitor: serde_json::Value = yaml_serde::from_str(&text).expect("ServiceMonitor YAML");
    let endpoint = &monitor["spec"]["endpoints"][0];
    let honor = endpoint["honorLabels"].as_bool().unwrap_or(false);
    let metrics_path = endpoint["path"].as_str().unwrap_or("/metrics");
    let port = endpoint["port"].as_str().expect("the endpoint's port name");
    let relabeled: Vec<&str> =
        endpoint["relabelings"].as_array().into_iter().flatten().filter_map(|r| r["targetLabel"].as_str()).collect();
    assert_eq!(relabeled, ["node"], "a relabeling this rendering does not know");
    format!(
        "  - job_name: serviceMonitor/sandwatch/sandwatch/0\n    honor_labels: {honor}\n    metrics_path: {metrics_path}\n    static_configs:\n      - targets: ['{target}']\n        labels:\n          namespace: sandwatch\n          service: sandwatch\n          pod: sandwatch-x7k2p\n          container: sandwatch\n          endpoint: {port}\n          job: sandwatch\n          node: {node}\n"
    )
}

/// A real Prometheus server on loopback, scraping `target` every second,
/// with its own temporary configuration and storage. Killed on drop.
pub struct PrometheusProcess {
    child: Child,
    pub addr: SocketAddr,
    dir: PathBuf,
}

impl PrometheusProcess {
    /// Scraping as kube-prometheus-stack scrapes the shipped ServiceMonitor.
    pub fn start(target: SocketAddr) -> Self {
        Self::start_with(target.port(), &operator_scrape_config(target, "sandwatch-test-node"))
    }

    /// With these scrape configs (YAML list items under `scrape_configs:`),
    /// every second; `tag` makes its directory its own.
    pub fn start_with(tag: u16, scrape_configs: &str) -> Self {
        Self::start_with_rules(tag, scrape_configs, &[])
    }

    /// The same with rule files loaded, evaluated every second.
    pub fn start_with_rules(tag: u16, scrape_configs: &str, rule_files: &[&Path]) -> Self {
        let dir = std::env::temp_dir().join(format!("sandwatch-prom-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(dir.join("data")).expect("prometheus dir");
        let rules: String = rule_files.iter().map(|f| format!("  - {}\n", f.display())).collect();
        let rules = if rules.is_empty() { String::new() } else { format!("rule_files:\n{rules}") };
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{rules}scrape_configs:\n{scrape_configs}"
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

/// The kernel's log as it is now, one message (its first line) per
/// record, read from /dev/kmsg.
fn kernel_log() -> std::io::Result<Vec<String>> {
    use std::{io::Read as _, os::unix::fs::OpenOptionsExt as _};
    let mut kmsg = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open("/dev/kmsg")?;
    let mut messages = Vec::new();
    let mut buf = vec![0u8; 8192];
    // One record per read; EAGAIN at the end. A record overwritten while
    // read (EPIPE) is skipped.
    loop {
        match kmsg.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let record = String::from_utf8_lossy(&buf[..n]);
                if let Some((_, msg)) = record.split_once(';') {
                    messages.push(msg.lines().next().unwrap_or("").to_string());
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        }
    }
    Ok(messages)
}

/// MemTotal of /proc/meminfo, in bytes.
pub fn mem_total() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("MemTotal")
        * 1024
}

/// Every OOM line of the kernel's log, for a test's failure message.
pub fn kernel_oom_lines() -> Vec<String> {
    match kernel_log() {
        Ok(log) => log
            .into_iter()
            .filter(|m| {
                m.starts_with("oom-kill:") || m.starts_with("Out of memory") || m.contains("invoked oom-killer")
            })
            .collect(),
        Err(e) => vec![format!("/dev/kmsg unreadable: {e}")],
    }
}

/// The kernel's own report of the OOM kill of `pid` (its `oom-kill:` line
/// in the kernel log): (constraint, the memcg under OOM), e.g.
/// ("CONSTRAINT_MEMCG", "/…/pod…/<container>").
pub fn kernel_oom_report(pid: u32) -> Option<(String, String)> {
    let pid = pid.to_string();
    kernel_log().expect("/dev/kmsg").iter().rev().find_map(|msg| {
        let fields = msg.strip_prefix("oom-kill:")?;
        let get = |k: &str| fields.split(',').find_map(|f| f.strip_prefix(k)).map(str::to_string);
        if get("pid=")? != pid {
            return None;
        }
        get("constraint=").zip(get("oom_memcg=").or(Some(String::new())))
    })
}

/// SIGSTOP to `pid` (a process this test started), returning once every
/// thread of it is stopped. kill(2) only wakes one thread to begin the
/// group stop; on a loaded machine the others run on for a while, long
/// enough to do what the test means to hold back.
pub fn suspend(pid: u32) {
    // SAFETY: kill(2) of a process this test started, by pid.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0, "SIGSTOP {pid}");
    let start = Instant::now();
    while !all_threads_stopped(pid) {
        assert!(start.elapsed() < Duration::from_secs(10), "pid {pid} still running 10 s after SIGSTOP");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    // The state follows the last ')' of stat (a comm can hold one).
    let stopped = |stat: String| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('T'));
    tasks.flatten().all(|t| std::fs::read_to_string(t.path().join("stat")).is_ok_and(stopped))
}

/// Pins `pid` (0: the caller) to `cpu`.
pub fn pin(pid: u32, cpu: usize) -> bool {
    // SAFETY: the set is initialised before use; affinity of a process
    // this test started (or of the caller).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(pid as i32, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Forks a child that joins `procs`'s cgroup (writing "0" to it moves
/// the writer) and runs `child`, told whether it joined; it ends with
/// `_exit` of what `child` returns. `child` runs after fork in a copy of
/// this multi-threaded process: system calls only, on memory it owns.
pub fn fork_into(procs: &std::path::Path, child: impl FnOnce(bool) -> i32) -> u32 {
    use std::os::fd::AsRawFd as _;
    let file = std::fs::OpenOptions::new().write(true).open(procs).expect("cgroup.procs");
    // SAFETY: the child writes to a file opened before the fork, runs
    // `child` (system calls only) and ends with _exit.
    match unsafe { libc::fork() } {
        0 => unsafe {
            let joined = libc::write(file.as_raw_fd(), b"0\n".as_ptr().cast(), 2) == 2;
            libc::_exit(child(joined))
        },
        -1 => panic!("fork: {}", std::io::Error::last_os_error()),
        pid => pid as u32,
    }
}

/// Forks a process into `procs`'s cgroup (on `cpu`, if given) that sets a
/// POSIX timer (`CLOCK_MONOTONIC`, SIGALRM at its default action) to fire
/// after `secs` and waits: the timer's signal ends it (exit 1 if it could
/// not set it).
pub fn timed_out(procs: &std::path::Path, cpu: Option<usize>, secs: i64) -> u32 {
    fork_into(procs, |joined| {
        let pinned = cpu.is_none_or(|c| pin(0, c));
        let mut id: libc::c_int = 0;
        let when = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: secs, tv_nsec: 0 },
        };
        // SAFETY: raw system calls on memory this child owns. No sigevent:
        // SIGEV_SIGNAL with SIGALRM, the kernel's default.
        let set = unsafe {
            libc::syscall(libc::SYS_timer_create, libc::CLOCK_MONOTONIC, std::ptr::null::<u8>(), &mut id) == 0
                && libc::syscall(libc::SYS_timer_settime, id, 0, &when, std::ptr::null_mut::<libc::itimerspec>()) == 0
        };
        if !(joined && pinned && set) {
            return 1;
        }
        pause_forever()
    })
}

/// pause(2), again and again: until a signal ends the process.
pub fn pause_forever() -> ! {
    loop {
        // SAFETY: pause(2) has no arguments.
        unsafe { libc::pause() };
    }
}

/// waitpid(2) of a child this test forked: its wait status.
pub fn reap(pid: u32) -> i32 {
    let mut status = 0;
    // SAFETY: waitpid(2) of this test's own child.
    assert_eq!(unsafe { libc::waitpid(pid as i32, &mut status, 0) }, pid as i32);
    status
}
