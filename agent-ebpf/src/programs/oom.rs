//! OOM kills: the victim, its memory, the task that ran out, and which
//! limit fired — from the OOM killer's own control where a trampoline at
//! `out_of_memory()` keeps it, else from page counters.

use agent_common::{
    lost, oom_constraint, rooms, unstreamed, EventKind, MemcgLevel, MemcgOffsets, OomKillEvent, TaskOffsets,
    VictimIdentity, ABSENT, COMM_LEN, FLAG_LEVELS_OF_VICTIM, FLAG_NO_RSS, FLAG_TASK_UNKNOWN, FLAG_TASK_UNTRACKED,
    MEMCG_LEVELS, MEMCG_WALK, OOMS_UNREAD,
};
use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task},
    macros::fentry,
    programs::{FEntryContext, RawTracePointContext, TracePointContext},
};

use super::{
    common::*,
    entry,
    rooms::{admit_oom_kill, busy, sent, shares_of, RING_HEADER},
    ProbeResult,
};
use crate::maps::{
    count, count_lost, global_field, pod_task_mark, Mark, BPF_RB_AVAIL_DATA, EMITTED, IDENTITIES, MEMCG_OFFSETS,
    OOM_CONTROLS, OOM_CONTROL_OFFSETS, OOM_KILLS, OOM_SCRATCH, PENDING_OOM, PROBE_CONFIG, TASKS, TASK_OFFSETS,
    TP_OFFSETS, UNSTREAMED, URGENT_WAKEUP,
};

entry!(tracepoint, mark_victim, TracePointContext, try_mark_victim);
// Where `mark_victim` passes the victim's task: its identity and memory
// cgroup, read off the task at the kill.
entry!(raw_tracepoint, mark_victim_task, RawTracePointContext, try_mark_victim_task);

/// The OOM killer's entry, `bool out_of_memory(struct oom_control *oc)`
/// (a BPF trampoline, where the kernel has them): its control says which
/// memory cgroup the kill is for, whichever task runs it (a runtime
/// lowering a container's `memory.max` runs its kill inside the write).
/// `mark_victim` reads it further down the same call.
#[fentry(function = "out_of_memory")]
pub fn oom_control(ctx: FEntryContext) -> u32 {
    let oc: *const u8 = ctx.arg(0);
    let tid = bpf_get_current_pid_tgid() as u32;
    let _ = OOM_CONTROLS.insert(&tid, &(oc as u64), 0);
    0
}

