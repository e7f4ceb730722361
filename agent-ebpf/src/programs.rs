//! One thin entry per hook; each `try_*` copies fixed-size fields only.

use agent_common::{
    CgroupEvent, CgroupOffsets, EventHeader, EventKind, ExitEvent, OomKillEvent, TaskInfo,
    TaskOffsets,
    ABSENT, COMM_LEN, FLAG_NO_RSS, FLAG_TASK_UNKNOWN, FLAG_TRUNCATED,
};
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_current_task, bpf_ktime_get_boot_ns, bpf_probe_read_kernel,
        bpf_probe_read_kernel_str_bytes,
    },
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
    EbpfContext,
};
use aya_log_ebpf::warn;

use crate::maps::{
    count, routine_wakeup, DROPPED, EMITTED, ENDED, EVENTS, PROBE_CONFIG, TASKS, TASK_OFFSETS,
    TP_OFFSETS, URGENT_WAKEUP,
};

/// Why a probe gave up on a record; logged through aya-log.
type ProbeResult = Result<(), i64>;

#[tracepoint]
pub fn sched_process_exit(ctx: TracePointContext) -> u32 {
    if let Err(e) = try_exit(&ctx) {
        warn!(&ctx, "sched_process_exit probe failed: {}", e);
    }
    0
}

#[raw_tracepoint]
pub fn sched_process_fork(ctx: RawTracePointContext) -> u32 {
    if let Err(e) = try_fork(&ctx) {
        warn!(&ctx, "sched_process_fork probe failed: {}", e);
    }
    0
}

#[tracepoint]
pub fn mark_victim(ctx: TracePointContext) -> u32 {
    if let Err(e) = try_mark_victim(&ctx) {
        warn!(&ctx, "mark_victim probe failed: {}", e);
    }
    0
}

#[tracepoint]
pub fn cgroup_mkdir(ctx: TracePointContext) -> u32 {
    let offsets = TP_OFFSETS.load().mkdir;
    if let Err(e) = try_cgroup_dir(&ctx, EventKind::CgroupMkdir, &offsets) {
        warn!(&ctx, "cgroup_mkdir probe failed: {}", e);
    }
    0
}

#[tracepoint]
pub fn cgroup_rmdir(ctx: TracePointContext) -> u32 {
    let offsets = TP_OFFSETS.load().rmdir;
    if let Err(e) = try_cgroup_dir(&ctx, EventKind::CgroupRmdir, &offsets) {
        warn!(&ctx, "cgroup_rmdir probe failed: {}", e);
    }
    0
}

#[tracepoint]
pub fn cgroup_attach_task(ctx: TracePointContext) -> u32 {
    if let Err(e) = try_cgroup_attach(&ctx) {
        warn!(&ctx, "cgroup_attach_task probe failed: {}", e);
    }
    0
}

#[inline(always)]
fn header(kind: EventKind, flags: u32) -> EventHeader {
    EventHeader {
        kind: kind as u32,
        flags,
        // SAFETY: helper without arguments.
        ts_ns: unsafe { bpf_ktime_get_boot_ns() },
    }
}

/// Reads a tracepoint field; `None` when this kernel lacks it.
#[inline(always)]
fn field<T>(ctx: &TracePointContext, offset: u32) -> Result<Option<T>, i64> {
    if offset == ABSENT {
        return Ok(None);
    }
    // SAFETY: the offset comes from this kernel's format file.
    unsafe { ctx.read_at::<T>(offset as usize) }
        .map(Some)
        .map_err(i64::from)
}

