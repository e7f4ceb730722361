//! Time to render /metrics with the per-pod series cap full, against the
//! same registry with no pod series, in one run: scrapes that find the
//! per-pod family as it was (kept as text), and scrapes each after an OOM
//! kill changed it (rendered again). Run by `cargo xtask bench`.

use std::{sync::Arc, time::Instant};

use sandwatch::{
    model::{Names, OomReport, Outcome, PodRef, QosClass, TaskKey, TaskRole},
    probes::KernelPath,
    stats::PipelineStats,
    telemetry::{
        metrics::{render_with, Metrics, Subject},
        watchdog_metrics::{MetricsSettings, WatchdogMetrics},
    },
    watchdog::{
        explain::{Explanation, OomCause},
        Finding, Fired, OomConstraint, OomKill, OomLimit, PodOom,
    },
};

const FIRED: Fired = Fired { limit: OomLimit::Container, constraint: OomConstraint::Memcg };

fn report(pod: usize) -> OomReport {
    OomReport {
        outcome: Outcome::Handled,
        role: TaskRole::ContainerChild,
        pod: Some(PodRef {
            pod_uid: format!("{pod:08x}-0000-4000-8000-000000000000"),
            qos: Some(QosClass::Burstable),
            container_id: Some(format!("{pod:064x}")),
        }),
        victim: TaskKey::new(pod as u32, 0),
        victim_comm: "stress".into(),
        trigger: None,
        delay_ns: 0,
    }
}

/// Median and 99th percentile of `runs` renders, in microseconds; with
/// `change`, one more OOM kill in a kept pod's series before each.
fn time_renders(served: &(prometheus::Registry, WatchdogMetrics), runs: usize, change: bool) -> (f64, f64, usize) {
    let (reg, m) = served;
    let mut us: Vec<f64> = Vec::with_capacity(runs);
    let mut bytes = 0;
    for i in 0..runs {
        if change {
            let pod = CAP + i % CAP;
            m.observe(&Finding::PodOom(PodOom {
                report: report(pod),
                fired: FIRED,
                cause: OomCause::Anon,
                names: names(pod),
                warned_for_ns: None,
            }));
        }
        let start = Instant::now();
        let text = m.pod_series_text().and_then(|pods| render_with(reg, &[pods])).unwrap_or_default();
        us.push(start.elapsed().as_secs_f64() * 1e6);
        bytes = text.len();
    }
    us.sort_by(f64::total_cmp);
    (us[runs / 2], us[runs * 99 / 100], bytes)
}

const CAP: usize = 500;

/// Named as the CRI names them: label values of realistic length.
fn names(pod: usize) -> Names {
    Names {
        namespace: "checkout-production".into(),
        pod: format!("checkout-api-7d9f8b6c5-{pod:05}"),
        container: "checkout-api".into(),
        workload: "checkout-api".into(),
        workload_kind: "Deployment".into(),
    }
}

fn build(pods: usize, cap: usize) -> (prometheus::Registry, WatchdogMetrics) {
    // Every family, as the agent registers them.
    let Metrics { registry: reg, watchdog: m, .. } = Metrics::register(Subject {
        stats: Arc::new(PipelineStats::default()),
        kernel: None,
        programs_attached: 6,
        kernel_release: "bench",
        kernel_path: KernelPath::VictimTask,
        oom_decision: "oom_control",
        settings: &MetricsSettings { max_pod_series: cap, ..MetricsSettings::default() },
    })
    .expect("metrics");
    for pod in 0..pods {
        let kill = OomKill {
            report: report(pod),
            explained: Explanation { fired: FIRED, cause: OomCause::Anon, ..Explanation::UNKNOWN },
            names: names(pod),
            victim_rss: None,
            oom_score_adj: 0,
            trigger_container: None,
            warned: None,
            lowered: None,
            ts_ns: 0,
        };
        m.observe(&Finding::OomKill(Box::new(kill)));
        m.observe(&Finding::PodOom(PodOom {
            report: report(pod),
            fired: FIRED,
            cause: OomCause::Anon,
            names: names(pod),
            warned_for_ns: None,
        }));
    }
    (reg, m)
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse.
    const RUNS: usize = 400;
    let empty = build(0, CAP);
    let full = build(CAP * 2, CAP);
    let _ = time_renders(&empty, 20, false);
    let (base_p50, base_p99, base_bytes) = time_renders(&empty, RUNS, false);
    let (p50, p99, bytes) = time_renders(&full, RUNS, false);
    let (changed_p50, changed_p99, _) = time_renders(&full, RUNS, true);
    println!("render /metrics, no pod series:        p50 {base_p50:.0} µs, p99 {base_p99:.0} µs, {base_bytes} bytes");
    println!("render /metrics, {CAP} pod series (cap): p50 {p50:.0} µs, p99 {p99:.0} µs, {bytes} bytes");
    println!("  each after a change to them:        p50 {changed_p50:.0} µs, p99 {changed_p99:.0} µs");
    for (what, p50, p99) in
        [("unchanged since the last scrape", p50, p99), ("changed since the last scrape", changed_p50, changed_p99)]
    {
        println!(
            "| /metrics render with the pod-series cap full ({CAP}), {what} | p50 {:.2} ms, p99 {:.2} ms (x{:.1} the empty registry) | ≤ 5 ms | {} |",
            p50 / 1e3,
            p99 / 1e3,
            p50 / base_p50,
            if p99 <= 5000.0 { "ok" } else { "MISSED" }
        );
    }
}