pub(crate) fn try_mark_victim(ctx: &TracePointContext) -> ProbeResult {
    let tp = TP_OFFSETS.load();
    let Some(victim_pid) = field::<i32>(ctx, tp.mv_pid)? else {
        return Err(-22);
    };
    let victim_pid = victim_pid as u32;
    let pid_tgid = bpf_get_current_pid_tgid();
    let trigger_tid = pid_tgid as u32;
    let from_task = PROBE_CONFIG.load().victim_task != 0;

    // Every task of a tracked cgroup is in the table: one that is not is
    // a host task. Where the victim's own program names it instead, its
    // half may not be there yet: the record waits for it.
    // SAFETY: values copied out immediately.
    let victim = if from_task {
        match unsafe { IDENTITIES.get(&victim_pid) }.copied() {
            Some(identity) => {
                let _ = IDENTITIES.remove(&victim_pid);
                Some(identity)
            }
            None => None,
        }
    } else {
        Some(table_identity(victim_pid, 0))
    };
    let trigger_cgroup_id = current_place(pid_tgid).cgroup_id();
    let total_vm = field::<u64>(ctx, tp.mv_total_vm)?;
    let Some(ev) = OOM_SCRATCH.get_ptr_mut(0) else {
        return Err(-12);
    };
    // SAFETY: this CPU's slot; the program runs to its end without
    // another on this CPU writing it.
    let ev = unsafe { &mut *ev };
    ev.header = header(EventKind::OomKill, if total_vm.is_none() { FLAG_NO_RSS } else { 0 });
    ev.victim_pid = victim_pid;
    ev.victim_tgid = 0;
    ev.victim_cgroup_id = 0;
    ev.victim_start_ns = 0;
    ev.total_vm_kb = total_vm.unwrap_or(0);
    ev.anon_rss_kb = field::<u64>(ctx, tp.mv_anon_rss).ok().flatten().unwrap_or(0);
    ev.file_rss_kb = field::<u64>(ctx, tp.mv_file_rss).ok().flatten().unwrap_or(0);
    ev.shmem_rss_kb = field::<u64>(ctx, tp.mv_shmem_rss).ok().flatten().unwrap_or(0);
    ev.pgtables_kb = field::<u64>(ctx, tp.mv_pgtables).ok().flatten().unwrap_or(0);
    ev.uid = field::<u32>(ctx, tp.mv_uid).ok().flatten().unwrap_or(0);
    ev.oom_score_adj = i32::from(field::<i16>(ctx, tp.mv_oom_score_adj).ok().flatten().unwrap_or(0));
    ev.trigger_pid = trigger_tid;
    ev.trigger_tgid = (pid_tgid >> 32) as u32;
    ev.trigger_cgroup_id = trigger_cgroup_id;
    ev.victim_comm = [0; COMM_LEN];
    ev.trigger_comm = bpf_get_current_comm().unwrap_or([0; COMM_LEN]);
    if tp.mv_comm != ABSENT {
        let _ = data_loc_str(ctx, tp.mv_comm, &mut ev.victim_comm);
    } else if victim_pid == trigger_tid {
        // Older kernels' tracepoint carries only the pid (5.10); the
        // victim is often the task that ran out of memory, whose comm is
        // at hand.
        ev.victim_comm = ev.trigger_comm;
    }
    // Which limit fired: the kernel's own decision where it was seen.
    let decision = oom_decision(trigger_tid);
    ev.constraint = decision.constraint;
    ev.oom_memcg_id = 0;
    ev.level_count = 0;
    ev.levels_cut = 0;
    match decision.constraint {
        oom_constraint::MEMCG => {
            ev.oom_memcg_id = memcg_id(decision.memcg, &MEMCG_OFFSETS.load());
            let (count, cut) = memcg_levels(&mut ev.levels, decision.memcg, true);
            ev.level_count = count;
            ev.levels_cut = u32::from(cut);
        }
        // Not seen: the page counters, from the victim's memory cgroup
        // where its program said it (the record may wait for it).
        oom_constraint::UNREAD => {
            if let Some(identity) = victim {
                unread_levels(ev, &identity);
            }
        }
        // No memory cgroup's limit: no level to read.
        _ => {}
    }
    match victim {
        Some(identity) => submit_oom(ev, &identity),
        None => PENDING_OOM.insert(&victim_pid, ev, 0).map_err(i64::from),
    }
}

/// The levels of a kill whose deciding cgroup the kernel did not show:
/// from the victim's memory cgroup (picked below the one that fired) where
/// its identity has it, else from the allocating task's.
#[inline(always)]
pub(crate) fn unread_levels(ev: &mut OomKillEvent, identity: &VictimIdentity) {
    let (start, flag) =
        if identity.memcg != 0 { (identity.memcg as *const u8, FLAG_LEVELS_OF_VICTIM) } else { (current_memcg(), 0) };
    let (count, cut) = memcg_levels(&mut ev.levels, start, false);
    ev.level_count = count;
    ev.levels_cut = u32::from(cut);
    ev.header.flags |= flag;
}

/// What the task table says of thread `pid`: its process and container,
/// a pod's task it lost (unknown, never the host's), or a host task.
#[inline(always)]
pub(crate) fn table_identity(pid: u32, memcg: u64) -> VictimIdentity {
    // SAFETY: values copied out immediately.
    match unsafe { TASKS.get(&pid) }.copied() {
        Some(t) => VictimIdentity { cgroup_id: t.cgroup_id, start_ns: t.start_ns, tgid: t.tgid, flags: 0, memcg },
        None if pod_task_mark(pid) == Mark::Set => {
            count(&UNSTREAMED, unstreamed::TASK_TABLE_MISSES);
            VictimIdentity { cgroup_id: 0, start_ns: 0, tgid: 0, flags: FLAG_TASK_UNKNOWN, memcg }
        }
        None => VictimIdentity { cgroup_id: 0, start_ns: 0, tgid: 0, flags: FLAG_TASK_UNTRACKED, memcg },
    }
}

