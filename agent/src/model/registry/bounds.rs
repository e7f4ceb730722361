//! The registry's bounds: its limits, what it refused or forgot when one
//! was reached, and the maps that forget by age and by count — the
//! tombstones of torn-down cgroups and the recent OOM victims.

use std::{
    collections::{HashMap, VecDeque},
    hash::Hash,
};

use super::CgroupOwner;

/// What a removed cgroup belonged to, kept for a while so that events for
/// it are late rather than unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    pub owner: CgroupOwner,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_sandboxes: usize,
    pub max_containers_per_pod: usize,
    pub max_tombstones: usize,
    pub tombstone_ttl_ns: u64,
    pub max_host_cgroups: usize,
    pub max_oom_victims: usize,
    pub oom_victim_ttl_ns: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_sandboxes: 4096,
            max_containers_per_pod: 256,
            max_tombstones: 8192,
            tombstone_ttl_ns: 300 * 1_000_000_000,
            max_host_cgroups: 16384,
            max_oom_victims: 4096,
            oom_victim_ttl_ns: 120 * 1_000_000_000,
        }
    }
}

/// What the registry refuses or forgets when a bound is reached: the
/// label of `sandwatch_registry_evictions_total{what}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter, strum::EnumCount)]
#[strum(serialize_all = "snake_case")]
pub enum EvictionKind {
    /// A new pod beyond `max_sandboxes` (refused).
    Sandbox,
    /// A new container beyond `max_containers_per_pod` (refused).
    Container,
    /// The oldest tombstone beyond `max_tombstones` (forgotten).
    Tombstone,
    /// A host cgroup beyond `max_host_cgroups` (refused).
    HostCgroup,
    /// The oldest OOM victim beyond `max_oom_victims` (forgotten).
    OomVictim,
}

/// Things the registry refused or forgot because a bound was reached, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Evictions([u64; <EvictionKind as strum::EnumCount>::COUNT]);

impl Evictions {
    pub(super) fn add(&mut self, kind: EvictionKind) {
        self.add_n(kind, 1);
    }

    pub(super) fn add_n(&mut self, kind: EvictionKind, n: u64) {
        self.0[kind as usize] += n;
    }

    /// How many of `kind` so far.
    pub fn get(&self, kind: EvictionKind) -> u64 {
        self.0[kind as usize]
    }
}

/// A map whose entries go when they are older than a time to live, or
/// when it holds more than its bound (the oldest first).
#[derive(Debug)]
pub(super) struct ExpiringMap<K, V> {
    /// Each value with when it was put.
    entries: HashMap<K, (V, u64)>,
    /// Keys in the order they were put, with when: a pair whose entry was
    /// put again or removed since is stale, and skipped.
    order: VecDeque<(K, u64)>,
}

impl<K, V> Default for ExpiringMap<K, V> {
    fn default() -> Self {
        Self { entries: HashMap::new(), order: VecDeque::new() }
    }
}

impl<K: Copy + Eq + Hash, V> ExpiringMap<K, V> {
    /// Puts `value` under `key` at `now_ns`, then forgets the oldest
    /// entries beyond `max`; returns how many it forgot.
    pub(super) fn insert(&mut self, key: K, value: V, now_ns: u64, max: usize) -> u64 {
        self.entries.insert(key, (value, now_ns));
        self.order.push_back((key, now_ns));
        let mut forgotten = 0;
        while self.entries.len() > max {
            let Some((key, at)) = self.order.pop_front() else { break };
            if self.remove_put_at(key, at) {
                forgotten += 1;
            }
        }
        forgotten
    }

    pub(super) fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|(value, _)| value)
    }

    pub(super) fn remove(&mut self, key: &K) {
        self.entries.remove(key);
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(key, (value, _))| (key, value))
    }

    /// Forgets the entries put `ttl_ns` or longer before `now_ns`.
    pub(super) fn expire(&mut self, now_ns: u64, ttl_ns: u64) {
        while let Some(&(key, at)) = self.order.front() {
            if now_ns.saturating_sub(at) < ttl_ns {
                break;
            }
            self.order.pop_front();
            self.remove_put_at(key, at);
        }
    }

    /// Removes `key` if it was last put at `at`.
    fn remove_put_at(&mut self, key: K, at: u64) -> bool {
        let current = self.entries.get(&key).is_some_and(|(_, put)| *put == at);
        if current {
            self.entries.remove(&key);
        }
        current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: an entry put again forgotten for its first put's age, or in
    /// its first put's turn.
    #[test]
    fn an_entry_put_again_lives_from_its_last_put() {
        let mut m = ExpiringMap::default();
        assert_eq!(m.insert(1u64, "a", 0, 2), 0);
        assert_eq!(m.insert(2, "b", 10, 2), 0);
        assert_eq!(m.insert(1, "a again", 20, 2), 0);
        m.expire(25, 20);
        assert_eq!((m.get(&1), m.get(&2)), (Some(&"a again"), Some(&"b")));
        assert_eq!(m.insert(3, "c", 30, 2), 1, "the oldest live entry goes");
        assert_eq!((m.get(&2), m.len()), (None, 2));
        m.expire(45, 20);
        assert_eq!((m.get(&1), m.get(&3)), (None, Some(&"c")));
    }
}
