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

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};
use strum::IntoEnumIterator as _;

use super::known_issues;
use crate::{catalogue, events::runtime::Topic, labels::Label as _};

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
            info: catalogue::RUNTIME_INFO.gauge_vec(registry)?,
            known_issue: catalogue::RUNTIME_KNOWN_ISSUE.gauge_vec(registry)?,
            current: Arc::default(),
        };
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
            up: catalogue::RUNTIME_METADATA_UP.gauge(registry)?,
            refreshes: catalogue::RUNTIME_METADATA_REFRESHES_TOTAL.counter_vec(registry)?,
            unresolved: catalogue::RUNTIME_METADATA_UNRESOLVED_TOTAL.counter(registry)?,
        };
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
            up: catalogue::RUNTIME_EVENTS_UP.gauge(registry)?,
            events: catalogue::RUNTIME_EVENTS_TOTAL.counter_vec(registry)?,
            dropped: catalogue::RUNTIME_EVENTS_DROPPED_TOTAL.counter(registry)?,
            malformed: catalogue::RUNTIME_EVENTS_MALFORMED_TOTAL.counter(registry)?,
            reconnects: catalogue::RUNTIME_EVENTS_RECONNECTS_TOTAL.counter(registry)?,
            lookups: catalogue::RUNTIME_CONTAINER_LOOKUPS_TOTAL.counter_vec(registry)?,
            info: info.clone(),
            peer: Arc::default(),
        };
        for result in LookupResult::iter() {
            stream.lookups.with_label_values(&[result.label()]);
        }
        for topic in Topic::iter() {
            stream.events.with_label_values(&[topic.label()]);
        }
        Ok(Self { stream, metadata: MetadataMetrics::register(registry, info)? })
    }
}
