//! The programs' per-CPU counters (records emitted and dropped per kind,
//! what was counted instead of streamed), summed over CPUs at scrape time.

use agent_common::{lost, unstreamed, KIND_SLOTS};
use aya::maps::{MapData, PerCpuArray};

/// Emitted / dropped per event kind, summed over CPUs.
pub struct KernelCounters {
    pub(super) emitted: PerCpuArray<MapData, u64>,
    pub(super) dropped: PerCpuArray<MapData, u64>,
    pub(super) unstreamed: PerCpuArray<MapData, u64>,
}

/// What the kernel counted instead of streaming.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unstreamed {
    /// Exits of threads that were not the last of their process.
    pub thread_exits: u64,
    /// Exits of processes in no tracked cgroup (host, not a runtime).
    pub host_exits: u64,
    /// New cgroups the tracked-cgroup map had no room for.
    pub tracking_refused: u64,
    /// mkdirs and rmdirs of cgroups nested below a container's.
    pub nested_cgroup_changes: u64,
    /// Attaches that sent no record (nested, or beyond a cgroup's allowance).
    pub attaches_unstreamed: u64,
    /// Pod tasks the task table had lost: their exit or kill went out
    /// with the cgroup unknown.
    pub task_table_misses: u64,
    /// Tasks refused an entry: their cgroup held its quota, or the table
    /// was full.
    pub tasks_over_quota: u64,
    pub task_table_full: u64,
    /// Entries retired: at an exec from a thread that was not the leader,
    /// found stale under a host parent's child, of a cgroup no longer
    /// tracked.
    pub retired_at_exec: u64,
    pub retired_at_fork: u64,
    pub retired_untracked: u64,
}

/// Why the kernel lost a record (`agent_common::lost`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum LostReason {
    /// The ring was full.
    RingFull,
    /// Its container had sent its share of a busy ring.
    ContainerShare,
    /// Only the ring's reserve was left, and it is kept for others.
    Reserve,
}

impl LostReason {
    fn slot(self) -> u32 {
        match self {
            Self::RingFull => lost::RING_FULL,
            Self::ContainerShare => lost::CONTAINER_SHARE,
            Self::Reserve => lost::RESERVE,
        }
    }
}

fn per_cpu_sum(m: &PerCpuArray<MapData, u64>, slot: u32) -> u64 {
    m.get(&slot, 0).map(|v| v.iter().sum::<u64>()).unwrap_or(0)
}

impl KernelCounters {
    /// Whether the maps can be read now (with the thread's capabilities).
    pub fn readable(&self) -> bool {
        self.emitted.get(&0, 0).is_ok()
    }

    /// (emitted, lost for any reason) for one kind; zeros if the map
    /// cannot be read.
    pub fn read(&self, kind: u32) -> (u64, u64) {
        use strum::IntoEnumIterator as _;
        (per_cpu_sum(&self.emitted, kind), LostReason::iter().map(|r| self.lost(kind, r)).sum())
    }

    /// Records of one kind lost for one reason.
    pub fn lost(&self, kind: u32, reason: LostReason) -> u64 {
        per_cpu_sum(&self.dropped, reason.slot() * KIND_SLOTS + kind)
    }

    pub fn unstreamed(&self) -> Unstreamed {
        Unstreamed {
            thread_exits: per_cpu_sum(&self.unstreamed, unstreamed::THREAD_EXITS),
            host_exits: per_cpu_sum(&self.unstreamed, unstreamed::HOST_EXITS),
            tracking_refused: per_cpu_sum(&self.unstreamed, unstreamed::TRACKING_REFUSED),
            nested_cgroup_changes: per_cpu_sum(&self.unstreamed, unstreamed::NESTED_CGROUP_CHANGES),
            attaches_unstreamed: per_cpu_sum(&self.unstreamed, unstreamed::ATTACHES_UNSTREAMED),
            task_table_misses: per_cpu_sum(&self.unstreamed, unstreamed::TASK_TABLE_MISSES),
            tasks_over_quota: per_cpu_sum(&self.unstreamed, unstreamed::TASKS_OVER_QUOTA),
            task_table_full: per_cpu_sum(&self.unstreamed, unstreamed::TASK_TABLE_FULL),
            retired_at_exec: per_cpu_sum(&self.unstreamed, unstreamed::RETIRED_AT_EXEC),
            retired_at_fork: per_cpu_sum(&self.unstreamed, unstreamed::RETIRED_AT_FORK),
            retired_untracked: per_cpu_sum(&self.unstreamed, unstreamed::RETIRED_UNTRACKED),
        }
    }
}
