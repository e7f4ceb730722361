//! OOM events beside OOM victims. One pick of the OOM killer is one event:
//! a single victim, or, with `memory.oom.group` (kubelets set it on every
//! container on cgroup v2 since 1.28), every process of the container,
//! each of which the kernel reports as a victim of its own. Victims of one
//! event come in a burst from the one task that ran out of memory; an event
//! closes when a victim of another trigger or container arrives, or when
//! its burst has been quiet for the gap. Pure: the dispatcher feeds it,
//! the watchdog counts what closes.

use super::explain::Explanation;
use crate::model::{
    cgroup_path::QosClass,
    dispatch::{OomReport, TaskRole},
};

/// Victims of one event are this close together; the kernel kills a
/// group in one pass, microseconds apart (milliseconds under emulation).
pub const GROUP_GAP_NS: u64 = 250_000_000;

/// What one OOM event took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum OomScope {
    /// A whole container (group kill, or its only process).
    Container,
    /// One process of a container that lives on (or its init alone).
    Process,
    /// Not a pod's: a host process, or one whose pod is unknown.
    Host,
}

/// A closed OOM event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomEvent {
    pub scope: OomScope,
    pub qos: Option<QosClass>,
    /// The first victim's report, its role the event's: for a whole
    /// container, `sandbox` or `container_init` (the container died);
    /// otherwise the victim's own.
    pub report: OomReport,
    /// The first victim's explanation: whose limit fired, what filled it.
    pub explained: Explanation,
    pub victims: u32,
    /// How long before the kill its container was first warned of memory
    /// pressure (the longest among its victims'); `None`: it was not.
    pub warned_for_ns: Option<u64>,
}

#[derive(Debug)]
struct Open {
    trigger: u32,
    last_ns: u64,
    first: OomReport,
    explained: Explanation,
    victims: u32,
    /// The container said it is killed as a whole.
    group_mode: bool,
    warned_for_ns: Option<u64>,
}

#[derive(Debug, Default)]
pub struct OomEvents {
    open: Option<Open>,
    closed: Vec<OomEvent>,
}

impl OomEvents {
    /// A victim reported at `ts_ns` (kernel time); `group_mode` is its
    /// container's `memory.oom.group` as known. A victim that joins an open
    /// event of its container is a group kill's: a `container_child` role
    /// becomes `container_group`, whatever the mode was known to be, and it
    /// shares the event's explanation (one pick, one limit; the cgroup was
    /// read for the first victim); any other victim is `explain`ed anew.
    /// Returns the victim's explanation.
    pub fn victim(
        &mut self,
        report: &mut OomReport,
        explain: impl FnOnce() -> Explanation,
        ts_ns: u64,
        group_mode: bool,
    ) -> Explanation {
        let trigger = report.trigger.as_ref().map_or(report.victim.pid, |t| t.tgid);
        let container = report.pod.as_ref().and_then(|p| p.container_id.as_deref());
        let joins = self.open.as_ref().is_some_and(|o| {
            o.trigger == trigger
                && ts_ns.saturating_sub(o.last_ns) <= GROUP_GAP_NS
                && o.first.pod.as_ref().and_then(|p| p.container_id.as_deref()) == container
        });
        if let (true, Some(open)) = (joins, self.open.as_mut()) {
            open.victims += 1;
            open.last_ns = open.last_ns.max(ts_ns);
            if report.role == TaskRole::ContainerChild {
                report.role = TaskRole::ContainerGroup;
            }
            return open.explained.clone();
        }
        self.close();
        let explained = explain();
        let first = report.clone();
        self.open = Some(Open {
            trigger,
            last_ns: ts_ns,
            first,
            explained: explained.clone(),
            victims: 1,
            group_mode,
            warned_for_ns: None,
        });
        explained
    }

    /// The last victim's container had been warned of memory pressure
    /// `for_ns` before its kill: so was the open event's.
    pub fn warned(&mut self, for_ns: u64) {
        if let Some(open) = self.open.as_mut() {
            open.warned_for_ns = Some(open.warned_for_ns.map_or(for_ns, |w| w.max(for_ns)));
        }
    }

    /// Closes the open event if its burst has been quiet for the gap.
    pub fn expire(&mut self, now_ns: u64) {
        if self.open.as_ref().is_some_and(|o| now_ns.saturating_sub(o.last_ns) > GROUP_GAP_NS) {
            self.close();
        }
    }

    /// Events closed since the last call.
    pub fn take_closed(&mut self) -> Vec<OomEvent> {
        std::mem::take(&mut self.closed)
    }

