//! The watchdog core: kernel events, runtime events and the passing of
//! time in, [`Finding`]s out. [`Watchdog`] is a small coordinator over
//! the state that spans events, each part owning its own: the pod model's
//! dispatcher, OOM bursts ([`oom_events`]) and the storm window
//! ([`storm`]), findings waiting for names ([`names`]), the counts that say
//! kill's explanation ([`explain`]), the pipeline's losses ([`losses`]), the
//! runtime's side ([`runtime_side`]), the per-pod series' grace
//! ([`retiring`]), containers whose group-kill setting is read again
//! ([`oom_group`]), the senders of the signals that end pods' processes
//! ([`senders`]) and the runtime's word on each container's end against
//! the kernel's ([`verdicts`]).
//!
//! It does no I/O and reads no clock: every entry point takes the time,
//! and what it must learn from the node it asks through [`Host`]. So its
//! behaviour is unit-tested with a fake host, as a normal user, in
//! milliseconds; the agent loop, the privileged tests and the benchmarks
//! drive the same code with the real one (`crate::node_host`).
//!
//! Each entry point returns the findings of what it was handed, in order,
//! drained from a buffer the core reuses (the exit path is hot).

pub mod correlation;
pub mod crashes;
pub mod explain;
pub mod finding;
pub mod host;
mod kills;
pub mod limits;
pub mod losses;
pub mod names;
mod naming;
pub mod oom_counts;
pub mod oom_events;
pub mod oom_group;
pub mod oom_limit;
pub mod pressure;
mod resync;
pub mod retiring;
pub mod runtime_side;
pub mod senders;
pub mod storm;
#[cfg(test)]
mod tests;
pub mod verdicts;

use std::collections::HashSet;

pub use finding::{
    ContainerExit, Finding, LateExit, LimitChanged, LossStage, MemoryPressure, ModelStats, OomKill, PodOom,
    PressureLevels, SandboxDeath,
};
pub use host::{CgroupTree, Host, LossTotals, MemoryWakeups, Tracking, WatchFailures};
pub use names::NAME_WAIT_NS;
pub use oom_events::{OomEvent, OomScope};
pub use oom_limit::{Fired, OomConstraint, OomLimit};
pub use runtime_side::RuntimeSettings;

use self::{
    limits::{LimitChange, LimitWatch, SeenBy},
    losses::LossWatch,
    names::{Awaiting, NameWait},
    oom_counts::OomCounts,
    oom_events::{OomEvents, GROUP_GAP_NS},
    oom_group::ModeChecks,
    pressure::{PressureEdge, PressureSettings, PressureWatch},
    retiring::Retiring,
    runtime_side::RuntimeSide,
    senders::Senders,
    storm::{Storm, StormSettings, StormState},
    verdicts::{KernelEnd, RuntimeStatus, Verdicts},
};
use crate::{
    events::{
        kernel::{CgroupChange, Exit, OomKill as KernelOomKill},
        Event, RuntimeEvent,
    },
    model::{
        cgroup_path, dispatch::runtime_exit, metadata::Snapshot, registry::CgroupOwner, Dispatcher, ExitReason,
        ExitReport, Limits, Names, OomReport, Outcome, PodRef, PodRegistry, Report, TaskKey,
    },
    os::Now,
};

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
    /// Memory pressure warnings; `None`: off.
    pub pressure: Option<PressureSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            storm: StormSettings::default(),
            pod_series_ttl_ns: Some(900 * 1_000_000_000),
            runtime: None,
            pressure: Some(PressureSettings::default()),
        }
    }
}

pub struct Watchdog<H> {
    host: H,
    dispatcher: Dispatcher,
    /// OOM victims grouped into the OOM killer's picks.
    oom_events: OomEvents,
    /// The kernel's count of the OOMs each memory cgroup ran, as last seen.
    oom_counts: OomCounts,
    storm: Storm,
    runtime: Option<RuntimeSide>,
    modes: ModeChecks,
    names: NameWait,
    losses: LossWatch,
    retiring: Retiring,
    pressure: Option<PressureWatch>,
    /// Pressure edges of the current call, before they are named.
    edges: Vec<PressureEdge>,
    limits: LimitWatch,
    /// Limit changes of the current call, before they are named.
    limit_changes: Vec<LimitChange>,
    /// The registry generation last reported in a `Model` finding.
    reported_generation: Option<u64>,
    tasks_seeded: usize,
    /// The signals of live pod processes, and their senders.
    senders: Senders,
    /// Container ends waiting for the runtime's word.
    verdicts: Verdicts,
    out: Vec<Finding>,
}

