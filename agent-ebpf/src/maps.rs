//! Maps and load-time globals shared by the programs.

use agent_common::{ProbeConfig, TaskInfo, TaskOffsets, TracepointOffsets, KIND_SLOTS};
use aya_ebpf::{
    macros::map,
    maps::{LruHashMap, PerCpuArray, RingBuf},
    Global,
};

/// Replaced at load by `--ring-buffer-bytes`.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(4 * 1024 * 1024, 0);

/// thread id → cgroup, start time, tgid. Sized at load from pid_max.
#[map]
pub static TASKS: LruHashMap<u32, TaskInfo> = LruHashMap::with_max_entries(65536, 0);

/// tgid → start time of processes whose last thread has been reported.
/// Only used where the exit tracepoint lacks `group_dead`: several threads
/// of a dying process can all see `signal->live == 0`, and only the first
/// to claim the process here reports it as ended.
#[map]
pub static ENDED: LruHashMap<u32, u64> = LruHashMap::with_max_entries(16384, 0);

/// Per kind: records submitted to the ring buffer.
#[map]
pub static EMITTED: PerCpuArray<u64> = PerCpuArray::with_max_entries(KIND_SLOTS, 0);

/// Per kind: records lost because the ring buffer was full.
#[map]
pub static DROPPED: PerCpuArray<u64> = PerCpuArray::with_max_entries(KIND_SLOTS, 0);

#[unsafe(no_mangle)]
pub static TP_OFFSETS: Global<TracepointOffsets> = Global::new(TracepointOffsets::UNSET);

#[unsafe(no_mangle)]
pub static TASK_OFFSETS: Global<TaskOffsets> = Global::new(TaskOffsets::UNSET);

#[unsafe(no_mangle)]
pub static PROBE_CONFIG: Global<ProbeConfig> = Global::new(ProbeConfig::UNSET);

/// Submit flags for a routine record: wake the reader only once enough
/// data is pending (it drains on a timer otherwise).
#[inline(always)]
pub fn routine_wakeup() -> u64 {
    let threshold = u64::from(PROBE_CONFIG.load().wakeup_bytes);
    if EVENTS.query(BPF_RB_AVAIL_DATA) >= threshold {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

/// OOM kills are rare and urgent: always wake the reader.
pub const URGENT_WAKEUP: u64 = BPF_RB_FORCE_WAKEUP;

const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
const BPF_RB_AVAIL_DATA: u64 = 0;

#[inline(always)]
pub fn count(map: &PerCpuArray<u64>, kind: u32) {
    if let Some(slot) = map.get_ptr_mut(kind) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *slot += 1 };
    }
}
