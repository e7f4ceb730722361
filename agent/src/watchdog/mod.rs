//! The watchdog core: kernel events, runtime events and the passing of
//! time in, [`Finding`]s out. [`Watchdog`] is a small coordinator over
//! the state that spans events, each part owning its own: the pod model's
//! dispatcher, OOM bursts ([`oom_events`]) and the storm window
//! ([`storm`]), findings waiting for names ([`names`]), the counts that say
//! kill's explanation ([`explain`]), the pipeline's losses ([`losses`]), the
//! runtime's side ([`runtime_side`]), the per-pod series' grace
//! ([`retiring`]), and containers whose group-kill setting is read again
//! ([`oom_group`]).
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
pub mod explain;
pub mod finding;
pub mod host;
pub mod losses;
pub mod names;
pub mod oom_events;
pub mod oom_group;
pub mod oom_limit;
pub mod pressure;
pub mod retiring;
pub mod runtime_side;
pub mod storm;
#[cfg(test)]
mod tests;

use std::collections::HashSet;

pub use finding::{
    ContainerExit, Finding, LateExit, LossStage, MemoryPressure, ModelStats, OomKill, PodOom, PressureLevels,
    SandboxDeath,
};
pub use host::{CgroupTree, Host, LossTotals, Tracking};
pub use names::NAME_WAIT_NS;
pub use oom_events::{OomEvent, OomScope};
pub use oom_limit::{Fired, OomConstraint, OomLimit};
pub use runtime_side::RuntimeSettings;

