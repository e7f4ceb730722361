//! The counts of limit hits of pods' and containers' cgroups (and of the
//! kubelet's cgroups above the pods), remembered between OOM kills, so
//! that the next kill can say which limit fired: the level whose count
//! moved (see [`super::oom_limit`]). Read through the [`Host`]; bounded by
//! [`MAX_BASELINES`] (beyond, new cgroups are not remembered and their
//! kills read `unknown`).

use std::collections::HashMap;

use super::{oom_limit, Fired, Host};
use crate::model::cgroup_path;

/// Cgroups whose count of limit hits is remembered, at most.
const MAX_BASELINES: usize = 65536;

#[derive(Debug, Default)]
pub struct LimitCounts {
    /// Each cgroup's count when last read (path → count).
    baselines: HashMap<String, u64>,
}

/// A container's pod cgroup: its parent.
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(pod, _)| pod)
}

impl LimitCounts {
    /// Remembers the count of a pod's or container's cgroup at `path`
    /// (`known`, or read now), and of its pod's and the kubelet's cgroups
    /// above where not remembered yet.
    pub fn baseline(&mut self, host: &impl Host, path: &str, known: Option<u64>) {
        let pod = match cgroup_path::parse(path) {
            Some(p) if p.container_id.is_some() => parent(path),
            Some(_) => path,
            None => return,
        };
        let count = known.or_else(|| host.limit_hits(path));
        self.remember(path, count);
        for p in std::iter::once(pod.to_string()).chain(oom_limit::above_pod(pod)) {
            if !self.baselines.contains_key(&p) {
                let count = host.limit_hits(&p);
                self.remember(&p, count);
            }
        }
    }

    /// The cgroup at `path` is gone.
    pub fn forget(&mut self, path: &str) {
        self.baselines.remove(path);
    }

    fn remember(&mut self, path: &str, count: Option<u64>) {
        let Some(n) = count else { return };
        if self.baselines.len() < MAX_BASELINES || self.baselines.contains_key(path) {
            self.baselines.insert(path.to_string(), n);
        }
    }

    /// Which limit fired on an OOM kill in the container at `path`: the
    /// level whose count moved since last read (each count then
    /// remembered anew).
    pub fn fired(&mut self, host: &impl Host, path: &str) -> Fired {
        let mut moved = |p: &str| -> oom_limit::Moved {
            let now = host.limit_hits(p);
            let before = match now {
                Some(n) => self.baselines.insert(p.to_string(), n),
                None => self.baselines.remove(p),
            };
            let moved = now?.saturating_sub(before?);
            // A count that did not move where hits may go uncounted: not known.
            if moved == 0 && host.limit_hits_partial(p) {
                return None;
            }
            Some(moved)
        };
        let pod = parent(path);
        let (container, pod_moved) = (moved(path), moved(pod));
        let above: Vec<oom_limit::Moved> = oom_limit::above_pod(pod).iter().map(|p| moved(p)).collect();
        oom_limit::judge(container, pod_moved, &above)
    }
}

/// The tightest memory limit of the container at `path` and of its pod;
/// `None` when neither is limited or the cgroup is gone.
pub fn tightest(host: &impl Host, path: &str) -> Option<u64> {
    [host.memory_limit(path), host.memory_limit(parent(path))].into_iter().flatten().min()
}
