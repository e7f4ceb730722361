//! One event in, everything it means out: dispatch to the pod model, count
//! the report, log what an operator must see and publish it as an event
//! record. The agent loop and the privileged tests both drive this, so
//! tests exercise the production path.

use std::{collections::VecDeque, sync::Arc, time::SystemTime};

use crate::{
    events::{decode::OomKill, Event},
    host::{boottime_ns, realtime_ns},
    model::{
        dispatch::runtime_exit,
        metadata::Snapshot,
        oom_events::OomEvents,
        runtime::{Correlator, CorrelatorLimits, Expired},
        Dispatcher, ExitReport, Names, OomReport, Outcome, PodRef, Registry, Report, TaskRole,
    },
    probes::{
        cgroups::CgroupLayout,
        scan::{cgroups, scan},
        CgroupTracker, KernelCounters,
    },
    runtime::{
        containerd::RuntimeEvent,
        crash::{RuntimeChange, RuntimeProcesses},
        cri::MetadataRequests,
    },
    stats::PipelineStats,
    telemetry::{
        events::{wall_time, EventHub, Kind, Record},
        pods::{PodMetrics, StormEdge},
        runtime::RuntimeMetrics,
    },
};

/// Ticks (seconds) between /proc scans for runtime processes while none
/// is awaited back.
const SLOW_SCAN_TICKS: u64 = 30;

/// How long an OOM kill's per-pod series, or a sandbox death's log line,
/// waits for the runtime to name a container it has not listed yet (one
/// killed as it starts, typically).
const NAME_WAIT_NS: u64 = 10 * 1_000_000_000;
/// How long after a container cgroup appears its `memory.oom.group` is
/// read again each tick, and for how many containers at most.
const MODE_CHECK_NS: u64 = 10 * 1_000_000_000;
const MAX_MODE_CHECKS: usize = 1024;

/// Reports waiting for names, at most; beyond, they go out at once.
const MAX_AWAITING_NAMES: usize = 1024;

/// What waits for names: the per-pod series of an OOM kill (counted
/// node-wide already), or the log line and record of a sandbox death.
enum Awaiting {
    PodOom(OomReport),
    Death(Death),
}

impl Awaiting {
    fn pod(&self) -> Option<&PodRef> {
        match self {
            Awaiting::PodOom(r) => r.pod.as_ref(),
            Awaiting::Death(d) => d.report.pod.as_ref(),
        }
    }
}

/// A sandbox death with the process that died.
#[derive(Clone)]
struct Death {
    report: ExitReport,
    pid: u32,
    comm: String,
    ts_ns: u64,
}

/// The pipeline's loss counters, looked at once a tick: a second in which
/// a stage lost events is one `events_dropped` record per stage. Also the
/// exits the kernel only counted (host processes), for their outcome.
pub struct LossWatch {
    stats: Arc<PipelineStats>,
    kernel: Option<Arc<KernelCounters>>,
    /// Last totals seen: kernel, channel, decode.
    seen: [u64; 3],
    host_exits_seen: u64,
    /// Losses that may have held a cgroup change, last seen.
    cgroup_losses_seen: u64,
}

impl LossWatch {
    pub fn new(stats: Arc<PipelineStats>, kernel: Option<Arc<KernelCounters>>) -> Self {
        let mut watch = Self { stats, kernel, seen: [0; 3], host_exits_seen: 0, cgroup_losses_seen: 0 };
        watch.seen = watch.totals();
        watch.cgroup_losses_seen = watch.cgroup_losses();
        watch
    }

    /// Events lost that may have been a cgroup's mkdir or rmdir: the
    /// kernel's drops of those kinds, and every channel or decode loss
    /// (of any kind).
    fn cgroup_losses(&self) -> u64 {
        use agent_common::EventKind::{CgroupMkdir, CgroupRmdir};
        let kernel: u64 = self
            .kernel
            .as_ref()
            .map_or(0, |k| [CgroupMkdir, CgroupRmdir].iter().map(|kind| k.read(*kind as u32).1).sum());
        kernel + self.stats.channel_dropped() + self.stats.decode_errors_total()
    }

    /// Whether a cgroup change may have been lost since the last call.
    pub fn cgroup_change_lost(&mut self) -> bool {
        let now = self.cgroup_losses();
        let lost = now > self.cgroup_losses_seen;
        self.cgroup_losses_seen = now;
        lost
    }

    /// Host process exits the kernel counted since the last call.
    fn host_exits(&mut self) -> u64 {
        let now = self.kernel.as_ref().map_or(0, |k| k.unstreamed().host_exits);
        let new = now.saturating_sub(self.host_exits_seen);
        self.host_exits_seen = now;
        new
    }

