//! The OOM-storm rule: OOM events (the OOM killer's picks, see
//! [`super::oom_events`]) in a sliding window, and a storm flag that rises
//! at a threshold and falls only at a lower clear level, so that it does
//! not flap. The node-wide flag is the node's: no namespace counts for
//! more than half the threshold, so one tenant's kills alone never raise
//! it (its own churn is its own storm, said by namespace: [`Storming`]).
//! Pure: times are CLOCK_BOOTTIME ns handed in by the caller.

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
};

/// How the window and the flag behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StormSettings {
    /// Length of the sliding window, in seconds.
    pub window_secs: u64,
    /// The flag rises when the window holds at least this many OOM events…
    pub threshold: u64,
    /// …and falls only when it holds at most this many.
    pub clear: u64,
}

impl Default for StormSettings {
    fn default() -> Self {
        Self { window_secs: 60, threshold: 10, clear: 5 }
    }
}

/// Whose an OOM event is, for the storm: a namespace, or where the
/// runtime has not named it, a pod (both empty: the host's).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct StormKey {
    pub namespace: String,
    /// Only where the namespace is not known.
    pub pod_uid: String,
}

/// A namespace (or pod) whose own OOM events in the window are at or above
/// the threshold (until they fall to the clear level).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Storming {
    pub key: StormKey,
    pub events: u64,
}

/// Namespaces said storming at most: the busiest.
pub const MAX_STORMING: usize = 10;

/// The OOM storm flag rose (`started`) or fell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StormEdge {
    pub started: bool,
    pub events_in_window: u64,
    pub window_secs: u64,
}

/// The window after an update: how many events it holds, whether a storm
/// is on, the edge if the flag just changed, and which namespaces storm
/// on their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StormState {
    pub events_in_window: u64,
    pub window_secs: u64,
    pub storm: bool,
    pub edge: Option<StormEdge>,
    /// The busiest first, at most [`MAX_STORMING`].
    pub storming: Vec<Storming>,
}

/// Event timestamps kept at most; a storm beyond this still reads as one.
const MAX_WINDOW_EVENTS: usize = 100_000;

#[derive(Debug, Default)]
pub struct Storm {
    settings: StormSettings,
    events_ns: VecDeque<(u64, Arc<StormKey>)>,
    /// Events in the window, by whose.
    counts: HashMap<Arc<StormKey>, u64>,
    storm: bool,
    /// Namespaces in a storm of their own.
    storming: HashMap<Arc<StormKey>, ()>,
}

impl Storm {
    pub fn new(settings: StormSettings) -> Self {
        Self { settings, ..Self::default() }
    }

    /// An OOM event of `key` at `now_ns`.
    pub fn record(&mut self, now_ns: u64, key: StormKey) -> StormState {
        if self.events_ns.len() >= MAX_WINDOW_EVENTS {
            self.pop();
        }
        let key = match self.counts.get_key_value(&key) {
            Some((k, _)) => k.clone(),
            None => Arc::new(key),
        };
        *self.counts.entry(key.clone()).or_default() += 1;
        self.events_ns.push_back((now_ns, key));
        self.update(now_ns)
    }

