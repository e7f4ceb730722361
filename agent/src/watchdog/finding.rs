//! What the watchdog finds: one typed value per fact, the only vocabulary
//! between the core and its outputs. Metrics, log lines and event records
//! are three consumers of a [`Finding`] (see `telemetry`); each matches on
//! every variant, so a new kind of fact is one variant here and the
//! compiler points at every consumer.
//!
//! A fact is counted when the core first knows it. Facts an operator reads
//! by name (a sandbox death, a pod's OOM series) wait for the runtime to
//! name their pod, at most a few seconds, and come as a finding of their
//! own then: [`Finding::SandboxDeath`] after the [`Finding::TaskExit`] that
//! counted it, [`Finding::PodOom`] after the [`Finding::OomEvent`].

use super::{
    correlation::Expired,
    crashes::CrashReason,
    explain::{Explanation, OomCause},
    limits::{LimitChange, LimitReads, Lowered},
    oom_limit::UnknownLimit,
    pressure::{Figures, PressureChange, PressureReads, PressureReason, Warned},
    senders::SignalEnd,
    storm::StormEdge,
    verdicts::Verdict,
    Fired, OomScope,
};
use crate::{
    events::{kernel::OomRss, ExitStatus},
    model::{registry::Evictions, DeathCause, ExitReason, ExitReport, LateReason, Names, OomReport, PodRef, QosClass},
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// A whole process ended, as the kernel reported it, classified.
    TaskExit(ExitReport),
    /// Processes outside any pod that the kernel only counted.
    HostExits { count: u64 },
    /// An exit handled after its sandbox, container or task was gone.
    LateExit(LateExit),
    /// A pod sandbox died, with the names known.
    SandboxDeath(SandboxDeath),
    /// A container's init ended (or its start did), with the names known.
    ContainerExit(ContainerExit),
    /// A process was OOM-killed (boxed: its explanation makes it twice the
    /// size of any other finding).
    OomKill(Box<OomKill>),
    /// One pick of the OOM killer is over: one process, or a whole
    /// container killed as a group.
    OomEvent {
        scope: OomScope,
        qos: Option<QosClass>,
        victims: u32,
        fired: Fired,
        cause: OomCause,
        /// Why `fired` is unknown, where it is.
        unknown: Option<UnknownLimit>,
    },
    /// An OOM event of a pod, named: its per-pod series.
    PodOom(PodOom),
    /// A torn-down pod's per-pod series may go now (their grace is over).
    PodSeriesExpired { pod_uid: String },
    /// The OOM-churn window moved: the node's storm, and the namespaces
    /// in one of their own.
    OomWindow { events: u64, window_secs: u64, storm: bool, storming: Vec<super::storm::Storming> },
    /// The OOM storm flag rose or fell.
    OomStorm(StormEdge),
    /// The pod model changed: what it holds, what its bounds refused.
    Model(ModelStats),
    /// Cgroup changes lost with dropped events were applied from the tree
    /// (`reread`: the tree was read again for it).
    CgroupResync { reread: bool, created: u64, removed: u64 },
    /// The kernel's tracked-cgroup map had no room for a pod's cgroup.
    TrackingFull { cgroup_id: u64 },
    /// A pipeline stage lost events in the last second.
    EventsLost { stage: LossStage, count: u64 },
    /// A container runtime process ended without being asked to.
    RuntimeCrash { runtime: String, pid: u32, reason: CrashReason },
    /// A container runtime process ended as asked.
    RuntimeStopped { runtime: String, pid: u32 },
    /// A container runtime runs again after it was down.
    RuntimeRestart { runtime: String, pid: u32 },
    /// Whether a process of a configured runtime runs.
    RuntimeUp { runtime: String, up: bool },
    /// From the kernel's exit of a container init to the runtime's TaskExit.
    ExitLag { lag_ns: u64 },
    /// Kernel OOM kills the runtime also reported as OOM.
    OomMatched { count: u64 },
    /// What settled unmatched between the kernel and the runtime (deltas).
    Mismatch(Expired),
    /// A container's memory pressure rose or cleared, for one reason.
    MemoryPressure(Box<MemoryPressure>),
    /// Once a tick: the containers under memory pressure now, and what the
    /// watch cost.
    PressureLevels(PressureLevels),
    /// A pod's or container's memory limit moved.
    LimitChange(Box<LimitChanged>),
    /// Once a tick: the cgroups whose limits are watched, what it cost,
    /// and the watches the kernel refused.
    LimitsWatched { watched: usize, reads: LimitReads, failures: super::host::WatchFailures },
    /// A container init's end as the runtime reported it (TaskExit, the
    /// CRI's status) against the kernel's.
    RuntimeVerdict(Box<Verdict>),
    /// Once a tick: signals of live processes forgotten (a process's whole
    /// record, the table full or the pod's share of it taken; or one
    /// signal its process's full record had no room for), since start.
    SignalsForgotten { total: u64 },
}

