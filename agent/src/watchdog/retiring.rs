//! A torn-down pod's per-pod series stay for a grace (`--pod-series-ttl`),
//! so that Prometheus scrapes their last increment and late events still
//! count; then a [`Finding::PodSeriesExpired`] lets them go. Beyond
//! [`MAX_RETIRING`] pods in their grace, the oldest goes early.

use std::collections::VecDeque;

use super::Finding;

/// Torn-down pods whose series wait for their grace, at most.
const MAX_RETIRING: usize = 16384;

#[derive(Debug)]
pub struct Retiring {
    /// Oldest first, with when their series expire.
    pods: VecDeque<(String, u64)>,
    /// `None`: series are kept (until the cap evicts them).
    ttl_ns: Option<u64>,
}

impl Retiring {
    pub fn new(ttl_ns: Option<u64>) -> Self {
        Self { pods: VecDeque::new(), ttl_ns }
    }

    /// A pod's cgroup went at `now_ns`: its series go after the TTL (also
    /// those that appear meanwhile, from an OOM event or names still awaited).
    pub fn pod_gone(&mut self, pod_uid: String, now_ns: u64, out: &mut Vec<Finding>) {
        let Some(ttl) = self.ttl_ns else { return };
        if self.pods.len() >= MAX_RETIRING {
            // Churn beyond the bound: the oldest goes early.
            if let Some((oldest, _)) = self.pods.pop_front() {
                out.push(Finding::PodSeriesExpired { pod_uid: oldest });
            }
        }
        self.pods.push_back((pod_uid, now_ns.saturating_add(ttl)));
    }

    /// The pods whose grace is over by `now_ns`.
    pub fn retire(&mut self, now_ns: u64, out: &mut Vec<Finding>) {
        while self.pods.front().is_some_and(|(_, at)| *at <= now_ns) {
            if let Some((pod_uid, _)) = self.pods.pop_front() {
                out.push(Finding::PodSeriesExpired { pod_uid });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expired(out: &[Finding]) -> Vec<&str> {
        out.iter()
            .filter_map(|f| match f {
                Finding::PodSeriesExpired { pod_uid } => Some(pod_uid.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn series_go_after_their_grace_in_the_order_their_pods_went() {
        let mut r = Retiring::new(Some(100));
        let mut out = Vec::new();
        r.pod_gone("a".into(), 0, &mut out);
        r.pod_gone("b".into(), 50, &mut out);
        r.retire(99, &mut out);
        assert!(out.is_empty(), "in their grace");
        r.retire(100, &mut out);
        assert_eq!(expired(&out), ["a"]);
        r.retire(1000, &mut out);
        assert_eq!(expired(&out), ["a", "b"]);
        let mut kept = Retiring::new(None);
        kept.pod_gone("c".into(), 0, &mut out);
        kept.retire(u64::MAX, &mut out);
        assert_eq!(expired(&out).len(), 2, "without a TTL series are kept");
    }
}
