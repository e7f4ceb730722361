//! What the agent exposes: Prometheus metrics and the HTTP endpoints.
pub mod events;
pub mod metrics;
pub mod pods;
pub mod runtime;
pub mod server;
