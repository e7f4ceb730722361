//! Registry and dispatcher behaviour, including the containerd #12038
//! sequence and random interleavings of everything that can go wrong.

use proptest::prelude::*;

use super::{
    dispatch::{oom_kill, runtime_exit, task_exit},
    registry::{EvictionKind, SandboxState},
    *,
};
use crate::events::ExitStatus;

const SEC: u64 = 1_000_000_000;

fn uid(n: u32) -> String {
    format!("{n:08x}-0000-4000-8000-000000000000")
}

fn cid(n: u32) -> String {
    format!("{n:064x}")
}

fn pod_path(pod: u32) -> String {
    format!("/test/kubepods/burstable/pod{}", uid(pod))
}

fn container_path(pod: u32, c: u32) -> String {
    format!("{}/{}", pod_path(pod), cid(c))
}

fn exit(key: TaskKey, cgroup: u64, status: ExitStatus, comm: &str, ts: u64) -> TaskExit {
    TaskExit {
        source: Source::Kernel,
        key,
        cgroup_id: Some(cgroup),
        untracked: false,
        status,
        comm: comm.to_string(),
        ts_ns: ts,
    }
}

fn oom(key: TaskKey, cgroup: u64, comm: &str, ts: u64) -> OomVictim {
    OomVictim {
        key,
        cgroup_id: Some(cgroup),
        untracked: false,
        comm: comm.to_string(),
        trigger: Trigger { pid: key.pid, tgid: key.pid, comm: comm.to_string(), cgroup_id: cgroup },
        ts_ns: ts,
    }
}

const KILLED: ExitStatus = ExitStatus::Signal { signo: 9, core_dumped: false };

/// A pod (cgroup 100) with a sandbox container (101, init pid 10 "pause")
/// and one workload container (102, init pid 20).
fn pod_with_two_containers() -> PodRegistry {
    let mut reg = PodRegistry::default();
    reg.cgroup_created(100, &pod_path(1));
    reg.cgroup_created(101, &container_path(1, 1));
    reg.task_attached(101, TaskKey::new(10, 5 * SEC), "runc:[2:INIT]");
    reg.cgroup_created(102, &container_path(1, 2));
    reg.task_attached(102, TaskKey::new(20, 6 * SEC), "runc:[2:INIT]");
    // Running, as the start-up scan finds it.
    reg.found_running();
    reg
}

#[test]
fn containerd_12038_late_sandbox_exit_is_counted_not_fatal() {
    // 1. A pod is scheduled; its pause container starts.
    let mut reg = pod_with_two_containers();
    let pause = TaskKey::new(10, 5 * SEC);
    // 2. Memory pressure: the OOM killer kills the pause process.
    let r = oom_kill(&mut reg, &oom(pause, 101, "pause", 10 * SEC), 10 * SEC);
    assert_eq!((r.outcome, r.role), (Outcome::Handled, TaskRole::Sandbox));
    // 3. The start failed; teardown clears the sandbox's container but the
    //    sandbox stays in the store.
    reg.cgroup_removed(101, 11 * SEC);
    assert!(reg.sandbox(&uid(1)).is_some_and(|s| s.sandbox_container.is_none()));
    // 4. The TaskExit of step 2 is handled only now.
    let r = task_exit(&mut reg, &exit(pause, 101, KILLED, "pause", 10 * SEC), 12 * SEC);
    assert_eq!(r.outcome, Outcome::Late(LateReason::ContainerMissing));
    assert_eq!(r.delay_ns, 2 * SEC);
    assert_eq!(r.pod.as_ref().map(|p| p.pod_uid.as_str()), Some(uid(1).as_str()));
    // Nothing else disturbed: the workload container and its init are there.
    let s = reg.sandbox(&uid(1)).expect("sandbox still stored");
    assert!(s.container(&cid(2)).is_some_and(|c| c.init.is_some()));
    // Once the pod itself is gone, a later exit names that instead.
    reg.cgroup_removed(102, 13 * SEC);
    reg.cgroup_removed(100, 13 * SEC);
    let r = task_exit(&mut reg, &exit(pause, 101, KILLED, "pause", 10 * SEC), 14 * SEC);
    assert_eq!(r.outcome, Outcome::Late(LateReason::SandboxTornDown));
    assert!(reg.holds_no_pods());
}