    fn totals(&self) -> [u64; 3] {
        let kernel = self
            .kernel
            .as_ref()
            .map_or(0, |k| agent_common::EventKind::ALL.iter().map(|kind| k.read(*kind as u32).1).sum());
        [kernel, self.stats.channel_dropped(), self.stats.decode_errors_total()]
    }

    /// (stage, events lost) since the last call, for stages that lost any.
    fn since_last(&mut self) -> Vec<(&'static str, u64)> {
        let now = self.totals();
        let lost = ["kernel", "channel", "decode"]
            .into_iter()
            .zip(now.iter().zip(self.seen))
            .map(|(stage, (now, seen))| (stage, now.saturating_sub(seen)))
            .filter(|(_, n)| *n > 0)
            .collect();
        self.seen = now;
        lost
    }
}

pub struct Watchdog {
    pub dispatcher: Dispatcher,
    /// OOM victims grouped into the OOM killer's picks.
    oom_events: OomEvents,
    pub metrics: PodMetrics,
    runtime: Option<RuntimeSide>,
    /// Where cgroup settings are read (known after `discover`).
    layout: Option<CgroupLayout>,
    /// Containers created lately whose `memory.oom.group` is read again
    /// each tick: the runtime writes it just after creating the cgroup.
    mode_checks: VecDeque<(u64, u64)>,
    /// Reports that wait for names, with when they started waiting.
    awaiting_names: VecDeque<(Awaiting, u64)>,
    /// Where event records go.
    events: Option<Arc<EventHub>>,
    losses: Option<LossWatch>,
    /// When the cgroup tree was last read after a loss (boot time, ns): a
    /// mkdir produced before it may name a cgroup the read did not see
    /// because it was gone already, its rmdir lost.
    resynced_ns: u64,
    /// The kernel's tracked-cgroup map: fed the model's verdicts.
    tracker: Option<CgroupTracker>,
    /// Threads of pod cgroups put into the kernel's task table at start-up.
    pub tasks_seeded: usize,
}

/// The runtime's view against the kernel's: correlation tables, the
/// runtime's own processes, and their metrics.
pub struct RuntimeSide {
    pub correlator: Correlator,
    processes: RuntimeProcesses,
    names: Vec<String>,
    pub metrics: RuntimeMetrics,
    counted: Expired,
    ticks: u64,
    /// Where container ids without names are asked for (CRI listing on).
    names_wanted: Option<Arc<MetadataRequests>>,
    events: Option<Arc<EventHub>>,
}

impl RuntimeSide {
    pub fn new(names: &[String], limits: CorrelatorLimits, metrics: RuntimeMetrics) -> Self {
        Self {
            correlator: Correlator::new(limits),
            processes: RuntimeProcesses::new(names),
            names: names.to_vec(),
            metrics,
            counted: Expired::default(),
            ticks: 0,
            names_wanted: None,
            events: None,
        }
    }

    /// Asks the CRI listing for names of containers that appear unnamed.
    pub fn with_metadata(mut self, requests: Arc<MetadataRequests>) -> Self {
        self.names_wanted = Some(requests);
        self
    }

    fn stream_up(&self) -> bool {
        self.metrics.stream.up.get() == 1
    }

    fn record(&self, change: &RuntimeChange) {
        let (kind, runtime, pid, reason) = match change {
            RuntimeChange::Crashed { runtime, pid, reason } => {
                self.metrics.crashes.with_label_values(&[runtime.as_str(), reason]).inc();
                log::error!("container runtime {runtime} (pid {pid}) crashed: {reason}");
                (Kind::RuntimeCrash, runtime, pid, Some(*reason))
            }
            RuntimeChange::Stopped { runtime, pid } => {
                log::warn!("container runtime {runtime} (pid {pid}) stopped");
                return;
            }
            RuntimeChange::Restarted { runtime, pid } => {
                self.metrics.restarts.with_label_values(&[runtime]).inc();
                log::info!("container runtime {runtime} is back (pid {pid})");
                (Kind::RuntimeRestart, runtime, pid, None)
            }
        };
        if let Some(hub) = &self.events {
            let mut record = Record::new(kind, hub.node(), SystemTime::now());
            record.runtime = Some(runtime.clone());
            record.pid = Some(*pid);
            record.reason = reason.map(str::to_string);
            hub.publish(kind, &record);
        }
    }

    fn publish_up(&self) {
        for (runtime, up) in self.processes.up() {
            self.metrics.runtime_up.with_label_values(&[&runtime]).set(i64::from(up));
        }
    }

