//! The DaemonSet's own pod, run as the kubelet runs it: the image that
//! `cargo xtask image` built, imported into a real containerd (2.1 and
//! 1.7), and `deploy/kubernetes/daemonset.yaml`'s pod template turned into
//! CRI calls by a kubelet stand-in (`harness::kubelet`): host PID
//! namespace, its own network namespace, capabilities, read-only root,
//! no_new_privs, seccomp, every hostPath volume (the test's containerd
//! socket where the manifest mounts /run/containerd), env, args, limits,
//! probes, the grace period. Then what a user would check in their first
//! hour: ready in time; OOM kills in other pods counted with their names
//! from inside the container; memory under the limit through an exit
//! storm; SIGTERM ends it cleanly with its programs detached.

mod harness;

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{atomic::AtomicBool, Arc},
    time::{Duration, Instant},
};

use harness::{
    containerd::{remove_in_all_hierarchies, Containerd, Runtime},
    cri::Cri,
    kubelet::{daemonset_template, plan, run_prober, Kubelet, NodeContext, PodNetwork},
    metric, require_root, TestCgroup,
};

const POD_UID: &str = "7a1b2c3d-0000-4e5f-8a9b-0c1d2e3f4a5b";
const NODE: &str = "sandwatch-test-node";

macro_rules! on_each_containerd {
    ($($module:ident => $runtime:expr),* $(,)?) => {$(
        mod $module {
            #[test]
            fn the_daemonsets_pod_runs_as_the_kubelet_runs_it() {
                super::the_daemonsets_pod_runs_as_the_kubelet_runs_it(&$runtime)
            }
        }
    )*};
}

