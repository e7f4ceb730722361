//! The `sandwatch` binary as a user runs it: serves /metrics, counts real
//! exits and OOM kills, stops cleanly on SIGTERM, and refuses bad input and
//! missing privileges with one line.

mod harness;

use std::{collections::BTreeSet, io::Write as _, os::unix::fs::PermissionsExt as _, process::Command, time::Duration};

use harness::{cid, metric, node_pods, require_root, sh, AgentProcess, KubePod};

const UID: &str = "0c9e8d7f-6a5b-4c3d-9e2f-1a0b9c8d7e6f";
/// A pod no test watches: the node's other tenant.
const OTHER_UID: &str = "7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c5d";

/// The tests that make pods, one at a time: each compares what its agent
/// counts node-wide (pods, processes, OOM kills) with what the node had
/// before it made its own, which the others' pods would change meanwhile.
static NODE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn node_to_this_test() -> std::sync::MutexGuard<'static, ()> {
    NODE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn agent_counts_exits_and_oom_kills_then_detaches_on_sigterm() {
    require_root();
    let _node = node_to_this_test();
    // A node runs other pods: one the test does not watch, with a live
    // process in each container, runs beside it throughout.
    let mut other = KubePod::build("other", OTHER_UID, false, 3);
    for i in 0..3 {
        other.start_init(i, "exec sleep 1000");
    }
    let node = node_pods();
    assert!(node.sandboxes >= 1.0 && node.processes >= 3.0, "the other pod is there: {node:?}");
    let agent = AgentProcess::start(&[]);
    // Six everywhere (exit, OOM, the three cgroup hooks, signals); fork
    // and exec where the task table is kept (v1); the victim's own program
    // where the OOM tracepoint passes its task, the OOM killer's entry
    // where the kernel takes a trampoline.
    // Its own, by id: the other tests' agents load theirs meanwhile.
    let programs = harness::programs_held_by(agent.pid());
    let attached = programs.len();
    assert!((6..=10).contains(&attached), "{attached} programs attached");
    let m0 = agent.metrics();
    // Host processes' exits are counted in the kernel; pods' are streamed.
    let host_exits = |m: &str| metric(m, "sandwatch_task_exits_total{outcome=\"host\",role=\"host\"}").unwrap_or(0.0);
    let host0 = host_exits(&m0);
    let exits0 = metric(&m0, "sandwatch_events_total{kind=\"exit\"}").expect("exit counter");
    let ooms0 = metric(&m0, "sandwatch_events_total{kind=\"oom_kill\"}").expect("oom counter");
    assert_eq!(metric(&m0, "sandwatch_programs_attached"), Some(attached as f64), "as the kernel has them");

    for code in 0..20 {
        sh(&format!("exit {code}")).wait().expect("wait");
    }
    // Two OOM kills of a workload container's children in a kubelet-shaped
    // pod (its first container is the sandbox, left idle).
    let mut pod = KubePod::build("agent", UID, false, 2);
    pod.start_init(
        1,
        "dd if=/dev/zero of=/dev/null bs=256M count=1; dd if=/dev/zero of=/dev/null bs=256M count=1; exec sleep 1000",
    );
    pod.trigger(1);

    let pod_series = format!(
        "sandwatch_pod_oom_kills_total{{cause=\"anon\",container=\"\",limit=\"container\",namespace=\"\",pod=\"\",pod_uid=\"{UID}\",victim_role=\"container_child\",warned=\"false\",workload=\"\",workload_kind=\"\"}}"
    );
    let mut m1 = String::new();
    for _ in 0..100 {
        m1 = agent.metrics();
        let ooms = metric(&m1, "sandwatch_events_total{kind=\"oom_kill\"}").unwrap_or(0.0);
        let exits = metric(&m1, "sandwatch_events_total{kind=\"exit\"}").unwrap_or(0.0);
        // Per-pod series count OOM events, closed within a second; kernel
        // counts reach the host outcome at the next tick.
        if ooms - ooms0 >= 2.0
            && exits - exits0 >= 2.0
            && host_exits(&m1) - host0 >= 20.0
            && metric(&m1, &pod_series) >= Some(2.0)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let ooms = metric(&m1, "sandwatch_events_total{kind=\"oom_kill\"}").unwrap_or(0.0) - ooms0;
    let exits = metric(&m1, "sandwatch_events_total{kind=\"exit\"}").unwrap_or(0.0) - exits0;
    // Only this test makes OOM kills here; other exits on the machine may add up.
    assert_eq!(ooms, 2.0, "two OOM kills counted:\n{m1}");
    assert!(exits >= 2.0, "the 2 OOM-killed hogs streamed, got {exits}");
    let host = host_exits(&m1) - host0;
    assert!(host >= 20.0, "the 20 host exits counted in the kernel and dispatched as host, got {host}");
    assert!(metric(&m1, "sandwatch_kernel_exits_unstreamed_total{reason=\"host\"}").is_some_and(|v| v >= 20.0), "{m1}");
    assert_eq!(metric(&m1, &pod_series), Some(2.0), "{m1}");
    assert_eq!(metric(&m1, "sandwatch_oom_events_total{constraint=\"memcg\",limit=\"container\",qos_class=\"burstable\",scope=\"process\"}"), Some(2.0), "{m1}");
    assert_eq!(
        metric(&m1, "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_child\"}"),
        Some(2.0)
    );
    assert_eq!(metric(&m1, "sandwatch_tracked_sandboxes"), Some(node.sandboxes + 1.0), "{node:?}: {m1}");
    assert_eq!(metric(&m1, "sandwatch_tracked_processes"), Some(node.processes + 1.0), "{node:?}: {m1}");
    assert_eq!(metric(&m1, "sandwatch_events_dropped_total{stage=\"kernel\"}"), Some(0.0));
    assert_eq!(metric(&m1, "sandwatch_events_dropped_total{stage=\"channel\"}"), Some(0.0));
    assert_eq!(metric(&m1, "sandwatch_events_dropped_total{stage=\"decode\"}"), Some(0.0));

    // The exposition of a real scrape, after real exits and OOM kills,
    // passes Prometheus's own linter.
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus, installed by cargo xtask setup)");
    promtool.stdin.take().expect("stdin").write_all(m1.as_bytes()).expect("feed promtool");
    let out = promtool.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The operators' metric reference (docs/operating.md) is exactly what
    // /metrics serves.
    let served: BTreeSet<String> = m1
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operating.md")).expect("docs");
    let readme = doc.split("\n## Metrics\n").nth(1).and_then(|t| t.split("\n## ").next()).expect("its Metrics section");
    // Rows that say their metric "appears once" something happened (the
    // runtime said its version) may be missing from an agent without it.
    let rows: Vec<(String, bool)> = readme
        .lines()
        .filter_map(|l| Some((l.strip_prefix("| `sandwatch_")?, l.contains("appears once"))))
        .filter_map(|(l, later)| Some((format!("sandwatch_{}", l.split('`').next()?), later)))
        .collect();
    let documented: BTreeSet<String> = rows.iter().map(|(n, _)| n.clone()).collect();
    let always: BTreeSet<String> = rows.iter().filter(|(_, later)| !later).map(|(n, _)| n.clone()).collect();
    assert!(
        served.is_subset(&documented),
        "the metric reference lacks {:?}",
        served.difference(&documented).collect::<Vec<_>>()
    );
    assert!(
        always.is_subset(&served),
        "the metric reference documents what /metrics lacks: {:?}",
        always.difference(&served).collect::<Vec<_>>()
    );

    let (status, log) = agent.terminate(Duration::from_secs(10));
    assert!(status.success(), "exit 0 after SIGTERM, got {status}: {log}");
    assert!(log.contains("OOM kill: victim pid"), "OOM kills are logged: {log}");
    drop(pod);
    drop(other);
    assert_eq!(harness::wait_unloaded(&programs), Vec::<u32>::new(), "programs detached after exit");
}

