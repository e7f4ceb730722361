//! Pod-level metrics: what the dispatcher's reports mean to an SRE. Labels
//! are bounded enums, except `sandwatch_pod_oom_kills_total`, which names
//! pods and is capped (least recently updated series evicted, counted), and
//! the OOM-churn window with its storm flag.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
};

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use super::metrics::render;
use crate::model::{
    DeathCause, ExitReport, LateReason, Names, OomEvent, OomReport, OomScope, Outcome, QosClass,
    Registry as PodRegistry, Source, TaskRole,
};

const ROLES: [TaskRole; 6] = [
    TaskRole::Sandbox,
    TaskRole::ContainerInit,
    TaskRole::ContainerChild,
    TaskRole::ContainerGroup,
    TaskRole::Host,
    TaskRole::Unknown,
];
const OUTCOMES: [&str; 4] = ["handled", "late", "unknown", "host"];

fn role_index(role: TaskRole) -> usize {
    ROLES.iter().position(|r| *r == role).unwrap_or(ROLES.len() - 1)
}

fn outcome_index(outcome: Outcome) -> usize {
    OUTCOMES.iter().position(|o| *o == outcome.label()).unwrap_or(0)
}
const CAUSES: [DeathCause; 3] = [DeathCause::Oom, DeathCause::Signal, DeathCause::Exit];
const EVICTION_KINDS: [&str; 5] = ["sandbox", "container", "tombstone", "host_cgroup", "oom_victim"];

/// qos_class for victims outside any pod.
const NO_QOS: &str = "none";

/// 100 µs … 10 s.
const DELAY_BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// How the OOM-churn window and the per-pod series behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChurnSettings {
    /// Length of the sliding window, in seconds.
    pub window_secs: u64,
    /// The storm flag rises when the window holds at least this many OOM
    /// events (a group kill of a whole container is one)…
    pub storm_threshold: u64,
    /// …and falls only when it holds at most this many (hysteresis).
    pub storm_clear: u64,
    /// Cap on `sandwatch_pod_oom_kills_total` series.
    pub max_pod_series: usize,
    /// A gone pod's series are removed this long after its cgroup went
    /// (late events still count, Prometheus scrapes the last increment);
    /// 0 keeps them until the cap evicts them.
    pub pod_series_ttl_secs: u64,
}

impl Default for ChurnSettings {
    fn default() -> Self {
        Self { window_secs: 60, storm_threshold: 10, storm_clear: 5, max_pod_series: 500, pod_series_ttl_secs: 900 }
    }
}

/// Pods waiting for their series to go, at most.
const MAX_RETIRING: usize = 16384;

/// Label values of one per-pod series.
type PodLabels = [String; 6];

/// Per-pod series with a cap: the least recently updated one is dropped
/// (and counted) to make room for a new one. The family is most of a
/// scrape's text at scale, and changes only with OOM kills and expiries:
/// it lives in its own registry and is rendered once per change, not once
/// per scrape.
struct PodSeries {
    counter: IntCounterVec,
    family: Registry,
    /// The family as text since its last change (`None`: changed).
    text: Option<Arc<str>>,
    evicted: IntCounter,
    max: usize,
    /// labels → update sequence number.
    last_update: HashMap<PodLabels, u64>,
    seq: u64,
    /// Pods whose cgroup went, oldest first, with when their series go.
    retiring: VecDeque<(String, u64)>,
    expired: IntCounter,
}

impl PodSeries {
    fn inc(&mut self, labels: PodLabels) {
        self.seq += 1;
        self.text = None;
        if !self.last_update.contains_key(&labels) && self.last_update.len() >= self.max {
            let oldest = self.last_update.iter().min_by_key(|(_, seq)| **seq).map(|(l, _)| l.clone());
            if let Some(oldest) = oldest {
                self.last_update.remove(&oldest);
                let refs: Vec<&str> = oldest.iter().map(String::as_str).collect();
                let _ = self.counter.remove_label_values(&refs);
                self.evicted.inc();
            }
        }
        let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
        self.counter.with_label_values(&refs).inc();
        self.last_update.insert(labels, self.seq);
    }