/// runc's bootstrap joins the cgroup first and exits: not a sandbox death.
/// The runtime's TaskStart then names the real init, whose exit is one.
#[test]
fn runc_bootstrap_exit_is_not_an_init_exit_and_task_start_names_the_init() {
    let mut reg = PodRegistry::default();
    reg.cgroup_created(100, &pod_path(1));
    reg.cgroup_created(101, &container_path(1, 1));
    let parent = TaskKey::new(10, 5 * SEC);
    reg.task_attached(101, parent, "runc:[0:PARENT]");
    let r = task_exit(&mut reg, &exit(parent, 101, ExitStatus::Code(0), "runc:[0:PARENT]", 6 * SEC), 6 * SEC);
    assert_eq!((r.outcome, r.role, r.sandbox_death), (Outcome::Handled, TaskRole::ContainerChild, None));
    reg.runtime_started(&cid(1), 12);
    let init = TaskKey::new(12, 5 * SEC);
    let r = task_exit(&mut reg, &exit(init, 101, KILLED, "sleep", 9 * SEC), 9 * SEC);
    assert_eq!((r.outcome, r.role), (Outcome::Handled, TaskRole::Sandbox));
    assert_eq!(r.sandbox_death, Some(DeathCause::Signal));
}

/// A pod (cgroup 100) whose sandbox container (101) is being started by
/// runc: its bootstrap (pid 10) is the first task in the cgroup, named
/// `runc` until nsexec renames it `runc:[0:PARENT]`.
fn sandbox_starting() -> PodRegistry {
    sandbox_starting_as("runc")
}

fn sandbox_starting_as(comm: &str) -> PodRegistry {
    let mut reg = PodRegistry::default();
    reg.cgroup_created(100, &pod_path(1));
    reg.cgroup_created(101, &container_path(1, 1));
    reg.task_attached(101, TaskKey::new(10, 5 * SEC), comm);
    reg
}

/// The #12038 reproduction: the OOM killer takes runc's init-to-be of a
/// sandbox before TaskStart could name it. That is the sandbox's death,
/// once, whichever order the bootstrap exits come in.
#[test]
fn sandbox_killed_while_it_starts_is_a_sandbox_death_once() {
    let (parent, child, init) = (TaskKey::new(10, 5 * SEC), TaskKey::new(11, 5 * SEC), TaskKey::new(12, 5 * SEC));
    for (parent_first, attached_as) in
        [(true, "runc"), (false, "runc"), (true, "runc:[0:PARENT]"), (false, "runc:[0:PARENT]")]
    {
        let mut reg = sandbox_starting_as(attached_as);
        let mut deaths = Vec::new();
        let bootstrap = |reg: &mut PodRegistry| {
            for (key, comm) in [(parent, "runc:[0:PARENT]"), (child, "runc:[1:CHILD]")] {
                let r = task_exit(reg, &exit(key, 101, ExitStatus::Code(0), comm, 6 * SEC), 6 * SEC);
                assert_eq!((r.role, r.sandbox_death), (TaskRole::ContainerChild, None), "{comm} exits: no death");
            }
        };
        if parent_first {
            bootstrap(&mut reg);
        }
        let r = oom_kill(&mut reg, &oom(init, 101, "runc:[2:INIT]", 7 * SEC), 7 * SEC);
        assert_eq!((r.outcome, r.role), (Outcome::Handled, TaskRole::Sandbox));
        let r = task_exit(&mut reg, &exit(init, 101, KILLED, "runc:[2:INIT]", 7 * SEC), 7 * SEC);
        deaths.extend(r.sandbox_death);
        if parent_first {
            assert_eq!(r.role, TaskRole::Sandbox);
        } else {
            // The bootstrap still waited for its init-to-be: it gives up
            // (runc's nsexec bails, status 1), and that ends the start.
            let r = task_exit(&mut reg, &exit(child, 101, ExitStatus::Code(0), "runc:[1:CHILD]", 7 * SEC), 7 * SEC);
            assert_eq!(r.sandbox_death, None);
            let r = task_exit(&mut reg, &exit(parent, 101, ExitStatus::Code(1), "runc:[0:PARENT]", 7 * SEC), 7 * SEC);
            assert_eq!(r.role, TaskRole::Sandbox);
            deaths.extend(r.sandbox_death);
        }
        // The same exit again is a duplicate, not a second death.
        let (last, status) = if parent_first { (init, KILLED) } else { (parent, ExitStatus::Code(1)) };
        let r = task_exit(&mut reg, &exit(last, 101, status, "runc:[2:INIT]", 7 * SEC), 8 * SEC);
        assert_eq!(r.outcome, Outcome::Late(LateReason::TaskMissing));
        deaths.extend(r.sandbox_death);
        assert_eq!(deaths, [DeathCause::Oom], "parent first: {parent_first}, attached as {attached_as}");
        assert_eq!(reg.sandbox(&uid(1)).map(|s| s.state), Some(SandboxState::Dead));
        // A TaskStart for the dead start (the stream lags) re-arms nothing.
        reg.runtime_started(&cid(1), last.pid);
        let r = task_exit(&mut reg, &exit(last, 101, status, "runc:[2:INIT]", 7 * SEC), 9 * SEC);
        assert_eq!((r.outcome, r.sandbox_death), (Outcome::Late(LateReason::TaskMissing), None));
    }
}

