//! The golden lines: one finding of each recorded kind (and the findings
//! logged without a record), its record on the wire and its log line in
//! JSON and in text, byte for byte as `golden.txt` holds them. Guards: a
//! change to how records or log lines read, made while their code moves.

#![cfg(test)]

use std::{
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use super::{
    logs::{self, LogFormat},
    records::{record_of, wire::rfc3339, Body, Record},
};
use crate::{
    events::{kernel::OomRss, ExitStatus},
    model::{
        DeathCause, ExitReason, ExitReport, LateReason, Names, OomReport, Outcome, PodRef, QosClass, Source, TaskKey,
        TaskRole, Trigger,
    },
    watchdog::{
        crashes::CrashReason,
        explain::{ContainerUse, DecidedBy, Explanation, MemorySplit, OomCause},
        limits::{Direction as LimitDirection, LimitChange, LimitKind, LimitScope, Lowered, SeenBy},
        oom_limit::{OomConstraint, OomLimit, UnknownLimit},
        pressure::{Figures, PressureChange, PressureEnd, PressureReason, Psi, Warned},
        senders::{Sender, SignalEnd, Stop},
        storm::StormEdge,
        verdicts::{Disagreement, KernelEnd, Verdict, VerdictResult},
        ContainerExit, Finding, Fired, LateExit, LimitChanged, LossStage, MemoryPressure, OomKill, SandboxDeath,
    },
};

const GOLDEN: &str = include_str!("golden.txt");

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `logs::log` writes for `finding` (and its record), without the time.
fn logged(format: LogFormat, finding: &Finding, record: Option<&Body>) -> String {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let fmt = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).without_time();
    match format {
        LogFormat::Text => tracing::subscriber::with_default(fmt.finish(), || logs::log(finding, record)),
        LogFormat::Json => {
            tracing::subscriber::with_default(fmt.json().flatten_event(true).finish(), || logs::log(finding, record))
        }
    }
    let bytes = buffer.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    // Bytes that are not UTF-8 show as replacement characters, which no
    // golden line holds.
    String::from_utf8_lossy(&bytes).into_owned()
}

fn pod() -> PodRef {
    PodRef {
        pod_uid: "0c9e8d7f-6a5b-4c3d-9e2f-1a0b9c8d7e6f".into(),
        qos: Some(QosClass::Burstable),
        container_id: Some("ab".repeat(32)),
    }
}

fn names() -> Names {
    Names {
        namespace: "shop".into(),
        pod: "web-7d4b9c8f6-x2k9p".into(),
        container: "app".into(),
        workload: "web".into(),
        workload_kind: "Deployment".into(),
    }
}

fn exit_report(outcome: Outcome, role: TaskRole, source: Source) -> ExitReport {
    ExitReport { source, outcome, role, pod: Some(pod()), sandbox_death: None, container_exit: None, delay_ns: 1_000 }
}

/// Every field of a kill known, and a name that would drive a terminal.
fn oom_kill_full() -> Finding {
    Finding::OomKill(Box::new(OomKill {
        report: OomReport {
            outcome: Outcome::Handled,
            role: TaskRole::ContainerChild,
            pod: Some(pod()),
            victim: TaskKey::new(4711, 9),
            victim_comm: "java\u{1b}[2J".into(),
            trigger: Some(Trigger { pid: 4720, tgid: 4712, comm: "dd".into(), cgroup_id: 77 }),
            delay_ns: 2_000,
        },
        explained: Explanation {
            fired: Fired { limit: OomLimit::Pod, constraint: OomConstraint::Memcg },
            decided_by: DecidedBy::OomControl,
            unknown: None,
            usage_bytes: Some(268_435_456),
            limit_bytes: Some(268_435_456),
            memory: Some(MemorySplit {
                anon: 143_654_912,
                page_cache: 2_097_152,
                shmem: 119_537_664,
                kernel: 3_145_728,
                swap: 16_777_216,
                zswap: 4_194_304,
                read_after_ns: 1_800_000,
            }),
            cause: OomCause::Anon,
            containers: vec![
                ContainerUse { container_id: "ab".repeat(32), container: "app".into(), usage_bytes: 146_800_640 },
                ContainerUse { container_id: "cd".repeat(32), container: String::new(), usage_bytes: 121_634_816 },
            ],
        },
        names: names(),
        victim_rss: Some(
            OomRss {
                total_vm_kb: 300_000,
                anon_rss_kb: 138_240,
                file_rss_kb: 1_024,
                shmem_rss_kb: 0,
                pgtables_kb: 400,
            }
            .into(),
        ),
        oom_score_adj: 968,
        trigger_container: Some(("cd".repeat(32), Names { container: "cache".into(), ..names() })),
        warned: Some(Warned {
            for_ns: 12_345_000_000,
            reasons: vec![PressureReason::NearLimit, PressureReason::Growing],
        }),
        lowered: Some(Lowered {
            kind: LimitKind::MemoryMax,
            from: Some(536_870_912),
            to: Some(268_435_456),
            ago_ns: 41_500_000_000,
        }),
        ts_ns: 5_000_000_000,
    }))
}

