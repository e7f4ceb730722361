//! Types that cross the kernel/user boundary: event records written by the
//! eBPF programs into the ring buffer, the load-time globals the agent hands
//! to the programs, and the names of maps, globals and programs.
//!
//! Every record is `#[repr(C)]`, `Copy`, and laid out without implicit
//! padding (sizes are asserted below), so the agent can decode it from bytes
//! on any kernel. The `user` feature adds `aya::Pod` for the agent.
#![no_std]

/// Kind of a record in the ring buffer; the first field of every record.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(strum::IntoStaticStr, strum::EnumIter, strum::FromRepr))]
#[cfg_attr(feature = "user", strum(serialize_all = "snake_case"))]
pub enum EventKind {
    Exit = 1,
    OomKill = 2,
    CgroupMkdir = 3,
    CgroupRmdir = 4,
    CgroupAttach = 5,
    Signal = 6,
}

/// Number of slots in the per-kind counter arrays (index = kind as u32).
pub const KIND_SLOTS: u32 = 8;

/// Thread ids per slot of the `POD_PIDS` marks: one byte each, so that
/// the programs and user space set and clear marks without touching their
/// neighbours'.
pub const PIDS_PER_SLOT: u32 = 64;

/// Header flag: the task was not in the per-task table, so the cgroup id,
/// start time and tgid it would have supplied are unknown (zero).
pub const FLAG_TASK_UNKNOWN: u32 = 1 << 0;
/// Header flag: a string field was cut to fit its buffer.
pub const FLAG_TRUNCATED: u32 = 1 << 1;
/// Header flag: the kernel's tracepoint lacks the rss/uid fields (before 6.8).
pub const FLAG_NO_RSS: u32 = 1 << 2;
/// Header flag (OOM kills): the levels are the victim's memory cgroups,
/// not the allocating task's (the OOM killer's decision was not seen).
pub const FLAG_LEVELS_OF_VICTIM: u32 = 1 << 4;
/// Header flag: the task is in no tracked cgroup — every task of a
/// tracked cgroup is in the task table, or its cgroup was read off it — so
/// it is a host task. (A pod's task the table lost is `FLAG_TASK_UNKNOWN`.)
pub const FLAG_TASK_UNTRACKED: u32 = 1 << 3;
/// Header flag (signals): the sender is in no tracked cgroup (a host
/// process: its cgroup is `sender_cgroup_id`, 0 where it was not read).
pub const FLAG_SENDER_HOST: u32 = 1 << 5;
/// Header flag (signals): the sender is a pod's task the task table lost
/// (v1): whose it is cannot be said.
pub const FLAG_SENDER_UNKNOWN: u32 = 1 << 6;

/// What the tracked-cgroup map says of a cgroup: its value's `kind`.
/// Tracking is by what the kubelet made — pods and containers — never by
/// what a tenant makes below its container: a cgroup nested below a
/// container's is that container's, costs no entry, and its changes are
/// no records.
pub mod tracked {
    /// Created while the agent runs, not placed by it yet (a pod or a
    /// container starting, or a host cgroup about to be untracked).
    pub const NEW: u32 = 0;
    /// A pod's cgroup.
    pub const POD: u32 = 1;
    /// A container's cgroup: every cgroup below it is the container's.
    pub const CONTAINER: u32 = 2;
    /// Attach records one tracked cgroup sends at most: its first
    /// processes (the runtime's bootstrap, the init, a first exec) say
    /// all the pod model reads from attaches; a process moved in and out
    /// in a loop must not fill the cgroup ring.
    pub const ATTACH_RECORDS: u32 = 4;
}

/// Value of the tracked-cgroup map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackedCgroup {
    /// `tracked::NEW`, `POD` or `CONTAINER`.
    pub kind: u32,
    /// Attach records sent for this cgroup so far (up to
    /// `tracked::ATTACH_RECORDS`).
    pub attaches: u32,
    /// Task-table entries this cgroup's tasks hold (`rooms::TASK_QUOTA`):
    /// kept by the programs with atomic adds, so it may read below zero
    /// for a moment, never drift.
    pub tasks: i64,
    /// Its records in the rings while they are busy (`rooms`).
    pub shares: RingShares,
}

impl TrackedCgroup {
    /// A cgroup of `kind` with nothing counted yet.
    pub const fn of(kind: u32) -> Self {
        Self { kind, attaches: 0, tasks: 0, shares: RingShares::NONE }
    }
}

/// What one owner (a tracked cgroup; or all the pod tasks the task table
/// lost; or the host) has put into the exit and OOM rings since the reader
/// last caught up with it (`rooms`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingShares {
    /// Exit records counted in this busy spell (the ring a quarter full).
    pub exit_records: u32,
    /// Of them, sent into the room only the first exits may take
    /// (a process whose parent is outside its container: an init, a
    /// sandbox).
    pub exit_first: u32,
    /// The exit ring's producer position after its last one: once the
    /// reader is past it, the spell is over.
    pub exit_until: u64,
    pub oom_records: u32,
    pub _pad: u32,
    pub oom_until: u64,
}

