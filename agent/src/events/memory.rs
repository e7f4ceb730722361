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

/// A cgroup's memory pressure stall information: the share of the last
/// 10 s some, or all, of its tasks stalled on memory, in hundredths of a
/// percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Psi {
    pub some_avg10: u32,
    pub full_avg10: u32,
}
