//! Containers created lately, whose `memory.oom.group` (cgroup v2: the
//! OOM killer takes the whole container) is read again each tick for a
//! while: the runtime writes it just after it creates the cgroup.

use std::collections::VecDeque;

/// How long after a container cgroup appears its setting is read again,
/// and for how many containers at most.
const RECHECK_NS: u64 = 10 * 1_000_000_000;
const MAX_RECHECKS: usize = 1024;

#[derive(Debug, Default)]
pub struct ModeChecks {
    /// (cgroup id, when it appeared), oldest first.
    recent: VecDeque<(u64, u64)>,
}

impl ModeChecks {
    /// A container's cgroup appeared at `now_ns`.
    pub fn appeared(&mut self, cgroup_id: u64, now_ns: u64) {
        if self.recent.len() < MAX_RECHECKS {
            self.recent.push_back((cgroup_id, now_ns));
        }
    }

    /// The containers whose setting is to be read again at `now_ns`.
    pub fn due(&mut self, now_ns: u64) -> Vec<u64> {
        while self.recent.front().is_some_and(|(_, since)| now_ns.saturating_sub(*since) > RECHECK_NS) {
            self.recent.pop_front();
        }
        self.recent.iter().map(|(id, _)| *id).collect()
    }
}
