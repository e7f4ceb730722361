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

#[inline(always)]
pub fn count(map: &PerCpuArray<u64>, kind: u32) {
    if let Some(slot) = map.get_ptr_mut(kind) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *slot += 1 };
    }
}
