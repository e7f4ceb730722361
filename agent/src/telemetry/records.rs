//! Event records beside the counters: every OOM kill, sandbox death, late
//! exit, runtime crash or restart, OOM storm edge and second with lost
//! events becomes one [`Record`], for people watching a node (`GET
//! /events`, `sandwatch events`). The record consumer of the watchdog's
//! findings is [`record_of`].
//!
//! On the wire a record is one JSON object: `time`, `node`, `kind`, and
//! the fields of its kind (a serde-tagged enum, one variant per kind).
//! Field names are the metrics' label names and the JSON log's; fields
//! that are not known are left out.
//!
//! The [`RecordHub`] keeps a fixed history ring for newcomers and one
//! bounded queue per subscriber. Publishing never waits: a full queue loses
//! the record for that subscriber only, counted, and the subscriber is told
//! how many it missed. The pipeline never awaits a subscriber.

use std::{
    collections::VecDeque,
    convert::Infallible,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
    time::SystemTime,
};

use hyper::body::{Bytes, Frame};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use serde::{Deserialize, Serialize};
use strum::IntoEnumIterator as _;
use tokio::sync::mpsc;

use crate::{
    events::ExitStatus,
    host::Now,
    labels::Label as _,
    model::{Names, PodRef},
    watchdog::Finding,
};

/// Records kept for newcomers.
pub const HISTORY: usize = 1024;
/// Records a subscriber may fall behind before it misses some.
pub const SUBSCRIBER_QUEUE: usize = 256;

/// One event record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// When the kernel (or the runtime) saw it, RFC 3339 UTC.
    pub time: String,
    pub node: String,
    #[serde(flatten)]
    pub body: Body,
}

/// What a record says, by kind (the JSON `kind`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, strum::EnumDiscriminants)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[strum_discriminants(name(Kind))]
#[strum_discriminants(derive(Hash, strum::IntoStaticStr, strum::EnumIter, strum::EnumString))]
#[strum_discriminants(strum(serialize_all = "snake_case"))]
pub enum Body {
    OomKill(OomKillRecord),
    SandboxDeath(SandboxDeathRecord),
    ContainerExit(ContainerExitRecord),
    LateExit(LateExitRecord),
    RuntimeCrash(RuntimeRecord),
    RuntimeRestart(RuntimeRecord),
    OomStormStart(StormRecord),
    OomStormEnd(StormRecord),
    EventsDropped(LossRecord),
    /// Only in one subscriber's stream: records it missed (it read too slowly).
    Missed(MissedRecord),
}

/// The pod a record is about, as far as known.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_class: Option<String>,
    /// The pod's workload (from its labels) and its kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_kind: Option<String>,
}

