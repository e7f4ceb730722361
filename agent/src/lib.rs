//! sandwatch: an eBPF-backed Kubernetes node watchdog.
//!
//! Data flows one way: kernel programs → [`probes::reader`] → decode
//! ([`events`]) → [`watchdog::Watchdog`] (the [`model`] dispatcher, then
//! [`telemetry`] counters), driven by the agent loop in [`run`].
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod cli;
pub mod config;
pub mod events;
pub mod host;
pub mod model;
pub mod pipeline;
pub mod probes;
pub mod runtime;
pub mod stats;
pub mod telemetry;
pub mod watchdog;

use std::{sync::atomic::Ordering, time::Duration};

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    config::Config,
    model::runtime::CorrelatorLimits,
    pipeline::Pipeline,
    probes::ProbeOptions,
    runtime::{
        containerd::{self, StreamConfig},
        cri::{self, CriConfig, MetadataRequests},
    },
    telemetry::{events::EventHub, metrics, pods::PodMetrics, runtime::RuntimeMetrics, server},
    watchdog::{LossWatch, RuntimeSide, Watchdog},
};

/// Runtime events waiting for the agent loop; beyond this they are dropped
/// (counted in sandwatch_runtime_events_dropped_total).
const RUNTIME_CHANNEL: usize = 4096;

/// Runs the agent until SIGINT or SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    probes::loader::check_privileges()?;
    let shutdown = CancellationToken::new();
    tokio::spawn(signal_shutdown(shutdown.clone()));

    let listener =
        TcpListener::bind(config.listen).await.with_context(|| format!("cannot listen on {}", config.listen))?;
    let bound = listener.local_addr().unwrap_or(config.listen);
    let opts = ProbeOptions {
        ring_buffer_bytes: config.ring_buffer_bytes,
        drain_interval: Duration::from_millis(config.drain_interval_ms.into()),
        task_table_entries: config.task_table_entries,
        runtime_names: config.runtime_names.clone(),
        ..ProbeOptions::default()
    };
    let mut pipeline = Pipeline::start(&opts, config.channel_capacity as usize, shutdown.clone())?;
    let registry = metrics::registry(
        pipeline.stats.clone(),
        Some(pipeline.kernel.clone()),
        pipeline.probes.programs_attached(),
        &host::kernel_release(),
    )?;
    let runtime_metrics = RuntimeMetrics::register(&registry, &config.runtime_names, &containerd::TOPIC_LABELS)?;
    let limits = CorrelatorLimits {
        oom_match_ns: config.oom_match_window_seconds.saturating_mul(1_000_000_000),
        ..CorrelatorLimits::default()
    };
    let mut side = RuntimeSide::new(&config.runtime_names, limits, runtime_metrics.clone());
    let (metadata_tx, mut metadata_rx) = tokio::sync::watch::channel(Default::default());
    if config.cri_socket.is_empty() {
        log::info!("no runtime metadata (--cri-socket is empty): pods are named by UID only");
    } else {
        let requests = std::sync::Arc::new(MetadataRequests::default());
        side = side.with_metadata(requests.clone());
        let cri = CriConfig {
            socket: config.cri_socket.clone().into(),
            refresh: Duration::from_secs(config.cri_refresh_seconds),
        };
        tokio::spawn(cri::follow(cri, requests, metadata_tx, runtime_metrics.metadata.clone(), shutdown.clone()));
    }
    let node = config.node_name.clone().unwrap_or_else(host::hostname);
    let hub = EventHub::new(&registry, &node, config.max_event_subscribers as usize)?;
    let pod_metrics = PodMetrics::register(&registry, config.churn())?;
    let mut watchdog = Watchdog::new(pod_metrics.clone())
        .with_events(hub.clone())
        .with_runtime(side)
        .with_loss_watch(LossWatch::new(pipeline.stats.clone(), Some(pipeline.kernel.clone())))
        .with_tracker(pipeline.probes.take_tracker());
    let (runtime_tx, mut runtime_rx) = tokio::sync::mpsc::channel(RUNTIME_CHANNEL);
    if config.containerd_socket.is_empty() {
        log::info!("not following containerd (--containerd-socket is empty)");
    } else {
        let stream = StreamConfig {
            socket: config.containerd_socket.clone().into(),
            namespace: config.containerd_namespace.clone(),
        };
        tokio::spawn(containerd::follow(stream, runtime_tx, runtime_metrics.stream.clone(), shutdown.clone()));
    }
    let state = server::ServerState::agent(registry, Some(hub.clone()), Some(pod_metrics));
    let server_task = tokio::spawn(server::serve(listener, state.clone(), shutdown.clone()));

    // What exists already, then what the kernel reports from here on.
    watchdog.discover(pipeline.probes.layout());
    state.ready.store(true, Ordering::Relaxed);
    log::info!(
        "sandwatch ready: {} programs attached, {} tasks seeded, {} sandboxes found, serving http://{}/metrics",
        pipeline.probes.programs_attached(),
        watchdog.tasks_seeded,
        watchdog.registry().tracked_sandboxes(),
        bound
    );

    let mut churn_tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = churn_tick.tick() => watchdog.tick(),
            Some(event) = runtime_rx.recv() => {
                watchdog.handle_runtime(&event);
            }
            Ok(()) = metadata_rx.changed() => {
                let snapshot = metadata_rx.borrow_and_update().clone();
                watchdog.apply_metadata(&snapshot);
            }
            event = pipeline.events.next() => match event {
                Some(event) => {
                    watchdog.handle(&event);
                }
                None => break,
            },
        }
    }
    watchdog.flush();
    // Followers get what is queued for them, then their stream ends.
    hub.close();
    log::info!("shutting down: detaching programs");
    shutdown.cancel();
    pipeline.stop().await;
    if tokio::time::timeout(Duration::from_secs(5), server_task).await.is_err() {
        log::warn!("HTTP server did not stop within 5 s");
    }
    Ok(())
}

/// Resolves on the first SIGINT or SIGTERM (Kubernetes stops pods with SIGTERM).
async fn signal_shutdown(token: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        log::error!("cannot install signal handlers; stop with SIGKILL");
        return;
    };
    tokio::select! {
        _ = term.recv() => log::info!("SIGTERM received"),
        _ = int.recv() => log::info!("SIGINT received"),
    }
    token.cancel();
}

/// Sets up logging at `level` for sandwatch and its eBPF programs; other
/// crates log warnings only. RUST_LOG, if set, wins.
///
/// `json`: one JSON object per line (timestamp, level, target, message and
/// the event's fields: `pod_uid`, `namespace`, `pod`, `container`,
/// `container_id`, `victim_role`, …, named as the metrics' labels), for
/// every line, aya-log's and other `log` users' included.
pub fn init_logging(level: &str, format: LogFormat) {
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

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human lines: time, level, target, message, fields.
    Text,
    /// One JSON object per line.
    Json,
}

/// One line for an error chain, for the process's last words.
pub fn one_line(err: &anyhow::Error) -> String {
    let text = format!("{err:#}");
    text.lines().next().unwrap_or("unknown error").to_string()
}
