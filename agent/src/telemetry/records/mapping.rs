//! The record of a finding: what people watching a node read of it. A
//! finding that has a record has one [`Body`]; its log line is rendered
//! from that body (`telemetry::logs`), so the two cannot drift apart.

use super::wire::*;
use crate::{
    events::ExitStatus,
    model::{Names, PodRef},
    watchdog::{pressure::PressureChange, Finding, LimitChanged, MemoryPressure, OomKill},
};

/// When a record happened: at a kernel timestamp, or now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// CLOCK_BOOTTIME ns.
    Boot(u64),
    Now,
}

/// The record of a finding, for the findings people watch a node for.
pub fn record_of(finding: &Finding) -> Option<(Stamp, Body)> {
    Some(match finding {
        Finding::OomKill(k) => (Stamp::Boot(k.ts_ns), Body::OomKill(Box::new(oom_kill(k)))),
        Finding::ContainerExit(e) => {
            let (exit_code, signal, core_dumped) = match e.status {
                ExitStatus::Code(c) => (Some(c), None, false),
                ExitStatus::Signal { signo, core_dumped } => (None, Some(signo), core_dumped),
            };
            let ended = e.ended.as_ref();
            let sender_pod = ended.and_then(|s| s.pod.as_ref());
            let body = Body::ContainerExit(ContainerExitRecord {
                pod: pod_fields(e.report.pod.as_ref(), &e.names),
                victim_role: e.report.role,
                pid: e.pid,
                comm: some(&e.comm),
                reason: e.reason,
                exit_code,
                signal,
                core_dumped,
                sender: ended.map(|s| s.sender),
                sender_pid: ended.and_then(|s| s.pid),
                sender_comm: ended.and_then(|s| s.comm.as_deref()).and_then(some),
                sender_pod_uid: sender_pod.map(|(p, _)| p.pod_uid.clone()),
                sender_namespace: sender_pod.and_then(|(_, n)| some(&n.namespace)),
                sender_pod: sender_pod.and_then(|(_, n)| some(&n.pod)),
                sender_container: sender_pod.and_then(|(_, n)| some(&n.container)),
                sender_container_id: sender_pod.and_then(|(p, _)| p.container_id.clone()),
                sender_unit: ended.and_then(|s| s.unit.clone()),
                stop_signal: ended.and_then(|s| s.stop).map(|s| s.signal),
                grace_ms: ended.and_then(|s| s.stop).map(|s| s.grace_ns / 1_000_000),
            });
            (Stamp::Boot(e.ts_ns), body)
        }
        Finding::RuntimeVerdict(v) if v.disagreement.is_some() => {
            let k = &v.kernel;
            let body = Body::RuntimeDisagreement(RuntimeDisagreementRecord {
                pod: pod_fields(Some(&k.pod), &v.names),
                pid: k.pid,
                direction: v.disagreement?,
                reason: k.reason,
                kernel_exit_code: k.exit_code(),
                sender: k.sender,
                task_exit_status: v.task_exit_status,
                runtime_reason: v.runtime_reason.as_deref().and_then(some),
                runtime_exit_code: v.runtime_exit_code,
            });
            (Stamp::Now, body)
        }
        Finding::SandboxDeath(d) => {
            let body = Body::SandboxDeath(SandboxDeathRecord {
                pod: pod_fields(d.report.pod.as_ref(), &d.names),
                victim_role: d.report.role,
                pid: d.pid,
                comm: some(&d.comm),
                cause: d.cause,
            });
            (Stamp::Boot(d.ts_ns), body)
        }
        Finding::LateExit(l) => {
            let body = Body::LateExit(LateExitRecord {
                pod: pod_fields(l.report.pod.as_ref(), &l.names),
                victim_role: l.report.role,
                pid: l.pid,
                comm: l.comm.as_deref().and_then(some),
                outcome: l.report.outcome.into(),
                reason: l.reason,
                source: l.report.source,
            });
            (Stamp::Boot(l.ts_ns), body)
        }
        Finding::RuntimeCrash { runtime, pid, reason } => {
            let body = RuntimeRecord { runtime: runtime.clone(), pid: *pid, reason: Some(*reason) };
            (Stamp::Now, Body::RuntimeCrash(body))
        }
        Finding::RuntimeRestart { runtime, pid } => {
            (Stamp::Now, Body::RuntimeRestart(RuntimeRecord { runtime: runtime.clone(), pid: *pid, reason: None }))
        }
        Finding::OomStorm(edge) => {
            let storm = StormRecord { count: edge.events_in_window, window_seconds: edge.window_secs };
            (Stamp::Now, if edge.started { Body::OomStormStart(storm) } else { Body::OomStormEnd(storm) })
        }
        Finding::EventsLost { stage, count } => {
            (Stamp::Now, Body::EventsDropped(LossRecord { stage: *stage, count: *count }))
        }
        Finding::MemoryPressure(p) => (Stamp::Boot(p.ts_ns), Body::MemoryPressure(memory_pressure(p))),
        Finding::LimitChange(l) => (Stamp::Boot(l.change.seen_ns), Body::LimitChange(limit_change(l))),
        Finding::TaskExit(_)
        | Finding::HostExits { .. }
        | Finding::OomEvent { .. }
        | Finding::PodOom(_)
        | Finding::PodSeriesExpired { .. }
        | Finding::OomWindow { .. }
        | Finding::Model(_)
        | Finding::CgroupResync { .. }
        | Finding::TrackingFull { .. }
        | Finding::RuntimeStopped { .. }
        | Finding::RuntimeUp { .. }
        | Finding::ExitLag { .. }
        | Finding::OomMatched { .. }
        | Finding::Mismatch(_)
        | Finding::PressureLevels(_)
        | Finding::LimitsWatched { .. }
        | Finding::RuntimeVerdict(_)
        | Finding::SignalsForgotten { .. } => return None,
    })
}

