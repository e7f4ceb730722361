//! Every metric family the agent exports, in one table: its name, type,
//! help and labels, said once. Each part of the agent makes (and
//! registers) the families it feeds from here, and
//! `telemetry::Metrics::register` registers them all, for the agent, its
//! tests and its benches alike; the operators' reference
//! (docs/operating.md) is checked against this table.

use prometheus::{
    CounterVec, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// A family's type, as Prometheus knows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Counter,
    Gauge,
    /// With its bucket bounds.
    Histogram(&'static [f64]),
}

impl Kind {
    /// The `# TYPE` word.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram(_) => "histogram",
        }
    }
}

/// One family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// Label names, in the order values are given.
    pub labels: &'static [&'static str],
}

/// 100 µs … 10 s.
const DELAY_BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Seconds from a memory pressure warning to its container's OOM kill.
const LEAD_BUCKETS: [f64; 12] = [0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0];

/// Seconds from a stop's first signal to its SIGKILL: the grace periods
/// runtimes give (the kubelet's default is 30 s).
const GRACE_BUCKETS: [f64; 12] = [0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 45.0, 60.0, 120.0, 300.0, 600.0];

/// Seconds from the kernel's exit of a container init to containerd's
/// TaskExit for it: normally milliseconds, seconds when the runtime lags.
const LAG_BUCKETS: [f64; 14] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

macro_rules! catalogue {
    ($( $id:ident = $kind:expr, $name:literal, [$($label:literal),*], $help:literal; )*) => {
        $(
            pub const $id: Family = Family { name: $name, kind: { use Kind::*; $kind }, help: $help, labels: &[$($label),*] };
        )*
        /// Every family.
        pub const ALL: &[Family] = &[$($id),*];
    };
}

