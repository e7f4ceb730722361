//! Who ended containers, as node-level families: containers' inits ended
//! by a signal by its sender (a host sender with its systemd unit, a
//! bounded label), stops past their grace and how long the grace lasted,
//! and the runtime's word on each end against the kernel's.

use std::sync::Mutex;

use prometheus::{Histogram, IntCounter, IntCounterVec, Registry};
use strum::IntoEnumIterator as _;

use crate::{
    catalogue,
    labels::Label as _,
    model::TaskRole,
    watchdog::{
        senders::{Sender, UnitLabels},
        verdicts::{Disagreement, Verdict, VerdictResult},
        ContainerExit,
    },
};

/// The `sender` label of an exit no signal caused.
pub const NO_SENDER: &str = "none";

#[derive(Clone)]
pub struct SignalMetrics {
    exits: IntCounterVec,
    stops: IntCounterVec,
    grace: Histogram,
    verdicts: IntCounterVec,
    disagreements: IntCounterVec,
    forgotten: IntCounter,
    units: std::sync::Arc<Mutex<UnitLabels>>,
}

impl SignalMetrics {
    pub fn register(r: &Registry) -> Result<Self, prometheus::Error> {
        let m = Self {
            exits: catalogue::CONTAINER_SIGNAL_EXITS_TOTAL.counter_vec(r)?,
            stops: catalogue::CONTAINER_STOPS_PAST_GRACE_TOTAL.counter_vec(r)?,
            grace: catalogue::CONTAINER_STOP_GRACE_SECONDS.histogram(r)?,
            verdicts: catalogue::RUNTIME_VERDICTS_TOTAL.counter_vec(r)?,
            disagreements: catalogue::RUNTIME_DISAGREEMENTS_TOTAL.counter_vec(r)?,
            forgotten: catalogue::SIGNAL_SENDERS_FORGOTTEN_TOTAL.counter(r)?,
            units: Default::default(),
        };
        // Every bounded series exists from the start, so increase() sees
        // the first event: a host sender's without a unit stands for its
        // others, which are named as they come.
        for role in ["sandbox", "workload"] {
            for sender in Sender::iter() {
                let unit = if sender == Sender::Host { "none" } else { "" };
                m.exits.with_label_values(&[role, sender.label(), unit]);
            }
        }
        for sender in Sender::iter().filter(|s| !matches!(s, Sender::Kernel | Sender::OomKiller | Sender::Unknown)) {
            m.stops.with_label_values(&[sender.label()]);
        }
        for result in VerdictResult::iter() {
            m.verdicts.with_label_values(&[result.label()]);
        }
        for direction in Disagreement::iter() {
            m.disagreements.with_label_values(&[direction.label()]);
        }
        Ok(m)
    }

    pub fn container_exit(&self, e: &ContainerExit) {
        let Some(ended) = &e.ended else { return };
        let role = if e.report.role == TaskRole::Sandbox { "sandbox" } else { "workload" };
        let unit = self.units.lock().map(|mut u| u.label(ended)).unwrap_or_default();
        self.exits.with_label_values(&[role, ended.sender.label(), &unit]).inc();
        if let Some(stop) = ended.stop {
            self.stops.with_label_values(&[ended.sender.label()]).inc();
            self.grace.observe(stop.grace_ns as f64 / 1e9);
        }
    }

    pub fn verdict(&self, v: &Verdict) {
        self.verdicts.with_label_values(&[v.result.label()]).inc();
        if let Some(direction) = v.disagreement {
            self.disagreements.with_label_values(&[direction.label()]).inc();
        }
    }

    /// The senders' table's own total since start.
    pub fn forgotten(&self, total: u64) {
        self.forgotten.inc_by(total.saturating_sub(self.forgotten.get()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        events::ExitStatus,
        model::{ExitReason, ExitReport, Names, Outcome, PodRef, Source},
        telemetry::exposition::render_with,
        watchdog::senders::{SignalEnd, Stop},
    };

    fn exit(sender: Sender, unit: Option<&str>, stop: Option<Stop>) -> ContainerExit {
        ContainerExit {
            report: ExitReport {
                source: Source::Kernel,
                outcome: Outcome::Handled,
                role: TaskRole::ContainerInit,
                pod: Some(PodRef { pod_uid: "u".into(), qos: None, container_id: Some("c".into()) }),
                sandbox_death: None,
                container_exit: Some(ExitReason::Killed),
                delay_ns: 0,
            },
            reason: ExitReason::Killed,
            status: ExitStatus::Signal { signo: 9, core_dumped: false },
            names: Names::default(),
            pid: 7,
            comm: "sleep".into(),
            ts_ns: 1,
            ended: Some(SignalEnd {
                sender,
                signal: 9,
                pid: Some(8),
                comm: None,
                pod: None,
                unit: unit.map(String::from),
                stop,
            }),
        }
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// Guards: a host sender's unit label growing with every session or
    /// service that ever signalled a container (unbounded series).
    #[test]
    fn host_units_are_a_bounded_label() {
        let registry = Registry::new();
        let m = SignalMetrics::register(&registry).unwrap();
        for n in 0..40 {
            m.container_exit(&exit(Sender::Host, Some(&format!("job-{n}.service")), None));
            m.container_exit(&exit(Sender::Host, Some(&format!("session-{n}.scope")), None));
        }
        m.container_exit(&exit(Sender::Host, Some("job-3.service"), None));
        m.container_exit(&exit(Sender::Host, None, None));
        let text = render_with(&registry, &[]).unwrap();
        let host: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("sandwatch_container_signal_exits_total{") && l.contains("sender=\"host\""))
            .collect();
        // Per role: `none` from the start, 16 services, `other`, `scope`.
        assert_eq!(host.len(), 2 + crate::watchdog::senders::MAX_UNIT_LABELS + 2, "{host:#?}");
        let series = |unit: &str| {
            format!(
                "sandwatch_container_signal_exits_total{{container_role=\"workload\",sender=\"host\",unit=\"{unit}\"}}"
            )
        };
        assert_eq!(value(&text, &series("job-3.service")), Some(2.0), "a named service keeps its series");
        assert_eq!(value(&text, &series("other")), Some(24.0));
        assert_eq!(value(&text, &series("scope")), Some(40.0));
        assert_eq!(value(&text, &series("none")), Some(1.0));
    }

    #[test]
    fn a_stop_past_its_grace_is_counted_with_how_long_it_lasted() {
        let registry = Registry::new();
        let m = SignalMetrics::register(&registry).unwrap();
        m.container_exit(&exit(Sender::Runtime, None, Some(Stop { signal: 15, grace_ns: 2_100_000_000 })));
        m.container_exit(&exit(Sender::Runtime, None, None));
        let text = render_with(&registry, &[]).unwrap();
        assert_eq!(value(&text, "sandwatch_container_stops_past_grace_total{sender=\"runtime\"}"), Some(1.0));
        assert_eq!(value(&text, "sandwatch_container_stop_grace_seconds_sum"), Some(2.1));
        assert_eq!(
            value(
                &text,
                "sandwatch_container_signal_exits_total{container_role=\"workload\",sender=\"runtime\",unit=\"\"}"
            ),
            Some(2.0)
        );
        assert_eq!(value(&text, "sandwatch_container_stops_past_grace_total{sender=\"host\"}"), Some(0.0));
    }
}
