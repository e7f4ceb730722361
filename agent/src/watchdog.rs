//! One event in, everything it means out: dispatch to the pod model, count
//! the report, log what an operator must see. The agent loop and the
//! privileged tests both drive this, so tests exercise the production path.

use crate::{
    events::Event,
    model::{Dispatcher, ExitReport, OomReport, Outcome, PodRef, Registry, Report},
    probes::{cgroups::CgroupLayout, scan::scan},
    telemetry::pods::PodMetrics,
};

pub struct Watchdog {
    pub dispatcher: Dispatcher,
    pub metrics: PodMetrics,
}

impl Watchdog {
    pub fn new(metrics: PodMetrics) -> Self {
        Self {
            dispatcher: Dispatcher::new(Registry::default()),
            metrics,
        }
    }

    pub fn registry(&self) -> &Registry {
        &self.dispatcher.registry
    }

    /// Learns what exists already (cgroup tree and /proc).
    pub fn discover(&mut self, layout: &CgroupLayout) {
        let now = boottime_ns();
        for event in scan(layout, now) {
            self.dispatcher.dispatch(&event, now);
        }
        self.metrics.refresh(&self.dispatcher.registry);
    }

    /// Applies one kernel event; returns the report of an exit or OOM kill.
    pub fn handle(&mut self, event: &Event) -> Option<Report> {
        log::trace!("{event:?}");
        let now = boottime_ns();
        let report = self.dispatcher.dispatch(event, now);
        match &report {
            Some(Report::Exit(r)) => {
                self.metrics.observe_exit(r);
                log_exit(r);
            }
            Some(Report::Oom(r)) => {
                self.metrics.observe_oom(r, now);
                log_oom(r);
            }
            None => {}
        }
        self.metrics.refresh(&self.dispatcher.registry);
        report
    }

    /// Lets the OOM-churn window slide on when no kill happens.
    pub fn tick(&self) {
        self.metrics.tick(boottime_ns());
    }
}

/// CLOCK_BOOTTIME, the clock of the kernel's event timestamps.
pub fn boottime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

fn describe(pod: Option<&PodRef>) -> String {
    match pod {
        Some(p) => format!(
            "pod {} container {}",
            p.pod_uid,
            p.container_id.as_deref().unwrap_or("-")
        ),
        None => "no pod".to_string(),
    }
}

fn log_oom(r: &OomReport) {
    let trigger = r
        .trigger
        .as_ref()
        .map(|t| format!(", triggered by pid {} ({})", t.tgid, t.comm))
        .unwrap_or_default();
    log::info!(
        "OOM kill: victim pid {} ({}) role {} in {} [{}]{trigger}",
        r.victim.pid,
        r.victim_comm,
        r.role.label(),
        describe(r.pod.as_ref()),
        r.outcome.label(),
    );
}

fn log_exit(r: &ExitReport) {
    if let Some(cause) = r.sandbox_death {
        log::info!("sandbox death ({}): {}", cause.label(), describe(r.pod.as_ref()));
    }
    if let Outcome::Late(reason) = r.outcome {
        log::warn!(
            "late exit event ({}, source {}): {}",
            reason.label(),
            r.source.label(),
            describe(r.pod.as_ref())
        );
    }
}
