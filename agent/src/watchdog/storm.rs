//! The OOM-storm rule: OOM events (the OOM killer's picks, see
//! [`super::oom_events`]) in a sliding window, and a storm flag that rises
//! at a threshold and falls only at a lower clear level, so that it does
//! not flap. Pure: times are CLOCK_BOOTTIME ns handed in by the caller.

use std::collections::VecDeque;

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

/// The OOM storm flag rose (`started`) or fell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StormEdge {
    pub started: bool,
    pub events_in_window: u64,
    pub window_secs: u64,
}

/// The window after an update: how many events it holds, whether a storm
/// is on, and the edge if the flag just changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StormState {
    pub events_in_window: u64,
    pub window_secs: u64,
    pub storm: bool,
    pub edge: Option<StormEdge>,
}

/// Event timestamps kept at most; a storm beyond this still reads as one.
const MAX_WINDOW_EVENTS: usize = 100_000;

#[derive(Debug, Default)]
pub struct Storm {
    settings: StormSettings,
    events_ns: VecDeque<u64>,
    storm: bool,
}

impl Storm {
    pub fn new(settings: StormSettings) -> Self {
        Self { settings, ..Self::default() }
    }

    /// An OOM event at `now_ns`.
    pub fn record(&mut self, now_ns: u64) -> StormState {
        if self.events_ns.len() >= MAX_WINDOW_EVENTS {
            self.events_ns.pop_front();
        }
        self.events_ns.push_back(now_ns);
        self.update(now_ns)
    }

    /// Slides the window to `now_ns`.
    pub fn update(&mut self, now_ns: u64) -> StormState {
        let window_ns = self.settings.window_secs.saturating_mul(1_000_000_000);
        while self.events_ns.front().is_some_and(|t| now_ns.saturating_sub(*t) >= window_ns) {
            self.events_ns.pop_front();
        }
        let n = self.events_ns.len() as u64;
        let was = self.storm;
        if !self.storm && n >= self.settings.threshold {
            self.storm = true;
        } else if self.storm && n <= self.settings.clear {
            self.storm = false;
        }
        let window_secs = self.settings.window_secs;
        StormState {
            events_in_window: n,
            window_secs,
            storm: self.storm,
            edge: (was != self.storm).then_some(StormEdge { started: self.storm, events_in_window: n, window_secs }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn storm_rises_at_threshold_and_falls_with_hysteresis() {
        let mut storm = Storm::new(StormSettings { window_secs: 10, threshold: 4, clear: 1 });
        assert!(!storm.update(0).storm);
        for i in 0..3 {
            assert_eq!(storm.record(i * SEC).edge, None, "3 < threshold 4");
        }
        let rose = storm.record(3 * SEC);
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
            StormState { events_in_window: 0, window_secs: 10, storm: false, edge: None }
        );
    }

    #[test]
    fn the_window_is_bounded() {
        let mut storm = Storm::new(StormSettings { window_secs: 60, threshold: 1_000_000, clear: 0 });
        for _ in 0..MAX_WINDOW_EVENTS + 10 {
            storm.record(0);
        }
        assert_eq!(storm.update(0).events_in_window, MAX_WINDOW_EVENTS as u64);
    }
}
