//! The kernel's own word on which limit fired, where no program sees the
//! OOM killer's control: each memory cgroup counts the times the OOM
//! killer ran for its own limit (`memory_events_local[MEMCG_OOM]`, raised
//! just before the killer runs, on v1 as on v2), and every OOM record
//! carries that count for each level it read. The level whose count rose
//! since it was last seen is the one the killer ran for.
//!
//! A count is only a word where the agent knows what it was before: a
//! cgroup made while the agent watched started at 0 (its mkdir), one found
//! at start-up on v2 at what its `memory.events.local` said, and one seen
//! in a kill record is known from then on. A cgroup found at start-up on
//! v1 (no file shows the count) or made while its mkdir was lost has a
//! past the agent did not see; for it the page counters judge, as before. Bounded: past `MAX_COUNTS`
//! cgroups, new ones go unknown (the page counters judge them) rather than
//! push out a known one.
//!
//! What a count cannot tell: an OOM that killed nothing (the killer found
//! a victim of an earlier kill still exiting, and waited) raises its
//! cgroup's count too, so a container whose own OOM killed nothing, just
//! before its pod's limit fired, reads as the one that fired. The page
//! counters would say the same: both were at their limits.

use std::collections::HashMap;

use crate::events::kernel::MemcgUse;

/// Cgroups whose last count is kept: a node's pods' and containers'
/// memory cgroups with room to spare.
pub const MAX_COUNTS: usize = 65_536;

/// The last count seen of each memory cgroup, by cgroup id.
#[derive(Debug, Default)]
pub struct OomCounts {
    last: HashMap<u64, u64>,
}

impl OomCounts {
    /// A cgroup made while the agent watched: the kernel had run no OOM
    /// for it then. A count already seen stays (a kill's record can come
    /// before its cgroup's mkdir: they travel in different rings).
    pub fn born(&mut self, cgroup_id: u64) {
        if self.last.len() < MAX_COUNTS {
            self.last.entry(cgroup_id).or_insert(0);
        }
    }

    /// A cgroup found with `count` OOMs run for it (its file, at start-up).
    pub fn seen(&mut self, cgroup_id: u64, count: u64) {
        if self.last.len() < MAX_COUNTS {
            self.last.insert(cgroup_id, count);
        }
    }

    /// A cgroup whose past the agent did not see after all (it was made
    /// while its mkdir was lost), or one removed.
    pub fn forget(&mut self, cgroup_id: u64) {
        self.last.remove(&cgroup_id);
    }

    /// For each level of a kill, innermost first: whether the kernel ran
    /// the OOM killer for its limit since its count was last seen
    /// (`None`: the count was not read, or its past is unknown). Every
    /// count read is remembered.
    pub fn observe(&mut self, levels: &[MemcgUse]) -> Vec<Option<bool>> {
        levels
            .iter()
            .map(|l| {
                let now = l.ooms?;
                let room = self.last.len() < MAX_COUNTS;
                match self.last.get_mut(&l.cgroup_id) {
                    Some(last) => {
                        let rose = now > *last;
                        *last = now;
                        Some(rose)
                    }
                    None => {
                        if room {
                            self.last.insert(l.cgroup_id, now);
                        }
                        None
                    }
                }
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.last.len()
    }

    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(cgroup_id: u64, ooms: Option<u64>) -> MemcgUse {
        MemcgUse { cgroup_id, usage_bytes: 0, limit_bytes: None, memsw_usage_bytes: 0, memsw_limit_bytes: None, ooms }
    }

    #[test]
    fn a_count_that_rose_since_it_was_seen_is_the_kernels_word() {
        let mut c = OomCounts::default();
        c.born(1);
        c.born(2);
        // Container 1 and pod 2 born under watch; 3 (the QoS class) not.
        assert_eq!(
            c.observe(&[level(1, Some(0)), level(2, Some(1)), level(3, Some(5))]),
            [Some(false), Some(true), None]
        );
        // Known from then on, the QoS class too.
        assert_eq!(
            c.observe(&[level(1, Some(1)), level(2, Some(1)), level(3, Some(5))]),
            [Some(true), Some(false), Some(false)]
        );
        // A mkdir read after a kill of its cgroup leaves the count seen.
        c.born(3);
        assert_eq!(c.observe(&[level(3, Some(5))]), [Some(false)]);
        // Several OOMs between two kills (those that killed nothing) still rose.
        assert_eq!(c.observe(&[level(1, Some(4))]), [Some(true)]);
        // Unread: no word, and the last one seen is kept.
        assert_eq!(c.observe(&[level(1, None)]), [None]);
        assert_eq!(c.observe(&[level(1, Some(4))]), [Some(false)]);
    }

    #[test]
    fn a_cgroup_forgotten_or_past_the_bound_has_no_word() {
        let mut c = OomCounts::default();
        c.born(1);
        c.forget(1);
        assert_eq!(c.observe(&[level(1, Some(1))]), [None]);
        assert_eq!(c.observe(&[level(1, Some(2))]), [Some(true)], "seen in the kill before");
        for id in 100..(100 + MAX_COUNTS as u64) {
            c.born(id);
        }
        assert_eq!(c.len(), MAX_COUNTS);
        c.born(7);
        assert_eq!(c.observe(&[level(7, Some(1)), level(8, Some(1))]), [None, None]);
        assert_eq!(c.len(), MAX_COUNTS, "a full table pushes no known count out");
        assert_eq!(c.observe(&[level(1, Some(3))]), [Some(true)], "a known one is still kept");
    }
}
