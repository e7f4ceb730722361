//! The watchdog core: kernel events, runtime events and the passing of
//! time in, [`Finding`]s out. It owns the state that spans events (the pod
//! model's dispatcher, OOM bursts and the storm window, reports waiting for
//! names, the kernel/runtime correlation, the runtime's processes, the
//! per-pod series' grace) and nothing else.
//!
//! It does no I/O and reads no clock: every entry point takes the time,
//! and what it must learn from the node it asks through [`Host`]. So its
//! behaviour is unit-tested with a fake host, as a normal user, in
//! milliseconds; the agent loop, the privileged tests and the benchmarks
//! drive the same code with the real one (`crate::node`).
//!
//! Each entry point returns the findings of what it was handed, in order,
//! drained from a buffer the core reuses (the exit path is hot).

pub mod correlation;
pub mod crashes;
pub mod finding;
pub mod host;
pub mod oom_events;
pub mod oom_limit;
pub mod storm;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};

pub use finding::{ContainerExit, Finding, LateExit, LossStage, ModelStats, OomKill, PodOom, SandboxDeath};
pub use host::{CgroupTree, Host, LossTotals};
pub use oom_events::{OomEvent, OomScope};
pub use oom_limit::{Fired, OomConstraint, OomLimit};

use self::{
    correlation::{Correlator, CorrelatorLimits, Expired},
    crashes::{RuntimeChange, RuntimeProcesses},
    oom_events::{OomEvents, GROUP_GAP_NS},
    storm::{Storm, StormSettings, StormState},
};
use crate::{
    events::{
        kernel::{CgroupChange, Exit, OomKill as KernelOomKill},
        Event, RuntimeEvent,
    },
    host::Now,
    model::{
        cgroup_path, dispatch::runtime_exit, metadata::Snapshot, Dispatcher, ExitReport, Limits, Names, OomReport,
        Outcome, PodRef, PodRegistry, Report, TaskRole,
    },
};

/// Ticks (seconds) between /proc scans for runtime processes while none
/// is awaited back.
const SLOW_SCAN_TICKS: u64 = 30;

/// How long an OOM event's per-pod series, or a sandbox death's log line
/// and record, waits for the runtime to name a container it has not
/// listed yet (one killed as it starts, typically).
pub const NAME_WAIT_NS: u64 = 10 * 1_000_000_000;
/// Reports waiting for names, at most; beyond, they go out at once.
const MAX_AWAITING_NAMES: usize = 1024;

/// How long after a container cgroup appears its `memory.oom.group` is
/// read again each tick (the runtime writes it just after creating the
/// cgroup), and for how many containers at most.
const MODE_CHECK_NS: u64 = 10 * 1_000_000_000;
const MAX_MODE_CHECKS: usize = 1024;

/// Torn-down pods whose per-pod series wait for their grace, at most;
/// beyond, the oldest goes early.
const MAX_RETIRING: usize = 16384;

/// Cgroups whose count of limit hits is remembered, at most (containers,
/// pods and the kubelet's cgroups above them); beyond, new ones are not,
/// and their OOM kills read `unknown`.
const MAX_LIMIT_BASELINES: usize = 65536;

/// What the core is configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The pod model's bounds.
    pub limits: Limits,
    pub storm: StormSettings,
    /// A torn-down pod's per-pod series expire this long after its cgroup
    /// went (late events still count meanwhile); `None` keeps them.
    pub pod_series_ttl_ns: Option<u64>,
    /// The container runtime's side; `None`: kernel events only.
    pub runtime: Option<RuntimeSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            storm: StormSettings::default(),
            pod_series_ttl_ns: Some(900 * 1_000_000_000),
            runtime: None,
        }
    }
}

/// The runtime's side: whose processes are watched, and how long each side
/// waits for the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeSettings {
    /// Process names (comm) of container runtimes.
    pub names: Vec<String>,
    pub correlation: CorrelatorLimits,
}

/// Findings that wait for names.
#[derive(Debug)]
enum Awaiting {
    PodOom(PodOom),
    Death(SandboxDeath),
    Exit(ContainerExit),
}

