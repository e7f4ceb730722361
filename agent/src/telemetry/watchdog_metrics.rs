//! The metrics consumer of the watchdog's findings: what the findings mean
//! to an SRE, as Prometheus families. Labels are bounded enums, except the
//! per-pod and per-workload families (see [`super::pod_series`]), which
//! name pods and are capped, labelled through [`PodLabels`], and the
//! pods per namespace.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};
use strum::{EnumCount as _, IntoEnumIterator as _};

use super::{
    pod_labels::PodLabels,
    pod_series::{Family, PodSeries},
};
use crate::{
    labels::Label as _,
    model::{
        dispatch::OutcomeKind, registry::EvictionKind, DeathCause, ExitReason, ExitReport, LateReason, Outcome,
        QosClass, Source, TaskRole,
    },
    watchdog::{
        crashes::CrashReason,
        explain::OomCause,
        limits::{Direction as LimitDirection, LimitKind, LimitScope},
        oom_limit::UnknownLimit,
        pressure::{PressureChange, PressureEnd, PressureReason},
        Finding, ModelStats, OomConstraint, OomLimit, OomScope, PressureLevels,
    },
};

/// qos_class for victims outside any pod.
const NO_QOS: &str = "none";

/// Every qos_class value: the pod QoS classes, and `none`.
fn qos_labels() -> impl Iterator<Item = &'static str> {
    crate::labels::all::<QosClass>().chain([NO_QOS])
}

fn qos_label(qos: Option<QosClass>) -> &'static str {
    qos.map_or(NO_QOS, QosClass::label)
}

/// Which side alone reported an OOM kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
enum Direction {
    KernelOnly,
    RuntimeOnly,
}

/// What names are cached for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
enum NamedKind {
    Pod,
    Container,
}

/// What a re-read of the cgroup tree applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
enum ResyncChange {
    Created,
    Removed,
}

/// How the families are set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSettings {
    /// Cap on the per-pod series (OOM kills and container exits).
    pub max_pod_series: usize,
    /// Cap on the per-workload series.
    pub max_workload_series: usize,
    /// A new per-pod or per-workload counter series is served at 0 this
    /// long before its first events are added to it.
    pub pod_series_hold: Duration,
    /// The OOM-churn window, for its gauge's label.
    pub window_secs: u64,
    /// Runtimes whose crash and restart series exist from the start.
    pub runtime_names: Vec<String>,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self {
            max_pod_series: 500,
            max_workload_series: 500,
            pod_series_hold: Duration::from_secs(30),
            window_secs: 60,
            runtime_names: Vec::new(),
        }
    }
}

#[derive(Clone)]
pub struct WatchdogMetrics {
    oom_kills: IntCounterVec,
    oom_events: IntCounterVec,
    oom_causes: IntCounterVec,
    limit_unknown: IntCounterVec,
    oom_group_containers: IntGauge,
    container_exits: IntCounterVec,
    pod_series: Arc<Mutex<PodSeries>>,
    window: IntGauge,
    storm: IntGauge,
    storming: IntGaugeVec,
    sandbox_deaths: IntCounterVec,
    task_exits: IntCounterVec,
    /// `task_exits` children resolved once, indexed role × outcome: the
    /// exit path is hot, label hashing is not needed on it.
    task_exit_counters: Vec<IntCounter>,
    late_exits: IntCounterVec,
    exit_delay: Histogram,
    tracked_sandboxes: IntGauge,
    tracked_containers: IntGauge,
    tracked_processes: IntGauge,
    namespace_pods: IntGaugeVec,
    /// The namespaces `namespace_pods` has series of.
    namespaces: Arc<Mutex<HashSet<String>>>,
    registry_evictions: IntCounterVec,
    resyncs: IntCounter,
    resync_changes: IntCounterVec,
    names_cached: IntGaugeVec,
    names_evicted: IntCounter,
    exit_lag: Histogram,
    exits_unmatched: IntCounter,
    oom_mismatch: IntCounterVec,
    ooms_matched: IntCounter,
    crashes: IntCounterVec,
    restarts: IntCounterVec,
    runtime_up: IntGaugeVec,
    correlation_evictions: IntCounter,
    pressure_containers: IntGaugeVec,
    pressure_started: IntCounterVec,
    pressure_ended: IntCounterVec,
    pressure_lead: Histogram,
    pressure_reads: IntCounterVec,
    pressure_notices: IntCounterVec,
    pressure_watched: IntGauge,
    kills_warned: IntCounterVec,
    limit_changes: IntCounterVec,
    limit_reads: IntCounterVec,
    limits_watched: IntGauge,
    watches_refused: prometheus::IntCounter,
    watch_failures: IntCounterVec,
    notice_overflows: prometheus::IntCounter,
    kills_after_decrease: IntCounterVec,
    /// Who ended containers, stops past their grace, the runtime's word.
    signals: super::signal_metrics::SignalMetrics,
}

/// Why the kernel refused a watch of a cgroup's memory files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
enum WatchFailure {
    Instances,
    Watches,
    Gone,
    Other,
}

/// What asked for a read of a cgroup's memory limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
enum LimitRead {
    Start,
    KernelNotice,
    Runtime,
    Timer,
}

/// What the memory pressure watch read, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
enum PressureRead {
    Screen,
    Detail,
    Wakeup,
}

