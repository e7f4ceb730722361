//! Maps and load-time globals shared by the programs.

use agent_common::{
    lost, rooms, unstreamed, MemcgOffsets, OomControlOffsets, OomKillEvent, ProbeConfig, RingShares, RuntimeComms,
    TaskInfo, TaskOffsets, TracepointOffsets, TrackedCgroup, VictimIdentity, KIND_SLOTS, PIDS_PER_SLOT,
};
use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
    Global,
};

/// Exit records. Replaced at load by `--ring-buffer-bytes`.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(4 * 1024 * 1024, 0);

/// OOM kills, and nothing else: no tenant can fill it with anything but
/// its own kills (an exit flood fills `EVENTS`, cgroup churn
/// `CGROUP_CHANGES`). Sized at load.
#[map]
pub static OOM_KILLS: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// Cgroup mkdirs, rmdirs and attaches of what the kubelet and the runtime
/// make (pods, containers), and of the host's: never of cgroups nested
/// below a container's, and at most `tracked::ATTACH_RECORDS` attaches per
/// cgroup. Sized at load.
#[map]
pub static CGROUP_CHANGES: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// thread id → cgroup, start time, tgid, for tasks of tracked cgroups
/// only (pods). Sized at load from pid_max. Not an LRU: an entry leaves
/// only with its task (its exit, a move out, the exec that retires its
/// id), so no container's fork flood evicts another's tasks; each
/// tracked cgroup holds at most its quota (`programs::tasks`).
#[map]
pub static TASKS: HashMap<u32, TaskInfo> = HashMap::with_max_entries(65536, 0);

/// Slot 0: the entries `TASKS` holds, kept with atomic adds beside it
/// (the programs cannot count a hash map).
#[map]
pub static TASKS_HELD: Array<i64> = Array::with_max_entries(1, 0);

/// The ring shares of owners without a tracked cgroup
/// (`agent_common::rooms::SHARE_*`).
#[map]
pub static SHARES: Array<RingShares> = Array::with_max_entries(rooms::SHARE_SLOTS, 0);

/// On cgroup v1, one byte per thread id: non-zero where `TASKS` may hold
/// the thread. Set before an entry is written, cleared when it is removed
/// (an evicted entry leaves its mark: a mark only sends the programs to
/// `TASKS`). Unmarked threads are no pod's without a hash lookup. Thread
/// ids beyond the slots (pid_max raised after start) count as marked.
/// Sized at load from pid_max; user space maps it to seed marks.
#[map]
pub static POD_PIDS: Array<[u8; PIDS_PER_SLOT as usize]> = Array::with_max_entries(1, BPF_F_MMAPABLE);

const BPF_F_MMAPABLE: u32 = 1 << 10;

/// What the marks say of a thread.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// No pod's: `TASKS` does not hold it.
    Clear,
    /// A pod's: `TASKS` holds it, unless the table evicted it (full).
    Set,
    /// Beyond the slots: `TASKS` may hold it.
    Beyond,
}

/// What the marks say of thread `tid`.
#[inline(always)]
pub fn pod_task_mark(tid: u32) -> Mark {
    match POD_PIDS.get(tid / PIDS_PER_SLOT) {
        Some(slot) if slot[(tid % PIDS_PER_SLOT) as usize] != 0 => Mark::Set,
        Some(_) => Mark::Clear,
        None => Mark::Beyond,
    }
}

/// Marks or unmarks thread `tid` (see `POD_PIDS`).
#[inline(always)]
pub fn mark_pod_task(tid: u32, marked: bool) {
    if let Some(slot) = POD_PIDS.get_ptr_mut(tid / PIDS_PER_SLOT) {
        // SAFETY: a byte inside the slot; each byte has one writer at a
        // time (the thread's own fork, attach or exit).
        unsafe { (*slot)[(tid % PIDS_PER_SLOT) as usize] = u8::from(marked) };
    }
}

