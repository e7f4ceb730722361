//! The watchdog core against a fake node: what it finds from kernel and
//! runtime events and the passing of time, with no root, no kernel and no
//! clock. Each test names the bug it guards.

use std::{
    cell::RefCell,
    collections::{BTreeMap, HashMap, HashSet},
};

use super::{
    limits::{Direction, LimitKind, LimitScope, Lowered, MemoryLimits, SeenBy, LOWERED_WINDOW_NS},
    pressure::{MemorySample, PressureChange, PressureEnd, PressureReason},
    *,
};
use crate::{
    events::{
        kernel::{CgroupAttach, KernelDecision, MemcgUse, OomRss, SenderPlace, Signal, SignalOrigin, TaskIdentity},
        ExitStatus,
    },
    model::{
        metadata::{ContainerMeta, PodMeta},
        DeathCause, ExitReason, LateReason, Source, TaskRole,
    },
    watchdog::{
        correlation::{CorrelatorLimits, Expired},
        crashes::RuntimeProcess,
        explain::{MemoryStat, OomCause},
        oom_limit::UnknownLimit,
        senders::{Sender, SignalEnd, Stop},
        storm::StormEdge,
        verdicts::{Disagreement, Verdict, VerdictResult},
        OomConstraint, OomLimit, OomScope,
    },
};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
const KILLED: ExitStatus = ExitStatus::Signal { signo: 9, core_dumped: false };

fn uid(n: u32) -> String {
    format!("{n:08x}-0000-4000-8000-000000000000")
}

fn cid(n: u32) -> String {
    format!("{n:064x}")
}

fn pod_path(pod: u32) -> String {
    format!("/kubepods/burstable/pod{}", uid(pod))
}

fn container_path(pod: u32, c: u32) -> String {
    format!("{}/{}", pod_path(pod), cid(c))
}

/// A node as the fake answers for it: a cgroup tree (path → id), what
/// runs, what the runtime clients say, and what the core asked of it.
#[derive(Default)]
struct FakeNode {
    cgroups: BTreeMap<String, u64>,
    /// (cgroup path, pid, start, comm) of processes found at start-up.
    tasks: Vec<(String, u32, u64, String)>,
    oom_group: HashMap<String, bool>,
    /// What each cgroup's memory.stat says.
    memory: HashMap<String, MemoryStat>,
    comms: HashMap<u32, String>,
    runtime_processes: Vec<RuntimeProcess>,
    runtime_peer: Option<u32>,
    /// The tree walk stops at its bound.
    tree_cut_short: bool,
    losses: LossTotals,
    listing_up: bool,
    stream_up: bool,
    tracked: HashSet<u64>,
    untracked: Vec<u64>,
    /// The tracked-cgroup map's room.
    track_room: Option<usize>,
    wanted: RefCell<Vec<String>>,
    /// Containers whose CRI status the core asked for.
    statuses_wanted: RefCell<Vec<String>>,
    /// What a full read of each container's memory says.
    pressure: HashMap<String, MemorySample>,
    /// Cgroups whose limits the kernel is asked to tell of, and of those
    /// whose memory events too.
    memory_watched: HashSet<u64>,
    events_watched: HashSet<u64>,
    memory_wakeups: Vec<u64>,
    /// Each cgroup's memory limits, by path.
    limits: HashMap<String, MemoryLimits>,
    /// Cgroups whose limit files the kernel says were written.
    limit_wakeups: Vec<u64>,
    /// The kernel refuses every watch.
    unwatchable: bool,
    /// The kernel's notice queue overflowed.
    overflow: bool,
    /// The usage each container's notice was asked at.
    usage_notices: HashMap<u64, u64>,
    /// Each cgroup's count of OOMs its file shows (v2), by path.
    oom_counts: HashMap<String, u64>,
}

impl Host for FakeNode {
    fn oom_group(&self, path: &str) -> Option<bool> {
        self.cgroups.contains_key(path).then(|| self.oom_group.get(path).copied().unwrap_or(false))
    }

    fn oom_count(&self, path: &str) -> Option<u64> {
        self.oom_counts.get(path).copied()
    }

    fn memory_stat(&self, path: &str) -> Option<MemoryStat> {
        self.memory.get(path).copied()
    }

    fn memory_usage(&self, path: &str) -> Option<u64> {
        self.memory.get(path).map(|m| m.usage).or_else(|| self.pressure.get(path).map(|m| m.usage))
    }

    fn memory_limit(&self, path: &str) -> Option<u64> {
        self.pressure.get(path).and_then(|m| m.limit)
    }

    fn memory_sample(&self, path: &str) -> Option<MemorySample> {
        self.pressure.get(path).copied()
    }

    fn memory_limits(&self, path: &str) -> Option<MemoryLimits> {
        self.limits
            .get(path)
            .copied()
            .or_else(|| self.pressure.get(path).map(|m| MemoryLimits { max: m.limit, high: m.high, swap: None }))
    }

    fn watch_memory(&mut self, cgroup_id: u64, _path: &str, events: bool) -> bool {
        self.memory_watched.insert(cgroup_id);
        if events {
            self.events_watched.insert(cgroup_id);
        }
        !self.unwatchable
    }

    fn watch_usage(&mut self, cgroup_id: u64, _path: &str, threshold: u64) -> bool {
        self.usage_notices.insert(cgroup_id, threshold);
        !self.unwatchable
    }

    fn unwatch_memory(&mut self, cgroup_id: u64) {
        self.usage_notices.remove(&cgroup_id);
        self.memory_watched.remove(&cgroup_id);
        self.events_watched.remove(&cgroup_id);
    }

    fn take_memory_wakeups(&mut self) -> MemoryWakeups {
        MemoryWakeups {
            events: std::mem::take(&mut self.memory_wakeups),
            limits: std::mem::take(&mut self.limit_wakeups),
            overflowed: std::mem::take(&mut self.overflow),
            failures: Default::default(),
        }
    }

    fn cgroup_id(&self, path: &str) -> Option<u64> {
        self.cgroups.get(path).copied()
    }

    fn scan(&self, now_ns: u64) -> Vec<Event> {
        let mut events: Vec<Event> = self.cgroup_tree(now_ns).cgroups.into_iter().map(Event::CgroupMkdir).collect();
        for (path, pid, start_ns, comm) in &self.tasks {
            let cgroup = change(&path.clone(), self.cgroups[path], now_ns);
            events.push(Event::CgroupAttach(CgroupAttach {
                cgroup,
                pid: *pid,
                start_ns: *start_ns,
                comm: comm.clone(),
            }));
        }
        events
    }

    fn cgroup_tree(&self, now_ns: u64) -> CgroupTree {
        let cgroups = self.cgroups.iter().map(|(path, id)| change(path, *id, now_ns)).collect();
        CgroupTree { cgroups, complete: !self.tree_cut_short }
    }

    fn comm(&self, pid: u32, _start_ns: u64) -> Option<String> {
        self.comms.get(&pid).cloned()
    }

    fn runtime_processes(&self) -> Vec<RuntimeProcess> {
        self.runtime_processes.clone()
    }

    fn runtime_peer(&self) -> Option<u32> {
        self.runtime_peer
    }

    fn track(&mut self, cgroup_id: u64, _what: Tracking) -> bool {
        if self.track_room.is_some_and(|room| self.tracked.len() >= room) {
            return false;
        }
        self.tracked.insert(cgroup_id)
    }

    fn untrack(&mut self, cgroup_id: u64) {
        self.tracked.remove(&cgroup_id);
        self.untracked.push(cgroup_id);
    }

    fn seed_tasks(&mut self, cgroups: &HashSet<u64>) -> usize {
        self.tasks.iter().filter(|(path, ..)| cgroups.contains(&self.cgroups[path])).count()
    }

    fn losses(&self) -> LossTotals {
        self.losses
    }

    fn listing_up(&self) -> bool {
        self.listing_up
    }

    fn stream_up(&self) -> bool {
        self.stream_up
    }

    fn want_names(&self, container_id: &str) {
        self.wanted.borrow_mut().push(container_id.to_string());
    }

    fn want_status(&self, container_id: &str) {
        self.statuses_wanted.borrow_mut().push(container_id.to_string());
    }
}

fn change(path: &str, cgroup_id: u64, ts_ns: u64) -> CgroupChange {
    CgroupChange {
        ts_ns,
        hierarchy_id: 1,
        level: path.matches('/').count() as u32,
        cgroup_id,
        path: path.to_string(),
        truncated: false,
    }
}

fn mkdir(path: &str, cgroup_id: u64, ts_ns: u64) -> Event {
    Event::CgroupMkdir(change(path, cgroup_id, ts_ns))
}

fn rmdir(path: &str, cgroup_id: u64, ts_ns: u64) -> Event {
    Event::CgroupRmdir(change(path, cgroup_id, ts_ns))
}

fn attach(path: &str, cgroup_id: u64, pid: u32, comm: &str, ts_ns: u64) -> Event {
    Event::CgroupAttach(CgroupAttach { cgroup: change(path, cgroup_id, ts_ns), pid, start_ns: SEC, comm: comm.into() })
}

fn exit(pid: u32, cgroup_id: u64, comm: &str, status: ExitStatus, ts_ns: u64) -> Event {
    Event::Exit(Exit {
        ts_ns,
        pid,
        tgid: pid,
        ppid: 1,
        status,
        cgroup_id: Some(cgroup_id),
        untracked: false,
        start_ns: SEC,
        comm: comm.into(),
        group_dead: true,
    })
}

/// The OOM killer picks `pid` in `cgroup_id`, `trigger` having run out of memory.
fn oom(pid: u32, cgroup_id: u64, comm: &str, trigger: u32, ts_ns: u64) -> Event {
    Event::OomKill(KernelOomKill {
        ts_ns,
        victim_pid: pid,
        victim: Some(TaskIdentity { tgid: pid, cgroup_id, start_ns: SEC }),
        victim_untracked: false,
        victim_comm: comm.into(),
        rss: None,
        oom_score_adj: 0,
        uid: 0,
        trigger_pid: trigger,
        trigger_tgid: trigger,
        trigger_cgroup_id: cgroup_id,
        trigger_comm: "dd".into(),
        levels: Vec::new(),
        levels_cut: false,
        decision: None,
        levels_of_victim: false,
    })
}

const MIB: u64 = 1 << 20;

/// A memory cgroup as the OOM program reads it at a kill.
fn level(cgroup_id: u64, usage: u64, limit: Option<u64>) -> MemcgUse {
    MemcgUse {
        cgroup_id,
        usage_bytes: usage,
        limit_bytes: limit,
        memsw_usage_bytes: 0,
        memsw_limit_bytes: None,
        ooms: None,
    }
}

/// An OOM kill in container 102 of pod 100 with the levels the kernel read:
/// container 102 (64 MiB limit), pod 100 (32 MiB), burstable (3), kubepods
/// (2), the root (1); `full` are the levels at their limit (kubepods and
/// the root at 900 MiB when full).
fn oom_at(pid: u32, trigger: u32, ts_ns: u64, full: &[u64]) -> Event {
    let usage = |id: u64, limit: u64| if full.contains(&id) { limit } else { MIB };
    let levels = vec![
        level(102, usage(102, 64 * MIB), Some(64 * MIB)),
        level(100, usage(100, 32 * MIB), Some(32 * MIB)),
        level(3, MIB, None),
        level(2, usage(2, 900 * MIB), full.contains(&2).then_some(900 * MIB)),
        level(1, MIB, None),
    ];
    match oom(pid, 102, "app", trigger, ts_ns) {
        Event::OomKill(o) => Event::OomKill(KernelOomKill { levels, ..o }),
        other => other,
    }
}

/// Pod 1 (cgroup 100) with its sandbox container (101, init 10 `pause`)
/// and a workload container (102, init 20 `app`), as the start-up scan
/// finds them.
fn node_with_one_pod() -> FakeNode {
    let mut node = FakeNode::default();
    node.cgroups.insert("/".into(), 1);
    node.cgroups.insert("/kubepods".into(), 2);
    node.cgroups.insert("/kubepods/burstable".into(), 3);
    node.cgroups.insert(pod_path(1), 100);
    node.cgroups.insert(container_path(1, 1), 101);
    node.cgroups.insert(container_path(1, 2), 102);
    node.tasks.push((container_path(1, 1), 10, SEC, "pause".into()));
    node.tasks.push((container_path(1, 2), 20, SEC, "app".into()));
    node
}

fn runtime_settings() -> Settings {
    Settings {
        runtime: Some(RuntimeSettings {
            names: vec!["containerd".into()],
            correlation: CorrelatorLimits { exit_match_ns: 60 * SEC, oom_match_ns: 30 * SEC, max_entries: 64 },
        }),
        ..Settings::default()
    }
}

