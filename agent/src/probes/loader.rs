//! Loads the eBPF object with this kernel's offsets, attaches every program,
//! seeds the per-task table from /proc, and hands out the ring buffer and the
//! kernel counters. Dropping [`Probes`] detaches everything.

use std::path::Path;

use agent_common::{
    names, MemcgOffsets, OomControlOffsets, ProbeConfig, RuntimeComms, SignalOffsets, TaskOffsets, TracepointOffsets,
    ABSENT, COMM_LEN, MAX_RUNTIME_COMMS, PIDS_PER_SLOT,
};
use aya::{
    maps::{Array, MapData, PerCpuArray, RingBuf},
    programs::{FEntry, RawTracePoint, TracePoint},
    util::KernelVersion,
    Ebpf, EbpfLoader,
};

use super::{
    btf::{Btf, BtfError},
    cgroups::{CgroupError, CgroupLayout},
    counters::KernelCounters,
    landlock::{with_reads_only_beneath, Confinement},
    offsets::{memcg_offsets, oom_control_offsets, signal_offsets, task_offsets},
    tracefs::{Tracefs, TracefsError},
    tracker::CgroupTracker,
};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("sandwatch needs root (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN); running as uid {uid} without them")]
    NotPrivileged { uid: u32 },
    #[error("unsupported kernel {0}: sandwatch needs Linux 5.8 or newer (BPF ring buffer)")]
    UnsupportedKernel(String),
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    #[error(transparent)]
    Btf(#[from] BtfError),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error("loading the eBPF object failed: {0}")]
    Object(#[from] aya::EbpfError),
    #[error("eBPF program {name} failed to load or attach: {source}")]
    Program { name: &'static str, source: aya::programs::ProgramError },
    #[error("eBPF map {0} is missing from the object")]
    MissingMap(&'static str),
    #[error("eBPF map {name}: {source}")]
    Map { name: &'static str, source: aya::maps::MapError },
    #[error("mapping the eBPF map POD_PIDS into memory failed: {0}")]
    MapMemory(std::io::Error),
    #[error("ring buffer size {0} must be a power of two and a multiple of the page size")]
    RingBufferSize(u32),
    #[error("Linux {kernel} charges eBPF maps to RLIMIT_MEMLOCK ({limit}) and raising it failed ({source}): the agent needs CAP_SYS_RESOURCE on kernels before 5.11")]
    Memlock { kernel: String, limit: String, source: std::io::Error },
}

/// What the loader may be told.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// The exit records' ring.
    pub ring_buffer_bytes: u32,
    /// The ring of OOM kills.
    pub oom_ring_bytes: u32,
    /// The ring of cgroup changes.
    pub cgroup_ring_bytes: u32,
    /// The ring of signals' senders.
    pub signal_ring_bytes: u32,
    /// How often the reader drains records that did not wake it.
    pub drain_interval: std::time::Duration,
    /// After this long without a record the reader stops its drain timer
    /// and has the programs wake it for the next one.
    pub idle_after: std::time::Duration,
    /// Per-task table capacity; `None` sizes it from pid_max.
    pub task_table_entries: Option<u32>,
    /// Entries one tracked cgroup's tasks may hold; `None`: an eighth of
    /// the table.
    pub task_table_quota: Option<u32>,
    /// Process names of container runtimes: their exits are streamed
    /// wherever they run (at most four; longer names are cut to 15 bytes,
    /// as the kernel cuts comm).
    pub runtime_names: Vec<String>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            ring_buffer_bytes: DEFAULT_RING_BUFFER_BYTES,
            oom_ring_bytes: DEFAULT_OOM_RING_BYTES,
            cgroup_ring_bytes: DEFAULT_CGROUP_RING_BYTES,
            signal_ring_bytes: DEFAULT_SIGNAL_RING_BYTES,
            drain_interval: std::time::Duration::from_millis(DEFAULT_DRAIN_INTERVAL_MS.into()),
            idle_after: DEFAULT_IDLE_AFTER,
            task_table_entries: None,
            task_table_quota: None,
            runtime_names: ["containerd", "crio", "dockerd"].map(String::from).to_vec(),
        }
    }
}

/// The runtime names as the kernel compares them: comm, NUL-padded.
fn runtime_comms(names: &[String]) -> RuntimeComms {
    let mut comms = RuntimeComms::UNSET;
    for (slot, name) in comms.names.iter_mut().zip(names.iter().take(MAX_RUNTIME_COMMS)) {
        let bytes = name.as_bytes();
        let n = bytes.len().min(COMM_LEN - 1);
        slot[..n].copy_from_slice(&bytes[..n]);
    }
    comms.count = names.len().min(MAX_RUNTIME_COMMS) as u32;
    comms
}

/// 1 MiB holds ~13 000 exit records, far more than an exit storm produces
/// between two drains (see `cargo xtask bench`). The kernel maps the data
/// pages twice, so the agent's RSS shows twice this.
pub const DEFAULT_RING_BUFFER_BYTES: u32 = 1024 * 1024;

/// Routine records wait at most this long for the reader.
pub const DEFAULT_DRAIN_INTERVAL_MS: u32 = 25;

/// OOM kills have a ring of their own: ~340 records, each waking the
/// reader at once (a group kill of a container of hundreds of processes
/// comes in a burst). Mapped twice, as the others, and wholly resident:
/// the kernel maps a ring's pages in at once (its RSS is twice its size).
pub const DEFAULT_OOM_RING_BYTES: u32 = 128 * 1024;

/// Cgroup changes have a ring of their own: ~290 records, far more than a
/// node's pod churn between two drains (what a tenant nests below its
/// container sends none); one lost is recovered from the tree. The two
/// small rings together are the size of the one they replaced.
pub const DEFAULT_CGROUP_RING_BYTES: u32 = 128 * 1024;

/// Signals that end a pod's process, and requests to stop from outside its
/// container, have a ring of their own: ~630 records, at most one death
/// each (a tenant's own signals that end nothing send none), so that an
/// exit storm never costs the sender of a kill.
pub const DEFAULT_SIGNAL_RING_BYTES: u32 = 64 * 1024;

/// The ring buffers and the flag that tells the programs their reader sleeps.
pub struct Ring {
    /// Exits.
    pub events: RingBuf<MapData>,
    /// OOM kills, which nothing else crowds out.
    pub oom_kills: RingBuf<MapData>,
    /// Cgroup changes.
    pub cgroups: RingBuf<MapData>,
    /// Signals' senders.
    pub signals: RingBuf<MapData>,
    pub asleep: ReaderFlag,
}

/// The `READER` map's one slot: while it is set, every routine record wakes
/// the reader (see `reader::run`).
pub struct ReaderFlag(Array<MapData, u32>);

impl ReaderFlag {
    pub fn set(&mut self, asleep: bool) -> Result<(), aya::maps::MapError> {
        self.0.set(0, u32::from(asleep), 0)
    }
}

/// A reader that found nothing for this long sleeps until a record wakes it.
pub const DEFAULT_IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Loaded, attached programs. Dropping it detaches them.
pub struct Probes {
    ebpf: Ebpf,
    ring: Option<Ring>,
    logger: Option<Logger>,
    tracker: Option<CgroupTracker>,
    layout: CgroupLayout,
    /// The attached programs, by name.
    hooks: Vec<&'static str>,
    path: KernelPath,
    decision: OomDecision,
    /// Why the senders of signals are not read on this kernel, if they
    /// are not.
    signals_unread: Option<String>,
}

/// Cgroups the tracked-cgroup map can hold: every pod and container of a
/// node, and the cgroups created since the agent last pruned.
pub const TRACKED_CGROUPS: u32 = 16384;

#[cfg(feature = "embed-ebpf")]
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/agent-ebpf"));
/// Built without the programs (fuzzing): loading fails with aya's error.
#[cfg(not(feature = "embed-ebpf"))]
static OBJECT: &[u8] = &[];

/// Capability bits from linux/capability.h.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Checks the effective capabilities of this process.
pub fn check_privileges() -> Result<(), LoadError> {
    let cap_eff = crate::os::proc::effective_capabilities();
    let has = |bit: u32| cap_eff & (1u64 << bit) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        Ok(())
    } else {
        Err(LoadError::NotPrivileged { uid: crate::os::uid() })
    }
}