/// The OOM killer may take a bootstrap stage itself: the start is over.
/// A workload container killed while it starts loses its init.
#[test]
fn bootstrap_killed_while_starting_is_a_death_and_workload_init_role() {
    let parent = TaskKey::new(10, 5 * SEC);
    let mut reg = sandbox_starting();
    let r = oom_kill(&mut reg, &oom(parent, 101, "runc:[0:PARENT]", 6 * SEC), 6 * SEC);
    assert_eq!(r.role, TaskRole::Sandbox);
    let r = task_exit(&mut reg, &exit(parent, 101, KILLED, "runc:[0:PARENT]", 6 * SEC), 6 * SEC);
    assert_eq!(r.sandbox_death, Some(DeathCause::Oom));

    let mut reg = pod_with_two_containers();
    reg.cgroup_created(103, &container_path(1, 3));
    let parent = TaskKey::new(30, 7 * SEC);
    reg.task_attached(103, parent, "runc:[0:PARENT]");
    task_exit(&mut reg, &exit(parent, 103, ExitStatus::Code(0), "runc:[0:PARENT]", 7 * SEC), 7 * SEC);
    let init = TaskKey::new(32, 7 * SEC);
    let r = oom_kill(&mut reg, &oom(init, 103, "runc:[2:INIT]", 8 * SEC), 8 * SEC);
    assert_eq!(r.role, TaskRole::ContainerInit);
    let r = task_exit(&mut reg, &exit(init, 103, KILLED, "runc:[2:INIT]", 8 * SEC), 8 * SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::ContainerInit, None));
}

/// `pause` killed after it ran but before the runtime's TaskStart reached
/// us is the sandbox's init all the same.
#[test]
fn pause_killed_before_task_start_is_a_sandbox_death() {
    let mut reg = sandbox_starting();
    let parent = TaskKey::new(10, 5 * SEC);
    task_exit(&mut reg, &exit(parent, 101, ExitStatus::Code(0), "runc:[0:PARENT]", 6 * SEC), 6 * SEC);
    let pause = TaskKey::new(12, 5 * SEC);
    let r = task_exit(&mut reg, &exit(pause, 101, KILLED, "pause", 7 * SEC), 7 * SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::Sandbox, Some(DeathCause::Signal)));
}

/// Guards: a start recognised by runc's stage names. Another runtime
/// names its processes otherwise (youki `youki:[1:INTER]`, `youki:[2:INIT]`;
/// crun, the init itself, `crun`): the first process hands the start over
/// with a clean exit, and the OOM killer taking the process that stands for
/// the init ends the start, whatever it is called. (Before: the hand-over
/// was the sandbox's death, cause `exit`, and the kill that ended the start
/// none.) While the first process lives, a victim that is not it is a
/// child's: a crun init's own children are not its start.
#[test]
fn a_start_is_known_by_place_and_time_not_by_names() {
    let mut reg = sandbox_starting_as("youki");
    let (first, init) = (TaskKey::new(10, 5 * SEC), TaskKey::new(12, 5 * SEC));
    let r = task_exit(&mut reg, &exit(first, 101, ExitStatus::Code(0), "youki:[1:INTER]", 5 * SEC), 5 * SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::ContainerChild, None), "the hand-over is no death");
    let r = oom_kill(&mut reg, &oom(init, 101, "youki:[2:INIT]", 6 * SEC), 6 * SEC);
    assert_eq!(r.role, TaskRole::Sandbox);
    let r = task_exit(&mut reg, &exit(init, 101, KILLED, "youki:[2:INIT]", 6 * SEC), 6 * SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::Sandbox, Some(DeathCause::Oom)));

    // crun: the first process is the init; its children are not its start.
    let mut reg = pod_with_two_containers();
    reg.cgroup_created(103, &container_path(1, 3));
    let crun = TaskKey::new(30, 7 * SEC);
    reg.task_attached(103, crun, "crun");
    let r = oom_kill(&mut reg, &oom(TaskKey::new(31, 7 * SEC), 103, "worker", 8 * SEC), 8 * SEC);
    assert_eq!(r.role, TaskRole::ContainerChild);
    let r = oom_kill(&mut reg, &oom(crun, 103, "app", 9 * SEC), 9 * SEC);
    assert_eq!(r.role, TaskRole::ContainerInit);
    let r = task_exit(&mut reg, &exit(crun, 103, KILLED, "app", 9 * SEC), 9 * SEC);
    assert_eq!((r.outcome, r.role), (Outcome::Handled, TaskRole::ContainerInit));
}