impl WatchdogMetrics {
    pub fn register(registry: &Registry, settings: &MetricsSettings) -> Result<Self, prometheus::Error> {
        use crate::catalogue::*;
        let r = registry;
        let window = OOM_KILLS_WINDOW.gauge_vec(r)?.with_label_values(&[&format!("{}s", settings.window_secs)]);
        let pod_series =
            PodSeries::register(r, settings.max_pod_series, settings.max_workload_series, settings.pod_series_hold)?;
        let mut m = Self {
            oom_kills: OOM_KILLS_TOTAL.counter_vec(r)?,
            oom_events: OOM_EVENTS_TOTAL.counter_vec(r)?,
            oom_causes: OOM_CAUSES_TOTAL.counter_vec(r)?,
            limit_unknown: OOM_LIMIT_UNKNOWN_TOTAL.counter_vec(r)?,
            oom_group_containers: OOM_GROUP_CONTAINERS.gauge(r)?,
            container_exits: CONTAINER_EXITS_TOTAL.counter_vec(r)?,
            pod_series: Arc::new(Mutex::new(pod_series)),
            window,
            storm: OOM_STORM.gauge(r)?,
            storming: OOM_STORM_NAMESPACE.gauge_vec(r)?,
            sandbox_deaths: SANDBOX_DEATHS_TOTAL.counter_vec(r)?,
            task_exits: TASK_EXITS_TOTAL.counter_vec(r)?,
            task_exit_counters: Vec::new(),
            late_exits: LATE_EXIT_EVENTS_TOTAL.counter_vec(r)?,
            exit_delay: EXIT_HANDLING_DELAY_SECONDS.histogram(r)?,
            tracked_sandboxes: TRACKED_SANDBOXES.gauge(r)?,
            tracked_containers: TRACKED_CONTAINERS.gauge(r)?,
            tracked_processes: TRACKED_PROCESSES.gauge(r)?,
            namespace_pods: NAMESPACE_PODS.gauge_vec(r)?,
            namespaces: Arc::new(Mutex::new(HashSet::new())),
            registry_evictions: REGISTRY_EVICTIONS_TOTAL.counter_vec(r)?,
            resyncs: CGROUP_RESYNCS_TOTAL.counter(r)?,
            resync_changes: CGROUP_RESYNC_CHANGES_TOTAL.counter_vec(r)?,
            names_cached: RUNTIME_METADATA_CACHED.gauge_vec(r)?,
            names_evicted: RUNTIME_METADATA_EVICTIONS_TOTAL.counter(r)?,
            exit_lag: RUNTIME_EXIT_LAG_SECONDS.histogram(r)?,
            exits_unmatched: RUNTIME_EXITS_UNMATCHED_TOTAL.counter(r)?,
            oom_mismatch: OOM_MISMATCH_TOTAL.counter_vec(r)?,
            ooms_matched: RUNTIME_OOM_MATCHED_TOTAL.counter(r)?,
            crashes: RUNTIME_CRASHES_TOTAL.counter_vec(r)?,
            restarts: RUNTIME_RESTARTS_TOTAL.counter_vec(r)?,
            runtime_up: RUNTIME_UP.gauge_vec(r)?,
            correlation_evictions: RUNTIME_CORRELATION_EVICTIONS_TOTAL.counter(r)?,
            pressure_containers: MEMORY_PRESSURE_CONTAINERS.gauge_vec(r)?,
            pressure_started: MEMORY_PRESSURE_STARTED_TOTAL.counter_vec(r)?,
            pressure_ended: MEMORY_PRESSURE_ENDED_TOTAL.counter_vec(r)?,
            pressure_lead: MEMORY_PRESSURE_LEAD_SECONDS.histogram(r)?,
            pressure_reads: MEMORY_PRESSURE_READS_TOTAL.counter_vec(r)?,
            pressure_notices: MEMORY_NOTICES_TOTAL.counter_vec(r)?,
            pressure_watched: MEMORY_PRESSURE_WATCHED.gauge(r)?,
            kills_warned: OOM_KILLS_WARNED_TOTAL.counter_vec(r)?,
            limit_changes: MEMORY_LIMIT_CHANGES_TOTAL.counter_vec(r)?,
            limit_reads: MEMORY_LIMIT_READS_TOTAL.counter_vec(r)?,
            limits_watched: MEMORY_LIMITS_WATCHED.gauge(r)?,
            watches_refused: MEMORY_WATCHES_REFUSED_TOTAL.counter(r)?,
            watch_failures: MEMORY_WATCH_FAILURES_TOTAL.counter_vec(r)?,
            notice_overflows: MEMORY_NOTICE_OVERFLOWS_TOTAL.counter(r)?,
            kills_after_decrease: OOM_KILLS_AFTER_LIMIT_DECREASE_TOTAL.counter_vec(r)?,
            signals: super::signal_metrics::SignalMetrics::register(r)?,
        };
        for limit in LimitKind::iter() {
            for direction in LimitDirection::iter() {
                for scope in LimitScope::iter() {
                    m.limit_changes.with_label_values(&[limit.label(), direction.label(), scope.label()]);
                }
            }
        }
        for reason in WatchFailure::iter() {
            m.watch_failures.with_label_values(&[reason.label()]);
        }
        for reason in LimitRead::iter() {
            m.limit_reads.with_label_values(&[reason.label()]);
        }
        for limit in [OomLimit::Container, OomLimit::Pod] {
            m.kills_after_decrease.with_label_values(&[limit.label()]);
        }
        for reason in PressureReason::iter() {
            m.pressure_containers.with_label_values(&[reason.label()]);
            m.pressure_started.with_label_values(&[reason.label()]);
            for ended in PressureEnd::iter() {
                m.pressure_ended.with_label_values(&[reason.label(), ended.label()]);
            }
        }
        for kind in PressureRead::iter() {
            m.pressure_reads.with_label_values(&[kind.label()]);
        }
        for result in ["registered", "refused"] {
            m.pressure_notices.with_label_values(&[result]);
        }
        for warned in ["true", "false"] {
            m.kills_warned.with_label_values(&[warned]);
        }
        // Every bounded series exists from the start, so increase() sees
        // the first event.
        for role in TaskRole::iter() {
            for qos in qos_labels() {
                m.oom_kills.with_label_values(&[role.label(), qos]);
            }
            for outcome in OutcomeKind::iter() {
                let counter = m.task_exits.with_label_values(&[role.label(), outcome.label()]);
                m.task_exit_counters.push(counter);
            }
        }
        // The verdicts that occur (see model::oom_limit::judge).
        let fired = [
            (OomLimit::Container, OomConstraint::Memcg),
            (OomLimit::Pod, OomConstraint::Memcg),
            (OomLimit::Node, OomConstraint::Memcg),
            (OomLimit::Node, OomConstraint::Global),
            (OomLimit::Unknown, OomConstraint::Unknown),
        ];
        for scope in OomScope::iter() {
            for qos in qos_labels() {
                for (limit, constraint) in fired {
                    m.oom_events.with_label_values(&[scope.label(), qos, limit.label(), constraint.label()]);
                }
            }
        }
        for limit in OomLimit::iter() {
            for cause in OomCause::iter() {
                m.oom_causes.with_label_values(&[limit.label(), cause.label()]);
            }
        }
        for why in UnknownLimit::iter() {
            m.limit_unknown.with_label_values(&[why.label()]);
        }
        for cause in DeathCause::iter() {
            m.sandbox_deaths.with_label_values(&[cause.label()]);
        }
        for role in ["sandbox", "workload"] {
            for reason in ExitReason::iter() {
                m.container_exits.with_label_values(&[role, reason.label()]);
            }
        }
        for reason in LateReason::iter() {
            for source in Source::iter() {
                m.late_exits.with_label_values(&[reason.label(), source.label()]);
            }
        }
        for what in EvictionKind::iter() {
            m.registry_evictions.with_label_values(&[what.label()]);
        }
        for change in ResyncChange::iter() {
            m.resync_changes.with_label_values(&[change.label()]);
        }
        for kind in NamedKind::iter() {
            m.names_cached.with_label_values(&[kind.label()]);
        }
        for direction in Direction::iter() {
            m.oom_mismatch.with_label_values(&[direction.label()]);
        }
        for runtime in &settings.runtime_names {
            m.restarts.with_label_values(&[runtime]);
            for reason in CrashReason::iter() {
                m.crashes.with_label_values(&[runtime, reason.label()]);
            }
        }
        Ok(m)
    }