/// Cgroups whose tasks' events are streamed, with what the agent found
/// they are (`agent_common::tracked`): every cgroup created while the agent
/// runs (from its mkdir on, so a container killed as it starts is never
/// missed) until the agent finds it is no pod's, and the pods' and
/// containers' cgroups found at start-up. A cgroup nested below a
/// container's has no entry: its tasks are the container's, found through
/// its ancestors. Everything else is counted, not streamed.
#[map]
pub static TRACKED: HashMap<u64, TrackedCgroup> = HashMap::with_max_entries(16384, BPF_F_NO_PREALLOC);

/// Slot 0, set by the agent: the lowest level at which a container's
/// cgroup is known (`u32::MAX`: none yet). A task's cgroup above it cannot
/// be nested below a container's: its ancestors are not looked at.
#[map]
pub static NESTING: Array<u32> = Array::with_max_entries(1, 0);

/// Per slot (`agent_common::unstreamed`): events counted instead of streamed.
#[map]
pub static UNSTREAMED: PerCpuArray<u64> = PerCpuArray::with_max_entries(unstreamed::SLOTS, 0);

const BPF_F_NO_PREALLOC: u32 = 1;

/// tgid → start time of processes whose last thread has been reported.
/// Only used where the exit tracepoint lacks `group_dead`: several threads
/// of a dying process can all see `signal->live == 0`, and only the first
/// to claim the process here reports it as ended.
#[map]
pub static ENDED: LruHashMap<u32, u64> = LruHashMap::with_max_entries(16384, 0);

/// Where the OOM tracepoint passes the victim's task, two programs run on
/// each kill, in an order the kernel does not promise: the raw
/// tracepoint's reads the victim's identity off its task, the
/// tracepoint's the rest of the record. Whichever runs first leaves its
/// half here (victim pid → half); the second completes the record.
#[map]
pub static IDENTITIES: LruHashMap<u32, VictimIdentity> = LruHashMap::with_max_entries(256, 0);

#[map]
pub static PENDING_OOM: LruHashMap<u32, OomKillEvent> = LruHashMap::with_max_entries(256, 0);

/// thread id → the `struct oom_control *` of the OOM kill it runs (its
/// `out_of_memory` call, seen at entry): `mark_victim`, which the killer
/// calls further down the same call, reads the kernel's decision off it.
/// The OOM killer runs one kill at a time (under `oom_lock`); an entry is
/// overwritten by the thread's next call and only ever read inside one.
#[map]
pub static OOM_CONTROLS: LruHashMap<u32, u64> = LruHashMap::with_max_entries(64, 0);

/// Where an OOM record is put together: with its memory cgroups' levels it
/// is larger than the 512-byte BPF stack holds with anything else.
#[map]
pub static OOM_SCRATCH: PerCpuArray<OomKillEvent> = PerCpuArray::with_max_entries(1, 0);

/// Per kind: records submitted to the ring buffer.
#[map]
pub static EMITTED: PerCpuArray<u64> = PerCpuArray::with_max_entries(KIND_SLOTS, 0);

/// Per kind and reason (`agent_common::lost`, slot `reason * KIND_SLOTS +
/// kind`): records lost.
#[map]
pub static DROPPED: PerCpuArray<u64> = PerCpuArray::with_max_entries(KIND_SLOTS * lost::REASONS, 0);

#[unsafe(no_mangle)]
pub static TP_OFFSETS: Global<TracepointOffsets> = Global::new(TracepointOffsets::UNSET);

#[unsafe(no_mangle)]
pub static TASK_OFFSETS: Global<TaskOffsets> = Global::new(TaskOffsets::UNSET);

#[unsafe(no_mangle)]
pub static MEMCG_OFFSETS: Global<MemcgOffsets> = Global::new(MemcgOffsets::UNSET);

#[unsafe(no_mangle)]
pub static OOM_CONTROL_OFFSETS: Global<OomControlOffsets> = Global::new(OomControlOffsets::UNSET);

