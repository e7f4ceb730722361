//! Cgroup changes: raw tracepoints on mkdir, rmdir and attach, whose
//! `struct cgroup *` says where the cgroup sits, so that one nested below
//! a container's costs no entry and sends no record.

use agent_common::{
    lost, tracked, unstreamed, CgroupEvent, EventKind, TaskInfo, TaskOffsets, TrackedCgroup, COMM_LEN, FLAG_TRUNCATED,
};
use aya_ebpf::{helpers::bpf_probe_read_kernel_str_bytes, programs::RawTracePointContext};

use super::{
    common::*,
    entry,
    rooms::admit_cgroup,
    tasks::{hold, release},
    ProbeResult,
};
use crate::maps::{
    cgroup_wakeup, count, count_lost, global_field, BPF_RB_AVAIL_DATA, CGROUP_CHANGES, EMITTED, PROBE_CONFIG,
    TASK_OFFSETS, TRACKED, UNSTREAMED,
};

entry!(raw_tracepoint, cgroup_mkdir, RawTracePointContext, try_cgroup_mkdir);
entry!(raw_tracepoint, cgroup_rmdir, RawTracePointContext, try_cgroup_rmdir);
entry!(raw_tracepoint, cgroup_attach_task, RawTracePointContext, try_cgroup_attach);

/// Where a cgroup is: its hierarchy, level and id.
#[derive(Clone, Copy)]
pub(crate) struct CgroupPlace {
    hierarchy: u32,
    level: u32,
    id: u64,
}

impl CgroupPlace {
    /// Whether it is in the tracked hierarchy.
    #[inline(always)]
    fn tracked_hierarchy(&self) -> bool {
        self.hierarchy == PROBE_CONFIG.load().tracked_hierarchy
    }
}

/// The hierarchy, level and id of `cgrp`.
#[inline(always)]
pub(crate) fn cgroup_place(cgrp: *const u8, to: &TaskOffsets) -> Result<CgroupPlace, i64> {
    let root: *const u8 = member(cgrp, to.cgroup_root)?;
    let hierarchy = member::<i32>(root, to.root_hierarchy_id)? as u32;
    let level = member::<i32>(cgrp, to.cgroup_level).unwrap_or(0) as u32;
    let kn: *const u8 = member(cgrp, to.cgroup_kn)?;
    Ok(CgroupPlace { hierarchy, level, id: member(kn, to.kn_id)? })
}

/// Whether `cgrp` at `level` is nested below a container's cgroup.
#[inline(always)]
pub(crate) fn nested_in_container(cgrp: *const u8, level: u32) -> bool {
    nested_owner(cgrp, level).is_container()
}

/// `TP_PROTO(struct cgroup *cgrp, const char *path)`. A new cgroup is
/// tracked from its first moment (until the agent finds it is no pod's):
/// a container whose init dies as it starts is seen. One nested below a
/// container's is that container's: no entry, no record.
pub(crate) fn try_cgroup_mkdir(ctx: &RawTracePointContext) -> ProbeResult {
    let to = TASK_OFFSETS.load();
    let cgrp: *const u8 = ctx.arg(0);
    let place = cgroup_place(cgrp, &to)?;
    if !place.tracked_hierarchy() {
        return Ok(());
    }
    let CgroupPlace { hierarchy, level, id } = place;
    if nested_in_container(cgrp, level) {
        count(&UNSTREAMED, unstreamed::NESTED_CGROUP_CHANGES);
        return Ok(());
    }
    if TRACKED.insert(&id, &TrackedCgroup::of(tracked::NEW), 0).is_err() {
        count(&UNSTREAMED, unstreamed::TRACKING_REFUSED);
    }
    emit_cgroup(EventKind::CgroupMkdir, hierarchy, level, id, ctx.arg(1), 0, 0, [0; COMM_LEN])
}

/// `TP_PROTO(struct cgroup *cgrp, const char *path)`: the cgroup leaves
/// the map; one nested below a container's sends no record.
pub(crate) fn try_cgroup_rmdir(ctx: &RawTracePointContext) -> ProbeResult {
    let to = TASK_OFFSETS.load();
    let cgrp: *const u8 = ctx.arg(0);
    let place = cgroup_place(cgrp, &to)?;
    if !place.tracked_hierarchy() {
        return Ok(());
    }
    let CgroupPlace { hierarchy, level, id } = place;
    if TRACKED.remove(&id).is_err() && nested_in_container(cgrp, level) {
        count(&UNSTREAMED, unstreamed::NESTED_CGROUP_CHANGES);
        return Ok(());
    }
    emit_cgroup(EventKind::CgroupRmdir, hierarchy, level, id, ctx.arg(1), 0, 0, [0; COMM_LEN])
}

