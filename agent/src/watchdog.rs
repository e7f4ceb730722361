//! One event in, everything it means out: dispatch to the pod model, count
//! the report, log what an operator must see. The agent loop and the
//! privileged tests both drive this, so tests exercise the production path.

use std::{collections::VecDeque, sync::Arc};

use crate::{
    events::Event,
    model::{
        dispatch::runtime_exit,
        metadata::Snapshot,
        oom_events::OomEvents,
        runtime::{Correlator, CorrelatorLimits, Expired},
        Dispatcher, ExitReport, Names, OomReport, Outcome, PodRef, Registry, Report, TaskRole,
    },
    probes::{
        cgroups::CgroupLayout,
        scan::{proc_comm, scan},
    },
    runtime::{
        containerd::RuntimeEvent,
        crash::{scan_proc, RuntimeChange, RuntimeProcesses},
        cri::MetadataRequests,
    },
    telemetry::{pods::PodMetrics, runtime::RuntimeMetrics},
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
/// node-wide already), or the log line of a sandbox death.
enum Awaiting {
    PodOom(OomReport),
    Death(ExitReport),
}

impl Awaiting {
    fn pod(&self) -> Option<&PodRef> {
        match self {
            Awaiting::PodOom(r) => r.pod.as_ref(),
            Awaiting::Death(r) => r.pod.as_ref(),
        }
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
        match change {
            RuntimeChange::Crashed { runtime, pid, reason } => {
                self.metrics.crashes.with_label_values(&[runtime.as_str(), reason]).inc();
                log::error!("container runtime {runtime} (pid {pid}) crashed: {reason}");
            }
            RuntimeChange::Stopped { runtime, pid } => log::warn!("container runtime {runtime} (pid {pid}) stopped"),
            RuntimeChange::Restarted { runtime, pid } => {
                self.metrics.restarts.with_label_values(&[runtime]).inc();
                log::info!("container runtime {runtime} is back (pid {pid})");
            }
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
        m.oom_mismatch.with_label_values(&["runtime_only"]).inc_by(now.runtime_only_ooms - self.counted.runtime_only_ooms);
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
            mode_checks: VecDeque::new(),
            awaiting_names: VecDeque::new(),
        }
    }

    /// Also correlates with the container runtime and watches its processes.
    pub fn with_runtime(mut self, side: RuntimeSide) -> Self {
        self.runtime = Some(side);
        self.scan_runtimes();
        self
    }

    pub fn registry(&self) -> &Registry {
        &self.dispatcher.registry
    }

    /// Learns what exists already (cgroup tree and /proc).
    pub fn discover(&mut self, layout: &CgroupLayout) {
        let now = boottime_ns();
        self.layout = Some(layout.clone());
        for event in scan(layout, now) {
            self.dispatcher.dispatch(&event, now);
            if let Event::CgroupMkdir(c) = &event {
                self.read_oom_group(c.cgroup_id);
            }
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

    /// Logs a sandbox death now, or once the runtime named its pod (or
    /// NAME_WAIT_NS passed): a sandbox that lived a second still reads
    /// with its namespace and name.
    fn log_death(&mut self, r: &ExitReport, now_ns: u64) {
        let names = self.names(r.pod.as_ref());
        if let Some(Awaiting::Death(r)) = self.defer(Awaiting::Death(r.clone()), &names, now_ns) {
            log_sandbox_death(&r, &names);
        }
    }

    /// Sends out what waited for names and is named now or waited long enough.
    fn label_awaiting(&mut self, now_ns: u64) {
        let registry = &self.dispatcher.registry;
        let metrics = &self.metrics;
        self.awaiting_names.retain(|(what, since)| {
            let names = names_of(registry, what.pod());
            if !names.complete() && now_ns.saturating_sub(*since) < NAME_WAIT_NS {
                return true;
            }
            match what {
                Awaiting::PodOom(r) => metrics.observe_pod_oom(r, &names),
                Awaiting::Death(r) => log_sandbox_death(r, &names),
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

    /// Counts the OOM events whose burst of victims is over.
    fn close_oom_events(&mut self, now_ns: u64) {
        self.oom_events.expire(now_ns);
        for event in self.oom_events.take_closed() {
            self.metrics.observe_oom_event(&event, now_ns);
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
                o.victim_comm = proc_comm(o.victim_pid, start).unwrap_or_default();
                named = Event::OomKill(o);
                &named
            }
            _ => event,
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
        }
        match &report {
            Some(Report::Exit(r)) => {
                self.metrics.observe_exit(r);
                log_late(r, &self.dispatcher.registry);
                if r.sandbox_death.is_some() {
                    self.log_death(r, now);
                }
            }
            Some(Report::Oom(r)) => {
                let names = self.names(r.pod.as_ref());
                self.metrics.observe_oom(r);
                log_oom(r, &names);
            }
            None => self.ask_names(),
        }
        if let Some(side) = self.runtime.as_mut() {
            correlate_kernel(side, event, report.as_ref());
        }
        self.close_oom_events(now);
        for pod_uid in self.dispatcher.registry.take_gone_pods() {
            self.metrics.pod_gone(&pod_uid, now);
        }
        self.metrics.refresh(&self.dispatcher.registry);
        report
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
                log_late(&report, &self.dispatcher.registry);
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
            RuntimeEvent::TaskDelete { .. } | RuntimeEvent::ContainerCreate { .. } | RuntimeEvent::ContainerDelete { .. } => None,
        }
    }

    /// Once a second: the OOM-churn window slides on, runtime processes are
    /// looked for (see SLOW_SCAN_TICKS), pending correlations settle.
    pub fn tick(&mut self) {
        let now = boottime_ns();
        self.close_oom_events(now);
        self.recheck_modes(now);
        self.metrics.refresh(&self.dispatcher.registry);
        self.metrics.tick(now);
        self.label_awaiting(now);
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

    /// At shutdown: what still waits (an OOM event's burst, names for a
    /// series or a death's log line) goes out with what is known.
    pub fn flush(&mut self) {
        let later = boottime_ns().saturating_add(NAME_WAIT_NS + crate::model::oom_events::GROUP_GAP_NS);
        self.close_oom_events(later);
        self.label_awaiting(later);
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
            let procs = scan_proc(&side.names);
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

/// CLOCK_REALTIME, the clock of the runtime's event timestamps.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CLOCK_BOOTTIME, the clock of the kernel's event timestamps.
pub fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
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

fn log_oom(r: &OomReport, names: &Names) {
    let trigger = r
        .trigger
        .as_ref()
        .map(|t| format!(", triggered by pid {} ({})", t.tgid, t.comm))
        .unwrap_or_default();
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
    (
        pod.map_or("", |p| p.pod_uid.as_str()),
        pod.and_then(|p| p.container_id.as_deref()).unwrap_or(""),
    )
}

fn names_of(registry: &Registry, pod: Option<&PodRef>) -> Names {
    pod.map(|p| registry.names(&p.pod_uid, p.container_id.as_deref())).unwrap_or_default()
}

fn log_sandbox_death(r: &ExitReport, names: &Names) {
    if let Some(cause) = r.sandbox_death {
        let (pod_uid, container_id) = ids(r.pod.as_ref());
        tracing::info!(
            event = "sandbox_death",
            pod_uid,
            namespace = names.namespace.as_str(),
            pod = names.pod.as_str(),
            container = names.container.as_str(),
            container_id,
            cause = cause.label(),
            "sandbox death ({}): {}",
            cause.label(),
            describe(r.pod.as_ref(), names)
        );
    }
}

/// Logs a late exit; names are looked up only then, not for every exit.
fn log_late(r: &ExitReport, registry: &Registry) {
    if let Outcome::Late(reason) = r.outcome {
        let names = &names_of(registry, r.pod.as_ref());
        let (pod_uid, container_id) = ids(r.pod.as_ref());
        tracing::warn!(
            event = "late_exit",
            pod_uid,
            namespace = names.namespace.as_str(),
            pod = names.pod.as_str(),
            container = names.container.as_str(),
            container_id,
            reason = reason.label(),
            source = r.source.label(),
            "late exit event ({}, source {}): {}",
            reason.label(),
            r.source.label(),
            describe(r.pod.as_ref(), names)
        );
    }
}