/// Guards: names standing for a start that is long over. Without the
/// runtime's word (no containerd stream: CRI-O, or a stream that is down)
/// a runc-started container's init is never named; its start ends after
/// [`registry::START_WINDOW_NS`]. A tenant's processes in its running
/// container named `pause` or `runc:[2:INIT]` are children then, and no
/// sandbox dies of them; the sandbox's own process ends as the sandbox's
/// death, whatever it is called. (Before: a forged sandbox death, a forged
/// container init exit, and the real sandbox death missed.)
#[test]
fn after_its_start_no_name_stands_for_the_init() {
    let mut reg = sandbox_starting_as("runc");
    let first = TaskKey::new(10, 5 * SEC);
    task_exit(&mut reg, &exit(first, 101, ExitStatus::Code(0), "runc:[0:PARENT]", 5 * SEC), 5 * SEC);
    reg.cgroup_created(102, &container_path(1, 2));
    let workload = TaskKey::new(20, 6 * SEC);
    reg.task_attached(102, workload, "runc");
    task_exit(&mut reg, &exit(workload, 102, ExitStatus::Code(0), "runc:[0:PARENT]", 6 * SEC), 6 * SEC);
    let later = 6 * SEC + registry::START_WINDOW_NS + SEC;
    let r = task_exit(&mut reg, &exit(TaskKey::new(25, later), 102, KILLED, "pause", later), later);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::ContainerChild, None));
    let r =
        task_exit(&mut reg, &exit(TaskKey::new(26, later), 102, ExitStatus::Code(1), "runc:[2:INIT]", later), later);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::ContainerChild, None));
    assert_eq!(reg.sandbox(&uid(1)).and_then(|s| s.sandbox_container.as_ref()).map(|c| c.id.clone()), Some(cid(1)));
    let r = task_exit(&mut reg, &exit(TaskKey::new(12, 5 * SEC), 101, KILLED, "sleep", later), later);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::Sandbox, Some(DeathCause::Signal)));
}

/// Once the container runs, runc's stage names mean a `runc exec`, not
/// the init: its OOM kill is a child's and no death.
#[test]
fn runc_exec_into_a_running_container_is_a_child() {
    let mut reg = pod_with_two_containers();
    reg.runtime_started(&cid(2), 20);
    let exec = TaskKey::new(40, 9 * SEC);
    reg.task_attached(102, TaskKey::new(38, 9 * SEC), "runc:[0:PARENT]");
    let r = oom_kill(&mut reg, &oom(exec, 102, "runc:[2:INIT]", 9 * SEC), 9 * SEC);
    assert_eq!(r.role, TaskRole::ContainerChild);
    let r = task_exit(&mut reg, &exit(exec, 102, KILLED, "runc:[2:INIT]", 9 * SEC), 9 * SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::ContainerChild, None));
    // Without a TaskStart the second process joining says the same.
    let mut reg = sandbox_starting();
    task_exit(
        &mut reg,
        &exit(TaskKey::new(10, 5 * SEC), 101, ExitStatus::Code(0), "runc:[0:PARENT]", 6 * SEC),
        6 * SEC,
    );
    reg.task_attached(101, TaskKey::new(50, 9 * SEC), "runc:[0:PARENT]");
    let r = task_exit(&mut reg, &exit(TaskKey::new(52, 9 * SEC), 101, KILLED, "runc:[2:INIT]", 9 * SEC), 9 * SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::ContainerChild, None));
}

/// The runtime's stream may name an init before the kernel's batched
/// events showed its cgroup: the name waits for the container.
#[test]
fn an_init_named_before_its_cgroup_appears_is_kept() {
    let mut reg = PodRegistry::default();
    reg.runtime_started(&cid(1), 12);
    reg.cgroup_created(100, &pod_path(1));
    reg.cgroup_created(101, &container_path(1, 1));
    reg.task_attached(101, TaskKey::new(10, 5 * SEC), "runc");
    task_exit(
        &mut reg,
        &exit(TaskKey::new(10, 5 * SEC), 101, ExitStatus::Code(0), "runc:[0:PARENT]", 6 * SEC),
        6 * SEC,
    );
    let r = task_exit(&mut reg, &exit(TaskKey::new(12, 5 * SEC), 101, KILLED, "sleep", 9 * SEC), 9 * SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::Sandbox, Some(DeathCause::Signal)));
}

/// A runtime TaskExit is late when the kernel already showed the container
/// or the pod gone, and never counts as a second exit otherwise.
#[test]
fn runtime_exit_is_late_only_after_teardown() {
    let mut reg = pod_with_two_containers();
    let r = runtime_exit(&mut reg, &cid(2), SEC, 2 * SEC);
    assert_eq!((r.source, r.outcome, r.role), (Source::Runtime, Outcome::Handled, TaskRole::ContainerInit));
    reg.cgroup_removed(102, 3 * SEC);
    let r = runtime_exit(&mut reg, &cid(2), 3 * SEC, 4 * SEC);
    assert_eq!(r.outcome, Outcome::Late(LateReason::ContainerMissing));
    reg.cgroup_removed(101, 5 * SEC);
    reg.cgroup_removed(100, 5 * SEC);
    let r = runtime_exit(&mut reg, &cid(1), 5 * SEC, 6 * SEC);
    assert_eq!(r.outcome, Outcome::Late(LateReason::SandboxTornDown));
    assert_eq!(runtime_exit(&mut reg, &cid(9), 5 * SEC, 6 * SEC).outcome, Outcome::Unknown);
}

