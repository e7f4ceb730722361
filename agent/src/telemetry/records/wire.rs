//! Event records on the wire: one JSON object per line, `time`, `node`,
//! `kind`, and the fields of its kind (a serde-tagged enum, one variant
//! per kind). Fields that are not known are left out. These types are
//! all a client (`sandwatch events`) needs; each kind's fields are
//! declared once ([`super::kinds`]) and made into structs here. What turns
//! a finding into a record is [`super::mapping`], what keeps and streams
//! them [`super::hub`].
//!
//! The record is the one field mapping of a finding: the log line of a
//! recorded finding carries its record's fields (`telemetry::logs`), so a
//! field is named the same in both, and as the metrics' label.

use std::{marker::PhantomData, time::SystemTime};

use hyper::body::Bytes;
use serde::{Deserialize, Serialize};
use strum::IntoEnumIterator;

use super::kinds::record_kinds;
use crate::{
    labels::Label,
    model::{dispatch::OutcomeKind, DeathCause, ExitReason, LateReason, QosClass, Source, TaskRole},
    watchdog::{
        crashes::CrashReason,
        explain::{DecidedBy, OomCause},
        limits::{Direction as LimitDirection, LimitKind, LimitScope, SeenBy},
        oom_limit::UnknownLimit,
        pressure::{PressureEnd, PressureReason},
        senders::Sender,
        verdicts::Disagreement,
        LossStage, OomConstraint, OomLimit,
    },
};

