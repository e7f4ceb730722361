//! The node's pods as the kernel shows them: sandboxes, their containers,
//! each container's init task, and tombstones for what was torn down.
//! Pure data and methods, no I/O. Every lookup returns an `Option`; every
//! collection is bounded and counts what it evicts. By role: this module
//! (the index from cgroups to pods, and the changes the kernel and the
//! runtime report), [`pod`] (each pod's and container's state machines),
//! [`bounds`] (limits, evictions, and what is forgotten by age).

mod bounds;
mod pod;

use std::collections::{HashMap, HashSet, VecDeque};

use bounds::ExpiringMap;
pub use bounds::{EvictionKind, Evictions, Limits, Tombstone};
pub(super) use pod::Ending;
pub use pod::{Container, ContainerRole, PauseSeen, Sandbox, SandboxState, Task, TaskKey, START_WINDOW_NS, TICK_NS};

use super::{
    cgroup_path,
    metadata::{MetadataStore, Names, Snapshot},
};

/// Container ids waiting to be named by the runtime, at most.
const MAX_UNNAMED: usize = 1024;
/// Inits the runtime named before the kernel showed their container, at
/// most (the runtime's stream can overtake the kernel's batched events).
const MAX_EARLY_INITS: usize = 256;

/// Who owns a cgroup id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupOwner {
    Pod { pod_uid: String },
    Container { pod_uid: String, container_id: String },
}

#[derive(Debug, Default)]
pub struct PodRegistry {
    pub(super) limits: Limits,
    pub(super) sandboxes: HashMap<String, Sandbox>,
    pub(super) cgroups: HashMap<u64, CgroupOwner>,
    host_cgroups: HashSet<u64>,
    /// By cgroup id.
    tombstones: ExpiringMap<u64, Tombstone>,
    /// By pid.
    oom_victims: ExpiringMap<u32, TaskKey>,
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
        let forgotten = self.tombstones.insert(cgroup_id, Tombstone { owner }, now_ns, self.limits.max_tombstones);
        self.evictions.add_n(EvictionKind::Tombstone, forgotten);
    }

    /// Records an OOM victim so that its exit can be told apart.
    pub(super) fn remember_oom_victim(&mut self, key: TaskKey, now_ns: u64) {
        self.touch();
        let forgotten = self.oom_victims.insert(key.pid, key, now_ns, self.limits.max_oom_victims);
        self.evictions.add_n(EvictionKind::OomVictim, forgotten);
    }

    pub(super) fn was_oom_victim(&self, key: &TaskKey) -> bool {
        self.oom_victims.get(&key.pid).is_some_and(|k| k.matches(key))
    }

    /// Drops tombstones and OOM-victim records older than their TTL.
    pub fn expire(&mut self, now_ns: u64) {
        self.tombstones.expire(now_ns, self.limits.tombstone_ttl_ns);
        self.oom_victims.expire(now_ns, self.limits.oom_victim_ttl_ns);
    }
}
