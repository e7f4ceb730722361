//! What a tenant can do from inside its pod, done as a tenant would do it,
//! against the agent binary: name its processes like the container
//! runtime, name a container's init `pause`, flood the node with exits.
//! None of it may forge, hide or scramble what the agent reports. (Hostile
//! names on the operator's terminal: `events.rs`.)

mod harness;

use std::time::{Duration, Instant};

use harness::{metric, require_root, AgentProcess, KubePod};

const UID: &str = "7a1b2c3d-0001-4e5f-8a9b-0c1d2e3f4a5b";

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
