//! The shipped rules and dashboard against the real agent, as a cluster
//! runs them: a real Prometheus scrapes the agent binary every second and
//! evaluates `deploy/prometheus/rules.yml` every second — the shipped
//! expressions, only their `for:` scaled by [`FOR_SCALE`] so that the test
//! takes a minute or two — while pods run through containerd's CRI:
//!
//! - `alerts/crashy-…` (a Deployment's pod): its container `app` exits
//!   with an error, and is restarted three times, each time a new
//!   container with a new id, as the kubelet does;
//! - `alerts/leaky-7f6d5c4b3-…` (three pods of one Deployment): each
//!   one's container `hog` OOM-killed at its limit, one after another;
//! - `alerts/once`: its container `worker` loses one child to the OOM
//!   killer and lives on;
//! - `quiet/quiet`: a container that sleeps.
//!
//! Asserted: the namespace variable lists both namespaces before any kill;
//! `SandwatchContainerCrashLooping` (for crashy's `app`) and
//! `SandwatchWorkloadOOMLooping` (for `leaky`) appear in Prometheus' own
//! `ALERTS` series as firing within their (scaled) `for:` of the event
//! that made them true, and not before; no other alert about these
//! namespaces is ever pending or firing, nor an alert about this agent or
//! its runtime (its event stream, its CRI listing, the runtime, the agent
//! itself); and every query of every dashboard panel, with its variables
//! set to this node and namespace, returns what these pods make of it
//! (the per-pod and per-workload panels exactly; the node's, which other
//! tests on this machine feed too, some data).
//!
//! One containerd is enough here: bookworm's 1.6, the one `cargo xtask
//! setup` installs, needs nothing fetched; what the agent reads of the CRI
//! (names, labels, restarts) is the same in 1.7 and 2.x, which
//! `runtime.rs` runs each of its tests on.

mod harness;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::{Duration, Instant},
};

use harness::{
    containerd::{remove_in_all_hierarchies, Containerd, Runtime, RuntimePod},
    cri::Cri,
    require_root, AgentProcess, PrometheusProcess,
};

/// The rules' `for:` in the test: 5m → 15 s, 15m → 45 s.
const FOR_SCALE: f64 = 1.0 / 20.0;
/// The agent's hold of a new series at 0: two scrapes.
const HOLD_SECS: u64 = 2;
const NODE: &str = "alerts-node";
/// The pods: this with its last digit the pod's number.
const UID: &str = "6e1f0a2b-abcd-4c3d-8e9f-0a1b2c3d4e5";
const CRASHY: &str = "crashy-5d8f7c9b4-x2k9p";
const LEAKY: [&str; 3] = ["leaky-7f6d5c4b3-qx7zt", "leaky-7f6d5c4b3-m4kpw", "leaky-7f6d5c4b3-v9hcd"];
/// Holds 64 MiB in its shell, the container's init: killed at 32 MiB.
const HOG: &str = "x=$(head -c 67108864 /dev/zero | tr '\\0' a); sleep 100";