/// `TP_PROTO(struct cgroup *dst_cgrp, const char *path, struct
/// task_struct *task, bool threadgroup)`.
pub(crate) fn try_cgroup_attach(ctx: &RawTracePointContext) -> ProbeResult {
    let to = TASK_OFFSETS.load();
    let cgrp: *const u8 = ctx.arg(0);
    let place = cgroup_place(cgrp, &to)?;
    if !place.tracked_hierarchy() {
        return Ok(());
    }
    let CgroupPlace { hierarchy, level, id } = place;
    let task: *const u8 = ctx.arg(2);
    let pid: u32 = member(task, to.pid)?;

    // Keep the per-task table true: a task moved out of tracked cgroups
    // leaves it; one moved in is recorded with its own start and tgid, and
    // the cgroup it belongs to: the container's for one nested below it.
    let owner = match tracked_kind(id) {
        Some(_) => id,
        None => nested_owner(cgrp, level).id,
    };
    if owner == 0 {
        release(pid, None);
        return Ok(());
    }
    let leader: *const u8 = member(task, to.group_leader).unwrap_or(task);
    let info = TaskInfo {
        cgroup_id: owner,
        start_ns: member(leader, to.start_boottime).unwrap_or(0),
        tgid: member(task, to.tgid).unwrap_or(0),
        _pad: 0,
    };
    hold(pid, &info);

    // A record for the first few processes moved into a tracked cgroup
    // itself: all the pod model reads of attaches. None for a move inside
    // a container (nested cgroups), none for a loop of moves.
    let Some(entry) = (if owner == id { TRACKED.get_ptr_mut(&id) } else { None }) else {
        count(&UNSTREAMED, unstreamed::ATTACHES_UNSTREAMED);
        return Ok(());
    };
    // SAFETY: the map's value, read and bumped in place (a race between
    // two CPUs may let one more record through).
    unsafe {
        if (*entry).attaches >= tracked::ATTACH_RECORDS {
            count(&UNSTREAMED, unstreamed::ATTACHES_UNSTREAMED);
            return Ok(());
        }
        (*entry).attaches += 1;
    }
    let comm = member::<[u8; COMM_LEN]>(task, to.comm).unwrap_or([0; COMM_LEN]);
    emit_cgroup(EventKind::CgroupAttach, hierarchy, level, id, ctx.arg(1), pid, info.start_ns, comm)
}

/// A cgroup record: the cgroup and its path (`path`, a kernel string),
/// and for an attach the task moved (pid, start, comm; zeros otherwise).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_cgroup(
    kind: EventKind,
    hierarchy_id: u32,
    level: u32,
    cgroup_id: u64,
    path: *const u8,
    pid: u32,
    start_ns: u64,
    comm: [u8; COMM_LEN],
) -> ProbeResult {
    // Attaches never take the ring's last room: mkdirs and rmdirs (the
    // pod model's spine; one lost makes the agent read the tree again)
    // do.
    let pending = CGROUP_CHANGES.query(BPF_RB_AVAIL_DATA);
    let size = u64::from(global_field!(PROBE_CONFIG, cgroup_ring_bytes));
    if let Err(reason) = admit_cgroup(size, pending, kind == EventKind::CgroupAttach) {
        count_lost(kind as u32, reason);
        return Ok(());
    }
    let Some(mut entry) = CGROUP_CHANGES.reserve::<CgroupEvent>(0) else {
        count_lost(kind as u32, lost::RING_FULL);
        return Ok(());
    };
    let ev = entry.as_mut_ptr();
    let mut flags = 0;
    // SAFETY: `ev` points at a reserved record of the right size; every field
    // the decoder reads is written before submit (path beyond path_len is not).
    unsafe {
        (*ev).hierarchy_id = hierarchy_id;
        (*ev).level = level;
        (*ev).cgroup_id = cgroup_id;
        (*ev).pid = pid;
        (*ev).start_ns = start_ns;
        (*ev).comm = comm;
        let (len, cut) = match bpf_probe_read_kernel_str_bytes(path, &mut (*ev).path) {
            Ok(s) => (s.len(), s.len() + 1 >= (*ev).path.len()),
            Err(_) => (0, false),
        };
        (*ev).path_len = len as u32;
        if cut {
            flags |= FLAG_TRUNCATED;
        }
        (*ev).header = header(kind, flags);
    }
    entry.submit(cgroup_wakeup(pending + core::mem::size_of::<CgroupEvent>() as u64));
    count(&EMITTED, kind as u32);
    Ok(())
}