    /// Counts what expiry settled since the last call.
    fn publish_expired(&mut self) {
        let now = self.correlator.expired;
        let m = &self.metrics;
        m.exits_unmatched.inc_by(now.runtime_exits_unmatched - self.counted.runtime_exits_unmatched);
        m.oom_mismatch.with_label_values(&["kernel_only"]).inc_by(now.kernel_only_ooms - self.counted.kernel_only_ooms);
        m.oom_mismatch
            .with_label_values(&["runtime_only"])
            .inc_by(now.runtime_only_ooms - self.counted.runtime_only_ooms);
        m.correlation_evictions.inc_by(now.evicted - self.counted.evicted);
        self.counted = now;
    }
}

impl Watchdog {
    pub fn new(metrics: PodMetrics) -> Self {
        Self {
            dispatcher: Dispatcher::new(Registry::default()),
            oom_events: OomEvents::default(),
            metrics,
            runtime: None,
            layout: None,
            resynced_ns: 0,
            mode_checks: VecDeque::new(),
            awaiting_names: VecDeque::new(),
            events: None,
            losses: None,
            tracker: None,
            tasks_seeded: 0,
        }
    }

    /// Also tells the kernel which cgroups are pods' (their tasks' events
    /// are streamed) and which are not (counted there).
    pub fn with_tracker(mut self, tracker: Option<CgroupTracker>) -> Self {
        self.tracker = tracker;
        self
    }

    /// Also correlates with the container runtime and watches its processes.
    pub fn with_runtime(mut self, mut side: RuntimeSide) -> Self {
        side.events = self.events.clone();
        self.runtime = Some(side);
        self.scan_runtimes();
        self
    }

    /// Also publishes event records (OOM kills, sandbox deaths, late
    /// exits, runtime crashes and restarts, storm edges, losses).
    pub fn with_events(mut self, hub: Arc<EventHub>) -> Self {
        if let Some(side) = self.runtime.as_mut() {
            side.events = Some(hub.clone());
        }
        self.events = Some(hub);
        self
    }

    /// Also publishes a record for each second in which the pipeline lost events.
    pub fn with_loss_watch(mut self, watch: LossWatch) -> Self {
        self.losses = Some(watch);
        self
    }

    pub fn registry(&self) -> &Registry {
        &self.dispatcher.registry
    }

    /// Learns what exists already (cgroup tree and /proc), and has the
    /// kernel track the pods' cgroups and their tasks.
    pub fn discover(&mut self, layout: &CgroupLayout) {
        let now = boottime_ns();
        self.layout = Some(layout.clone());
        let mut pods = std::collections::HashSet::new();
        for event in scan(layout, now) {
            self.dispatcher.dispatch(&event, now);
            if let Event::CgroupMkdir(c) = &event {
                self.read_oom_group(c.cgroup_id);
                if self.dispatcher.registry.owner(c.cgroup_id).is_some() {
                    pods.insert(c.cgroup_id);
                }
            }
        }
        if let Some(tracker) = self.tracker.as_mut() {
            for id in &pods {
                if !tracker.track(*id) {
                    log::warn!(
                        "the kernel's tracked-cgroup map is full: cgroup {id}'s tasks are counted as the host's"
                    );
                }
            }
            self.tasks_seeded = tracker.seed(&pods);
        }
        self.ask_names();
        self.metrics.refresh(&self.dispatcher.registry);
    }

    /// Takes a listing of the runtime's pods and containers.
    pub fn apply_metadata(&mut self, snapshot: &Snapshot) {
        let registry = &mut self.dispatcher.registry;
        registry.apply_metadata(snapshot, boottime_ns());
        if let Some(side) = &self.runtime {
            let m = &side.metrics.metadata;
            m.cached.with_label_values(&["pod"]).set(registry.metadata.pods() as i64);
            m.cached.with_label_values(&["container"]).set(registry.metadata.containers() as i64);
            m.evicted.inc_by(registry.metadata.evicted.saturating_sub(m.evicted.get()));
        }
        self.metrics.refresh(registry);
        self.label_awaiting(boottime_ns());
    }

    /// Queues `what` (whose pod's names are `names`) until the runtime
    /// names its container, if the runtime is listing and has not named it
    /// yet, and asks the listing for it; otherwise hands `what` back to go
    /// out now.
    fn defer(&mut self, what: Awaiting, names: &Names, now_ns: u64) -> Option<Awaiting> {
        let container = what.pod().and_then(|p| p.container_id.clone());
        let listing = self
            .runtime
            .as_ref()
            .filter(|side| side.metrics.metadata.up.get() == 1)
            .and_then(|side| side.names_wanted.as_ref());
        match (container, listing) {
            (Some(id), Some(requests)) if !names.complete() && self.awaiting_names.len() < MAX_AWAITING_NAMES => {
                requests.want(id);
                self.awaiting_names.push_back((what, now_ns));
                None
            }
            _ => Some(what),
        }
    }

