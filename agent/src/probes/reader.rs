//! Drains the ring buffers and forwards records; decides nothing. A full
//! channel is a counted drop, never a wait: the kernel must not back up.
//!
//! Four rings, four channels: exits, OOM kills, cgroup changes and the
//! senders of signals, so that an exit flood loses exits (counted) and
//! nothing else, and cgroup churn never costs an OOM kill. [`EventStream`]
//! hands them on in the kernel's order, by each record's timestamp.

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

/// Bytes of a record kept inline: an exit's (every record of the routine
/// ring), so that the exit path allocates nothing per record.
const INLINE: usize = core::mem::size_of::<agent_common::ExitEvent>();

/// A raw record as read from a ring buffer: inline up to an exit's size,
/// on the heap beyond (cgroup records carry their path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Record {
    pub fn new(bytes: &[u8]) -> Self {
        match u8::try_from(bytes.len()) {
            Ok(len) if bytes.len() <= INLINE => {
                let mut inline = [0; INLINE];
                inline[..bytes.len()].copy_from_slice(bytes);
                Record::Inline { len, bytes: inline }
            }
            _ => Record::Heap(bytes.into()),
        }
    }
}

impl std::ops::Deref for Record {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Record::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Record::Heap(b) => b,
        }
    }
}

/// The reader's channels, one per ring.
pub struct Senders {
    /// Exits.
    pub routine: mpsc::Sender<Record>,
    pub oom_kills: mpsc::Sender<Record>,
    pub cgroups: mpsc::Sender<Record>,
    pub signals: mpsc::Sender<Record>,
}