#[test]
fn invalid_flag_is_one_line_and_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_sandwatch"))
        .args(["--ring-buffer-bytes", "5000"])
        .output()
        .expect("run sandwatch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.contains("power of two"), "{stderr}");
}

#[test]
fn unprivileged_run_fails_with_one_line() {
    require_root();
    // A copy nobody can execute, wherever the checkout lives.
    let dir = std::env::temp_dir().join(format!("sandwatch-unpriv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let bin = dir.join("sandwatch");
    std::fs::copy(env!("CARGO_BIN_EXE_sandwatch"), &bin).expect("copy binary");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod bin");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(&bin)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .expect("run setpriv (util-linux)");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.contains("needs root"), "{stderr}");
}

#[test]
fn invalid_environment_values_are_one_line_and_exit_2() {
    for (var, value, needle) in [
        ("SANDWATCH_LISTEN", "not-an-address", "--listen"),
        ("SANDWATCH_RING_BUFFER_BYTES", "3000", "power of two"),
        ("SANDWATCH_DRAIN_INTERVAL_MS", "0", "--drain-interval-ms"),
        ("SANDWATCH_CHANNEL_CAPACITY", "lots", "--channel-capacity"),
        ("SANDWATCH_TASK_TABLE_ENTRIES", "5", "--task-table-entries"),
        ("SANDWATCH_MAX_POD_SERIES", "0", "--max-pod-series"),
        ("SANDWATCH_OOM_WINDOW_SECONDS", "0", "--oom-window-seconds"),
        ("SANDWATCH_OOM_STORM_THRESHOLD", "0", "--oom-storm-threshold"),
        ("SANDWATCH_OOM_STORM_CLEAR", "20", "must be below --oom-storm-threshold"),
        ("SANDWATCH_LOG_LEVEL", "loud", "--log-level"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_sandwatch")).env(var, value).output().expect("run sandwatch");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{var}: one line: {stderr:?}");
        assert!(stderr.contains(needle), "{var}={value}: {stderr:?} lacks {needle:?}");
    }
}

/// Agents in containers on cgroup v2 live in a private cgroup namespace,
/// where /proc/<pid>/cgroup paths are relative to it. Started in one, the
/// agent must still find a pod that was running before it, with its init,
/// and attribute the init's OOM kill.
#[test]
fn agent_in_a_private_cgroup_namespace_rediscovers_running_pods() {
    require_root();
    let _node = node_to_this_test();
    const NS_UID: &str = "4b3a2c1d-0e9f-4a8b-9c7d-6e5f4a3b2c1d";
    let node = node_pods();
    let mut pod = KubePod::build("cgns", NS_UID, false, 2);
    pod.start_init(1, "exec dd if=/dev/zero of=/dev/null bs=256M count=1");
    let agent = AgentProcess::start_wrapped(&["unshare", "--cgroup", "--"], &[]);
    let m0 = agent.metrics();
    assert_eq!(
        metric(&m0, "sandwatch_tracked_sandboxes"),
        Some(node.sandboxes + 1.0),
        "pod found at start-up ({node:?} before): {}",
        agent.log_text()
    );
    assert_eq!(
        metric(&m0, "sandwatch_tracked_processes"),
        Some(node.processes + 1.0),
        "its init found at start-up: {}",
        agent.log_text()
    );

    pod.trigger(1);
    let series = "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_init\"}";
    let mut seen = None;
    for _ in 0..100 {
        seen = metric(&agent.metrics(), series);
        if seen == Some(1.0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(seen, Some(1.0), "the init's OOM kill is attributed: {}", agent.metrics());
    let (status, log) = agent.terminate(Duration::from_secs(10));
    assert!(status.success(), "{log}");
    assert!(!log.contains("namespace root /)"), "the agent noticed its cgroup namespace: {log}");
    drop(pod);
}

/// The DaemonSet grants CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE. The
/// last is only for kernels before 5.11 (this one charges BPF memory to the
/// cgroup, and root here cannot even hold it), so with just the first two
/// the agent must run and count; without CAP_PERFMON it must refuse with
/// its one line.
#[test]
fn least_privilege_bpf_and_perfmon_suffice_and_each_is_needed() {
    require_root();
    let only = |caps: &str| -> Vec<String> {
        ["setpriv", "--bounding-set", &format!("-all,{caps}"), "--inh-caps", &format!("-all,{caps}"), "--"]
            .map(str::to_string)
            .to_vec()
    };
    let wrapper = only("+bpf,+perfmon");
    let refs: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let agent = AgentProcess::start_wrapped(&refs, &[]);
    // Loaded and attached with CAP_BPF and CAP_PERFMON; ready, it holds
    // nothing more in any thread: map operations through the descriptors
    // it holds need no capability on this kernel (6.5 and later).
    let held = thread_capabilities(agent.pid());
    assert!(held.len() >= 2, "the agent's thread and the HTTP server's: {held:?}");
    assert!(held.iter().all(|(_, eff, prm)| (*eff, *prm) == (0, 0)), "no capability left: {held:?}");
    assert!(agent.log_text().contains("capabilities now: none"), "{}", agent.log_text());
    // Host exits: counted in the kernel, dispatched as the host's.
    let exits = |m: &str| metric(m, "sandwatch_task_exits_total{outcome=\"host\",role=\"host\"}").unwrap_or(0.0);
    let before = exits(&agent.metrics());
    for _ in 0..5 {
        sh("exit 0").wait().expect("wait");
    }
    let mut after = before;
    for _ in 0..100 {
        after = exits(&agent.metrics());
        if after >= before + 5.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(after >= before + 5.0, "exits counted with least privilege: {before} -> {after}");
    let attached = metric(&agent.metrics(), "sandwatch_programs_attached").unwrap_or(0.0);
    assert!((6.0..=10.0).contains(&attached), "{attached} programs attached with CAP_BPF and CAP_PERFMON");
    let (status, log) = agent.terminate(Duration::from_secs(10));
    assert!(status.success(), "{log}");

    for caps in ["+bpf", "+perfmon"] {
        let out = Command::new("setpriv")
            .args(only(caps))
            .arg(env!("CARGO_BIN_EXE_sandwatch"))
            .args(["--listen", "127.0.0.1:0"])
            .output()
            .expect("setpriv");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "with only {caps}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
        assert!(stderr.contains("CAP_BPF and CAP_PERFMON"), "{stderr}");
    }
}

/// (thread, CapEff, CapPrm) of every thread of `pid`.
fn thread_capabilities(pid: u32) -> Vec<(String, u64, u64)> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks").flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .unwrap_or(u64::MAX)
        };
        let name = status.lines().find_map(|l| l.strip_prefix("Name:")).unwrap_or("").trim().to_string();
        found.push((name, field("CapEff:"), field("CapPrm:")));
    }
    found
}

/// Guards: the agent keeping every capability (root's, all of them) for
/// its whole life. Ready, no thread holds any, and what it does from then
/// on still works: a pod made after start is tracked from its mkdir (a map
/// update), its OOM kill attributed, the kernel's counters read at scrape
/// (map lookups). (Before: CapEff and CapPrm were root's full sets.)
#[test]
fn capabilities_are_dropped_once_the_programs_are_attached() {
    require_root();
    let _node = node_to_this_test();
    let agent = AgentProcess::start(&["--containerd-socket", "", "--cri-socket", ""]);
    let held = thread_capabilities(agent.pid());
    assert!(held.iter().all(|(_, eff, prm)| (*eff, *prm) == (0, 0)), "no capability left: {held:?}");
    let before = agent.metrics();
    let node = node_pods();
    let mut pod = KubePod::build("caps", UID, false, 2);
    pod.start_init(0, "exec sleep 1000");
    pod.start_init(1, "exec dd if=/dev/zero of=/dev/null bs=256M count=1");
    pod.trigger(1);
    let kills = "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_init\"}";
    let start = std::time::Instant::now();
    while metric(&agent.metrics(), kills) != Some(1.0) {
        assert!(start.elapsed() < Duration::from_secs(20), "the OOM kill never came: {}", agent.metrics());
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = agent.metrics();
    let produced = |m: &str| metric(m, "sandwatch_kernel_events_total{kind=\"oom_kill\"}").unwrap_or(0.0);
    assert!(produced(&after) > produced(&before), "the kernel's counters are read: {after}");
    assert_eq!(metric(&after, "sandwatch_tracked_containers"), Some(node.containers + 2.0), "{node:?}: {after}");
    drop(pod);
}

/// Guards: clients that open connections and never finish a request
/// holding every one of them. At `--max-connections 16`, 60 connections
/// each sending half a request: /healthz answers every time with a 1 s
/// timeout, as the kubelet probes it (the half-sent ones idle the longest
/// are closed to make room, counted as evicted), and every half-sent one
/// left is closed by the 10 s header timeout. (Before: nothing capped or
/// timed them; under a descriptor limit the probe failed.)
#[test]
fn half_sent_requests_cannot_stall_the_health_probe() {
    use std::io::Read as _;
    require_root();
    let agent = AgentProcess::start(&["--max-connections", "16", "--containerd-socket", "", "--cri-socket", ""]);
    let mut held: Vec<std::net::TcpStream> = (0..60)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(agent.addr).expect("connect");
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: slow\r\n").expect("half a request");
            s
        })
        .collect();
    for _ in 0..5 {
        let probe = harness::http_get_timeout(agent.addr, "/healthz", Duration::from_secs(1));
        assert_eq!(probe.map(|(s, _)| s), Some(200), "the probe answers");
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = agent.metrics();
    let closed = |text: &str, why: &str| {
        metric(text, &format!("sandwatch_http_connections_closed_total{{listener=\"metrics\",reason=\"{why}\"}}"))
            .unwrap_or(0.0)
    };
    assert!(closed(&text, "evicted") >= 40.0, "idle half-sent connections made room: {text}");
    assert!(metric(&text, "sandwatch_http_connections{listener=\"metrics\"}").is_some_and(|n| n <= 16.0), "{text}");
    std::thread::sleep(Duration::from_secs(11));
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
        let mut buf = [0u8; 256];
        let end = s.read(&mut buf);
        assert!(matches!(end, Ok(0)) || end.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset), "closed");
    }
    let text = agent.metrics();
    assert!(closed(&text, "header_timeout") >= 1.0, "the rest timed out: {text}");
}