impl PodFields {
    fn of(pod: Option<&PodRef>, names: &Names) -> Self {
        let Some(p) = pod else { return Self::default() };
        Self {
            pod_uid: some(&p.pod_uid),
            namespace: some(&names.namespace),
            pod: some(&names.pod),
            container: some(&names.container),
            container_id: p.container_id.as_deref().and_then(some),
            qos_class: p.qos.map(|q| q.label().to_string()),
            workload: some(&names.workload),
            workload_kind: some(&names.workload_kind),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomKillRecord {
    #[serde(flatten)]
    pub pod: PodFields,
    pub victim_role: String,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// The task that ran out of memory, when it is not the victim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_comm: Option<String>,
    /// The victim's resident memory (anon + file + shmem) when it was picked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// The tightest memory limit of the victim's container and pod cgroups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// Whose limit fired: container, pod, node or unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// The OOM's constraint: memcg, global or unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    /// The dispatcher's outcome: handled, late, unknown, host.
    pub outcome: String,
}

/// A container's init ended: how (its code, or its signal) and why it
/// counts so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerExitRecord {
    #[serde(flatten)]
    pub pod: PodFields,
    pub victim_role: String,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// completed, error, oom_killed, killed, or the signal's name.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<u8>,
    /// The signal's number, when one ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<u8>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub core_dumped: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxDeathRecord {
    #[serde(flatten)]
    pub pod: PodFields,
    pub victim_role: String,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// oom, signal, exit.
    pub cause: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateExitRecord {
    #[serde(flatten)]
    pub pod: PodFields,
    pub victim_role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    pub outcome: String,
    /// sandbox_torn_down, container_missing, task_missing.
    pub reason: String,
    /// Who reported it: kernel, runtime.
    pub source: String,
}

/// A container runtime's crash (with its reason) or restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeRecord {
    /// The container runtime (`containerd`, …).
    pub runtime: String,
    pub pid: u32,
    /// How it crashed: panic, exit_code, killed, fatal_signal, signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StormRecord {
    /// OOM events in the window.
    pub count: u64,
    pub window_seconds: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossRecord {
    /// The pipeline stage: kernel, channel, decode.
    pub stage: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissedRecord {
    pub count: u64,
}

impl Body {
    pub fn kind(&self) -> Kind {
        self.into()
    }

    /// The pod fields, for kinds about a pod.
    pub fn pod(&self) -> Option<&PodFields> {
        match self {
            Body::OomKill(r) => Some(&r.pod),
            Body::SandboxDeath(r) => Some(&r.pod),
            Body::ContainerExit(r) => Some(&r.pod),
            Body::LateExit(r) => Some(&r.pod),
            Body::RuntimeCrash(_)
            | Body::RuntimeRestart(_)
            | Body::OomStormStart(_)
            | Body::OomStormEnd(_)
            | Body::EventsDropped(_)
            | Body::Missed(_) => None,
        }
    }
}

/// When a record happened: at a kernel timestamp, or now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// CLOCK_BOOTTIME ns.
    Boot(u64),
    Now,
}

/// The record of a finding, for the findings people watch a node for.
pub fn record_of(finding: &Finding) -> Option<(Stamp, Body)> {
    Some(match finding {
        Finding::OomKill(k) => {
            let r = &k.report;
            let trigger = r.trigger.as_ref();
            let body = Body::OomKill(OomKillRecord {
                pod: PodFields::of(r.pod.as_ref(), &k.names),
                victim_role: r.role.label().to_string(),
                pid: r.victim.pid,
                comm: some(&r.victim_comm),
                trigger_pid: trigger.map(|t| t.tgid),
                trigger_comm: trigger.and_then(|t| some(&t.comm)),
                rss_bytes: k.rss_bytes,
                limit_bytes: k.limit_bytes,
                limit: Some(r.fired.limit.label().to_string()),
                constraint: Some(r.fired.constraint.label().to_string()),
                outcome: r.outcome.label().to_string(),
            });
            (Stamp::Boot(k.ts_ns), body)
        }
        Finding::ContainerExit(e) => {
            let (exit_code, signal, core_dumped) = match e.status {
                ExitStatus::Code(c) => (Some(c), None, false),
                ExitStatus::Signal { signo, core_dumped } => (None, Some(signo), core_dumped),
            };
            let body = Body::ContainerExit(ContainerExitRecord {
                pod: PodFields::of(e.report.pod.as_ref(), &e.names),
                victim_role: e.report.role.label().to_string(),
                pid: e.pid,
                comm: some(&e.comm),
                reason: e.reason.label().to_string(),
                exit_code,
                signal,
                core_dumped,
            });
            (Stamp::Boot(e.ts_ns), body)
        }
        Finding::SandboxDeath(d) => {
            let body = Body::SandboxDeath(SandboxDeathRecord {
                pod: PodFields::of(d.report.pod.as_ref(), &d.names),
                victim_role: d.report.role.label().to_string(),
                pid: d.pid,
                comm: some(&d.comm),
                cause: d.cause.label().to_string(),
            });
            (Stamp::Boot(d.ts_ns), body)
        }
        Finding::LateExit(l) => {
            let body = Body::LateExit(LateExitRecord {
                pod: PodFields::of(l.report.pod.as_ref(), &l.names),
                victim_role: l.report.role.label().to_string(),
                pid: l.pid,
                comm: l.comm.as_deref().and_then(some),
                outcome: l.report.outcome.label().to_string(),
                reason: l.reason.label().to_string(),
                source: l.report.source.label().to_string(),
            });
            (Stamp::Boot(l.ts_ns), body)
        }
        Finding::RuntimeCrash { runtime, pid, reason } => {
            let body = RuntimeRecord { runtime: runtime.clone(), pid: *pid, reason: Some(reason.label().to_string()) };
            (Stamp::Now, Body::RuntimeCrash(body))
        }
        Finding::RuntimeRestart { runtime, pid } => {
            (Stamp::Now, Body::RuntimeRestart(RuntimeRecord { runtime: runtime.clone(), pid: *pid, reason: None }))
        }
        Finding::OomStorm(edge) => {
            let storm = StormRecord { count: edge.events_in_window, window_seconds: edge.window_secs };
            (Stamp::Now, if edge.started { Body::OomStormStart(storm) } else { Body::OomStormEnd(storm) })
        }
        Finding::EventsLost { stage, count } => {
            (Stamp::Now, Body::EventsDropped(LossRecord { stage: stage.label().to_string(), count: *count }))
        }
        Finding::TaskExit(_)
        | Finding::HostExits { .. }
        | Finding::OomEvent { .. }
        | Finding::PodOom(_)
        | Finding::PodSeriesExpired { .. }
        | Finding::OomWindow { .. }
        | Finding::Model(_)
        | Finding::CgroupResync { .. }
        | Finding::TrackingFull { .. }
        | Finding::RuntimeStopped { .. }
        | Finding::RuntimeUp { .. }
        | Finding::ExitLag { .. }
        | Finding::OomMatched { .. }
        | Finding::Mismatch(_) => return None,
    })
}

/// `None` for an empty string: unknown fields are left out of records.
fn some(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

impl Record {
    /// One JSON line.
    fn line(&self) -> Bytes {
        // Names are a tenant's: no raw control character on the wire.
        let mut text = crate::text::json_line(self).unwrap_or_else(|_| String::from("{}"));
        text.push('\n');
        Bytes::from(text)
    }
}

/// A line of the stream as a client reads it: a record of a kind it
/// knows, or of a kind newer than itself (shown by its kind alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    Known(Box<Record>),
    Newer { time: String, node: String, kind: String },
}

impl Incoming {
    /// Parses one line; `None` if it is no event record at all.
    pub fn parse(line: &str) -> Option<Self> {
        if let Ok(record) = serde_json::from_str::<Record>(line) {
            return Some(Incoming::Known(Box::new(record)));
        }
        #[derive(Deserialize)]
        struct Envelope {
            time: String,
            node: String,
            kind: String,
        }
        let e: Envelope = serde_json::from_str(line).ok()?;
        // A known kind that does not parse is broken, not newer.
        if e.kind.parse::<Kind>().is_ok() {
            return None;
        }
        Some(Incoming::Newer { time: e.time, node: e.node, kind: e.kind })
    }
}

/// RFC 3339 in UTC with milliseconds, e.g. `2026-12-01T08:03:46.123Z`.
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// Which records a subscriber wants; empty fields want everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub kinds: Vec<Kind>,
    pub namespace: Option<String>,
    pub pod: Option<String>,
}

impl Filter {
    fn wants(&self, entry: &Entry) -> bool {
        (self.kinds.is_empty() || self.kinds.contains(&entry.kind))
            && self.namespace.as_ref().is_none_or(|n| entry.namespace.as_ref() == Some(n))
            && self.pod.as_ref().is_none_or(|p| entry.pod.as_ref() == Some(p))
    }
}

/// A published record: its line, and what filters look at.
struct Entry {
    kind: Kind,
    namespace: Option<String>,
    pod: Option<String>,
    line: Bytes,
}

struct Subscriber {
    id: u64,
    filter: Filter,
    tx: mpsc::Sender<Bytes>,
    missed: Arc<AtomicU64>,
}

#[derive(Default)]
struct Inner {
    history: VecDeque<Arc<Entry>>,
    subscribers: Vec<Subscriber>,
    next_id: u64,
    closed: bool,
}

/// The stream's own counters.
#[derive(Clone)]
struct StreamMetrics {
    records: IntCounterVec,
    subscribers: IntGauge,
    dropped: IntCounter,
    refused: IntCounter,
}

impl StreamMetrics {
    fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let m = Self {
            records: IntCounterVec::new(
                Opts::new("sandwatch_event_records_total", "Event records published on /events, by kind."),
                &["kind"],
            )?,
            subscribers: IntGauge::new("sandwatch_event_subscribers", "Clients following /events now.")?,
            dropped: IntCounter::new(
                "sandwatch_event_stream_dropped_total",
                "Event records a subscriber missed because it read too slowly (its queue was full); summed over subscribers.",
            )?,
            refused: IntCounter::new(
                "sandwatch_event_subscribers_refused_total",
                "Clients refused on /events because --max-event-subscribers were following already.",
            )?,
        };
        registry.register(Box::new(m.records.clone()))?;
        registry.register(Box::new(m.subscribers.clone()))?;
        registry.register(Box::new(m.dropped.clone()))?;
        registry.register(Box::new(m.refused.clone()))?;
        for kind in Kind::iter().filter(|k| *k != Kind::Missed) {
            m.records.with_label_values(&[kind.label()]);
        }
        Ok(m)
    }
}

/// Why a subscription was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("too many event subscribers: {0} are following already (--max-event-subscribers)")]
    TooMany(usize),
    #[error("the agent is shutting down")]
    Closed,
}

