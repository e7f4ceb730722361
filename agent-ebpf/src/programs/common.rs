//! What the hook families share: a record's header, reads of tracepoint
//! fields and kernel structs, and where a task or a cgroup belongs (the
//! tracked cgroups, the containers' nesting, the task table on v1).

use agent_common::{tracked, EventHeader, EventKind, ABSENT};
use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_task, bpf_ktime_get_boot_ns, bpf_probe_read_kernel,
        bpf_probe_read_kernel_str_bytes,
    },
    programs::TracePointContext,
    EbpfContext,
};

use crate::maps::{
    global_field, pod_task_mark, Mark, MEMCG_OFFSETS, NESTING, PROBE_CONFIG, TASKS, TASK_OFFSETS, TRACKED,
};

#[inline(always)]
pub(crate) fn header(kind: EventKind, flags: u32) -> EventHeader {
    EventHeader {
        kind: kind as u32,
        flags,
        // SAFETY: helper without arguments.
        ts_ns: unsafe { bpf_ktime_get_boot_ns() },
    }
}

/// Reads a tracepoint field; `None` when this kernel lacks it.
#[inline(always)]
pub(crate) fn field<T>(ctx: &TracePointContext, offset: u32) -> Result<Option<T>, i64> {
    if offset == ABSENT {
        return Ok(None);
    }
    // SAFETY: the offset comes from this kernel's format file.
    unsafe { ctx.read_at::<T>(offset as usize) }.map(Some).map_err(i64::from)
}

/// Copies a `__data_loc char[]` field into `dest`; returns (length, truncated).
#[inline(always)]
pub(crate) fn data_loc_str(ctx: &TracePointContext, offset: u32, dest: &mut [u8]) -> (u32, bool) {
    let Ok(Some(loc)) = field::<u32>(ctx, offset) else {
        return (0, false);
    };
    let start = (loc & 0xffff) as usize;
    // SAFETY: the data_loc points inside this tracepoint record.
    let src = unsafe { (ctx.as_ptr() as *const u8).add(start) };
    match unsafe { bpf_probe_read_kernel_str_bytes(src, dest) } {
        Ok(s) => {
            let len = s.len();
            (len as u32, len + 1 >= dest.len())
        }
        Err(_) => (0, false),
    }
}

/// Reads a member of a kernel struct at a BTF-derived offset.
#[inline(always)]
pub(crate) fn member<T>(base: *const u8, offset: u32) -> Result<T, i64> {
    if offset == ABSENT || base.is_null() {
        return Err(-22);
    }
    // SAFETY: probe read of kernel memory; failure is reported, not faulted.
    unsafe { bpf_probe_read_kernel(base.add(offset as usize) as *const T) }.map_err(i64::from)
}

/// What the tracked-cgroup map says of cgroup `id`, if it tracks it.
#[inline(always)]
pub(crate) fn tracked_kind(id: u64) -> Option<u32> {
    // SAFETY: the value is copied out immediately.
    unsafe { TRACKED.get(&id) }.map(|t| t.kind)
}

/// Whether events of cgroup `id` are streamed.
#[inline(always)]
pub(crate) fn tracked(id: u64) -> bool {
    tracked_kind(id).is_some()
}

/// Ancestors looked at, at most, for a cgroup nested below a container's
/// (from the lowest level a container is known at: a kubelet's container
/// sits a few levels under it at most).
pub(crate) const NESTING_WALK: u32 = 16;

/// The id of `cgrp`'s ancestor at `level` (`cgroup.ancestors`, or before
/// Linux 6.0 `cgroup.ancestor_ids`); 0 when it cannot be read.
#[inline(always)]
pub(crate) fn ancestor_id(cgrp: *const u8, level: u32) -> u64 {
    let base = global_field!(TASK_OFFSETS, cgroup_ancestors);
    if base == ABSENT {
        return 0;
    }
    // Ids and pointers are 8 bytes each.
    let at = base.wrapping_add(level.wrapping_mul(8));
    if global_field!(TASK_OFFSETS, ancestor_ids) != 0 {
        return member::<u64>(cgrp, at).unwrap_or(0);
    }
    let ancestor: *const u8 = member(cgrp, at).unwrap_or(core::ptr::null());
    let kn: *const u8 = member(ancestor, global_field!(TASK_OFFSETS, cgroup_kn)).unwrap_or(core::ptr::null());
    member(kn, global_field!(TASK_OFFSETS, kn_id)).unwrap_or(0)
}

