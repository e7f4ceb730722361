//! A kill explained: which limit fired (read by the kernel at the kill,
//! [`super::oom_limit`]), that cgroup's usage and limit then, what filled
//! it — anonymous memory, page cache, shmem (tmpfs, `emptyDir` with
//! `medium: Memory`, `/dev/shm`), kernel memory — and the one `cause` that
//! names the largest; for a pod's limit, the pod's containers by usage.
//!
//! The split is the cgroup's `memory.stat`, read when the agent handles
//! the kill (milliseconds after it; the record says how long). By then the
//! kernel may have freed the victim's anonymous memory (the OOM reaper
//! does, at once): what the usage dropped since the kill, up to the
//! victim's own anonymous RSS, is counted back as anonymous. Page cache
//! and shmem are not freed by a kill. Where the kernel did not say the
//! victim's RSS (`oom:mark_victim` has only `pid` on 5.10), the whole drop
//! counts back: else a read after the reaper would name what little is
//! left (kernel memory, a few pages of cache) as the cause.

use super::{oom_limit, Fired, Host};
pub use crate::events::kernel::MemoryStat;
use crate::{
    events::kernel::{KernelDecision, OomKill as KernelOomKill},
    model::{registry::Container, PodRegistry},
};

/// What filled the cgroup whose limit fired: the largest part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum OomCause {
    /// The processes' own memory (heap, stacks, anonymous mappings).
    Anon,
    /// Files' pages the kernel could not reclaim (dirty, mapped, locked).
    PageCache,
    /// tmpfs, `emptyDir` with `medium: Memory`, `/dev/shm`, shared memory.
    Shmem,
    /// Kernel memory: slab, stacks, page tables, socket buffers.
    Kernel,
    /// Not read (no cgroup's limit to read, or it was gone).
    Unknown,
}

/// The cgroup's memory at the kill, as far as it can be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorySplit {
    pub anon: u64,
    pub page_cache: u64,
    pub shmem: u64,
    pub kernel: u64,
    /// Beside them, not among the causes: what was out in swap, and of
    /// the memory in RAM what zswap held compressed, when read.
    pub swap: u64,
    pub zswap: u64,
    /// How long after the kill `memory.stat` was read.
    pub read_after_ns: u64,
}

impl MemorySplit {
    /// `now` read `read_after_ns` after the kill; `usage_at_kill` as the
    /// kernel counted it then, where known; the victim's anonymous RSS,
    /// where the kernel said it.
    pub fn at_kill(now: &MemoryStat, usage_at_kill: Option<u64>, victim_anon: Option<u64>, read_after_ns: u64) -> Self {
        let dropped = usage_at_kill.map_or(0, |at| at.saturating_sub(now.usage));
        let freed = victim_anon.map_or(dropped, |anon| dropped.min(anon));
        // Usage (the page counter, exact) the parts (statistics the kernel
        // flushes lazily) do not explain was charged since their last
        // flush: what ran out, the allocation that called the OOM killer.
        // A read during an OOM can skip the flush (reclaim flushes then,
        // and a concurrent flusher skips: seen on 6.1, a dd's 31 MiB
        // missing and the cgroup's old kernel memory named the cause).
        let parts = now.anon.saturating_add(now.file).saturating_add(now.kernel);
        let unflushed = now.usage.saturating_sub(parts);
        Self {
            anon: now.anon.saturating_add(freed).saturating_add(unflushed),
            page_cache: now.file.saturating_sub(now.shmem),
            shmem: now.shmem,
            kernel: now.kernel,
            swap: now.swap,
            zswap: now.zswap,
            read_after_ns,
        }
    }

    /// The largest part; anonymous memory on a tie (what a kill frees).
    pub fn cause(&self) -> OomCause {
        [
            (self.anon, OomCause::Anon),
            (self.shmem, OomCause::Shmem),
            (self.page_cache, OomCause::PageCache),
            (self.kernel, OomCause::Kernel),
        ]
        .into_iter()
        .fold((0, OomCause::Unknown), |best, (bytes, cause)| if bytes > best.0 { (bytes, cause) } else { best })
        .1
    }
}