/// Nothing known but the victim: no pod, no limit, no memory read.
fn oom_kill_bare() -> Finding {
    Finding::OomKill(Box::new(OomKill {
        report: OomReport {
            outcome: Outcome::Unknown,
            role: TaskRole::Unknown,
            pod: None,
            victim: TaskKey::new(99, 1),
            victim_comm: String::new(),
            trigger: None,
            delay_ns: 0,
        },
        explained: Explanation { unknown: Some(UnknownLimit::Unplaced), ..Explanation::UNKNOWN },
        names: Names::default(),
        victim_rss: None,
        oom_score_adj: 0,
        trigger_container: None,
        warned: None,
        lowered: None,
        ts_ns: 6_000_000_000,
    }))
}

fn pressure(change: PressureChange) -> Finding {
    Finding::MemoryPressure(Box::new(MemoryPressure {
        pod: pod(),
        names: names(),
        reason: PressureReason::Thrashing,
        change,
        since_ns: 1_000_000_000,
        ts_ns: 5_200_000_000,
        figures: Figures {
            unreclaimable_bytes: 250_000_000,
            working_set_bytes: 260_000_000,
            limit_bytes: Some(268_435_456),
            unreclaimable_permille: Some(931),
            seconds_to_limit: Some(42),
            psi: Some(Psi { some_avg10: 2_512, full_avg10: 804 }),
            refault_bytes_per_second: 1_048_576,
            limit_hits: 12,
            high_bytes: None,
            high_hits: 0,
        },
    }))
}

fn limit_change() -> Finding {
    Finding::LimitChange(Box::new(LimitChanged {
        pod: pod(),
        names: names(),
        change: LimitChange {
            cgroup_id: 77,
            scope: LimitScope::Container,
            kind: LimitKind::MemoryMax,
            from: Some(536_870_912),
            to: Some(268_435_456),
            direction: LimitDirection::Lowered,
            seen_ns: 4_950_000_000,
            seen_by: SeenBy::KernelNotice,
        },
    }))
}