impl RingShares {
    pub const NONE: Self =
        Self { exit_records: 0, exit_first: 0, exit_until: 0, oom_records: 0, _pad: 0, oom_until: 0 };
}

/// Room per container in the kernel: the rules by which one container
/// cannot take another's room in the task table or in the rings. Each
/// ring's records are admitted freely while it is less than a quarter
/// full; from then on each owner's records are counted until the reader
/// is past its last one (a busy spell). From half full, an owner that has
/// sent an eighth of the ring's records in its spell is refused
/// (`lost::CONTAINER_SHARE`); the last eighth of the ring is kept for the
/// records that must not be lost (`lost::RESERVE` for the others): exits
/// of processes whose parent is outside their container (inits and
/// sandboxes; at most `FIRST_EXITS` of a container a spell), a
/// container's first `FIRST_OOM_KILLS` OOM kills of a spell, cgroup
/// mkdirs and rmdirs (not attaches).
pub mod rooms {
    /// Owner slots of `SHARES` for what has no tracked cgroup: pod tasks
    /// the task table lost (unknown), and host tasks (OOM victims).
    pub const SHARE_LOST: u32 = 0;
    pub const SHARE_HOST: u32 = 1;
    pub const SHARE_SLOTS: u32 = 2;
    /// Exits a container may send into the reserve in one spell.
    pub const FIRST_EXITS: u32 = 16;
    /// OOM kills of a container in one spell that may use the reserve.
    pub const FIRST_OOM_KILLS: u32 = 4;
    /// A ring this full starts counting owners' records (fractions of
    /// its size, as divisors).
    pub const BUSY_DIVISOR: u64 = 4;
    /// From this full, an owner past its share is refused.
    pub const CROWDED_DIVISOR: u64 = 2;
    /// An owner's share in a spell, and the reserve: an eighth.
    pub const SHARE_DIVISOR: u64 = 8;
    /// A cgroup holding fewer task-table entries than this may take
    /// them from the table's last room, which no larger one may use.
    pub const TASK_FLOOR: i64 = 16;
}

/// Why the kernel lost a record: the slot of `DROPPED` is
/// `reason * KIND_SLOTS + kind`.
pub mod lost {
    /// The ring had no room left.
    pub const RING_FULL: u32 = 0;
    /// Its container had sent its share of a busy ring (`rooms`).
    pub const CONTAINER_SHARE: u32 = 1;
    /// Only the reserve was left, and the record is not one it is for.
    pub const RESERVE: u32 = 2;
    pub const REASONS: u32 = 3;
}

/// Slots of the per-CPU `UNSTREAMED` counters: what the kernel counted
/// instead of streaming it.
pub mod unstreamed {
    /// Exits of threads that were not the last of their process (the agent
    /// handles whole processes only).
    pub const THREAD_EXITS: u32 = 0;
    /// Process exits in no tracked cgroup (not pods, not a runtime): the
    /// `host` outcome.
    pub const HOST_EXITS: u32 = 1;
    /// New cgroups the tracked-cgroup map had no room for.
    pub const TRACKING_REFUSED: u32 = 2;
    /// mkdirs and rmdirs of cgroups nested below a container's: the
    /// container's own business, never a record.
    pub const NESTED_CGROUP_CHANGES: u32 = 3;
    /// Attaches that sent no record: into a cgroup nested below a
    /// container's, or beyond a cgroup's `tracked::ATTACH_RECORDS`.
    pub const ATTACHES_UNSTREAMED: u32 = 4;
    /// A pod's task the task table does not hold (its container had its
    /// quota, or the table was full): its exit or OOM kill goes out with
    /// its cgroup unknown.
    pub const TASK_TABLE_MISSES: u32 = 5;
    /// Tasks the table refused an entry: their cgroup held its quota…
    pub const TASKS_OVER_QUOTA: u32 = 6;
    /// …or the table was full (or only its last room was left, which is
    /// for cgroups holding fewer than `rooms::TASK_FLOOR`).
    pub const TASK_TABLE_FULL: u32 = 7;
    /// Entries retired: of the thread id an exec retires (a thread that
    /// is not its process's leader calls exec and takes the leader's id)…
    pub const RETIRED_AT_EXEC: u32 = 8;
    /// …found under a host parent's new child (stale: its id reused)…
    pub const RETIRED_AT_FORK: u32 = 9;
    /// …or of a task whose cgroup is tracked no more, at its exit.
    pub const RETIRED_UNTRACKED: u32 = 10;
    pub const SLOTS: u32 = 16;
}

