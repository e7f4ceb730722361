//! Every record kind, declared once: its fields in their order on the
//! wire, each one line, a name and a type. The type says it all: an
//! `Option` that is `None`, an empty `Vec` and a `false` are left out of
//! the record and of its log line; a label is the core's own enum, written
//! as its snake_case label. From this one declaration come the structs a
//! client reads ([`super::wire`]) and each kind's log line, a `tracing`
//! event with exactly the record's fields under the same names
//! (`telemetry::logs`). A new field is its computation in
//! [`super::mapping`] and one line here; the compiler checks the rest.

/// The declaration, handed to `$make` (`wire_structs`, `log_lines`): the
/// pod fields that the kinds `with pod` start with, then one block per
/// struct. Docs are the fields' own.
macro_rules! record_kinds {
    ($make:ident) => {
        $make! {
            /// The pod a record is about, as far as known.
            pod PodFields {
                pod_uid: Option<String>,
                namespace: Option<String>,
                pod: Option<String>,
                container: Option<String>,
                container_id: Option<String>,
                qos_class: Option<QosClass>,
                /// The pod's workload (from its labels) and its kind.
                workload: Option<String>,
                workload_kind: Option<String>,
            }

            /// An OOM kill and its post-mortem: who was killed and who ran out of
            /// memory, whose limit fired, what filled that cgroup, what else its pod
            /// held.
            OomKillRecord with pod {
                victim_role: TaskRole,
                pid: u32,
                comm: Option<String>,
                /// The task that ran out of memory, when it is not the victim.
                trigger_pid: Option<u32>,
                trigger_comm: Option<String>,
                /// Its container, when it is not the victim's (names as the runtime said).
                trigger_container: Option<String>,
                trigger_container_id: Option<String>,
                /// The victim's resident memory (anon + file + shmem) when it was
                /// picked, and its parts.
                rss_bytes: Option<u64>,
                victim_anon_bytes: Option<u64>,
                victim_file_bytes: Option<u64>,
                victim_shmem_bytes: Option<u64>,
                oom_score_adj: Option<i32>,
                /// Whose limit fired.
                limit: Option<OomLimit>,
                /// The OOM's constraint.
                constraint: Option<OomConstraint>,
                /// What said which limit fired: the OOM killer's own control, or
                /// page counters (the victim's memory cgroups, or the allocating
                /// task's).
                decided_by: Option<DecidedBy>,
                /// Why the limit is unknown.
                limit_unknown: Option<UnknownLimit>,
                /// The cgroup whose limit fired, at the kill: its usage and limit.
                usage_bytes: Option<u64>,
                limit_bytes: Option<u64>,
                /// What filled it at the kill (a global OOM: the victim's pod).
                anon_bytes: Option<u64>,
                page_cache_bytes: Option<u64>,
                shmem_bytes: Option<u64>,
                kernel_bytes: Option<u64>,
                /// Beside those: what was out in swap, and what zswap held
                /// compressed (absent: none).
                swap_bytes: Option<u64>,
                zswap_bytes: Option<u64>,
                /// How long after the kill its `memory.stat` was read (µs).
                memory_read_after_us: Option<u64>,
                /// The largest of those.
                cause: Option<OomCause>,
                /// When the pod's limit fired: its containers, largest first.
                pod_containers: Vec<ContainerUsage>,
                /// How long before the kill its container was first warned of memory
                /// pressure (ms), and of what; absent: it was not.
                warned_ms: Option<u64>,
                warned_reasons: Vec<PressureReason>,
                /// The limit that fired was lowered shortly before the kill: which,
                /// from what to what (absent: unlimited), how long before (ms).
                lowered_limit: Option<LimitKind>,
                lowered_from_bytes: Option<u64>,
                lowered_to_bytes: Option<u64>,
                lowered_ms: Option<u64>,
                /// The dispatcher's outcome.
                outcome: OutcomeKind,
            }

            /// A sandbox's init died: how.
            SandboxDeathRecord with pod {
                victim_role: TaskRole,
                pid: u32,
                comm: Option<String>,
                cause: DeathCause,
            }

            /// A container's init ended: how (its code, or its signal) and why it
            /// counts so.
            ContainerExitRecord with pod {
                victim_role: TaskRole,
                pid: u32,
                comm: Option<String>,
                reason: ExitReason,
                exit_code: Option<u8>,
                /// The signal's number, when one ended it.
                signal: Option<u8>,
                core_dumped: bool,
                /// Who sent that signal.
                sender: Option<Sender>,
                /// The sending process, where a process sent it.
                sender_pid: Option<u32>,
                sender_comm: Option<String>,
                /// A pod's process: its pod and container.
                sender_pod_uid: Option<String>,
                sender_namespace: Option<String>,
                sender_pod: Option<String>,
                sender_container: Option<String>,
                sender_container_id: Option<String>,
                /// A host process: its systemd unit.
                sender_unit: Option<String>,
                /// A stop past its grace period: the same sender's signal that
                /// asked first, and how long before the kill (ms).
                stop_signal: Option<u8>,
                grace_ms: Option<u64>,
            }

            /// An exit handled after its sandbox, container or task was gone.
            LateExitRecord with pod {
                victim_role: TaskRole,
                pid: Option<u32>,
                comm: Option<String>,
                outcome: OutcomeKind,
                reason: LateReason,
                /// Who reported it.
                source: Source,
            }

            /// The runtime's word on a container init's end against the kernel's:
            /// they disagree.
            RuntimeDisagreementRecord with pod {
                pid: u32,
                direction: Disagreement,
                /// What the kernel saw: the reason, the code the runtime should
                /// report (128 + the signal), and who sent the signal.
                reason: ExitReason,
                kernel_exit_code: i32,
                sender: Option<Sender>,
                /// What the runtime said: containerd's TaskExit status, the CRI's
                /// reason and exit code.
                task_exit_status: Option<u32>,
                runtime_reason: Option<String>,
                runtime_exit_code: Option<i32>,
            }

            /// A container runtime's crash (with its reason) or restart.
            RuntimeRecord {
                /// The container runtime (`containerd`, …).
                runtime: String,
                pid: u32,
                /// How it crashed.
                reason: Option<CrashReason>,
            }

            /// An OOM storm's start or end.
            StormRecord {
                /// OOM events in the window.
                count: u64,
                window_seconds: u64,
            }

            /// Events a pipeline stage lost in the last second.
            LossRecord {
                stage: LossStage,
                count: u64,
            }

            /// A container's memory pressure started or ended, for one reason, with
            /// what the kernel said at that read.
            MemoryPressureRecord with pod {
                reason: PressureReason,
                state: PressureState,
                /// How it ended.
                ended: Option<PressureEnd>,
                /// How long the episode lasted (ms; at its end).
                lasted_ms: Option<u64>,
                /// What no reclaim frees (usage less page cache: anonymous memory,
                /// tmpfs, kernel memory), and the container's limit.
                unreclaimable_bytes: u64,
                limit_bytes: Option<u64>,
                /// The unreclaimable memory's share of the limit, thousandths.
                unreclaimable_permille: Option<u32>,
                /// The kubelet's working set (usage less inactive page cache).
                working_set_bytes: u64,
                /// At its current growth, when the unreclaimable memory meets the limit.
                seconds_to_limit: Option<u64>,
                /// PSI (v2): the share of the last 10 s some, or all, of its tasks
                /// stalled on memory, thousandths.
                psi_some_permille: Option<u32>,
                psi_full_permille: Option<u32>,
                /// Pages evicted in use and read back, bytes a second (absent: none).
                refault_bytes_per_second: Option<u64>,
                /// Times it met its limit since the read before (absent: none).
                limit_hits: Option<u64>,
                /// Its `memory.high` (v2), and the times the kernel throttled it
                /// there since the read before (absent: none).
                high_bytes: Option<u64>,
                high_events: Option<u64>,
            }

            /// A pod's or a container's memory limit moved.
            LimitChangeRecord with pod {
                /// Which limit.
                limit: LimitKind,
                direction: LimitDirection,
                /// From what, to what (absent: unlimited).
                from_bytes: Option<u64>,
                to_bytes: Option<u64>,
                /// What said it.
                seen_by: SeenBy,
                /// Whose limit: the pod's own, or its container's.
                scope: LimitScope,
            }

            /// Only in one subscriber's stream: records it missed (it read too slowly).
            MissedRecord {
                count: u64,
            }
        }
    };
}
pub(crate) use record_kinds;

