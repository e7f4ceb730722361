//! Clients of the container runtime: containerd's event stream, pod and
//! container names over the CRI, and their own health metrics; what a
//! pod's labels say of its workload, and which runtime versions have
//! known crashes. What the runtime's processes do (crashes, restarts) is
//! the watchdog's (`watchdog::crashes`), read from kernel exits and /proc.
pub mod containerd;
pub mod cri;
pub mod known_issues;
pub mod metrics;
pub mod workload;

use std::{path::Path, time::Duration};

/// Pacing of retries against a runtime socket: 0.5 s doubling to 30 s,
/// reset by a success. The first failure is a warning, later ones are
/// debug lines: a node without that runtime is a normal place to run.
pub struct Retry {
    what: &'static str,
    backoff: Duration,
    failures: u32,
}

impl Retry {
    pub const FIRST: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(30);

    pub fn new(what: &'static str) -> Self {
        Self { what, backoff: Self::FIRST, failures: 0 }
    }

    /// A success; true if it ends a run of failures.
    pub fn succeeded(&mut self) -> bool {
        self.backoff = Self::FIRST;
        std::mem::take(&mut self.failures) > 0
    }

    /// A failure: logs it and returns how long to wait before the next try.
    pub fn failed(&mut self, socket: &Path, err: &str) -> Duration {
        if self.failures == 0 {
            log::warn!("{} unavailable at {}: {err}; retrying with backoff", self.what, socket.display());
        } else {
            log::debug!("{} still unavailable: {err}", self.what);
        }
        self.failures = self.failures.saturating_add(1);
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(Self::MAX);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_a_success_resets_it() {
        let mut retry = Retry::new("test");
        let socket = Path::new("/nonexistent");
        let waits: Vec<u64> = (0..9).map(|_| retry.failed(socket, "x").as_millis() as u64).collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
        assert!(retry.succeeded());
        assert!(!retry.succeeded(), "only the first success after failures says so");
        assert_eq!(retry.failed(socket, "x"), Duration::from_millis(500));
    }
}
