//! Log lines: the one logging set-up of the agent, and the log consumer
//! of the watchdog's findings. A finding an operator must see is one
//! `tracing` line rendered from its event record: its fields are the
//! record's (`pod_uid`, `namespace`, `pod`, `container`, `container_id`,
//! `victim_role`, …), named as the metrics' labels. Names (process names are a
//! tenant's to choose) are written escaped (`crate::text::visible`), in
//! the message and in the fields: one finding is one line, and no line
//! drives a terminal.

use super::records::wire::{Body, Kind, PodFields};
use crate::{text::visible as v, watchdog::Finding};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human lines: time, level, target, message, fields.
    Text,
    /// One JSON object per line.
    Json,
}

/// Sets up logging at `level` for sandwatch and its eBPF programs; other
/// crates log warnings only. RUST_LOG, if set, wins.
///
/// `json`: one JSON object per line (timestamp, level, target, message and
/// the finding's fields), for every line, aya-log's and other `log` users'
/// included.
pub fn init(level: &str, format: LogFormat) {
    use tracing_subscriber::{filter::LevelFilter, EnvFilter};
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("warn,sandwatch={level},agent_ebpf={level}")));
    // `log` records below the filter's most verbose level are dropped by
    // the `log` macros themselves, before any formatting (the event path
    // logs every event at trace).
    let max = match filter.max_level_hint() {
        Some(LevelFilter::OFF) => log::LevelFilter::Off,
        Some(LevelFilter::ERROR) => log::LevelFilter::Error,
        Some(LevelFilter::WARN) => log::LevelFilter::Warn,
        Some(LevelFilter::INFO) => log::LevelFilter::Info,
        Some(LevelFilter::DEBUG) => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    let _ = tracing_log::LogTracer::builder().with_max_level(max).init();
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(terminal);
    let _ = match format {
        LogFormat::Text => fmt.try_init(),
        LogFormat::Json => fmt.json().flatten_event(true).with_current_span(false).with_span_list(false).try_init(),
    };
}

/// Writes the log line of `finding`, for the findings an operator reads.
/// A finding with a record (`record`, from [`records::record_of`]) is
/// logged from it: the same fields under the same names, and a sentence
/// made of them. Only the findings that are logged and never recorded
/// have lines of their own here.
pub fn log(finding: &Finding, record: Option<&Body>) {
    if let Some(body) = record {
        return log_record(body);
    }
    match finding {
        Finding::RuntimeStopped { runtime, pid } => {
            tracing::warn!(runtime = v(runtime).as_ref(), pid, "container runtime {} (pid {pid}) stopped", v(runtime))
        }
        Finding::CgroupResync { reread: true, created, removed } if created + removed > 0 => tracing::warn!(
            "cgroup changes were lost with dropped events: the cgroup tree was read again, {created} cgroups created and {removed} removed meanwhile applied"
        ),
        Finding::TrackingFull { cgroup_id } => tracing::warn!(
            "the kernel's tracked-cgroup map is full: cgroup {cgroup_id}'s tasks are counted as the host's"
        ),
        _ => {}
    }
}

/// A record's fields, read for a log line: strings escaped (names are a
/// tenant's), numbers and flags as they are; what the record left out is
/// left out of the line.
struct Fields(serde_json::Map<String, serde_json::Value>);

impl Fields {
    fn s(&self, key: &str) -> Option<String> {
        match self.0.get(key)? {
            serde_json::Value::String(s) => Some(v(s).into_owned()),
            serde_json::Value::Null => None,
            // Nested values (lists) as compact JSON, escaped the same way.
            other => crate::text::json_line(other).ok(),
        }
    }

    fn n(&self, key: &str) -> Option<u64> {
        self.0.get(key)?.as_u64()
    }

    fn i(&self, key: &str) -> Option<i64> {
        self.0.get(key)?.as_i64()
    }

    fn b(&self, key: &str) -> Option<bool> {
        self.0.get(key)?.as_bool()
    }
}

