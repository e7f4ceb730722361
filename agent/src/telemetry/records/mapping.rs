//! The record of a finding: what people watching a node read of it. A
//! finding that has a record has one [`Body`]; its log line is rendered
//! from that body (`telemetry::logs`), so the two cannot drift apart.

use super::wire::*;
use crate::{
    events::ExitStatus,
    labels::Label as _,
    model::{Names, PodRef},
    watchdog::{pressure::PressureChange, Finding, MemoryPressure, OomKill},
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
            let body = Body::ContainerExit(ContainerExitRecord {
                pod: pod_fields(e.report.pod.as_ref(), &e.names),
                victim_role: e.report.role.label().to_string(),
                pid: e.pid,
                comm: some(&e.comm),
                reason: e.reason.label().to_string(),
                exit_code,
                signal,
                core_dumped,
            });
            (Stamp::Boot(e.ts_ns), body)
        }
        Finding::SandboxDeath(d) => {
            let body = Body::SandboxDeath(SandboxDeathRecord {
                pod: pod_fields(d.report.pod.as_ref(), &d.names),
                victim_role: d.report.role.label().to_string(),
                pid: d.pid,
                comm: some(&d.comm),
                cause: d.cause.label().to_string(),
            });
            (Stamp::Boot(d.ts_ns), body)
        }
        Finding::LateExit(l) => {
            let body = Body::LateExit(LateExitRecord {
                pod: pod_fields(l.report.pod.as_ref(), &l.names),
                victim_role: l.report.role.label().to_string(),
                pid: l.pid,
                comm: l.comm.as_deref().and_then(some),
                outcome: l.report.outcome.label().to_string(),
                reason: l.reason.label().to_string(),
                source: l.report.source.label().to_string(),
            });
            (Stamp::Boot(l.ts_ns), body)
        }
        Finding::RuntimeCrash { runtime, pid, reason } => {
            let body = RuntimeRecord { runtime: runtime.clone(), pid: *pid, reason: Some(reason.label().to_string()) };
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
            (Stamp::Now, Body::EventsDropped(LossRecord { stage: stage.label().to_string(), count: *count }))
        }
        Finding::MemoryPressure(p) => (Stamp::Boot(p.ts_ns), Body::MemoryPressure(memory_pressure(p))),
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
        | Finding::PressureLevels(_) => return None,
    })
}

fn oom_kill(k: &OomKill) -> OomKillRecord {
    let r = &k.report;
    let trigger = r.trigger.as_ref();
    let e = &k.explained;
    let kib = |kb: u64| kb.saturating_mul(1024);
    let memory = e.memory.as_ref();
    OomKillRecord {
        pod: pod_fields(r.pod.as_ref(), &k.names),
        victim_role: r.role.label().to_string(),
        pid: r.victim.pid,
        comm: some(&r.victim_comm),
        trigger_pid: trigger.map(|t| t.tgid),
        trigger_comm: trigger.and_then(|t| some(&t.comm)),
        trigger_container: k.trigger_container.as_ref().and_then(|(_, n)| some(&n.container)),
        trigger_container_id: k.trigger_container.as_ref().map(|(id, _)| id.clone()),
        rss_bytes: k.victim_rss.map(|m| kib(m.anon_rss_kb + m.file_rss_kb + m.shmem_rss_kb)),
        victim_anon_bytes: k.victim_rss.map(|m| kib(m.anon_rss_kb)),
        victim_file_bytes: k.victim_rss.map(|m| kib(m.file_rss_kb)),
        victim_shmem_bytes: k.victim_rss.map(|m| kib(m.shmem_rss_kb)),
        oom_score_adj: k.victim_rss.map(|_| k.oom_score_adj),
        limit: Some(e.fired.limit.label().to_string()),
        constraint: Some(e.fired.constraint.label().to_string()),
        limit_unknown: e.unknown.map(|u| u.label().to_string()),
        usage_bytes: e.usage_bytes,
        limit_bytes: e.limit_bytes,
        anon_bytes: memory.map(|m| m.anon),
        page_cache_bytes: memory.map(|m| m.page_cache),
        shmem_bytes: memory.map(|m| m.shmem),
        kernel_bytes: memory.map(|m| m.kernel),
        memory_read_after_us: memory.map(|m| m.read_after_ns / 1000),
        cause: Some(e.cause.label().to_string()),
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
        warned_reasons: k.warned.iter().flat_map(|w| &w.reasons).map(|r| r.label().to_string()).collect(),
        outcome: r.outcome.label().to_string(),
    }
}

fn memory_pressure(p: &MemoryPressure) -> MemoryPressureRecord {
    let f = &p.figures;
    let (state, ended) = match p.change {
        PressureChange::Start => ("start", None),
        PressureChange::End(why) => ("end", Some(why.label().to_string())),
    };
    MemoryPressureRecord {
        pod: pod_fields(Some(&p.pod), &p.names),
        reason: p.reason.label().to_string(),
        state: state.to_string(),
        ended,
        lasted_ms: matches!(p.change, PressureChange::End(_)).then(|| p.ts_ns.saturating_sub(p.since_ns) / 1_000_000),
        unreclaimable_bytes: f.unreclaimable_bytes,
        limit_bytes: f.limit_bytes,
        unreclaimable_permille: f.unreclaimable_permille,
        working_set_bytes: f.working_set_bytes,
        seconds_to_limit: f.seconds_to_limit,
        psi_some_permille: f.psi.map(|p| p.some_avg10 / 10),
        psi_full_permille: f.psi.map(|p| p.full_avg10 / 10),
        refault_bytes_per_second: f.refault_bytes_per_second,
        limit_hits: f.limit_hits,
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
            victim_rss: Some(crate::events::kernel::OomRss {
                total_vm_kb: 0,
                anon_rss_kb: 1,
                file_rss_kb: 0,
                shmem_rss_kb: 0,
                pgtables_kb: 0,
            }),
            oom_score_adj: 0,
            trigger_container: None,
            warned: None,
            report,
            names,
            ts_ns: 5,
        }));
        let Some((Stamp::Boot(5), Body::OomKill(r))) = record_of(&kill) else { panic!("{:?}", record_of(&kill)) };
        assert_eq!(
            (r.pod.pod_uid.as_deref(), r.pod.pod.as_deref(), r.pod.container.as_deref(), r.pod.qos_class.as_deref()),
            (Some("u"), Some("web"), None, Some("burstable"))
        );
        assert_eq!(
            (r.victim_role.as_str(), r.pid, r.comm.as_deref(), r.rss_bytes),
            ("container_init", 9, Some("dd"), Some(1024))
        );
        let edge = StormEdge { started: false, events_in_window: 2, window_secs: 60 };
        assert!(matches!(record_of(&Finding::OomStorm(edge)), Some((Stamp::Now, Body::OomStormEnd(_)))));
        let lost = Finding::EventsLost { stage: LossStage::Channel, count: 4 };
        assert!(
            matches!(record_of(&lost), Some((Stamp::Now, Body::EventsDropped(l))) if l.stage == "channel" && l.count == 4)
        );
        assert_eq!(record_of(&Finding::Mismatch(Expired::default())), None, "a counter, not a record");
    }
}
