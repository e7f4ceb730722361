//! The connections of one listener, each tracked from accept to close so
//! that no client can stall the agent: their number is capped (at the cap
//! the connection idle the longest is closed to make room, and with none
//! idle the newcomer is refused); a request's headers must arrive in time;
//! a connection idle between requests is closed after a while; and one
//! whose client stopped reading (a scrape never read, a follower of
//! `/events` that does not read) is closed once its writes have been stuck
//! for long enough, or, on the metrics listener, whose response has not
//! been read in full in time (a reader taking a byte a second never
//! stalls a write, yet holds its connection and its body for hours). The
//! agent counts each closing by its reason.

use std::{
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use hyper::body::{Body, Frame};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

/// How long clients may take, and how many may be connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections per listener, at most.
    pub max_connections: usize,
    /// From a connection's accept (or the end of its last response) with a
    /// first byte sent, until its request's headers are in; also the whole
    /// time a new connection may take to send anything (and its TLS
    /// handshake).
    pub header_timeout: Duration,
    /// A connection that was served and sends nothing more is closed after
    /// this (Prometheus reconnects when it scrapes again).
    pub idle_timeout: Duration,
    /// A write that cannot proceed this long (the client stopped reading)
    /// closes its connection.
    pub write_timeout: Duration,
    /// A response not read in full this long after its request closes its
    /// connection; `None` where responses are streams (`/events`).
    pub response_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(10),
            response_timeout: Some(RESPONSE_TIMEOUT),
        }
    }
}

/// How long a response of `/metrics` may take to be read: Prometheus gives
/// up on a scrape after its timeout (10 s by default, at most its
/// interval), so a reader still reading after a minute is no scrape.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the agent closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Closed {
    /// To make room for a new one at the cap.
    Evicted,
    /// Its request's headers (or its TLS handshake) did not arrive in time.
    HeaderTimeout,
    /// Served, then silent for the idle timeout.
    IdleTimeout,
    /// Its client stopped reading.
    WriteTimeout,
    /// Its client read a response too slowly to finish it in time.
    ResponseTimeout,
}

/// What one connection is doing, shared by its I/O, its requests and the
/// reaper. Times are ms since the table's epoch; 0 is "never".
#[derive(Debug, Default)]
pub struct Activity {
    /// When it began waiting for a request: its accept, or the end of its
    /// last response.
    awaiting_since: AtomicU64,
    /// The first byte of the request it waits for.
    first_byte: AtomicU64,
    /// Requests whose response is not done.
    in_flight: AtomicU32,
    /// It was served a request.
    served: AtomicBool,
    /// Since when a write has been unable to proceed.
    write_stuck_since: AtomicU64,
    /// When the oldest request in flight began.
    responding_since: AtomicU64,
}

/// A clock in ms since an epoch, 0 reserved for "never".
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    pub fn new() -> Self {
        Self { epoch: Instant::now() }
    }

    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Activity {
    fn new(now: u64) -> Self {
        let a = Self::default();
        a.awaiting_since.store(now, Ordering::Relaxed);
        a
    }

    /// A request's headers are in at `now`: it is being served.
    pub fn request_started(&self, now: u64) {
        if self.in_flight.fetch_add(1, Ordering::Relaxed) == 0 {
            self.responding_since.store(now, Ordering::Relaxed);
        }
        self.served.store(true, Ordering::Relaxed);
        self.first_byte.store(0, Ordering::Relaxed);
    }

    /// A response is done (its body ended or was dropped).
    fn request_done(&self, now: u64) {
        if self.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.awaiting_since.store(now, Ordering::Relaxed);
        }
    }

    fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0
    }

    /// Whether it must be closed at `now`, and why.
    fn expired(&self, now: u64, limits: &Limits) -> Option<Closed> {
        let ms = |d: Duration| d.as_millis() as u64;
        let stuck = self.write_stuck_since.load(Ordering::Relaxed);
        if stuck != 0 && now.saturating_sub(stuck) >= ms(limits.write_timeout) {
            return Some(Closed::WriteTimeout);
        }
        if !self.idle() {
            let since = self.responding_since.load(Ordering::Relaxed);
            let late = limits.response_timeout.is_some_and(|t| since != 0 && now.saturating_sub(since) >= ms(t));
            return late.then_some(Closed::ResponseTimeout);
        }
        let first = self.first_byte.load(Ordering::Relaxed);
        let since = self.awaiting_since.load(Ordering::Relaxed);
        if first != 0 {
            // Headers on their way, however slowly they trickle in.
            return (now.saturating_sub(first) >= ms(limits.header_timeout)).then_some(Closed::HeaderTimeout);
        }
        if self.served.load(Ordering::Relaxed) {
            (now.saturating_sub(since) >= ms(limits.idle_timeout)).then_some(Closed::IdleTimeout)
        } else {
            (now.saturating_sub(since) >= ms(limits.header_timeout)).then_some(Closed::HeaderTimeout)
        }
    }
}

