//! What the agent tells the world: Prometheus metrics, log lines, event
//! records, and the HTTP endpoints that serve them. The watchdog's
//! findings reach all three consumers through [`Outputs`].
pub mod exposition;
pub mod fair;
#[cfg(test)]
mod golden;
pub mod logs;
pub mod metrics;
pub mod pod_labels;
pub mod pod_series;
pub mod records;
pub mod scrapers;
pub mod server;
pub mod signal_metrics;
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

    /// A finding's record is made once: its log line is rendered from it.
    pub fn publish_one(&self, finding: &Finding) {
        self.metrics.observe(finding);
        let record = records::record_of(finding);
        logs::log(finding, record.as_ref().map(|(_, body)| body));
        if let (Some(hub), Some((stamp, body))) = (&self.records, record) {
            hub.publish_body(stamp, body);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, sync::Arc};

    use super::*;
    use crate::{
        model::{ExitReason, ExitReport, Names, OomReport, Outcome, PodRef, Source, TaskKey, TaskRole},
        stats::PipelineStats,
        watchdog::{ContainerExit, PodOom},
    };

    /// (type, label names) of every family in a text exposition.
    fn families(text: &str) -> BTreeMap<String, (String, Vec<String>)> {
        let mut found: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                found.insert(name.to_string(), (kind.to_string(), Vec::new()));
            } else if !line.starts_with('#') && !line.is_empty() {
                let series = line.split(' ').next().unwrap();
                let (name, labels) = series.split_once('{').unwrap_or((series, ""));
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| found.get(*f).is_some_and(|(t, _)| t == "histogram")))
                    .unwrap_or(name);
                let names: Vec<String> = labels
                    .trim_end_matches('}')
                    .split(',')
                    .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_string()))
                    .filter(|k| k != "le")
                    .collect();
                if let Some((_, labels)) = found.get_mut(family) {
                    if labels.is_empty() {
                        *labels = names;
                    }
                }
            }
        }
        found
    }

    /// docs/operating.md's metrics table, row by row against everything the
    /// agent registers: the same families, types and label names.
    #[test]
    fn the_metrics_reference_is_what_the_agent_exports() {
        let settings =
            watchdog_metrics::MetricsSettings { runtime_names: vec!["containerd".into()], ..Default::default() };
        let metrics::Metrics { registry, runtime, watchdog, stream, .. } =
            metrics::Metrics::register(metrics::Subject {
                stats: Arc::new(PipelineStats::default()),
                kernel: None,
                programs_attached: 6,
                kernel_release: "test",
                kernel_path: crate::probes::KernelPath::VictimTask,
                oom_decision: "oom_control",
                settings: &settings,
            })
            .unwrap();
        let outputs = Outputs {
            metrics: watchdog,
            records: Some(records::RecordHub::new(stream, &records::tests_settings("n", 1))),
        };
        // The families whose series appear only with what they count.
        runtime.stream.info.observe("containerd", "2.1.9", "abc");
        outputs.publish([
            Finding::RuntimeUp { runtime: "containerd".into(), up: true },
            Finding::Model(crate::watchdog::ModelStats {
                namespaces: vec![("shop".into(), 1)],
                ..crate::watchdog::ModelStats::default()
            }),
            Finding::OomWindow {
                events: 12,
                window_secs: 60,
                storm: false,
                storming: vec![crate::watchdog::storm::Storming {
                    key: crate::watchdog::storm::StormKey { namespace: "shop".into(), pod_uid: String::new() },
                    events: 12,
                }],
            },
            Finding::PodOom(PodOom {
                fired: crate::watchdog::Fired::UNKNOWN,
                cause: crate::watchdog::explain::OomCause::Unknown,
                report: OomReport {
                    outcome: Outcome::Handled,
                    role: TaskRole::ContainerInit,
                    pod: Some(PodRef { pod_uid: "u".into(), qos: None, container_id: Some("c".into()) }),
                    victim: TaskKey::new(1, 0),
                    victim_comm: "x".into(),
                    trigger: None,
                    delay_ns: 0,
                },
                names: Names { workload: "web".into(), workload_kind: "Deployment".into(), ..Names::default() },
                warned_for_ns: Some(1_000_000_000),
            }),
            Finding::ContainerExit(ContainerExit {
                report: ExitReport {
                    source: Source::Kernel,
                    outcome: Outcome::Handled,
                    role: TaskRole::ContainerInit,
                    pod: Some(PodRef { pod_uid: "u".into(), qos: None, container_id: Some("c".into()) }),
                    sandbox_death: None,
                    container_exit: Some(ExitReason::Error),
                    delay_ns: 0,
                },
                reason: ExitReason::Error,
                status: crate::events::ExitStatus::Code(3),
                names: Names { workload: "web".into(), workload_kind: "Deployment".into(), ..Names::default() },
                pid: 1,
                comm: "app".into(),
                ts_ns: 0,
                ended: None,
            }),
            Finding::PressureLevels(crate::watchdog::PressureLevels {
                containers: vec![crate::watchdog::finding::ContainerPressure {
                    pod: PodRef { pod_uid: "u".into(), qos: None, container_id: Some("c".into()) },
                    names: Names::default(),
                    reasons: vec![crate::watchdog::pressure::PressureReason::Growing],
                    figures: crate::watchdog::pressure::Figures {
                        unreclaimable_permille: Some(600),
                        seconds_to_limit: Some(30),
                        ..Default::default()
                    },
                }],
                ..Default::default()
            }),
        ]);
        let text = metrics::render_with(&registry, &[outputs.metrics.pod_series_text().unwrap()]).unwrap();
        let exported = families(&text);

        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operating.md");
        let doc = std::fs::read_to_string(path).expect("docs/operating.md");
        let table =
            doc.split("\n## Metrics\n").nth(1).and_then(|t| t.split("\n## ").next()).expect("a Metrics section");
        let mut documented = BTreeMap::new();
        for row in table.lines().filter(|l| l.starts_with("| `sandwatch_")) {
            let cells: Vec<&str> = row.split('|').skip(1).map(str::trim).collect();
            let name = cells[0].trim_matches('`').to_string();
            let labels: Vec<String> =
                cells[2].split(',').map(|l| l.trim().trim_matches('`').to_string()).filter(|l| !l.is_empty()).collect();
            documented.insert(name, (cells[1].to_string(), labels));
        }
        for (name, (kind, labels)) in &exported {
            let Some((doc_kind, doc_labels)) = documented.get(name) else {
                panic!("{name} ({kind}) is exported but not in {path}'s metrics table")
            };
            assert_eq!(doc_kind, kind, "{name}'s type");
            let (mut want, mut have) = (labels.clone(), doc_labels.clone());
            want.sort();
            have.sort();
            assert_eq!(have, want, "{name}'s labels");
        }
        let extra: Vec<&String> = documented.keys().filter(|n| !exported.contains_key(*n)).collect();
        assert!(extra.is_empty(), "documented but not exported: {extra:?}");
        // And what is registered is the catalogue, no more, no less.
        let catalogued: BTreeMap<String, (String, Vec<String>)> = crate::catalogue::ALL
            .iter()
            .map(|f| {
                let mut labels: Vec<String> = f.labels.iter().map(|l| l.to_string()).collect();
                labels.sort();
                (f.name.to_string(), (f.kind.word().to_string(), labels))
            })
            .collect();
        let registered: BTreeMap<String, (String, Vec<String>)> = exported
            .into_iter()
            .map(|(name, (kind, mut labels))| {
                labels.sort();
                (name, (kind, labels))
            })
            .collect();
        assert_eq!(registered, catalogued);
    }
}