/// The lowest level a container's cgroup is known at (`NESTING`): 0 when
/// the agent has not said (every level is looked at), `u32::MAX` when it
/// knows none.
#[inline(always)]
pub(crate) fn lowest_container_level() -> u32 {
    NESTING.get(0).copied().unwrap_or(0)
}

/// A tracked cgroup a task or a cgroup belongs to: its id (0: none; no
/// cgroup has id 0) and its `tracked` kind. Plain integers, not an
/// `Option`: older verifiers (5.10) refuse to read a payload left unset.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) id: u64,
    pub(crate) kind: u32,
}

impl Owner {
    const NONE: Owner = Owner { id: 0, kind: tracked::NEW };

    #[inline(always)]
    pub(crate) fn is_container(self) -> bool {
        self.id != 0 && self.kind == tracked::CONTAINER
    }
}

/// The tracked cgroup that `cgrp`, at `level`, is nested below: the first
/// container's among its ancestors from the top, or else the deepest
/// tracked one (a pod's, or one the agent has not placed yet); none when
/// no ancestor is tracked or it cannot be nested below a container (it is
/// no deeper than the lowest one known). A tenant that nests cgroups
/// below its container, however deep, stays in its container: the walk
/// starts from the top.
#[inline(always)]
pub(crate) fn nested_owner(cgrp: *const u8, level: u32) -> Owner {
    let lowest = lowest_container_level();
    if lowest >= level {
        return Owner::NONE;
    }
    // From the pods' level of the shallowest containers. A constant trip
    // count: the verifier bounds the loop by it, not by `at`, which comes
    // from a map.
    let mut at = if lowest > 1 { lowest - 1 } else { 1 };
    let mut found = Owner::NONE;
    #[allow(clippy::explicit_counter_loop)]
    for _ in 0..NESTING_WALK {
        if at >= level {
            break;
        }
        let id = ancestor_id(cgrp, at);
        if id != 0 {
            // SAFETY: the value is copied out immediately.
            if let Some(t) = unsafe { TRACKED.get(&id) } {
                found = Owner { id, kind: t.kind };
                if t.kind == tracked::CONTAINER {
                    break;
                }
            }
        }
        at += 1;
    }
    found
}

/// The tracked cgroup a task in `cgrp` (id `id`) belongs to: its own, or
/// the container's it is nested below.
#[inline(always)]
pub(crate) fn owner_of(cgrp: *const u8, id: u64) -> Owner {
    match tracked_kind(id) {
        Some(kind) => Owner { id, kind },
        None => nested_owner_of(cgrp),
    }
}

/// `nested_owner` of `cgrp` at its own level.
#[inline(always)]
pub(crate) fn nested_owner_of(cgrp: *const u8) -> Owner {
    match member::<i32>(cgrp, global_field!(TASK_OFFSETS, cgroup_level)) {
        Ok(level) => nested_owner(cgrp, level as u32),
        Err(_) => Owner::NONE,
    }
}

/// Where a task's events belong.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// A tracked cgroup: a pod's, a container's (also for a task in a
    /// cgroup nested below it), or one not placed yet.
    Tracked(u64),
    /// No tracked cgroup's: the host's (its cgroup on v2; 0 on v1).
    Host(u64),
    /// A pod's task the task table does not hold (its cgroup had its
    /// quota, or the table was full; v1): whose it is cannot be said, but
    /// it is no host task.
    Lost,
    /// A task whose entry names a cgroup no longer tracked (one made while
    /// the agent ran that it found was no pod's): the host's, and its
    /// entry is stale.
    Untracked,
}

impl Place {
    #[inline(always)]
    pub(crate) fn cgroup_id(self) -> u64 {
        match self {
            Place::Tracked(id) | Place::Host(id) => id,
            Place::Lost | Place::Untracked => 0,
        }
    }
}

