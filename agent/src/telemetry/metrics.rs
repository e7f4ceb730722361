//! Prometheus metrics. Pipeline counters live in atomics and kernel maps;
//! they are copied into the exported families at scrape time, so the event
//! path never touches the registry.

use std::sync::{Arc, Mutex};

use agent_common::EventKind;
use prometheus::{
    core::{Collector, Desc},
    proto::MetricFamily,
    IntCounterVec, IntGauge, Registry,
};

use strum::IntoEnumIterator as _;

pub use super::exposition::{render, render_with};
use super::{
    records::hub::StreamMetrics,
    server::metrics::HttpMetrics,
    watchdog_metrics::{MetricsSettings, WatchdogMetrics},
};
use crate::{
    catalogue,
    events::kernel::DecodeErrorKind,
    labels::Label as _,
    probes::{counters::LostReason, KernelCounters},
    runtime::metrics::RuntimeMetrics,
    stats::{DrainCause, PipelineStats},
};

/// Every family of the [`catalogue`], registered in one registry: the
/// pipeline's, the runtime clients', the HTTP server's, the findings' and
/// the event stream's. The agent, its tests and its benches all register
/// them here; the pod families live in a registry of their own, rendered
/// between scrapes (`WatchdogMetrics::pod_series_text`).
pub struct Metrics {
    pub registry: Registry,
    pub runtime: RuntimeMetrics,
    pub http: HttpMetrics,
    pub watchdog: WatchdogMetrics,
    pub stream: StreamMetrics,
}

/// What the families describe of the agent they are registered for.
pub struct Subject<'a> {
    pub stats: Arc<PipelineStats>,
    /// The kernel's counters; `None` (tests, benchmarks): they read 0.
    pub kernel: Option<Arc<KernelCounters>>,
    pub programs_attached: usize,
    pub kernel_release: &'a str,
    pub kernel_path: crate::probes::KernelPath,
    /// Where which limit fired is read from on this kernel
    /// (`OomDecision::label`).
    pub oom_decision: &'static str,
    pub settings: &'a MetricsSettings,
}

impl Metrics {
    pub fn register(subject: Subject<'_>) -> Result<Self, prometheus::Error> {
        let registry = registry(subject.stats, subject.kernel, subject.programs_attached, subject.kernel_release)?;
        kernel_path(&registry, subject.kernel_path)?;
        oom_decision(&registry, subject.oom_decision)?;
        Ok(Self {
            runtime: RuntimeMetrics::register(&registry)?,
            http: HttpMetrics::register(&registry)?,
            watchdog: WatchdogMetrics::register(&registry, subject.settings)?,
            stream: StreamMetrics::register(&registry)?,
            registry,
        })
    }
}

/// The pipeline's families, the build's and the programs'.
fn registry(
    stats: Arc<PipelineStats>,
    kernel: Option<Arc<KernelCounters>>,
    programs_attached: usize,
    kernel_release: &str,
) -> Result<Registry, prometheus::Error> {
    let registry = Registry::new();
    registry.register(Box::new(PipelineCollector::new(stats, kernel)?))?;
    catalogue::PROGRAMS_ATTACHED.gauge(&registry)?.set(programs_attached as i64);
    catalogue::BUILD_INFO.gauge_vec(&registry)?.with_label_values(&[env!("CARGO_PKG_VERSION"), kernel_release]).set(1);
    Ok(registry)
}

/// `sandwatch_kernel_path{path}`: 1 for how this kernel names OOM
/// victims (`fork_table`, `victim_task`), 0 for the other.
fn kernel_path(registry: &Registry, path: crate::probes::KernelPath) -> Result<(), prometheus::Error> {
    let gauge = catalogue::KERNEL_PATH.gauge_vec(registry)?;
    for p in crate::probes::KernelPath::iter() {
        let label: &str = p.into();
        gauge.with_label_values(&[label]).set(i64::from(p == path));
    }
    Ok(())
}

/// `sandwatch_oom_decision_source{source}`: 1 for where this kernel lets
/// the agent read which limit fired, 0 for the others.
fn oom_decision(registry: &Registry, source: &str) -> Result<(), prometheus::Error> {
    let gauge = catalogue::OOM_DECISION_SOURCE.gauge_vec(registry)?;
    for label in crate::probes::OomDecision::LABELS {
        gauge.with_label_values(&[label]).set(i64::from(label == source));
    }
    Ok(())
}