fn started(node: FakeNode, settings: Settings) -> Watchdog<FakeNode> {
    let mut wd = Watchdog::new(node, settings);
    let _ = wd.discover(SEC).count();
    wd
}

fn kernel(wd: &mut Watchdog<FakeNode>, event: Event, now_ns: u64) -> Vec<Finding> {
    wd.on_kernel(&event, now_ns).collect()
}

fn tick(wd: &mut Watchdog<FakeNode>, now_ns: u64) -> Vec<Finding> {
    wd.on_tick(now_ns).collect()
}

fn oom_events(findings: &[Finding]) -> Vec<(OomScope, u32)> {
    findings
        .iter()
        .filter_map(|f| match f {
            Finding::OomEvent { scope, victims, .. } => Some((*scope, *victims)),
            _ => None,
        })
        .collect()
}

fn pod_ooms(findings: &[Finding]) -> Vec<&PodOom> {
    findings
        .iter()
        .filter_map(|f| match f {
            Finding::PodOom(p) => Some(p),
            _ => None,
        })
        .collect()
}

fn deaths(findings: &[Finding]) -> Vec<&SandboxDeath> {
    findings
        .iter()
        .filter_map(|f| match f {
            Finding::SandboxDeath(d) => Some(d),
            _ => None,
        })
        .collect()
}

fn storms(findings: &[Finding]) -> Vec<StormEdge> {
    findings
        .iter()
        .filter_map(|f| match f {
            Finding::OomStorm(e) => Some(*e),
            _ => None,
        })
        .collect()
}

fn model(findings: &[Finding]) -> Option<ModelStats> {
    findings.iter().rev().find_map(|f| match f {
        Finding::Model(m) => Some(m.clone()),
        _ => None,
    })
}

/// Names the runtime lists for pod 1: namespace `shop`, pod `web`, its
/// sandbox and container 2 as `app`.
fn listing() -> Snapshot {
    Snapshot {
        pods: vec![PodMeta {
            uid: uid(1),
            namespace: "shop".into(),
            name: "web".into(),
            sandbox_id: cid(1),
            workload: None,
        }],
        containers: vec![
            ContainerMeta { id: cid(1), name: "POD".into(), pod_uid: uid(1), sandbox: true },
            ContainerMeta { id: cid(2), name: "app".into(), pod_uid: uid(1), sandbox: false },
        ],
    }
}

/// Guards: closing a burst by the clock instead of the records' own kernel
/// time. A backlog (an agent that fell behind: records a second older than
/// its clock) of one group kill must stay one OOM event; the next record's
/// kernel time, or a quiet tick, closes it. (Mutation checked: passing
/// `now` instead of `event.ts_ns()` to `close_oom_events` in `kernel`
/// splits the burst into three events and fails this test.)
#[test]
fn a_backlog_of_one_group_kill_is_one_oom_event_closed_by_kernel_time() {
    let mut wd = started(node_with_one_pod(), Settings::default());
    let handled_at = 5 * SEC; // the records are from 1.1 s: a backlog
    let mut found = Vec::new();
    for (i, pid) in [30, 20, 31].into_iter().enumerate() {
        found.extend(kernel(&mut wd, oom(pid, 102, "app", 30, SEC + 100 * MS + i as u64 * MS), handled_at));
    }
    assert!(oom_events(&found).is_empty(), "the burst is still open: {found:?}");
    let kills: Vec<TaskRole> = found
        .iter()
        .filter_map(|f| match f {
            Finding::OomKill(k) => Some(k.report.role),
            _ => None,
        })
        .collect();
    assert_eq!(kills, [TaskRole::ContainerChild, TaskRole::ContainerInit, TaskRole::ContainerGroup]);
    // A record within the gap of the last victim does not close it…
    let found = kernel(&mut wd, exit(40, 102, "sh", ExitStatus::Code(0), SEC + 150 * MS), handled_at + MS);
    assert!(oom_events(&found).is_empty(), "{found:?}");
    // …one past the gap does, however late it is handled.
    let found = kernel(&mut wd, exit(41, 102, "sh", ExitStatus::Code(0), SEC + 500 * MS), handled_at + 2 * MS);
    assert_eq!(oom_events(&found), [(OomScope::Container, 3)]);
    // Without a record, the tick closes a quiet burst by the clock.
    kernel(&mut wd, oom(50, 102, "app", 50, 6 * SEC), 6 * SEC);
    assert!(oom_events(&tick(&mut wd, 6 * SEC + 100 * MS)).is_empty(), "within the gap");
    assert_eq!(oom_events(&tick(&mut wd, 7 * SEC)), [(OomScope::Process, 1)]);
}

/// Guards: an OOM kill's explanation as records and logs show it: whose
/// limit, its usage and limit at the kill (from the kernel), what filled
/// it (read through the host, the victim's freed memory counted back), the
/// pod's containers by usage; and a victim the tracepoint did not name is
/// named from /proc.
#[test]
fn an_oom_kill_is_explained_and_a_victim_named_from_proc() {
    let mut node = node_with_one_pod();
    node.comms.insert(20, "app-from-proc".into());
    // Read after the kill: the victim's 8 MiB of anonymous memory is gone.
    let stat = MemoryStat {
        usage: 24 * MIB,
        anon: MIB,
        file: 21 * MIB,
        shmem: 20 * MIB,
        kernel: 2 * MIB,
        ..MemoryStat::default()
    };
    node.memory.insert(pod_path(1), stat);
    node.memory.insert(container_path(1, 1), MemoryStat { usage: MIB, ..MemoryStat::default() });
    node.memory.insert(container_path(1, 2), MemoryStat { usage: 23 * MIB, ..MemoryStat::default() });
    let mut wd = started(node, Settings::default());
    let Event::OomKill(o) = oom_at(20, 20, 2 * SEC, &[100]) else { unreachable!() };
    let o = KernelOomKill {
        victim_comm: String::new(),
        rss: Some(OomRss { total_vm_kb: 0, anon_rss_kb: 8 << 10, file_rss_kb: 0, shmem_rss_kb: 0, pgtables_kb: 0 }),
        ..o
    };
    let found = kernel(&mut wd, Event::OomKill(o), 2 * SEC + 3 * MS);
    let Some(Finding::OomKill(kill)) = found.iter().find(|f| matches!(f, Finding::OomKill(_))) else {
        panic!("{found:?}")
    };
    let e = &kill.explained;
    assert_eq!(e.fired.limit, OomLimit::Pod);
    assert_eq!((e.usage_bytes, e.limit_bytes), (Some(32 * MIB), Some(32 * MIB)), "the pod at its limit, at the kill");
    let memory = e.memory.expect("the pod's memory.stat");
    assert_eq!((memory.anon, memory.shmem, memory.page_cache, memory.kernel), (9 * MIB, 20 * MIB, MIB, 2 * MIB));
    assert_eq!(memory.read_after_ns, 3 * MS);
    assert_eq!(e.cause, OomCause::Shmem);
    let ranked: Vec<(&str, u64)> = e.containers.iter().map(|c| (c.container_id.as_str(), c.usage_bytes)).collect();
    assert_eq!(ranked, [(cid(2).as_str(), 23 * MIB), (cid(1).as_str(), MIB)]);
    assert_eq!(kill.report.victim_comm, "app-from-proc");
    assert_eq!(kill.report.role, TaskRole::ContainerInit);
    assert_eq!(kill.ts_ns, 2 * SEC);
}

/// Guards: counting a per-pod series or a sandbox death before the
/// runtime named the pod (it would carry empty names forever), and losing
/// what still waits at shutdown, a burst that closes only then included
/// (before, `flush` handed that burst's series to the queue and left it
/// there). (Mutations checked: making `defer` emit at once fails the first
/// part; emptying the queue in `flush` only by `release_named` fails the
/// last.)
#[test]
fn findings_wait_for_names_and_go_out_named_or_at_shutdown() {
    let mut node = node_with_one_pod();
    node.listing_up = true;
    let mut wd = started(node, Settings::default());
    // The workload's init is OOM-killed: counted at once, its pod's series waits.
    let found = kernel(&mut wd, oom(20, 102, "app", 20, 2 * SEC), 2 * SEC);
    assert!(found.iter().any(|f| matches!(f, Finding::OomKill(k) if k.names == Names::default())));
    let found = tick(&mut wd, 3 * SEC);
    assert_eq!(oom_events(&found), [(OomScope::Process, 1)], "counted node-wide now");
    assert!(pod_ooms(&found).is_empty(), "the series waits for names: {found:?}");
    assert!(wd.host().wanted.borrow().contains(&cid(2)), "and the listing is asked for them");
    // The listing names it: the series goes out with the names, and its
    // namespace is counted (guards: a namespace known only once something
    // happens in it).
    let found: Vec<Finding> = wd.on_metadata(&listing(), 4 * SEC).collect();
    assert_eq!(model(&found).map(|m| m.namespaces), Some(vec![("shop".to_string(), 1)]));
    assert_eq!(pod_ooms(&found).first().map(|p| p.warned_for_ns), Some(None), "not warned");
    let named = pod_ooms(&found);
    assert_eq!(named.len(), 1, "{found:?}");
    assert_eq!(
        (named[0].names.namespace.as_str(), named[0].names.pod.as_str(), named[0].names.container.as_str()),
        ("shop", "web", "app")
    );
    // An unnamed pod's sandbox dies: counted now, its record waits…
    let mut node = node_with_one_pod();
    node.listing_up = true;
    let mut wd = started(node, Settings::default());
    let found = kernel(&mut wd, exit(10, 101, "pause", KILLED, 5 * SEC), 5 * SEC);
    assert!(found.iter().any(|f| matches!(f, Finding::TaskExit(r) if r.sandbox_death == Some(DeathCause::Signal))));
    assert!(deaths(&found).is_empty());
    assert!(deaths(&tick(&mut wd, 5 * SEC + NAME_WAIT_NS - 1)).is_empty(), "still waiting");
    // …at most NAME_WAIT_NS, then it goes out as it is.
    let found = tick(&mut wd, 5 * SEC + NAME_WAIT_NS);
    assert_eq!(deaths(&found).len(), 1);
    assert_eq!(deaths(&found)[0].names, Names::default());
    // At shutdown, what waits and an open burst go out.
    kernel(&mut wd, oom(20, 102, "app", 20, 20 * SEC), 20 * SEC);
    let found: Vec<Finding> = wd.flush(20 * SEC).collect();
    assert_eq!(oom_events(&found), [(OomScope::Process, 1)]);
    assert_eq!(pod_ooms(&found).len(), 1, "{found:?}");
}

/// Guards: naming from a listing that is down (no wait then: nothing would
/// name it), and waiting for a pod that has no container to name.
#[test]
fn without_a_listing_nothing_waits() {
    let mut wd = started(node_with_one_pod(), Settings::default());
    let found = kernel(&mut wd, exit(10, 101, "pause", KILLED, 5 * SEC), 5 * SEC);
    assert_eq!(deaths(&found).len(), 1, "{found:?}");
    assert_eq!(deaths(&found)[0].cause, DeathCause::Signal);
}

/// Guards: a loss that may have held cgroup changes must re-read the tree
/// and apply what differs (a pod torn down in the gap goes, one created in
/// it is known), and only after such a loss; a walk cut short takes
/// nothing for gone; a mkdir older than the re-read of a cgroup gone now is
/// followed by its rmdir. (Mutations checked: dropping the resync call in
/// `on_tick` fails the first part; ignoring `complete` fails the second;
/// dropping `gone_already` fails the third.)
#[test]
fn lost_cgroup_changes_are_recovered_from_the_tree() {
    let mut wd = started(node_with_one_pod(), Settings::default());
    assert!(!tick(&mut wd, 2 * SEC).iter().any(|f| matches!(f, Finding::CgroupResync { .. })), "no loss, no re-read");
    // Pod 1 went and pod 2 came while the ring buffer was full.
    {
        let node = wd.host_mut();
        node.cgroups.retain(|_, id| *id < 100);
        node.cgroups.insert(pod_path(2), 200);
        node.cgroups.insert(container_path(2, 3), 201);
        node.losses.kernel += 7;
        node.losses.kernel_cgroup_changes += 2;
    }
    let found = tick(&mut wd, 3 * SEC);
    assert!(found.contains(&Finding::CgroupResync { reread: true, created: 2, removed: 3 }), "{found:?}");
    assert!(found.contains(&Finding::EventsLost { stage: LossStage::Kernel, count: 7 }));
    assert_eq!(model(&found).map(|m| (m.sandboxes, m.containers)), Some((1, 1)));
    assert!(wd.registry().sandbox(&uid(2)).is_some() && wd.registry().sandbox(&uid(1)).is_none());
    // The next tick: no new loss, no re-read, no second loss record.
    assert!(tick(&mut wd, 4 * SEC)
        .iter()
        .all(|f| !matches!(f, Finding::CgroupResync { .. } | Finding::EventsLost { .. })));
    // A walk cut short: what it did not see is not taken for gone.
    {
        let node = wd.host_mut();
        node.cgroups.retain(|_, id| *id < 100);
        node.tree_cut_short = true;
        node.losses.channel += 1;
        node.losses.channel_cgroup_changes += 1;
    }
    let found = tick(&mut wd, 5 * SEC);
    assert!(found.contains(&Finding::CgroupResync { reread: true, created: 0, removed: 0 }), "{found:?}");
    assert!(wd.registry().sandbox(&uid(2)).is_some());
    // A mkdir that waited in the ring buffer (produced before that re-read)
    // of a pod gone now: its rmdir, which may be lost, is made up for.
    let found = kernel(&mut wd, mkdir(&pod_path(3), 300, 4 * SEC), 6 * SEC);
    assert!(found.contains(&Finding::CgroupResync { reread: false, created: 0, removed: 1 }), "{found:?}");
    assert!(wd.registry().sandbox(&uid(3)).is_none());
    // One produced after it is taken as it is.
    kernel(&mut wd, mkdir(&pod_path(4), 400, 5 * SEC + 1), 6 * SEC);
    assert!(wd.registry().sandbox(&uid(4)).is_some());
}