/// Where the current task's events belong. On v2 its cgroup says (or, for
/// a cgroup nested below a container's, that container's); on v1 the task
/// table does, which holds the tasks of tracked cgroups only, each with
/// its container's cgroup. A thread moved with its process is there by
/// its leader only (the attach tracepoint fires once per process), whose
/// entry stays until the process ends. The marks say, without a lookup,
/// which tasks are the host's, and which pod tasks the table lost.
#[inline(always)]
pub(crate) fn current_place(pid_tgid: u64) -> Place {
    if PROBE_CONFIG.load().unified != 0 {
        // SAFETY: helper without arguments.
        let id = unsafe { bpf_get_current_cgroup_id() };
        if tracked(id) {
            return Place::Tracked(id);
        }
        if lowest_container_level() == u32::MAX {
            return Place::Host(id);
        }
        let owner = nested_owner_of(current_cgroup());
        return if owner.id != 0 { Place::Tracked(owner.id) } else { Place::Host(id) };
    }
    table_place(pid_tgid as u32, (pid_tgid >> 32) as u32)
}

/// Where thread `tid` of process `tgid` belongs on v1: the task table
/// says (see [`current_place`]).
#[inline(always)]
pub(crate) fn table_place(tid: u32, tgid: u32) -> Place {
    // Most tasks are the host's: their marks say so without a lookup.
    let mark = pod_task_mark(tid);
    let leader_mark = if tid == tgid { mark } else { pod_task_mark(tgid) };
    if mark == Mark::Clear && leader_mark == Mark::Clear {
        return Place::Host(0);
    }
    // SAFETY: values copied out immediately.
    let entry = match unsafe { TASKS.get(&tid) } {
        Some(t) => Some(*t),
        None if tid != tgid => unsafe { TASKS.get(&tgid) }.copied(),
        None => None,
    };
    match entry {
        Some(t) if tracked(t.cgroup_id) => Place::Tracked(t.cgroup_id),
        Some(_) => Place::Untracked,
        None if mark == Mark::Set || leader_mark == Mark::Set => Place::Lost,
        None => Place::Host(0),
    }
}

/// Where the events of `task` (thread `tid` of process `tgid`) belong, as
/// [`current_place`] says of the current task: for a task other than the
/// one running (a signal's target).
#[inline(always)]
pub(crate) fn task_place(task: *const u8, tid: u32, tgid: u32) -> Place {
    if PROBE_CONFIG.load().unified == 0 {
        return table_place(tid, tgid);
    }
    let cgrp = task_cgroup(task);
    let id: u64 = member(cgrp, global_field!(TASK_OFFSETS, cgroup_kn))
        .and_then(|kn: *const u8| member(kn, global_field!(TASK_OFFSETS, kn_id)))
        .unwrap_or(0);
    let owner = owner_of(cgrp, id);
    if owner.id != 0 {
        Place::Tracked(owner.id)
    } else {
        Place::Host(id)
    }
}

/// A task's cgroup on v2 (`task->cgroups->dfl_cgrp`); null when it
/// cannot be read.
#[inline(always)]
pub(crate) fn task_cgroup(task: *const u8) -> *const u8 {
    let css_set: *const u8 = member(task, global_field!(TASK_OFFSETS, task_cgroups)).unwrap_or(core::ptr::null());
    member(css_set, global_field!(TASK_OFFSETS, css_dfl_cgrp)).unwrap_or(core::ptr::null())
}

/// The current task's cgroup on v2 (`task->cgroups->dfl_cgrp`); null
/// when it cannot be read.
#[inline(always)]
pub(crate) fn current_cgroup() -> *const u8 {
    // SAFETY: helper without arguments; the pointer is only probe-read.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let css_set: *const u8 = member(task, global_field!(TASK_OFFSETS, task_cgroups)).unwrap_or(core::ptr::null());
    member(css_set, global_field!(TASK_OFFSETS, css_dfl_cgrp)).unwrap_or(core::ptr::null())
}

/// A task's memory cgroup (`task->cgroups->subsys[memory]`); null when it
/// cannot be read.
#[inline(always)]
pub(crate) fn task_memcg(task: *const u8) -> *const u8 {
    let at = global_field!(MEMCG_OFFSETS, css_set_memory);
    if at == ABSENT {
        return core::ptr::null();
    }
    let css_set: *const u8 = member(task, global_field!(TASK_OFFSETS, task_cgroups)).unwrap_or(core::ptr::null());
    member(css_set, at).unwrap_or(core::ptr::null())
}