/// The OOM killer's decision for the kill thread `tid` runs, read off its
/// `struct oom_control` (seen at `out_of_memory`'s entry): its constraint
/// (`oom_constraint::*`; `UNREAD` where it was not seen) and, for a memory
/// cgroup's limit, that cgroup.
#[derive(Clone, Copy)]
pub(crate) struct Decision {
    constraint: u32,
    memcg: *const u8,
}

#[inline(always)]
pub(crate) fn oom_decision(tid: u32) -> Decision {
    let unread = Decision { constraint: oom_constraint::UNREAD, memcg: core::ptr::null() };
    let memcg_at = global_field!(OOM_CONTROL_OFFSETS, memcg);
    if memcg_at == ABSENT {
        return unread;
    }
    // SAFETY: the value is copied out immediately.
    let Some(oc) = (unsafe { OOM_CONTROLS.get(&tid) }).copied() else { return unread };
    let oc = oc as *const u8;
    let Ok(memcg) = member::<*const u8>(oc, memcg_at) else { return unread };
    if !memcg.is_null() {
        return Decision { constraint: oom_constraint::MEMCG, memcg };
    }
    // Set by the killer before it picks a victim; the designated
    // initialisers of its callers leave it `CONSTRAINT_NONE` (0) where it
    // marks a dying task without choosing.
    let Ok(raw) = member::<u32>(oc, global_field!(OOM_CONTROL_OFFSETS, constraint)) else { return unread };
    let constraint = if raw == global_field!(OOM_CONTROL_OFFSETS, cpuset) {
        oom_constraint::CPUSET
    } else if raw == global_field!(OOM_CONTROL_OFFSETS, memory_policy) {
        oom_constraint::MEMORY_POLICY
    } else {
        oom_constraint::NONE
    };
    Decision { constraint, memcg: core::ptr::null() }
}

/// The current task's memory cgroup (`task->cgroups->subsys[memory]`);
/// null when it cannot be read.
#[inline(always)]
pub(crate) fn current_memcg() -> *const u8 {
    // SAFETY: helper without arguments; the task is only probe-read.
    task_memcg(unsafe { bpf_get_current_task() } as *const u8)
}

/// The page counters of memory cgroup `start` and of each one above it,
/// as they stand: this runs inside the OOM killer, after the charge that
/// failed, before the victim frees anything. `start` is the cgroup the
/// killer ran for where its decision was read (`decided`), else the
/// allocating task's. Of the cgroups a container nests below its own (a
/// tenant's, any number), only `start` is kept, and, where the killer's
/// decision is not known, the innermost of the others at its limit (the
/// one that fired, if any did): the container's and those above it fit
/// behind them. Returns how many levels were read, and whether the walk
/// gave out before reaching the container.
#[inline(always)]
pub(crate) fn memcg_levels(levels: &mut [MemcgLevel; MEMCG_LEVELS], start: *const u8, decided: bool) -> (u32, bool) {
    let mo: MemcgOffsets = MEMCG_OFFSETS.load();
    if mo.memory == ABSENT || start.is_null() {
        return (0, false);
    }
    let innermost = start;
    // The container the memory cgroup is nested below, if it is: walk up
    // the nested ones to it, noting the innermost at its limit.
    let mut next = innermost;
    let mut fired: *const u8 = core::ptr::null();
    let mut cut = false;
    let cgroup: *const u8 = member(innermost, mo.css_cgroup).unwrap_or(core::ptr::null());
    let owner = nested_owner_of(cgroup);
    if owner.is_container() {
        let container = owner.id;
        let margin = u64::from(global_field!(PROBE_CONFIG, limit_margin_pages));
        let mut m = parent_memcg(innermost, &mo);
        cut = true;
        for _ in 0..MEMCG_WALK {
            if m.is_null() {
                break;
            }
            if memcg_id(m, &mo) == container {
                cut = false;
                break;
            }
            if !decided && fired.is_null() && at_limit(&read_level(m, &mo), margin) {
                fired = m;
            }
            m = parent_memcg(m, &mo);
        }
        // From the innermost: then the one that fired, then the container's.
        if let Some(slot) = levels.get_mut(0) {
            *slot = read_level(innermost, &mo);
        }
        let mut n = 1;
        if !fired.is_null() {
            if let Some(slot) = levels.get_mut(1) {
                *slot = read_level(fired, &mo);
            }
            n = 2;
        }
        if cut {
            return (n as u32, true);
        }
        next = m;
        return (record_levels(levels, n, next, &mo), false);
    }
    (record_levels(levels, 0, next, &mo), cut)
}