/// Most container-runtime process names (comm) whose exits are streamed
/// although they run outside any tracked cgroup.
pub const MAX_RUNTIME_COMMS: usize = 4;

pub const COMM_LEN: usize = 16;

/// `name` as the kernel keeps it in comm: at most `COMM_LEN - 1` bytes, so
/// a longer name is compared by that prefix.
pub fn as_comm(name: &str) -> &[u8] {
    &name.as_bytes()[..name.len().min(COMM_LEN - 1)]
}

/// Longest cgroup path carried by an event. Kubelet paths with a systemd
/// driver and a nested prefix stay well below this.
pub const CGROUP_PATH_LEN: usize = 384;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventHeader {
    pub kind: u32,
    pub flags: u32,
    /// `bpf_ktime_get_boot_ns()` when the probe ran (CLOCK_BOOTTIME).
    pub ts_ns: u64,
}

/// A task ended (`sched:sched_process_exit`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitEvent {
    pub header: EventHeader,
    /// Thread id of the exiting task.
    pub pid: u32,
    pub tgid: u32,
    /// tgid of the parent (`real_parent`).
    pub ppid: u32,
    /// `task->exit_code`: a wait(2) status (code << 8, or the signal number
    /// with 0x80 when a core was dumped).
    pub exit_code: u32,
    /// Memory cgroup (v1) or unified cgroup (v2) id of the task: of the
    /// container's where the task is in a cgroup nested below it.
    pub cgroup_id: u64,
    /// `start_boottime` of the thread group leader in ns: with `tgid` it
    /// names one process.
    pub start_ns: u64,
    pub comm: [u8; COMM_LEN],
    /// 1 when this was the last thread of its group (the process is gone).
    pub group_dead: u32,
    pub _pad: u32,
}

/// The OOM killer chose a victim (`oom:mark_victim`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OomKillEvent {
    pub header: EventHeader,
    pub victim_pid: u32,
    /// From the per-task table; 0 when the task was unknown.
    pub victim_tgid: u32,
    pub victim_cgroup_id: u64,
    pub victim_start_ns: u64,
    /// Figures from the tracepoint, in kB (0 with FLAG_NO_RSS).
    pub total_vm_kb: u64,
    pub anon_rss_kb: u64,
    pub file_rss_kb: u64,
    pub shmem_rss_kb: u64,
    pub pgtables_kb: u64,
    pub uid: u32,
    pub oom_score_adj: i32,
    /// The task that ran out of memory (the current task of the tracepoint).
    pub trigger_pid: u32,
    pub trigger_tgid: u32,
    pub trigger_cgroup_id: u64,
    pub victim_comm: [u8; COMM_LEN],
    pub trigger_comm: [u8; COMM_LEN],
    /// The memory cgroups of the task that ran out of memory, its own
    /// first, then each parent up to the root or `MEMCG_LEVELS`: their
    /// usage and limit as the kernel counted them at the kill (the OOM
    /// killer acts on the innermost whose charge failed: which limit fired).
    pub levels: [MemcgLevel; MEMCG_LEVELS],
    /// How many of `levels` were read (0: not on this kernel, or unreadable).
    pub level_count: u32,
    /// 1 when the task's memory cgroup was nested so deep below its
    /// container's that the walk up gave out before reaching it: no level
    /// read is the container's, and none at its limit says "global".
    pub levels_cut: u32,
    /// The OOM killer's own decision, read off its `struct oom_control` on
    /// the kill path (`oom_constraint::*`; `UNREAD` where this kernel let
    /// no program see it). Where it was read, `levels` start at the memory
    /// cgroup the killer ran for (`oom_memcg_id`; 0: none, the machine's
    /// memory), not at the task that happened to run it.
    pub constraint: u32,
    pub _pad: u32,
    pub oom_memcg_id: u64,
}

/// The OOM killer's constraint as an OOM record carries it (the kernel's
/// `enum oom_constraint`, whose values the loader reads from BTF, mapped
/// onto these).
pub mod oom_constraint {
    /// The kernel's decision was not read: the levels are the allocating
    /// task's, and which limit fired is judged from their page counters.
    pub const UNREAD: u32 = 0;
    /// `CONSTRAINT_NONE`: the machine's memory (a global OOM).
    pub const NONE: u32 = 1;
    /// `CONSTRAINT_CPUSET`: the memory nodes of the allocating task's cpuset.
    pub const CPUSET: u32 = 2;
    /// `CONSTRAINT_MEMORY_POLICY`: the nodes of a memory policy (mbind).
    pub const MEMORY_POLICY: u32 = 3;
    /// `CONSTRAINT_MEMCG`: a memory cgroup's limit.
    pub const MEMCG: u32 = 4;
}