catalogue! {
    // telemetry/pod_series.rs
    POD_SERIES_EVICTED_TOTAL = Counter, "sandwatch_pod_series_evicted_total", ["family"],
        "Per-pod series dropped because the --max-pod-series cap of their family (oom_kills, container_exits, memory_pressure) was reached.";
    POD_SERIES_EXPIRED_TOTAL = Counter, "sandwatch_pod_series_expired_total", ["family"],
        "Per-pod series removed --pod-series-ttl after their pod was torn down, by family (oom_kills, container_exits).";
    POD_SERIES_HOLD_SECONDS = Gauge, "sandwatch_pod_series_hold_seconds", [],
        "How long a new per-pod or per-workload counter series is served at 0 before its first events are added, so that increase() counts them: --pod-series-hold, or 1.5 times the longest interval between one scraper's scrapes over the last 10 minutes (up to 5 minutes) if longer.";
    WORKLOAD_SERIES_EVICTED_TOTAL = Counter, "sandwatch_workload_series_evicted_total", ["family"],
        "Per-workload series dropped because the --max-workload-series cap of their family (oom_kills, container_exits) was reached.";
    WORKLOAD_SERIES_EXPIRED_TOTAL = Counter, "sandwatch_workload_series_expired_total", ["family"],
        "Per-workload series removed once every pod they counted was gone for --pod-series-ttl, by family (oom_kills, container_exits).";

    // runtime/metrics.rs
    RUNTIME_CONTAINER_LOOKUPS_TOTAL = Counter, "sandwatch_runtime_container_lookups_total", ["result"],
        "containerd container records read for their CRI names as they are created, by result (gone: removed before it could be read).";
    RUNTIME_EVENTS_DROPPED_TOTAL = Counter, "sandwatch_runtime_events_dropped_total", [],
        "containerd events lost because the agent's runtime channel was full.";
    RUNTIME_EVENTS_MALFORMED_TOTAL = Counter, "sandwatch_runtime_events_malformed_total", [],
        "containerd events whose payload could not be decoded.";
    RUNTIME_EVENTS_RECONNECTS_TOTAL = Counter, "sandwatch_runtime_events_reconnects_total", [],
        "Times the containerd event stream was lost or could not be opened.";
    RUNTIME_EVENTS_TOTAL = Counter, "sandwatch_runtime_events_total", ["topic"],
        "containerd events received, by topic.";
    RUNTIME_EVENTS_UP = Gauge, "sandwatch_runtime_events_up", [],
        "1 while the containerd event stream is connected.";
    RUNTIME_INFO = Gauge, "sandwatch_runtime_info", ["runtime", "version", "revision"],
        "1 for the container runtime version the agent talks to.";
    RUNTIME_KNOWN_ISSUE = Gauge, "sandwatch_runtime_known_issue", ["runtime", "issue"],
        "1 when the running runtime version has a known crash in sandwatch's domain (0 if not, or if its version does not parse).";
    RUNTIME_METADATA_REFRESHES_TOTAL = Counter, "sandwatch_runtime_metadata_refreshes_total", ["result"],
        "Listings of pods and containers over the CRI, by result.";
    RUNTIME_METADATA_UNRESOLVED_TOTAL = Counter, "sandwatch_runtime_metadata_unresolved_total", [],
        "Container cgroups the CRI never listed after repeated asking (not CRI containers, or gone): counted without names.";
    RUNTIME_METADATA_UP = Gauge, "sandwatch_runtime_metadata_up", [],
        "1 while the last listing of pods and containers over the CRI socket succeeded.";

    // telemetry/metrics.rs
    BUILD_INFO = Gauge, "sandwatch_build_info", ["version", "kernel"],
        "Version of sandwatch and release of the kernel it runs on.";
    CHANNEL_EVENTS_DROPPED_TOTAL = Counter, "sandwatch_channel_events_dropped_total", ["kind"],
        "Events lost because their ring's queue to the decoder was full (the reader's channel stage), by kind: exits, OOM kills and cgroup changes each have their own.";
    DECODE_ERRORS_TOTAL = Counter, "sandwatch_decode_errors_total", ["reason"],
        "Records that could not be decoded, by reason.";
    EVENTS_DROPPED_TOTAL = Counter, "sandwatch_events_dropped_total", ["stage"],
        "Events lost, by pipeline stage (kernel: ring buffer full; channel: reader queue full; decode: malformed record).";
    EVENTS_TOTAL = Counter, "sandwatch_events_total", ["kind"],
        "Events received from the kernel ring buffer, by kind.";
    EVENTS_UNATTRIBUTED_TOTAL = Counter, "sandwatch_events_unattributed_total", ["kind"],
        "Exit and OOM events whose task was not in the kernel task table (no cgroup known), by kind.";
    KERNEL_EVENTS_DROPPED_TOTAL = Counter, "sandwatch_kernel_events_dropped_total", ["kind"],
        "Events lost in the kernel, by kind: their ring was full, or they were refused to keep room for other containers (by reason in sandwatch_kernel_events_lost_total).";
    KERNEL_EVENTS_LOST_TOTAL = Counter, "sandwatch_kernel_events_lost_total", ["kind", "reason"],
        "Events lost in the kernel, by kind and reason: ring_full (no room left), container_share (its container had sent its share of a busy ring: one container's flood), reserve (only the ring's last eighth was left, kept for inits', sandboxes' and first OOM kills' records and cgroup mkdirs and rmdirs).";
    KERNEL_EVENTS_TOTAL = Counter, "sandwatch_kernel_events_total", ["kind"],
        "Events the kernel programs produced (emitted or dropped), by kind.";
    KERNEL_EXITS_UNSTREAMED_TOTAL = Counter, "sandwatch_kernel_exits_unstreamed_total", ["reason"],
        "Exits the kernel counted instead of streaming, by reason (thread: not the last thread of its process; host: a process in no pod cgroup and no runtime).";
    KERNEL_PATH = Gauge, "sandwatch_kernel_path", ["path"],
        "How the kernel programs name an OOM victim after it is gone: fork_table (a program at every fork keeps a task table; cgroup v1, and v2 kernels whose OOM tracepoint lacks the victim's task) or victim_task (read off the victim's task at the kill: one program per process).";
    OOM_DECISION_SOURCE = Gauge, "sandwatch_oom_decision_source", ["source"],
        "Where which limit fired on an OOM kill is read from on this kernel (1 for the one in use): oom_control (the OOM killer's own control, read on the kill path), victim_memcg (the page counters of the victim's memory cgroups: the kernel lets no program see the control), allocating_task_memcg (those of the task that ran the kill: a kill run for another cgroup can read as the node's).";
    PROGRAMS_ATTACHED = Gauge, "sandwatch_programs_attached", [],
        "eBPF programs loaded and attached by this agent.";
    READER_ASLEEP = Gauge, "sandwatch_reader_asleep", [],
        "1 while the ring-buffer reader sleeps (no record for a while; the next one wakes it), else 0.";
    READER_DRAINS_TOTAL = Counter, "sandwatch_reader_drains_total", ["cause"],
        "Ring-buffer drains by the reader, by cause (timer: its drain interval, or once a second while it sleeps; wakeup: the kernel woke it).";
    KERNEL_CGROUP_RECORDS_UNSTREAMED_TOTAL = Counter, "sandwatch_kernel_cgroup_records_unstreamed_total", ["reason"],
        "Cgroup changes the kernel counted instead of streaming, by reason (nested: a cgroup made or removed below a container's, which is the container's own; attach: a process moved inside a container, or into a cgroup past its first 4 attaches).";
    TASK_TABLE_MISSES_TOTAL = Counter, "sandwatch_task_table_misses_total", [],
        "Exits and OOM kills of pod tasks the kernel's task table does not hold (refused: see sandwatch_task_table_refused_total; cgroup v1 and kernels without the victim's task): they read unknown, never the host's.";
    TASK_TABLE_REFUSED_TOTAL = Counter, "sandwatch_task_table_refused_total", ["reason"],
        "Pod tasks the kernel's task table refused an entry, by reason: quota (their pod or container held --task-table-quota entries), full (the table was full, or only its last room was left, kept for pods and containers holding fewer than 16). Their exits and kills read unknown, and cost no other pod its entries.";
    TASK_TABLE_RETIRED_TOTAL = Counter, "sandwatch_task_table_retired_total", ["reason"],
        "Task-table entries given back without their task's exit, by reason: exec (a thread that was not its process's leader called exec and its id ended), host_fork (found under a host parent's new child: a stale id), untracked (of a cgroup no longer tracked, at its task's exit).";
    TRACKED_CGROUPS_REFUSED_TOTAL = Counter, "sandwatch_tracked_cgroups_refused_total", [],
        "New cgroups the kernel's tracked-cgroup map had no room for (their tasks' exits count as the host's).";

    // telemetry/pod_series.rs
    POD_MEMORY_PRESSURE = Gauge, "sandwatch_pod_memory_pressure", ["pod_uid", "namespace", "pod", "container", "workload", "workload_kind", "reason"],
        "1 while a container is under memory pressure, by reason (near_limit: what no reclaim frees at 90 % of its limit; thrashing: at its limit and stalling; growing: at its current growth its limit within 10 minutes); absent otherwise. Capped with the per-pod series.";
    POD_MEMORY_SECONDS_TO_LIMIT = Gauge, "sandwatch_pod_memory_seconds_to_limit", ["pod_uid", "namespace", "pod", "container", "workload", "workload_kind"],
        "While a container under memory pressure grows: seconds until what no reclaim frees meets its limit at its current growth. Capped with the per-pod series.";
    POD_MEMORY_UNRECLAIMABLE_RATIO = Gauge, "sandwatch_pod_memory_unreclaimable_ratio", ["pod_uid", "namespace", "pod", "container", "workload", "workload_kind"],
        "While a container is under memory pressure: what no reclaim frees (usage less page cache: anonymous memory, tmpfs, kernel memory) over its limit. Capped with the per-pod series.";
    POD_CONTAINER_EXITS_TOTAL = Counter, "sandwatch_pod_container_exits_total", ["pod_uid", "namespace", "pod", "container", "workload", "workload_kind", "reason", "sender"],
        "Exits of containers' inits per pod and container, by reason (error, oom_killed, killed, or the signal's name) and the sender of the signal that ended it (none for an exit by a code), across the container's restarts. A run that completed and a sandbox the runtime stopped (a pod's ordinary end) have none: sandwatch_workload_container_exits_total counts them. Capped with the OOM series, served at 0 before their first exit.";
    POD_OOM_KILLS_TOTAL = Counter, "sandwatch_pod_oom_kills_total", ["pod_uid", "namespace", "pod", "container", "workload", "workload_kind", "victim_role", "limit", "cause", "warned"],
        "OOM kills per pod and container, by whose limit fired, what filled it and whether the container was warned of memory pressure first (namespace, pod, container and workload names are empty without runtime metadata). Capped series, served at 0 before their first kill.";
    POD_OOM_KILLS_WARNED_SECONDS_TOTAL = Counter, "sandwatch_pod_oom_kills_warned_seconds_total", ["pod_uid", "namespace", "pod", "container", "workload", "workload_kind", "victim_role", "limit", "cause"],
        "For the OOM kills of a container that was warned of memory pressure, the seconds from its warning to the kill, summed: over the warned kills, how long before they were warned. Capped series, served at 0 before their first kill.";
    WORKLOAD_CONTAINER_EXITS_TOTAL = Counter, "sandwatch_workload_container_exits_total", ["namespace", "workload", "workload_kind", "reason", "sender"],
        "Exits of containers' inits per workload, by reason and the sender of the signal that ended it (none for an exit by a code), across its pods' replacements. Capped with the workload OOM series, served at 0 before their first exit.";
    WORKLOAD_OOM_KILLS_TOTAL = Counter, "sandwatch_workload_oom_kills_total", ["namespace", "workload", "workload_kind", "victim_role"],
        "OOM kills per workload (Deployment, StatefulSet, DaemonSet, CronJob, Job, or the bare Pod) across its pods' replacements. Capped series, served at 0 before their first kill.";

    // telemetry/watchdog_metrics.rs: memory pressure
    MEMORY_LIMIT_CHANGES_TOTAL = Counter, "sandwatch_memory_limit_changes_total", ["limit", "direction", "scope"],
        "Changes of pods' and containers' memory limits (limit: memory_max, memory_high, swap; direction: lowered, raised, set, lifted; scope: pod, container), from the kernel's notice of a write, the runtime's update, a read, or the limit the kernel counted at an OOM kill.";
    MEMORY_LIMIT_READS_TOTAL = Counter, "sandwatch_memory_limit_reads_total", ["reason"],
        "Reads of cgroups' memory limits, by what asked for them: start (a cgroup first known), kernel_notice (a limit file written), runtime (a container update), timer (a cgroup the kernel cannot tell of, once a minute).";
    MEMORY_LIMITS_WATCHED = Gauge, "sandwatch_memory_limits_watched", [],
        "Pods' and workload containers' cgroups whose memory limits are followed.";
    MEMORY_WATCHES_REFUSED_TOTAL = Counter, "sandwatch_memory_watches_refused_total", [],
        "Cgroups whose limit files the kernel refused to watch (inotify: its watch or instance limit, or the cgroup gone): their limits are read once a minute instead.";
    MEMORY_WATCH_FAILURES_TOTAL = Counter, "sandwatch_memory_watch_failures_total", ["reason"],
        "Watches of cgroups' memory files (limit writes; v2 memory.events) the kernel refused, by reason: instances (every inotify instance of the user in use: fs.inotify.max_user_instances, shared by every root process on the node, a container's too), watches (fs.inotify.max_user_watches), gone (the cgroup was removed), other. Those cgroups are read on timers and asked for again (10 s, doubling to a minute); one log line says so.";
    MEMORY_NOTICE_OVERFLOWS_TOTAL = Counter, "sandwatch_memory_notice_overflows_total", [],
        "Times the kernel's queue of notices of cgroups' memory files overflowed: each cgroup's limits are read once over the next minute, and each container's usage screened again soon (no full reads).";
    OOM_KILLS_AFTER_LIMIT_DECREASE_TOTAL = Counter, "sandwatch_oom_kills_after_limit_decrease_total", ["limit"],
        "OOM kills whose limit (container, pod) was lowered in the 10 minutes before the kill.";
    MEMORY_NOTICES_TOTAL = Counter, "sandwatch_memory_notices_total", ["result"],
        "Containers for which the kernel was asked to say at once when their memory nears the limit (v1: usage at half the limit, through cgroup.event_control; v2: a PSI stall trigger), by result: registered, refused (a read-only cgroupfs, no PSI: the container is screened instead).";
    MEMORY_PRESSURE_CONTAINERS = Gauge, "sandwatch_memory_pressure_containers", ["reason"],
        "Workload containers under memory pressure now, by reason (near_limit, thrashing, growing).";
    MEMORY_PRESSURE_ENDED_TOTAL = Counter, "sandwatch_memory_pressure_ended_total", ["reason", "ended"],
        "Episodes of memory pressure that ended, by reason and how (eased, killed: an OOM kill in the container, gone, unlimited).";
    MEMORY_PRESSURE_LEAD_SECONDS = Histogram(&LEAD_BUCKETS), "sandwatch_memory_pressure_lead_seconds", [],
        "For each OOM kill of a warned container: from its first memory pressure warning to the kill.";
    MEMORY_PRESSURE_READS_TOTAL = Counter, "sandwatch_memory_pressure_reads_total", ["kind"],
        "What the memory pressure watch read, by kind (screen: a usage or limit file; detail: a container's full read; wakeup: the kernel said a container's memory events changed).";
    MEMORY_PRESSURE_STARTED_TOTAL = Counter, "sandwatch_memory_pressure_started_total", ["reason"],
        "Episodes of memory pressure that started (warnings), by reason.";
    MEMORY_PRESSURE_WATCHED = Gauge, "sandwatch_memory_pressure_watched", [],
        "Workload containers whose memory pressure is watched.";
    OOM_KILLS_WARNED_TOTAL = Counter, "sandwatch_oom_kills_warned_total", ["warned"],
        "OOM kills of pods' workload containers, by whether the container was under memory pressure when it came (true, false).";

    // telemetry/signal_metrics.rs
    CONTAINER_SIGNAL_EXITS_TOTAL = Counter, "sandwatch_container_signal_exits_total", ["container_role", "sender", "unit"],
        "Containers' inits (sandbox, workload) ended by a signal, by its sender: oom_killer, kernel (a fault, a limit, a timer it set), same_container, same_pod, other_pod, runtime (its shim, runc: a stop), host (with the systemd unit of the process: a service's name for the first 16 services, other beyond, scope for a transient unit, none without), unknown (no record of it: lost, or sent before the agent started; or a file's I/O notice, whose arming is not seen).";
    CONTAINER_STOPS_PAST_GRACE_TOTAL = Counter, "sandwatch_container_stops_past_grace_total", ["sender"],
        "Containers' inits a sender asked to stop (SIGTERM or another signal) and then killed with SIGKILL: a stop past its grace period, by sender.";
    CONTAINER_STOP_GRACE_SECONDS = Histogram(&GRACE_BUCKETS), "sandwatch_container_stop_grace_seconds", [],
        "For each stop past its grace period: from the sender's request to stop (its last signal that can ask it, within the hour before) to its SIGKILL.";
    RUNTIME_DISAGREEMENTS_TOTAL = Counter, "sandwatch_runtime_disagreements_total", ["direction"],
        "Container ends the runtime reported otherwise than the kernel saw them (containerd's TaskExit, the CRI's status), by direction: runtime_says_oom (OOMKilled for an init the OOM killer did not end), kernel_says_oom (the OOM killer ended it; the runtime says another reason), exit_code.";
    RUNTIME_VERDICTS_TOTAL = Counter, "sandwatch_runtime_verdicts_total", ["result"],
        "Container ends whose runtime report was checked against the kernel, by result: agreed, disagreed, unanswered (the runtime never said the container exited).";
    SIGNAL_SENDERS_FORGOTTEN_TOTAL = Counter, "sandwatch_signal_senders_forgotten_total", [],
        "Signals of live processes forgotten: a process's whole record because the table was full or the pod whose share it took already had 256, or one signal its process's full record kept no room for (it outranked none there): their ends may read unknown.";

    // telemetry/records/hub.rs
    EVENT_RECORDS_TOTAL = Counter, "sandwatch_event_records_total", ["kind"],
        "Event records published on /events, by kind.";
    EVENT_STREAM_DROPPED_TOTAL = Counter, "sandwatch_event_stream_dropped_total", [],
        "Event records a subscriber missed because it read too slowly (its queue was full); summed over subscribers.";
    EVENT_SUBSCRIBERS = Gauge, "sandwatch_event_subscribers", [],
        "Clients following /events now.";
    EVENT_SUBSCRIBERS_REFUSED_TOTAL = Counter, "sandwatch_event_subscribers_refused_total", [],
        "Clients refused on /events because --max-event-subscribers were following already.";

    // telemetry/server/metrics.rs
    HTTP_ACCEPT_ERRORS_TOTAL = Counter, "sandwatch_http_accept_errors_total", ["listener"],
        "accept(2) failures (EMFILE: out of descriptors); the listener backs off.";
    HTTP_CONNECTIONS = Gauge, "sandwatch_http_connections", ["listener"],
        "Connections open now, by listener (metrics, events).";
    HTTP_CONNECTIONS_CLOSED_TOTAL = Counter, "sandwatch_http_connections_closed_total", ["listener", "reason"],
        "Connections the agent closed: evicted (to make room at --max-connections), header_timeout (request or TLS handshake not in within 10 s), idle_timeout (60 s without a request), write_timeout (the client stopped reading for --write-timeout-seconds).";
    HTTP_REFUSED_TOTAL = Counter, "sandwatch_http_refused_total", ["listener", "reason"],
        "Clients turned away: connection_cap (every connection busy), tls_handshake, client_certificate (none, or one the CA did not sign), token (no or a wrong bearer token).";
    HTTP_SCRAPES_TOTAL = Counter, "sandwatch_http_scrapes_total", [],
        "Scrapes of /metrics let in (past the client certificate and token, where asked for).";
    HTTP_METRICS_RENDERS_TOTAL = Counter, "sandwatch_http_metrics_renders_total", [],
        "Bodies of /metrics rendered: the scrapes that arrive while one renders share the next, so a flood of scrapers costs about one render at a time, not one each.";
    TLS_RELOADS_TOTAL = Counter, "sandwatch_tls_reloads_total", ["result"],
        "Reloads of the TLS certificate, key and client CA after they changed on disk; on error the previous ones stay in use.";

    // telemetry/watchdog_metrics.rs
    CGROUP_RESYNC_CHANGES_TOTAL = Counter, "sandwatch_cgroup_resync_changes_total", ["change"],
        "Cgroup changes missed with lost events and applied from the cgroup tree, by change.";
    CGROUP_RESYNCS_TOTAL = Counter, "sandwatch_cgroup_resyncs_total", [],
        "Re-reads of the cgroup tree after events that may have held cgroup changes were lost.";
    CONTAINER_EXITS_TOTAL = Counter, "sandwatch_container_exits_total", ["container_role", "reason"],
        "Exits of containers' inits (the container ended, or its start did), by the container's role (sandbox, workload) and reason: completed (0), error (another code), oom_killed, killed (SIGKILL not from the OOM killer), or the signal's name.";
    EXIT_HANDLING_DELAY_SECONDS = Histogram(&DELAY_BUCKETS), "sandwatch_exit_handling_delay_seconds", [],
        "Delay from the kernel's timestamp of an exit or OOM kill to its dispatch.";
    LATE_EXIT_EVENTS_TOTAL = Counter, "sandwatch_late_exit_events_total", ["reason", "source"],
        "Exit events handled after their sandbox, container or task was already gone.";
    OOM_EVENTS_TOTAL = Counter, "sandwatch_oom_events_total", ["scope", "qos_class", "limit", "constraint"],
        "OOM events (one pick of the OOM killer: one process, or a whole container killed as a group), by scope, pod QoS class, whose limit fired (container, pod, node, unknown) and the constraint (memcg, global, unknown).";
    OOM_CAUSES_TOTAL = Counter, "sandwatch_oom_causes_total", ["limit", "cause"],
        "OOM events by whose limit fired and what filled that cgroup at the kill: anon (processes' own memory), page_cache (unreclaimable file pages), shmem (tmpfs, emptyDir in memory, /dev/shm), kernel (slab, stacks, page tables, sockets), unknown (not read).";
    OOM_LIMIT_UNKNOWN_TOTAL = Counter, "sandwatch_oom_limit_unknown_total", ["reason"],
        "OOM events whose limit could not be said, by why: no_counters (this kernel's page counters could not be read at the kill), unplaced (a limit fired that is neither the victim's container's, its pod's nor above a known pod).";
    OOM_GROUP_CONTAINERS = Gauge, "sandwatch_oom_group_containers", [],
        "Tracked containers whose memory.oom.group is 1: an OOM kill takes the whole container (kubelet >= 1.28 on cgroup v2).";
    OOM_KILLS_TOTAL = Counter, "sandwatch_oom_kills_total", ["victim_role", "qos_class"],
        "Processes OOM-killed on this node, by victim role and pod QoS class.";
    OOM_KILLS_WINDOW = Gauge, "sandwatch_oom_kills_window", ["window"],
        "OOM events (the OOM killer's picks: a group kill of a whole container is one) on this node within the sliding window.";
    OOM_MISMATCH_TOTAL = Counter, "sandwatch_oom_mismatch_total", ["direction"],
        "OOM kills only one side reported: kernel_only (the runtime never said OOM) or runtime_only.";
    OOM_STORM = Gauge, "sandwatch_oom_storm", [],
        "1 while OOM events in the window are at or above the storm threshold, until they fall to the clear level; no namespace counts for more than half the threshold, so it takes more than one (one tenant's storm is sandwatch_oom_storm_namespace).";
    OOM_STORM_NAMESPACE = Gauge, "sandwatch_oom_storm_namespace", ["namespace", "pod_uid"],
        "A namespace's OOM events in the window while they alone are at or above the storm threshold (until they fall to the clear level); pod_uid where the runtime has not named the namespace (each such pod is its own); absent otherwise, at most the 10 busiest.";
    REGISTRY_EVICTIONS_TOTAL = Counter, "sandwatch_registry_evictions_total", ["what"],
        "Pod state the registry refused or forgot because a bound was reached, by what.";
    RUNTIME_CORRELATION_EVICTIONS_TOTAL = Counter, "sandwatch_runtime_correlation_evictions_total", [],
        "Pending kernel/runtime pairs forgotten because the correlation tables were full.";
    RUNTIME_CRASHES_TOTAL = Counter, "sandwatch_runtime_crashes_total", ["runtime", "reason"],
        "Container runtime processes that ended without being asked to, by runtime and reason.";
    RUNTIME_EXIT_LAG_SECONDS = Histogram(&LAG_BUCKETS), "sandwatch_runtime_exit_lag_seconds", [],
        "From the kernel's exit of a container init to containerd delivering its TaskExit to the agent.";
    RUNTIME_EXITS_UNMATCHED_TOTAL = Counter, "sandwatch_runtime_exits_unmatched_total", [],
        "containerd TaskExit events for which the kernel showed no container init exit.";
    RUNTIME_METADATA_CACHED = Gauge, "sandwatch_runtime_metadata_cached", ["kind"],
        "Pod and container names held, by kind (bounded).";
    RUNTIME_METADATA_EVICTIONS_TOTAL = Counter, "sandwatch_runtime_metadata_evictions_total", [],
        "Pod or container names dropped because the metadata cache was full.";
    RUNTIME_OOM_MATCHED_TOTAL = Counter, "sandwatch_runtime_oom_matched_total", [],
        "Kernel OOM kills in containers that containerd also reported as OOM.";
    RUNTIME_RESTARTS_TOTAL = Counter, "sandwatch_runtime_restarts_total", ["runtime"],
        "Container runtime processes started after the runtime was down.";
    RUNTIME_UP = Gauge, "sandwatch_runtime_up", ["runtime"],
        "1 while a process of the container runtime runs on this node.";
    SANDBOX_DEATHS_TOTAL = Counter, "sandwatch_sandbox_deaths_total", ["cause"],
        "Exits of a pod sandbox's init (pause), by cause.";
    TASK_EXITS_TOTAL = Counter, "sandwatch_task_exits_total", ["role", "outcome"],
        "Process exits dispatched, by role and outcome.";
    TRACKED_CONTAINERS = Gauge, "sandwatch_tracked_containers", [],
        "Containers in the registry.";
    TRACKED_PROCESSES = Gauge, "sandwatch_tracked_processes", [],
        "Container init processes alive and known to the registry.";
    TRACKED_SANDBOXES = Gauge, "sandwatch_tracked_sandboxes", [],
        "Pod sandboxes in the registry.";
    NAMESPACE_PODS = Gauge, "sandwatch_namespace_pods", ["namespace"],
        "Pods in the registry by the namespace the runtime named for them (pods it has not named are not counted): a series for each namespace with pods on the node, before anything happens in it.";
}

