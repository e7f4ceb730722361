//! `cargo xtask mutants`: the core's and the model's unit tests each guard a bug;
//! this puts each bug back into the code, one at a time, and checks that
//! the test that guards it fails. A mutation whose code is no longer there
//! fails the run too: the list must follow the code.
//!
//! The mutations are made in a copy of the workspace (`target/mutants/tree`),
//! never in the tree: a signal does not unwind, so a run stopped by Ctrl-C,
//! a CI timeout or a kill leaves its mutation in the copy, which the next
//! run makes the tree's again before it mutates anything.
//!
//! The copy builds into the tree's target directory. Cargo names a
//! workspace crate's files by its path relative to the workspace, so the
//! copy's crates would be the tree's; the agent crate, the one mutated, is
//! built with a profile setting of its own (`SEPARATE_UNITS`), which gives
//! its test binary and build script files of their own, and what it depends
//! on is shared, fresh as in the tree (see `mirror`). A mutation of another
//! crate would be built into the tree's files, so the run refuses one.

use std::{os::fd::AsRawFd as _, path::Path, process::Command};

use anyhow::{bail, Context as _, Result};

use crate::{
    mirror,
    util::{cargo_path, target_dir, workspace_root},
};

/// The crate the mutations are made in, and its directory.
const CRATE: &str = "sandwatch";
const CRATE_DIR: &str = "agent/";

/// Passed to cargo in the copy: 255 code-generation units, where the
/// default is 256, change nothing of the code but are part of the hash
/// cargo names the agent crate's files by (for its build script too, whose
/// output records paths in the copy). No workspace sets 255, so the copy's
/// test binary is never the tree's.
const SEPARATE_UNITS: &str = "profile.test.package.sandwatch.codegen-units=255";

/// A bug: in `file`, `from` becomes `to`; `test` (a name filter of the
/// agent's unit tests) must fail then.
struct Mutation {
    file: &'static str,
    from: &'static str,
    to: &'static str,
    test: &'static str,
    bug: &'static str,
}

