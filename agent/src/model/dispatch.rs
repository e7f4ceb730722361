//! TaskExit and OomKill handlers. Each resolves cgroup → sandbox →
//! container → task through `Option` lookups and returns exactly one
//! [`Outcome`]; something already gone is a counted outcome, never a panic.
//! This is the handler containerd v2.0.0–2.0.5 lacked (#12038).

use super::exit_reason::ExitReason;
use super::{
    cgroup_path::QosClass,
    registry::{CgroupOwner, ContainerRole, Ending, PauseSeen, PodRegistry, SandboxState, TaskKey},
};
use crate::events::ExitStatus;

/// Where an event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Source {
    Kernel,
    Runtime,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum LateReason {
    /// The pod's sandbox was torn down already.
    SandboxTornDown,
    /// The sandbox exists but the container was removed (or cleared).
    ContainerMissing,
    /// The container exists but the task already exited.
    TaskMissing,
}

/// The one outcome of a dispatched event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumDiscriminants)]
#[strum(serialize_all = "snake_case")]
#[strum_discriminants(name(OutcomeKind), derive(strum::IntoStaticStr, strum::EnumIter, strum::EnumCount))]
#[strum_discriminants(strum(serialize_all = "snake_case"))]
pub enum Outcome {
    Handled,
    Late(LateReason),
    /// Its cgroup was never seen (or the kernel could not name it).
    Unknown,
    /// Not a pod process.
    Host,
}

/// What the task was to its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum TaskRole {
    /// The sandbox's (pause) process.
    Sandbox,
    ContainerInit,
    /// Any other process in a container: kills the kubelet never reports.
    ContainerChild,
    /// Another process of a container the OOM killer killed as a whole
    /// (`memory.oom.group`, set by kubelets since 1.28 on cgroup v2): the
    /// container died, and the kubelet reports it.
    ContainerGroup,
    Host,
    /// Not known (unknown cgroup, or a container already gone).
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum DeathCause {
    /// The sandbox's init was an OOM victim.
    Oom,
    Signal,
    Exit,
}

/// The pod (and container) an event was attributed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub pod_uid: String,
    /// `None` when only a tombstone remembered the pod.
    pub qos: Option<QosClass>,
    pub container_id: Option<String>,
}

/// A process of a pod ended, as the kernel (or a runtime) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskExit {
    pub source: Source,
    pub key: TaskKey,
    pub cgroup_id: Option<u64>,
    /// The kernel knows it is in no tracked cgroup: a host task.
    pub untracked: bool,
    pub status: ExitStatus,
    pub comm: String,
    /// When it happened (CLOCK_BOOTTIME ns).
    pub ts_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitReport {
    pub source: Source,
    pub outcome: Outcome,
    pub role: TaskRole,
    pub pod: Option<PodRef>,
    pub sandbox_death: Option<DeathCause>,
    /// A container's init (or its start) ended: the container exited, and
    /// why.
    pub container_exit: Option<ExitReason>,
    /// From the event's timestamp to its dispatch.
    pub delay_ns: u64,
}

impl ExitReport {
    /// Where every handler starts: nothing known yet.
    fn unknown(source: Source, delay_ns: u64) -> Self {
        Self {
            source,
            outcome: Outcome::Unknown,
            role: TaskRole::Unknown,
            pod: None,
            sandbox_death: None,
            container_exit: None,
            delay_ns,
        }
    }
}

/// The OOM killer's choice, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomVictim {
    pub key: TaskKey,
    pub cgroup_id: Option<u64>,
    /// The kernel knows it is in no tracked cgroup: a host task.
    pub untracked: bool,
    pub comm: String,
    pub trigger: Trigger,
    pub ts_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    pub pid: u32,
    pub tgid: u32,
    pub comm: String,
    pub cgroup_id: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomReport {
    pub outcome: Outcome,
    pub role: TaskRole,
    pub pod: Option<PodRef>,
    pub victim: TaskKey,
    pub victim_comm: String,
    /// The task that ran out of memory, when it is not the victim.
    pub trigger: Option<Trigger>,
    pub delay_ns: u64,
}