#[test]
fn victims_are_classified_and_a_sandbox_oom_death_is_seen() {
    let mut reg = pod_with_two_containers();
    let child = TaskKey::new(21, 7 * SEC);
    let r = oom_kill(&mut reg, &oom(child, 102, "stress", SEC), SEC);
    assert_eq!((r.outcome, r.role), (Outcome::Handled, TaskRole::ContainerChild));
    assert_eq!(r.pod.as_ref().and_then(|p| p.container_id.clone()), Some(cid(2)));
    assert_eq!(r.pod.as_ref().and_then(|p| p.qos), Some(QosClass::Burstable));
    let r = task_exit(&mut reg, &exit(child, 102, KILLED, "stress", SEC), SEC);
    assert_eq!((r.outcome, r.role, r.sandbox_death), (Outcome::Handled, TaskRole::ContainerChild, None));

    let init = TaskKey::new(20, 6 * SEC);
    let r = oom_kill(&mut reg, &oom(init, 102, "app", SEC), SEC);
    assert_eq!(r.role, TaskRole::ContainerInit);
    let r = task_exit(&mut reg, &exit(init, 102, KILLED, "app", SEC), SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::ContainerInit, None));

    let pause = TaskKey::new(10, 5 * SEC);
    let r = oom_kill(&mut reg, &oom(pause, 101, "pause", SEC), SEC);
    assert_eq!(r.role, TaskRole::Sandbox);
    let r = task_exit(&mut reg, &exit(pause, 101, KILLED, "pause", SEC), SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::Sandbox, Some(DeathCause::Oom)));
    assert_eq!(reg.sandbox(&uid(1)).map(|s| s.state), Some(SandboxState::Dead));
    // A duplicate of the same exit is late: its task is gone.
    let r = task_exit(&mut reg, &exit(pause, 101, KILLED, "pause", SEC), SEC);
    assert_eq!(r.outcome, Outcome::Late(LateReason::TaskMissing));
}

#[test]
fn sandbox_death_causes_signal_and_exit() {
    let mut reg = pod_with_two_containers();
    let r = task_exit(
        &mut reg,
        &exit(TaskKey::new(10, 5 * SEC), 101, ExitStatus::Signal { signo: 15, core_dumped: false }, "pause", SEC),
        SEC,
    );
    assert_eq!(r.sandbox_death, Some(DeathCause::Signal));
    let mut reg = pod_with_two_containers();
    let r = task_exit(&mut reg, &exit(TaskKey::new(10, 5 * SEC), 101, ExitStatus::Code(0), "pause", SEC), SEC);
    assert_eq!(r.sandbox_death, Some(DeathCause::Exit));
}

#[test]
fn sandbox_rule_first_container_unless_pause_says_otherwise() {
    // First container cgroup is the sandbox by default.
    let reg = pod_with_two_containers();
    let s = reg.sandbox(&uid(1)).expect("sandbox");
    assert_eq!(s.sandbox_container.as_ref().map(|c| c.id.clone()), Some(cid(1)));

    // A workload created first, then a container whose init is `pause`:
    // the pause one is the sandbox (seen at attach, e.g. by the start-up scan).
    let mut reg = PodRegistry::default();
    reg.cgroup_created(201, &container_path(2, 7));
    reg.task_attached(201, TaskKey::new(70, SEC), "app");
    reg.cgroup_created(202, &container_path(2, 8));
    reg.task_attached(202, TaskKey::new(80, SEC), "pause");
    let s = reg.sandbox(&uid(2)).expect("sandbox");
    assert_eq!(s.sandbox_container.as_ref().map(|c| c.id.clone()), Some(cid(8)));
    assert!(s.workloads().any(|c| c.id == cid(7)));

    // A name at the end (the process chose it) never replaces a sandbox
    // whose init is known: a workload's init named `pause` that dies is a
    // container init, and the real sandbox stays the sandbox. (It was a
    // sandbox death once: a tenant could forge one, and demote the real
    // sandbox with it.)
    let mut reg = PodRegistry::default();
    reg.cgroup_created(301, &container_path(3, 1));
    reg.task_attached(301, TaskKey::new(90, SEC), "runc:[2:INIT]");
    reg.cgroup_created(302, &container_path(3, 2));
    reg.task_attached(302, TaskKey::new(91, SEC), "runc:[2:INIT]");
    let r = oom_kill(&mut reg, &oom(TaskKey::new(91, SEC), 302, "pause", 2 * SEC), 2 * SEC);
    assert_eq!(r.role, TaskRole::ContainerInit);
    let r = task_exit(&mut reg, &exit(TaskKey::new(91, SEC), 302, KILLED, "pause", 2 * SEC), 2 * SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::ContainerInit, None));
    let s = reg.sandbox(&uid(3)).expect("sandbox");
    assert_eq!(s.sandbox_container.as_ref().map(|c| c.id.clone()), Some(cid(1)), "the real sandbox stays");
    // …but where nothing else is known of the sandbox (its container
    // never showed a process), the name at the end still says it.
    let mut reg = PodRegistry::default();
    reg.cgroup_created(501, &container_path(5, 1));
    reg.cgroup_created(502, &container_path(5, 2));
    reg.task_attached(502, TaskKey::new(95, SEC), "runc:[2:INIT]");
    let r = task_exit(&mut reg, &exit(TaskKey::new(95, SEC), 502, KILLED, "pause", 2 * SEC), 2 * SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::Sandbox, Some(DeathCause::Signal)));
    // And at attach, a name does not replace a sandbox seen as `pause` too.
    let mut reg = PodRegistry::default();
    reg.cgroup_created(601, &container_path(6, 1));
    reg.task_attached(601, TaskKey::new(60, SEC), "pause");
    reg.cgroup_created(602, &container_path(6, 2));
    reg.task_attached(602, TaskKey::new(61, SEC), "pause");
    let s = reg.sandbox(&uid(6)).expect("sandbox");
    assert_eq!(s.sandbox_container.as_ref().map(|c| c.id.clone()), Some(cid(1)));
    // Nor does an init that moves itself again, named `pause` by then.
    let mut reg = pod_with_two_containers();
    reg.task_attached(102, TaskKey::new(20, 6 * SEC), "pause");
    let s = reg.sandbox(&uid(1)).expect("sandbox");
    assert_eq!(s.sandbox_container.as_ref().map(|c| c.id.clone()), Some(cid(1)));
}

