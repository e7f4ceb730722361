//! Starts the kernel-to-agent path: load and attach the programs, then run
//! the reader and the log forwarder. What consumes the events is the
//! caller's business (the agent, a test, a benchmark).

use std::sync::Arc;

use tokio::{sync::mpsc, task::JoinSet};
use tokio_util::sync::CancellationToken;

use crate::{
    probes::{reader, reader::EventStream, KernelCounters, LoadError, ProbeOptions, Probes},
    stats::PipelineStats,
};

pub struct Pipeline {
    /// Loaded programs; dropping the pipeline detaches them.
    pub probes: Probes,
    pub events: EventStream,
    pub stats: Arc<PipelineStats>,
    pub kernel: Arc<KernelCounters>,
    tasks: JoinSet<()>,
    shutdown: CancellationToken,
}

impl Pipeline {
    /// Must run inside a tokio runtime.
    pub fn start(opts: &ProbeOptions, channel_capacity: usize, shutdown: CancellationToken) -> Result<Self, LoadError> {
        let mut probes = Probes::load(opts)?;
        let kernel = Arc::new(probes.kernel_counters()?);
        let stats = Arc::new(PipelineStats::default());
        let (routine_tx, routine_rx) = mpsc::channel(channel_capacity.max(1));
        let (oom_tx, oom_rx) = mpsc::channel(reader::SMALL_RING_CHANNEL);
        let (cgroup_tx, cgroup_rx) = mpsc::channel(reader::SMALL_RING_CHANNEL);
        let (signal_tx, signal_rx) = mpsc::channel(reader::SMALL_RING_CHANNEL);
        let tx = reader::Senders { routine: routine_tx, oom_kills: oom_tx, cgroups: cgroup_tx, signals: signal_tx };
        let mut tasks = JoinSet::new();
        if let Some(ring) = probes.take_ring() {
            let (stats, shutdown) = (stats.clone(), shutdown.clone());
            let pace = reader::Pace { drain: opts.drain_interval, idle_after: opts.idle_after };
            tasks.spawn(async move {
                if let Err(e) = reader::run(ring, tx, stats, pace, shutdown).await {
                    log::error!("ring buffer reader stopped: {e}");
                }
            });
        }
        if let Some(logger) = probes.take_logger() {
            let shutdown = shutdown.clone();
            tasks.spawn(async move {
                if let Err(e) = reader::forward_logs(logger, shutdown).await {
                    log::warn!("eBPF log forwarding stopped: {e}");
                }
            });
        }
        Ok(Self {
            probes,
            events: EventStream::new(routine_rx, oom_rx, cgroup_rx, signal_rx, stats.clone()),
            stats,
            kernel,
            tasks,
            shutdown,
        })
    }

    /// Stops the reader (after a final drain) and detaches the programs.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        while self.tasks.join_next().await.is_some() {}
        drop(self.probes);
    }
}