/// Where a cgroup id leads: to a container of a live pod, or straight to
/// a final verdict (outcome, role, pod) that both handlers share.
enum Place {
    Container { pod_uid: String, container_id: String },
    Verdict(Outcome, TaskRole, Option<PodRef>),
}

fn locate(reg: &PodRegistry, cgroup_id: Option<u64>, untracked: bool) -> Place {
    let Some(id) = cgroup_id else {
        // The kernel tracks every pod cgroup: what it does not track is
        // the host's.
        if untracked {
            return Place::Verdict(Outcome::Host, TaskRole::Host, None);
        }
        return Place::Verdict(Outcome::Unknown, TaskRole::Unknown, None);
    };
    if let Some(owner) = reg.owner(id) {
        return match owner {
            CgroupOwner::Container { pod_uid, container_id } => {
                Place::Container { pod_uid: pod_uid.clone(), container_id: container_id.clone() }
            }
            // A process in the pod cgroup itself, outside any container.
            CgroupOwner::Pod { pod_uid } => Place::Verdict(
                Outcome::Handled,
                TaskRole::ContainerChild,
                reg.sandbox(pod_uid).map(|s| PodRef { pod_uid: pod_uid.clone(), qos: Some(s.qos), container_id: None }),
            ),
        };
    }
    if let Some(tomb) = reg.tombstone(id) {
        let (pod_uid, container_id) = match &tomb.owner {
            CgroupOwner::Container { pod_uid, container_id } => (pod_uid, Some(container_id.clone())),
            CgroupOwner::Pod { pod_uid } => (pod_uid, None),
        };
        let sandbox = reg.sandbox(pod_uid);
        let reason = if sandbox.is_some() { LateReason::ContainerMissing } else { LateReason::SandboxTornDown };
        let pod = PodRef { pod_uid: pod_uid.clone(), qos: sandbox.map(|s| s.qos), container_id };
        return Place::Verdict(Outcome::Late(reason), TaskRole::Unknown, Some(pod));
    }
    if reg.is_host_cgroup(id) || untracked {
        Place::Verdict(Outcome::Host, TaskRole::Host, None)
    } else {
        Place::Verdict(Outcome::Unknown, TaskRole::Unknown, None)
    }
}