/// The findings, each under a name for its block in `golden.txt`.
fn findings() -> Vec<(&'static str, Finding)> {
    vec![
        ("oom_kill, every field", oom_kill_full()),
        ("oom_kill, nothing known", oom_kill_bare()),
        (
            "sandbox_death",
            Finding::SandboxDeath(SandboxDeath {
                report: exit_report(Outcome::Handled, TaskRole::Sandbox, Source::Kernel),
                cause: DeathCause::Oom,
                names: names(),
                pid: 4300,
                comm: "pause".into(),
                ts_ns: 5_100_000_000,
            }),
        ),
        (
            "container_exit, a signal and its core",
            Finding::ContainerExit(ContainerExit {
                report: exit_report(Outcome::Handled, TaskRole::ContainerInit, Source::Kernel),
                reason: ExitReason::Sigsegv,
                status: ExitStatus::Signal { signo: 11, core_dumped: true },
                names: names(),
                pid: 4890,
                comm: "java".into(),
                ts_ns: 5_300_000_000,
                ended: Some(SignalEnd {
                    sender: Sender::Kernel,
                    signal: 11,
                    pid: None,
                    comm: None,
                    pod: None,
                    unit: None,
                    stop: None,
                }),
            }),
        ),
        (
            "container_exit, a code",
            Finding::ContainerExit(ContainerExit {
                report: exit_report(Outcome::Handled, TaskRole::ContainerInit, Source::Kernel),
                reason: ExitReason::Error,
                status: ExitStatus::Code(3),
                names: Names { workload: String::new(), workload_kind: String::new(), ..names() },
                pid: 4891,
                comm: "sh".into(),
                ts_ns: 5_400_000_000,
                ended: None,
            }),
        ),
        (
            "container_exit, a stop past its grace",
            Finding::ContainerExit(ContainerExit {
                report: exit_report(Outcome::Handled, TaskRole::ContainerInit, Source::Kernel),
                reason: ExitReason::Killed,
                status: ExitStatus::Signal { signo: 9, core_dumped: false },
                names: names(),
                pid: 4893,
                comm: "sleep".into(),
                ts_ns: 5_450_000_000,
                ended: Some(SignalEnd {
                    sender: Sender::Runtime,
                    signal: 9,
                    pid: Some(5120),
                    comm: Some("runc".into()),
                    pod: None,
                    unit: None,
                    stop: Some(Stop { signal: 15, grace_ns: 2_004_000_000 }),
                }),
            }),
        ),
        (
            "container_exit, killed by another pod",
            Finding::ContainerExit(ContainerExit {
                report: exit_report(Outcome::Handled, TaskRole::ContainerInit, Source::Kernel),
                reason: ExitReason::Sigterm,
                status: ExitStatus::Signal { signo: 15, core_dumped: false },
                names: names(),
                pid: 4894,
                comm: "app".into(),
                ts_ns: 5_460_000_000,
                ended: Some(SignalEnd {
                    sender: Sender::OtherPod,
                    signal: 15,
                    pid: Some(6001),
                    comm: Some("kill\u{1b}[2J".into()),
                    pod: Some((
                        PodRef {
                            pod_uid: "1d2e3f40-5a6b-4c7d-8e9f-a0b1c2d3e4f5".into(),
                            qos: Some(QosClass::BestEffort),
                            container_id: Some("ef".repeat(32)),
                        },
                        Names {
                            namespace: "ops".into(),
                            pod: "janitor".into(),
                            container: "sweep".into(),
                            workload: String::new(),
                            workload_kind: String::new(),
                        },
                    )),
                    unit: None,
                    stop: None,
                }),
            }),
        ),
        (
            "container_exit, killed from a host service",
            Finding::ContainerExit(ContainerExit {
                report: exit_report(Outcome::Handled, TaskRole::ContainerInit, Source::Kernel),
                reason: ExitReason::Killed,
                status: ExitStatus::Signal { signo: 9, core_dumped: false },
                names: names(),
                pid: 4895,
                comm: "app".into(),
                ts_ns: 5_470_000_000,
                ended: Some(SignalEnd {
                    sender: Sender::Host,
                    signal: 9,
                    pid: Some(700),
                    comm: Some("systemd-oomd".into()),
                    pod: None,
                    unit: Some("systemd-oomd.service".into()),
                    stop: None,
                }),
            }),
        ),
        (
            "runtime_disagreement",
            Finding::RuntimeVerdict(Box::new(Verdict {
                kernel: KernelEnd {
                    pod: PodRef {
                        pod_uid: "0c9e8d7f-6a5b-4c3d-9e2f-1a0b9c8d7e6f".into(),
                        qos: Some(QosClass::Burstable),
                        container_id: Some("ab".repeat(32)),
                    },
                    pid: 4893,
                    status: ExitStatus::Signal { signo: 9, core_dumped: false },
                    reason: ExitReason::Killed,
                    sender: Some(Sender::Runtime),
                    ts_ns: 5_450_000_000,
                },
                names: names(),
                task_exit_status: Some(137),
                runtime_reason: Some("OOMKilled".into()),
                runtime_exit_code: Some(137),
                result: VerdictResult::Disagreed,
                disagreement: Some(Disagreement::RuntimeSaysOom),
            })),
        ),
        (
            "late_exit",
            Finding::LateExit(LateExit {
                report: exit_report(
                    Outcome::Late(LateReason::ContainerMissing),
                    TaskRole::ContainerInit,
                    Source::Runtime,
                ),
                reason: LateReason::ContainerMissing,
                names: names(),
                pid: Some(4892),
                comm: Some("app".into()),
                ts_ns: 5_500_000_000,
            }),
        ),
        ("runtime_crash", Finding::RuntimeCrash { runtime: "containerd".into(), pid: 812, reason: CrashReason::Panic }),
        ("runtime_restart", Finding::RuntimeRestart { runtime: "containerd".into(), pid: 913 }),
        ("oom_storm_start", Finding::OomStorm(StormEdge { started: true, events_in_window: 12, window_secs: 60 })),
        ("oom_storm_end", Finding::OomStorm(StormEdge { started: false, events_in_window: 3, window_secs: 60 })),
        ("events_dropped", Finding::EventsLost { stage: LossStage::Kernel, count: 17 }),
        ("memory_pressure, start", pressure(PressureChange::Start)),
        ("memory_pressure, end", pressure(PressureChange::End(PressureEnd::Killed))),
        ("limit_change", limit_change()),
        ("runtime stopped (no record)", Finding::RuntimeStopped { runtime: "containerd".into(), pid: 812 }),
        ("cgroup resync (no record)", Finding::CgroupResync { reread: true, created: 2, removed: 1 }),
        ("tracking full (no record)", Finding::TrackingFull { cgroup_id: 4242 }),
    ]
}