    /// Puts an OOM kill into its pod's series now, or once the runtime
    /// named its container (or NAME_WAIT_NS passed).
    fn label_oom(&mut self, r: &OomReport, names: &Names, now_ns: u64) {
        if let Some(Awaiting::PodOom(r)) = self.defer(Awaiting::PodOom(r.clone()), names, now_ns) {
            self.metrics.observe_pod_oom(&r, names);
        }
    }

    /// Logs and publishes a sandbox death now, or once the runtime named
    /// its pod (or NAME_WAIT_NS passed): a sandbox that lived a second
    /// still reads with its namespace and name.
    fn log_death(&mut self, death: Death, now_ns: u64) {
        let names = self.names(death.report.pod.as_ref());
        if let Some(Awaiting::Death(d)) = self.defer(Awaiting::Death(death), &names, now_ns) {
            sandbox_death(&d, &names, self.events.as_deref());
        }
    }

    /// Sends out what waited for names and is named now or waited long enough.
    fn label_awaiting(&mut self, now_ns: u64) {
        let registry = &self.dispatcher.registry;
        let metrics = &self.metrics;
        let hub = self.events.as_deref();
        self.awaiting_names.retain(|(what, since)| {
            let names = names_of(registry, what.pod());
            if !names.complete() && now_ns.saturating_sub(*since) < NAME_WAIT_NS {
                return true;
            }
            match what {
                Awaiting::PodOom(r) => metrics.observe_pod_oom(r, &names),
                Awaiting::Death(d) => sandbox_death(d, &names, hub),
            }
            false
        });
    }

    /// Names of the pod (and container) a report is about.
    pub fn names(&self, pod: Option<&PodRef>) -> Names {
        names_of(&self.dispatcher.registry, pod)
    }

    /// Passes containers that appeared without a name on to the listing.
    fn ask_names(&mut self) {
        let unnamed = self.dispatcher.registry.take_unnamed();
        if let Some(requests) = self.runtime.as_ref().and_then(|s| s.names_wanted.as_ref()) {
            for id in unnamed {
                requests.want(id);
            }
        }
    }

    /// Reads `memory.oom.group` of the container owning `cgroup_id` into
    /// the registry; true if it is a container's.
    fn read_oom_group(&mut self, cgroup_id: u64) -> bool {
        let registry = &self.dispatcher.registry;
        let (Some(layout), Some(c)) = (self.layout.as_ref(), registry.container_of(cgroup_id)) else { return false };
        if let Some(on) = layout.oom_group(&c.path) {
            self.dispatcher.registry.set_oom_group(cgroup_id, on);
        }
        true
    }

    /// Counts the OOM events whose burst of victims is over by `seen_ns`:
    /// kernel time the agent has seen events up to.
    fn close_oom_events(&mut self, seen_ns: u64, now_ns: u64) {
        self.oom_events.expire(seen_ns);
        for event in self.oom_events.take_closed() {
            if let Some(edge) = self.metrics.observe_oom_event(&event, now_ns) {
                self.storm_edge(edge);
            }
            let names = self.names(event.report.pod.as_ref());
            self.label_oom(&event.report, &names, now_ns);
        }
    }