/// Reads `memcg` and each one above it into `levels` from slot `from`;
/// returns how many slots are filled.
#[inline(always)]
pub(crate) fn record_levels(
    levels: &mut [MemcgLevel; MEMCG_LEVELS],
    from: usize,
    mut memcg: *const u8,
    mo: &MemcgOffsets,
) -> u32 {
    // An index loop: 5.10's and 6.1's verifiers refuse the layout the
    // compiler gives an iterator's here (a fall-through back-edge).
    let mut n = from;
    while n < MEMCG_LEVELS && !memcg.is_null() {
        let Some(slot) = levels.get_mut(n) else { break };
        *slot = read_level(memcg, mo);
        n += 1;
        memcg = parent_memcg(memcg, mo);
    }
    n as u32
}

/// A memory cgroup's id, page counters, and the kernel's count of the
/// OOMs it ran for its own limit.
#[inline(always)]
pub(crate) fn read_level(memcg: *const u8, mo: &MemcgOffsets) -> MemcgLevel {
    // SAFETY: only addresses are computed here; every read is a probe read.
    let memory = unsafe { memcg.add(mo.memory as usize) };
    let (memsw_usage, memsw_max) = if mo.memsw == ABSENT {
        (0, 0)
    } else {
        // SAFETY: as above.
        let memsw = unsafe { memcg.add(mo.memsw as usize) };
        (member(memsw, mo.counter_usage).unwrap_or(0), member(memsw, mo.counter_max).unwrap_or(0))
    };
    MemcgLevel {
        cgroup_id: memcg_id(memcg, mo),
        usage: member(memory, mo.counter_usage).unwrap_or(0),
        max: member(memory, mo.counter_max).unwrap_or(0),
        memsw_usage,
        memsw_max,
        ooms: member(memcg, mo.oom_events).unwrap_or(OOMS_UNREAD),
    }
}

/// The id of a memory cgroup's cgroup.
#[inline(always)]
pub(crate) fn memcg_id(memcg: *const u8, mo: &MemcgOffsets) -> u64 {
    let cgroup: *const u8 = member(memcg, mo.css_cgroup).unwrap_or(core::ptr::null());
    let kn: *const u8 = member(cgroup, global_field!(TASK_OFFSETS, cgroup_kn)).unwrap_or(core::ptr::null());
    member(kn, global_field!(TASK_OFFSETS, kn_id)).unwrap_or(0)
}

/// The memory cgroup above `memcg` (null at the root): its page counter's
/// parent is the parent's counter of the same kind, inside its mem_cgroup.
#[inline(always)]
pub(crate) fn parent_memcg(memcg: *const u8, mo: &MemcgOffsets) -> *const u8 {
    // SAFETY: only an address is computed here; the read is a probe read.
    let memory = unsafe { memcg.add(mo.memory as usize) };
    let parent: *const u8 = member(memory, mo.counter_parent).unwrap_or(core::ptr::null());
    if parent.is_null() {
        parent
    } else {
        parent.wrapping_sub(mo.memory as usize)
    }
}

/// Whether a level is within `margin` pages of its memory or (v1) memory
/// + swap limit.
#[inline(always)]
pub(crate) fn at_limit(l: &MemcgLevel, margin: u64) -> bool {
    l.usage.saturating_add(margin) > l.max || (l.memsw_max > 0 && l.memsw_usage.saturating_add(margin) > l.memsw_max)
}

