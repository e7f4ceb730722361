//! The runtime clients' own health: the containerd event stream (up,
//! events by topic, drops, undecodable payloads, reconnects, container
//! lookups), the CRI listing (up, refreshes, unresolved names), and which
//! runtime version runs with its known issues. What the watchdog finds
//! from the runtime's events is counted by `telemetry` from its findings.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc, Mutex,
    },
};

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use strum::IntoEnumIterator as _;

use super::known_issues;
use crate::{events::runtime::Topic, labels::Label as _};

/// How reading a new container's record for its names went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum LookupResult {
    Named,
    /// Not a CRI container.
    Unnamed,
    /// Removed before it could be read.
    Gone,
    Error,
}

/// How one CRI listing went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum RefreshResult {
    Ok,
    Error,
}

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
    /// The pid at the other end of the socket (SO_PEERCRED), 0 until known.
    pub peer: Arc<AtomicU32>,
}

impl RuntimeStreamMetrics {
    /// Whether the event stream is connected now.
    pub fn is_up(&self) -> bool {
        self.up.get() == 1
    }

    /// The runtime's pid, as its socket's peer credentials said.
    pub fn peer(&self) -> Option<u32> {
        Some(self.peer.load(Ordering::Relaxed)).filter(|pid| *pid != 0)
    }
}

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

/// Shared with the CRI metadata task.
#[derive(Clone)]
pub struct MetadataMetrics {
    pub up: IntGauge,
    pub refreshes: IntCounterVec,
    pub unresolved: IntCounter,
    /// Runtimes other than containerd say their version over the CRI.
    pub info: RuntimeInfo,
}

impl MetadataMetrics {
    fn register(registry: &Registry, info: RuntimeInfo) -> Result<Self, prometheus::Error> {
        let m = Self {
            info,
            up: IntGauge::new(
                "sandwatch_runtime_metadata_up",
                "1 while the last listing of pods and containers over the CRI socket succeeded.",
            )?,
            refreshes: IntCounterVec::new(
                Opts::new(
                    "sandwatch_runtime_metadata_refreshes_total",
                    "Listings of pods and containers over the CRI, by result.",
                ),
                &["result"],
            )?,
            unresolved: IntCounter::new(
                "sandwatch_runtime_metadata_unresolved_total",
                "Container cgroups the CRI never listed after repeated asking (not CRI containers, or gone): counted without names.",
            )?,
        };
        registry.register(Box::new(m.up.clone()))?;
        registry.register(Box::new(m.refreshes.clone()))?;
        registry.register(Box::new(m.unresolved.clone()))?;
        for result in RefreshResult::iter() {
            m.refreshes.with_label_values(&[result.label()]);
        }
        Ok(m)
    }

    /// Whether the last listing succeeded.
    pub fn is_up(&self) -> bool {
        self.up.get() == 1
    }

    pub fn refreshed(&self, result: RefreshResult) {
        self.refreshes.with_label_values(&[result.label()]).inc();
    }
}

/// The runtime clients' metrics, registered once.
#[derive(Clone)]
pub struct RuntimeMetrics {
    pub stream: RuntimeStreamMetrics,
    pub metadata: MetadataMetrics,
}

impl RuntimeMetrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let info = RuntimeInfo::register(registry)?;
        let stream = RuntimeStreamMetrics {
            up: IntGauge::new("sandwatch_runtime_events_up", "1 while the containerd event stream is connected.")?,
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
            peer: Arc::default(),
        };
        registry.register(Box::new(stream.up.clone()))?;
        registry.register(Box::new(stream.events.clone()))?;
        registry.register(Box::new(stream.dropped.clone()))?;
        registry.register(Box::new(stream.malformed.clone()))?;
        registry.register(Box::new(stream.reconnects.clone()))?;
        registry.register(Box::new(stream.lookups.clone()))?;
        for result in LookupResult::iter() {
            stream.lookups.with_label_values(&[result.label()]);
        }
        for topic in Topic::iter() {
            stream.events.with_label_values(&[topic.label()]);
        }
        Ok(Self { stream, metadata: MetadataMetrics::register(registry, info)? })
    }
}