/// Where which limit fired on an OOM kill is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OomDecision {
    /// The OOM killer's own control, read on the kill path: the memory
    /// cgroup it ran for, and its constraint.
    Kernel,
    /// This kernel lets no program see it (the reason), but its OOM
    /// tracepoint passes the victim's task: the page counters of the
    /// victim's memory cgroups (the one that fired is among them).
    VictimCounters(String),
    /// Neither: the page counters of the allocating task's memory
    /// cgroups, which a kill run for another cgroup is not among.
    TaskCounters(String),
}

impl OomDecision {
    /// The bounded label of `sandwatch_oom_decision_source`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Kernel => "oom_control",
            Self::VictimCounters(_) => "victim_memcg",
            Self::TaskCounters(_) => "allocating_task_memcg",
        }
    }

    pub const LABELS: [&'static str; 3] = ["oom_control", "victim_memcg", "allocating_task_memcg"];
}

/// Whether the OOM victim is named from its own task, so that no program
/// need run at fork: on cgroup v2 (where an exit's cgroup comes from the
/// exiting task too), where `mark_victim`'s raw tracepoint passes the
/// victim's task (upstream 72ba14deb40a, 6.9, and stable kernels that took
/// it; the kernel's BTF prototype says, not its version), and where BTF
/// has the offsets to read the task's cgroup.
fn victim_from_task(unified: bool, passes_task: bool, task: &TaskOffsets) -> bool {
    unified && victim_program(passes_task, task)
}

