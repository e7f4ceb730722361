//! Ring-buffer records → typed [`Event`]s. Every size is checked; a record
//! that is too short, of an unknown kind or with an impossible length is a
//! [`DecodeError`] with a bounded label, never a panic.

use agent_common::{
    oom_constraint, signal_origin, CgroupEvent, EventHeader, EventKind, ExitEvent, MemcgLevel, OomKillEvent,
    SignalEvent, CGROUP_PATH_LEN, COMM_LEN, FLAG_LEVELS_OF_VICTIM, FLAG_NO_RSS, FLAG_SENDER_HOST, FLAG_SENDER_UNKNOWN,
    FLAG_TASK_UNKNOWN, FLAG_TASK_UNTRACKED, FLAG_TRUNCATED, MEMCG_LEVELS, OOMS_UNREAD,
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, strum::IntoStaticStr, strum::EnumDiscriminants)]
#[strum(serialize_all = "snake_case")]
#[strum_discriminants(name(DecodeErrorKind), derive(strum::IntoStaticStr, strum::EnumIter, strum::EnumCount))]
#[strum_discriminants(strum(serialize_all = "snake_case"))]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than an event header")]
    TooShort(usize),
    #[error("unknown event kind {0}")]
    UnknownKind(u32),
    #[error("{kind:?} record of {len} bytes, expected at least {need}")]
    Truncated { kind: EventKind, len: usize, need: usize },
    #[error("cgroup path length {0} exceeds the record")]
    BadPathLength(u32),
    #[error("signal record of unknown origin {0}")]
    BadSignalOrigin(u32),
}

impl DecodeError {
    /// Bounded label for metrics.
    pub fn label(&self) -> &'static str {
        self.into()
    }
}

/// How a process ended, decoded from the kernel's wait status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// exit(2) / return from main with this code.
    Code(u8),
    /// Killed by a signal.
    Signal { signo: u8, core_dumped: bool },
}

impl ExitStatus {
    pub fn from_wait_status(status: u32) -> Self {
        let signo = (status & 0x7f) as u8;
        if signo == 0 {
            ExitStatus::Code(((status >> 8) & 0xff) as u8)
        } else {
            ExitStatus::Signal { signo, core_dumped: status & 0x80 != 0 }
        }
    }

    pub fn to_wait_status(self) -> u32 {
        match self {
            ExitStatus::Code(c) => u32::from(c) << 8,
            ExitStatus::Signal { signo, core_dumped } => u32::from(signo) | if core_dumped { 0x80 } else { 0 },
        }
    }
}

/// A task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub ts_ns: u64,
    pub pid: u32,
    pub tgid: u32,
    pub ppid: u32,
    pub status: ExitStatus,
    /// `None` when the task was not in the kernel's task table (v1).
    pub cgroup_id: Option<u64>,
    /// The kernel knows the task is in no tracked cgroup (a host task, on
    /// v1 where it cannot name the cgroup; a runtime's process).
    pub untracked: bool,
    /// CLOCK_BOOTTIME ns at which the task started.
    pub start_ns: u64,
    pub comm: String,
    /// The last thread of its process: the process is gone.
    pub group_dead: bool,
}

/// The OOM killer chose a victim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomKill {
    pub ts_ns: u64,
    pub victim_pid: u32,
    /// `None` when the victim was not in the kernel's task table.
    pub victim: Option<TaskIdentity>,
    /// Not in the table because it is in no tracked cgroup: a host task.
    pub victim_untracked: bool,
    pub victim_comm: String,
    pub rss: Option<OomRss>,
    pub oom_score_adj: i32,
    pub uid: u32,
    pub trigger_pid: u32,
    pub trigger_tgid: u32,
    pub trigger_cgroup_id: u64,
    pub trigger_comm: String,
    /// The memory cgroups of the task that ran out of memory at the kill,
    /// its own first, then each one above it (of those its container
    /// nests, the innermost and one at its limit); empty where the
    /// kernel's counters could not be read.
    pub levels: Vec<MemcgUse>,
    /// The walk up gave out among cgroups nested below the container's:
    /// the levels stop short of it.
    pub levels_cut: bool,
    /// The OOM killer's own decision, where this kernel let the programs
    /// read it: then `levels` start at the cgroup it names. `None`: the
    /// levels are the victim's (`levels_of_victim`) or the allocating
    /// task's.
    pub decision: Option<KernelDecision>,
    pub levels_of_victim: bool,
}