fn oom_kill(k: &OomKill) -> OomKillRecord {
    let r = &k.report;
    let trigger = r.trigger.as_ref();
    let e = &k.explained;
    let memory = e.memory.as_ref();
    OomKillRecord {
        pod: pod_fields(r.pod.as_ref(), &k.names),
        victim_role: r.role,
        pid: r.victim.pid,
        comm: some(&r.victim_comm),
        trigger_pid: trigger.map(|t| t.tgid),
        trigger_comm: trigger.and_then(|t| some(&t.comm)),
        trigger_container: k.trigger_container.as_ref().and_then(|(_, n)| some(&n.container)),
        trigger_container_id: k.trigger_container.as_ref().map(|(id, _)| id.clone()),
        rss_bytes: k.victim_rss.map(|m| m.total_bytes()),
        victim_anon_bytes: k.victim_rss.map(|m| m.anon_bytes),
        victim_file_bytes: k.victim_rss.map(|m| m.file_bytes),
        victim_shmem_bytes: k.victim_rss.map(|m| m.shmem_bytes),
        oom_score_adj: k.victim_rss.map(|_| k.oom_score_adj),
        limit: Some(e.fired.limit),
        constraint: Some(e.fired.constraint),
        decided_by: Some(e.decided_by),
        limit_unknown: e.unknown,
        usage_bytes: e.usage_bytes,
        limit_bytes: e.limit_bytes,
        anon_bytes: memory.map(|m| m.anon),
        page_cache_bytes: memory.map(|m| m.page_cache),
        shmem_bytes: memory.map(|m| m.shmem),
        kernel_bytes: memory.map(|m| m.kernel),
        swap_bytes: memory.and_then(|m| nonzero(m.swap)),
        zswap_bytes: memory.and_then(|m| nonzero(m.zswap)),
        memory_read_after_us: memory.map(|m| m.read_after_ns / 1000),
        cause: Some(e.cause),
        pod_containers: e
            .containers
            .iter()
            .map(|c| ContainerUsage {
                container: some(&c.container),
                container_id: c.container_id.clone(),
                usage_bytes: c.usage_bytes,
            })
            .collect(),
        warned_ms: k.warned.as_ref().map(|w| w.for_ns / 1_000_000),
        warned_reasons: k.warned.iter().flat_map(|w| w.reasons.iter().copied()).collect(),
        lowered_limit: k.lowered.map(|l| l.kind),
        lowered_from_bytes: k.lowered.and_then(|l| l.from),
        lowered_to_bytes: k.lowered.and_then(|l| l.to),
        lowered_ms: k.lowered.map(|l| l.ago_ns / 1_000_000),
        outcome: r.outcome.into(),
    }
}

