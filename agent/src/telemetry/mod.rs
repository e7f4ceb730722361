//! What the agent tells the world: Prometheus metrics, log lines, event
//! records, and the HTTP endpoints that serve them. The watchdog's
//! findings reach all three consumers through [`Outputs`].
pub mod logs;
pub mod metrics;
pub mod pod_series;
pub mod records;
pub mod server;
pub mod watchdog_metrics;

use std::sync::Arc;

use crate::watchdog::Finding;

/// The consumers of the watchdog's findings.
#[derive(Clone)]
pub struct Outputs {
    pub metrics: watchdog_metrics::WatchdogMetrics,
    /// Event records; `None`: none are kept.
    pub records: Option<Arc<records::RecordHub>>,
}

impl Outputs {
    /// Counts, logs and records each finding, in order.
    pub fn publish(&self, findings: impl IntoIterator<Item = Finding>) {
        for finding in findings {
            self.publish_one(&finding);
        }
    }

    pub fn publish_one(&self, finding: &Finding) {
        self.metrics.observe(finding);
        logs::log(finding);
        if let Some(hub) = &self.records {
            hub.publish_finding(finding);
        }
    }
}
