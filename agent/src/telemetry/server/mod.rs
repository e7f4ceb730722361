//! The agent's HTTP server, on a thread of its own so that no client —
//! a scrape of 1 000 pods' series, a TLS handshake, a flood of half-sent
//! requests — takes time from the thread that drains the ring buffers and
//! runs the watchdog.
//!
//! Two listeners: the metrics listener (`--listen`: `/metrics`, `/healthz`,
//! `/readyz`; TLS, client certificates and a bearer token when configured)
//! and the events listener (`--events-listen`: `/events`, a unix socket on
//! the node by default, since its records name every namespace's pods and
//! processes). Each listener caps its connections and closes those that
//! stall ([`conns`]); accept errors back off.

pub mod conns;
pub mod metrics;
mod routes;
pub mod tls;

use std::{
    convert::Infallible,
    fmt,
    net::SocketAddr,
    path::PathBuf,
    pin::Pin,
    sync::{atomic::AtomicBool, Arc, Mutex, PoisonError, Weak},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use http_body_util::combinators::UnsyncBoxBody;
use hyper::{body::Bytes, server::conn::http1, service::service_fn, Response};
use hyper_util::rt::TokioIo;
use prometheus::Registry;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpStream, UnixStream},
    sync::oneshot,
};
use tokio_util::sync::CancellationToken;

pub use routes::{parse_query, NDJSON};

use self::{
    conns::{Admission, Admitted, Closed, Limits, Table, Tracked, Tracking},
    metrics::{HttpMetrics, Refusal},
    routes::{route, Access, Peer},
    tls::{Tls, TlsError, TlsFiles, TokenFile},
};
use super::{exposition::render_with, records::RecordHub, watchdog_metrics::WatchdogMetrics};

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Which listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Endpoint {
    Metrics,
    Events,
}

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
        crate::host::heap_churned();
        body
    }
}

/// Where a listener listens: `HOST:PORT`, or `unix:PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Address {
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some(path) = text.strip_prefix("unix:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if !path.starts_with('/') {
                return Err(format!(
                    "{text:?}: a unix socket needs an absolute path (unix:/run/sandwatch/events.sock)"
                ));
            }
            return Ok(Address::Unix(PathBuf::from(path)));
        }
        text.parse::<SocketAddr>()
            .map(Address::Tcp)
            .map_err(|_| format!("{text:?} is neither HOST:PORT (e.g. 127.0.0.1:9433) nor unix:PATH"))
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp(a) => write!(f, "{a}"),
            Address::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// What the server is configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `/metrics`, `/healthz`, `/readyz`.
    pub metrics: SocketAddr,
    /// `/events`; `None`: not served.
    pub events: Option<Address>,
    pub limits: Limits,
    pub tls: Option<TlsFiles>,
    pub token_file: Option<PathBuf>,
}

/// Why the server could not start: one line.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    // Not a `source`: the message says it, and a chain would say it again.
    #[error("cannot listen on {address}: {error}")]
    Bind { address: String, error: std::io::Error },
    #[error("{0} is served by another process (a second agent?)")]
    InUse(String),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("cannot start the HTTP server's thread: {0}")]
    Thread(std::io::Error),
}

/// A socket bound, not served yet.
pub enum Bound {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener, SocketFile),
}