#[cfg(test)]
mod tests {
    use strum::IntoEnumIterator as _;

    use crate::{labels::Label as _, telemetry::records::Kind};

    /// The names of the pod fields and of each struct's own fields.
    macro_rules! field_names {
        (
            $(#[$pod_meta:meta])* pod $pod:ident { $( $(#[$pm:meta])* $pf:ident: $pt:ty, )* }
            $( $(#[$meta:meta])* $name:ident $(with $with:ident)? { $( $(#[$m:meta])* $f:ident: $t:ty, )* } )*
        ) => {
            const POD: &[&str] = &[$(stringify!($pf)),*];
            const STRUCTS: &[(&str, &[&str])] = &[$( (stringify!($name), &[$(stringify!($f)),*]) ),*];
        };
    }
    record_kinds!(field_names);

    fn struct_of(kind: Kind) -> &'static str {
        match kind {
            Kind::OomKill => "OomKillRecord",
            Kind::SandboxDeath => "SandboxDeathRecord",
            Kind::ContainerExit => "ContainerExitRecord",
            Kind::RuntimeDisagreement => "RuntimeDisagreementRecord",
            Kind::LateExit => "LateExitRecord",
            Kind::RuntimeCrash | Kind::RuntimeRestart => "RuntimeRecord",
            Kind::OomStormStart | Kind::OomStormEnd => "StormRecord",
            Kind::EventsDropped => "LossRecord",
            Kind::MemoryPressure => "MemoryPressureRecord",
            Kind::LimitChange => "LimitChangeRecord",
            Kind::Missed => "MissedRecord",
        }
    }

    /// docs/operating.md's table of event records: each field of a kind is
    /// in the row of a kind that carries it, the pod fields under it
    /// (guards: a field added to a record and not to its reference).
    #[test]
    fn the_operators_reference_has_every_field_of_every_kind() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operating.md");
        let doc = std::fs::read_to_string(path).expect("docs/operating.md");
        let section = doc.split("### Event records").nth(1).expect("an Event records section");
        let section = section.split("\n## ").next().unwrap_or(section);
        let row = |kind: Kind| {
            let named = format!("`{}`", kind.label());
            section.lines().find(|l| l.split('|').nth(1).is_some_and(|cell| cell.contains(&named))).unwrap_or("")
        };
        for (name, fields) in STRUCTS {
            let rows: String = Kind::iter().filter(|k| struct_of(*k) == *name).map(row).collect();
            assert!(!rows.is_empty(), "no row for {name}'s kinds");
            for field in *fields {
                assert!(rows.contains(&format!("`{field}`")), "{name}'s {field} is not in its row: {rows}");
            }
        }
        let pod = section.split("Pod fields:").nth(1).expect("the pod fields").split("\n\n").next().unwrap_or("");
        for field in POD {
            assert!(pod.contains(&format!("`{field}`")), "pod field {field} is not listed");
        }
    }
}
