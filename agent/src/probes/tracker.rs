//! What user space writes into the programs' maps after load: which
//! cgroups are tracked (and what they are), the lowest level containers
//! sit at, and the task table's seed from /proc with its marks.

use std::{collections::HashMap, path::Path};

use agent_common::{names, tracked, TaskInfo, TrackedCgroup, PIDS_PER_SLOT};
use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData},
    Ebpf,
};

use super::{
    cgroups::CgroupLayout,
    loader::{take_map, KernelPath, LoadError},
};

/// The tracked-cgroup map and the task table, as user space writes them:
/// the model says which cgroups are pods' (tracked) and which are not.
pub struct CgroupTracker {
    tracked: BpfHashMap<MapData, u64, TrackedCgroup>,
    tasks: BpfHashMap<MapData, u32, TaskInfo>,
    /// The entries `tasks` holds, as the programs count them.
    held: Array<MapData, i64>,
    /// What one tracked cgroup's tasks may hold.
    quota: u32,
    /// Where the programs kept the task table (the fork table's kernels):
    /// they skip it for unmarked threads, and read a marked one it lost as
    /// a pod's.
    marks: Option<PodPidMarks>,
    /// The lowest level of a container's cgroup, as the programs know it.
    nesting: Array<MapData, u32>,
    lowest_container_level: u32,
    layout: CgroupLayout,
}

/// What a tracked cgroup is, for the programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackedKind {
    Pod,
    Container,
}

impl CgroupTracker {
    pub(super) fn new(
        ebpf: &mut Ebpf,
        layout: CgroupLayout,
        pod_pid_slots: u32,
        path: KernelPath,
        quota: u32,
    ) -> Result<Self, LoadError> {
        let tracked = BpfHashMap::try_from(take_map(ebpf, names::TRACKED)?)
            .map_err(|source| LoadError::Map { name: names::TRACKED, source })?;
        let tasks = BpfHashMap::try_from(take_map(ebpf, names::TASKS)?)
            .map_err(|source| LoadError::Map { name: names::TASKS, source })?;
        let held = Array::try_from(take_map(ebpf, names::TASKS_HELD)?)
            .map_err(|source| LoadError::Map { name: names::TASKS_HELD, source })?;
        let marks = match take_map(ebpf, names::POD_PIDS)? {
            aya::maps::Map::Array(data) if path == KernelPath::ForkTable => {
                Some(PodPidMarks::map(data, pod_pid_slots)?)
            }
            _ => None,
        };
        let mut nesting = Array::try_from(take_map(ebpf, names::NESTING)?)
            .map_err(|source| LoadError::Map { name: names::NESTING, source })?;
        // No container known yet: no cgroup is nested below one.
        nesting.set(0, u32::MAX, 0).map_err(|source| LoadError::Map { name: names::NESTING, source })?;
        Ok(Self { tracked, tasks, held, quota, marks, nesting, lowest_container_level: u32::MAX, layout })
    }

    /// Streams the events of `cgroup_id`'s tasks from now on, `kind`
    /// saying what it is (what a container's nests is its own); false if
    /// the map is full. A container at `level` lower than any before lets
    /// the programs look for cgroups nested below it from there: set
    /// first, so that none is missed meanwhile.
    pub fn track(&mut self, cgroup_id: u64, kind: TrackedKind, level: u32) -> bool {
        if kind == TrackedKind::Container
            && level < self.lowest_container_level
            && self.nesting.set(0, level, 0).is_ok()
        {
            self.lowest_container_level = level;
        }
        let kind = match kind {
            TrackedKind::Pod => tracked::POD,
            TrackedKind::Container => tracked::CONTAINER,
        };
        // What the programs counted of it so far stays (a count they move
        // between this read and the write is lost: a blur, not a drift).
        let counted = self.tracked.get(&cgroup_id, 0).unwrap_or_default();
        self.tracked.insert(cgroup_id, TrackedCgroup { kind, ..counted }, 0).is_ok()
    }

    /// Counts `cgroup_id`'s events in the kernel from now on.
    pub fn untrack(&mut self, cgroup_id: u64) {
        let _ = self.tracked.remove(&cgroup_id);
    }