/// Whether the victim's own program runs at the kill (the OOM tracepoint
/// passes its task): on v2 it names the victim; on v1 and v2 it reads the
/// victim's memory cgroup, whose chain holds the cgroup that fired where
/// the OOM killer's own decision is not seen.
fn victim_program(passes_task: bool, task: &TaskOffsets) -> bool {
    passes_task && task.task_cgroups != ABSENT && task.css_dfl_cgrp != ABSENT
}

/// Which hooks name an OOM victim after it is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum KernelPath {
    /// A program at every fork keeps the task table (cgroup v1, and v2
    /// kernels whose OOM tracepoint does not pass the victim's task).
    ForkTable,
    /// The victim's task, at the kill: one program per process (its exit).
    VictimTask,
}

fn task_table_size(requested: Option<u32>) -> u32 {
    // Every live thread needs a slot; beyond 128k the table costs more
    // kernel memory than a node agent should, and the quotas take over.
    requested.unwrap_or_else(|| crate::os::pid_max().clamp(8192, 131_072))
}

/// What one tracked cgroup may hold of a table of `entries`, and how much
/// of it any cgroup may fill before its last room is kept for the
/// cgroups holding fewer than `rooms::TASK_FLOOR` (an eighth each, by
/// default: no container fills the table, and a new one always finds
/// room for its first processes).
pub fn task_table_rooms(entries: u32, quota: Option<u32>) -> (u32, u32) {
    let quota = quota.unwrap_or(entries / 8).clamp(1, entries);
    (quota, entries - entries / 8)
}

/// Slots of the `POD_PIDS` marks: every thread id up to pid_max where the
/// programs keep the task table (4 MiB at Linux's largest pid_max,
/// 4 194 304); one, unused, where the OOM victim is read off its task.
fn pod_pid_slots(path: KernelPath) -> u32 {
    match path {
        KernelPath::ForkTable => crate::os::pid_max().min(4_194_304).div_ceil(PIDS_PER_SLOT),
        KernelPath::VictimTask => 1,
    }
}