    /// Counts what `finding` means.
    pub fn observe(&self, finding: &Finding) {
        match finding {
            Finding::TaskExit(r) => self.exit(r),
            Finding::HostExits { count } => self.exit_counter(TaskRole::Host, Outcome::Host).inc_by(*count),
            Finding::LateExit(late) => {
                self.late_exits.with_label_values(&[late.reason.label(), late.report.source.label()]).inc();
            }
            Finding::SandboxDeath(_) => {} // counted with its TaskExit
            Finding::OomKill(kill) => {
                let r = &kill.report;
                let qos = qos_label(r.pod.as_ref().and_then(|p| p.qos));
                self.oom_kills.with_label_values(&[r.role.label(), qos]).inc();
                // A pod's workload container's kill: was it warned of?
                if kill.lowered.is_some() {
                    self.kills_after_decrease.with_label_values(&[kill.explained.fired.limit.label()]).inc();
                }
                if matches!(r.role, TaskRole::ContainerInit | TaskRole::ContainerChild | TaskRole::ContainerGroup) {
                    let warned = kill.warned.as_ref();
                    self.kills_warned.with_label_values(&[if warned.is_some() { "true" } else { "false" }]).inc();
                    if let Some(w) = warned {
                        self.pressure_lead.observe(w.for_ns as f64 / 1e9);
                    }
                }
            }
            Finding::MemoryPressure(p) => match p.change {
                PressureChange::Start => self.pressure_started.with_label_values(&[p.reason.label()]).inc(),
                PressureChange::End(ended) => {
                    self.pressure_ended.with_label_values(&[p.reason.label(), ended.label()]).inc();
                }
            },
            Finding::PressureLevels(levels) => self.pressure(levels),
            Finding::LimitChange(l) => {
                let c = &l.change;
                self.limit_changes.with_label_values(&[c.kind.label(), c.direction.label(), c.scope.label()]).inc();
            }
            Finding::LimitsWatched { watched, reads, failures } => {
                self.limits_watched.set(*watched as i64);
                for (reason, total) in [
                    (LimitRead::Start, reads.start),
                    (LimitRead::KernelNotice, reads.kernel_notice),
                    (LimitRead::Runtime, reads.runtime),
                    (LimitRead::Timer, reads.timer),
                ] {
                    let c = self.limit_reads.with_label_values(&[reason.label()]);
                    c.inc_by(total.saturating_sub(c.get()));
                }
                self.watches_refused.inc_by(reads.watches_refused.saturating_sub(self.watches_refused.get()));
                self.notice_overflows.inc_by(reads.overflows.saturating_sub(self.notice_overflows.get()));
                for (reason, total) in [
                    (WatchFailure::Instances, failures.instances),
                    (WatchFailure::Watches, failures.watches),
                    (WatchFailure::Gone, failures.gone),
                    (WatchFailure::Other, failures.other),
                ] {
                    let c = self.watch_failures.with_label_values(&[reason.label()]);
                    c.inc_by(total.saturating_sub(c.get()));
                }
            }
            Finding::OomEvent { scope, qos, fired, cause, unknown, .. } => {
                let labels = [scope.label(), qos_label(*qos), fired.limit.label(), fired.constraint.label()];
                self.oom_events.with_label_values(&labels).inc();
                self.oom_causes.with_label_values(&[fired.limit.label(), cause.label()]).inc();
                if let Some(why) = unknown {
                    self.limit_unknown.with_label_values(&[why.label()]).inc();
                }
            }
            Finding::PodOom(p) => {
                let Some(pod) = &p.report.pod else { return };
                let labels = PodLabels::of(pod, &p.names);
                let how = [p.report.role.label(), p.fired.limit.label(), p.cause.label()];
                let warned = if p.warned_for_ns.is_some() { "true" } else { "false" };
                let now = Instant::now();
                let Ok(mut series) = self.pod_series.lock() else { return };
                let kills = labels.series(&[how[0], how[1], how[2], warned]);
                series.inc(Family::PodOomKills, kills, labels.pod_uid, 1.0, now);
                if let Some(for_ns) = p.warned_for_ns {
                    let lead = for_ns as f64 / 1e9;
                    series.inc(Family::PodOomWarnedSeconds, labels.series(&how), labels.pod_uid, lead, now);
                }
                if let Some(workload) = workload_series(&labels, how[0]) {
                    series.inc(Family::WorkloadOomKills, workload, labels.pod_uid, 1.0, now);
                }
            }
            Finding::ContainerExit(e) => {
                self.signals.container_exit(e);
                let Some(pod) = &e.report.pod else { return };
                let labels = PodLabels::of(pod, &e.names);
                let reason = e.reason.label();
                let sender = e.ended.as_ref().map_or(super::signal_metrics::NO_SENDER, |s| s.sender.label());
                let now = Instant::now();
                let Ok(mut series) = self.pod_series.lock() else { return };
                if !ordinary_end(e) {
                    series.inc(Family::PodContainerExits, labels.series(&[reason, sender]), labels.pod_uid, 1.0, now);
                }
                if let Some(mut workload) = workload_series(&labels, reason) {
                    workload.push(sender.to_string());
                    series.inc(Family::WorkloadContainerExits, workload, labels.pod_uid, 1.0, now);
                }
            }
            Finding::RuntimeVerdict(v) => self.signals.verdict(v),
            Finding::SignalsForgotten { total } => self.signals.forgotten(*total),
            Finding::PodSeriesExpired { pod_uid } => {
                if let Ok(mut series) = self.pod_series.lock() {
                    series.expire(pod_uid);
                }
            }
            Finding::OomWindow { events, storm, storming, .. } => {
                self.window.set(*events as i64);
                self.storm.set(i64::from(*storm));
                // Series only while a namespace storms (at most ten).
                self.storming.reset();
                for s in storming {
                    self.storming.with_label_values(&[&s.key.namespace, &s.key.pod_uid]).set(s.events as i64);
                }
            }
            Finding::OomStorm(_) => {} // the window's gauges say it
            Finding::Model(stats) => self.model(stats),
            Finding::CgroupResync { reread, created, removed } => {
                if *reread {
                    self.resyncs.inc();
                }
                self.resync_changes.with_label_values(&[ResyncChange::Created.label()]).inc_by(*created);
                self.resync_changes.with_label_values(&[ResyncChange::Removed.label()]).inc_by(*removed);
            }
            Finding::TrackingFull { .. } => {} // counted in the kernel's refusals
            Finding::EventsLost { .. } => {}   // counted where they were lost
            Finding::RuntimeCrash { runtime, reason, .. } => {
                self.crashes.with_label_values(&[runtime.as_str(), reason.label()]).inc();
            }
            Finding::RuntimeStopped { .. } => {}
            Finding::RuntimeRestart { runtime, .. } => self.restarts.with_label_values(&[runtime]).inc(),
            Finding::RuntimeUp { runtime, up } => self.runtime_up.with_label_values(&[runtime]).set(i64::from(*up)),
            Finding::ExitLag { lag_ns } => self.exit_lag.observe(*lag_ns as f64 / 1e9),
            Finding::OomMatched { count } => self.ooms_matched.inc_by(*count),
            Finding::Mismatch(e) => {
                self.exits_unmatched.inc_by(e.runtime_exits_unmatched);
                self.oom_mismatch.with_label_values(&[Direction::KernelOnly.label()]).inc_by(e.kernel_only_ooms);
                self.oom_mismatch.with_label_values(&[Direction::RuntimeOnly.label()]).inc_by(e.runtime_only_ooms);
                self.correlation_evictions.inc_by(e.evicted);
            }
        }
    }

    fn exit_counter(&self, role: TaskRole, outcome: Outcome) -> IntCounter {
        let slot = role as usize * OutcomeKind::COUNT + OutcomeKind::from(outcome) as usize;
        match self.task_exit_counters.get(slot) {
            Some(counter) => counter.clone(),
            None => self.task_exits.with_label_values(&[role.label(), outcome.label()]),
        }
    }