/// Where the OOM record reads the killer's decision: `struct oom_control`'s
/// `memcg` and `constraint`, and the values of `enum oom_constraint`'s
/// `CONSTRAINT_NONE`, `_CPUSET`, `_MEMORY_POLICY` and `_MEMCG`, from the
/// kernel's BTF. `memcg` is `ABSENT` where any is missing: the decision is
/// not read.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OomControlOffsets {
    pub memcg: u32,
    pub constraint: u32,
    pub none: u32,
    pub cpuset: u32,
    pub memory_policy: u32,
    pub memcg_value: u32,
}

impl OomControlOffsets {
    pub const UNSET: Self = Self {
        memcg: ABSENT,
        constraint: ABSENT,
        none: ABSENT,
        cpuset: ABSENT,
        memory_policy: ABSENT,
        memcg_value: ABSENT,
    };
}

/// Levels of memory cgroups an OOM record carries: a container, a
/// sub-cgroup of its own, its pod, the QoS class, the kubelet's root and one
/// more (systemd's slices nest no deeper). Of the cgroups a container nests
/// below its own, the innermost is carried, and one at its limit.
pub const MEMCG_LEVELS: usize = 6;

/// How many pages under its limit a memory cgroup whose limit fired can
/// read when the OOM killer marks its victim, with `cpus` CPUs: the
/// largest charge that calls the OOM killer (8 pages), plus what the other
/// CPUs' charge caches held (up to 64 pages each: the kernel drains them,
/// asynchronously, before it gives up, so they may be handed back after
/// its last look and before the program's).
pub const fn oom_margin_pages(cpus: u32) -> u32 {
    64u32.saturating_mul(cpus.saturating_sub(1)).saturating_add(8)
}

/// Memory cgroups whose charges each CPU caches at most (`NR_MEMCG_STOCK`,
/// Linux 6.16 and later; one before).
pub const MEMCG_STOCK_SLOTS: u32 = 7;

/// How many pages under its limit a memory cgroup whose limit fired can
/// read at the kill at most, with `cpus` CPUs, when each CPU caches the
/// charges of up to `MEMCG_STOCK_SLOTS` of the cgroups below it: the width
/// within which a cgroup the kernel says ran the OOM killer is taken to
/// have been at its limit.
pub const fn oom_drained_margin_pages(cpus: u32) -> u32 {
    (64 * MEMCG_STOCK_SLOTS).saturating_mul(cpus.saturating_sub(1)).saturating_add(8)
}

/// Memory cgroups the OOM program walks up at most, looking for the
/// container's above the cgroups it nests.
pub const MEMCG_WALK: u32 = 64;

/// One memory cgroup's page counters at an OOM kill, in pages.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemcgLevel {
    pub cgroup_id: u64,
    pub usage: u64,
    pub max: u64,
    /// Memory + swap (cgroup v1 only; 0 and 0 elsewhere).
    pub memsw_usage: u64,
    pub memsw_max: u64,
    /// How many times the OOM killer ran for this cgroup's own limit, the
    /// kernel's count (`memory_events_local[MEMCG_OOM]`: v2's
    /// `memory.events.local` `oom`, kept on v1 too, where no file shows
    /// it); `OOMS_UNREAD` where it could not be read.
    pub ooms: u64,
}

/// `MemcgLevel::ooms` not read (this kernel's BTF lacks it, or the read failed).
pub const OOMS_UNREAD: u64 = u64::MAX;

/// Offsets to the page counters of a task's memory cgroup, from the
/// kernel's BTF: `css_set.subsys[memory_cgrp_id]` (its memory css, the
/// first member of `struct mem_cgroup`), `cgroup_subsys_state.cgroup`,
/// `mem_cgroup.memory` and `.memsw` (v1), and in `struct page_counter`
/// `usage`, `max` and `parent` (the parent's counter of the same kind).
/// `memory` is `ABSENT` where any is missing: no levels are read.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemcgOffsets {
    pub css_set_memory: u32,
    pub css_cgroup: u32,
    pub memory: u32,
    pub memsw: u32,
    pub counter_usage: u32,
    pub counter_max: u32,
    pub counter_parent: u32,
    /// `mem_cgroup.memory_events_local[MEMCG_OOM]`, from the memory
    /// cgroup: `ABSENT` where this kernel's BTF lacks it (the counts are
    /// then not read; the page counters still are).
    pub oom_events: u32,
}

impl MemcgOffsets {
    pub const UNSET: Self = Self {
        css_set_memory: ABSENT,
        css_cgroup: ABSENT,
        memory: ABSENT,
        memsw: ABSENT,
        counter_usage: ABSENT,
        counter_max: ABSENT,
        counter_parent: ABSENT,
        oom_events: ABSENT,
    };
}