#[unsafe(no_mangle)]
pub static PROBE_CONFIG: Global<ProbeConfig> = Global::new(ProbeConfig::UNSET);

#[unsafe(no_mangle)]
pub static RUNTIME_COMMS: Global<RuntimeComms> = Global::new(RuntimeComms::UNSET);

/// A pointer to a global's value, to read single fields of it: `load()`
/// copies the whole struct onto the 512-byte BPF stack.
#[inline(always)]
pub fn global_ptr<T>(g: &'static Global<T>) -> *const T {
    // `Global<T>` is a transparent wrapper of `MaybeUninit<T>`, itself
    // transparent over `T`.
    g as *const Global<T> as *const T
}

/// One field of a load-time global, read as the loader left it.
macro_rules! global_field {
    ($global:expr, $field:ident) => {{
        let p = $crate::maps::global_ptr(&$global);
        // SAFETY: the global is initialised (overridden at load) and
        // lives for the program's lifetime.
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*p).$field)) }
    }};
}
pub(crate) use global_field;

/// Slot 0, set by the reader: non-zero while it sleeps without its drain
/// timer (it found nothing for a while), so that the next routine record
/// wakes it.
#[map]
pub static READER: Array<u32> = Array::with_max_entries(1, 0);

/// Submit flags for a routine record, `pending` bytes being in `EVENTS`
/// with it: wake the reader if it sleeps, or once enough data is pending
/// (it drains on a timer otherwise).
#[inline(always)]
pub fn routine_wakeup(pending: u64) -> u64 {
    if READER.get(0).is_some_and(|asleep| *asleep != 0) {
        return BPF_RB_FORCE_WAKEUP;
    }
    let threshold = u64::from(global_field!(PROBE_CONFIG, wakeup_bytes));
    if pending >= threshold {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

/// Submit flags for a record in `CGROUP_CHANGES`, `pending` bytes being
/// in it with it: as `routine_wakeup`, against that ring's own threshold.
#[inline(always)]
pub fn cgroup_wakeup(pending: u64) -> u64 {
    if READER.get(0).is_some_and(|asleep| *asleep != 0) {
        return BPF_RB_FORCE_WAKEUP;
    }
    let threshold = u64::from(global_field!(PROBE_CONFIG, cgroup_wakeup_bytes));
    if pending >= threshold {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

/// OOM kills are rare and urgent: always wake the reader.
pub const URGENT_WAKEUP: u64 = BPF_RB_FORCE_WAKEUP;

const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
/// `bpf_ringbuf_query`'s questions: bytes not yet consumed, and the
/// consumer's and producer's positions (bytes since the ring was made).
pub const BPF_RB_AVAIL_DATA: u64 = 0;
pub const BPF_RB_CONS_POS: u64 = 2;
pub const BPF_RB_PROD_POS: u64 = 3;

/// A record of `kind` lost for `reason` (`agent_common::lost`).
#[inline(always)]
pub fn count_lost(kind: u32, reason: u32) {
    count(&DROPPED, reason.wrapping_mul(KIND_SLOTS).wrapping_add(kind));
}

/// Adds `v` to a counter other CPUs add to too: BPF's atomic add without
/// a fetch (every kernel since 5.8 has it; Rust's target for BPF offers
/// no atomic read-modify-write, hence the instruction itself).
#[inline(always)]
pub fn atomic_add(p: *mut i64, v: i64) {
    // SAFETY: `p` points into a map value, which lives while the program
    // runs; the instruction touches those 8 bytes only.
    unsafe { core::arch::asm!("lock *(u64 *)({p} + 0) += {v}", p = in(reg) p, v = in(reg) v, options(nostack)) };
}

#[inline(always)]
pub fn count(map: &PerCpuArray<u64>, kind: u32) {
    if let Some(slot) = map.get_ptr_mut(kind) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *slot += 1 };
    }
}
