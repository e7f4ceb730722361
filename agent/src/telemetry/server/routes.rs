//! HTTP endpoints: `/metrics` (Prometheus text format), `/healthz` (the
//! process is alive), `/readyz` (programs attached and the reader running),
//! `/events` (event records as JSON lines: the history, and with
//! `?follow=1` every record from then on).

use std::{
    convert::Infallible,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use http_body_util::{combinators::UnsyncBoxBody, BodyExt as _, Full};
use hyper::{body::Bytes, server::conn::http1, service::service_fn, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{
    metrics::render_with,
    records::{Filter, Kind, RecordHub},
    watchdog_metrics::WatchdogMetrics,
};

pub struct ServerState {
    pub registry: Registry,
    pub ready: AtomicBool,
    /// Event records for `/events`; `None`: 404.
    pub events: Option<Arc<RecordHub>>,
    /// The per-pod family, kept as text outside the registry.
    pub pods: Option<WatchdogMetrics>,
}

impl ServerState {
    pub fn new(registry: Registry) -> Arc<Self> {
        Self::agent(registry, None, None)
    }

    pub fn agent(registry: Registry, events: Option<Arc<RecordHub>>, pods: Option<WatchdogMetrics>) -> Arc<Self> {
        Arc::new(Self { registry, ready: AtomicBool::new(false), events, pods })
    }

    /// What `/metrics` serves.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        let kept = match &self.pods {
            Some(pods) => vec![pods.pod_series_text()?],
            None => Vec::new(),
        };
        render_with(&self.registry, &kept)
    }
}

/// Requests are a line; what a connection buffers stays small, so a
/// client that stops reading backs up into its own queue (counted), not
/// into the agent's memory.
const MAX_CONNECTION_BUFFER: usize = 16 * 1024;

/// How long open connections may finish after shutdown: a follower of
/// /events gets the records queued for it, a scrape in flight completes.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Serves until `shutdown`, then lets open connections finish (at most
/// SHUTDOWN_GRACE; idle keep-alive ones close at once).
pub async fn serve(listener: TcpListener, state: Arc<ServerState>, shutdown: CancellationToken) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
            // Reap finished connections as we go.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                log::warn!("accept failed: {e}");
                continue;
            }
        };
        limit_send_buffer(&stream);
        let state = state.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let svc = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(&state, &req)) }
            });
            let conn =
                http1::Builder::new().max_buf_size(MAX_CONNECTION_BUFFER).serve_connection(TokioIo::new(stream), svc);
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
        });
    }
    while connections.join_next().await.is_some() {}
}

/// The kernel's send buffer of a connection: fixed rather than
/// autotuned (up to `tcp_wmem`'s 4 MiB), so that stuck clients of
/// `/events` cannot pile megabytes of socket memory onto the agent's
/// memory cgroup; a scrape of /metrics only takes a few more writes.
const SEND_BUFFER: libc::c_int = 64 * 1024;

fn limit_send_buffer(stream: &tokio::net::TcpStream) {
    use std::os::fd::AsRawFd as _;
    let size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: setsockopt on a socket we own, with a valid int and its size.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
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

type Body = UnsyncBoxBody<Bytes, Infallible>;

fn text(status: StatusCode, body: impl Into<Bytes>, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(Full::new(body.into()).boxed_unsync());
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}

const PLAIN: &str = "text/plain; charset=utf-8";

fn route<B>(state: &ServerState, req: &Request<B>) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n", PLAIN);
    }
    match req.uri().path() {
        "/metrics" => match state.render() {
            Ok(body) => text(StatusCode::OK, body, "text/plain; version=0.0.4; charset=utf-8"),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"), PLAIN),
        },
        "/healthz" => text(StatusCode::OK, "ok\n", PLAIN),
        "/readyz" if state.ready.load(Ordering::Relaxed) => text(StatusCode::OK, "ready\n", PLAIN),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n", PLAIN),
        "/events" => match &state.events {
            Some(hub) => events(hub, req.uri().query().unwrap_or("")),
            None => text(StatusCode::NOT_FOUND, "no event stream here\n", PLAIN),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n", PLAIN),
    }
}

/// The media type of the stream: one JSON object per line.
pub const NDJSON: &str = "application/x-ndjson";

fn events(hub: &RecordHub, query: &str) -> Response<Body> {
    let (filter, follow) = match parse_query(query) {
        Ok(q) => q,
        Err(line) => return text(StatusCode::BAD_REQUEST, format!("{line}\n"), PLAIN),
    };
    match hub.subscribe(filter, follow) {
        Ok(subscription) => {
            let mut resp = Response::new(subscription.boxed_unsync());
            if let Ok(v) = hyper::header::HeaderValue::from_str(NDJSON) {
                resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
            }
            resp
        }
        // Too many followers, or shutting down: try again later.
        Err(refused) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{refused}\n"), PLAIN),
    }
}

/// `follow=1|0`, `kind=a,b`, `namespace=x`, `pod=y`; anything else is one
/// line saying what is wrong.
pub fn parse_query(query: &str) -> Result<(Filter, bool), String> {
    let mut filter = Filter::default();
    let mut follow = false;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
        let value =
            percent_decode(raw).ok_or_else(|| format!("query parameter {key:?}: bad percent-encoding in {raw:?}"))?;
        match key {
            "follow" => {
                follow = match value.as_str() {
                    "1" | "true" => true,
                    "0" | "false" => false,
                    _ => return Err(format!("follow={value:?}: use follow=1 or follow=0")),
                }
            }
            "kind" => {
                for k in value.split(',').filter(|k| !k.is_empty()) {
                    let kind = k.parse::<Kind>().map_err(|_| {
                        let known: Vec<&str> = crate::labels::all::<Kind>().collect();
                        format!("kind={k:?} is not a record kind (one of {})", known.join(", "))
                    })?;
                    filter.kinds.push(kind);
                }
            }
            "namespace" if !value.is_empty() => filter.namespace = Some(value),
            "pod" if !value.is_empty() => filter.pod = Some(value),
            "namespace" | "pod" => return Err(format!("{key:?} needs a value")),
            _ => return Err(format!("unknown query parameter {key:?} (use follow, kind, namespace, pod)")),
        }
    }
    Ok((filter, follow))
}

/// `%XX` and `+` decoded; `None` for a broken escape or non-UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_or_say_what_is_wrong_in_one_line() {
        let (f, follow) = parse_query("follow=1&kind=oom_kill,sandbox_death&namespace=shop&pod=web%2D1").unwrap();
        assert!(follow);
        assert_eq!(f.kinds, vec![Kind::OomKill, Kind::SandboxDeath]);
        assert_eq!(f.namespace.as_deref(), Some("shop"));
        assert_eq!(f.pod.as_deref(), Some("web-1"));
        assert_eq!(parse_query("").unwrap(), (Filter::default(), false));
        for (query, needle) in [
            ("follow=yes", "follow=1"),
            ("kind=oops", "not a record kind"),
            ("colour=red", "unknown query parameter"),
            ("pod=%zz", "percent-encoding"),
            ("namespace=", "needs a value"),
            // Found by fuzzing: a key with a line break broke the one line.
            ("ko\r\r\n\0=%{", "percent-encoding"),
            ("pod\n", "unknown query parameter"),
        ] {
            let line = parse_query(query).unwrap_err();
            assert!(line.contains(needle) && !line.contains('\n'), "{query}: {line}");
        }
    }
}
