//! Process exits and forks: whole processes of tracked cgroups (pods) and
//! of container runtimes are streamed, the rest counted; on v1 (and v2
//! kernels whose OOM tracepoint lacks the victim's task) the task table is
//! kept at fork.

use agent_common::{
    lost, rooms as room, unstreamed, EventKind, ExitEvent, TaskInfo, TaskOffsets, COMM_LEN, FLAG_TASK_UNKNOWN,
    FLAG_TASK_UNTRACKED, MAX_RUNTIME_COMMS,
};
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task},
    programs::{RawTracePointContext, TracePointContext},
    EbpfContext,
};

use super::{
    common::*,
    entry,
    rooms::{admit_exit, busy, sent, shares_of, RING_HEADER},
    tasks::{hold, release, retire_at_exec},
    ProbeResult,
};
use crate::maps::{
    count, count_lost, global_field, global_ptr, mark_pod_task, pod_task_mark, routine_wakeup, Mark, BPF_RB_AVAIL_DATA,
    EMITTED, ENDED, EVENTS, PROBE_CONFIG, RUNTIME_COMMS, TASKS, TASK_OFFSETS, TP_OFFSETS, UNSTREAMED,
};

entry!(tracepoint, sched_process_exit, TracePointContext, try_exit);
entry!(raw_tracepoint, sched_process_fork, RawTracePointContext, try_fork);
entry!(tracepoint, sched_process_exec, TracePointContext, try_exec);

/// The exit record's layout on every kernel tested (5.10 to 7.2):
/// `comm` at 8, `pid` at 24, `group_dead` (where present) at 32. Where this
/// kernel's format file says so, those fields are loaded straight from the
/// record (the offsets in the instructions, as the verifier requires for a
/// tracepoint's context) instead of through `bpf_probe_read`, a helper call
/// each on the hot path; elsewhere the format file's offsets are read.
pub(crate) const EXIT_COMM_AT: u32 = 8;
pub(crate) const EXIT_PID_AT: u32 = 24;
pub(crate) const EXIT_GROUP_DEAD_AT: u32 = 32;

/// `group_dead` of the exit record; `None` when this kernel lacks it.
#[inline(always)]
pub(crate) fn exit_group_dead(ctx: &TracePointContext) -> Result<Option<bool>, i64> {
    let offset = global_field!(TP_OFFSETS, exit_group_dead);
    if offset == EXIT_GROUP_DEAD_AT {
        // SAFETY: an aligned load inside the record, at a constant offset.
        return Ok(Some(
            unsafe { core::ptr::read_volatile((ctx.as_ptr() as *const u8).add(EXIT_GROUP_DEAD_AT as usize)) } != 0,
        ));
    }
    Ok(field::<u8>(ctx, offset)?.map(|v| v != 0))
}

/// A `comm` as two words: compared with two instructions, not sixteen.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Comm {
    lo: u64,
    hi: u64,
}

impl Comm {
    #[inline(always)]
    fn from_bytes(b: [u8; COMM_LEN]) -> Self {
        let mut lo = [0u8; 8];
        let mut hi = [0u8; 8];
        lo.copy_from_slice(&b[..8]);
        hi.copy_from_slice(&b[8..]);
        Self { lo: u64::from_ne_bytes(lo), hi: u64::from_ne_bytes(hi) }
    }

    #[inline(always)]
    fn bytes(self) -> [u8; COMM_LEN] {
        let mut b = [0u8; COMM_LEN];
        b[..8].copy_from_slice(&self.lo.to_ne_bytes());
        b[8..].copy_from_slice(&self.hi.to_ne_bytes());
        b
    }
}

