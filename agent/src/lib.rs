//! sandwatch: an eBPF-backed Kubernetes node watchdog.
//!
//! Data flows one way: kernel programs → [`probes::reader`] → decode
//! ([`events`]) → the [`watchdog`] core (the [`model`], asking the node
//! through [`node_host`]) → [`watchdog::Finding`]s → [`telemetry`] (metrics,
//! logs, event records). The container runtime ([`runtime`]) is a second
//! source of events into the same core. [`run`] wires the parts.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod catalogue;
pub mod cli;
pub mod config;
pub mod events;
pub mod labels;
pub mod model;
pub mod node_host;
pub mod os;
pub mod pipeline;
pub mod probes;
pub mod runtime;
pub mod stats;
pub mod telemetry;
pub mod text;
pub mod watchdog;

use std::{
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::{
    config::Settings,
    events::RuntimeEvent,
    model::metadata::Snapshot,
    node_host::NodeHost,
    os::{boottime_ns, Now},
    pipeline::Pipeline,
    runtime::{containerd, cri, metrics::RuntimeMetrics},
    telemetry::{
        metrics::{Metrics, Subject},
        records::RecordHub,
        server, Outputs,
    },
    watchdog::Watchdog,
};

/// Runtime events waiting for the agent loop; beyond this they are dropped
/// (counted in sandwatch_runtime_events_dropped_total).
const RUNTIME_CHANNEL: usize = 4096;

/// Runs the agent until SIGINT or SIGTERM.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    probes::loader::check_privileges()?;
    let shutdown = CancellationToken::new();
    tokio::spawn(signal_shutdown(shutdown.clone()));

    // Everything a user can get wrong fails here, before anything loads.
    let credentials = server::Credentials::load(&settings.server)?;
    let limits = fit_descriptors(settings.server.limits);
    let listeners = server::Listeners::bind(&settings.server)?;
    let scheme = if credentials.tls() { "https" } else { "http" };
    let serving = format!(
        "{scheme}://{}/metrics, /events at {}",
        listeners.metrics.describe(),
        listeners.events.as_ref().map_or_else(|| "nowhere (--events-listen is empty)".to_string(), |b| b.describe())
    );
    let mut pipeline = Pipeline::start(&settings.probes, settings.channel_capacity, shutdown.clone())?;
    let attached = pipeline.probes.programs_attached();
    let Metrics { registry, runtime: runtime_metrics, http: http_metrics, watchdog: watchdog_metrics, stream } =
        Metrics::register(Subject {
            stats: pipeline.stats.clone(),
            kernel: Some(pipeline.kernel.clone()),
            programs_attached: attached,
            kernel_release: &os::kernel_release(),
            kernel_path: pipeline.probes.path(),
            oom_decision: pipeline.probes.oom_decision().label(),
            settings: &settings.metrics,
        })?;
    let sources = RuntimeSources::start(&settings, &runtime_metrics, &shutdown);
    let outputs = Outputs { metrics: watchdog_metrics, records: Some(RecordHub::new(stream, &settings.records)) };
    let host = NodeHost::new(&mut pipeline).with_runtime(
        &settings.probes.runtime_names,
        runtime_metrics,
        sources.names_wanted.clone(),
    );
    let mut watchdog = Watchdog::new(host, settings.watchdog);
    let state = server::ServerState::agent(registry, outputs.records.clone(), Some(outputs.metrics.clone()));

    // What exists already, then what the kernel reports from here on.
    outputs.publish(watchdog.discover(boottime_ns()));
    // Loaded, attached and seeded: the capabilities that took go, before
    // any other thread starts (each thread holds its own).
    let kept = match probes::privileges::drop_after_start(&pipeline.kernel) {
        Ok(kept) => kept.describe(),
        Err(e) => format!("as they were (dropping them failed: {e})"),
    };
    let server = server::Server::start(listeners, credentials, limits, state.clone(), http_metrics, shutdown.clone())?;
    state.ready.store(true, Ordering::Relaxed);
    log::info!(
        "sandwatch ready: {attached} programs attached, {} tasks seeded, {} sandboxes found, serving {serving}; \
         capabilities now: {kept}",
        watchdog.tasks_seeded(),
        watchdog.registry().tracked_sandboxes(),
    );
    watch_node(&mut watchdog, &mut pipeline, sources, &outputs, &shutdown).await;
    outputs.publish(watchdog.flush(boottime_ns()));
    // Followers get what is queued for them, then their stream ends.
    if let Some(hub) = &outputs.records {
        hub.close();
    }
    log::info!("shutting down: detaching programs");
    shutdown.cancel();
    pipeline.stop().await;
    if !server.stopped(Duration::from_secs(5)).await {
        log::warn!("HTTP server did not stop within 5 s");
    }
    Ok(())
}

