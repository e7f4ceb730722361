//! Metrics of the runtime side: the event stream's health, exit lag, late
//! runtime events (in `sandwatch_late_exit_events_total{source="runtime"}`),
//! OOM mismatches, runtime crashes and restarts, and the CRI metadata
//! listing's health.

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use crate::{model::known_issues, runtime::crash::CRASH_REASONS};

/// Seconds from the kernel's exit of a container init to containerd's
/// TaskExit for it: normally milliseconds, seconds when the runtime lags.
const LAG_BUCKETS: [f64; 14] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

/// Shared with the stream task.
#[derive(Clone)]
pub struct RuntimeStreamMetrics {
    pub up: IntGauge,
    pub events: IntCounterVec,
    pub dropped: IntCounter,
    pub malformed: IntCounter,
    pub reconnects: IntCounter,
    /// Container records read for names, by result.
    pub lookups: IntCounterVec,
    pub info: RuntimeInfo,
}

pub const LOOKUP_RESULTS: [&str; 4] = ["named", "unnamed", "gone", "error"];

/// Which runtime version runs, and the known crashes it is exposed to:
/// set by whichever task talks to the runtime (containerd's Version API,
/// the CRI's Version RPC for others).
#[derive(Clone)]
pub struct RuntimeInfo {
    info: IntGaugeVec,
    known_issue: IntGaugeVec,
    /// runtime → the (version, revision) its info series carries.
    current: Arc<Mutex<HashMap<String, (String, String)>>>,
}

impl RuntimeInfo {
    fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let m = Self {
            info: IntGaugeVec::new(
                Opts::new("sandwatch_runtime_info", "1 for the container runtime version the agent talks to."),
                &["runtime", "version", "revision"],
            )?,
            known_issue: IntGaugeVec::new(
                Opts::new(
                    "sandwatch_runtime_known_issue",
                    "1 when the running runtime version has a known crash in sandwatch's domain (0 if not, or if its version does not parse).",
                ),
                &["runtime", "issue"],
            )?,
            current: Arc::default(),
        };
        registry.register(Box::new(m.info.clone()))?;
        registry.register(Box::new(m.known_issue.clone()))?;
        // Not exposed until the runtime says otherwise: every series at 0.
        for issue in known_issues::KNOWN_ISSUES {
            m.known_issue.with_label_values(&[issue.runtime, issue.issue]).set(0);
        }
        Ok(m)
    }

    /// The runtime said which version it is.
    pub fn observe(&self, runtime: &str, version: &str, revision: &str) {
        let Ok(mut current) = self.current.lock() else { return };
        let now = (version.to_string(), revision.to_string());
        if let Some(old) = current.insert(runtime.to_string(), now.clone()) {
            if old != now {
                let _ = self.info.remove_label_values(&[runtime, &old.0, &old.1]);
            }
        }
        self.info.with_label_values(&[runtime, version, revision]).set(1);
        for (issue, exposed) in known_issues::exposure(runtime, version) {
            self.known_issue.with_label_values(&[runtime, issue.issue]).set(i64::from(exposed));
        }
        if known_issues::Version::parse(version).is_none() {
            log::warn!(
                "container runtime {runtime} reports version {version:?}, which does not parse: known issues unknown"
            );
        }
    }
}

/// Shared with the CRI metadata task; `cached` and `evicted` are the
/// watchdog's.
#[derive(Clone)]
pub struct MetadataMetrics {
    pub up: IntGauge,
    pub refreshes: IntCounterVec,
    pub unresolved: IntCounter,
    pub cached: IntGaugeVec,
    pub evicted: IntCounter,
    /// Runtimes other than containerd say their version over the CRI.
    pub info: RuntimeInfo,
}

impl MetadataMetrics {
    pub fn register(registry: &Registry, info: RuntimeInfo) -> Result<Self, prometheus::Error> {
        let m = Self {
            info,
            up: IntGauge::new(
                "sandwatch_runtime_metadata_up",
                "1 while the last listing of pods and containers over the CRI socket succeeded.",
            )?,
            refreshes: IntCounterVec::new(
                Opts::new("sandwatch_runtime_metadata_refreshes_total", "Listings of pods and containers over the CRI, by result."),
                &["result"],
            )?,
            unresolved: IntCounter::new(
                "sandwatch_runtime_metadata_unresolved_total",
                "Container cgroups the CRI never listed after repeated asking (not CRI containers, or gone): counted without names.",
            )?,
            cached: IntGaugeVec::new(
                Opts::new("sandwatch_runtime_metadata_cached", "Pod and container names held, by kind (bounded)."),
                &["kind"],
            )?,
            evicted: IntCounter::new(
                "sandwatch_runtime_metadata_evictions_total",
                "Pod or container names dropped because the metadata cache was full.",
            )?,
        };
        registry.register(Box::new(m.up.clone()))?;
        registry.register(Box::new(m.refreshes.clone()))?;
        registry.register(Box::new(m.unresolved.clone()))?;
        registry.register(Box::new(m.cached.clone()))?;
        registry.register(Box::new(m.evicted.clone()))?;
        for result in ["ok", "error"] {
            m.refreshes.with_label_values(&[result]);
        }
        for kind in ["pod", "container"] {
            m.cached.with_label_values(&[kind]);
        }
        Ok(m)
    }
}