/// A unix socket's file, removed when the server is done with it.
pub struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Bound {
    pub fn bind(address: &Address) -> Result<Self, ServerError> {
        let bind_error = |error| ServerError::Bind { address: address.to_string(), error };
        match address {
            Address::Tcp(a) => std::net::TcpListener::bind(a).map(Bound::Tcp).map_err(bind_error),
            Address::Unix(path) => {
                use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(bind_error)?;
                }
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                    if std::os::unix::net::UnixStream::connect(path).is_ok() {
                        return Err(ServerError::InUse(address.to_string()));
                    }
                    // Left by an agent that did not stop cleanly.
                    std::fs::remove_file(path).map_err(bind_error)?;
                }
                let listener = std::os::unix::net::UnixListener::bind(path).map_err(bind_error)?;
                let file = SocketFile(path.clone());
                // Root only: its records name every namespace's pods.
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_error)?;
                Ok(Bound::Unix(listener, file))
            }
        }
    }

    /// Where clients reach it, for the log.
    pub fn describe(&self) -> String {
        match self {
            Bound::Tcp(l) => l.local_addr().map_or_else(|_| "?".to_string(), |a| a.to_string()),
            Bound::Unix(_, file) => format!("unix:{}", file.0.display()),
        }
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Bound::Tcp(l) => l.local_addr().ok(),
            Bound::Unix(..) => None,
        }
    }
}

/// Both listeners, bound before anything loads (a port in use is an error
/// at start), served once the agent is up.
pub struct Listeners {
    pub metrics: Bound,
    pub events: Option<Bound>,
}

impl Listeners {
    pub fn bind(settings: &Settings) -> Result<Self, ServerError> {
        let metrics = Bound::bind(&Address::Tcp(settings.metrics))?;
        let events = settings.events.as_ref().map(Bound::bind).transpose()?;
        Ok(Self { metrics, events })
    }
}

/// What every connection of the server shares.
struct Shared {
    state: Arc<ServerState>,
    access: Access,
    tls: Option<Tls>,
    metrics: HttpMetrics,
    limits: Limits,
}

/// What clients of `/metrics` must show, read from its files.
pub struct Credentials {
    tls: Option<Tls>,
    token: Option<TokenFile>,
}

impl Credentials {
    /// Reads the TLS files and the token now, before anything loads: a bad
    /// one is an error at start.
    pub fn load(settings: &Settings) -> Result<Self, ServerError> {
        let tls = settings.tls.clone().map(Tls::load).transpose()?;
        let token = settings.token_file.clone().map(TokenFile::load).transpose()?;
        Ok(Self { tls, token })
    }

    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }
}

/// The running server.
pub struct Server {
    done: oneshot::Receiver<()>,
}

impl Server {
    /// Starts serving `listeners` on a thread of its own until `shutdown`.
    pub fn start(
        listeners: Listeners,
        credentials: Credentials,
        limits: Limits,
        state: Arc<ServerState>,
        metrics: HttpMetrics,
        shutdown: CancellationToken,
    ) -> Result<Self, ServerError> {
        let tls = credentials.tls.map(|t| t.counted(metrics.clone()));
        let access = Access { client_certificate: tls.as_ref().is_some_and(Tls::client_ca), token: credentials.token };
        let shared = Arc::new(Shared { state, access, tls, metrics, limits });
        let (done_tx, done) = oneshot::channel();
        std::thread::Builder::new()
            .name("sandwatch-http".into())
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime.block_on(serve(listeners, shared, shutdown)),
                    Err(e) => log::error!("HTTP server: cannot start its runtime: {e}"),
                }
                let _ = done_tx.send(());
            })
            .map_err(ServerError::Thread)?;
        Ok(Self { done })
    }

    /// Waits for the server to stop (after `shutdown`), at most `timeout`.
    pub async fn stopped(self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.done).await.is_ok()
    }
}

async fn serve(listeners: Listeners, shared: Arc<Shared>, shutdown: CancellationToken) {
    let mut loops = tokio::task::JoinSet::new();
    for (bound, endpoint) in
        [(Some(listeners.metrics), Endpoint::Metrics), (listeners.events, Endpoint::Events)].into_iter()
    {
        let Some(bound) = bound else { continue };
        match Listener::from_bound(bound) {
            Ok(listener) => {
                loops.spawn(accept_loop(listener, endpoint, shared.clone(), shutdown.clone()));
            }
            Err(e) => log::error!("HTTP server: cannot serve the {} listener: {e}", endpoint.label()),
        }
    }
    while loops.join_next().await.is_some() {}
}

use crate::labels::Label as _;