/// Guards: a process name deciding the sandbox once the runtime said which
/// it is.
#[test]
fn once_the_runtime_names_the_sandbox_no_process_name_changes_it() {
    use super::metadata::{ContainerMeta, PodMeta, Snapshot};
    let listing = Snapshot {
        pods: vec![PodMeta {
            uid: uid(7),
            namespace: "shop".into(),
            name: "web".into(),
            sandbox_id: cid(1),
            workload: None,
        }],
        containers: vec![
            ContainerMeta { id: cid(1), name: "POD".into(), pod_uid: uid(7), sandbox: true },
            ContainerMeta { id: cid(2), name: "app".into(), pod_uid: uid(7), sandbox: false },
        ],
    };
    let mut reg = PodRegistry::default();
    reg.cgroup_created(701, &container_path(7, 1));
    reg.cgroup_created(702, &container_path(7, 2));
    reg.apply_metadata(&listing, SEC);
    // The sandbox's init unseen, the workload's named `pause` at its first
    // attach and at its death: still the workload.
    reg.task_attached(702, TaskKey::new(71, SEC), "pause");
    let r = task_exit(&mut reg, &exit(TaskKey::new(71, SEC), 702, KILLED, "pause", 2 * SEC), 2 * SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::ContainerInit, None));
    assert!(reg
        .sandbox(&uid(7))
        .is_some_and(|s| s.runtime_named && s.sandbox_container.as_ref().map(|c| c.id.clone()) == Some(cid(1))));
}

#[test]
fn runtime_names_the_sandbox_and_unnamed_containers_are_asked_for() {
    use super::metadata::{ContainerMeta, PodMeta, Snapshot};
    let meta =
        |c: u32, name: &str, sandbox: bool| ContainerMeta { id: cid(c), name: name.into(), pod_uid: uid(4), sandbox };
    let listing = Snapshot {
        pods: vec![PodMeta {
            uid: uid(4),
            namespace: "shop".into(),
            name: "web".into(),
            sandbox_id: cid(2),
            workload: None,
        }],
        containers: vec![meta(2, "POD", true), meta(1, "app", false)],
    };
    // The workload's cgroup came first (the first-container rule guesses
    // wrong) and neither init is named `pause`: the runtime settles it.
    let mut reg = PodRegistry::default();
    reg.cgroup_created(401, &container_path(4, 1));
    reg.cgroup_created(402, &container_path(4, 2));
    assert_eq!(reg.take_unnamed(), vec![cid(1), cid(2)], "both asked for");
    assert!(reg.take_unnamed().is_empty(), "asked once");
    reg.apply_metadata(&listing, SEC);
    let s = reg.sandbox(&uid(4)).expect("sandbox");
    assert_eq!(s.sandbox_container.as_ref().map(|c| c.id.clone()), Some(cid(2)));
    assert!(s.workloads().any(|c| c.id == cid(1)));
    assert_eq!(reg.names(&uid(4), Some(&cid(1))).container, "app");
    assert_eq!(reg.names(&uid(4), Some(&cid(2))).pod, "web");

    // Listed before its cgroup appears: named at once, not asked for, and
    // a sandbox by id even though it comes second.
    let mut reg = PodRegistry::default();
    reg.apply_metadata(&listing, SEC);
    reg.cgroup_created(401, &container_path(4, 1));
    reg.cgroup_created(402, &container_path(4, 2));
    assert!(reg.take_unnamed().is_empty());
    let s = reg.sandbox(&uid(4)).expect("sandbox");
    assert_eq!(s.sandbox_container.as_ref().map(|c| c.id.clone()), Some(cid(2)));
    let pause = TaskKey::new(42, SEC);
    reg.task_attached(402, pause, "sleep");
    let r = task_exit(&mut reg, &exit(pause, 402, KILLED, "sleep", 2 * SEC), 2 * SEC);
    assert_eq!((r.role, r.sandbox_death), (TaskRole::Sandbox, Some(DeathCause::Signal)));
}