/// Copies a `__data_loc char[]` field into `dest`; returns (length, truncated).
#[inline(always)]
fn data_loc_str(ctx: &TracePointContext, offset: u32, dest: &mut [u8]) -> (u32, bool) {
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
fn member<T>(base: *const u8, offset: u32) -> Result<T, i64> {
    if offset == ABSENT || base.is_null() {
        return Err(-22);
    }
    // SAFETY: probe read of kernel memory; failure is reported, not faulted.
    unsafe { bpf_probe_read_kernel(base.add(offset as usize) as *const T) }.map_err(i64::from)
}

/// Cgroup of the current task in the tracked hierarchy, if known.
#[inline(always)]
fn current_cgroup(tid: u32) -> Option<u64> {
    if PROBE_CONFIG.load().unified != 0 {
        // SAFETY: helper without arguments.
        return Some(unsafe { bpf_get_current_cgroup_id() });
    }
    // SAFETY: value copied out immediately.
    unsafe { TASKS.get(&tid) }.map(|t| t.cgroup_id)
}

fn try_exit(ctx: &TracePointContext) -> ProbeResult {
    let tp = TP_OFFSETS.load();
    let to = TASK_OFFSETS.load();
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    // SAFETY: helper without arguments; the pointer is only probe-read.
    let task = unsafe { bpf_get_current_task() } as *const u8;

    let known = unsafe { TASKS.get(&tid) }.copied();
    let _ = TASKS.remove(&tid);

    let mut flags = 0;
    let cgroup_id = match current_cgroup_for_exit(known) {
        Some(id) => id,
        None => {
            flags |= FLAG_TASK_UNKNOWN;
            0
        }
    };
    let parent: *const u8 = member(task, to.real_parent).unwrap_or(core::ptr::null());
    let ppid: u32 = member(parent, to.tgid).unwrap_or(0);
    let exit_code: u32 = member(task, to.exit_code)?;
    // The process is named by its leader's start, whichever thread is last.
    let leader: *const u8 = member(task, to.group_leader).unwrap_or(task);
    let start_ns: u64 = member(leader, to.start_boottime)?;
    let pid = field::<i32>(ctx, tp.exit_pid)?.map_or(tid, |p| p as u32);
    let comm = field::<[u8; COMM_LEN]>(ctx, tp.exit_comm)?.unwrap_or([0; COMM_LEN]);
    let tgid = (pid_tgid >> 32) as u32;
    let group_dead = match field::<u8>(ctx, tp.exit_group_dead)? {
        Some(v) => v != 0,
        None => last_thread(task, &to, tgid, start_ns),
    };

    let kind = EventKind::Exit as u32;
    let Some(mut entry) = EVENTS.reserve::<ExitEvent>(0) else {
        count(&DROPPED, kind);
        return Ok(());
    };
    entry.write(ExitEvent {
        header: header(EventKind::Exit, flags),
        pid,
        tgid,
        ppid,
        exit_code,
        cgroup_id,
        start_ns,
        comm,
        group_dead: u32::from(group_dead),
        _pad: 0,
    });
    entry.submit(routine_wakeup());
    count(&EMITTED, kind);
    Ok(())
}

/// For kernels whose exit tracepoint has no `group_dead`: `do_exit`
/// decrements `signal->live` before the tracepoint, so the last thread sees
/// 0. Threads exiting together may all see 0; the first to claim the
/// process in `ENDED` reports it, the rest do not.
#[inline(always)]
fn last_thread(task: *const u8, to: &TaskOffsets, tgid: u32, start_ns: u64) -> bool {
    let signal: *const u8 = member(task, to.signal).unwrap_or(core::ptr::null());
    let Ok(live) = member::<i32>(signal, to.signal_live) else {
        return false;
    };
    if live != 0 {
        return false;
    }
    if ENDED.insert(&tgid, &start_ns, u64::from(BPF_NOEXIST)).is_ok() {
        return true;
    }
    // SAFETY: value copied out immediately.
    match unsafe { ENDED.get(&tgid) }.copied() {
        // Claimed by another thread of this process.
        Some(claimed) if claimed == start_ns => false,
        // A previous process with a reused tgid, or evicted meanwhile.
        _ => ENDED.insert(&tgid, &start_ns, 0).is_ok(),
    }
}

/// On v2 the exiting task is current, so its cgroup is read directly.
#[inline(always)]
fn current_cgroup_for_exit(known: Option<TaskInfo>) -> Option<u64> {
    if PROBE_CONFIG.load().unified != 0 {
        // SAFETY: helper without arguments.
        return Some(unsafe { bpf_get_current_cgroup_id() });
    }
    known.map(|t| t.cgroup_id)
}

/// A child inherits its parent's cgroup: record it so the child's exit or
/// OOM kill can be attributed after it is gone.
fn try_fork(ctx: &RawTracePointContext) -> ProbeResult {
    let to = TASK_OFFSETS.load();
    let child: *const u8 = ctx.arg(1);
    let parent_tid = bpf_get_current_pid_tgid() as u32;
    let Some(cgroup_id) = current_cgroup(parent_tid) else {
        // Parent untracked: the child's events will carry FLAG_TASK_UNKNOWN.
        return Ok(());
    };
    let child_tid: u32 = member(child, to.pid)?;
    let info = TaskInfo {
        cgroup_id,
        start_ns: member(child, to.start_boottime)?,
        tgid: member(child, to.tgid)?,
        _pad: 0,
    };
    TASKS.insert(&child_tid, &info, 0).map_err(i64::from)
}

fn try_mark_victim(ctx: &TracePointContext) -> ProbeResult {
    let tp = TP_OFFSETS.load();
    let Some(victim_pid) = field::<i32>(ctx, tp.mv_pid)? else {
        return Err(-22);
    };
    let victim_pid = victim_pid as u32;
    let pid_tgid = bpf_get_current_pid_tgid();
    let trigger_tid = pid_tgid as u32;

    let mut flags = 0;
    // SAFETY: value copied out immediately.
    let victim = match unsafe { TASKS.get(&victim_pid) }.copied() {
        Some(v) => v,
        None => {
            flags |= FLAG_TASK_UNKNOWN;
            TaskInfo { cgroup_id: 0, start_ns: 0, tgid: 0, _pad: 0 }
        }
    };
    let trigger_cgroup_id = current_cgroup(trigger_tid).unwrap_or(0);
    let total_vm = field::<u64>(ctx, tp.mv_total_vm)?;
    if total_vm.is_none() {
        flags |= FLAG_NO_RSS;
    }

    let kind = EventKind::OomKill as u32;
    let Some(mut entry) = EVENTS.reserve::<OomKillEvent>(0) else {
        count(&DROPPED, kind);
        return Ok(());
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` points at a reserved record of the right size; every field
    // is written before submit.
    unsafe {
        (*ev).victim_pid = victim_pid;
        (*ev).victim_tgid = victim.tgid;
        (*ev).victim_cgroup_id = victim.cgroup_id;
        (*ev).victim_start_ns = victim.start_ns;
        (*ev).total_vm_kb = total_vm.unwrap_or(0);
        (*ev).anon_rss_kb = field::<u64>(ctx, tp.mv_anon_rss).ok().flatten().unwrap_or(0);
        (*ev).file_rss_kb = field::<u64>(ctx, tp.mv_file_rss).ok().flatten().unwrap_or(0);
        (*ev).shmem_rss_kb = field::<u64>(ctx, tp.mv_shmem_rss).ok().flatten().unwrap_or(0);
        (*ev).pgtables_kb = field::<u64>(ctx, tp.mv_pgtables).ok().flatten().unwrap_or(0);
        (*ev).uid = field::<u32>(ctx, tp.mv_uid).ok().flatten().unwrap_or(0);
        (*ev).oom_score_adj =
            i32::from(field::<i16>(ctx, tp.mv_oom_score_adj).ok().flatten().unwrap_or(0));
        (*ev).trigger_pid = trigger_tid;
        (*ev).trigger_tgid = (pid_tgid >> 32) as u32;
        (*ev).trigger_cgroup_id = trigger_cgroup_id;
        (*ev).trigger_comm = bpf_get_current_comm().unwrap_or([0; COMM_LEN]);
        (*ev).victim_comm = [0; COMM_LEN];
        if tp.mv_comm != ABSENT {
            let _ = data_loc_str(ctx, tp.mv_comm, &mut (*ev).victim_comm);
        } else if victim_pid == trigger_tid {
            // Older kernels' tracepoint carries only the pid (5.10); the
            // victim is often the task that ran out of memory, whose comm
            // is at hand.
            (*ev).victim_comm = (*ev).trigger_comm;
        }
        (*ev).header = header(EventKind::OomKill, flags);
    }
    entry.submit(URGENT_WAKEUP);
    count(&EMITTED, kind);
    Ok(())
}

fn try_cgroup_dir(ctx: &TracePointContext, kind: EventKind, off: &CgroupOffsets) -> ProbeResult {
    let root = field::<i32>(ctx, off.root)?.unwrap_or(-1);
    if root as u32 != PROBE_CONFIG.load().tracked_hierarchy {
        return Ok(());
    }
    let level = field::<i32>(ctx, off.level)?.unwrap_or(0) as u32;
    let id = field::<u64>(ctx, off.id)?.unwrap_or(0);
    emit_cgroup(ctx, kind, root as u32, level, id, 0, 0, off.path, ABSENT)
}

fn try_cgroup_attach(ctx: &TracePointContext) -> ProbeResult {
    let off = TP_OFFSETS.load().attach;
    let root = field::<i32>(ctx, off.root)?.unwrap_or(-1);
    if root as u32 != PROBE_CONFIG.load().tracked_hierarchy {
        return Ok(());
    }
    let level = field::<i32>(ctx, off.level)?.unwrap_or(0) as u32;
    let id = field::<u64>(ctx, off.id)?.unwrap_or(0);
    let pid = field::<i32>(ctx, off.pid)?.unwrap_or(0) as u32;

    // Keep the per-task table true: the task's start and tgid stay, its
    // cgroup changes.
    // SAFETY: value copied out immediately.
    let info = match unsafe { TASKS.get(&pid) }.copied() {
        Some(mut t) => {
            t.cgroup_id = id;
            t
        }
        None => TaskInfo { cgroup_id: id, start_ns: 0, tgid: 0, _pad: 0 },
    };
    let _ = TASKS.insert(&pid, &info, 0);

    let start_ns = info.start_ns;
    emit_cgroup(ctx, EventKind::CgroupAttach, root as u32, level, id, pid, start_ns, off.path, off.comm)
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn emit_cgroup(
    ctx: &TracePointContext,
    kind: EventKind,
    hierarchy_id: u32,
    level: u32,
    cgroup_id: u64,
    pid: u32,
    start_ns: u64,
    path_offset: u32,
    comm_offset: u32,
) -> ProbeResult {
    let Some(mut entry) = EVENTS.reserve::<CgroupEvent>(0) else {
        count(&DROPPED, kind as u32);
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
        (*ev).comm = [0; COMM_LEN];
        // comm is at most 15 bytes by definition: only the path can be cut.
        let _ = data_loc_str(ctx, comm_offset, &mut (*ev).comm);
        let (path_len, path_cut) = data_loc_str(ctx, path_offset, &mut (*ev).path);
        (*ev).path_len = path_len;
        if path_cut {
            flags |= FLAG_TRUNCATED;
        }
        (*ev).header = header(kind, flags);
    }
    entry.submit(routine_wakeup());
    count(&EMITTED, kind as u32);
    Ok(())
}
