//! Pod-level metrics: what the dispatcher's reports mean to an SRE. Labels
//! are bounded enums, except `sandwatch_pod_oom_kills_total` which carries
//! pod UID and container ID (a later change caps its series).

use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGauge, Opts, Registry};

use crate::model::{
    DeathCause, ExitReport, LateReason, OomReport, Outcome, QosClass, Registry as PodRegistry,
    Source, TaskRole,
};

const ROLES: [TaskRole; 5] = [
    TaskRole::Sandbox,
    TaskRole::ContainerInit,
    TaskRole::ContainerChild,
    TaskRole::Host,
    TaskRole::Unknown,
];
const OUTCOMES: [&str; 4] = ["handled", "late", "unknown", "host"];
const CAUSES: [DeathCause; 3] = [DeathCause::Oom, DeathCause::Signal, DeathCause::Exit];
/// qos_class for victims outside any pod.
const NO_QOS: &str = "none";

/// 100 µs … 10 s.
const DELAY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Clone)]
pub struct PodMetrics {
    oom_kills: IntCounterVec,
    pod_oom_kills: IntCounterVec,
    sandbox_deaths: IntCounterVec,
    task_exits: IntCounterVec,
    late_exits: IntCounterVec,
    exit_delay: Histogram,
    tracked_sandboxes: IntGauge,
    tracked_containers: IntGauge,
    tracked_processes: IntGauge,
}

impl PodMetrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let m = Self {
            oom_kills: IntCounterVec::new(
                Opts::new("sandwatch_oom_kills_total", "OOM kills on this node by victim role and pod QoS class."),
                &["victim_role", "qos_class"],
            )?,
            pod_oom_kills: IntCounterVec::new(
                Opts::new("sandwatch_pod_oom_kills_total", "OOM kills per pod and container."),
                &["pod_uid", "container_id", "victim_role"],
            )?,
            sandbox_deaths: IntCounterVec::new(
                Opts::new("sandwatch_sandbox_deaths_total", "Exits of a pod sandbox's init (pause), by cause."),
                &["cause"],
            )?,
            task_exits: IntCounterVec::new(
                Opts::new("sandwatch_task_exits_total", "Process exits dispatched, by role and outcome."),
                &["role", "outcome"],
            )?,
            late_exits: IntCounterVec::new(
                Opts::new(
                    "sandwatch_late_exit_events_total",
                    "Exit events handled after their sandbox, container or task was already gone.",
                ),
                &["reason", "source"],
            )?,
            exit_delay: Histogram::with_opts(
                HistogramOpts::new(
                    "sandwatch_exit_handling_delay_seconds",
                    "Delay from the kernel's timestamp of an exit or OOM kill to its dispatch.",
                )
                .buckets(DELAY_BUCKETS.to_vec()),
            )?,
            tracked_sandboxes: IntGauge::new("sandwatch_tracked_sandboxes", "Pod sandboxes in the registry.")?,
            tracked_containers: IntGauge::new("sandwatch_tracked_containers", "Containers in the registry.")?,
            tracked_processes: IntGauge::new(
                "sandwatch_tracked_processes",
                "Container init processes alive and known to the registry.",
            )?,
        };
        registry.register(Box::new(m.oom_kills.clone()))?;
        registry.register(Box::new(m.pod_oom_kills.clone()))?;
        registry.register(Box::new(m.sandbox_deaths.clone()))?;
        registry.register(Box::new(m.task_exits.clone()))?;
        registry.register(Box::new(m.late_exits.clone()))?;
        registry.register(Box::new(m.exit_delay.clone()))?;
        registry.register(Box::new(m.tracked_sandboxes.clone()))?;
        registry.register(Box::new(m.tracked_containers.clone()))?;
        registry.register(Box::new(m.tracked_processes.clone()))?;
        // Every bounded series exists from the start, so increase() sees
        // the first event.
        for role in ROLES {
            for qos in QosClass::LABELS.iter().chain([&NO_QOS]) {
                m.oom_kills.with_label_values(&[role.label(), qos]);
            }
            for outcome in OUTCOMES {
                m.task_exits.with_label_values(&[role.label(), outcome]);
            }
        }
        for cause in CAUSES {
            m.sandbox_deaths.with_label_values(&[cause.label()]);
        }
        for reason in LateReason::ALL {
            for source in [Source::Kernel, Source::Runtime] {
                m.late_exits.with_label_values(&[reason.label(), source.label()]);
            }
        }
        Ok(m)
    }

    pub fn observe_exit(&self, r: &ExitReport) {
        self.task_exits
            .with_label_values(&[r.role.label(), r.outcome.label()])
            .inc();
        if let Outcome::Late(reason) = r.outcome {
            self.late_exits
                .with_label_values(&[reason.label(), r.source.label()])
                .inc();
        }
        if let Some(cause) = r.sandbox_death {
            self.sandbox_deaths.with_label_values(&[cause.label()]).inc();
        }
        self.exit_delay.observe(r.delay_ns as f64 / 1e9);
    }

    pub fn observe_oom(&self, r: &OomReport) {
        let qos = r.pod.as_ref().and_then(|p| p.qos).map_or(NO_QOS, QosClass::label);
        self.oom_kills.with_label_values(&[r.role.label(), qos]).inc();
        if let Some(pod) = &r.pod {
            let container = pod.container_id.as_deref().unwrap_or("");
            self.pod_oom_kills
                .with_label_values(&[&pod.pod_uid, container, r.role.label()])
                .inc();
        }
    }

    pub fn refresh(&self, registry: &PodRegistry) {
        self.tracked_sandboxes.set(registry.tracked_sandboxes() as i64);
        self.tracked_containers.set(registry.tracked_containers() as i64);
        self.tracked_processes.set(registry.tracked_processes() as i64);
    }
}
