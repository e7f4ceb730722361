//! Event records on the wire: one JSON object per line, `time`, `node`,
//! `kind`, and the fields of its kind (a serde-tagged enum, one variant
//! per kind). Fields that are not known are left out. These types are
//! all a client (`sandwatch events`) needs; what turns a finding into a
//! record is [`super::mapping`], what keeps and streams them
//! [`super::hub`].
//!
//! The record is the one field mapping of a finding: the JSON log line of
//! a recorded finding is rendered from its record (`telemetry::logs`), so
//! a field is named the same in both, and as the metrics' label.

use std::time::SystemTime;

use hyper::body::Bytes;
use serde::{Deserialize, Serialize};

/// One event record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// When the kernel (or the runtime) saw it, RFC 3339 UTC.
    pub time: String,
    pub node: String,
    #[serde(flatten)]
    pub body: Body,
}

/// What a record says, by kind (the JSON `kind`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, strum::EnumDiscriminants)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[strum_discriminants(name(Kind))]
#[strum_discriminants(derive(Hash, strum::IntoStaticStr, strum::EnumIter, strum::EnumString))]
#[strum_discriminants(strum(serialize_all = "snake_case"))]
pub enum Body {
    /// Boxed: a kill record is twice the size of any other body.
    OomKill(Box<OomKillRecord>),
    SandboxDeath(SandboxDeathRecord),
    ContainerExit(ContainerExitRecord),
    LateExit(LateExitRecord),
    RuntimeCrash(RuntimeRecord),
    RuntimeRestart(RuntimeRecord),
    OomStormStart(StormRecord),
    OomStormEnd(StormRecord),
    EventsDropped(LossRecord),
    MemoryPressure(MemoryPressureRecord),
    LimitChange(LimitChangeRecord),
    /// Only in one subscriber's stream: records it missed (it read too slowly).
    Missed(MissedRecord),
}

/// The pod a record is about, as far as known.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_class: Option<String>,
    /// The pod's workload (from its labels) and its kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_kind: Option<String>,
}

/// An OOM kill and its post-mortem: who was killed and who ran out of
/// memory, whose limit fired, what filled that cgroup, what else its pod
/// held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomKillRecord {
    #[serde(flatten)]
    pub pod: PodFields,
    pub victim_role: String,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// The task that ran out of memory, when it is not the victim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_comm: Option<String>,
    /// Its container, when it is not the victim's (names as the runtime said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_container_id: Option<String>,
    /// The victim's resident memory (anon + file + shmem) when it was
    /// picked, and its parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub victim_anon_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub victim_file_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub victim_shmem_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i32>,
    /// Whose limit fired: container, pod, node or unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// The OOM's constraint: memcg, global, cpuset, memory_policy or unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    /// What said which limit fired: oom_control (the OOM killer's own
    /// control), victim_memcg or allocating_task_memcg (page counters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// Why the limit is unknown: no_counters, unplaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_unknown: Option<String>,
    /// The cgroup whose limit fired, at the kill: its usage and limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// What filled it at the kill (a global OOM: the victim's pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anon_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_cache_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shmem_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_bytes: Option<u64>,
    /// Beside those: what was out in swap, and what zswap held
    /// compressed (left out where none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zswap_bytes: Option<u64>,
    /// How long after the kill its `memory.stat` was read (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_read_after_us: Option<u64>,
    /// The largest of those: anon, page_cache, shmem, kernel, unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// When the pod's limit fired: its containers, largest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_containers: Vec<ContainerUsage>,
    /// How long before the kill its container was first warned of memory
    /// pressure (ms), and of what (near_limit, thrashing, growing); absent:
    /// it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warned_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warned_reasons: Vec<String>,
    /// The limit that fired was lowered shortly before the kill: which
    /// (memory_max, swap), from what to what (absent: unlimited), and how
    /// long before the kill (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lowered_limit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lowered_from_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lowered_to_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lowered_ms: Option<u64>,
    /// The dispatcher's outcome: handled, late, unknown, host.
    pub outcome: String,
}

/// A pod's or a container's memory limit moved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitChangeRecord {
    #[serde(flatten)]
    pub pod: PodFields,
    /// Which limit: memory_max, memory_high, swap.
    pub limit: String,
    /// lowered, raised, set (none before), lifted (none now).
    pub direction: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_bytes: Option<u64>,
    /// What said it: kernel_notice, runtime, read, oom_kill.
    pub seen_by: String,
    /// Whose limit: the pod's own (its sandbox cgroup) or its container's.
    pub scope: String,
}

/// A container of a pod whose limit fired, and what it used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    pub container_id: String,
    pub usage_bytes: u64,
}