impl Awaiting {
    fn pod(&self) -> Option<&PodRef> {
        match self {
            Awaiting::PodOom(p) => p.report.pod.as_ref(),
            Awaiting::Death(d) => d.report.pod.as_ref(),
            Awaiting::Exit(e) => e.report.pod.as_ref(),
        }
    }

    /// The finding, with the names known now.
    fn named(self, names: Names) -> Finding {
        match self {
            Awaiting::PodOom(p) => Finding::PodOom(PodOom { names, ..p }),
            Awaiting::Death(d) => Finding::SandboxDeath(SandboxDeath { names, ..d }),
            Awaiting::Exit(e) => Finding::ContainerExit(ContainerExit { names, ..e }),
        }
    }
}

/// The runtime's view against the kernel's.
#[derive(Debug)]
struct RuntimeSide {
    correlator: Correlator,
    processes: RuntimeProcesses,
    /// What expiry had settled when last reported.
    reported: Expired,
    ticks: u64,
}

/// The pipeline's loss counters when last looked at.
#[derive(Debug, Default)]
struct LossWatch {
    seen: LossTotals,
}

impl LossWatch {
    /// Events lost that may have been a cgroup's mkdir or rmdir: the
    /// kernel's drops of those kinds, and every channel or decode loss.
    fn cgroup_losses(t: &LossTotals) -> u64 {
        t.kernel_cgroup_changes + t.channel + t.decode
    }
}

pub struct Watchdog<H> {
    host: H,
    dispatcher: Dispatcher,
    /// OOM victims grouped into the OOM killer's picks.
    oom_events: OomEvents,
    storm: Storm,
    runtime: Option<RuntimeSide>,
    /// Containers created lately whose `memory.oom.group` is read again.
    mode_checks: VecDeque<(u64, u64)>,
    /// Findings that wait for names, with when they started waiting.
    awaiting: VecDeque<(Awaiting, u64)>,
    losses: LossWatch,
    /// When the cgroup tree was last read after a loss (boot time, ns): a
    /// mkdir produced before it may name a cgroup the read did not see
    /// because it was gone already, its rmdir lost.
    resynced_ns: u64,
    /// Torn-down pods, oldest first, with when their series expire.
    retiring: VecDeque<(String, u64)>,
    pod_series_ttl_ns: Option<u64>,
    /// The registry generation last reported in a `Model` finding.
    reported_generation: Option<u64>,
    tasks_seeded: usize,
    /// Each cgroup's count of limit hits when last read (path → count),
    /// for which limit fired on the next OOM kill.
    limit_baselines: HashMap<String, u64>,
    out: Vec<Finding>,
}

/// The findings of one call.
pub type Findings<'a> = std::vec::Drain<'a, Finding>;

impl<H: Host> Watchdog<H> {
    pub fn new(host: H, settings: Settings) -> Self {
        let losses = LossWatch { seen: host.losses() };
        let runtime = settings.runtime.map(|r| RuntimeSide {
            correlator: Correlator::new(r.correlation),
            processes: RuntimeProcesses::new(&r.names),
            reported: Expired::default(),
            ticks: 0,
        });
        Self {
            host,
            dispatcher: Dispatcher::new(PodRegistry::new(settings.limits)),
            oom_events: OomEvents::default(),
            storm: Storm::new(settings.storm),
            runtime,
            mode_checks: VecDeque::new(),
            awaiting: VecDeque::new(),
            losses,
            resynced_ns: 0,
            retiring: VecDeque::new(),
            pod_series_ttl_ns: settings.pod_series_ttl_ns,
            reported_generation: None,
            tasks_seeded: 0,
            limit_baselines: HashMap::new(),
            out: Vec::new(),
        }
    }

    pub fn registry(&self) -> &PodRegistry {
        &self.dispatcher.registry
    }

    pub fn host(&self) -> &H {
        &self.host
    }

    pub fn host_mut(&mut self) -> &mut H {
        &mut self.host
    }

    /// Threads of pod cgroups put into the kernel's task table at start-up.
    pub fn tasks_seeded(&self) -> usize {
        self.tasks_seeded
    }

