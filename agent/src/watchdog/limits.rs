//! Memory limits as facts: every change of a pod's or a workload
//! container's `memory.max`, `memory.high` or swap limit, from what the
//! kernel shows, and how recently each was lowered, so that a kill soon
//! after a decrease says so ("limit lowered from 128 MiB to 32 MiB, 4 s
//! before") instead of reading as a leak.
//!
//! **Without polling.** Each cgroup's limits are read once when it is
//! first known; after that only when something says they may have moved:
//! the kernel (a write to one of its limit files, which inotify reports on
//! its directory: the kubelet's and the runtime's writes alike), the
//! runtime (containerd's container update, sent for a CRI
//! `UpdateContainerResources` before runc writes: read at the next tick
//! and once more a moment later), a full read of its memory by the
//! pressure watch, or an OOM kill (the limit the kernel counted at the
//! kill; a kill run inside a write that lowered it comes before the write's
//! own notice). A cgroup the kernel cannot be asked about (its watch
//! failed: every inotify instance or watch of the user in use, which a
//! container's root process can cause) is read again once a minute, and
//! asked again after 10 s, then less often (up to once a minute), until
//! the kernel agrees. When the kernel's queue of notices overflowed,
//! each cgroup is read once, spread over a minute.
//!
//! Bounded by the registry's pods and containers. Pure: what is read comes
//! through [`Host`].

use std::collections::{BTreeMap, HashMap, HashSet};

use super::Host;
pub use crate::events::memory::{LimitKind, MemoryLimits};
use crate::model::{
    registry::{Container, ContainerRole},
    PodRegistry,
};

/// How long after a decrease a kill is said to follow it.
pub const LOWERED_WINDOW_NS: u64 = 600 * SEC;
/// A cgroup whose watch failed is read again this often.
pub const RECHECK_NS: u64 = 60 * SEC;
/// A watch the kernel refused is asked for again after this long, twice
/// as long after each refusal, up to [`RECHECK_NS`].
pub const REWATCH_NS: u64 = 10 * SEC;
/// After the runtime said a container changed: read at the next tick and
/// once more this long after (runc writes after containerd's event).
pub const RUNTIME_RECHECK_NS: u64 = 2 * SEC;
const SEC: u64 = 1_000_000_000;

/// What said a limit may have moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum SeenBy {
    /// The kernel: a write to the cgroup's limit file.
    KernelNotice,
    /// containerd's container update (a CRI `UpdateContainerResources`).
    Runtime,
    /// A read of the cgroup for another reason (its pressure, a timer).
    Read,
    /// The limit the kernel counted at an OOM kill.
    OomKill,
}

/// How a limit moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Direction {
    Lowered,
    Raised,
    /// A limit where there was none.
    Set,
    /// No limit any more.
    Lifted,
}

impl Direction {
    fn of(from: Option<u64>, to: Option<u64>) -> Self {
        match (from, to) {
            (Some(f), Some(t)) if t < f => Direction::Lowered,
            (Some(_), Some(_)) => Direction::Raised,
            (None, _) => Direction::Set,
            (Some(_), None) => Direction::Lifted,
        }
    }

    /// Whether the cgroup has less room after it.
    pub fn tightens(self) -> bool {
        matches!(self, Direction::Lowered | Direction::Set)
    }
}

/// Whose limit: a pod's own (its cgroup above its containers), or a
/// container's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum LimitScope {
    Pod,
    Container,
}

/// One limit of one cgroup moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitChange {
    pub cgroup_id: u64,
    pub scope: LimitScope,
    pub kind: LimitKind,
    /// `None`: unlimited.
    pub from: Option<u64>,
    pub to: Option<u64>,
    pub direction: Direction,
    /// When it was seen (CLOCK_BOOTTIME ns).
    pub seen_ns: u64,
    pub seen_by: SeenBy,
}

/// The last decrease of a cgroup's memory limit, as a kill that follows
/// it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lowered {
    pub kind: LimitKind,
    pub from: Option<u64>,
    pub to: Option<u64>,
    /// How long before the kill it was seen.
    pub ago_ns: u64,
}

