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
//! past the agent did not see; for it the page counters judge, as before.
//! Bounded: a pod's and a container's cgroups (and those made while
//! watched) up to `MAX_COUNTS`; other cgroups met in kill records (the QoS
//! classes, the kubelet's root, a tenant's own nested ones, which have no
//! rmdir the agent reads) up to `MAX_OTHERS`. Past either, new ones go
//! without a word (the page counters judge them) rather than push out a
//! known one.
//!
//! What a count cannot tell: the kernel raises it each time it enters the
//! OOM path for the cgroup, killing or not (a victim of an earlier kill
//! still exiting; an allocator running into the limit again meanwhile).
//! So a rise is only taken where its cgroup is still near its limit
//! (`super::oom_limit::Margins::risen`), and a count that did not rise
//! clears nothing: where none rose, the page counters judge.

use std::collections::HashMap;

use crate::events::kernel::MemcgUse;

/// Cgroups whose last count is kept: a node's pods' and containers'
/// memory cgroups with room to spare.
pub const MAX_COUNTS: usize = 65_536;

/// Other cgroups met in kill records whose last count is kept: the few
/// above the pods, with room for what tenants nest.
pub const MAX_OTHERS: usize = 256;

/// The last count seen of each memory cgroup, by cgroup id.
#[derive(Debug, Default)]
pub struct OomCounts {
    last: HashMap<u64, u64>,
    others: HashMap<u64, u64>,
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
        self.others.remove(&cgroup_id);
    }

    /// For each level of a kill, innermost first: whether the kernel
    /// entered the OOM path for its limit since its count was last seen
    /// (`None`: the count was not read, or its past is unknown). Every
    /// count read is remembered: in the main table for a cgroup `owned`
    /// says is a pod's or a container's, else among the others.
    pub fn observe(&mut self, levels: &[MemcgUse], owned: impl Fn(u64) -> bool) -> Vec<Option<bool>> {
        levels
            .iter()
            .map(|l| {
                let now = l.ooms?;
                let id = l.cgroup_id;
                if let Some(last) = self.last.get_mut(&id).or_else(|| self.others.get_mut(&id)) {
                    let rose = now > *last;
                    // Records of one cgroup may come out of the order the
                    // kernel counted them in: the count only goes up.
                    *last = (*last).max(now);
                    return Some(rose);
                }
                let (table, max) =
                    if owned(id) { (&mut self.last, MAX_COUNTS) } else { (&mut self.others, MAX_OTHERS) };
                if table.len() < max {
                    table.insert(id, now);
                }
                None
            })
            .collect()
    }

    /// Cgroups whose count is kept.
    pub fn len(&self) -> usize {
        self.last.len() + self.others.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(cgroup_id: u64, ooms: Option<u64>) -> MemcgUse {
        MemcgUse { cgroup_id, usage_bytes: 0, limit_bytes: None, memsw_usage_bytes: 0, memsw_limit_bytes: None, ooms }
    }

    /// Cgroups 1 to 99 are pods' and containers'.
    fn owned(id: u64) -> bool {
        id < 100
    }

    #[test]
    fn a_count_that_rose_since_it_was_seen_is_the_kernels_word() {
        let mut c = OomCounts::default();
        c.born(1);
        c.born(2);
        // Container 1 and pod 2 born under watch; 300 (the QoS class) not.
        assert_eq!(
            c.observe(&[level(1, Some(0)), level(2, Some(1)), level(300, Some(5))], owned),
            [Some(false), Some(true), None]
        );
        // Known from then on, the QoS class too.
        assert_eq!(
            c.observe(&[level(1, Some(1)), level(2, Some(1)), level(300, Some(5))], owned),
            [Some(true), Some(false), Some(false)]
        );
        // A mkdir read after a kill of its cgroup leaves the count seen.
        c.observe(&[level(3, Some(5))], owned);
        c.born(3);
        assert_eq!(c.observe(&[level(3, Some(5))], owned), [Some(false)]);
        // Several OOMs between two kills (those that killed nothing) still rose.
        assert_eq!(c.observe(&[level(1, Some(4))], owned), [Some(true)]);
        // Unread: no word, and the last one seen is kept.
        assert_eq!(c.observe(&[level(1, None)], owned), [None]);
        assert_eq!(c.observe(&[level(1, Some(4))], owned), [Some(false)]);
        // A record that comes after a later one: the count stays the later.
        assert_eq!(c.observe(&[level(1, Some(3))], owned), [Some(false)]);
        assert_eq!(c.observe(&[level(1, Some(4))], owned), [Some(false)]);
    }

    #[test]
    fn a_cgroup_forgotten_or_past_the_bound_has_no_word() {
        let mut c = OomCounts::default();
        c.born(1);
        c.forget(1);
        assert_eq!(c.observe(&[level(1, Some(1))], owned), [None]);
        assert_eq!(c.observe(&[level(1, Some(2))], owned), [Some(true)], "seen in the kill before");
        // A tenant's nested cgroups fill the others' room, not the pods'.
        for id in 1000..(1000 + 2 * MAX_OTHERS as u64) {
            c.observe(&[level(id, Some(1))], owned);
        }
        assert_eq!(c.len(), 1 + MAX_OTHERS);
        assert_eq!(c.observe(&[level(5, Some(1))], owned), [None]);
        assert_eq!(c.observe(&[level(5, Some(2))], owned), [Some(true)], "a pod's cgroup still has room");
        for id in 100_000..(100_000 + MAX_COUNTS as u64) {
            c.born(id);
        }
        assert_eq!(c.len(), MAX_COUNTS + MAX_OTHERS);
        c.born(7);
        assert_eq!(c.observe(&[level(7, Some(1)), level(8, Some(1))], owned), [None, None]);
        assert_eq!(c.len(), MAX_COUNTS + MAX_OTHERS, "a full table pushes no known count out");
        assert_eq!(c.observe(&[level(1, Some(3))], owned), [Some(true)], "a known one is still kept");
    }
}