impl Family {
    fn check(&self, kind: &str, labelled: bool) -> Result<(), prometheus::Error> {
        if self.kind.word() != kind || self.labels.is_empty() == labelled {
            return Err(prometheus::Error::Msg(format!(
                "{} is a {}{} family, not made as a {kind}{}",
                self.name,
                self.kind.word(),
                if self.labels.is_empty() { "" } else { " labelled" },
                if labelled { " labelled" } else { "" }
            )));
        }
        Ok(())
    }

    fn opts(&self) -> Opts {
        Opts::new(self.name, self.help)
    }

    /// The family as a counter, not registered (a collector copies values
    /// into it at scrape time and reports it itself).
    pub fn new_counter(&self) -> Result<IntCounter, prometheus::Error> {
        self.check("counter", false)?;
        IntCounter::with_opts(self.opts())
    }

    pub fn new_counter_vec(&self) -> Result<IntCounterVec, prometheus::Error> {
        self.check("counter", true)?;
        IntCounterVec::new(self.opts(), self.labels)
    }

    pub fn new_gauge(&self) -> Result<IntGauge, prometheus::Error> {
        self.check("gauge", false)?;
        IntGauge::with_opts(self.opts())
    }

    pub fn new_gauge_vec(&self) -> Result<IntGaugeVec, prometheus::Error> {
        self.check("gauge", true)?;
        IntGaugeVec::new(self.opts(), self.labels)
    }

