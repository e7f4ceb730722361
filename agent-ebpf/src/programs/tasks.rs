//! The task table (cgroup v1, and v2 kernels whose OOM tracepoint lacks
//! the victim's task): which tracked cgroup each pod task belongs to,
//! within each cgroup's quota, and never an id its task no longer has.
//! An entry is taken at fork or attach (`hold`) and given back at exit,
//! at a move out, at the exec that retires its id, or when a host
//! parent's new child turns out to have inherited it (`release`). Counts
//! beside it (`TASKS_HELD`, each cgroup's `TrackedCgroup::tasks`) move
//! with atomic adds, so that a quota costs no scan.

use agent_common::{rooms, unstreamed, TaskInfo};
use aya_ebpf::bindings::BPF_NOEXIST;

use crate::maps::{
    atomic_add, count, global_field, mark_pod_task, PROBE_CONFIG, TASKS, TASKS_HELD, TRACKED, UNSTREAMED,
};

/// Adds `delta` to the entries held: the table's and `cgroup_id`'s (if
/// it is still tracked).
#[inline(always)]
fn counted(cgroup_id: u64, delta: i64) {
    if let Some(held) = TASKS_HELD.get_ptr_mut(0) {
        atomic_add(held, delta);
    }
    if let Some(t) = TRACKED.get_ptr_mut(&cgroup_id) {
        // SAFETY: a field of the map's value.
        atomic_add(unsafe { core::ptr::addr_of_mut!((*t).tasks) }, delta);
    }
}

/// Records thread `tid` as `info.cgroup_id`'s, within that cgroup's quota
/// and the table's room; marked either way, so that a task refused an
/// entry reads as a pod's whose cgroup is unknown (its own container's
/// loss), never as the host's. A stale entry under the id goes first.
#[inline(always)]
pub(crate) fn hold(tid: u32, info: &TaskInfo) {
    mark_pod_task(tid, true);
    let held = match TRACKED.get_ptr_mut(&info.cgroup_id) {
        // SAFETY: a field of the map's value, copied out.
        Some(t) => unsafe { (*t).tasks },
        None => 0,
    };
    // Refused: what the id held before goes (a move's old cgroup's), the
    // mark stays.
    if held >= global_field!(PROBE_CONFIG, task_quota) as i64 {
        release(tid, None);
        mark_pod_task(tid, true);
        count(&UNSTREAMED, unstreamed::TASKS_OVER_QUOTA);
        return;
    }
    let total = TASKS_HELD.get(0).copied().unwrap_or(0);
    if total >= global_field!(PROBE_CONFIG, task_room) as i64 && held >= rooms::TASK_FLOOR {
        release(tid, None);
        mark_pod_task(tid, true);
        count(&UNSTREAMED, unstreamed::TASK_TABLE_FULL);
        return;
    }
    if TASKS.insert(&tid, info, u64::from(BPF_NOEXIST)).is_err() {
        // The id's previous task is gone (this one has it now): its entry
        // goes, then this one's comes.
        release(tid, None);
        mark_pod_task(tid, true);
        if TASKS.insert(&tid, info, u64::from(BPF_NOEXIST)).is_err() {
            count(&UNSTREAMED, unstreamed::TASK_TABLE_FULL);
            return;
        }
    }
    counted(info.cgroup_id, 1);
}

/// Gives back thread `tid`'s entry and mark; counts it under `why`
/// (`unstreamed::RETIRED_*`) if there was one. Returns whether there was.
#[inline(always)]
pub(crate) fn release(tid: u32, why: Option<u32>) -> bool {
    mark_pod_task(tid, false);
    // SAFETY: the value is copied out before it is removed.
    let Some(entry) = (unsafe { TASKS.get(&tid) }).copied() else { return false };
    if TASKS.remove(&tid).is_err() {
        // Removed meanwhile by another CPU, which counted it.
        return false;
    }
    counted(entry.cgroup_id, -1);
    if let Some(why) = why {
        count(&UNSTREAMED, why);
    }
    true
}

/// A thread that was not its process's leader called exec (`old` its id,
/// `pid` the leader's, which it takes): `old` ends without an exit of its
/// own. Its entry moves to `pid` where the leader's is gone (refused, or
/// lost), else goes; `start_ns` is the process's start (the exec'ing task
/// takes its leader's).
#[inline(always)]
pub(crate) fn retire_at_exec(old: u32, pid: u32, start_ns: u64) {
    // SAFETY: the value is copied out.
    let Some(mut entry) = (unsafe { TASKS.get(&old) }).copied() else {
        mark_pod_task(old, false);
        return;
    };
    // SAFETY: as above.
    if unsafe { TASKS.get(&pid) }.is_none() {
        entry.tgid = pid;
        entry.start_ns = start_ns;
        hold(pid, &entry);
    }
    release(old, Some(unstreamed::RETIRED_AT_EXEC));
}
