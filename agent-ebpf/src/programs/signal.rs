//! Fatal signals: who sent a signal that can end a pod's process, read in
//! the sender's context at `signal:signal_generate`. Only signals that end
//! a process by default go past the first test (SIGCHLD, sent at every
//! exit, stops there), and only to tasks of tracked cgroups; of those,
//! what will end the process (SIGKILL, or a signal the target leaves at
//! its default action and does not block, or another of its threads may
//! take), or what someone outside the
//! target's container sends it (a request to stop, handled or not). A
//! notice the kernel made itself (a POSIX timer's siginfo) is the
//! target's own doing, whichever task ran when it fired.
//! Records go to a ring of their own (`SIGNALS`): an exit storm never
//! costs the sender of a kill. The reader drains it before and after the
//! exits' ring, so a signal is handed on before the exit it caused.

use agent_common::{
    ends_by_default, lost, signal_origin, signal_result, EventKind, SignalEvent, SignalOffsets, ABSENT, COMM_LEN,
    FLAG_SENDER_HOST, FLAG_SENDER_UNKNOWN, FLAG_TASK_UNKNOWN,
};
use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task},
    macros::map,
    maps::RingBuf,
    programs::RawTracePointContext,
    Global,
};

use super::{common::*, entry, oom::memcg_id, rooms::admit_signal, ProbeResult};
use crate::maps::{count, count_lost, global_field, EMITTED, MEMCG_OFFSETS, PROBE_CONFIG, READER, TASK_OFFSETS};

/// Signal records. Sized at load.
#[map]
pub static SIGNALS: RingBuf = RingBuf::with_byte_size(64 * 1024, 0);

#[unsafe(no_mangle)]
pub static SIGNAL_OFFSETS: Global<SignalOffsets> = Global::new(SignalOffsets::UNSET);

entry!(raw_tracepoint, signal_generate, RawTracePointContext, try_signal);

const SIGKILL: u32 = 9;
/// `SEND_SIG_NOINFO` and `SEND_SIG_PRIV`: the kernel's special siginfo
/// pointers.
const SEND_SIG_NOINFO: u64 = 0;
const SEND_SIG_PRIV: u64 = 1;

const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
const BPF_RB_AVAIL_DATA: u64 = 0;