use self::{
    losses::LossWatch,
    names::{Awaiting, NameWait},
    oom_events::{OomEvents, GROUP_GAP_NS},
    oom_group::ModeChecks,
    pressure::{PressureEdge, PressureSettings, PressureWatch},
    retiring::Retiring,
    runtime_side::RuntimeSide,
    storm::{Storm, StormSettings, StormState},
};
use crate::{
    events::{
        kernel::{CgroupChange, Exit, OomKill as KernelOomKill},
        Event, RuntimeEvent,
    },
    host::Now,
    model::{
        cgroup_path, dispatch::runtime_exit, metadata::Snapshot, registry::CgroupOwner, Dispatcher, ExitReport, Limits,
        Names, OomReport, Outcome, PodRef, PodRegistry, Report,
    },
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
    storm: Storm,
    runtime: Option<RuntimeSide>,
    modes: ModeChecks,
    names: NameWait,
    losses: LossWatch,
    retiring: Retiring,
    pressure: Option<PressureWatch>,
    /// Pressure edges of the current call, before they are named.
    edges: Vec<PressureEdge>,
    /// The registry generation last reported in a `Model` finding.
    reported_generation: Option<u64>,
    tasks_seeded: usize,
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
            storm: Storm::new(settings.storm),
            runtime: settings.runtime.map(RuntimeSide::new),
            modes: ModeChecks::default(),
            names: NameWait::default(),
            retiring: Retiring::new(settings.pod_series_ttl_ns),
            pressure: settings.pressure.map(PressureWatch::new),
            edges: Vec::new(),
            reported_generation: None,
            tasks_seeded: 0,
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
        let mut pods = Vec::new();
        for event in self.host.scan(now_ns) {
            self.dispatcher.dispatch(&event, now_ns);
            if let Event::CgroupMkdir(c) = &event {
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
        self.watch_pressure(now_ns);
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
        let report = self.dispatcher.dispatch(event, now);
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

    fn oom_kill(&mut self, mut r: OomReport, o: &KernelOomKill, now: u64) {
        let registry = &self.dispatcher.registry;
        let container = o.victim.and_then(|v| registry.container_of(v.cgroup_id));
        let group_mode = container.is_some_and(|c| c.oom_group == Some(true));
        let host = &self.host;
        let explained =
            self.oom_events.victim(&mut r, || explain::explain(host, registry, o, now), o.ts_ns, group_mode);
        let trigger_container = r.trigger.as_ref().and_then(|t| {
            let owner = registry.owner(t.cgroup_id)?;
            let crate::model::registry::CgroupOwner::Container { pod_uid, container_id } = owner else { return None };
            let victims = r.pod.as_ref().and_then(|p| p.container_id.as_deref());
            (victims != Some(container_id.as_str()))
                .then(|| (container_id.clone(), registry.names(pod_uid, Some(container_id))))
        });
        if let (Some(side), Some(container)) =
            (self.runtime.as_mut(), r.pod.as_ref().and_then(|p| p.container_id.as_deref()))
        {
            side.kernel_oom(&self.host, container, o.ts_ns, &mut self.out);
        }
        let names = self.names(r.pod.as_ref());
        // What the kill's container was warned of: the kill ends it.
        let warned = match (self.pressure.as_mut(), container.map(|c| c.cgroup_id)) {
            (Some(p), Some(id)) => p.killed(id, o.ts_ns, &mut self.edges),
            _ => None,
        };
        if let Some(w) = &warned {
            self.oom_events.warned(w.for_ns);
        }
        self.out.push(Finding::OomKill(Box::new(OomKill {
            report: r,
            explained,
            names,
            victim_rss: o.rss,
            oom_score_adj: o.oom_score_adj,
            trigger_container,
            warned,
            ts_ns: o.ts_ns,
        })));
        self.name_edges();
    }

    /// Once a tick: the containers' memory pressure (see [`pressure`]).
    fn watch_pressure(&mut self, now_ns: u64) {
        let Some(p) = self.pressure.as_mut() else { return };
        p.reconcile(&mut self.host, &self.dispatcher.registry, now_ns, &mut self.edges);
        p.tick(&mut self.host, &self.dispatcher.registry, now_ns, &mut self.edges);
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

    /// The pressure edges found so far, with their pods' names.
    fn name_edges(&mut self) {
        let registry = &self.dispatcher.registry;
        for e in self.edges.drain(..) {
            // A container gone is named by its tombstone.
            let Some(pod) = pod_of_container(registry, e.cgroup_id) else { continue };
            let names = names_in(registry, Some(&pod));
            self.out.push(Finding::MemoryPressure(Box::new(MemoryPressure {
                pod,
                names,
                reason: e.reason,
                change: e.change,
                since_ns: e.since_ns,
                ts_ns: e.ts_ns,
                figures: e.figures,
            })));
        }
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
                side.task_exit(*pid, now.boot_ns, &mut self.out);
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
        self.losses.resynced_ns = now;
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
        if c.ts_ns >= self.losses.resynced_ns || c.truncated || cgroup_path::parse(&c.path).is_none() {
            return None;
        }
        if self.host.cgroup_id(&c.path) == Some(c.cgroup_id) {
            return None;
        }
        Some(Event::CgroupRmdir(CgroupChange { ts_ns: now, path: String::new(), ..c.clone() }))
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
                fired: event.explained.fired,
                cause: event.explained.cause,
                unknown: event.explained.unknown,
            });
            let state = self.storm.record(now_ns);
            self.report_storm(state);
            if event.report.pod.is_some() {
                self.defer(
                    Awaiting::PodOom(PodOom {
                        report: event.report,
                        fired: event.explained.fired,
                        cause: event.explained.cause,
                        names: Names::default(),
                        warned_for_ns: event.warned_for_ns,
                    }),
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
        let names = names_in(&self.dispatcher.registry, what.pod());
        if let Some(id) = self.names.defer(what, names, self.host.listing_up(), now_ns, &mut self.out) {
            self.host.want_names(&id);
        }
    }

    /// What waited for names and is named now, or waited long enough.
    fn release_named(&mut self, now_ns: u64) {
        let registry = &self.dispatcher.registry;
        self.names.release(now_ns, |p| names_in(registry, p), &mut self.out);
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

    /// Names of the pod (and container) a report is about.
    fn names(&self, pod: Option<&PodRef>) -> Names {
        names_in(&self.dispatcher.registry, pod)
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
        for id in self.modes.due(now_ns) {
            if self.dispatcher.registry.container_of(id).is_some_and(|c| c.oom_group != Some(true)) {
                self.read_oom_group(id);
            }
        }
    }
}