/// A cgroup was created or removed, or a task was moved into one, in the
/// tracked hierarchy (memory on v1, the unified one on v2).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupEvent {
    pub header: EventHeader,
    pub hierarchy_id: u32,
    pub level: u32,
    pub cgroup_id: u64,
    /// Attach only: the task moved, and its comm.
    pub pid: u32,
    /// Bytes of `path` in use (without the NUL).
    pub path_len: u32,
    /// Attach only: start time of the moved task from the task table
    /// (0 when unknown).
    pub start_ns: u64,
    pub comm: [u8; COMM_LEN],
    pub path: [u8; CGROUP_PATH_LEN],
}

/// A signal that can end a process was sent to a pod's process
/// (`signal:signal_generate`, in the sender's context): who sent it, to
/// whom, and how. Only signals that end a process, or that someone outside
/// the target's container sends it (a request to stop), are streamed.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalEvent {
    pub header: EventHeader,
    pub sig: u32,
    /// The siginfo's `si_code` where `origin` is `signal_origin::INFO`.
    pub code: i32,
    /// The tracepoint's result: `signal_result::*`.
    pub result: u32,
    /// `signal_origin::*`.
    pub origin: u32,
    /// The thread it was sent to, its process, and its leader's start
    /// (as exit records name a process).
    pub target_pid: u32,
    pub target_tgid: u32,
    pub target_start_ns: u64,
    /// The target's tracked cgroup (its container's); 0 with
    /// `FLAG_TASK_UNKNOWN`.
    pub target_cgroup_id: u64,
    /// The task that sent it (the current task), its process and start.
    pub sender_pid: u32,
    pub sender_tgid: u32,
    pub sender_start_ns: u64,
    /// The sender's tracked cgroup; with `FLAG_SENDER_HOST` its own cgroup
    /// (v2: unified; v1: memory), 0 where it could not be read.
    pub sender_cgroup_id: u64,
    pub sender_comm: [u8; COMM_LEN],
}

/// How a signal was sent, as its siginfo pointer says.
pub mod signal_origin {
    /// With a siginfo: its `si_code` says who (user space: 0 or negative;
    /// the kernel: positive, or `SI_KERNEL`).
    pub const INFO: u32 = 0;
    /// `SEND_SIG_NOINFO`: a kernel path on behalf of the current task
    /// (a write to `cgroup.kill`, a parent's death signal, `SIGPIPE`).
    pub const NOINFO: u32 = 1;
    /// `SEND_SIG_PRIV`: the kernel on its own (the OOM killer, the end of
    /// a PID namespace's init, CPU limits).
    pub const PRIV: u32 = 2;
    /// A siginfo of a negative (user space's) code that no syscall copied
    /// onto the sending task's stack: a notice the kernel made itself (a
    /// POSIX timer's `SI_TIMER`), whichever task ran when it fired.
    pub const KERNEL: u32 = 3;
}

/// `signal_generate`'s result (the kernel's `enum trace_signal_result`).
pub mod signal_result {
    pub const DELIVERED: u32 = 0;
    /// Dropped: the target ignores it, or is dying already.
    pub const IGNORED: u32 = 1;
    pub const ALREADY_PENDING: u32 = 2;
    pub const OVERFLOW_FAIL: u32 = 3;
    /// Delivered, its siginfo lost.
    pub const LOSE_INFO: u32 = 4;
}

/// Where the signal program reads the target's disposition and the
/// siginfo, from the kernel's BTF: `task_struct.sighand` →
/// `sighand_struct.action[sig - 1]` (`struct k_sigaction`, of
/// `k_sigaction_size` bytes, whose `sa.sa_handler` is at `sa_handler`),
/// `task_struct.blocked` and `real_blocked` (the mask a task had before
/// `sigtimedwait(2)` unblocked what it waits for), `kernel_siginfo.si_code`,
/// and the sender's kernel stack (`task_struct.stack`, `thread_size`
/// bytes). All or nothing: where one is missing the program is not
/// attached.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalOffsets {
    pub task_sighand: u32,
    pub sighand_action: u32,
    pub k_sigaction_size: u32,
    pub sa_handler: u32,
    pub task_blocked: u32,
    pub task_real_blocked: u32,
    pub siginfo_code: u32,
    pub task_stack: u32,
    pub thread_size: u32,
    /// Bytes pending in `SIGNALS` past which a record wakes the reader.
    pub wakeup_bytes: u32,
}

impl SignalOffsets {
    pub const UNSET: Self = Self {
        task_sighand: ABSENT,
        sighand_action: ABSENT,
        k_sigaction_size: ABSENT,
        sa_handler: ABSENT,
        task_blocked: ABSENT,
        task_real_blocked: ABSENT,
        siginfo_code: ABSENT,
        task_stack: ABSENT,
        thread_size: 0,
        wakeup_bytes: 0,
    };
}