/// Copies the pipeline's counters into counter families at scrape time.
struct PipelineCollector {
    stats: Arc<PipelineStats>,
    kernel: Option<Arc<KernelCounters>>,
    families: Mutex<Families>,
    descs: Vec<Desc>,
}

struct Families {
    received: IntCounterVec,
    kernel_events: IntCounterVec,
    kernel_dropped: IntCounterVec,
    dropped: IntCounterVec,
    channel_dropped: IntCounterVec,
    decode_errors: IntCounterVec,
    unattributed: IntCounterVec,
    unstreamed: IntCounterVec,
    cgroups_unstreamed: IntCounterVec,
    tracking_refused: prometheus::IntCounter,
    task_table_misses: prometheus::IntCounter,
    kernel_lost: IntCounterVec,
    task_table_refused: IntCounterVec,
    task_table_retired: IntCounterVec,
    drains: IntCounterVec,
    reader_asleep: IntGauge,
}

impl PipelineCollector {
    fn new(stats: Arc<PipelineStats>, kernel: Option<Arc<KernelCounters>>) -> Result<Self, prometheus::Error> {
        use catalogue::*;
        let families = Families {
            received: EVENTS_TOTAL.new_counter_vec()?,
            kernel_events: KERNEL_EVENTS_TOTAL.new_counter_vec()?,
            kernel_dropped: KERNEL_EVENTS_DROPPED_TOTAL.new_counter_vec()?,
            dropped: EVENTS_DROPPED_TOTAL.new_counter_vec()?,
            channel_dropped: CHANNEL_EVENTS_DROPPED_TOTAL.new_counter_vec()?,
            decode_errors: DECODE_ERRORS_TOTAL.new_counter_vec()?,
            unattributed: EVENTS_UNATTRIBUTED_TOTAL.new_counter_vec()?,
            unstreamed: KERNEL_EXITS_UNSTREAMED_TOTAL.new_counter_vec()?,
            cgroups_unstreamed: KERNEL_CGROUP_RECORDS_UNSTREAMED_TOTAL.new_counter_vec()?,
            tracking_refused: TRACKED_CGROUPS_REFUSED_TOTAL.new_counter()?,
            task_table_misses: TASK_TABLE_MISSES_TOTAL.new_counter()?,
            kernel_lost: KERNEL_EVENTS_LOST_TOTAL.new_counter_vec()?,
            task_table_refused: TASK_TABLE_REFUSED_TOTAL.new_counter_vec()?,
            task_table_retired: TASK_TABLE_RETIRED_TOTAL.new_counter_vec()?,
            drains: READER_DRAINS_TOTAL.new_counter_vec()?,
            reader_asleep: READER_ASLEEP.new_gauge()?,
        };
        let descs = [
            &families.received,
            &families.kernel_events,
            &families.kernel_dropped,
            &families.dropped,
            &families.channel_dropped,
            &families.decode_errors,
            &families.unattributed,
            &families.unstreamed,
            &families.cgroups_unstreamed,
            &families.kernel_lost,
            &families.task_table_refused,
            &families.task_table_retired,
        ]
        .iter()
        .flat_map(|f| f.desc().into_iter().cloned())
        .chain(families.tracking_refused.desc().into_iter().cloned())
        .chain(families.task_table_misses.desc().into_iter().cloned())
        .chain(families.drains.desc().into_iter().cloned())
        .chain(families.reader_asleep.desc().into_iter().cloned())
        .collect();
        Ok(Self { stats, kernel, families: Mutex::new(families), descs })
    }
}

fn set(vec: &IntCounterVec, label: &str, value: u64) {
    let c = vec.with_label_values(&[label]);
    c.reset();
    c.inc_by(value);
}

