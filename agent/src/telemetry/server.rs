//! HTTP endpoints: `/metrics` (Prometheus text format), `/healthz` (the
//! process is alive), `/readyz` (programs attached and the reader running).

use std::{
    convert::Infallible,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use http_body_util::Full;
use hyper::{body::Bytes, server::conn::http1, service::service_fn, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::metrics::render;

pub struct ServerState {
    pub registry: Registry,
    pub ready: AtomicBool,
}

impl ServerState {
    pub fn new(registry: Registry) -> Arc<Self> {
        Arc::new(Self {
            registry,
            ready: AtomicBool::new(false),
        })
    }
}

/// Serves until `shutdown`; connections in flight finish on their own.
pub async fn serve(listener: TcpListener, state: Arc<ServerState>, shutdown: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                log::warn!("accept failed: {e}");
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(&state, &req)) }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                log::debug!("HTTP connection ended: {e}");
            }
        });
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}

const PLAIN: &str = "text/plain; charset=utf-8";

fn route<B>(state: &ServerState, req: &Request<B>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n", PLAIN);
    }
    match req.uri().path() {
        "/metrics" => match render(&state.registry) {
            Ok(body) => text(StatusCode::OK, body, "text/plain; version=0.0.4; charset=utf-8"),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"), PLAIN),
        },
        "/healthz" => text(StatusCode::OK, "ok\n", PLAIN),
        "/readyz" if state.ready.load(Ordering::Relaxed) => text(StatusCode::OK, "ready\n", PLAIN),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n", PLAIN),
        _ => text(StatusCode::NOT_FOUND, "not found\n", PLAIN),
    }
}
