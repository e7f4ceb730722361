//! What a tenant can do from inside its pod, done as a tenant would do it,
//! against the agent binary: name its processes like the container
//! runtime, name a container's init `pause`, flood the node with exits.
//! None of it may forge, hide or scramble what the agent reports. (Hostile
//! names on the operator's terminal: `events.rs`.)

mod harness;

use std::time::{Duration, Instant};

use harness::{
    containerd::{remove_in_all_hierarchies, Containerd, Runtime, RuntimePod},
    cri::Cri,
    metric, require_root, AgentProcess, KubePod,
};

const UID: &str = "7a1b2c3d-0001-4e5f-8a9b-0c1d2e3f4a5b";
const UID_PAUSE: &str = "7a1b2c3d-0002-4e5f-8a9b-0c1d2e3f4a5b";
const UID_PAUSE_CRI: &str = "7a1b2c3d-0003-4e5f-8a9b-0c1d2e3f4a5b";

fn wait_for(agent: &AgentProcess, series: &str, ok: impl Fn(f64) -> bool) -> String {
    let start = Instant::now();
    loop {
        let text = agent.metrics();
        if metric(&text, series).is_some_and(&ok) {
            return text;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{series} never satisfied:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A pod process that renames itself `containerd` and exits with Go's
/// panic status is no runtime crash (no count, no record: no alert), and
/// one that lives on under that name keeps `sandwatch_runtime_up` at 0
/// while no runtime runs. (Before: a `panic` crash counted, and the decoy
/// kept the runtime up.)
#[test]
fn a_pod_process_named_containerd_is_not_the_runtime() {
    require_root();
    let mut pod = KubePod::build("tenant-runtime", UID, false, 3);
    pod.start_init(0, "exec sleep 1000");
    // The decoy: the shell renames itself and stays.
    pod.start_init(1, "printf containerd > /proc/self/comm; while :; do sleep 1; done");
    pod.trigger(1);
    let decoy = pod.init_pid(1);
    let start = Instant::now();
    while std::fs::read_to_string(format!("/proc/{decoy}/comm")).unwrap_or_default().trim() != "containerd" {
        assert!(start.elapsed() < Duration::from_secs(5), "the decoy never renamed itself");
        std::thread::sleep(Duration::from_millis(20));
    }
    let agent = AgentProcess::start(&["--containerd-socket", "", "--cri-socket", ""]);
    let up = "sandwatch_runtime_up{runtime=\"containerd\"}";
    assert_eq!(metric(&agent.metrics(), up), Some(0.0), "a decoy in a pod is no runtime");

    // The forger: renames itself, then exits 2 as a Go panic does.
    pod.start_init(2, "printf containerd > /proc/self/comm; exit 2");
    pod.trigger(2);
    let text =
        wait_for(&agent, "sandwatch_task_exits_total{outcome=\"handled\",role=\"container_init\"}", |v| v >= 1.0);
    // The exit was seen (as the container's init's); a moment more for a
    // wrong count to show.
    std::thread::sleep(Duration::from_millis(500));
    let text = format!("{text}{}", agent.metrics());
    let crashes = "sandwatch_runtime_crashes_total{reason=\"panic\",runtime=\"containerd\"}";
    assert!(text.lines().filter(|l| l.starts_with(crashes)).all(|l| l.ends_with(" 0")), "{text}");
    assert_eq!(metric(&agent.metrics(), up), Some(0.0));
    let records = agent.records();
    assert!(!records.iter().any(|r| r.kind().starts_with("runtime_")), "{records:#?}");
    assert!(!agent.log_text().contains("container runtime containerd"), "{}", agent.log_text());
    drop(agent);
    drop(pod);
}

/// The pod's real sandbox lives; a second container's init runs a binary
/// named `pause` and is OOM-killed: a container init's kill, no sandbox
/// death, and the real sandbox is still the sandbox (its own death, later,
/// is one). Without runtime data: the name alone must not promote it.
/// (Before: one sandbox death with role `sandbox`, the real sandbox demoted.)
#[test]
fn a_workload_init_named_pause_is_no_sandbox_without_runtime_data() {
    require_root();
    let agent = AgentProcess::start(&["--containerd-socket", "", "--cri-socket", ""]);
    let mut pod = KubePod::build("tenant-pause", UID_PAUSE, false, 2);
    let pause = pod.pause_binary();
    pod.start_init(0, "exec sleep 1000");
    pod.start_init(1, &format!("exec {pause} if=/dev/zero of=/dev/null bs=256M count=1"));
    pod.trigger(1);
    let init = "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_init\"}";
    wait_for(&agent, init, |v| v >= 1.0);
    std::thread::sleep(Duration::from_millis(500));
    let text = agent.metrics();
    assert_eq!(
        metric(&text, "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"sandbox\"}"),
        Some(0.0),
        "{text}"
    );
    for cause in ["oom", "signal", "exit"] {
        assert_eq!(metric(&text, &format!("sandwatch_sandbox_deaths_total{{cause=\"{cause}\"}}")), Some(0.0), "{text}");
    }
    assert!(!agent.records().iter().any(|r| r.kind() == "sandbox_death"));
    // The real sandbox's init dies: that is the sandbox death.
    let sandbox = pod.init_pid(0);
    // SAFETY: kill(2) of the sandbox init this test started.
    unsafe { libc::kill(sandbox as i32, libc::SIGKILL) };
    wait_for(&agent, "sandwatch_sandbox_deaths_total{cause=\"signal\"}", |v| v == 1.0);
    drop(pod);
}

/// The same through a real CRI (containerd 1.6, Debian's): the workload's
/// init renames itself `pause` and is OOM-killed while the sandbox lives.
/// The runtime names the sandbox, so no name does.
#[test]
fn a_workload_init_named_pause_is_no_sandbox_with_the_runtimes_data() {
    require_root();
    let cgroups = RuntimePod::new("tenant-pause-cri", UID_PAUSE_CRI);
    let ctrd = Containerd::start_cri(&Runtime::system(), "tenant-pause");
    let socket = ctrd.socket.display().to_string();
    let agent =
        AgentProcess::start(&["--containerd-socket", &socket, "--cri-socket", &socket, "--cri-refresh-seconds", "1"]);
    wait_for(&agent, "sandwatch_runtime_metadata_up", |v| v == 1.0);
    let mut cri = Cri::connect(&ctrd.socket, ctrd.dir.join("pods"));
    let pod = cri.run_pod("web", "shop", UID_PAUSE_CRI, &cgroups.pod_path);
    // The shell is the init: it renames itself and then holds the memory
    // itself, so the OOM killer takes it.
    cri.run_container(
        &pod,
        "hog",
        Some(32 << 20),
        "printf pause > /proc/self/comm; sleep 1; x=$(head -c 67108864 /dev/zero | tr '\\0' a); sleep 100",
    );
    // The container's own limit, whatever runc set beside it (memory +
    // swap equal to memory on v1): the kernel's counters at the kill say so.
    let series = format!(
        "sandwatch_pod_oom_kills_total{{cause=\"anon\",container=\"hog\",limit=\"container\",namespace=\"shop\",pod=\"web\",pod_uid=\"{UID_PAUSE_CRI}\",victim_role=\"container_init\",warned=\"false\",workload=\"web\",workload_kind=\"Pod\"}}"
    );
    let start = Instant::now();
    while metric(&agent.metrics(), &series) != Some(1.0) {
        assert!(start.elapsed() < Duration::from_secs(20), "{series} never 1:\n{}", agent.metrics());
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let text = agent.metrics();
    for cause in ["oom", "signal", "exit"] {
        assert_eq!(metric(&text, &format!("sandwatch_sandbox_deaths_total{{cause=\"{cause}\"}}")), Some(0.0), "{text}");
    }
    let records = agent.records();
    let kill = records.iter().find(|r| r.kind() == "oom_kill" && r.container() == Some("hog"));
    assert_eq!(kill.and_then(|r| r.comm()), Some("pause"), "{records:#?}");
    assert_eq!(kill.and_then(|r| r.victim_role()), Some("container_init"));
    // The sandbox's own death is the one.
    let sandbox_pid = ctrd.task_pid(&pod.id).expect("sandbox task");
    // SAFETY: kill(2) of the sandbox process this test's runtime started.
    unsafe { libc::kill(sandbox_pid as i32, libc::SIGKILL) };
    wait_for(&agent, "sandwatch_sandbox_deaths_total{cause=\"signal\"}", |v| v == 1.0);
    drop(cri);
    drop(ctrd);
    remove_in_all_hierarchies(&format!("{}/kubepods", cgroups.cg.path));
}

/// A pod floods the node with exits, past the exit ring's capacity, while
/// another container's processes are OOM-killed in the same seconds (the
/// agent stopped meanwhile, as a busy one falls behind): exits are lost,
/// counted; no OOM kill is, each counted with its role. (Before: OOM kills
/// shared the exits' ring and were lost with them.)
#[test]
fn an_exit_flood_loses_exits_counted_but_no_oom_kill() {
    require_root();
    let agent = AgentProcess::start(&["--ring-buffer-bytes", "64K", "--containerd-socket", "", "--cri-socket", ""]);
    let mut pod = KubePod::build("tenant-flood", UID, false, 3);
    pod.start_init(0, "exec sleep 1000");
    pod.start_init(1, "i=0; while [ $i -lt 8000 ]; do /bin/true; i=$((i+1)); done; exec sleep 1000");
    pod.start_init(
        2,
        "for i in 1 2 3 4 5 6 7 8; do dd if=/dev/zero of=/dev/null bs=64M count=1; done; exec sleep 1000",
    );
    let before = agent.metrics();
    let series = |text: &str, s: &str| metric(text, s).unwrap_or(0.0);
    agent.suspend();
    pod.trigger(1);
    // By then the flood has filled the exits' ring (64 KiB: ~800 exits).
    std::thread::sleep(Duration::from_millis(1500));
    pod.trigger(2);
    // Until both are done: the flooder's last exit and the eighth kill.
    let start = Instant::now();
    while pod.oom_kills(2) < 8
        || !std::fs::read_to_string(format!("/proc/{}/comm", pod.init_pid(1))).is_ok_and(|c| c.trim() == "sleep")
    {
        assert!(start.elapsed() < Duration::from_secs(60), "the flood or the kills never finished");
        std::thread::sleep(Duration::from_millis(100));
    }
    agent.signal(libc::SIGCONT);
    let kills = pod.oom_kills(2) as f64;
    let child = "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_child\"}";
    let text = wait_for(&agent, child, |v| v >= kills);
    let dropped = |kind: &str| {
        let s = format!("sandwatch_kernel_events_dropped_total{{kind=\"{kind}\"}}");
        series(&text, &s) - series(&before, &s)
    };
    assert!(dropped("exit") > 0.0, "the flood overflowed the exits' ring: {text}");
    assert_eq!(dropped("oom_kill"), 0.0, "no OOM kill lost: {text}");
    assert_eq!(dropped("cgroup_attach"), 0.0);
    assert_eq!(series(&text, child) - series(&before, child), kills, "every kill counted, as a child's");
    drop(pod);
}

const UID_START: &str = "7a1b2c3d-0004-4e5f-8a9b-0c1d2e3f4a5b";
const UID_AFTER: &str = "7a1b2c3d-0005-4e5f-8a9b-0c1d2e3f4a5b";

/// The pids in container `i`'s cgroup.
fn procs(pod: &KubePod, i: usize) -> Vec<u32> {
    std::fs::read_to_string(pod.cg.procs_file(&pod.paths[i]))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A sandbox started the way youki starts one, its processes named as
/// youki names them: the first joins the cgroup, hands over to
/// `youki:[2:INIT]` and exits 0; the OOM killer takes the init-to-be
/// before it runs pause. One sandbox death, cause `oom`, and the kill's
/// role `sandbox`, though no name is runc's. (Before: the hand-over counted
/// as the sandbox's death, cause `exit`, and the OOM kill as none.)
#[test]
fn a_start_is_recognised_by_place_not_by_the_runtimes_names() {
    require_root();
    let agent = AgentProcess::start(&["--containerd-socket", "", "--cri-socket", ""]);
    let mut pod = KubePod::build("tenant-start", UID_START, false, 1);
    // The init-to-be holds the memory itself (the shell that reads the
    // command substitution), so the OOM killer takes it.
    pod.start_init(
        0,
        "printf 'youki:[1:INTER]' > /proc/self/comm; \
         (printf 'youki:[2:INIT]' > /proc/self/comm; x=$(head -c 67108864 /dev/zero | tr '\\0' a); sleep 100) & exit 0",
    );
    pod.trigger(0);
    let text = wait_for(&agent, "sandwatch_sandbox_deaths_total{cause=\"oom\"}", |v| v >= 1.0);
    std::thread::sleep(Duration::from_millis(500));
    let text = format!("{text}{}", agent.metrics());
    assert_eq!(metric(&agent.metrics(), "sandwatch_sandbox_deaths_total{cause=\"oom\"}"), Some(1.0), "{text}");
    assert_eq!(metric(&agent.metrics(), "sandwatch_sandbox_deaths_total{cause=\"exit\"}"), Some(0.0), "{text}");
    let records = agent.records();
    let kill = records.iter().find(|r| r.kind() == "oom_kill");
    assert_eq!(kill.and_then(|r| r.comm()), Some("youki:[2:INIT]"), "{records:#?}");
    assert_eq!(kill.and_then(|r| r.victim_role()), Some("sandbox"));
    drop(pod);
}

/// Without the runtime's word a runc-started container's init is never
/// named, and its start ends after ten seconds. Then a tenant's processes
/// in its running container named `pause` (killed) and `runc:[2:INIT]`
/// (exiting 1) are children: no sandbox death, no container init exit. The
/// sandbox's own process, whatever its name, ends as the sandbox's death.
/// (Before: a forged sandbox death and a forged init exit, and the real
/// sandbox death missed.)
#[test]
fn after_the_start_no_name_stands_for_the_init() {
    require_root();
    let agent = AgentProcess::start(&["--containerd-socket", "", "--cri-socket", ""]);
    let mut pod = KubePod::build("tenant-after", UID_AFTER, false, 2);
    // Both start as runc does: the first process hands over and exits 0.
    pod.start_init(0, "printf 'runc:[0:PARENT]' > /proc/self/comm; (exec sleep 1000) & exit 0");
    pod.start_init(
        1,
        "printf 'runc:[0:PARENT]' > /proc/self/comm; (exec sh -c 'sleep 11; \
         sh -c \"printf pause > /proc/self/comm; kill -KILL \\$\\$\"; \
         sh -c \"printf \\\"runc:[2:INIT]\\\" > /proc/self/comm; exit 1\"; exec sleep 1000') & exit 0",
    );
    pod.trigger(0);
    pod.trigger(1);
    let init = "sandwatch_task_exits_total{outcome=\"handled\",role=\"container_init\"}";
    let child = "sandwatch_task_exits_total{outcome=\"handled\",role=\"container_child\"}";
    // The two hand-overs, then (after the window) the tenant's two.
    let text = wait_for(&agent, child, |v| v >= 4.0);
    std::thread::sleep(Duration::from_millis(500));
    let text = format!("{text}{}", agent.metrics());
    for cause in ["oom", "signal", "exit"] {
        let deaths = metric(&agent.metrics(), &format!("sandwatch_sandbox_deaths_total{{cause=\"{cause}\"}}"));
        assert_eq!(deaths, Some(0.0), "{text}");
    }
    assert_eq!(metric(&agent.metrics(), init), Some(0.0), "{text}");
    // The sandbox's process: the only one in its cgroup.
    let sandbox = procs(&pod, 0);
    assert_eq!(sandbox.len(), 1, "{sandbox:?}");
    // SAFETY: kill(2) of the sandbox process this test started.
    unsafe { libc::kill(sandbox[0] as i32, libc::SIGKILL) };
    wait_for(&agent, "sandwatch_sandbox_deaths_total{cause=\"signal\"}", |v| v == 1.0);
    drop(pod);
}