/// The shipped rules with each `for:` scaled; nothing else differs (checked).
fn scaled_rules(dir: &Path) -> (std::path::PathBuf, BTreeMap<String, f64>) {
    let shipped = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/prometheus/rules.yml"))
        .expect("rules.yml");
    let mut fors = BTreeMap::new();
    let mut alert = String::new();
    let mut out = String::new();
    for line in shipped.lines() {
        if let Some(name) = line.trim().strip_prefix("- alert: ") {
            alert = name.to_string();
        }
        match line.trim().strip_prefix("for: ") {
            Some(d) => {
                let minutes: f64 =
                    d.strip_suffix('m').and_then(|m| m.parse().ok()).unwrap_or_else(|| panic!("for: {d}"));
                let secs = (minutes * 60.0 * FOR_SCALE).round();
                fors.insert(alert.clone(), secs);
                let indent = &line[..line.len() - line.trim_start().len()];
                out.push_str(&format!("{indent}for: {secs}s\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    let differ: Vec<(&str, &str)> =
        shipped.lines().zip(out.lines()).filter(|(a, b)| a != b && !a.trim().starts_with("for: ")).collect();
    assert!(differ.is_empty() && shipped.lines().count() == out.lines().count(), "only for: is scaled: {differ:?}");
    let path = dir.join("rules.yml");
    std::fs::write(&path, out).expect("scaled rules");
    (path, fors)
}

/// The firing alerts Prometheus has now, by name, with their labels.
fn firing(prom: &PrometheusProcess) -> Vec<(String, serde_json::Value)> {
    prom.query("ALERTS{alertstate=\"firing\"}", None)
        .into_iter()
        .map(|(labels, _)| (labels["alertname"].as_str().unwrap_or("").to_string(), labels))
        .collect()
}

/// A shipped panel query with the dashboard's variables set: this node,
/// `namespace`, the range since the test began.
fn with_variables(expr: &str, namespace: &str) -> String {
    expr.replace("$node", NODE)
        .replace("$namespace", namespace)
        .replace("$__rate_interval", "1m")
        .replace("$__range", "10m")
}

/// What a panel's query must return for these pods.
#[derive(Debug, Clone)]
enum Expect {
    /// Exactly these rows: labels that identify each (a subset of its
    /// labels), and its value.
    Rows(Vec<(Vec<(&'static str, String)>, f64)>),
    /// Nothing: none of these pods has any.
    Nothing,
    /// Some data: the node's, which other tests on this machine feed too.
    Some,
}

#[test]
fn the_shipped_rules_fire_on_a_crash_loop_and_a_workload_killed_in_pod_after_pod() {
    require_root();
    let rt = Runtime::system();
    let pods = RuntimePod::new("alerts", &format!("{UID}0"));
    let parent = |i: u32| format!("{}/kubepods/burstable/pod{UID}{i}", pods.cg.path);
    let ctrd = Containerd::start_cri(&rt, "alerts");
    let socket = ctrd.socket.display().to_string();
    let hold = HOLD_SECS.to_string();
    let agent = AgentProcess::start(&[
        "--containerd-socket",
        &socket,
        "--cri-socket",
        &socket,
        "--cri-refresh-seconds",
        "1",
        "--pod-series-hold",
        &hold,
    ]);
    let dir = std::env::temp_dir().join(format!("sandwatch-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (rules, fors) = scaled_rules(&dir);
    // Scraped as kube-prometheus-stack scrapes the shipped ServiceMonitor.
    let scrape = harness::operator_scrape_config(agent.addr, NODE);
    let prom = PrometheusProcess::start_with_rules(agent.addr.port(), &scrape, &[&rules]);
    let up = prom.wait_for("up{job=\"sandwatch\"}", Duration::from_secs(30), |v| v == 1.0);
    assert_eq!(up, Some(1.0), "Prometheus never scraped the agent: {}", prom.log());
    let rules_loaded = harness::http_get(prom.addr, "/api/v1/rules").map(|(_, b)| b).unwrap_or_default();
    assert!(rules_loaded.contains("SandwatchWorkloadOOMLooping"), "the rules are loaded: {rules_loaded}");

    let mut cri = Cri::connect(&ctrd.socket, ctrd.dir.join("pods"));
    let deployment = |app: &'static str, hash: &'static str| vec![("app", app), ("pod-template-hash", hash)];
    let crashy =
        cri.run_pod_with(CRASHY, "alerts", &format!("{UID}0"), &parent(0), &deployment("crashy", "5d8f7c9b4"), false);
    let leaky: Vec<_> = LEAKY
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let n = i as u32 + 1;
            cri.run_pod_with(name, "alerts", &format!("{UID}{n}"), &parent(n), &deployment("leaky", "7f6d5c4b3"), false)
        })
        .collect();
    let once = cri.run_pod_with("once", "alerts", &format!("{UID}4"), &parent(4), &[("run", "once")], false);
    let quiet = cri.run_pod_with("quiet", "quiet", &format!("{UID}5"), &parent(5), &[("run", "quiet")], false);
    cri.run_container(&quiet, "idle", Some(32 << 20), "exec sleep 1000");
    let started = Instant::now();

    // The namespace variable lists both namespaces before anything happens
    // in them (Grafana's label_values, as Prometheus answers it).
    let variable = format!("count by (namespace) (sandwatch_namespace_pods{{node=~\"{NODE}\"}})");
    let listed = || -> BTreeSet<String> {
        prom.query(&variable, None).into_iter().filter_map(|(l, _)| l["namespace"].as_str().map(String::from)).collect()
    };
    while !listed().is_superset(&BTreeSet::from(["alerts".to_string(), "quiet".to_string()])) {
        assert!(started.elapsed() < Duration::from_secs(30), "the namespace variable lists {:?}", listed());
        std::thread::sleep(Duration::from_millis(250));
    }

    // The crash loop: the first run and three restarts, each a new
    // container, each ending with exit 1 after a second.
    let mut exits = Vec::new();
    for attempt in 0..4 {
        let id = cri.restart_container(&crashy, "app", attempt, None, "sleep 1; exit 1");
        let start = Instant::now();
        loop {
            let status = cri.status(&id);
            if status.state == 2 {
                assert_eq!(status.exit_code, 1, "attempt {attempt}");
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "attempt {attempt} never exited");
            std::thread::sleep(Duration::from_millis(100));
        }
        exits.push((id, Instant::now()));
    }
    let ids: BTreeSet<&String> = exits.iter().map(|(id, _)| id).collect();
    assert_eq!(ids.len(), 4, "each restart is a new container");
    // The crash-loop rule holds once 3 exits are counted.
    let crash_loop_true = exits[2].1;

    // The workload: its pods' containers OOM-killed one after another.
    let mut killed_at = Vec::new();
    let mut hogs = Vec::new();
    for (pod, name) in leaky.iter().zip(LEAKY) {
        let id = cri.run_container(pod, "hog", Some(32 << 20), HOG);
        let start = Instant::now();
        loop {
            let status = cri.status(&id);
            if status.state == 2 {
                hogs.push(id);
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "{name}'s hog was never OOM-killed");
            std::thread::sleep(Duration::from_millis(100));
        }
        killed_at.push(Instant::now());
    }
    let workload_true = killed_at[2];
    // Each ended by SIGKILL; the runtime's reason is containerd's race.
    let hogs: Vec<&str> = hogs.iter().map(String::as_str).collect();
    cri.missed_oom_kills(&hogs);
    // One child of `once`'s worker, once.
    cri.run_container(&once, "worker", Some(32 << 20), "dd if=/dev/zero of=/dev/null bs=64M count=1; exec sleep 1000");
    let worker_killed = |text: &str| {
        text.lines().any(|l| {
            l.starts_with("sandwatch_pod_oom_kills_total{") && l.contains("container=\"worker\"") && l.ends_with(" 1")
        })
    };
    let start = Instant::now();
    while !worker_killed(&agent.metrics()) {
        assert!(start.elapsed() < Duration::from_secs(30), "once's child was never OOM-killed");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Each alert fires within its for: of what made it true, not before.
    let expected = [
        ("SandwatchContainerCrashLooping", crash_loop_true, ("pod", CRASHY), ("container", "app")),
        ("SandwatchWorkloadOOMLooping", workload_true, ("workload", "leaky"), ("workload_kind", "Deployment")),
    ];
    let mut fired_at: BTreeMap<&str, Duration> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while fired_at.len() < expected.len() {
        for (name, labels) in firing(&prom) {
            for (alert, since, a, b) in &expected {
                let ours = labels["namespace"] == "alerts" && labels[a.0] == a.1 && labels[b.0] == b.1;
                if name == *alert && ours && !fired_at.contains_key(alert) {
                    fired_at.insert(alert, Instant::now().saturating_duration_since(*since));
                    assert_eq!(labels["severity"], "warning", "{labels}");
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "not all fired: {fired_at:?}; firing now: {:?}\nthe agent's kill series:\n{}\nPrometheus: {:?}",
            firing(&prom),
            agent
                .metrics()
                .lines()
                .filter(|l| l.starts_with("sandwatch_pod_oom_kills_total{"))
                .collect::<Vec<_>>()
                .join("\n"),
            prom.query("increase(sandwatch_pod_oom_kills_total{namespace=\"alerts\"}[15m])", None)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    for (alert, after) in &fired_at {
        let for_ = Duration::from_secs_f64(fors[*alert]);
        // The event shows after the hold and a scrape; then for: runs.
        let slack = Duration::from_secs(HOLD_SECS + 8);
        eprintln!("{alert} fired {after:?} after it became true (for: {for_:?} scaled)");
        assert!(*after + Duration::from_secs(1) >= for_, "{alert} fired {after:?} after, before its for: {for_:?}");
        assert!(*after <= for_ + slack, "{alert} fired {after:?} after, beyond its for: {for_:?} (+{slack:?})");
    }

    // Long enough for any other tenant alert to have fired (the longest
    // scaled for: of the tenant group, after the last event).
    let longest = ["SandwatchContainerChildOOMKills", "SandwatchSandboxOOMDeath", "SandwatchContainerNearMemoryLimit"]
        .iter()
        .map(|a| fors[*a])
        .fold(0.0, f64::max);
    std::thread::sleep(Duration::from_secs_f64(longest + HOLD_SECS as f64 + 3.0));
    // Every alert that was ever pending or firing since the test began.
    let ever: Vec<serde_json::Value> =
        prom.query("max_over_time(ALERTS[10m])", None).into_iter().map(|(labels, _)| labels).collect();
    let about_ours: BTreeSet<(String, String)> = ever
        .iter()
        .filter(|l| matches!(l["namespace"].as_str(), Some("alerts" | "quiet")))
        .map(|l| {
            (l["alertname"].as_str().unwrap_or("").to_string(), l["alertstate"].as_str().unwrap_or("").to_string())
        })
        .collect();
    let only: BTreeSet<(String, String)> = ["SandwatchContainerCrashLooping", "SandwatchWorkloadOOMLooping"]
        .iter()
        .flat_map(|a| [(a.to_string(), "pending".to_string()), (a.to_string(), "firing".to_string())])
        .collect();
    // A container OOM-killed in a loop is near its limit before each kill:
    // where the CPU is loaded its growth is slow enough for the pressure
    // watch to say so, and its alert may start pending (never firing: the
    // kill ends each spell well before its `for:`).
    let near = ("SandwatchContainerNearMemoryLimit".to_string(), "pending".to_string());
    let near_is_the_hogs = ever.iter().all(|l| {
        l["alertname"] != "SandwatchContainerNearMemoryLimit"
            || (l["container"] == "hog" && l["alertstate"] == "pending")
    });
    assert!(near_is_the_hogs, "only the OOM-looping container may be near its limit: {ever:#?}");
    let about_ours: BTreeSet<(String, String)> = about_ours.into_iter().filter(|a| *a != near).collect();
    assert_eq!(about_ours, only, "the alerts about these pods: {ever:#?}");
    let crash_loops: BTreeSet<&str> = ever
        .iter()
        .filter(|l| l["alertname"] == "SandwatchContainerCrashLooping" && l["namespace"] == "alerts")
        .filter_map(|l| l["pod"].as_str())
        .collect();
    assert_eq!(crash_loops, BTreeSet::from([CRASHY]), "only crashy loops");
    let own = [
        "SandwatchRuntimeEventsDown",
        "SandwatchRuntimeNamesDown",
        "SandwatchContainerRuntimeDown",
        "SandwatchAgentDown",
    ];
    let about_us: Vec<&serde_json::Value> = ever.iter().filter(|l| own.iter().any(|a| l["alertname"] == *a)).collect();
    assert!(about_us.is_empty(), "alerts about this agent and its runtime: {about_us:#?}");
    let node_wide: BTreeSet<&str> =
        ever.iter().filter(|l| l["namespace"].is_null()).filter_map(|l| l["alertname"].as_str()).collect();
    eprintln!("node-wide alerts seen (this machine's other tests feed them too): {node_wide:?}");

    // Every panel's query, for this node and namespace, at the last scrape
    // (no extrapolation: counts are exact).
    let at = prom.scalar("max(timestamp(up{job=\"sandwatch\"}))", None).expect("a scrape");
    type Row = (Vec<(&'static str, String)>, f64);
    let row = |labels: &[(&'static str, &str)], v: f64| -> Row {
        (labels.iter().map(|(k, v)| (*k, v.to_string())).collect(), v)
    };
    let hog_kill = |pod: &str| {
        row(
            &[
                ("pod", pod),
                ("container", "hog"),
                ("victim_role", "container_init"),
                ("limit", "container"),
                ("cause", "anon"),
            ],
            1.0,
        )
    };
    let child_kill = row(
        &[
            ("pod", "once"),
            ("container", "worker"),
            ("victim_role", "container_child"),
            ("limit", "container"),
            ("cause", "anon"),
        ],
        1.0,
    );
    let kills: Vec<_> = LEAKY.iter().map(|p| hog_kill(p)).chain([child_kill.clone()]).collect();
    let none_warned: Vec<_> = kills.iter().map(|(l, _)| (l.clone(), 0.0)).collect();
    let release = rt.release().to_string();
    let expect: Vec<(&str, &str, Expect)> = vec![
        ("OOM kills: pod, limit, what filled it, warning", "A", Expect::Rows(kills.clone())),
        ("OOM kills: pod, limit, what filled it, warning", "B", Expect::Rows(none_warned)),
        ("OOM kills: pod, limit, what filled it, warning", "C", Expect::Nothing),
        ("OOM kills on the node", "A", Expect::Some),
        ("OOM kills warned of", "A", Expect::Some),
        ("OOM kills by victim role", "A", Expect::Some),
        (
            "Top pods by OOM kills",
            "A",
            Expect::Rows(LEAKY.iter().map(|p| row(&[("pod", p)], 1.0)).chain([row(&[("pod", "once")], 1.0)]).collect()),
        ),
        (
            "Top containers by failed exits",
            "A",
            Expect::Rows(vec![row(&[("pod", CRASHY), ("container", "app"), ("reason", "error")], 4.0)]),
        ),
        ("Container exits by reason", "A", Expect::Some),
        (
            "Top workloads by OOM kills",
            "A",
            Expect::Rows(vec![
                row(&[("workload", "leaky"), ("workload_kind", "Deployment")], 3.0),
                row(&[("workload", "once"), ("workload_kind", "Pod")], 1.0),
            ]),
        ),
        (
            "Top workloads by failed exits",
            "A",
            Expect::Rows(vec![
                row(&[("workload", "crashy"), ("workload_kind", "Deployment"), ("reason", "error")], 4.0),
                row(&[("workload", "leaky"), ("workload_kind", "Deployment"), ("reason", "oom_killed")], 3.0),
            ]),
        ),
        (
            "Top containers by what filled the memory",
            "A",
            Expect::Rows(
                LEAKY
                    .iter()
                    .map(|p| row(&[("pod", p), ("container", "hog"), ("limit", "container"), ("cause", "anon")], 1.0))
                    .chain([row(
                        &[("pod", "once"), ("container", "worker"), ("limit", "container"), ("cause", "anon")],
                        1.0,
                    )])
                    .collect(),
            ),
        ),
        ("Containers under memory pressure", "A", Expect::Some),
        ("Containers under memory pressure now", "A", Expect::Nothing),
        ("Containers under memory pressure now", "B", Expect::Nothing),
        ("Containers under memory pressure now", "C", Expect::Nothing),
        ("Warnings and what came of them", "A", Expect::Some),
        ("Warnings and what came of them", "B", Expect::Some),
        ("Warning lead before the kill", "A", Expect::Some),
        ("Warning lead before the kill", "B", Expect::Some),
        ("Memory pressure watch reads", "A", Expect::Some),
        ("OOM events by whose limit fired", "A", Expect::Some),
        ("Pods OOM-killed by the node's memory", "A", Expect::Nothing),
        ("OOM events by what filled the memory", "A", Expect::Some),
        ("OOM events by scope", "A", Expect::Some),
        ("Victims per OOM event", "A", Expect::Some),
        ("OOM storm per node", "A", Expect::Some),
        ("OOM kills in the churn window", "A", Expect::Some),
        ("Containers in group-kill mode", "A", Expect::Some),
        ("Sandbox deaths by cause", "A", Expect::Some),
        ("Late exit events", "A", Expect::Some),
        ("Runtime exit lag", "A", Expect::Some),
        ("Runtime exit lag", "B", Expect::Some),
        ("Runtime up and agent connections", "A", Expect::Some),
        ("Runtime up and agent connections", "B", Expect::Rows(vec![(vec![], 1.0)])),
        ("Runtime up and agent connections", "C", Expect::Rows(vec![(vec![], 1.0)])),
        ("Runtime crashes and restarts", "A", Expect::Some),
        ("Runtime crashes and restarts", "B", Expect::Some),
        ("OOM kills: kernel vs runtime", "A", Expect::Some),
        ("OOM kills: kernel vs runtime", "B", Expect::Some),
        (
            "Runtime versions and known crashes",
            "A",
            Expect::Rows(vec![(
                vec![("node", NODE.to_string()), ("runtime", "containerd".into()), ("version", release)],
                1.0,
            )]),
        ),
        (
            "Runtime versions and known crashes",
            "B",
            Expect::Rows(vec![(vec![("runtime", "containerd".into()), ("issue", "containerd#12038".into())], 0.0)]),
        ),
        ("Blind spots", "A", Expect::Some),
        ("Blind spots", "B", Expect::Some),
        ("Blind spots", "C", Expect::Some),
        ("Blind spots", "D", Expect::Some),
        ("Dropped events by stage", "A", Expect::Some),
        ("Events per second", "A", Expect::Some),
        ("Events per second", "B", Expect::Some),
        ("Exit handling delay", "A", Expect::Some),
        ("Exit handling delay", "B", Expect::Some),
        ("Decode errors", "A", Expect::Some),
        ("Tracked objects", "A", Expect::Some),
        ("Tracked objects", "B", Expect::Some),
        ("Tracked objects", "C", Expect::Some),
        ("Agents up", "A", Expect::Rows(vec![(vec![], 1.0)])),
        ("Programs attached", "A", Expect::Some),
    ];
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../dashboards/sandwatch.json"))
            .expect("dashboard"),
    )
    .expect("dashboard JSON");
    let mut checked = 0;
    for panel in dash["panels"].as_array().into_iter().flatten().filter(|p| p["type"] != "row") {
        let title = panel["title"].as_str().unwrap_or("");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let (ref_id, expr) = (target["refId"].as_str().unwrap_or(""), target["expr"].as_str().unwrap_or(""));
            let want = expect
                .iter()
                .find(|(t, r, _)| *t == title && *r == ref_id)
                .map(|(_, _, e)| e.clone())
                .unwrap_or_else(|| panic!("no expectation for panel {title:?} query {ref_id}: {expr}"));
            let got = prom.query(&with_variables(expr, "alerts"), Some(at));
            match want {
                Expect::Some => assert!(!got.is_empty(), "{title} {ref_id} returns no data: {expr}"),
                Expect::Nothing => assert!(got.is_empty(), "{title} {ref_id} returns {got:?} for these pods: {expr}"),
                Expect::Rows(rows) => {
                    assert_eq!(got.len(), rows.len(), "{title} {ref_id}: {got:#?}\n{expr}");
                    for (labels, value) in rows {
                        let found = got.iter().find(|(l, _)| labels.iter().all(|(k, v)| l[*k] == v.as_str()));
                        let found = found.unwrap_or_else(|| panic!("{title} {ref_id}: no row {labels:?} in {got:#?}"));
                        assert!((found.1 - value).abs() < 1e-9, "{title} {ref_id} {labels:?}: {} not {value}", found.1);
                    }
                }
            }
            // Another namespace's pods are not in this one's panels.
            if expr.contains("$namespace") {
                let quiet = prom.query(&with_variables(expr, "quiet"), Some(at));
                assert!(
                    quiet.iter().all(|(_, v)| *v == 0.0) || matches!(title, "Containers under memory pressure now"),
                    "{title} {ref_id} for the quiet namespace: {quiet:?}"
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, expect.len(), "every expectation is a panel's query");

    for pod in [crashy, once, quiet].iter().chain(&leaky) {
        cri.remove_pod(&pod.id);
    }
    drop(cri);
    drop(prom);
    drop(ctrd);
    drop(agent);
    remove_in_all_hierarchies(&format!("{}/kubepods", pods.cg.path));
    let _ = std::fs::remove_dir_all(dir);
}
