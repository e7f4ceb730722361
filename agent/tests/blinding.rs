//! What a tenant can make or churn from inside its pod, done as a tenant
//! would do it, against the agent binary: cgroups nested below its own
//! container (20 000 of them), a process moved between them in a loop,
//! enough processes to fill the kernel's task table, pods made and torn
//! down. None of it may blind the agent to another pod: that pod's OOM
//! kill is still counted and named, nothing it needs is lost, and the
//! agent's memory stays where it was (the figures are printed).

mod harness;

use std::time::{Duration, Instant};

use harness::{
    cid,
    containerd::{remove_in_all_hierarchies, Containerd, Runtime, RuntimePod},
    cri::Cri,
    metric, require_root, AgentProcess, KubePod, TestCgroup,
};
use test_support::agent::status_kib;

const UID_NESTER: &str = "b11dfa11-0001-4e5f-8a9b-0c1d2e3f4a5b";
const UID_LIVE: &str = "b11dfa11-0002-4e5f-8a9b-0c1d2e3f4a5b";
const UID_AT_START: &str = "b11dfa11-0003-4e5f-8a9b-0c1d2e3f4a5b";
const UID_MOVER: &str = "b11dfa11-0004-4e5f-8a9b-0c1d2e3f4a5b";
const UID_MOVED_PAST: &str = "b11dfa11-0005-4e5f-8a9b-0c1d2e3f4a5b";
const UID_FORKER: &str = "b11dfa11-0006-4e5f-8a9b-0c1d2e3f4a5b";
const UID_FORKED_PAST: &str = "b11dfa11-0007-4e5f-8a9b-0c1d2e3f4a5b";
const UID_CHURNED_PAST: &str = "b11dfa11-0008-4e5f-8a9b-0c1d2e3f4a5b";
const UID_QUIET: &str = "b11dfa11-0009-4e5f-8a9b-0c1d2e3f4a5b";
const UID_NOISY: &str = "b11dfa11-000a-4e5f-8a9b-0c1d2e3f4a5b";

/// Without a runtime: pods are named by UID and container id.
const NO_RUNTIME: [&str; 4] = ["--containerd-socket", "", "--cri-socket", ""];

/// How many cgroups the tenant nests below its container.
const NESTED: usize = 20_000;

fn series(text: &str, s: &str) -> f64 {
    metric(text, s).unwrap_or(0.0)
}