    /// Applies one kernel event; returns the report of an exit or OOM kill.
    pub fn handle(&mut self, event: &Event) -> Option<Report> {
        log::trace!("{event:?}");
        let now = boottime_ns();
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
                let mut o = o.clone();
                let start = o.victim.map_or(0, |v| v.start_ns);
                o.victim_comm = crate::host::proc::comm(o.victim_pid, start).unwrap_or_default();
                named = Event::OomKill(o);
                &named
            }
            _ => event,
        };
        let gone_already = match event {
            Event::CgroupMkdir(c) => self.gone_already(c),
            _ => None,
        };
        let mut report = self.dispatcher.dispatch(event, now);
        if let (Event::OomKill(o), Some(Report::Oom(r))) = (event, report.as_mut()) {
            let container = o.victim.and_then(|v| self.dispatcher.registry.container_of(v.cgroup_id));
            let group_mode = container.is_some_and(|c| c.oom_group == Some(true));
            self.oom_events.victim(r, o.ts_ns, group_mode);
        }
        if let Event::CgroupMkdir(c) = event {
            if self.read_oom_group(c.cgroup_id) && self.mode_checks.len() < MAX_MODE_CHECKS {
                self.mode_checks.push_back((c.cgroup_id, now));
            }
            // The kernel tracks every new cgroup from its mkdir; one that
            // is no pod's goes back to being counted there.
            if self.dispatcher.registry.owner(c.cgroup_id).is_none() {
                if let Some(tracker) = self.tracker.as_mut() {
                    tracker.untrack(c.cgroup_id);
                }
            }
        }
        match (&report, event) {
            (Some(Report::Exit(r)), Event::Exit(e)) => {
                self.metrics.observe_exit(r);
                let process = Process { pid: Some(e.tgid), comm: Some(&e.comm), ts_ns: e.ts_ns };
                late_exit(r, &self.dispatcher.registry, &process, self.events.as_deref());
                if r.sandbox_death.is_some() {
                    let death = Death { report: r.clone(), pid: e.tgid, comm: e.comm.clone(), ts_ns: e.ts_ns };
                    self.log_death(death, now);
                }
            }
            (Some(Report::Oom(r)), Event::OomKill(o)) => {
                let names = self.names(r.pod.as_ref());
                self.metrics.observe_oom(r);
                let kill = OomFacts {
                    rss_bytes: o.rss.map(|m| (m.anon_rss_kb + m.file_rss_kb + m.shmem_rss_kb).saturating_mul(1024)),
                    limit_bytes: o.victim.and_then(|v| self.memory_limit(v.cgroup_id)),
                };
                log_oom(r, &names, &kill);
                if let Some(hub) = &self.events {
                    hub.publish(Kind::OomKill, &oom_record(hub, r, o, &names, &kill));
                }
            }
            (None, _) => self.ask_names(),
            _ => {}
        }
        if let Some(side) = self.runtime.as_mut() {
            correlate_kernel(side, event, report.as_ref());
        }
        // By the event's own time, not the clock: a backlog (a slow or
        // stalled agent) must not end a burst whose victims still queue.
        self.close_oom_events(event.ts_ns(), now);
        for pod_uid in self.dispatcher.registry.take_gone_pods() {
            self.metrics.pod_gone(&pod_uid, now);
        }
        self.metrics.refresh(&self.dispatcher.registry);
        if let Some(rmdir) = gone_already {
            self.handle(&rmdir);
            self.metrics.observe_resync_changes(0, 1);
        }
        report
    }

    /// For a mkdir produced before the last re-read of the tree (it waited
    /// in the ring buffer meanwhile) of a cgroup that is not there now:
    /// the rmdir that must follow, since its own may be one of the lost.
    fn gone_already(&self, c: &crate::events::decode::CgroupChange) -> Option<Event> {
        if c.ts_ns >= self.resynced_ns || c.truncated || crate::model::cgroup_path::parse(&c.path).is_none() {
            return None;
        }
        let layout = self.layout.as_ref()?;
        if layout.cgroup_id(&c.path).is_ok_and(|id| id == c.cgroup_id) {
            return None;
        }
        Some(Event::CgroupRmdir(crate::events::decode::CgroupChange {
            ts_ns: boottime_ns(),
            path: String::new(),
            ..c.clone()
        }))
    }

    /// Applies one event of the runtime's stream; returns the report of a
    /// TaskExit for a container's init.
    pub fn handle_runtime(&mut self, event: &RuntimeEvent) -> Option<ExitReport> {
        log::trace!("{event:?}");
        let side = self.runtime.as_mut()?;
        let now = boottime_ns();
        // The runtime stamps wall-clock time; the kernel, boot time.
        let to_boot = |wall: u64| wall.saturating_sub(realtime_ns().saturating_sub(boottime_ns()));
        match event {
            // TaskCreate names the init before it runs the container's
            // program (a container OOM-killed as it starts dies before its
            // TaskStart could reach us); TaskStart confirms it.
            RuntimeEvent::TaskCreate { container_id, pid, .. } | RuntimeEvent::TaskStart { container_id, pid, .. } => {
                self.dispatcher.registry.runtime_started(container_id, *pid);
                self.metrics.refresh(&self.dispatcher.registry);
                None
            }
            RuntimeEvent::TaskExit { container_id, exec_id, pid, published_ns, .. } => {
                if !exec_id.is_empty() && exec_id != container_id {
                    return None; // an exec'd process, not the container's init
                }
                let published = to_boot(*published_ns);
                // The envelope carries the shim's time of reaping; the lag
                // that matters is until containerd handed the event over.
                if let Some(lag) = side.correlator.runtime_exit(*pid, now) {
                    side.metrics.exit_lag.observe(lag as f64 / 1e9);
                }
                let report = runtime_exit(&mut self.dispatcher.registry, container_id, published, now);
                self.metrics.observe_runtime_exit(&report);
                let process = Process { pid: Some(*pid), comm: None, ts_ns: published };
                late_exit(&report, &self.dispatcher.registry, &process, self.events.as_deref());
                Some(report)
            }
            RuntimeEvent::TaskOom { container_id, published_ns } => {
                let matched = side.correlator.runtime_oom(container_id, to_boot(*published_ns));
                side.metrics.ooms_matched.inc_by(matched as u64);
                None
            }
            RuntimeEvent::ContainerNamed(snapshot) => {
                self.apply_metadata(snapshot);
                None
            }
            RuntimeEvent::TaskDelete { .. }
            | RuntimeEvent::ContainerCreate { .. }
            | RuntimeEvent::ContainerDelete { .. } => None,
        }
    }

    /// Once a second: the OOM-churn window slides on, runtime processes are
    /// looked for (see SLOW_SCAN_TICKS), pending correlations settle.
    pub fn tick(&mut self) {
        let now = boottime_ns();
        self.close_oom_events(now, now);
        self.recheck_modes(now);
        self.metrics.refresh(&self.dispatcher.registry);
        if let Some(edge) = self.metrics.tick(now) {
            self.storm_edge(edge);
        }
        self.label_awaiting(now);
        if self.losses.as_mut().is_some_and(LossWatch::cgroup_change_lost) {
            self.resync();
        }
        self.publish_losses();
        let Some(side) = self.runtime.as_mut() else { return };
        side.ticks += 1;
        // Exits tell when a runtime goes; /proc is read every second only
        // while one that ran is down, otherwise every SLOW_SCAN_TICKS.
        if side.processes.awaiting_restart() || side.ticks % SLOW_SCAN_TICKS == 0 {
            self.scan_runtimes();
        }
        if let Some(side) = self.runtime.as_mut() {
            side.correlator.expire(now);
            side.publish_expired();
        }
    }

    /// After a loss that may have held cgroup changes: the registry is
    /// compared with the cgroup tree as it is, and each difference applied
    /// as the lost mkdir or rmdir would have been (a pod torn down in the
    /// gap goes, one created in it is known). Returns (created, removed).
    pub fn resync(&mut self) -> (u64, u64) {
        let Some(layout) = self.layout.clone() else { return (0, 0) };
        let now = boottime_ns();
        self.resynced_ns = now;
        let tree = cgroups(&layout, now);
        let present: std::collections::HashSet<u64> = tree
            .iter()
            .filter_map(|e| match e {
                Event::CgroupMkdir(c) => Some(c.cgroup_id),
                _ => None,
            })
            .collect();
        // A walk cut short at its bound has not seen every cgroup: nothing
        // is taken for gone then.
        let gone: Vec<u64> = if tree.len() >= crate::probes::scan::MAX_CGROUPS {
            Vec::new()
        } else {
            self.dispatcher.registry.known_cgroups().filter(|id| !present.contains(id)).collect()
        };
        let mut created = 0;
        for event in &tree {
            let Event::CgroupMkdir(c) = event else { continue };
            // Only pods' cgroups matter to the model; parents come first.
            if crate::model::cgroup_path::parse(&c.path).is_none()
                || self.dispatcher.registry.owner(c.cgroup_id).is_some()
            {
                continue;
            }
            self.handle(event);
            created += u64::from(self.dispatcher.registry.owner(c.cgroup_id).is_some());
        }
        let removed = gone.len() as u64;
        for cgroup_id in gone {
            self.handle(&Event::CgroupRmdir(crate::events::decode::CgroupChange {
                ts_ns: now,
                hierarchy_id: layout.hierarchy_id(),
                level: 0,
                cgroup_id,
                path: String::new(),
                truncated: false,
            }));
        }
        self.metrics.observe_resync();
        self.metrics.observe_resync_changes(created, removed);
        if created + removed > 0 {
            log::warn!("cgroup changes were lost with dropped events: the cgroup tree was read again, {created} cgroups created and {removed} removed meanwhile applied");
        }
        (created, removed)
    }

    /// At shutdown: what still waits (an OOM event's burst, names for a
    /// series or a death's log line) goes out with what is known.
    pub fn flush(&mut self) {
        let later = boottime_ns().saturating_add(NAME_WAIT_NS + crate::model::oom_events::GROUP_GAP_NS);
        self.close_oom_events(later, later);
        self.label_awaiting(later);
    }

    /// An OOM storm began or ended: a log line and a record.
    fn storm_edge(&self, edge: StormEdge) {
        let kind = if edge.started { Kind::OomStormStart } else { Kind::OomStormEnd };
        if edge.started {
            log::warn!("OOM storm: {} OOM events in the last {} s", edge.events_in_window, edge.window_secs);
        } else {
            log::info!("OOM storm over: {} OOM events in the last {} s", edge.events_in_window, edge.window_secs);
        }
        if let Some(hub) = &self.events {
            let mut record = Record::new(kind, hub.node(), SystemTime::now());
            record.count = Some(edge.events_in_window);
            record.window_seconds = Some(edge.window_secs);
            hub.publish(kind, &record);
        }
    }

    /// One record per pipeline stage that lost events since the last tick;
    /// the host exits the kernel counted go to their outcome.
    fn publish_losses(&mut self) {
        if let Some(watch) = self.losses.as_mut() {
            self.metrics.observe_host_exits(watch.host_exits());
        }
        let (Some(hub), Some(watch)) = (self.events.as_ref(), self.losses.as_mut()) else { return };
        for (stage, lost) in watch.since_last() {
            let mut record = Record::new(Kind::EventsDropped, hub.node(), SystemTime::now());
            record.stage = Some(stage.to_string());
            record.count = Some(lost);
            hub.publish(Kind::EventsDropped, &record);
        }
    }

    /// The tightest memory limit of the container owning `cgroup_id` and
    /// of its pod; `None` when neither is limited or the cgroup is gone.
    fn memory_limit(&self, cgroup_id: u64) -> Option<u64> {
        let layout = self.layout.as_ref()?;
        let container = self.dispatcher.registry.container_of(cgroup_id)?;
        let pod = container.path.rsplit_once('/').map_or("", |(parent, _)| parent);
        [layout.memory_limit(&container.path), layout.memory_limit(pod)].into_iter().flatten().min()
    }

    /// Reads `memory.oom.group` again for containers created lately (the
    /// kubelet's runtime sets it right after creating the cgroup).
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

    fn scan_runtimes(&mut self) {
        if let Some(side) = self.runtime.as_mut() {
            let procs = crate::host::proc::processes_named(&side.names);
            for change in side.processes.scanned(&procs) {
                side.record(&change);
            }
            side.publish_up();
        }
    }
}