/// A container's init ended: how (its code, or its signal) and why it
/// counts so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerExitRecord {
    #[serde(flatten)]
    pub pod: PodFields,
    pub victim_role: String,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// completed, error, oom_killed, killed, or the signal's name.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<u8>,
    /// The signal's number, when one ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<u8>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub core_dumped: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxDeathRecord {
    #[serde(flatten)]
    pub pod: PodFields,
    pub victim_role: String,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// oom, signal, exit.
    pub cause: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateExitRecord {
    #[serde(flatten)]
    pub pod: PodFields,
    pub victim_role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    pub outcome: String,
    /// sandbox_torn_down, container_missing, task_missing.
    pub reason: String,
    /// Who reported it: kernel, runtime.
    pub source: String,
}

/// A container runtime's crash (with its reason) or restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeRecord {
    /// The container runtime (`containerd`, …).
    pub runtime: String,
    pub pid: u32,
    /// How it crashed: panic, exit_code, killed, fatal_signal, signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StormRecord {
    /// OOM events in the window.
    pub count: u64,
    pub window_seconds: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossRecord {
    /// The pipeline stage: kernel, channel, decode.
    pub stage: String,
    pub count: u64,
}

/// A container's memory pressure started or ended, for one reason, with
/// what the kernel said at that read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPressureRecord {
    #[serde(flatten)]
    pub pod: PodFields,
    /// near_limit, thrashing, growing, throttled.
    pub reason: String,
    /// start, end.
    pub state: String,
    /// How it ended: eased, killed, gone, unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// How long the episode lasted (ms; at its end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lasted_ms: Option<u64>,
    /// What no reclaim frees (usage less page cache: anonymous memory,
    /// tmpfs, kernel memory), and the container's limit.
    pub unreclaimable_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// The unreclaimable memory's share of the limit, thousandths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreclaimable_permille: Option<u32>,
    /// The kubelet's working set (usage less inactive page cache).
    pub working_set_bytes: u64,
    /// At its current growth, when the unreclaimable memory meets the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_to_limit: Option<u64>,
    /// PSI (v2): the share of the last 10 s some, or all, of its tasks
    /// stalled on memory, thousandths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi_some_permille: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi_full_permille: Option<u32>,
    /// Pages evicted in use and read back, bytes a second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refault_bytes_per_second: u64,
    /// Times it met its limit since the read before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub limit_hits: u64,
    /// Its `memory.high` (v2), and the times the kernel throttled it there
    /// (crossings) since the read before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub high_events: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissedRecord {
    pub count: u64,
}

impl Body {
    pub fn kind(&self) -> Kind {
        self.into()
    }

    /// The pod fields, for kinds about a pod.
    pub fn pod(&self) -> Option<&PodFields> {
        match self {
            Body::OomKill(r) => Some(&r.pod),
            Body::SandboxDeath(r) => Some(&r.pod),
            Body::ContainerExit(r) => Some(&r.pod),
            Body::LateExit(r) => Some(&r.pod),
            Body::MemoryPressure(r) => Some(&r.pod),
            Body::LimitChange(r) => Some(&r.pod),
            Body::RuntimeCrash(_)
            | Body::RuntimeRestart(_)
            | Body::OomStormStart(_)
            | Body::OomStormEnd(_)
            | Body::EventsDropped(_)
            | Body::Missed(_) => None,
        }
    }
}

impl Record {
    /// One JSON line, held at its length (the history keeps a thousand).
    pub fn line(&self) -> Bytes {
        // Names are a tenant's: no raw control character on the wire.
        let mut text = crate::text::json_line(self).unwrap_or_else(|_| String::from("{}"));
        text.push('\n');
        text.shrink_to_fit();
        Bytes::from(text)
    }
}

/// A line of the stream as a client reads it: a record of a kind it
/// knows, or of a kind newer than itself (shown by its kind alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    Known(Box<Record>),
    Newer { time: String, node: String, kind: String },
}

impl Incoming {
    /// Parses one line; `None` if it is no event record at all.
    pub fn parse(line: &str) -> Option<Self> {
        if let Ok(record) = serde_json::from_str::<Record>(line) {
            return Some(Incoming::Known(Box::new(record)));
        }
        #[derive(Deserialize)]
        struct Envelope {
            time: String,
            node: String,
            kind: String,
        }
        let e: Envelope = serde_json::from_str(line).ok()?;
        // A known kind that does not parse is broken, not newer.
        if e.kind.parse::<Kind>().is_ok() {
            return None;
        }
        Some(Incoming::Newer { time: e.time, node: e.node, kind: e.kind })
    }
}