/// Where records are published and subscribed to.
pub struct RecordHub {
    node: String,
    max_subscribers: usize,
    inner: Arc<Mutex<Inner>>,
    metrics: StreamMetrics,
}

impl RecordHub {
    pub fn new(registry: &Registry, node: &str, max_subscribers: usize) -> Result<Arc<Self>, prometheus::Error> {
        Ok(Arc::new(Self {
            node: node.to_string(),
            max_subscribers,
            inner: Arc::new(Mutex::new(Inner::default())),
            metrics: StreamMetrics::register(registry)?,
        }))
    }

    /// The node name records carry.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The record of `finding`, if it has one, published.
    pub fn publish_finding(&self, finding: &Finding) {
        let Some((stamp, body)) = record_of(finding) else { return };
        let time = match stamp {
            Stamp::Boot(ts_ns) => Now::read().wall_of_boot(ts_ns),
            Stamp::Now => SystemTime::now(),
        };
        self.publish(&Record { time: rfc3339(time), node: self.node.clone(), body });
    }

    /// Keeps `record` in the history and offers it to every subscriber
    /// that wants it; never waits.
    pub fn publish(&self, record: &Record) {
        let kind = record.body.kind();
        let pod = record.body.pod();
        let entry = Arc::new(Entry {
            kind,
            namespace: pod.and_then(|p| p.namespace.clone()),
            pod: pod.and_then(|p| p.pod.clone()),
            line: record.line(),
        });
        self.metrics.records.with_label_values(&[kind.label()]).inc();
        let Ok(mut inner) = self.inner.lock() else { return };
        if inner.history.len() >= HISTORY {
            inner.history.pop_front();
        }
        inner.history.push_back(entry.clone());
        for sub in inner.subscribers.iter().filter(|s| s.filter.wants(&entry)) {
            if sub.tx.try_send(entry.line.clone()).is_err() {
                sub.missed.fetch_add(1, Ordering::Relaxed);
                self.metrics.dropped.inc();
            }
        }
    }