/// Guards: the storm flag's threshold and hysteresis as findings, one edge
/// each way; it takes more than one namespace (here the pod's, and the
/// host's). (Mutation checked: clearing at `n < clear` instead of
/// `n <= clear` in `Storm::update` fails this test.)
#[test]
fn storm_edges_rise_at_the_threshold_and_fall_at_the_clear_level() {
    let settings = Settings { storm: StormSettings { window_secs: 10, threshold: 3, clear: 1 }, ..Settings::default() };
    let mut wd = started(node_with_one_pod(), settings);
    let mut edges = Vec::new();
    // Three OOM events a second apart, each its own (after the gap): two
    // of the pod's, then one of a host process (in no pod's cgroup).
    for (i, cgroup) in [102, 102, 9_999].into_iter().enumerate() {
        let at = (2 + i as u64) * SEC;
        kernel(&mut wd, oom(60 + i as u32, cgroup, "worker", 60 + i as u32, at), at);
        edges.extend(storms(&tick(&mut wd, at + 500 * MS)));
    }
    assert_eq!(edges, [StormEdge { started: true, events_in_window: 3, window_secs: 10 }]);
    // The first leaves the window: two left, above the clear level.
    let found = tick(&mut wd, 12 * SEC + 600 * MS);
    assert!(storms(&found).is_empty());
    let window = Finding::OomWindow { events: 2, window_secs: 10, storm: true, storming: Vec::new() };
    assert!(found.contains(&window), "{found:?}");
    // One left: the storm is over, once.
    let found = tick(&mut wd, 13 * SEC + 600 * MS);
    assert_eq!(storms(&found), [StormEdge { started: false, events_in_window: 1, window_secs: 10 }]);
    assert!(storms(&tick(&mut wd, 30 * SEC)).is_empty());
}

/// Guards: the runtime's lag measured from the kernel's exit to the
/// runtime's delivery whichever side comes first; a TaskExit for a
/// container already torn down is a late event of the runtime, stamped on
/// the boot clock; an exec's exit is not the init's. (Mutation checked:
/// measuring to the envelope's `published` time instead of delivery fails
/// the first assertion.)
#[test]
fn the_runtime_side_measures_lag_and_counts_late_task_exits() {
    let mut node = node_with_one_pod();
    node.stream_up = true;
    let mut wd = started(node, runtime_settings());
    // Boot time 10 s is wall time 1 000 s.
    let now = |boot_ns: u64| Now { boot_ns, wall_ns: 990 * SEC + boot_ns };
    let task_exit = |container: u32, exec: u32, pid: u32, boot_ns: u64| RuntimeEvent::TaskExit {
        container_id: cid(container),
        exec_id: cid(exec),
        pid,
        exit_status: 137,
        published_ns: 990 * SEC + boot_ns,
    };
    let lags = |found: &[Finding]| -> Vec<u64> {
        found
            .iter()
            .filter_map(|f| match f {
                Finding::ExitLag { lag_ns } => Some(*lag_ns),
                _ => None,
            })
            .collect()
    };
    // Kernel first: the init of container 2 exits at 10 s, the runtime
    // publishes at 10.2 s and delivers at 10.5 s.
    assert!(lags(&kernel(&mut wd, exit(20, 102, "app", KILLED, 10 * SEC), 10 * SEC)).is_empty());
    let found: Vec<Finding> =
        wd.on_runtime(&task_exit(2, 2, 20, 10 * SEC + 200 * MS), now(10 * SEC + 500 * MS)).collect();
    assert_eq!(lags(&found), [500 * MS]);
    // An exec'd process of container 1: not the init, nothing found.
    let found: Vec<Finding> = wd.on_runtime(&task_exit(1, 9, 77, 11 * SEC), now(11 * SEC)).collect();
    assert!(found.is_empty(), "{found:?}");
    // Runtime first (its stream overtook the kernel's batch).
    assert!(wd.on_runtime(&task_exit(1, 1, 10, 12 * SEC), now(12 * SEC)).next().is_none());
    let found = kernel(&mut wd, exit(10, 101, "pause", KILLED, 12 * SEC - 100 * MS), 12 * SEC + MS);
    assert_eq!(lags(&found), [100 * MS]);
    // Container 2's cgroup went; the runtime's TaskExit for it comes after.
    kernel(&mut wd, rmdir(&container_path(1, 2), 102, 13 * SEC), 13 * SEC);
    let found: Vec<Finding> = wd.on_runtime(&task_exit(2, 2, 21, 13 * SEC + 400 * MS), now(14 * SEC)).collect();
    let late: Vec<&LateExit> = found
        .iter()
        .filter_map(|f| match f {
            Finding::LateExit(l) => Some(l),
            _ => None,
        })
        .collect();
    assert_eq!(late.len(), 1, "{found:?}");
    assert_eq!((late[0].reason, late[0].report.source), (LateReason::ContainerMissing, Source::Runtime));
    assert_eq!((late[0].pid, late[0].ts_ns), (Some(21), 13 * SEC + 400 * MS));
    assert_eq!(late[0].report.pod.as_ref().map(|p| p.pod_uid.clone()), Some(uid(1)));
}

/// Guards: an OOM kill both sides reported is matched (only while the
/// stream is up), and one only the kernel saw settles as a mismatch once
/// its wait is over, reported once.
#[test]
fn oom_kills_are_matched_with_the_runtime_or_settle_as_mismatches() {
    let mut node = node_with_one_pod();
    node.stream_up = true;
    let mut wd = started(node, runtime_settings());
    let now = |boot_ns: u64| Now { boot_ns, wall_ns: 990 * SEC + boot_ns };
    kernel(&mut wd, oom(20, 102, "app", 20, 2 * SEC), 2 * SEC);
    let oom_event = RuntimeEvent::TaskOom { container_id: cid(2), published_ns: 990 * SEC + 2 * SEC + 10 * MS };
    let found: Vec<Finding> = wd.on_runtime(&oom_event, now(2 * SEC + 20 * MS)).collect();
    assert_eq!(found, [Finding::OomMatched { count: 1 }]);
    // The sandbox's OOM kill: the runtime never says so.
    kernel(&mut wd, oom(10, 101, "pause", 10, 3 * SEC), 3 * SEC);
    let mismatches = |found: &[Finding]| -> Vec<Expired> {
        found
            .iter()
            .filter_map(|f| match f {
                Finding::Mismatch(e) => Some(*e),
                _ => None,
            })
            .collect()
    };
    assert!(mismatches(&tick(&mut wd, 20 * SEC)).is_empty(), "still within the wait");
    assert_eq!(mismatches(&tick(&mut wd, 34 * SEC)), [Expired { kernel_only_ooms: 1, ..Expired::default() }]);
    assert!(mismatches(&tick(&mut wd, 35 * SEC)).is_empty(), "reported once");
}

/// Guards: the runtime's processes as the core sees them: up from the
/// first scan, a crash from its exit (by name and status), and a restart
/// from a later scan once it runs again.
#[test]
fn a_runtime_crash_and_restart_are_found_from_its_exit_and_proc() {
    let mut node = node_with_one_pod();
    node.runtime_processes = vec![runtime_process(500, "/system.slice/containerd.service")];
    let mut wd = Watchdog::new(node, runtime_settings());
    let found: Vec<Finding> = wd.discover(SEC).collect();
    assert!(found.contains(&Finding::RuntimeUp { runtime: "containerd".into(), up: true }), "{found:?}");
    let mut crash = exit(500, 0, "containerd", ExitStatus::Code(2), 2 * SEC);
    if let Event::Exit(e) = &mut crash {
        (e.cgroup_id, e.untracked) = (None, true);
    }
    let found = kernel(&mut wd, crash, 2 * SEC);
    assert!(found.contains(&Finding::RuntimeCrash {
        runtime: "containerd".into(),
        pid: 500,
        reason: crate::watchdog::crashes::CrashReason::Panic
    }));
    assert!(found.contains(&Finding::RuntimeUp { runtime: "containerd".into(), up: false }));
    wd.host_mut().runtime_processes = vec![runtime_process(600, "/system.slice/containerd.service")];
    let found = tick(&mut wd, 3 * SEC);
    assert!(found.contains(&Finding::RuntimeRestart { runtime: "containerd".into(), pid: 600 }), "{found:?}");
}

fn runtime_process(pid: u32, cgroup: &str) -> RuntimeProcess {
    RuntimeProcess { pid, comm: "containerd".into(), cgroup: Some(cgroup.into()) }
}

/// Guards: a tenant's process named like the runtime taken for it. One in
/// a pod renamed `containerd` exiting with Go's panic status is no crash;
/// one that lives on keeps the runtime down while none runs; the socket's
/// peer is the runtime. (Before: a crash `panic` counted and the runtime
/// up: `runtime_of` matched the name alone.)
#[test]
fn a_pod_process_named_like_the_runtime_is_not_the_runtime() {
    let mut node = node_with_one_pod();
    node.runtime_processes = vec![runtime_process(20, &container_path(1, 2))];
    let mut wd = Watchdog::new(node, runtime_settings());
    let found: Vec<Finding> = wd.discover(SEC).collect();
    assert!(found.contains(&Finding::RuntimeUp { runtime: "containerd".into(), up: false }), "{found:?}");
    let found = kernel(&mut wd, exit(20, 102, "containerd", ExitStatus::Code(2), 2 * SEC), 2 * SEC);
    assert!(
        !found.iter().any(|f| matches!(f, Finding::RuntimeCrash { .. } | Finding::RuntimeStopped { .. })),
        "{found:?}"
    );
    assert!(found.iter().any(|f| matches!(f, Finding::TaskExit(r) if r.role == TaskRole::ContainerInit)));
    // The real one starts, with a host decoy of its name beside it.
    wd.host_mut().runtime_processes =
        vec![runtime_process(700, "/system.slice/containerd.service"), runtime_process(701, "/user.slice")];
    wd.host_mut().runtime_peer = Some(700);
    for now in 3..=32 {
        tick(&mut wd, now * SEC);
    }
    let mut decoy = exit(701, 0, "containerd", ExitStatus::Code(2), 33 * SEC);
    if let Event::Exit(e) = &mut decoy {
        (e.cgroup_id, e.untracked) = (None, true);
    }
    let found = kernel(&mut wd, decoy, 33 * SEC);
    assert!(!found.iter().any(|f| matches!(f, Finding::RuntimeCrash { .. })), "the peer is the runtime: {found:?}");
}

/// Guards: discovery tracks the pods' cgroups in the kernel (and says when
/// the map is full), seeds their tasks, and a new cgroup that is no pod's
/// goes back to being counted in the kernel.
#[test]
fn discovery_tracks_pods_and_non_pod_cgroups_are_untracked() {
    let mut node = node_with_one_pod();
    node.track_room = Some(2);
    let mut wd = Watchdog::new(node, Settings::default());
    let found: Vec<Finding> = wd.discover(SEC).collect();
    let full: Vec<&Finding> = found.iter().filter(|f| matches!(f, Finding::TrackingFull { .. })).collect();
    assert_eq!(full.len(), 1, "three pod cgroups, room for two: {found:?}");
    assert_eq!(wd.tasks_seeded(), 2);
    assert_eq!(model(&found).map(|m| (m.sandboxes, m.containers, m.processes)), Some((1, 2, 2)));
    kernel(&mut wd, mkdir("/system.slice/cron.service", 900, 2 * SEC), 2 * SEC);
    assert_eq!(wd.host().untracked, [900]);
    kernel(&mut wd, mkdir(&container_path(1, 5), 105, 2 * SEC), 2 * SEC);
    assert_eq!(wd.host().untracked, [900], "a pod's container stays tracked");
}