/// One pod's or container's limits as last read.
#[derive(Debug)]
struct Known {
    path: String,
    scope: LimitScope,
    limits: MemoryLimits,
    /// The kernel says when its limit files are written.
    noticed: bool,
    /// A notice may have been lost (the kernel's queue overflowed): read
    /// at `next_read_ns` whatever `noticed` says.
    suspect: bool,
    next_read_ns: u64,
    /// Whether its pressure's memory events are to be watched too.
    events: bool,
    /// While the kernel refuses its watch: when to ask again, and the
    /// wait after that.
    next_watch_ns: u64,
    rewatch_ns: u64,
    /// The last decrease of each limit: (from, to, seen at).
    lowered: BTreeMap<LimitKind, (Option<u64>, Option<u64>, u64)>,
}

/// Reads done since start, by what asked for them, for the agent's own
/// metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitReads {
    /// A cgroup first known.
    pub start: u64,
    /// The kernel said a limit file was written.
    pub kernel_notice: u64,
    /// The runtime said a container changed.
    pub runtime: u64,
    /// A cgroup the kernel cannot tell of (or whose notice was lost), on
    /// its timer.
    pub timer: u64,
    /// Cgroups whose watch the kernel refused (read on a timer instead).
    pub watches_refused: u64,
    /// Watches asked for again after a refusal, and those the kernel then
    /// agreed to.
    pub rewatches: u64,
    pub rewatched: u64,
    /// Times the kernel's queue of notices overflowed.
    pub overflows: u64,
}

/// Every pod's and workload container's memory limits.
#[derive(Debug, Default)]
pub struct LimitWatch {
    known: HashMap<u64, Known>,
    /// Reads the runtime's updates asked for: (due, cgroup).
    runtime_reads: Vec<(u64, u64)>,
    /// The registry generation last reconciled with.
    generation: Option<u64>,
    pub reads: LimitReads,
}

impl LimitWatch {
    /// Follows the registry: new pods and workload containers are read
    /// and watched (containers' memory events too when `events`), gone
    /// ones forgotten.
    pub fn reconcile(&mut self, host: &mut impl Host, registry: &PodRegistry, now_ns: u64, events: bool) {
        if self.generation == Some(registry.generation()) {
            return;
        }
        self.generation = Some(registry.generation());
        let mut live = HashSet::new();
        // Followed once a process runs in them: before, the runtime is still
        // setting a new container up (runc writes its limits after it made
        // its cgroup), and that is no change of anyone's limit.
        let running = |c: &Container| c.init.is_some() || c.exited_init.is_some();
        for sandbox in registry.sandboxes() {
            let mut containers = sandbox.workloads().chain(sandbox.sandbox_container.as_deref());
            let pod_path = sandbox
                .workloads()
                .chain(sandbox.sandbox_container.as_deref())
                .find_map(|c| c.path.rsplit_once('/').map(|(pod, _)| pod.to_string()));
            if let (Some(id), Some(path), true) = (sandbox.cgroup_id, pod_path, containers.any(running)) {
                live.insert(id);
                self.learn(host, id, &path, LimitScope::Pod, false, now_ns);
            }
            for c in sandbox.workloads().filter(|c| c.role == ContainerRole::Workload && running(c)) {
                live.insert(c.cgroup_id);
                self.learn(host, c.cgroup_id, &c.path, LimitScope::Container, events, now_ns);
            }
        }
        let gone: Vec<u64> = self.known.keys().filter(|id| !live.contains(id)).copied().collect();
        for id in gone {
            self.known.remove(&id);
            host.unwatch_memory(id);
        }
        self.runtime_reads.retain(|(_, id)| self.known.contains_key(id));
    }

    fn learn(&mut self, host: &mut impl Host, id: u64, path: &str, scope: LimitScope, events: bool, now_ns: u64) {
        if self.known.contains_key(&id) {
            return;
        }
        // Watched first: a write between the read and the watch is read.
        let noticed = host.watch_memory(id, path, events);
        if !noticed {
            self.reads.watches_refused += 1;
        }
        self.reads.start += 1;
        let limits = host.memory_limits(path).unwrap_or_default();
        self.known.insert(
            id,
            Known {
                path: path.to_string(),
                scope,
                limits,
                noticed,
                suspect: false,
                next_read_ns: now_ns.saturating_add(RECHECK_NS),
                events,
                next_watch_ns: now_ns.saturating_add(REWATCH_NS),
                rewatch_ns: REWATCH_NS.saturating_mul(2),
                lowered: BTreeMap::new(),
            },
        );
    }

