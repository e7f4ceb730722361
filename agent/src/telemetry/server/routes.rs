//! What each listener answers. The metrics listener: `/metrics`
//! (Prometheus text format; behind the client certificate or token when
//! configured), `/healthz` (the process is alive), `/readyz` (programs
//! attached and the reader running). The events listener: `/events`
//! (event records as JSON lines: the history, and with `?follow=1` every
//! record from then on), which names every namespace's pods and processes
//! and so is kept off the pod network by default.

use std::sync::atomic::Ordering;

use http_body_util::{BodyExt as _, Full};
use hyper::{body::Bytes, Method, Request, Response, StatusCode};

use super::{
    metrics::{HttpMetrics, Refusal},
    tls::TokenFile,
    Body, Endpoint, ServerState,
};
use crate::telemetry::records::{Filter, Kind, RecordHub};

pub(super) fn text(status: StatusCode, body: impl Into<Bytes>, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(Full::new(body.into()).boxed_unsync());
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}

const PLAIN: &str = "text/plain; charset=utf-8";

/// Who is asking, as far as the connection says.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Peer {
    /// It presented a client certificate that the CA verified.
    pub verified_certificate: bool,
    /// Its address (TCP): scrapers are told apart by it.
    pub ip: Option<std::net::IpAddr>,
}

/// What `/metrics` requires of a client.
#[derive(Default)]
pub(super) struct Access {
    /// A verified client certificate (`--tls-client-ca-file`).
    pub client_certificate: bool,
    /// `Authorization: Bearer` with this file's token (`--auth-token-file`).
    pub token: Option<TokenFile>,
}

impl Access {
    /// `None` if the request may read metrics; otherwise why not.
    fn refuses<B>(&self, peer: Peer, req: &Request<B>) -> Option<Refusal> {
        if self.client_certificate && !peer.verified_certificate {
            return Some(Refusal::ClientCertificate);
        }
        let token = self.token.as_ref()?;
        let sent = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        (!token.matches(sent.trim())).then_some(Refusal::Token)
    }
}

pub(super) async fn route<B>(
    state: &std::sync::Arc<ServerState>,
    endpoint: Endpoint,
    access: &Access,
    metrics: &HttpMetrics,
    peer: Peer,
    req: &Request<B>,
) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n", PLAIN);
    }
    match (endpoint, req.uri().path()) {
        (Endpoint::Metrics, "/metrics") => {
            if let Some(refusal) = access.refuses(peer, req) {
                metrics.refused(endpoint, refusal);
                return match refusal {
                    Refusal::Token => {
                        let mut resp = text(StatusCode::UNAUTHORIZED, "a bearer token is required\n", PLAIN);
                        resp.headers_mut().insert(
                            hyper::header::WWW_AUTHENTICATE,
                            hyper::header::HeaderValue::from_static("Bearer realm=\"sandwatch\""),
                        );
                        resp
                    }
                    _ => text(StatusCode::FORBIDDEN, "a client certificate is required\n", PLAIN),
                };
            }
            match state.scrape(metrics, peer.ip).await {
                Ok(body) => text(StatusCode::OK, body, "text/plain; version=0.0.4; charset=utf-8"),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"), PLAIN),
            }
        }
        (Endpoint::Metrics, "/healthz") => text(StatusCode::OK, "ok\n", PLAIN),
        (Endpoint::Metrics, "/readyz") if state.ready.load(Ordering::Relaxed) => text(StatusCode::OK, "ready\n", PLAIN),
        (Endpoint::Metrics, "/readyz") => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n", PLAIN),
        (Endpoint::Metrics, "/events") => {
            text(StatusCode::NOT_FOUND, "/events is served on the events listener (--events-listen)\n", PLAIN)
        }
        (Endpoint::Events, "/events") => match &state.events {
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