impl Probes {
    pub fn load(opts: &ProbeOptions) -> Result<Self, LoadError> {
        check_privileges()?;
        let (rb, ooms, cgroup_rb) = (opts.ring_buffer_bytes, opts.oom_ring_bytes, opts.cgroup_ring_bytes);
        let signal_rb = opts.signal_ring_bytes;
        for size in [rb, ooms, cgroup_rb, signal_rb] {
            if !size.is_power_of_two() || size < 4096 {
                return Err(LoadError::RingBufferSize(size));
            }
        }
        match KernelVersion::current() {
            Ok(v) if v < KernelVersion::new(5, 8, 0) => return Err(LoadError::UnsupportedKernel(format!("{v:?}"))),
            // Before 5.11 map memory counts against RLIMIT_MEMLOCK (64 KiB
            // by default), far below the ring buffer; later kernels charge
            // the memory cgroup instead.
            Ok(v) if v < KernelVersion::new(5, 11, 0) => raise_memlock(&crate::os::kernel_release())?,
            _ => {}
        }
        let tracefs = Tracefs::find_or_mount()?;
        let tp_offsets: TracepointOffsets = tracefs.offsets()?;
        let btf = Btf::from_sys_fs()?;
        let task: TaskOffsets = task_offsets(&btf)?;
        let passes_task = btf.tracepoint_passes("mark_victim", 0, "task_struct");
        let layout = CgroupLayout::detect()?;
        let oom_control = oom_control_offsets(&btf).unwrap_or_else(|e| {
            log::warn!("the OOM killer's own decision cannot be read on this kernel ({e})");
            OomControlOffsets::UNSET
        });
        let memcg = memcg_offsets(&btf, !layout.is_unified()).unwrap_or_else(|e| {
            log::warn!("which limit fired on an OOM kill cannot be read on this kernel ({e}): every kill says unknown");
            MemcgOffsets::UNSET
        });
        let signals = signal_hook(&btf).map(|o| SignalOffsets { wakeup_bytes: signal_rb / 4, ..o });
        drop(btf);
        let path = if victim_from_task(layout.is_unified(), passes_task, &task) {
            KernelPath::VictimTask
        } else {
            KernelPath::ForkTable
        };
        let tasks = task_table_size(opts.task_table_entries);
        let (task_quota, task_room) = task_table_rooms(tasks, opts.task_table_quota);
        let config = ProbeConfig {
            tracked_hierarchy: layout.hierarchy_id(),
            unified: u32::from(layout.is_unified()),
            victim_task: u32::from(victim_program(passes_task, &task)),
            // A sixteenth of the buffer: a burst wakes the reader long
            // before the buffer is full; quieter traffic waits for its timer.
            wakeup_bytes: rb / 16,
            // Cgroup records are few: a quarter of their ring.
            cgroup_wakeup_bytes: cgroup_rb / 4,
            limit_margin_pages: agent_common::oom_margin_pages(u32::try_from(crate::os::cpus()).unwrap_or(u32::MAX)),
            task_quota,
            task_room,
            exit_ring_bytes: rb,
            oom_ring_bytes: ooms,
            cgroup_ring_bytes: cgroup_rb,
            signal_ring_bytes: signal_rb,
        };
        log::info!(
            "cgroup layout {:?} at {} (namespace root {}); tracefs at {}; OOM victims named {}",
            layout.mode,
            layout.mount.display(),
            layout.ns_root,
            tracefs.root().display(),
            match path {
                KernelPath::VictimTask => "from their task at the kill (no program at fork)",
                KernelPath::ForkTable => "from the task table kept at fork",
            }
        );

        // No CO-RE relocations are needed (offsets come in as globals), so
        // aya need not parse the kernel's BTF; its loader reads it anyway
        // unless the file cannot be read (see `sandbox`). It still reads
        // the kernel version (/proc) and the CPU list.
        let comms = runtime_comms(&opts.runtime_names);
        let pod_pids = pod_pid_slots(path);
        let (ebpf, confinement) =
            with_reads_only_beneath(&[Path::new("/proc"), Path::new("/sys/devices/system/cpu")], || {
                EbpfLoader::new()
                    .btf(None)
                    .override_global(names::TP_OFFSETS, &tp_offsets, true)
                    .override_global(names::TASK_OFFSETS, &task, true)
                    .override_global(names::MEMCG_OFFSETS, &memcg, true)
                    .override_global(names::OOM_CONTROL_OFFSETS, &oom_control, true)
                    .override_global(names::PROBE_CONFIG, &config, true)
                    .override_global(names::RUNTIME_COMMS, &comms, true)
                    .override_global(names::SIGNAL_OFFSETS, signals.as_ref().unwrap_or(&SignalOffsets::UNSET), true)
                    .map_max_entries(names::EVENTS, rb)
                    .map_max_entries(names::OOM_KILLS, ooms)
                    .map_max_entries(names::CGROUP_CHANGES, cgroup_rb)
                    .map_max_entries(names::SIGNALS, signal_rb)
                    .map_max_entries(names::TRACKED, TRACKED_CGROUPS)
                    .map_max_entries(names::TASKS, tasks)
                    .map_max_entries(names::POD_PIDS, pod_pids)
                    .load(OBJECT)
            });
        if let Confinement::Unconfined(why) = confinement {
            log::info!("loading with the kernel's BTF parsed by aya (~12 MiB more at start-up): no Landlock ({why})");
        }
        let mut ebpf = ebpf?;
        // The logger owns the log map; it must outlive program loading.
        let logger = match aya_log::EbpfLogger::init(&mut ebpf) {
            Ok(logger) => Some(logger),
            Err(e) => {
                log::warn!("eBPF log forwarding unavailable: {e}");
                None
            }
        };

        let mut hooks = Vec::new();
        for (name, category) in [(names::PROG_EXIT, "sched"), (names::PROG_OOM, "oom")] {
            attach_tracepoint(&mut ebpf, name, category)?;
            hooks.push(name);
        }
        // Where the task table is kept, the id an exec retires leaves it.
        if path == KernelPath::ForkTable {
            if tp_offsets.exec_pid != ABSENT && tp_offsets.exec_old_pid != ABSENT {
                attach_tracepoint(&mut ebpf, names::PROG_EXEC, "sched")?;
                hooks.push(names::PROG_EXEC);
            } else {
                log::warn!("this kernel's sched_process_exec has no pid and old_pid: the id a thread's exec retires stays in the task table until a host process is given it");
            }
        }
        // The victim's identity: from the table kept at fork, or its task.
        // The victim's identity: from the table kept at fork, or its task;
        // its own program also reads its memory cgroup where it can.
        let victim_task = config.victim_task != 0;
        let identity = [
            (path == KernelPath::ForkTable).then_some((names::PROG_FORK, "sched_process_fork")),
            victim_task.then_some((names::PROG_OOM_TASK, "mark_victim")),
        ];
        // The cgroup programs read the cgroup's struct: where it sits.
        for (name, tracepoint) in identity.into_iter().flatten().chain([
            (names::PROG_MKDIR, "cgroup_mkdir"),
            (names::PROG_RMDIR, "cgroup_rmdir"),
            (names::PROG_ATTACH, "cgroup_attach_task"),
        ]) {
            attach_raw_tracepoint(&mut ebpf, name, tracepoint)?;
            hooks.push(name);
        }
        // The senders of fatal signals, where this kernel's tracepoint
        // passes what the program reads.
        let signals_unread = match signals {
            Ok(_) => {
                attach_raw_tracepoint(&mut ebpf, names::PROG_SIGNAL, "signal_generate")?;
                hooks.push(names::PROG_SIGNAL);
                None
            }
            Err(why) => {
                log::warn!("the senders of signals that end containers are not read on this kernel ({why}): every one reads unknown");
                Some(why)
            }
        };
        let attached = match oom_control.memcg {
            ABSENT => Err("this kernel's BTF lacks struct oom_control".to_string()),
            _ => attach_oom_control(&mut ebpf),
        };
        let decision = match attached {
            Ok(()) => {
                hooks.push(names::PROG_OOM_CONTROL);
                OomDecision::Kernel
            }
            Err(why) if victim_task => OomDecision::VictimCounters(why),
            Err(why) => OomDecision::TaskCounters(why),
        };
        match &decision {
            OomDecision::Kernel => {}
            OomDecision::VictimCounters(why) => log::warn!(
                "which limit fired on an OOM kill is judged from the page counters of the victim's memory cgroups, not the OOM killer's own decision: {why}"
            ),
            OomDecision::TaskCounters(why) => log::warn!(
                "which limit fired on an OOM kill is judged from the page counters of the allocating task's memory cgroups (a kill run for another cgroup can read as the node's), not the OOM killer's own decision: {why}"
            ),
        }
        let tracker = CgroupTracker::new(&mut ebpf, layout.clone(), pod_pids, path, task_quota)?;
        // Hand the memory that loading took (the kernel's BTF above all)
        // back instead of keeping it for the agent's life.
        // SAFETY: malloc_trim has no preconditions.
        #[cfg(target_env = "gnu")]
        unsafe {
            libc::malloc_trim(0)
        };
        // The object is loaded: its 0.9 MiB need not stay resident.
        crate::os::release_pages(OBJECT);
        let events = take_map(&mut ebpf, names::EVENTS)?;
        let events = RingBuf::try_from(events).map_err(|source| LoadError::Map { name: names::EVENTS, source })?;
        let asleep = Array::try_from(take_map(&mut ebpf, names::READER)?)
            .map_err(|source| LoadError::Map { name: names::READER, source })?;
        let ring_of = |ebpf: &mut Ebpf, name: &'static str| {
            RingBuf::try_from(take_map(ebpf, name)?).map_err(|source| LoadError::Map { name, source })
        };
        let oom_kills = ring_of(&mut ebpf, names::OOM_KILLS)?;
        let cgroups = ring_of(&mut ebpf, names::CGROUP_CHANGES)?;
        let signals = ring_of(&mut ebpf, names::SIGNALS)?;
        let ring = Ring { events, oom_kills, cgroups, signals, asleep: ReaderFlag(asleep) };
        Ok(Self {
            ebpf,
            ring: Some(ring),
            logger,
            tracker: Some(tracker),
            layout,
            hooks,
            path,
            decision,
            signals_unread,
        })
    }

    /// The tracked-cgroup map and the task table, once: the watchdog feeds
    /// them the model's verdicts.
    pub fn take_tracker(&mut self) -> Option<CgroupTracker> {
        self.tracker.take()
    }

    /// The ring buffer, once: the reader owns it.
    pub fn take_ring(&mut self) -> Option<Ring> {
        self.ring.take()
    }

    /// The aya-log reader, once: the pipeline polls it.
    pub fn take_logger(&mut self) -> Option<Logger> {
        self.logger.take()
    }

    pub fn layout(&self) -> &CgroupLayout {
        &self.layout
    }

    pub fn programs_attached(&self) -> usize {
        self.hooks.len()
    }

    /// The attached programs' names (`agent_common::names::PROG_*`).
    pub fn hooks(&self) -> &[&'static str] {
        &self.hooks
    }

    /// How OOM victims are named on this kernel.
    pub fn path(&self) -> KernelPath {
        self.path
    }

    /// Where which limit fired is read from on this kernel.
    pub fn oom_decision(&self) -> &OomDecision {
        &self.decision
    }

    /// Why the senders of signals are not read on this kernel; `None`
    /// where they are.
    pub fn signals_unread(&self) -> Option<&str> {
        self.signals_unread.as_deref()
    }

    /// Per-kind kernel counters, read at scrape time.
    pub fn kernel_counters(&mut self) -> Result<KernelCounters, LoadError> {
        let emitted = PerCpuArray::try_from(take_map(&mut self.ebpf, names::EMITTED)?)
            .map_err(|source| LoadError::Map { name: names::EMITTED, source })?;
        let dropped = PerCpuArray::try_from(take_map(&mut self.ebpf, names::DROPPED)?)
            .map_err(|source| LoadError::Map { name: names::DROPPED, source })?;
        let unstreamed = PerCpuArray::try_from(take_map(&mut self.ebpf, names::UNSTREAMED)?)
            .map_err(|source| LoadError::Map { name: names::UNSTREAMED, source })?;
        Ok(KernelCounters { emitted, dropped, unstreamed })
    }
}