on_each_containerd! {
    containerd_2_sid => crate::Runtime::suite("sid"),
    containerd_1_7_trixie => crate::Runtime::suite("trixie"),
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// tracefs mounted on the host, as on a node (systemd mounts it at boot;
/// this machine does not): the DaemonSet mounts the host's.
fn ensure_host_tracefs() {
    if !Path::new("/sys/kernel/tracing/events").exists() {
        let status = std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status()
            .expect("mount");
        assert!(status.success(), "cannot mount tracefs on the host");
    }
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The memory cgroup's peak usage (what its limit is held against).
fn cgroup_peak(cg: &TestCgroup, path: &str) -> u64 {
    let dir = cg.layout.dir(path);
    ["memory.max_usage_in_bytes", "memory.peak"]
        .iter()
        .find_map(|f| std::fs::read_to_string(dir.join(f)).ok()?.trim().parse().ok())
        .unwrap_or(0)
}

fn the_daemonsets_pod_runs_as_the_kubelet_runs_it(rt: &Runtime) {
    require_root();
    ensure_host_tracefs();
    let archive = harness::image_archive();
    let ctrd = Containerd::start_cri_with_pod_network(rt, "daemonset");
    ctrd.import_archive(&archive);

    // The kubelet's pod cgroup (cgroupfs driver, Burstable QoS: requests
    // below limits), inside the test's own cgroup, with the pod's memory
    // limit: the sum of its containers'.
    let mut cg = TestCgroup::create("daemonset");
    let pod_cgroup = cg.child(&format!("kubepods/burstable/pod{POD_UID}"));
    let (template, namespace) = daemonset_template(&repo("deploy/kubernetes/daemonset.yaml"));
    let pod_dir = std::env::temp_dir().join(format!("sandwatch-kubelet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&pod_dir);
    std::fs::create_dir_all(&pod_dir).expect("pod dir");
    let node = NodeContext {
        node_name: NODE.into(),
        pod_cgroup: pod_cgroup.clone(),
        pod_uid: POD_UID.into(),
        pod_name: "sandwatch-t3st1".into(),
        pod_dir: pod_dir.clone(),
        host_paths: HashMap::from([
            ("/run/containerd".to_string(), ctrd.dir.clone()),
            ("/run/sandwatch".to_string(), pod_dir.join("run-sandwatch")),
        ]),
    };
    let plan = plan(&template, &namespace, &node);
    for note in &plan.notes {
        eprintln!("note ({}): {note}", rt.version);
    }
    cg.set_memory_limit(&pod_cgroup, plan.memory_limit as u64);
    assert_eq!(
        plan.image,
        format!("sandwatch:{}", env!("CARGO_PKG_VERSION")),
        "the manifest runs this version's image"
    );
    assert!(!plan.host_network, "the pod has its own network (Prometheus scrapes the pod IP)");
    let readiness = plan.readiness.clone().expect("a readiness probe");
    let liveness = plan.liveness.clone().expect("a liveness probe");

    let mut kubelet = Kubelet::connect(&ctrd.socket);
    assert!(kubelet.image_present(&plan.image), "{} not on the node after the import", plan.image);
    let pod = kubelet.run(&plan);
    let log_file = pod_dir.join("logs").join(&plan.container.metadata.as_ref().expect("metadata").name).join("0.log");
    let log = || std::fs::read_to_string(&log_file).unwrap_or_default();
    assert_eq!(pod.ip, "10.88.0.2", "the pod IP from the CNI result");
    let netns = PodNetwork::of(pod.pid).keep();
    let agent_addr: SocketAddr = format!("{}:{}", pod.ip, readiness.port).parse().expect("address");

    // The kubelet's probes, at the manifest's periods.
    let stop = Arc::new(AtomicBool::new(false));
    let ready_prober =
        run_prober(PodNetwork::of(pod.pid).keep(), pod.ip.clone(), readiness.clone(), pod.started, stop.clone());
    let live_prober =
        run_prober(PodNetwork::of(pod.pid).keep(), pod.ip.clone(), liveness.clone(), pod.started, stop.clone());
    // How soon it is ready, looked at closely (the kubelet sees it at its
    // next readiness probe).
    let ready_in = loop {
        if matches!(PodNetwork::get(&netns, agent_addr, &readiness.path, Duration::from_secs(1)), Some((200, _))) {
            break pod.started.elapsed();
        }
        assert!(pod.started.elapsed() < Duration::from_secs(20), "not ready after 20 s; its log:\n{}", log());
        let (state, code, reason) = kubelet.status(&pod.container_id);
        assert_eq!(state, 1, "the agent's container is not running (exit {code}, {reason}); its log:\n{}", log());
        std::thread::sleep(Duration::from_millis(50));
    };
    let scrape =
        || PodNetwork::get(&netns, agent_addr, "/metrics", Duration::from_secs(5)).map(|(_, b)| b).unwrap_or_default();
    let wait_for = |what: &str, ok: &dyn Fn(&str) -> bool| -> String {
        let start = Instant::now();
        loop {
            let text = scrape();
            if ok(&text) {
                return text;
            }
            // Beyond the 30 s a new series is held at 0.
            assert!(start.elapsed() < Duration::from_secs(70), "{what}: not seen\n{}\nits log:\n{}", text, log());
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    // Granted BPF and PERFMON to load; ready, it holds nothing.
    let status = std::fs::read_to_string(format!("/proc/{}/status", pod.pid)).expect("agent's status");
    let cap_eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(str::trim);
    assert_eq!(cap_eff, Some("0000000000000000"), "capabilities dropped after start; its log:\n{}", log());
    // It reaches the runtime through the mounted socket.
    wait_for("the CRI and event stream up", &|t| {
        metric(t, "sandwatch_runtime_metadata_up") == Some(1.0) && metric(t, "sandwatch_runtime_events_up") == Some(1.0)
    });

    // Other pods on the node: one container OOM-killed as it starts, one
    // that loses a child to the OOM killer and lives on.
    let workloads = TestCgroup::create("daemonset-workloads");
    let mut cri = Cri::connect(&ctrd.socket, ctrd.dir.join("workload-logs"));
    let web_uid = "7a1b2c3d-1111-4e5f-8a9b-0c1d2e3f4a5b";
    let batch_uid = "7a1b2c3d-2222-4e5f-8a9b-0c1d2e3f4a5b";
    let web = cri.run_pod("web", "shop", web_uid, &format!("{}/kubepods/burstable/pod{web_uid}", workloads.path));
    let hog = cri.run_container(&web, "hog", Some(32 << 20), "exec dd if=/dev/zero of=/dev/null bs=64M count=1");
    let batch =
        cri.run_pod("batch", "shop", batch_uid, &format!("{}/kubepods/burstable/pod{batch_uid}", workloads.path));
    cri.run_container(&batch, "worker", Some(32 << 20), "dd if=/dev/zero of=/dev/null bs=64M count=1; exec sleep 3600");
    // The container's own limit, whatever runc set beside it (memory +
    // swap equal to memory on v1): the kernel's counters at the kill say so.
    let series = |container: &str, role: &str, uid: &str, pod: &str| {
        format!(
            "sandwatch_pod_oom_kills_total{{cause=\"anon\",container=\"{container}\",limit=\"container\",namespace=\"shop\",pod=\"{pod}\",pod_uid=\"{uid}\",victim_role=\"{role}\",warned=\"false\",workload=\"{pod}\",workload_kind=\"Pod\"}}"
        )
    };
    let counted_once = |t: &str, container: &str, role: &str, uid: &str, pod: &str| {
        metric(t, &series(container, role, uid, pod)) == Some(1.0)
    };
    // As the manifest runs it, a new series is served at 0 first (for
    // 30 s, --pod-series-hold's default), so that Prometheus counts the
    // kill: polled every 200 ms, its first sight is 0.
    let first =
        wait_for("the hog's kill series", &|t| metric(t, &series("hog", "container_init", web_uid, "web")).is_some());
    assert_eq!(metric(&first, &series("hog", "container_init", web_uid, "web")), Some(0.0), "served at 0 first");
    let text = wait_for("both OOM kills with the CRI's names", &|t| {
        counted_once(t, "hog", "container_init", web_uid, "web")
            && counted_once(t, "worker", "container_child", batch_uid, "batch")
    });
    assert_eq!(
        metric(&text, "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_init\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_child\"}"),
        Some(1.0),
        "{text}"
    );
    // The runtime's word on the hog, whichever way containerd's race went:
    // the agent counts exactly a runtime that missed the kill.
    let missed = cri.missed_oom_kills(&[&hog]);
    let verdicts = |t: &str| {
        ["agreed", "disagreed"]
            .iter()
            .filter_map(|r| metric(t, &format!("sandwatch_runtime_verdicts_total{{result=\"{r}\"}}")))
            .sum::<f64>()
    };
    wait_for("the agent's verdict on the runtime's word", &|t| verdicts(t) >= 1.0);
    let text = wait_for("a scrape after the verdict", &|t| verdicts(t) >= 1.0);
    assert_eq!(
        metric(&text, "sandwatch_runtime_disagreements_total{direction=\"kernel_says_oom\"}"),
        Some(f64::from(missed)),
        "{text}"
    );
    // /events is not on the pod network; it is a root-only socket on the
    // node, where `sandwatch events` finds it. Its records name the node
    // from the downward API.
    let (status, _) =
        PodNetwork::get(&netns, agent_addr, "/events?kind=oom_kill", Duration::from_secs(5)).expect("/events");
    assert_eq!(status, 404, "no /events on the pod network");
    let socket = pod_dir.join("run-sandwatch/events.sock");
    let (status, events) =
        harness::http_get_unix(&socket, "/events?kind=oom_kill", Duration::from_secs(5)).expect("/events on the node");
    assert_eq!(status, 200, "{events}");
    assert!(
        events.lines().any(|l| l.contains("\"node\":\"sandwatch-test-node\"") && l.contains("\"container\":\"hog\"")),
        "{events}"
    );

    // An exit storm: the agent stays within its limit.
    let agent_cgroup = {
        let text = std::fs::read_to_string(format!("/proc/{}/cgroup", pod.pid)).expect("agent's cgroup");
        cg.layout.task_path(&text).map(|p| cg.layout.host_path(p)).expect("memory cgroup of the agent")
    };
    test_support::exit_storm(50_000, 2).expect("exit storm");
    let text =
        wait_for("the storm counted", &|t| metric(t, "sandwatch_events_dropped_total{stage=\"kernel\"}").is_some());
    for stage in ["kernel", "channel", "decode"] {
        assert_eq!(
            metric(&text, &format!("sandwatch_events_dropped_total{{stage=\"{stage}\"}}")),
            Some(0.0),
            "{stage}"
        );
    }
    let peak = cgroup_peak(&cg, &agent_cgroup);
    let hwm = status_kib(pod.pid, "VmHWM:");
    let limit = plan.memory_limit as u64;
    eprintln!(
        "{}: ready {:.2} s after StartContainer; container memory peak {:.1} MiB (process VmHWM {:.1} MiB) of a {} MiB limit through 50 000 exits",
        rt.version,
        ready_in.as_secs_f64(),
        peak as f64 / 1048576.0,
        hwm as f64 / 1024.0,
        limit >> 20
    );
    assert!(peak > 0 && peak < limit, "peak {peak} of limit {limit}");
    assert_eq!(kubelet.status(&pod.container_id).0, 1, "still running after the storm");

    // The kubelet saw it ready within 10 s, and alive all along.
    std::thread::sleep(liveness.period);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ready_log, live_log) = (ready_prober.join().expect("prober"), live_prober.join().expect("prober"));
    let ready_at = ready_log.ready_at(&readiness).unwrap_or_else(|| panic!("never ready: {ready_log:?}"));
    assert!(ready_at <= Duration::from_secs(10), "the kubelet saw it ready after {ready_at:?}: {ready_log:?}");
    assert!(
        !live_log.would_restart(&liveness),
        "the liveness probe failed {}×: {live_log:?}",
        liveness.failure_threshold
    );
    assert!(live_log.results.iter().any(|(_, ok)| *ok), "{live_log:?}");

    // StopContainer with the pod's grace: SIGTERM, exit 0 in time, the
    // programs detached.
    let programs = harness::programs_held_by(pod.pid);
    assert!(programs.len() >= 7, "the agent holds its programs: {programs:?}");
    let took = kubelet.stop(&pod.container_id, plan.grace);
    let (state, code, reason) = kubelet.status(&pod.container_id);
    eprintln!(
        "{}: stopped in {:.2} s (grace {} s), exit {code} ({reason})",
        rt.version,
        took.as_secs_f64(),
        plan.grace.as_secs()
    );
    assert_eq!((state, code), (2, 0), "exit 0 on SIGTERM ({reason}); its log:\n{}", log());
    assert!(took < plan.grace, "it took the whole grace period ({took:?}): SIGKILLed");
    assert_eq!(harness::wait_unloaded(&programs), Vec::<u32>::new(), "its programs are detached");
    assert!(log().contains("shutting down: detaching programs"), "{}", log());

    drop(cri);
    kubelet.remove_pod(&pod.sandbox_id);
    drop(kubelet);
    drop(ctrd);
    remove_in_all_hierarchies(&format!("{}/kubepods", workloads.path));
    remove_in_all_hierarchies(&format!("{}/kubepods", cg.path));
    drop(workloads);
    drop(cg);
    let _ = std::fs::remove_dir_all(&pod_dir);
}
