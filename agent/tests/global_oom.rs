//! A global OOM: the machine itself out of memory, no cgroup's limit hit,
//! the kubelet's eviction too slow. It takes the machine's memory, so it
//! runs only in the VM kernels (`cargo xtask vm`, feature `vm`), booted
//! with little of it: a pod's container with no limit allocates past what
//! the VM has, the OOM killer takes one of its processes, and the agent
//! must say `node` and `global`, as the kernel's own report does
//! (`CONSTRAINT_NONE`).

mod harness;

use std::time::Duration;

use sandwatch::{
    node_host::NodeHost,
    os::boottime_ns,
    pipeline::Pipeline,
    watchdog::{self, Finding, OomConstraint, OomLimit, Watchdog},
};
use tokio_util::sync::CancellationToken;

use harness::{kernel_oom_lines, kernel_oom_report, require_root, KubePod};

const UID: &str = "9c1d2e3f-0001-4a5b-8c6d-7e8f9a0b1c2d";

#[tokio::test(flavor = "current_thread")]
async fn a_global_oom_of_a_pods_process_reads_node_and_global() {
    require_root();
    let total = harness::mem_total();
    assert!(total < 8 << 30, "a global OOM only in a VM booted with little memory; this machine has {total} bytes");
    let settings = harness::settings(&[]);
    let mut pipeline = Pipeline::start(&settings.probes, settings.channel_capacity, CancellationToken::new())
        .unwrap_or_else(|e| panic!("pipeline: {e}"));
    let core = watchdog::Settings { runtime: None, ..settings.watchdog };
    let mut watchdog = Watchdog::new(NodeHost::new(&mut pipeline), core);
    let _ = watchdog.discover(boottime_ns()).count();

    let mut pod = KubePod::build("global", UID, false, 2);
    pod.cg.unlimit_memory(&pod.paths[1]);
    // Two allocators of 70 % of the machine each, at once: each allocation
    // passes the kernel's overcommit check, both together do not fit.
    let each = total / 10 * 7;
    pod.start_init(
        1,
        &format!(
            "dd if=/dev/zero of=/dev/null bs={each} count=1 & exec dd if=/dev/zero of=/dev/null bs={each} count=1"
        ),
    );
    // The agent learns the pod (and tracks its cgroups) from the kernel's
    // events before the allocators start, as it does a real pod's long
    // before its containers run: where the kernel names a victim by the
    // fork table (5.10), a fork in a cgroup not yet tracked is not in it.
    let settle = tokio::time::Instant::now() + Duration::from_millis(500);
    while let Ok(Some(event)) = tokio::time::timeout_at(settle, pipeline.events.next()).await {
        let _ = watchdog.on_kernel(&event, boottime_ns()).count();
    }
    pod.trigger(1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    // Kills of anything else, and the allocators' ends, for the message
    // if the pod's kill never comes.
    let mut seen = Vec::new();
    let kill = loop {
        let Ok(event) = tokio::time::timeout_at(deadline, pipeline.events.next()).await else {
            panic!(
                "no OOM kill of the pod's allocators within 120 s; other findings: {seen:#?}; the kernel's log: {:#?}",
                kernel_oom_lines()
            )
        };
        let event = event.expect("the event stream");
        let mut kill = None;
        for finding in watchdog.on_kernel(&event, boottime_ns()) {
            match finding {
                Finding::OomKill(k) if k.report.pod.as_ref().is_some_and(|p| p.pod_uid == UID) => kill = Some(k),
                Finding::OomKill(k) => seen.push(format!("{k:?}")),
                Finding::ContainerExit(e) if e.report.pod.as_ref().is_some_and(|p| p.pod_uid == UID) => {
                    seen.push(format!("{e:?}"))
                }
                _ => {}
            }
        }
        if let Some(kill) = kill {
            break kill;
        }
    };
    let fired = kill.explained.fired;
    assert_eq!((fired.limit, fired.constraint), (OomLimit::Node, OomConstraint::Global), "{kill:?}");
    let (constraint, memcg) = kernel_oom_report(kill.report.victim.pid).expect("the kernel's report of the kill");
    assert_eq!((constraint.as_str(), memcg.as_str()), ("CONSTRAINT_NONE", ""), "no cgroup's limit, as the kernel says");
    drop(pod);
}