/// Guards: a torn-down pod's per-pod series expire after their grace, not
/// before; 0 (`None`) keeps them.
#[test]
fn a_gone_pods_series_expire_after_the_grace() {
    let settings = Settings { pod_series_ttl_ns: Some(10 * SEC), ..Settings::default() };
    let mut wd = started(node_with_one_pod(), settings);
    for (path, id) in [(container_path(1, 1), 101), (container_path(1, 2), 102), (pod_path(1), 100)] {
        kernel(&mut wd, rmdir(&path, id, 5 * SEC), 5 * SEC);
    }
    let expired = |found: &[Finding]| found.iter().filter(|f| matches!(f, Finding::PodSeriesExpired { .. })).count();
    assert_eq!(expired(&tick(&mut wd, 14 * SEC)), 0, "within the grace: late events still count");
    assert_eq!(
        tick(&mut wd, 15 * SEC).iter().filter(|f| **f == Finding::PodSeriesExpired { pod_uid: uid(1) }).count(),
        1
    );
    let settings = Settings { pod_series_ttl_ns: None, ..Settings::default() };
    let mut wd = started(node_with_one_pod(), settings);
    kernel(&mut wd, rmdir(&pod_path(1), 100, 5 * SEC), 5 * SEC);
    assert_eq!(expired(&tick(&mut wd, u64::MAX / 2)), 0);
}

/// Guards: host exits the kernel only counted reach their outcome, once.
#[test]
fn host_exits_counted_in_the_kernel_are_reported_once() {
    let mut wd = started(node_with_one_pod(), Settings::default());
    wd.host_mut().losses.host_exits = 40;
    assert!(tick(&mut wd, 2 * SEC).contains(&Finding::HostExits { count: 40 }));
    assert!(!tick(&mut wd, 3 * SEC).iter().any(|f| matches!(f, Finding::HostExits { .. })));
}

/// The model reports itself only when it changed: a plain child exit is
/// not worth a recount of every pod.
#[test]
fn the_model_is_reported_only_when_it_changed() {
    let mut wd = started(node_with_one_pod(), Settings::default());
    let found = kernel(&mut wd, exit(33, 102, "sh", ExitStatus::Code(0), 2 * SEC), 2 * SEC);
    assert!(model(&found).is_none(), "{found:?}");
    assert!(found.iter().any(|f| matches!(f, Finding::TaskExit(r) if r.role == TaskRole::ContainerChild)));
    let found = kernel(&mut wd, attach(&container_path(1, 2), 102, 34, "sh", 2 * SEC), 2 * SEC);
    assert!(model(&found).is_some());
}

/// The limit each OOM kill's finding carries, in order.
fn limits(findings: &[Finding]) -> Vec<(OomLimit, OomConstraint)> {
    findings
        .iter()
        .filter_map(|f| match f {
            Finding::OomKill(k) => Some((k.explained.fired.limit, k.explained.fired.constraint)),
            _ => None,
        })
        .collect()
}

/// The kill of `oom_at` with the kernel's counts of the OOMs each level
/// ran (container 102, pod 100, burstable 3, kubepods 2, root 1).
fn oom_counted(pid: u32, ts_ns: u64, full: &[u64], counts: [u64; 5]) -> Event {
    match oom_at(pid, pid, ts_ns, full) {
        Event::OomKill(mut o) => {
            for (l, n) in o.levels.iter_mut().zip(counts) {
                l.ooms = Some(n);
            }
            Event::OomKill(o)
        }
        other => other,
    }
}

/// The decided-by each OOM kill's finding carries, in order.
fn decided(findings: &[Finding]) -> Vec<(OomLimit, explain::DecidedBy)> {
    findings
        .iter()
        .filter_map(|f| match f {
            Finding::OomKill(k) => Some((k.explained.fired.limit, k.explained.decided_by)),
            _ => None,
        })
        .collect()
}

/// Guards: which limit fired read off the page counters where the kernel
/// counted which cgroup it ran the OOM killer for. A pod found at start-up
/// whose file (v2) shows its past has a word from the first kill; a
/// container found without one (v1) is judged by its page counters until
/// a kill's record shows its count, then has a word too: the pod's limit
/// fired though the container sat at its own.
#[test]
fn the_kernels_count_of_ooms_says_which_limit_fired() {
    use explain::DecidedBy::OomCount;
    use OomLimit::{Container, Pod};
    let mut node = node_with_one_pod();
    node.oom_counts.insert(pod_path(1), 4);
    let mut wd = started(node, Settings::default());
    // The pod's file said 4 at start-up: its count rose, the kernel's word.
    // Container 102 was found without a file: no word, and its page
    // counters say it did not fire.
    let found = kernel(&mut wd, oom_counted(21, 2 * SEC, &[100], [3, 5, 0, 0, 0]), 2 * SEC);
    assert_eq!(decided(&found), [(Pod, OomCount)]);
    // Known from then on: the pod's count rose, the container's did not,
    // though it sat at its limit.
    let found = kernel(&mut wd, oom_counted(22, 3 * SEC, &[102, 100], [3, 6, 0, 0, 0]), 3 * SEC);
    assert_eq!(decided(&found), [(Pod, OomCount)]);
    let found = kernel(&mut wd, oom_counted(23, 4 * SEC, &[102], [4, 6, 0, 0, 0]), 4 * SEC);
    assert_eq!(decided(&found), [(Container, OomCount)]);
}

/// Guards: an OOM kill that does not say whose limit fired, or says
/// another's. The innermost level the kernel found at its limit at the
/// kill fired: the container's, the pod's, one above the pods (the node's
/// allocatable), or none (a global OOM); the other victims of one group
/// kill share the first one's verdict, and without the kernel's counters
/// it is `unknown`, saying why. (Mutation checked: taking the outermost
/// level at its limit reads the container's kill as the pod's.)
#[test]
fn each_oom_kill_says_whose_limit_fired() {
    use OomConstraint::{Global, Memcg};
    use OomLimit::{Container, Node, Pod};
    let mut wd = started(node_with_one_pod(), Settings::default());
    let found = kernel(&mut wd, oom_at(21, 21, 2 * SEC, &[102]), 2 * SEC);
    assert_eq!(limits(&found), [(Container, Memcg)]);
    let found = kernel(&mut wd, oom_at(22, 22, 3 * SEC, &[100]), 3 * SEC);
    assert_eq!(limits(&found), [(Pod, Memcg)]);
    let found = kernel(&mut wd, oom_at(23, 23, 4 * SEC, &[2]), 4 * SEC);
    assert_eq!(limits(&found), [(Node, Memcg)], "the node's allocatable");
    let found = kernel(&mut wd, oom_at(24, 24, 5 * SEC, &[]), 5 * SEC);
    assert_eq!(limits(&found), [(Node, Global)], "no cgroup's limit: the machine's memory");
    // Both the container and its pod at their limits: the innermost fired.
    let found = kernel(&mut wd, oom_at(30, 30, 5 * SEC + 500 * MS, &[102, 100]), 5 * SEC + 500 * MS);
    assert_eq!(limits(&found), [(Container, Memcg)]);
    // A group kill: one pick, one verdict for each of its victims.
    let mut found = kernel(&mut wd, oom_at(25, 25, 6 * SEC, &[102]), 6 * SEC);
    found.extend(kernel(&mut wd, oom_at(26, 25, 6 * SEC + MS, &[]), 6 * SEC + MS));
    assert_eq!(limits(&found), [(Container, Memcg), (Container, Memcg)]);
    // Its events carry it too.
    let found = tick(&mut wd, 8 * SEC);
    assert!(found.iter().any(|f| matches!(f, Finding::OomEvent { fired, .. } if fired.limit == Container)));
    // And the pod's series.
    assert!(
        found.iter().any(|f| matches!(f, Finding::PodOom(p) if p.fired.limit == Container)),
        "the per-pod series says whose limit: {found:?}"
    );
    // Without the kernel's counters, it cannot be said, and says why.
    let found = kernel(&mut wd, oom(27, 102, "app", 27, 12 * SEC), 12 * SEC);
    assert_eq!(limits(&found), [(OomLimit::Unknown, OomConstraint::Unknown)]);
    let found = tick(&mut wd, 14 * SEC);
    assert!(
        found.iter().any(|f| matches!(f, Finding::OomEvent { unknown: Some(UnknownLimit::NoCounters), .. })),
        "{found:?}"
    );
}

/// Guards: the verdict read off the task that ran the OOM killer. A
/// runtime lowering a container's `memory.max` below its usage (a pod
/// resized in place) runs the kill inside its write, from the host's
/// cgroup: no level of its own chain is at a limit, and the counters read
/// a node OOM that never happened (the critical alert fires). The kernel's
/// own decision names the container, and its memory is read from there.
#[test]
fn a_kill_run_by_a_runtime_lowering_the_limit_reads_the_container() {
    let mut wd = started(node_with_one_pod(), Settings::default());
    wd.host_mut().memory.insert(
        container_path(1, 2),
        MemoryStat { usage: 64 * MIB, anon: 63 * MIB, file: MIB, shmem: 0, kernel: 0, ..MemoryStat::default() },
    );
    // The writer (pid 900, the host's root cgroup) ran the kill for the
    // container, whose usage is past its new 32 MiB.
    let levels = vec![
        level(102, 64 * MIB, Some(32 * MIB)),
        level(100, 64 * MIB, None),
        level(3, 64 * MIB, None),
        level(2, 64 * MIB, None),
        level(1, 64 * MIB, None),
    ];
    let event = |levels: &[MemcgUse], decision, ts_ns| match oom(21, 102, "app", 900, ts_ns) {
        Event::OomKill(o) => {
            Event::OomKill(KernelOomKill { levels: levels.to_vec(), trigger_cgroup_id: 1, decision, ..o })
        }
        other => other,
    };
    let found = kernel(&mut wd, event(&levels, Some(KernelDecision::Memcg { cgroup_id: 102 }), 2 * SEC), 2 * SEC);
    assert_eq!(limits(&found), [(OomLimit::Container, OomConstraint::Memcg)]);
    let kill = found.iter().find_map(|f| match f {
        Finding::OomKill(k) => Some(k),
        _ => None,
    });
    let explained = &kill.expect("the kill").explained;
    assert_eq!((explained.usage_bytes, explained.limit_bytes), (Some(64 * MIB), Some(32 * MIB)));
    assert_eq!(explained.cause, OomCause::Anon, "{explained:?}");
    // The writer's own counters alone (no trampoline on this kernel): its
    // chain is the host's root, at no limit.
    let found = kernel(&mut wd, event(&[level(1, 900 * MIB, None)], None, 3 * SEC), 3 * SEC);
    assert_eq!(limits(&found), [(OomLimit::Node, OomConstraint::Global)]);
    // Where the kernel says no memory cgroup, it is global whatever the
    // counters read.
    let full = match oom_at(22, 22, 4 * SEC, &[102]) {
        Event::OomKill(o) => Event::OomKill(KernelOomKill { decision: Some(KernelDecision::Global), ..o }),
        other => other,
    };
    let found = kernel(&mut wd, full, 4 * SEC);
    assert_eq!(limits(&found), [(OomLimit::Node, OomConstraint::Global)]);
}

/// (role, reason) of each container exit found.
fn container_exits(findings: &[Finding]) -> Vec<(TaskRole, ExitReason)> {
    findings
        .iter()
        .filter_map(|f| match f {
            Finding::ContainerExit(e) => Some((e.report.role, e.reason)),
            _ => None,
        })
        .collect()
}