/// Where the pipeline can lose events before the watchdog sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum LossStage {
    /// The ring buffer was full.
    Kernel,
    /// The reader's queue to the decoder was full.
    Channel,
    /// A record did not decode.
    Decode,
}

/// An OOM kill: the dispatcher's report, its explanation (whose limit
/// fired, what filled it), the names known then, and the victim's and the
/// triggering task's side as the kernel says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomKill {
    pub report: OomReport,
    pub explained: Explanation,
    pub names: Names,
    /// The victim's resident memory when it was picked (kernels whose OOM
    /// tracepoint says it).
    pub victim_rss: Option<VictimRss>,
    pub oom_score_adj: i32,
    /// The container of the task that ran out of memory, where it is not
    /// the victim's: its id and names.
    pub trigger_container: Option<(String, Names)>,
    /// Whether, how long before, and of what the victim's container was
    /// warned (its memory pressure); `None`: it was not.
    pub warned: Option<Warned>,
    /// The limit that fired was lowered shortly before (within
    /// `limits::LOWERED_WINDOW_NS`): from what, to what, how long before.
    pub lowered: Option<Lowered>,
    /// When the kernel picked it (CLOCK_BOOTTIME ns).
    pub ts_ns: u64,
}

/// A memory limit moved, with the pod (and container) it is of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitChanged {
    /// The pod; its container, unless the pod's own limit moved.
    pub pod: PodRef,
    pub names: Names,
    pub change: LimitChange,
}

/// An OOM victim's resident memory when the OOM killer picked it, by
/// kind, as the kernel counted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VictimRss {
    pub anon_bytes: u64,
    pub file_bytes: u64,
    pub shmem_bytes: u64,
}

impl VictimRss {
    /// All of it: anon + file + shmem.
    pub fn total_bytes(&self) -> u64 {
        self.anon_bytes.saturating_add(self.file_bytes).saturating_add(self.shmem_bytes)
    }
}

/// The kernel's figures are in kB.
impl From<OomRss> for VictimRss {
    fn from(rss: OomRss) -> Self {
        let bytes = |kb: u64| kb.saturating_mul(1024);
        Self {
            anon_bytes: bytes(rss.anon_rss_kb),
            file_bytes: bytes(rss.file_rss_kb),
            shmem_bytes: bytes(rss.shmem_rss_kb),
        }
    }
}

/// A sandbox death with the process that died.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxDeath {
    pub report: ExitReport,
    pub cause: DeathCause,
    pub names: Names,
    pub pid: u32,
    pub comm: String,
    pub ts_ns: u64,
}

/// A container exit: the process that ended, how, and why it counts so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerExit {
    pub report: ExitReport,
    pub reason: ExitReason,
    pub status: ExitStatus,
    pub names: Names,
    pub pid: u32,
    pub comm: String,
    pub ts_ns: u64,
    /// Who sent the signal that ended it, where one did.
    pub ended: Option<SignalEnd>,
}

/// A late exit, as its source (kernel or runtime) told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateExit {
    pub report: ExitReport,
    pub reason: LateReason,
    pub names: Names,
    pub pid: Option<u32>,
    pub comm: Option<String>,
    /// When it happened (CLOCK_BOOTTIME ns).
    pub ts_ns: u64,
}

/// An OOM event in its pod's series: the event's report (its role the
/// event's) and the names known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodOom {
    pub report: OomReport,
    pub fired: Fired,
    pub cause: OomCause,
    pub names: Names,
    /// How long before the kill its container was first warned of memory
    /// pressure; `None`: it was not.
    pub warned_for_ns: Option<u64>,
}

/// What the pod model holds now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelStats {
    pub sandboxes: usize,
    pub containers: usize,
    /// Container inits alive and known.
    pub processes: usize,
    /// Containers killed as a whole on OOM (`memory.oom.group`).
    pub oom_group_containers: usize,
    /// Totals since start.
    pub evictions: Evictions,
    /// Names held from the runtime's listing.
    pub named_pods: usize,
    pub named_containers: usize,
    /// Names dropped from the full cache, since start.
    pub names_evicted: u64,
    /// Pods held, by the namespace the runtime named (unnamed pods are
    /// not counted), sorted by namespace.
    pub namespaces: Vec<(String, usize)>,
}

/// An episode of a container's memory pressure started or ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPressure {
    pub pod: PodRef,
    pub names: Names,
    pub reason: PressureReason,
    pub change: PressureChange,
    /// When the episode started (CLOCK_BOOTTIME ns).
    pub since_ns: u64,
    /// When this edge was read.
    pub ts_ns: u64,
    pub figures: Figures,
}

/// The containers under memory pressure now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PressureLevels {
    pub containers: Vec<ContainerPressure>,
    /// Reads since start.
    pub reads: PressureReads,
    /// Workload containers watched.
    pub watched: usize,
}

/// One container under memory pressure: its reasons and figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPressure {
    pub pod: PodRef,
    pub names: Names,
    pub reasons: Vec<PressureReason>,
    pub figures: Figures,
}