/// Signals whose default action ends a process (terminate, or dump core):
/// every signal but SIGCHLD, SIGCONT, SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU,
/// SIGURG and SIGWINCH, real-time ones (32–64) included; bit `n - 1` for
/// signal `n`. What the signal program looks at first: SIGCHLD, sent at
/// every exit, costs one test.
pub const FATAL_SIGNALS: u64 = !((1 << (17 - 1))
    | (1 << (18 - 1))
    | (1 << (19 - 1))
    | (1 << (20 - 1))
    | (1 << (21 - 1))
    | (1 << (22 - 1))
    | (1 << (23 - 1))
    | (1 << (28 - 1)));

/// Whether signal `sig` ends a process by default (see [`FATAL_SIGNALS`]).
pub const fn ends_by_default(sig: u32) -> bool {
    let bit = sig.wrapping_sub(1);
    bit < 64 && (FATAL_SIGNALS >> bit) & 1 != 0
}

/// Value of the per-task table (key: thread id).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskInfo {
    pub cgroup_id: u64,
    pub start_ns: u64,
    pub tgid: u32,
    pub _pad: u32,
}

/// "This kernel has no such field": the programs skip it.
pub const ABSENT: u32 = u32::MAX;

/// Offsets of the tracepoint fields, read from tracefs `format` files at
/// start-up. `ABSENT` marks a field this kernel does not have.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracepointOffsets {
    pub exit_comm: u32,
    pub exit_pid: u32,
    pub exit_group_dead: u32,
    pub mv_pid: u32,
    pub mv_comm: u32,
    pub mv_total_vm: u32,
    pub mv_anon_rss: u32,
    pub mv_file_rss: u32,
    pub mv_shmem_rss: u32,
    pub mv_uid: u32,
    pub mv_pgtables: u32,
    pub mv_oom_score_adj: u32,
    /// `sched_process_exec`: the id the process has after the exec, and
    /// the one the exec'ing thread had (they differ when it was not the
    /// leader: its own id is retired without an exit of its own).
    pub exec_pid: u32,
    pub exec_old_pid: u32,
}

/// Offsets of `struct task_struct` members, read from the kernel's BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskOffsets {
    pub exit_code: u32,
    pub pid: u32,
    pub tgid: u32,
    pub real_parent: u32,
    pub start_boottime: u32,
    pub group_leader: u32,
    /// `task_struct.signal` and `signal_struct.live`: where the exit
    /// tracepoint has no `group_dead` (older kernels, e.g. 6.1), the last thread
    /// of a process is the one that sees `live` at 0.
    pub signal: u32,
    pub signal_live: u32,
    /// `signal_struct.nr_threads`: a process with one thread has no other
    /// thread to race with for being last.
    pub signal_nr_threads: u32,
    /// `signal_struct.sum_sched_runtime`: grows as each released thread's
    /// run time is added, so it is 0 while no thread of the process has
    /// been released. `nr_threads` of 1 alone would also describe a leader
    /// whose threads have already claimed the end and gone.
    pub signal_sum_runtime: u32,
    /// `task_struct.comm`, and what the cgroup programs read from their
    /// raw tracepoints' `struct cgroup *`: `cgroup.root` →
    /// `cgroup_root.hierarchy_id`, `cgroup.level`, `cgroup.kn` →
    /// `kernfs_node.id` (the cgroup id).
    pub comm: u32,
    pub cgroup_root: u32,
    pub root_hierarchy_id: u32,
    pub cgroup_level: u32,
    pub cgroup_kn: u32,
    pub kn_id: u32,
    /// `task_struct.cgroups` → `css_set.dfl_cgrp`: a task's cgroup on v2,
    /// read from the OOM victim's task where the OOM tracepoint passes it.
    pub task_cgroups: u32,
    pub css_dfl_cgrp: u32,
    /// `cgroup.ancestors` (pointers to the cgroup's ancestors by level,
    /// Linux 6.0 on) or `cgroup.ancestor_ids` (their ids, before): where a
    /// cgroup nested below a container's finds that container.
    pub cgroup_ancestors: u32,
    /// 1 when `cgroup_ancestors` is `ancestor_ids`.
    pub ancestor_ids: u32,
}

/// The OOM victim's identity as its task says it at the kill (the
/// `mark_victim` raw tracepoint's own program), for the OOM record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VictimIdentity {
    pub cgroup_id: u64,
    pub start_ns: u64,
    pub tgid: u32,
    /// What the record's header says of it: 0 (a pod's task),
    /// `FLAG_TASK_UNTRACKED` (a host task) or `FLAG_TASK_UNKNOWN` (its task
    /// could not be read).
    pub flags: u32,
    /// Its memory cgroup (`struct mem_cgroup *`, 0 when unreadable): the
    /// OOM killer picked it below the cgroup it ran for, so where the
    /// killer's own decision is not seen, that cgroup is on this chain
    /// (and not always on the chain of the task that ran the kill).
    pub memcg: u64,
}