    fn pop(&mut self) {
        let Some((_, key)) = self.events_ns.pop_front() else { return };
        if let Some(n) = self.counts.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&key);
            }
        }
    }

    /// Slides the window to `now_ns`.
    pub fn update(&mut self, now_ns: u64) -> StormState {
        let window_ns = self.settings.window_secs.saturating_mul(1_000_000_000);
        while self.events_ns.front().is_some_and(|(t, _)| now_ns.saturating_sub(*t) >= window_ns) {
            self.pop();
        }
        let n = self.events_ns.len() as u64;
        let (threshold, clear) = (self.settings.threshold, self.settings.clear);
        // No namespace counts for more than half the threshold: it takes
        // two to make a node's storm.
        let cap = threshold.div_ceil(2).max(1);
        let node: u64 = self.counts.values().map(|c| (*c).min(cap)).sum();
        let was = self.storm;
        if !self.storm && node >= threshold {
            self.storm = true;
        } else if self.storm && node <= clear {
            self.storm = false;
        }
        // A namespace's own storm, with the same hysteresis.
        let counts = &self.counts;
        self.storming.retain(|k, ()| counts.get(k).is_some_and(|c| *c > clear));
        for (k, c) in counts {
            if *c >= threshold {
                self.storming.insert(k.clone(), ());
            }
        }
        let mut storming: Vec<Storming> = self
            .storming
            .keys()
            .map(|k| Storming { key: (**k).clone(), events: counts.get(k).copied().unwrap_or(0) })
            .collect();
        storming.sort_by(|a, b| b.events.cmp(&a.events).then_with(|| a.key.cmp(&b.key)));
        storming.truncate(MAX_STORMING);
        let window_secs = self.settings.window_secs;
        StormState {
            events_in_window: n,
            window_secs,
            storm: self.storm,
            edge: (was != self.storm).then_some(StormEdge { started: self.storm, events_in_window: n, window_secs }),
            storming,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn ns(name: &str) -> StormKey {
        StormKey { namespace: name.into(), pod_uid: String::new() }
    }

    #[test]
    fn storm_rises_at_threshold_and_falls_with_hysteresis() {
        let mut storm = Storm::new(StormSettings { window_secs: 10, threshold: 4, clear: 1 });
        assert!(!storm.update(0).storm);
        for (i, who) in ["a", "b", "a"].into_iter().enumerate() {
            assert_eq!(storm.record(i as u64 * SEC, ns(who)).edge, None, "3 < threshold 4");
        }
        let rose = storm.record(3 * SEC, ns("b"));
        assert_eq!(rose.edge, Some(StormEdge { started: true, events_in_window: 4, window_secs: 10 }));
        assert!(rose.storm);
        // Events at 0 s and 1 s leave the window: 2 left, above clear (1): still a storm.
        let later = storm.update(11 * SEC + SEC / 2);
        assert_eq!((later.edge, later.storm, later.events_in_window), (None, true, 2));
        // One left: the storm is over, once.
        let fell = storm.update(12 * SEC + SEC / 2);
        assert_eq!(fell.edge, Some(StormEdge { started: false, events_in_window: 1, window_secs: 10 }));
        assert_eq!(
            storm.update(100 * SEC),
            StormState { events_in_window: 0, window_secs: 10, storm: false, edge: None, storming: Vec::new() }
        );
    }

    /// Guards: ten OOM events of one tenant in 60 s raised the node-wide
    /// storm. One namespace's kills count for half the threshold at most:
    /// its flood alone is its own storm, said by its name; a second
    /// namespace's kills make it the node's.
    #[test]
    fn one_namespace_alone_storms_on_its_own_and_two_make_the_nodes() {
        let mut storm = Storm::new(StormSettings::default());
        let mut state = storm.update(0);
        for i in 0..40 {
            state = storm.record(i * SEC / 10, ns("noisy"));
            assert!(!state.storm, "one namespace never raises the node's storm");
        }
        assert_eq!(state.events_in_window, 40);
        assert_eq!(state.storming, [Storming { key: ns("noisy"), events: 40 }]);
        // Pods of unnamed namespaces are each their own.
        for i in 0..4 {
            state = storm.record(5 * SEC + i, StormKey { namespace: String::new(), pod_uid: "p1".into() });
        }
        assert!(!state.storm, "5 + 4 < 10");
        state = storm.record(6 * SEC, ns("other"));
        assert!(state.storm && state.edge.is_some_and(|e| e.started), "two namespaces: the node's storm");
        // Its own storm ends with the hysteresis: at the clear level.
        let later = storm.update(70 * SEC);
        assert!(later.storming.is_empty(), "{later:?}");
        assert!(!later.storm);
    }

    #[test]
    fn namespaces_storming_are_bounded_and_the_busiest_first() {
        let mut storm = Storm::new(StormSettings { window_secs: 60, threshold: 2, clear: 0 });
        let mut state = storm.update(0);
        for n in 0..30u64 {
            for _ in 0..(2 + n % 3) {
                state = storm.record(SEC, ns(&format!("ns{n:02}")));
            }
        }
        assert_eq!(state.storming.len(), MAX_STORMING);
        assert!(state.storming.iter().all(|s| s.events == 4), "{:?}", state.storming);
    }

    #[test]
    fn the_window_is_bounded() {
        let mut storm = Storm::new(StormSettings { window_secs: 60, threshold: 1_000_000, clear: 0 });
        for i in 0..MAX_WINDOW_EVENTS + 10 {
            storm.record(0, ns(if i % 2 == 0 { "a" } else { "b" }));
        }
        assert_eq!(storm.update(0).events_in_window, MAX_WINDOW_EVENTS as u64);
    }
}
