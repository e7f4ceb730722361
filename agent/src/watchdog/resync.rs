//! Cgroup changes lost with dropped records, recovered: the tree read
//! again and applied to the model as the changes that would have made it.

use super::*;

impl<H: Host> Watchdog<H> {
    /// After a loss that may have held cgroup changes: the registry is
    /// compared with the cgroup tree as it is, and each difference applied
    /// as the lost mkdir or rmdir would have been (a pod torn down in the
    /// gap goes, one created in it is known).
    pub(super) fn resync(&mut self, now: u64) {
        self.losses.resynced_ns = now;
        let tree = self.host.cgroup_tree(now);
        let present: HashSet<u64> = tree.cgroups.iter().map(|c| c.cgroup_id).collect();
        // A walk cut short at its bound has not seen every cgroup: nothing
        // is taken for gone then.
        let gone: Vec<u64> = if tree.complete {
            self.dispatcher.registry.known_cgroups().filter(|id| !present.contains(id)).collect()
        } else {
            Vec::new()
        };
        let mut created = 0;
        for c in tree.cgroups {
            // Only pods' cgroups matter to the model; parents come first.
            if cgroup_path::parse(&c.path).is_none() || self.dispatcher.registry.owner(c.cgroup_id).is_some() {
                continue;
            }
            let id = c.cgroup_id;
            self.kernel(&Event::CgroupMkdir(c), now);
            // Made while its mkdir was lost: OOMs may have run for it since.
            self.oom_counts.forget(id);
            created += u64::from(self.dispatcher.registry.owner(id).is_some());
        }
        let removed = gone.len() as u64;
        for cgroup_id in gone {
            let rmdir = CgroupChange {
                ts_ns: now,
                hierarchy_id: 0,
                level: 0,
                cgroup_id,
                path: String::new(),
                truncated: false,
            };
            self.kernel(&Event::CgroupRmdir(rmdir), now);
        }
        self.out.push(Finding::CgroupResync { reread: true, created, removed });
    }

    /// For a mkdir produced before the last re-read of the tree (it waited
    /// in the ring buffer meanwhile) of a cgroup that is not there now:
    /// the rmdir that must follow, since its own may be one of the lost.
    pub(super) fn gone_already(&self, c: &CgroupChange, now: u64) -> Option<Event> {
        if c.ts_ns >= self.losses.resynced_ns || c.truncated || cgroup_path::parse(&c.path).is_none() {
            return None;
        }
        if self.host.cgroup_id(&c.path) == Some(c.cgroup_id) {
            return None;
        }
        Some(Event::CgroupRmdir(CgroupChange { ts_ns: now, path: String::new(), ..c.clone() }))
    }
}
