//! Log lines: the one logging set-up of the agent, and the log consumer
//! of the watchdog's findings. A finding an operator must see is one
//! `tracing` line whose fields are named as the metrics' labels and the
//! records' fields (`pod_uid`, `namespace`, `pod`, `container`,
//! `container_id`, `victim_role`, …). Names (process names are a
//! tenant's to choose) are written escaped (`crate::text::visible`), in
//! the message and in the fields: one finding is one line, and no line
//! drives a terminal.

use crate::{
    events::ExitStatus,
    labels::Label as _,
    model::{Names, PodRef},
    text::visible as v,
    watchdog::Finding,
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
pub fn log(finding: &Finding) {
    match finding {
        Finding::OomKill(k) => {
            let r = &k.report;
            let names = &k.names;
            let trigger =
                r.trigger.as_ref().map(|t| format!(", triggered by pid {} ({})", t.tgid, v(&t.comm))).unwrap_or_default();
            let (pod_uid, container_id) = ids(r.pod.as_ref());
            tracing::info!(
                event = "oom_kill",
                pod_uid,
                namespace = v(&names.namespace).as_ref(),
                pod = v(&names.pod).as_ref(),
                container = v(&names.container).as_ref(),
                container_id,
                victim_role = r.role.label(),
                pid = r.victim.pid,
                comm = v(&r.victim_comm).as_ref(),
                trigger_pid = r.trigger.as_ref().map(|t| t.tgid),
                trigger_comm = r.trigger.as_ref().map(|t| v(&t.comm).into_owned()),
                qos_class = r.pod.as_ref().and_then(|p| p.qos).map(|q| q.label()),
                rss_bytes = k.rss_bytes,
                limit_bytes = k.limit_bytes,
                limit = r.fired.limit.label(),
                constraint = r.fired.constraint.label(),
                outcome = r.outcome.label(),
                "OOM kill: victim pid {} ({}) role {} in {} [{}], {} limit{trigger}",
                r.victim.pid,
                v(&r.victim_comm),
                r.role.label(),
                describe(r.pod.as_ref(), names),
                r.outcome.label(),
                r.fired.limit.label(),
            );
        }
        Finding::SandboxDeath(d) => {
            let (pod_uid, container_id) = ids(d.report.pod.as_ref());
            let names = &d.names;
            tracing::info!(
                event = "sandbox_death",
                pod_uid,
                namespace = v(&names.namespace).as_ref(),
                pod = v(&names.pod).as_ref(),
                container = v(&names.container).as_ref(),
                container_id,
                pid = d.pid,
                comm = v(&d.comm).as_ref(),
                cause = d.cause.label(),
                "sandbox death ({}): {}",
                d.cause.label(),
                describe(d.report.pod.as_ref(), names)
            );
        }
        Finding::ContainerExit(e) => {
            let r = &e.report;
            let (pod_uid, container_id) = ids(r.pod.as_ref());
            let names = &e.names;
            let (exit_code, signal) = match e.status {
                ExitStatus::Code(c) => (Some(c), None),
                ExitStatus::Signal { signo, .. } => (None, Some(signo)),
            };
            let workload = if names.workload.is_empty() {
                String::new()
            } else {
                format!(" of {} {}", v(&names.workload_kind), v(&names.workload))
            };
            tracing::info!(
                event = "container_exit",
                pod_uid,
                namespace = v(&names.namespace).as_ref(),
                pod = v(&names.pod).as_ref(),
                container = v(&names.container).as_ref(),
                container_id,
                workload = v(&names.workload).as_ref(),
                workload_kind = v(&names.workload_kind).as_ref(),
                victim_role = r.role.label(),
                pid = e.pid,
                comm = v(&e.comm).as_ref(),
                reason = e.reason.label(),
                exit_code,
                signal,
                "container exit ({}): {}{workload}",
                e.reason.label(),
                describe(r.pod.as_ref(), names)
            );
        }
        Finding::LateExit(l) => {
            let r = &l.report;
            let (pod_uid, container_id) = ids(r.pod.as_ref());
            let names = &l.names;
            tracing::warn!(
                event = "late_exit",
                pod_uid,
                namespace = v(&names.namespace).as_ref(),
                pod = v(&names.pod).as_ref(),
                container = v(&names.container).as_ref(),
                container_id,
                pid = l.pid,
                comm = l.comm.as_deref().map(|c| v(c).into_owned()),
                reason = l.reason.label(),
                source = r.source.label(),
                "late exit event ({}, source {}): {}",
                l.reason.label(),
                r.source.label(),
                describe(r.pod.as_ref(), names)
            );
        }
        Finding::RuntimeCrash { runtime, pid, reason } => tracing::error!(
            event = "runtime_crash",
            runtime = runtime.as_str(),
            pid,
            reason = reason.label(),
            "container runtime {runtime} (pid {pid}) crashed: {}",
            reason.label()
        ),
        Finding::RuntimeStopped { runtime, pid } => {
            tracing::warn!(runtime = runtime.as_str(), pid, "container runtime {runtime} (pid {pid}) stopped")
        }
        Finding::RuntimeRestart { runtime, pid } => tracing::info!(
            event = "runtime_restart",
            runtime = runtime.as_str(),
            pid,
            "container runtime {runtime} is back (pid {pid})"
        ),
        Finding::OomStorm(edge) if edge.started => tracing::warn!(
            event = "oom_storm_start",
            count = edge.events_in_window,
            window_seconds = edge.window_secs,
            "OOM storm: {} OOM events in the last {} s",
            edge.events_in_window,
            edge.window_secs
        ),
        Finding::OomStorm(edge) => tracing::info!(
            event = "oom_storm_end",
            count = edge.events_in_window,
            window_seconds = edge.window_secs,
            "OOM storm over: {} OOM events in the last {} s",
            edge.events_in_window,
            edge.window_secs
        ),
        Finding::CgroupResync { reread: true, created, removed } if created + removed > 0 => tracing::warn!(
            "cgroup changes were lost with dropped events: the cgroup tree was read again, {created} cgroups created and {removed} removed meanwhile applied"
        ),
        Finding::TrackingFull { cgroup_id } => tracing::warn!(
            "the kernel's tracked-cgroup map is full: cgroup {cgroup_id}'s tasks are counted as the host's"
        ),
        Finding::EventsLost { stage, count } => tracing::warn!(
            event = "events_dropped",
            stage = stage.label(),
            count,
            "{count} events lost at the {} stage in the last second",
            stage.label()
        ),
        Finding::TaskExit(_)
        | Finding::HostExits { .. }
        | Finding::OomEvent { .. }
        | Finding::PodOom(_)
        | Finding::PodSeriesExpired { .. }
        | Finding::OomWindow { .. }
        | Finding::Model(_)
        | Finding::CgroupResync { .. }
        | Finding::RuntimeUp { .. }
        | Finding::ExitLag { .. }
        | Finding::OomMatched { .. }
        | Finding::Mismatch(_) => {}
    }
}

fn describe(pod: Option<&PodRef>, names: &Names) -> String {
    let Some(p) = pod else { return "no pod".to_string() };
    let mut text = format!("pod {}", v(&p.pod_uid));
    if !names.pod.is_empty() {
        text.push_str(&format!(" ({}/{})", v(&names.namespace), v(&names.pod)));
    }
    text.push_str(&format!(" container {}", v(p.container_id.as_deref().unwrap_or("-"))));
    if !names.container.is_empty() {
        text.push_str(&format!(" ({})", v(&names.container)));
    }
    text
}

/// Pod UID and container id for log fields, empty when unknown.
fn ids(pod: Option<&PodRef>) -> (&str, &str) {
    (pod.map_or("", |p| p.pod_uid.as_str()), pod.and_then(|p| p.container_id.as_deref()).unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::{
        model::{OomReport, Outcome, TaskKey, TaskRole, Trigger},
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
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let fmt = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false);
        match format {
            LogFormat::Text => tracing::subscriber::with_default(fmt.finish(), || log(finding)),
            LogFormat::Json => {
                tracing::subscriber::with_default(fmt.json().flatten_event(true).finish(), || log(finding))
            }
        }
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    /// Guards: a process name that clears the screen, or forges a log line.
    #[test]
    fn a_hostile_process_name_is_one_escaped_line_in_text_and_json() {
        let name = "\u{1b}[2J\u{1b}[H\nPWNED\u{9b}";
        let kill = Finding::OomKill(OomKill {
            report: OomReport {
                outcome: Outcome::Handled,
                role: TaskRole::ContainerChild,
                pod: None,
                victim: TaskKey::new(7, 0),
                victim_comm: name.into(),
                trigger: Some(Trigger { pid: 8, tgid: 8, comm: name.into(), cgroup_id: 1 }),
                delay_ns: 0,
                fired: crate::model::oom_limit::Fired::UNKNOWN,
            },
            names: Names::default(),
            rss_bytes: None,
            limit_bytes: None,
            ts_ns: 0,
        });
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
}