/// The structs of [`record_kinds`], with serde: a field left out when it
/// is `None`, empty or `false`, and read back so; the others always there.
macro_rules! wire_structs {
    (
        $(#[$pod_meta:meta])* pod $pod:ident { $($pod_fields:tt)* }
        $( $(#[$meta:meta])* $name:ident $(with $with:ident)? { $($fields:tt)* } )*
    ) => {
        wire_structs!(@fields [$(#[$pod_meta])* #[derive(Default)] $pod] [] $($pod_fields)*);
        $(
            wire_structs!(@fields [$(#[$meta])* $name] [$(#[serde(flatten)] pub $with: $pod,)?] $($fields)*);
        )*
    };
    // One field at a time, by the shape of its type.
    (@fields $head:tt [$($done:tt)*] $(#[$m:meta])* $f:ident: Option<$t:ty>, $($rest:tt)*) => {
        wire_structs!(@fields $head [$($done)*
            $(#[$m])* #[serde(default, skip_serializing_if = "Option::is_none")] pub $f: Option<$t>,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] $(#[$m:meta])* $f:ident: Vec<$t:ty>, $($rest:tt)*) => {
        wire_structs!(@fields $head [$($done)*
            $(#[$m])* #[serde(default, skip_serializing_if = "Vec::is_empty")] pub $f: Vec<$t>,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] $(#[$m:meta])* $f:ident: bool, $($rest:tt)*) => {
        wire_structs!(@fields $head [$($done)*
            $(#[$m])* #[serde(default, skip_serializing_if = "std::ops::Not::not")] pub $f: bool,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] $(#[$m:meta])* $f:ident: $t:ty, $($rest:tt)*) => {
        wire_structs!(@fields $head [$($done)* $(#[$m])* pub $f: $t,] $($rest)*);
    };
    (@fields [$(#[$meta:meta])* $name:ident] [$($done:tt)*]) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub struct $name { $($done)* }
    };
}

/// Makes each of the core's enums named a [`WireLabel`]: serialized as its
/// label, deserialized from it.
macro_rules! wire_labels {
    ($($label:ty),* $(,)?) => {$(
        impl WireLabel for $label {}

        impl Serialize for $label {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.label())
            }
        }

        impl<'de> Deserialize<'de> for $label {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(LabelVisitor(PhantomData))
            }
        }
    )*};
}

/// Reads a [`WireLabel`] from its label.
struct LabelVisitor<T>(PhantomData<T>);

impl<T: WireLabel> serde::de::Visitor<'_> for LabelVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let labels: Vec<&str> = T::iter().map(Label::label).collect();
        write!(f, "one of {}", labels.join(", "))
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<T, E> {
        T::iter().find(|t| t.label() == s).ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(s), &self))
    }
}

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
    RuntimeDisagreement(RuntimeDisagreementRecord),
    /// Only in one subscriber's stream: records it missed (it read too slowly).
    Missed(MissedRecord),
}

record_kinds!(wire_structs);

/// A container of a pod whose limit fired, and what it used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    pub container_id: String,
    pub usage_bytes: u64,
}

/// Whether a memory pressure record starts its episode or ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum PressureState {
    Start,
    End,
}

/// A label on the wire: one of the core's enums, written as its label and
/// read back by it (a value this build does not know is no record).
pub trait WireLabel: Label + IntoEnumIterator {}

wire_labels!(
    TaskRole,
    OutcomeKind,
    Source,
    LateReason,
    DeathCause,
    ExitReason,
    QosClass,
    CrashReason,
    LossStage,
    OomLimit,
    OomConstraint,
    UnknownLimit,
    OomCause,
    PressureReason,
    PressureEnd,
    PressureState,
    DecidedBy,
    LimitKind,
    LimitDirection,
    SeenBy,
    LimitScope,
    Sender,
    Disagreement,
);

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
            Body::RuntimeDisagreement(r) => Some(&r.pod),
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

    /// A handled kill of `pid` known by nothing else.
    pub(crate) fn bare_kill(victim_role: TaskRole, pid: u32) -> OomKillRecord {
        OomKillRecord {
            pod: PodFields::default(),
            victim_role,
            pid,
            comm: None,
            trigger_pid: None,
            trigger_comm: None,
            trigger_container: None,
            trigger_container_id: None,
            rss_bytes: None,
            victim_anon_bytes: None,
            victim_file_bytes: None,
            victim_shmem_bytes: None,
            oom_score_adj: None,
            limit: None,
            constraint: None,
            decided_by: None,
            limit_unknown: None,
            usage_bytes: None,
            limit_bytes: None,
            anon_bytes: None,
            page_cache_bytes: None,
            shmem_bytes: None,
            kernel_bytes: None,
            swap_bytes: None,
            zswap_bytes: None,
            memory_read_after_us: None,
            cause: None,
            pod_containers: Vec::new(),
            warned_ms: None,
            warned_reasons: Vec::new(),
            lowered_limit: None,
            lowered_from_bytes: None,
            lowered_to_bytes: None,
            lowered_ms: None,
            outcome: OutcomeKind::Handled,
        }
    }

    pub(crate) fn oom(pod: &str) -> Record {
        Record {
            time: rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_576_226_123)),
            node: "node-a".into(),
            body: Body::OomKill(Box::new(OomKillRecord {
                pod: PodFields { namespace: Some("shop".into()), pod: Some(pod.into()), ..PodFields::default() },
                limit: Some(OomLimit::Pod),
                constraint: Some(OomConstraint::Memcg),
                ..bare_kill(TaskRole::ContainerChild, 42)
            })),
        }
    }

    pub(crate) fn death() -> Record {
        let body = SandboxDeathRecord {
            pod: PodFields::default(),
            victim_role: TaskRole::Sandbox,
            pid: 7,
            comm: Some("pause".into()),
            cause: DeathCause::Oom,
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
                victim_role: TaskRole::ContainerInit,
                pid: 7,
                comm: Some("app".into()),
                reason: ExitReason::Sigsegv,
                exit_code: None,
                signal: Some(11),
                core_dumped: true,
                sender: None,
                sender_pid: None,
                sender_comm: None,
                sender_pod_uid: None,
                sender_namespace: None,
                sender_pod: None,
                sender_container: None,
                sender_container_id: None,
                sender_unit: None,
                stop_signal: None,
                grace_ms: None,
            }),
            Body::LateExit(LateExitRecord {
                pod: PodFields::default(),
                victim_role: TaskRole::Unknown,
                pid: None,
                comm: None,
                outcome: OutcomeKind::Late,
                reason: LateReason::ContainerMissing,
                source: Source::Runtime,
            }),
            Body::RuntimeCrash(runtime.clone()),
            Body::RuntimeRestart(runtime),
            Body::OomStormStart(storm.clone()),
            Body::OomStormEnd(storm),
            Body::EventsDropped(LossRecord { stage: LossStage::Kernel, count: 3 }),
            Body::MemoryPressure(MemoryPressureRecord {
                pod: PodFields::default(),
                reason: PressureReason::NearLimit,
                state: PressureState::Start,
                ended: None,
                lasted_ms: None,
                unreclaimable_bytes: 0,
                limit_bytes: None,
                unreclaimable_permille: None,
                working_set_bytes: 1 << 20,
                seconds_to_limit: None,
                psi_some_permille: None,
                psi_full_permille: None,
                refault_bytes_per_second: None,
                limit_hits: None,
                high_bytes: None,
                high_events: None,
            }),
            Body::LimitChange(LimitChangeRecord {
                pod: PodFields::default(),
                limit: LimitKind::MemoryHigh,
                direction: LimitDirection::Set,
                from_bytes: None,
                to_bytes: Some(24 << 20),
                seen_by: SeenBy::Runtime,
                scope: LimitScope::Pod,
            }),
            Body::RuntimeDisagreement(RuntimeDisagreementRecord {
                pod: PodFields::default(),
                pid: 9,
                direction: Disagreement::KernelSaysOom,
                reason: ExitReason::OomKilled,
                kernel_exit_code: 137,
                sender: Some(Sender::OomKiller),
                task_exit_status: Some(137),
                runtime_reason: Some("Error".into()),
                runtime_exit_code: Some(137),
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
