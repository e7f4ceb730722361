//! What the server serves from: the registry and the kept per-pod
//! families behind `/metrics`, rendered once for the scrapes that arrive
//! together; readiness; the record hub behind `/events`.

use std::{
    sync::{atomic::AtomicBool, Arc, Mutex, PoisonError, Weak},
    time::Instant,
};

use hyper::body::Bytes;
use prometheus::Registry;

use crate::telemetry::{exposition::render_with, records::RecordHub, watchdog_metrics::WatchdogMetrics};

pub struct ServerState {
    pub registry: Registry,
    pub ready: AtomicBool,
    /// Event records for `/events`; `None`: 404.
    pub events: Option<Arc<RecordHub>>,
    /// The per-pod family, kept as text outside the registry.
    pub pods: Option<WatchdogMetrics>,
    /// The last body rendered, while a scrape still holds it, and when its
    /// render began: see [`ServerState::scrape`].
    last: Mutex<Option<(Instant, Weak<String>)>>,
}

/// A rendered body shared by the scrapes that send it.
struct SharedBody(Arc<String>);

impl AsRef<[u8]> for SharedBody {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl ServerState {
    pub fn new(registry: Registry) -> Arc<Self> {
        Self::agent(registry, None, None)
    }

    pub fn agent(registry: Registry, events: Option<Arc<RecordHub>>, pods: Option<WatchdogMetrics>) -> Arc<Self> {
        Arc::new(Self { registry, ready: AtomicBool::new(false), events, pods, last: Mutex::new(None) })
    }

    /// The body a scrape sends, never older than the request: a render
    /// that began after this scrape arrived is shared, so the scrapes that
    /// queue behind one render share the next, and many clients at once
    /// hold one or two bodies between them, not one each. A body no
    /// scrape holds any more is freed.
    pub fn scrape(&self) -> Result<Bytes, prometheus::Error> {
        let arrived = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(body) = last.as_ref().filter(|(began, _)| *began >= arrived).and_then(|(_, b)| b.upgrade()) {
            return Ok(Bytes::from_owner(SharedBody(body)));
        }
        let began = Instant::now();
        let body = Arc::new(self.render()?);
        *last = Some((began, Arc::downgrade(&body)));
        Ok(Bytes::from_owner(SharedBody(body)))
    }

    /// What `/metrics` serves.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        let kept = match &self.pods {
            Some(pods) => vec![pods.pod_series_text()?],
            None => Vec::new(),
        };
        let body = render_with(&self.registry, &kept);
        crate::os::heap_churned();
        body
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A collector whose render takes a while, counting its renders.
    struct Slow(prometheus::IntGauge, Arc<std::sync::atomic::AtomicUsize>);

    impl prometheus::core::Collector for Slow {
        fn desc(&self) -> Vec<&prometheus::core::Desc> {
            self.0.desc()
        }
        fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(100));
            self.0.collect()
        }
    }

    #[test]
    fn concurrent_scrapes_share_a_body_and_none_is_older_than_its_request() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let registry = Registry::new();
        let renders = Arc::new(AtomicUsize::new(0));
        let gauge = prometheus::IntGauge::new("sandwatch_test_value", "a value").unwrap();
        registry.register(Box::new(Slow(gauge.clone(), renders.clone()))).unwrap();
        let state = ServerState::new(registry);
        let start = Arc::new(std::sync::Barrier::new(8));
        let bodies: Vec<Bytes> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let (state, start) = (&state, start.clone());
                    s.spawn(move || {
                        start.wait();
                        state.scrape().unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut distinct: Vec<*const u8> = bodies.iter().map(|b| b.as_ptr()).collect();
        distinct.sort();
        distinct.dedup();
        assert!(renders.load(SeqCst) <= 2 && distinct.len() <= 2, "{} renders for 8 scrapes", renders.load(SeqCst));
        assert!(bodies.iter().all(|b| b.ends_with(b"sandwatch_test_value 0\n")));
        // A scrape after the others: a new render, with what changed.
        gauge.set(7);
        let before = renders.load(SeqCst);
        let later = state.scrape().unwrap();
        assert_eq!(renders.load(SeqCst), before + 1);
        assert!(later.ends_with(b"sandwatch_test_value 7\n"), "{later:?}");
        // Once no scrape holds it, the body is freed, not kept.
        drop((bodies, later));
        let last = state.last.lock().unwrap();
        assert!(last.as_ref().is_some_and(|(_, body)| body.upgrade().is_none()));
    }
}