#[test]
fn pid_reuse_is_not_the_init() {
    let mut reg = pod_with_two_containers();
    // Same pid as the workload init, different start: another process.
    let reused = TaskKey::new(20, 60 * SEC);
    let r = task_exit(&mut reg, &exit(reused, 102, ExitStatus::Code(0), "sh", 61 * SEC), 61 * SEC);
    assert_eq!(r.role, TaskRole::ContainerChild);
    let s = reg.sandbox(&uid(1)).expect("sandbox");
    assert!(s.container(&cid(2)).is_some_and(|c| c.init.is_some()), "init untouched");
}

#[test]
fn host_unknown_and_expired_tombstones() {
    let mut reg = pod_with_two_containers();
    reg.cgroup_created(5, "/system.slice/containerd.service");
    let k = TaskKey::new(1, 0);
    assert_eq!(task_exit(&mut reg, &exit(k, 5, ExitStatus::Code(0), "x", 0), 0).outcome, Outcome::Host);
    assert_eq!(task_exit(&mut reg, &exit(k, 999, ExitStatus::Code(0), "x", 0), 0).outcome, Outcome::Unknown);
    let mut no_cgroup = exit(k, 0, ExitStatus::Code(0), "x", 0);
    no_cgroup.cgroup_id = None;
    assert_eq!(task_exit(&mut reg, &no_cgroup, 0).outcome, Outcome::Unknown);

    reg.cgroup_removed(102, SEC);
    let late = exit(TaskKey::new(20, 6 * SEC), 102, KILLED, "app", SEC);
    assert_eq!(task_exit(&mut reg, &late, 2 * SEC).outcome, Outcome::Late(LateReason::ContainerMissing));
    // Past the tombstone's TTL the same event is unknown.
    let after = 2 * SEC + Limits::default().tombstone_ttl_ns;
    assert_eq!(task_exit(&mut reg, &late, after).outcome, Outcome::Unknown);
    assert_eq!(reg.tombstone_count(), 0);
}

#[test]
fn tombstones_are_capped_and_evictions_counted() {
    let mut reg = PodRegistry::new(Limits { max_tombstones: 10, ..Limits::default() });
    for pod in 0..20u32 {
        reg.cgroup_created(u64::from(pod), &pod_path(pod));
        reg.cgroup_removed(u64::from(pod), u64::from(pod));
    }
    assert_eq!(reg.tombstone_count(), 10);
    assert_eq!(reg.evictions.get(EvictionKind::Tombstone), 10);
}

