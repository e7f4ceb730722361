//! What the container runtime calls things: pod names and namespaces,
//! container names, and which container is a pod's sandbox, as listed over
//! the CRI. Pure data, no I/O: the runtime clients build listings
//! ([`Snapshot`]s, in `events::runtime`), the registry keeps the names in a
//! bounded [`MetadataStore`].
//!
//! Names outlive the runtime's listing by a TTL, so that an exit or OOM
//! kill handled after its pod was deleted still reads with names.

use std::collections::HashMap;

pub use crate::events::runtime::{ContainerMeta, PodMeta, Snapshot, SANDBOX_CONTAINER_NAME};

/// Names for metric labels and logs; empty where nothing is known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The pod's workload and its kind (`Deployment`, …), from its labels.
    pub workload: String,
    pub workload_kind: String,
}

impl Names {
    /// Both the pod and the container are named.
    pub fn complete(&self) -> bool {
        !self.pod.is_empty() && !self.container.is_empty()
    }
}

#[derive(Debug, Clone, Copy)]
pub struct MetadataLimits {
    pub max_pods: usize,
    pub max_containers: usize,
    /// How long a name is kept after the runtime stopped listing it.
    pub ttl_ns: u64,
}

impl Default for MetadataLimits {
    fn default() -> Self {
        Self { max_pods: 4096, max_containers: 16384, ttl_ns: 300 * 1_000_000_000 }
    }
}

/// Names by pod uid and container id, each with the time it was last listed.
#[derive(Debug, Default)]
pub struct MetadataStore {
    limits: MetadataLimits,
    pods: HashMap<String, (PodMeta, u64)>,
    containers: HashMap<String, (ContainerMeta, u64)>,
    /// Entries dropped because a bound was reached.
    pub evicted: u64,
}

impl MetadataStore {
    pub fn new(limits: MetadataLimits) -> Self {
        Self { limits, ..Self::default() }
    }

    /// Takes a listing: what it names is (re)stamped `now`; what it no
    /// longer names is kept until the TTL runs out; the bounds then drop
    /// the least recently listed first.
    pub fn apply(&mut self, snapshot: &Snapshot, now_ns: u64) {
        for pod in &snapshot.pods {
            let mut pod = pod.clone();
            // A container's record names its pod but not its workload (only
            // the sandbox's carries the pod's labels): keep what is known.
            if pod.workload.is_none() {
                pod.workload = self.pods.get(&pod.uid).and_then(|(p, _)| p.workload.clone());
            }
            self.pods.insert(pod.uid.clone(), (pod, now_ns));
        }
        for c in &snapshot.containers {
            self.containers.insert(c.id.clone(), (c.clone(), now_ns));
        }
        let ttl = self.limits.ttl_ns;
        self.pods.retain(|_, (_, seen)| now_ns.saturating_sub(*seen) < ttl);
        self.containers.retain(|_, (_, seen)| now_ns.saturating_sub(*seen) < ttl);
        self.evicted += trim(&mut self.pods, self.limits.max_pods);
        self.evicted += trim(&mut self.containers, self.limits.max_containers);
    }

    pub fn pod(&self, uid: &str) -> Option<&PodMeta> {
        self.pods.get(uid).map(|(p, _)| p)
    }

    pub fn container(&self, id: &str) -> Option<&ContainerMeta> {
        self.containers.get(id).map(|(c, _)| c)
    }

    pub fn pods(&self) -> usize {
        self.pods.len()
    }

    pub fn containers(&self) -> usize {
        self.containers.len()
    }

    /// Names of a pod and, if given, one of its containers.
    pub fn names(&self, pod_uid: &str, container_id: Option<&str>) -> Names {
        let mut names = Names::default();
        if let Some(pod) = self.pod(pod_uid) {
            names.namespace.clone_from(&pod.namespace);
            names.pod.clone_from(&pod.name);
            if let Some(w) = &pod.workload {
                names.workload.clone_from(&w.name);
                names.workload_kind = <&str>::from(w.kind).to_string();
            }
        }
        if let Some(c) = container_id.and_then(|id| self.container(id)) {
            names.container.clone_from(&c.name);
        }
        names
    }
}

