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
//!
//! This module starts the server and runs its accept loops and
//! connections; [`sockets`] binds and accepts, [`state`] is what is
//! served, [`routes`] answers each request, [`tls`] holds the
//! certificates.

pub mod conns;
pub mod metrics;
mod routes;
mod sockets;
mod state;
pub mod tls;

use std::{
    convert::Infallible,
    net::SocketAddr,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use http_body_util::combinators::UnsyncBoxBody;
use hyper::{body::Bytes, server::conn::http1, service::service_fn, Response};
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncRead, AsyncWrite},
    sync::oneshot,
};
use tokio_util::sync::CancellationToken;

pub use routes::{parse_query, NDJSON};
pub use sockets::{Address, Bound, Listeners, SocketFile};
pub use state::ServerState;

use self::{
    conns::{Admission, Admitted, Closed, Limits, Table, Tracked, Tracking},
    metrics::{HttpMetrics, Refusal},
    routes::{route, Access, Peer},
    sockets::{Listener, Stream},
    tls::{Tls, TlsError, TlsFiles, TokenFile},
};
use crate::labels::Label as _;

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Which listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Endpoint {
    Metrics,
    Events,
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
                // Below the reader and the watchdog: a flood of clients
                // within the agent's CPU limit takes what they leave.
                lower_priority();
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    // The renders' thread too.
                    .on_thread_start(lower_priority)
                    .max_blocking_threads(2)
                    .build();
                match runtime {
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

/// The nice value of the server's threads: the ring-buffer reader and the
/// watchdog (nice 0) come first when the agent's CPU is short; with
/// nothing else to do the server has it all.
const SERVER_NICE: libc::c_int = 10;

/// Lowers the calling thread's priority to [`SERVER_NICE`] (Linux nice
/// values are per thread); anyone may lower their own.
fn lower_priority() {
    // SAFETY: setpriority on the calling thread (who 0), no pointers.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, SERVER_NICE) } != 0 {
        log::debug!("HTTP server: cannot lower its priority: {}", std::io::Error::last_os_error());
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
    // Responses of `/events` are streams: no response timeout there.
    let limits = match endpoint {
        Endpoint::Metrics => shared.limits,
        Endpoint::Events => Limits { response_timeout: None, ..shared.limits },
    };
    let table = Arc::new(Table::new(limits));
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
    let ip = match &stream {
        Stream::Tcp(s) => s.peer_addr().ok().map(|a| a.ip()),
        Stream::Unix(_) => None,
    };
    let io = Tracked::new(stream, conn.activity.clone(), clock);
    match (endpoint, &shared.tls) {
        (Endpoint::Metrics, Some(tls)) => match tokio_rustls::TlsAcceptor::from(tls.config()).accept(io).await {
            Ok(stream) => {
                let verified = stream.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty());
                let peer = Peer { verified_certificate: verified, ip };
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
        _ => http(io, endpoint, Peer { verified_certificate: false, ip }, conn, shared, shutdown, clock).await,
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
        activity.request_started(clock.now());
        let (activity, shared) = (activity.clone(), shared.clone());
        async move {
            let (parts, body) =
                route(&shared.state, endpoint, &shared.access, &shared.metrics, peer, &req).await.into_parts();
            let body = Tracking::new(body, activity, clock);
            Ok::<_, Infallible>(Response::from_parts(parts, body))
        }
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
