//! A pod's state machines: its sandbox (running, dead; which container is
//! it), each container's start and end, and the processes that are its
//! init. What one process's OOM kill or end means to its container is
//! decided here; the registry ([`super::PodRegistry`]) finds the container.

use crate::model::cgroup_path::QosClass;

/// /proc and the kernel count process start times in USER_HZ ticks (100 on
/// every Linux ABI); identities compare at that resolution so a seeded
/// start time and a kernel one agree.
pub const TICK_NS: u64 = 10_000_000;

/// One process: pid plus start time, so a reused pid is another process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskKey {
    pub pid: u32,
    /// Start in ticks since boot; 0 when unknown.
    pub start_ticks: u64,
}

impl TaskKey {
    pub fn new(pid: u32, start_ns: u64) -> Self {
        Self { pid, start_ticks: start_ns / TICK_NS }
    }

    /// Same process, as far as both sides know.
    pub fn matches(&self, other: &TaskKey) -> bool {
        self.pid == other.pid
            && (self.start_ticks == 0 || other.start_ticks == 0 || self.start_ticks == other.start_ticks)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub key: TaskKey,
    pub comm: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerRole {
    /// The pod's sandbox (pause) container.
    Sandbox,
    Workload,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    pub cgroup_id: u64,
    pub role: ContainerRole,
    /// The first task attached to the empty container cgroup, while alive.
    pub init: Option<Task>,
    /// The init after it exited: a second exit for it is late.
    pub exited_init: Option<TaskKey>,
    /// A task attached to the cgroup (the first is the init).
    pub(super) attached: bool,
    /// Another process joined after the first (a `runc exec`, or the
    /// start-up scan of a running container): the container has started.
    pub(super) joined_later: bool,
    /// The runtime named the init (TaskCreate, TaskStart): the container
    /// has started.
    pub(super) started: bool,
    /// When its start began (boot time, ns): its first process's start, or
    /// the first event of one of its processes; `None` until either.
    pub(super) start_ns: Option<u64>,
    /// The OOM killer's victim while the container started: the start's,
    /// whatever it was called; its exit ends the start.
    start_victim: Option<TaskKey>,
    /// The OOM killer took a process of the start: a start that dies, by
    /// whichever of its processes' ends, died of it.
    pub(in crate::model) start_oom_killed: bool,
    /// The cgroup's path (relative to the hierarchy root), for reading its
    /// settings.
    pub path: String,
    /// `memory.oom.group` (cgroup v2): the OOM killer kills the whole
    /// container. `None` until read (v1 has no such setting: `Some(false)`).
    pub oom_group: Option<bool>,
}

/// How long a container's start lasts at most without the runtime's word.
/// From the first process in its cgroup until the runtime names the init
/// (TaskCreate, TaskStart), another process joins, or the start dies, the
/// processes in a container's cgroup are the runtime's own (runc's
/// bootstrap stages, crun's or youki's, the init-to-be): no container code
/// runs before the runtime starts it. Their names say nothing (each runtime
/// chooses its own, and a tenant's program can choose any), so nothing
/// here reads them. Without the runtime's stream the start ends after this
/// long, so that a tenant's own processes are not taken for the start's.
pub const START_WINDOW_NS: u64 = 10 * 1_000_000_000;

impl Container {
    pub(super) fn new(id: String, cgroup_id: u64, role: ContainerRole, path: &str) -> Self {
        Self {
            id,
            cgroup_id,
            role,
            init: None,
            exited_init: None,
            attached: false,
            joined_later: false,
            started: false,
            start_ns: None,
            start_victim: None,
            start_oom_killed: false,
            path: path.to_string(),
            oom_group: None,
        }
    }

    /// The runtime named the init.
    pub(super) fn name_init(&mut self, pid: u32) {
        self.init = Some(Task { key: TaskKey::new(pid, 0), comm: String::new() });
        self.exited_init = None;
        self.started = true;
    }

    /// An event of one of its processes at `at_ns`: the start began then
    /// at the latest.
    pub(super) fn seen_at(&mut self, at_ns: u64) {
        self.start_ns.get_or_insert(at_ns);
    }

    /// The container is starting at `at_ns`: the runtime has not said it
    /// started, no other process joined its first one, it has not died,
    /// and the start window is not over.
    pub fn starting(&self, at_ns: u64) -> bool {
        self.exited_init.is_none()
            && !self.joined_later
            && !self.started
            && self.start_ns.is_none_or(|s| at_ns < s.saturating_add(START_WINDOW_NS))
    }

    /// Whether `key` is the init as known: the runtime's, or the first
    /// process attached (until it hands the start over).
    pub fn is_init(&self, key: &TaskKey) -> bool {
        self.init.as_ref().is_some_and(|t| t.key.matches(key))
    }

    /// While the container starts, whether `key` stands for its init: the
    /// first process, while it lives; once it handed the start over (runc's
    /// bootstrap does), or if none was seen to join (a runtime may create
    /// the init inside the cgroup), any process of the container, for none
    /// but the runtime's runs before the runtime starts it.
    fn stands_for_init(&self, key: &TaskKey) -> bool {
        self.init.is_none() || self.is_init(key)
    }

    /// The OOM killer took `key` at `at_ns`. While the container starts,
    /// its first victim that stands for the init is the start's. Returns
    /// whether the victim is the init (or stands for it).
    pub(in crate::model) fn oom_victim(&mut self, key: &TaskKey, at_ns: u64) -> bool {
        self.seen_at(at_ns);
        let starting = self.starting(at_ns);
        self.start_oom_killed |= starting;
        if starting && self.stands_for_init(key) && self.start_victim.is_none_or(|k| k.matches(key)) {
            self.start_victim = Some(*key);
            return true;
        }
        self.is_init(key)
    }

    /// What the end of the whole process `key` at `at_ns` means to the
    /// container, `clean` when it exited with status 0.
    pub(in crate::model) fn ending(&mut self, key: &TaskKey, clean: bool, at_ns: u64) -> Ending {
        self.seen_at(at_ns);
        if let Some(exited) = self.exited_init {
            return if exited.matches(key) { Ending::Duplicate } else { Ending::Child };
        }
        if self.start_victim.is_some_and(|k| k.matches(key)) {
            return Ending::Death;
        }
        if self.starting(at_ns) {
            // A clean exit hands over to the next stage (the first process,
            // if it was that, is not the init); a failure of what stands
            // for the init ends the start.
            if clean {
                if self.is_init(key) {
                    self.init = None;
                }
                return Ending::HandOver;
            }
            return if self.stands_for_init(key) { Ending::Death } else { Ending::Child };
        }
        // Past its start: what happened while it started is not its death.
        self.start_oom_killed = false;
        if self.is_init(key) {
            return Ending::Death;
        }
        // A sandbox container runs the runtime's pause and nothing else:
        // after its start, the end of any process when no init is known,
        // and no other process joined, is the sandbox's.
        if self.role == ContainerRole::Sandbox && self.init.is_none() && !self.joined_later {
            return Ending::Death;
        }
        Ending::Child
    }
}

/// What a process's end means to its container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::model) enum Ending {
    /// The container's init (or its start) ended: the container died.
    Death,
    /// A process of the start exited cleanly, handing over to the next.
    HandOver,
    /// Another process of the running container.
    Child,
    /// The init's end, handled already.
    Duplicate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    /// The sandbox's init is alive (or not seen yet).
    Running,
    /// The sandbox's init exited; containers may still be torn down.
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub pod_uid: String,
    pub qos: QosClass,
    /// The pod-level cgroup, once seen.
    pub cgroup_id: Option<u64>,
    /// Boxed, and the workloads in a vector: a pod has few containers,
    /// and a node has a thousand pods (a map's nodes and a table of
    /// inline containers cost kilobytes each).
    pub sandbox_container: Option<Box<Container>>,
    pub(super) containers: Vec<Container>,
    pub state: SandboxState,
    /// Set when the first container cgroup appeared: the sandbox rule.
    pub(super) had_container: bool,
    /// The runtime said which container is the sandbox: a process's name
    /// decides nothing more.
    pub runtime_named: bool,
}

/// Where a container's init was seen named `pause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseSeen {
    /// At its first attach to the container (the start-up scan reads each
    /// process's name as it is then; runc attaches before it execs).
    Attach,
    /// At its exit or OOM kill: a name the process chose itself.
    End,
}