/// A task exited. Only whole-process exits are dispatched.
pub fn task_exit(reg: &mut PodRegistry, exit: &TaskExit, now_ns: u64) -> ExitReport {
    reg.expire(now_ns);
    let mut report = ExitReport::unknown(exit.source, now_ns.saturating_sub(exit.ts_ns));
    let (pod_uid, container_id) = match locate(reg, exit.cgroup_id, exit.untracked) {
        Place::Container { pod_uid, container_id } => (pod_uid, container_id),
        Place::Verdict(outcome, role, pod) => {
            (report.outcome, report.role, report.pod) = (outcome, role, pod);
            return report;
        }
    };

    let was_oom_victim = reg.was_oom_victim(&exit.key);
    let Some(sandbox) = reg.sandboxes.get_mut(&pod_uid) else {
        report.outcome = Outcome::Late(LateReason::SandboxTornDown);
        report.pod = Some(PodRef { pod_uid, qos: None, container_id: Some(container_id) });
        return report;
    };
    report.pod =
        Some(PodRef { pod_uid: pod_uid.clone(), qos: Some(sandbox.qos), container_id: Some(container_id.clone()) });
    let Some(container) = sandbox.container_mut(&container_id) else {
        report.outcome = Outcome::Late(LateReason::ContainerMissing);
        return report;
    };
    // A container dies once: its init's end, or its start's (see
    // `Container::ending`); names decide nothing.
    let clean = exit.status == ExitStatus::Code(0);
    match container.ending(&exit.key, clean, exit.ts_ns) {
        Ending::Death => {}
        Ending::HandOver => {
            // The start's processes changed: the first is no init now.
            reg.touch();
            report.outcome = Outcome::Handled;
            report.role = TaskRole::ContainerChild;
            return report;
        }
        Ending::Child => {
            report.outcome = Outcome::Handled;
            report.role = TaskRole::ContainerChild;
            return report;
        }
        Ending::Duplicate => {
            report.outcome = Outcome::Late(LateReason::TaskMissing);
            return report;
        }
    }
    let oom = was_oom_victim || container.start_oom_killed;
    container.exited_init = Some(exit.key);
    container.init = None;
    let mut role = container.role;
    if role == ContainerRole::Workload && exit.comm == "pause" && sandbox.pause_seen(&container_id, PauseSeen::End) {
        role = ContainerRole::Sandbox;
    }
    report.outcome = Outcome::Handled;
    report.role = match role {
        ContainerRole::Sandbox => TaskRole::Sandbox,
        ContainerRole::Workload => TaskRole::ContainerInit,
    };
    report.container_exit = Some(ExitReason::of(exit.status, oom));
    if role == ContainerRole::Sandbox {
        sandbox.state = SandboxState::Dead;
        report.sandbox_death = Some(if oom {
            DeathCause::Oom
        } else if matches!(exit.status, ExitStatus::Signal { .. }) {
            DeathCause::Signal
        } else {
            DeathCause::Exit
        });
    }
    // An init is gone: the tracked processes changed.
    reg.touch();
    report
}

/// A runtime (containerd) reported that a container's init exited. It is
/// late when the kernel already showed the container's cgroup, or the whole
/// pod, torn down: the exposure behind containerd #12038. It changes no
/// state (the kernel's own exit did that).
pub fn runtime_exit(reg: &mut PodRegistry, container_id: &str, published_ns: u64, now_ns: u64) -> ExitReport {
    reg.expire(now_ns);
    let mut report = ExitReport::unknown(Source::Runtime, now_ns.saturating_sub(published_ns));
    match locate(reg, reg.container_cgroup(container_id), false) {
        Place::Container { pod_uid, container_id } => {
            let sandbox = reg.sandbox(&pod_uid);
            report.role = match sandbox.and_then(|s| s.container(&container_id)).map(|c| c.role) {
                Some(ContainerRole::Sandbox) => TaskRole::Sandbox,
                Some(ContainerRole::Workload) => TaskRole::ContainerInit,
                None => TaskRole::Unknown,
            };
            report.outcome = Outcome::Handled;
            report.pod = Some(PodRef { pod_uid, qos: sandbox.map(|s| s.qos), container_id: Some(container_id) });
        }
        Place::Verdict(outcome, role, pod) => (report.outcome, report.role, report.pod) = (outcome, role, pod),
    }
    report
}