/// Process names (comm, NUL-padded) of container runtimes: their exits are
/// streamed wherever they run, so that crashes are seen. 8-aligned, names
/// first: the exit program compares them a word at a time.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeComms {
    pub names: [[u8; COMM_LEN]; MAX_RUNTIME_COMMS],
    pub count: u32,
    pub _pad: u32,
}

impl RuntimeComms {
    pub const UNSET: Self = Self { names: [[0; COMM_LEN]; MAX_RUNTIME_COMMS], count: 0, _pad: 0 };
}

/// Which cgroup hierarchy the programs attribute tasks to.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    /// Hierarchy id of the memory controller on v1; 0 (the default
    /// hierarchy) on v2.
    pub tracked_hierarchy: u32,
    /// 1 on cgroup v2: the exiting task's cgroup is read directly.
    pub unified: u32,
    /// Exit records do not wake the reader until this many bytes are
    /// pending in `EVENTS`; the reader also drains on a timer. Batching
    /// keeps the agent's CPU per event low.
    pub wakeup_bytes: u32,
    /// The same for records in `CGROUP_CHANGES` (OOM kills, in a ring of
    /// their own, always wake it).
    pub cgroup_wakeup_bytes: u32,
    /// 1 where the OOM tracepoint passes the victim's task (the kernel's
    /// `mark_victim` with its task, 6.9 on): its own program reads the
    /// victim's identity (off the task on v2, from the task table on v1)
    /// and memory cgroup, and the OOM record waits for it.
    pub victim_task: u32,
    /// Pages under its limit a memory cgroup whose limit fired can read at
    /// the kill (the agent's `oom_limit::margin`): a cgroup nested below a
    /// container's this near its limit is kept among an OOM's levels.
    pub limit_margin_pages: u32,
    /// Task-table entries one tracked cgroup's tasks may hold.
    pub task_quota: u32,
    /// Entries the table holds before only cgroups under
    /// `rooms::TASK_FLOOR` may take more (its size less its last room).
    pub task_room: u32,
    /// The rings' sizes in bytes (`EVENTS`, `OOM_KILLS`, `CGROUP_CHANGES`,
    /// `SIGNALS`).
    pub exit_ring_bytes: u32,
    pub oom_ring_bytes: u32,
    pub cgroup_ring_bytes: u32,
    pub signal_ring_bytes: u32,
}

impl TracepointOffsets {
    pub const UNSET: Self = Self {
        exit_comm: ABSENT,
        exit_pid: ABSENT,
        exit_group_dead: ABSENT,
        mv_pid: ABSENT,
        mv_comm: ABSENT,
        mv_total_vm: ABSENT,
        mv_anon_rss: ABSENT,
        mv_file_rss: ABSENT,
        mv_shmem_rss: ABSENT,
        mv_uid: ABSENT,
        mv_pgtables: ABSENT,
        mv_oom_score_adj: ABSENT,
        exec_pid: ABSENT,
        exec_old_pid: ABSENT,
    };
}

impl TaskOffsets {
    pub const UNSET: Self = Self {
        exit_code: ABSENT,
        pid: ABSENT,
        tgid: ABSENT,
        real_parent: ABSENT,
        start_boottime: ABSENT,
        group_leader: ABSENT,
        signal: ABSENT,
        signal_live: ABSENT,
        signal_nr_threads: ABSENT,
        signal_sum_runtime: ABSENT,
        comm: ABSENT,
        cgroup_root: ABSENT,
        root_hierarchy_id: ABSENT,
        cgroup_level: ABSENT,
        cgroup_kn: ABSENT,
        kn_id: ABSENT,
        task_cgroups: ABSENT,
        css_dfl_cgrp: ABSENT,
        cgroup_ancestors: ABSENT,
        ancestor_ids: 0,
    };
}

impl ProbeConfig {
    pub const UNSET: Self = Self {
        tracked_hierarchy: 0,
        unified: 0,
        wakeup_bytes: 0,
        cgroup_wakeup_bytes: 0,
        victim_task: 0,
        limit_margin_pages: 0,
        task_quota: 0,
        task_room: 0,
        exit_ring_bytes: 0,
        oom_ring_bytes: 0,
        cgroup_ring_bytes: 0,
        signal_ring_bytes: 0,
    };
}