    /// The history that `filter` wants, then (if `follow`) every record
    /// published from now on, as one HTTP body. Following takes one of
    /// `max_subscribers` slots until the body is dropped.
    pub fn subscribe(&self, filter: Filter, follow: bool) -> Result<Subscription, Refused> {
        let Ok(mut inner) = self.inner.lock() else { return Err(Refused::Closed) };
        if inner.closed {
            return Err(Refused::Closed);
        }
        let history: VecDeque<Bytes> =
            inner.history.iter().filter(|e| filter.wants(e)).map(|e| e.line.clone()).collect();
        if !follow {
            return Ok(Subscription { history, live: None });
        }
        if inner.subscribers.len() >= self.max_subscribers {
            self.metrics.refused.inc();
            return Err(Refused::TooMany(inner.subscribers.len()));
        }
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE);
        let missed = Arc::new(AtomicU64::new(0));
        inner.next_id += 1;
        let id = inner.next_id;
        inner.subscribers.push(Subscriber { id, filter, tx, missed: missed.clone() });
        self.metrics.subscribers.set(inner.subscribers.len() as i64);
        let slot = Slot { id, hub: self.inner.clone(), gauge: self.metrics.subscribers.clone() };
        Ok(Subscription { history, live: Some(Live { rx, missed, node: self.node.clone(), _slot: slot }) })
    }

    /// At shutdown: followers get what is queued for them, then their
    /// stream ends; nobody new is taken.
    pub fn close(&self) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.closed = true;
            inner.subscribers.clear();
            self.metrics.subscribers.set(0);
        }
    }

    /// Followers now.
    pub fn subscribers(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.subscribers.len())
    }
}