/// `signal_generate(int sig, struct kernel_siginfo *info, struct
/// task_struct *task, int group, int result)`, its prototype checked
/// against the kernel's BTF before the program is attached.
pub(crate) fn try_signal(ctx: &RawTracePointContext) -> ProbeResult {
    let sig = ctx.arg::<u64>(0) as u32;
    if !ends_by_default(sig) {
        return Ok(());
    }
    // Already pending or not queued: the first one is the one that counts.
    // A SIGKILL dropped is one for a process dying already.
    let result = ctx.arg::<u64>(4) as u32;
    let delivered = result == signal_result::DELIVERED || result == signal_result::LOSE_INFO;
    if !delivered && (result != signal_result::IGNORED || sig == SIGKILL) {
        return Ok(());
    }
    let task: *const u8 = ctx.arg(2);
    let tid: u32 = member(task, global_field!(TASK_OFFSETS, pid))?;
    let tgid: u32 = member(task, global_field!(TASK_OFFSETS, tgid))?;
    let target = task_place(task, tid, tgid);
    // A host task's (an untracked cgroup's task is the host's, its entry stale).
    if matches!(target, Place::Host(_) | Place::Untracked) {
        return Ok(());
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let sender = current_place(pid_tgid);
    // SAFETY: helper without arguments; the task is only probe-read.
    let current = unsafe { bpf_get_current_task() } as *const u8;
    let info = ctx.arg::<u64>(1);
    let (origin, code) = match info {
        SEND_SIG_NOINFO => (signal_origin::NOINFO, 0),
        SEND_SIG_PRIV => (signal_origin::PRIV, 0),
        _ => {
            let code = member::<i32>(info as *const u8, global_field!(SIGNAL_OFFSETS, siginfo_code))?;
            // A negative code is user space's, or a notice the kernel made
            // itself (a POSIX timer's); what user space sends, a syscall
            // copied onto the sender's stack first.
            if code < 0 && !on_stack_of(current, info) {
                (signal_origin::KERNEL, code)
            } else {
                (signal_origin::INFO, code)
            }
        }
    };
    // The kernel's own notices are the target's own doing, whoever's task
    // ran when they fired (a timer fires in an interrupt, often on an idle
    // CPU, the host's): a POSIX timer's siginfo, and its private one for
    // anything but a kill (`setitimer`'s SIGALRM, a CPU limit's SIGXCPU,
    // a SIGIO). Its private SIGKILL is the OOM killer's.
    let notice = origin == signal_origin::KERNEL || (origin == signal_origin::PRIV && sig != SIGKILL);
    // What will not end the process is a tenant's own business, unless
    // someone outside its container sent it.
    let group = ctx.arg::<u64>(3) != 0;
    if sig != SIGKILL && !(delivered && ends_now(task, sig, group)) {
        let outside = match (sender, target) {
            _ if notice => false,
            (Place::Tracked(from), Place::Tracked(to)) => from != to,
            (Place::Host(_) | Place::Untracked, _) => true,
            _ => false,
        };
        if !outside {
            return Ok(());
        }
    }
    let mut flags = 0;
    let target_cgroup_id = match target {
        Place::Tracked(id) => id,
        _ => {
            flags |= FLAG_TASK_UNKNOWN;
            0
        }
    };
    let sender_cgroup_id = match sender {
        Place::Tracked(id) => id,
        Place::Host(_) | Place::Untracked => {
            flags |= FLAG_SENDER_HOST;
            let id = sender.cgroup_id();
            if id != 0 {
                id
            } else {
                // v1: the task table holds pod tasks only; a host task's
                // place is its memory cgroup.
                // SAFETY: helper without arguments; the task is only probe-read.
                memcg_id(task_memcg(unsafe { bpf_get_current_task() } as *const u8), &MEMCG_OFFSETS.load())
            }
        }
        Place::Lost => {
            flags |= FLAG_SENDER_UNKNOWN;
            0
        }
    };
    let start_of = |t: *const u8| -> u64 {
        let leader: *const u8 = member(t, global_field!(TASK_OFFSETS, group_leader)).unwrap_or(t);
        member(leader, global_field!(TASK_OFFSETS, start_boottime)).unwrap_or(0)
    };
    let kind = EventKind::Signal as u32;
    // Room in the ring: a pod's own signals to its own container cannot
    // take another's (`rooms::admit_signal`).
    // A notice streams only as it ends a process (one per death): it may
    // go up to the reserve, as another container's signal, wherever it
    // fired; a tenant's own floods stop at half the ring before it.
    let inside = !notice && matches!((sender, target), (Place::Tracked(from), Place::Tracked(to)) if from == to);
    let unowned = !notice && (origin == signal_origin::PRIV || flags & FLAG_SENDER_HOST != 0);
    let size = u64::from(global_field!(PROBE_CONFIG, signal_ring_bytes));
    if let Err(reason) = admit_signal(size, SIGNALS.query(BPF_RB_AVAIL_DATA), inside, unowned) {
        count_lost(kind, reason);
        return Ok(());
    }
    let Some(mut entry) = SIGNALS.reserve::<SignalEvent>(0) else {
        count_lost(kind, lost::RING_FULL);
        return Ok(());
    };
    entry.write(SignalEvent {
        header: header(EventKind::Signal, flags),
        sig,
        code,
        result,
        origin,
        target_pid: tid,
        target_tgid: tgid,
        target_start_ns: start_of(task),
        target_cgroup_id,
        sender_pid: pid_tgid as u32,
        sender_tgid: (pid_tgid >> 32) as u32,
        sender_start_ns: start_of(current),
        sender_cgroup_id,
        sender_comm: bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
    });
    entry.submit(wakeup());
    count(&EMITTED, kind);
    Ok(())
}

/// Whether `task` leaves `sig` at its default action and does not block
/// it: delivered, it ends the process. A task in `sigtimedwait(2)` has
/// what it waits for unblocked in `blocked` and still blocked in
/// `real_blocked`: the wait takes it, and the kernel ends nothing (its
/// `complete_signal` reads `real_blocked` too). A signal to the whole
/// process (`group`) that `task` (its leader, for `kill(2)`) blocks goes
/// to another thread that does not: with more than one thread it may end
/// the process, and counts as if it does.
#[inline(always)]
fn ends_now(task: *const u8, sig: u32, group: bool) -> bool {
    let action = global_field!(SIGNAL_OFFSETS, sighand_action);
    if action == ABSENT {
        return false;
    }
    let bit = sig.wrapping_sub(1) & 63;
    let sighand: *const u8 = member(task, global_field!(SIGNAL_OFFSETS, task_sighand)).unwrap_or(core::ptr::null());
    let at = action
        .wrapping_add(bit.wrapping_mul(global_field!(SIGNAL_OFFSETS, k_sigaction_size)))
        .wrapping_add(global_field!(SIGNAL_OFFSETS, sa_handler));
    // SIG_DFL is 0; SIG_IGN 1, a handler anything else.
    if !matches!(member::<u64>(sighand, at), Ok(0)) {
        return false;
    }
    let blocked: u64 = member(task, global_field!(SIGNAL_OFFSETS, task_blocked)).unwrap_or(u64::MAX);
    let waited: u64 = member(task, global_field!(SIGNAL_OFFSETS, task_real_blocked)).unwrap_or(u64::MAX);
    if ((blocked | waited) >> bit) & 1 == 0 {
        return true;
    }
    let signal: *const u8 = member(task, global_field!(TASK_OFFSETS, signal)).unwrap_or(core::ptr::null());
    group && member::<i32>(signal, global_field!(TASK_OFFSETS, signal_nr_threads)).is_ok_and(|n| n > 1)
}

/// Whether `addr` lies on `task`'s kernel stack (`task_struct.stack`,
/// `thread_size` bytes): a syscall's copy of a siginfo does; one the
/// kernel made for a timer lies in the timer's own memory.
#[inline(always)]
fn on_stack_of(task: *const u8, addr: u64) -> bool {
    let base: u64 = member(task, global_field!(SIGNAL_OFFSETS, task_stack)).unwrap_or(0);
    // Unread, it is on the stack: the sender is named, as user space's.
    base == 0 || addr.wrapping_sub(base) < u64::from(global_field!(SIGNAL_OFFSETS, thread_size))
}

/// Signals wake the reader only when it sleeps or much is pending: the
/// exit a fatal one causes wakes it anyway, and is drained with it.
#[inline(always)]
fn wakeup() -> u64 {
    if READER.get(0).is_some_and(|asleep| *asleep != 0) {
        return BPF_RB_FORCE_WAKEUP;
    }
    if SIGNALS.query(BPF_RB_AVAIL_DATA) >= u64::from(global_field!(SIGNAL_OFFSETS, wakeup_bytes)) {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}
