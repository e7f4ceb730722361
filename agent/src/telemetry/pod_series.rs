//! `sandwatch_pod_oom_kills_total`, the one family whose labels name pods:
//! capped, the least recently updated series dropped (and counted) to make
//! room for a new one, and a torn-down pod's series removed when the
//! watchdog says their grace is over. The family is most of a scrape's
//! text at scale and changes only with OOM events and expiries: it lives in
//! its own registry and is rendered once per change, not once per scrape.

use std::{collections::HashMap, sync::Arc};

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

use super::metrics::render;

/// Label values of one per-pod series, in `LABELS` order.
pub type PodLabels = [String; 7];

pub const LABELS: [&str; 7] = ["pod_uid", "namespace", "pod", "container", "container_id", "victim_role", "limit"];

pub struct PodSeries {
    counter: IntCounterVec,
    family: Registry,
    /// The family as text since its last change (`None`: changed).
    text: Option<Arc<str>>,
    evicted: IntCounter,
    expired: IntCounter,
    max: usize,
    /// labels → update sequence number.
    last_update: HashMap<PodLabels, u64>,
    seq: u64,
}

impl PodSeries {
    /// The family in its own registry; its two counters in `registry`.
    pub fn register(registry: &Registry, max: usize) -> Result<Self, prometheus::Error> {
        let counter = IntCounterVec::new(
            Opts::new(
                "sandwatch_pod_oom_kills_total",
                "OOM kills per pod and container (namespace, pod and container names are empty without runtime metadata). Capped series.",
            ),
            &LABELS,
        )?;
        let evicted = IntCounter::new(
            "sandwatch_pod_series_evicted_total",
            "Per-pod OOM series dropped because the --max-pod-series cap was reached.",
        )?;
        let expired = IntCounter::new(
            "sandwatch_pod_series_expired_total",
            "Per-pod OOM series removed --pod-series-ttl after their pod was torn down.",
        )?;
        let family = Registry::new();
        family.register(Box::new(counter.clone()))?;
        registry.register(Box::new(evicted.clone()))?;
        registry.register(Box::new(expired.clone()))?;
        Ok(Self { counter, family, text: None, evicted, expired, max: max.max(1), last_update: HashMap::new(), seq: 0 })
    }

    pub fn inc(&mut self, labels: PodLabels) {
        self.seq += 1;
        self.text = None;
        if !self.last_update.contains_key(&labels) && self.last_update.len() >= self.max {
            let oldest = self.last_update.iter().min_by_key(|(_, seq)| **seq).map(|(l, _)| l.clone());
            if let Some(oldest) = oldest {
                self.last_update.remove(&oldest);
                let _ = self.counter.remove_label_values(&refs(&oldest));
                self.evicted.inc();
            }
        }
        self.counter.with_label_values(&refs(&labels)).inc();
        self.last_update.insert(labels, self.seq);
    }

    /// Removes every series of `pod_uid`.
    pub fn expire(&mut self, pod_uid: &str) {
        let (counter, expired) = (&self.counter, &self.expired);
        let before = self.last_update.len();
        self.last_update.retain(|labels, _| {
            if labels[0] != pod_uid {
                return true;
            }
            if counter.remove_label_values(&refs(labels)).is_ok() {
                expired.inc();
            }
            false
        });
        if self.last_update.len() != before {
            self.text = None;
        }
    }

    /// The family's text, rendered again only if it changed.
    pub fn text(&mut self) -> Result<Arc<str>, prometheus::Error> {
        if let Some(text) = &self.text {
            return Ok(text.clone());
        }
        let text: Arc<str> = render(&self.family)?.into();
        self.text = Some(text.clone());
        Ok(text)
    }
}

fn refs(labels: &PodLabels) -> [&str; 7] {
    [&labels[0], &labels[1], &labels[2], &labels[3], &labels[4], &labels[5], &labels[6]]
}