    /// The family as a counter, registered in `into`.
    pub fn counter(&self, into: &Registry) -> Result<IntCounter, prometheus::Error> {
        let c = self.new_counter()?;
        into.register(Box::new(c.clone()))?;
        Ok(c)
    }

    pub fn counter_vec(&self, into: &Registry) -> Result<IntCounterVec, prometheus::Error> {
        let c = self.new_counter_vec()?;
        into.register(Box::new(c.clone()))?;
        Ok(c)
    }

    pub fn gauge(&self, into: &Registry) -> Result<IntGauge, prometheus::Error> {
        let g = self.new_gauge()?;
        into.register(Box::new(g.clone()))?;
        Ok(g)
    }

    pub fn gauge_vec(&self, into: &Registry) -> Result<IntGaugeVec, prometheus::Error> {
        let g = self.new_gauge_vec()?;
        into.register(Box::new(g.clone()))?;
        Ok(g)
    }

    /// A labelled counter of fractions (seconds summed), registered in
    /// `into`.
    pub fn float_counter_vec(&self, into: &Registry) -> Result<CounterVec, prometheus::Error> {
        self.check("counter", true)?;
        let c = CounterVec::new(self.opts(), self.labels)?;
        into.register(Box::new(c.clone()))?;
        Ok(c)
    }