/// The findings of one call.
pub type Findings<'a> = std::vec::Drain<'a, Finding>;

/// The pod and container of a container's cgroup, live or remembered by
/// its tombstone.
fn pod_of_container(registry: &PodRegistry, cgroup_id: u64) -> Option<PodRef> {
    let owner = registry.owner(cgroup_id).or_else(|| registry.tombstone(cgroup_id).map(|t| &t.owner))?;
    let CgroupOwner::Container { pod_uid, container_id } = owner else { return None };
    let qos = registry.sandbox(pod_uid).map(|s| s.qos);
    Some(PodRef { pod_uid: pod_uid.clone(), qos, container_id: Some(container_id.clone()) })
}

/// Names of the pod (and container) a report is about.
fn names_in(registry: &PodRegistry, pod: Option<&PodRef>) -> Names {
    pod.map(|p| registry.names(&p.pod_uid, p.container_id.as_deref())).unwrap_or_default()
}

impl<H: Host> Watchdog<H> {
    pub fn new(host: H, settings: Settings) -> Self {
        Self {
            losses: LossWatch::new(host.losses()),
            host,
            dispatcher: Dispatcher::new(PodRegistry::new(settings.limits)),
            oom_events: OomEvents::default(),
            oom_counts: OomCounts::default(),
            storm: Storm::new(settings.storm),
            runtime: settings.runtime.map(RuntimeSide::new),
            modes: ModeChecks::default(),
            names: NameWait::default(),
            retiring: Retiring::new(settings.pod_series_ttl_ns),
            pressure: settings.pressure.map(PressureWatch::new),
            edges: Vec::new(),
            limits: LimitWatch::default(),
            limit_changes: Vec::new(),
            reported_generation: None,
            tasks_seeded: 0,
            senders: Senders::default(),
            verdicts: Verdicts::default(),
            out: Vec::new(),
        }
    }

    pub fn registry(&self) -> &PodRegistry {
        &self.dispatcher.registry
    }

    pub fn host(&self) -> &H {
        &self.host
    }

    /// The pods' and containers' memory limits as followed.
    pub fn limits(&self) -> &LimitWatch {
        &self.limits
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
        let mut pods = Vec::new();
        for event in self.host.scan(now_ns) {
            self.dispatcher.dispatch(&event, now_ns);
            if let Event::CgroupMkdir(c) = &event {
                self.senders.cgroup_created(c.cgroup_id, &c.path);
                // Its past, where a file shows it (v2); on v1 its first
                // kill's record makes it known.
                if let Some(count) = self.host.oom_count(&c.path) {
                    self.oom_counts.seen(c.cgroup_id, count);
                }
                self.read_oom_group(c.cgroup_id);
                if let Some(what) = self.tracking(c) {
                    pods.push((c.cgroup_id, what));
                }
            }
        }
        self.dispatcher.registry.found_running();
        for &(cgroup_id, what) in &pods {
            if !self.host.track(cgroup_id, what) {
                self.out.push(Finding::TrackingFull { cgroup_id });
            }
        }
        let pods: HashSet<u64> = pods.into_iter().map(|(id, _)| id).collect();
        self.tasks_seeded = self.host.seed_tasks(&pods);
        self.ask_names();
        if let Some(side) = self.runtime.as_mut() {
            side.scan(&self.host, &mut self.out);
        }
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
        self.retiring.retire(now_ns, &mut self.out);
        self.release_named(now_ns);
        let totals = self.host.losses();
        if self.losses.cgroups_lost(&totals) {
            self.resync(now_ns);
        }
        self.losses.report(totals, &mut self.out);
        if let Some(side) = self.runtime.as_mut() {
            side.tick(&self.host, now_ns, &mut self.out);
        }
        self.watch_memory(now_ns);
        self.senders.expire(now_ns);
        self.out.push(Finding::SignalsForgotten { total: self.senders.evicted + self.senders.dropped });
        self.settle_verdicts(now_ns);
        self.out.drain(..)
    }