    fn exit(&self, r: &ExitReport) {
        let slot = r.role as usize * OutcomeKind::COUNT + OutcomeKind::from(r.outcome) as usize;
        match self.task_exit_counters.get(slot) {
            Some(counter) => counter.inc(),
            None => self.task_exits.with_label_values(&[r.role.label(), r.outcome.label()]).inc(),
        }
        if let Some(cause) = r.sandbox_death {
            self.sandbox_deaths.with_label_values(&[cause.label()]).inc();
        }
        if let (Outcome::Handled, Some(reason)) = (r.outcome, r.container_exit) {
            let role = if r.role == TaskRole::Sandbox { "sandbox" } else { "workload" };
            self.container_exits.with_label_values(&[role, reason.label()]).inc();
        }
        self.exit_delay.observe(r.delay_ns as f64 / 1e9);
    }

    /// The containers under memory pressure now: the node's counts, what
    /// the watch read, and each one's per-pod gauges (the others' go).
    fn pressure(&self, levels: &PressureLevels) {
        for reason in PressureReason::iter() {
            let n = levels.containers.iter().filter(|c| c.reasons.contains(&reason)).count();
            self.pressure_containers.with_label_values(&[reason.label()]).set(n as i64);
        }
        self.pressure_watched.set(levels.watched as i64);
        let reads = levels.reads;
        for (kind, total) in [
            (PressureRead::Screen, reads.screens),
            (PressureRead::Detail, reads.details),
            (PressureRead::Wakeup, reads.wakeups),
        ] {
            let c = self.pressure_reads.with_label_values(&[kind.label()]);
            c.inc_by(total.saturating_sub(c.get()));
        }
        for (result, total) in [("registered", reads.notices), ("refused", reads.notices_refused)] {
            let c = self.pressure_notices.with_label_values(&[result]);
            c.inc_by(total.saturating_sub(c.get()));
        }
        let mut now = Vec::new();
        for c in &levels.containers {
            let labels = PodLabels::of(&c.pod, &c.names);
            let base = labels.series(&[]);
            for reason in &c.reasons {
                now.push((Family::PodMemoryPressure, labels.series(&[reason.label()]), 1.0));
            }
            if let Some(permille) = c.figures.unreclaimable_permille {
                now.push((Family::PodUnreclaimableRatio, base.clone(), f64::from(permille) / 1000.0));
            }
            if let Some(secs) = c.figures.seconds_to_limit.filter(|_| c.reasons.contains(&PressureReason::Growing)) {
                now.push((Family::PodSecondsToLimit, base, secs as f64));
            }
        }
        if let Ok(mut series) = self.pod_series.lock() {
            series.pressure(now);
        }
    }

    fn model(&self, s: &ModelStats) {
        self.tracked_sandboxes.set(s.sandboxes as i64);
        self.tracked_containers.set(s.containers as i64);
        self.tracked_processes.set(s.processes as i64);
        self.oom_group_containers.set(s.oom_group_containers as i64);
        for what in EvictionKind::iter() {
            let c = self.registry_evictions.with_label_values(&[what.label()]);
            // The registry's own totals only grow; copy the difference.
            c.inc_by(s.evictions.get(what).saturating_sub(c.get()));
        }
        self.names_cached.with_label_values(&[NamedKind::Pod.label()]).set(s.named_pods as i64);
        self.names_cached.with_label_values(&[NamedKind::Container.label()]).set(s.named_containers as i64);
        self.names_evicted.inc_by(s.names_evicted.saturating_sub(self.names_evicted.get()));
        if let Ok(mut had) = self.namespaces.lock() {
            let now: HashSet<String> = s.namespaces.iter().map(|(n, _)| n.clone()).collect();
            for gone in had.difference(&now) {
                let _ = self.namespace_pods.remove_label_values(&[gone]);
            }
            for (namespace, pods) in &s.namespaces {
                self.namespace_pods.with_label_values(&[namespace]).set(*pods as i64);
            }
            *had = now;
        }
    }

    /// A scrape of `/metrics` from `ip`, now.
    pub fn scraped_by(&self, ip: std::net::IpAddr) {
        if let Ok(mut series) = self.pod_series.lock() {
            series.scraped(ip, Instant::now());
        }
    }

    /// The per-pod and per-workload families in the text format, to serve
    /// after the registry's families (see `metrics::render_with`).
    pub fn pod_series_text(&self) -> Result<Arc<str>, prometheus::Error> {
        self.pod_series_text_at(Instant::now())
    }

    /// The same as a scrape at `now` would read it (what waited for its
    /// series' hold by then is added).
    pub fn pod_series_text_at(&self, now: Instant) -> Result<Arc<str>, prometheus::Error> {
        match self.pod_series.lock() {
            Ok(mut series) => series.text(now),
            Err(_) => Err(prometheus::Error::Msg("per-pod series unavailable: a writer panicked".into())),
        }
    }
}

/// A pod's ordinary end: a run that completed, its sandbox stopped by the
/// runtime (the pod's teardown). A Job or CI node turns these over by the
/// thousand; a series of each, kept for `--pod-series-ttl` under the cap,
/// would crowd out the failures' (and keep `SandwatchSeriesCapReached`
/// firing). They are counted per workload and node-wide, not per pod.
fn ordinary_end(e: &crate::watchdog::ContainerExit) -> bool {
    let by_runtime = e.ended.as_ref().is_some_and(|s| s.sender == crate::watchdog::senders::Sender::Runtime);
    e.reason == ExitReason::Completed || (e.report.role == TaskRole::Sandbox && by_runtime)
}