/// Descriptors each connection may cost (its socket), and what the agent
/// keeps for itself (maps, programs, files, the runtime's sockets).
const RESERVED_DESCRIPTORS: u64 = 128;

/// The connection cap, lowered so that both listeners at their caps stay
/// below the descriptor limit (raised to its hard limit first).
fn fit_descriptors(limits: server::conns::Limits) -> server::conns::Limits {
    let nofile = os::raise_nofile();
    let room = (nofile.saturating_sub(RESERVED_DESCRIPTORS) / 2).max(2) as usize;
    if limits.max_connections <= room {
        return limits;
    }
    log::warn!(
        "--max-connections {} lowered to {room}: the descriptor limit is {nofile} and two listeners share it",
        limits.max_connections
    );
    server::conns::Limits { max_connections: room, ..limits }
}

/// The runtime's two sources of events, started as configured: the CRI
/// listing of names and containerd's event stream.
struct RuntimeSources {
    events: mpsc::Receiver<RuntimeEvent>,
    listings: watch::Receiver<Arc<Snapshot>>,
    /// Where container ids without names are asked for (CRI listing on).
    names_wanted: Option<Arc<cri::MetadataRequests>>,
}

impl RuntimeSources {
    fn start(settings: &Settings, metrics: &RuntimeMetrics, shutdown: &CancellationToken) -> Self {
        let (listing_tx, listings) = watch::channel(Arc::default());
        let (event_tx, events) = mpsc::channel(RUNTIME_CHANNEL);
        let names_wanted = match &settings.cri {
            None => {
                log::info!("no runtime metadata (--cri-socket is empty): pods are named by UID only");
                None
            }
            Some(config) => {
                let requests = Arc::new(cri::MetadataRequests::default());
                let follow = cri::follow(
                    config.clone(),
                    requests.clone(),
                    listing_tx,
                    metrics.metadata.clone(),
                    shutdown.clone(),
                );
                tokio::spawn(follow);
                let statuses = cri::follow_statuses(
                    config.clone(),
                    requests.clone(),
                    event_tx.clone(),
                    metrics.stream.dropped.clone(),
                    shutdown.clone(),
                );
                tokio::spawn(statuses);
                Some(requests)
            }
        };
        match &settings.containerd {
            None => log::info!("not following containerd (--containerd-socket is empty)"),
            Some(config) => {
                tokio::spawn(containerd::follow(config.clone(), event_tx, metrics.stream.clone(), shutdown.clone()));
            }
        }
        Self { events, listings, names_wanted }
    }
}

/// The agent loop: every source into the watchdog, its findings out, until
/// shutdown or the kernel's stream ends.
async fn watch_node(
    watchdog: &mut Watchdog<NodeHost>,
    pipeline: &mut Pipeline,
    mut sources: RuntimeSources,
    outputs: &Outputs,
    shutdown: &CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // What a burst freed goes back to the kernel once the burst is over:
    // at the first second with no event after one with some, and at the
    // tick after a scrape's render.
    let (mut busy, mut handled) = (true, false);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {
                outputs.publish(watchdog.on_tick(boottime_ns()));
                let churned = crate::os::take_heap_churned();
                if (busy && !handled) || churned {
                    crate::os::return_free_heap();
                }
                (busy, handled) = (handled, false);
            }
            Some(event) = sources.events.recv() => {
                log::trace!("{event:?}");
                handled = true;
                outputs.publish(watchdog.on_runtime(&event, Now::read()));
            }
            Ok(()) = sources.listings.changed() => {
                let snapshot = sources.listings.borrow_and_update().clone();
                handled = true;
                outputs.publish(watchdog.on_metadata(&snapshot, boottime_ns()));
            }
            event = pipeline.events.next() => match event {
                Some(event) => {
                    log::trace!("{event:?}");
                    handled = true;
                    outputs.publish(watchdog.on_kernel(&event, boottime_ns()));
                }
                None => break,
            },
        }
    }
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

/// One line for an error chain, for the process's last words.
pub fn one_line(err: &anyhow::Error) -> String {
    let text = format!("{err:#}");
    text.lines().next().unwrap_or("unknown error").to_string()
}
