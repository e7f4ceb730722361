//! Eviction that no tenant can steer: when a shared table is full, what
//! goes is the least recently touched entry of the *largest* owner (a
//! namespace, say), not the least recently touched entry overall. A
//! tenant that floods a table evicts its own entries once it holds more
//! than anyone else; every other owner keeps its share. Among owners of
//! the same size, the one whose least recent entry is oldest gives.
//!
//! Every operation is O(log n): the owners are kept ordered by size, and
//! each owner's entries by when they were touched. An entry is kept once
//! (shared by the two indexes); an owner should be cheap to clone (an
//! `Arc<str>`): it is kept beside each of its entries.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BTreeSet, HashMap},
    hash::Hash,
    sync::Arc,
};

/// Entries `I`, each owned by one `K`, in the order they were touched.
#[derive(Debug)]
pub struct FairShare<K, I> {
    next: u64,
    /// Each entry's owner and the stamp of its last touch.
    entries: HashMap<Arc<I>, (K, u64)>,
    /// Each owner's entries by stamp.
    owners: HashMap<K, BTreeMap<u64, Arc<I>>>,
    /// (entries held, its oldest stamp reversed, owner): the last is the
    /// owner that gives.
    sizes: BTreeSet<(usize, Reverse<u64>, K)>,
}

impl<K, I> Default for FairShare<K, I> {
    fn default() -> Self {
        Self { next: 0, entries: HashMap::new(), owners: HashMap::new(), sizes: BTreeSet::new() }
    }
}

impl<K: Ord + Hash + Clone, I: Hash + Eq + Clone> FairShare<K, I> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains(&self, entry: &I) -> bool {
        self.entries.contains_key(entry)
    }

    /// Every entry, in no order.
    pub fn entries(&self) -> impl Iterator<Item = &I> {
        self.entries.keys().map(|e| &**e)
    }

    /// Adds `entry` for `owner`, or makes it the owner's most recent;
    /// returns the entry as the table keeps it, for a caller to share
    /// rather than copy.
    pub fn touch(&mut self, entry: I, owner: K) -> Arc<I> {
        let entry = match self.entries.get_key_value(&entry) {
            Some((kept, _)) => kept.clone(),
            None => Arc::new(entry),
        };
        self.remove(&entry);
        self.next += 1;
        let stamp = self.next;
        self.entries.insert(entry.clone(), (owner.clone(), stamp));
        self.reorder(&owner, |held| {
            held.insert(stamp, entry.clone());
        });
        entry
    }

    /// Forgets `entry`; false if it was not there.
    pub fn remove(&mut self, entry: &I) -> bool {
        let Some((owner, stamp)) = self.entries.remove(entry) else { return false };
        self.reorder(&owner, |held| {
            held.remove(&stamp);
        });
        true
    }

    /// The entry that gives when the table is full: the least recently
    /// touched of the largest owner's. Not removed.
    pub fn victim(&self) -> Option<&I> {
        let (_, _, owner) = self.sizes.last()?;
        self.owners.get(owner)?.values().next().map(|e| &**e)
    }

    /// Takes the victim out, with its owner.
    pub fn evict(&mut self) -> Option<(I, K)> {
        let (_, _, owner) = self.sizes.last()?;
        let entry = self.owners.get(owner)?.values().next()?.clone();
        let owner = self.entries.get(&*entry).map(|(o, _)| o.clone())?;
        self.remove(&entry);
        // Its last holder now, unless a caller kept a copy.
        Some((Arc::try_unwrap(entry).unwrap_or_else(|e| (*e).clone()), owner))
    }

    /// How many entries `owner` holds.
    pub fn held_by(&self, owner: &K) -> usize {
        self.owners.get(owner).map_or(0, BTreeMap::len)
    }

    /// Changes `owner`'s entries with `change`, keeping its place among
    /// the owners right.
    fn reorder(&mut self, owner: &K, change: impl FnOnce(&mut BTreeMap<u64, Arc<I>>)) {
        let held = self.owners.entry(owner.clone()).or_default();
        if let Some((&oldest, _)) = held.first_key_value() {
            self.sizes.remove(&(held.len(), Reverse(oldest), owner.clone()));
        }
        change(held);
        match held.first_key_value() {
            Some((&oldest, _)) => {
                self.sizes.insert((held.len(), Reverse(oldest), owner.clone()));
            }
            None => {
                self.owners.remove(owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills a table of `cap` entries as `publish` says, evicting fairly;
    /// returns what is left per owner.
    fn fill(cap: usize, publish: &[(&'static str, u32)]) -> FairShare<&'static str, u32> {
        let mut t = FairShare::default();
        for &(owner, entry) in publish {
            if !t.contains(&entry) && t.len() >= cap {
                t.evict();
            }
            t.touch(entry, owner);
        }
        t
    }

    #[test]
    fn a_flood_evicts_the_flooders_own_entries_not_anyone_elses() {
        // A quiet namespace's two records, then a flood of 10 000.
        let mut publish = vec![("quiet", 1), ("other", 2), ("quiet", 3)];
        publish.extend((100..10_100).map(|e| ("noisy", e)));
        let t = fill(64, &publish);
        assert_eq!(t.len(), 64);
        assert_eq!((t.held_by(&"quiet"), t.held_by(&"other")), (2, 1), "every quiet record kept");
        assert_eq!(t.held_by(&"noisy"), 61);
        // The flooder kept its newest.
        assert!(t.contains(&10_099) && !t.contains(&100));
    }

    #[test]
    fn owners_over_their_share_give_first_and_equals_give_their_oldest() {
        let mut t = fill(6, &[("a", 1), ("a", 2), ("a", 3), ("b", 4), ("b", 5), ("c", 6)]);
        assert_eq!(t.evict(), Some((1, "a")), "a holds the most");
        assert_eq!(t.evict(), Some((2, "a")), "a and b hold two each: a's oldest is older");
        assert_eq!(t.evict(), Some((4, "b")));
        assert_eq!(t.evict(), Some((3, "a")), "one each: the oldest of all");
    }

    #[test]
    fn a_touch_makes_an_entry_its_owners_most_recent() {
        let mut t = fill(4, &[("a", 1), ("a", 2), ("b", 3)]);
        t.touch(1, "a");
        assert_eq!(t.victim(), Some(&2), "2 is a's least recently touched now");
        assert!(t.remove(&2) && !t.remove(&2));
        assert_eq!(t.held_by(&"a"), 1);
        // One each: 3 was touched before 1 was again.
        assert_eq!((t.evict(), t.evict(), t.evict()), (Some((3, "b")), Some((1, "a")), None));
        assert!(t.is_empty());
    }
}
