//! One thin entry per hook; each `try_*` copies fixed-size fields only.

use agent_common::{
    oom_constraint, tracked, unstreamed, CgroupEvent, EventHeader, EventKind, ExitEvent, MemcgLevel, MemcgOffsets,
    OomKillEvent, TaskInfo, TaskOffsets, TrackedCgroup, VictimIdentity, ABSENT, COMM_LEN, FLAG_LEVELS_OF_VICTIM,
    FLAG_NO_RSS, FLAG_TASK_UNKNOWN, FLAG_TASK_UNTRACKED, FLAG_TRUNCATED, MAX_RUNTIME_COMMS, MEMCG_LEVELS, MEMCG_WALK,
};
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task,
        bpf_ktime_get_boot_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes,
    },
    macros::{fentry, raw_tracepoint, tracepoint},
    programs::{FEntryContext, RawTracePointContext, TracePointContext},
    EbpfContext,
};
use aya_log_ebpf::warn;

use crate::maps::{
    cgroup_wakeup, count, global_field, global_ptr, mark_pod_task, pod_task_mark, routine_wakeup, Mark, CGROUP_CHANGES,
    DROPPED, EMITTED, ENDED, EVENTS, IDENTITIES, MEMCG_OFFSETS, NESTING, OOM_CONTROLS, OOM_CONTROL_OFFSETS, OOM_KILLS,
    OOM_SCRATCH, PENDING_OOM, PROBE_CONFIG, RUNTIME_COMMS, TASKS, TASK_OFFSETS, TP_OFFSETS, TRACKED, UNSTREAMED,
    URGENT_WAKEUP,
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

/// Where `mark_victim` passes the victim's task: its identity, read off
/// the task at the kill (no fork program keeps a table for it).
#[raw_tracepoint]
pub fn mark_victim_task(ctx: RawTracePointContext) -> u32 {
    if let Err(e) = try_mark_victim_task(&ctx) {
        warn!(&ctx, "mark_victim_task: error {}", e);
    }
    0
}

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

/// Raw tracepoints on the cgroup events: their `struct cgroup *` says
/// where the cgroup sits (its ancestors), so that one nested below a
/// container's costs no entry and sends no record.
#[raw_tracepoint]
pub fn cgroup_mkdir(ctx: RawTracePointContext) -> u32 {
    if let Err(e) = try_cgroup_mkdir(&ctx) {
        warn!(&ctx, "cgroup_mkdir probe failed: {}", e);
    }
    0
}

#[raw_tracepoint]
pub fn cgroup_rmdir(ctx: RawTracePointContext) -> u32 {
    if let Err(e) = try_cgroup_rmdir(&ctx) {
        warn!(&ctx, "cgroup_rmdir probe failed: {}", e);
    }
    0
}

/// A raw tracepoint: its `struct task_struct *` gives the moved task's own
/// start time and tgid (the task table holds pod tasks only).
#[raw_tracepoint]
pub fn cgroup_attach_task(ctx: RawTracePointContext) -> u32 {
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
    unsafe { ctx.read_at::<T>(offset as usize) }.map(Some).map_err(i64::from)
}

/// The exit record's layout on every kernel tested (5.10 to 7.2):
/// `comm` at 8, `pid` at 24, `group_dead` (where present) at 32. Where this
/// kernel's format file says so, those fields are loaded straight from the
/// record (the offsets in the instructions, as the verifier requires for a
/// tracepoint's context) instead of through `bpf_probe_read`, a helper call
/// each on the hot path; elsewhere the format file's offsets are read.
const EXIT_COMM_AT: u32 = 8;
const EXIT_PID_AT: u32 = 24;
const EXIT_GROUP_DEAD_AT: u32 = 32;

/// `group_dead` of the exit record; `None` when this kernel lacks it.
#[inline(always)]
fn exit_group_dead(ctx: &TracePointContext) -> Result<Option<bool>, i64> {
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
struct Comm {
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
fn exit_comm(ctx: &TracePointContext) -> Result<Comm, i64> {
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
fn exit_pid(ctx: &TracePointContext) -> Result<Option<u32>, i64> {
    let offset = global_field!(TP_OFFSETS, exit_pid);
    if offset == EXIT_PID_AT {
        // SAFETY: an aligned load inside the record, at a constant offset.
        return Ok(Some(unsafe {
            core::ptr::read_volatile((ctx.as_ptr() as *const u8).add(EXIT_PID_AT as usize) as *const i32)
        } as u32));
    }
    Ok(field::<i32>(ctx, offset)?.map(|p| p as u32))
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

/// What the tracked-cgroup map says of cgroup `id`, if it tracks it.
#[inline(always)]
fn tracked_kind(id: u64) -> Option<u32> {
    // SAFETY: the value is copied out immediately.
    unsafe { TRACKED.get(&id) }.map(|t| t.kind)
}

/// Whether events of cgroup `id` are streamed.
#[inline(always)]
fn tracked(id: u64) -> bool {
    tracked_kind(id).is_some()
}

/// Ancestors looked at, at most, for a cgroup nested below a container's
/// (from the lowest level a container is known at: a kubelet's container
/// sits a few levels under it at most).
const NESTING_WALK: u32 = 16;

/// The id of `cgrp`'s ancestor at `level` (`cgroup.ancestors`, or before
/// Linux 6.0 `cgroup.ancestor_ids`); 0 when it cannot be read.
#[inline(always)]
fn ancestor_id(cgrp: *const u8, level: u32) -> u64 {
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
fn lowest_container_level() -> u32 {
    NESTING.get(0).copied().unwrap_or(0)
}

/// A tracked cgroup a task or a cgroup belongs to: its id (0: none; no
/// cgroup has id 0) and its `tracked` kind. Plain integers, not an
/// `Option`: older verifiers (5.10) refuse to read a payload left unset.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Owner {
    id: u64,
    kind: u32,
}

impl Owner {
    const NONE: Owner = Owner { id: 0, kind: tracked::NEW };

    #[inline(always)]
    fn is_container(self) -> bool {
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
fn nested_owner(cgrp: *const u8, level: u32) -> Owner {
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
fn owner_of(cgrp: *const u8, id: u64) -> Owner {
    match tracked_kind(id) {
        Some(kind) => Owner { id, kind },
        None => nested_owner_of(cgrp),
    }
}

/// `nested_owner` of `cgrp` at its own level.
#[inline(always)]
fn nested_owner_of(cgrp: *const u8) -> Owner {
    match member::<i32>(cgrp, global_field!(TASK_OFFSETS, cgroup_level)) {
        Ok(level) => nested_owner(cgrp, level as u32),
        Err(_) => Owner::NONE,
    }
}

/// Where a task's events belong.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A tracked cgroup: a pod's, a container's (also for a task in a
    /// cgroup nested below it), or one not placed yet.
    Tracked(u64),
    /// No tracked cgroup's: the host's (its cgroup on v2; 0 on v1).
    Host(u64),
    /// A pod's task the task table lost (evicted when full, v1): whose it
    /// is cannot be said, but it is no host task.
    Lost,
}

impl Place {
    #[inline(always)]
    fn cgroup_id(self) -> u64 {
        match self {
            Place::Tracked(id) | Place::Host(id) => id,
            Place::Lost => 0,
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
fn current_place(pid_tgid: u64) -> Place {
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
    let (tid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
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
        Some(_) => Place::Host(0),
        None if mark == Mark::Set || leader_mark == Mark::Set => Place::Lost,
        None => Place::Host(0),
    }
}

/// The current task's cgroup on v2 (`task->cgroups->dfl_cgrp`); null
/// when it cannot be read.
#[inline(always)]
fn current_cgroup() -> *const u8 {
    // SAFETY: helper without arguments; the pointer is only probe-read.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let css_set: *const u8 = member(task, global_field!(TASK_OFFSETS, task_cgroups)).unwrap_or(core::ptr::null());
    member(css_set, global_field!(TASK_OFFSETS, css_dfl_cgrp)).unwrap_or(core::ptr::null())
}

/// A container runtime's process, by name: its exit is streamed wherever
/// it runs (crash detection).
#[inline(always)]
fn is_runtime(comm: Comm) -> bool {
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
/// processes of tracked cgroups (pods) and runtimes are streamed.
fn try_exit(ctx: &TracePointContext) -> ProbeResult {
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
    // lost task's marks go too: its pid, reused, is someone else's.
    if !matches!(place, Place::Host(_)) && (group_dead || tid != tgid) {
        let _ = TASKS.remove(&tid);
        mark_pod_task(tid, false);
        if group_dead && tid != tgid {
            let _ = TASKS.remove(&tgid);
            mark_pod_task(tgid, false);
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
        Place::Host(_) if !is_runtime(comm) => {
            count(&UNSTREAMED, unstreamed::HOST_EXITS);
            return Ok(());
        }
        Place::Host(_) if PROBE_CONFIG.load().unified != 0 => FLAG_TASK_UNTRACKED,
        Place::Host(_) => FLAG_TASK_UNTRACKED | FLAG_TASK_UNKNOWN,
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
        comm: comm.bytes(),
        group_dead: 1,
        _pad: 0,
    });
    entry.submit(routine_wakeup());
    count(&EMITTED, kind);
    Ok(())
}

/// For kernels whose exit tracepoint has no `group_dead`: `do_exit`
/// decrements `signal->live` before the tracepoint, so the last thread sees
/// 0. A process that never had another thread is done then; threads
/// exiting together may all see 0, and the first to claim the process in
/// `ENDED` reports it.
#[inline(always)]
fn last_thread(task: *const u8, to: &TaskOffsets, tgid: u32) -> bool {
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
/// Forks of the host's tasks cost a look at their marks.
fn try_fork(ctx: &RawTracePointContext) -> ProbeResult {
    let cgroup_id = match current_place(bpf_get_current_pid_tgid()) {
        Place::Tracked(id) => id,
        Place::Host(_) => return Ok(()),
        // A lost task's child is a pod's too: marked, so that its end
        // reads as lost, never as the host's.
        Place::Lost => {
            let child: *const u8 = ctx.arg(1);
            mark_pod_task(member(child, global_field!(TASK_OFFSETS, pid))?, true);
            return Ok(());
        }
    };
    let to = TASK_OFFSETS.load();
    let child: *const u8 = ctx.arg(1);
    let child_tid: u32 = member(child, to.pid)?;
    let info =
        TaskInfo { cgroup_id, start_ns: member(child, to.start_boottime)?, tgid: member(child, to.tgid)?, _pad: 0 };
    mark_pod_task(child_tid, true);
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
fn unread_levels(ev: &mut OomKillEvent, identity: &VictimIdentity) {
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
fn table_identity(pid: u32, memcg: u64) -> VictimIdentity {
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
struct Decision {
    constraint: u32,
    memcg: *const u8,
}

#[inline(always)]
fn oom_decision(tid: u32) -> Decision {
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
fn current_memcg() -> *const u8 {
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
fn memcg_levels(levels: &mut [MemcgLevel; MEMCG_LEVELS], start: *const u8, decided: bool) -> (u32, bool) {
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
fn record_levels(levels: &mut [MemcgLevel; MEMCG_LEVELS], from: usize, mut memcg: *const u8, mo: &MemcgOffsets) -> u32 {
    let mut n = from;
    for slot in levels.iter_mut().skip(from) {
        if memcg.is_null() {
            break;
        }
        *slot = read_level(memcg, mo);
        n += 1;
        memcg = parent_memcg(memcg, mo);
    }
    n as u32
}

/// A memory cgroup's id and page counters.
#[inline(always)]
fn read_level(memcg: *const u8, mo: &MemcgOffsets) -> MemcgLevel {
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
    }
}

/// The id of a memory cgroup's cgroup.
#[inline(always)]
fn memcg_id(memcg: *const u8, mo: &MemcgOffsets) -> u64 {
    let cgroup: *const u8 = member(memcg, mo.css_cgroup).unwrap_or(core::ptr::null());
    let kn: *const u8 = member(cgroup, global_field!(TASK_OFFSETS, cgroup_kn)).unwrap_or(core::ptr::null());
    member(kn, global_field!(TASK_OFFSETS, kn_id)).unwrap_or(0)
}

/// The memory cgroup above `memcg` (null at the root): its page counter's
/// parent is the parent's counter of the same kind, inside its mem_cgroup.
#[inline(always)]
fn parent_memcg(memcg: *const u8, mo: &MemcgOffsets) -> *const u8 {
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
fn at_limit(l: &MemcgLevel, margin: u64) -> bool {
    l.usage.saturating_add(margin) > l.max || (l.memsw_max > 0 && l.memsw_usage.saturating_add(margin) > l.memsw_max)
}

/// The victim's identity into its record, which goes out.
#[inline(always)]
fn submit_oom(ev: &mut OomKillEvent, identity: &VictimIdentity) -> ProbeResult {
    if identity.flags == 0 {
        ev.victim_tgid = identity.tgid;
        ev.victim_cgroup_id = identity.cgroup_id;
        ev.victim_start_ns = identity.start_ns;
    }
    ev.header.flags |= identity.flags;
    let kind = EventKind::OomKill as u32;
    let Some(mut entry) = OOM_KILLS.reserve::<OomKillEvent>(0) else {
        count(&DROPPED, kind);
        return Ok(());
    };
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
fn try_mark_victim_task(ctx: &RawTracePointContext) -> ProbeResult {
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

/// A task's memory cgroup (`task->cgroups->subsys[memory]`); null when it
/// cannot be read.
#[inline(always)]
fn task_memcg(task: *const u8) -> *const u8 {
    let at = global_field!(MEMCG_OFFSETS, css_set_memory);
    if at == ABSENT {
        return core::ptr::null();
    }
    let css_set: *const u8 = member(task, global_field!(TASK_OFFSETS, task_cgroups)).unwrap_or(core::ptr::null());
    member(css_set, at).unwrap_or(core::ptr::null())
}

/// A task's cgroup on v2 (`task->cgroups->dfl_cgrp->kn->id`, or the
/// container's it is nested below), process and the start of its leader
/// (which names the process in exit records).
#[inline(always)]
fn victim_identity(task: *const u8, to: &TaskOffsets, memcg: u64) -> Result<VictimIdentity, i64> {
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

/// Where a cgroup is: its hierarchy, level and id.
#[derive(Clone, Copy)]
struct CgroupPlace {
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
fn cgroup_place(cgrp: *const u8, to: &TaskOffsets) -> Result<CgroupPlace, i64> {
    let root: *const u8 = member(cgrp, to.cgroup_root)?;
    let hierarchy = member::<i32>(root, to.root_hierarchy_id)? as u32;
    let level = member::<i32>(cgrp, to.cgroup_level).unwrap_or(0) as u32;
    let kn: *const u8 = member(cgrp, to.cgroup_kn)?;
    Ok(CgroupPlace { hierarchy, level, id: member(kn, to.kn_id)? })
}

/// Whether `cgrp` at `level` is nested below a container's cgroup.
#[inline(always)]
fn nested_in_container(cgrp: *const u8, level: u32) -> bool {
    nested_owner(cgrp, level).is_container()
}

/// `TP_PROTO(struct cgroup *cgrp, const char *path)`. A new cgroup is
/// tracked from its first moment (until the agent finds it is no pod's):
/// a container whose init dies as it starts is seen. One nested below a
/// container's is that container's: no entry, no record.
fn try_cgroup_mkdir(ctx: &RawTracePointContext) -> ProbeResult {
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
    if TRACKED.insert(&id, &TrackedCgroup { kind: tracked::NEW, attaches: 0 }, 0).is_err() {
        count(&UNSTREAMED, unstreamed::TRACKING_REFUSED);
    }
    emit_cgroup(EventKind::CgroupMkdir, hierarchy, level, id, ctx.arg(1), 0, 0, [0; COMM_LEN])
}

/// `TP_PROTO(struct cgroup *cgrp, const char *path)`: the cgroup leaves
/// the map; one nested below a container's sends no record.
fn try_cgroup_rmdir(ctx: &RawTracePointContext) -> ProbeResult {
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
fn try_cgroup_attach(ctx: &RawTracePointContext) -> ProbeResult {
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
        let _ = TASKS.remove(&pid);
        mark_pod_task(pid, false);
        return Ok(());
    }
    let leader: *const u8 = member(task, to.group_leader).unwrap_or(task);
    let info = TaskInfo {
        cgroup_id: owner,
        start_ns: member(leader, to.start_boottime).unwrap_or(0),
        tgid: member(task, to.tgid).unwrap_or(0),
        _pad: 0,
    };
    mark_pod_task(pid, true);
    let _ = TASKS.insert(&pid, &info, 0);

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
fn emit_cgroup(
    kind: EventKind,
    hierarchy_id: u32,
    level: u32,
    cgroup_id: u64,
    path: *const u8,
    pid: u32,
    start_ns: u64,
    comm: [u8; COMM_LEN],
) -> ProbeResult {
    let Some(mut entry) = CGROUP_CHANGES.reserve::<CgroupEvent>(0) else {
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
    entry.submit(cgroup_wakeup());
    count(&EMITTED, kind as u32);
    Ok(())
}
