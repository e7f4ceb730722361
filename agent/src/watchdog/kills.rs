//! An OOM kill's finding put together: its explanation (shared by the
//! victims of one pick), the runtime's side, what it was warned of, a
//! limit lowered before it; and the OOM killer's picks closed into events.

use super::*;

impl<H: Host> Watchdog<H> {
    pub(super) fn oom_kill(&mut self, mut r: OomReport, o: &KernelOomKill, now: u64) {
        let registry = &self.dispatcher.registry;
        let container = o.victim.and_then(|v| registry.container_of(v.cgroup_id));
        let group_mode = container.is_some_and(|c| c.oom_group == Some(true));
        let host = &self.host;
        // Every kill's counts are seen, a group kill's later victims too
        // (their pick's explanation is the first one's).
        let rose = self.oom_counts.observe(&o.levels, |id| registry.owner(id).is_some());
        let explained =
            self.oom_events.victim(&mut r, || explain::explain(host, registry, o, &rose, now), o.ts_ns, group_mode);
        let trigger_container = r.trigger.as_ref().and_then(|t| {
            let owner = registry.owner(t.cgroup_id)?;
            let crate::model::registry::CgroupOwner::Container { pod_uid, container_id } = owner else { return None };
            let victims = r.pod.as_ref().and_then(|p| p.container_id.as_deref());
            (victims != Some(container_id.as_str()))
                .then(|| (container_id.clone(), registry.names(pod_uid, Some(container_id))))
        });
        if let (Some(side), Some(container)) =
            (self.runtime.as_mut(), r.pod.as_ref().and_then(|p| p.container_id.as_deref()))
        {
            side.kernel_oom(&self.host, container, o.ts_ns, &mut self.out);
        }
        let names = self.names(r.pod.as_ref());
        // What the kill's container was warned of: the kill ends it.
        let warned: Option<pressure::Warned> = match (self.pressure.as_mut(), container.map(|c| c.cgroup_id)) {
            (Some(p), Some(id)) => p.killed(id, o.ts_ns, &mut self.edges),
            _ => None,
        };
        if let Some(w) = &warned {
            self.oom_events.warned(w.for_ns);
        }
        let lowered = self.lowered_before_kill(o, &explained);
        self.out.push(Finding::OomKill(Box::new(OomKill {
            report: r,
            explained,
            names,
            victim_rss: o.rss.map(Into::into),
            oom_score_adj: o.oom_score_adj,
            trigger_container,
            warned,
            lowered,
            ts_ns: o.ts_ns,
        })));
        self.name_edges();
        self.name_limit_changes();
    }

    /// Whether the limit that fired was lowered shortly before the kill.
    /// The limit the kernel counted at the kill is its own word: where it
    /// is not the one last read, the limit moved since (a kill run inside
    /// the write that lowered it comes before the write's notice).
    pub(super) fn lowered_before_kill(
        &mut self,
        o: &KernelOomKill,
        explained: &explain::Explanation,
    ) -> Option<limits::Lowered> {
        let registry = &self.dispatcher.registry;
        let victim = o.victim.map(|v| v.cgroup_id);
        let fired = match explained.fired.limit {
            OomLimit::Container => victim.and_then(|id| registry.container_of(id)).map(|c| c.cgroup_id),
            OomLimit::Pod => victim.and_then(|id| match registry.owner(id)? {
                CgroupOwner::Container { pod_uid, .. } => registry.sandbox(pod_uid)?.cgroup_id,
                CgroupOwner::Pod { .. } => None,
            }),
            _ => None,
        }?;
        if let Some(level) = o.levels.iter().find(|l| l.cgroup_id == fired) {
            self.limits.observed(
                fired,
                limits::LimitKind::MemoryMax,
                level.limit_bytes,
                SeenBy::OomKill,
                o.ts_ns,
                &mut self.limit_changes,
            );
        }
        self.limits.lowered_before(fired, o.ts_ns)
    }

    /// Counts the OOM events whose burst of victims is over by `seen_ns`
    /// (kernel time the agent has seen events up to); their per-pod series
    /// wait for names.
    pub(super) fn close_oom_events(&mut self, seen_ns: u64, now_ns: u64) {
        self.oom_events.expire(seen_ns);
        for event in self.oom_events.take_closed() {
            self.out.push(Finding::OomEvent {
                scope: event.scope,
                qos: event.qos,
                victims: event.victims,
                fired: event.explained.fired,
                cause: event.explained.cause,
                unknown: event.explained.unknown,
            });
            let key = storm_key(&self.dispatcher.registry, event.report.pod.as_ref());
            let state = self.storm.record(now_ns, key);
            self.report_storm(state);
            if event.report.pod.is_some() {
                self.defer(
                    Awaiting::PodOom(PodOom {
                        report: event.report,
                        fired: event.explained.fired,
                        cause: event.explained.cause,
                        names: Names::default(),
                        warned_for_ns: event.warned_for_ns,
                    }),
                    now_ns,
                );
            }
        }
    }
}

/// Whose an OOM event is for the storm: its pod's namespace, or the pod
/// where the runtime has not named it; the host's (empty) otherwise.
fn storm_key(registry: &crate::model::PodRegistry, pod: Option<&crate::model::PodRef>) -> super::storm::StormKey {
    let Some(pod) = pod else { return super::storm::StormKey::default() };
    let namespace = registry.names(&pod.pod_uid, None).namespace;
    let pod_uid = if namespace.is_empty() { pod.pod_uid.clone() } else { String::new() };
    super::storm::StormKey { namespace, pod_uid }
}