pub type Logger = aya_log::EbpfLogger<&'static dyn log::Log>;

pub(super) fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map, LoadError> {
    ebpf.take_map(name).ok_or(LoadError::MissingMap(name))
}

fn attach_tracepoint(ebpf: &mut Ebpf, name: &'static str, category: &str) -> Result<(), LoadError> {
    let err = |source| LoadError::Program { name, source };
    let prog: &mut TracePoint = ebpf.program_mut(name).ok_or(LoadError::MissingMap(name))?.try_into().map_err(err)?;
    prog.load().map_err(err)?;
    prog.attach(category, name).map_err(err)?;
    Ok(())
}

/// The program at the OOM killer's entry (a BPF trampoline). It needs the
/// kernel's BTF as aya parses it (~12 MiB, dropped here and handed back
/// by the trim that ends loading; the rest of loading avoids it); why it
/// cannot attach, in one line.
fn attach_oom_control(ebpf: &mut Ebpf) -> Result<(), String> {
    let btf = aya::Btf::from_sys_fs().map_err(|e| format!("the kernel's BTF cannot be parsed ({e})"))?;
    let prog: &mut FEntry = ebpf
        .program_mut(names::PROG_OOM_CONTROL)
        .ok_or_else(|| format!("program {} is missing from the object", names::PROG_OOM_CONTROL))?
        .try_into()
        .map_err(|e| format!("{e}"))?;
    let attached = prog
        .load(names::OOM_CONTROL_FUNCTION, &btf)
        .and_then(|()| prog.attach().map(|_| ()))
        .map_err(|e| format!("a program at {}() cannot attach ({})", names::OOM_CONTROL_FUNCTION, one_line(&e)));
    drop(btf);
    attached
}

