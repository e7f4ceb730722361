//! What a tenant can do to misattribute or drown other pods, done as a
//! tenant would do it, against the agent binary: exec from threads that
//! are not their process's leader, flood the node with OOM kills, keep a
//! thousand containers near their limits, hold every inotify instance,
//! nest cgroups below its container, scrape `/metrics` from the pod
//! network, set timers that fire while other pods run or the CPU idles,
//! forge a timer's signal. Each test prints its figures.

mod harness;

use std::time::{Duration, Instant};

use harness::{fork_into, metric, pause_forever, pin, reap, require_root, timed_out, AgentProcess, KubePod};

/// Without a runtime: pods are named by UID and container id.
const NO_RUNTIME: [&str; 4] = ["--containerd-socket", "", "--cri-socket", ""];

const UID_EXEC: &str = "fa1e0000-0001-4e5f-8a9b-0c1d2e3f4a5b";
const UID_FLOOD: &str = "fa1e0000-0002-4e5f-8a9b-0c1d2e3f4a5b";
const UID_QUIET: &str = "fa1e0000-0003-4e5f-8a9b-0c1d2e3f4a5b";

fn series(text: &str, s: &str) -> f64 {
    metric(text, s).unwrap_or(0.0)
}

/// A pod's container-init OOM kills, summed over the labels a test need
/// not pin (whose limit, what filled it, whether it was warned).
fn init_kills(text: &str, pod_uid: &str) -> f64 {
    let uid = format!("pod_uid=\"{pod_uid}\"");
    text.lines()
        .filter(|l| l.starts_with("sandwatch_pod_oom_kills_total{"))
        .filter(|l| l.contains(&uid) && l.contains("victim_role=\"container_init\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A pod's container inits ended by a signal from `sender`, summed over
/// the other labels.
fn ends_by(text: &str, pod_uid: &str, sender: &str) -> f64 {
    let (uid, sender) = (format!("pod_uid=\"{pod_uid}\""), format!("sender=\"{sender}\""));
    text.lines()
        .filter(|l| l.starts_with("sandwatch_pod_container_exits_total{") && l.contains(&uid) && l.contains(&sender))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
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
    let counted_as_pods =
        log.lines().filter(|l| l.contains("Exit(Exit {") && l.contains("comm: \"hoststorm\"")).count();
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
    agent.suspend();
    flood.trigger(1);
    // More kills than the OOM ring holds (128 KiB: ~290 records).
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
    let text = wait_until(&agent, Duration::from_secs(30), "the quiet pod's kill", |t| init_kills(t, UID_QUIET) == 1.0);
    std::thread::sleep(Duration::from_millis(500));
    let text = format!("{text}{}", agent.metrics());
    let delta = |s: &str| series(&text, s) - series(&before, s);
    let lost =
        |reason: &str| delta(&format!("sandwatch_kernel_events_lost_total{{kind=\"oom_kill\",reason=\"{reason}\"}}"));
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
    let own_storm = format!("sandwatch_oom_storm_namespace{{namespace=\"\",pod_uid=\"{UID_FLOOD}\"}}");
    assert!(series(&text, &own_storm) >= 10.0, "its own storm is said, by its pod:\n{text}");
    drop(agent);
    drop(quiet);
    drop(flood);
}

const UID_EXITS: &str = "fa1e0000-0004-4e5f-8a9b-0c1d2e3f4a5b";
const UID_INIT: &str = "fa1e0000-0005-4e5f-8a9b-0c1d2e3f4a5b";

/// One container floods the exit ring (8 000 exits into a 64 KiB ring of
/// ~800 records, the agent stopped meanwhile), then another pod's
/// container init exits: its exit is counted as that container's end;
/// the flood is refused past its share, counted. (Before: the ring was
/// first come, first served: the flood filled it and the other pod's
/// init exit was lost.)
#[test]
fn one_containers_exit_flood_leaves_another_pods_init_exit_room() {
    require_root();
    let agent = AgentProcess::start(&["--ring-buffer-bytes", "64K", NO_RUNTIME[0], "", NO_RUNTIME[2], ""]);
    let mut flood = KubePod::build("exit-flood", UID_EXITS, false, 2);
    flood.start_init(0, "exec sleep 1000");
    flood.start_init(1, "i=0; while [ $i -lt 8000 ]; do /bin/true; i=$((i+1)); done; exec sleep 1000");
    let mut other = KubePod::build("exit-other", UID_INIT, false, 2);
    other.start_init(0, "exec sleep 1000");
    other.start_init(1, "exit 3");
    let before = agent.metrics();
    agent.suspend();
    flood.trigger(1);
    let start = Instant::now();
    while !std::fs::read_to_string(format!("/proc/{}/comm", flood.init_pid(1))).is_ok_and(|c| c.trim() == "sleep") {
        if start.elapsed() > Duration::from_secs(120) {
            agent.signal(libc::SIGCONT);
            panic!("the flood never finished");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    other.trigger(1);
    std::thread::sleep(Duration::from_millis(300));
    agent.signal(libc::SIGCONT);
    let exit = format!(
        "sandwatch_pod_container_exits_total{{container=\"\",namespace=\"\",pod=\"\",pod_uid=\"{UID_INIT}\",reason=\"error\",sender=\"none\",workload=\"\",workload_kind=\"\"}}"
    );
    let text = wait_until(&agent, Duration::from_secs(30), "the other pod's init exit", |t| series(t, &exit) == 1.0);
    let lost = |reason: &str| {
        let s = format!("sandwatch_kernel_events_lost_total{{kind=\"exit\",reason=\"{reason}\"}}");
        series(&text, &s) - series(&before, &s)
    };
    eprintln!(
        "8 000 exits in one container into a 64 KiB ring, the agent stopped: {} refused past its share, {} for the \
         reserve, {} to a full ring; the other pod's init exit counted",
        lost("container_share"),
        lost("reserve"),
        lost("ring_full")
    );
    assert!(lost("container_share") > 0.0, "the flood was held to its share:\n{text}");
    assert_eq!(lost("ring_full"), 0.0, "the ring never filled:\n{text}");
    drop(agent);
    drop(other);
    drop(flood);
}

/// Whether `pid` runs `sleep`: its shell has run what came before its
/// `exec sleep`.
fn asleep(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
}

/// Waits until `pid` runs `sleep`; fails with `what` after `within`.
fn wait_asleep(pid: u32, within: Duration, what: &str) {
    let start = Instant::now();
    while !asleep(pid) {
        assert!(start.elapsed() < within, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const UID_SIGNAL_FLOOD: &str = "fa1e0000-0010-4e5f-8a9b-0c1d2e3f4a5b";
const UID_SIGNALLED: &str = "fa1e0000-0011-4e5f-8a9b-0c1d2e3f4a5b";

/// One pod floods the signal ring: one of its containers sends another
/// 5 000 SIGUSR1s, which that one ignores (a request from outside the
/// target's container is streamed whatever becomes of it), the agent
/// stopped meanwhile. Then a host process kills another pod's container
/// init: its end names the host, the flood held back from the ring's last
/// eighth, counted. (Before: the ring was first come, first served, ~630
/// records; the flood filled it and the kill's sender read `unknown`.)
#[test]
fn one_pods_signal_flood_leaves_a_host_kill_its_sender() {
    require_root();
    let agent = AgentProcess::start(&NO_RUNTIME);
    let mut flood = KubePod::build("signal-flood", UID_SIGNAL_FLOOD, false, 3);
    flood.start_init(0, "exec sleep 1000");
    flood.start_init(1, "trap '' USR1; exec sleep 1000");
    flood.trigger(1);
    let target = flood.init_pid(1);
    wait_asleep(target, Duration::from_secs(20), "the target never slept");
    flood.start_init(
        2,
        &format!("i=0; while [ $i -lt 5000 ]; do kill -USR1 {target} || exit 9; i=$((i+1)); done; exec sleep 1000"),
    );
    let mut other = KubePod::build("signalled", UID_SIGNALLED, false, 2);
    other.start_init(0, "exec sleep 1000");
    other.start_init(1, "exec sleep 1000");
    other.trigger(1);
    let victim = other.init_pid(1);
    wait_asleep(victim, Duration::from_secs(20), "the victim never slept");
    // Known to the agent before it stops: the victim's container is tracked.
    std::thread::sleep(Duration::from_secs(2));
    let before = agent.metrics();
    agent.suspend();
    flood.trigger(2);
    let start = Instant::now();
    while !asleep(flood.init_pid(2)) {
        if start.elapsed() > Duration::from_secs(120) {
            agent.signal(libc::SIGCONT);
            panic!("the flood never finished");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: kill(2) of a process this test started.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGKILL) }, 0);
    std::thread::sleep(Duration::from_millis(300));
    agent.signal(libc::SIGCONT);
    let ended = |t: &str, sender: &str| ends_by(t, UID_SIGNALLED, sender);
    let text = wait_until(&agent, Duration::from_secs(30), "the other pod's end", |t| {
        ended(t, "host") + ended(t, "unknown") >= 1.0
    });
    let lost = |reason: &str| {
        let s = format!("sandwatch_kernel_events_lost_total{{kind=\"signal\",reason=\"{reason}\"}}");
        series(&text, &s) - series(&before, &s)
    };
    eprintln!(
        "5 000 signals between one pod's containers into a 64 KiB ring, the agent stopped: {} refused for the \
         reserve, {} past the pod's own share, {} to a full ring; the host's kill of another pod's init read {}",
        lost("reserve"),
        lost("container_share"),
        lost("ring_full"),
        if ended(&text, "host") >= 1.0 { "host" } else { "unknown" }
    );
    assert_eq!(ended(&text, "host"), 1.0, "the host's kill named:\n{text}");
    assert!(lost("reserve") > 0.0, "the flood was held from the reserve:\n{text}");
    assert_eq!(lost("ring_full"), 0.0, "the ring never filled:\n{text}");
    drop(agent);
    drop(other);
    drop(flood);
}

const UID_HOLDER: &str = "fa1e0000-0020-4e5f-8a9b-0c1d2e3f4a5b";
const UID_STOPPED: &str = "fa1e0000-0021-4e5f-8a9b-0c1d2e3f4a5b";

/// A tenant's pod whose one container sends SIGTERM to 4 200 processes of
/// its other container, which ignore it and live on: each is a process
/// whose signals the agent keeps until it ends (for a stop's grace).
/// Before, they filled the agent's table (4 096) and pushed out the oldest:
/// a host's SIGTERM to another pod's container, sent before the flood, was
/// forgotten, and that container's end by the host's SIGKILL lost its stop
/// and grace. A pod keeps its share of the table (256 processes).
#[test]
fn one_pods_signals_to_processes_that_live_on_leave_another_pods_stop_its_grace() {
    require_root();
    let agent = AgentProcess::start(&NO_RUNTIME);
    let mut stopped = KubePod::build("stopped", UID_STOPPED, false, 2);
    stopped.start_init(0, "exec sleep 1000");
    stopped.start_init(1, "trap '' TERM; exec sleep 1000");
    stopped.trigger(1);
    let victim = stopped.init_pid(1);
    wait_asleep(victim, Duration::from_secs(20), "the victim never slept");
    let initial = agent.metrics();
    let mut holder = KubePod::build("holder", UID_HOLDER, false, 3);
    // 4 200 processes need more kernel memory than a 32 MiB container has.
    holder.cg.unlimit_memory(&holder.paths[1]);
    holder.start_init(0, "exec sleep 1000");
    holder.start_init(1, "trap '' TERM; i=0; while [ $i -lt 4200 ]; do sleep 1000 & i=$((i+1)); done; exec sleep 1000");
    holder.trigger(1);
    let start = Instant::now();
    while holder.pids(1).len() < 4201 {
        assert!(start.elapsed() < Duration::from_secs(120), "the holder started {} processes", holder.pids(1).len());
        std::thread::sleep(Duration::from_millis(200));
    }
    // Known to the agent: both pods' containers are tracked.
    std::thread::sleep(Duration::from_secs(2));
    // The host asks the victim to stop first.
    // SAFETY: kill(2) of a process this test started.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGTERM) }, 0);
    let asked = Instant::now();
    let before = agent.metrics();
    let procs = holder.cg.procs_file(&holder.paths[1]);
    holder.start_init(2, &format!("for p in $(cat {}); do kill -TERM $p; done; exec sleep 1000", procs.display()));
    holder.trigger(2);
    wait_asleep(holder.init_pid(2), Duration::from_secs(60), "the flood never finished");
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: kill(2) of a process this test started.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGKILL) }, 0);
    let grace = asked.elapsed();
    let uid = format!("pod_uid=\"{UID_STOPPED}\"");
    wait_until(&agent, Duration::from_secs(30), "the stopped pod's end", |t| {
        t.lines().any(|l| l.starts_with("sandwatch_pod_container_exits_total{") && l.contains(&uid))
    });
    // On cgroup v1 the kernel's task table holds a container's tasks up to
    // its quota; a signal to a task it refused is not seen. What the kernel
    // side refused of the flood (a pod's signals to its other container
    // stop short of the ring's reserve) never reached the agent, nor what
    // its reader could not hand on at once (counted). The rest
    // past the pod's share is forgotten, counted once a tick.
    let sum = |t: &str, prefix: &str| -> f64 {
        t.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
    };
    let since = |t: &str, from: &str, prefix: &str| sum(t, prefix) - sum(from, prefix);
    let counts = |t: &str| {
        let seen = 4_201.0 - since(t, &initial, "sandwatch_task_table_refused_total{");
        let lost = since(t, &before, "sandwatch_kernel_events_lost_total{kind=\"signal\"")
            + since(t, &before, "sandwatch_channel_events_dropped_total{kind=\"signal\"}");
        let forgotten = since(t, &before, "sandwatch_signal_senders_forgotten_total");
        (seen, lost, forgotten)
    };
    let text = wait_until(&agent, Duration::from_secs(10), "the pod's signals past its share counted", |t| {
        let (seen, lost, forgotten) = counts(t);
        forgotten + lost >= seen - 256.0
    });
    let (seen, lost, forgotten) = counts(&text);
    let records = agent.records();
    let end = records
        .iter()
        .find(|r| r.kind() == "container_exit" && r.pid() == Some(victim))
        .unwrap_or_else(|| panic!("no container_exit of {victim}: {records:#?}"));
    eprintln!(
        "4 200 processes of one pod sent SIGTERM by its other container ({seen} of them in the kernel's task \
         table): {forgotten} of their processes' signals forgotten, {lost} refused in the kernel or dropped; the host's stop of \
         another pod's container, {grace:?} from SIGTERM to SIGKILL, read stop signal {:?}, grace {:?} ms",
        end.stop_signal(),
        end.grace_ms()
    );
    assert_eq!(end.sender(), Some("host"), "{end:?}");
    assert_eq!(end.stop_signal(), Some(15), "the host's SIGTERM kept through the flood: {end:?}");
    let grace_ms = end.grace_ms().expect("the stop's grace");
    assert!(grace_ms + 100 >= grace.as_millis() as u64 - 500, "{grace_ms} ms for {grace:?}");
    assert_eq!(forgotten + lost, seen - 256.0, "the pod's share only: {forgotten} forgotten, {lost} lost of {seen}");
    drop(agent);
    drop(holder);
    drop(stopped);
}

const UID_STORM: &str = "fa1e0000-0006-4e5f-8a9b-0c1d2e3f4a5b";
const UID_KILLED: &str = "fa1e0000-0007-4e5f-8a9b-0c1d2e3f4a5b";

/// A cpu cgroup of this test's own with a CFS quota (v1: `cpu.cfs_*`;
/// v2: `cpu.max`), removed on drop (what is in it must be gone by then).
struct CpuQuota {
    dir: std::path::PathBuf,
}

impl CpuQuota {
    /// `millicores` of CPU per 100 ms period.
    fn new(millicores: u64) -> Self {
        let mounts = std::fs::read_to_string("/proc/mounts").expect("/proc/mounts");
        let v1 = mounts.lines().find_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.get(2) == Some(&"cgroup") && cols.get(3).is_some_and(|o| o.split(',').any(|o| o == "cpu")))
                .then(|| cols[1].to_string())
        });
        let own = |controller: &str| {
            std::fs::read_to_string("/proc/self/cgroup").ok().and_then(|t| {
                t.lines().find_map(|l| {
                    let mut parts = l.splitn(3, ':');
                    let (_, c, p) = (parts.next()?, parts.next()?, parts.next()?);
                    (c.split(',').any(|c| c == controller)).then(|| p.to_string())
                })
            })
        };
        let name = format!("sandwatch-test-{}-quota", std::process::id());
        let period = 100_000u64;
        let quota = period * millicores / 1000;
        let dir = match v1 {
            Some(mount) => {
                let dir = std::path::Path::new(&mount)
                    .join(own("cpu").unwrap_or_default().trim_start_matches('/'))
                    .join(name);
                std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
                std::fs::write(dir.join("cpu.cfs_period_us"), period.to_string()).expect("cpu.cfs_period_us");
                std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string()).expect("cpu.cfs_quota_us");
                dir
            }
            None => {
                let parent =
                    std::path::Path::new("/sys/fs/cgroup").join(own("").unwrap_or_default().trim_start_matches('/'));
                let dir = parent.join(name);
                std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
                std::fs::write(dir.join("cpu.max"), format!("{quota} {period}"))
                    .unwrap_or_else(|e| panic!("cpu.max in {} (the cpu controller delegated?): {e}", dir.display()));
                dir
            }
        };
        Self { dir }
    }

    /// A wrapper that runs the agent in it.
    fn wrapper(&self) -> String {
        format!("echo $$ > {}/cgroup.procs && exec \"$0\" \"$@\"", self.dir.display())
    }

    /// Periods in which its tasks were throttled, and for how long (ns).
    fn throttled(&self) -> (u64, u64) {
        let stat = std::fs::read_to_string(self.dir.join("cpu.stat")).unwrap_or_default();
        let field = |k: &str| stat.lines().find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok()).unwrap_or(0);
        let time = field("throttled_time ").max(field("throttled_usec ") * 1000);
        (field("nr_throttled "), time)
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// One HTTP/1.1 response off a kept-alive connection: its status and
/// body length (the agent sends a Content-Length).
fn read_response(stream: &mut std::net::TcpStream, buf: &mut Vec<u8>) -> std::io::Result<(u16, usize)> {
    use std::io::Read as _;
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
            let length = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok())?
                })
                .ok_or_else(|| std::io::Error::other(format!("no content-length: {head}")))?;
            while buf.len() < end + 4 + length {
                let n = stream.read(&mut chunk)?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.drain(..end + 4 + length);
            return Ok((status, length));
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// GET /metrics on a kept-alive connection; its body.
fn scrape_body(stream: &mut std::net::TcpStream, buf: &mut Vec<u8>) -> std::io::Result<String> {
    use std::io::{Read as _, Write as _};
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: sandwatch\r\n\r\n")?;
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse().ok())?
                })
                .ok_or_else(|| std::io::Error::other("no content-length"))?;
            while buf.len() < end + 4 + length {
                let n = stream.read(&mut chunk)?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).to_string();
            buf.drain(..end + 4 + length);
            return Ok(body);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The agent in a 500m CPU quota (the DaemonSet's limit), 64 clients
/// scraping `/metrics` as fast as it answers on kept-alive connections
/// (a scrape flood from the pod network), while a pod runs an exit storm
/// (40 000 processes) and another pod's init is OOM-killed: no event is
/// lost, the kill's series is on `/metrics` within 1 s of the kill, and
/// the scrapes share their bodies through the real server (far fewer
/// renders than scrapes). (Before: the server rendered one body per
/// scrape, one after another on its thread.)
#[test]
fn a_scrape_flood_under_the_cpu_limit_loses_nothing_and_delays_a_kill_under_a_second() {
    require_root();
    use std::sync::{
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
        Arc,
    };
    const SCRAPERS: usize = 64;
    const EXITS: u32 = 40_000;
    let quota = CpuQuota::new(500);
    let wrapper = quota.wrapper();
    let agent = AgentProcess::start_wrapped(&["sh", "-c", &wrapper], &NO_RUNTIME);
    let mut storm = KubePod::build("scrape-storm", UID_STORM, false, 2);
    let script = storm.tmp.join("storm.py");
    std::fs::write(
        &script,
        format!(
            "import os\nfor _ in range({EXITS}):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n    os.waitpid(pid, 0)\n"
        ),
    )
    .expect("script");
    storm.start_init(0, "exec sleep 1000");
    storm.start_init(1, &format!("/usr/bin/python3 {}; exec sleep 1000", script.display()));
    let mut killed = KubePod::build("scrape-killed", UID_KILLED, false, 2);
    killed.start_init(0, "exec sleep 1000");
    killed.start_init(1, "exec dd if=/dev/zero of=/dev/null bs=256M count=1");
    let before = agent.metrics();
    let throttled_before = quota.throttled();

    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let scrapers: Vec<_> = (0..SCRAPERS)
        .map(|_| {
            let (stop, answered, failed, addr) = (stop.clone(), answered.clone(), failed.clone(), agent.addr);
            std::thread::spawn(move || {
                use std::io::Write as _;
                let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
                    failed.fetch_add(1, Relaxed);
                    return;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                let mut buf = Vec::new();
                while !stop.load(Relaxed) {
                    let sent = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: sandwatch\r\n\r\n");
                    match sent.and_then(|()| read_response(&mut stream, &mut buf)) {
                        Ok((200, _)) => answered.fetch_add(1, Relaxed),
                        _ => {
                            failed.fetch_add(1, Relaxed);
                            return;
                        }
                    };
                }
            })
        })
        .collect();
    // The flood under way, the storm starts; a few seconds in, the kill.
    std::thread::sleep(Duration::from_secs(2));
    storm.trigger(1);
    std::thread::sleep(Duration::from_secs(3));
    // A client of its own watches for the series; another the kernel's
    // own count of the kill.
    let seen_at = {
        let (addr, stop) = (agent.addr, stop.clone());
        std::thread::spawn(move || -> Option<Instant> {
            let mut stream = std::net::TcpStream::connect(addr).ok()?;
            let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
            let mut buf = Vec::new();
            // Gives up after a minute: the test then fails on its own
            // assertion instead of waiting here for ever.
            let watching = Instant::now();
            while !stop.load(Relaxed) && watching.elapsed() < Duration::from_secs(60) {
                let body = scrape_body(&mut stream, &mut buf).ok()?;
                if init_kills(&body, UID_KILLED) == 1.0 {
                    return Some(Instant::now());
                }
            }
            None
        })
    };
    killed.trigger(1);
    let start = Instant::now();
    while killed.oom_kills(1) < 1 {
        assert!(start.elapsed() < Duration::from_secs(30), "the init was never killed");
        std::thread::sleep(Duration::from_millis(1));
    }
    let killed_at = Instant::now();
    let seen_at = seen_at.join().expect("watcher");
    let delay = seen_at.map(|at| at.saturating_duration_since(killed_at));
    // The storm to its end, the flood on.
    let start = Instant::now();
    while !std::fs::read_to_string(format!("/proc/{}/comm", storm.init_pid(1))).is_ok_and(|c| c.trim() == "sleep") {
        assert!(start.elapsed() < Duration::from_secs(180), "the exit storm never finished");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Relaxed);
    for s in scrapers {
        let _ = s.join();
    }
    let after = agent.metrics();
    let (throttled, throttled_ns) = {
        let (n, t) = quota.throttled();
        (n - throttled_before.0, t - throttled_before.1)
    };
    let delta = |s: &str| series_delta(&after, &before, s);
    let scrapes = delta("sandwatch_http_scrapes_total");
    let renders = delta("sandwatch_http_metrics_renders_total");
    let lost: f64 = ["exit", "oom_kill"]
        .iter()
        .map(|k| delta(&format!("sandwatch_kernel_events_dropped_total{{kind=\"{k}\"}}")))
        .sum::<f64>()
        + ["channel", "decode"]
            .iter()
            .map(|s| delta(&format!("sandwatch_events_dropped_total{{stage=\"{s}\"}}")))
            .sum::<f64>();
    let exits = delta("sandwatch_events_total{kind=\"exit\"}");
    eprintln!(
        "{SCRAPERS} scrapers, agent in 500m: {} answered ({} failed), {scrapes} scrapes served with {renders} renders; \
         throttled in {throttled} periods ({:.1} s); {exits} exits delivered, {lost} events lost; the kill on /metrics \
         {delay:?} after it",
        answered.load(Relaxed),
        failed.load(Relaxed),
        throttled_ns as f64 / 1e9,
    );
    assert_eq!(failed.load(Relaxed), 0, "every scraper answered");
    assert_eq!(lost, 0.0, "no event lost:\n{after}");
    assert!(exits >= f64::from(EXITS), "the storm's exits delivered: {exits}");
    let delay = delay.expect("the kill's series came");
    assert!(delay <= Duration::from_secs(1), "the kill's series came {delay:?} after it");
    assert!(
        renders > 0.0 && renders * 8.0 < scrapes,
        "scrapes share their bodies: {renders} renders for {scrapes} scrapes"
    );
    drop(agent);
    drop(killed);
    drop(storm);
    drop(quota);
}

fn series_delta(after: &str, before: &str, s: &str) -> f64 {
    series(after, s) - series(before, s)
}

const UID_AGENT: &str = "fa1e0000-0008-4e5f-8a9b-0c1d2e3f4a5b";
const UID_NESTER: &str = "fa1e0000-0009-4e5f-8a9b-0c1d2e3f4a5b";
const UID_FOUND: &str = "fa1e0000-000a-4e5f-8a9b-0c1d2e3f4a5b";

/// Sub-cgroups a tenant nests below its container. cgroup v1's memory
/// controller holds 65 535 memory cgroups on the whole machine (this one
/// is shared): 300 000 can only be made on v2, where a tenant's sub-cgroups
/// need no memory controller.
fn nest_size() -> usize {
    if sandwatch::probes::cgroups::CgroupLayout::detect().expect("cgroup layout").is_unified() {
        300_000
    } else {
        30_000
    }
}

/// The agent in a container of its own, in a private cgroup namespace (as
/// a DaemonSet's pod on cgroup v2), restarted after a tenant nested
/// sub-cgroups below its container (30 000 here, the most a shared v1
/// machine's memory controller allows with room for others; 300 000 on
/// v2): it is ready as fast as it was without them (within 1 s), finds its
/// namespace's root without looking at them, and a running pod it
/// discovered is counted and named when it is OOM-killed. (Before: the root was found by a walk of the
/// whole tree, reading `cgroup.procs` in every directory below every
/// container: ready in 1.5 s beside 30 000, against 0.47 s.)
#[test]
fn sub_cgroups_a_tenant_nests_do_not_delay_a_restart_in_a_cgroup_namespace() {
    require_root();
    let agent_pod = KubePod::build("ns-agent", UID_AGENT, false, 2);
    agent_pod.cg.unlimit_memory(&agent_pod.paths[1]);
    let procs = agent_pod.cg.procs_file(&agent_pod.paths[1]);
    let wrapper = format!("echo $$ > {} && exec unshare --cgroup -- \"$0\" \"$@\"", procs.display());
    let start = |label: &str| {
        let started = Instant::now();
        let agent = AgentProcess::start_wrapped(&["sh", "-c", &wrapper], &NO_RUNTIME);
        let ready = started.elapsed();
        let log = agent.log_text();
        let root = log.lines().find_map(|l| l.split("(namespace root ").nth(1)?.split(')').next()).map(str::to_string);
        let looked_at = log
            .lines()
            .find_map(|l| l.split(" cgroups looked at)").next()?.rsplit('(').next()?.parse::<usize>().ok())
            .unwrap_or(usize::MAX);
        eprintln!("{label}: ready in {ready:?}, namespace root {root:?}, {looked_at} cgroups looked at for it");
        (agent, ready, root, looked_at)
    };
    let (agent, quiet_ready, quiet_root, _) = start("without the nest");
    drop(agent);
    let nester = KubePod::build_qos("ns-nester", UID_NESTER, false, 2, "besteffort");
    nester.cg.unlimit_memory(&nester.paths[1]);
    let n = nest_size();
    let made = Instant::now();
    nester.nest_many(1, "s", n);
    let made = made.elapsed();
    let mut found = KubePod::build("ns-found", UID_FOUND, false, 2);
    found.start_init(0, "exec sleep 1000");
    found.start_init(1, "exec dd if=/dev/zero of=/dev/null bs=256M count=1");
    let (agent, ready, root, looked_at) = start(&format!("beside {n} sub-cgroups"));
    eprintln!("{n} sub-cgroups made below a container in {made:?}; the agent restarted beside them in {ready:?} (without: {quiet_ready:?})");
    let expected = format!("{}/kubepods/burstable/pod{UID_AGENT}/{}", agent_pod.cg.path, harness::cid(2));
    assert_eq!(quiet_root.as_deref(), Some(expected.as_str()), "its own container is its namespace's root");
    assert_eq!(root, quiet_root, "the same root found beside the nest");
    assert!(looked_at < 1_000, "{looked_at} cgroups looked at for the namespace's root: none of the nest");
    assert!(
        ready < quiet_ready + Duration::from_secs(1),
        "ready in {ready:?}, against {quiet_ready:?} without the nest"
    );
    found.trigger(1);
    wait_until(&agent, Duration::from_secs(30), "the discovered pod's kill", |t| init_kills(t, UID_FOUND) == 1.0);
    drop(agent);
    drop(found);
    drop(nester);
    drop(agent_pod);
}

const UID_TENANT: [&str; 5] = [
    "fa1e0000-0010-4e5f-8a9b-0c1d2e3f4a5b",
    "fa1e0000-0011-4e5f-8a9b-0c1d2e3f4a5b",
    "fa1e0000-0012-4e5f-8a9b-0c1d2e3f4a5b",
    "fa1e0000-0013-4e5f-8a9b-0c1d2e3f4a5b",
    "fa1e0000-0014-4e5f-8a9b-0c1d2e3f4a5b",
];
const UID_GROWER: &str = "fa1e0000-0015-4e5f-8a9b-0c1d2e3f4a5b";

/// A tmpfs of this test's own, unmounted (its pages freed) on drop.
struct Tmpfs {
    dir: std::path::PathBuf,
}

impl Tmpfs {
    fn mount(dir: std::path::PathBuf) -> Self {
        std::fs::create_dir_all(&dir).expect("tmpfs dir");
        let c = |s: &str| std::ffi::CString::new(s).expect("path");
        let (src, target, fstype) = (c("tmpfs"), c(&dir.display().to_string()), c("tmpfs"));
        // SAFETY: valid NUL-terminated strings for the call.
        let rc = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
        assert_eq!(rc, 0, "mount tmpfs at {}: {}", dir.display(), std::io::Error::last_os_error());
        Self { dir }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if let Ok(target) = std::ffi::CString::new(self.dir.display().to_string()) {
            // SAFETY: a path we mounted.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A tenant's 1 200 containers (5 pods) each hold 62 % of its 2 MiB
/// limit (tmpfs: what no reclaim frees), so that every one is read in
/// full: more than the budget of 64 full reads a second serves once a
/// second. Then a slow grower in another pod (its own namespace: no
/// runtime names them) crosses half its 64 MiB and grows 1 MiB a second
/// until it is OOM-killed: it was warned growing before the kill, and
/// how long before is said. (Before: full reads went first-due-first
/// across the node and trends were fitted over 120 s: each container was
/// read every ~19 s, and no container was ever warned growing.)
#[test]
fn a_thousand_containers_near_their_limits_leave_another_namespaces_grower_warned() {
    require_root();
    const PER_POD: u8 = 240;
    let mut tenants: Vec<KubePod> = UID_TENANT
        .iter()
        .enumerate()
        .map(|(i, uid)| KubePod::build(&format!("near-{i}"), uid, false, PER_POD + 1))
        .collect();
    let shm = Tmpfs::mount(tenants[0].tmp.join("shm"));
    let mut script = String::new();
    for (p, pod) in tenants.iter_mut().enumerate() {
        for c in 1..=usize::from(PER_POD) {
            pod.cg.set_memory_limit(&pod.paths[c], 2 << 20);
            script.push_str(&format!(
                "echo $$ > {} && dd if=/dev/zero of={}/p{p}c{c} bs=64k count=20 2>/dev/null || exit 1\n",
                pod.cg.procs_file(&pod.paths[c]).display(),
                shm.dir.display()
            ));
        }
    }
    let charged = Instant::now();
    let file = tenants[0].tmp.join("charge.sh");
    std::fs::write(&file, &script).expect("script");
    let status = std::process::Command::new("sh").arg(&file).status().expect("sh");
    assert!(status.success(), "charging the containers failed");
    let charged = charged.elapsed();
    let containers = UID_TENANT.len() * usize::from(PER_POD);
    let agent = AgentProcess::start(&NO_RUNTIME);
    // Every container read in full at least once (64 a second).
    let text = wait_until(&agent, Duration::from_secs(60), "the tenant's containers watched", |t| {
        series(t, "sandwatch_memory_pressure_watched") >= containers as f64
    });
    std::thread::sleep(Duration::from_secs(25));
    // The rate is taken between the two reads of the counter.
    let read_before = Instant::now();
    let before = agent.metrics();
    let mut grower = KubePod::build("grower", UID_GROWER, false, 2);
    grower.cg.set_memory_limit(&grower.paths[1], 64 << 20);
    grower.start_init(0, "exec sleep 1000");
    grower.start_init(1, &harness::grower(33, 1));
    let started = Instant::now();
    grower.trigger(1);
    while grower.oom_kills(1) < 1 {
        assert!(started.elapsed() < Duration::from_secs(120), "the grower was never killed");
        std::thread::sleep(Duration::from_millis(200));
    }
    let killed_after = started.elapsed();
    let start = Instant::now();
    let kill = loop {
        let records = agent.records();
        if let Some(k) = records.into_iter().find(|r| r.kind() == "oom_kill" && r.pod_uid() == Some(UID_GROWER)) {
            break k;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the grower's kill has no record");
        std::thread::sleep(Duration::from_millis(200));
    };
    let after = agent.metrics();
    let between = read_before.elapsed();
    let reads = |t: &str| series(t, "sandwatch_memory_pressure_reads_total{kind=\"detail\"}");
    let per_second = (reads(&after) - reads(&before)) / between.as_secs_f64();
    let warned_ms = kill.json.get("warned_ms").and_then(|v| v.as_u64());
    let reasons = kill.json.get("warned_reasons").cloned().unwrap_or_default();
    eprintln!(
        "{containers} containers at 62 % of their limits (charged in {charged:?}; {} watched); full reads {per_second:.0} a \
         second; the grower killed {killed_after:?} after it started, warned {warned_ms:?} ms before, of {reasons}",
        series(&text, "sandwatch_memory_pressure_watched")
    );
    assert!(per_second <= 65.0, "the budget held: {per_second:.0} full reads a second");
    let growing = reasons.as_array().is_some_and(|r| r.iter().any(|r| r == "growing"));
    assert!(
        growing && warned_ms.is_some_and(|ms| ms >= 5_000),
        "warned growing at least 5 s before its kill: {:?}",
        kill.json
    );
    drop(agent);
    drop(grower);
    drop(shm);
    drop(tenants);
}

const UID_HOG: &str = "fa1e0000-0016-4e5f-8a9b-0c1d2e3f4a5b";
const UID_NEAR: &str = "fa1e0000-0017-4e5f-8a9b-0c1d2e3f4a5b";

/// A root process in a container takes every inotify instance root has
/// (they are shared by every root process on the node), and the agent is
/// restarted meanwhile: its failure is counted and said in one log line;
/// a container near its limit is still warned, by the screens' timer;
/// once the instances are let go, the agent watches again by itself, and
/// a limit written is noticed at once. (Before: the failure was said, but
/// counted nowhere and never retried: no limit change was noticed until
/// the agent restarted.) The instances are held for as short a time as
/// the test allows: the node's other root processes share them.
#[test]
fn a_container_holding_every_inotify_instance_costs_the_agent_its_notices_not_its_warnings() {
    require_root();
    let mut near = KubePod::build("inotify-near", UID_NEAR, false, 2);
    near.cg.set_memory_limit(&near.paths[1], 64 << 20);
    near.start_init(0, "exec sleep 1000");
    near.start_init(1, &harness::holder(59));
    near.trigger(1);
    let agent = AgentProcess::start(&NO_RUNTIME);
    drop(agent);
    let mut hog = KubePod::build("inotify-hog", UID_HOG, false, 2);
    hog.cg.unlimit_memory(&hog.paths[1]);
    let held = hog.tmp.join("held");
    let script = hog.tmp.join("hog.py");
    std::fs::write(
        &script,
        "import ctypes, sys, time\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         fds = []\n\
         while True:\n\
         \x20   fd = libc.inotify_init1(0)\n\
         \x20   if fd < 0:\n\
         \x20       break\n\
         \x20   fds.append(fd)\n\
         open(sys.argv[1], 'w').write('%d %d\\n' % (len(fds), ctypes.get_errno()))\n\
         time.sleep(1000)\n",
    )
    .expect("script");
    hog.start_init(0, "exec sleep 1000");
    hog.start_init(1, &format!("exec /usr/bin/python3 {} {}", script.display(), held.display()));
    hog.trigger(1);
    let start = Instant::now();
    let taken = loop {
        if let Some(text) = std::fs::read_to_string(&held).ok().filter(|t| t.ends_with('\n')) {
            break text;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the hog never took the instances");
        std::thread::sleep(Duration::from_millis(20));
    };
    let holding_since = Instant::now();
    // The restart, with no instance left.
    let agent = AgentProcess::start(&NO_RUNTIME);
    let near_limit = format!(
        "sandwatch_pod_memory_pressure{{container=\"\",namespace=\"\",pod=\"\",pod_uid=\"{UID_NEAR}\",reason=\"near_limit\",workload=\"\",workload_kind=\"\"}}"
    );
    let text =
        wait_until(&agent, Duration::from_secs(30), "the near container's warning", |t| series(t, &near_limit) == 1.0);
    let warned_after = holding_since.elapsed();
    let failed = series(&text, "sandwatch_memory_watch_failures_total{reason=\"instances\"}");
    // Let go; the agent asks again by itself.
    // SAFETY: kill(2) of the hog this test started.
    unsafe { libc::kill(hog.init_pid(1) as i32, libc::SIGKILL) };
    let held_for = holding_since.elapsed();
    let start = Instant::now();
    while !agent.log_text().contains("the kernel watches cgroups' memory files again") {
        assert!(start.elapsed() < Duration::from_secs(90), "the agent never watched again:\n{}", agent.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    let rewatched_after = start.elapsed();
    // A limit written now is noticed at once, not on the minute's timer.
    std::thread::sleep(Duration::from_secs(1));
    let before = agent.metrics();
    near.cg.set_memory_limit(&near.paths[1], 80 << 20);
    let noticed = "sandwatch_memory_limit_reads_total{reason=\"kernel_notice\"}";
    let raised = "sandwatch_memory_limit_changes_total{direction=\"raised\",limit=\"memory_max\",scope=\"container\"}";
    let text = wait_until(&agent, Duration::from_secs(10), "the limit's notice", |t| {
        series(t, noticed) > series(&before, noticed) && series(t, raised) > series(&before, raised)
    });
    let log = agent.log_text();
    let said = log.matches("the kernel will not say when cgroups' memory limits or events change").count();
    eprintln!(
        "the hog took {} inotify instances (count, errno); the agent restarted: {failed} watches refused for want of \
         one, said in {said} log line(s); the near container warned {warned_after:?} into the hold ({held_for:?}); \
         watched again {rewatched_after:?} after the hog let go; a limit written then noticed at once",
        taken.trim()
    );
    assert!(taken.trim().ends_with(&format!(" {}", libc::EMFILE)), "the hog stopped at EMFILE: {taken}");
    assert!(failed > 0.0, "the failure was counted:\n{text}");
    assert_eq!(said, 1, "said in one log line:\n{log}");
    drop(agent);
    drop(hog);
    drop(near);
}

const UID_SPINNER: &str = "fa1e0000-0030-4e5f-8a9b-0c1d2e3f4a5b";
const UID_TIMED: &str = "fa1e0000-0031-4e5f-8a9b-0c1d2e3f4a5b";
const UID_FORGED: &str = "fa1e0000-0032-4e5f-8a9b-0c1d2e3f4a5b";

/// The first CPU this test may run on.
fn first_cpu() -> usize {
    // SAFETY: the set is written by sched_getaffinity before it is read.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
        (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set)).expect("a CPU")
    }
}

/// Forks a process into `procs`'s cgroup that sends `pid` SIGALRM with a
/// POSIX timer's code (`SI_TIMER`) through `rt_sigqueueinfo(2)`, as any
/// process may, and exits 0 once sent.
fn forge_timer(procs: &std::path::Path, pid: u32) -> u32 {
    fork_into(procs, |joined| {
        // SAFETY: the siginfo is zeroed then filled; a raw system call.
        let sent = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            info.si_signo = libc::SIGALRM;
            info.si_code = -2; // SI_TIMER
            libc::syscall(libc::SYS_rt_sigqueueinfo, pid as libc::pid_t, libc::SIGALRM, &info) == 0
        };
        if joined && sent {
            0
        } else {
            1
        }
    })
}

/// A POSIX timer fires in an interrupt, on the CPU that set it, in the
/// context of whatever task runs there. One pod's container spins on a
/// CPU; another pod's container init set a timer on that CPU, whose
/// SIGALRM ends it: its end is the kernel's (a timer it set), and the
/// spinning pod is not named. (Before: the end read `other_pod`, the
/// spinner's, whom a tenant could so frame.) The timer's code is one any
/// process may send (`rt_sigqueueinfo`): the spinning pod's other
/// container sends it to a third pod's init, and that end names it,
/// `other_pod`, never the kernel.
#[test]
fn a_timers_signal_is_the_kernels_and_a_forged_one_names_its_sender() {
    require_root();
    let agent = AgentProcess::start(&NO_RUNTIME);
    let cpu = first_cpu();
    let mut spinner = KubePod::build("spinner", UID_SPINNER, false, 3);
    spinner.start_init(0, "exec sleep 1000");
    spinner.trigger(0);
    spinner.start_init(1, "while :; do :; done");
    spinner.trigger(1);
    assert!(pin(spinner.init_pid(1), cpu), "pin the spinner: {}", std::io::Error::last_os_error());
    let mut timed = KubePod::build("timed", UID_TIMED, false, 2);
    timed.start_init(0, "exec sleep 1000");
    timed.trigger(0);
    let mut forged = KubePod::build("forged", UID_FORGED, false, 2);
    forged.start_init(0, "exec sleep 1000");
    forged.trigger(0);
    forged.start_init(1, "exec sleep 1000");
    forged.trigger(1);
    let target = forged.init_pid(1);
    wait_asleep(target, Duration::from_secs(20), "the forged signal's target never slept");

    // The timer, 3 s on: the agent knows every container by then.
    let victim = timed_out(&timed.cg.procs_file(&timed.paths[1]), Some(cpu), 3);
    std::thread::sleep(Duration::from_secs(1));
    let forger = forge_timer(&spinner.cg.procs_file(&spinner.paths[2]), target);
    assert_eq!(reap(forger), 0, "rt_sigqueueinfo with SI_TIMER was refused");
    let status = reap(victim);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGALRM,
        "the timer's SIGALRM ended it: {status:#x}"
    );
    let all = |t: &str, uid: &str| -> f64 {
        ["oom_killer", "kernel", "same_container", "same_pod", "other_pod", "runtime", "host", "unknown"]
            .iter()
            .map(|s| ends_by(t, uid, s))
            .sum()
    };
    let text = wait_until(&agent, Duration::from_secs(30), "both ends", |t| {
        all(t, UID_TIMED) >= 1.0 && all(t, UID_FORGED) >= 1.0
    });
    assert_eq!(ends_by(&text, UID_TIMED, "kernel"), 1.0, "the timer's end is the kernel's:\n{text}");
    assert_eq!(ends_by(&text, UID_FORGED, "other_pod"), 1.0, "the forged timer's end names its pod:\n{text}");
    drop(agent);
    drop(forged);
    drop(timed);
    drop(spinner);
}

const UID_ARMED: &str = "fa1e0000-0035-4e5f-8a9b-0c1d2e3f4a5b";
/// fcntl(2)'s F_SETSIG on Linux (not in libc for every target).
const F_SETSIG: libc::c_int = 10;

/// Forks a process into `procs`'s cgroup that arms a pipe against `pid`
/// as any process may: `pid` its owner (`F_SETOWN`), `sig` its signal
/// (`F_SETSIG`; 0: plain SIGIO), `O_ASYNC`; then writes to it, which has
/// the kernel send the owner `sig`. Exits 0 once written.
fn arm_pipe(procs: &std::path::Path, pid: u32, sig: libc::c_int) -> u32 {
    fork_into(procs, |joined| {
        let mut fds = [0; 2];
        // SAFETY: system calls on descriptors this child made.
        let armed = unsafe {
            libc::pipe(fds.as_mut_ptr()) == 0
                && libc::fcntl(fds[0], libc::F_SETOWN, pid as libc::c_int) == 0
                && libc::fcntl(fds[0], F_SETSIG, sig) == 0
                && libc::fcntl(fds[0], libc::F_SETFL, libc::O_ASYNC | libc::O_NONBLOCK) == 0
                && libc::write(fds[1], b"x".as_ptr().cast(), 1) == 1
        };
        if joined && armed {
            0
        } else {
            1
        }
    })
}

/// A tenant's container arms pipes against its neighbours' inits, as any
/// process of the pod may: one with SIGKILL as its signal, one with plain
/// SIGIO (whose default ends a process). The kernel sends each in the
/// writer's task, with a `POLL_IN` code or its private siginfo. Who chose
/// the target is not seen, and a writer may be anyone (the runtime on a
/// container's stdin): both ends read `unknown`, never `kernel`. (Before:
/// `kernel`, a verdict any tenant could forge.)
#[test]
fn a_files_io_notice_ends_a_neighbour_as_unknown_never_the_kernels() {
    require_root();
    let agent = AgentProcess::start(&NO_RUNTIME);
    let mut pod = KubePod::build("armed", UID_ARMED, false, 4);
    pod.start_init(0, "exec sleep 1000");
    pod.trigger(0);
    let waiter =
        |i: usize| fork_into(&pod.cg.procs_file(&pod.paths[i]), |joined| if joined { pause_forever() } else { 1 });
    let (killed, polled) = (waiter(1), waiter(2));
    // Each in pause(2), and the agent knows both containers by then.
    let paused = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('S'))
    };
    let start = Instant::now();
    while !(paused(killed) && paused(polled)) {
        assert!(start.elapsed() < Duration::from_secs(20), "the targets never paused");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
    let attacker = pod.cg.procs_file(&pod.paths[3]);
    assert_eq!(reap(arm_pipe(&attacker, killed, libc::SIGKILL)), 0, "arming a pipe with SIGKILL was refused");
    assert_eq!(reap(arm_pipe(&attacker, polled, 0)), 0, "arming a pipe with SIGIO was refused");
    for (pid, sig) in [(killed, libc::SIGKILL), (polled, libc::SIGIO)] {
        let status = reap(pid);
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == sig, "{pid} ended by {sig}: {status:#x}");
    }
    let all = |t: &str| -> f64 {
        ["oom_killer", "kernel", "same_container", "same_pod", "other_pod", "runtime", "host", "unknown"]
            .iter()
            .map(|s| ends_by(t, UID_ARMED, s))
            .sum()
    };
    let text = wait_until(&agent, Duration::from_secs(30), "both ends", |t| all(t) >= 2.0);
    assert_eq!(ends_by(&text, UID_ARMED, "kernel"), 0.0, "an I/O notice is no verdict of the kernel's:\n{text}");
    assert_eq!(ends_by(&text, UID_ARMED, "unknown"), 2.0, "{text}");
    drop(agent);
    drop(pod);
}

const UID_TICKER: &str = "fa1e0000-0033-4e5f-8a9b-0c1d2e3f4a5b";
const UID_TICKED_OFF: &str = "fa1e0000-0034-4e5f-8a9b-0c1d2e3f4a5b";

extern "C" fn ignore_signal(_: libc::c_int) {}

/// Forks a process into `procs`'s cgroup that handles SIGALRM and has
/// `setitimer(2)` send it one every millisecond, and waits for them until
/// it is killed (exit 1 if it could not set the timer).
fn ticker(procs: &std::path::Path) -> u32 {
    fork_into(procs, |joined| {
        let ms = libc::timeval { tv_sec: 0, tv_usec: 1000 };
        let every = libc::itimerval { it_interval: ms, it_value: ms };
        // SAFETY: the sigaction is zeroed then filled; system calls on
        // memory this child owns.
        let set = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigaction(libc::SIGALRM, &action, std::ptr::null_mut()) == 0
                && libc::setitimer(libc::ITIMER_REAL, &every, std::ptr::null_mut()) == 0
        };
        if !(joined && set) {
            return 1;
        }
        pause_forever()
    })
}

/// A pod's process has `setitimer` send it a SIGALRM every millisecond,
/// which it handles. The timer fires in an interrupt, mostly on an idle
/// CPU, whose current task is the host's idle task: the kernel's notice
/// (its private siginfo) read as a host's request. With the agent stopped
/// for 3 s (~3 000 notices), a host process kills another pod's container
/// init: its end names the host. (Before: the notices were streamed as
/// the host's, into the ring's last eighth kept for unowned senders; the
/// ring filled and the kill's sender read `unknown`.)
#[test]
fn a_pods_own_timers_on_idle_cpus_leave_a_host_kill_its_sender() {
    require_root();
    let agent = AgentProcess::start(&NO_RUNTIME);
    let mut ticking = KubePod::build("ticking", UID_TICKER, false, 2);
    ticking.start_init(0, "exec sleep 1000");
    ticking.trigger(0);
    let mut other = KubePod::build("ticked-off", UID_TICKED_OFF, false, 2);
    other.start_init(0, "exec sleep 1000");
    other.trigger(0);
    other.start_init(1, "exec sleep 1000");
    other.trigger(1);
    let victim = other.init_pid(1);
    wait_asleep(victim, Duration::from_secs(20), "the victim never slept");
    std::thread::sleep(Duration::from_secs(2));
    let before = agent.metrics();
    agent.suspend();
    let tick = ticker(&ticking.cg.procs_file(&ticking.paths[1]));
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: kill(2) of processes this test started.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGKILL) }, 0);
    std::thread::sleep(Duration::from_millis(300));
    agent.signal(libc::SIGCONT);
    // SAFETY: as above.
    unsafe { libc::kill(tick as i32, libc::SIGKILL) };
    assert_eq!(reap(tick) & 0x7f, libc::SIGKILL, "the ticker ran until killed");
    let ended = |t: &str, sender: &str| ends_by(t, UID_TICKED_OFF, sender);
    let text = wait_until(&agent, Duration::from_secs(30), "the other pod's end", |t| {
        ended(t, "host") + ended(t, "unknown") >= 1.0
    });
    let lost = |reason: &str| {
        let s = format!("sandwatch_kernel_events_lost_total{{kind=\"signal\",reason=\"{reason}\"}}");
        series(&text, &s) - series(&before, &s)
    };
    eprintln!(
        "3 s of a pod's own 1 ms timer, the agent stopped: {} signal records refused for the reserve, {} past \
         the pod's own share, {} to a full ring; the host's kill of another pod's init read {}",
        lost("reserve"),
        lost("container_share"),
        lost("ring_full"),
        if ended(&text, "host") >= 1.0 { "host" } else { "unknown" }
    );
    assert_eq!(ended(&text, "host"), 1.0, "the host's kill named:\n{text}");
    assert_eq!(lost("ring_full"), 0.0, "the ring never filled:\n{text}");
    drop(agent);
    drop(other);
    drop(ticking);
}