/// The OOM killer chose a victim.
pub fn oom_kill(reg: &mut PodRegistry, oom: &OomVictim, now_ns: u64) -> OomReport {
    reg.expire(now_ns);
    reg.remember_oom_victim(oom.key, now_ns);
    let mut report = OomReport {
        outcome: Outcome::Unknown,
        role: TaskRole::Unknown,
        pod: None,
        victim: oom.key,
        victim_comm: oom.comm.clone(),
        trigger: (oom.trigger.tgid != oom.key.pid).then(|| oom.trigger.clone()),
        delay_ns: now_ns.saturating_sub(oom.ts_ns),
    };
    let (pod_uid, container_id) = match locate(reg, oom.cgroup_id, oom.untracked) {
        Place::Container { pod_uid, container_id } => (pod_uid, container_id),
        Place::Verdict(outcome, role, pod) => {
            (report.outcome, report.role, report.pod) = (outcome, role, pod);
            return report;
        }
    };
    let Some(sandbox) = reg.sandboxes.get_mut(&pod_uid) else {
        report.outcome = Outcome::Late(LateReason::SandboxTornDown);
        return report;
    };
    report.pod =
        Some(PodRef { pod_uid: pod_uid.clone(), qos: Some(sandbox.qos), container_id: Some(container_id.clone()) });
    let Some(container) = sandbox.container_mut(&container_id) else {
        report.outcome = Outcome::Late(LateReason::ContainerMissing);
        return report;
    };
    // While a container starts, its first victim, whatever its name, is
    // the start's: killing it kills the start.
    let is_init = container.oom_victim(&oom.key, oom.ts_ns);
    let mut role = container.role;
    if is_init
        && role == ContainerRole::Workload
        && oom.comm == "pause"
        && sandbox.pause_seen(&container_id, PauseSeen::End)
    {
        role = ContainerRole::Sandbox;
    }
    let group = sandbox.container(&container_id).is_some_and(|c| c.oom_group == Some(true));
    report.outcome = Outcome::Handled;
    report.role = match (role, is_init) {
        (ContainerRole::Sandbox, _) => TaskRole::Sandbox,
        (ContainerRole::Workload, true) => TaskRole::ContainerInit,
        (ContainerRole::Workload, false) if group => TaskRole::ContainerGroup,
        (ContainerRole::Workload, false) => TaskRole::ContainerChild,
    };
    report
}

/// What dispatching one event produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    Exit(ExitReport),
    Oom(OomReport),
}

/// Applies kernel events to the registry: cgroup changes update it, whole-
/// process exits and OOM kills are dispatched to their handlers.
#[derive(Debug, Default)]
pub struct Dispatcher {
    pub registry: PodRegistry,
}

impl Dispatcher {
    pub fn new(registry: PodRegistry) -> Self {
        Self { registry }
    }

    /// Returns a report for exits and OOM kills, `None` for cgroup changes
    /// and thread exits (which are not process exits).
    pub fn dispatch(&mut self, event: &crate::events::Event, now_ns: u64) -> Option<Report> {
        use crate::events::Event;
        let reg = &mut self.registry;
        match event {
            Event::CgroupMkdir(c) => {
                reg.cgroup_created(c.cgroup_id, &c.path);
                None
            }
            Event::CgroupRmdir(c) => {
                reg.cgroup_removed(c.cgroup_id, now_ns);
                None
            }
            Event::CgroupAttach(a) => {
                reg.task_attached(a.cgroup.cgroup_id, TaskKey::new(a.pid, a.start_ns), &a.comm);
                None
            }
            Event::Exit(e) if e.group_dead => {
                let exit = TaskExit {
                    source: Source::Kernel,
                    key: TaskKey::new(e.tgid, e.start_ns),
                    cgroup_id: e.cgroup_id,
                    untracked: e.untracked,
                    status: e.status,
                    comm: e.comm.clone(),
                    ts_ns: e.ts_ns,
                };
                Some(Report::Exit(task_exit(reg, &exit, now_ns)))
            }
            Event::Exit(_) | Event::Signal(_) => None,
            Event::OomKill(o) => {
                let (key, cgroup_id) = match o.victim {
                    Some(v) => (TaskKey::new(v.tgid, v.start_ns), Some(v.cgroup_id)),
                    None => (TaskKey::new(o.victim_pid, 0), None),
                };
                let victim = OomVictim {
                    key,
                    cgroup_id,
                    untracked: o.victim_untracked,
                    comm: o.victim_comm.clone(),
                    trigger: Trigger {
                        pid: o.trigger_pid,
                        tgid: o.trigger_tgid,
                        comm: o.trigger_comm.clone(),
                        cgroup_id: o.trigger_cgroup_id,
                    },
                    ts_ns: o.ts_ns,
                };
                Some(Report::Oom(oom_kill(reg, &victim, now_ns)))
            }
        }
    }
}