    /// Asks the kernel again to watch the cgroups it refused, those due
    /// (each waits twice as long after each refusal, up to a minute).
    pub fn retry_watches(&mut self, host: &mut impl Host, now_ns: u64) {
        for (&id, k) in self.known.iter_mut().filter(|(_, k)| !k.noticed && k.next_watch_ns <= now_ns) {
            self.reads.rewatches += 1;
            k.noticed = host.watch_memory(id, &k.path, k.events);
            if k.noticed {
                self.reads.rewatched += 1;
                // What moved while nobody watched is read once.
                k.next_read_ns = now_ns;
                k.suspect = true;
            } else {
                k.next_watch_ns = now_ns.saturating_add(k.rewatch_ns);
                k.rewatch_ns = k.rewatch_ns.saturating_mul(2).min(RECHECK_NS);
            }
        }
    }

    /// Cgroups watched now.
    pub fn watched(&self) -> usize {
        self.known.len()
    }

    /// Reads `cgroup_id`'s limits again (something said they may have
    /// moved); the changes into `out`.
    pub fn reread(
        &mut self,
        host: &impl Host,
        cgroup_id: u64,
        seen_by: SeenBy,
        now_ns: u64,
        out: &mut Vec<LimitChange>,
    ) {
        let Some(k) = self.known.get_mut(&cgroup_id) else { return };
        match seen_by {
            SeenBy::KernelNotice => self.reads.kernel_notice += 1,
            SeenBy::Runtime => self.reads.runtime += 1,
            SeenBy::Read | SeenBy::OomKill => self.reads.timer += 1,
        }
        k.next_read_ns = now_ns.saturating_add(RECHECK_NS);
        k.suspect = false;
        // Gone already (or without the memory controller): nothing moved
        // that anyone can act on.
        let Some(limits) = host.memory_limits(&k.path) else { return };
        update(cgroup_id, k, limits, seen_by, now_ns, out);
    }

    /// The runtime says `cgroup_id`'s container changed (its limits may
    /// have): read at the next tick, and once more a moment later (runc
    /// writes after the runtime's event).
    pub fn runtime_updated(&mut self, cgroup_id: u64, now_ns: u64) {
        if !self.known.contains_key(&cgroup_id) {
            return;
        }
        // Bounded: one pending pair per cgroup.
        self.runtime_reads.retain(|(_, id)| *id != cgroup_id);
        self.runtime_reads.push((now_ns, cgroup_id));
        self.runtime_reads.push((now_ns.saturating_add(RUNTIME_RECHECK_NS), cgroup_id));
    }

    /// The kernel's notices may have been lost (its queue overflowed):
    /// each cgroup is read once, spread over a minute, not all at once. A
    /// read already owed to an earlier overflow keeps its time: a tenant
    /// that overflows the queue every tick (two files of its own written
    /// alternately) pushed every read past the tick, and nothing was ever
    /// read again.
    pub fn notices_lost(&mut self, now_ns: u64) {
        self.reads.overflows += 1;
        for (id, k) in self.known.iter_mut().filter(|(_, k)| !k.suspect) {
            k.suspect = true;
            k.next_read_ns = now_ns.saturating_add(id.wrapping_mul(0x9e37_79b9_7f4a_7c15) % RECHECK_NS);
        }
    }

    /// What a read for another reason found of `cgroup_id`'s `kind`.
    pub fn observed(
        &mut self,
        cgroup_id: u64,
        kind: LimitKind,
        value: Option<u64>,
        seen_by: SeenBy,
        now_ns: u64,
        out: &mut Vec<LimitChange>,
    ) {
        let Some(k) = self.known.get_mut(&cgroup_id) else { return };
        if k.limits.get(kind) == value {
            return;
        }
        let mut limits = k.limits;
        match kind {
            LimitKind::MemoryMax => limits.max = value,
            LimitKind::MemoryHigh => limits.high = value,
            LimitKind::Swap => limits.swap = value,
        }
        update(cgroup_id, k, limits, seen_by, now_ns, out);
    }

