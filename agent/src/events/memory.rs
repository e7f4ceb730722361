//! What a read of a container's memory says, for its pressure: the
//! kernel's own signals, as cgroupfs shows them (`probes::cgroups` reads
//! them; `watchdog::pressure` judges them).

/// What a full read of a container's memory says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemorySample {
    /// `memory.current` (v2), `memory.usage_in_bytes` (v1).
    pub usage: u64,
    /// The limit that applies (v2 `memory.max`; v1 the lower of memory and
    /// memory + swap, which runc holds equal); `None`: unlimited.
    pub limit: Option<u64>,
    /// Page cache the kernel reclaims first (`inactive_file`; v1
    /// `total_inactive_file`): not in the kubelet's working set.
    pub inactive_file: u64,
    /// All page cache, tmpfs and shared memory included (v2 `file`; v1
    /// `total_cache`), and of it tmpfs and shared memory (`shmem`; v1
    /// `total_shmem`), which no reclaim frees without swap.
    pub file: u64,
    pub shmem: u64,
    /// Times the usage met the limit and reclaim ran, since the cgroup
    /// was made (v2 `memory.events` `max`; v1 the fail counts, where the
    /// kernel keeps them).
    pub limit_hits: Option<u64>,
    /// Times the usage went over `memory.high` (v2 `high`).
    pub high_hits: Option<u64>,
    /// `memory.high` (v2), where set: above it the kernel throttles the
    /// container (it reclaims in its own context and stalls).
    pub high: Option<u64>,
    /// Pages evicted while in use and read back since the cgroup was made
    /// (`workingset_refault_anon` + `_file`).
    pub refaults: u64,
    /// PSI memory (v2 `memory.pressure`).
    pub psi: Option<Psi>,
}

impl MemorySample {
    /// Usage less what the kernel reclaims first, as the kubelet counts it
    /// (what its evictions read). Page cache a container reads again is
    /// active, and counts here, though the kernel reclaims it at the limit.
    pub fn working_set(&self) -> u64 {
        self.usage.saturating_sub(self.inactive_file)
    }

    /// What no reclaim frees: usage less page cache (tmpfs and shared
    /// memory stay in) — anonymous memory, tmpfs, kernel memory. What an
    /// OOM kill comes of.
    pub fn unreclaimable(&self) -> u64 {
        self.usage.saturating_sub(self.file.saturating_sub(self.shmem))
    }
}

/// A cgroup's memory limits as cgroupfs shows them; `None`: unlimited
/// (or, for `high`, none on cgroup v1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryLimits {
    /// v2 `memory.max`, v1 `memory.limit_in_bytes`.
    pub max: Option<u64>,
    /// v2 `memory.high` (the kubelet's MemoryQoS sets it).
    pub high: Option<u64>,
    /// v2 `memory.swap.max`; v1 `memory.memsw.limit_in_bytes` (memory and
    /// swap together, which runc holds to the memory limit).
    pub swap: Option<u64>,
}

/// Which of a cgroup's memory limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum LimitKind {
    MemoryMax,
    MemoryHigh,
    Swap,
}

impl MemoryLimits {
    pub fn get(&self, kind: LimitKind) -> Option<u64> {
        match kind {
            LimitKind::MemoryMax => self.max,
            LimitKind::MemoryHigh => self.high,
            LimitKind::Swap => self.swap,
        }
    }

    /// What moved from `self` to `now`: (which, from, to), in kind order.
    pub fn changes(&self, now: &MemoryLimits) -> Vec<(LimitKind, Option<u64>, Option<u64>)> {
        <LimitKind as strum::IntoEnumIterator>::iter()
            .filter(|&k| self.get(k) != now.get(k))
            .map(|k| (k, self.get(k), now.get(k)))
            .collect()
    }
}

/// A cgroup's memory pressure stall information: the share of the last
/// 10 s some, or all, of its tasks stalled on memory, in hundredths of a
/// percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Psi {
    pub some_avg10: u32,
    pub full_avg10: u32,
}
