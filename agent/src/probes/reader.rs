//! Drains the ring buffer and forwards records; decides nothing. A full
//! channel is a counted drop, never a wait: the kernel must not back up.

use std::{sync::Arc, time::Duration};

use aya::maps::{MapData, RingBuf};
use tokio::{
    io::unix::AsyncFd,
    sync::mpsc::{self, error::TrySendError},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use crate::{
    events::{decode, Event},
    stats::{DrainCause, PipelineStats},
};

use super::loader::{Logger, ReaderFlag, Ring};

/// Raw record as read from the ring buffer.
pub type Record = Vec<u8>;

/// When the reader drains.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Between drains while records come.
    pub drain: Duration,
    /// After this long without a record the reader sleeps (see [`run`]).
    pub idle_after: Duration,
}

/// How often a sleeping reader still drains: a record whose program read
/// the flag just before it was set has not woken it, and waits this long
/// at most.
pub const ASLEEP_DRAIN: Duration = Duration::from_secs(1);

/// Reads until `shutdown`; returns after a final drain.
///
/// Routine records do not wake the reader one by one (see
/// `ProbeConfig::wakeup_bytes`): while they come it drains when woken and
/// every `pace.drain`. After `pace.idle_after` without one it sets the
/// programs' `READER` flag and sleeps: the next routine record wakes it at
/// once, and its timer slows to [`ASLEEP_DRAIN`]. An idle node costs a
/// wakeup a second instead of one per drain interval.
pub async fn run(
    ring: Ring,
    tx: mpsc::Sender<Record>,
    stats: Arc<PipelineStats>,
    pace: Pace,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let Ring { events, mut asleep } = ring;
    // SAFETY: the ring buffer owns its map fd, which stays open and
    // unchanged until the AsyncFd (and with it the ring) is dropped.
    let mut fd = unsafe { AsyncFd::register_with_interest(events, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)?;
    let mut sleep = Sleep { asleep: false, allowed: true, last_record: Instant::now() };
    let mut next = Instant::now() + pace.drain;
    loop {
        let (records, timed) = tokio::select! {
            _ = shutdown.cancelled() => {
                drain(fd.get_mut(), &tx, &stats);
                return Ok(());
            }
            guard = fd.readable_mut() => {
                let mut guard = guard?;
                let n = drain(guard.get_inner_mut(), &tx, &stats);
                guard.clear_ready();
                stats.reader_drained(DrainCause::Wakeup);
                (n, false)
            }
            _ = tokio::time::sleep_until(next) => {
                stats.reader_drained(DrainCause::Timer);
                (drain(fd.get_mut(), &tx, &stats), true)
            }
        };
        let now = Instant::now();
        let was_asleep = sleep.asleep;
        if records > 0 {
            sleep.last_record = now;
            if sleep.asleep {
                sleep.wake(&mut asleep);
            }
        } else if !sleep.asleep && sleep.allowed && now.duration_since(sleep.last_record) >= pace.idle_after {
            sleep.fall_asleep(&mut asleep);
            // A record submitted before the programs saw the flag did not
            // wake the reader: take it now.
            if sleep.asleep && drain(fd.get_mut(), &tx, &stats) > 0 {
                sleep.last_record = now;
                sleep.wake(&mut asleep);
            }
        }
        stats.set_reader_asleep(sleep.asleep);
        if timed || sleep.asleep != was_asleep {
            next = now + if sleep.asleep { ASLEEP_DRAIN } else { pace.drain };
        }
    }
}

/// The reader's sleep, and the flag in the kernel that says so.
struct Sleep {
    asleep: bool,
    /// False once setting the flag failed: without it the reader must not
    /// sleep (records would wait for its slow timer).
    allowed: bool,
    last_record: Instant,
}

impl Sleep {
    fn fall_asleep(&mut self, flag: &mut ReaderFlag) {
        match flag.set(true) {
            Ok(()) => self.asleep = true,
            Err(e) => {
                log::warn!("ring buffer reader keeps its drain timer: setting its sleep flag failed: {e}");
                self.allowed = false;
            }
        }
    }

    fn wake(&mut self, flag: &mut ReaderFlag) {
        // Awake either way: a flag left set only makes every routine
        // record wake the reader.
        self.asleep = false;
        if let Err(e) = flag.set(false) {
            log::warn!("ring buffer reader: clearing its sleep flag failed ({e}); every record will wake it");
            self.allowed = false;
        }
    }
}

/// Forwards every pending record; returns how many.
fn drain(ring: &mut RingBuf<MapData>, tx: &mpsc::Sender<Record>, stats: &PipelineStats) -> usize {
    let mut n = 0;
    while let Some(item) = ring.next() {
        n += 1;
        stats.record_received(&item);
        match tx.try_send(item.to_vec()) {
            Ok(()) => {}
            // Closed only during shutdown; either way the record is lost
            // and counted.
            Err(TrySendError::Full(_)) | Err(TrySendError::Closed(_)) => stats.channel_drop(),
        }
    }
    n
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