/// A follower's place in the hub; dropping it (the client went, or the
/// response ended) frees the slot at once.
struct Slot {
    id: u64,
    hub: Arc<Mutex<Inner>>,
    gauge: IntGauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut inner) = self.hub.lock() {
            inner.subscribers.retain(|s| s.id != self.id);
            self.gauge.set(inner.subscribers.len() as i64);
        }
    }
}

struct Live {
    rx: mpsc::Receiver<Bytes>,
    missed: Arc<AtomicU64>,
    node: String,
    _slot: Slot,
}

/// One client's records as an HTTP body of JSON lines: the history, then
/// (following) live records, with a `missed` record wherever the client
/// fell behind.
pub struct Subscription {
    history: VecDeque<Bytes>,
    live: Option<Live>,
}

impl hyper::body::Body for Subscription {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(line) = this.history.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(line))));
        }
        let Some(live) = this.live.as_mut() else { return Poll::Ready(None) };
        let missed = live.missed.swap(0, Ordering::Relaxed);
        if missed > 0 {
            let record = Record {
                time: rfc3339(SystemTime::now()),
                node: live.node.clone(),
                body: Body::Missed(MissedRecord { count: missed }),
            };
            return Poll::Ready(Some(Ok(Frame::data(record.line()))));
        }
        match live.rx.poll_recv(cx) {
            Poll::Ready(Some(line)) => Poll::Ready(Some(Ok(Frame::data(line)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http_body_util::BodyExt as _;

    use super::*;
    use crate::{
        model::{correlation::Expired, storm::StormEdge, OomReport, Outcome, QosClass, TaskKey, TaskRole},
        watchdog::{LossStage, OomKill},
    };

    fn hub(max: usize) -> (Registry, Arc<RecordHub>) {
        let registry = Registry::new();
        let hub = RecordHub::new(&registry, "node-a", max).unwrap();
        (registry, hub)
    }

    fn oom(pod: &str) -> Record {
        Record {
            time: rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_576_226_123)),
            node: "node-a".into(),
            body: Body::OomKill(OomKillRecord {
                pod: PodFields { namespace: Some("shop".into()), pod: Some(pod.into()), ..PodFields::default() },
                victim_role: "container_child".into(),
                pid: 42,
                comm: None,
                trigger_pid: None,
                trigger_comm: None,
                rss_bytes: None,
                limit_bytes: None,
                limit: Some("pod".into()),
                constraint: Some("memcg".into()),
                outcome: "handled".into(),
            }),
        }
    }

    fn death() -> Record {
        let body = SandboxDeathRecord {
            pod: PodFields::default(),
            victim_role: "sandbox".into(),
            pid: 7,
            comm: Some("pause".into()),
            cause: "oom".into(),
        };
        Record { time: rfc3339(SystemTime::now()), node: "node-a".into(), body: Body::SandboxDeath(body) }
    }

    fn lines(bytes: &[u8]) -> Vec<Record> {
        String::from_utf8_lossy(bytes).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn pod_of(r: &Record) -> Option<&str> {
        r.body.pod().and_then(|p| p.pod.as_deref())
    }

    fn metric(registry: &Registry, name: &str) -> f64 {
        let text = crate::telemetry::metrics::render(registry).unwrap();
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok()).unwrap_or(-1.0)
    }

    #[test]
    fn a_record_is_one_json_line_without_absent_fields() {
        let line = oom("web").line();
        let text = std::str::from_utf8(&line).unwrap();
        assert_eq!(
            text,
            "{\"time\":\"2025-12-01T08:03:46.123Z\",\"node\":\"node-a\",\"kind\":\"oom_kill\",\"namespace\":\"shop\",\"pod\":\"web\",\"victim_role\":\"container_child\",\"pid\":42,\"limit\":\"pod\",\"constraint\":\"memcg\",\"outcome\":\"handled\"}\n"
        );
        assert_eq!(serde_json::from_str::<Record>(text.trim()).unwrap(), oom("web"));
    }

    /// Guards: a name that drives a terminal reaching the wire raw (serde
    /// escapes C0 itself, not DEL, C1 or the bidirectional controls).
    #[test]
    fn no_raw_control_character_reaches_the_wire() {
        let mut r = oom("web\u{9b}2J");
        if let Body::OomKill(k) = &mut r.body {
            k.comm = Some("\u{1b}[2J\u{7f}\u{202e}".into());
        }
        let line = r.line();
        let text = std::str::from_utf8(&line).unwrap();
        assert!(!text.trim_end().chars().any(crate::text::is_hostile), "{text:?}");
        assert_eq!(serde_json::from_str::<Record>(text.trim()).unwrap(), r, "reads back as it was");
    }

    #[test]
    fn every_kind_is_named_on_the_wire_as_its_label() {
        let storm = StormRecord { count: 1, window_seconds: 60 };
        let runtime = RuntimeRecord { runtime: "containerd".into(), pid: 1, reason: None };
        let bodies = [
            oom("web").body,
            death().body,
            Body::ContainerExit(ContainerExitRecord {
                pod: PodFields {
                    workload: Some("web".into()),
                    workload_kind: Some("Deployment".into()),
                    ..PodFields::default()
                },
                victim_role: "container_init".into(),
                pid: 7,
                comm: Some("app".into()),
                reason: "sigsegv".into(),
                exit_code: None,
                signal: Some(11),
                core_dumped: true,
            }),
            Body::LateExit(LateExitRecord {
                pod: PodFields::default(),
                victim_role: "unknown".into(),
                pid: None,
                comm: None,
                outcome: "late".into(),
                reason: "container_missing".into(),
                source: "runtime".into(),
            }),
            Body::RuntimeCrash(runtime.clone()),
            Body::RuntimeRestart(runtime),
            Body::OomStormStart(storm.clone()),
            Body::OomStormEnd(storm),
            Body::EventsDropped(LossRecord { stage: "kernel".into(), count: 3 }),
            Body::Missed(MissedRecord { count: 2 }),
        ];
        assert_eq!(bodies.len(), Kind::iter().count(), "one of each kind");
        for body in bodies {
            let record = Record { time: "t".into(), node: "n".into(), body };
            let json: serde_json::Value = serde_json::from_slice(&record.line()).unwrap();
            assert_eq!(json["kind"], record.body.kind().label(), "{json}");
            assert_eq!(Incoming::parse(&json.to_string()), Some(Incoming::Known(Box::new(record))));
        }
    }

    #[test]
    fn newer_kinds_and_fields_still_read() {
        let newer = Incoming::parse(r#"{"time":"t","node":"n","kind":"future_thing","extra":1}"#);
        assert_eq!(newer, Some(Incoming::Newer { time: "t".into(), node: "n".into(), kind: "future_thing".into() }));
        let extra = r#"{"time":"t","node":"n","kind":"missed","count":3,"added_later":true}"#;
        assert!(
            matches!(Incoming::parse(extra), Some(Incoming::Known(r)) if r.body == Body::Missed(MissedRecord { count: 3 }))
        );
        assert_eq!(
            Incoming::parse(r#"{"time":"t","node":"n","kind":"missed"}"#),
            None,
            "a known kind without its fields"
        );
        assert_eq!(Incoming::parse("not json"), None);
    }

    #[test]
    fn findings_people_watch_for_become_records_stamped_when_they_happened() {
        let report = OomReport {
            outcome: Outcome::Handled,
            role: TaskRole::ContainerInit,
            pod: Some(PodRef { pod_uid: "u".into(), qos: Some(QosClass::Burstable), container_id: Some("c".into()) }),
            victim: TaskKey::new(9, 0),
            victim_comm: "dd".into(),
            trigger: None,
            delay_ns: 0,
            fired: crate::model::oom_limit::Fired::UNKNOWN,
        };
        let names = Names { namespace: "shop".into(), pod: "web".into(), ..Names::default() };
        let kill = Finding::OomKill(OomKill { report, names, rss_bytes: Some(1), limit_bytes: None, ts_ns: 5 });
        let Some((Stamp::Boot(5), Body::OomKill(r))) = record_of(&kill) else { panic!("{:?}", record_of(&kill)) };
        assert_eq!(
            (r.pod.pod_uid.as_deref(), r.pod.pod.as_deref(), r.pod.container.as_deref(), r.pod.qos_class.as_deref()),
            (Some("u"), Some("web"), None, Some("burstable"))
        );
        assert_eq!(
            (r.victim_role.as_str(), r.pid, r.comm.as_deref(), r.rss_bytes),
            ("container_init", 9, Some("dd"), Some(1))
        );
        let edge = StormEdge { started: false, events_in_window: 2, window_secs: 60 };
        assert!(matches!(record_of(&Finding::OomStorm(edge)), Some((Stamp::Now, Body::OomStormEnd(_)))));
        let lost = Finding::EventsLost { stage: LossStage::Channel, count: 4 };
        assert!(
            matches!(record_of(&lost), Some((Stamp::Now, Body::EventsDropped(l))) if l.stage == "channel" && l.count == 4)
        );
        assert_eq!(record_of(&Finding::Mismatch(Expired::default())), None, "a counter, not a record");
    }

    #[tokio::test]
    async fn history_is_bounded_and_filtered() {
        let (_r, hub) = hub(8);
        for i in 0..HISTORY + 10 {
            hub.publish(&oom(&format!("p{i}")));
        }
        hub.publish(&death());
        let all = hub.subscribe(Filter::default(), false).unwrap().collect().await.unwrap().to_bytes();
        let all = lines(&all);
        assert_eq!(all.len(), HISTORY);
        assert_eq!(pod_of(&all[0]), Some("p11"), "the oldest went first");
        let filter = Filter { kinds: vec![Kind::SandboxDeath], ..Filter::default() };
        let deaths = hub.subscribe(filter, false).unwrap().collect().await.unwrap().to_bytes();
        assert_eq!(lines(&deaths).len(), 1);
        let filter = Filter { pod: Some("p500".into()), namespace: Some("shop".into()), ..Filter::default() };
        let one = hub.subscribe(filter, false).unwrap().collect().await.unwrap().to_bytes();
        assert_eq!(pod_of(&lines(&one)[0]), Some("p500"));
    }

    #[tokio::test]
    async fn a_slow_follower_misses_records_counted_and_is_told() {
        let (registry, hub) = hub(8);
        let mut slow = hub.subscribe(Filter::default(), true).unwrap();
        let total = SUBSCRIBER_QUEUE + 100;
        for i in 0..total {
            hub.publish(&oom(&format!("p{i}")));
        }
        assert_eq!(metric(&registry, "sandwatch_event_stream_dropped_total"), 100.0);
        assert_eq!(metric(&registry, "sandwatch_event_records_total{kind=\"oom_kill\"}"), total as f64);
        hub.close();
        let mut got = Vec::new();
        while let Some(frame) = slow.frame().await {
            got.extend(lines(&frame.unwrap().into_data().unwrap()));
        }
        // History first (taken when it subscribed: empty), then a note of
        // what it missed, then the queue.
        assert_eq!(got[0].body, Body::Missed(MissedRecord { count: 100 }));
        assert_eq!(got.len(), SUBSCRIBER_QUEUE + 1);
        assert_eq!(pod_of(&got[1]), Some("p0"));
    }

    #[test]
    fn followers_are_capped_and_a_gone_one_frees_its_slot_at_once() {
        let (registry, hub) = hub(2);
        let a = hub.subscribe(Filter::default(), true).unwrap();
        let _b = hub.subscribe(Filter::default(), true).unwrap();
        assert_eq!(hub.subscribe(Filter::default(), true).err(), Some(Refused::TooMany(2)));
        // Reading the history is no follower.
        assert!(hub.subscribe(Filter::default(), false).is_ok());
        assert_eq!(metric(&registry, "sandwatch_event_subscribers"), 2.0);
        assert_eq!(metric(&registry, "sandwatch_event_subscribers_refused_total"), 1.0);
        drop(a);
        assert_eq!(metric(&registry, "sandwatch_event_subscribers"), 1.0);
        assert!(hub.subscribe(Filter::default(), true).is_ok());
    }

    #[test]
    fn filtered_out_records_are_no_loss() {
        let (registry, hub) = hub(2);
        let filter = Filter { kinds: vec![Kind::SandboxDeath], ..Filter::default() };
        let _sub = hub.subscribe(filter, true).unwrap();
        for _ in 0..SUBSCRIBER_QUEUE * 2 {
            hub.publish(&oom("web"));
        }
        assert_eq!(metric(&registry, "sandwatch_event_stream_dropped_total"), 0.0);
    }
}