struct Entry {
    id: u64,
    activity: Arc<Activity>,
    cancel: CancellationToken,
}

/// One admitted connection: what its task needs.
pub struct Admitted {
    pub id: u64,
    pub activity: Arc<Activity>,
    /// Cancelled when the agent closes it.
    pub cancel: CancellationToken,
}

/// A listener's open connections.
pub struct Table {
    clock: Clock,
    limits: Limits,
    entries: Mutex<Vec<Entry>>,
    next_id: AtomicU64,
}

/// What admitting a connection did.
pub enum Admission {
    /// In; `evicted`: an idle one was closed to make room.
    Admitted { conn: Admitted, evicted: bool },
    /// Full of connections that are all being served.
    Refused,
}

impl Table {
    pub fn new(limits: Limits) -> Self {
        Self { clock: Clock::new(), limits, entries: Mutex::new(Vec::new()), next_id: AtomicU64::new(1) }
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        // A panic while holding it leaves plain data behind: keep going.
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Room for one more, at the cap closing the connection idle the
    /// longest or, with none idle, the one whose client stopped reading the
    /// longest ago (it would be closed by its write timeout anyway).
    pub fn admit(&self) -> Admission {
        let now = self.clock.now();
        let mut entries = self.entries();
        let mut evicted = false;
        if entries.len() >= self.limits.max_connections {
            let pick = |key: &dyn Fn(&Activity) -> Option<u64>| {
                entries.iter().enumerate().filter_map(|(i, e)| Some((i, key(&e.activity)?))).min_by_key(|(_, k)| *k)
            };
            let idle = |a: &Activity| a.idle().then(|| a.awaiting_since.load(Ordering::Relaxed));
            let stuck = |a: &Activity| Some(a.write_stuck_since.load(Ordering::Relaxed)).filter(|t| *t != 0);
            let oldest = pick(&idle).or_else(|| pick(&stuck)).map(|(i, _)| i);
            match oldest {
                Some(i) => {
                    entries.swap_remove(i).cancel.cancel();
                    evicted = true;
                }
                None => return Admission::Refused,
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity::new(now));
        let cancel = CancellationToken::new();
        entries.push(Entry { id, activity: activity.clone(), cancel: cancel.clone() });
        Admission::Admitted { conn: Admitted { id, activity, cancel }, evicted }
    }

    /// The connection's task ended.
    pub fn remove(&self, id: u64) {
        let mut entries = self.entries();
        if let Some(i) = entries.iter().position(|e| e.id == id) {
            entries.swap_remove(i);
        }
    }

    pub fn len(&self) -> usize {
        self.entries().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes every connection past its time; returns why, for each.
    pub fn reap(&self) -> Vec<Closed> {
        let now = self.clock.now();
        let mut closed = Vec::new();
        self.entries().retain(|e| match e.activity.expired(now, &self.limits) {
            Some(why) => {
                e.cancel.cancel();
                closed.push(why);
                false
            }
            None => true,
        });
        closed
    }
}

/// A connection's byte stream, telling its [`Activity`] when a request's
/// first byte arrives and when writes get stuck.
pub struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
    clock: Clock,
}

impl<S> Tracked<S> {
    pub fn new(inner: S, activity: Arc<Activity>, clock: Clock) -> Self {
        Self { inner, activity, clock }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    fn wrote<T>(&self, poll: &Poll<std::io::Result<T>>) {
        match poll {
            Poll::Pending => {
                let _ = self.activity.write_stuck_since.compare_exchange(
                    0,
                    self.clock.now(),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            Poll::Ready(_) => self.activity.write_stuck_since.store(0, Ordering::Relaxed),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before && self.activity.idle() {
            let now = self.clock.now();
            let _ = self.activity.first_byte.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(&poll);
        poll
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(&poll);
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.wrote(&poll);
        poll
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A response body that tells its connection's [`Activity`] when it is
/// done (ended, or dropped unfinished).
pub struct Tracking<B> {
    body: B,
    activity: Arc<Activity>,
    clock: Clock,
}

impl<B> Tracking<B> {
    pub fn new(body: B, activity: Arc<Activity>, clock: Clock) -> Self {
        Self { body, activity, clock }
    }
}

impl<B> Drop for Tracking<B> {
    fn drop(&mut self) {
        self.activity.request_done(self.clock.now());
    }
}

impl<B: Body + Unpin> Body for Tracking<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1;
    const SEC: u64 = 1000;

    fn limits(max: usize) -> Limits {
        Limits {
            max_connections: max,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(5),
            response_timeout: None,
        }
    }

    #[test]
    fn silence_and_slow_headers_and_idleness_each_end_a_connection_in_its_time() {
        let l = limits(8);
        // Opened at 1, never a byte: the header timeout.
        let a = Activity::new(1);
        assert_eq!(a.expired(10 * SEC, &l), None);
        assert_eq!(a.expired(10 * SEC + 1, &l), Some(Closed::HeaderTimeout));
        // A byte at 2 s, the rest never: the header timeout from the byte.
        let a = Activity::new(1);
        a.first_byte.store(2 * SEC, Ordering::Relaxed);
        assert_eq!(a.expired(11 * SEC, &l), None);
        assert_eq!(a.expired(12 * SEC, &l), Some(Closed::HeaderTimeout));
        // Served and done at 3 s: idle until the idle timeout.
        let a = Activity::new(1);
        a.request_started(2 * SEC);
        assert_eq!(a.expired(100 * SEC, &l), None, "in flight: not idle");
        a.request_done(3 * SEC);
        assert_eq!(a.expired(62 * SEC, &l), None);
        assert_eq!(a.expired(63 * SEC, &l), Some(Closed::IdleTimeout));
        // A stuck write, in flight or not.
        let a = Activity::new(1);
        a.request_started(2 * SEC);
        a.write_stuck_since.store(4 * SEC, Ordering::Relaxed);
        assert_eq!(a.expired(9 * SEC - MS, &l), None);
        assert_eq!(a.expired(9 * SEC, &l), Some(Closed::WriteTimeout));
    }

    /// Guards: a reader taking a byte at a time, whose writes always
    /// proceed, holding its connection and its body for ever; and a
    /// follower of `/events` (a stream) closed for its long response.
    #[test]
    fn a_response_read_too_slowly_ends_its_connection_where_responses_are_bounded() {
        let bounded = Limits { response_timeout: Some(Duration::from_secs(60)), ..limits(8) };
        let a = Activity::new(1);
        a.request_started(2 * SEC);
        assert_eq!(a.expired(62 * SEC - MS, &bounded), None);
        assert_eq!(a.expired(62 * SEC, &bounded), Some(Closed::ResponseTimeout));
        assert_eq!(a.expired(3600 * SEC, &limits(8)), None, "a stream is no response to time");
        // Done in time, then another: timed from its own start.
        a.request_done(30 * SEC);
        a.request_started(100 * SEC);
        assert_eq!(a.expired(159 * SEC, &bounded), None);
        assert_eq!(a.expired(160 * SEC, &bounded), Some(Closed::ResponseTimeout));
    }

    #[test]
    fn at_the_cap_the_longest_idle_goes_and_with_none_idle_the_newcomer_is_refused() {
        let table = Table::new(limits(2));
        let Admission::Admitted { conn: first, evicted: false } = table.admit() else { panic!("room") };
        std::thread::sleep(Duration::from_millis(5));
        let Admission::Admitted { conn: second, evicted: false } = table.admit() else { panic!("room") };
        // Full: the first (idle the longest) makes room.
        let Admission::Admitted { conn: third, evicted: true } = table.admit() else { panic!("evicts") };
        assert!(first.cancel.is_cancelled() && !second.cancel.is_cancelled());
        // Both being served: the next is refused…
        second.activity.request_started(1);
        third.activity.request_started(1);
        assert!(matches!(table.admit(), Admission::Refused));
        assert_eq!(table.len(), 2);
        // …unless a client stopped reading: it goes.
        third.activity.write_stuck_since.store(5, Ordering::Relaxed);
        let Admission::Admitted { conn: fourth, evicted: true } = table.admit() else { panic!("evicts the stuck") };
        assert!(third.cancel.is_cancelled() && !second.cancel.is_cancelled());
        table.remove(second.id);
        table.remove(fourth.id);
        assert!(table.is_empty());
    }
}
