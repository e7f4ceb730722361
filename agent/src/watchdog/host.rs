//! What the watchdog core must ask the node, as one trait: cgroup settings
//! and trees, process names in /proc, the kernel's maps, the pipeline's
//! loss counters and the runtime clients' state. `crate::node_host` answers it
//! on a real node; the core's unit tests answer it with a fake.

use std::collections::HashSet;

use crate::{
    events::{kernel::CgroupChange, Event},
    watchdog::{crashes::RuntimeProcess, explain::MemoryStat, limits::MemoryLimits, pressure::MemorySample},
};

/// What the kernel said of the watched cgroups since the last look.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryWakeups {
    /// Containers whose memory events changed (v2 `memory.events`: the
    /// usage met `memory.max`, crossed `memory.high`, an OOM), or whose
    /// usage crossed its threshold (v1) or whose tasks stalled (v2 PSI).
    pub events: Vec<u64>,
    /// Pods and containers whose limit files were written.
    pub limits: Vec<u64>,
    /// The kernel's queue overflowed: any of them may have changed.
    pub overflowed: bool,
    /// The watches the kernel refused so far (totals since start).
    pub failures: WatchFailures,
}

/// Watches of cgroups' memory files the kernel refused, by why (totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchFailures {
    /// No inotify instance: every one of the user's is in use
    /// (`fs.inotify.max_user_instances`, shared by every root process on
    /// the node, a container's too).
    pub instances: u64,
    /// No watch left (`fs.inotify.max_user_watches`).
    pub watches: u64,
    /// The cgroup was gone.
    pub gone: u64,
    /// Anything else.
    pub other: u64,
}

/// The pipeline's loss counters as they stand (totals since start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LossTotals {
    /// Records the kernel dropped (ring buffer full), every kind.
    pub kernel: u64,
    /// Of those, cgroup mkdirs and rmdirs.
    pub kernel_cgroup_changes: u64,
    /// Records the reader's queues had no room for, every kind.
    pub channel: u64,
    /// Of those, cgroup mkdirs and rmdirs.
    pub channel_cgroup_changes: u64,
    /// Records that did not decode.
    pub decode: u64,
    /// Host process exits the kernel counted instead of streaming.
    pub host_exits: u64,
}

/// The cgroup tree as it is now, parents first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupTree {
    pub cgroups: Vec<CgroupChange>,
    /// False when the walk stopped at its bound: cgroups may be missing.
    pub complete: bool,
}

/// What a tracked cgroup is, for the kernel's programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracking {
    Pod,
    /// A container's cgroup, at `level` of the hierarchy (the root is 0):
    /// what is nested below it is the container's.
    Container {
        level: u32,
    },
}

pub trait Host {
    // --- cgroupfs ---------------------------------------------------------

    /// `memory.oom.group` of the cgroup at `path` (v2; `Some(false)` on v1).
    fn oom_group(&self, path: &str) -> Option<bool>;
    /// The kernel's count of the OOMs it ran for the limit of the cgroup at
    /// `path` itself, where a file shows it (v2; `None` on v1).
    fn oom_count(&self, path: &str) -> Option<u64>;
    /// The memory of the cgroup at `path` as its `memory.stat` says (what
    /// an OOM kill's explanation reads of the cgroup whose limit fired).
    fn memory_stat(&self, path: &str) -> Option<MemoryStat>;
    /// The memory the cgroup at `path` uses now.
    fn memory_usage(&self, path: &str) -> Option<u64>;
    /// The memory limit of the cgroup at `path`; `None` when unlimited or
    /// unreadable.
    fn memory_limit(&self, path: &str) -> Option<u64>;
    /// A full read of the cgroup at `path` for its pressure: usage, limit,
    /// working set, limit hits, refaults, PSI.
    fn memory_sample(&self, path: &str) -> Option<MemorySample>;
    /// The memory limits of the cgroup at `path`; `None` when unreadable.
    fn memory_limits(&self, path: &str) -> Option<MemoryLimits>;
    /// Asks the kernel to say when the limit files of the cgroup
    /// `cgroup_id` at `path` are written, and with `events` when its
    /// memory events change (v2 `memory.events`; v1 has no such file);
    /// false when it cannot (it is read on a timer then).
    fn watch_memory(&mut self, cgroup_id: u64, path: &str, events: bool) -> bool;
    /// Asks the kernel to say at once when container `cgroup_id`'s memory
    /// nears its limit: on v1 its usage crossing `threshold` bytes, on v2
    /// its tasks stalling (PSI); replaces what it asked before. False when
    /// it cannot (a read-only cgroupfs, no PSI): it is screened then.
    fn watch_usage(&mut self, cgroup_id: u64, path: &str, threshold: u64) -> bool;
    /// Forgets what the kernel was asked of `cgroup_id`.
    fn unwatch_memory(&mut self, cgroup_id: u64);
    /// What the kernel said since the last call.
    fn take_memory_wakeups(&mut self) -> MemoryWakeups;
    /// The id (inode) of the cgroup at `path`, if it exists.
    fn cgroup_id(&self, path: &str) -> Option<u64>;
    /// What exists at start-up, as the events that would have made it:
    /// every cgroup a mkdir (parents first), every process in a pod's
    /// container an attach (oldest first), stamped `now_ns`.
    fn scan(&self, now_ns: u64) -> Vec<Event>;
    /// The cgroup tree now, stamped `now_ns`.
    fn cgroup_tree(&self, now_ns: u64) -> CgroupTree;

    // --- /proc ------------------------------------------------------------

    /// The name of process `pid` started at `start_ns` (0: any start),
    /// while it is not reaped.
    fn comm(&self, pid: u32, start_ns: u64) -> Option<String>;
    /// The live processes named like a configured runtime, with their
    /// cgroups.
    fn runtime_processes(&self) -> Vec<RuntimeProcess>;

    // --- the kernel's maps ------------------------------------------------

    /// Streams the events of tasks in `cgroup_id`, which is `what`; false
    /// if the map is full.
    fn track(&mut self, cgroup_id: u64, what: Tracking) -> bool;
    /// Counts them in the kernel instead.
    fn untrack(&mut self, cgroup_id: u64);
    /// Puts the threads of these cgroups into the kernel's task table;
    /// returns how many.
    fn seed_tasks(&mut self, cgroups: &HashSet<u64>) -> usize;

    // --- the pipeline and the runtime clients -----------------------------

    fn losses(&self) -> LossTotals;
    /// Whether the last CRI listing succeeded.
    fn listing_up(&self) -> bool;
    /// Whether the runtime's event stream is connected.
    fn stream_up(&self) -> bool;
    /// The pid at the other end of the runtime's socket (its peer
    /// credentials), once connected.
    fn runtime_peer(&self) -> Option<u32>;
    /// Asks the CRI listing for a container's names (no wait).
    fn want_names(&self, container_id: &str);
    /// Asks the CRI for the status of a container whose init ended (no
    /// wait): it comes back as a `RuntimeEvent::ContainerStatus`.
    fn want_status(&self, container_id: &str);
}
