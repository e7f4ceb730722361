//! What a tenant can do to misattribute or drown other pods, done as a
//! tenant would do it, against the agent binary: exec from threads that
//! are not their process's leader, flood the node with OOM kills, keep a
//! thousand containers near their limits, hold every inotify instance,
//! nest cgroups below its container, scrape `/metrics` from the pod
//! network. Each test prints its figures.

mod harness;

use std::time::{Duration, Instant};

use harness::{metric, require_root, AgentProcess, KubePod};

/// Without a runtime: pods are named by UID and container id.
const NO_RUNTIME: [&str; 4] = ["--containerd-socket", "", "--cri-socket", ""];

const UID_EXEC: &str = "fa1e0000-0001-4e5f-8a9b-0c1d2e3f4a5b";
const UID_FLOOD: &str = "fa1e0000-0002-4e5f-8a9b-0c1d2e3f4a5b";
const UID_QUIET: &str = "fa1e0000-0003-4e5f-8a9b-0c1d2e3f4a5b";

fn series(text: &str, s: &str) -> f64 {
    metric(text, s).unwrap_or(0.0)
}

/// Polls the agent's metrics until `ok` holds of them, at most `within`.
fn wait_until(agent: &AgentProcess, within: Duration, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let text = agent.metrics();
        if ok(&text) {
            return text;
        }
        assert!(start.elapsed() < within, "{what} never came:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The kernel's pid space here: a storm this much larger reuses every
/// free id at least twice.
fn pid_max() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|t| t.trim().parse().ok()).unwrap_or(32_768)
}

/// A container whose processes exec from a thread that is not their
/// leader — as Go programs do from a goroutine, without meaning harm —
/// 3 000 times: each exec retires the thread's own id without an exit of
/// its own. Then host processes wrap the pid space twice (70 000 on this
/// host's 32 768), landing on those ids. No host exit is counted as the
/// pod's: none is streamed at all (the agent logs every event it handles
/// at `trace`; none is the host storm's), and the retired ids are counted
/// (`sandwatch_task_table_retired_total{reason="exec"}`). (Before: 3 000
/// of the host's exits counted to the tenant's pod, and the task-table
/// misses stayed at 0, so nothing said so.)
#[test]
fn ids_retired_by_thread_execs_never_name_a_host_process() {
    require_root();
    const EXECS: u32 = 3_000;
    let agent = AgentProcess::start_logging("trace", &NO_RUNTIME);
    let mut pod = KubePod::build("exec-threads", UID_EXEC, false, 2);
    let script = pod.tmp.join("exec_from_thread.py");
    std::fs::write(
        &script,
        format!(
            "import os, threading\n\
             for _ in range({EXECS}):\n\
             \x20   pid = os.fork()\n\
             \x20   if pid == 0:\n\
             \x20       t = threading.Thread(target=lambda: os.execv('/bin/true', ['true']))\n\
             \x20       t.start()\n\
             \x20       t.join()\n\
             \x20       os._exit(1)\n\
             \x20   os.waitpid(pid, 0)\n"
        ),
    )
    .expect("script");
    pod.start_init(0, "exec sleep 1000");
    pod.start_init(1, &format!("/usr/bin/python3 {}; exec sleep 1000", script.display()));
    let before = agent.metrics();
    let started = Instant::now();
    pod.trigger(1);
    let retired = "sandwatch_task_table_retired_total{reason=\"exec\"}";
    let child = "sandwatch_task_exits_total{outcome=\"handled\",role=\"container_child\"}";
    let text = wait_until(&agent, Duration::from_secs(120), "the tenant's 3 000 thread execs", |t| {
        series(t, retired) - series(&before, retired) >= f64::from(EXECS)
            && series(t, child) - series(&before, child) >= f64::from(EXECS)
    });
    let execs_took = started.elapsed();
    let misses_before = series(&text, "sandwatch_task_table_misses_total");

    // The host wraps the pid space: its processes are named so that any
    // of their exits the agent handles shows in its log.
    let forks = (pid_max() * 2 + 4_000).max(70_000) as u32;
    let storm = std::thread::Builder::new()
        .name("hoststorm".into())
        .spawn(move || test_support::exit_storm(forks, 2))
        .expect("storm thread");
    let took = storm.join().expect("storm").expect("exit storm");
    std::thread::sleep(Duration::from_secs(1));
    let after = agent.metrics();
    let log = agent.log_text();
    let counted_as_pods = log.lines().filter(|l| l.contains("Exit(Exit {") && l.contains("comm: \"hoststorm\"")).count();
    let misses = series(&after, "sandwatch_task_table_misses_total") - misses_before;
    eprintln!(
        "{EXECS} thread execs in the tenant's container in {execs_took:?} ({} ids retired); {forks} host processes in \
         {took:?}: {counted_as_pods} of their exits counted to a pod, {misses} task-table misses",
        series(&after, retired) - series(&before, retired)
    );
    assert_eq!(counted_as_pods, 0, "host exits were handled as a pod's");
    assert_eq!(misses, 0.0, "nothing the table held was lost:\n{after}");
    assert_eq!(series(&after, "sandwatch_task_table_retired_total{reason=\"host_fork\"}"), 0.0, "no stale id left");
    drop(agent);
    drop(pod);
}

