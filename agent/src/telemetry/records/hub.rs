//! Where records are kept and streamed: a bounded history for newcomers
//! and one bounded queue per subscriber. Publishing never waits: a full
//! queue loses the record for that subscriber only, counted, and the
//! subscriber is told how many it missed. The pipeline never awaits a
//! subscriber. A full history gives the oldest record of the namespace
//! that holds the most ([`FairShare`]): a tenant flooding it with its own
//! kills pushes out its own records, never another namespace's.

use std::{
    collections::{BTreeMap, VecDeque},
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
use prometheus::{IntCounter, IntCounterVec, IntGauge, Registry};
use strum::IntoEnumIterator as _;
use tokio::sync::mpsc;

use super::{mapping::Stamp, wire::*};
use crate::{catalogue, labels::Label as _, os::Now, telemetry::fair::FairShare};

/// Records kept for newcomers, by default (`--event-history`).
pub const HISTORY: usize = 1024;
/// Records a subscriber may fall behind before it misses some.
pub const SUBSCRIBER_QUEUE: usize = 256;

/// What the hub is configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSettings {
    /// The node's name in every record.
    pub node: String,
    /// Followers of /events at once.
    pub max_subscribers: usize,
    /// Records kept for newcomers.
    pub history: usize,
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

/// Whose a record is, for the history's fair share: a namespace's (an
/// empty one where the runtime did not name the pod), or the node's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Owner {
    Node,
    Namespace(Arc<str>),
}

#[derive(Default)]
struct Inner {
    /// Kept records by their number, oldest first.
    history: BTreeMap<u64, Arc<Entry>>,
    shares: FairShare<Owner, u64>,
    published: u64,
    subscribers: Vec<Subscriber>,
    next_id: u64,
    closed: bool,
}

/// The stream's own counters.
#[derive(Clone)]
pub struct StreamMetrics {
    records: IntCounterVec,
    subscribers: IntGauge,
    dropped: IntCounter,
    refused: IntCounter,
}

impl StreamMetrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let m = Self {
            records: catalogue::EVENT_RECORDS_TOTAL.counter_vec(registry)?,
            subscribers: catalogue::EVENT_SUBSCRIBERS.gauge(registry)?,
            dropped: catalogue::EVENT_STREAM_DROPPED_TOTAL.counter(registry)?,
            refused: catalogue::EVENT_SUBSCRIBERS_REFUSED_TOTAL.counter(registry)?,
        };
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
    history: usize,
    inner: Arc<Mutex<Inner>>,
    metrics: StreamMetrics,
}

impl RecordHub {
    pub fn new(metrics: StreamMetrics, settings: &RecordSettings) -> Arc<Self> {
        Arc::new(Self {
            node: settings.node.clone(),
            max_subscribers: settings.max_subscribers,
            history: settings.history.max(1),
            inner: Arc::new(Mutex::new(Inner::default())),
            metrics,
        })
    }

    /// The node name records carry.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// A finding's record, stamped with when it happened, published.
    pub fn publish_body(&self, stamp: Stamp, body: Body) {
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
        let owner = match pod {
            Some(p) => Owner::Namespace(Arc::from(p.namespace.as_deref().unwrap_or(""))),
            None => Owner::Node,
        };
        let Ok(mut inner) = self.inner.lock() else { return };
        while inner.history.len() >= self.history {
            let Some((oldest, _)) = inner.shares.evict() else { break };
            inner.history.remove(&oldest);
        }
        inner.published += 1;
        let number = inner.published;
        inner.history.insert(number, entry.clone());
        inner.shares.touch(number, owner);
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
            inner.history.values().filter(|e| filter.wants(e)).map(|e| e.line.clone()).collect();
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
    use http_body_util::BodyExt as _;

    use super::{
        super::wire::tests::{death, oom},
        *,
    };

    fn hub(max: usize) -> (Registry, Arc<RecordHub>) {
        let registry = Registry::new();
        let hub =
            RecordHub::new(StreamMetrics::register(&registry).unwrap(), &super::super::tests_settings("node-a", max));
        (registry, hub)
    }

    fn lines(bytes: &[u8]) -> Vec<Record> {
        String::from_utf8_lossy(bytes).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn pod_of(r: &Record) -> Option<&str> {
        r.body.pod().and_then(|p| p.pod.as_deref())
    }

    fn metric(registry: &Registry, name: &str) -> f64 {
        let text = crate::telemetry::exposition::render(registry).unwrap();
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok()).unwrap_or(-1.0)
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

    /// Guards: one namespace's flood of kills pushing every other
    /// namespace's records out of the history (it was a ring).
    #[tokio::test]
    async fn a_namespaces_flood_keeps_every_other_namespaces_records() {
        let (_r, hub) = hub(8);
        let in_ns = |ns: &str, pod: &str| {
            let mut r = oom(pod);
            if let Body::OomKill(k) = &mut r.body {
                k.pod.namespace = Some(ns.to_string());
            }
            r
        };
        hub.publish(&in_ns("quiet", "db-0"));
        hub.publish(&death());
        hub.publish(&in_ns("other", "api"));
        for i in 0..HISTORY * 4 {
            hub.publish(&in_ns("noisy", &format!("p{i}")));
        }
        hub.publish(&in_ns("quiet", "db-1"));
        let all = hub.subscribe(Filter::default(), false).unwrap().collect().await.unwrap().to_bytes();
        let all = lines(&all);
        assert_eq!(all.len(), HISTORY);
        let pods: Vec<_> = all.iter().map(pod_of).collect();
        for kept in [Some("db-0"), Some("api"), Some("db-1")] {
            assert!(pods.contains(&kept), "{kept:?} was pushed out");
        }
        assert!(all.iter().any(|r| r.body.kind() == Kind::SandboxDeath), "an unnamed pod's death");
        // In the order they were published; the flood kept its newest.
        assert_eq!(pods[0], Some("db-0"));
        assert_eq!(pods[HISTORY - 2], Some(format!("p{}", HISTORY * 4 - 1)).as_deref());
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
