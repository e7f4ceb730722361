//! Pipeline counters shared by the reader, the decoder and the metrics
//! collector: plain atomics, so no stage waits on another to count.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use agent_common::{EventKind, KIND_SLOTS};

use strum::EnumCount as _;

use crate::events::{kernel::DecodeErrorKind, DecodeError};

/// Slot for records whose kind could not be read.
pub const UNKNOWN_KIND_SLOT: usize = 0;

#[derive(Default, Debug)]
pub struct PipelineStats {
    /// Records read from the ring buffer, by kind slot.
    received: [AtomicU64; KIND_SLOTS as usize],
    /// Records lost because their ring's channel to the decoder was full,
    /// by kind slot.
    channel_dropped: [AtomicU64; KIND_SLOTS as usize],
    /// Records that failed to decode, by kind of error.
    decode_errors: [AtomicU64; DecodeErrorKind::COUNT],
    /// Decoded events whose task the kernel could not attribute, by kind.
    unattributed: [AtomicU64; KIND_SLOTS as usize],
    /// Ring-buffer drains, by `DrainCause`.
    drains: [AtomicU64; DrainCause::COUNT],
    /// Whether the reader sleeps until a record wakes it.
    reader_asleep: AtomicBool,
}

/// Why the reader drained the ring buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter, strum::EnumCount)]
#[strum(serialize_all = "snake_case")]
pub enum DrainCause {
    /// Its timer.
    Timer = 0,
    /// The kernel woke it (enough data pending, an OOM kill, or a record
    /// while it slept).
    Wakeup = 1,
}

/// The kind in a record's first four bytes, if it is one.
pub fn kind_of(record: &[u8]) -> Option<EventKind> {
    record.get(0..4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]])).and_then(EventKind::from_repr)
}

fn slot(kind: Option<EventKind>) -> usize {
    kind.map_or(UNKNOWN_KIND_SLOT, |k| k as usize)
}

impl PipelineStats {
    /// Counts one record by the kind in its first four bytes.
    pub fn record_received(&self, record: &[u8]) {
        self.received[slot(kind_of(record))].fetch_add(1, Relaxed);
    }

    /// A record of `kind` (`None`: unreadable) found its channel full.
    pub fn channel_drop(&self, kind: Option<EventKind>) {
        self.channel_dropped[slot(kind)].fetch_add(1, Relaxed);
    }

    pub fn decode_error(&self, err: &DecodeError) {
        self.decode_errors[DecodeErrorKind::from(err) as usize].fetch_add(1, Relaxed);
    }

    pub fn unattributed(&self, kind: EventKind) {
        self.unattributed[kind as usize].fetch_add(1, Relaxed);
    }

    pub fn received(&self, kind: EventKind) -> u64 {
        self.received[kind as usize].load(Relaxed)
    }

    pub fn received_unknown(&self) -> u64 {
        self.received[UNKNOWN_KIND_SLOT].load(Relaxed)
    }

    /// Records lost at the channels, every kind.
    pub fn channel_dropped(&self) -> u64 {
        self.channel_dropped.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// Records of `kind` lost at the channels.
    pub fn channel_dropped_of(&self, kind: EventKind) -> u64 {
        self.channel_dropped[kind as usize].load(Relaxed)
    }

    pub fn decode_errors(&self, kind: DecodeErrorKind) -> u64 {
        self.decode_errors[kind as usize].load(Relaxed)
    }

    pub fn decode_errors_total(&self) -> u64 {
        self.decode_errors.iter().map(|c| c.load(Relaxed)).sum()
    }

    pub fn reader_drained(&self, cause: DrainCause) {
        self.drains[cause as usize].fetch_add(1, Relaxed);
    }

    pub fn reader_drains(&self, cause: DrainCause) -> u64 {
        self.drains[cause as usize].load(Relaxed)
    }

    pub fn set_reader_asleep(&self, asleep: bool) {
        self.reader_asleep.store(asleep, Relaxed);
    }

    pub fn reader_asleep(&self) -> bool {
        self.reader_asleep.load(Relaxed)
    }

    pub fn unattributed_count(&self, kind: EventKind) -> u64 {
        self.unattributed[kind as usize].load(Relaxed)
    }
}