/// The OOM kills counted with `victim_role` (every `qos_class`).
fn kills_of_role(text: &str, role: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with("sandwatch_oom_kills_total{") && l.contains(&format!("victim_role=\"{role}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until the agent counts the OOM kill of container `cid(2)`'s init
/// in pod `uid`, named by the pod and its container, its own limit fired;
/// returns the metrics then.
fn kill_counted_and_named(agent: &AgentProcess, uid: &str) -> String {
    let series = format!(
        "sandwatch_pod_oom_kills_total{{cause=\"anon\",container=\"\",limit=\"container\",namespace=\"\",pod=\"\",pod_uid=\"{uid}\",victim_role=\"container_init\",warned=\"false\",workload=\"\",workload_kind=\"\"}}"
    );
    let start = Instant::now();
    loop {
        let text = agent.metrics();
        if metric(&text, &series) == Some(1.0) {
            return text;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{series} never 1:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A pod whose second container's init will run out of memory once
/// triggered.
fn victim(name: &str, uid: &str) -> KubePod {
    let mut pod = KubePod::build(name, uid, false, 2);
    pod.start_init(0, "exec sleep 1000");
    pod.start_init(1, "exec dd if=/dev/zero of=/dev/null bs=256M count=1");
    pod.trigger(0);
    pod
}

/// The agent's resident memory once it has settled, in KiB.
fn settled_rss(agent: &AgentProcess) -> u64 {
    std::thread::sleep(Duration::from_secs(2));
    status_kib(agent.pid(), "VmRSS:")
}

/// A BestEffort container nests 20 000 cgroups below its own (sorted
/// first in the cgroup tree, before every Burstable and Guaranteed pod),
/// while the agent runs and before another starts. A pod made after the
/// flood, and one made before a fresh agent's start-up walk, are each
/// OOM-killed: counted, named, their own limit. The nested cgroups cost
/// no record (the kernel counts them) and no memory: the agent's RSS
/// stays within 3 MiB of what it was. (Before: the kills counted as the
/// host's, the agent's RSS rose to 33 MiB, and at start-up the tracked-
/// cgroup map filled with the tenant's cgroups.)
#[test]
fn twenty_thousand_cgroups_below_a_container_blind_no_other_pod() {
    require_root();
    let mut tenant = KubePod::build_qos("nester", UID_NESTER, false, 2, "besteffort");
    // BestEffort: no limit (each cgroup's kernel memory is charged to it;
    // 32 MiB holds some 3 300).
    tenant.cg.unlimit_memory(&tenant.paths[1]);
    tenant.start_init(1, "exec sleep 1000");
    tenant.trigger(1);
    let agent = AgentProcess::start(&NO_RUNTIME);
    let idle = settled_rss(&agent);
    let before = agent.metrics();

    let made = Instant::now();
    tenant.nest_many(1, "c", NESTED);
    eprintln!("{NESTED} cgroups nested below the tenant's container in {:?}", made.elapsed());
    let live = victim("nester-live", UID_LIVE);
    live.trigger(1);
    let text = kill_counted_and_named(&agent, UID_LIVE);
    let delta = |s: &str| series(&text, s) - series(&before, s);
    let nested = delta("sandwatch_kernel_cgroup_records_unstreamed_total{reason=\"nested\"}");
    assert!(nested >= NESTED as f64, "the kernel counted the nested mkdirs instead of streaming them: {nested}");
    assert!(delta("sandwatch_events_total{kind=\"cgroup_mkdir\"}") < 100.0, "no record per nested cgroup");
    for kind in ["oom_kill", "cgroup_mkdir", "cgroup_rmdir", "cgroup_attach"] {
        let lost = delta(&format!("sandwatch_kernel_events_dropped_total{{kind=\"{kind}\"}}"));
        assert_eq!(lost, 0.0, "{kind} records lost:\n{text}");
    }
    assert_eq!(series(&text, "sandwatch_tracked_cgroups_refused_total"), 0.0);
    assert_eq!(kills_of_role(&text, "host"), 0.0, "no kill taken for the host's:\n{text}");
    let flooded = settled_rss(&agent);
    drop(agent);

    // A fresh agent walks the tree at start-up: the tenant's cgroups first.
    let at_start = victim("nester-start", UID_AT_START);
    let started = Instant::now();
    let agent = AgentProcess::start(&NO_RUNTIME);
    let ready_after = started.elapsed();
    let restarted = settled_rss(&agent);
    at_start.trigger(1);
    kill_counted_and_named(&agent, UID_AT_START);
    eprintln!(
        "agent RSS: {idle} KiB idle, {flooded} KiB after the flood, {restarted} KiB started beside it \
         (ready in {ready_after:?})"
    );
    for (when, kib) in [("after the flood", flooded), ("started beside it", restarted)] {
        assert!(kib < idle + 3 * 1024, "RSS {when}: {kib} KiB against {idle} KiB idle");
    }
    drop(agent);
    drop(at_start);
    drop(live);
    drop(tenant);
}

/// A container moves its own process between two cgroups nested below its
/// own, and back into its own, 20 000 times, while another pod's init is
/// OOM-killed: that kill is counted and named, no cgroup record is lost
/// (none is sent past a cgroup's first few attaches), and nothing makes
/// the agent read the tree again. (Before: each move was a record in the
/// ring that carries OOM kills; a full ring lost kills, and each lost
/// cgroup record made the agent re-read the whole tree.)
#[test]
fn a_cgroup_move_loop_fills_nothing_another_pod_needs() {
    require_root();
    let mut tenant = KubePod::build("mover", UID_MOVER, false, 2);
    let own = tenant.cg.layout.dir(&tenant.paths[1]);
    let a = tenant.nest_chain(1, 1);
    tenant.nest_many(1, "b", 1);
    let b = own.join("b0");
    tenant.start_init(
        1,
        &format!(
            "i=0; while [ $i -lt 20000 ]; do echo $$ > {a}/cgroup.procs; echo $$ > {b}/cgroup.procs; \
             echo $$ > {own}/cgroup.procs; i=$((i+1)); done; exec sleep 1000",
            a = a.display(),
            b = b.display(),
            own = own.display(),
        ),
    );
    let agent = AgentProcess::start(&NO_RUNTIME);
    let before = agent.metrics();
    let past = victim("moved-past", UID_MOVED_PAST);
    tenant.trigger(1);
    // The loop runs: the other pod's init runs out of memory meanwhile.
    std::thread::sleep(Duration::from_millis(500));
    past.trigger(1);
    kill_counted_and_named(&agent, UID_MOVED_PAST);
    let start = Instant::now();
    let tenant_init = tenant.init_pid(1);
    while !std::fs::read_to_string(format!("/proc/{tenant_init}/comm")).is_ok_and(|c| c.trim() == "sleep") {
        assert!(start.elapsed() < Duration::from_secs(120), "the move loop never finished");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let text = agent.metrics();
    let delta = |s: &str| series(&text, s) - series(&before, s);
    let unstreamed = delta("sandwatch_kernel_cgroup_records_unstreamed_total{reason=\"attach\"}");
    assert!(unstreamed >= 59_000.0, "the moves were counted in the kernel: {unstreamed}");
    assert!(delta("sandwatch_events_total{kind=\"cgroup_attach\"}") < 100.0, "no record per move:\n{text}");
    for kind in ["oom_kill", "cgroup_attach"] {
        let lost = delta(&format!("sandwatch_kernel_events_dropped_total{{kind=\"{kind}\"}}"));
        assert_eq!(lost, 0.0, "{kind} records lost:\n{text}");
    }
    assert_eq!(delta("sandwatch_cgroup_resyncs_total"), 0.0, "nothing made the agent read the tree again");
    drop(agent);
    drop(past);
    drop(tenant);
}

/// On cgroup v1 the kernel's task table holds `--task-table-entries`
/// tasks, while a node's pid_max is often 4M: one pod's processes could
/// fill it (here 1 024, by 4 000 sleeping processes). Each pod's and
/// container's tasks hold at most their quota (an eighth): the forker's
/// beyond it are refused (counted), and another pod's process, OOM-killed,
/// is named as its own, never `unknown` or the host's. (Before: the
/// table evicted the other pod's tasks, and its kill read `unknown`.)
#[test]
fn a_pod_filling_the_task_table_costs_no_other_pod_its_names() {
    require_root();
    let layout = sandwatch::probes::cgroups::CgroupLayout::detect().expect("cgroup layout");
    let agent = AgentProcess::start(&["--task-table-entries", "1024", NO_RUNTIME[0], "", NO_RUNTIME[2], ""]);
    let kernel_path = "sandwatch_kernel_path{path=\"fork_table\"}";
    if metric(&agent.metrics(), kernel_path) != Some(1.0) {
        assert!(layout.is_unified(), "cgroup v1 always keeps the task table");
        panic!("this kernel reads OOM victims off their task (cgroup v2, Linux 6.9+): no task table to fill here");
    }
    let past = victim("forked-past", UID_FORKED_PAST);
    let mut forker = KubePod::build_qos("forker", UID_FORKER, false, 2, "besteffort");
    forker.cg.unlimit_memory(&forker.paths[1]);
    forker.start_init(1, "i=0; while [ $i -lt 4000 ]; do sleep 1000 & i=$((i+1)); done; wait");
    let before = agent.metrics();
    forker.trigger(1);
    let start = Instant::now();
    while forker.pids(1).len() < 4000 {
        assert!(start.elapsed() < Duration::from_secs(60), "the forker never had its 4 000 processes");
        std::thread::sleep(Duration::from_millis(100));
    }
    past.trigger(1);
    kill_counted_and_named(&agent, UID_FORKED_PAST);
    std::thread::sleep(Duration::from_millis(500));
    let after = agent.metrics();
    let delta = |s: &str| series(&after, s) - series(&before, s);
    let role = |r: &str| kills_of_role(&after, r) - kills_of_role(&before, r);
    // (A host kill may be another test's on this node: the victim's own
    // series, named above, says whose its kill is.)
    assert_eq!(role("unknown"), 0.0, "never unknown:\n{after}");
    // Its exit neither (the host's exits streamed are runtimes', which
    // other tests on the node start and stop).
    assert_eq!(delta("sandwatch_task_exits_total{outcome=\"unknown\",role=\"unknown\"}"), 0.0, "its exit neither");
    let refused = delta("sandwatch_task_table_refused_total{reason=\"quota\"}");
    // 4 000 sleepers and their shell: 128 held, the rest refused.
    assert!(refused >= 3_800.0, "the forker's tasks past its quota are refused, counted: {refused}\n{after}");
    assert_eq!(delta("sandwatch_task_table_refused_total{reason=\"full\"}"), 0.0, "the table never filled");
    eprintln!("the forker's tasks refused past its quota: {refused}; the other pod's kill named");
    drop(agent);
    drop(past);
    drop(forker);
}

/// Pods made and torn down as fast as the kernel lets (600, each a pod and
/// two containers) while the agent runs: the pod made after them is
/// counted and named, and the agent's RSS stays within 3 MiB of what it
/// was (tombstones and names are bounded and expire).
#[test]
fn pod_churn_leaves_the_next_pod_seen() {
    require_root();
    let agent = AgentProcess::start(&NO_RUNTIME);
    let idle = settled_rss(&agent);
    let before = agent.metrics();
    let churned = Instant::now();
    let cg = TestCgroup::create("churn");
    for n in 0..600u32 {
        let pod = cg.dir().join(format!("kubepods/burstable/podc4a2c4a2-{n:04x}-4e5f-8a9b-0c1d2e3f4a5b"));
        let containers = [pod.join(cid(1)), pod.join(cid(2))];
        std::fs::create_dir_all(&pod).expect("mkdir pod");
        for c in &containers {
            std::fs::create_dir(c).expect("mkdir container");
        }
        for c in &containers {
            std::fs::remove_dir(c).expect("rmdir container");
        }
        std::fs::remove_dir(&pod).expect("rmdir pod");
    }
    eprintln!("600 pods made and torn down in {:?}", churned.elapsed());
    let past = victim("churned-past", UID_CHURNED_PAST);
    past.trigger(1);
    let text = kill_counted_and_named(&agent, UID_CHURNED_PAST);
    let delta = |s: &str| series(&text, s) - series(&before, s);
    for kind in ["oom_kill", "cgroup_mkdir", "cgroup_rmdir"] {
        let lost = delta(&format!("sandwatch_kernel_events_dropped_total{{kind=\"{kind}\"}}"));
        assert_eq!(lost, 0.0, "{kind} records lost:\n{text}");
    }
    let churn_rss = settled_rss(&agent);
    eprintln!("agent RSS: {idle} KiB idle, {churn_rss} KiB after 600 pods came and went");
    assert!(churn_rss < idle + 3 * 1024, "RSS {churn_rss} KiB against {idle} KiB idle");
    drop(agent);
    drop(past);
    drop(cg);
}

/// Through a real containerd's CRI: a pod in namespace `quiet` is
/// OOM-killed once; then a pod in namespace `noisy` runs eight containers
/// whose processes are OOM-killed over and over (hundreds of kills, eight
/// series), with room for 32 records and 6 series per family. The quiet
/// namespace's kill keeps its record in `/events` and its per-pod series;
/// the flood evicts its own. (Before: the history was a ring and each
/// family evicted its least recently updated series, whoever's.)
#[test]
fn one_namespaces_flood_of_kills_keeps_every_other_namespaces_evidence() {
    require_root();
    let quiet_cg = RuntimePod::new("fair-quiet", UID_QUIET);
    let noisy_cg = RuntimePod::new("fair-noisy", UID_NOISY);
    let ctrd = Containerd::start_cri(&Runtime::system(), "fair");
    let socket = ctrd.socket.display().to_string();
    let agent = AgentProcess::start(&[
        "--containerd-socket",
        &socket,
        "--cri-socket",
        &socket,
        "--cri-refresh-seconds",
        "1",
        "--event-history",
        "32",
        "--max-pod-series",
        "6",
    ]);
    let start = Instant::now();
    while metric(&agent.metrics(), "sandwatch_runtime_metadata_up") != Some(1.0) {
        assert!(start.elapsed() < Duration::from_secs(20), "the CRI listing never came up");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut cri = Cri::connect(&ctrd.socket, ctrd.dir.join("pods"));
    let quiet = cri.run_pod("db", "quiet", UID_QUIET, &quiet_cg.pod_path);
    cri.run_container(&quiet, "db", Some(32 << 20), "x=$(head -c 67108864 /dev/zero | tr '\\0' a); sleep 100");
    let quiet_series = format!(
        "sandwatch_pod_oom_kills_total{{cause=\"anon\",container=\"db\",limit=\"container\",namespace=\"quiet\",pod=\"db\",pod_uid=\"{UID_QUIET}\",victim_role=\"container_init\",warned=\"false\",workload=\"db\",workload_kind=\"Pod\"}}"
    );
    let start = Instant::now();
    while metric(&agent.metrics(), &quiet_series) != Some(1.0) {
        assert!(start.elapsed() < Duration::from_secs(30), "{quiet_series} never 1:\n{}", agent.metrics());
        std::thread::sleep(Duration::from_millis(100));
    }
    let noisy = cri.run_pod("spam", "noisy", UID_NOISY, &noisy_cg.pod_path);
    for i in 0..8 {
        cri.run_container(
            &noisy,
            &format!("spam{i}"),
            Some(32 << 20),
            "while :; do dd if=/dev/zero of=/dev/null bs=64M count=1; done",
        );
    }
    let child = "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_child\"}";
    let start = Instant::now();
    let text = loop {
        let text = agent.metrics();
        if series(&text, child) >= 200.0
            && series(&text, "sandwatch_pod_series_evicted_total{family=\"oom_kills\"}") >= 2.0
        {
            break text;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "the flood never came:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(metric(&text, &quiet_series), Some(1.0), "the quiet namespace's series kept:\n{text}");
    // The quiet pod's own series (its shell's kill, and any kill the
    // kernel made of its children as it went) stay; the flood has the
    // rest of the cap of 6.
    let kill_series = |namespace: &str| {
        let namespace = format!("namespace=\"{namespace}\"");
        text.lines().filter(|l| l.starts_with("sandwatch_pod_oom_kills_total{") && l.contains(&namespace)).count()
    };
    let (kept_quiet, noisy_series) = (kill_series("quiet"), kill_series("noisy"));
    assert!(kept_quiet >= 1, "the quiet namespace's series kept:\n{text}");
    assert_eq!(kept_quiet + noisy_series, 6, "the flood has the rest of the cap:\n{text}");
    let records = agent.records();
    assert_eq!(records.len(), 32, "the history is full");
    assert!(
        records.iter().any(|r| r.kind() == "oom_kill" && r.namespace() == Some("quiet") && r.container() == Some("db")),
        "the quiet namespace's kill kept in the history: {records:#?}"
    );
    eprintln!("{} kills of the noisy namespace", series(&text, child));
    drop(agent);
    drop(cri);
    drop(ctrd);
    for cg in [&quiet_cg, &noisy_cg] {
        remove_in_all_hierarchies(&format!("{}/kubepods", cg.cg.path));
    }
}