impl Sandbox {
    pub(super) fn new(pod_uid: String, qos: QosClass) -> Self {
        Self {
            pod_uid,
            qos,
            cgroup_id: None,
            sandbox_container: None,
            containers: Vec::new(),
            state: SandboxState::Running,
            had_container: false,
            runtime_named: false,
        }
    }

    /// The container with this id, sandbox or workload.
    pub fn container(&self, id: &str) -> Option<&Container> {
        self.sandbox_container.as_deref().filter(|c| c.id == id).or_else(|| self.containers.iter().find(|c| c.id == id))
    }

    pub fn container_mut(&mut self, id: &str) -> Option<&mut Container> {
        match self.sandbox_container.as_deref_mut() {
            Some(c) if c.id == id => Some(c),
            _ => self.containers.iter_mut().find(|c| c.id == id),
        }
    }

    /// The workload containers (all but the sandbox's).
    pub fn workloads(&self) -> impl Iterator<Item = &Container> {
        self.containers.iter()
    }

    pub(super) fn remove_container(&mut self, id: &str) -> Option<Container> {
        if self.sandbox_container.as_ref().is_some_and(|c| c.id == id) {
            return self.sandbox_container.take().map(|c| *c);
        }
        let i = self.containers.iter().position(|c| c.id == id)?;
        Some(self.containers.swap_remove(i))
    }