impl Collector for PipelineCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Ok(f) = self.families.lock() else {
            return Vec::new();
        };
        let s = &self.stats;
        let mut kernel_dropped_total = 0;
        for kind in EventKind::iter() {
            set(&f.received, kind.label(), s.received(kind));
            set(&f.unattributed, kind.label(), s.unattributed_count(kind));
            // Without the kernel's counters (tests, benchmarks) they read 0.
            let (emitted, dropped) = self.kernel.as_ref().map_or((0, 0), |k| k.read(kind as u32));
            kernel_dropped_total += dropped;
            set(&f.kernel_events, kind.label(), emitted + dropped);
            set(&f.kernel_dropped, kind.label(), dropped);
            set(&f.channel_dropped, kind.label(), s.channel_dropped_of(kind));
            for reason in LostReason::iter() {
                let n = self.kernel.as_ref().map_or(0, |k| k.lost(kind as u32, reason));
                let c = f.kernel_lost.with_label_values(&[kind.label(), reason.label()]);
                c.reset();
                c.inc_by(n);
            }
        }
        set(&f.received, "unknown", s.received_unknown());
        set(&f.dropped, "kernel", kernel_dropped_total);
        set(&f.dropped, "channel", s.channel_dropped());
        set(&f.dropped, "decode", s.decode_errors_total());
        for kind in DecodeErrorKind::iter() {
            set(&f.decode_errors, kind.label(), s.decode_errors(kind));
        }
        let unstreamed = self.kernel.as_ref().map(|k| k.unstreamed()).unwrap_or_default();
        set(&f.unstreamed, "thread", unstreamed.thread_exits);
        set(&f.unstreamed, "host", unstreamed.host_exits);
        set(&f.cgroups_unstreamed, "nested", unstreamed.nested_cgroup_changes);
        set(&f.cgroups_unstreamed, "attach", unstreamed.attaches_unstreamed);
        f.tracking_refused.reset();
        f.tracking_refused.inc_by(unstreamed.tracking_refused);
        f.task_table_misses.reset();
        f.task_table_misses.inc_by(unstreamed.task_table_misses);
        set(&f.task_table_refused, "quota", unstreamed.tasks_over_quota);
        set(&f.task_table_refused, "full", unstreamed.task_table_full);
        set(&f.task_table_retired, "exec", unstreamed.retired_at_exec);
        set(&f.task_table_retired, "host_fork", unstreamed.retired_at_fork);
        set(&f.task_table_retired, "untracked", unstreamed.retired_untracked);
        for cause in DrainCause::iter() {
            set(&f.drains, cause.label(), s.reader_drains(cause));
        }
        f.reader_asleep.set(i64::from(s.reader_asleep()));
        [
            &f.received,
            &f.kernel_events,
            &f.kernel_dropped,
            &f.dropped,
            &f.channel_dropped,
            &f.decode_errors,
            &f.unattributed,
            &f.unstreamed,
            &f.cgroups_unstreamed,
            &f.kernel_lost,
            &f.task_table_refused,
            &f.task_table_retired,
        ]
        .iter()
        .flat_map(|v| v.collect())
        .chain(f.tracking_refused.collect())
        .chain(f.task_table_misses.collect())
        .chain(f.drains.collect())
        .chain(f.reader_asleep.collect())
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{decode, encode, Event};

    #[test]
    fn pipeline_counters_appear_with_bounded_labels() {
        let stats = Arc::new(PipelineStats::default());
        let exit = encode(
            &Event::CgroupRmdir(crate::events::kernel::CgroupChange {
                ts_ns: 0,
                hierarchy_id: 0,
                level: 1,
                cgroup_id: 1,
                path: "/x".into(),
                truncated: false,
            }),
            4096,
        );
        stats.record_received(&exit);
        stats.record_received(&[1, 2]);
        stats.channel_drop(Some(EventKind::CgroupRmdir));
        stats.decode_error(&decode(&[0u8; 3], 4096).unwrap_err());
        let registry = registry(stats, None, 6, "6.18.0").unwrap();
        let text = render(&registry).unwrap();
        for line in [
            "sandwatch_events_total{kind=\"cgroup_rmdir\"} 1",
            "sandwatch_events_total{kind=\"unknown\"} 1",
            "sandwatch_events_total{kind=\"exit\"} 0",
            "sandwatch_events_dropped_total{stage=\"channel\"} 1",
            "sandwatch_events_dropped_total{stage=\"decode\"} 1",
            "sandwatch_events_dropped_total{stage=\"kernel\"} 0",
            "sandwatch_decode_errors_total{reason=\"too_short\"} 1",
            "sandwatch_programs_attached 6",
            "sandwatch_build_info{kernel=\"6.18.0\",version=\"0.1.0\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        // Scraping twice reports the same absolute values, not doubled ones.
        let again = render(&registry).unwrap();
        assert_eq!(text, again);
    }
}