/// Names shared by the eBPF object and the loader; never retype them.
pub mod names {
    pub const EVENTS: &str = "EVENTS";
    pub const OOM_KILLS: &str = "OOM_KILLS";
    pub const CGROUP_CHANGES: &str = "CGROUP_CHANGES";
    pub const NESTING: &str = "NESTING";
    pub const TASKS: &str = "TASKS";
    pub const TRACKED: &str = "TRACKED";
    pub const UNSTREAMED: &str = "UNSTREAMED";
    pub const RUNTIME_COMMS: &str = "RUNTIME_COMMS";
    pub const EMITTED: &str = "EMITTED";
    pub const DROPPED: &str = "DROPPED";
    pub const TP_OFFSETS: &str = "TP_OFFSETS";
    pub const TASK_OFFSETS: &str = "TASK_OFFSETS";
    pub const MEMCG_OFFSETS: &str = "MEMCG_OFFSETS";
    pub const OOM_SCRATCH: &str = "OOM_SCRATCH";
    pub const PROBE_CONFIG: &str = "PROBE_CONFIG";
    pub const OOM_CONTROL_OFFSETS: &str = "OOM_CONTROL_OFFSETS";
    pub const OOM_CONTROLS: &str = "OOM_CONTROLS";
    pub const READER: &str = "READER";
    pub const POD_PIDS: &str = "POD_PIDS";
    pub const SIGNALS: &str = "SIGNALS";
    pub const SIGNAL_OFFSETS: &str = "SIGNAL_OFFSETS";
    pub const TASKS_HELD: &str = "TASKS_HELD";
    pub const SHARES: &str = "SHARES";

    pub const PROG_EXIT: &str = "sched_process_exit";
    pub const PROG_FORK: &str = "sched_process_fork";
    /// Where the task table is kept: the id an exec retires leaves it.
    pub const PROG_EXEC: &str = "sched_process_exec";
    pub const PROG_OOM: &str = "mark_victim";
    /// The raw tracepoint on the same event, where it passes the victim's task.
    pub const PROG_OOM_TASK: &str = "mark_victim_task";
    pub const IDENTITIES: &str = "IDENTITIES";
    pub const PENDING_OOM: &str = "PENDING_OOM";
    pub const PROG_MKDIR: &str = "cgroup_mkdir";
    pub const PROG_RMDIR: &str = "cgroup_rmdir";
    pub const PROG_ATTACH: &str = "cgroup_attach_task";
    /// On `signal:signal_generate` (a raw tracepoint).
    pub const PROG_SIGNAL: &str = "signal_generate";
    /// At the entry of the kernel's `out_of_memory` (a BPF trampoline):
    /// where the OOM killer's own decision is found.
    pub const PROG_OOM_CONTROL: &str = "oom_control";
    /// The kernel function it is attached to.
    pub const OOM_CONTROL_FUNCTION: &str = "out_of_memory";
}

// Layouts are part of the kernel/user contract: any change must be deliberate.
const _: () = assert!(core::mem::size_of::<EventHeader>() == 16);
const _: () = assert!(core::mem::size_of::<ExitEvent>() == 72);
const _: () = assert!(core::mem::size_of::<OomKillEvent>() == 136 + 48 * MEMCG_LEVELS + 8 + 16);
const _: () = assert!(core::mem::size_of::<OomControlOffsets>() == 24);
const _: () = assert!(core::mem::size_of::<MemcgOffsets>() == 32);
const _: () = assert!(core::mem::size_of::<CgroupEvent>() == 64 + CGROUP_PATH_LEN);
const _: () = assert!(core::mem::size_of::<TaskInfo>() == 24);
const _: () = assert!(core::mem::size_of::<SignalEvent>() == 96);
const _: () = assert!(core::mem::size_of::<SignalOffsets>() == 40);
const _: () = assert!(core::mem::size_of::<TaskOffsets>() == 80);
const _: () = assert!(core::mem::size_of::<TrackedCgroup>() == 16 + 32);
const _: () = assert!(core::mem::size_of::<RingShares>() == 32);
const _: () = assert!(core::mem::size_of::<TracepointOffsets>() == 14 * 4);
const _: () = assert!(core::mem::size_of::<ProbeConfig>() == 12 * 4);
const _: () = assert!(core::mem::size_of::<VictimIdentity>() == 32);
const _: () = assert!(core::mem::size_of::<RuntimeComms>() == COMM_LEN * MAX_RUNTIME_COMMS + 8);
const _: () = assert!(core::mem::align_of::<RuntimeComms>() == 8 && core::mem::offset_of!(RuntimeComms, names) == 0);

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all of these are repr(C), Copy, without padding (asserted above).
    unsafe impl aya::Pod for TaskInfo {}
    unsafe impl aya::Pod for TrackedCgroup {}
    unsafe impl aya::Pod for RingShares {}
    unsafe impl aya::Pod for VictimIdentity {}
    unsafe impl aya::Pod for TracepointOffsets {}
    unsafe impl aya::Pod for TaskOffsets {}
    unsafe impl aya::Pod for MemcgOffsets {}
    unsafe impl aya::Pod for OomControlOffsets {}
    unsafe impl aya::Pod for ProbeConfig {}
    unsafe impl aya::Pod for RuntimeComms {}
    unsafe impl aya::Pod for SignalOffsets {}
}