const JSON_UID: &str = "4b3a2c1d-0000-4a8b-9c7d-6e5f4a3b2c1d";

/// `--log-format json`: every line the agent writes is one JSON object
/// with time, level, target and message; an OOM kill's line carries the
/// fields the metrics name (pod_uid, container_id, victim_role, …).
#[test]
fn json_logs_are_one_object_per_line_with_the_events_fields() {
    require_root();
    let _node = node_to_this_test();
    let mut pod = KubePod::build("json", JSON_UID, false, 2);
    pod.start_init(1, "dd if=/dev/zero of=/dev/null bs=256M count=1; exec sleep 1000");
    let agent = AgentProcess::start(&["--log-format", "json"]);
    pod.trigger(1);
    let mut lines: Vec<serde_json::Value> = Vec::new();
    for _ in 0..100 {
        let text = agent.log_text();
        lines = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON object ({e}): {l}")))
            .collect();
        if lines.iter().any(|l| l["event"] == "oom_kill") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for l in &lines {
        for key in ["timestamp", "level", "target", "message"] {
            assert!(l.get(key).is_some(), "{key} missing: {l}");
        }
    }
    assert!(lines.iter().any(|l| l["message"].as_str().is_some_and(|m| m.starts_with("sandwatch ready"))), "{lines:?}");
    let oom = lines.iter().find(|l| l["event"] == "oom_kill").unwrap_or_else(|| panic!("no oom_kill line: {lines:?}"));
    assert_eq!(oom["pod_uid"], JSON_UID, "{oom}");
    assert_eq!(oom["container_id"], cid(2), "{oom}");
    assert_eq!(oom["victim_role"], "container_child", "{oom}");
    assert_eq!(oom["comm"], "dd", "{oom}");
    assert_eq!(oom["level"], "INFO", "{oom}");
    assert_eq!(oom["qos_class"], "burstable", "{oom}");
    assert_eq!(oom["limit_bytes"], 32 << 20, "{oom}");
    // The event record of the same kill carries the same fields, named alike.
    let (status, body) = agent.events_get("/events").expect("GET /events");
    assert_eq!(status, 200);
    let record: serde_json::Value = body
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["kind"] == "oom_kill")
        .unwrap_or_else(|| panic!("no oom_kill record: {body}"));
    for key in
        ["pod_uid", "container_id", "victim_role", "qos_class", "pid", "comm", "rss_bytes", "limit_bytes", "outcome"]
    {
        assert!(!record[key].is_null(), "record lacks {key}: {record}");
        assert_eq!(record[key], oom[key], "{key}: record {record} vs log {oom}");
    }
    let (status, log) = agent.terminate(Duration::from_secs(10));
    assert!(status.success(), "{log}");
    // Shutdown lines too, aya-log's and the agent's alike.
    for l in log.lines() {
        assert!(serde_json::from_str::<serde_json::Value>(l).is_ok(), "not JSON: {l}");
    }
    drop(pod);
}

/// In a container the agent uses the node's tracefs (the DaemonSet mounts
/// it) and cannot mount one itself: a node without tracefs mounted gets one
/// line that says what to do. Made here with a private mount namespace
/// whose /sys/kernel/tracing is an empty read-only directory, and no
/// CAP_SYS_ADMIN.
#[test]
fn no_tracefs_on_the_node_is_one_line_saying_how_to_mount_it() {
    require_root();
    let script = format!(
        "mount -t tmpfs none /sys/kernel/tracing && mount -o remount,ro /sys/kernel/tracing && \
         exec setpriv --bounding-set -sys_admin --inh-caps -all -- {} --listen 127.0.0.1:0",
        env!("CARGO_BIN_EXE_sandwatch")
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("unshare (util-linux)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.contains("tracefs is not mounted at /sys/kernel/tracing"), "{stderr}");
    assert!(stderr.contains("mount -t tracefs nodev /sys/kernel/tracing"), "{stderr}");
    assert_eq!(stderr.matches("Operation not permitted").count(), 1, "the cause once: {stderr}");
}
