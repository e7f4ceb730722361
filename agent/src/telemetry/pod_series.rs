//! The families whose labels name pods or workloads, each under a cap of
//! its own: to make room for a new series, the namespace holding the most
//! series of that family gives its least recently updated one (counted, by
//! family), so that container exits, which are many, never push an OOM
//! kill's series out, and one tenant's churn never pushes out another
//! namespace's ([`FairShare`], O(log n)). Per pod:
//! `sandwatch_pod_oom_kills_total`,
//! `sandwatch_pod_oom_kills_warned_seconds_total` and
//! `sandwatch_pod_container_exits_total` (`--max-pod-series` each); a
//! torn-down pod's series go when the watchdog says their grace is over.
//! Per workload: `sandwatch_workload_oom_kills_total` and
//! `sandwatch_workload_container_exits_total` (`--max-workload-series`
//! each); a workload's series go when the last of its pods that were
//! counted has gone so. They are most of a scrape's text at scale and
//! change only with OOM events, container exits and expiries: they live in
//! their own registry and are rendered once per change, not once per
//! scrape.
//!
//! A counter series is served at 0 before its first event: Prometheus'
//! `increase()` and `rate()` never count a series' first sample, so a
//! series that appeared with its first event counted would lose that event
//! to every rule and panel. A new series is made at 0 and its first
//! increments are held, so that a scrape sees the 0 first: for `hold`
//! (`--pod-series-hold`), or for one and a half times the longest interval
//! between a scraper's scrapes seen in the last 10 minutes, up to 5
//! minutes, if that is longer ([`Scrapers`]): a Prometheus that scrapes
//! every 2 minutes, or HA replicas each at its own time, see it too. A
//! series removed (expired, evicted) and made again is held anew. Zeros are not made ahead for every container: the
//! labels of a count (a reason, a role, whose limit, what filled it) are
//! known only at the event, and a zero for every combination would be over
//! a hundred series per container.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use prometheus::{CounterVec, GaugeVec, IntCounter, Registry};

use super::{exposition::render, fair::FairShare, scrapers::Scrapers};
use crate::catalogue;

/// The kept families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    PodOomKills,
    /// The seconds by which a warned kill was warned, summed.
    PodOomWarnedSeconds,
    PodContainerExits,
    WorkloadOomKills,
    WorkloadContainerExits,
    /// Gauges, while a container is under memory pressure.
    PodMemoryPressure,
    PodUnreclaimableRatio,
    PodSecondsToLimit,
}

impl Family {
    const ALL: [Family; 8] = [
        Family::PodOomKills,
        Family::PodOomWarnedSeconds,
        Family::PodContainerExits,
        Family::WorkloadOomKills,
        Family::WorkloadContainerExits,
        Family::PodMemoryPressure,
        Family::PodUnreclaimableRatio,
        Family::PodSecondsToLimit,
    ];

    /// The memory pressure gauges: set while it lasts, removed after.
    pub const PRESSURE: [Family; 3] =
        [Family::PodMemoryPressure, Family::PodUnreclaimableRatio, Family::PodSecondsToLimit];

    fn gauge(self) -> bool {
        Self::PRESSURE.contains(&self)
    }

    fn per_workload(self) -> bool {
        matches!(self, Family::WorkloadOomKills | Family::WorkloadContainerExits)
    }

    /// The namespace a series of this family is in (empty where the
    /// runtime did not name its pod): its share of the cap.
    fn namespace(self, labels: &[String]) -> Arc<str> {
        // Per pod: pod_uid, namespace, …; per workload: namespace, ….
        let at = usize::from(!self.per_workload());
        Arc::from(labels.get(at).map_or("", String::as_str))
    }

    /// The `family` label of the caps' counters.
    fn label(self) -> &'static str {
        match self {
            Family::PodOomKills | Family::PodOomWarnedSeconds | Family::WorkloadOomKills => "oom_kills",
            Family::PodContainerExits | Family::WorkloadContainerExits => "container_exits",
            Family::PodMemoryPressure | Family::PodUnreclaimableRatio | Family::PodSecondsToLimit => "memory_pressure",
        }
    }
}

/// A workload: (namespace, name, kind).
type WorkloadKey = [String; 3];

/// One family's series under its cap, by namespace.
struct Capped {
    max: usize,
    series: FairShare<Arc<str>, Vec<String>>,
    evicted: IntCounter,
    expired: IntCounter,
}

pub struct PodSeries {
    counters: HashMap<Family, CounterVec>,
    gauges: HashMap<Family, GaugeVec>,
    family: Registry,
    /// The families as text since their last change (`None`: changed).
    text: Option<Arc<str>>,
    caps: HashMap<Family, Capped>,
    /// The pods counted in each workload's series, till they expire.
    workload_pods: HashMap<WorkloadKey, HashSet<String>>,
    /// How long a new counter series is served at 0 before its first
    /// increments are added, at the least.
    hold: Duration,
    /// Who scrapes, and how often: the hold is longer for a slow scraper.
    scrapers: Scrapers,
    /// The hold in force, served.
    hold_seconds: prometheus::Gauge,
    /// New counter series and what waits to be added to them, with when
    /// they were made, by family (their labels shared with the caps'
    /// tables: a node's first kills make hundreds at once).
    held: Held,
}