/// Guards: container exits counted only by role, their reasons lost (an
/// operator cannot tell a crash loop from a job that completes). Every
/// container init's end is a finding of its own with its reason — its
/// code, its signal, or the OOM kill it was — counted node-wide at once
/// (with the exit) and named; a child's exit is none. (Mutation checked:
/// without the reason on the dispatcher's report, no container exit is
/// found.)
#[test]
fn every_container_init_exit_is_a_finding_with_its_reason() {
    let sig = |signo| ExitStatus::Signal { signo, core_dumped: false };
    let mut wd = started(node_with_one_pod(), Settings::default());
    let found = kernel(&mut wd, exit(30, 102, "sh", ExitStatus::Code(0), 2 * SEC), 2 * SEC);
    assert_eq!(container_exits(&found), [], "a child's exit is no container's");
    let found = kernel(&mut wd, exit(20, 102, "app", ExitStatus::Code(3), 3 * SEC), 3 * SEC);
    assert_eq!(container_exits(&found), [(TaskRole::ContainerInit, ExitReason::Error)]);
    assert!(found.iter().any(|f| matches!(f, Finding::TaskExit(r) if r.container_exit == Some(ExitReason::Error))));
    let found = kernel(&mut wd, exit(10, 101, "pause", sig(15), 4 * SEC), 4 * SEC);
    assert_eq!(container_exits(&found), [(TaskRole::Sandbox, ExitReason::Sigterm)]);
    // The runtime starts the container again; its OOM kill stays an OOM kill.
    let mut wd = started(node_with_one_pod(), Settings::default());
    kernel(&mut wd, oom(20, 102, "app", 20, 2 * SEC), 2 * SEC);
    let found = kernel(&mut wd, exit(20, 102, "app", sig(9), 2 * SEC + MS), 2 * SEC + MS);
    assert_eq!(container_exits(&found), [(TaskRole::ContainerInit, ExitReason::OomKilled)]);
    let Some(Finding::ContainerExit(e)) = found.iter().find(|f| matches!(f, Finding::ContainerExit(_))) else {
        panic!("{found:?}")
    };
    assert_eq!((e.pid, e.comm.as_str(), e.status), (20, "app", sig(9)));
}

fn pressure_edges(findings: &[Finding]) -> Vec<(String, PressureReason, PressureChange)> {
    findings
        .iter()
        .filter_map(|f| match f {
            Finding::MemoryPressure(p) => Some((p.names.pod.clone(), p.reason, p.change)),
            _ => None,
        })
        .collect()
}

fn a_read(usage: u64) -> MemorySample {
    MemorySample { usage, limit: Some(64 * MIB), ..MemorySample::default() }
}

/// A workload container growing a MiB a second is warned (named, growing,
/// then near its limit), its gauges are said each tick, and its OOM kill
/// carries how long before it was warned, and of what; the kill ends the
/// episodes. The sandbox container is never watched.
#[test]
fn a_growing_container_is_warned_and_its_kill_says_so() {
    let mut node = node_with_one_pod();
    node.pressure.insert(container_path(1, 2), a_read(8 * MIB));
    node.pressure.insert(container_path(1, 1), a_read(63 * MIB));
    let mut wd = started(node, Settings::default());
    let _ = wd.on_metadata(&listing(), SEC).count();
    let mut edges = Vec::new();
    let mut levels = None;
    for s in 2..60u64 {
        let usage = (8 + s) * MIB;
        wd.host_mut().pressure.insert(container_path(1, 2), a_read(usage));
        let found = tick(&mut wd, s * SEC);
        for e in pressure_edges(&found) {
            edges.push((s, e));
        }
        if let Some(Finding::PressureLevels(l)) = found.iter().find(|f| matches!(f, Finding::PressureLevels(_))) {
            levels = Some(l.clone());
        }
        assert_eq!(wd.host().events_watched, HashSet::from([102]), "the workload's memory.events, not the sandbox's");
    }
    let rose: Vec<_> = edges.iter().map(|(_, (pod, r, c))| (pod.as_str(), *r, *c)).collect();
    assert_eq!(
        rose,
        [
            ("web", PressureReason::Growing, PressureChange::Start),
            ("web", PressureReason::NearLimit, PressureChange::Start)
        ],
        "{edges:?}"
    );
    let levels = levels.expect("levels each tick");
    assert_eq!(levels.watched, 1);
    assert_eq!(levels.containers.len(), 1);
    assert_eq!(levels.containers[0].pod.container_id.as_deref(), Some(cid(2).as_str()));
    assert_eq!(levels.containers[0].reasons, [PressureReason::NearLimit, PressureReason::Growing]);
    // Killed at 64 MiB.
    let found = kernel(&mut wd, oom(20, 102, "app", 20, 60 * SEC), 60 * SEC);
    let kill = found
        .iter()
        .find_map(|f| match f {
            Finding::OomKill(k) => Some(k),
            _ => None,
        })
        .expect("the kill");
    let warned = kill.warned.as_ref().expect("it was warned");
    let growing_at = edges[0].0;
    assert_eq!(warned.for_ns, (60 - growing_at) * SEC);
    assert_eq!(warned.reasons, [PressureReason::NearLimit, PressureReason::Growing]);
    let ended: Vec<_> = pressure_edges(&found).into_iter().map(|(_, r, c)| (r, c)).collect();
    assert_eq!(
        ended,
        [
            (PressureReason::NearLimit, PressureChange::End(PressureEnd::Killed)),
            (PressureReason::Growing, PressureChange::End(PressureEnd::Killed))
        ]
    );
    // Its pod's series say it was warned, and by how long (guards: the
    // lead lost between the kill and its OOM event's series).
    let found = tick(&mut wd, 61 * SEC);
    assert_eq!(pod_ooms(&found).iter().map(|p| p.warned_for_ns).collect::<Vec<_>>(), [Some(warned.for_ns)]);
    // With the watch off, nothing is read and no kill is said warned.
    let mut node = node_with_one_pod();
    node.pressure.insert(container_path(1, 2), a_read(63 * MIB));
    let mut wd = started(node, Settings { pressure: None, ..Settings::default() });
    for s in 2..20u64 {
        assert!(pressure_edges(&tick(&mut wd, s * SEC)).is_empty());
    }
    assert!(wd.host().events_watched.is_empty(), "limits are followed, memory events are not");
}

/// A limit change as the tests compare it: (limit, direction, from, to,
/// seen by, pod level).
type Change = (LimitKind, Direction, Option<u64>, Option<u64>, SeenBy, bool);

/// The limit changes found.
fn limit_changes(found: &[Finding]) -> Vec<Change> {
    found
        .iter()
        .filter_map(|f| match f {
            Finding::LimitChange(l) => {
                let c = &l.change;
                Some((c.kind, c.direction, c.from, c.to, c.seen_by, c.scope == LimitScope::Pod))
            }
            _ => None,
        })
        .collect()
}

fn limits_of(max: u64, high: Option<u64>) -> MemoryLimits {
    MemoryLimits { max: Some(max), high, swap: None }
}

fn kill_of(found: &[Finding]) -> Option<&OomKill> {
    found.iter().find_map(|f| match f {
        Finding::OomKill(k) => Some(&**k),
        _ => None,
    })
}

/// Guards: a limit change nobody reports, or one reported by polling. The
/// pod's and its workload's limits are read once, then again only when the
/// kernel says a limit file was written: the container's lowered, its
/// `memory.high` set, the pod's raised are each a finding, named; a tick
/// without a notice reads nothing.
#[test]
fn limits_move_as_the_kernel_says_and_are_not_polled() {
    let mut node = node_with_one_pod();
    node.limits.insert(container_path(1, 2), limits_of(128 * MIB, None));
    node.limits.insert(pod_path(1), limits_of(256 * MIB, None));
    let mut wd = started(node, Settings::default());
    let found = tick(&mut wd, 2 * SEC);
    assert!(limit_changes(&found).is_empty(), "the first read is where they stand: {found:?}");
    assert_eq!(wd.host().memory_watched, HashSet::from([100, 102]), "the pod and its workload, not the sandbox");
    for t in 3..=100 {
        assert!(limit_changes(&tick(&mut wd, t * SEC)).is_empty());
    }
    let reads = wd.limits.reads;
    assert_eq!((reads.start, reads.timer, reads.kernel_notice), (2, 0, 0), "no polling: {reads:?}");
    // The kubelet resizes the pod in place: its container lowered, with a
    // memory.high, and the pod raised.
    wd.host_mut().limits.insert(container_path(1, 2), limits_of(32 * MIB, Some(24 * MIB)));
    wd.host_mut().limits.insert(pod_path(1), limits_of(512 * MIB, None));
    wd.host_mut().limit_wakeups = vec![100, 102];
    let found = tick(&mut wd, 101 * SEC);
    assert_eq!(
        limit_changes(&found),
        [
            (LimitKind::MemoryMax, Direction::Raised, Some(256 * MIB), Some(512 * MIB), SeenBy::KernelNotice, true),
            (LimitKind::MemoryMax, Direction::Lowered, Some(128 * MIB), Some(32 * MIB), SeenBy::KernelNotice, false),
            (LimitKind::MemoryHigh, Direction::Set, None, Some(24 * MIB), SeenBy::KernelNotice, false),
        ]
    );
    let named = found.iter().find_map(|f| match f {
        Finding::LimitChange(l) if l.change.scope == LimitScope::Container => Some(l),
        _ => None,
    });
    assert_eq!(named.and_then(|l| l.pod.container_id.clone()), Some(cid(2)));
    // A write that changes nothing says nothing.
    wd.host_mut().limit_wakeups = vec![102];
    assert!(limit_changes(&tick(&mut wd, 102 * SEC)).is_empty());
}

/// Guards: a kill soon after a decrease that does not say so. A kill 30 s
/// after the container's limit was lowered says from what, to what and how
/// long before, and counts; a kill eleven minutes later does not. A kill
/// run inside the write that lowered it (before the write's own notice)
/// says so from the limit the kernel counted at the kill.
#[test]
fn a_kill_after_a_decrease_says_the_limit_was_lowered() {
    let mut node = node_with_one_pod();
    node.limits.insert(container_path(1, 2), limits_of(64 * MIB, None));
    let mut wd = started(node, Settings::default());
    tick(&mut wd, 2 * SEC);
    wd.host_mut().limits.insert(container_path(1, 2), limits_of(48 * MIB, None));
    wd.host_mut().limit_wakeups = vec![102];
    tick(&mut wd, 3 * SEC);
    let decided = |pid: u32, max: u64, ts: u64| match oom(pid, 102, "app", pid, ts) {
        Event::OomKill(o) => Event::OomKill(KernelOomKill {
            levels: vec![level(102, max, Some(max)), level(100, max, None)],
            decision: Some(KernelDecision::Memcg { cgroup_id: 102 }),
            ..o
        }),
        other => other,
    };
    let found = kernel(&mut wd, decided(21, 48 * MIB, 33 * SEC), 33 * SEC);
    let lowered = kill_of(&found).and_then(|k| k.lowered);
    assert_eq!(
        lowered,
        Some(Lowered { kind: LimitKind::MemoryMax, from: Some(64 * MIB), to: Some(48 * MIB), ago_ns: 30 * SEC })
    );
    assert!(limit_changes(&found).is_empty(), "the kernel's limit at the kill is the one read: {found:?}");
    let found = kernel(&mut wd, decided(22, 48 * MIB, 3 * SEC + LOWERED_WINDOW_NS + SEC), 700 * SEC);
    assert_eq!(kill_of(&found).and_then(|k| k.lowered), None, "long after the decrease");
    // Lowered to 32 MiB by a write that ran the kill itself: the kill
    // comes before the write's notice, and the kernel's limit says it.
    let found = kernel(&mut wd, decided(23, 32 * MIB, 800 * SEC), 800 * SEC);
    assert_eq!(
        limit_changes(&found),
        [(LimitKind::MemoryMax, Direction::Lowered, Some(48 * MIB), Some(32 * MIB), SeenBy::OomKill, false)]
    );
    assert_eq!(kill_of(&found).and_then(|k| k.lowered).map(|l| (l.to, l.ago_ns)), Some((Some(32 * MIB), 0)));
    // The write's own notice then finds nothing new.
    wd.host_mut().limits.insert(container_path(1, 2), limits_of(32 * MIB, None));
    wd.host_mut().limit_wakeups = vec![102];
    assert!(limit_changes(&tick(&mut wd, 801 * SEC)).is_empty());
}

