//! sandwatch: an eBPF-backed Kubernetes node watchdog.
//!
//! Data flows one way: kernel programs → [`probes::reader`] → decode
//! ([`events`]) → the agent loop in [`run`] → [`telemetry`].
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod config;
pub mod events;
pub mod model;
pub mod pipeline;
pub mod probes;
pub mod stats;
pub mod telemetry;

use std::{sync::atomic::Ordering, time::Duration};

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    config::Config,
    model::{Dispatcher, ExitReport, OomReport, Outcome, PodRef, Registry, Report},
    pipeline::Pipeline,
    probes::{scan::scan, ProbeOptions},
    telemetry::{metrics, pods::PodMetrics, server},
};

/// Runs the agent until SIGINT or SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    probes::loader::check_privileges()?;
    let shutdown = CancellationToken::new();
    tokio::spawn(signal_shutdown(shutdown.clone()));

    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let opts = ProbeOptions {
        ring_buffer_bytes: config.ring_buffer_bytes,
        drain_interval: Duration::from_millis(config.drain_interval_ms.into()),
        task_table_entries: config.task_table_entries,
    };
    let mut pipeline = Pipeline::start(&opts, config.channel_capacity as usize, shutdown.clone())?;
    let registry = metrics::registry(
        pipeline.stats.clone(),
        Some(pipeline.kernel.clone()),
        pipeline.probes.programs_attached(),
        &kernel_release(),
    )?;
    let pod_metrics = PodMetrics::register(&registry, config.churn())?;
    let state = server::ServerState::new(registry);
    let server_task = tokio::spawn(server::serve(listener, state.clone(), shutdown.clone()));

    // What exists already, then what the kernel reports from here on.
    let mut dispatcher = Dispatcher::new(Registry::default());
    let discovered = scan(pipeline.probes.layout(), boottime_ns());
    for event in &discovered {
        dispatcher.dispatch(event, boottime_ns());
    }
    pod_metrics.refresh(&dispatcher.registry);
    state.ready.store(true, Ordering::Relaxed);
    log::info!(
        "sandwatch ready: {} programs attached, {} tasks seeded, {} sandboxes found, serving http://{}/metrics",
        pipeline.probes.programs_attached(),
        pipeline.probes.tasks_seeded(),
        dispatcher.registry.tracked_sandboxes(),
        config.listen
    );

    // The OOM-churn window slides on even when no kill happens.
    let mut gauges = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = gauges.tick() => pod_metrics.tick(boottime_ns()),
            event = pipeline.events.next() => match event {
                Some(event) => {
                    log::trace!("{event:?}");
                    match dispatcher.dispatch(&event, boottime_ns()) {
                        Some(Report::Exit(r)) => {
                            pod_metrics.observe_exit(&r);
                            log_exit(&r);
                        }
                        Some(Report::Oom(r)) => {
                            pod_metrics.observe_oom(&r, boottime_ns());
                            log_oom(&r);
                        }
                        None => {}
                    }
                    pod_metrics.refresh(&dispatcher.registry);
                }
                None => break,
            },
        }
    }
    log::info!("shutting down: detaching programs");
    shutdown.cancel();
    pipeline.stop().await;
    if tokio::time::timeout(Duration::from_secs(5), server_task).await.is_err() {
        log::warn!("HTTP server did not stop within 5 s");
    }
    Ok(())
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

/// CLOCK_BOOTTIME, the clock of the kernel's event timestamps.
pub fn boottime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// Resolves on the first SIGINT or SIGTERM (Kubernetes stops pods with SIGTERM).
async fn signal_shutdown(token: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        log::error!("cannot install signal handlers; stop with SIGKILL");
        return;
    };
    tokio::select! {
        _ = term.recv() => log::info!("SIGTERM received"),
        _ = int.recv() => log::info!("SIGINT received"),
    }
    token.cancel();
}

pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Sets up logging at `level` for sandwatch and its eBPF programs; other
/// crates log warnings only. RUST_LOG, if set, wins.
pub fn init_logging(level: &str) {
    let filter = format!("warn,sandwatch={level},agent_ebpf={level}");
    let env = env_logger::Env::default().default_filter_or(filter);
    let _ = env_logger::Builder::from_env(env).format_timestamp_millis().try_init();
}

/// One line for an error chain, for the process's last words.
pub fn one_line(err: &anyhow::Error) -> String {
    let text = format!("{err:#}");
    text.lines().next().unwrap_or("unknown error").to_string()
}
