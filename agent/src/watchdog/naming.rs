//! Findings named before they go out: pressure edges and limit changes
//! with their pods' names, and what waits for the runtime to name it.

use super::*;

impl<H: Host> Watchdog<H> {
    /// The limit changes found so far, with their pods' names.
    pub(super) fn name_limit_changes(&mut self) {
        let registry = &self.dispatcher.registry;
        for change in self.limit_changes.drain(..) {
            let pod = match registry.owner(change.cgroup_id) {
                Some(CgroupOwner::Pod { pod_uid }) => {
                    let qos = registry.sandbox(pod_uid).map(|s| s.qos);
                    PodRef { pod_uid: pod_uid.clone(), qos, container_id: None }
                }
                _ => match pod_of_container(registry, change.cgroup_id) {
                    Some(pod) => pod,
                    None => continue,
                },
            };
            let names = names_in(registry, Some(&pod));
            self.out.push(Finding::LimitChange(Box::new(finding::LimitChanged { pod, names, change })));
        }
    }

    /// The pressure edges found so far, with their pods' names.
    pub(super) fn name_edges(&mut self) {
        let registry = &self.dispatcher.registry;
        for e in self.edges.drain(..) {
            // A container gone is named by its tombstone.
            let Some(pod) = pod_of_container(registry, e.cgroup_id) else { continue };
            let names = names_in(registry, Some(&pod));
            self.out.push(Finding::MemoryPressure(Box::new(MemoryPressure {
                pod,
                names,
                reason: e.reason,
                change: e.change,
                since_ns: e.since_ns,
                ts_ns: e.ts_ns,
                figures: e.figures,
            })));
        }
    }

    /// `what` goes out now, named, unless the runtime is listing and has
    /// not named its container yet: then it waits (and the listing is
    /// asked for it).
    pub(super) fn defer(&mut self, what: Awaiting, now_ns: u64) {
        let registry = &self.dispatcher.registry;
        let names_of = |p: Option<&PodRef>| names_in(registry, p);
        if let Some(id) = self.names.defer(what, names_of, self.host.listing_up(), now_ns, &mut self.out) {
            self.host.want_names(&id);
        }
    }

    /// What waited for names and is named now, or waited long enough.
    pub(super) fn release_named(&mut self, now_ns: u64) {
        let registry = &self.dispatcher.registry;
        self.names.release(now_ns, |p| names_in(registry, p), &mut self.out);
    }

    /// Names of the pod (and container) a report is about.
    pub(super) fn names(&self, pod: Option<&PodRef>) -> Names {
        names_in(&self.dispatcher.registry, pod)
    }

    /// Passes containers that appeared without a name on to the listing.
    pub(super) fn ask_names(&mut self) {
        for id in self.dispatcher.registry.take_unnamed() {
            self.host.want_names(&id);
        }
    }
}