/// Guards: a limit moved by the runtime (containerd's update comes before
/// runc writes) or on a cgroup the kernel cannot watch never found; an
/// overflowed notice queue read at once for every cgroup. The runtime's
/// update reads the container at the next tick and again 2 s later; an
/// unwatchable cgroup is read once a minute; a lost notice costs one read
/// each, spread over a minute.
#[test]
fn the_runtimes_word_an_unwatchable_cgroup_and_lost_notices_are_read_in_time() {
    let mut node = node_with_one_pod();
    node.stream_up = true;
    node.limits.insert(container_path(1, 2), limits_of(128 * MIB, None));
    let mut wd = started(node, runtime_settings());
    tick(&mut wd, 2 * SEC);
    let now = |boot_ns: u64| Now { boot_ns, wall_ns: 990 * SEC + boot_ns };
    let update = RuntimeEvent::ContainerUpdate { container_id: cid(2), published_ns: 990 * SEC + 3 * SEC };
    assert!(wd.on_runtime(&update, now(3 * SEC)).next().is_none());
    // The first read finds the old limit; runc writes after it.
    assert!(limit_changes(&tick(&mut wd, 3 * SEC + 100 * MS)).is_empty());
    wd.host_mut().limits.insert(container_path(1, 2), limits_of(96 * MIB, None));
    assert!(limit_changes(&tick(&mut wd, 4 * SEC)).is_empty(), "not yet due");
    let found = tick(&mut wd, 5 * SEC);
    assert_eq!(
        limit_changes(&found),
        [(LimitKind::MemoryMax, Direction::Lowered, Some(128 * MIB), Some(96 * MIB), SeenBy::Runtime, false)]
    );
    assert_eq!(wd.limits.reads.runtime, 2);
    // Lost notices: each cgroup read once within the next minute.
    wd.host_mut().limits.insert(container_path(1, 2), limits_of(80 * MIB, None));
    wd.host_mut().overflow = true;
    let mut seen = Vec::new();
    for t in 6..=70 {
        seen.extend(limit_changes(&tick(&mut wd, t * SEC)));
    }
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(wd.limits.reads.timer, 2, "one read each (the pod, its workload), not one a tick");
    // A tenant overflowing the queue every tick: each read owed keeps its
    // time, and a limit lowered meanwhile is found within the minute.
    wd.host_mut().limits.insert(container_path(1, 2), limits_of(72 * MIB, None));
    let mut seen = Vec::new();
    for t in 71..=132 {
        wd.host_mut().overflow = true;
        seen.extend(limit_changes(&tick(&mut wd, t * SEC)));
    }
    assert_eq!(seen.iter().map(|c| (c.3, c.4)).collect::<Vec<_>>(), [(Some(72 * MIB), SeenBy::Read)], "{seen:?}");

    // A node where the kernel refuses every watch: a read a minute.
    let mut node = node_with_one_pod();
    node.unwatchable = true;
    node.limits.insert(container_path(1, 2), limits_of(128 * MIB, None));
    let mut wd = started(node, Settings::default());
    tick(&mut wd, 2 * SEC);
    assert_eq!(wd.limits.reads.watches_refused, 2);
    wd.host_mut().limits.insert(container_path(1, 2), limits_of(64 * MIB, None));
    let mut seen = Vec::new();
    for t in 3..=62 {
        seen.extend(limit_changes(&tick(&mut wd, t * SEC)));
    }
    assert_eq!(seen.iter().map(|c| c.4).collect::<Vec<_>>(), [SeenBy::Read]);
}

/// Guards: a new container's first limits said as a change (runc writes
/// them after it made the cgroup, and the kernel's notice says so): every
/// container start was a `limit_change`, and a kill soon after read as
/// following a decrease. A container is followed once a process runs in
/// it, its limits then where they stand.
#[test]
fn a_new_containers_first_limits_are_no_change() {
    let mut wd = started(node_with_one_pod(), Settings::default());
    tick(&mut wd, 2 * SEC);
    let mut seen = Vec::new();
    for (path, id) in [(pod_path(2), 200), (container_path(2, 1), 201), (container_path(2, 2), 202)] {
        wd.host_mut().cgroups.insert(path.clone(), id);
        seen.extend(kernel(&mut wd, mkdir(&path, id, 3 * SEC), 3 * SEC));
    }
    seen.extend(tick(&mut wd, 4 * SEC));
    // runc sets the limit, then starts the init.
    wd.host_mut().limits.insert(container_path(2, 2), limits_of(64 * MIB, None));
    wd.host_mut().limit_wakeups = vec![202];
    seen.extend(tick(&mut wd, 5 * SEC));
    seen.extend(kernel(&mut wd, attach(&container_path(2, 1), 201, 40, "pause", 5 * SEC), 5 * SEC));
    seen.extend(kernel(&mut wd, attach(&container_path(2, 2), 202, 41, "app", 5 * SEC), 5 * SEC));
    seen.extend(tick(&mut wd, 6 * SEC));
    assert!(limit_changes(&seen).is_empty(), "{:?}", limit_changes(&seen));
    assert_eq!(wd.limits().limits(202).and_then(|l| l.max), Some(64 * MIB), "followed from where it stands");
}

// --- Who ended it: the senders of fatal signals, the runtime's word ------

/// A node with pod 1 (as `node_with_one_pod`) and pod 2 (cgroup 200, its
/// sandbox 201 and a container 202 with init 30), the runtime's processes
/// in containerd.service, the kubelet in its own service, and a login
/// session's scope.
fn node_with_two_pods() -> FakeNode {
    let mut node = node_with_one_pod();
    for (path, id) in [
        (pod_path(2), 200),
        (container_path(2, 1), 201),
        (container_path(2, 2), 202),
        ("/system.slice".to_string(), 4),
        ("/system.slice/kubelet.service".to_string(), 5),
        ("/system.slice/containerd.service".to_string(), 6),
        ("/user.slice/user-0.slice/session-3.scope".to_string(), 7),
    ] {
        node.cgroups.insert(path, id);
    }
    node.tasks.push((container_path(2, 1), 29, SEC, "pause".into()));
    node.tasks.push((container_path(2, 2), 30, SEC, "app".into()));
    node.runtime_processes = vec![runtime_process(500, "/system.slice/containerd.service")];
    node
}

/// `sender` (process `from`, named `comm`) sends `sig` to process `to` in
/// container cgroup `cgroup` at `ts_ns`.
fn signal(sig: u32, to: u32, cgroup: u64, from: u32, sender: SenderPlace, origin: SignalOrigin, ts_ns: u64) -> Event {
    Event::Signal(Signal {
        ts_ns,
        sig,
        origin,
        result: agent_common::signal_result::DELIVERED,
        target_pid: to,
        target_tgid: to,
        target_start_ns: SEC,
        target_cgroup_id: Some(cgroup),
        sender_pid: from,
        sender_tgid: from,
        sender_start_ns: SEC,
        sender,
        sender_comm: "kill".into(),
    })
}

const USER: SignalOrigin = SignalOrigin::Info(0);

fn signalled(sig: u8) -> ExitStatus {
    ExitStatus::Signal { signo: sig, core_dumped: false }
}

/// The ends of container inits found.
fn ends(findings: &[Finding]) -> Vec<Option<SignalEnd>> {
    findings
        .iter()
        .filter_map(|f| match f {
            Finding::ContainerExit(e) => Some(e.ended.clone()),
            _ => None,
        })
        .collect()
}

/// Pod 1's workload init (20, container 102) ends by `sig` after `signals`.
fn ended_by(signals: Vec<Event>, sig: u8) -> SignalEnd {
    let mut wd = started(node_with_two_pods(), runtime_settings());
    for (i, s) in signals.into_iter().enumerate() {
        kernel(&mut wd, s, 2 * SEC + i as u64 * MS);
    }
    let found = kernel(&mut wd, exit(20, 102, "app", signalled(sig), 3 * SEC), 3 * SEC);
    let found = [found, tick(&mut wd, 20 * SEC)].concat();
    match ends(&found).as_slice() {
        [Some(end)] => end.clone(),
        other => panic!("one end by a signal, not {other:?}"),
    }
}

/// Guards: a process's record of its signals kept first come, first
/// served (a tenant's process sending itself signals it handles pushed the
/// runtime's stop out: its end read `unknown`), and the first signal of a
/// number credited where a later one ended it.
#[test]
fn a_tenants_own_signals_leave_room_for_the_runtimes_stop() {
    let host = SenderPlace::Host(6);
    let mut signals: Vec<Event> =
        (0..20).map(|i| signal(15, 20, 102, 20, SenderPlace::Tracked(102), USER, i * MS)).collect();
    signals.push(signal(15, 20, 102, 600, host, USER, SEC));
    signals.push(signal(9, 20, 102, 600, host, USER, SEC + 2 * SEC));
    let end = ended_by(signals, 9);
    assert_eq!((end.sender, end.pid), (Sender::Runtime, Some(600)));
    let stop = end.stop.expect("a stop past its grace");
    assert_eq!((stop.signal, stop.grace_ns), (15, 2 * SEC));
    // Its own SIGTERMs handled, then the runtime's at its default: the runtime's.
    let mut signals: Vec<Event> =
        (0..3).map(|i| signal(15, 20, 102, 20, SenderPlace::Tracked(102), USER, i * MS)).collect();
    signals.push(signal(15, 20, 102, 600, host, USER, SEC));
    assert_eq!(ended_by(signals, 15).sender, Sender::Runtime);
    // Its own twenty, then its sandbox's (a shared process namespace).
    let mut signals: Vec<Event> =
        (0..20).map(|i| signal(15, 20, 102, 20, SenderPlace::Tracked(102), USER, i * MS)).collect();
    signals.push(signal(15, 20, 102, 10, SenderPlace::Tracked(101), USER, SEC));
    assert_eq!(ended_by(signals, 15).sender, Sender::SamePod);
}

/// Guards: one pod's signals to processes that live on (its other
/// container's, handled) filling the table of pending signals, whose
/// oldest went first: the runtime's request to stop another pod's
/// container was forgotten, and its end lost the stop and its grace.
#[test]
fn a_pods_signals_to_processes_that_live_on_keep_its_share_only() {
    let host = SenderPlace::Host(6);
    let mut signals = vec![signal(15, 20, 102, 600, host, USER, SEC)];
    signals.extend(
        (0..5_000).map(|i| signal(15, 10_000 + i, 202, 30, SenderPlace::Tracked(202), USER, SEC + u64::from(i))),
    );
    signals.push(signal(9, 20, 102, 600, host, USER, 3 * SEC));
    let end = ended_by(signals.clone(), 9);
    assert_eq!(end.sender, Sender::Runtime);
    let stop = end.stop.expect("the runtime's SIGTERM kept through the flood");
    assert_eq!((stop.signal, stop.grace_ns), (15, 2 * SEC));
    // The pod kept its share (256 processes); the rest of its flood is
    // forgotten, counted.
    let mut wd = started(node_with_two_pods(), runtime_settings());
    for (i, s) in signals.into_iter().enumerate() {
        kernel(&mut wd, s, 2 * SEC + i as u64 * MS);
    }
    let forgotten = tick(&mut wd, 20 * SEC).iter().find_map(|f| match f {
        Finding::SignalsForgotten { total } => Some(*total),
        _ => None,
    });
    assert_eq!(forgotten, Some(5_000 - 256));
    // The same through the kernel's own notices a pod's task raises (a
    // SIGIO its writes send the owners of 5 000 sockets, code POLL_IN):
    // taken for the kernel's, they are still that pod's share.
    let mut signals = vec![signal(15, 20, 102, 600, host, USER, SEC)];
    signals.extend((0..5_000).map(|i| {
        signal(29, 10_000 + i, 202, 30, SenderPlace::Tracked(202), SignalOrigin::Info(1), SEC + u64::from(i))
    }));
    signals.push(signal(9, 20, 102, 600, host, USER, 3 * SEC));
    let stop = ended_by(signals, 9).stop.expect("the runtime's SIGTERM kept through the notices");
    assert_eq!((stop.signal, stop.grace_ns), (15, 2 * SEC));
    // The same from a pod task the agent cannot place (a cgroup it tracks
    // but knows no owner of): unplaced pod tasks share one share.
    let mut signals = vec![signal(15, 20, 102, 600, host, USER, SEC)];
    signals.extend(
        (0..5_000).map(|i| signal(15, 10_000 + i, 202, 31, SenderPlace::Tracked(999), USER, SEC + u64::from(i))),
    );
    signals.push(signal(9, 20, 102, 600, host, USER, 3 * SEC));
    let stop = ended_by(signals, 9).stop.expect("the runtime's SIGTERM kept through an unplaced task's flood");
    assert_eq!((stop.signal, stop.grace_ns), (15, 2 * SEC));
}

/// Guards: the kernel's notices to a tenant's processes (a handled
/// SIGALRM of `setitimer`, sent with the kernel's private siginfo while
/// the CPU was idle: its current task a host one) taken for trusted
/// entries: 4 200 of them pushed the runtime's stop of another pod out.
#[test]
fn the_kernels_notices_to_a_pods_processes_are_its_pods_share() {
    let host = SenderPlace::Host(6);
    let idle = SenderPlace::Host(1);
    let mut signals = vec![signal(15, 20, 102, 600, host, USER, SEC)];
    signals.extend((0..4_200).map(|i| signal(14, 10_000 + i, 202, 0, idle, SignalOrigin::Priv, SEC + u64::from(i))));
    signals.push(signal(9, 20, 102, 600, host, USER, 3 * SEC));
    let end = ended_by(signals, 9);
    assert_eq!(end.sender, Sender::Runtime);
    assert_eq!(end.stop.map(|s| s.signal), Some(15), "the runtime's SIGTERM kept: {end:?}");
}

