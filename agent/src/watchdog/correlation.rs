//! What the container runtime says against what the kernel showed: the
//! lag between a kernel exit and the runtime's TaskExit for the same pid,
//! and OOM kills only one side reported. No I/O; every time is CLOCK_BOOTTIME
//! ns (the caller converts the runtime's wall-clock timestamps).

use std::collections::{HashMap, VecDeque};

/// How long one side waits for the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorrelatorLimits {
    /// A runtime TaskExit with no kernel exit within this is unmatched.
    pub exit_match_ns: u64,
    /// An OOM kill on one side with none on the other within this is a
    /// mismatch.
    pub oom_match_ns: u64,
    /// Bound on each table; the oldest entry goes first (counted).
    pub max_entries: usize,
}

impl Default for CorrelatorLimits {
    fn default() -> Self {
        Self { exit_match_ns: 60_000_000_000, oom_match_ns: 30_000_000_000, max_entries: 4096 }
    }
}

/// What expiry found, to be counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    pub runtime_exits_unmatched: u64,
    /// Kernel OOM kills the runtime never reported.
    pub kernel_only_ooms: u64,
    /// Runtime OOM events with no kernel OOM kill in that container.
    pub runtime_only_ooms: u64,
    /// Entries dropped because a table was full.
    pub evicted: u64,
}

/// pid → time, oldest first: exits waiting for the other side.
#[derive(Debug, Default)]
struct PendingExits {
    at: HashMap<u32, u64>,
    order: VecDeque<(u32, u64)>,
}

impl PendingExits {
    fn insert(&mut self, pid: u32, ts: u64) {
        self.at.insert(pid, ts);
        self.order.push_back((pid, ts));
    }

    fn take(&mut self, pid: u32) -> Option<u64> {
        self.at.remove(&pid)
    }

    /// Drops the oldest entries while `drop(entry)` says so; returns how
    /// many live entries went (stale queue entries of taken pids do not count).
    fn drop_oldest(&mut self, mut drop: impl FnMut(&Self, u64) -> bool) -> u64 {
        let mut dropped = 0;
        while let Some(&(pid, at)) = self.order.front() {
            if !drop(self, at) {
                break;
            }
            self.order.pop_front();
            if self.at.get(&pid) == Some(&at) {
                self.at.remove(&pid);
                dropped += 1;
            }
        }
        dropped
    }

    fn len(&self) -> usize {
        self.at.len()
    }
}

#[derive(Debug, Default)]
pub struct Correlator {
    limits: CorrelatorLimits,
    /// Kernel exit times of container inits, by pid.
    kernel_exits: PendingExits,
    /// Runtime TaskExit times the kernel has not matched yet, by pid.
    runtime_exits: PendingExits,
    /// container id → kernel OOM kills not yet reported by the runtime.
    kernel_ooms: HashMap<String, VecDeque<u64>>,
    /// container id → the runtime's last OOM event there, and whether a
    /// kernel OOM kill matched it. One runtime event may stand for several
    /// kills (the runtime's OOM notification coalesces them).
    runtime_ooms: HashMap<String, (u64, bool)>,
    pub expired: Expired,
}

impl Correlator {
    pub fn new(limits: CorrelatorLimits) -> Self {
        Self { limits, ..Self::default() }
    }

    /// The kernel showed a container init end. Returns the runtime's lag
    /// if its TaskExit came first.
    pub fn kernel_exit(&mut self, pid: u32, ts_ns: u64) -> Option<u64> {
        if let Some(published) = self.runtime_exits.take(pid) {
            return Some(published.saturating_sub(ts_ns));
        }
        self.kernel_exits.insert(pid, ts_ns);
        self.bound();
        None
    }

    /// The runtime reported an init's exit (published at `published_ns`).
    /// Returns its lag behind the kernel's exit of the same pid, if seen.
    pub fn runtime_exit(&mut self, pid: u32, published_ns: u64) -> Option<u64> {
        if let Some(ts) = self.kernel_exits.take(pid) {
            return Some(published_ns.saturating_sub(ts));
        }
        self.runtime_exits.insert(pid, published_ns);
        self.bound();
        None
    }

    /// The kernel OOM-killed a process of `container_id`. Returns true if a
    /// runtime OOM event there already accounts for it.
    pub fn kernel_oom(&mut self, container_id: &str, ts_ns: u64) -> bool {
        if let Some((at, matched)) = self.runtime_ooms.get_mut(container_id) {
            if at.abs_diff(ts_ns) <= self.limits.oom_match_ns {
                *matched = true;
                return true;
            }
        }
        self.kernel_ooms.entry(container_id.to_string()).or_default().push_back(ts_ns);
        self.bound();
        false
    }

    /// The runtime reported an OOM in `container_id`. Returns how many
    /// pending kernel OOM kills it accounts for.
    pub fn runtime_oom(&mut self, container_id: &str, published_ns: u64) -> usize {
        let matched = self.kernel_ooms.remove(container_id).map_or(0, |kills| kills.len());
        if matched == 0 {
            if let Some((at, true)) = self.runtime_ooms.get(container_id) {
                if at.abs_diff(published_ns) <= self.limits.oom_match_ns {
                    // The same OOM again: on cgroup v1 the runtime hears every
                    // OOM invocation, and the kernel may invoke it again while
                    // the victim dies. Not a mismatch.
                    return 0;
                }
            }
        }
        let previous = self.runtime_ooms.insert(container_id.to_string(), (published_ns, matched > 0));
        if let Some((_, false)) = previous {
            // The one before never met a kernel kill.
            self.expired.runtime_only_ooms += 1;
        }
        self.bound();
        matched
    }