    /// Removes the series of pods whose grace ran out by `now_ns`.
    fn retire(&mut self, now_ns: u64) {
        while self.retiring.front().is_some_and(|(_, at)| *at <= now_ns) {
            let Some((pod_uid, _)) = self.retiring.pop_front() else { break };
            let (counter, expired) = (&self.counter, &self.expired);
            let mut removed = false;
            self.last_update.retain(|labels, _| {
                if labels[0] != pod_uid {
                    return true;
                }
                let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
                if counter.remove_label_values(&refs).is_ok() {
                    expired.inc();
                }
                removed = true;
                false
            });
            if removed {
                self.text = None;
            }
        }
    }

    /// The family's text, rendered again only if it changed.
    fn text(&mut self) -> Result<Arc<str>, prometheus::Error> {
        if let Some(text) = &self.text {
            return Ok(text.clone());
        }
        let text: Arc<str> = render(&self.family)?.into();
        self.text = Some(text.clone());
        Ok(text)
    }
}

/// OOM events in a sliding window, and the storm flag with hysteresis.
struct Churn {
    settings: ChurnSettings,
    kills_ns: VecDeque<u64>,
    storm: bool,
    window: IntGaugeVec,
    storm_gauge: IntGauge,
}

/// Kill timestamps kept at most; a storm beyond this still reads as one.
const MAX_WINDOW_KILLS: usize = 100_000;

impl Churn {
    fn record(&mut self, now_ns: u64) -> Option<StormEdge> {
        if self.kills_ns.len() >= MAX_WINDOW_KILLS {
            self.kills_ns.pop_front();
        }
        self.kills_ns.push_back(now_ns);
        self.update(now_ns)
    }

    /// Slides the window to `now_ns`; says when the storm flag rose or fell.
    fn update(&mut self, now_ns: u64) -> Option<StormEdge> {
        let window_ns = self.settings.window_secs.saturating_mul(1_000_000_000);
        while self.kills_ns.front().is_some_and(|t| now_ns.saturating_sub(*t) >= window_ns) {
            self.kills_ns.pop_front();
        }
        let n = self.kills_ns.len() as u64;
        let was = self.storm;
        if !self.storm && n >= self.settings.storm_threshold {
            self.storm = true;
        } else if self.storm && n <= self.settings.storm_clear {
            self.storm = false;
        }
        let label = format!("{}s", self.settings.window_secs);
        self.window.with_label_values(&[&label]).set(n as i64);
        self.storm_gauge.set(i64::from(self.storm));
        (was != self.storm).then_some(StormEdge {
            started: self.storm,
            events_in_window: n,
            window_secs: self.settings.window_secs,
        })
    }
}

/// The OOM storm flag rose (`started`) or fell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StormEdge {
    pub started: bool,
    pub events_in_window: u64,
    pub window_secs: u64,
}

#[derive(Clone)]
pub struct PodMetrics {
    oom_kills: IntCounterVec,
    oom_events: IntCounterVec,
    oom_group_containers: IntGauge,
    pod_series: Arc<Mutex<PodSeries>>,
    /// `None`: series of gone pods stay.
    series_ttl_ns: Option<u64>,
    churn: Arc<Mutex<Churn>>,
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
    /// What the registry refused or forgot because a bound was reached.
    registry_evictions: IntCounterVec,
    /// Re-reads of the cgroup tree after lost events, and what they applied.
    resyncs: IntCounter,
    resync_changes: IntCounterVec,
    /// Registry generation the gauges were last computed for.
    refreshed: Arc<std::sync::atomic::AtomicU64>,
}