/// A listening socket in the server's runtime (a unix socket's file goes
/// with it).
enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, #[allow(dead_code)] SocketFile),
}

impl Listener {
    fn from_bound(bound: Bound) -> std::io::Result<Self> {
        match bound {
            Bound::Tcp(l) => {
                l.set_nonblocking(true)?;
                Ok(Listener::Tcp(tokio::net::TcpListener::from_std(l)?))
            }
            Bound::Unix(l, file) => {
                l.set_nonblocking(true)?;
                Ok(Listener::Unix(tokio::net::UnixListener::from_std(l)?, file))
            }
        }
    }

    async fn accept(&self) -> std::io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept().await?;
                limit_send_buffer(&s);
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l, _) => {
                let (s, _) = l.accept().await?;
                limit_send_buffer(&s);
                Ok(Stream::Unix(s))
            }
        }
    }
}

/// A connection's socket.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// How often connections are checked for their timeouts.
const REAP_EVERY: Duration = Duration::from_millis(250);

/// Backoff after a failed accept (EMFILE: every descriptor in use), from
/// the first to the longest wait, and how often it is logged at most.
const ACCEPT_BACKOFF_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);

async fn accept_loop(listener: Listener, endpoint: Endpoint, shared: Arc<Shared>, shutdown: CancellationToken) {
    let table = Arc::new(Table::new(shared.limits));
    let mut connections = tokio::task::JoinSet::new();
    let mut reap = tokio::time::interval(REAP_EVERY);
    reap.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut backoff = ACCEPT_BACKOFF_FIRST;
    let mut failures_unlogged = 0u64;
    let mut logged: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = reap.tick() => {
                for why in table.reap() {
                    shared.metrics.closed(endpoint, why);
                }
                shared.metrics.set_open(endpoint, table.len());
                continue;
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok(stream) => {
                backoff = ACCEPT_BACKOFF_FIRST;
                stream
            }
            Err(e) => {
                shared.metrics.accept_error(endpoint);
                failures_unlogged += 1;
                if logged.is_none_or(|at| at.elapsed() >= ACCEPT_LOG_EVERY) {
                    log::warn!(
                        "{} listener: accept failed {failures_unlogged} time(s) ({e}); backing off",
                        endpoint.label()
                    );
                    failures_unlogged = 0;
                    logged = Some(Instant::now());
                }
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        let conn = match table.admit() {
            Admission::Refused => {
                shared.metrics.refused(endpoint, Refusal::ConnectionCap);
                continue;
            }
            Admission::Admitted { conn, evicted } => {
                if evicted {
                    shared.metrics.closed(endpoint, Closed::Evicted);
                }
                conn
            }
        };
        shared.metrics.set_open(endpoint, table.len());
        let (table, shared, shutdown) = (table.clone(), shared.clone(), shutdown.clone());
        connections.spawn(async move {
            let cancel = conn.cancel.clone();
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = serve_connection(stream, endpoint, &conn, &shared, &shutdown, table.clock()) => {}
            }
            table.remove(conn.id);
        });
    }
    while connections.join_next().await.is_some() {}
    shared.metrics.set_open(endpoint, 0);
}

async fn serve_connection(
    stream: Stream,
    endpoint: Endpoint,
    conn: &Admitted,
    shared: &Arc<Shared>,
    shutdown: &CancellationToken,
    clock: conns::Clock,
) {
    let io = Tracked::new(stream, conn.activity.clone(), clock);
    match (endpoint, &shared.tls) {
        (Endpoint::Metrics, Some(tls)) => match tokio_rustls::TlsAcceptor::from(tls.config()).accept(io).await {
            Ok(stream) => {
                let verified = stream.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty());
                let peer = Peer { verified_certificate: verified };
                http(stream, endpoint, peer, conn, shared, shutdown, clock).await;
            }
            Err(e) => {
                let why = match e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
                    Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented) => {
                        Refusal::ClientCertificate
                    }
                    _ => Refusal::TlsHandshake,
                };
                shared.metrics.refused(endpoint, why);
                log::debug!("TLS handshake failed: {e}");
            }
        },
        _ => http(io, endpoint, Peer::default(), conn, shared, shutdown, clock).await,
    }
}