type Held = HashMap<Family, HashMap<Arc<Vec<String>>, (Instant, f64)>>;

impl PodSeries {
    /// The families in their own registry; the caps' counters in
    /// `registry`.
    /// `hold`: how long a new counter series is served at 0 first.
    pub fn register(
        registry: &Registry,
        max_pods: usize,
        max_workloads: usize,
        hold: Duration,
    ) -> Result<Self, prometheus::Error> {
        let family = Registry::new();
        let counters = HashMap::from([
            (Family::PodOomKills, catalogue::POD_OOM_KILLS_TOTAL.float_counter_vec(&family)?),
            (Family::PodOomWarnedSeconds, catalogue::POD_OOM_KILLS_WARNED_SECONDS_TOTAL.float_counter_vec(&family)?),
            (Family::PodContainerExits, catalogue::POD_CONTAINER_EXITS_TOTAL.float_counter_vec(&family)?),
            (Family::WorkloadOomKills, catalogue::WORKLOAD_OOM_KILLS_TOTAL.float_counter_vec(&family)?),
            (Family::WorkloadContainerExits, catalogue::WORKLOAD_CONTAINER_EXITS_TOTAL.float_counter_vec(&family)?),
        ]);
        let gauges = HashMap::from([
            (Family::PodMemoryPressure, catalogue::POD_MEMORY_PRESSURE.float_gauge_vec(&family)?),
            (Family::PodUnreclaimableRatio, catalogue::POD_MEMORY_UNRECLAIMABLE_RATIO.float_gauge_vec(&family)?),
            (Family::PodSecondsToLimit, catalogue::POD_MEMORY_SECONDS_TO_LIMIT.float_gauge_vec(&family)?),
        ]);
        let mut caps = HashMap::new();
        for (per_workload, max, evicted, expired) in [
            (false, max_pods, catalogue::POD_SERIES_EVICTED_TOTAL, catalogue::POD_SERIES_EXPIRED_TOTAL),
            (true, max_workloads, catalogue::WORKLOAD_SERIES_EVICTED_TOTAL, catalogue::WORKLOAD_SERIES_EXPIRED_TOTAL),
        ] {
            let (evicted, expired) = (evicted.counter_vec(registry)?, expired.counter_vec(registry)?);
            for f in Family::ALL.into_iter().filter(|f| f.per_workload() == per_workload) {
                let capped = Capped {
                    max: max.max(1),
                    series: FairShare::default(),
                    evicted: evicted.with_label_values(&[f.label()]),
                    expired: expired.with_label_values(&[f.label()]),
                };
                caps.insert(f, capped);
            }
        }
        let workload_pods = HashMap::new();
        let hold_seconds = catalogue::POD_SERIES_HOLD_SECONDS.float_gauge(registry)?;
        hold_seconds.set(hold.as_secs_f64());
        Ok(Self {
            counters,
            gauges,
            family,
            text: None,
            caps,
            workload_pods,
            hold,
            scrapers: Scrapers::default(),
            hold_seconds,
            held: Held::new(),
        })
    }

    fn remove(
        counters: &HashMap<Family, CounterVec>,
        gauges: &HashMap<Family, GaugeVec>,
        held: &mut Held,
        family: Family,
        labels: &Vec<String>,
    ) -> bool {
        // What waited goes with it: a series made again is held anew.
        if let Some(waiting) = held.get_mut(&family) {
            waiting.remove(labels);
        }
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        match family.gauge() {
            true => gauges.get(&family).is_some_and(|g| g.remove_label_values(&labels).is_ok()),
            false => counters.get(&family).is_some_and(|c| c.remove_label_values(&labels).is_ok()),
        }
    }

    /// Evicts the victim of `family`'s table when it is full, for a new
    /// series.
    fn make_room(
        capped: &mut Capped,
        counters: &HashMap<Family, CounterVec>,
        gauges: &HashMap<Family, GaugeVec>,
        held: &mut Held,
        family: Family,
    ) {
        if capped.series.len() >= capped.max {
            if let Some((gone, _)) = capped.series.evict() {
                Self::remove(counters, gauges, held, family, &gone);
                capped.evicted.inc();
            }
        }
    }

    /// The memory pressure gauges as they stand: `now` holds each series
    /// to set (family, labels, value); every other series of those
    /// families goes.
    pub fn pressure(&mut self, now: Vec<(Family, Vec<String>, f64)>) {
        let wanted: HashSet<(Family, Vec<String>)> = now.iter().map(|(f, l, ..)| (*f, l.clone())).collect();
        for family in Family::PRESSURE {
            let Some(capped) = self.caps.get_mut(&family) else { continue };
            let gone: Vec<Vec<String>> =
                capped.series.entries().filter(|l| !wanted.contains(&(family, (*l).clone()))).cloned().collect();
            for labels in gone {
                capped.series.remove(&labels);
                Self::remove(&self.counters, &self.gauges, &mut self.held, family, &labels);
                self.text = None;
            }
        }
        for (family, mut labels, value) in now {
            let Some(capped) = self.caps.get_mut(&family) else { continue };
            if !capped.series.contains(&labels) {
                Self::make_room(capped, &self.counters, &self.gauges, &mut self.held, family);
                self.text = None;
            }
            let values: Vec<&str> = labels.iter().map(String::as_str).collect();
            if let Some(Ok(g)) = self.gauges.get(&family).map(|g| g.get_metric_with_label_values(&values)) {
                if g.get() != value {
                    g.set(value);
                    self.text = None;
                }
            }
            let namespace = family.namespace(&labels);
            labels.shrink_to_fit();
            capped.series.touch(labels, namespace);
        }
    }