/// One `tracing` event with every field a record can carry, each named as
/// on the wire (the record's `kind` is the line's `event`). A unit test
/// checks that the line carries exactly its record's fields.
macro_rules! record_line {
    ($level:expr, $f:expr, $message:expr) => {
        tracing::event!(
            $level,
            event = $f.s("kind"),
            pod_uid = $f.s("pod_uid"),
            namespace = $f.s("namespace"),
            pod = $f.s("pod"),
            container = $f.s("container"),
            container_id = $f.s("container_id"),
            qos_class = $f.s("qos_class"),
            workload = $f.s("workload"),
            workload_kind = $f.s("workload_kind"),
            victim_role = $f.s("victim_role"),
            pid = $f.n("pid"),
            comm = $f.s("comm"),
            trigger_pid = $f.n("trigger_pid"),
            trigger_comm = $f.s("trigger_comm"),
            trigger_container = $f.s("trigger_container"),
            trigger_container_id = $f.s("trigger_container_id"),
            rss_bytes = $f.n("rss_bytes"),
            victim_anon_bytes = $f.n("victim_anon_bytes"),
            victim_file_bytes = $f.n("victim_file_bytes"),
            victim_shmem_bytes = $f.n("victim_shmem_bytes"),
            oom_score_adj = $f.i("oom_score_adj"),
            limit = $f.s("limit"),
            constraint = $f.s("constraint"),
            decided_by = $f.s("decided_by"),
            limit_unknown = $f.s("limit_unknown"),
            usage_bytes = $f.n("usage_bytes"),
            limit_bytes = $f.n("limit_bytes"),
            anon_bytes = $f.n("anon_bytes"),
            page_cache_bytes = $f.n("page_cache_bytes"),
            shmem_bytes = $f.n("shmem_bytes"),
            kernel_bytes = $f.n("kernel_bytes"),
            swap_bytes = $f.n("swap_bytes"),
            zswap_bytes = $f.n("zswap_bytes"),
            memory_read_after_us = $f.n("memory_read_after_us"),
            pod_containers = $f.s("pod_containers"),
            warned_ms = $f.n("warned_ms"),
            warned_reasons = $f.s("warned_reasons"),
            lowered_limit = $f.s("lowered_limit"),
            lowered_from_bytes = $f.n("lowered_from_bytes"),
            lowered_to_bytes = $f.n("lowered_to_bytes"),
            lowered_ms = $f.n("lowered_ms"),
            direction = $f.s("direction"),
            from_bytes = $f.n("from_bytes"),
            to_bytes = $f.n("to_bytes"),
            seen_by = $f.s("seen_by"),
            scope = $f.s("scope"),
            state = $f.s("state"),
            ended = $f.s("ended"),
            lasted_ms = $f.n("lasted_ms"),
            unreclaimable_bytes = $f.n("unreclaimable_bytes"),
            unreclaimable_permille = $f.n("unreclaimable_permille"),
            working_set_bytes = $f.n("working_set_bytes"),
            seconds_to_limit = $f.n("seconds_to_limit"),
            psi_some_permille = $f.n("psi_some_permille"),
            psi_full_permille = $f.n("psi_full_permille"),
            refault_bytes_per_second = $f.n("refault_bytes_per_second"),
            limit_hits = $f.n("limit_hits"),
            high_bytes = $f.n("high_bytes"),
            high_events = $f.n("high_events"),
            outcome = $f.s("outcome"),
            reason = $f.s("reason"),
            exit_code = $f.n("exit_code"),
            signal = $f.n("signal"),
            core_dumped = $f.b("core_dumped"),
            cause = $f.s("cause"),
            source = $f.s("source"),
            runtime = $f.s("runtime"),
            count = $f.n("count"),
            window_seconds = $f.n("window_seconds"),
            stage = $f.s("stage"),
            "{}",
            $message
        )
    };
}

fn log_record(body: &Body) {
    let Ok(serde_json::Value::Object(map)) = serde_json::to_value(body) else { return };
    let f = Fields(map);
    let message = message(body);
    match level(body) {
        tracing::Level::ERROR => record_line!(tracing::Level::ERROR, f, message),
        tracing::Level::WARN => record_line!(tracing::Level::WARN, f, message),
        _ => record_line!(tracing::Level::INFO, f, message),
    }
}

/// How loud each record is logged.
fn level(body: &Body) -> tracing::Level {
    match body.kind() {
        Kind::RuntimeCrash => tracing::Level::ERROR,
        Kind::LateExit | Kind::OomStormStart | Kind::EventsDropped => tracing::Level::WARN,
        // A warning starts loud and ends quiet.
        Kind::MemoryPressure => match body {
            Body::MemoryPressure(r) if r.state == "start" => tracing::Level::WARN,
            _ => tracing::Level::INFO,
        },
        Kind::OomKill
        | Kind::SandboxDeath
        | Kind::ContainerExit
        | Kind::RuntimeRestart
        | Kind::OomStormEnd
        | Kind::LimitChange
        | Kind::Missed => tracing::Level::INFO,
    }
}