/// Requests are a line; what a connection buffers stays small, so a
/// client that stops reading backs up into its own queue (counted), not
/// into the agent's memory.
const MAX_CONNECTION_BUFFER: usize = 16 * 1024;

/// How long open connections may finish after shutdown: a follower of
/// /events gets the records queued for it, a scrape in flight completes.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

async fn http<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: S,
    endpoint: Endpoint,
    peer: Peer,
    conn: &Admitted,
    shared: &Arc<Shared>,
    shutdown: &CancellationToken,
    clock: conns::Clock,
) {
    let (activity, shared) = (conn.activity.clone(), shared.clone());
    let svc = service_fn(move |req| {
        activity.request_started();
        let (parts, body) = route(&shared.state, endpoint, &shared.access, &shared.metrics, peer, &req).into_parts();
        let body = Tracking::new(body, activity.clone(), clock);
        async move { Ok::<_, Infallible>(Response::from_parts(parts, body)) }
    });
    let conn = http1::Builder::new().max_buf_size(MAX_CONNECTION_BUFFER).serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(SHUTDOWN_GRACE, conn.as_mut()).await {
                Ok(ended) => ended,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = ended {
        log::debug!("HTTP connection ended: {e}");
    }
}

/// The kernel's send buffer of a connection: fixed rather than
/// autotuned (up to `tcp_wmem`'s 4 MiB), so that stuck clients of
/// `/events` cannot pile megabytes of socket memory onto the agent's
/// memory cgroup; a scrape of /metrics only takes a few more writes.
const SEND_BUFFER: libc::c_int = 64 * 1024;

fn limit_send_buffer(socket: &impl std::os::fd::AsRawFd) {
    let size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: setsockopt on a socket we own, with a valid int and its size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&SEND_BUFFER as *const libc::c_int).cast(),
            size,
        )
    };
    if rc != 0 {
        log::debug!("cannot set SO_SNDBUF: {}", std::io::Error::last_os_error());
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn addresses_are_a_port_or_a_unix_path_and_nothing_else() {
        assert_eq!(Address::parse("127.0.0.1:9433"), Ok(Address::Tcp(([127, 0, 0, 1], 9433).into())));
        assert_eq!(
            Address::parse("unix:/run/sandwatch/events.sock"),
            Ok(Address::Unix(PathBuf::from("/run/sandwatch/events.sock")))
        );
        assert_eq!(Address::parse("unix:///run/x.sock"), Ok(Address::Unix(PathBuf::from("/run/x.sock"))));
        for bad in ["unix:relative.sock", "localhost", "http://127.0.0.1:9433", ""] {
            let e = Address::parse(bad).expect_err(bad);
            assert!(!e.contains('\n'), "{e}");
        }
        assert_eq!(Address::parse("unix:/a/b").map(|a| a.to_string()), Ok("unix:/a/b".to_string()));
    }

    /// Guards: the OS error said twice, once by the message and once as
    /// its source, in the agent's one-line error.
    #[test]
    fn a_socket_that_cannot_be_made_is_one_line_saying_why_once() {
        let file = std::env::temp_dir().join(format!("sandwatch-not-a-dir-{}", std::process::id()));
        std::fs::write(&file, "").unwrap();
        let address = Address::Unix(file.join("events.sock"));
        let Err(e) = Bound::bind(&address) else { panic!("bound below a file") };
        let line = crate::one_line(&anyhow::Error::from(e));
        std::fs::remove_file(&file).unwrap();
        assert!(line.starts_with(&format!("cannot listen on {address}: ")), "{line}");
        let os = line.rsplit(": ").next().unwrap();
        assert_eq!(line.matches(os).count(), 1, "{line}");
    }
}