/// One container's OOM kills flood the node (three allocators killed over
/// and over in a 32 MiB container; the agent stopped meanwhile, as a busy
/// one falls behind, so the OOM ring fills), then another pod's init is
/// OOM-killed. That kill is counted and named; the flood is refused past
/// its share, counted by reason, and nothing was lost to a full ring. The
/// node-wide storm does not rise for one pod's kills. (Before: the ring
/// was first come, first served: the flood filled it and the other pod's
/// kill was lost.)
#[test]
fn one_containers_oom_flood_leaves_another_pods_kill_room() {
    require_root();
    let agent = AgentProcess::start(&NO_RUNTIME);
    let mut flood = KubePod::build("oom-flood", UID_FLOOD, false, 2);
    flood.start_init(0, "exec sleep 1000");
    let allocator = "while :; do dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null; done";
    flood.start_init(1, &format!("({allocator}) & ({allocator}) & ({allocator}) & wait"));
    let mut quiet = KubePod::build("oom-quiet", UID_QUIET, false, 2);
    quiet.start_init(0, "exec sleep 1000");
    quiet.start_init(1, "exec dd if=/dev/zero of=/dev/null bs=256M count=1");
    let before = agent.metrics();
    agent.signal(libc::SIGSTOP);
    flood.trigger(1);
    // More kills than the OOM ring holds (128 KiB: ~320 records).
    const FLOOD: u64 = 600;
    let start = Instant::now();
    while flood.oom_kills(1) < FLOOD {
        if start.elapsed() > Duration::from_secs(120) {
            agent.signal(libc::SIGCONT);
            panic!("the flood made {} kills in 120 s", flood.oom_kills(1));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let flood_took = start.elapsed();
    quiet.trigger(1);
    let start = Instant::now();
    while quiet.oom_kills(1) < 1 {
        assert!(start.elapsed() < Duration::from_secs(30), "the quiet pod's init was never killed");
        std::thread::sleep(Duration::from_millis(50));
    }
    agent.signal(libc::SIGCONT);
    let series_of = format!(
        "sandwatch_pod_oom_kills_total{{cause=\"anon\",container=\"\",container_id=\"{}\",limit=\"container\",namespace=\"\",pod=\"\",pod_uid=\"{UID_QUIET}\",victim_role=\"container_init\",workload=\"\",workload_kind=\"\"}}",
        harness::cid(2)
    );
    let text = wait_until(&agent, Duration::from_secs(30), "the quiet pod's kill", |t| series(t, &series_of) == 1.0);
    std::thread::sleep(Duration::from_millis(500));
    let text = format!("{text}{}", agent.metrics());
    let delta = |s: &str| series(&text, s) - series(&before, s);
    let lost = |reason: &str| delta(&format!("sandwatch_kernel_events_lost_total{{kind=\"oom_kill\",reason=\"{reason}\"}}"));
    let kills = flood.oom_kills(1);
    eprintln!(
        "{kills} kills in the flooding container ({FLOOD} in {flood_took:?}), the agent stopped: {} refused past its \
         share, {} for the reserve, {} to a full ring; the other pod's kill counted",
        lost("container_share"),
        lost("reserve"),
        lost("ring_full")
    );
    assert!(lost("container_share") > 0.0, "the flood was held to its share:\n{text}");
    assert_eq!(lost("ring_full"), 0.0, "the ring never filled:\n{text}");
    assert_eq!(series(&text, "sandwatch_oom_storm"), 0.0, "one pod's kills raise no node-wide storm:\n{text}");
    drop(agent);
    drop(quiet);
    drop(flood);
}