    /// Settles everything older than its wait.
    pub fn expire(&mut self, now_ns: u64) {
        let exit_wait = self.limits.exit_match_ns;
        let old = |_: &PendingExits, at: u64| now_ns.saturating_sub(at) >= exit_wait;
        self.expired.runtime_exits_unmatched += self.runtime_exits.drop_oldest(old);
        self.kernel_exits.drop_oldest(old);
        let oom_wait = self.limits.oom_match_ns;
        let mut kernel_only = 0;
        self.kernel_ooms.retain(|_, kills| {
            while kills.front().is_some_and(|&at| now_ns.saturating_sub(at) >= oom_wait) {
                kills.pop_front();
                kernel_only += 1;
            }
            !kills.is_empty()
        });
        self.expired.kernel_only_ooms += kernel_only;
        let mut runtime_only = 0;
        self.runtime_ooms.retain(|_, (at, matched)| {
            if now_ns.saturating_sub(*at) < oom_wait {
                return true;
            }
            if !*matched {
                runtime_only += 1;
            }
            false
        });
        self.expired.runtime_only_ooms += runtime_only;
    }

    fn bound(&mut self) {
        let max = self.limits.max_entries.max(1);
        let full = |t: &PendingExits, _: u64| t.len() > max;
        self.expired.evicted += self.kernel_exits.drop_oldest(full) + self.runtime_exits.drop_oldest(full);
        if self.kernel_ooms.len() > max || self.runtime_ooms.len() > max {
            // OOM tables only grow past the bound under a storm across
            // thousands of containers: settle the lot rather than guess.
            self.expired.evicted += (self.kernel_ooms.len() + self.runtime_ooms.len()) as u64;
            self.kernel_ooms.clear();
            self.runtime_ooms.clear();
        }
    }

    /// Entries still waiting for the other side.
    pub fn pending(&self) -> usize {
        self.kernel_exits.len() + self.runtime_exits.len() + self.kernel_ooms.len() + self.runtime_ooms.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn correlator() -> Correlator {
        Correlator::new(CorrelatorLimits { exit_match_ns: 60 * S, oom_match_ns: 10 * S, max_entries: 4 })
    }

    #[test]
    fn exit_lag_is_measured_whichever_side_comes_first() {
        let mut c = correlator();
        assert_eq!(c.kernel_exit(100, 10 * S), None);
        assert_eq!(c.runtime_exit(100, 10 * S + 3_000_000), Some(3_000_000));
        // Runtime first (its event overtook the kernel's batch).
        assert_eq!(c.runtime_exit(200, 20 * S), None);
        assert_eq!(c.kernel_exit(200, 20 * S - 500), Some(500));
        // A runtime clock behind the kernel's never yields a negative lag.
        c.kernel_exit(300, 30 * S);
        assert_eq!(c.runtime_exit(300, 29 * S), Some(0));
        assert_eq!(c.pending(), 0);
    }

    #[test]
    fn runtime_exit_without_kernel_exit_is_unmatched_after_the_wait() {
        let mut c = correlator();
        c.runtime_exit(7, S);
        c.expire(30 * S);
        assert_eq!(c.expired.runtime_exits_unmatched, 0);
        c.expire(61 * S);
        assert_eq!(c.expired.runtime_exits_unmatched, 1);
        assert_eq!(c.pending(), 0);
    }

    #[test]
    fn one_runtime_oom_event_accounts_for_a_burst_of_kills() {
        let mut c = correlator();
        assert!(!c.kernel_oom("a", 10 * S));
        assert!(!c.kernel_oom("a", 10 * S + 1));
        assert_eq!(c.runtime_oom("a", 11 * S), 2);
        // A third kill of the same burst, after the runtime's event.
        assert!(c.kernel_oom("a", 12 * S));
        c.expire(100 * S);
        assert_eq!(c.expired, Expired::default());
    }

    #[test]
    fn a_runtime_repeating_a_matched_oom_is_no_mismatch() {
        let mut c = correlator();
        c.kernel_oom("a", 10 * S);
        assert_eq!(c.runtime_oom("a", 10 * S + 1), 1);
        assert_eq!(c.runtime_oom("a", 10 * S + 2), 0);
        c.expire(100 * S);
        assert_eq!(c.expired, Expired::default());
        // Past the window a runtime event with no kill is one.
        c.runtime_oom("b", 10 * S);
        c.expire(100 * S);
        assert_eq!(c.expired.runtime_only_ooms, 1);
    }

    #[test]
    fn oom_on_one_side_only_is_a_mismatch() {
        let mut c = correlator();
        c.kernel_oom("k", S);
        c.runtime_oom("r", S);
        c.expire(5 * S);
        assert_eq!(c.expired.kernel_only_ooms + c.expired.runtime_only_ooms, 0, "still waiting");
        c.expire(11 * S);
        assert_eq!(c.expired.kernel_only_ooms, 1);
        assert_eq!(c.expired.runtime_only_ooms, 1);
        // A runtime event far from the kernel kill does not match it.
        c.kernel_oom("late", 20 * S);
        c.expire(31 * S);
        c.runtime_oom("late", 40 * S);
        c.expire(51 * S);
        assert_eq!(c.expired.kernel_only_ooms, 2);
        assert_eq!(c.expired.runtime_only_ooms, 2);
    }

    #[test]
    fn tables_are_bounded() {
        let mut c = correlator();
        for pid in 0..10 {
            c.kernel_exit(pid, S);
            c.runtime_exit(1000 + pid, S);
        }
        assert!(c.pending() <= 8);
        assert_eq!(c.expired.evicted, 12);
    }
}