/// What the OOM killer itself said it ran for (`struct oom_control`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelDecision {
    /// A memory cgroup's limit (`CONSTRAINT_MEMCG`): that cgroup's id.
    Memcg { cgroup_id: u64 },
    /// The machine's memory (`CONSTRAINT_NONE`).
    Global,
    /// The memory nodes of the allocating task's cpuset.
    Cpuset,
    /// The nodes of a memory policy.
    MemoryPolicy,
}

impl KernelDecision {
    fn from_record(constraint: u32, memcg_id: u64) -> Option<Self> {
        match constraint {
            oom_constraint::MEMCG => Some(Self::Memcg { cgroup_id: memcg_id }),
            oom_constraint::NONE => Some(Self::Global),
            oom_constraint::CPUSET => Some(Self::Cpuset),
            oom_constraint::MEMORY_POLICY => Some(Self::MemoryPolicy),
            _ => None,
        }
    }

    fn to_record(decision: Option<Self>) -> (u32, u64) {
        match decision {
            None => (oom_constraint::UNREAD, 0),
            Some(Self::Memcg { cgroup_id }) => (oom_constraint::MEMCG, cgroup_id),
            Some(Self::Global) => (oom_constraint::NONE, 0),
            Some(Self::Cpuset) => (oom_constraint::CPUSET, 0),
            Some(Self::MemoryPolicy) => (oom_constraint::MEMORY_POLICY, 0),
        }
    }
}

/// A memory cgroup's usage and limit as the kernel counted them at an OOM
/// kill, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemcgUse {
    pub cgroup_id: u64,
    pub usage_bytes: u64,
    /// `None`: no limit.
    pub limit_bytes: Option<u64>,
    /// Memory + swap (cgroup v1), where a limit is set on it.
    pub memsw_usage_bytes: u64,
    pub memsw_limit_bytes: Option<u64>,
    /// How many times the OOM killer ran for this cgroup's own limit, as
    /// the kernel counts it (`None`: not read).
    pub ooms: Option<u64>,
}

/// A cgroup's memory as `memory.stat` (and its usage file) say, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStat {
    pub usage: u64,
    /// Anonymous memory (v2 `anon`, v1 `total_rss`).
    pub anon: u64,
    /// Page cache, shmem included (v2 `file`, v1 `total_cache`).
    pub file: u64,
    /// tmpfs and shared memory (v2 `shmem`, v1 `total_shmem`).
    pub shmem: u64,
    /// Kernel memory charged to it: slab, stacks, page tables, sockets
    /// (v2 `kernel` or its parts, v1 `memory.kmem.usage_in_bytes`).
    pub kernel: u64,
    /// Its memory out in swap (v2 `memory.swap.current`, v1
    /// `total_swap`): not in the usage on v2, where the swap limit holds
    /// it; and of its memory in RAM, what zswap holds compressed (v2
    /// `zswap`, 5.19 on).
    pub swap: u64,
    pub zswap: u64,
}

/// Page counts at or above this are no limit (the kernel's
/// `PAGE_COUNTER_MAX` is `LONG_MAX / PAGE_SIZE`, about 2^51 pages); a
/// usage past it is no count the kernel keeps, and reads as this many.
const UNLIMITED_PAGES: u64 = 1 << 50;

impl MemcgUse {
    fn from_pages(l: &MemcgLevel, page: u64) -> Self {
        let limit = |max: u64| (max > 0 && max < UNLIMITED_PAGES).then(|| max.saturating_mul(page));
        Self {
            cgroup_id: l.cgroup_id,
            usage_bytes: l.usage.min(UNLIMITED_PAGES).saturating_mul(page),
            limit_bytes: limit(l.max),
            memsw_usage_bytes: l.memsw_usage.min(UNLIMITED_PAGES).saturating_mul(page),
            memsw_limit_bytes: limit(l.memsw_max),
            ooms: (l.ooms != OOMS_UNREAD).then_some(l.ooms),
        }
    }

    fn to_pages(self, page: u64) -> MemcgLevel {
        let max = |l: Option<u64>| l.map_or(u64::MAX / page, |b| b / page);
        MemcgLevel {
            cgroup_id: self.cgroup_id,
            usage: self.usage_bytes / page,
            max: max(self.limit_bytes),
            memsw_usage: self.memsw_usage_bytes / page,
            memsw_max: if self.memsw_limit_bytes.is_some() || self.memsw_usage_bytes > 0 {
                max(self.memsw_limit_bytes)
            } else {
                0
            },
            ooms: self.ooms.unwrap_or(OOMS_UNREAD),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskIdentity {
    pub tgid: u32,
    pub cgroup_id: u64,
    pub start_ns: u64,
}

/// Memory figures of the victim (kB), on kernels that report them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OomRss {
    pub total_vm_kb: u64,
    pub anon_rss_kb: u64,
    pub file_rss_kb: u64,
    pub shmem_rss_kb: u64,
    pub pgtables_kb: u64,
}

/// A cgroup directory appeared or went away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupChange {
    pub ts_ns: u64,
    pub hierarchy_id: u32,
    pub level: u32,
    pub cgroup_id: u64,
    /// Relative to the hierarchy root, e.g. `/kubepods/burstable/pod…/…`.
    pub path: String,
    pub truncated: bool,
}

/// A task was moved into a cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupAttach {
    pub cgroup: CgroupChange,
    pub pid: u32,
    /// CLOCK_BOOTTIME ns at which the task started; 0 when the kernel's
    /// task table did not know it.
    pub start_ns: u64,
    pub comm: String,
}