    /// Learns what exists already (cgroup tree and /proc), has the kernel
    /// track the pods' cgroups and their tasks, and looks for the runtime.
    pub fn discover(&mut self, now_ns: u64) -> Findings<'_> {
        let mut pods = HashSet::new();
        for event in self.host.scan(now_ns) {
            self.dispatcher.dispatch(&event, now_ns);
            if let Event::CgroupMkdir(c) = &event {
                self.read_oom_group(c.cgroup_id);
                if self.dispatcher.registry.owner(c.cgroup_id).is_some() {
                    pods.insert(c.cgroup_id);
                }
            }
        }
        self.dispatcher.registry.found_running();
        // What each pod's and container's limit counters say now: an OOM
        // kill compares with it.
        let paths: Vec<String> = self.dispatcher.registry.pod_cgroup_paths().collect();
        for path in paths {
            self.baseline_limits(&path, None);
        }
        for &cgroup_id in &pods {
            if !self.host.track(cgroup_id) {
                self.out.push(Finding::TrackingFull { cgroup_id });
            }
        }
        self.tasks_seeded = self.host.seed_tasks(&pods);
        self.ask_names();
        self.scan_runtimes();
        self.report_model();
        self.out.drain(..)
    }

    /// One kernel event, `now_ns` being when it is handled.
    pub fn on_kernel(&mut self, event: &Event, now_ns: u64) -> Findings<'_> {
        self.kernel(event, now_ns);
        self.out.drain(..)
    }

    /// One event of the runtime's stream.
    pub fn on_runtime(&mut self, event: &RuntimeEvent, now: Now) -> Findings<'_> {
        self.runtime_event(event, now);
        self.out.drain(..)
    }

    /// A listing of the runtime's pods and containers.
    pub fn on_metadata(&mut self, snapshot: &Snapshot, now_ns: u64) -> Findings<'_> {
        self.metadata(snapshot, now_ns);
        self.out.drain(..)
    }

    /// Once a second: OOM bursts close, the churn window slides on, what
    /// waited for names or for its grace goes out, lost cgroup changes are
    /// recovered, losses are reported, runtime processes are looked for
    /// and pending correlations settle.
    pub fn on_tick(&mut self, now_ns: u64) -> Findings<'_> {
        self.close_oom_events(now_ns, now_ns);
        self.recheck_modes(now_ns);
        self.report_model();
        let state = self.storm.update(now_ns);
        self.report_storm(state);
        self.retire(now_ns);
        self.release_named(now_ns);
        let totals = self.host.losses();
        if LossWatch::cgroup_losses(&totals) > LossWatch::cgroup_losses(&self.losses.seen) {
            self.resync(now_ns);
        }
        self.report_losses(totals);
        if let Some(side) = self.runtime.as_mut() {
            side.ticks += 1;
            // Exits tell when a runtime goes; /proc is read every second
            // only while one that ran is down.
            if side.processes.awaiting_restart() || side.ticks % SLOW_SCAN_TICKS == 0 {
                self.scan_runtimes();
            }
        }
        if let Some(side) = self.runtime.as_mut() {
            side.correlator.expire(now_ns);
            let now = side.correlator.expired;
            let delta = Expired {
                runtime_exits_unmatched: now.runtime_exits_unmatched - side.reported.runtime_exits_unmatched,
                kernel_only_ooms: now.kernel_only_ooms - side.reported.kernel_only_ooms,
                runtime_only_ooms: now.runtime_only_ooms - side.reported.runtime_only_ooms,
                evicted: now.evicted - side.reported.evicted,
            };
            side.reported = now;
            if delta != Expired::default() {
                self.out.push(Finding::Mismatch(delta));
            }
        }
        self.out.drain(..)
    }

    /// At shutdown: what still waits (an OOM event's burst, names for a
    /// series or a death) goes out with what is known.
    pub fn flush(&mut self, now_ns: u64) -> Findings<'_> {
        let later = now_ns.saturating_add(GROUP_GAP_NS + 1);
        self.close_oom_events(later, later);
        // Including what the bursts just closed handed over to wait.
        while let Some((what, _)) = self.awaiting.pop_front() {
            let names = self.names(what.pod());
            self.out.push(what.named(names));
        }
        self.out.drain(..)
    }

    fn kernel(&mut self, event: &Event, now: u64) {
        // The kernel used the setting as it is now; read it before the
        // victim is classified (the cgroup still exists while its processes
        // are being killed).
        if let Event::OomKill(o) = event {
            if let Some(id) = o.victim.map(|v| v.cgroup_id) {
                if self.dispatcher.registry.container_of(id).is_some_and(|c| c.oom_group != Some(true)) {
                    self.read_oom_group(id);
                }
            }
        }
        // A kernel whose OOM tracepoint does not name the victim (5.10),
        // when the victim was not the task that ran out of memory: /proc,
        // while it is not reaped; otherwise its comm stays absent.
        let named;
        let event = match event {
            Event::OomKill(o) if o.victim_comm.is_empty() => {
                let start = o.victim.map_or(0, |v| v.start_ns);
                let comm = self.host.comm(o.victim_pid, start).unwrap_or_default();
                named = Event::OomKill(KernelOomKill { victim_comm: comm, ..o.clone() });
                &named
            }
            _ => event,
        };
        let gone_already = match event {
            Event::CgroupMkdir(c) => self.gone_already(c, now),
            _ => None,
        };
        if let Event::CgroupRmdir(c) = event {
            self.limit_baselines.remove(&c.path);
        }
        let report = self.dispatcher.dispatch(event, now);
        if let Event::CgroupMkdir(c) = event {
            // A cgroup made now has hit no limit yet.
            if self.dispatcher.registry.owner(c.cgroup_id).is_some() && gone_already.is_none() {
                self.baseline_limits(&c.path, Some(0));
            }
            if self.read_oom_group(c.cgroup_id) && self.mode_checks.len() < MAX_MODE_CHECKS {
                self.mode_checks.push_back((c.cgroup_id, now));
            }
            // The kernel tracks every new cgroup from its mkdir; one that
            // is no pod's goes back to being counted there.
            if self.dispatcher.registry.owner(c.cgroup_id).is_none() {
                self.host.untrack(c.cgroup_id);
            }
        }
        match (report, event) {
            (Some(Report::Exit(r)), Event::Exit(e)) => self.kernel_exit(r, e, now),
            (Some(Report::Oom(r)), Event::OomKill(o)) => self.oom_kill(r, o),
            (None, _) => self.ask_names(),
            _ => {}
        }
        // By the event's own time, not the clock: a backlog (a slow or
        // stalled agent) must not end a burst whose victims still queue.
        self.close_oom_events(event.ts_ns(), now);
        for pod_uid in self.dispatcher.registry.take_gone_pods() {
            self.pod_gone(pod_uid, now);
        }
        self.report_model();
        if let Some(rmdir) = gone_already {
            self.kernel(&rmdir, now);
            self.out.push(Finding::CgroupResync { reread: false, created: 0, removed: 1 });
        }
    }

    fn kernel_exit(&mut self, r: ExitReport, e: &Exit, now: u64) {
        if let Some(side) = self.runtime.as_mut() {
            // A process in a pod is never the runtime, whatever its name.
            if let Some(change) = side.processes.exited(e.tgid, &e.comm, e.status, r.pod.is_some()) {
                self.out.push(runtime_change(change));
                self.report_runtimes_up();
            }
        }
        if let (Some(side), TaskRole::Sandbox | TaskRole::ContainerInit) = (self.runtime.as_mut(), r.role) {
            if let Some(lag_ns) = side.correlator.kernel_exit(e.tgid, e.ts_ns) {
                self.out.push(Finding::ExitLag { lag_ns });
            }
        }
        let late = match r.outcome {
            Outcome::Late(reason) => Some(LateExit {
                report: r.clone(),
                reason,
                names: self.names(r.pod.as_ref()),
                pid: Some(e.tgid),
                comm: Some(e.comm.clone()),
                ts_ns: e.ts_ns,
            }),
            _ => None,
        };
        let death = r.sandbox_death.map(|cause| SandboxDeath {
            report: r.clone(),
            cause,
            names: Names::default(),
            pid: e.tgid,
            comm: e.comm.clone(),
            ts_ns: e.ts_ns,
        });
        let container_exit = match (r.outcome, r.container_exit) {
            (Outcome::Handled, Some(reason)) => Some(ContainerExit {
                report: r.clone(),
                reason,
                status: e.status,
                names: Names::default(),
                pid: e.tgid,
                comm: e.comm.clone(),
                ts_ns: e.ts_ns,
            }),
            _ => None,
        };
        self.out.push(Finding::TaskExit(r));
        if let Some(late) = late {
            self.out.push(Finding::LateExit(late));
        }
        if let Some(death) = death {
            self.defer(Awaiting::Death(death), now);
        }
        if let Some(exit) = container_exit {
            self.defer(Awaiting::Exit(exit), now);
        }
    }

    fn oom_kill(&mut self, mut r: OomReport, o: &KernelOomKill) {
        let container = o.victim.and_then(|v| self.dispatcher.registry.container_of(v.cgroup_id));
        let group_mode = container.is_some_and(|c| c.oom_group == Some(true));
        let path = container.map(|c| c.path.clone());
        let mut fired = match path {
            Some(path) => self.which_limit_fired(&path),
            // Not a pod's container: no container or pod limit to read.
            None => Fired::UNKNOWN,
        };
        self.oom_events.victim(&mut r, &mut fired, o.ts_ns, group_mode);
        if let (Some(side), Some(container)) =
            (self.runtime.as_mut(), r.pod.as_ref().and_then(|p| p.container_id.as_deref()))
        {
            if self.host.stream_up() && side.correlator.kernel_oom(container, o.ts_ns) {
                self.out.push(Finding::OomMatched { count: 1 });
            }
        }
        let names = self.names(r.pod.as_ref());
        let rss_bytes = o.rss.map(|m| (m.anon_rss_kb + m.file_rss_kb + m.shmem_rss_kb).saturating_mul(1024));
        let limit_bytes = o.victim.and_then(|v| self.memory_limit(v.cgroup_id));
        self.out.push(Finding::OomKill(OomKill { report: r, fired, names, rss_bytes, limit_bytes, ts_ns: o.ts_ns }));
    }

    fn runtime_event(&mut self, event: &RuntimeEvent, now: Now) {
        let Some(side) = self.runtime.as_mut() else { return };
        match event {
            // TaskCreate names the init before it runs the container's
            // program (a container OOM-killed as it starts dies before its
            // TaskStart could reach us); TaskStart confirms it.
            RuntimeEvent::TaskCreate { container_id, pid, .. } | RuntimeEvent::TaskStart { container_id, pid, .. } => {
                self.dispatcher.registry.runtime_started(container_id, *pid);
                self.report_model();
            }
            RuntimeEvent::TaskExit { container_id, exec_id, pid, published_ns, .. } => {
                if !exec_id.is_empty() && exec_id != container_id {
                    return; // an exec'd process, not the container's init
                }
                let published = now.boot_of_wall(*published_ns);
                // The envelope carries the shim's time of reaping; the lag
                // that matters is until containerd handed the event over.
                if let Some(lag_ns) = side.correlator.runtime_exit(*pid, now.boot_ns) {
                    self.out.push(Finding::ExitLag { lag_ns });
                }
                let report = runtime_exit(&mut self.dispatcher.registry, container_id, published, now.boot_ns);
                if let Outcome::Late(reason) = report.outcome {
                    let names = self.names(report.pod.as_ref());
                    let late = LateExit { report, reason, names, pid: Some(*pid), comm: None, ts_ns: published };
                    self.out.push(Finding::LateExit(late));
                }
            }
            RuntimeEvent::TaskOom { container_id, published_ns } => {
                let matched = side.correlator.runtime_oom(container_id, now.boot_of_wall(*published_ns));
                if matched > 0 {
                    self.out.push(Finding::OomMatched { count: matched as u64 });
                }
            }
            RuntimeEvent::ContainerNamed(snapshot) => self.metadata(snapshot, now.boot_ns),
            RuntimeEvent::TaskDelete { .. }
            | RuntimeEvent::ContainerCreate { .. }
            | RuntimeEvent::ContainerDelete { .. } => {}
        }
    }

    fn metadata(&mut self, snapshot: &Snapshot, now_ns: u64) {
        self.dispatcher.registry.apply_metadata(snapshot, now_ns);
        self.report_model();
        self.release_named(now_ns);
    }

    /// After a loss that may have held cgroup changes: the registry is
    /// compared with the cgroup tree as it is, and each difference applied
    /// as the lost mkdir or rmdir would have been (a pod torn down in the
    /// gap goes, one created in it is known).
    fn resync(&mut self, now: u64) {
        self.resynced_ns = now;
        let tree = self.host.cgroup_tree(now);
        let present: HashSet<u64> = tree.cgroups.iter().map(|c| c.cgroup_id).collect();
        // A walk cut short at its bound has not seen every cgroup: nothing
        // is taken for gone then.
        let gone: Vec<u64> = if tree.complete {
            self.dispatcher.registry.known_cgroups().filter(|id| !present.contains(id)).collect()
        } else {
            Vec::new()
        };
        let mut created = 0;
        for c in tree.cgroups {
            // Only pods' cgroups matter to the model; parents come first.
            if cgroup_path::parse(&c.path).is_none() || self.dispatcher.registry.owner(c.cgroup_id).is_some() {
                continue;
            }
            let id = c.cgroup_id;
            self.kernel(&Event::CgroupMkdir(c), now);
            created += u64::from(self.dispatcher.registry.owner(id).is_some());
        }
        let removed = gone.len() as u64;
        for cgroup_id in gone {
            let rmdir = CgroupChange {
                ts_ns: now,
                hierarchy_id: 0,
                level: 0,
                cgroup_id,
                path: String::new(),
                truncated: false,
            };
            self.kernel(&Event::CgroupRmdir(rmdir), now);
        }
        self.out.push(Finding::CgroupResync { reread: true, created, removed });
    }

    /// For a mkdir produced before the last re-read of the tree (it waited
    /// in the ring buffer meanwhile) of a cgroup that is not there now:
    /// the rmdir that must follow, since its own may be one of the lost.
    fn gone_already(&self, c: &CgroupChange, now: u64) -> Option<Event> {
        if c.ts_ns >= self.resynced_ns || c.truncated || cgroup_path::parse(&c.path).is_none() {
            return None;
        }
        if self.host.cgroup_id(&c.path) == Some(c.cgroup_id) {
            return None;
        }
        Some(Event::CgroupRmdir(CgroupChange { ts_ns: now, path: String::new(), ..c.clone() }))
    }

    /// Losses since the last tick, by stage; the host exits the kernel
    /// only counted.
    fn report_losses(&mut self, now: LossTotals) {
        let seen = std::mem::replace(&mut self.losses.seen, now);
        let host_exits = now.host_exits.saturating_sub(seen.host_exits);
        if host_exits > 0 {
            self.out.push(Finding::HostExits { count: host_exits });
        }
        for (stage, now, seen) in [
            (LossStage::Kernel, now.kernel, seen.kernel),
            (LossStage::Channel, now.channel, seen.channel),
            (LossStage::Decode, now.decode, seen.decode),
        ] {
            let count = now.saturating_sub(seen);
            if count > 0 {
                self.out.push(Finding::EventsLost { stage, count });
            }
        }
    }

    /// Counts the OOM events whose burst of victims is over by `seen_ns`
    /// (kernel time the agent has seen events up to); their per-pod series
    /// wait for names.
    fn close_oom_events(&mut self, seen_ns: u64, now_ns: u64) {
        self.oom_events.expire(seen_ns);
        for event in self.oom_events.take_closed() {
            self.out.push(Finding::OomEvent {
                scope: event.scope,
                qos: event.qos,
                victims: event.victims,
                fired: event.fired,
            });
            let state = self.storm.record(now_ns);
            self.report_storm(state);
            if event.report.pod.is_some() {
                self.defer(
                    Awaiting::PodOom(PodOom { report: event.report, fired: event.fired, names: Names::default() }),
                    now_ns,
                );
            }
        }
    }

    fn report_storm(&mut self, state: StormState) {
        self.out.push(Finding::OomWindow {
            events: state.events_in_window,
            window_secs: state.window_secs,
            storm: state.storm,
        });
        if let Some(edge) = state.edge {
            self.out.push(Finding::OomStorm(edge));
        }
    }

    /// `what` goes out now, named, unless the runtime is listing and has
    /// not named its container yet: then it waits (and the listing is
    /// asked for it).
    fn defer(&mut self, what: Awaiting, now_ns: u64) {
        let names = self.names(what.pod());
        let container = what.pod().and_then(|p| p.container_id.as_deref());
        match container {
            Some(id) if !names.complete() && self.host.listing_up() && self.awaiting.len() < MAX_AWAITING_NAMES => {
                self.host.want_names(id);
                self.awaiting.push_back((what, now_ns));
            }
            _ => self.out.push(what.named(names)),
        }
    }

    /// What waited for names and is named now, or waited long enough.
    fn release_named(&mut self, now_ns: u64) {
        let mut waiting = VecDeque::with_capacity(self.awaiting.len());
        while let Some((what, since)) = self.awaiting.pop_front() {
            let names = self.names(what.pod());
            if !names.complete() && now_ns.saturating_sub(since) < NAME_WAIT_NS {
                waiting.push_back((what, since));
            } else {
                self.out.push(what.named(names));
            }
        }
        self.awaiting = waiting;
    }

    /// A pod's cgroup went: its series go after the TTL (also those that
    /// appear meanwhile, from an OOM event or names still awaited).
    fn pod_gone(&mut self, pod_uid: String, now_ns: u64) {
        let Some(ttl) = self.pod_series_ttl_ns else { return };
        if self.retiring.len() >= MAX_RETIRING {
            // Churn beyond the bound: the oldest goes early.
            if let Some((oldest, _)) = self.retiring.pop_front() {
                self.out.push(Finding::PodSeriesExpired { pod_uid: oldest });
            }
        }
        self.retiring.push_back((pod_uid, now_ns.saturating_add(ttl)));
    }

    fn retire(&mut self, now_ns: u64) {
        while self.retiring.front().is_some_and(|(_, at)| *at <= now_ns) {
            if let Some((pod_uid, _)) = self.retiring.pop_front() {
                self.out.push(Finding::PodSeriesExpired { pod_uid });
            }
        }
    }

    /// What the model holds, if it changed since the last report.
    fn report_model(&mut self) {
        let registry = &self.dispatcher.registry;
        if self.reported_generation == Some(registry.generation()) {
            return;
        }
        self.reported_generation = Some(registry.generation());
        self.out.push(Finding::Model(ModelStats {
            sandboxes: registry.tracked_sandboxes(),
            containers: registry.tracked_containers(),
            processes: registry.tracked_processes(),
            oom_group_containers: registry.oom_group_containers(),
            evictions: registry.evictions,
            named_pods: registry.metadata.pods(),
            named_containers: registry.metadata.containers(),
            names_evicted: registry.metadata.evicted,
        }));
    }

    /// Names of the pod (and container) a report is about.
    fn names(&self, pod: Option<&PodRef>) -> Names {
        pod.map(|p| self.dispatcher.registry.names(&p.pod_uid, p.container_id.as_deref())).unwrap_or_default()
    }

    /// Passes containers that appeared without a name on to the listing.
    fn ask_names(&mut self) {
        for id in self.dispatcher.registry.take_unnamed() {
            self.host.want_names(&id);
        }
    }

    /// Reads `memory.oom.group` of the container owning `cgroup_id` into
    /// the registry; true if it is a container's.
    fn read_oom_group(&mut self, cgroup_id: u64) -> bool {
        let Some(c) = self.dispatcher.registry.container_of(cgroup_id) else { return false };
        if let Some(on) = self.host.oom_group(&c.path) {
            self.dispatcher.registry.set_oom_group(cgroup_id, on);
        }
        true
    }

    /// Reads `memory.oom.group` again for containers created lately.
    fn recheck_modes(&mut self, now_ns: u64) {
        while self.mode_checks.front().is_some_and(|(_, since)| now_ns.saturating_sub(*since) > MODE_CHECK_NS) {
            self.mode_checks.pop_front();
        }
        let ids: Vec<u64> = self.mode_checks.iter().map(|(id, _)| *id).collect();
        for id in ids {
            if self.dispatcher.registry.container_of(id).is_some_and(|c| c.oom_group != Some(true)) {
                self.read_oom_group(id);
            }
        }
    }

    /// Remembers the limit-hit count of a pod's or container's cgroup at
    /// `path` (`known`, or read now), and of its pod's and the kubelet's
    /// cgroups above where not remembered yet.
    fn baseline_limits(&mut self, path: &str, known: Option<u64>) {
        let pod = match cgroup_path::parse(path) {
            Some(p) if p.container_id.is_some() => path.rsplit_once('/').map_or("", |(pod, _)| pod).to_string(),
            Some(_) => path.to_string(),
            None => return,
        };
        let count = known.or_else(|| self.host.limit_hits(path));
        self.remember_limit_hits(path, count);
        for p in std::iter::once(pod.clone()).chain(oom_limit::above_pod(&pod)) {
            if !self.limit_baselines.contains_key(&p) {
                let count = self.host.limit_hits(&p);
                self.remember_limit_hits(&p, count);
            }
        }
    }

    fn remember_limit_hits(&mut self, path: &str, count: Option<u64>) {
        let Some(n) = count else { return };
        if self.limit_baselines.len() < MAX_LIMIT_BASELINES || self.limit_baselines.contains_key(path) {
            self.limit_baselines.insert(path.to_string(), n);
        }
    }

    /// Which limit fired on an OOM kill in the container at `path`: the
    /// level whose count of limit hits moved since last read (each count
    /// then remembered anew).
    fn which_limit_fired(&mut self, path: &str) -> Fired {
        let pod = path.rsplit_once('/').map_or("", |(pod, _)| pod).to_string();
        let mut moved = |p: &str| -> oom_limit::Moved {
            let now = self.host.limit_hits(p);
            let before = match now {
                Some(n) => self.limit_baselines.insert(p.to_string(), n),
                None => self.limit_baselines.remove(p),
            };
            let moved = now?.saturating_sub(before?);
            // A count that did not move where hits may go uncounted: not known.
            if moved == 0 && self.host.limit_hits_partial(p) {
                return None;
            }
            Some(moved)
        };
        let (container, pod_moved) = (moved(path), moved(&pod));
        let above: Vec<oom_limit::Moved> = oom_limit::above_pod(&pod).iter().map(|p| moved(p)).collect();
        oom_limit::judge(container, pod_moved, &above)
    }

    /// The tightest memory limit of the container owning `cgroup_id` and
    /// of its pod; `None` when neither is limited or the cgroup is gone.
    fn memory_limit(&self, cgroup_id: u64) -> Option<u64> {
        let container = self.dispatcher.registry.container_of(cgroup_id)?;
        let pod = container.path.rsplit_once('/').map_or("", |(parent, _)| parent);
        [self.host.memory_limit(&container.path), self.host.memory_limit(pod)].into_iter().flatten().min()
    }

    fn scan_runtimes(&mut self) {
        let Some(side) = self.runtime.as_mut() else { return };
        let procs = self.host.runtime_processes();
        let changes = side.processes.scanned(&procs, self.host.runtime_peer());
        self.out.extend(changes.into_iter().map(runtime_change));
        self.report_runtimes_up();
    }

    fn report_runtimes_up(&mut self) {
        let Some(side) = self.runtime.as_ref() else { return };
        for (runtime, up) in side.processes.up() {
            self.out.push(Finding::RuntimeUp { runtime, up });
        }
    }
}

fn runtime_change(change: RuntimeChange) -> Finding {
    match change {
        RuntimeChange::Crashed { runtime, pid, reason } => Finding::RuntimeCrash { runtime, pid, reason },
        RuntimeChange::Stopped { runtime, pid } => Finding::RuntimeStopped { runtime, pid },
        RuntimeChange::Restarted { runtime, pid } => Finding::RuntimeRestart { runtime, pid },
    }
}
