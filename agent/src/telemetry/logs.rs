//! Log lines: the one logging set-up of the agent, and the log consumer
//! of the watchdog's findings. A finding an operator must see is one
//! `tracing` line of its event record: exactly the record's fields, in its
//! order, from the record kinds' one declaration (`records::kinds`)
//! (`pod_uid`, `namespace`, `pod`, `container`, `container_id`,
//! `victim_role`, …), named as the metrics' labels. Names (process names are a
//! tenant's to choose) are written escaped (`crate::text::visible`), in
//! the message and in the fields: one finding is one line, and no line
//! drives a terminal.

use super::records::{kinds::record_kinds, wire::*};
use crate::{
    labels::Label,
    text::visible as v,
    watchdog::{explain::OomCause, Finding},
};

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
/// A finding with a record (`record`, from `records::record_of`) is
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

/// How a record's field reads on its log line: names escaped (they are a
/// tenant's), lists as one field of compact JSON, numbers and labels as
/// they are; `None` where the record leaves the field out.
trait LogValue {
    type Value: tracing::Value;
    fn log_value(&self) -> Option<Self::Value>;
}

impl LogValue for String {
    type Value = String;
    fn log_value(&self) -> Option<String> {
        Some(v(self).into_owned())
    }
}

impl<T: WireLabel> LogValue for T {
    type Value = &'static str;
    fn log_value(&self) -> Option<&'static str> {
        Some(self.label())
    }
}

macro_rules! log_as_is {
    ($($t:ty),*) => {$(
        impl LogValue for $t {
            type Value = $t;
            fn log_value(&self) -> Option<$t> {
                Some(*self)
            }
        }
    )*};
}
log_as_is!(u8, u32, u64, i32);

/// Left out when false, as on the wire.
impl LogValue for bool {
    type Value = bool;
    fn log_value(&self) -> Option<bool> {
        self.then_some(true)
    }
}

impl<T: LogValue> LogValue for Option<T> {
    type Value = T::Value;
    fn log_value(&self) -> Option<T::Value> {
        self.as_ref().and_then(LogValue::log_value)
    }
}

impl<T: serde::Serialize> LogValue for Vec<T> {
    type Value = String;
    fn log_value(&self) -> Option<String> {
        (!self.is_empty()).then(|| crate::text::json_line(self).ok()).flatten()
    }
}