    /// A gauge of fractions (seconds), registered in `into`.
    pub fn float_gauge(&self, into: &Registry) -> Result<prometheus::Gauge, prometheus::Error> {
        self.check("gauge", false)?;
        let g = prometheus::Gauge::with_opts(self.opts())?;
        into.register(Box::new(g.clone()))?;
        Ok(g)
    }

    /// A labelled gauge of fractions (a ratio), registered in `into`.
    pub fn float_gauge_vec(&self, into: &Registry) -> Result<GaugeVec, prometheus::Error> {
        self.check("gauge", true)?;
        let g = GaugeVec::new(self.opts(), self.labels)?;
        into.register(Box::new(g.clone()))?;
        Ok(g)
    }

    pub fn histogram(&self, into: &Registry) -> Result<Histogram, prometheus::Error> {
        let Kind::Histogram(buckets) = self.kind else {
            return Err(prometheus::Error::Msg(format!("{} is no histogram", self.name)));
        };
        self.check("histogram", false)?;
        let h = Histogram::with_opts(HistogramOpts::new(self.name, self.help).buckets(buckets.to_vec()))?;
        into.register(Box::new(h.clone()))?;
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_help_is_one_line() {
        let mut names: Vec<&str> = ALL.iter().map(|f| f.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ALL.len(), "a name twice");
        for f in ALL {
            assert!(f.name.starts_with("sandwatch_"), "{}", f.name);
            assert!(!f.help.is_empty() && !f.help.contains('\n'), "{}", f.name);
            assert_eq!(
                f.kind == Kind::Counter,
                f.name.ends_with("_total"),
                "{}: counters, and only they, end in _total",
                f.name
            );
        }
    }

    #[test]
    fn a_family_is_made_only_as_what_it_is() {
        assert!(OOM_KILLS_TOTAL.new_counter_vec().is_ok());
        assert!(OOM_KILLS_TOTAL.new_counter().is_err(), "it has labels");
        assert!(OOM_KILLS_TOTAL.new_gauge_vec().is_err(), "it is a counter");
        assert!(OOM_STORM.histogram(&Registry::new()).is_err());
    }
}