/// A signal that can end a process was sent to a pod's process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    pub ts_ns: u64,
    pub sig: u32,
    pub origin: SignalOrigin,
    /// The kernel's `signal_generate` result (`agent_common::signal_result`).
    pub result: u32,
    /// The thread it was sent to.
    pub target_pid: u32,
    /// Its process: tgid and leader's start, as exits name it.
    pub target_tgid: u32,
    pub target_start_ns: u64,
    /// Its container's cgroup; `None` where the kernel's task table had
    /// lost it.
    pub target_cgroup_id: Option<u64>,
    /// The task that sent it, its process and start.
    pub sender_pid: u32,
    pub sender_tgid: u32,
    pub sender_start_ns: u64,
    pub sender: SenderPlace,
    pub sender_comm: String,
}

/// How a signal was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOrigin {
    /// With a siginfo, whose `si_code` this is.
    Info(i32),
    /// A kernel path on behalf of the current task (`SEND_SIG_NOINFO`).
    NoInfo,
    /// The kernel on its own (`SEND_SIG_PRIV`).
    Priv,
    /// A siginfo the kernel made itself, of this negative code (a POSIX
    /// timer's `SI_TIMER`): no syscall copied it from a sender.
    Kernel(i32),
}

/// Where a signal's sender was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderPlace {
    /// In a tracked cgroup: a pod's, a container's.
    Tracked(u64),
    /// A host process, in this cgroup (v2: unified; v1: memory); 0 where
    /// it could not be read.
    Host(u64),
    /// A pod's task the kernel's task table had lost.
    Lost,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Exit(Exit),
    OomKill(OomKill),
    CgroupMkdir(CgroupChange),
    CgroupRmdir(CgroupChange),
    CgroupAttach(CgroupAttach),
    Signal(Signal),
}

impl Event {
    pub fn kind(&self) -> EventKind {
        match self {
            Event::Exit(_) => EventKind::Exit,
            Event::OomKill(_) => EventKind::OomKill,
            Event::CgroupMkdir(_) => EventKind::CgroupMkdir,
            Event::CgroupRmdir(_) => EventKind::CgroupRmdir,
            Event::CgroupAttach(_) => EventKind::CgroupAttach,
            Event::Signal(_) => EventKind::Signal,
        }
    }

    /// When the kernel saw it (CLOCK_BOOTTIME ns).
    pub fn ts_ns(&self) -> u64 {
        match self {
            Event::Exit(e) => e.ts_ns,
            Event::OomKill(o) => o.ts_ns,
            Event::CgroupMkdir(c) | Event::CgroupRmdir(c) => c.ts_ns,
            Event::CgroupAttach(a) => a.cgroup.ts_ns,
            Event::Signal(s) => s.ts_ns,
        }
    }

    /// False when the kernel could not say which cgroup the task was in.
    pub fn attributed(&self) -> bool {
        match self {
            // A task the kernel knows to be untracked is the host's.
            Event::Exit(e) => e.cgroup_id.is_some() || e.untracked,
            Event::OomKill(o) => o.victim.is_some() || o.victim_untracked,
            _ => true,
        }
    }
}