/// `comm` of the exit record.
#[inline(always)]
pub(crate) fn exit_comm(ctx: &TracePointContext) -> Result<Comm, i64> {
    let offset = global_field!(TP_OFFSETS, exit_comm);
    if offset == EXIT_COMM_AT {
        let base = ctx.as_ptr() as *const u8;
        // SAFETY: two aligned 8-byte loads inside the record, at constant
        // offsets (a tracepoint's context allows loads of at most 8 bytes).
        return Ok(unsafe {
            Comm {
                lo: core::ptr::read_volatile(base.add(EXIT_COMM_AT as usize) as *const u64),
                hi: core::ptr::read_volatile(base.add(EXIT_COMM_AT as usize + 8) as *const u64),
            }
        });
    }
    Ok(Comm::from_bytes(field::<[u8; COMM_LEN]>(ctx, offset)?.unwrap_or([0; COMM_LEN])))
}

/// `pid` of the exit record; `None` when this kernel lacks it.
#[inline(always)]
pub(crate) fn exit_pid(ctx: &TracePointContext) -> Result<Option<u32>, i64> {
    let offset = global_field!(TP_OFFSETS, exit_pid);
    if offset == EXIT_PID_AT {
        // SAFETY: an aligned load inside the record, at a constant offset.
        return Ok(Some(unsafe {
            core::ptr::read_volatile((ctx.as_ptr() as *const u8).add(EXIT_PID_AT as usize) as *const i32)
        } as u32));
    }
    Ok(field::<i32>(ctx, offset)?.map(|p| p as u32))
}

/// A container runtime's process, by name: its exit is streamed wherever
/// it runs (crash detection).
#[inline(always)]
pub(crate) fn is_runtime(comm: Comm) -> bool {
    let n = (global_field!(RUNTIME_COMMS, count) as usize).min(MAX_RUNTIME_COMMS);
    // `RuntimeComms` is 8-aligned, its names first: two words per name.
    let words = global_ptr(&RUNTIME_COMMS) as *const u64;
    let mut i = 0;
    while i < MAX_RUNTIME_COMMS {
        // SAFETY: `2 * i + 1` words lie inside the names array; the global
        // is initialised.
        let name = unsafe {
            Comm { lo: core::ptr::read_volatile(words.add(2 * i)), hi: core::ptr::read_volatile(words.add(2 * i + 1)) }
        };
        if i < n && name == comm {
            return true;
        }
        i += 1;
    }
    false
}

