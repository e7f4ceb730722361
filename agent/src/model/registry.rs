//! The node's pods as the kernel shows them: sandboxes, their containers,
//! each container's init task, and tombstones for what was torn down.
//! Pure data and methods, no I/O. Every lookup returns an `Option`; every
//! collection is bounded and counts what it evicts.

use std::collections::{HashMap, HashSet, VecDeque};

use super::{
    cgroup_path::{self, QosClass},
    metadata::{MetadataStore, Names, Snapshot},
};

/// Container ids waiting to be named by the runtime, at most.
const MAX_UNNAMED: usize = 1024;
/// Inits the runtime named before the kernel showed their container, at
/// most (the runtime's stream can overtake the kernel's batched events).
const MAX_EARLY_INITS: usize = 256;

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
    attached: bool,
    /// Another process joined after the first (a `runc exec`, or the
    /// start-up scan of a running container): the container has started.
    joined_later: bool,
    /// The runtime named the init (TaskCreate, TaskStart): the container
    /// has started.
    started: bool,
    /// When its start began (boot time, ns): its first process's start, or
    /// the first event of one of its processes; `None` until either.
    start_ns: Option<u64>,
    /// The OOM killer's victim while the container started: the start's,
    /// whatever it was called; its exit ends the start.
    start_victim: Option<TaskKey>,
    /// The OOM killer took a process of the start: a start that dies, by
    /// whichever of its processes' ends, died of it.
    pub(super) start_oom_killed: bool,
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
    fn new(id: String, cgroup_id: u64, role: ContainerRole, path: &str) -> Self {
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
    fn name_init(&mut self, pid: u32) {
        self.init = Some(Task { key: TaskKey::new(pid, 0), comm: String::new() });
        self.exited_init = None;
        self.started = true;
    }

    /// An event of one of its processes at `at_ns`: the start began then
    /// at the latest.
    fn seen_at(&mut self, at_ns: u64) {
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
    pub(super) fn oom_victim(&mut self, key: &TaskKey, at_ns: u64) -> bool {
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
    pub(super) fn ending(&mut self, key: &TaskKey, clean: bool, at_ns: u64) -> Ending {
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
pub(super) enum Ending {
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
    containers: Vec<Container>,
    pub state: SandboxState,
    /// Set when the first container cgroup appeared: the sandbox rule.
    had_container: bool,
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
    fn new(pod_uid: String, qos: QosClass) -> Self {
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

    fn remove_container(&mut self, id: &str) -> Option<Container> {
        if self.sandbox_container.as_ref().is_some_and(|c| c.id == id) {
            return self.sandbox_container.take().map(|c| *c);
        }
        let i = self.containers.iter().position(|c| c.id == id)?;
        Some(self.containers.swap_remove(i))
    }

    /// The runtime says `id` is the sandbox container: so it is, whatever
    /// any process is called.
    pub(super) fn runtime_names_sandbox(&mut self, id: &str) {
        self.runtime_named = true;
        self.promote(id);
    }

    /// `id`'s init was seen named `pause`. Without the runtime's word the
    /// name makes it the sandbox, but never in place of a known sandbox
    /// that lives: at attach, one whose own init was seen named `pause`
    /// too; at an end, one that ever showed a process (a tenant can name
    /// its process `pause`, and name it so just before it dies). Returns
    /// whether `id` is the sandbox container now.
    pub(super) fn pause_seen(&mut self, id: &str, seen: PauseSeen) -> bool {
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
    fn push_workload(&mut self, c: Container) {
        self.containers.reserve_exact(1);
        self.containers.push(c);
    }

    fn all_containers(&self) -> impl Iterator<Item = &Container> {
        self.sandbox_container.as_deref().into_iter().chain(self.containers.iter())
    }
}

/// Who owns a cgroup id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupOwner {
    Pod { pod_uid: String },
    Container { pod_uid: String, container_id: String },
}

/// What a removed cgroup belonged to, kept for a while so that events for
/// it are late rather than unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    pub owner: CgroupOwner,
    pub removed_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_sandboxes: usize,
    pub max_containers_per_pod: usize,
    pub max_tombstones: usize,
    pub tombstone_ttl_ns: u64,
    pub max_host_cgroups: usize,
    pub max_oom_victims: usize,
    pub oom_victim_ttl_ns: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_sandboxes: 4096,
            max_containers_per_pod: 256,
            max_tombstones: 8192,
            tombstone_ttl_ns: 300 * 1_000_000_000,
            max_host_cgroups: 16384,
            max_oom_victims: 4096,
            oom_victim_ttl_ns: 120 * 1_000_000_000,
        }
    }
}

/// What the registry refuses or forgets when a bound is reached: the
/// label of `sandwatch_registry_evictions_total{what}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter, strum::EnumCount)]
#[strum(serialize_all = "snake_case")]
pub enum EvictionKind {
    /// A new pod beyond `max_sandboxes` (refused).
    Sandbox,
    /// A new container beyond `max_containers_per_pod` (refused).
    Container,
    /// The oldest tombstone beyond `max_tombstones` (forgotten).
    Tombstone,
    /// A host cgroup beyond `max_host_cgroups` (refused).
    HostCgroup,
    /// The oldest OOM victim beyond `max_oom_victims` (forgotten).
    OomVictim,
}

/// Things the registry refused or forgot because a bound was reached, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Evictions([u64; <EvictionKind as strum::EnumCount>::COUNT]);

impl Evictions {
    fn add(&mut self, kind: EvictionKind) {
        self.0[kind as usize] += 1;
    }

    /// How many of `kind` so far.
    pub fn get(&self, kind: EvictionKind) -> u64 {
        self.0[kind as usize]
    }
}

#[derive(Debug, Default)]
pub struct PodRegistry {
    pub(super) limits: Limits,
    pub(super) sandboxes: HashMap<String, Sandbox>,
    pub(super) cgroups: HashMap<u64, CgroupOwner>,
    host_cgroups: HashSet<u64>,
    tombstones: HashMap<u64, Tombstone>,
    tombstone_order: VecDeque<(u64, u64)>,
    oom_victims: HashMap<u32, (TaskKey, u64)>,
    oom_order: VecDeque<(u32, u64)>,
    pub evictions: Evictions,
    /// Names from the container runtime, if it is listened to.
    pub metadata: MetadataStore,
    /// Containers that appeared without a name, for the runtime to be asked.
    unnamed: VecDeque<String>,
    /// container id → init pid named by the runtime before the container's
    /// cgroup was seen; applied when it is, oldest dropped beyond the bound.
    early_inits: VecDeque<(String, u32)>,
    /// Pods torn down since the last call of `take_gone_pods` (bounded by
    /// the sandboxes cap: each was a tracked sandbox).
    gone_pods: Vec<String>,
    /// Bumped by every change to sandboxes, containers or inits, so that
    /// gauges are refreshed only when something changed.
    generation: u64,
}

impl PodRegistry {
    pub fn new(limits: Limits) -> Self {
        Self { limits, ..Self::default() }
    }

    pub fn sandbox(&self, pod_uid: &str) -> Option<&Sandbox> {
        self.sandboxes.get(pod_uid)
    }

    pub fn sandboxes(&self) -> impl Iterator<Item = &Sandbox> {
        self.sandboxes.values()
    }

    pub fn owner(&self, cgroup_id: u64) -> Option<&CgroupOwner> {
        self.cgroups.get(&cgroup_id)
    }

    /// The cgroup paths of every container of every pod.
    pub fn pod_cgroup_paths(&self) -> impl Iterator<Item = String> + '_ {
        self.sandboxes.values().flat_map(|s| s.all_containers().map(|c| c.path.clone()))
    }

    /// Every cgroup the registry holds: pods', containers' and the host's.
    pub fn known_cgroups(&self) -> impl Iterator<Item = u64> + '_ {
        self.cgroups.keys().chain(self.host_cgroups.iter()).copied()
    }

    pub fn tombstone(&self, cgroup_id: u64) -> Option<&Tombstone> {
        self.tombstones.get(&cgroup_id)
    }

    /// The cgroup of a container by its id, live or remembered by a
    /// tombstone (a runtime names containers by id, the kernel by cgroup).
    pub fn container_cgroup(&self, container_id: &str) -> Option<u64> {
        self.sandboxes
            .values()
            .flat_map(Sandbox::all_containers)
            .find(|c| c.id == container_id)
            .map(|c| c.cgroup_id)
            .or_else(|| {
                self.tombstones.iter().find_map(|(id, t)| match &t.owner {
                    CgroupOwner::Container { container_id: c, .. } if c == container_id => Some(*id),
                    _ => None,
                })
            })
    }

    /// Takes a runtime listing: names, and which container of each pod is
    /// its sandbox (authoritative over the first-container rule).
    pub fn apply_metadata(&mut self, snapshot: &Snapshot, now_ns: u64) {
        self.touch();
        self.metadata.apply(snapshot, now_ns);
        for pod in &snapshot.pods {
            if let Some(sandbox) = self.sandboxes.get_mut(&pod.uid) {
                sandbox.runtime_names_sandbox(&pod.sandbox_id);
            }
        }
    }

    /// Names for a pod and container, empty where the runtime said nothing.
    pub fn names(&self, pod_uid: &str, container_id: Option<&str>) -> Names {
        self.metadata.names(pod_uid, container_id)
    }

    /// Pods torn down since the last call.
    pub fn take_gone_pods(&mut self) -> Vec<String> {
        std::mem::take(&mut self.gone_pods)
    }

    /// Container ids seen without a name since the last call.
    pub fn take_unnamed(&mut self) -> Vec<String> {
        self.unnamed.drain(..).collect()
    }

    pub fn is_host_cgroup(&self, cgroup_id: u64) -> bool {
        self.host_cgroups.contains(&cgroup_id)
    }

    pub fn tracked_sandboxes(&self) -> usize {
        self.sandboxes.len()
    }

    pub fn tracked_containers(&self) -> usize {
        self.sandboxes.values().map(|s| s.all_containers().count()).sum()
    }

    /// Containers whose OOM kills take the whole container (`memory.oom.group`).
    pub fn oom_group_containers(&self) -> usize {
        self.sandboxes.values().flat_map(Sandbox::all_containers).filter(|c| c.oom_group == Some(true)).count()
    }

    /// The container owning `cgroup_id` (its own cgroup, or one below it).
    pub fn container_of(&self, cgroup_id: u64) -> Option<&Container> {
        match self.cgroups.get(&cgroup_id)? {
            CgroupOwner::Container { pod_uid, container_id } => self.sandboxes.get(pod_uid)?.container(container_id),
            CgroupOwner::Pod { .. } => None,
        }
    }

    /// Records what `memory.oom.group` of the container owning `cgroup_id` says.
    pub fn set_oom_group(&mut self, cgroup_id: u64, on: bool) {
        let Some(CgroupOwner::Container { pod_uid, container_id }) = self.cgroups.get(&cgroup_id) else { return };
        let Some(container) = self.sandboxes.get_mut(pod_uid).and_then(|s| s.container_mut(container_id)) else {
            return;
        };
        if container.oom_group != Some(on) {
            container.oom_group = Some(on);
            self.generation += 1;
        }
    }

    /// Container inits currently alive and known.
    pub fn tracked_processes(&self) -> usize {
        self.sandboxes.values().flat_map(Sandbox::all_containers).filter(|c| c.init.is_some()).count()
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub(super) fn touch(&mut self) {
        self.generation += 1;
    }

    pub fn tombstone_count(&self) -> usize {
        self.tombstones.len()
    }

    /// True when no pod state is held: only tombstones, host cgroups and
    /// recent OOM victims, all of which expire or are bounded.
    pub fn holds_no_pods(&self) -> bool {
        self.sandboxes.is_empty() && self.cgroups.is_empty()
    }

    /// A cgroup appeared (mkdir event or start-up scan). One nested below
    /// a container's is the container's own business: no pod, container or
    /// host cgroup of its own, and no entry (the kernel names the
    /// container's cgroup for its tasks).
    pub fn cgroup_created(&mut self, cgroup_id: u64, path: &str) {
        self.touch();
        if cgroup_path::nested(path) {
            return;
        }
        let Some(pod) = cgroup_path::parse(path) else {
            if self.host_cgroups.len() < self.limits.max_host_cgroups {
                self.host_cgroups.insert(cgroup_id);
            } else {
                self.evictions.add(EvictionKind::HostCgroup);
            }
            return;
        };
        // Already known (a scan and a mkdir event may both report it).
        if self.cgroups.contains_key(&cgroup_id) {
            return;
        }
        if !self.sandboxes.contains_key(&pod.pod_uid) && self.sandboxes.len() >= self.limits.max_sandboxes {
            self.evictions.add(EvictionKind::Sandbox);
            return;
        }
        let sandbox =
            self.sandboxes.entry(pod.pod_uid.clone()).or_insert_with(|| Sandbox::new(pod.pod_uid.clone(), pod.qos));
        match pod.container_id {
            None => {
                sandbox.cgroup_id = Some(cgroup_id);
                self.cgroups.insert(cgroup_id, CgroupOwner::Pod { pod_uid: pod.pod_uid });
            }
            Some(container_id) => {
                if sandbox.container(&container_id).is_some() {
                    // The container's cgroup made again under a new id.
                } else if sandbox.containers.len() >= self.limits.max_containers_per_pod {
                    self.evictions.add(EvictionKind::Container);
                    return;
                } else {
                    // The sandbox rule: the pod's first container cgroup is
                    // its sandbox until an init named `pause` says otherwise.
                    let role = if sandbox.had_container { ContainerRole::Workload } else { ContainerRole::Sandbox };
                    sandbox.had_container = true;
                    let mut container = Container::new(container_id.clone(), cgroup_id, role, path);
                    if let Some(i) = self.early_inits.iter().position(|(id, _)| *id == container_id) {
                        if let Some((_, pid)) = self.early_inits.remove(i) {
                            container.name_init(pid);
                        }
                    }
                    match role {
                        ContainerRole::Sandbox => sandbox.sandbox_container = Some(Box::new(container)),
                        ContainerRole::Workload => sandbox.push_workload(container),
                    }
                    match self.metadata.container(&container_id) {
                        Some(meta) if meta.sandbox => sandbox.runtime_names_sandbox(&container_id),
                        Some(_) => {}
                        None if self.unnamed.len() < MAX_UNNAMED => self.unnamed.push_back(container_id.clone()),
                        None => {}
                    }
                }
                self.cgroups.insert(cgroup_id, CgroupOwner::Container { pod_uid: pod.pod_uid, container_id });
            }
        }
        self.tombstones.remove(&cgroup_id);
    }

    /// A task was moved into a cgroup. The first task in an empty container
    /// cgroup is its init; an init named `pause` marks the sandbox.
    pub fn task_attached(&mut self, cgroup_id: u64, key: TaskKey, comm: &str) {
        self.touch();
        let Some(CgroupOwner::Container { pod_uid, container_id }) = self.cgroups.get(&cgroup_id) else {
            return;
        };
        let Some(sandbox) = self.sandboxes.get_mut(pod_uid) else { return };
        let Some(container) = sandbox.container_mut(container_id) else { return };
        let mut first_init = false;
        if container.cgroup_id == cgroup_id {
            if !container.attached {
                container.attached = true;
                // The start began when its first process did (the start-up
                // scan finds running containers long started).
                if key.start_ticks > 0 {
                    container.seen_at(key.start_ticks * TICK_NS);
                }
                if container.init.is_none() && container.exited_init.is_none() {
                    container.init = Some(Task { key, comm: comm.to_string() });
                    first_init = true;
                }
            } else if !container.init.as_ref().is_some_and(|t| t.key.matches(&key)) {
                container.joined_later = true;
            }
        }
        // Only the init's own first attach: a process that moves itself
        // again later chose its name.
        if comm == "pause" && first_init {
            let id = container_id.clone();
            sandbox.pause_seen(&id, PauseSeen::Attach);
        }
    }

    /// What the start-up scan found: every container that showed a
    /// process runs already, and its oldest process is its init (a scan
    /// sees processes as they are, not as they started).
    pub fn found_running(&mut self) {
        for sandbox in self.sandboxes.values_mut() {
            for container in sandbox.sandbox_container.as_deref_mut().into_iter().chain(sandbox.containers.iter_mut()) {
                if container.attached {
                    container.started = true;
                }
            }
        }
        self.touch();
    }

    /// The runtime created or started a container's init (containerd's
    /// TaskCreate, TaskStart):
    /// the authoritative init, whatever attached to the cgroup first (runc's
    /// bootstrap processes do, and exit before the real init runs).
    /// A TaskStart for an init whose exit the kernel already showed (the
    /// stream lags) changes nothing: the container died once.
    pub fn runtime_started(&mut self, container_id: &str, pid: u32) {
        for sandbox in self.sandboxes.values_mut() {
            if let Some(container) = sandbox.container_mut(container_id) {
                if container.exited_init.is_none_or(|k| k.pid != pid) {
                    container.name_init(pid);
                    self.generation += 1;
                }
                return;
            }
        }
        if self.early_inits.len() >= MAX_EARLY_INITS {
            self.early_inits.pop_front();
        }
        self.early_inits.push_back((container_id.to_string(), pid));
    }

    /// A cgroup was removed: its owner goes, leaving a tombstone.
    pub fn cgroup_removed(&mut self, cgroup_id: u64, now_ns: u64) {
        self.touch();
        self.host_cgroups.remove(&cgroup_id);
        let Some(owner) = self.cgroups.remove(&cgroup_id) else { return };
        match &owner {
            CgroupOwner::Container { pod_uid, container_id } => {
                if let Some(sandbox) = self.sandboxes.get_mut(pod_uid) {
                    if sandbox.container(container_id).is_some_and(|c| c.cgroup_id == cgroup_id) {
                        sandbox.remove_container(container_id);
                    }
                    // A pod known only through its containers (its own
                    // mkdir was never seen) ends with its last container.
                    if sandbox.cgroup_id.is_none() && sandbox.all_containers().next().is_none() {
                        self.sandboxes.remove(pod_uid);
                        self.gone_pods.push(pod_uid.clone());
                    }
                }
            }
            CgroupOwner::Pod { pod_uid } => {
                // The pod is gone, with whatever containers it still had.
                if let Some(sandbox) = self.sandboxes.remove(pod_uid) {
                    self.gone_pods.push(pod_uid.clone());
                    let left: Vec<(u64, String)> =
                        sandbox.all_containers().map(|c| (c.cgroup_id, c.id.clone())).collect();
                    for (id, container_id) in left {
                        self.cgroups.remove(&id);
                        self.bury(id, CgroupOwner::Container { pod_uid: pod_uid.clone(), container_id }, now_ns);
                    }
                }
            }
        }
        self.bury(cgroup_id, owner, now_ns);
    }

    fn bury(&mut self, cgroup_id: u64, owner: CgroupOwner, now_ns: u64) {
        self.tombstones.insert(cgroup_id, Tombstone { owner, removed_ns: now_ns });
        self.tombstone_order.push_back((cgroup_id, now_ns));
        while self.tombstones.len() > self.limits.max_tombstones {
            let Some((id, at)) = self.tombstone_order.pop_front() else { break };
            if self.tombstones.get(&id).is_some_and(|t| t.removed_ns == at) {
                self.tombstones.remove(&id);
                self.evictions.add(EvictionKind::Tombstone);
            }
        }
    }

    /// Records an OOM victim so that its exit can be told apart.
    pub(super) fn remember_oom_victim(&mut self, key: TaskKey, now_ns: u64) {
        self.touch();
        self.oom_victims.insert(key.pid, (key, now_ns));
        self.oom_order.push_back((key.pid, now_ns));
        while self.oom_victims.len() > self.limits.max_oom_victims {
            let Some((pid, at)) = self.oom_order.pop_front() else { break };
            if self.oom_victims.get(&pid).is_some_and(|(_, t)| *t == at) {
                self.oom_victims.remove(&pid);
                self.evictions.add(EvictionKind::OomVictim);
            }
        }
    }

    pub(super) fn was_oom_victim(&self, key: &TaskKey) -> bool {
        self.oom_victims.get(&key.pid).is_some_and(|(k, _)| k.matches(key))
    }

    /// Drops tombstones and OOM-victim records older than their TTL.
    pub fn expire(&mut self, now_ns: u64) {
        let ttl = self.limits.tombstone_ttl_ns;
        while let Some(&(id, at)) = self.tombstone_order.front() {
            if now_ns.saturating_sub(at) < ttl {
                break;
            }
            self.tombstone_order.pop_front();
            if self.tombstones.get(&id).is_some_and(|t| t.removed_ns == at) {
                self.tombstones.remove(&id);
            }
        }
        let ttl = self.limits.oom_victim_ttl_ns;
        while let Some(&(pid, at)) = self.oom_order.front() {
            if now_ns.saturating_sub(at) < ttl {
                break;
            }
            self.oom_order.pop_front();
            if self.oom_victims.get(&pid).is_some_and(|(_, t)| *t == at) {
                self.oom_victims.remove(&pid);
            }
        }
    }
}