    /// The reads due by `now_ns`: the runtime's, and those of cgroups the
    /// kernel cannot tell of (or whose notices were lost).
    pub fn due(&mut self, now_ns: u64) -> Vec<(u64, SeenBy)> {
        let mut due: Vec<(u64, SeenBy)> = Vec::new();
        self.runtime_reads.retain(|&(at, id)| {
            if at <= now_ns {
                due.push((id, SeenBy::Runtime));
            }
            at > now_ns
        });
        let mut timed: Vec<u64> = self
            .known
            .iter()
            .filter(|(_, k)| (!k.noticed || k.suspect) && k.next_read_ns <= now_ns)
            .map(|(id, _)| *id)
            .collect();
        timed.sort_unstable();
        due.extend(timed.into_iter().map(|id| (id, SeenBy::Read)));
        due.dedup_by_key(|(id, _)| *id);
        due
    }

    /// The last decrease of `cgroup_id`'s memory limit (`memory.max`, or
    /// the swap limit that holds it on v1) within [`LOWERED_WINDOW_NS`]
    /// before `at_ns`.
    pub fn lowered_before(&self, cgroup_id: u64, at_ns: u64) -> Option<Lowered> {
        let k = self.known.get(&cgroup_id)?;
        k.lowered
            .iter()
            .filter(|(kind, _)| **kind != LimitKind::MemoryHigh)
            .filter(|(_, (_, _, seen))| at_ns.saturating_sub(*seen) <= LOWERED_WINDOW_NS)
            .max_by_key(|(_, (_, _, seen))| *seen)
            .map(|(kind, (from, to, seen))| Lowered {
                kind: *kind,
                from: *from,
                to: *to,
                ago_ns: at_ns.saturating_sub(*seen),
            })
    }

    /// The limits last read of `cgroup_id`.
    pub fn limits(&self, cgroup_id: u64) -> Option<MemoryLimits> {
        self.known.get(&cgroup_id).map(|k| k.limits)
    }
}

/// `k`'s limits are now `limits`: each change into `out`, each decrease
/// remembered.
fn update(
    cgroup_id: u64,
    k: &mut Known,
    limits: MemoryLimits,
    seen_by: SeenBy,
    now_ns: u64,
    out: &mut Vec<LimitChange>,
) {
    for (kind, from, to) in k.limits.changes(&limits) {
        let direction = Direction::of(from, to);
        if direction.tightens() {
            k.lowered.insert(kind, (from, to, now_ns));
        } else {
            k.lowered.remove(&kind);
        }
        out.push(LimitChange { cgroup_id, scope: k.scope, kind, from, to, direction, seen_ns: now_ns, seen_by });
    }
    k.limits = limits;
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_change_has_a_direction() {
        assert_eq!(Direction::of(Some(128 * MIB), Some(32 * MIB)), Direction::Lowered);
        assert_eq!(Direction::of(Some(32 * MIB), Some(128 * MIB)), Direction::Raised);
        assert_eq!(Direction::of(None, Some(32 * MIB)), Direction::Set);
        assert_eq!(Direction::of(Some(32 * MIB), None), Direction::Lifted);
        assert!(Direction::Set.tightens() && Direction::Lowered.tightens());
        assert!(!Direction::Raised.tightens() && !Direction::Lifted.tightens());
    }

    #[test]
    fn limits_list_what_moved_in_order() {
        let before = MemoryLimits { max: Some(128 * MIB), high: None, swap: Some(128 * MIB) };
        let after = MemoryLimits { max: Some(32 * MIB), high: Some(24 * MIB), swap: Some(128 * MIB) };
        assert_eq!(
            before.changes(&after),
            [(LimitKind::MemoryMax, Some(128 * MIB), Some(32 * MIB)), (LimitKind::MemoryHigh, None, Some(24 * MIB))]
        );
        assert!(after.changes(&after).is_empty());
    }
}