/// The line's sentence, from the record's fields.
fn message(body: &Body) -> String {
    match body {
        Body::OomKill(r) => {
            let trigger = match (r.trigger_pid, &r.trigger_comm) {
                (Some(pid), comm) => format!(", triggered by pid {pid} ({})", v(comm.as_deref().unwrap_or("?"))),
                (None, _) => String::new(),
            };
            let cause = r.cause.as_deref().filter(|c| *c != "unknown");
            let filled = match (cause, r.usage_bytes, r.limit_bytes) {
                (Some(cause), Some(usage), Some(limit)) => {
                    format!(" ({} of {} MiB, mostly {cause})", mib(usage), mib(limit))
                }
                (Some(cause), _, _) => format!(" (mostly {cause})"),
                _ => String::new(),
            };
            let warned = match r.warned_ms {
                Some(ms) => format!(", warned {:.1} s before ({})", ms as f64 / 1000.0, r.warned_reasons.join(", ")),
                None => String::new(),
            };
            let lowered = match r.lowered_ms {
                Some(ms) => format!(
                    ", {} lowered from {} to {} {:.1} s before",
                    r.lowered_limit.as_deref().unwrap_or("limit"),
                    limit_text(r.lowered_from_bytes),
                    limit_text(r.lowered_to_bytes),
                    ms as f64 / 1000.0
                ),
                None => String::new(),
            };
            format!(
                "OOM kill: victim pid {} ({}) role {} in {} [{}], {} limit{filled}{lowered}{trigger}{warned}",
                r.pid,
                v(r.comm.as_deref().unwrap_or("")),
                r.victim_role,
                describe(&r.pod),
                r.outcome,
                r.limit.as_deref().unwrap_or("unknown"),
            )
        }
        Body::MemoryPressure(r) => {
            let share = r.unreclaimable_permille.map_or(String::new(), |p| format!(" ({:.0} %)", f64::from(p) / 10.0));
            let limit = r.limit_bytes.map_or("no limit".to_string(), |l| format!("{} MiB", mib(l)));
            let figures = format!(
                "{} MiB unreclaimable of {limit}{share}, working set {} MiB",
                mib(r.unreclaimable_bytes),
                mib(r.working_set_bytes)
            );
            let eta = r.seconds_to_limit.map_or(String::new(), |s| format!(", at its limit in {s} s at this growth"));
            match (r.state.as_str(), &r.ended, r.lasted_ms) {
                ("start", ..) => format!("memory pressure ({}) in {}: {figures}{eta}", r.reason, describe(&r.pod)),
                (_, ended, lasted) => format!(
                    "memory pressure ({}) over ({}) after {:.1} s in {}: {figures}",
                    r.reason,
                    ended.as_deref().unwrap_or("eased"),
                    lasted.unwrap_or(0) as f64 / 1000.0,
                    describe(&r.pod)
                ),
            }
        }
        Body::SandboxDeath(r) => format!("sandbox death ({}): {}", r.cause, describe(&r.pod)),
        Body::ContainerExit(r) => {
            let workload = match (&r.pod.workload, &r.pod.workload_kind) {
                (Some(w), kind) => format!(" of {} {}", v(kind.as_deref().unwrap_or("")), v(w)),
                (None, _) => String::new(),
            };
            format!("container exit ({}): {}{workload}", r.reason, describe(&r.pod))
        }
        Body::LateExit(r) => format!("late exit event ({}, source {}): {}", r.reason, r.source, describe(&r.pod)),
        Body::RuntimeCrash(r) => format!(
            "container runtime {} (pid {}) crashed: {}",
            v(&r.runtime),
            r.pid,
            r.reason.as_deref().unwrap_or("unknown")
        ),
        Body::RuntimeRestart(r) => format!("container runtime {} is back (pid {})", v(&r.runtime), r.pid),
        Body::OomStormStart(r) => format!("OOM storm: {} OOM events in the last {} s", r.count, r.window_seconds),
        Body::OomStormEnd(r) => format!("OOM storm over: {} OOM events in the last {} s", r.count, r.window_seconds),
        Body::EventsDropped(r) => format!("{} events lost at the {} stage in the last second", r.count, r.stage),
        Body::LimitChange(r) => format!(
            "{} of the {} {} from {} to {} (seen by {}): {}",
            r.limit,
            r.scope,
            r.direction,
            limit_text(r.from_bytes),
            limit_text(r.to_bytes),
            r.seen_by,
            describe(&r.pod)
        ),
        Body::Missed(r) => format!("{} records missed", r.count),
    }
}