/// Guards: a process's record of 8 signals full of the kernel's notices
/// (eight handled SIGALRMs) or of another container's handled signals:
/// the runtime's SIGTERM and SIGKILL after them were dropped, and its end
/// read unknown.
#[test]
fn a_kill_or_the_runtimes_signal_outranks_notices_in_a_full_record() {
    let host = SenderPlace::Host(6);
    for filler in [
        signal(14, 20, 102, 0, SenderPlace::Host(1), SignalOrigin::Priv, 0),
        signal(1, 20, 102, 10, SenderPlace::Tracked(101), USER, 0),
    ] {
        let mut signals: Vec<Event> = (0..8).map(|_| filler.clone()).collect();
        signals.push(signal(15, 20, 102, 600, host, USER, SEC));
        signals.push(signal(9, 20, 102, 600, host, USER, 3 * SEC));
        let end = ended_by(signals, 9);
        assert_eq!((end.sender, end.stop.map(|s| s.grace_ns)), (Sender::Runtime, Some(2 * SEC)), "{end:?}");
    }
}

/// Guards: a record kept from a pod's signal long ago (the sandbox's
/// handled SIGHUP to its app) living its 15 minutes from that signal,
/// taking the runtime's SIGTERM of a minute ago with it.
#[test]
fn the_runtimes_signal_keeps_a_record_its_time_from_then() {
    let host = SenderPlace::Host(6);
    let mut wd = started(node_with_two_pods(), runtime_settings());
    kernel(&mut wd, signal(1, 20, 102, 10, SenderPlace::Tracked(101), USER, 2 * SEC), 2 * SEC);
    let term = 2 * SEC + 15 * 60 * SEC - 5 * SEC;
    kernel(&mut wd, signal(15, 20, 102, 600, host, USER, term), term);
    tick(&mut wd, term + 10 * SEC);
    kernel(&mut wd, signal(9, 20, 102, 600, host, USER, term + 30 * SEC), term + 30 * SEC);
    let found = kernel(&mut wd, exit(20, 102, "app", signalled(9), term + 30 * SEC + MS), term + 30 * SEC + MS);
    let found = [found, tick(&mut wd, term + 60 * SEC)].concat();
    match ends(&found).as_slice() {
        [Some(end)] => {
            assert_eq!((end.sender, end.stop.map(|s| s.grace_ns)), (Sender::Runtime, Some(30 * SEC)), "{end:?}")
        }
        other => panic!("one end by a signal, not {other:?}"),
    }
}

/// Guards: a sender named by its name (anyone can be called `runc`) or by
/// its process alone, instead of its place: the runtime's processes are
/// those in its cgroup (its shims and runc come and go there), any other
/// host process is the host's, with its systemd unit; a pod's process is
/// its container's, its pod's or another pod's, whatever it is called.
#[test]
fn each_sender_is_named_by_its_place_never_by_its_name() {
    let host = |cgroup: u64| SenderPlace::Host(cgroup);
    let runc = ended_by(vec![signal(9, 20, 102, 600, host(6), USER, 0)], 9);
    assert_eq!((runc.sender, runc.pid, runc.unit.as_deref()), (Sender::Runtime, Some(600), None));
    let kubelet = ended_by(vec![signal(9, 20, 102, 700, host(5), USER, 0)], 9);
    assert_eq!((kubelet.sender, kubelet.unit.as_deref()), (Sender::Host, Some("kubelet.service")));
    let shell = ended_by(vec![signal(9, 20, 102, 701, host(7), USER, 0)], 9);
    assert_eq!((shell.sender, shell.unit.as_deref()), (Sender::Host, Some("session-3.scope")));
    let unplaced = ended_by(vec![signal(9, 20, 102, 702, host(0), USER, 0)], 9);
    assert_eq!((unplaced.sender, unplaced.unit), (Sender::Host, None), "a host cgroup not known has no unit");
    // The runtime's own process, by its pid, wherever it runs.
    let itself = ended_by(vec![signal(9, 20, 102, 500, host(0), USER, 0)], 9);
    assert_eq!(itself.sender, Sender::Runtime);
    let other = ended_by(vec![signal(15, 20, 102, 30, SenderPlace::Tracked(202), USER, 0)], 15);
    assert_eq!(other.sender, Sender::OtherPod);
    let (pod, _) = other.pod.expect("the sender's pod");
    assert_eq!((pod.pod_uid, pod.container_id), (uid(2), Some(cid(2))));
    let sibling = ended_by(vec![signal(9, 20, 102, 10, SenderPlace::Tracked(101), USER, 0)], 9);
    assert_eq!(sibling.sender, Sender::SamePod, "the sandbox of its own pod (a shared process namespace)");
    let itself = ended_by(vec![signal(15, 20, 102, 20, SenderPlace::Tracked(102), USER, 0)], 15);
    assert_eq!(itself.sender, Sender::SameContainer);
    let lost = ended_by(vec![signal(9, 20, 102, 21, SenderPlace::Lost, USER, 0)], 9);
    assert_eq!(lost.sender, Sender::Unknown);
}

/// Guards: the kernel's own signals taken for their current task's (a
/// fault's siginfo, the OOM killer's private one, a timer's notice: the
/// task that runs them is not who asked), and a signal the kernel sends a
/// process for its own doing (SIGPIPE) taken for a sender. The OOM killer's
/// kill is the OOM killer's, whatever siginfo its SIGKILL carried.
#[test]
fn the_kernels_own_signals_name_no_process() {
    let host = SenderPlace::Host(5);
    let fault = ended_by(vec![signal(11, 20, 102, 20, SenderPlace::Tracked(102), SignalOrigin::Info(1), 0)], 11);
    assert_eq!((fault.sender, fault.pid), (Sender::Kernel, None));
    let limit = ended_by(vec![signal(24, 20, 102, 33, host, SignalOrigin::Priv, 0)], 24);
    assert_eq!(limit.sender, Sender::Kernel, "a random task ran the CPU limit's timer");
    // A timer's own siginfo, fired while another pod's task ran: the
    // kernel's, that pod is not named.
    let timer = ended_by(vec![signal(14, 20, 102, 44, SenderPlace::Tracked(202), SignalOrigin::Kernel(-2), 0)], 14);
    assert_eq!((timer.sender, timer.pid, timer.pod), (Sender::Kernel, None, None), "SI_TIMER");
    // A timer's code is one anyone may forge (rt_sigqueueinfo, a siginfo
    // the syscall copied): from another pod's task or the host's it is
    // that task's, named.
    let forged = ended_by(vec![signal(9, 20, 102, 44, SenderPlace::Tracked(202), SignalOrigin::Info(-2), 0)], 9);
    assert_eq!((forged.sender, forged.pid), (Sender::OtherPod, Some(44)), "a forged SI_TIMER from another pod");
    let forged = ended_by(vec![signal(14, 20, 102, 700, host, SignalOrigin::Info(-2), 0)], 14);
    assert_eq!((forged.sender, forged.pid), (Sender::Host, Some(700)), "a forged SI_TIMER from the host");
    let queued = ended_by(vec![signal(10, 20, 102, 20, SenderPlace::Tracked(102), SignalOrigin::Info(-1), 0)], 10);
    assert_eq!(queued.sender, Sender::SameContainer, "sigqueue(3) from its own container");
    let pipe = ended_by(vec![signal(13, 20, 102, 20, SenderPlace::Tracked(102), SignalOrigin::NoInfo, 0)], 13);
    assert_eq!(pipe.sender, Sender::Kernel);
    // cgroup.kill and a parent's death signal: no siginfo, for the writer.
    let killed = ended_by(vec![signal(9, 20, 102, 700, host, SignalOrigin::NoInfo, 0)], 9);
    assert_eq!(killed.sender, Sender::Host);
    // The OOM killer's SIGKILL, then its pick.
    let oom_kill = ended_by(vec![signal(9, 20, 102, 33, host, SignalOrigin::Priv, 0), oom(20, 102, "app", 33, 0)], 9);
    assert_eq!((oom_kill.sender, oom_kill.pid), (Sender::OomKiller, None));
    // No record of the signal (lost in a full ring): unknown, never guessed.
    let unknown = ended_by(vec![], 9);
    assert_eq!(unknown.sender, Sender::Unknown);
    // A record of another signal is not the one that ended it.
    let other = ended_by(vec![signal(15, 20, 102, 700, host, USER, 0)], 9);
    assert_eq!(other.sender, Sender::Unknown);
}

/// Guards: a file's I/O notice read as the kernel's verdict. A tenant's
/// process sets a pipe's owner to its neighbour (`F_SETOWN`), its signal
/// to SIGKILL (`F_SETSIG`) and `O_ASYNC`, then writes: the kernel sends the
/// neighbour SIGKILL with `POLL_IN`; plain SIGIO comes from its private
/// siginfo. Who armed it is not seen, and who wrote (the runtime, on a
/// container's stdin) did not choose the target: unknown, never the
/// kernel, never the writer. Faults and a child's SIGCHLD keep their codes.
#[test]
fn a_files_io_notice_is_neither_the_kernels_nor_the_writers() {
    let pod = SenderPlace::Tracked(102);
    let runtime = SenderPlace::Host(6);
    for (sig, origin, from, place) in [
        (9, SignalOrigin::Info(1), 21, pod),
        (15, SignalOrigin::Info(2), 21, pod),
        (9, SignalOrigin::Info(6), 601, runtime),
        (29, SignalOrigin::Priv, 601, runtime),
        (29, SignalOrigin::Priv, 20, pod),
    ] {
        let end = ended_by(vec![signal(sig, 20, 102, from, place, origin, 0)], sig as u8);
        assert_eq!((end.sender, end.pid, end.pod.is_some()), (Sender::Unknown, None, false), "{sig} {origin:?}");
    }
    for (sig, code) in [(11, 1), (7, 2), (4, 1), (8, 1), (5, 1), (31, 1)] {
        let end = ended_by(vec![signal(sig, 20, 102, 20, pod, SignalOrigin::Info(code), 0)], sig as u8);
        assert_eq!(end.sender, Sender::Kernel, "a fault's {sig} with code {code}");
    }
    let kernel_kill = ended_by(vec![signal(9, 20, 102, 20, pod, SignalOrigin::Info(0x80), 0)], 9);
    assert_eq!(kernel_kill.sender, Sender::Kernel, "SI_KERNEL");
}

/// Guards: a pod that shares its process namespace, whose sandbox a
/// container ends (`kill -TERM 1`): the kernel's SIGKILLs to every other
/// process of the namespace, from its private siginfo in the dying pause,
/// read as the kernel's verdict. They are the sandbox's death: `same_pod`,
/// the pause the sending process. The OOM killer's and other pods' private
/// kills are not.
#[test]
fn the_end_of_a_shared_pid_namespace_names_the_sandbox_not_the_kernel() {
    let zapped = ended_by(vec![signal(9, 20, 102, 10, SenderPlace::Tracked(101), SignalOrigin::Priv, 0)], 9);
    assert_eq!((zapped.sender, zapped.pid), (Sender::SamePod, Some(10)), "{zapped:?}");
    let pod = zapped.pod.as_ref().map(|(p, _)| p.container_id.clone());
    assert_eq!(pod, Some(Some(cid(1))), "the sandbox's container: {zapped:?}");
    // Its exit has dropped the dying pause from the task table: its place
    // reads as a host task's, in the sandbox's cgroup.
    let dropped = ended_by(vec![signal(9, 20, 102, 10, SenderPlace::Host(101), SignalOrigin::Priv, 0)], 9);
    assert_eq!((dropped.sender, dropped.pid), (Sender::SamePod, Some(10)), "{dropped:?}");
    // The same private SIGKILL run in another pod's task (the OOM killer
    // in an allocating task, a CPU limit's timer): the kernel's.
    let elsewhere = ended_by(vec![signal(9, 20, 102, 30, SenderPlace::Tracked(202), SignalOrigin::Priv, 0)], 9);
    assert_eq!(elsewhere.sender, Sender::Kernel);
    // Its own container's task, not the sandbox: the kernel's.
    let own = ended_by(vec![signal(9, 20, 102, 21, SenderPlace::Tracked(102), SignalOrigin::Priv, 0)], 9);
    assert_eq!(own.sender, Sender::Kernel);
}