/// A container of the pod whose limit fired, with what it used after the kill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUse {
    pub container_id: String,
    /// Its name, where the runtime said it.
    pub container: String,
    pub usage_bytes: u64,
}

/// Where which limit fired was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum DecidedBy {
    /// The OOM killer's own control: the cgroup it ran for.
    OomControl,
    /// The kernel's count of the OOMs each memory cgroup ran for its own
    /// limit: the one whose count rose (`super::oom_counts`).
    OomCount,
    /// The page counters of the victim's memory cgroups.
    VictimMemcg,
    /// The page counters of the allocating task's memory cgroups.
    AllocatingTaskMemcg,
}

impl DecidedBy {
    pub fn of(o: &KernelOomKill) -> Self {
        match (o.decision, o.levels_of_victim) {
            (Some(_), _) => Self::OomControl,
            (None, true) => Self::VictimMemcg,
            (None, false) => Self::AllocatingTaskMemcg,
        }
    }
}

/// One kill's explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    pub fired: Fired,
    /// What said which limit fired.
    pub decided_by: DecidedBy,
    pub unknown: Option<oom_limit::UnknownLimit>,
    /// The usage and limit of the cgroup whose limit fired, at the kill.
    pub usage_bytes: Option<u64>,
    pub limit_bytes: Option<u64>,
    /// What filled it (a global OOM: the victim's pod).
    pub memory: Option<MemorySplit>,
    pub cause: OomCause,
    /// The pod's containers by usage, largest first, when the pod's limit fired.
    pub containers: Vec<ContainerUse>,
}

impl Explanation {
    pub const UNKNOWN: Explanation = Explanation {
        fired: Fired::UNKNOWN,
        decided_by: DecidedBy::AllocatingTaskMemcg,
        unknown: None,
        usage_bytes: None,
        limit_bytes: None,
        memory: None,
        cause: OomCause::Unknown,
        containers: Vec::new(),
    };
}

/// The cgroups a kill is placed against: the victim's container (or, where
/// the victim is in none, the triggering task's) and its pod.
struct Place<'a> {
    container: &'a Container,
    pod_path: &'a str,
    pod_cgroup: Option<u64>,
    pod_uid: &'a str,
}

fn place<'a>(registry: &'a PodRegistry, cgroup_id: u64) -> Option<Place<'a>> {
    let container = registry.container_of(cgroup_id)?;
    let pod_uid = match registry.owner(cgroup_id)? {
        crate::model::registry::CgroupOwner::Container { pod_uid, .. } => pod_uid.as_str(),
        crate::model::registry::CgroupOwner::Pod { .. } => return None,
    };
    let pod_path = container.path.rsplit_once('/').map_or("", |(pod, _)| pod);
    Some(Place { container, pod_path, pod_cgroup: registry.sandbox(pod_uid).and_then(|s| s.cgroup_id), pod_uid })
}