/// Thread exits and exits of host processes are only counted; whole
/// processes of tracked cgroups (pods) and runtimes are streamed, each
/// within its container's room in the ring (`rooms`).
pub(crate) fn try_exit(ctx: &TracePointContext) -> ProbeResult {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let tgid = (pid_tgid >> 32) as u32;

    let place = current_place(pid_tgid);
    let group_dead = match exit_group_dead(ctx)? {
        Some(v) => v,
        // SAFETY: helper without arguments; the pointer is only probe-read.
        None => last_thread(unsafe { bpf_get_current_task() } as *const u8, &TASK_OFFSETS.load(), tgid),
    };
    // A leader that goes before its threads keeps its entry for them. A
    // lost task's marks go too: its pid, reused, is someone else's. An
    // entry of a cgroup tracked no more is stale: it goes, counted.
    if !matches!(place, Place::Host(_)) && (group_dead || tid != tgid) {
        let why = if place == Place::Untracked { Some(unstreamed::RETIRED_UNTRACKED) } else { None };
        release(tid, why);
        if group_dead && tid != tgid {
            release(tgid, why);
        }
    }
    if !group_dead {
        count(&UNSTREAMED, unstreamed::THREAD_EXITS);
        return Ok(());
    }
    let comm = exit_comm(ctx)?;
    // A runtime's process outside the tracked cgroups: the host's (on v1
    // its cgroup is not known here).
    let flags = match place {
        Place::Tracked(_) => 0,
        Place::Lost => {
            count(&UNSTREAMED, unstreamed::TASK_TABLE_MISSES);
            FLAG_TASK_UNKNOWN
        }
        _ if !is_runtime(comm) => {
            count(&UNSTREAMED, unstreamed::HOST_EXITS);
            return Ok(());
        }
        _ if global_field!(PROBE_CONFIG, unified) != 0 => FLAG_TASK_UNTRACKED,
        _ => FLAG_TASK_UNTRACKED | FLAG_TASK_UNKNOWN,
    };
    let cgroup_id = place.cgroup_id();

    let to = TASK_OFFSETS.load();
    // SAFETY: helper without arguments; the pointer is only probe-read.
    let task = unsafe { bpf_get_current_task() } as *const u8;

    let parent: *const u8 = member(task, to.real_parent).unwrap_or(core::ptr::null());
    let ppid: u32 = member(parent, to.tgid).unwrap_or(0);
    let exit_code: u32 = member(task, to.exit_code)?;
    // The process is named by its leader's start, whichever thread is last.
    let leader: *const u8 = member(task, to.group_leader).unwrap_or(task);
    let start_ns: u64 = member(leader, to.start_boottime)?;
    let pid = exit_pid(ctx)?.unwrap_or(tid);
    let kind = EventKind::Exit as u32;
    let record = core::mem::size_of::<ExitEvent>() as u64 + RING_HEADER;
    let size = u64::from(global_field!(PROBE_CONFIG, exit_ring_bytes));
    let pending = EVENTS.query(BPF_RB_AVAIL_DATA);
    // A busy ring: the container's room in it. A runtime's exit on the
    // host has no owner: it always goes.
    let spell = if busy(size, pending) {
        let shares = match place {
            Place::Tracked(id) => shares_of(id, u32::MAX),
            Place::Lost => shares_of(0, room::SHARE_LOST),
            _ => core::ptr::null_mut(),
        };
        match admit_exit(&EVENTS, size, pending, record, shares, || parent_outside(parent, ppid, cgroup_id)) {
            Ok(spell) => Some(spell),
            Err(reason) => {
                count_lost(kind, reason);
                return Ok(());
            }
        }
    } else {
        None
    };
    let Some(mut entry) = EVENTS.reserve::<ExitEvent>(0) else {
        count_lost(kind, lost::RING_FULL);
        return Ok(());
    };
    if let Some(spell) = spell {
        sent(&EVENTS, spell);
    }
    entry.write(ExitEvent {
        header: header(EventKind::Exit, flags),
        pid,
        tgid,
        ppid,
        exit_code,
        cgroup_id,
        start_ns,
        comm: comm.bytes(),
        group_dead: 1,
        _pad: 0,
    });
    entry.submit(routine_wakeup(pending + record));
    count(&EMITTED, kind);
    Ok(())
}

/// Whether the parent (`parent`, process `ppid`) of an exiting process of
/// tracked cgroup `owner` is outside it: the process is its container's
/// init, or its sandbox (or an orphan its runtime reaps: the reserve
/// takes at most `rooms::FIRST_EXITS` of a container a spell).
#[inline(always)]
fn parent_outside(parent: *const u8, ppid: u32, owner: u64) -> bool {
    if owner == 0 {
        return false;
    }
    if global_field!(PROBE_CONFIG, unified) == 0 {
        // SAFETY: the value is copied out.
        return unsafe { TASKS.get(&ppid) }.is_none_or(|t| t.cgroup_id != owner);
    }
    let css_set: *const u8 = member(parent, global_field!(TASK_OFFSETS, task_cgroups)).unwrap_or(core::ptr::null());
    let cgrp: *const u8 = member(css_set, global_field!(TASK_OFFSETS, css_dfl_cgrp)).unwrap_or(core::ptr::null());
    let kn: *const u8 = member(cgrp, global_field!(TASK_OFFSETS, cgroup_kn)).unwrap_or(core::ptr::null());
    let id: u64 = member(kn, global_field!(TASK_OFFSETS, kn_id)).unwrap_or(0);
    owner_of(cgrp, id).id != owner
}

