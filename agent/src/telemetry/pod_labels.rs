//! Which pod and container a finding is about, as every output says it:
//! the labels of the per-pod series and the pod fields of event records
//! (and so of log lines) are read from [`PodLabels`], one place, so that
//! a field added or renamed is added or renamed everywhere at once.
//!
//! The series carry the pod's identity that lasts across its containers'
//! restarts ([`PodLabels::SERIES`]): the container's runtime id changes at
//! every restart, so a counter labelled with it would start a new series
//! at each one, and a crash loop would read as many series of one exit
//! each, which `increase()` never counts. The id stays in records and logs.

use super::records::wire::PodFields;
use crate::model::{Names, PodRef, QosClass};

/// The pod fields of a finding, as far as the runtime named them (empty
/// strings where nothing is known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodLabels<'a> {
    pub pod_uid: &'a str,
    pub namespace: &'a str,
    pub pod: &'a str,
    pub container: &'a str,
    /// The container's runtime id: new at every restart.
    pub container_id: &'a str,
    pub qos: Option<QosClass>,
    pub workload: &'a str,
    pub workload_kind: &'a str,
}

impl<'a> PodLabels<'a> {
    /// The label names of every per-pod series, first and in this order
    /// (the catalogue's per-pod families begin with them; a test checks).
    pub const SERIES: [&'static str; 6] = ["pod_uid", "namespace", "pod", "container", "workload", "workload_kind"];

    pub fn of(pod: &'a PodRef, names: &'a Names) -> Self {
        Self {
            pod_uid: &pod.pod_uid,
            namespace: &names.namespace,
            pod: &names.pod,
            container: &names.container,
            container_id: pod.container_id.as_deref().unwrap_or(""),
            qos: pod.qos,
            workload: &names.workload,
            workload_kind: &names.workload_kind,
        }
    }

    /// The values of [`Self::SERIES`], then `extra`: a per-pod series' labels.
    pub fn series(&self, extra: &[&str]) -> Vec<String> {
        let mut values = Vec::with_capacity(Self::SERIES.len() + extra.len());
        values.extend(
            [self.pod_uid, self.namespace, self.pod, self.container, self.workload, self.workload_kind]
                .map(str::to_string),
        );
        values.extend(extra.iter().map(|v| v.to_string()));
        values
    }
}

/// A record leaves out what is not known.
impl From<PodLabels<'_>> for PodFields {
    fn from(p: PodLabels<'_>) -> Self {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        PodFields {
            pod_uid: some(p.pod_uid),
            namespace: some(p.namespace),
            pod: some(p.pod),
            container: some(p.container),
            container_id: some(p.container_id),
            qos_class: p.qos,
            workload: some(p.workload),
            workload_kind: some(p.workload_kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{catalogue, model::QosClass};

    fn pod() -> (PodRef, Names) {
        let pod = PodRef { pod_uid: "u1".into(), qos: Some(QosClass::Burstable), container_id: Some("c1".into()) };
        let names = Names {
            namespace: "shop".into(),
            pod: "web-1".into(),
            container: "app".into(),
            workload: "web".into(),
            workload_kind: "Deployment".into(),
        };
        (pod, names)
    }

    #[test]
    fn series_and_records_read_the_same_fields() {
        let (pod, names) = pod();
        let labels = PodLabels::of(&pod, &names);
        assert_eq!(labels.series(&["error"]), ["u1", "shop", "web-1", "app", "web", "Deployment", "error"]);
        let fields = PodFields::from(labels);
        let record = [
            &fields.pod_uid,
            &fields.namespace,
            &fields.pod,
            &fields.container,
            &fields.workload,
            &fields.workload_kind,
        ];
        let series = labels.series(&[]);
        assert_eq!(record.map(|f| f.clone().unwrap_or_default()).to_vec(), series, "one source for both");
        assert_eq!((fields.container_id.as_deref(), fields.qos_class), (Some("c1"), Some(QosClass::Burstable)));
        // Unknowns are left out of records, empty in labels.
        let bare = PodRef { pod_uid: "u2".into(), qos: None, container_id: None };
        let unnamed = Names::default();
        let fields = PodFields::from(PodLabels::of(&bare, &unnamed));
        assert_eq!(fields, PodFields { pod_uid: Some("u2".into()), ..PodFields::default() });
        assert_eq!(PodLabels::of(&bare, &unnamed).series(&[]), ["u2", "", "", "", "", ""]);
    }

    /// Guards: a per-restart id (container_id) in a counter's labels,
    /// which makes every restart a series of its own that increase() never
    /// counts; and a per-pod family whose labels drift from the helper's.
    #[test]
    fn every_per_pod_family_is_labelled_by_the_helper_and_never_by_container_id() {
        let per_pod = catalogue::ALL.iter().filter(|f| f.labels.first() == Some(&"pod_uid")).collect::<Vec<_>>();
        assert!(per_pod.len() >= 5, "{}", per_pod.len());
        for family in per_pod {
            assert_eq!(family.labels[..PodLabels::SERIES.len()], PodLabels::SERIES, "{}", family.name);
            assert!(!family.labels.contains(&"container_id"), "{} is labelled by a per-restart id", family.name);
        }
    }
}