    /// At shutdown: what still waits (an OOM event's burst, names for a
    /// series or a death) goes out with what is known.
    pub fn flush(&mut self, now_ns: u64) -> Findings<'_> {
        let later = now_ns.saturating_add(GROUP_GAP_NS + 1);
        self.close_oom_events(later, later);
        // Including what the bursts just closed handed over to wait.
        let registry = &self.dispatcher.registry;
        self.names.flush(|p| names_in(registry, p), &mut self.out);
        self.out.drain(..)
    }

    fn kernel(&mut self, event: &Event, now: u64) {
        // A signal's sender is placed as it comes: its process, even its
        // cgroup, may be gone by the time its target ends.
        if let Event::Signal(s) = event {
            let runtime = self.runtime.as_ref().map(RuntimeSide::place);
            self.senders.signal(s, &self.dispatcher.registry, runtime);
            return;
        }
        // The kernel used the setting as it is now; read it before the
        // victim is classified (the cgroup still exists while its processes
        // are being killed).
        if let Event::OomKill(o) = event {
            if let Some(v) = o.victim {
                self.senders.oom_victim(TaskKey::new(v.tgid, v.start_ns), o.ts_ns);
            }
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
        let report = self.dispatcher.dispatch(event, now);
        match event {
            Event::CgroupMkdir(c) => {
                self.senders.cgroup_created(c.cgroup_id, &c.path);
                self.oom_counts.born(c.cgroup_id);
            }
            Event::CgroupRmdir(c) => {
                self.senders.cgroup_removed(c.cgroup_id);
                self.oom_counts.forget(c.cgroup_id);
            }
            _ => {}
        }
        if let Event::CgroupMkdir(c) = event {
            if self.read_oom_group(c.cgroup_id) {
                self.modes.appeared(c.cgroup_id, now);
            }
            // The kernel tracks every new cgroup from its mkdir: a pod's or
            // a container's is said to be one (what a container nests is
            // its own from then on); one that is neither goes back to being
            // counted there.
            match self.tracking(c) {
                Some(what) => {
                    if !self.host.track(c.cgroup_id, what) {
                        self.out.push(Finding::TrackingFull { cgroup_id: c.cgroup_id });
                    }
                }
                None => self.host.untrack(c.cgroup_id),
            }
        }
        match (report, event) {
            (Some(Report::Exit(r)), Event::Exit(e)) => self.kernel_exit(r, e, now),
            (Some(Report::Oom(r)), Event::OomKill(o)) => self.oom_kill(r, o, now),
            (None, _) => self.ask_names(),
            _ => {}
        }
        // By the event's own time, not the clock: a backlog (a slow or
        // stalled agent) must not end a burst whose victims still queue.
        self.close_oom_events(event.ts_ns(), now);
        for pod_uid in self.dispatcher.registry.take_gone_pods() {
            self.retiring.pod_gone(pod_uid, now, &mut self.out);
        }
        self.report_model();
        if let Some(rmdir) = gone_already {
            self.kernel(&rmdir, now);
            self.out.push(Finding::CgroupResync { reread: false, created: 0, removed: 1 });
        }
    }

    fn kernel_exit(&mut self, r: ExitReport, e: &Exit, now: u64) {
        if let Some(side) = self.runtime.as_mut() {
            side.kernel_exit(&r, e, &mut self.out);
        }
        let oom = r.container_exit == Some(ExitReason::OomKilled);
        let ended = self.senders.exit(TaskKey::new(e.tgid, e.start_ns), e.status, oom);
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
                ended,
            }),
            _ => None,
        };
        if let Some(exit) = &container_exit {
            self.check_verdict(exit, now);
        }
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

    /// Once a tick: the pods' and containers' memory limits (see
    /// [`limits`]) and the containers' memory pressure (see [`pressure`]),
    /// from what the kernel said since the last tick.
    fn watch_memory(&mut self, now_ns: u64) {
        let registry = &self.dispatcher.registry;
        self.limits.reconcile(&mut self.host, registry, now_ns, self.pressure.is_some());
        let woken = self.host.take_memory_wakeups();
        if woken.overflowed {
            self.limits.notices_lost(now_ns);
        }
        // Those the kernel would not watch are asked again, now and then.
        self.limits.retry_watches(&mut self.host, now_ns);
        for &id in &woken.limits {
            self.limits.reread(&self.host, id, SeenBy::KernelNotice, now_ns, &mut self.limit_changes);
        }
        for (id, by) in self.limits.due(now_ns) {
            self.limits.reread(&self.host, id, by, now_ns, &mut self.limit_changes);
        }
        self.name_limit_changes();
        self.out.push(Finding::LimitsWatched {
            watched: self.limits.watched(),
            reads: self.limits.reads,
            failures: woken.failures,
        });
        let Some(p) = self.pressure.as_mut() else { return };
        let registry = &self.dispatcher.registry;
        p.reconcile(registry, now_ns, &mut self.edges);
        p.tick(&mut self.host, registry, &woken.events, woken.overflowed, now_ns, &mut self.edges);
        let levels = p.levels();
        let (reads, watched) = (p.reads, p.watched());
        self.name_edges();
        let registry = &self.dispatcher.registry;
        let containers = levels
            .into_iter()
            .filter_map(|l| {
                let pod = pod_of_container(registry, l.cgroup_id)?;
                let names = names_in(registry, Some(&pod));
                Some(finding::ContainerPressure { pod, names, reasons: l.reasons, figures: l.figures })
            })
            .collect();
        self.out.push(Finding::PressureLevels(PressureLevels { containers, reads, watched }));
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
            RuntimeEvent::TaskExit { container_id, exec_id, pid, exit_status, published_ns } => {
                if !exec_id.is_empty() && exec_id != container_id {
                    return; // an exec'd process, not the container's init
                }
                let published = now.boot_of_wall(*published_ns);
                // The envelope carries the shim's time of reaping; the lag
                // that matters is until containerd handed the event over.
                side.task_exit(*pid, now.boot_ns, &mut self.out);
                let mut settled = Vec::new();
                if self.verdicts.task_exit(container_id, *exit_status, now.boot_ns, &mut settled) {
                    self.ask_verdict(container_id);
                }
                self.out.extend(settled.into_iter().map(|v| Finding::RuntimeVerdict(Box::new(v))));
                let report = runtime_exit(&mut self.dispatcher.registry, container_id, published, now.boot_ns);
                if let Outcome::Late(reason) = report.outcome {
                    let names = self.names(report.pod.as_ref());
                    let late = LateExit { report, reason, names, pid: Some(*pid), comm: None, ts_ns: published };
                    self.out.push(Finding::LateExit(late));
                }
            }
            RuntimeEvent::TaskOom { container_id, published_ns } => {
                side.task_oom(container_id, now.boot_of_wall(*published_ns), &mut self.out);
            }
            RuntimeEvent::ContainerNamed(snapshot) => self.metadata(snapshot, now.boot_ns),
            RuntimeEvent::ContainerStatus { container_id, exited, reason, exit_code } => {
                let status = RuntimeStatus { exited: *exited, reason: reason.clone(), exit_code: *exit_code };
                let registry = &self.dispatcher.registry;
                if let Some(v) = self.verdicts.status(container_id, &status, |p| names_in(registry, Some(p))) {
                    self.out.push(Finding::RuntimeVerdict(Box::new(v)));
                }
            }
            // Its limits may be about to move (a CRI `UpdateContainerResources`).
            RuntimeEvent::ContainerUpdate { container_id, .. } => {
                if let Some(id) = self.dispatcher.registry.container_cgroup(container_id) {
                    self.limits.runtime_updated(id, now.boot_ns);
                }
            }
            RuntimeEvent::TaskDelete { .. }
            | RuntimeEvent::ContainerCreate { .. }
            | RuntimeEvent::ContainerDelete { .. } => {}
        }
    }

    /// A container init's end, as the kernel saw it, waits for the
    /// runtime's word on it (where a runtime is followed).
    fn check_verdict(&mut self, exit: &ContainerExit, now_ns: u64) {
        let (Some(_), Some(pod)) = (self.runtime.as_ref(), exit.report.pod.as_ref()) else { return };
        let Some(id) = pod.container_id.clone() else { return };
        let end = KernelEnd {
            pod: pod.clone(),
            pid: exit.pid,
            status: exit.status,
            reason: exit.reason,
            sender: exit.ended.as_ref().map(|e| e.sender),
            ts_ns: exit.ts_ns,
        };
        let mut settled = Vec::new();
        if self.verdicts.kernel_exit(&id, end, now_ns, &mut settled) {
            self.ask_verdict(&id);
        }
        self.out.extend(settled.into_iter().map(|v| Finding::RuntimeVerdict(Box::new(v))));
    }

    /// Both sides of container `id`'s end are in: the CRI is asked for its
    /// status, or where it is not listing, the TaskExit's word stands.
    fn ask_verdict(&mut self, id: &str) {
        if self.host.listing_up() {
            self.verdicts.asked(id);
            self.host.want_status(id);
            return;
        }
        let registry = &self.dispatcher.registry;
        if let Some(v) = self.verdicts.settle(id, &|p: &PodRef| names_in(registry, Some(p))) {
            self.out.push(Finding::RuntimeVerdict(Box::new(v)));
        }
    }

    /// Once a tick: ends whose TaskExit never came are asked of the CRI;
    /// checks that waited their time settle.
    fn settle_verdicts(&mut self, now_ns: u64) {
        let registry = &self.dispatcher.registry;
        let mut settled = Vec::new();
        let ask = self.verdicts.tick(now_ns, self.host.listing_up(), |p| names_in(registry, Some(p)), &mut settled);
        for id in ask {
            self.host.want_status(&id);
        }
        self.out.extend(settled.into_iter().map(|v| Finding::RuntimeVerdict(Box::new(v))));
    }

    fn metadata(&mut self, snapshot: &Snapshot, now_ns: u64) {
        self.dispatcher.registry.apply_metadata(snapshot, now_ns);
        self.report_model();
        self.release_named(now_ns);
    }

    fn report_storm(&mut self, state: StormState) {
        self.out.push(Finding::OomWindow {
            events: state.events_in_window,
            window_secs: state.window_secs,
            storm: state.storm,
            storming: state.storming,
        });
        if let Some(edge) = state.edge {
            self.out.push(Finding::OomStorm(edge));
        }
    }

    /// What the model holds, if it changed since the last report.
    fn report_model(&mut self) {
        let registry = &self.dispatcher.registry;
        if self.reported_generation == Some(registry.generation()) {
            return;
        }
        self.reported_generation = Some(registry.generation());
        // Per namespace, so that dashboards list a namespace before
        // anything happens in it.
        let mut namespaces = std::collections::BTreeMap::<&str, usize>::new();
        for sandbox in registry.sandboxes() {
            let namespace = registry.metadata.pod(&sandbox.pod_uid).map_or("", |p| p.namespace.as_str());
            if !namespace.is_empty() {
                *namespaces.entry(namespace).or_default() += 1;
            }
        }
        self.out.push(Finding::Model(ModelStats {
            namespaces: namespaces.into_iter().map(|(n, c)| (n.to_string(), c)).collect(),
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

    /// What the kernel is to track cgroup `c` as: a pod's or a
    /// container's the model holds; `None` for any other.
    fn tracking(&self, c: &CgroupChange) -> Option<Tracking> {
        match self.dispatcher.registry.owner(c.cgroup_id)? {
            CgroupOwner::Pod { .. } => Some(Tracking::Pod),
            CgroupOwner::Container { .. } => Some(Tracking::Container { level: c.level }),
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
        for id in self.modes.due(now_ns) {
            if self.dispatcher.registry.container_of(id).is_some_and(|c| c.oom_group != Some(true)) {
                self.read_oom_group(id);
            }
        }
    }
}