/// Kernel facts the runtime should agree with: a runtime process ending,
/// a container init's exit (for the lag), an OOM kill in a container.
fn correlate_kernel(side: &mut RuntimeSide, event: &Event, report: Option<&Report>) {
    match (event, report) {
        (Event::Exit(e), report) if e.group_dead => {
            if let Some(change) = side.processes.exited(e.tgid, &e.comm, e.status) {
                side.record(&change);
                side.publish_up();
            }
            if let Some(Report::Exit(r)) = report {
                if matches!(r.role, TaskRole::Sandbox | TaskRole::ContainerInit) {
                    if let Some(lag) = side.correlator.kernel_exit(e.tgid, e.ts_ns) {
                        side.metrics.exit_lag.observe(lag as f64 / 1e9);
                    }
                }
            }
        }
        (Event::OomKill(o), Some(Report::Oom(r))) if side.stream_up() => {
            if let Some(container) = r.pod.as_ref().and_then(|p| p.container_id.as_deref()) {
                if side.correlator.kernel_oom(container, o.ts_ns) {
                    side.metrics.ooms_matched.inc();
                }
            }
        }
        _ => {}
    }
}

fn describe(pod: Option<&PodRef>, names: &Names) -> String {
    let Some(p) = pod else { return "no pod".to_string() };
    let mut text = format!("pod {}", p.pod_uid);
    if !names.pod.is_empty() {
        text.push_str(&format!(" ({}/{})", names.namespace, names.pod));
    }
    text.push_str(&format!(" container {}", p.container_id.as_deref().unwrap_or("-")));
    if !names.container.is_empty() {
        text.push_str(&format!(" ({})", names.container));
    }
    text
}