/// Drops the least recently stamped entries beyond `max`; returns how many.
fn trim<V>(map: &mut HashMap<String, (V, u64)>, max: usize) -> u64 {
    if map.len() <= max {
        return 0;
    }
    let excess = map.len() - max;
    let mut by_age: Vec<(u64, String)> = map.iter().map(|(k, (_, seen))| (*seen, k.clone())).collect();
    by_age.sort_unstable();
    for (_, key) in by_age.into_iter().take(excess) {
        map.remove(&key);
    }
    excess as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn pod(i: u32) -> PodMeta {
        PodMeta {
            uid: format!("uid-{i}"),
            namespace: "shop".into(),
            name: format!("web-{i}"),
            sandbox_id: format!("sb-{i}"),
            workload: None,
        }
    }

    fn container(i: u32, pod: u32) -> ContainerMeta {
        ContainerMeta { id: format!("c-{i}"), name: format!("app-{i}"), pod_uid: format!("uid-{pod}"), sandbox: false }
    }

    #[test]
    fn names_come_from_the_listing_and_unknowns_stay_empty() {
        let mut store = MetadataStore::default();
        store.apply(&Snapshot { pods: vec![pod(1)], containers: vec![container(7, 1)] }, 0);
        assert_eq!(
            store.names("uid-1", Some("c-7")),
            Names { namespace: "shop".into(), pod: "web-1".into(), container: "app-7".into(), ..Names::default() }
        );
        assert_eq!(store.names("uid-1", Some("c-8")).container, "");
        assert_eq!(store.names("uid-1", None).pod, "web-1");
        assert_eq!(store.names("uid-2", Some("c-7")).pod, "", "container names do not invent a pod");
        assert_eq!(store.names("uid-2", None), Names::default());
    }

    /// Guards: a container's record, which names its pod but not the
    /// pod's workload, erasing the workload the sandbox's record gave.
    #[test]
    fn a_pods_workload_stays_known_when_a_container_names_the_pod_again() {
        use crate::events::runtime::{Workload, WorkloadKind};
        let mut store = MetadataStore::default();
        let web = Workload { kind: WorkloadKind::Deployment, name: "web".into() };
        let sandbox = PodMeta { workload: Some(web.clone()), ..pod(1) };
        store.apply(&Snapshot { pods: vec![sandbox], containers: vec![] }, 0);
        store.apply(&Snapshot { pods: vec![pod(1)], containers: vec![container(7, 1)] }, SEC);
        let names = store.names("uid-1", Some("c-7"));
        assert_eq!((names.workload.as_str(), names.workload_kind.as_str()), ("web", "Deployment"));
    }

    #[test]
    fn names_outlive_the_listing_by_the_ttl_only() {
        let mut store = MetadataStore::new(MetadataLimits { ttl_ns: 10 * SEC, ..MetadataLimits::default() });
        store.apply(&Snapshot { pods: vec![pod(1), pod(2)], containers: vec![container(1, 1)] }, 0);
        // Pod 1 deleted: still named within the TTL…
        store.apply(&Snapshot { pods: vec![pod(2)], containers: vec![] }, 5 * SEC);
        assert_eq!(store.names("uid-1", Some("c-1")).container, "app-1");
        // …gone after it; pod 2, listed again, stays.
        store.apply(&Snapshot { pods: vec![pod(2)], containers: vec![] }, 11 * SEC);
        assert_eq!(store.names("uid-1", Some("c-1")), Names::default());
        assert_eq!(store.names("uid-2", None).pod, "web-2");
        assert_eq!(store.evicted, 0, "TTL expiry is not an eviction");
    }

    #[test]
    fn bounds_drop_the_least_recently_listed_and_count_it() {
        let mut store =
            MetadataStore::new(MetadataLimits { max_pods: 3, max_containers: 2, ..MetadataLimits::default() });
        store.apply(&Snapshot { pods: vec![pod(1), pod(2)], containers: vec![container(1, 1)] }, 0);
        store.apply(&Snapshot { pods: vec![pod(3), pod(4)], containers: vec![container(2, 3), container(3, 4)] }, SEC);
        assert_eq!((store.pods(), store.containers()), (3, 2));
        assert_eq!(store.evicted, 2);
        assert_eq!(store.names("uid-4", Some("c-3")).container, "app-3");
        assert_eq!(store.names("uid-1", Some("c-1")).container, "", "the oldest went first");
        assert_eq!(store.pod("uid-1").map(|p| p.name.as_str()), None);
        // One of the two pods listed at 0 survived.
        assert_eq!(["uid-1", "uid-2"].iter().filter(|u| store.pod(u).is_some()).count(), 1);
    }
}