const MUTATIONS: &[Mutation] = &[
    Mutation {
        file: "agent/src/watchdog/oom_limit.rs",
        from: "Some(decision) => decided(read.levels, read.cut, decision, placed),",
        to: "Some(_) => from_counters(read, placed, margins),",
        test: "the_kernels_own_decision_names_the_cgroup_whatever_task_ran_the_kill",
        bug: "which limit fired read off the task that ran the OOM killer: a resize reads as a node OOM",
    },
    Mutation {
        file: "agent/src/watchdog/oom_limit.rs",
        from: "position(|(i, l)| word(i) == Some(true) && at_limit(l, margins.risen));",
        to: "position(|(_, _)| false);",
        test: "the_level_the_kernel_ran_the_oom_killer_for_fired",
        bug: "the kernel's count of OOMs unheard: a pod's limit firing beside a container at its own reads container",
    },
    Mutation {
        file: "agent/src/watchdog/oom_limit.rs",
        from: "position(|(i, l)| word(i) == Some(true) && at_limit(l, margins.risen));",
        to: "position(|(i, _)| word(i) == Some(true));",
        test: "the_level_the_kernel_ran_the_oom_killer_for_fired",
        bug: "an OOM that killed nothing after a container's kill blames it for its pod's next kill",
    },
    Mutation {
        file: "agent/src/watchdog/oom_limit.rs",
        from: "Some(unsaid.map_or((c, true), |i| (i, false)))",
        to: "Some(unsaid.map_or((c, true), |_| (c, true)))",
        test: "the_level_the_kernel_ran_the_oom_killer_for_fired",
        bug: "a container without the kernel's word, at its limit inside a pod that rose, read as the pod's",
    },
    Mutation {
        file: "agent/src/watchdog/mod.rs",
        from: "                    self.oom_counts.seen(c.cgroup_id, count);",
        to: "                    let _ = count;",
        test: "the_kernels_count_of_ooms_says_which_limit_fired",
        bug: "a v2 cgroup found at start-up has no past: its pod's first kill after a restart reads by page counters",
    },
    Mutation {
        file: "agent/src/watchdog/oom_counts.rs",
        from: "if owned(id) { (&mut self.last, MAX_COUNTS) } else { (&mut self.others, MAX_OTHERS) };",
        to: "(&mut self.last, MAX_COUNTS);",
        test: "a_cgroup_forgotten_or_past_the_bound_has_no_word",
        bug: "a tenant's nested cgroups, never removed, fill the table the pods' counts need",
    },
    Mutation {
        file: "agent/src/watchdog/oom_counts.rs",
        from: "self.last.entry(cgroup_id).or_insert(0);",
        to: "self.last.insert(cgroup_id, 0);",
        test: "a_count_that_rose_since_it_was_seen_is_the_kernels_word",
        bug: "a mkdir read after its cgroup's kill resets the count: the next kill blames it",
    },
    Mutation {
        file: "agent/src/watchdog/oom_counts.rs",
        from: "                    *last = (*last).max(now);",
        to: "                    let _ = &last;",
        test: "a_count_that_rose_since_it_was_seen_is_the_kernels_word",
        bug: "a count not kept after a kill: every later kill blames the cgroup that ran the first",
    },
    Mutation {
        file: "agent/src/watchdog/oom_counts.rs",
        from: "                    *last = (*last).max(now);",
        to: "                    *last = now;",
        test: "a_count_that_rose_since_it_was_seen_is_the_kernels_word",
        bug: "a record read out of order sets a count back: the next kill blames its cgroup",
    },
    Mutation {
        file: "agent/src/watchdog/pressure/verdict.rs",
        from: "ratio >= limits::GROWTH_ENTER_WORKING_SET && (slow || fast)",
        to: "ratio >= limits::GROWTH_ENTER_WORKING_SET && slow",
        test: "a_fast_grower_is_warned_growing_three_seconds_before_its_limit",
        bug: "a container that goes from half its limit to its kill in 10 s warned too late",
    },
    Mutation {
        file: "agent/src/watchdog/explain.rs",
        from: "anon: now.anon.saturating_add(freed).saturating_add(unflushed),",
        to: "anon: now.anon.saturating_add(freed),",
        test: "usage_the_unflushed_statistics_leave_unexplained_is_what_ran_out",
        bug: "statistics the kernel had not flushed name old kernel memory the cause of an anonymous OOM",
    },
    Mutation {
        file: "agent/src/watchdog/pressure/verdict.rs",
        from: "    let pinned = sample.unreclaimable();",
        to: "    let pinned = sample.working_set();",
        test: "page_cache_streamed_at_the_limit_is_no_warning",
        bug: "a container's OOM risk judged by the kubelet's working set: page cache read again warns",
    },
    Mutation {
        file: "agent/src/watchdog/pressure/verdict.rs",
        from: "let near = limit > 0 && if near_open { ratio >= limits::NEAR_LEAVE } else { ratio >= limits::NEAR_ENTER };",
        to: "let near = limit > 0 && ratio >= limits::NEAR_ENTER;",
        test: "near_the_limit_has_a_band_and_no_flapping",
        bug: "near_limit without its band: a container at 88 % flaps",
    },
    Mutation {
        file: "agent/src/watchdog/pressure/verdict.rs",
        from: "                && r2 >= limits::GROWTH_FIT\n",
        to: "\n",
        test: "steady_at_a_quarter_is_never_warned_and_a_sawtooth_is_no_growth",
        bug: "growth said of a garbage-collected sawtooth, no line fitting it",
    },
    Mutation {
        file: "agent/src/watchdog/pressure/verdict.rs",
        from: "d.calm_reads < limits::CALM_READS && held >= limits::THRASH_LEAVE_WORKING_SET",
        to: "!calm && held >= limits::THRASH_LEAVE_WORKING_SET",
        test: "thrashing_needs_the_limit_a_working_set_and_a_stall_and_clears_after_calm_reads",
        bug: "thrashing cleared by one calm read",
    },
    Mutation {
        file: "agent/src/watchdog/pressure/mod.rs",
        from: "    if ranked.len() > budget {",
        to: "    if false {",
        test: "the_kernels_wakeup_makes_a_full_read_at_once_and_budgets_hold",
        bug: "full reads without their budget: a node whose containers all hit their limits is read at once",
    },
    Mutation {
        file: "agent/src/watchdog/kills.rs",
        from: "            (Some(p), Some(id)) => p.killed(id, o.ts_ns, &mut self.edges),",
        to: "            (Some(_), Some(_)) => None,",
        test: "a_growing_container_is_warned_and_its_kill_says_so",
        bug: "a kill that does not say how long before it was warned, nor end the warning",
    },
    Mutation {
        file: "agent/src/watchdog/mod.rs",
        from: "self.close_oom_events(event.ts_ns(), now);",
        to: "self.close_oom_events(now, now);",
        test: "a_backlog_of_one_group_kill_is_one_oom_event_closed_by_kernel_time",
        bug: "OOM bursts closed by the clock instead of the records' kernel time",
    },
    Mutation {
        file: "agent/src/watchdog/names.rs",
        from: "Some(id) if !names.complete() && listing_up",
        to: "Some(id) if false && listing_up",
        test: "findings_wait_for_names_and_go_out_named_or_at_shutdown",
        bug: "per-pod series and sandbox deaths sent out before the runtime named them",
    },
    Mutation {
        file: "agent/src/watchdog/mod.rs",
        from: "self.names.flush(|p| names_in(registry, p), &mut self.out);",
        to: "self.names.release(later, |p| names_in(registry, p), &mut self.out);",
        test: "findings_wait_for_names_and_go_out_named_or_at_shutdown",
        bug: "the flush at shutdown leaves what a closing burst handed over waiting",
    },
    Mutation {
        file: "agent/src/watchdog/mod.rs",
        from: "            self.resync(now_ns);
        }
        self.losses.report(totals, &mut self.out);",
        to: "        }
        self.losses.report(totals, &mut self.out);",
        test: "lost_cgroup_changes_are_recovered_from_the_tree",
        bug: "no re-read of the cgroup tree after a loss",
    },
    Mutation {
        file: "agent/src/watchdog/resync.rs",
        from: "let gone: Vec<u64> = if tree.complete {",
        to: "let gone: Vec<u64> = if true {",
        test: "lost_cgroup_changes_are_recovered_from_the_tree",
        bug: "a walk cut short at its bound takes what it did not see for gone",
    },
    Mutation {
        file: "agent/src/watchdog/mod.rs",
        from: "Event::CgroupMkdir(c) => self.gone_already(c, now),",
        to: "Event::CgroupMkdir(_) => None,",
        test: "lost_cgroup_changes_are_recovered_from_the_tree",
        bug: "a mkdir older than the re-read brings back a pod that is gone",
    },
    Mutation {
        file: "agent/src/watchdog/storm.rs",
        from: "} else if self.storm && node <= clear {",
        to: "} else if self.storm && node < clear {",
        test: "storm_edges_rise_at_the_threshold_and_fall_at_the_clear_level",
        bug: "the storm ends one event below the clear level",
    },
    Mutation {
        file: "agent/src/watchdog/mod.rs",
        from: "side.task_exit(*pid, now.boot_ns, &mut self.out);",
        to: "side.task_exit(*pid, published, &mut self.out);",
        test: "the_runtime_side_measures_lag_and_counts_late_task_exits",
        bug: "the runtime's lag measured to its envelope's time, not to its delivery",
    },
    Mutation {
        file: "agent/src/watchdog/crashes.rs",
        from: "self.cgroup.as_deref().is_some_and(|c| super::cgroup_path::parse(c).is_some())",
        to: "false",
        test: "a_pod_process_named_like_the_runtime_is_not_the_runtime",
        bug: "a process in a pod named like the runtime keeps the runtime up",
    },
    Mutation {
        file: "agent/src/watchdog/runtime_side.rs",
        from: "self.processes.exited(e.tgid, &e.comm, e.status, r.pod.is_some())",
        to: "self.processes.exited(e.tgid, &e.comm, e.status, false)",
        test: "a_pod_process_named_like_the_runtime_is_not_the_runtime",
        bug: "a pod process renamed like the runtime exiting 2 counts as its crash",
    },
    Mutation {
        file: "agent/src/watchdog/crashes.rs",
        from: "Some((pinned, pid)) if *pinned == runtime && *pid != tgid => return None,",
        to: "Some((pinned, pid)) if *pinned == runtime && *pid != tgid && false => return None,",
        test: "a_pod_process_named_like_the_runtime_is_not_the_runtime",
        bug: "a process of the runtime's name that is not the socket's peer counts as the runtime",
    },
    Mutation {
        file: "agent/src/model/registry/pod.rs",
        from: "        if !self.runtime_named && !known {",
        to: "        if !self.runtime_named {",
        test: "sandbox_rule_first_container_unless_pause_says_otherwise",
        bug: "a workload init named pause replaces the live, known sandbox",
    },
    Mutation {
        file: "agent/src/model/registry/pod.rs",
        from: "        if !self.runtime_named && !known {",
        to: "        if !known {",
        test: "once_the_runtime_names_the_sandbox_no_process_name_changes_it",
        bug: "a process name decides the sandbox after the runtime named it",
    },
    Mutation {
        file: "agent/src/model/registry/pod.rs",
        from: "            && self.start_ns.is_none_or(|s| at_ns < s.saturating_add(START_WINDOW_NS))",
        to: "            && true",
        test: "after_its_start_no_name_stands_for_the_init",
        bug: "a start without the runtime's word never ends, so a tenant's processes stand for the init",
    },
    Mutation {
        file: "agent/src/model/registry/pod.rs",
        from: "if self.role == ContainerRole::Sandbox && self.init.is_none() && !self.joined_later {",
        to: "if false {",
        test: "after_its_start_no_name_stands_for_the_init",
        bug: "a sandbox whose init no one named never dies",
    },
    Mutation {
        file: "agent/src/model/registry/pod.rs",
        from: "        self.init.is_none() || self.is_init(key)\n",
        to: "        true\n",
        test: "a_start_is_known_by_place_and_time_not_by_names",
        bug: "a child of a starting container's first process stands for its init",
    },
    Mutation {
        file: "agent/src/model/registry/pod.rs",
        from: "            if clean {\n                if self.is_init(key) {",
        to: "            if false {\n                if self.is_init(key) {",
        test: "a_start_is_known_by_place_and_time_not_by_names",
        bug: "a start's first process handing over with a clean exit is the container's death",
    },
    Mutation {
        file: "agent/src/watchdog/oom_limit.rs",
        from: "None => levels.iter().position(|l| at_limit(l, margins.limit)).map(|i| (i, false)),",
        to: "None => levels.iter().rposition(|l| at_limit(l, margins.limit)).map(|i| (i, false)),",
        test: "the_innermost_level_at_its_limit_fired_and_is_placed_against_the_pod",
        bug: "a parent at its limit blamed when the container's own limit fired first",
    },
    Mutation {
        file: "agent/src/watchdog/oom_limit.rs",
        from: "near(l.usage_bytes, l.limit_bytes) || near(l.memsw_usage_bytes, l.memsw_limit_bytes)",
        to: "near(l.usage_bytes, l.limit_bytes)",
        test: "oom_limit",
        bug: "on v1 a container held to memory + swap (as runc sets it) not seen at its limit",
    },
    Mutation {
        file: "agent/src/watchdog/explain.rs",
        from: "anon: now.anon.saturating_add(freed).saturating_add(unflushed),",
        to: "anon: now.anon.saturating_add(unflushed),",
        test: "the_victims_anonymous_memory_freed_before_the_read_counts_back_as_anonymous",
        bug: "what the OOM reaper freed before the read is lost from the split",
    },
    Mutation {
        file: "agent/src/watchdog/oom_events.rs",
        from: "            return open.explained.clone();",
        to: "            return explain();",
        test: "each_oom_kill_says_whose_limit_fired",
        bug: "the later victims of a group kill judged again, after the first one's kill freed its memory",
    },
    Mutation {
        file: "agent/src/model/dispatch.rs",
        from: "    report.container_exit = Some(ExitReason::of(exit.status, oom));",
        to: "    report.container_exit = None;",
        test: "every_container_init_exit_is_a_finding_with_its_reason",
        bug: "a container's end counted only by role, its reason lost",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "        if is_io_notice(s.sig, s.origin) {",
        to: "        if false {",
        test: "a_files_io_notice_is_neither_the_kernels_nor_the_writers",
        bug: "a tenant's F_SETSIG SIGKILL to its neighbour read as the kernel's verdict",
    },
    Mutation {
        file: "agent/src/telemetry/pod_series.rs",
        from: "            Some(interval) if !self.hold.is_zero() => self.hold.max(interval.mul_f64(1.5)),",
        to: "            Some(interval) if false => self.hold.max(interval.mul_f64(1.5)),",
        test: "a_new_series_waits_for_a_slow_scraper_to_read_its_zero",
        bug: "a scraper slower than the hold reads a new series first at 1: its first event lost",
    },
    Mutation {
        file: "agent/src/telemetry/watchdog_metrics.rs",
        from: "                if !ordinary_end(e) {",
        to: "                if true {",
        test: "a_job_nodes_ordinary_ends_make_no_per_pod_series_and_evict_no_failure",
        bug: "a Job node's completed runs fill the per-pod cap and push out another tenant's failures",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "                        && asks_to_stop(s.sig)",
        to: "",
        test: "a_stops_request_is_its_senders_last_that_asks_to_stop_within_the_hour",
        bug: "a unit's reload half an hour before its kill read as the start of a grace",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "            SignalOrigin::Priv => pid_namespace_end.is_none(),",
        to: "            SignalOrigin::Priv => true,",
        test: "the_end_of_a_shared_pid_namespace_names_the_sandbox_not_the_kernel",
        bug: "a shared PID namespace's end, its sandbox killed, read as the kernel's verdict on every sibling",
    },
    Mutation {
        file: "agent/src/watchdog/limits.rs",
        from: "        for (id, k) in self.known.iter_mut().filter(|(_, k)| !k.suspect) {",
        to: "        for (id, k) in self.known.iter_mut() {",
        test: "the_runtimes_word_an_unwatchable_cgroup_and_lost_notices_are_read_in_time",
        bug: "a notice queue overflowed every tick pushes every owed read past the tick: limits never reread",
    },
    Mutation {
        file: "agent/src/model/exit_reason.rs",
        from: "        if oom {\n            return OomKilled;\n        }\n",
        to: "",
        test: "codes_and_signals_read_as_an_operator_reads_them",
        bug: "an OOM-killed container read as one killed by someone",
    },
    Mutation {
        file: "agent/src/model/metadata.rs",
        from: "            if pod.workload.is_none() {",
        to: "            if false {",
        test: "a_pods_workload_stays_known_when_a_container_names_the_pod_again",
        bug: "a container's record erases its pod's workload",
    },
    Mutation {
        file: "agent/src/probes/reader.rs",
        from: "                r = routine.recv() => self.heads[0] = Some(r?),\n            }\n        }",
        to: "                r = routine.recv() => self.heads[0] = Some(r?),\n            }\n            break;\n        }",
        test: "a_waiting_decoder_still_hands_on_the_oldest_record_first",
        bug: "a waiting decoder hands on the record that woke it before an older one of the other ring",
    },
    Mutation {
        file: "agent/src/telemetry/server/state.rs",
        from: ".filter(|l| l.began >= arrived)",
        to: ".filter(|_| false)",
        test: "concurrent_scrapes_share_a_body_and_none_is_older_than_its_request",
        bug: "every concurrent scrape renders and holds a body of its own",
    },
    Mutation {
        file: "agent/src/telemetry/server/state.rs",
        from: ".filter(|l| l.began >= arrived)",
        to: ".filter(|_| true)",
        test: "concurrent_scrapes_share_a_body_and_none_is_older_than_its_request",
        bug: "a scrape is sent a body rendered before it arrived",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "if pod_of(t) == pod_uid && container_of(t).is_some() && container_of(t) == container_id =>",
        to: "if container_of(t).is_some() && container_of(t) == container_id =>",
        test: "each_sender_is_named_by_its_place_never_by_its_name",
        bug: "a container of another pod with the same id taken for the target's own",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "            SignalOrigin::NoInfo => s.sender_tgid == s.target_tgid,",
        to: "            SignalOrigin::NoInfo => false,",
        test: "the_kernels_own_signals_name_no_process",
        bug: "a SIGPIPE the kernel sends a process for its own write read as its container's kill",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: ".filter(|r| !r.is_empty() && r.as_str() != \"/\")",
        to: ".filter(|r| !r.is_empty())",
        test: "the_runtimes_place_is_its_cgroup_and_below_never_the_root",
        bug: "a runtime at the root cgroup makes every host process at the root the runtime",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "SenderPlace::Tracked(id) if registry.owner(id).is_none() && self.host_paths.contains_key(&id) => {",
        to: "SenderPlace::Tracked(id) if false && self.host_paths.contains_key(&id) => {",
        test: "a_sender_in_a_host_cgroup_the_kernel_still_tracked_is_the_hosts",
        bug: "a shell that moved into a new unit's cgroup and killed at once read unknown",
    },
    Mutation {
        file: "agent/src/watchdog/verdicts.rs",
        from: "        if runtime_oom && !kernel_oom {",
        to: "        if false {",
        test: "the_runtimes_reason_is_held_against_the_kernels",
        bug: "a runtime saying OOMKilled for a stop taken at its word",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "            SignalOrigin::Info(code) => code > 0,",
        to: "            SignalOrigin::Info(code) => code > 0 || code == -2,",
        test: "the_kernels_own_signals_name_no_process",
        bug: "a timer's code forged by another pod's task taken for the kernel's",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "            SignalOrigin::Kernel(_) => true,",
        to: "            SignalOrigin::Kernel(_) => false,",
        test: "the_kernels_own_signals_name_no_process",
        bug: "a timer fired while another pod's task ran names that pod",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "        } else if sent.sender != Sender::SameContainer {",
        to: "        } else if false {",
        test: "a_tenants_own_signals_leave_room_for_the_runtimes_stop",
        bug: "a tenant's own handled signals push the runtime's stop out",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "self.order_pods.pop_front().or_else(|| self.order.pop_front())",
        to: "self.order.pop_front().or_else(|| self.order_pods.pop_front())",
        test: "a_full_table_forgets_pods_entries_before_the_runtimes",
        bug: "pods' signals to processes that live on push the runtime's stop out of a full table",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "self.per_pod.get(uid).is_some_and(|&n| n >= PER_POD_PENDING)",
        to: "self.per_pod.get(uid).is_some_and(|&n| n >= MAX_PENDING)",
        test: "a_pods_signals_to_processes_that_live_on_keep_its_share_only",
        bug: "one pod's signals take the whole table of pending signals",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "            SenderPlace::Tracked(id) => Some(pod_of(id)),",
        to: "            SenderPlace::Tracked(id) => registry.owner(id).map(|_| pod_of(id)),",
        test: "a_pods_signals_to_processes_that_live_on_keep_its_share_only",
        bug: "a pod's task the agent cannot place signals processes that live on with a trusted sender's room",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "        if sent.sender == Sender::Kernel {\n            return Some(",
        to: "        if false {\n            return Some(",
        test: "the_kernels_notices_to_a_pods_processes_are_its_pods_share",
        bug: "a tenant's timers firing on an idle CPU make trusted entries that push the runtime's stop out",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "        let room = if sent.sig == SIGKILL || trusted(&sent) {",
        to: "        let room = if false {",
        test: "a_kill_or_the_runtimes_signal_outranks_notices_in_a_full_record",
        bug: "eight notices or another container's handled signals leave the runtime's kill no room",
    },
    Mutation {
        file: "agent/src/watchdog/senders.rs",
        from: "        if known && by_pod.is_none() {",
        to: "        if false {",
        test: "the_runtimes_signal_keeps_a_record_its_time_from_then",
        bug: "a sidecar's old signal takes the runtime's stop with it when its record expires",
    },
];