/// What the OOM record and log line add to the report: sizes.
struct OomFacts {
    rss_bytes: Option<u64>,
    limit_bytes: Option<u64>,
}

fn log_oom(r: &OomReport, names: &Names, kill: &OomFacts) {
    let trigger = r.trigger.as_ref().map(|t| format!(", triggered by pid {} ({})", t.tgid, t.comm)).unwrap_or_default();
    let (pod_uid, container_id) = ids(r.pod.as_ref());
    tracing::info!(
        event = "oom_kill",
        pod_uid,
        namespace = names.namespace.as_str(),
        pod = names.pod.as_str(),
        container = names.container.as_str(),
        container_id,
        victim_role = r.role.label(),
        pid = r.victim.pid,
        comm = r.victim_comm.as_str(),
        trigger_pid = r.trigger.as_ref().map(|t| t.tgid),
        trigger_comm = r.trigger.as_ref().map(|t| t.comm.as_str()),
        qos_class = r.pod.as_ref().and_then(|p| p.qos).map(|q| q.label()),
        rss_bytes = kill.rss_bytes,
        limit_bytes = kill.limit_bytes,
        outcome = r.outcome.label(),
        "OOM kill: victim pid {} ({}) role {} in {} [{}]{trigger}",
        r.victim.pid,
        r.victim_comm,
        r.role.label(),
        describe(r.pod.as_ref(), names),
        r.outcome.label(),
    );
}