#[derive(Clone)]
pub struct RuntimeMetrics {
    pub stream: RuntimeStreamMetrics,
    pub metadata: MetadataMetrics,
    pub exit_lag: Histogram,
    pub exits_unmatched: IntCounter,
    pub oom_mismatch: IntCounterVec,
    pub ooms_matched: IntCounter,
    pub crashes: IntCounterVec,
    pub restarts: IntCounterVec,
    pub runtime_up: IntGaugeVec,
    pub correlation_evictions: IntCounter,
}

impl RuntimeMetrics {
    /// `topics`: the event topics' label values, each series created at 0.
    pub fn register(registry: &Registry, runtimes: &[String], topics: &[&str]) -> Result<Self, prometheus::Error> {
        let info = RuntimeInfo::register(registry)?;
        let stream = RuntimeStreamMetrics {
            up: IntGauge::new(
                "sandwatch_runtime_events_up",
                "1 while the containerd event stream is connected.",
            )?,
            events: IntCounterVec::new(
                Opts::new("sandwatch_runtime_events_total", "containerd events received, by topic."),
                &["topic"],
            )?,
            dropped: IntCounter::new(
                "sandwatch_runtime_events_dropped_total",
                "containerd events lost because the agent's runtime channel was full.",
            )?,
            malformed: IntCounter::new(
                "sandwatch_runtime_events_malformed_total",
                "containerd events whose payload could not be decoded.",
            )?,
            reconnects: IntCounter::new(
                "sandwatch_runtime_events_reconnects_total",
                "Times the containerd event stream was lost or could not be opened.",
            )?,
            lookups: IntCounterVec::new(
                Opts::new(
                    "sandwatch_runtime_container_lookups_total",
                    "containerd container records read for their CRI names as they are created, by result (gone: removed before it could be read).",
                ),
                &["result"],
            )?,
            info: info.clone(),
        };
        let m = Self {
            stream,
            metadata: MetadataMetrics::register(registry, info)?,
            exit_lag: Histogram::with_opts(
                HistogramOpts::new(
                    "sandwatch_runtime_exit_lag_seconds",
                    "From the kernel's exit of a container init to containerd delivering its TaskExit to the agent.",
                )
                .buckets(LAG_BUCKETS.to_vec()),
            )?,
            exits_unmatched: IntCounter::new(
                "sandwatch_runtime_exits_unmatched_total",
                "containerd TaskExit events for which the kernel showed no container init exit.",
            )?,
            oom_mismatch: IntCounterVec::new(
                Opts::new(
                    "sandwatch_oom_mismatch_total",
                    "OOM kills only one side reported: kernel_only (the runtime never said OOM) or runtime_only.",
                ),
                &["direction"],
            )?,
            ooms_matched: IntCounter::new(
                "sandwatch_runtime_oom_matched_total",
                "Kernel OOM kills in containers that containerd also reported as OOM.",
            )?,
            crashes: IntCounterVec::new(
                Opts::new(
                    "sandwatch_runtime_crashes_total",
                    "Container runtime processes that ended without being asked to, by runtime and reason.",
                ),
                &["runtime", "reason"],
            )?,
            restarts: IntCounterVec::new(
                Opts::new(
                    "sandwatch_runtime_restarts_total",
                    "Container runtime processes started after the runtime was down.",
                ),
                &["runtime"],
            )?,
            runtime_up: IntGaugeVec::new(
                Opts::new("sandwatch_runtime_up", "1 while a process of the container runtime runs on this node."),
                &["runtime"],
            )?,
            correlation_evictions: IntCounter::new(
                "sandwatch_runtime_correlation_evictions_total",
                "Pending kernel/runtime pairs forgotten because the correlation tables were full.",
            )?,
        };
        registry.register(Box::new(m.stream.up.clone()))?;
        registry.register(Box::new(m.stream.events.clone()))?;
        registry.register(Box::new(m.stream.dropped.clone()))?;
        registry.register(Box::new(m.stream.malformed.clone()))?;
        registry.register(Box::new(m.stream.reconnects.clone()))?;
        registry.register(Box::new(m.stream.lookups.clone()))?;
        for result in LOOKUP_RESULTS {
            m.stream.lookups.with_label_values(&[result]);
        }
        registry.register(Box::new(m.exit_lag.clone()))?;
        registry.register(Box::new(m.exits_unmatched.clone()))?;
        registry.register(Box::new(m.oom_mismatch.clone()))?;
        registry.register(Box::new(m.ooms_matched.clone()))?;
        registry.register(Box::new(m.crashes.clone()))?;
        registry.register(Box::new(m.restarts.clone()))?;
        registry.register(Box::new(m.runtime_up.clone()))?;
        registry.register(Box::new(m.correlation_evictions.clone()))?;
        for topic in topics {
            m.stream.events.with_label_values(&[topic]);
        }
        for direction in ["kernel_only", "runtime_only"] {
            m.oom_mismatch.with_label_values(&[direction]);
        }
        for runtime in runtimes {
            m.restarts.with_label_values(&[runtime]);
            for reason in CRASH_REASONS {
                m.crashes.with_label_values(&[runtime, reason]);
            }
        }
        Ok(m)
    }
}