/// For kernels whose exit tracepoint has no `group_dead`: `do_exit`
/// decrements `signal->live` before the tracepoint, so the last thread sees
/// 0. A process that never had another thread is done then; threads
/// exiting together may all see 0, and the first to claim the process in
/// `ENDED` reports it.
#[inline(always)]
pub(crate) fn last_thread(task: *const u8, to: &TaskOffsets, tgid: u32) -> bool {
    let signal: *const u8 = member(task, to.signal).unwrap_or(core::ptr::null());
    let Ok(live) = member::<i32>(signal, to.signal_live) else {
        return false;
    };
    if live != 0 {
        return false;
    }
    // Reaped threads leave `nr_threads` only later (release_task), adding
    // their run time as they go: one thread and no run time added means
    // this task was the only one. (A leader whose threads have already
    // claimed the end and been released also sees one thread.)
    let alone = member::<i32>(signal, to.signal_nr_threads).is_ok_and(|n| n <= 1)
        && member::<u64>(signal, to.signal_sum_runtime).is_ok_and(|t| t == 0);
    if alone {
        return true;
    }
    let leader: *const u8 = member(task, to.group_leader).unwrap_or(task);
    let start_ns: u64 = member(leader, to.start_boottime).unwrap_or(0);
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

/// A child of a task in a tracked cgroup inherits the cgroup: record it, so
/// that the child's exit or OOM kill is attributed even after it is gone.
/// A host parent's child never inherits an entry: one found under its id
/// is stale and goes. Forks of the host's tasks cost a look at their
/// marks and their child's.
pub(crate) fn try_fork(ctx: &RawTracePointContext) -> ProbeResult {
    let child: *const u8 = ctx.arg(1);
    let cgroup_id = match current_place(bpf_get_current_pid_tgid()) {
        Place::Tracked(id) => id,
        Place::Host(_) | Place::Untracked => {
            let child_tid: u32 = member(child, global_field!(TASK_OFFSETS, pid))?;
            if pod_task_mark(child_tid) != Mark::Clear {
                release(child_tid, Some(unstreamed::RETIRED_AT_FORK));
            }
            return Ok(());
        }
        // A lost task's child is a pod's too: marked, so that its end
        // reads as lost, never as the host's.
        Place::Lost => {
            let child_tid: u32 = member(child, global_field!(TASK_OFFSETS, pid))?;
            release(child_tid, Some(unstreamed::RETIRED_AT_FORK));
            mark_pod_task(child_tid, true);
            return Ok(());
        }
    };
    let to = TASK_OFFSETS.load();
    let child_tid: u32 = member(child, to.pid)?;
    let info =
        TaskInfo { cgroup_id, start_ns: member(child, to.start_boottime)?, tgid: member(child, to.tgid)?, _pad: 0 };
    hold(child_tid, &info);
    Ok(())
}

/// `sched_process_exec` (`pid`, `old_pid`): a thread that was not its
/// process's leader called exec, took the leader's id and retired its own
/// without an exit of its own (Go programs do, from any goroutine). Its
/// entry goes, or moves to the id it has now; before, a later host
/// process given the retired id was looked up as the pod's.
pub(crate) fn try_exec(ctx: &TracePointContext) -> ProbeResult {
    let tp = TP_OFFSETS.load();
    let (Some(pid), Some(old)) = (field::<i32>(ctx, tp.exec_pid)?, field::<i32>(ctx, tp.exec_old_pid)?) else {
        return Ok(());
    };
    let (pid, old) = (pid as u32, old as u32);
    if pid == old || pod_task_mark(old) == Mark::Clear {
        return Ok(());
    }
    // SAFETY: helper without arguments; the pointer is only probe-read.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    // The exec'ing task took its leader's start (de_thread).
    let start_ns: u64 = member(task, global_field!(TASK_OFFSETS, start_boottime)).unwrap_or(0);
    retire_at_exec(old, pid, start_ns);
    Ok(())
}