/// A pod's workload series: its namespace, workload and kind, then
/// `what` (a role or a reason); `None` where its workload is not known.
fn workload_series(pod: &PodLabels<'_>, what: &str) -> Option<Vec<String>> {
    (!pod.workload.is_empty())
        .then(|| [pod.namespace, pod.workload, pod.workload_kind, what].map(str::to_string).to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::{registry::Evictions, Names, OomReport, PodRef, TaskKey},
        telemetry::metrics::render_with,
        watchdog::{OomKill, PodOom},
    };

    fn report(pod: u32) -> OomReport {
        OomReport {
            outcome: Outcome::Handled,
            role: TaskRole::ContainerChild,
            pod: Some(PodRef {
                pod_uid: format!("pod-{pod}"),
                qos: Some(QosClass::Burstable),
                container_id: Some("c".into()),
            }),
            victim: TaskKey::new(pod, 0),
            victim_comm: "x".into(),
            trigger: None,
            delay_ns: 0,
        }
    }

    /// A kill, its event and its pod's series, as the watchdog finds them.
    fn observe(m: &WatchdogMetrics, r: &OomReport) {
        let names = Names::default();
        m.observe(&Finding::OomKill(Box::new(OomKill {
            explained: crate::watchdog::explain::Explanation::UNKNOWN,
            victim_rss: None,
            oom_score_adj: 0,
            trigger_container: None,
            warned: None,
            lowered: None,
            report: r.clone(),
            names: names.clone(),
            ts_ns: 0,
        })));
        let qos = r.pod.as_ref().and_then(|p| p.qos);
        m.observe(&Finding::OomEvent {
            scope: OomScope::Process,
            qos,
            victims: 1,
            fired: crate::watchdog::Fired::UNKNOWN,
            cause: crate::watchdog::explain::OomCause::Unknown,
            unknown: None,
        });
        m.observe(&Finding::PodOom(PodOom {
            fired: crate::watchdog::Fired::UNKNOWN,
            cause: crate::watchdog::explain::OomCause::Unknown,
            report: r.clone(),
            names,
            warned_for_ns: None,
        }));
    }

    /// A registry and the watchdog's metrics in it, as `/metrics` serves them.
    struct Served {
        registry: Registry,
        m: WatchdogMetrics,
    }

    impl Served {
        fn new(settings: MetricsSettings) -> Self {
            let registry = Registry::new();
            let m = WatchdogMetrics::register(&registry, &settings).unwrap();
            Self { registry, m }
        }

        /// As a scrape reads it once every new series' hold is over.
        fn text(&self) -> String {
            let later = Instant::now() + Duration::from_secs(3600);
            render_with(&self.registry, &[self.m.pod_series_text_at(later).unwrap()]).unwrap()
        }
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// A churn of 2 000 pods of 20 workloads, each pod OOM-killed once and
    /// its container exiting with one of four reasons: no family grows past
    /// its cap, what went to make room is counted, and once the pods are
    /// gone (their grace over) so are their workloads' series.
    #[test]
    fn a_churn_of_2000_pods_of_20_workloads_keeps_every_family_within_its_cap() {
        use crate::{events::ExitStatus, model::ExitReport, watchdog::ContainerExit};
        let settings = MetricsSettings { max_pod_series: 500, max_workload_series: 50, ..MetricsSettings::default() };
        let served = Served::new(settings);
        let reasons = [ExitReason::OomKilled, ExitReason::Error, ExitReason::Sigsegv, ExitReason::Killed];
        let names = |pod: u32| Names {
            namespace: "shop".into(),
            pod: format!("web-{pod}"),
            container: "app".into(),
            workload: format!("w{}", pod % 20),
            workload_kind: "Deployment".into(),
        };
        for pod in 0..2000 {
            let report = report(pod);
            served.m.observe(&Finding::PodOom(PodOom {
                fired: crate::watchdog::Fired::UNKNOWN,
                cause: crate::watchdog::explain::OomCause::Unknown,
                report: report.clone(),
                names: names(pod),
                warned_for_ns: None,
            }));
            let reason = reasons[(pod / 20) as usize % reasons.len()];
            served.m.observe(&Finding::ContainerExit(ContainerExit {
                report: ExitReport {
                    source: Source::Kernel,
                    outcome: Outcome::Handled,
                    role: TaskRole::ContainerInit,
                    pod: report.pod.clone(),
                    sandbox_death: None,
                    container_exit: Some(reason),
                    delay_ns: 0,
                },
                reason,
                status: ExitStatus::Code(1),
                names: names(pod),
                pid: pod,
                comm: "app".into(),
                ts_ns: 0,
                ended: None,
            }));
        }
        let text = served.text();
        let count = |prefix: &str| text.lines().filter(|l| l.starts_with(prefix)).count();
        // Each family under a cap of its own: exits never push OOM kills out.
        assert_eq!(count("sandwatch_pod_oom_kills_total{"), 500, "the per-pod cap");
        assert_eq!(count("sandwatch_pod_container_exits_total{"), 500, "the per-pod cap");
        for family in ["oom_kills", "container_exits"] {
            let evicted = value(&text, &format!("sandwatch_pod_series_evicted_total{{family=\"{family}\"}}"));
            assert_eq!(evicted, Some(2000.0 - 500.0), "{family}");
        }
        // 20 workloads × 1 role: within the cap; × 4 reasons = 80 exit
        // series for a cap of 50, touched in turn: the least recently
        // updated goes each time.
        assert_eq!(count("sandwatch_workload_oom_kills_total{"), 20, "{text}");
        assert_eq!(count("sandwatch_workload_container_exits_total{"), 50, "the per-workload cap");
        let evicted =
            |family: &str| value(&text, &format!("sandwatch_workload_series_evicted_total{{family=\"{family}\"}}"));
        assert_eq!(evicted("oom_kills"), Some(0.0));
        assert!(evicted("container_exits").is_some_and(|n| n >= 30.0), "{text}");
        // Every pod's grace is over: nothing of theirs, nor of their
        // workloads', is left.
        for pod in 0..2000 {
            served.m.observe(&Finding::PodSeriesExpired { pod_uid: format!("pod-{pod}") });
        }
        let text = served.text();
        let kept = |l: &&str| l.contains('{') && !l.contains("_series_");
        assert!(!text.lines().filter(kept).any(|l| l.starts_with("sandwatch_pod_")), "{text}");
        assert!(!text.lines().filter(kept).any(|l| l.starts_with("sandwatch_workload_")), "{text}");
        let expired =
            |family: &str| value(&text, &format!("sandwatch_workload_series_expired_total{{family=\"{family}\"}}"));
        assert_eq!((expired("oom_kills"), expired("container_exits")), (Some(20.0), Some(50.0)));
    }

    #[test]
    fn pod_series_never_exceed_the_cap_and_evictions_are_counted() {
        let served = Served::new(MetricsSettings { max_pod_series: 3, ..MetricsSettings::default() });
        for pod in 0..10 {
            observe(&served.m, &report(pod));
        }
        // pod-0's series was evicted long ago; touching pod-9 again keeps it.
        observe(&served.m, &report(9));
        observe(&served.m, &report(10));
        let text = served.text();
        let series = text.lines().filter(|l| l.starts_with("sandwatch_pod_oom_kills_total{")).count();
        assert_eq!(series, 3, "{text}");
        assert_eq!(value(&text, "sandwatch_pod_series_evicted_total{family=\"oom_kills\"}"), Some(8.0));
        assert!(
            text.contains("pod_uid=\"pod-9\",victim_role=\"container_child\",warned=\"false\",workload=\"\",workload_kind=\"\"} 2"),
            "{text}"
        );
        // 7, 8, 9 were kept; 9 was touched again, so 10 evicted 7.
        assert!(!text.contains("pod_uid=\"pod-7\""), "least recently updated goes first: {text}");
        assert!(text.contains("pod_uid=\"pod-8\""), "{text}");
        // The node-wide counter saw all of them.
        let total: f64 = text
            .lines()
            .filter(|l| l.starts_with("sandwatch_oom_kills_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert_eq!(total, 12.0);
    }

    /// Guards: one namespace's churn of OOM-killed pods pushing every
    /// other namespace's series out of the per-pod and per-workload
    /// families (the least recently updated series went, whoever's).
    #[test]
    fn a_namespaces_churn_never_evicts_another_namespaces_series() {
        let served =
            Served::new(MetricsSettings { max_pod_series: 10, max_workload_series: 4, ..MetricsSettings::default() });
        let kill = |pod: u32, namespace: &str| {
            let names = Names {
                namespace: namespace.into(),
                pod: format!("p{pod}"),
                container: "app".into(),
                workload: format!("w{pod}"),
                workload_kind: "Pod".into(),
            };
            served.m.observe(&Finding::PodOom(PodOom {
                fired: crate::watchdog::Fired::UNKNOWN,
                cause: crate::watchdog::explain::OomCause::Unknown,
                report: report(pod),
                names,
                warned_for_ns: None,
            }));
        };
        kill(1, "quiet");
        kill(2, "billing");
        for pod in 100..400 {
            kill(pod, "noisy");
        }
        let text = served.text();
        let lines = |prefix: &str, ns: &str| {
            text.lines().filter(|l| l.starts_with(prefix) && l.contains(&format!("namespace=\"{ns}\""))).count()
        };
        for ns in ["quiet", "billing"] {
            assert_eq!(lines("sandwatch_pod_oom_kills_total{", ns), 1, "{ns}'s pod series kept:\n{text}");
            assert_eq!(lines("sandwatch_workload_oom_kills_total{", ns), 1, "{ns}'s workload series kept");
        }
        assert_eq!(lines("sandwatch_pod_oom_kills_total{", "noisy"), 8, "the flooder has the rest");
        assert_eq!(lines("sandwatch_workload_oom_kills_total{", "noisy"), 2);
        assert!(text.contains("pod=\"p399\""), "the flooder keeps its newest");
    }

    #[test]
    fn the_kept_pod_family_text_follows_every_change() {
        let hold = Duration::from_secs(30);
        let served =
            Served::new(MetricsSettings { max_pod_series: 2, pod_series_hold: hold, ..MetricsSettings::default() });
        let m = &served.m;
        let count = |text: &str, pod: &str| {
            value(text, &format!("sandwatch_pod_oom_kills_total{{cause=\"unknown\",container=\"\",limit=\"unknown\",namespace=\"\",pod=\"\",pod_uid=\"{pod}\",victim_role=\"container_child\",warned=\"false\",workload=\"\",workload_kind=\"\"}}"))
        };
        let t0 = Instant::now();
        assert_eq!(&*m.pod_series_text_at(t0).unwrap(), "", "no series, no family");
        observe(m, &report(1));
        let first = m.pod_series_text_at(t0).unwrap();
        assert!(
            Arc::ptr_eq(&first, &m.pod_series_text_at(t0).unwrap()),
            "unchanged: the same text, not rendered again"
        );
        assert_eq!(count(&first, "pod-1"), Some(0.0), "served at 0 first: {first}");
        assert!(first.starts_with("# HELP sandwatch_pod_oom_kills_total "), "{first}");
        // Its kill is added once the hold is over, and shows at once then.
        let later = t0 + hold + Duration::from_secs(1);
        let released = m.pod_series_text_at(later).unwrap();
        assert!(!Arc::ptr_eq(&first, &released));
        assert_eq!(count(&released, "pod-1"), Some(1.0), "{released}");
        // An increment, an eviction and an expiry each show at the next scrape.
        observe(m, &report(1));
        assert_eq!(count(&m.pod_series_text_at(later).unwrap(), "pod-1"), Some(2.0), "an old series is not held");
        observe(m, &report(2));
        observe(m, &report(3));
        let text = served.text();
        assert_eq!((count(&text, "pod-1"), count(&text, "pod-3")), (None, Some(1.0)), "{text}");
        m.observe(&Finding::PodSeriesExpired { pod_uid: "pod-3".into() });
        let text = served.text();
        assert_eq!((count(&text, "pod-2"), count(&text, "pod-3")), (Some(1.0), None), "{text}");
        assert_eq!(value(&text, "sandwatch_pod_series_expired_total{family=\"oom_kills\"}"), Some(1.0));
        assert_eq!(text.matches("# TYPE sandwatch_pod_oom_kills_total counter").count(), 1, "{text}");
        // The node-wide counter keeps everything.
        assert_eq!(
            value(&text, "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_child\"}"),
            Some(4.0)
        );
    }

    /// Guards: a scraper slower than the hold (every 60 s; the hold 30 s)
    /// reading a new series first with its first event counted, which
    /// Prometheus' increase() never counts: that event lost to every rule.
    #[test]
    fn a_new_series_waits_for_a_slow_scraper_to_read_its_zero() {
        let hold = Duration::from_secs(30);
        let served = Served::new(MetricsSettings { pod_series_hold: hold, ..MetricsSettings::default() });
        let m = &served.m;
        let count = |text: &str| {
            value(text, "sandwatch_pod_oom_kills_total{cause=\"unknown\",container=\"\",limit=\"unknown\",namespace=\"\",pod=\"\",pod_uid=\"pod-1\",victim_role=\"container_child\",warned=\"false\",workload=\"\",workload_kind=\"\"}")
        };
        let secs = Duration::from_secs;
        let t0 = Instant::now();
        let prometheus: std::net::IpAddr = [10, 0, 0, 9].into();
        for ago in [120, 60, 0] {
            let at = t0.checked_sub(secs(ago)).unwrap_or(t0);
            m.pod_series.lock().unwrap().scraped(prometheus, at);
            m.pod_series_text_at(at).unwrap();
        }
        let node = render_with(&served.registry, &[]).unwrap();
        assert_eq!(value(&node, "sandwatch_pod_series_hold_seconds"), Some(90.0), "1.5 times its 60 s");
        observe(m, &report(1));
        // Its next scrape, 59 s on: past the 30 s, still the 0.
        m.pod_series.lock().unwrap().scraped(prometheus, t0 + secs(59));
        assert_eq!(count(&m.pod_series_text_at(t0 + secs(59)).unwrap()), Some(0.0), "the slow scraper reads the 0");
        m.pod_series.lock().unwrap().scraped(prometheus, t0 + secs(119));
        assert_eq!(count(&m.pod_series_text_at(t0 + secs(119)).unwrap()), Some(1.0), "then the kill");
    }

    /// Guards: a per-pod series that appears with its first event already
    /// counted (born at 1), which Prometheus' increase() never counts; a
    /// container id in its labels, which makes every restart a new series
    /// born at 1; and a series that expired coming back at 1 with a late
    /// event.
    /// Guards: a Job node's churn (runs that complete, sandboxes the
    /// runtime stops at teardown) filling the per-pod cap and pushing out
    /// other tenants' failures, and keeping the cap's alert firing.
    #[test]
    fn a_job_nodes_ordinary_ends_make_no_per_pod_series_and_evict_no_failure() {
        use crate::{
            model::ExitReport,
            watchdog::{
                senders::{Sender, SignalEnd},
                ContainerExit,
            },
        };
        let served = Served::new(MetricsSettings {
            max_pod_series: 10,
            pod_series_hold: Duration::ZERO,
            ..MetricsSettings::default()
        });
        let m = &served.m;
        let end = |uid: &str, role: TaskRole, reason: ExitReason, sender: Option<Sender>| {
            let names = Names {
                namespace: if uid.starts_with("job") { "ci".into() } else { "shop".into() },
                pod: uid.into(),
                container: if role == TaskRole::Sandbox { "POD".into() } else { "app".into() },
                workload: uid.split('-').next().unwrap_or_default().into(),
                workload_kind: "Job".into(),
            };
            let ended = sender.map(|sender| SignalEnd {
                sender,
                signal: 9,
                pid: None,
                comm: None,
                pod: None,
                unit: None,
                stop: None,
            });
            m.observe(&Finding::ContainerExit(ContainerExit {
                report: ExitReport {
                    source: Source::Kernel,
                    outcome: Outcome::Handled,
                    role,
                    pod: Some(PodRef { pod_uid: uid.into(), qos: None, container_id: Some(format!("{uid}-c")) }),
                    sandbox_death: None,
                    container_exit: Some(reason),
                    delay_ns: 0,
                },
                reason,
                status: crate::events::ExitStatus::Code(0),
                ended,
                names,
                pid: 1,
                comm: "app".into(),
                ts_ns: 0,
            }));
        };
        // Another tenant's crash, then a thousand Job pods that complete.
        end("web-1", TaskRole::ContainerInit, ExitReason::Error, None);
        for i in 0..1000 {
            let uid = format!("job-{i}");
            end(&uid, TaskRole::ContainerInit, ExitReason::Completed, None);
            end(&uid, TaskRole::Sandbox, ExitReason::Killed, Some(Sender::Runtime));
        }
        let text = served.text();
        let per_pod: Vec<&str> =
            text.lines().filter(|l| l.starts_with("sandwatch_pod_container_exits_total{")).collect();
        assert_eq!(per_pod.len(), 1, "only the failure has a per-pod series: {per_pod:?}");
        assert!(per_pod[0].contains("pod_uid=\"web-1\"") && per_pod[0].ends_with(" 1"), "{per_pod:?}");
        assert_eq!(value(&text, "sandwatch_pod_series_evicted_total{family=\"container_exits\"}"), Some(0.0));
        // Counted per workload all the same.
        let completed = text
            .lines()
            .filter(|l| {
                l.starts_with("sandwatch_workload_container_exits_total{") && l.contains("reason=\"completed\"")
            })
            .count();
        assert!(completed > 0, "{text}");
        // A sandbox ended otherwise than by the runtime is no teardown.
        end("odd-1", TaskRole::Sandbox, ExitReason::Killed, Some(Sender::Host));
        assert!(served.text().contains("pod_uid=\"odd-1\""), "a sandbox a host process killed has its series");
    }

    #[test]
    fn a_crash_loop_across_restarts_is_one_series_served_at_0_first() {
        let hold = Duration::from_secs(15);
        let served = Served::new(MetricsSettings { pod_series_hold: hold, ..MetricsSettings::default() });
        let m = &served.m;
        let names = Names {
            namespace: "shop".into(),
            pod: "web-1".into(),
            container: "app".into(),
            workload: "web".into(),
            workload_kind: "Deployment".into(),
        };
        let exit = |restart: u32| {
            use crate::{model::ExitReport, watchdog::ContainerExit};
            let pod = PodRef { pod_uid: "u1".into(), qos: None, container_id: Some(format!("id-{restart}")) };
            m.observe(&Finding::ContainerExit(ContainerExit {
                report: ExitReport {
                    source: Source::Kernel,
                    outcome: Outcome::Handled,
                    role: TaskRole::ContainerInit,
                    pod: Some(pod),
                    sandbox_death: None,
                    container_exit: Some(ExitReason::Error),
                    delay_ns: 0,
                },
                reason: ExitReason::Error,
                status: crate::events::ExitStatus::Code(1),
                ended: None,
                names: names.clone(),
                pid: restart,
                comm: "app".into(),
                ts_ns: 0,
            }));
        };
        let pod = "sandwatch_pod_container_exits_total{container=\"app\",namespace=\"shop\",pod=\"web-1\",pod_uid=\"u1\",reason=\"error\",sender=\"none\",workload=\"web\",workload_kind=\"Deployment\"}";
        let workload = "sandwatch_workload_container_exits_total{namespace=\"shop\",reason=\"error\",sender=\"none\",workload=\"web\",workload_kind=\"Deployment\"}";
        let scrape = |at: Instant| render_with(&served.registry, &[m.pod_series_text_at(at).unwrap()]).unwrap();
        let t0 = Instant::now();
        exit(1);
        // Scrapes inside the hold read 0, in the pod's and the workload's series.
        for at in [t0, t0 + hold / 2] {
            let text = scrape(at);
            assert_eq!((value(&text, pod), value(&text, workload)), (Some(0.0), Some(0.0)), "{text}");
        }
        // Three restarts, each under a new id: the same series.
        for restart in 2..=4 {
            exit(restart);
        }
        // (The exits were observed just after t0.)
        let over = hold + Duration::from_secs(1);
        let text = scrape(t0 + over);
        assert_eq!((value(&text, pod), value(&text, workload)), (Some(4.0), Some(4.0)), "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("sandwatch_pod_container_exits_total{")).count(), 1);
        assert!(!text.contains("id-1"), "no container id in a counter's labels: {text}");
        // Expired, then a late exit: back at 0 first, never at 1.
        m.observe(&Finding::PodSeriesExpired { pod_uid: "u1".into() });
        assert_eq!(value(&scrape(t0 + over), pod), None);
        let t1 = Instant::now();
        exit(5);
        assert_eq!(value(&scrape(t1), pod), Some(0.0));
        assert_eq!(value(&scrape(t1 + over), pod), Some(1.0));
    }

    /// A warned kill says so in its pod's series, and by how long.
    #[test]
    fn a_warned_kill_carries_its_warning_and_lead() {
        let served = Served::new(MetricsSettings::default());
        let mut r = report(7);
        r.role = TaskRole::ContainerInit;
        for warned_for_ns in [Some(90_000_000_000), None, Some(30_000_000_000)] {
            served.m.observe(&Finding::PodOom(PodOom {
                fired: crate::watchdog::Fired::UNKNOWN,
                cause: crate::watchdog::explain::OomCause::Anon,
                report: r.clone(),
                names: Names::default(),
                warned_for_ns,
            }));
        }
        let text = served.text();
        let labels = "cause=\"anon\",container=\"\",limit=\"unknown\",namespace=\"\",pod=\"\",pod_uid=\"pod-7\",victim_role=\"container_init\"";
        let kills = |warned: &str| {
            value(
                &text,
                &format!(
                    "sandwatch_pod_oom_kills_total{{{labels},warned=\"{warned}\",workload=\"\",workload_kind=\"\"}}"
                ),
            )
        };
        assert_eq!((kills("true"), kills("false")), (Some(2.0), Some(1.0)), "{text}");
        let lead = format!("sandwatch_pod_oom_kills_warned_seconds_total{{{labels},workload=\"\",workload_kind=\"\"}}");
        assert_eq!(value(&text, &lead), Some(120.0), "{text}");
    }

    /// Every namespace with pods has its series before anything happens in
    /// it, and loses it when its last pod goes.
    #[test]
    fn pods_are_counted_by_namespace_and_a_gone_namespace_goes() {
        let served = Served::new(MetricsSettings::default());
        let stats = |namespaces: &[(&str, usize)]| ModelStats {
            namespaces: namespaces.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
            ..ModelStats::default()
        };
        served.m.observe(&Finding::Model(stats(&[("billing", 1), ("shop", 3)])));
        let text = served.text();
        assert_eq!(value(&text, "sandwatch_namespace_pods{namespace=\"shop\"}"), Some(3.0));
        assert_eq!(value(&text, "sandwatch_namespace_pods{namespace=\"billing\"}"), Some(1.0));
        served.m.observe(&Finding::Model(stats(&[("shop", 2)])));
        let text = served.text();
        assert_eq!(value(&text, "sandwatch_namespace_pods{namespace=\"shop\"}"), Some(2.0));
        assert!(!text.contains("namespace=\"billing\""), "{text}");
    }

    #[test]
    fn exits_land_in_their_role_and_outcome_series() {
        use crate::{model::LateReason, watchdog::LateExit};
        let served = Served::new(MetricsSettings::default());
        let m = &served.m;
        let exit = |role, outcome, death| ExitReport {
            source: Source::Kernel,
            outcome,
            role,
            pod: None,
            sandbox_death: death,
            container_exit: None,
            delay_ns: 2_000_000,
        };
        m.observe(&Finding::TaskExit(exit(TaskRole::ContainerChild, Outcome::Handled, None)));
        m.observe(&Finding::TaskExit(exit(TaskRole::ContainerChild, Outcome::Handled, None)));
        m.observe(&Finding::TaskExit(exit(TaskRole::Sandbox, Outcome::Handled, Some(DeathCause::Oom))));
        let late = exit(TaskRole::Unknown, Outcome::Late(LateReason::ContainerMissing), None);
        m.observe(&Finding::TaskExit(late.clone()));
        m.observe(&Finding::LateExit(LateExit {
            report: late,
            reason: LateReason::ContainerMissing,
            names: Names::default(),
            pid: None,
            comm: None,
            ts_ns: 0,
        }));
        m.observe(&Finding::TaskExit(exit(TaskRole::Host, Outcome::Host, None)));
        m.observe(&Finding::HostExits { count: 4 });
        let text = served.text();
        for (series, want) in [
            ("sandwatch_task_exits_total{outcome=\"handled\",role=\"container_child\"}", 2.0),
            ("sandwatch_task_exits_total{outcome=\"handled\",role=\"sandbox\"}", 1.0),
            ("sandwatch_task_exits_total{outcome=\"late\",role=\"unknown\"}", 1.0),
            ("sandwatch_task_exits_total{outcome=\"host\",role=\"host\"}", 5.0),
            ("sandwatch_task_exits_total{outcome=\"unknown\",role=\"unknown\"}", 0.0),
            ("sandwatch_late_exit_events_total{reason=\"container_missing\",source=\"kernel\"}", 1.0),
            ("sandwatch_late_exit_events_total{reason=\"container_missing\",source=\"runtime\"}", 0.0),
            ("sandwatch_sandbox_deaths_total{cause=\"oom\"}", 1.0),
            ("sandwatch_exit_handling_delay_seconds_bucket{le=\"0.0025\"}", 5.0),
            ("sandwatch_exit_handling_delay_seconds_bucket{le=\"0.001\"}", 0.0),
        ] {
            assert_eq!(value(&text, series), Some(want), "{series}");
        }
    }

    #[test]
    fn model_totals_are_copied_not_added() {
        let served = Served::new(MetricsSettings::default());
        let mut reg = crate::model::PodRegistry::new(crate::model::Limits { max_tombstones: 2, ..Default::default() });
        for i in 0..5u64 {
            reg.cgroup_created(i, &format!("/kubepods/pod{i:08x}-0000-4000-8000-000000000000"));
            reg.cgroup_removed(i, i);
        }
        let stats = ModelStats { sandboxes: 1, evictions: reg.evictions, names_evicted: 3, ..ModelStats::default() };
        served.m.observe(&Finding::Model(stats.clone()));
        served.m.observe(&Finding::Model(stats));
        let text = served.text();
        assert_eq!(value(&text, "sandwatch_registry_evictions_total{what=\"tombstone\"}"), Some(3.0), "{text}");
        assert_eq!(value(&text, "sandwatch_registry_evictions_total{what=\"sandbox\"}"), Some(0.0));
        assert_eq!(value(&text, "sandwatch_runtime_metadata_evictions_total"), Some(3.0));
        assert_eq!(value(&text, "sandwatch_tracked_sandboxes"), Some(1.0));
        assert_eq!(Evictions::default().get(EvictionKind::Tombstone), 0);
    }

    #[test]
    fn the_window_gauges_follow_the_window() {
        let served = Served::new(MetricsSettings { window_secs: 10, ..MetricsSettings::default() });
        let text = served.text();
        assert_eq!(value(&text, "sandwatch_oom_kills_window{window=\"10s\"}"), Some(0.0), "exists from the start");
        assert_eq!(value(&text, "sandwatch_oom_storm"), Some(0.0));
        let noisy = crate::watchdog::storm::Storming {
            key: crate::watchdog::storm::StormKey { namespace: "noisy".into(), pod_uid: String::new() },
            events: 4,
        };
        served.m.observe(&Finding::OomWindow { events: 4, window_secs: 10, storm: true, storming: vec![noisy] });
        let text = served.text();
        assert_eq!(value(&text, "sandwatch_oom_kills_window{window=\"10s\"}"), Some(4.0));
        assert_eq!(value(&text, "sandwatch_oom_storm"), Some(1.0));
        assert_eq!(value(&text, "sandwatch_oom_storm_namespace{namespace=\"noisy\",pod_uid=\"\"}"), Some(4.0));
        served.m.observe(&Finding::OomWindow { events: 1, window_secs: 10, storm: false, storming: Vec::new() });
        assert!(!served.text().contains("sandwatch_oom_storm_namespace{"), "gone once it is over");
    }

    #[test]
    fn runtime_findings_are_counted_under_their_runtime() {
        let served = Served::new(MetricsSettings { runtime_names: vec!["containerd".into()], ..Default::default() });
        let m = &served.m;
        let text = served.text();
        assert_eq!(value(&text, "sandwatch_runtime_crashes_total{reason=\"panic\",runtime=\"containerd\"}"), Some(0.0));
        m.observe(&Finding::RuntimeCrash { runtime: "containerd".into(), pid: 1, reason: CrashReason::Panic });
        m.observe(&Finding::RuntimeRestart { runtime: "containerd".into(), pid: 2 });
        m.observe(&Finding::RuntimeUp { runtime: "containerd".into(), up: true });
        m.observe(&Finding::Mismatch(crate::watchdog::correlation::Expired {
            runtime_exits_unmatched: 1,
            kernel_only_ooms: 2,
            runtime_only_ooms: 3,
            evicted: 4,
        }));
        let text = served.text();
        for (series, want) in [
            ("sandwatch_runtime_crashes_total{reason=\"panic\",runtime=\"containerd\"}", 1.0),
            ("sandwatch_runtime_restarts_total{runtime=\"containerd\"}", 1.0),
            ("sandwatch_runtime_up{runtime=\"containerd\"}", 1.0),
            ("sandwatch_runtime_exits_unmatched_total", 1.0),
            ("sandwatch_oom_mismatch_total{direction=\"kernel_only\"}", 2.0),
            ("sandwatch_oom_mismatch_total{direction=\"runtime_only\"}", 3.0),
            ("sandwatch_runtime_correlation_evictions_total", 4.0),
        ] {
            assert_eq!(value(&text, series), Some(want), "{series}");
        }
    }
}