/// A limit as a person reads it: MiB, or none.
fn limit_text(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "none".to_string(), |b| format!("{} MiB", mib(b)))
}

/// Bytes as MiB with one decimal.
fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / f64::from(1u32 << 20))
}

fn describe(p: &PodFields) -> String {
    let Some(uid) = &p.pod_uid else { return "no pod".to_string() };
    let mut text = format!("pod {}", v(uid));
    if let Some(pod) = &p.pod {
        text.push_str(&format!(" ({}/{})", v(p.namespace.as_deref().unwrap_or("")), v(pod)));
    }
    text.push_str(&format!(" container {}", v(p.container_id.as_deref().unwrap_or("-"))));
    if let Some(container) = &p.container {
        text.push_str(&format!(" ({})", v(container)));
    }
    text
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::{
        model::{Names, OomReport, Outcome, TaskKey, TaskRole, Trigger},
        telemetry::records::{record_of, wire::*},
        watchdog::OomKill,
    };

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged(format: LogFormat, finding: &Finding) -> String {
        let record = record_of(finding).map(|(_, body)| body);
        logged_with(format, finding, record.as_ref())
    }

    fn logged_with(format: LogFormat, finding: &Finding, record: Option<&Body>) -> String {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let fmt = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false);
        match format {
            LogFormat::Text => tracing::subscriber::with_default(fmt.finish(), || log(finding, record)),
            LogFormat::Json => {
                tracing::subscriber::with_default(fmt.json().flatten_event(true).finish(), || log(finding, record))
            }
        }
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    /// Guards: a process name that clears the screen, or forges a log line.
    #[test]
    fn a_hostile_process_name_is_one_escaped_line_in_text_and_json() {
        let name = "\u{1b}[2J\u{1b}[H\nPWNED\u{9b}";
        let kill = Finding::OomKill(Box::new(OomKill {
            explained: crate::watchdog::explain::Explanation::UNKNOWN,
            victim_rss: None,
            oom_score_adj: 0,
            trigger_container: None,
            warned: None,
            lowered: None,
            report: OomReport {
                outcome: Outcome::Handled,
                role: TaskRole::ContainerChild,
                pod: None,
                victim: TaskKey::new(7, 0),
                victim_comm: name.into(),
                trigger: Some(Trigger { pid: 8, tgid: 8, comm: name.into(), cgroup_id: 1 }),
                delay_ns: 0,
            },
            names: Names::default(),
            ts_ns: 0,
        }));
        for format in [LogFormat::Text, LogFormat::Json] {
            let text = logged(format, &kill);
            assert_eq!(text.lines().count(), 1, "{format:?}: {text:?}");
            assert!(!text.trim_end().chars().any(crate::text::is_hostile), "{format:?}: {text:?}");
            assert!(text.contains("PWNED"), "{text}");
        }
        let json: serde_json::Value = serde_json::from_str(&logged(LogFormat::Json, &kill)).unwrap();
        assert_eq!(json["comm"], crate::text::visible(name).as_ref());
        assert_eq!(json["trigger_comm"], crate::text::visible(name).as_ref());
    }

    /// Every kind's line carries exactly its record's fields, under the
    /// record's names and with the record's types (guards: a field added
    /// to a record and not to the line, or read as another type).
    #[test]
    fn a_recorded_findings_line_carries_exactly_its_records_fields() {
        let pod = PodFields {
            pod_uid: Some("u".into()),
            namespace: Some("shop".into()),
            pod: Some("web-1".into()),
            container: Some("app".into()),
            container_id: Some("c".into()),
            qos_class: Some("burstable".into()),
            workload: Some("web".into()),
            workload_kind: Some("Deployment".into()),
        };
        let runtime = RuntimeRecord { runtime: "containerd".into(), pid: 3, reason: Some("panic".into()) };
        let storm = StormRecord { count: 9, window_seconds: 60 };
        let bodies = [
            Body::OomKill(Box::new(OomKillRecord {
                pod: pod.clone(),
                victim_role: "container_child".into(),
                pid: 4,
                comm: Some("dd".into()),
                trigger_pid: Some(5),
                trigger_comm: Some("java".into()),
                trigger_container: Some("sidecar".into()),
                trigger_container_id: Some("d".into()),
                rss_bytes: Some(1 << 20),
                victim_anon_bytes: Some(1 << 19),
                victim_file_bytes: Some(1 << 18),
                victim_shmem_bytes: Some(1 << 18),
                oom_score_adj: Some(-997),
                limit: Some("unknown".into()),
                constraint: Some("unknown".into()),
                decided_by: Some("victim_memcg".into()),
                limit_unknown: Some("unplaced".into()),
                usage_bytes: Some(1 << 24),
                limit_bytes: Some(1 << 24),
                anon_bytes: Some(1 << 20),
                page_cache_bytes: Some(1 << 21),
                shmem_bytes: Some(1 << 23),
                kernel_bytes: Some(1 << 20),
                swap_bytes: Some(1 << 21),
                zswap_bytes: Some(1 << 20),
                memory_read_after_us: Some(1500),
                cause: Some("shmem".into()),
                pod_containers: vec![ContainerUsage {
                    container: Some("app".into()),
                    container_id: "c".into(),
                    usage_bytes: 1 << 23,
                }],
                warned_ms: Some(12_300),
                warned_reasons: vec!["near_limit".into(), "growing".into()],
                lowered_limit: Some("memory_max".into()),
                lowered_from_bytes: Some(128 << 20),
                lowered_to_bytes: Some(32 << 20),
                lowered_ms: Some(4_000),
                outcome: "handled".into(),
            })),
            Body::SandboxDeath(SandboxDeathRecord {
                pod: pod.clone(),
                victim_role: "sandbox".into(),
                pid: 6,
                comm: Some("pause".into()),
                cause: "oom".into(),
            }),
            Body::ContainerExit(ContainerExitRecord {
                pod: pod.clone(),
                victim_role: "container_init".into(),
                pid: 7,
                comm: Some("app".into()),
                reason: "sigsegv".into(),
                exit_code: Some(1),
                signal: Some(11),
                core_dumped: true,
            }),
            Body::LateExit(LateExitRecord {
                pod,
                victim_role: "container_init".into(),
                pid: Some(8),
                comm: Some("app".into()),
                outcome: "late".into(),
                reason: "container_missing".into(),
                source: "runtime".into(),
            }),
            Body::RuntimeCrash(runtime.clone()),
            Body::RuntimeRestart(RuntimeRecord { reason: None, ..runtime }),
            Body::OomStormStart(storm.clone()),
            Body::OomStormEnd(storm),
            Body::EventsDropped(LossRecord { stage: "kernel".into(), count: 2 }),
            Body::MemoryPressure(MemoryPressureRecord {
                pod: PodFields { pod_uid: Some("u".into()), ..PodFields::default() },
                reason: "thrashing".into(),
                state: "end".into(),
                ended: Some("killed".into()),
                lasted_ms: Some(4200),
                unreclaimable_bytes: 1 << 25,
                limit_bytes: Some(1 << 25),
                unreclaimable_permille: Some(990),
                working_set_bytes: 1 << 25,
                seconds_to_limit: Some(3),
                psi_some_permille: Some(250),
                psi_full_permille: Some(80),
                refault_bytes_per_second: 1 << 20,
                limit_hits: 12,
                high_bytes: Some(1 << 24),
                high_events: 40,
            }),
            Body::LimitChange(LimitChangeRecord {
                pod: PodFields { pod_uid: Some("u".into()), ..PodFields::default() },
                limit: "memory_max".into(),
                direction: "lowered".into(),
                from_bytes: Some(128 << 20),
                to_bytes: Some(32 << 20),
                seen_by: "kernel_notice".into(),
                scope: "container".into(),
            }),
            Body::Missed(MissedRecord { count: 1 }),
        ];
        let finding = Finding::HostExits { count: 0 };
        for body in bodies {
            let mut want: serde_json::Value = serde_json::to_value(&body).unwrap();
            let kind = want["kind"].clone();
            want.as_object_mut().unwrap().remove("kind");
            // A list is one field of compact JSON text on a log line.
            for v in want.as_object_mut().unwrap().values_mut() {
                if v.is_array() {
                    *v = serde_json::Value::String(crate::text::json_line(v).unwrap());
                }
            }
            let line = logged_with(LogFormat::Json, &finding, Some(&body));
            let mut got: serde_json::Value = serde_json::from_str(&line).unwrap();
            let got = got.as_object_mut().unwrap();
            assert_eq!(got.remove("event").as_ref(), Some(&kind), "{line}");
            for key in ["timestamp", "level", "target", "message"] {
                assert!(got.remove(key).is_some(), "{key} in {line}");
            }
            assert_eq!(&serde_json::Value::Object(got.clone()), &want, "the line's fields are the record's");
        }
    }
}