/// One step of a random history.
#[derive(Debug, Clone)]
enum Step {
    Mkdir { pod: u32, container: Option<u32> },
    Attach { pod: u32, container: u32, pid: u32, start: u64, comm: &'static str },
    Exit { pod: u32, container: u32, pid: u32, start: u64, comm: &'static str },
    Oom { pod: u32, container: u32, pid: u32, start: u64, comm: &'static str },
    Rmdir { pod: u32, container: Option<u32> },
    Stray { cgroup: u64, pid: u32 },
}

fn cgroup_of(pod: u32, container: Option<u32>) -> u64 {
    1000 + u64::from(pod) * 100 + container.map_or(0, |c| u64::from(c) + 1)
}

fn step() -> impl Strategy<Value = Step> {
    let pod = 0..6u32;
    let container = 0..4u32;
    // A small pid space and two start times make reuse frequent.
    let pid = 1..12u32;
    let start = 0..2u64;
    // runc's stages, the sandbox's program and anything else.
    let comm = proptest::sample::select(vec!["sh", "runc:[0:PARENT]", "runc:[1:CHILD]", "runc:[2:INIT]", "pause"]);
    prop_oneof![
        (pod.clone(), proptest::option::of(container.clone()))
            .prop_map(|(pod, container)| Step::Mkdir { pod, container }),
        (pod.clone(), container.clone(), pid.clone(), start.clone(), comm.clone())
            .prop_map(|(pod, container, pid, start, comm)| Step::Attach { pod, container, pid, start, comm }),
        (pod.clone(), container.clone(), pid.clone(), start.clone(), comm.clone())
            .prop_map(|(pod, container, pid, start, comm)| Step::Exit { pod, container, pid, start, comm }),
        (pod.clone(), container.clone(), pid.clone(), start.clone(), comm.clone())
            .prop_map(|(pod, container, pid, start, comm)| Step::Oom { pod, container, pid, start, comm }),
        (pod.clone(), proptest::option::of(container)).prop_map(|(pod, container)| Step::Rmdir { pod, container }),
        (0..5000u64, pid).prop_map(|(cgroup, pid)| Step::Stray { cgroup, pid }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Duplicates, reordering, PID reuse, exits after teardown, ids never
    /// seen: no panic, one outcome per dispatched event, and nothing but
    /// tombstones left once every pod is torn down.
    #[test]
    fn random_interleavings_keep_the_invariants(steps in proptest::collection::vec(step(), 0..200)) {
        let mut reg = PodRegistry::default();
        let (mut dispatched, mut outcomes) = (0u64, 0u64);
        // Sandbox deaths per container cgroup since it was created.
        let mut deaths: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
        for (i, s) in steps.iter().enumerate() {
            let now = i as u64 * SEC / 10;
            let key = |pid: u32, start: u64| TaskKey::new(pid, (start + 1) * SEC);
            match s.clone() {
                Step::Mkdir { pod, container } => {
                    let path = match container { Some(c) => container_path(pod, c), None => pod_path(pod) };
                    if reg.owner(cgroup_of(pod, container)).is_none() { deaths.remove(&cgroup_of(pod, container)); }
                    reg.cgroup_created(cgroup_of(pod, container), &path);
                }
                Step::Attach { pod, container, pid, start, comm } => {
                    reg.task_attached(cgroup_of(pod, Some(container)), key(pid, start), comm);
                }
                Step::Exit { pod, container, pid, start, comm } => {
                    dispatched += 1;
                    let r = task_exit(&mut reg, &exit(key(pid, start), cgroup_of(pod, Some(container)), KILLED, comm, now), now);
                    outcomes += 1;
                    if r.sandbox_death.is_some() {
                        let n = deaths.entry(cgroup_of(pod, Some(container))).or_default();
                        *n += 1;
                        prop_assert_eq!(*n, 1, "a container dies once");
                    }
                    if r.sandbox_death.is_some() { prop_assert_eq!(r.role, TaskRole::Sandbox); }
                    if r.outcome != Outcome::Handled { prop_assert!(r.sandbox_death.is_none()); }
                }
                Step::Oom { pod, container, pid, start, comm } => {
                    dispatched += 1;
                    let _ = oom_kill(&mut reg, &oom(key(pid, start), cgroup_of(pod, Some(container)), comm, now), now);
                    outcomes += 1;
                }
                Step::Rmdir { pod, container } => reg.cgroup_removed(cgroup_of(pod, container), now),
                Step::Stray { cgroup, pid } => {
                    dispatched += 1;
                    let r = task_exit(&mut reg, &exit(key(pid, 0), cgroup, ExitStatus::Code(0), "x", now), now);
                    outcomes += 1;
                    prop_assert!(matches!(r.outcome, Outcome::Unknown | Outcome::Handled | Outcome::Late(_) | Outcome::Host));
                }
            }
            prop_assert!(reg.tracked_processes() <= reg.tracked_containers());
        }
        prop_assert_eq!(dispatched, outcomes);
        // Tear everything down, containers first, then pods.
        let end = steps.len() as u64 * SEC / 10;
        for pod in 0..6 {
            for c in 0..4 { reg.cgroup_removed(cgroup_of(pod, Some(c)), end); }
            reg.cgroup_removed(cgroup_of(pod, None), end);
        }
        prop_assert!(reg.holds_no_pods(), "left: {} sandboxes", reg.tracked_sandboxes());
        prop_assert_eq!(reg.tracked_containers(), 0);
        prop_assert_eq!(reg.tracked_processes(), 0);
        // And the tombstones expire.
        reg.expire(end + Limits::default().tombstone_ttl_ns);
        prop_assert_eq!(reg.tombstone_count(), 0);
    }
}

/// The kernel streams exits only from tracked cgroups (and runtimes); a
/// task it knows is untracked is the host's, even with no cgroup named.
#[test]
fn an_untracked_task_is_the_hosts() {
    let mut reg = PodRegistry::default();
    let unnamed =
        TaskExit { cgroup_id: None, untracked: true, ..exit(TaskKey::new(70, 1), 0, KILLED, "containerd", 10) };
    let report = task_exit(&mut reg, &unnamed, 20);
    assert_eq!((report.outcome, report.role), (Outcome::Host, TaskRole::Host));
    let victim = OomVictim { cgroup_id: None, untracked: true, ..oom(TaskKey::new(71, 1), 0, "java", 10) };
    let report = oom_kill(&mut reg, &victim, 20);
    assert_eq!((report.outcome, report.role), (Outcome::Host, TaskRole::Host));
    let unknown = TaskExit { cgroup_id: None, untracked: false, ..unnamed };
    assert_eq!(task_exit(&mut reg, &unknown, 30).outcome, Outcome::Unknown);
}