/// Runs every mutation; returns one line per mutation its test missed.
pub fn run() -> Result<Vec<String>> {
    let root = workspace_root()?;
    let target = target_dir()?;
    let scratch = target.join("mutants");
    std::fs::create_dir_all(&scratch).with_context(|| format!("cannot create {}", scratch.display()))?;
    let _lock = lock(&scratch.join("lock"))?;
    let copy = scratch.join("tree");
    let synced = mirror::sync(&root, &copy, &mirror::workspace_files(&root, &target)?)?;
    eprintln!(
        "mutants: mutating a copy of the tree in {} (files refreshed from the tree: {}, removed: {})",
        copy.display(),
        synced.refreshed,
        synced.removed
    );
    let mut missed = Vec::new();
    for m in MUTATIONS {
        if !m.file.starts_with(CRATE_DIR) {
            missed.push(format!(
                "mutants: {}: only {CRATE} ({CRATE_DIR}) is built apart from the tree; `{}` cannot be mutated there",
                m.file, m.bug
            ));
            continue;
        }
        let path = copy.join(m.file);
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        if text.matches(m.from).count() != 1 {
            missed.push(format!("mutants: {}: the code of `{}` is not there once; update the list", m.file, m.bug));
            continue;
        }
        // Written now, so its time is later than any build of the copy:
        // cargo builds every mutation. An error before the file is put back
        // leaves the mutation in the copy, for the next run's sync.
        std::fs::write(&path, text.replacen(m.from, m.to, 1))?;
        let out = Command::new(cargo_path())
            .args(["test", "--quiet", "--package", CRATE, "--lib", "--config", SEPARATE_UNITS, "--", m.test])
            .current_dir(&copy)
            // Absolute, and above any `build.target-dir` of the copy's config.
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .context("cannot run cargo test")?;
        std::fs::write(&path, &text).with_context(|| format!("cannot put {} back in the copy", path.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let caught = !out.status.success() && stdout.contains("test result: FAILED");
        let compiled = stdout.contains("test result:");
        eprintln!("mutants: {}: {}", if caught { "caught" } else { "NOT CAUGHT" }, m.bug);
        if !caught {
            let why = if compiled { "its test passed" } else { "the mutated code did not build" };
            missed.push(format!("mutants: `{}` ({}) was not caught by {}: {why}", m.bug, m.file, m.test));
        }
    }
    Ok(missed)
}

/// One run at a time per copy: a second one waits. The kernel lets go of
/// the lock when its holder dies, however it dies.
fn lock(path: &Path) -> Result<std::fs::File> {
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        eprintln!("mutants: another run is using {}; waiting for it", path.display());
        // SAFETY: as above.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!("cannot lock {}: {}", path.display(), std::io::Error::last_os_error());
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copy keeps only the agent crate's files apart from the tree's: a
    /// mutation anywhere else would be built into files the tree uses.
    #[test]
    fn every_mutation_is_in_the_crate_the_copy_builds_apart() {
        for m in MUTATIONS {
            assert!(m.file.starts_with(CRATE_DIR), "{} is outside {CRATE_DIR}", m.file);
        }
        assert!(SEPARATE_UNITS.starts_with(&format!("profile.test.package.{CRATE}.")));
    }

    /// Each mutation's code is in its file exactly once, and its test's
    /// name is in the crate: an edit of the code (or a renamed test) shows here, in the
    /// unit tests, not after the mutants phase has built every other one.
    #[test]
    fn every_mutations_code_and_test_are_in_the_tree() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut tests = String::new();
        let mut stack = vec![root.join(CRATE_DIR).join("src")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    tests.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
                }
            }
        }
        for m in MUTATIONS {
            let text = std::fs::read_to_string(root.join(m.file)).unwrap_or_default();
            assert_eq!(text.matches(m.from).count(), 1, "{}: the code of `{}` is not there once", m.file, m.bug);
            // A test's name, or a module's its filter takes whole.
            assert!(tests.contains(m.test), "no test {} for `{}`", m.test, m.bug);
        }
    }
}