/// Reads a `T` from the front of `bytes` after checking the length.
fn read<T: Copy>(bytes: &[u8], kind: EventKind) -> Result<T, DecodeError> {
    let need = core::mem::size_of::<T>();
    if bytes.len() < need {
        return Err(DecodeError::Truncated { kind, len: bytes.len(), need });
    }
    // SAFETY: length checked above; T is a repr(C) plain-data record from
    // agent-common, valid for any bit pattern; read_unaligned needs no alignment.
    Ok(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// Text of a kernel string field up to its NUL. The kernel's bytes need not
/// be UTF-8 (prctl can set any comm, and truncation can split a character):
/// each invalid byte becomes one `?`, so the text is never longer than the
/// field and re-encodes to the same length.
fn c_string(bytes: &[u8]) -> String {
    // The last byte of a kernel string field is its NUL, whatever a
    // malformed record holds there.
    let bytes = &bytes[..bytes.len().saturating_sub(1)];
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let mut out = String::with_capacity(end);
    for chunk in bytes[..end].utf8_chunks() {
        out.push_str(chunk.valid());
        out.extend(std::iter::repeat_n('?', chunk.invalid().len()));
    }
    out
}

/// The longest prefix of `s` that fits in `max` bytes without splitting a
/// character.
fn fit(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// One ring-buffer record as an [`Event`]; `page_size` is what the
/// kernel's page counters count in (the node's, `os::page_size`).
pub fn decode(bytes: &[u8], page_size: u64) -> Result<Event, DecodeError> {
    if bytes.len() < core::mem::size_of::<EventHeader>() {
        return Err(DecodeError::TooShort(bytes.len()));
    }
    let raw_kind = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let kind = EventKind::from_repr(raw_kind).ok_or(DecodeError::UnknownKind(raw_kind))?;
    match kind {
        EventKind::Exit => {
            let r: ExitEvent = read(bytes, kind)?;
            Ok(Event::Exit(Exit {
                ts_ns: r.header.ts_ns,
                pid: r.pid,
                tgid: r.tgid,
                ppid: r.ppid,
                status: ExitStatus::from_wait_status(r.exit_code),
                cgroup_id: (r.header.flags & FLAG_TASK_UNKNOWN == 0).then_some(r.cgroup_id),
                untracked: r.header.flags & FLAG_TASK_UNTRACKED != 0,
                start_ns: r.start_ns,
                comm: c_string(&r.comm),
                group_dead: r.group_dead != 0,
            }))
        }
        EventKind::OomKill => {
            let r: OomKillEvent = read(bytes, kind)?;
            Ok(Event::OomKill(OomKill {
                ts_ns: r.header.ts_ns,
                victim_pid: r.victim_pid,
                victim: (r.header.flags & (FLAG_TASK_UNKNOWN | FLAG_TASK_UNTRACKED) == 0).then_some(TaskIdentity {
                    tgid: r.victim_tgid,
                    cgroup_id: r.victim_cgroup_id,
                    start_ns: r.victim_start_ns,
                }),
                victim_untracked: r.header.flags & FLAG_TASK_UNTRACKED != 0,
                victim_comm: c_string(&r.victim_comm),
                rss: (r.header.flags & FLAG_NO_RSS == 0).then_some(OomRss {
                    total_vm_kb: r.total_vm_kb,
                    anon_rss_kb: r.anon_rss_kb,
                    file_rss_kb: r.file_rss_kb,
                    shmem_rss_kb: r.shmem_rss_kb,
                    pgtables_kb: r.pgtables_kb,
                }),
                oom_score_adj: r.oom_score_adj,
                uid: r.uid,
                trigger_pid: r.trigger_pid,
                trigger_tgid: r.trigger_tgid,
                trigger_cgroup_id: r.trigger_cgroup_id,
                trigger_comm: c_string(&r.trigger_comm),
                levels: {
                    let n = (r.level_count as usize).min(MEMCG_LEVELS);
                    r.levels[..n].iter().map(|l| MemcgUse::from_pages(l, page_size)).collect()
                },
                levels_cut: r.levels_cut != 0,
                decision: KernelDecision::from_record(r.constraint, r.oom_memcg_id),
                levels_of_victim: r.header.flags & FLAG_LEVELS_OF_VICTIM != 0,
            }))
        }
        EventKind::CgroupMkdir | EventKind::CgroupRmdir | EventKind::CgroupAttach => {
            let r: CgroupEvent = read(bytes, kind)?;
            // The kernel copies at most CGROUP_PATH_LEN - 1 bytes and a NUL.
            let len = r.path_len as usize;
            if len >= CGROUP_PATH_LEN {
                return Err(DecodeError::BadPathLength(r.path_len));
            }
            let change = CgroupChange {
                ts_ns: r.header.ts_ns,
                hierarchy_id: r.hierarchy_id,
                level: r.level,
                cgroup_id: r.cgroup_id,
                path: c_string(&r.path[..=len]),
                truncated: r.header.flags & FLAG_TRUNCATED != 0,
            };
            Ok(match kind {
                EventKind::CgroupMkdir => Event::CgroupMkdir(change),
                EventKind::CgroupRmdir => Event::CgroupRmdir(change),
                _ => Event::CgroupAttach(CgroupAttach {
                    cgroup: change,
                    pid: r.pid,
                    start_ns: r.start_ns,
                    comm: c_string(&r.comm),
                }),
            })
        }
        EventKind::Signal => {
            let r: SignalEvent = read(bytes, kind)?;
            let origin = match r.origin {
                signal_origin::INFO => SignalOrigin::Info(r.code),
                signal_origin::NOINFO => SignalOrigin::NoInfo,
                signal_origin::PRIV => SignalOrigin::Priv,
                signal_origin::KERNEL => SignalOrigin::Kernel(r.code),
                other => return Err(DecodeError::BadSignalOrigin(other)),
            };
            let flags = r.header.flags;
            Ok(Event::Signal(Signal {
                ts_ns: r.header.ts_ns,
                sig: r.sig,
                origin,
                result: r.result,
                target_pid: r.target_pid,
                target_tgid: r.target_tgid,
                target_start_ns: r.target_start_ns,
                target_cgroup_id: (flags & FLAG_TASK_UNKNOWN == 0).then_some(r.target_cgroup_id),
                sender_pid: r.sender_pid,
                sender_tgid: r.sender_tgid,
                sender_start_ns: r.sender_start_ns,
                sender: if flags & FLAG_SENDER_UNKNOWN != 0 {
                    SenderPlace::Lost
                } else if flags & FLAG_SENDER_HOST != 0 {
                    SenderPlace::Host(r.sender_cgroup_id)
                } else {
                    SenderPlace::Tracked(r.sender_cgroup_id)
                },
                sender_comm: c_string(&r.sender_comm),
            }))
        }
    }
}

fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: T is a padding-free repr(C) record (sizes asserted in agent-common).
    unsafe { core::slice::from_raw_parts((v as *const T).cast::<u8>(), core::mem::size_of::<T>()) }.to_vec()
}

fn comm_bytes(s: &str) -> [u8; COMM_LEN] {
    let mut out = [0u8; COMM_LEN];
    let s = fit(s, COMM_LEN - 1);
    out[..s.len()].copy_from_slice(s.as_bytes());
    out
}

/// Encodes an event the way the kernel programs write it, counting pages
/// of `page_size`. Used by tests, benchmarks and fuzzing to produce
/// records.
pub fn encode(event: &Event, page_size: u64) -> Vec<u8> {
    let header = |ts_ns, flags| EventHeader { kind: event.kind() as u32, flags, ts_ns };
    match event {
        Event::Exit(e) => bytes_of(&ExitEvent {
            header: header(
                e.ts_ns,
                (if e.cgroup_id.is_none() { FLAG_TASK_UNKNOWN } else { 0 })
                    | (if e.untracked { FLAG_TASK_UNTRACKED } else { 0 }),
            ),
            pid: e.pid,
            tgid: e.tgid,
            ppid: e.ppid,
            exit_code: e.status.to_wait_status(),
            cgroup_id: e.cgroup_id.unwrap_or(0),
            start_ns: e.start_ns,
            comm: comm_bytes(&e.comm),
            group_dead: u32::from(e.group_dead),
            _pad: 0,
        }),
        Event::OomKill(o) => {
            let mut flags = 0;
            if o.victim_untracked {
                flags |= FLAG_TASK_UNTRACKED;
            } else if o.victim.is_none() {
                flags |= FLAG_TASK_UNKNOWN;
            }
            if o.rss.is_none() {
                flags |= FLAG_NO_RSS;
            }
            if o.levels_of_victim {
                flags |= FLAG_LEVELS_OF_VICTIM;
            }
            let v = o.victim.unwrap_or(TaskIdentity { tgid: 0, cgroup_id: 0, start_ns: 0 });
            let rss = o.rss.unwrap_or(OomRss {
                total_vm_kb: 0,
                anon_rss_kb: 0,
                file_rss_kb: 0,
                shmem_rss_kb: 0,
                pgtables_kb: 0,
            });
            bytes_of(&OomKillEvent {
                header: header(o.ts_ns, flags),
                victim_pid: o.victim_pid,
                victim_tgid: v.tgid,
                victim_cgroup_id: v.cgroup_id,
                victim_start_ns: v.start_ns,
                total_vm_kb: rss.total_vm_kb,
                anon_rss_kb: rss.anon_rss_kb,
                file_rss_kb: rss.file_rss_kb,
                shmem_rss_kb: rss.shmem_rss_kb,
                pgtables_kb: rss.pgtables_kb,
                uid: o.uid,
                oom_score_adj: o.oom_score_adj,
                trigger_pid: o.trigger_pid,
                trigger_tgid: o.trigger_tgid,
                trigger_cgroup_id: o.trigger_cgroup_id,
                victim_comm: comm_bytes(&o.victim_comm),
                trigger_comm: comm_bytes(&o.trigger_comm),
                levels: {
                    let mut levels = [MemcgLevel::default(); MEMCG_LEVELS];
                    for (slot, l) in levels.iter_mut().zip(&o.levels) {
                        *slot = l.to_pages(page_size);
                    }
                    levels
                },
                level_count: o.levels.len().min(MEMCG_LEVELS) as u32,
                levels_cut: u32::from(o.levels_cut),
                constraint: KernelDecision::to_record(o.decision).0,
                _pad: 0,
                oom_memcg_id: KernelDecision::to_record(o.decision).1,
            })
        }
        Event::CgroupMkdir(c) | Event::CgroupRmdir(c) => cgroup_record(header, c, 0, 0, ""),
        Event::CgroupAttach(a) => cgroup_record(header, &a.cgroup, a.pid, a.start_ns, &a.comm),
        Event::Signal(s) => {
            let (origin, code) = match s.origin {
                SignalOrigin::Info(code) => (signal_origin::INFO, code),
                SignalOrigin::NoInfo => (signal_origin::NOINFO, 0),
                SignalOrigin::Priv => (signal_origin::PRIV, 0),
                SignalOrigin::Kernel(code) => (signal_origin::KERNEL, code),
            };
            let (flags, sender_cgroup_id) = match s.sender {
                SenderPlace::Tracked(id) => (0, id),
                SenderPlace::Host(id) => (FLAG_SENDER_HOST, id),
                SenderPlace::Lost => (FLAG_SENDER_UNKNOWN, 0),
            };
            let unknown = if s.target_cgroup_id.is_none() { FLAG_TASK_UNKNOWN } else { 0 };
            bytes_of(&SignalEvent {
                header: header(s.ts_ns, flags | unknown),
                sig: s.sig,
                code,
                result: s.result,
                origin,
                target_pid: s.target_pid,
                target_tgid: s.target_tgid,
                target_start_ns: s.target_start_ns,
                target_cgroup_id: s.target_cgroup_id.unwrap_or(0),
                sender_pid: s.sender_pid,
                sender_tgid: s.sender_tgid,
                sender_start_ns: s.sender_start_ns,
                sender_cgroup_id,
                sender_comm: comm_bytes(&s.sender_comm),
            })
        }
    }
}

fn cgroup_record(
    header: impl Fn(u64, u32) -> EventHeader,
    c: &CgroupChange,
    pid: u32,
    start_ns: u64,
    comm: &str,
) -> Vec<u8> {
    let mut path = [0u8; CGROUP_PATH_LEN];
    let p = fit(&c.path, CGROUP_PATH_LEN - 1);
    let n = p.len();
    path[..n].copy_from_slice(p.as_bytes());
    bytes_of(&CgroupEvent {
        header: header(c.ts_ns, if c.truncated { FLAG_TRUNCATED } else { 0 }),
        hierarchy_id: c.hierarchy_id,
        level: c.level,
        cgroup_id: c.cgroup_id,
        pid,
        path_len: n as u32,
        start_ns,
        comm: comm_bytes(comm),
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The page size the records are made with.
    const PAGE: u64 = 4096;

    fn exit() -> Event {
        Event::Exit(Exit {
            ts_ns: 123,
            pid: 4711,
            tgid: 4711,
            ppid: 1,
            status: ExitStatus::Code(3),
            cgroup_id: Some(5645),
            untracked: false,
            start_ns: 99,
            comm: "sleep".into(),
            group_dead: true,
        })
    }

    fn oom(victim: Option<TaskIdentity>, rss: Option<OomRss>) -> Event {
        Event::OomKill(OomKill {
            ts_ns: 7,
            victim_pid: 12,
            victim,
            victim_untracked: false,
            victim_comm: "stress".into(),
            rss,
            oom_score_adj: -998,
            uid: 0,
            trigger_pid: 13,
            trigger_tgid: 12,
            trigger_cgroup_id: 77,
            trigger_comm: "stress-worker".into(),
            levels: vec![
                MemcgUse {
                    cgroup_id: 77,
                    usage_bytes: 48 << 20,
                    limit_bytes: Some(48 << 20),
                    memsw_usage_bytes: 48 << 20,
                    memsw_limit_bytes: Some(48 << 20),
                    ooms: Some(2),
                },
                MemcgUse {
                    cgroup_id: 76,
                    usage_bytes: 50 << 20,
                    limit_bytes: None,
                    memsw_usage_bytes: 0,
                    memsw_limit_bytes: None,
                    ooms: None,
                },
            ],
            levels_cut: true,
            decision: Some(KernelDecision::Memcg { cgroup_id: 77 }),
            levels_of_victim: false,
        })
    }

    fn signal(sender: SenderPlace, origin: SignalOrigin) -> Event {
        Event::Signal(Signal {
            ts_ns: 11,
            sig: 9,
            origin,
            result: 0,
            target_pid: 4712,
            target_tgid: 4711,
            target_start_ns: 99,
            target_cgroup_id: Some(5645),
            sender_pid: 812,
            sender_tgid: 800,
            sender_start_ns: 7,
            sender,
            sender_comm: "runc".into(),
        })
    }

    fn cgroup(path: &str) -> CgroupChange {
        CgroupChange { ts_ns: 1, hierarchy_id: 4, level: 3, cgroup_id: 42, path: path.into(), truncated: false }
    }

    #[test]
    fn every_event_type_round_trips() {
        let rss = OomRss { total_vm_kb: 1, anon_rss_kb: 2, file_rss_kb: 3, shmem_rss_kb: 4, pgtables_kb: 5 };
        let events = [
            exit(),
            Event::Exit(Exit {
                status: ExitStatus::Signal { signo: 9, core_dumped: false },
                cgroup_id: None,
                group_dead: false,
                ..match exit() {
                    Event::Exit(e) => e,
                    _ => unreachable!(),
                }
            }),
            oom(Some(TaskIdentity { tgid: 12, cgroup_id: 5, start_ns: 6 }), Some(rss)),
            oom(None, None),
            match oom(None, None) {
                Event::OomKill(o) => Event::OomKill(OomKill { victim_untracked: true, ..o }),
                _ => unreachable!(),
            },
            Event::Exit(Exit {
                cgroup_id: None,
                untracked: true,
                ..match exit() {
                    Event::Exit(e) => e,
                    _ => unreachable!(),
                }
            }),
            Event::CgroupMkdir(cgroup("/kubepods/burstable/pod1/abc")),
            Event::CgroupRmdir(cgroup("/")),
            Event::CgroupAttach(CgroupAttach {
                cgroup: cgroup("/kubepods.slice/x.scope"),
                pid: 5,
                start_ns: 77,
                comm: "runc:[2:INIT]".into(),
            }),
            signal(SenderPlace::Host(1234), SignalOrigin::Info(0)),
            signal(SenderPlace::Host(0), SignalOrigin::Info(-6)),
            signal(SenderPlace::Tracked(5645), SignalOrigin::NoInfo),
            signal(SenderPlace::Lost, SignalOrigin::Priv),
            signal(SenderPlace::Tracked(77), SignalOrigin::Kernel(-2)),
            match signal(SenderPlace::Lost, SignalOrigin::Info(0x80)) {
                Event::Signal(s) => Event::Signal(Signal { target_cgroup_id: None, result: 1, sig: 15, ..s }),
                _ => unreachable!(),
            },
        ];
        for e in events {
            assert_eq!(decode(&encode(&e, PAGE), PAGE).unwrap(), e);
        }
    }

    #[test]
    fn wait_status_decodes_codes_signals_and_core_dumps() {
        assert_eq!(ExitStatus::from_wait_status(0), ExitStatus::Code(0));
        assert_eq!(ExitStatus::from_wait_status(42 << 8), ExitStatus::Code(42));
        assert_eq!(ExitStatus::from_wait_status(9), ExitStatus::Signal { signo: 9, core_dumped: false });
        assert_eq!(ExitStatus::from_wait_status(11 | 0x80), ExitStatus::Signal { signo: 11, core_dumped: true });
    }

    #[test]
    fn truncated_records_are_rejected() {
        for e in [
            exit(),
            oom(None, None),
            Event::CgroupMkdir(cgroup("/a")),
            signal(SenderPlace::Host(1), SignalOrigin::Priv),
        ] {
            let bytes = encode(&e, PAGE);
            for cut in 0..bytes.len() {
                let err = decode(&bytes[..cut], PAGE).unwrap_err();
                let expected = if cut < 16 { "too_short" } else { "truncated" };
                assert_eq!(err.label(), expected, "cut at {cut} of {:?}", e.kind());
            }
        }
    }

    #[test]
    fn unknown_kinds_and_bad_lengths_are_rejected() {
        let mut bytes = encode(&exit(), PAGE);
        bytes[0..4].copy_from_slice(&99u32.to_ne_bytes());
        assert_eq!(decode(&bytes, PAGE), Err(DecodeError::UnknownKind(99)));
        let mut bytes = encode(&Event::CgroupMkdir(cgroup("/a")), PAGE);
        // path_len sits at byte 36 of a cgroup record.
        bytes[36..40].copy_from_slice(&10_000u32.to_ne_bytes());
        assert_eq!(decode(&bytes, PAGE), Err(DecodeError::BadPathLength(10_000)));
        let mut bytes = encode(&signal(SenderPlace::Host(1), SignalOrigin::Priv), PAGE);
        // origin sits at byte 28 of a signal record.
        bytes[28..32].copy_from_slice(&7u32.to_ne_bytes());
        assert_eq!(decode(&bytes, PAGE), Err(DecodeError::BadSignalOrigin(7)));
    }

    /// Found by `cargo xtask fuzz` (decode target): a level's usage of
    /// 2^64 - 1 pages read as u64::MAX bytes, which encodes to fewer pages
    /// and so decoded to another usage. A usage past any count the kernel
    /// keeps reads as the page counter's ceiling, and round-trips.
    #[test]
    fn a_usage_past_the_page_counter_round_trips() {
        let page = PAGE;
        let level =
            MemcgLevel { cgroup_id: 3, usage: u64::MAX, max: 0, memsw_usage: u64::MAX - 1, memsw_max: 0, ooms: 7 };
        let used = MemcgUse::from_pages(&level, page);
        assert_eq!(used.usage_bytes, UNLIMITED_PAGES * page);
        assert_eq!(MemcgUse::from_pages(&used.to_pages(page), page), used);
    }

    /// Found by `cargo xtask fuzz` (decode target): a comm of invalid UTF-8
    /// decoded to a longer lossy string, which no longer round-tripped.
    #[test]
    fn non_utf8_comm_and_path_round_trip() {
        let mut bytes = encode(&exit(), PAGE);
        // comm starts at byte 48 of an exit record: "d" then invalid bytes.
        bytes[48..56].copy_from_slice(&[b'd', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0]);
        let e = decode(&bytes, PAGE).unwrap();
        let Event::Exit(x) = &e else { unreachable!() };
        assert_eq!(x.comm, "d??????");
        assert_eq!(decode(&encode(&e, PAGE), PAGE).unwrap(), e);
        // A multi-byte character cut by the kernel's 15-byte limit.
        let mut bytes = encode(&exit(), PAGE);
        let cut = "abcdefghijklmn\u{e9}".as_bytes(); // 16 bytes; the kernel keeps 15
        bytes[48..63].copy_from_slice(&cut[..15]);
        bytes[63] = 0;
        let e = decode(&bytes, PAGE).unwrap();
        let Event::Exit(x) = &e else { unreachable!() };
        assert_eq!(x.comm, "abcdefghijklmn?");
        assert_eq!(decode(&encode(&e, PAGE), PAGE).unwrap(), e);
        let long = Event::CgroupMkdir(cgroup(&"\u{e9}".repeat(300)));
        let again = decode(&encode(&long, PAGE), PAGE).unwrap();
        assert_eq!(decode(&encode(&again, PAGE), PAGE).unwrap(), again);
    }

    /// Also found by the decode fuzz target: a comm with no NUL in its 16
    /// bytes, and a path length that leaves no room for the NUL, cannot
    /// come from the kernel; the 16th comm byte is ignored and such a path
    /// length is rejected.
    #[test]
    fn unterminated_fields_are_bounded() {
        let mut bytes = encode(&exit(), PAGE);
        bytes[48..64].copy_from_slice(b"abcdefghijklmnop");
        let e = decode(&bytes, PAGE).unwrap();
        let Event::Exit(x) = &e else { unreachable!() };
        assert_eq!(x.comm, "abcdefghijklmno");
        assert_eq!(decode(&encode(&e, PAGE), PAGE).unwrap(), e);
        let mut bytes = encode(&Event::CgroupMkdir(cgroup("/a")), PAGE);
        bytes[36..40].copy_from_slice(&(CGROUP_PATH_LEN as u32).to_ne_bytes());
        assert_eq!(decode(&bytes, PAGE), Err(DecodeError::BadPathLength(CGROUP_PATH_LEN as u32)));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
            let _ = decode(&bytes, PAGE);
        }

        #[test]
        fn arbitrary_exits_round_trip(pid in any::<u32>(), code in any::<u8>(), sig in 1u8..65,
                                      signalled in any::<bool>(), comm in "[a-z]{0,15}") {
            let status = if signalled { ExitStatus::Signal { signo: sig, core_dumped: false } }
                         else { ExitStatus::Code(code) };
            let e = Event::Exit(Exit { ts_ns: 1, pid, tgid: pid, ppid: 0, status, cgroup_id: Some(1),
                                       untracked: false, start_ns: 2, comm, group_dead: true });
            prop_assert_eq!(decode(&encode(&e, PAGE), PAGE).unwrap(), e);
        }
    }
}