/// A record's log line: one `tracing` event at a level, its `event` the
/// record's kind, then the record's fields in its order.
trait LogLine {
    fn log(&self, level: tracing::Level, event: &'static str, message: &str);
}

/// The [`LogLine`] of each struct of [`record_kinds`]: its fields (the pod
/// fields first, for the kinds `with pod`) under their names.
macro_rules! log_lines {
    (
        $(#[$pod_meta:meta])* pod $pod:ident $pod_fields:tt
        $( $(#[$meta:meta])* $name:ident $(with $with:ident)? { $( $(#[$m:meta])* $f:ident: $t:ty, )* } )*
    ) => {$(
        log_lines!(@line $name [$($with $pod_fields)?] [$($f)*]);
    )*};
    (@line $name:ident [$($with:ident { $( $(#[$m:meta])* $pf:ident: $pt:ty, )* })?] [$($f:ident)*]) => {
        impl LogLine for $name {
            fn log(&self, level: tracing::Level, event: &'static str, message: &str) {
                log_lines!(@event level [
                    event = event,
                    $($( $pf = self.$with.$pf.log_value(), )*)?
                    $( $f = self.$f.log_value(), )*
                ] message);
            }
        }
    };
    // `tracing` wants the level of a call site fixed.
    (@event $level:ident [$($fields:tt)*] $message:ident) => {
        match $level {
            tracing::Level::ERROR => tracing::event!(tracing::Level::ERROR, $($fields)* "{}", $message),
            tracing::Level::WARN => tracing::event!(tracing::Level::WARN, $($fields)* "{}", $message),
            _ => tracing::event!(tracing::Level::INFO, $($fields)* "{}", $message),
        }
    };
}

record_kinds!(log_lines);

fn log_record(body: &Body) {
    let line: &dyn LogLine = match body {
        Body::OomKill(r) => r.as_ref(),
        Body::SandboxDeath(r) => r,
        Body::ContainerExit(r) => r,
        Body::LateExit(r) => r,
        Body::RuntimeCrash(r) | Body::RuntimeRestart(r) => r,
        Body::OomStormStart(r) | Body::OomStormEnd(r) => r,
        Body::EventsDropped(r) => r,
        Body::MemoryPressure(r) => r,
        Body::LimitChange(r) => r,
        Body::RuntimeDisagreement(r) => r,
        Body::Missed(r) => r,
    };
    line.log(level(body), body.kind().label(), &message(body));
}

/// How loud each record is logged.
fn level(body: &Body) -> tracing::Level {
    match body.kind() {
        Kind::RuntimeCrash => tracing::Level::ERROR,
        Kind::LateExit | Kind::OomStormStart | Kind::EventsDropped | Kind::RuntimeDisagreement => tracing::Level::WARN,
        // A warning starts loud and ends quiet.
        Kind::MemoryPressure => match body {
            Body::MemoryPressure(r) if r.state == PressureState::Start => tracing::Level::WARN,
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
            let cause = r.cause.filter(|c| *c != OomCause::Unknown).map(Label::label);
            let filled = match (cause, r.usage_bytes, r.limit_bytes) {
                (Some(cause), Some(usage), Some(limit)) => {
                    format!(" ({} of {} MiB, mostly {cause})", mib(usage), mib(limit))
                }
                (Some(cause), _, _) => format!(" (mostly {cause})"),
                _ => String::new(),
            };
            let warned = match r.warned_ms {
                Some(ms) => format!(", warned {:.1} s before ({})", ms as f64 / 1000.0, labels(&r.warned_reasons)),
                None => String::new(),
            };
            let lowered = match r.lowered_ms {
                Some(ms) => format!(
                    ", {} lowered from {} to {} {:.1} s before",
                    r.lowered_limit.map_or("limit", Label::label),
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
                r.victim_role.label(),
                describe(&r.pod),
                r.outcome.label(),
                r.limit.map_or("unknown", Label::label),
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
            match (r.state, r.ended, r.lasted_ms) {
                (PressureState::Start, ..) => {
                    format!("memory pressure ({}) in {}: {figures}{eta}", r.reason.label(), describe(&r.pod))
                }
                (PressureState::End, ended, lasted) => format!(
                    "memory pressure ({}) over ({}) after {:.1} s in {}: {figures}",
                    r.reason.label(),
                    ended.map_or("eased", Label::label),
                    lasted.unwrap_or(0) as f64 / 1000.0,
                    describe(&r.pod)
                ),
            }
        }
        Body::SandboxDeath(r) => format!("sandbox death ({}): {}", r.cause.label(), describe(&r.pod)),
        Body::ContainerExit(r) => {
            let workload = match (&r.pod.workload, &r.pod.workload_kind) {
                (Some(w), kind) => format!(" of {} {}", v(kind.as_deref().unwrap_or("")), v(w)),
                (None, _) => String::new(),
            };
            format!("container exit ({}): {}{workload}{}", r.reason.label(), describe(&r.pod), ended_by(r))
        }
        Body::RuntimeDisagreement(r) => {
            let by = r.sender.map_or(String::new(), |s| format!(", ended by {}", s.label()));
            format!(
                "the runtime disagrees with the kernel ({}): {} says {} (exit code {}), the kernel saw {} (exit code {}){by}",
                r.direction.label(),
                describe(&r.pod),
                v(r.runtime_reason.as_deref().unwrap_or("nothing")),
                r.runtime_exit_code.or(r.task_exit_status.and_then(|s| i32::try_from(s).ok())).map_or("-".to_string(), |c| c.to_string()),
                r.reason.label(),
                r.kernel_exit_code,
            )
        }
        Body::LateExit(r) => {
            format!("late exit event ({}, source {}): {}", r.reason.label(), r.source.label(), describe(&r.pod))
        }
        Body::RuntimeCrash(r) => format!(
            "container runtime {} (pid {}) crashed: {}",
            v(&r.runtime),
            r.pid,
            r.reason.map_or("unknown", Label::label)
        ),
        Body::RuntimeRestart(r) => format!("container runtime {} is back (pid {})", v(&r.runtime), r.pid),
        Body::OomStormStart(r) => format!("OOM storm: {} OOM events in the last {} s", r.count, r.window_seconds),
        Body::OomStormEnd(r) => format!("OOM storm over: {} OOM events in the last {} s", r.count, r.window_seconds),
        Body::EventsDropped(r) => {
            format!("{} events lost at the {} stage in the last second", r.count, r.stage.label())
        }
        Body::LimitChange(r) => format!(
            "{} of the {} {} from {} to {} (seen by {}): {}",
            r.limit.label(),
            r.scope.label(),
            r.direction.label(),
            limit_text(r.from_bytes),
            limit_text(r.to_bytes),
            r.seen_by.label(),
            describe(&r.pod)
        ),
        Body::Missed(r) => format!("{} records missed", r.count),
    }
}

/// Who ended a container, as a sentence's tail: `, SIGKILL from runtime
/// (pid 812 runc) 2.0 s after its SIGTERM`.
fn ended_by(r: &ContainerExitRecord) -> String {
    let (Some(sender), Some(signo)) = (r.sender, r.signal) else { return String::new() };
    let mut text = format!(", {} from {}", signal_name(signo), sender.label());
    let mut about = Vec::new();
    if let Some(pid) = r.sender_pid {
        about.push(format!("pid {pid} {}", v(r.sender_comm.as_deref().unwrap_or("?"))));
    }
    match (&r.sender_pod, &r.sender_unit) {
        (Some(pod), _) => about.push(format!(
            "{}/{} {}",
            v(r.sender_namespace.as_deref().unwrap_or("")),
            v(pod),
            v(r.sender_container.as_deref().unwrap_or(""))
        )),
        (None, Some(unit)) => about.push(v(unit).into_owned()),
        (None, None) => {}
    }
    if !about.is_empty() {
        text.push_str(&format!(" ({})", about.join(", ")));
    }
    if let (Some(first), Some(ms)) = (r.stop_signal, r.grace_ms) {
        text.push_str(&format!(" {:.1} s after its {}", ms as f64 / 1000.0, signal_name(first)));
    }
    text
}

/// A signal's name as people write it: `SIGTERM`, or `signal 40`.
pub fn signal_name(signo: u8) -> String {
    use crate::{events::ExitStatus, model::ExitReason};
    match ExitReason::of(ExitStatus::Signal { signo, core_dumped: false }, false) {
        ExitReason::Killed => "SIGKILL".to_string(),
        ExitReason::Signal => format!("signal {signo}"),
        named => named.label().to_ascii_uppercase(),
    }
}

/// A limit as a person reads it: MiB, or none.
fn limit_text(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "none".to_string(), |b| format!("{} MiB", mib(b)))
}

/// Labels as a list: `near_limit, growing`.
fn labels<T: Label>(values: &[T]) -> String {
    values.iter().map(|l| l.label()).collect::<Vec<_>>().join(", ")
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
        model::{
            dispatch::OutcomeKind, DeathCause, ExitReason, LateReason, Names, OomReport, Outcome, QosClass, Source,
            TaskKey, TaskRole, Trigger,
        },
        telemetry::records::record_of,
        watchdog::{
            crashes::CrashReason,
            explain::DecidedBy,
            limits::{Direction as LimitDirection, LimitKind, LimitScope, SeenBy},
            oom_limit::UnknownLimit,
            pressure::{PressureEnd, PressureReason},
            LossStage, OomConstraint, OomKill, OomLimit,
        },
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
            qos_class: Some(QosClass::Burstable),
            workload: Some("web".into()),
            workload_kind: Some("Deployment".into()),
        };
        let runtime = RuntimeRecord { runtime: "containerd".into(), pid: 3, reason: Some(CrashReason::Panic) };
        let storm = StormRecord { count: 9, window_seconds: 60 };
        let bodies = [
            Body::OomKill(Box::new(OomKillRecord {
                pod: pod.clone(),
                victim_role: TaskRole::ContainerChild,
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
                limit: Some(OomLimit::Unknown),
                constraint: Some(OomConstraint::Unknown),
                decided_by: Some(DecidedBy::VictimMemcg),
                limit_unknown: Some(UnknownLimit::Unplaced),
                usage_bytes: Some(1 << 24),
                limit_bytes: Some(1 << 24),
                anon_bytes: Some(1 << 20),
                page_cache_bytes: Some(1 << 21),
                shmem_bytes: Some(1 << 23),
                kernel_bytes: Some(1 << 20),
                swap_bytes: Some(1 << 21),
                zswap_bytes: Some(1 << 20),
                memory_read_after_us: Some(1500),
                cause: Some(OomCause::Shmem),
                pod_containers: vec![ContainerUsage {
                    container: Some("app".into()),
                    container_id: "c".into(),
                    usage_bytes: 1 << 23,
                }],
                warned_ms: Some(12_300),
                warned_reasons: vec![PressureReason::NearLimit, PressureReason::Growing],
                lowered_limit: Some(LimitKind::MemoryMax),
                lowered_from_bytes: Some(128 << 20),
                lowered_to_bytes: Some(32 << 20),
                lowered_ms: Some(4_000),
                outcome: OutcomeKind::Handled,
            })),
            Body::SandboxDeath(SandboxDeathRecord {
                pod: pod.clone(),
                victim_role: TaskRole::Sandbox,
                pid: 6,
                comm: Some("pause".into()),
                cause: DeathCause::Oom,
            }),
            Body::ContainerExit(ContainerExitRecord {
                pod: pod.clone(),
                victim_role: TaskRole::ContainerInit,
                pid: 7,
                comm: Some("app".into()),
                reason: ExitReason::Sigsegv,
                exit_code: Some(1),
                signal: Some(11),
                core_dumped: true,
                sender: None,
                sender_pid: None,
                sender_comm: None,
                sender_pod_uid: None,
                sender_namespace: None,
                sender_pod: None,
                sender_container: None,
                sender_container_id: None,
                sender_unit: None,
                stop_signal: None,
                grace_ms: None,
            }),
            Body::LateExit(LateExitRecord {
                pod,
                victim_role: TaskRole::ContainerInit,
                pid: Some(8),
                comm: Some("app".into()),
                outcome: OutcomeKind::Late,
                reason: LateReason::ContainerMissing,
                source: Source::Runtime,
            }),
            Body::RuntimeCrash(runtime.clone()),
            Body::RuntimeRestart(RuntimeRecord { reason: None, ..runtime }),
            Body::OomStormStart(storm.clone()),
            Body::OomStormEnd(storm),
            Body::EventsDropped(LossRecord { stage: LossStage::Kernel, count: 2 }),
            Body::MemoryPressure(MemoryPressureRecord {
                pod: PodFields { pod_uid: Some("u".into()), ..PodFields::default() },
                reason: PressureReason::Thrashing,
                state: PressureState::End,
                ended: Some(PressureEnd::Killed),
                lasted_ms: Some(4200),
                unreclaimable_bytes: 1 << 25,
                limit_bytes: Some(1 << 25),
                unreclaimable_permille: Some(990),
                working_set_bytes: 1 << 25,
                seconds_to_limit: Some(3),
                psi_some_permille: Some(250),
                psi_full_permille: Some(80),
                refault_bytes_per_second: Some(1 << 20),
                limit_hits: Some(12),
                high_bytes: Some(1 << 24),
                high_events: Some(40),
            }),
            Body::LimitChange(LimitChangeRecord {
                pod: PodFields { pod_uid: Some("u".into()), ..PodFields::default() },
                limit: LimitKind::MemoryMax,
                direction: LimitDirection::Lowered,
                from_bytes: Some(128 << 20),
                to_bytes: Some(32 << 20),
                seen_by: SeenBy::KernelNotice,
                scope: LimitScope::Container,
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