    /// Puts the threads that live in `cgroups` now into the task table
    /// (never over what the probes recorded meanwhile), each cgroup within
    /// its quota, and counts them as the programs do; returns how many.
    pub fn seed(&mut self, cgroups: &std::collections::HashSet<u64>) -> usize {
        if cgroups.is_empty() {
            return 0;
        }
        let seeded = seed_tasks(&mut self.tasks, self.marks.as_mut(), &self.layout, cgroups, self.quota);
        let mut total = 0;
        for (cgroup_id, n) in &seeded {
            total += n;
            if let Ok(mut t) = self.tracked.get(cgroup_id, 0) {
                t.tasks = t.tasks.saturating_add(i64::try_from(*n).unwrap_or(i64::MAX));
                let _ = self.tracked.insert(*cgroup_id, t, 0);
            }
        }
        let held = self.held.get(&0, 0).unwrap_or(0);
        let _ = self.held.set(0, held.saturating_add(i64::try_from(total).unwrap_or(i64::MAX)), 0);
        total
    }
}

/// `POD_PIDS` mapped into this process (the map is `BPF_F_MMAPABLE`): a
/// thread is marked with one byte store, as the programs mark it, so no
/// neighbour's mark is rewritten.
struct PodPidMarks {
    base: std::ptr::NonNull<u8>,
    len: usize,
    /// Keeps the map alive as long as the mapping.
    _map: MapData,
}

// SAFETY: the mapping is owned by this value alone and written only
// through `&mut self`.
unsafe impl Send for PodPidMarks {}

impl PodPidMarks {
    fn map(map: MapData, slots: u32) -> Result<Self, LoadError> {
        use std::os::fd::{AsFd as _, AsRawFd as _};
        let len = slots as usize * PIDS_PER_SLOT as usize;
        // SAFETY: a shared mapping of the map's own memory, `len` bytes
        // (its values; the kernel checks the length), unmapped on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(LoadError::MapMemory(std::io::Error::last_os_error()));
        }
        let base = std::ptr::NonNull::new(ptr.cast::<u8>())
            .ok_or(LoadError::MapMemory(std::io::ErrorKind::InvalidData.into()))?;
        Ok(Self { base, len, _map: map })
    }

    /// Marks thread `tid` (beyond the slots every thread counts as marked).
    fn mark(&mut self, tid: u32) {
        if (tid as usize) < self.len {
            // SAFETY: inside the mapping; a single byte store.
            unsafe { std::ptr::write_volatile(self.base.as_ptr().add(tid as usize), 1) };
        }
    }
}

impl Drop for PodPidMarks {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// BPF_NOEXIST: an entry the fork/attach probes already wrote is newer.
const BPF_NOEXIST: u64 = 1;

/// Records the cgroup, start time and tgid of every live thread of
/// `cgroups` in the kernel's task table, at most `quota` a cgroup (the
/// rest marked: a pod's, unknown), so exits and OOM kills of pod tasks
/// that predate the agent are attributed. Returns how many were written,
/// by cgroup.
fn seed_tasks(
    table: &mut BpfHashMap<MapData, u32, TaskInfo>,
    mut marks: Option<&mut PodPidMarks>,
    layout: &CgroupLayout,
    cgroups: &std::collections::HashSet<u64>,
    quota: u32,
) -> HashMap<u64, usize> {
    let ticks_ns = crate::os::proc::tick_ns();
    let mut ids: HashMap<String, u64> = HashMap::new();
    let mut seeded: HashMap<u64, usize> = HashMap::new();
    for (tgid, tid) in crate::os::proc::tasks(Path::new("/proc")) {
        let dir = format!("/proc/{tgid}/task/{tid}");
        // Tasks may exit during the scan: skip what vanished.
        let Ok(cgroup_text) = std::fs::read_to_string(format!("{dir}/cgroup")) else { continue };
        let Some(path) = layout.task_path(&cgroup_text).map(|p| layout.host_path(p)) else { continue };
        // A task in a cgroup nested below a container's is the container's.
        let path = crate::model::cgroup_path::owner_path(&path).map_or(path.as_str(), |p| p).to_string();
        let cgroup_id = match ids.get(&path) {
            Some(id) => *id,
            None => match layout.cgroup_id(&path) {
                Ok(id) => *ids.entry(path).or_insert(id),
                Err(_) => continue,
            },
        };
        if !cgroups.contains(&cgroup_id) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("{dir}/stat")) else { continue };
        let Some(start_ticks) = crate::os::proc::start_ticks(&stat) else { continue };
        let info = TaskInfo { cgroup_id, start_ns: start_ticks * ticks_ns, tgid, _pad: 0 };
        // Marked first: a table entry the programs cannot see is worse
        // than a mark without one.
        if let Some(m) = marks.as_deref_mut() {
            m.mark(tid);
        }
        let n = seeded.entry(cgroup_id).or_default();
        if *n < quota as usize && table.insert(tid, info, BPF_NOEXIST).is_ok() {
            *n += 1;
        }
    }
    seeded
}
