//! One thin entry per hook; each `try_*` copies fixed-size fields only.

use agent_common::{
    unstreamed, CgroupEvent, CgroupOffsets, EventHeader, EventKind, ExitEvent, MemcgLevel, MemcgOffsets, OomKillEvent,
    TaskInfo, TaskOffsets, VictimIdentity, ABSENT, COMM_LEN, FLAG_NO_RSS, FLAG_TASK_UNKNOWN, FLAG_TASK_UNTRACKED,
    FLAG_TRUNCATED, MAX_RUNTIME_COMMS, MEMCG_LEVELS,
};
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task,
        bpf_ktime_get_boot_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes,
    },
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
    EbpfContext,
};
use aya_log_ebpf::warn;

use crate::maps::{
    count, global_field, global_ptr, mark_pod_task, maybe_pod_task, priority_wakeup, routine_wakeup, DROPPED, EMITTED,
    ENDED, EVENTS, IDENTITIES, MEMCG_OFFSETS, OOM_SCRATCH, PENDING_OOM, PRIORITY, PROBE_CONFIG, RUNTIME_COMMS, TASKS,
    TASK_OFFSETS, TP_OFFSETS, TRACKED, UNSTREAMED, URGENT_WAKEUP,
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

/// Whether events of cgroup `id` are streamed.
#[inline(always)]
fn tracked(id: u64) -> bool {
    // SAFETY: only presence is read.
    unsafe { TRACKED.get(&id) }.is_some()
}

/// The current task's cgroup in the tracked hierarchy, and whether it is
/// tracked. On v2 the task says; on v1 the task table does, which holds
/// the tasks of tracked cgroups only (a miss: not tracked). A thread moved
/// with its process is there by its leader only (the attach tracepoint
/// fires once per process), whose entry stays until the process ends.
#[inline(always)]
fn current_place(pid_tgid: u64) -> (u64, bool) {
    if PROBE_CONFIG.load().unified != 0 {
        // SAFETY: helper without arguments.
        let id = unsafe { bpf_get_current_cgroup_id() };
        return (id, tracked(id));
    }
    let (tid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
    // Most tasks are the host's: their marks say so without a lookup.
    if !maybe_pod_task(tid) && (tid == tgid || !maybe_pod_task(tgid)) {
        return (0, false);
    }
    // SAFETY: values copied out immediately.
    let entry = match unsafe { TASKS.get(&tid) } {
        Some(t) => Some(*t),
        None if tid != tgid => unsafe { TASKS.get(&tgid) }.copied(),
        None => None,
    };
    match entry {
        Some(t) => (t.cgroup_id, tracked(t.cgroup_id)),
        None => (0, false),
    }
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

    let (cgroup_id, in_pod) = current_place(pid_tgid);
    let group_dead = match exit_group_dead(ctx)? {
        Some(v) => v,
        // SAFETY: helper without arguments; the pointer is only probe-read.
        None => last_thread(unsafe { bpf_get_current_task() } as *const u8, &TASK_OFFSETS.load(), tgid),
    };
    // A leader that goes before its threads keeps its entry for them.
    if in_pod && (group_dead || tid != tgid) {
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
    if !in_pod && !is_runtime(comm) {
        count(&UNSTREAMED, unstreamed::HOST_EXITS);
        return Ok(());
    }

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

    // A runtime's process outside the tracked cgroups: the host's (on v1
    // its cgroup is not known here).
    let flags = match (in_pod, PROBE_CONFIG.load().unified != 0) {
        (true, _) => 0,
        (false, true) => FLAG_TASK_UNTRACKED,
        (false, false) => FLAG_TASK_UNTRACKED | FLAG_TASK_UNKNOWN,
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
/// Forks elsewhere cost one lookup.
fn try_fork(ctx: &RawTracePointContext) -> ProbeResult {
    let (cgroup_id, in_pod) = current_place(bpf_get_current_pid_tgid());
    if !in_pod {
        return Ok(());
    }
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
        Some(match unsafe { TASKS.get(&victim_pid) }.copied() {
            Some(t) => VictimIdentity { cgroup_id: t.cgroup_id, start_ns: t.start_ns, tgid: t.tgid, flags: 0 },
            None => VictimIdentity { cgroup_id: 0, start_ns: 0, tgid: 0, flags: FLAG_TASK_UNTRACKED },
        })
    };
    let trigger_cgroup_id = current_place(pid_tgid).0;
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
    ev.level_count = memcg_levels(&mut ev.levels);
    match victim {
        Some(identity) => submit_oom(ev, &identity),
        None => PENDING_OOM.insert(&victim_pid, ev, 0).map_err(i64::from),
    }
}

/// The page counters of the current task's memory cgroup and of each one
/// above it, as they stand: this runs inside the OOM killer, after the
/// charge that failed, before the victim frees anything. Returns how many
/// levels were read.
#[inline(always)]
fn memcg_levels(levels: &mut [MemcgLevel; MEMCG_LEVELS]) -> u32 {
    let mo: MemcgOffsets = MEMCG_OFFSETS.load();
    if mo.memory == ABSENT {
        return 0;
    }
    let (task_cgroups, cgroup_kn, kn_id) = (
        global_field!(TASK_OFFSETS, task_cgroups),
        global_field!(TASK_OFFSETS, cgroup_kn),
        global_field!(TASK_OFFSETS, kn_id),
    );
    // SAFETY: the current task, only ever probe-read.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let Ok(css_set) = member::<*const u8>(task, task_cgroups) else { return 0 };
    let Ok(mut memcg) = member::<*const u8>(css_set, mo.css_set_memory) else { return 0 };
    let mut n = 0;
    for level in levels.iter_mut() {
        if memcg.is_null() {
            break;
        }
        let cgroup: *const u8 = member(memcg, mo.css_cgroup).unwrap_or(core::ptr::null());
        let kn: *const u8 = member(cgroup, cgroup_kn).unwrap_or(core::ptr::null());
        // SAFETY: only an address is computed here; every read is a probe read.
        let memory = unsafe { memcg.add(mo.memory as usize) };
        level.cgroup_id = member(kn, kn_id).unwrap_or(0);
        level.usage = member(memory, mo.counter_usage).unwrap_or(0);
        level.max = member(memory, mo.counter_max).unwrap_or(0);
        (level.memsw_usage, level.memsw_max) = if mo.memsw == ABSENT {
            (0, 0)
        } else {
            // SAFETY: as above.
            let memsw = unsafe { memcg.add(mo.memsw as usize) };
            (member(memsw, mo.counter_usage).unwrap_or(0), member(memsw, mo.counter_max).unwrap_or(0))
        };
        n += 1;
        let parent: *const u8 = member(memory, mo.counter_parent).unwrap_or(core::ptr::null());
        // The parent's counter of the same kind, inside its mem_cgroup.
        memcg = if parent.is_null() { parent } else { parent.wrapping_sub(mo.memory as usize) };
    }
    n
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
    let Some(mut entry) = PRIORITY.reserve::<OomKillEvent>(0) else {
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
/// is — its cgroup on v2, its process and start — read off the task at the
/// kill, into the record the tracepoint's program left, or left for it.
/// An identity that cannot be read still lets the record go out, with its
/// victim unknown.
fn try_mark_victim_task(ctx: &RawTracePointContext) -> ProbeResult {
    let to = TASK_OFFSETS.load();
    let task: *const u8 = ctx.arg(0);
    let pid: u32 = member(task, to.pid)?;
    let identity = victim_identity(task, &to).unwrap_or(VictimIdentity {
        cgroup_id: 0,
        start_ns: 0,
        tgid: 0,
        flags: FLAG_TASK_UNKNOWN,
    });
    if let Some(pending) = PENDING_OOM.get_ptr_mut(&pid) {
        // SAFETY: the map's value, completed and copied into the ring
        // before it is removed.
        let result = submit_oom(unsafe { &mut *pending }, &identity);
        let _ = PENDING_OOM.remove(&pid);
        return result;
    }
    IDENTITIES.insert(&pid, &identity, 0).map_err(i64::from)
}

/// A task's cgroup on v2 (`task->cgroups->dfl_cgrp->kn->id`), process and
/// the start of its leader (which names the process in exit records).
#[inline(always)]
fn victim_identity(task: *const u8, to: &TaskOffsets) -> Result<VictimIdentity, i64> {
    let css_set: *const u8 = member(task, to.task_cgroups)?;
    let cgrp: *const u8 = member(css_set, to.css_dfl_cgrp)?;
    let kn: *const u8 = member(cgrp, to.cgroup_kn)?;
    let cgroup_id: u64 = member(kn, to.kn_id)?;
    let leader: *const u8 = member(task, to.group_leader).unwrap_or(task);
    Ok(VictimIdentity {
        cgroup_id,
        start_ns: member(leader, to.start_boottime)?,
        tgid: member(task, to.tgid)?,
        flags: if tracked(cgroup_id) { 0 } else { FLAG_TASK_UNTRACKED },
    })
}

fn try_cgroup_dir(ctx: &TracePointContext, kind: EventKind, off: &CgroupOffsets) -> ProbeResult {
    let root = field::<i32>(ctx, off.root)?.unwrap_or(-1);
    if root as u32 != PROBE_CONFIG.load().tracked_hierarchy {
        return Ok(());
    }
    let level = field::<i32>(ctx, off.level)?.unwrap_or(0) as u32;
    let id = field::<u64>(ctx, off.id)?.unwrap_or(0);
    // A new cgroup is tracked from its first moment (until the agent finds
    // it is no pod's): a container whose init dies as it starts is seen.
    if kind == EventKind::CgroupMkdir {
        if TRACKED.insert(&id, &0, 0).is_err() {
            count(&UNSTREAMED, unstreamed::TRACKING_REFUSED);
        }
    } else {
        let _ = TRACKED.remove(&id);
    }
    emit_cgroup(ctx, kind, root as u32, level, id, off.path)
}

/// `TP_PROTO(struct cgroup *dst_cgrp, const char *path, struct
/// task_struct *task, bool threadgroup)`.
fn try_cgroup_attach(ctx: &RawTracePointContext) -> ProbeResult {
    let to = TASK_OFFSETS.load();
    let cgrp: *const u8 = ctx.arg(0);
    let root: *const u8 = member(cgrp, to.cgroup_root)?;
    let hierarchy: i32 = member(root, to.root_hierarchy_id)?;
    if hierarchy as u32 != PROBE_CONFIG.load().tracked_hierarchy {
        return Ok(());
    }
    let kn: *const u8 = member(cgrp, to.cgroup_kn)?;
    let id: u64 = member(kn, to.kn_id)?;
    let task: *const u8 = ctx.arg(2);
    let pid: u32 = member(task, to.pid)?;

    // Keep the per-task table true: a task moved out of tracked cgroups
    // leaves it; one moved in is recorded with its own start and tgid.
    if !tracked(id) {
        let _ = TASKS.remove(&pid);
        mark_pod_task(pid, false);
        return Ok(());
    }
    let leader: *const u8 = member(task, to.group_leader).unwrap_or(task);
    let info = TaskInfo {
        cgroup_id: id,
        start_ns: member(leader, to.start_boottime).unwrap_or(0),
        tgid: member(task, to.tgid).unwrap_or(0),
        _pad: 0,
    };
    mark_pod_task(pid, true);
    let _ = TASKS.insert(&pid, &info, 0);

    let Some(mut entry) = PRIORITY.reserve::<CgroupEvent>(0) else {
        count(&DROPPED, EventKind::CgroupAttach as u32);
        return Ok(());
    };
    let ev = entry.as_mut_ptr();
    let path: *const u8 = ctx.arg(1);
    let mut flags = 0;
    // SAFETY: `ev` points at a reserved record of the right size; every field
    // the decoder reads is written before submit (path beyond path_len is not).
    unsafe {
        (*ev).hierarchy_id = hierarchy as u32;
        (*ev).level = member::<i32>(cgrp, to.cgroup_level).unwrap_or(0) as u32;
        (*ev).cgroup_id = id;
        (*ev).pid = pid;
        (*ev).start_ns = info.start_ns;
        (*ev).comm = member::<[u8; COMM_LEN]>(task, to.comm).unwrap_or([0; COMM_LEN]);
        let (len, cut) = match bpf_probe_read_kernel_str_bytes(path, &mut (*ev).path) {
            Ok(s) => (s.len(), s.len() + 1 >= (*ev).path.len()),
            Err(_) => (0, false),
        };
        (*ev).path_len = len as u32;
        if cut {
            flags |= FLAG_TRUNCATED;
        }
        (*ev).header = header(EventKind::CgroupAttach, flags);
    }
    entry.submit(priority_wakeup());
    count(&EMITTED, EventKind::CgroupAttach as u32);
    Ok(())
}

/// A mkdir or rmdir record: the cgroup and its path.
#[inline(always)]
fn emit_cgroup(
    ctx: &TracePointContext,
    kind: EventKind,
    hierarchy_id: u32,
    level: u32,
    cgroup_id: u64,
    path_offset: u32,
) -> ProbeResult {
    let Some(mut entry) = PRIORITY.reserve::<CgroupEvent>(0) else {
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
        (*ev).pid = 0;
        (*ev).start_ns = 0;
        (*ev).comm = [0; COMM_LEN];
        let (path_len, path_cut) = data_loc_str(ctx, path_offset, &mut (*ev).path);
        (*ev).path_len = path_len;
        if path_cut {
            flags |= FLAG_TRUNCATED;
        }
        (*ev).header = header(kind, flags);
    }
    entry.submit(priority_wakeup());
    count(&EMITTED, kind as u32);
    Ok(())
}