/// The victim's identity into its record, which goes out.
#[inline(always)]
pub(crate) fn submit_oom(ev: &mut OomKillEvent, identity: &VictimIdentity) -> ProbeResult {
    if identity.flags == 0 {
        ev.victim_tgid = identity.tgid;
        ev.victim_cgroup_id = identity.cgroup_id;
        ev.victim_start_ns = identity.start_ns;
    }
    ev.header.flags |= identity.flags;
    let kind = EventKind::OomKill as u32;
    // A busy ring: the victim's container's room in it (a host victim's,
    // and an unknown one's, are shared by all of their kind).
    let record = core::mem::size_of::<OomKillEvent>() as u64 + RING_HEADER;
    let size = u64::from(global_field!(PROBE_CONFIG, oom_ring_bytes));
    let pending = OOM_KILLS.query(BPF_RB_AVAIL_DATA);
    let spell = if busy(size, pending) {
        let shares = match identity.flags {
            0 => shares_of(identity.cgroup_id, rooms::SHARE_HOST),
            FLAG_TASK_UNTRACKED => shares_of(0, rooms::SHARE_HOST),
            _ => shares_of(0, rooms::SHARE_LOST),
        };
        match admit_oom_kill(&OOM_KILLS, size, pending, record, shares) {
            Ok(spell) => Some(spell),
            Err(reason) => {
                count_lost(kind, reason);
                return Ok(());
            }
        }
    } else {
        None
    };
    let Some(mut entry) = OOM_KILLS.reserve::<OomKillEvent>(0) else {
        count_lost(kind, lost::RING_FULL);
        return Ok(());
    };
    if let Some(spell) = spell {
        sent(&OOM_KILLS, spell);
    }
    // SAFETY: the entry has room for one record; a copy between kernel
    // memory, not through the stack.
    unsafe { core::ptr::copy_nonoverlapping(ev as *const OomKillEvent, entry.as_mut_ptr(), 1) };
    entry.submit(URGENT_WAKEUP);
    count(&EMITTED, kind);
    Ok(())
}

/// The victim's own program (where `mark_victim` passes its task): who it
/// is — its cgroup (off the task on v2, from the task table on v1), process
/// and start — and its memory cgroup, read off the task at the kill, into
/// the record the tracepoint's program left, or left for it. An identity
/// that cannot be read still lets the record go out, with its victim
/// unknown.
pub(crate) fn try_mark_victim_task(ctx: &RawTracePointContext) -> ProbeResult {
    let to = TASK_OFFSETS.load();
    let task: *const u8 = ctx.arg(0);
    let pid: u32 = member(task, to.pid)?;
    let memcg = task_memcg(task) as u64;
    let identity = if PROBE_CONFIG.load().unified != 0 {
        victim_identity(task, &to, memcg).unwrap_or(VictimIdentity {
            cgroup_id: 0,
            start_ns: 0,
            tgid: 0,
            flags: FLAG_TASK_UNKNOWN,
            memcg,
        })
    } else {
        table_identity(pid, memcg)
    };
    if let Some(pending) = PENDING_OOM.get_ptr_mut(&pid) {
        // SAFETY: the map's value, completed and copied into the ring
        // before it is removed.
        let pending = unsafe { &mut *pending };
        if pending.constraint == oom_constraint::UNREAD {
            unread_levels(pending, &identity);
        }
        let result = submit_oom(pending, &identity);
        let _ = PENDING_OOM.remove(&pid);
        return result;
    }
    IDENTITIES.insert(&pid, &identity, 0).map_err(i64::from)
}

/// A task's cgroup on v2 (`task->cgroups->dfl_cgrp->kn->id`, or the
/// container's it is nested below), process and the start of its leader
/// (which names the process in exit records).
#[inline(always)]
pub(crate) fn victim_identity(task: *const u8, to: &TaskOffsets, memcg: u64) -> Result<VictimIdentity, i64> {
    let css_set: *const u8 = member(task, to.task_cgroups)?;
    let cgrp: *const u8 = member(css_set, to.css_dfl_cgrp)?;
    let kn: *const u8 = member(cgrp, to.cgroup_kn)?;
    let id: u64 = member(kn, to.kn_id)?;
    let owner = owner_of(cgrp, id);
    let (cgroup_id, flags) = if owner.id != 0 { (owner.id, 0) } else { (id, FLAG_TASK_UNTRACKED) };
    let leader: *const u8 = member(task, to.group_leader).unwrap_or(task);
    Ok(VictimIdentity {
        cgroup_id,
        start_ns: member(leader, to.start_boottime)?,
        tgid: member(task, to.tgid)?,
        flags,
        memcg,
    })
}