/// An error and its sources on one line.
fn one_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn attach_raw_tracepoint(ebpf: &mut Ebpf, name: &'static str, tracepoint: &str) -> Result<(), LoadError> {
    let err = |source| LoadError::Program { name, source };
    let prog: &mut RawTracePoint =
        ebpf.program_mut(name).ok_or(LoadError::MissingMap(name))?.try_into().map_err(err)?;
    prog.load().map_err(err)?;
    prog.attach(tracepoint).map_err(err)?;
    Ok(())
}

/// The signal program's offsets, where `signal_generate`'s raw tracepoint
/// passes what it reads — `(int sig, struct kernel_siginfo *info, struct
/// task_struct *task, int group, int result)`, by the kernel's BTF
/// prototype, never assumed — and its structs have the members it reads;
/// else why not, in one line.
fn signal_hook(btf: &Btf) -> Result<SignalOffsets, String> {
    let prototype = btf.tracepoint_passes_int("signal_generate", 0)
        && btf.tracepoint_passes("signal_generate", 1, "kernel_siginfo")
        && btf.tracepoint_passes("signal_generate", 2, "task_struct")
        && btf.tracepoint_passes_int("signal_generate", 4);
    if !prototype {
        return Err("its signal_generate tracepoint does not pass (sig, siginfo, task, group, result)".to_string());
    }
    signal_offsets(btf).map_err(|e| e.to_string())
}

/// Lifts RLIMIT_MEMLOCK for this process (needs CAP_SYS_RESOURCE unless
/// it is unlimited already).
fn raise_memlock(kernel: &str) -> Result<(), LoadError> {
    let mut current = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut current) };
    if current.rlim_cur == libc::RLIM_INFINITY {
        return Ok(());
    }
    let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setrlimit reads the struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } == 0 {
        log::info!("raised RLIMIT_MEMLOCK (Linux {kernel} charges eBPF maps to it)");
        return Ok(());
    }
    Err(LoadError::Memlock {
        kernel: kernel.to_string(),
        limit: format!("{} bytes", current.rlim_cur),
        source: std::io::Error::last_os_error(),
    })
}