    /// `amount` more in `family`'s series `labels` (a counter family), at
    /// `now`; for a workload family, `pod_uid` is the pod it came from. A
    /// series made here is served at 0 first: the amount waits for the
    /// hold (see the module's doc).
    pub fn inc(&mut self, family: Family, mut labels: Vec<String>, pod_uid: &str, amount: f64, now: Instant) {
        if family.per_workload() {
            if let [namespace, workload, kind, ..] = labels.as_slice() {
                let key = [namespace.clone(), workload.clone(), kind.clone()];
                self.workload_pods.entry(key).or_default().insert(pod_uid.to_string());
            }
        }
        let Some(capped) = self.caps.get_mut(&family) else { return };
        let Some(counters) = self.counters.get(&family) else { return };
        let made = !capped.series.contains(&labels);
        if made {
            Self::make_room(capped, &self.counters, &self.gauges, &mut self.held, family);
        }
        let values: Vec<&str> = labels.iter().map(String::as_str).collect();
        // Made at 0 (a new child of the family starts there).
        let Ok(counter) = counters.get_metric_with_label_values(&values) else { return };
        let waiting = self.held.entry(family).or_default();
        let hold = made && !self.hold.is_zero();
        match waiting.get_mut(&labels) {
            Some((_, held)) => *held += amount,
            None if hold => {} // waits from below, under the table's labels
            None => counter.inc_by(amount),
        }
        self.text = None;
        let namespace = family.namespace(&labels);
        // Kept for as long as the series: no room for labels never added.
        labels.shrink_to_fit();
        let kept = capped.series.touch(labels, namespace);
        if hold {
            waiting.insert(kept, (now, amount));
        }
    }

    /// A scrape from `ip` at `now`.
    pub fn scraped(&mut self, ip: std::net::IpAddr, now: Instant) {
        self.scrapers.scraped(ip, now);
    }

    /// The hold at `now`: `hold`, or one and a half times the longest
    /// scraper's interval if longer (see the module's doc).
    fn hold_at(&self, now: Instant) -> Duration {
        match self.scrapers.longest_interval(now) {
            Some(interval) if !self.hold.is_zero() => self.hold.max(interval.mul_f64(1.5)),
            _ => self.hold,
        }
    }

    /// Adds what waited in series whose 0 has been served for the hold.
    fn release(&mut self, now: Instant) {
        let hold = self.hold_at(now);
        self.hold_seconds.set(hold.as_secs_f64());
        for (family, waiting) in &mut self.held {
            let due: Vec<Arc<Vec<String>>> = waiting
                .iter()
                .filter(|(_, (made, _))| now.saturating_duration_since(*made) >= hold)
                .map(|(labels, _)| labels.clone())
                .collect();
            for labels in due {
                let Some((_, amount)) = waiting.remove(&labels) else { continue };
                let values: Vec<&str> = labels.iter().map(String::as_str).collect();
                if let Some(Ok(c)) = self.counters.get(family).map(|c| c.get_metric_with_label_values(&values)) {
                    c.inc_by(amount);
                    self.text = None;
                }
            }
        }
    }

    /// Removes every series of `pod_uid`, and those of each workload whose
    /// last counted pod it was.
    pub fn expire(&mut self, pod_uid: &str) {
        let mut emptied = Vec::new();
        for (workload, pods) in &mut self.workload_pods {
            if pods.remove(pod_uid) && pods.is_empty() {
                emptied.push(workload.clone());
            }
        }
        for workload in &emptied {
            self.workload_pods.remove(workload);
        }
        for (&family, capped) in &mut self.caps {
            let gone: Vec<Vec<String>> = capped
                .series
                .entries()
                .filter(|labels| match family.per_workload() {
                    false => labels.first().is_some_and(|u| u == pod_uid),
                    true => emptied.iter().any(|w| labels.get(..3) == Some(&w[..])),
                })
                .cloned()
                .collect();
            for labels in gone {
                capped.series.remove(&labels);
                if Self::remove(&self.counters, &self.gauges, &mut self.held, family, &labels) {
                    capped.expired.inc();
                }
                self.text = None;
            }
        }
    }

    /// The families' text at `now`, rendered again only if they changed.
    pub fn text(&mut self, now: Instant) -> Result<Arc<str>, prometheus::Error> {
        self.release(now);
        if let Some(text) = &self.text {
            return Ok(text.clone());
        }
        let text: Arc<str> = render(&self.family)?.into();
        self.text = Some(text.clone());
        Ok(text)
    }
}