/// Guards: a stop past its grace not said (the runtime's SIGTERM and its
/// SIGKILL come from two runc processes), or said of a SIGKILL another
/// sender sent after the runtime's SIGTERM.
#[test]
fn a_sigterm_then_a_sigkill_from_one_sender_is_a_stop_past_its_grace() {
    let (runtime, kubelet) = (SenderPlace::Host(6), SenderPlace::Host(5));
    let mut wd = started(node_with_two_pods(), runtime_settings());
    let mut term = signal(15, 20, 102, 601, runtime, USER, 2 * SEC);
    if let Event::Signal(s) = &mut term {
        s.result = agent_common::signal_result::IGNORED; // a PID namespace's init ignores it
    }
    kernel(&mut wd, term, 2 * SEC);
    kernel(&mut wd, signal(9, 20, 102, 602, runtime, USER, 4 * SEC + 5 * MS), 4 * SEC);
    let found = kernel(&mut wd, exit(20, 102, "app", KILLED, 4 * SEC + 6 * MS), 4 * SEC);
    let found = ends(&found);
    let Some(Some(end)) = found.first() else { panic!("{found:?}") };
    assert_eq!(end.sender, Sender::Runtime);
    assert_eq!(end.stop, Some(Stop { signal: 15, grace_ns: 2 * SEC + 5 * MS }));

    let stop = ended_by(vec![signal(15, 20, 102, 601, runtime, USER, 0), signal(9, 20, 102, 700, kubelet, USER, 0)], 9);
    assert_eq!((stop.sender, stop.stop), (Sender::Host, None), "another sender's kill is no stop past a grace");
    let handled = ended_by(vec![signal(15, 20, 102, 601, runtime, USER, 0)], 15);
    assert_eq!((handled.sender, handled.stop), (Sender::Runtime, None), "SIGTERM itself ended it: within its grace");
}

/// Pod 1's workload init (20, container 102) ends by SIGKILL after
/// `signals` (each fed at its own time, ticking the watchdog there).
fn killed_after(signals: Vec<Event>) -> SignalEnd {
    let mut wd = started(node_with_two_pods(), runtime_settings());
    let mut last = SEC;
    for s in signals {
        let Event::Signal(sig) = &s else { panic!("a signal") };
        last = sig.ts_ns;
        let _ = tick(&mut wd, last);
        kernel(&mut wd, s, last);
    }
    let found = kernel(&mut wd, exit(20, 102, "app", KILLED, last + MS), last + MS);
    match ends(&found).as_slice() {
        [Some(end)] => end.clone(),
        other => panic!("one end by a signal, not {other:?}"),
    }
}

/// Guards: a process whose record a host's handled signals filled (a host
/// agent's SIGUSR1 every minute keeps it, 8 of them) losing the runtime's
/// stop and kill: its end read `unknown`, with no grace.
#[test]
fn a_record_full_of_a_hosts_signals_still_takes_the_runtimes_stop_and_kill() {
    let (runtime, host) = (SenderPlace::Host(6), SenderPlace::Host(5));
    let mut signals: Vec<Event> = (0..8).map(|i| signal(10, 20, 102, 700, host, USER, 2 * SEC + i * MS)).collect();
    signals.push(signal(15, 20, 102, 601, runtime, USER, 3 * SEC));
    signals.push(signal(9, 20, 102, 602, runtime, USER, 5 * SEC));
    let end = killed_after(signals);
    assert_eq!(end.sender, Sender::Runtime, "{end:?}");
    assert_eq!(end.stop, Some(Stop { signal: 15, grace_ns: 2 * SEC }));
}

/// Guards: the first signal a sender ever sent taken as its request to
/// stop (a unit's SIGHUP, a reload, half an hour earlier: a "grace" of
/// half an hour), and a request an hour or more before the kill.
#[test]
fn a_stops_request_is_its_senders_last_that_asks_to_stop_within_the_hour() {
    let host = SenderPlace::Host(5);
    let min = 60 * SEC;
    let t = 2 * SEC;
    // A reload, a handled SIGUSR1 every 14 minutes (the entry lives on).
    let reload = |until: u64| {
        let mut v = vec![signal(1, 20, 102, 700, host, USER, t)];
        v.extend(
            (1..)
                .map(|i| t + i * 14 * min)
                .take_while(|&at| at < until)
                .map(|at| signal(10, 20, 102, 700, host, USER, at)),
        );
        v
    };
    let mut only_reload = reload(t + 30 * min);
    only_reload.push(signal(9, 20, 102, 700, host, USER, t + 30 * min));
    let end = killed_after(only_reload);
    assert_eq!((end.sender, end.stop), (Sender::Host, None), "a reload asks no one to stop");

    let mut stopped = reload(t + 30 * min);
    stopped.push(signal(15, 20, 102, 700, host, USER, t + 30 * min));
    stopped.push(signal(9, 20, 102, 700, host, USER, t + 30 * min + 5 * SEC));
    let end = killed_after(stopped);
    assert_eq!(end.stop, Some(Stop { signal: 15, grace_ns: 5 * SEC }), "the SIGTERM, not the reload");

    let mut long_ago = vec![signal(15, 20, 102, 700, host, USER, t)];
    long_ago.extend((1..=5).map(|i| signal(10, 20, 102, 700, host, USER, t + i * 14 * min)));
    long_ago.push(signal(9, 20, 102, 700, host, USER, t + 71 * min));
    let end = killed_after(long_ago);
    assert_eq!((end.sender, end.stop), (Sender::Host, None), "a SIGTERM 71 minutes before is no stop's");
}

fn verdicts(findings: &[Finding]) -> Vec<&Verdict> {
    findings
        .iter()
        .filter_map(|f| match f {
            Finding::RuntimeVerdict(v) => Some(v.as_ref()),
            _ => None,
        })
        .collect()
}

/// The runtime's TaskExit of pod 1's workload init (20), exit `status`.
fn task_exit_of_20(status: u32) -> RuntimeEvent {
    RuntimeEvent::TaskExit {
        container_id: cid(2),
        exec_id: String::new(),
        pid: 20,
        exit_status: status,
        published_ns: 0,
    }
}

fn cri_status(reason: &str, exit_code: i32) -> RuntimeEvent {
    RuntimeEvent::ContainerStatus { container_id: cid(2), exited: true, reason: reason.into(), exit_code }
}

/// Guards: the runtime's word taken as the truth, or not asked. A runtime
/// that says `OOMKilled` for a container its runtime stopped (the
/// cgroup's OOM count is cumulative: a child was OOM-killed earlier), or
/// `Error` for one the OOM killer ended (its OOM event came after the
/// exit), disagrees with the kernel: counted by direction; the CRI is
/// asked once both sides are in.
#[test]
fn the_runtimes_reason_is_held_against_the_kernels() {
    let now = |boot_ns: u64| Now { boot_ns, wall_ns: boot_ns };
    let mut node = node_with_two_pods();
    node.listing_up = true;
    let mut wd = started(node, runtime_settings());
    // A child of container 2 OOM-killed earlier; later the runtime stops it.
    kernel(&mut wd, oom(25, 102, "child", 25, 2 * SEC), 2 * SEC);
    kernel(&mut wd, signal(9, 20, 102, 602, SenderPlace::Host(6), USER, 3 * SEC), 3 * SEC);
    kernel(&mut wd, exit(20, 102, "app", KILLED, 3 * SEC + MS), 3 * SEC);
    assert!(wd.host().statuses_wanted.borrow().is_empty(), "asked once the runtime has handled its exit");
    let found: Vec<Finding> = wd.on_runtime(&task_exit_of_20(137), now(3 * SEC + 10 * MS)).collect();
    assert!(verdicts(&found).is_empty());
    assert_eq!(*wd.host().statuses_wanted.borrow(), [cid(2)]);
    let found: Vec<Finding> = wd.on_runtime(&cri_status("OOMKilled", 137), now(4 * SEC)).collect();
    let v = verdicts(&found);
    assert_eq!(v.len(), 1, "{found:?}");
    assert_eq!((v[0].result, v[0].disagreement), (VerdictResult::Disagreed, Some(Disagreement::RuntimeSaysOom)));
    assert_eq!((v[0].kernel.reason, v[0].kernel.sender), (ExitReason::Killed, Some(Sender::Runtime)));
    assert_eq!(v[0].runtime_reason.as_deref(), Some("OOMKilled"));

    // The OOM killer ends an init; the runtime calls it Error.
    let mut wd = started(node_with_two_pods(), runtime_settings());
    wd.host_mut().listing_up = true;
    kernel(&mut wd, oom(20, 102, "app", 20, 2 * SEC), 2 * SEC);
    kernel(&mut wd, exit(20, 102, "app", KILLED, 2 * SEC + MS), 2 * SEC);
    wd.on_runtime(&task_exit_of_20(137), now(2 * SEC)).for_each(drop);
    let found: Vec<Finding> = wd.on_runtime(&cri_status("Error", 137), now(3 * SEC)).collect();
    assert_eq!(verdicts(&found)[0].disagreement, Some(Disagreement::KernelSaysOom));

    // Agreement: the runtime's stop said Error, 137.
    let mut wd = started(node_with_two_pods(), runtime_settings());
    wd.host_mut().listing_up = true;
    kernel(&mut wd, exit(20, 102, "app", KILLED, 2 * SEC), 2 * SEC);
    wd.on_runtime(&task_exit_of_20(137), now(2 * SEC)).for_each(drop);
    let found: Vec<Finding> = wd.on_runtime(&cri_status("Error", 137), now(3 * SEC)).collect();
    assert_eq!((verdicts(&found)[0].result, verdicts(&found)[0].disagreement), (VerdictResult::Agreed, None));
}

/// Guards: a check waiting forever (the CRI never answering, the TaskExit
/// never coming), or one never made where no CRI is listening: the
/// TaskExit's exit status is the runtime's word then.
#[test]
fn the_runtimes_word_without_the_cri_and_without_an_answer() {
    let now = |boot_ns: u64| Now { boot_ns, wall_ns: boot_ns };
    // No CRI: the TaskExit's code alone, at once.
    let mut wd = started(node_with_two_pods(), runtime_settings());
    kernel(&mut wd, exit(20, 102, "app", ExitStatus::Code(3), 2 * SEC), 2 * SEC);
    let found: Vec<Finding> = wd.on_runtime(&task_exit_of_20(3), now(2 * SEC)).collect();
    assert_eq!(verdicts(&found)[0].result, VerdictResult::Agreed);
    // The CRI listing, asked, never answers: unanswered after the wait;
    // a TaskExit that never comes: the CRI is asked after 3 s.
    let mut wd = started(node_with_two_pods(), runtime_settings());
    wd.host_mut().listing_up = true;
    kernel(&mut wd, exit(20, 102, "app", KILLED, 2 * SEC), 2 * SEC);
    assert!(wd.host().statuses_wanted.borrow().is_empty());
    tick(&mut wd, 4 * SEC);
    assert!(wd.host().statuses_wanted.borrow().is_empty(), "2 s: its TaskExit may still come");
    tick(&mut wd, 5 * SEC);
    assert_eq!(*wd.host().statuses_wanted.borrow(), [cid(2)]);
    let found = tick(&mut wd, 63 * SEC);
    assert_eq!(verdicts(&found).iter().map(|v| v.result).collect::<Vec<_>>(), [VerdictResult::Unanswered]);
    // A TaskExit whose code is not the kernel's.
    let mut wd = started(node_with_two_pods(), runtime_settings());
    kernel(&mut wd, exit(20, 102, "app", KILLED, 2 * SEC), 2 * SEC);
    let found: Vec<Finding> = wd.on_runtime(&task_exit_of_20(143), now(2 * SEC)).collect();
    assert_eq!(verdicts(&found)[0].disagreement, Some(Disagreement::ExitCode));
}

/// Guards: a host process in a cgroup made a moment before (the kernel
/// tracks every new cgroup until the agent places it) read as an unknown
/// pod's: a shell that moves itself into a unit's cgroup and kills a
/// container at once.
#[test]
fn a_sender_in_a_host_cgroup_the_kernel_still_tracked_is_the_hosts() {
    let mut wd = started(node_with_two_pods(), runtime_settings());
    let path = "/system.slice/ops.service";
    wd.host_mut().cgroups.insert(path.into(), 8);
    kernel(&mut wd, mkdir(path, 8, 2 * SEC), 2 * SEC);
    kernel(&mut wd, signal(9, 20, 102, 800, SenderPlace::Tracked(8), USER, 2 * SEC + MS), 2 * SEC);
    let found = kernel(&mut wd, exit(20, 102, "app", KILLED, 2 * SEC + 2 * MS), 2 * SEC);
    let end = ends(&found).into_iter().flatten().next().expect("an end");
    assert_eq!((end.sender, end.unit.as_deref()), (Sender::Host, Some("ops.service")));
}