/// The golden text: per finding its stamp, record line and log lines.
fn render() -> String {
    let time = rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_688_204_812));
    let mut out = String::new();
    let mut block = |name: &str, finding: &Finding, record: Option<(String, Body)>| {
        out.push_str(&format!("== {name}\n"));
        let body = record.as_ref().map(|(_, body)| body);
        if let Some((stamp, body)) = &record {
            let line = Record { time: time.clone(), node: "node-a".into(), body: body.clone() }.line();
            out.push_str(&format!("stamp {stamp}\nwire {}", String::from_utf8_lossy(&line)));
        }
        out.push_str(&format!("json {}", logged(LogFormat::Json, finding, body)));
        out.push_str(&format!("text {}", logged(LogFormat::Text, finding, body)));
    };
    for (name, finding) in findings() {
        let record = record_of(&finding).map(|(stamp, body)| (format!("{stamp:?}"), body));
        block(name, &finding, record);
    }
    // Only in one follower's stream, never from a finding.
    let missed = Body::Missed(super::records::wire::MissedRecord { count: 3 });
    block("missed", &Finding::HostExits { count: 0 }, Some(("Now".into(), missed)));
    out
}

#[test]
fn every_kinds_record_and_log_line_read_as_they_always_have() {
    let got = render();
    for (line, (got, want)) in got.lines().zip(GOLDEN.lines()).enumerate() {
        assert_eq!(got, want, "golden.txt line {}", line + 1);
    }
    assert_eq!(got.lines().count(), GOLDEN.lines().count(), "{got}");
    assert_eq!(got, GOLDEN);
}

#[test]
fn the_golden_findings_cover_every_kind() {
    use strum::IntoEnumIterator as _;
    let named: std::collections::HashSet<&str> = GOLDEN
        .lines()
        .filter_map(|l| l.strip_prefix("wire "))
        .filter_map(|l| l.split("\"kind\":\"").nth(1))
        .filter_map(|l| l.split('"').next())
        .collect();
    for kind in super::records::Kind::iter() {
        let label: &'static str = kind.into();
        assert!(named.contains(label), "no {label} in golden.txt");
    }
}