/// OOM kills, or cgroup changes, queued for the decoder, at most: more
/// than a full ring of either holds (128 KiB each: ~340 OOM kills, ~290
/// cgroup records), so that one drain of it never overflows its channel.
pub const SMALL_RING_CHANNEL: usize = 1024;

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
    tx: Senders,
    stats: Arc<PipelineStats>,
    pace: Pace,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let Ring { events, oom_kills, cgroups, signals, mut asleep } = ring;
    let register = |ring| {
        // SAFETY: each ring buffer owns its map fd, which stays open and
        // unchanged until its AsyncFd (and with it the ring) is dropped.
        unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }.map_err(|e| e.into_parts().1)
    };
    let mut fd = register(events)?;
    let mut ooms = register(oom_kills)?;
    let mut cgs = register(cgroups)?;
    let mut sigs = register(signals)?;
    // Every ring, the small ones before and after the routine one: a
    // record of theirs taken first is newer than every routine record
    // submitted before it, and those are all taken in the same drain; the
    // second look takes one submitted while the routine ring was read,
    // older than routine records taken after it (a signal is submitted
    // before the exit it causes: with that exit, it is taken). The decoder
    // orders what one drain took by timestamp.
    let drain_all = |fd: &mut Rb, ooms: &mut Rb, cgs: &mut Rb, sigs: &mut Rb| {
        drain(ooms.get_mut(), &tx.oom_kills, &stats)
            + drain(cgs.get_mut(), &tx.cgroups, &stats)
            + drain(sigs.get_mut(), &tx.signals, &stats)
            + drain(fd.get_mut(), &tx.routine, &stats)
            + drain(sigs.get_mut(), &tx.signals, &stats)
            + drain(cgs.get_mut(), &tx.cgroups, &stats)
            + drain(ooms.get_mut(), &tx.oom_kills, &stats)
    };
    let mut sleep = Sleep { asleep: false, allowed: true, last_record: Instant::now() };
    let mut next = Instant::now() + pace.drain;
    loop {
        let (records, timed) = tokio::select! {
            _ = shutdown.cancelled() => {
                drain_all(&mut fd, &mut ooms, &mut cgs, &mut sigs);
                return Ok(());
            }
            guard = fd.readable_mut() => {
                guard?.clear_ready();
                stats.reader_drained(DrainCause::Wakeup);
                (drain_all(&mut fd, &mut ooms, &mut cgs, &mut sigs), false)
            }
            guard = ooms.readable_mut() => {
                guard?.clear_ready();
                stats.reader_drained(DrainCause::Wakeup);
                (drain_all(&mut fd, &mut ooms, &mut cgs, &mut sigs), false)
            }
            guard = cgs.readable_mut() => {
                guard?.clear_ready();
                stats.reader_drained(DrainCause::Wakeup);
                (drain_all(&mut fd, &mut ooms, &mut cgs, &mut sigs), false)
            }
            guard = sigs.readable_mut() => {
                guard?.clear_ready();
                stats.reader_drained(DrainCause::Wakeup);
                (drain_all(&mut fd, &mut ooms, &mut cgs, &mut sigs), false)
            }
            _ = tokio::time::sleep_until(next) => {
                stats.reader_drained(DrainCause::Timer);
                (drain_all(&mut fd, &mut ooms, &mut cgs, &mut sigs), true)
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
            if sleep.asleep && drain_all(&mut fd, &mut ooms, &mut cgs, &mut sigs) > 0 {
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

type Rb = AsyncFd<RingBuf<MapData>>;

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
        match tx.try_send(Record::new(&item)) {
            Ok(()) => {}
            // Closed only during shutdown; either way the record is lost
            // and counted.
            Err(TrySendError::Full(r)) | Err(TrySendError::Closed(r)) => {
                stats.channel_drop(crate::stats::kind_of(&r));
            }
        }
    }
    n
}

/// Decoded events out of the reader's channels; decode errors are counted
/// and skipped.
pub struct EventStream {
    /// Exits, OOM kills, cgroup changes, signals: the reader fills the
    /// last three first in each drain.
    channels: [mpsc::Receiver<Record>; 4],
    /// The next record of each channel, taken but not handed on yet.
    heads: [Option<Record>; 4],
    stats: Arc<PipelineStats>,
    /// What the kernel's page counters count in.
    page_size: u64,
}

/// A record's kernel timestamp (the header's second word); 0 when too short
/// (the decoder counts it).
fn ts_of(record: &[u8]) -> u64 {
    record.get(8..16).and_then(|b| b.try_into().ok()).map_or(0, u64::from_ne_bytes)
}

impl EventStream {
    pub fn new(
        routine: mpsc::Receiver<Record>,
        oom_kills: mpsc::Receiver<Record>,
        cgroups: mpsc::Receiver<Record>,
        signals: mpsc::Receiver<Record>,
        stats: Arc<PipelineStats>,
    ) -> Self {
        let page_size = crate::os::page_size();
        Self { channels: [routine, oom_kills, cgroups, signals], heads: [None, None, None, None], stats, page_size }
    }

    /// The next record in the kernel's order: of what the channels hold,
    /// the oldest (the reader fills them all in one drain, so what one
    /// holds the others are not behind on); `None` once the reader has
    /// stopped.
    ///
    /// Every head is looked at after every wait: the channel that wakes a
    /// waiting decoder is one the reader filled first (a small ring's),
    /// and the others may hold older records of the same drain.
    async fn record(&mut self) -> Option<Record> {
        loop {
            for (head, channel) in self.heads.iter_mut().zip(self.channels.iter_mut()) {
                if head.is_none() {
                    *head = channel.try_recv().ok();
                }
            }
            if self.heads.iter().any(Option::is_some) {
                break;
            }
            let [routine, oom_kills, cgroups, signals] = &mut self.channels;
            tokio::select! {
                biased;
                r = oom_kills.recv() => self.heads[1] = Some(r?),
                r = cgroups.recv() => self.heads[2] = Some(r?),
                r = signals.recv() => self.heads[3] = Some(r?),
                r = routine.recv() => self.heads[0] = Some(r?),
            }
        }
        // The oldest head; of equal stamps, the small rings' first (as
        // they were drained first).
        let oldest = [1, 2, 3, 0]
            .into_iter()
            .filter_map(|i| self.heads[i].as_ref().map(|r| (ts_of(r), i)))
            .min_by_key(|&(ts, _)| ts)
            .map(|(_, i)| i)?;
        self.heads[oldest].take()
    }

    /// The next event, or `None` once the reader has stopped.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            let record = self.record().await?;
            match decode(&record, self.page_size) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as the decoder's merge sees it: a header with `ts`.
    fn record(ts: u64) -> Record {
        let mut r = vec![0u8; 16];
        r[8..16].copy_from_slice(&ts.to_ne_bytes());
        Record::new(&r)
    }

    #[test]
    fn records_up_to_an_exits_size_are_inline_and_any_reads_back_as_it_came() {
        for len in [0, 3, INLINE, INLINE + 1, 448] {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let r = Record::new(&bytes);
            assert_eq!(matches!(r, Record::Inline { .. }), len <= INLINE, "{len}");
            assert_eq!(&*r, bytes.as_slice());
        }
    }

    /// Guards: a decoder waiting on the channels taking the cgroup record
    /// that woke it without looking at the others, so a cgroup's rmdir
    /// overtook the exit of its last process (a late exit instead of a
    /// sandbox death, in the real churn test), or an OOM kill its victim's
    /// container's mkdir; and an exit handed on before the signal that
    /// caused it (its sender unknown).
    #[tokio::test(flavor = "current_thread")]
    async fn a_waiting_decoder_still_hands_on_the_oldest_record_first() {
        let (routine_tx, routine) = mpsc::channel(8);
        let (oom_tx, oom_kills) = mpsc::channel(8);
        let (cgroup_tx, cgroups) = mpsc::channel(8);
        let (signal_tx, signals) = mpsc::channel(8);
        let mut stream = EventStream::new(routine, oom_kills, cgroups, signals, Arc::new(PipelineStats::default()));
        // The reader's drain: the OOM ring first (a kill at 30), the cgroup
        // ring (a mkdir at 5, an rmdir at 20), the signal ring (a SIGKILL at
        // 8), then the routine one (the exit at 10), while the decoder waits.
        let reader = tokio::spawn(async move {
            tokio::task::yield_now().await;
            oom_tx.try_send(record(30)).map_err(|_| "OOM channel")?;
            cgroup_tx.try_send(record(5)).map_err(|_| "cgroup channel")?;
            cgroup_tx.try_send(record(20)).map_err(|_| "cgroup channel")?;
            signal_tx.try_send(record(8)).map_err(|_| "signal channel")?;
            routine_tx.try_send(record(10)).map_err(|_| "routine channel")?;
            Ok::<_, &str>((routine_tx, oom_tx, cgroup_tx, signal_tx))
        });
        let mut order = Vec::new();
        for _ in 0..5 {
            order.push(stream.record().await.map(|r| ts_of(&r)));
        }
        assert_eq!(order, [Some(5), Some(8), Some(10), Some(20), Some(30)]);
        let senders = reader.await.expect("reader task").expect("sends");
        drop(senders);
        assert_eq!(stream.record().await, None, "every channel closed and empty");
    }
}