/// Explains OOM kill `o`, handled at `now_ns`: judges the levels the kernel
/// read (`rose`: for each, whether the kernel ran the OOM killer for its
/// limit since it was last seen, where that is known), and reads the
/// cgroup whose limit fired through `host`.
pub fn explain(
    host: &impl Host,
    registry: &PodRegistry,
    o: &KernelOomKill,
    rose: &[Option<bool>],
    now_ns: u64,
) -> Explanation {
    let margins = oom_limit::Margins::of(crate::os::page_size(), crate::os::cpus());
    let victim = o.victim.and_then(|v| place(registry, v.cgroup_id));
    let trigger = place(registry, o.trigger_cgroup_id);
    let index = |p: &Place| oom_limit::Placed {
        container: o.levels.iter().position(|l| l.cgroup_id == p.container.cgroup_id),
        pod: p.pod_cgroup.and_then(|id| o.levels.iter().position(|l| l.cgroup_id == id)),
        known: true,
    };
    let among = |p: &oom_limit::Placed| p.container.is_some() || p.pod.is_some();
    // The victim's place (the kernel's decision is always the victim's:
    // it was picked below the cgroup that fired), or, where only the
    // allocating task's counters were read, wherever they are.
    let (placed, at) = match (&victim, &trigger) {
        (Some(v), _) if o.decision.is_some() || among(&index(v)) => (index(v), victim.as_ref()),
        (_, Some(t)) => (index(t), trigger.as_ref()),
        _ => (oom_limit::Placed::default(), victim.as_ref()),
    };
    let read = oom_limit::Read { levels: &o.levels, cut: o.levels_cut, decision: o.decision, rose };
    let judged = oom_limit::judge(read, placed, margins);
    let level = judged.level.and_then(|i| o.levels.get(i));
    // The counter that was at its limit: memory, or (v1) memory + swap,
    // whichever was nearer it.
    let gap = |usage: u64, limit: Option<u64>| limit.map(|max| max.saturating_sub(usage));
    let (usage_bytes, limit_bytes) = match level {
        Some(l) => match (gap(l.usage_bytes, l.limit_bytes), gap(l.memsw_usage_bytes, l.memsw_limit_bytes)) {
            (Some(memory), Some(memsw)) if memsw < memory => (Some(l.memsw_usage_bytes), l.memsw_limit_bytes),
            (None, Some(_)) => (Some(l.memsw_usage_bytes), l.memsw_limit_bytes),
            _ => (Some(l.usage_bytes), l.limit_bytes),
        },
        None => (None, None),
    };
    // Whose memory to read: the cgroup whose limit fired, else the pod.
    let path: Option<String> = at.and_then(|p| match (judged.fired.limit, judged.level) {
        (oom_limit::OomLimit::Container, _) => Some(p.container.path.clone()),
        (oom_limit::OomLimit::Node, Some(i)) => match o.decision {
            // The kernel named the cgroup: the one above the pod with its id.
            Some(KernelDecision::Memcg { cgroup_id }) => {
                oom_limit::above_pod(p.pod_path).into_iter().find(|path| host.cgroup_id(path) == Some(cgroup_id))
            }
            _ => {
                let above = i.checked_sub(placed.pod? + 1)?;
                oom_limit::above_pod(p.pod_path).into_iter().nth(above)
            }
        },
        _ => Some(p.pod_path.to_string()),
    });
    let victim_anon = o.rss.map(|r| r.anon_rss_kb.saturating_mul(1024));
    let read_after_ns = now_ns.saturating_sub(o.ts_ns);
    let memory = path.as_deref().and_then(|p| host.memory_stat(p)).map(|now| {
        let at_kill = if judged.level.is_some() { usage_bytes } else { None };
        MemorySplit::at_kill(&now, at_kill, victim_anon, read_after_ns)
    });
    let mut containers = Vec::new();
    if let (oom_limit::OomLimit::Pod, Some(p)) = (judged.fired.limit, at) {
        if let Some(sandbox) = registry.sandbox(p.pod_uid) {
            for c in sandbox.sandbox_container.as_deref().into_iter().chain(sandbox.workloads()) {
                if let Some(usage_bytes) = host.memory_usage(&c.path) {
                    let container = registry.names(p.pod_uid, Some(&c.id)).container;
                    containers.push(ContainerUse { container_id: c.id.clone(), container, usage_bytes });
                }
            }
        }
        containers.sort_by(|a, b| b.usage_bytes.cmp(&a.usage_bytes).then_with(|| a.container_id.cmp(&b.container_id)));
    }
    Explanation {
        fired: judged.fired,
        decided_by: if judged.by_count { DecidedBy::OomCount } else { DecidedBy::of(o) },
        unknown: judged.unknown,
        usage_bytes,
        limit_bytes,
        cause: memory.as_ref().map_or(OomCause::Unknown, MemorySplit::cause),
        memory,
        containers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_cgroup_full_of_tmpfs_is_shmem_whatever_the_victims_rss() {
        let now = MemoryStat {
            usage: 48 * MIB,
            anon: 2 * MIB,
            file: 45 * MIB,
            shmem: 44 * MIB,
            kernel: MIB,
            ..MemoryStat::default()
        };
        let split = MemorySplit::at_kill(&now, Some(48 * MIB), Some(MIB), 3_000_000);
        assert_eq!((split.shmem, split.page_cache, split.anon), (44 * MIB, MIB, 2 * MIB));
        assert_eq!(split.cause(), OomCause::Shmem);
    }

    #[test]
    fn the_victims_anonymous_memory_freed_before_the_read_counts_back_as_anonymous() {
        // At the kill 48 MiB; read after the reaper freed the victim's 40.
        let now =
            MemoryStat { usage: 8 * MIB, anon: MIB, file: 6 * MIB, shmem: 0, kernel: MIB, ..MemoryStat::default() };
        let split = MemorySplit::at_kill(&now, Some(48 * MIB), Some(40 * MIB), 1_000_000);
        assert_eq!(split.anon, 41 * MIB);
        assert_eq!(split.cause(), OomCause::Anon);
        // Never more than the victim had: the rest went otherwise.
        let split = MemorySplit::at_kill(&now, Some(48 * MIB), Some(10 * MIB), 1_000_000);
        assert_eq!(split.anon, 11 * MIB);
        assert_eq!(split.cause(), OomCause::Anon);
        let nothing = MemorySplit::at_kill(&MemoryStat::default(), None, None, 0);
        assert_eq!(nothing.cause(), OomCause::Unknown);
    }

    #[test]
    fn without_the_victims_rss_the_whole_drop_since_the_kill_counts_back_as_anonymous() {
        // 5.10: no RSS from mark_victim; read after the reaper freed 256
        // MiB, what is left is mostly kernel memory.
        let now = MemoryStat { usage: 3 * MIB, anon: 0, file: MIB, shmem: 0, kernel: 2 * MIB, ..MemoryStat::default() };
        let split = MemorySplit::at_kill(&now, Some(259 * MIB), None, 40_000_000);
        assert_eq!(split.anon, 256 * MIB);
        assert_eq!(split.cause(), OomCause::Anon);
        // A victim that said its RSS caps what counts back.
        let split = MemorySplit::at_kill(&now, Some(259 * MIB), Some(0), 40_000_000);
        assert_eq!(split.cause(), OomCause::Kernel);
    }

    /// Guards: statistics read before the kernel flushed its latest
    /// charges (a flush under way elsewhere is not waited for) naming the
    /// cgroup's old kernel memory the cause of an anonymous OOM.
    #[test]
    fn usage_the_unflushed_statistics_leave_unexplained_is_what_ran_out() {
        // At the limit still; the stats miss the 31 MiB charged last.
        let stale = MemoryStat { usage: 32 * MIB, anon: 0, file: 0, shmem: 0, kernel: MIB, ..MemoryStat::default() };
        let split = MemorySplit::at_kill(&stale, Some(32 * MIB), None, 2_000_000);
        assert_eq!((split.anon, split.kernel), (31 * MIB, MIB));
        assert_eq!(split.cause(), OomCause::Anon);
        // Flushed parts that add up change nothing.
        let flushed =
            MemoryStat { usage: 32 * MIB, anon: MIB, file: 30 * MIB, shmem: 0, kernel: MIB, ..MemoryStat::default() };
        assert_eq!(MemorySplit::at_kill(&flushed, Some(32 * MIB), None, 0).anon, MIB);
    }

    #[test]
    fn kernel_memory_and_page_cache_are_causes_of_their_own() {
        let slab = MemoryStat {
            usage: 32 * MIB,
            anon: MIB,
            file: 2 * MIB,
            shmem: 0,
            kernel: 29 * MIB,
            ..MemoryStat::default()
        };
        assert_eq!(MemorySplit::at_kill(&slab, None, None, 0).cause(), OomCause::Kernel);
        let cache =
            MemoryStat { usage: 32 * MIB, anon: MIB, file: 30 * MIB, shmem: MIB, kernel: MIB, ..MemoryStat::default() };
        assert_eq!(MemorySplit::at_kill(&cache, None, None, 0).cause(), OomCause::PageCache);
    }
}
