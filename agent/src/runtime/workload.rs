//! Which workload a pod belongs to, from the labels its controller puts on
//! it (the CRI hands them over with the pod sandbox): a Deployment's pods
//! are replaced with new names and UIDs, but they keep being the
//! Deployment's, and that is what an operator asks about when pods keep
//! dying. Pure; the rules follow the controllers' own naming:
//!
//! | labels on the pod | workload | its name |
//! |---|---|---|
//! | `pod-template-hash=H` (the Deployment controller's) | Deployment | the pod's name without `-H-xxxxx` |
//! | `controller-revision-hash` and `statefulset.kubernetes.io/pod-name` | StatefulSet | the pod's name without `-N` (its ordinal) |
//! | `controller-revision-hash` and `pod-template-generation` | DaemonSet | the pod's name without `-xxxxx` |
//! | `batch.kubernetes.io/job-name=J` or `job-name=J`, J = `C-T` with T the scheduled time in minutes (8 or more digits) | CronJob | `C` |
//! | the same, otherwise | Job | `J` |
//! | none of these | Pod | the pod's name |
//!
//! A pod whose name does not follow its controller's pattern is its own
//! workload (kind Pod): never a guessed name.

use std::collections::HashMap;

use crate::events::runtime::{Workload, WorkloadKind};

/// `name` without `-suffix`, where the suffix satisfies `ok`.
fn strip_suffix(name: &str, ok: impl Fn(&str) -> bool) -> Option<&str> {
    let (head, tail) = name.rsplit_once('-')?;
    (!head.is_empty() && ok(tail)).then_some(head)
}

/// The random suffix the ReplicaSet and DaemonSet controllers add (5
/// lowercase alphanumerics, no vowels).
fn generated(s: &str) -> bool {
    s.len() == 5 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

pub fn workload(pod_name: &str, labels: &HashMap<String, String>) -> Workload {
    let label = |k: &str| labels.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let named = |kind, name: &str| Workload { kind, name: name.to_string() };
    if let Some(hash) = label("pod-template-hash") {
        let deployment = strip_suffix(pod_name, generated).and_then(|rs| rs.strip_suffix(&format!("-{hash}")));
        if let Some(d) = deployment.filter(|d| !d.is_empty()) {
            return named(WorkloadKind::Deployment, d);
        }
    } else if label("controller-revision-hash").is_some() {
        if label("statefulset.kubernetes.io/pod-name") == Some(pod_name) {
            if let Some(s) = strip_suffix(pod_name, |t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())) {
                return named(WorkloadKind::StatefulSet, s);
            }
        } else if label("pod-template-generation").is_some() {
            if let Some(d) = strip_suffix(pod_name, generated) {
                return named(WorkloadKind::DaemonSet, d);
            }
        }
    } else if let Some(job) = label("batch.kubernetes.io/job-name").or_else(|| label("job-name")) {
        if let Some(cron) = strip_suffix(job, |t| t.len() >= 8 && t.bytes().all(|b| b.is_ascii_digit())) {
            return named(WorkloadKind::CronJob, cron);
        }
        return named(WorkloadKind::Job, job);
    }
    named(WorkloadKind::Pod, pod_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn each_controllers_pods_read_as_its_workload() {
        let w = |kind, name: &str| Workload { kind, name: name.to_string() };
        use WorkloadKind::*;
        // As the kubelet hands them to the CRI: the pod's labels, plus its own.
        let deploy = labels(&[("app", "web"), ("pod-template-hash", "7d4b9c8f6"), ("io.kubernetes.pod.name", "x")]);
        assert_eq!(workload("web-frontend-7d4b9c8f6-x2k9p", &deploy), w(Deployment, "web-frontend"));
        let sts = labels(&[
            ("controller-revision-hash", "db-5c7d8f9b4"),
            ("statefulset.kubernetes.io/pod-name", "db-12"),
            ("apps.kubernetes.io/pod-index", "12"),
        ]);
        assert_eq!(workload("db-12", &sts), w(StatefulSet, "db"));
        let ds = labels(&[("controller-revision-hash", "6b5f4c8d7"), ("pod-template-generation", "3")]);
        assert_eq!(workload("node-exporter-q7x2m", &ds), w(DaemonSet, "node-exporter"));
        let job = labels(&[("batch.kubernetes.io/job-name", "migrate-42"), ("job-name", "migrate-42")]);
        assert_eq!(workload("migrate-42-abcde", &job), w(Job, "migrate-42"));
        let cron = labels(&[("job-name", "backup-28947390")]);
        assert_eq!(workload("backup-28947390-kq2xv", &cron), w(CronJob, "backup"));
        assert_eq!(workload("debug", &labels(&[("run", "debug")])), w(Pod, "debug"));
        // A name off its controller's pattern is its own workload.
        assert_eq!(workload("odd", &deploy), w(Pod, "odd"));
        assert_eq!(workload("7d4b9c8f6-x2k9p", &deploy), w(Pod, "7d4b9c8f6-x2k9p"));
        let label: &str = StatefulSet.into();
        assert_eq!(label, "StatefulSet");
    }
}
