//! Drains the ring buffer and forwards records; decides nothing. A full
//! channel is a counted drop, never a wait: the kernel must not back up.

use std::sync::Arc;

use aya::maps::{MapData, RingBuf};
use tokio::{
    io::unix::AsyncFd,
    sync::mpsc::{self, error::TrySendError},
};
use tokio_util::sync::CancellationToken;

use crate::{
    events::{decode, Event},
    stats::PipelineStats,
};

use super::loader::Logger;

/// Raw record as read from the ring buffer.
pub type Record = Vec<u8>;

/// Reads until `shutdown`; returns after a final drain. Routine records do
/// not wake the reader one by one (see `ProbeConfig::wakeup_bytes`): it
/// drains when woken and every `interval`.
pub async fn run(
    ring: RingBuf<MapData>,
    tx: mpsc::Sender<Record>,
    stats: Arc<PipelineStats>,
    interval: std::time::Duration,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // SAFETY: the ring buffer owns its map fd, which stays open and
    // unchanged until the AsyncFd (and with it the ring) is dropped.
    let mut fd = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)?;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                drain(fd.get_mut(), &tx, &stats);
                return Ok(());
            }
            guard = fd.readable_mut() => {
                let mut guard = guard?;
                drain(guard.get_inner_mut(), &tx, &stats);
                guard.clear_ready();
            }
            _ = tick.tick() => drain(fd.get_mut(), &tx, &stats),
        }
    }
}

fn drain(ring: &mut RingBuf<MapData>, tx: &mpsc::Sender<Record>, stats: &PipelineStats) {
    while let Some(item) = ring.next() {
        stats.record_received(&item);
        match tx.try_send(item.to_vec()) {
            Ok(()) => {}
            // Closed only during shutdown; either way the record is lost
            // and counted.
            Err(TrySendError::Full(_)) | Err(TrySendError::Closed(_)) => stats.channel_drop(),
        }
    }
}

/// Decoded events out of the reader's channel; decode errors are counted
/// and skipped.
pub struct EventStream {
    rx: mpsc::Receiver<Record>,
    stats: Arc<PipelineStats>,
}

impl EventStream {
    pub fn new(rx: mpsc::Receiver<Record>, stats: Arc<PipelineStats>) -> Self {
        Self { rx, stats }
    }

    /// The next event, or `None` once the reader has stopped.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            let record = self.rx.recv().await?;
            match decode(&record) {
                Ok(event) => {
                    if !event.attributed() {
                        self.stats.unattributed(event.kind());
                    }
                    return Some(event);
                }
                Err(e) => {
                    log::debug!("dropping undecodable record: {e}");
                    self.stats.decode_error(&e);
                }
            }
        }
    }
}

/// Forwards the eBPF programs' aya-log messages into the agent's log.
pub async fn forward_logs(logger: Logger, shutdown: CancellationToken) -> std::io::Result<()> {
    // SAFETY: the logger owns its ring-buffer fd for as long as it lives.
    let mut fd = unsafe { AsyncFd::register_with_interest(logger, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)?;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            guard = fd.readable_mut() => {
                let mut guard = guard?;
                guard.get_inner_mut().flush();
                guard.clear_ready();
            }
        }
    }
}