fn limit_change(l: &LimitChanged) -> LimitChangeRecord {
    let c = &l.change;
    LimitChangeRecord {
        pod: pod_fields(Some(&l.pod), &l.names),
        limit: c.kind,
        direction: c.direction,
        from_bytes: c.from,
        to_bytes: c.to,
        seen_by: c.seen_by,
        scope: c.scope,
    }
}

fn memory_pressure(p: &MemoryPressure) -> MemoryPressureRecord {
    let f = &p.figures;
    let (state, ended) = match p.change {
        PressureChange::Start => (PressureState::Start, None),
        PressureChange::End(why) => (PressureState::End, Some(why)),
    };
    MemoryPressureRecord {
        pod: pod_fields(Some(&p.pod), &p.names),
        reason: p.reason,
        state,
        ended,
        lasted_ms: matches!(p.change, PressureChange::End(_)).then(|| p.ts_ns.saturating_sub(p.since_ns) / 1_000_000),
        unreclaimable_bytes: f.unreclaimable_bytes,
        limit_bytes: f.limit_bytes,
        unreclaimable_permille: f.unreclaimable_permille,
        working_set_bytes: f.working_set_bytes,
        seconds_to_limit: f.seconds_to_limit,
        psi_some_permille: f.psi.map(|p| p.some_avg10 / 10),
        psi_full_permille: f.psi.map(|p| p.full_avg10 / 10),
        refault_bytes_per_second: nonzero(f.refault_bytes_per_second),
        limit_hits: nonzero(f.limit_hits),
        high_bytes: f.high_bytes,
        high_events: nonzero(f.high_hits),
    }
}

/// The pod a finding is about, as far as the runtime named it.
fn pod_fields(pod: Option<&PodRef>, names: &Names) -> PodFields {
    pod.map(|p| crate::telemetry::pod_labels::PodLabels::of(p, names).into()).unwrap_or_default()
}

/// `None` for an empty string: unknown fields are left out of records.
fn some(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// `None` for none: counts of nothing are left out of records.
fn nonzero(n: u64) -> Option<u64> {
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::{OomReport, Outcome, QosClass, TaskKey, TaskRole},
        watchdog::{correlation::Expired, storm::StormEdge, LossStage, OomKill},
    };

    #[test]
    fn findings_people_watch_for_become_records_stamped_when_they_happened() {
        let report = OomReport {
            outcome: Outcome::Handled,
            role: TaskRole::ContainerInit,
            pod: Some(PodRef { pod_uid: "u".into(), qos: Some(QosClass::Burstable), container_id: Some("c".into()) }),
            victim: TaskKey::new(9, 0),
            victim_comm: "dd".into(),
            trigger: None,
            delay_ns: 0,
        };
        let names = Names { namespace: "shop".into(), pod: "web".into(), ..Names::default() };
        let kill = Finding::OomKill(Box::new(OomKill {
            explained: crate::watchdog::explain::Explanation::UNKNOWN,
            victim_rss: Some(crate::watchdog::finding::VictimRss { anon_bytes: 1024, file_bytes: 0, shmem_bytes: 0 }),
            oom_score_adj: 0,
            trigger_container: None,
            warned: None,
            lowered: None,
            report,
            names,
            ts_ns: 5,
        }));
        let Some((Stamp::Boot(5), Body::OomKill(r))) = record_of(&kill) else { panic!("{:?}", record_of(&kill)) };
        assert_eq!(
            (r.pod.pod_uid.as_deref(), r.pod.pod.as_deref(), r.pod.container.as_deref(), r.pod.qos_class),
            (Some("u"), Some("web"), None, Some(QosClass::Burstable))
        );
        assert_eq!(
            (r.victim_role, r.pid, r.comm.as_deref(), r.rss_bytes),
            (TaskRole::ContainerInit, 9, Some("dd"), Some(1024))
        );
        let edge = StormEdge { started: false, events_in_window: 2, window_secs: 60 };
        assert!(matches!(record_of(&Finding::OomStorm(edge)), Some((Stamp::Now, Body::OomStormEnd(_)))));
        let lost = Finding::EventsLost { stage: LossStage::Channel, count: 4 };
        assert!(
            matches!(record_of(&lost), Some((Stamp::Now, Body::EventsDropped(l))) if l.stage == LossStage::Channel && l.count == 4)
        );
        assert_eq!(record_of(&Finding::Mismatch(Expired::default())), None, "a counter, not a record");
    }
}