    fn close(&mut self) {
        let Some(open) = self.open.take() else { return };
        let mut report = open.first;
        let scope = match &report.pod {
            None => OomScope::Host,
            Some(p) if p.container_id.is_none() => OomScope::Process,
            Some(_) if open.victims > 1 || open.group_mode => OomScope::Container,
            Some(_) => OomScope::Process,
        };
        if scope == OomScope::Container && report.role != TaskRole::Sandbox {
            report.role = TaskRole::ContainerInit;
        }
        let qos = report.pod.as_ref().and_then(|p| p.qos);
        self.closed.push(OomEvent {
            scope,
            qos,
            report,
            explained: open.explained,
            victims: open.victims,
            warned_for_ns: open.warned_for_ns,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{registry::TaskKey, Outcome, PodRef, Trigger};

    const MS: u64 = 1_000_000;

    fn unknown() -> Explanation {
        Explanation::UNKNOWN
    }

    fn victim(pid: u32, trigger: u32, container: Option<&str>, role: TaskRole) -> OomReport {
        OomReport {
            outcome: Outcome::Handled,
            role,
            pod: container.map(|c| PodRef {
                pod_uid: "p".into(),
                qos: Some(QosClass::Burstable),
                container_id: Some(c.into()),
            }),
            victim: TaskKey::new(pid, 0),
            victim_comm: "x".into(),
            trigger: (trigger != pid).then(|| Trigger { pid: trigger, tgid: trigger, comm: "dd".into(), cgroup_id: 1 }),
            delay_ns: 0,
        }
    }

    #[test]
    fn a_group_kill_is_one_event_of_a_whole_container() {
        let mut events = OomEvents::default();
        // The chosen victim (dd, the trigger itself), then the others.
        let mut roles = Vec::new();
        for (pid, role) in [
            (13, TaskRole::ContainerChild),
            (10, TaskRole::ContainerInit),
            (11, TaskRole::ContainerChild),
            (12, TaskRole::ContainerChild),
        ] {
            let mut r = victim(pid, 13, Some("c"), role);
            events.victim(&mut r, unknown, 100 * MS + u64::from(pid), false);
            roles.push(r.role);
        }
        // Mode unknown: the first victim keeps its role, the rest are the group's.
        assert_eq!(
            roles,
            [TaskRole::ContainerChild, TaskRole::ContainerInit, TaskRole::ContainerGroup, TaskRole::ContainerGroup]
        );
        events.expire(200 * MS);
        assert!(events.take_closed().is_empty(), "still within the gap");
        events.expire(400 * MS);
        let closed = events.take_closed();
        assert_eq!(closed.len(), 1);
        assert_eq!(
            (closed[0].scope, closed[0].victims, closed[0].report.role),
            (OomScope::Container, 4, TaskRole::ContainerInit)
        );
    }

    #[test]
    fn single_kills_of_one_trigger_apart_in_time_or_place_are_separate_events() {
        let mut events = OomEvents::default();
        let mut a = victim(20, 30, Some("c"), TaskRole::ContainerChild);
        events.victim(&mut a, unknown, 0, false);
        // Same trigger, another container: another event.
        let mut b = victim(21, 30, Some("d"), TaskRole::ContainerChild);
        events.victim(&mut b, unknown, MS, false);
        // Same container and trigger, but after the gap: another event.
        let mut c = victim(22, 30, Some("d"), TaskRole::ContainerChild);
        events.victim(&mut c, unknown, 2 * GROUP_GAP_NS, false);
        // A host victim.
        let mut h = victim(23, 23, None, TaskRole::Host);
        events.victim(&mut h, unknown, 3 * GROUP_GAP_NS, false);
        events.expire(10 * GROUP_GAP_NS);
        let scopes: Vec<(OomScope, TaskRole)> = events.take_closed().iter().map(|e| (e.scope, e.report.role)).collect();
        assert_eq!(
            scopes,
            [
                (OomScope::Process, TaskRole::ContainerChild),
                (OomScope::Process, TaskRole::ContainerChild),
                (OomScope::Process, TaskRole::ContainerChild),
                (OomScope::Host, TaskRole::Host)
            ]
        );
        assert!([a.role, b.role, c.role].iter().all(|r| *r == TaskRole::ContainerChild));
    }

    #[test]
    fn a_container_in_group_mode_dies_whole_even_with_one_process() {
        let mut events = OomEvents::default();
        let mut r = victim(40, 40, Some("c"), TaskRole::ContainerGroup);
        events.victim(&mut r, unknown, 0, true);
        let mut sandbox = victim(50, 50, Some("s"), TaskRole::Sandbox);
        events.victim(&mut sandbox, unknown, MS, true);
        events.expire(GROUP_GAP_NS * 4);
        let closed = events.take_closed();
        assert_eq!((closed[0].scope, closed[0].report.role), (OomScope::Container, TaskRole::ContainerInit));
        assert_eq!((closed[1].scope, closed[1].report.role), (OomScope::Container, TaskRole::Sandbox));
    }

    #[test]
    fn a_group_kills_victims_share_the_first_ones_verdict() {
        use crate::watchdog::{Fired, OomConstraint, OomLimit};
        let mut events = OomEvents::default();
        let pod = Explanation {
            fired: Fired { limit: OomLimit::Pod, constraint: OomConstraint::Memcg },
            ..Explanation::UNKNOWN
        };
        let mut first = victim(60, 60, Some("c"), TaskRole::ContainerInit);
        assert_eq!(events.victim(&mut first, || pod.clone(), 0, true), pod);
        // The cgroup is read once, for the first victim.
        let mut second = victim(61, 60, Some("c"), TaskRole::ContainerChild);
        let later = events.victim(&mut second, || panic!("explained again"), MS, true);
        assert_eq!(later, pod);
        events.expire(GROUP_GAP_NS * 4);
        assert_eq!(events.take_closed()[0].explained, pod);
    }
}
