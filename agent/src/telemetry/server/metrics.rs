//! The HTTP server's own counters: connections open, closed by the agent
//! and refused, by listener and reason.

use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Registry};
use strum::IntoEnumIterator as _;

use super::{conns::Closed, Endpoint};
use crate::{
    catalogue,
    labels::{all, Label as _},
};

/// Why a client was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Refusal {
    /// The listener was at its connection cap with every one being served.
    ConnectionCap,
    /// The TLS handshake failed (not TLS, no common version or cipher,
    /// timed out).
    TlsHandshake,
    /// `/metrics` without a client certificate the CA verified, or a
    /// handshake with one it did not.
    ClientCertificate,
    /// `/metrics` without the bearer token.
    Token,
}

/// Whether a reload of the TLS files took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Reload {
    Ok,
    Error,
}

#[derive(Clone)]
pub struct HttpMetrics {
    open: IntGaugeVec,
    closed: IntCounterVec,
    refused: IntCounterVec,
    accept_errors: IntCounterVec,
    reloads: IntCounterVec,
    scrapes: IntCounter,
    renders: IntCounter,
}

impl HttpMetrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let m = Self {
            open: catalogue::HTTP_CONNECTIONS.gauge_vec(registry)?,
            closed: catalogue::HTTP_CONNECTIONS_CLOSED_TOTAL.counter_vec(registry)?,
            refused: catalogue::HTTP_REFUSED_TOTAL.counter_vec(registry)?,
            accept_errors: catalogue::HTTP_ACCEPT_ERRORS_TOTAL.counter_vec(registry)?,
            reloads: catalogue::TLS_RELOADS_TOTAL.counter_vec(registry)?,
            scrapes: catalogue::HTTP_SCRAPES_TOTAL.counter(registry)?,
            renders: catalogue::HTTP_METRICS_RENDERS_TOTAL.counter(registry)?,
        };
        for listener in all::<Endpoint>() {
            m.open.with_label_values(&[listener]);
            m.accept_errors.with_label_values(&[listener]);
            for reason in all::<Closed>() {
                m.closed.with_label_values(&[listener, reason]);
            }
        }
        for reason in Refusal::iter() {
            // Only the metrics listener speaks TLS and asks for credentials.
            let listeners: &[Endpoint] = if reason == Refusal::ConnectionCap {
                &[Endpoint::Metrics, Endpoint::Events]
            } else {
                &[Endpoint::Metrics]
            };
            for listener in listeners {
                m.refused.with_label_values(&[listener.label(), reason.label()]);
            }
        }
        for result in all::<Reload>() {
            m.reloads.with_label_values(&[result]);
        }
        Ok(m)
    }

    pub fn set_open(&self, listener: Endpoint, n: usize) {
        self.open.with_label_values(&[listener.label()]).set(n as i64);
    }

    pub fn closed(&self, listener: Endpoint, why: Closed) {
        self.closed.with_label_values(&[listener.label(), why.label()]).inc();
    }

    pub fn refused(&self, listener: Endpoint, why: Refusal) {
        self.refused.with_label_values(&[listener.label(), why.label()]).inc();
    }

    pub fn accept_error(&self, listener: Endpoint) {
        self.accept_errors.with_label_values(&[listener.label()]).inc();
    }

    /// A scrape of `/metrics` was let in.
    pub fn scraped(&self) {
        self.scrapes.inc();
    }

    /// A body was rendered for the scrapes waiting.
    pub fn rendered(&self) {
        self.renders.inc();
    }

    pub fn reloaded(&self, result: Reload) {
        self.reloads.with_label_values(&[result.label()]).inc();
    }
}