/// Pod UID and container id for log fields, empty when unknown.
fn ids(pod: Option<&PodRef>) -> (&str, &str) {
    (pod.map_or("", |p| p.pod_uid.as_str()), pod.and_then(|p| p.container_id.as_deref()).unwrap_or(""))
}

fn names_of(registry: &Registry, pod: Option<&PodRef>) -> Names {
    pod.map(|p| registry.names(&p.pod_uid, p.container_id.as_deref())).unwrap_or_default()
}

/// Logs and publishes a sandbox death with the names known now.
fn sandbox_death(d: &Death, names: &Names, hub: Option<&EventHub>) {
    let r = &d.report;
    let Some(cause) = r.sandbox_death else { return };
    let (pod_uid, container_id) = ids(r.pod.as_ref());
    tracing::info!(
        event = "sandbox_death",
        pod_uid,
        namespace = names.namespace.as_str(),
        pod = names.pod.as_str(),
        container = names.container.as_str(),
        container_id,
        pid = d.pid,
        comm = d.comm.as_str(),
        cause = cause.label(),
        "sandbox death ({}): {}",
        cause.label(),
        describe(r.pod.as_ref(), names)
    );
    if let Some(hub) = hub {
        let mut record = record_at(hub, Kind::SandboxDeath, d.ts_ns);
        pod_fields(&mut record, r.pod.as_ref(), names);
        record.victim_role = Some(r.role.label().to_string());
        record.pid = Some(d.pid);
        record.comm = some(&d.comm);
        record.cause = Some(cause.label().to_string());
        hub.publish(Kind::SandboxDeath, &record);
    }
}

/// The process an exit is about, as far as its source says.
struct Process<'a> {
    pid: Option<u32>,
    comm: Option<&'a str>,
    ts_ns: u64,
}

/// Logs and publishes a late exit; names are looked up only then, not for
/// every exit.
fn late_exit(r: &ExitReport, registry: &Registry, process: &Process, hub: Option<&EventHub>) {
    let Outcome::Late(reason) = r.outcome else { return };
    let names = &names_of(registry, r.pod.as_ref());
    let (pod_uid, container_id) = ids(r.pod.as_ref());
    tracing::warn!(
        event = "late_exit",
        pod_uid,
        namespace = names.namespace.as_str(),
        pod = names.pod.as_str(),
        container = names.container.as_str(),
        container_id,
        pid = process.pid,
        comm = process.comm,
        reason = reason.label(),
        source = r.source.label(),
        "late exit event ({}, source {}): {}",
        reason.label(),
        r.source.label(),
        describe(r.pod.as_ref(), names)
    );
    if let Some(hub) = hub {
        let mut record = record_at(hub, Kind::LateExit, process.ts_ns);
        pod_fields(&mut record, r.pod.as_ref(), names);
        record.victim_role = Some(r.role.label().to_string());
        record.pid = process.pid;
        record.comm = process.comm.and_then(some);
        record.outcome = Some(r.outcome.label().to_string());
        record.reason = Some(reason.label().to_string());
        record.source = Some(r.source.label().to_string());
        hub.publish(Kind::LateExit, &record);
    }
}

fn oom_record(hub: &EventHub, r: &OomReport, o: &OomKill, names: &Names, kill: &OomFacts) -> Record {
    let mut record = record_at(hub, Kind::OomKill, o.ts_ns);
    pod_fields(&mut record, r.pod.as_ref(), names);
    record.victim_role = Some(r.role.label().to_string());
    record.pid = Some(r.victim.pid);
    record.comm = some(&r.victim_comm);
    record.trigger_pid = r.trigger.as_ref().map(|t| t.tgid);
    record.trigger_comm = r.trigger.as_ref().and_then(|t| some(&t.comm));
    record.rss_bytes = kill.rss_bytes;
    record.limit_bytes = kill.limit_bytes;
    record.outcome = Some(r.outcome.label().to_string());
    record
}

/// A record stamped with the wall-clock time of a kernel timestamp.
fn record_at(hub: &EventHub, kind: Kind, boot_ts_ns: u64) -> Record {
    Record::new(kind, hub.node(), wall_time(boot_ts_ns, boottime_ns(), SystemTime::now()))
}

/// The pod's ids, names and QoS class, where known.
fn pod_fields(record: &mut Record, pod: Option<&PodRef>, names: &Names) {
    let Some(p) = pod else { return };
    record.pod_uid = some(&p.pod_uid);
    record.container_id = p.container_id.as_deref().and_then(some);
    record.qos_class = p.qos.map(|q| q.label().to_string());
    record.namespace = some(&names.namespace);
    record.pod = some(&names.pod);
    record.container = some(&names.container);
}

/// `None` for an empty string: unknown fields are left out of records.
fn some(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}