/// RFC 3339 in UTC with milliseconds, e.g. `2026-12-01T08:03:46.123Z`.
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use strum::IntoEnumIterator as _;

    use super::*;
    use crate::labels::Label as _;

    pub(crate) fn oom(pod: &str) -> Record {
        Record {
            time: rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_576_226_123)),
            node: "node-a".into(),
            body: Body::OomKill(Box::new(OomKillRecord {
                pod: PodFields { namespace: Some("shop".into()), pod: Some(pod.into()), ..PodFields::default() },
                victim_role: "container_child".into(),
                pid: 42,
                comm: None,
                trigger_pid: None,
                trigger_comm: None,
                rss_bytes: None,
                limit_bytes: None,
                limit: Some("pod".into()),
                constraint: Some("memcg".into()),
                outcome: "handled".into(),
                ..OomKillRecord::default()
            })),
        }
    }

    pub(crate) fn death() -> Record {
        let body = SandboxDeathRecord {
            pod: PodFields::default(),
            victim_role: "sandbox".into(),
            pid: 7,
            comm: Some("pause".into()),
            cause: "oom".into(),
        };
        Record { time: rfc3339(SystemTime::now()), node: "node-a".into(), body: Body::SandboxDeath(body) }
    }

    #[test]
    fn a_record_is_one_json_line_without_absent_fields() {
        let line = oom("web").line();
        let text = std::str::from_utf8(&line).unwrap();
        assert_eq!(
            text,
            "{\"time\":\"2025-12-01T08:03:46.123Z\",\"node\":\"node-a\",\"kind\":\"oom_kill\",\"namespace\":\"shop\",\"pod\":\"web\",\"victim_role\":\"container_child\",\"pid\":42,\"limit\":\"pod\",\"constraint\":\"memcg\",\"outcome\":\"handled\"}\n"
        );
        assert_eq!(serde_json::from_str::<Record>(text.trim()).unwrap(), oom("web"));
    }

    /// Guards: a name that drives a terminal reaching the wire raw (serde
    /// escapes C0 itself, not DEL, C1 or the bidirectional controls).
    #[test]
    fn no_raw_control_character_reaches_the_wire() {
        let mut r = oom("web\u{9b}2J");
        if let Body::OomKill(k) = &mut r.body {
            k.comm = Some("\u{1b}[2J\u{7f}\u{202e}".into());
        }
        let line = r.line();
        let text = std::str::from_utf8(&line).unwrap();
        assert!(!text.trim_end().chars().any(crate::text::is_hostile), "{text:?}");
        assert_eq!(serde_json::from_str::<Record>(text.trim()).unwrap(), r, "reads back as it was");
    }

    #[test]
    fn every_kind_is_named_on_the_wire_as_its_label() {
        let storm = StormRecord { count: 1, window_seconds: 60 };
        let runtime = RuntimeRecord { runtime: "containerd".into(), pid: 1, reason: None };
        let bodies = [
            oom("web").body,
            death().body,
            Body::ContainerExit(ContainerExitRecord {
                pod: PodFields {
                    workload: Some("web".into()),
                    workload_kind: Some("Deployment".into()),
                    ..PodFields::default()
                },
                victim_role: "container_init".into(),
                pid: 7,
                comm: Some("app".into()),
                reason: "sigsegv".into(),
                exit_code: None,
                signal: Some(11),
                core_dumped: true,
            }),
            Body::LateExit(LateExitRecord {
                pod: PodFields::default(),
                victim_role: "unknown".into(),
                pid: None,
                comm: None,
                outcome: "late".into(),
                reason: "container_missing".into(),
                source: "runtime".into(),
            }),
            Body::RuntimeCrash(runtime.clone()),
            Body::RuntimeRestart(runtime),
            Body::OomStormStart(storm.clone()),
            Body::OomStormEnd(storm),
            Body::EventsDropped(LossRecord { stage: "kernel".into(), count: 3 }),
            Body::MemoryPressure(MemoryPressureRecord {
                reason: "near_limit".into(),
                state: "start".into(),
                working_set_bytes: 1 << 20,
                ..MemoryPressureRecord::default()
            }),
            Body::LimitChange(LimitChangeRecord {
                limit: "memory_max".into(),
                direction: "lowered".into(),
                from_bytes: Some(128 << 20),
                to_bytes: Some(32 << 20),
                seen_by: "kernel_notice".into(),
                scope: "container".into(),
                ..LimitChangeRecord::default()
            }),
            Body::Missed(MissedRecord { count: 2 }),
        ];
        assert_eq!(bodies.len(), Kind::iter().count(), "one of each kind");
        for body in bodies {
            let record = Record { time: "t".into(), node: "n".into(), body };
            let json: serde_json::Value = serde_json::from_slice(&record.line()).unwrap();
            assert_eq!(json["kind"], record.body.kind().label(), "{json}");
            assert_eq!(Incoming::parse(&json.to_string()), Some(Incoming::Known(Box::new(record))));
        }
    }

    #[test]
    fn newer_kinds_and_fields_still_read() {
        let newer = Incoming::parse(r#"{"time":"t","node":"n","kind":"future_thing","extra":1}"#);
        assert_eq!(newer, Some(Incoming::Newer { time: "t".into(), node: "n".into(), kind: "future_thing".into() }));
        let extra = r#"{"time":"t","node":"n","kind":"missed","count":3,"added_later":true}"#;
        assert!(
            matches!(Incoming::parse(extra), Some(Incoming::Known(r)) if r.body == Body::Missed(MissedRecord { count: 3 }))
        );
        assert_eq!(
            Incoming::parse(r#"{"time":"t","node":"n","kind":"missed"}"#),
            None,
            "a known kind without its fields"
        );
        assert_eq!(Incoming::parse("not json"), None);
    }
}
