//! The programs' per-CPU counters (records emitted and dropped per kind,
//! what was counted instead of streamed), summed over CPUs at scrape time.

use agent_common::unstreamed;
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
}

fn per_cpu_sum(m: &PerCpuArray<MapData, u64>, slot: u32) -> u64 {
    m.get(&slot, 0).map(|v| v.iter().sum::<u64>()).unwrap_or(0)
}

impl KernelCounters {
    /// Whether the maps can be read now (with the thread's capabilities).
    pub fn readable(&self) -> bool {
        self.emitted.get(&0, 0).is_ok()
    }

    /// (emitted, dropped) for one kind; zeros if the map cannot be read.
    pub fn read(&self, kind: u32) -> (u64, u64) {
        (per_cpu_sum(&self.emitted, kind), per_cpu_sum(&self.dropped, kind))
    }

    pub fn unstreamed(&self) -> Unstreamed {
        Unstreamed {
            thread_exits: per_cpu_sum(&self.unstreamed, unstreamed::THREAD_EXITS),
            host_exits: per_cpu_sum(&self.unstreamed, unstreamed::HOST_EXITS),
            tracking_refused: per_cpu_sum(&self.unstreamed, unstreamed::TRACKING_REFUSED),
            nested_cgroup_changes: per_cpu_sum(&self.unstreamed, unstreamed::NESTED_CGROUP_CHANGES),
            attaches_unstreamed: per_cpu_sum(&self.unstreamed, unstreamed::ATTACHES_UNSTREAMED),
            task_table_misses: per_cpu_sum(&self.unstreamed, unstreamed::TASK_TABLE_MISSES),
        }
    }
}