impl PodMetrics {
    pub fn register(registry: &Registry, settings: ChurnSettings) -> Result<Self, prometheus::Error> {
        let pod_oom_kills = IntCounterVec::new(
            Opts::new(
                "sandwatch_pod_oom_kills_total",
                "OOM kills per pod and container (namespace, pod and container names are empty without runtime metadata). Capped series.",
            ),
            &["pod_uid", "namespace", "pod", "container", "container_id", "victim_role"],
        )?;
        let evicted = IntCounter::new(
            "sandwatch_pod_series_evicted_total",
            "Per-pod OOM series dropped because the --max-pod-series cap was reached.",
        )?;
        let expired = IntCounter::new(
            "sandwatch_pod_series_expired_total",
            "Per-pod OOM series removed --pod-series-ttl after their pod was torn down.",
        )?;
        let window = IntGaugeVec::new(
            Opts::new(
                "sandwatch_oom_kills_window",
                "OOM events (the OOM killer's picks: a group kill of a whole container is one) on this node within the sliding window.",
            ),
            &["window"],
        )?;
        let storm_gauge = IntGauge::new(
            "sandwatch_oom_storm",
            "1 while OOM events in the window are at or above the storm threshold, until they fall to the clear level.",
        )?;
        let family = Registry::new();
        family.register(Box::new(pod_oom_kills.clone()))?;
        registry.register(Box::new(evicted.clone()))?;
        registry.register(Box::new(expired.clone()))?;
        registry.register(Box::new(window.clone()))?;
        registry.register(Box::new(storm_gauge.clone()))?;
        let mut churn = Churn { settings, kills_ns: VecDeque::new(), storm: false, window, storm_gauge };
        let _ = churn.update(0);
        let m = Self {
            oom_kills: IntCounterVec::new(
                Opts::new("sandwatch_oom_kills_total", "Processes OOM-killed on this node, by victim role and pod QoS class."),
                &["victim_role", "qos_class"],
            )?,
            oom_events: IntCounterVec::new(
                Opts::new(
                    "sandwatch_oom_events_total",
                    "OOM events (one pick of the OOM killer: one process, or a whole container killed as a group), by scope and pod QoS class.",
                ),
                &["scope", "qos_class"],
            )?,
            oom_group_containers: IntGauge::new(
                "sandwatch_oom_group_containers",
                "Tracked containers whose memory.oom.group is 1: an OOM kill takes the whole container (kubelet >= 1.28 on cgroup v2).",
            )?,
            pod_series: Arc::new(Mutex::new(PodSeries {
                counter: pod_oom_kills,
                family,
                text: None,
                evicted,
                max: settings.max_pod_series.max(1),
                last_update: HashMap::new(),
                seq: 0,
                retiring: VecDeque::new(),
                expired,
            })),
            series_ttl_ns: (settings.pod_series_ttl_secs > 0).then(|| settings.pod_series_ttl_secs.saturating_mul(1_000_000_000)),
            churn: Arc::new(Mutex::new(churn)),
            sandbox_deaths: IntCounterVec::new(
                Opts::new("sandwatch_sandbox_deaths_total", "Exits of a pod sandbox's init (pause), by cause."),
                &["cause"],
            )?,
            task_exits: IntCounterVec::new(
                Opts::new("sandwatch_task_exits_total", "Process exits dispatched, by role and outcome."),
                &["role", "outcome"],
            )?,
            task_exit_counters: Vec::new(),
            late_exits: IntCounterVec::new(
                Opts::new(
                    "sandwatch_late_exit_events_total",
                    "Exit events handled after their sandbox, container or task was already gone.",
                ),
                &["reason", "source"],
            )?,
            exit_delay: Histogram::with_opts(
                HistogramOpts::new(
                    "sandwatch_exit_handling_delay_seconds",
                    "Delay from the kernel's timestamp of an exit or OOM kill to its dispatch.",
                )
                .buckets(DELAY_BUCKETS.to_vec()),
            )?,
            tracked_sandboxes: IntGauge::new("sandwatch_tracked_sandboxes", "Pod sandboxes in the registry.")?,
            tracked_containers: IntGauge::new("sandwatch_tracked_containers", "Containers in the registry.")?,
            tracked_processes: IntGauge::new(
                "sandwatch_tracked_processes",
                "Container init processes alive and known to the registry.",
            )?,
            registry_evictions: IntCounterVec::new(
                Opts::new(
                    "sandwatch_registry_evictions_total",
                    "Pod state the registry refused or forgot because a bound was reached, by what.",
                ),
                &["what"],
            )?,
            resyncs: IntCounter::new(
                "sandwatch_cgroup_resyncs_total",
                "Re-reads of the cgroup tree after events that may have held cgroup changes were lost.",
            )?,
            resync_changes: IntCounterVec::new(
                Opts::new(
                    "sandwatch_cgroup_resync_changes_total",
                    "Cgroup changes missed with lost events and applied from the cgroup tree, by change.",
                ),
                &["change"],
            )?,
            refreshed: Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX)),
        };
        registry.register(Box::new(m.oom_kills.clone()))?;
        registry.register(Box::new(m.oom_events.clone()))?;
        registry.register(Box::new(m.oom_group_containers.clone()))?;
        registry.register(Box::new(m.sandbox_deaths.clone()))?;
        registry.register(Box::new(m.task_exits.clone()))?;
        registry.register(Box::new(m.late_exits.clone()))?;
        registry.register(Box::new(m.exit_delay.clone()))?;
        registry.register(Box::new(m.tracked_sandboxes.clone()))?;
        registry.register(Box::new(m.tracked_containers.clone()))?;
        registry.register(Box::new(m.tracked_processes.clone()))?;
        registry.register(Box::new(m.registry_evictions.clone()))?;
        registry.register(Box::new(m.resyncs.clone()))?;
        registry.register(Box::new(m.resync_changes.clone()))?;
        for change in ["created", "removed"] {
            m.resync_changes.with_label_values(&[change]);
        }
        for what in EVICTION_KINDS {
            m.registry_evictions.with_label_values(&[what]);
        }
        // Every bounded series exists from the start, so increase() sees
        // the first event.
        let mut m = m;
        for role in ROLES {
            for qos in QosClass::LABELS.iter().chain([&NO_QOS]) {
                m.oom_kills.with_label_values(&[role.label(), qos]);
            }
            for outcome in OUTCOMES {
                let counter = m.task_exits.with_label_values(&[role.label(), outcome]);
                m.task_exit_counters.push(counter);
            }
        }
        for scope in OomScope::ALL {
            for qos in QosClass::LABELS.iter().chain([&NO_QOS]) {
                m.oom_events.with_label_values(&[scope.label(), qos]);
            }
        }
        for cause in CAUSES {
            m.sandbox_deaths.with_label_values(&[cause.label()]);
        }
        for reason in LateReason::ALL {
            for source in [Source::Kernel, Source::Runtime] {
                m.late_exits.with_label_values(&[reason.label(), source.label()]);
            }
        }
        Ok(m)
    }

    pub fn observe_exit(&self, r: &ExitReport) {
        let slot = role_index(r.role) * OUTCOMES.len() + outcome_index(r.outcome);
        match self.task_exit_counters.get(slot) {
            Some(counter) => counter.inc(),
            None => self.task_exits.with_label_values(&[r.role.label(), r.outcome.label()]).inc(),
        }
        if let Outcome::Late(reason) = r.outcome {
            self.late_exits.with_label_values(&[reason.label(), r.source.label()]).inc();
        }
        if let Some(cause) = r.sandbox_death {
            self.sandbox_deaths.with_label_values(&[cause.label()]).inc();
        }
        self.exit_delay.observe(r.delay_ns as f64 / 1e9);
    }

    /// Host process exits the kernel counted without streaming them.
    pub fn observe_host_exits(&self, n: u64) {
        if n > 0 {
            let slot = role_index(TaskRole::Host) * OUTCOMES.len() + outcome_index(Outcome::Host);
            if let Some(counter) = self.task_exit_counters.get(slot) {
                counter.inc_by(n);
            }
        }
    }

    /// One re-read of the cgroup tree.
    pub fn observe_resync(&self) {
        self.resyncs.inc();
    }

    /// Cgroup changes found missed and applied.
    pub fn observe_resync_changes(&self, created: u64, removed: u64) {
        self.resync_changes.with_label_values(&["created"]).inc_by(created);
        self.resync_changes.with_label_values(&["removed"]).inc_by(removed);
    }

    /// A runtime's TaskExit: only its lateness counts here (the kernel's
    /// exit of the same process was counted already).
    pub fn observe_runtime_exit(&self, r: &ExitReport) {
        if let Outcome::Late(reason) = r.outcome {
            self.late_exits.with_label_values(&[reason.label(), r.source.label()]).inc();
        }
    }

    /// A process OOM-killed, node-wide: by role and QoS.
    pub fn observe_oom(&self, r: &OomReport) {
        let qos = r.pod.as_ref().and_then(|p| p.qos).map_or(NO_QOS, QosClass::label);
        self.oom_kills.with_label_values(&[r.role.label(), qos]).inc();
    }

    /// An OOM event (its burst of victims over): by scope and QoS, and in
    /// the churn window; says if it started a storm.
    pub fn observe_oom_event(&self, e: &OomEvent, now_ns: u64) -> Option<StormEdge> {
        let qos = e.qos.map_or(NO_QOS, QosClass::label);
        self.oom_events.with_label_values(&[e.scope.label(), qos]).inc();
        self.churn.lock().ok().and_then(|mut churn| churn.record(now_ns))
    }

    /// An OOM event in its pod's series (the event's role), with whatever
    /// names are known.
    pub fn observe_pod_oom(&self, r: &OomReport, names: &Names) {
        let Some(pod) = &r.pod else { return };
        let labels = [
            pod.pod_uid.clone(),
            names.namespace.clone(),
            names.pod.clone(),
            names.container.clone(),
            pod.container_id.clone().unwrap_or_default(),
            r.role.label().to_string(),
        ];
        if let Ok(mut series) = self.pod_series.lock() {
            series.inc(labels);
        }
    }

    /// `sandwatch_pod_oom_kills_total` in the text format, to serve after
    /// the registry's families (see `metrics::render_with`).
    pub fn pod_series_text(&self) -> Result<Arc<str>, prometheus::Error> {
        match self.pod_series.lock() {
            Ok(mut series) => series.text(),
            Err(_) => Err(prometheus::Error::Msg("per-pod series unavailable: a writer panicked".into())),
        }
    }

    /// Lets the churn window slide on when no kill happens (says if a
    /// storm ended), and removes the series of pods gone longer than their
    /// grace.
    pub fn tick(&self, now_ns: u64) -> Option<StormEdge> {
        let edge = self.churn.lock().ok().and_then(|mut churn| churn.update(now_ns));
        if let Ok(mut series) = self.pod_series.lock() {
            series.retire(now_ns);
        }
        edge
    }

    /// A pod's cgroup went: its series go after the TTL (also one that
    /// appears meanwhile, from an OOM event or names still awaited).
    pub fn pod_gone(&self, pod_uid: &str, now_ns: u64) {
        let Some(ttl) = self.series_ttl_ns else { return };
        if let Ok(mut series) = self.pod_series.lock() {
            if series.retiring.len() >= MAX_RETIRING {
                // Churn beyond the bound: the oldest goes early.
                if let Some((_, at)) = series.retiring.front_mut() {
                    *at = now_ns;
                }
                series.retire(now_ns);
            }
            series.retiring.push_back((pod_uid.to_string(), now_ns.saturating_add(ttl)));
        }
    }

    /// Recomputes the tracked-object gauges if the registry changed since
    /// the last call (cheap to call after every event).
    pub fn refresh(&self, registry: &PodRegistry) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.refreshed.swap(registry.generation(), Relaxed) == registry.generation() {
            return;
        }
        self.tracked_sandboxes.set(registry.tracked_sandboxes() as i64);
        self.tracked_containers.set(registry.tracked_containers() as i64);
        self.tracked_processes.set(registry.tracked_processes() as i64);
        self.oom_group_containers.set(registry.oom_group_containers() as i64);
        let e = registry.evictions;
        for (what, total) in EVICTION_KINDS.iter().zip([
            e.sandboxes_refused,
            e.containers_refused,
            e.tombstones_evicted,
            e.host_cgroups_refused,
            e.oom_victims_evicted,
        ]) {
            let c = self.registry_evictions.with_label_values(&[what]);
            // The registry's own totals only grow; copy the difference.
            c.inc_by(total.saturating_sub(c.get()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::{OomReport, Outcome, PodRef, TaskKey},
        telemetry::metrics::render_with,
    };

    const SEC: u64 = 1_000_000_000;

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

    fn observe(m: &PodMetrics, r: &OomReport, now_ns: u64) {
        m.observe_oom(r);
        let event = OomEvent {
            scope: OomScope::Process,
            qos: r.pod.as_ref().and_then(|p| p.qos),
            report: r.clone(),
            victims: 1,
        };
        m.observe_oom_event(&event, now_ns);
        m.observe_pod_oom(r, &Names::default());
    }

    /// A registry and the pod metrics in it, as `/metrics` serves them.
    struct Served {
        registry: Registry,
        m: PodMetrics,
    }

    impl Served {
        fn text(&self) -> String {
            render_with(&self.registry, &[self.m.pod_series_text().unwrap()]).unwrap()
        }
    }

    fn metrics(settings: ChurnSettings) -> (Served, PodMetrics) {
        let registry = Registry::new();
        let m = PodMetrics::register(&registry, settings).unwrap();
        (Served { registry, m: m.clone() }, m)
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn pod_series_never_exceed_the_cap_and_evictions_are_counted() {
        let (registry, m) = metrics(ChurnSettings { max_pod_series: 3, ..ChurnSettings::default() });
        for pod in 0..10 {
            observe(&m, &report(pod), 0);
        }
        // pod-0's series was evicted long ago; touching pod-9 again keeps it.
        observe(&m, &report(9), 0);
        observe(&m, &report(10), 0);
        let text = registry.text();
        let series = text.lines().filter(|l| l.starts_with("sandwatch_pod_oom_kills_total{")).count();
        assert_eq!(series, 3, "{text}");
        assert_eq!(value(&text, "sandwatch_pod_series_evicted_total"), Some(8.0));
        assert!(text.contains("pod_uid=\"pod-9\",victim_role=\"container_child\"} 2"), "{text}");
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

    #[test]
    fn the_kept_pod_family_text_follows_every_change() {
        let (served, m) =
            metrics(ChurnSettings { max_pod_series: 2, pod_series_ttl_secs: 10, ..ChurnSettings::default() });
        let count = |text: &str, pod: &str| {
            value(text, &format!("sandwatch_pod_oom_kills_total{{container=\"\",container_id=\"c\",namespace=\"\",pod=\"\",pod_uid=\"{pod}\",victim_role=\"container_child\"}}"))
        };
        assert_eq!(&*m.pod_series_text().unwrap(), "", "no series, no family");
        observe(&m, &report(1), 0);
        let first = m.pod_series_text().unwrap();
        assert!(
            std::sync::Arc::ptr_eq(&first, &m.pod_series_text().unwrap()),
            "unchanged: the same text, not rendered again"
        );
        assert_eq!(count(&first, "pod-1"), Some(1.0), "{first}");
        assert!(first.starts_with("# HELP sandwatch_pod_oom_kills_total "), "{first}");
        // An increment, an eviction and an expiry each show at the next scrape.
        observe(&m, &report(1), 0);
        assert_eq!(count(&served.text(), "pod-1"), Some(2.0));
        observe(&m, &report(2), 0);
        observe(&m, &report(3), 0);
        let text = served.text();
        assert_eq!((count(&text, "pod-1"), count(&text, "pod-3")), (None, Some(1.0)), "{text}");
        m.pod_gone("pod-3", 0);
        m.tick(10 * SEC);
        let text = served.text();
        assert_eq!((count(&text, "pod-2"), count(&text, "pod-3")), (Some(1.0), None), "{text}");
        assert_eq!(text.matches("# TYPE sandwatch_pod_oom_kills_total counter").count(), 1, "{text}");
    }

    #[test]
    fn exits_land_in_their_role_and_outcome_series() {
        use crate::model::{ExitReport, LateReason, Source};
        let (registry, m) = metrics(ChurnSettings::default());
        let exit = |role, outcome, death| ExitReport {
            source: Source::Kernel,
            outcome,
            role,
            pod: None,
            sandbox_death: death,
            delay_ns: 2_000_000,
        };
        m.observe_exit(&exit(TaskRole::ContainerChild, Outcome::Handled, None));
        m.observe_exit(&exit(TaskRole::ContainerChild, Outcome::Handled, None));
        m.observe_exit(&exit(TaskRole::Sandbox, Outcome::Handled, Some(DeathCause::Oom)));
        m.observe_exit(&exit(TaskRole::Unknown, Outcome::Late(LateReason::ContainerMissing), None));
        m.observe_exit(&exit(TaskRole::Host, Outcome::Host, None));
        let text = registry.text();
        for (series, want) in [
            ("sandwatch_task_exits_total{outcome=\"handled\",role=\"container_child\"}", 2.0),
            ("sandwatch_task_exits_total{outcome=\"handled\",role=\"sandbox\"}", 1.0),
            ("sandwatch_task_exits_total{outcome=\"late\",role=\"unknown\"}", 1.0),
            ("sandwatch_task_exits_total{outcome=\"host\",role=\"host\"}", 1.0),
            ("sandwatch_task_exits_total{outcome=\"unknown\",role=\"unknown\"}", 0.0),
            ("sandwatch_late_exit_events_total{reason=\"container_missing\",source=\"kernel\"}", 1.0),
            ("sandwatch_sandbox_deaths_total{cause=\"oom\"}", 1.0),
            ("sandwatch_exit_handling_delay_seconds_bucket{le=\"0.0025\"}", 5.0),
            ("sandwatch_exit_handling_delay_seconds_bucket{le=\"0.001\"}", 0.0),
        ] {
            assert_eq!(value(&text, series), Some(want), "{series}");
        }
    }

    #[test]
    fn registry_evictions_are_exported() {
        use crate::model::{Limits, Registry as PodRegistry};
        let (registry, m) = metrics(ChurnSettings::default());
        let mut reg = PodRegistry::new(Limits { max_tombstones: 2, ..Limits::default() });
        for i in 0..5u64 {
            reg.cgroup_created(i, &format!("/kubepods/pod{i:08x}-0000-4000-8000-000000000000"));
            reg.cgroup_removed(i, i);
        }
        m.refresh(&reg);
        m.refresh(&reg);
        let text = registry.text();
        assert_eq!(value(&text, "sandwatch_registry_evictions_total{what=\"tombstone\"}"), Some(3.0), "{text}");
        assert_eq!(value(&text, "sandwatch_registry_evictions_total{what=\"sandbox\"}"), Some(0.0));
    }

    #[test]
    fn a_gone_pods_series_go_after_the_grace() {
        let (registry, m) = metrics(ChurnSettings { pod_series_ttl_secs: 10, ..ChurnSettings::default() });
        observe(&m, &report(1), 0);
        observe(&m, &report(2), 0);
        let series = |r: &Served| r.text().lines().filter(|l| l.starts_with("sandwatch_pod_oom_kills_total{")).count();
        m.pod_gone("pod-1", 5 * SEC);
        m.tick(14 * SEC);
        assert_eq!(series(&registry), 2, "within the grace: late events still count");
        m.tick(15 * SEC);
        let text = registry.text();
        assert_eq!(series(&registry), 1, "{text}");
        assert!(text.contains("pod_uid=\"pod-2\""), "{text}");
        assert_eq!(value(&text, "sandwatch_pod_series_expired_total"), Some(1.0));
        // The node-wide counter keeps everything.
        assert_eq!(
            value(&text, "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_child\"}"),
            Some(2.0)
        );
    }

    #[test]
    fn a_ttl_of_zero_keeps_a_gone_pods_series() {
        let (registry, m) = metrics(ChurnSettings { pod_series_ttl_secs: 0, ..ChurnSettings::default() });
        observe(&m, &report(1), 0);
        m.pod_gone("pod-1", 0);
        m.tick(u64::MAX / 2);
        let text = registry.text();
        assert!(text.contains("pod_uid=\"pod-1\""), "{text}");
        assert_eq!(value(&text, "sandwatch_pod_series_expired_total"), Some(0.0));
    }

    #[test]
    fn storm_rises_at_threshold_and_falls_with_hysteresis() {
        let s = ChurnSettings {
            window_secs: 10,
            storm_threshold: 4,
            storm_clear: 1,
            max_pod_series: 10,
            ..ChurnSettings::default()
        };
        let (registry, m) = metrics(s);
        let storm = |r: &Served| value(&r.text(), "sandwatch_oom_storm");
        let window = |r: &Served| value(&r.text(), "sandwatch_oom_kills_window{window=\"10s\"}");
        assert_eq!(storm(&registry), Some(0.0));
        for i in 0..3 {
            observe(&m, &report(i), i as u64 * SEC);
        }
        assert_eq!(storm(&registry), Some(0.0), "3 < threshold 4");
        m.observe_oom(&report(3));
        let event = OomEvent { scope: OomScope::Process, qos: None, report: report(3), victims: 1 };
        let edge = m.observe_oom_event(&event, 3 * SEC);
        assert_eq!(edge, Some(StormEdge { started: true, events_in_window: 4, window_secs: 10 }));
        assert_eq!((storm(&registry), window(&registry)), (Some(1.0), Some(4.0)));
        // Kills at 0 s and 1 s leave the window: 2 left, above clear (1): still a storm.
        assert_eq!(m.tick(11 * SEC + SEC / 2), None);
        assert_eq!((storm(&registry), window(&registry)), (Some(1.0), Some(2.0)));
        // One left: the storm is over, once.
        assert_eq!(
            m.tick(12 * SEC + SEC / 2),
            Some(StormEdge { started: false, events_in_window: 1, window_secs: 10 })
        );
        assert_eq!((storm(&registry), window(&registry)), (Some(0.0), Some(1.0)));
        assert_eq!(m.tick(100 * SEC), None);
        assert_eq!(window(&registry), Some(0.0));
    }
}