    /// The runtime says `id` is the sandbox container: so it is, whatever
    /// any process is called.
    pub(in crate::model) fn runtime_names_sandbox(&mut self, id: &str) {
        self.runtime_named = true;
        self.promote(id);
    }

    /// `id`'s init was seen named `pause`. Without the runtime's word the
    /// name makes it the sandbox, but never in place of a known sandbox
    /// that lives: at attach, one whose own init was seen named `pause`
    /// too; at an end, one that ever showed a process (a tenant can name
    /// its process `pause`, and name it so just before it dies). Returns
    /// whether `id` is the sandbox container now.
    pub(in crate::model) fn pause_seen(&mut self, id: &str, seen: PauseSeen) -> bool {
        let known = self.sandbox_container.as_ref().filter(|c| c.id != id).is_some_and(|c| match seen {
            PauseSeen::Attach => c.init.as_ref().is_some_and(|t| t.comm == "pause"),
            PauseSeen::End => c.attached || c.start_ns.is_some() || c.init.is_some() || c.exited_init.is_some(),
        });
        if !self.runtime_named && !known {
            self.promote(id);
        }
        self.sandbox_container.as_ref().is_some_and(|c| c.id == id)
    }

    /// Makes `id` the sandbox container; the previous one, if any, becomes
    /// a workload container.
    fn promote(&mut self, id: &str) {
        if self.sandbox_container.as_ref().is_some_and(|c| c.id == id) {
            return;
        }
        let Some(i) = self.containers.iter().position(|c| c.id == id) else { return };
        let mut c = self.containers.swap_remove(i);
        c.role = ContainerRole::Sandbox;
        if let Some(mut old) = self.sandbox_container.replace(Box::new(c)) {
            old.role = ContainerRole::Workload;
            self.push_workload(*old);
        }
    }

    /// Grows the workloads one at a time: most pods have one or two, and
    /// a vector's first growth makes room for four (half a kilobyte a pod
    /// unused, on a node of a thousand).
    pub(super) fn push_workload(&mut self, c: Container) {
        self.containers.reserve_exact(1);
        self.containers.push(c);
    }

    pub(super) fn all_containers(&self) -> impl Iterator<Item = &Container> {
        self.sandbox_container.as_deref().into_iter().chain(self.containers.iter())
    }
}
