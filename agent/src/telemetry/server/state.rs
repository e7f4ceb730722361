//! What the server serves from: the registry and the kept per-pod
//! families behind `/metrics`, rendered once for the scrapes that arrive
//! together; readiness; the record hub behind `/events`.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex, PoisonError, Weak,
    },
    time::Instant,
};

use super::metrics::HttpMetrics;

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
    last: Mutex<Option<Last>>,
    /// One render at a time; the scrapes that wait for it queue here, in
    /// the order they came.
    rendering: tokio::sync::Mutex<()>,
    /// Scrapes waiting for their turn.
    waiting: AtomicUsize,
}

/// The last body rendered.
struct Last {
    began: Instant,
    body: Weak<String>,
    /// Kept while scrapes wait (each may share it): the one that got it
    /// may have sent it and let it go before the next one's turn.
    held: Option<Arc<String>>,
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
        Arc::new(Self {
            registry,
            ready: AtomicBool::new(false),
            events,
            pods,
            last: Mutex::new(None),
            rendering: tokio::sync::Mutex::new(()),
            waiting: AtomicUsize::new(0),
        })
    }

    /// The body a scrape sends, never older than the request: a render
    /// that began after this scrape arrived is shared, so the scrapes that
    /// queue behind one render share the next, and many clients at once
    /// hold one or two bodies between them, not one each. A body no
    /// scrape holds any more is freed. The render runs on a blocking
    /// thread: the server's own thread goes on reading the requests that
    /// come meanwhile, which then share the next render (run on the
    /// server's thread, each scrape would render its own, one after the
    /// other).
    /// `from`: the scraper's address, which sets how long new per-pod
    /// series are held at 0 (see `pod_series`).
    pub async fn scrape(
        self: &Arc<Self>,
        metrics: &HttpMetrics,
        from: Option<std::net::IpAddr>,
    ) -> Result<Bytes, prometheus::Error> {
        metrics.scraped();
        if let (Some(ip), Some(pods)) = (from, &self.pods) {
            pods.scraped_by(ip);
        }
        let arrived = Instant::now();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _turn = self.rendering.lock().await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        let body = match self.rendered_since(arrived) {
            Some(body) => body,
            None => {
                let began = Instant::now();
                let state = self.clone();
                let body = tokio::task::spawn_blocking(move || state.render())
                    .await
                    .map_err(|e| prometheus::Error::Msg(format!("the render failed: {e}")))??;
                metrics.rendered();
                let body = Arc::new(body);
                let held = Some(body.clone());
                *self.last.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(Last { began, body: Arc::downgrade(&body), held });
                body
            }
        };
        // Nobody waits: whoever comes next came after this render began,
        // and renders anew; the body lives only as long as scrapes send it.
        if self.waiting.load(Ordering::SeqCst) == 0 {
            if let Some(last) = self.last.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
                last.held = None;
            }
        }
        Ok(Bytes::from_owner(SharedBody(body)))
    }

    /// The last body, if its render began at `arrived` or later and it is
    /// still held.
    fn rendered_since(&self, arrived: Instant) -> Option<Arc<String>> {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.as_ref().filter(|l| l.began >= arrived).and_then(|l| l.body.upgrade())
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

    /// Eight scrapes at once, as tasks of a one-thread runtime (the
    /// server's): one or two renders between them. (The test through the
    /// server, over HTTP, is the end-to-end one: `agent/tests/fairness.rs`.)
    #[test]
    fn concurrent_scrapes_share_a_body_and_none_is_older_than_its_request() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let registry = Registry::new();
        let renders = Arc::new(AtomicUsize::new(0));
        let gauge = prometheus::IntGauge::new("sandwatch_test_value", "a value").unwrap();
        registry.register(Box::new(Slow(gauge.clone(), renders.clone()))).unwrap();
        let metrics = HttpMetrics::register(&Registry::new()).unwrap();
        let state = ServerState::new(registry);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let bodies: Vec<Bytes> = runtime.block_on(async {
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let (state, metrics) = (state.clone(), metrics.clone());
                    tokio::spawn(async move { state.scrape(&metrics, None).await.unwrap() })
                })
                .collect();
            let mut bodies = Vec::new();
            for t in tasks {
                bodies.push(t.await.unwrap());
            }
            bodies
        });
        let mut distinct: Vec<*const u8> = bodies.iter().map(|b| b.as_ptr()).collect();
        distinct.sort();
        distinct.dedup();
        assert!(renders.load(SeqCst) <= 2 && distinct.len() <= 2, "{} renders for 8 scrapes", renders.load(SeqCst));
        assert!(bodies.iter().all(|b| b.ends_with(b"sandwatch_test_value 0\n")));
        // A scrape after the others: a new render, with what changed.
        gauge.set(7);
        let before = renders.load(SeqCst);
        let later = runtime.block_on(state.scrape(&metrics, None)).unwrap();
        assert_eq!(renders.load(SeqCst), before + 1);
        assert!(later.ends_with(b"sandwatch_test_value 7\n"), "{later:?}");
        // Once no scrape holds it, the body is freed, not kept.
        drop((bodies, later));
        let last = state.last.lock().unwrap();
        assert!(last.as_ref().is_some_and(|l| l.body.upgrade().is_none() && l.held.is_none()));
    }
}
