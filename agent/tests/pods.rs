//! Privileged end-to-end tests of the pod model: a kubelet-shaped cgroup
//! tree inside the test's own cgroup (cgroupfs and systemd names), a
//! pause-like sandbox process and two containers; real OOM kills of a
//! container child, a container init and the sandbox; teardown; and an agent
//! restart that must rediscover the pod.

mod harness;

use std::time::Duration;

use agent_common::EventKind;

use prometheus::Registry as PromRegistry;
use sandwatch::{
    events::Event,
    labels::Label as _,
    model::{DeathCause, Outcome, Report, TaskRole},
    node_host::NodeHost,
    os::boottime_ns,
    pipeline::Pipeline,
    telemetry::{
        metrics::{render_with, Metrics, Subject},
        Outputs,
    },
    watchdog::{
        self,
        explain::Explanation,
        pressure::{PressureChange, PressureEnd, Warned},
        Finding, Fired, MemoryPressure, OomConstraint, OomLimit, Watchdog,
    },
};
use tokio_util::sync::CancellationToken;

use harness::{cid, grower, holder, kernel_oom_report, metric, require_root, KubePod};

const UID_GROUP: &str = "5d2a7c1e-0001-4a6d-8e9f-0a1b2c3d4e5f";
const UID_SINGLE: &str = "5d2a7c1e-0002-4a6d-8e9f-0a1b2c3d4e5f";
const UID_GONE: &str = "5d2a7c1e-0003-4a6d-8e9f-0a1b2c3d4e5f";
const UID_BORN: &str = "5d2a7c1e-0004-4a6d-8e9f-0a1b2c3d4e5f";
const UID_LATE: &str = "5d2a7c1e-0005-4a6d-8e9f-0a1b2c3d4e5f";
const UID_LIMIT: &str = "5d2a7c1e-0006-4a6d-8e9f-0a1b2c3d4e5f";
const UID_LIMIT_POD: &str = "5d2a7c1e-0007-4a6d-8e9f-0a1b2c3d4e5f";
const UID_LIMIT_SWAP: &str = "5d2a7c1e-0008-4a6d-8e9f-0a1b2c3d4e5f";
const UID_LIMIT_BESIDE: &str = "5d2a7c1e-0010-4a6d-8e9f-0a1b2c3d4e5f";

const UID: &str = "5d2a7c1e-3b4f-4a6d-8e9f-0a1b2c3d4e5f";

const SANDBOX: usize = 0;
const A: usize = 1;
const B: usize = 2;

/// The three inits: each joins its cgroup and waits on its FIFO; then the
/// sandbox's `pause` allocates, A's init runs an allocating child and
/// sleeps on, B's init becomes the allocator itself.
fn start_inits(pod: &mut KubePod) {
    let hog = "if=/dev/zero of=/dev/null bs=256M count=1";
    let pause = pod.pause_binary();
    pod.start_init(SANDBOX, &format!("exec {pause} {hog}"));
    pod.start_init(A, &format!("dd {hog}; exec sleep 1000"));
    pod.start_init(B, &format!("exec dd {hog}"));
}

struct Watch {
    pipeline: Pipeline,
    watchdog: Watchdog<NodeHost>,
    outputs: Outputs,
    prom: PromRegistry,
    pod_series_ttl_ns: u64,
    /// Whose limit fired, for each OOM kill handled (victim pid).
    fired: Vec<(u32, Fired)>,
    /// Each OOM kill handled (victim pid), and what it was warned of.
    warned: Vec<(u32, Option<Warned>)>,
    /// Each OOM kill's explanation (victim pid): what a wrong cause needs
    /// to be read.
    explained: Vec<(u32, Explanation)>,
    /// The memory pressure edges found.
    pressure: Vec<MemoryPressure>,
    /// The limit changes found.
    limits: Vec<sandwatch::watchdog::LimitChanged>,
    /// Each OOM kill's word on a limit lowered before it (victim pid).
    lowered: Vec<(u32, Option<sandwatch::watchdog::limits::Lowered>)>,
}

impl Watch {
    /// The agent's own pipeline, watchdog core and metrics (in `prom`), as
    /// its default flags make them, without the runtime's side, and with
    /// no hold of a new series at 0 (this test reads them, not Prometheus).
    fn start() -> Self {
        require_root();
        let settings = harness::settings(&["--pod-series-hold", "0"]);
        let mut pipeline = Pipeline::start(&settings.probes, settings.channel_capacity, CancellationToken::new())
            .unwrap_or_else(|e| panic!("pipeline: {e}"));
        // Every family, as the agent registers them.
        let Metrics { registry: prom, watchdog: metrics, .. } = Metrics::register(Subject {
            stats: pipeline.stats.clone(),
            kernel: Some(pipeline.kernel.clone()),
            programs_attached: pipeline.probes.programs_attached(),
            kernel_release: "test",
            kernel_path: pipeline.probes.path(),
            oom_decision: pipeline.probes.oom_decision().label(),
            settings: &settings.metrics,
        })
        .expect("metrics");
        let outputs = Outputs { metrics, records: None };
        let pod_series_ttl_ns = settings.watchdog.pod_series_ttl_ns.expect("a default TTL");
        // As the agent: the kernel streams only what the model says is a
        // pod's (and what is new, until the model says otherwise).
        let core = watchdog::Settings { runtime: None, ..settings.watchdog };
        let mut watchdog = Watchdog::new(NodeHost::new(&mut pipeline), core);
        outputs.publish(watchdog.discover(boottime_ns()));
        Self {
            pipeline,
            watchdog,
            outputs,
            prom,
            pod_series_ttl_ns,
            fired: Vec::new(),
            warned: Vec::new(),
            explained: Vec::new(),
            pressure: Vec::new(),
            limits: Vec::new(),
            lowered: Vec::new(),
        }
    }

    /// One event through the core and into the metrics; the reports of its
    /// exits and OOM kills.
    fn handle(&mut self, event: &Event) -> Vec<Report> {
        let findings: Vec<Finding> = self.watchdog.on_kernel(event, boottime_ns()).collect();
        self.note(&findings);
        let reports = findings
            .iter()
            .filter_map(|f| match f {
                Finding::TaskExit(r) => Some(Report::Exit(r.clone())),
                Finding::OomKill(k) => Some(Report::Oom(k.report.clone())),
                _ => None,
            })
            .collect();
        self.outputs.publish(findings);
        reports
    }

    /// What the tests look at in findings.
    fn note(&mut self, findings: &[Finding]) {
        for f in findings {
            match f {
                Finding::OomKill(k) => {
                    self.fired.push((k.report.victim.pid, k.explained.fired));
                    self.warned.push((k.report.victim.pid, k.warned.clone()));
                    self.explained.push((k.report.victim.pid, k.explained.clone()));
                    self.lowered.push((k.report.victim.pid, k.lowered));
                }
                Finding::MemoryPressure(p) => self.pressure.push((**p).clone()),
                Finding::LimitChange(l) => self.limits.push((**l).clone()),
                _ => {}
            }
        }
    }

    /// The agent loop's tick, at `now_ns`.
    fn tick_at(&mut self, now_ns: u64) {
        let findings: Vec<Finding> = self.watchdog.on_tick(now_ns).collect();
        self.note(&findings);
        self.outputs.publish(findings);
    }

    fn tick(&mut self) {
        self.tick_at(boottime_ns());
    }

    /// Handles events until `done` holds for the reports seen so far.
    async fn until(&mut self, timeout: Duration, done: impl Fn(&[Report]) -> bool) -> Vec<Report> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut reports = Vec::new();
        while !done(&reports) {
            match tokio::time::timeout_at(deadline, self.pipeline.events.next()).await {
                Ok(Some(event)) => reports.extend(self.handle(&event)),
                _ => break,
            }
        }
        reports
    }

    /// Handles events for `period`, except those `lost` picks: they never
    /// reach the watchdog, as if a full ring buffer had dropped them.
    async fn losing(&mut self, period: Duration, lost: impl Fn(&Event) -> bool) -> usize {
        let deadline = tokio::time::Instant::now() + period;
        let mut dropped = 0;
        while let Ok(Some(event)) = tokio::time::timeout_at(deadline, self.pipeline.events.next()).await {
            if lost(&event) {
                dropped += 1;
            } else {
                self.handle(&event);
            }
        }
        dropped
    }

    /// Handles events and ticks until the limits of `cgroups` are followed.
    async fn know_limits(&mut self, cgroups: &[u64]) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            self.until(Duration::from_millis(200), |_| false).await;
            self.tick();
            if cgroups.iter().all(|id| self.watchdog.limits().limits(*id).is_some()) {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "limits of {cgroups:?} never followed");
        }
    }

    fn text(&self) -> String {
        let pods = self.outputs.metrics.pod_series_text().expect("per-pod series");
        render_with(&self.prom, &[pods]).expect("render")
    }
}

fn oom_of(reports: &[Report], pid: u32) -> Option<&sandwatch::model::OomReport> {
    reports.iter().find_map(|r| match r {
        Report::Oom(o) if o.victim.pid == pid => Some(o),
        _ => None,
    })
}

fn exit_with_role(reports: &[Report], role: TaskRole) -> Option<&sandwatch::model::ExitReport> {
    reports.iter().find_map(|r| match r {
        Report::Exit(e) if e.role == role && e.pod.as_ref().is_some_and(|p| p.pod_uid == UID) => Some(e),
        _ => None,
    })
}

/// OOM-kills a container child (A), a container init (B) and the sandbox,
/// asserting each victim's role, pod and container, then tears down.
async fn oom_three_ways(watch: &mut Watch, pod: &KubePod, restart_after_child: bool) {
    let uid = UID.to_string();

    // (a) a child of container A's init.
    pod.trigger(A);
    let reports = watch
        .until(Duration::from_secs(15), |rs| {
            rs.iter().any(|r| matches!(r, Report::Oom(o) if o.role == TaskRole::ContainerChild && o.pod.as_ref().is_some_and(|p| p.pod_uid == UID)))
        })
        .await;
    let child_oom = reports
        .iter()
        .find_map(|r| match r {
            Report::Oom(o) if o.pod.as_ref().is_some_and(|p| p.pod_uid == uid) => Some(o),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no OOM report for container A's child: {reports:#?}"));
    assert_eq!(child_oom.outcome, Outcome::Handled);
    assert_eq!(child_oom.role, TaskRole::ContainerChild);
    assert_ne!(child_oom.victim.pid, pod.init_pid(A), "the victim is dd, not the init");
    assert_eq!(child_oom.pod.as_ref().and_then(|p| p.container_id.clone()), Some(cid(2)));
    assert_eq!(child_oom.victim_comm, "dd");
    // The kernel may run out again before dd's memory is back and take A's
    // init as well: whatever it killed in A is reported, roles and all.
    let mut reports = reports;
    reports.extend(watch.until(Duration::from_millis(500), |_| false).await);
    let a_victims: Vec<(u32, TaskRole)> = reports
        .iter()
        .filter_map(|r| match r {
            Report::Oom(o) if o.pod.as_ref().is_some_and(|p| p.pod_uid == uid && p.container_id == Some(cid(2))) => {
                Some((o.victim.pid, o.role))
            }
            _ => None,
        })
        .collect();
    let a_kills = single_mode_kills(&a_victims, pod.init_pid(A), pod.oom_kills(A), "container A");

    if restart_after_child {
        // Restart: a new agent must rediscover the running pod.
        let old = std::mem::replace(watch, Watch::start());
        old.pipeline.stop().await;
        let s = watch.watchdog.registry().sandbox(&uid).expect("pod rediscovered after restart");
        assert_eq!(s.sandbox_container.as_ref().map(|c| c.id.clone()), Some(cid(1)));
        assert_eq!(
            s.container(&cid(3)).and_then(|c| c.init.as_ref()).map(|t| t.key.pid),
            Some(pod.init_pid(B)),
            "container B's init rediscovered"
        );
    }

    // (b) container B's init itself.
    pod.trigger(B);
    let b_pid = pod.init_pid(B);
    let reports = watch
        .until(Duration::from_secs(15), |rs| {
            rs.iter().any(|r| matches!(r, Report::Exit(e) if e.role == TaskRole::ContainerInit))
        })
        .await;
    let init_oom = oom_of(&reports, b_pid).unwrap_or_else(|| panic!("no OOM report for B's init: {reports:#?}"));
    assert_eq!((init_oom.outcome, init_oom.role), (Outcome::Handled, TaskRole::ContainerInit));
    assert_eq!(init_oom.pod.as_ref().and_then(|p| p.container_id.clone()), Some(cid(3)));
    let b_exit = exit_with_role(&reports, TaskRole::ContainerInit).expect("B's init exit");
    assert_eq!((b_exit.outcome, b_exit.sandbox_death), (Outcome::Handled, None));

    // (c) the sandbox's pause process.
    pod.trigger(SANDBOX);
    let s_pid = pod.init_pid(SANDBOX);
    let reports = watch
        .until(Duration::from_secs(15), |rs| {
            rs.iter().any(|r| matches!(r, Report::Exit(e) if e.sandbox_death.is_some()))
        })
        .await;
    let sandbox_oom = oom_of(&reports, s_pid).unwrap_or_else(|| panic!("no OOM report for the sandbox: {reports:#?}"));
    assert_eq!((sandbox_oom.outcome, sandbox_oom.role), (Outcome::Handled, TaskRole::Sandbox));
    assert_eq!(sandbox_oom.victim_comm, "pause");
    let death = reports
        .iter()
        .find_map(|r| match r {
            Report::Exit(e) if e.sandbox_death.is_some() => Some(e),
            _ => None,
        })
        .expect("sandbox death");
    assert_eq!(death.sandbox_death, Some(DeathCause::Oom));
    assert_eq!(death.pod.as_ref().map(|p| p.pod_uid.clone()), Some(uid.clone()));
    let sandbox_cgroup =
        watch.watchdog.registry().sandbox(&uid).and_then(|s| s.sandbox_container.as_ref()).map(|c| c.cgroup_id);
    assert_eq!(sandbox_cgroup, Some(pod.cgroup_id(SANDBOX)), "the sandbox container is the first one");

    // OOM events close once their burst of victims is over; the agent's
    // loop ticks every second.
    std::thread::sleep(Duration::from_millis(300));
    watch.tick();
    let text = watch.text();
    let restarted = restart_after_child;
    assert!(watch.watchdog.registry().sandbox(&uid).is_some(), "the pod is tracked after its sandbox's death");
    for (series, want) in [
        ("sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_child\"}", if restarted { 0.0 } else { 1.0 }),
        // B's init, and A's if the kernel took it too (counted by the agent
        // that saw it: before the restart).
        ("sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_init\"}", if restarted { 1.0 } else { a_kills as f64 }),
        ("sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"sandbox\"}", 1.0),
        ("sandwatch_sandbox_deaths_total{cause=\"oom\"}", 1.0),
        (&format!("sandwatch_pod_oom_kills_total{{cause=\"anon\",container=\"\",limit=\"container\",namespace=\"\",pod=\"\",pod_uid=\"{UID}\",victim_role=\"sandbox\",warned=\"false\",workload=\"\",workload_kind=\"\"}}"), 1.0),
        // The other tests' pods come and go beside this one: the gauge is
        // the registry's count, and this pod is in it.
        ("sandwatch_tracked_sandboxes", watch.watchdog.registry().tracked_sandboxes() as f64),
    ] {
        // The kills as counted, and the kernel's word on them, rather than
        // the whole exposition: what a miss needs to be read.
        let family = series.split('{').next().unwrap_or(series);
        let counted: Vec<&str> = text.lines().filter(|l| l.starts_with(family)).collect();
        assert_eq!(
            metric(&text, series),
            Some(want),
            "{series} in\n{counted:#?}\nthe kills as explained: {:#?}\nthe kernel's log: {:#?}",
            watch.explained,
            harness::kernel_oom_lines()
        );
    }
}

/// Teardown: everything left is killed, containers then the pod removed;
/// the registry keeps nothing but tombstones.
async fn teardown(watch: &mut Watch, pod: KubePod) {
    let pod_path = pod.pod_path.clone();
    let a_init = pod.init_pid(A);
    drop(pod);
    let reports = watch.until(Duration::from_secs(5), |_| false).await;
    // Container A's init (now `sleep`) was killed before its cgroup went.
    let a_exit = reports
        .iter()
        .find_map(|r| match r {
            Report::Exit(e) if e.role == TaskRole::ContainerInit => Some(e),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no exit report for A's init {a_init}: {reports:#?}"));
    assert_eq!(a_exit.outcome, Outcome::Handled);
    let reg = &watch.watchdog.registry();
    assert!(reg.sandbox(UID).is_none(), "pod {pod_path} gone from the registry");
    assert!(reg.tombstone_count() >= 4, "pod and containers leave tombstones");
    // Gauges of the whole node, where other tests' pods come and go: the
    // registry's counts, which no longer hold this pod (above).
    let text = watch.text();
    let reg = watch.watchdog.registry();
    assert_eq!(metric(&text, "sandwatch_tracked_containers"), Some(reg.tracked_containers() as f64), "{text}");
    assert_eq!(metric(&text, "sandwatch_tracked_processes"), Some(reg.tracked_processes() as f64), "{text}");
    // The pod's OOM series stay for late events, then go with the pod.
    let pod_series = |text: &str| {
        text.lines().filter(|l| l.starts_with("sandwatch_pod_oom_kills_total{") && l.contains(UID)).count()
    };
    assert!(pod_series(&text) > 0, "{text}");
    let ttl = watch.pod_series_ttl_ns;
    watch.tick_at(boottime_ns() + ttl);
    let text = watch.text();
    assert_eq!(pod_series(&text), 0, "a gone pod's series go after the grace: {text}");
    assert!(metric(&text, "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"sandbox\"}")
        .is_some_and(|v| v >= 1.0));
}

#[tokio::test(flavor = "current_thread")]
async fn cgroupfs_pod_victims_roles_and_sandbox_oom_death() {
    let mut watch = Watch::start();
    let mut pod = KubePod::build("cgroupfs", UID, false, 3);
    start_inits(&mut pod);
    let _ = watch.until(Duration::from_millis(300), |_| false).await;
    oom_three_ways(&mut watch, &pod, false).await;
    teardown(&mut watch, pod).await;
    watch.pipeline.stop().await;
}

#[tokio::test(flavor = "current_thread")]
async fn systemd_pod_survives_agent_restart_and_is_attributed() {
    let mut watch = Watch::start();
    let mut pod = KubePod::build("systemd", UID, true, 3);
    start_inits(&mut pod);
    let _ = watch.until(Duration::from_millis(300), |_| false).await;
    oom_three_ways(&mut watch, &pod, true).await;
    teardown(&mut watch, pod).await;
    watch.pipeline.stop().await;
}

/// A container whose init has three children, one of which runs out of
/// memory. With `memory.oom.group = 1` (kubelet >= 1.28 on cgroup v2) the
/// kernel kills all four: one OOM event of scope `container`, the init a
/// `container_init` victim and the rest `container_group`, no child-kill
/// series, no storm, one container death. Without it (or on cgroup v1,
/// which has no group kill) one `container_child` victim, one event of
/// scope `process`, and the container lives on.
#[tokio::test(flavor = "current_thread")]
async fn group_kill_is_one_event_of_a_whole_container() {
    let mut watch = Watch::start();
    let work = "{ sleep 1000 & sleep 1000 & dd if=/dev/zero of=/dev/null bs=256M count=1; wait; }";
    let mut grouped = KubePod::build("group", UID_GROUP, false, 2);
    let v2 = grouped.set_oom_group(1, true);
    grouped.start_init(0, "exec sleep 1000");
    grouped.start_init(1, work);
    let mut single = KubePod::build("single", UID_SINGLE, false, 2);
    single.set_oom_group(1, false);
    single.start_init(0, "exec sleep 1000");
    single.start_init(1, work);
    let _ = watch.until(Duration::from_millis(300), |_| false).await;

    let victims_of = |reports: &[Report], uid: &str| -> Vec<(u32, TaskRole)> {
        reports
            .iter()
            .filter_map(|r| match r {
                Report::Oom(o) if o.pod.as_ref().is_some_and(|p| p.pod_uid == uid) => Some((o.victim.pid, o.role)),
                _ => None,
            })
            .collect()
    };

    // The group: all four processes, the init's exit among them.
    grouped.trigger(1);
    let init = grouped.init_pid(1);
    let want = if v2 { 4 } else { 1 };
    let reports = watch
        .until(Duration::from_secs(20), |rs| {
            victims_of(rs, UID_GROUP).len() >= want
                && (!v2 || rs.iter().any(|r| matches!(r, Report::Exit(e) if e.role == TaskRole::ContainerInit)))
        })
        .await;
    // Anything more would show within the gap.
    let mut reports = reports;
    reports.extend(watch.until(Duration::from_millis(500), |_| false).await);
    let victims = victims_of(&reports, UID_GROUP);
    std::thread::sleep(Duration::from_millis(300));
    watch.tick();
    let text = watch.text();
    let pod_series = |text: &str, uid: &str, role: &str| {
        metric(
            text,
            &format!("sandwatch_pod_oom_kills_total{{cause=\"anon\",container=\"\",limit=\"container\",namespace=\"\",pod=\"\",pod_uid=\"{uid}\",victim_role=\"{role}\",warned=\"false\",workload=\"\",workload_kind=\"\"}}"),
        )
    };
    if v2 {
        let mut roles: Vec<TaskRole> = victims.iter().map(|(_, r)| *r).collect();
        roles.sort_by_key(|r| r.label());
        assert_eq!(
            roles,
            [TaskRole::ContainerGroup, TaskRole::ContainerGroup, TaskRole::ContainerGroup, TaskRole::ContainerInit],
            "{victims:?}"
        );
        assert!(victims.iter().any(|(pid, role)| *pid == init && *role == TaskRole::ContainerInit), "{victims:?}");
        assert_eq!(
            metric(&text, "sandwatch_oom_events_total{constraint=\"memcg\",limit=\"container\",qos_class=\"burstable\",scope=\"container\"}"),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            metric(&text, "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_group\"}"),
            Some(3.0)
        );
        assert_eq!(
            metric(&text, "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_init\"}"),
            Some(1.0)
        );
        assert_eq!(
            pod_series(&text, UID_GROUP, "container_init"),
            Some(1.0),
            "the event, once, as the container's death: {text}"
        );
        assert_eq!(pod_series(&text, UID_GROUP, "container_child"), None, "no child-kill series: {text}");
        assert_eq!(
            metric(&text, "sandwatch_oom_kills_window{window=\"60s\"}"),
            Some(1.0),
            "one event in the churn window"
        );
        assert_eq!(
            metric(&text, "sandwatch_task_exits_total{outcome=\"handled\",role=\"container_init\"}"),
            Some(1.0),
            "one container death"
        );
        assert!(metric(&text, "sandwatch_oom_group_containers").is_some_and(|v| v >= 1.0), "{text}");
    } else {
        let kills = single_mode_kills(&victims, init, grouped.oom_kills(1), "cgroup v1 kills one process at a time");
        assert_eq!(
            metric(&text, "sandwatch_oom_events_total{constraint=\"memcg\",limit=\"container\",qos_class=\"burstable\",scope=\"process\"}"),
            Some(kills as f64),
            "{text}"
        );
        assert_eq!(metric(&text, "sandwatch_oom_group_containers"), Some(0.0));
    }
    assert_eq!(metric(&text, "sandwatch_oom_storm"), Some(0.0));
    let process_events_before =
        metric(&text, "sandwatch_oom_events_total{constraint=\"memcg\",limit=\"container\",qos_class=\"burstable\",scope=\"process\"}").unwrap_or(0.0);

    // Single-process mode: the child, the container lives on.
    single.trigger(1);
    let reports = watch.until(Duration::from_secs(20), |rs| !victims_of(rs, UID_SINGLE).is_empty()).await;
    let mut reports = reports;
    reports.extend(watch.until(Duration::from_millis(500), |_| false).await);
    // A second kill the kernel may still make comes within its count.
    let missing = (single.oom_kills(1) as usize).saturating_sub(victims_of(&reports, UID_SINGLE).len());
    if missing > 0 {
        reports.extend(watch.until(Duration::from_secs(5), |rs| victims_of(rs, UID_SINGLE).len() >= missing).await);
    }
    let single_init = single.init_pid(1);
    let kills =
        single_mode_kills(&victims_of(&reports, UID_SINGLE), single_init, single.oom_kills(1), "one process per OOM");
    std::thread::sleep(Duration::from_millis(300));
    watch.tick();
    let text = watch.text();
    let children = victims_of(&reports, UID_SINGLE).iter().filter(|(pid, _)| *pid != single_init).count();
    assert_eq!(pod_series(&text, UID_SINGLE, "container_child"), Some(children as f64), "{text}");
    if kills == 1 {
        let init_alive = std::path::Path::new(&format!("/proc/{single_init}")).exists();
        assert!(init_alive, "the container's init lives on");
    }
    let scope_process =
        metric(&text, "sandwatch_oom_events_total{constraint=\"memcg\",limit=\"container\",qos_class=\"burstable\",scope=\"process\"}").unwrap_or(0.0);
    assert_eq!(scope_process - process_events_before, kills as f64, "each kill its own event: {text}");
    drop(grouped);
    drop(single);
    watch.pipeline.stop().await;
}

/// Checks a container's OOM victims in single-process mode against the
/// kernel's count of its kills (`kernel`) and returns that count. The first
/// victim is the allocating child; when memory comes back more slowly than
/// the next allocation asks for it (seen under emulation, and a known
/// kernel behaviour), the kernel runs out again and takes another process,
/// the init perhaps. Every kill is reported, each with the victim's own
/// role: `container_init` for the init, `container_child` for any other.
fn single_mode_kills(victims: &[(u32, TaskRole)], init: u32, kernel: u64, what: &str) -> u64 {
    assert_eq!(victims.len() as u64, kernel, "{what}: as many victims as the kernel's oom_kill: {victims:?}");
    assert!(
        victims.first().is_some_and(|(pid, role)| *pid != init && *role == TaskRole::ContainerChild),
        "{what}: the allocating child first: {victims:?}"
    );
    for (pid, role) in victims {
        let want = if *pid == init { TaskRole::ContainerInit } else { TaskRole::ContainerChild };
        assert_eq!(*role, want, "{what}: victim {pid} (init {init}): {victims:?}");
    }
    if kernel > 1 {
        eprintln!("{what}: the kernel killed {kernel} processes (memory came back too slowly): {victims:?}");
    }
    kernel
}

/// Cgroup changes lost on the way (kept from the watchdog here, as a full
/// ring buffer or channel loses them): once a loss is counted, the next
/// tick reads the cgroup tree again — the pod torn down in the gap leaves
/// the registry, the one created in it is known — and counts what it did.
#[tokio::test(flavor = "current_thread")]
async fn lost_cgroup_changes_are_recovered_from_the_tree_at_the_next_tick() {
    let mut watch = Watch::start();
    let gone = KubePod::build("resync-gone", UID_GONE, false, 2);
    let _ = watch.until(Duration::from_millis(300), |_| false).await;
    assert!(watch.watchdog.registry().sandbox(UID_GONE).is_some(), "the pod is known from its mkdir");

    let cgroup_change = |e: &Event| matches!(e, Event::CgroupMkdir(_) | Event::CgroupRmdir(_));
    drop(gone);
    let born = KubePod::build("resync-born", UID_BORN, false, 2);
    let lost = watch.losing(Duration::from_millis(500), cgroup_change).await;
    assert!(lost >= 6, "the teardown's and the creation's mkdir and rmdir kept away: {lost}");
    let stale = |w: &Watch| {
        w.watchdog.registry().sandbox(UID_GONE).is_some() && w.watchdog.registry().sandbox(UID_BORN).is_none()
    };
    assert!(stale(&watch), "without those events the registry is stale");
    watch.tick();
    assert!(stale(&watch), "no loss counted, no re-read");

    watch.pipeline.stats.channel_drop(Some(EventKind::CgroupRmdir));
    watch.tick();
    let reg = watch.watchdog.registry();
    assert!(reg.sandbox(UID_GONE).is_none(), "the pod torn down in the gap is gone");
    let born_sandbox = reg.sandbox(UID_BORN).expect("the pod created in the gap is known");
    assert_eq!(born_sandbox.sandbox_container.as_ref().map(|c| c.cgroup_id), Some(born.cgroup_id(0)));
    assert_eq!(born_sandbox.workloads().count(), 1, "and its app container");
    let text = watch.text();
    assert_eq!(metric(&text, "sandwatch_cgroup_resyncs_total"), Some(1.0), "{text}");
    let change =
        |c: &str| metric(&text, &format!("sandwatch_cgroup_resync_changes_total{{change=\"{c}\"}}")).unwrap_or(0.0);
    assert!(change("created") >= 3.0 && change("removed") >= 3.0, "pod and two containers each way: {text}");
    let tracked = watch.watchdog.registry().tracked_sandboxes() as f64;
    assert_eq!(metric(&text, "sandwatch_tracked_sandboxes"), Some(tracked), "{text}");

    // Nothing lost since: the next tick reads nothing.
    watch.tick();
    assert_eq!(metric(&watch.text(), "sandwatch_cgroup_resyncs_total"), Some(1.0));

    // A pod made and torn down while its events wait (the reader is
    // behind), the tree read again meanwhile, then its rmdirs lost: its
    // mkdirs, older than the read, name cgroups that are gone by then.
    let removed_before = change("removed");
    let late = KubePod::build("resync-late", UID_LATE, false, 2);
    drop(late);
    watch.pipeline.stats.channel_drop(Some(EventKind::CgroupRmdir));
    watch.tick();
    let lost = watch.losing(Duration::from_millis(500), |e| matches!(e, Event::CgroupRmdir(_))).await;
    assert!(lost >= 3, "the late pod's rmdirs kept away: {lost}");
    assert!(
        watch.watchdog.registry().sandbox(UID_LATE).is_none(),
        "a mkdir of a cgroup gone before the read does not bring it back"
    );
    let text = watch.text();
    assert_eq!(metric(&text, "sandwatch_cgroup_resyncs_total"), Some(2.0), "{text}");
    let removed = metric(&text, "sandwatch_cgroup_resync_changes_total{change=\"removed\"}").unwrap_or(0.0);
    assert!(removed - removed_before >= 3.0, "pod and two containers: {text}");
    let tracked = watch.watchdog.registry().tracked_sandboxes() as f64;
    assert_eq!(metric(&text, "sandwatch_tracked_sandboxes"), Some(tracked), "{text}");

    // The real events of the next teardown go through as always.
    drop(born);
    let _ = watch.until(Duration::from_millis(500), |_| false).await;
    assert!(watch.watchdog.registry().sandbox(UID_BORN).is_none());
    let tracked = watch.watchdog.registry().tracked_sandboxes() as f64;
    assert_eq!(metric(&watch.text(), "sandwatch_tracked_sandboxes"), Some(tracked));
    watch.pipeline.stop().await;
}

/// Which limit fired, against the kernel's own word (the memcg under OOM
/// its kernel-log report names): a container that runs past its own
/// 32 MiB reads `container`; one held by its pod's limit set below its own
/// (16 MiB) reads `pod`; a container whose memory + swap is held to the
/// same 32 MiB, as runc sets it under the CRI (on v1 the memsw counter is
/// then the one that fails, and from 6.16 the kernel no longer counts its
/// failures in any file), reads `container` too; each with the `memcg`
/// constraint, in the per-pod series and in `sandwatch_oom_events_total`.
/// On cgroup v1 (the host) and v2 (the VMs), from the page counters the
/// OOM program reads at the kill.
#[tokio::test(flavor = "current_thread")]
async fn each_oom_kill_says_whose_limit_fired_as_the_kernel_does() {
    let mut watch = Watch::start();
    let hog = "exec dd if=/dev/zero of=/dev/null bs=256M count=1";
    // Three pods: one whose containers have only their own 32 MiB, one
    // whose pod is held to 16 MiB from the start, one whose container's
    // swap is held too.
    let mut own = KubePod::build("limit-own", UID_LIMIT, false, 2);
    let mut held = KubePod::build("limit-pod", UID_LIMIT_POD, false, 2);
    held.cg.set_memory_limit(&held.pod_path, 16 << 20);
    let mut swap = KubePod::build("limit-swap", UID_LIMIT_SWAP, false, 2);
    swap.cg.limit_swap(&swap.paths[A], 32 << 20);
    let (own_cgroup, held_cgroup, swap_cgroup) = (own.paths[A].clone(), held.pod_path.clone(), swap.paths[A].clone());
    let mut container_events = 0.0;
    for (pod, limit, cgroup, swap_held) in [
        (&mut own, OomLimit::Container, own_cgroup, false),
        (&mut held, OomLimit::Pod, held_cgroup, false),
        (&mut swap, OomLimit::Container, swap_cgroup, true),
    ] {
        pod.start_init(A, hog);
        pod.trigger(A);
        let pid = pod.init_pid(A);
        let reports = watch.until(Duration::from_secs(20), |rs| oom_of(rs, pid).is_some()).await;
        let oom = oom_of(&reports, pid).unwrap_or_else(|| panic!("no OOM kill of {pid}: {reports:?}"));
        let (constraint, memcg) = kernel_oom_report(pid).expect("the kernel's report of the kill");
        assert_eq!(constraint, "CONSTRAINT_MEMCG");
        assert_eq!(memcg, cgroup, "the kernel names the same cgroup's limit");
        // Read off the page counters at the kill: memory + swap held to the
        // same limit (runc's shape) reads as the container's limit too.
        let expected = (limit, OomConstraint::Memcg);
        eprintln!("{cgroup}: {expected:?} (swap held: {swap_held})");
        let fired = watch.fired.iter().find(|(p, _)| *p == pid).map(|(_, f)| (f.limit, f.constraint));
        assert_eq!(fired, Some(expected), "{oom:?}");
        if expected.0 == OomLimit::Container {
            container_events += 1.0;
        }
    }
    // The events closed, counted by limit.
    tokio::time::sleep(Duration::from_millis(400)).await;
    watch.tick();
    let text = watch.text();
    for (limit, n) in [("container", container_events), ("pod", 1.0)] {
        let events: f64 = ["container", "process"]
            .iter()
            .filter_map(|scope| {
                metric(&text, &format!("sandwatch_oom_events_total{{constraint=\"memcg\",limit=\"{limit}\",qos_class=\"burstable\",scope=\"{scope}\"}}"))
            })
            .sum();
        assert_eq!(events, n, "events of the {limit}'s limit\n{text}");
    }
    drop(own);
    drop(held);
    drop(swap);
}

/// Which limit fired is the kernel's word where no program sees the OOM
/// killer's control (the host): its count of the OOMs each memory cgroup
/// ran for its own limit. A pod held to 40 MiB; its container A holds
/// some 26 MiB under a limit lowered to just above that, within the page
/// counters' margin, and does nothing more; container B grows until the
/// pod's limit fires. The killer picks A's holder (the pod's largest): by
/// page counters that read `container` (A sat at its limit), by the
/// kernel's count and by its own report, `pod`. B then grows on until a
/// limit kills it too, read as the kernel's report reads it. Where the
/// control is seen (the VMs), its word.
#[tokio::test(flavor = "current_thread")]
async fn a_pods_limit_firing_beside_a_container_at_its_own_reads_pod() {
    use sandwatch::watchdog::explain::DecidedBy;
    let mut watch = Watch::start();
    let mut pod = KubePod::build("limit-beside", UID_LIMIT_BESIDE, false, 3);
    pod.cg.set_memory_limit(&pod.pod_path, 40 << 20);
    let usage = |pod: &KubePod| pod.cg.memory_usage(&pod.paths[A]).expect("A's usage");
    pod.start_init(A, &holder(24));
    pod.trigger(A);
    let start = std::time::Instant::now();
    let mut last = 0;
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = usage(&pod);
        if now >= 24 << 20 && now == last {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "A's holder never settled: {now}");
        last = now;
    }
    if !pod.cg.layout.is_unified() {
        // v1 refuses a limit below the usage, and first hands back the
        // charges the CPUs cache for A (they count as its usage until
        // then): what is left is what A holds.
        let file = pod.cg.layout.dir(&pod.paths[A]).join("memory.limit_in_bytes");
        assert!(std::fs::write(file, (1u64 << 20).to_string()).is_err(), "v1 refuses a limit below the usage");
        std::thread::sleep(Duration::from_millis(200));
    }
    let held = usage(&pod);
    pod.cg.set_memory_limit(&pod.paths[A], held + (16 << 10));
    pod.start_init(B, "exec dd if=/dev/zero of=/dev/null bs=256M count=1");
    pod.trigger(B);
    let (holder_pid, grower_pid) = (pod.init_pid(A), pod.init_pid(B));
    let reports = watch
        .until(Duration::from_secs(30), |rs| oom_of(rs, holder_pid).is_some() && oom_of(rs, grower_pid).is_some())
        .await;
    for pid in [holder_pid, grower_pid] {
        let oom = oom_of(&reports, pid).unwrap_or_else(|| panic!("no OOM kill of {pid}: {reports:?}"));
        let (constraint, memcg) = kernel_oom_report(pid).expect("the kernel's report of the kill");
        assert_eq!(constraint, "CONSTRAINT_MEMCG");
        // B's kill: at its own 32 MiB, or at the pod's limit again where
        // A's memory was not yet freed (seen on 7.2): as the kernel says.
        let limit = match memcg.as_str() {
            m if m == pod.pod_path => OomLimit::Pod,
            m if m == pod.paths[B] && pid == grower_pid => OomLimit::Container,
            m => panic!("the kernel ran the kill of {pid} for {m}"),
        };
        if pid == holder_pid {
            assert_eq!(limit, OomLimit::Pod, "the kernel ran the holder's kill for the pod's limit");
        }
        let fired = watch.fired.iter().find(|(p, _)| *p == pid).map(|(_, f)| (f.limit, f.constraint));
        assert_eq!(fired, Some((limit, OomConstraint::Memcg)), "{oom:?}");
        let explained = watch.explained.iter().find(|(p, _)| *p == pid).map(|(_, e)| e.clone());
        let decided_by = explained.map(|e| e.decided_by);
        assert!(matches!(decided_by, Some(DecidedBy::OomControl | DecidedBy::OomCount)), "{decided_by:?}");
    }
    drop(pod);
}

const UID_ELSEWHERE: &str = "5d2a7c1e-000e-4a6d-8e9f-0a1b2c3d4e5f";
const UID_LIMITS: &str = "5d2a7c1e-000c-4a6d-8e9f-0a1b2c3d4e5f";
const UID_NOTICE: &str = "5d2a7c1e-000d-4a6d-8e9f-0a1b2c3d4e5f";

/// The kernel says at once when a container nears its limit, without a
/// screen: on v1 its usage crossing half its limit (a threshold through
/// `cgroup.event_control`), on v2 its tasks stalling on memory (a PSI
/// trigger: a container throttled at its `memory.high`). Nothing is said
/// of a container that stays below its line.
#[tokio::test(flavor = "current_thread")]
async fn the_kernel_says_when_a_containers_memory_nears_its_limit() {
    use sandwatch::watchdog::Host as _;
    let mut watch = Watch::start();
    let mut pod = KubePod::build("notice", UID_NOTICE, false, 3);
    let (near, quiet) = (pod.cgroup_id(A), pod.cgroup_id(B));
    let host = watch.watchdog.host_mut();
    for (id, i) in [(near, A), (quiet, B)] {
        assert!(host.watch_usage(id, &pod.paths[i], 16 << 20), "the kernel takes the notice of container {i}");
    }
    assert!(host.take_memory_wakeups().events.is_empty(), "nothing crossed yet");
    pod.start_init(B, &harness::holder(4));
    pod.trigger(B);
    if pod.cg.layout.is_unified() {
        // Held at a memory.high of 8 MiB while it grows to 24: the kernel
        // throttles it, and its tasks stall.
        std::fs::write(pod.cg.layout.dir(&pod.paths[A]).join("memory.high"), (8u64 << 20).to_string())
            .expect("memory.high");
    }
    pod.start_init(A, &harness::holder(24));
    pod.trigger(A);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut woken = Vec::new();
    while !woken.contains(&near) {
        assert!(std::time::Instant::now() < deadline, "the kernel never said: {woken:?}");
        std::thread::sleep(Duration::from_millis(100));
        woken.extend(watch.watchdog.host_mut().take_memory_wakeups().events);
    }
    assert!(!woken.contains(&quiet), "a container below its line: {woken:?}");
    watch.watchdog.host_mut().unwatch_memory(near);
    watch.watchdog.host_mut().unwatch_memory(quiet);
    drop(pod);
}

/// Which limit fired is the kernel's own word, not read off the task that
/// happened to run the OOM killer: that task may be in another cgroup
/// than the one the kill was for.
/// - cgroup v2 (the VMs): a container holding 64 MiB under its 128 MiB
///   limit is lowered to 32 MiB by a host process (the test, as runc's
///   `update` does for a pod resized in place): the kernel reclaims, then
///   kills inside the write, in the writer's context, whose own chain is
///   at no limit (before: `node`, `global`, the critical alert).
/// - cgroup v1 (the host): a process whose leader sits in a sub-cgroup of
///   its container held to 32 MiB, while its allocating thread sits in the
///   container's own cgroup: the process charges its memory owner's (the
///   leader's) cgroup, and the killer runs in the thread's (before: a
///   node OOM, from the thread's chain).
/// Each reads `container`, `memcg`, against the kernel's own OOM report.
#[tokio::test(flavor = "current_thread")]
async fn a_kill_run_from_another_cgroup_reads_the_cgroup_the_killer_ran_for() {
    let mut watch = Watch::start();
    let decision = watch.pipeline.probes.oom_decision().clone();
    eprintln!("which limit fired is read from: {decision:?}");
    if cfg!(feature = "vm") {
        // Every kernel of the VM matrix (Debian's 5.10 to 7.2) has BPF
        // trampolines: the OOM killer's own control is read.
        assert_eq!(
            decision,
            sandwatch::probes::OomDecision::Kernel,
            "a Debian kernel lets a program see the killer's control"
        );
    }
    let mut pod = KubePod::build("elsewhere", UID_ELSEWHERE, false, 2);
    let (pid, fired_path, expect_limit) = if pod.cg.layout.is_unified() {
        pod.cg.set_memory_limit(&pod.paths[A], 128 << 20);
        // It holds 64 MiB, then blocks opening a FIFO no one writes: no
        // process of its own charges anything after (a `sleep` it forked
        // would, and could run the kill itself, racing the write).
        let hush = pod.tmp.join("hush");
        let c = std::ffi::CString::new(hush.to_string_lossy().as_bytes()).expect("path");
        // SAFETY: mkfifo on a path the pod owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        pod.start_init(
            A,
            &format!(
                "exec /bin/busybox awk 'BEGIN {{ s = sprintf(\"%01000d\", 0); for (n = 0; n < 64 * 1024; n++) a[n] = s n; \
                 getline x < \"{}\" }}'",
                hush.display()
            ),
        );
        pod.trigger(A);
        let current = pod.cg.layout.dir(&pod.paths[A]).join("memory.current");
        let held = || std::fs::read_to_string(&current).ok().and_then(|t| t.trim().parse::<u64>().ok()).unwrap_or(0);
        // Held, and done allocating (its use no longer grows).
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut last = 0;
        loop {
            let now = held();
            if now >= 64 << 20 && now == last {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the holder never held 64 MiB: {now}");
            last = now;
            std::thread::sleep(Duration::from_millis(300));
        }
        // The agent knows the container and its limit (the first tick
        // after it appeared reads it): the pod's and its two containers'.
        watch.know_limits(&[pod.cgroup_id(A), pod.cg.id_of(&pod.pod_path)]).await;
        // The writer is this test, in no pod: the kill runs in its context.
        let max = pod.cg.layout.dir(&pod.paths[A]).join("memory.max");
        std::fs::write(&max, (32u64 << 20).to_string()).expect("lower memory.max");
        (pod.init_pid(A), pod.paths[A].clone(), 32u64 << 20)
    } else {
        pod.cg.set_memory_limit(&pod.paths[A], 256 << 20);
        let sub = pod.nest_chain(A, 1);
        std::fs::write(sub.join("memory.limit_in_bytes"), (32u64 << 20).to_string()).expect("limit the sub-cgroup");
        // The leader moves itself alone (v1's `tasks`) after its thread
        // is made; the thread then allocates from the container's cgroup.
        let script = r#"
import os, sys, threading
go = threading.Event()
held = []
def grow():
    go.wait()
    while True:
        held.append(b'x' * (1 << 20))
t = threading.Thread(target=grow)
t.start()
open(sys.argv[1], 'w').write(str(os.getpid()))
go.set()
t.join()
"#;
        std::fs::write(pod.tmp.join("charge.py"), script).expect("script");
        let tasks = sub.join("tasks");
        pod.start_init(
            A,
            &format!("exec /usr/bin/python3 {} {}", pod.tmp.join("charge.py").display(), tasks.display()),
        );
        pod.trigger(A);
        let rel = format!("{}/n0", pod.paths[A]);
        (pod.init_pid(A), rel, 32u64 << 20)
    };
    let reports = watch.until(Duration::from_secs(30), |rs| oom_of(rs, pid).is_some()).await;
    let oom = oom_of(&reports, pid).unwrap_or_else(|| panic!("no OOM kill of {pid}: {reports:?}"));
    let (constraint, memcg) = kernel_oom_report(pid).expect("the kernel's report of the kill");
    assert_eq!((constraint.as_str(), memcg.as_str()), ("CONSTRAINT_MEMCG", fired_path.as_str()), "the kernel's word");
    if pod.cg.layout.is_unified() {
        // Kept in the record: the task that ran the kill (the writer).
        let trigger = oom.trigger.as_ref().expect("the writer ran the kill");
        assert_eq!(trigger.tgid, std::process::id(), "{oom:?}");
    }
    let fired = watch.fired.iter().find(|(p, _)| *p == pid).map(|(_, f)| (f.limit, f.constraint));
    assert_eq!(fired, Some((OomLimit::Container, OomConstraint::Memcg)), "{oom:?}");
    let explained = watch.explained.iter().find(|(p, _)| *p == pid).map(|(_, e)| e.clone()).expect("explained");
    assert_ne!(
        explained.decided_by,
        watchdog::explain::DecidedBy::AllocatingTaskMemcg,
        "judged from the chain of the task that ran the kill: {explained:?}"
    );
    assert_eq!(explained.limit_bytes, Some(expect_limit), "{explained:?}");
    assert_eq!(explained.cause, watchdog::explain::OomCause::Anon, "{explained:?}");
    if pod.cg.layout.is_unified() {
        // The kill says the limit was lowered, from what to what: it came
        // before the write's own notice, so the kernel's limit at the kill
        // said it.
        let lowered =
            watch.lowered.iter().find(|(p, _)| *p == pid).and_then(|(_, l)| *l).expect("lowered before the kill");
        assert_eq!((lowered.from, lowered.to), (Some(128 << 20), Some(32 << 20)), "{lowered:?}");
        assert!(lowered.ago_ns < 2_000_000_000, "{lowered:?}");
        // One change of the container's limit, however many said it.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        watch.tick();
        let changes: Vec<_> =
            watch.limits.iter().filter(|l| l.pod.container_id.as_deref() == Some(&harness::cid(2)[..])).collect();
        assert_eq!(changes.len(), 1, "{changes:?}");
    }
    drop(pod);
}

/// Limits that move are facts, from the kernel's notice of the write (no
/// polling): a container's limit lowered and raised, and (v2) its
/// `memory.high` set as the kubelet's MemoryQoS does, and its pod's limit
/// raised, each read within a tick of the write, named, in the order they
/// were written.
#[tokio::test(flavor = "current_thread")]
async fn limits_written_to_a_pods_cgroups_are_seen_from_the_kernels_notice() {
    use sandwatch::watchdog::limits::{Direction, LimitKind, SeenBy};
    let mut watch = Watch::start();
    let mut pod = KubePod::build("limits", UID_LIMITS, false, 2);
    // Followed once a process runs in the container.
    pod.start_init(A, "exec sleep 1000");
    pod.trigger(A);
    watch.know_limits(&[pod.cgroup_id(A), pod.cg.id_of(&pod.pod_path)]).await;
    let dir = pod.cg.layout.dir(&pod.paths[A]);
    let pod_dir = pod.cg.layout.dir(&pod.pod_path);
    let v2 = pod.cg.layout.is_unified();
    let max_file = if v2 { "memory.max" } else { "memory.limit_in_bytes" };
    std::fs::write(dir.join(max_file), (24u64 << 20).to_string()).expect("lower");
    watch.tick();
    std::fs::write(dir.join(max_file), (40u64 << 20).to_string()).expect("raise");
    watch.tick();
    if v2 {
        std::fs::write(dir.join("memory.high"), (30u64 << 20).to_string()).expect("memory.high");
    }
    std::fs::write(pod_dir.join(max_file), (512u64 << 20).to_string()).expect("the pod's");
    watch.tick();
    let seen: Vec<_> = watch
        .limits
        .iter()
        .filter(|l| l.pod.pod_uid == UID_LIMITS)
        .map(|l| {
            (
                l.change.kind,
                l.change.direction,
                l.change.from,
                l.change.to,
                l.change.seen_by,
                l.change.scope == sandwatch::watchdog::limits::LimitScope::Pod,
            )
        })
        .collect();
    let mut want = vec![
        (LimitKind::MemoryMax, Direction::Lowered, Some(32 << 20), Some(24 << 20), SeenBy::KernelNotice, false),
        (LimitKind::MemoryMax, Direction::Raised, Some(24 << 20), Some(40 << 20), SeenBy::KernelNotice, false),
    ];
    if v2 {
        want.push((LimitKind::MemoryHigh, Direction::Set, None, Some(30 << 20), SeenBy::KernelNotice, false));
    }
    want.push((LimitKind::MemoryMax, Direction::Set, None, Some(512 << 20), SeenBy::KernelNotice, true));
    // One tick's changes come in no set order (the pod's and the
    // container's); what each says is what was written.
    let (mut seen, mut want) = (seen, want);
    seen.sort_by_key(|c| (c.2, c.3, c.0));
    want.sort_by_key(|c| (c.2, c.3, c.0));
    assert_eq!(seen, want);
    drop(pod);
}

const UID_NESTED: &str = "5d2a7c1e-0009-4a6d-8e9f-0a1b2c3d4e5f";
const UID_NESTED_AFTER: &str = "5d2a7c1e-000a-4a6d-8e9f-0a1b2c3d4e5f";

/// What a container nests below its own cgroup (a tenant with a writable
/// cgroupfs: systemd in a container, a nested runtime, a CI runner) is
/// the container's, however deep: a child OOM-killed 40 cgroups below its
/// container is that container's child, its exit too, and its container's
/// own limit fired; the nested cgroups cost no record and no entry in the
/// model; a pod made afterwards is tracked and its kill named as ever.
/// (Before: every nested cgroup was tracked and streamed, and a process 40
/// deep was counted where its own cgroup said.)
#[tokio::test(flavor = "current_thread")]
async fn cgroups_a_container_nests_below_its_own_are_the_containers() {
    let mut watch = Watch::start();
    let mut pod = KubePod::build("nested", UID_NESTED, false, 2);
    // Its cgroups, as the kernel shows them.
    watch.losing(Duration::from_millis(300), |_| false).await;
    let nested_before = watch.pipeline.kernel.unstreamed().nested_cgroup_changes;
    // Container A nests 200 cgroups side by side and a chain 40 deep.
    let deep = pod.nest_chain(A, 40);
    pod.nest_many(A, "side", 200);
    // Its init moves into the deepest, then a child of it runs out of memory.
    pod.start_init(
        A,
        &format!(
            "echo $$ > {}/cgroup.procs && dd if=/dev/zero of=/dev/null bs=256M count=1; exec sleep 1000",
            deep.display()
        ),
    );
    pod.trigger(A);
    let reports = watch
        .until(Duration::from_secs(20), |rs| {
            rs.iter().any(|r| matches!(r, Report::Exit(e) if e.role == TaskRole::ContainerChild && e.pod.as_ref().is_some_and(|p| p.pod_uid == UID_NESTED)))
        })
        .await;
    let oom = reports
        .iter()
        .find_map(|r| match r {
            Report::Oom(o) if o.victim_comm == "dd" => Some(o),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no OOM kill of the nested dd: {reports:#?}"));
    assert_eq!((oom.outcome, oom.role), (Outcome::Handled, TaskRole::ContainerChild), "{oom:?}");
    let pod_ref = oom.pod.as_ref().expect("the victim's pod");
    assert_eq!((pod_ref.pod_uid.as_str(), pod_ref.container_id.as_deref()), (UID_NESTED, Some(cid(2).as_str())));
    let fired = watch.fired.iter().find(|(p, _)| *p == oom.victim.pid).map(|(_, f)| (f.limit, f.constraint));
    assert_eq!(fired, Some((OomLimit::Container, OomConstraint::Memcg)), "its container's own limit fired");
    // dd is the only process of the pod that ends.
    let exit = child_exit_of(&reports, UID_NESTED).expect("the nested dd's exit");
    assert_eq!((exit.outcome, exit.role), (Outcome::Handled, TaskRole::ContainerChild));
    assert_eq!(exit.pod.as_ref().and_then(|p| p.container_id.clone()), Some(cid(2)));

    // 240 cgroups made below the container: no record, no entry.
    let nested = watch.pipeline.kernel.unstreamed().nested_cgroup_changes - nested_before;
    assert!(nested >= 240, "the kernel counted the nested mkdirs instead of streaming them: {nested}");
    let registry = watch.watchdog.registry();
    let side = pod.cg.id_of(&format!("{}/side7", pod.paths[A]));
    assert!(registry.owner(side).is_none() && !registry.is_host_cgroup(side), "no entry for a nested cgroup");
    assert_eq!(registry.known_cgroups().filter(|id| *id == side).count(), 0);

    // A pod made after all that is tracked, and its kill named.
    let mut after = KubePod::build("nested-after", UID_NESTED_AFTER, false, 2);
    after.start_init(A, "exec dd if=/dev/zero of=/dev/null bs=256M count=1");
    after.trigger(A);
    let pid = after.init_pid(A);
    let reports = watch.until(Duration::from_secs(20), |rs| oom_of(rs, pid).is_some()).await;
    let oom = oom_of(&reports, pid).unwrap_or_else(|| panic!("no OOM kill of {pid}: {reports:?}"));
    assert_eq!((oom.outcome, oom.role), (Outcome::Handled, TaskRole::ContainerInit));
    assert_eq!(oom.pod.as_ref().map(|p| p.pod_uid.as_str()), Some(UID_NESTED_AFTER));
    drop(after);
    drop(pod);
}

fn child_exit_of<'a>(reports: &'a [Report], uid: &str) -> Option<&'a sandwatch::model::ExitReport> {
    reports.iter().find_map(|r| match r {
        Report::Exit(e) if e.role == TaskRole::ContainerChild && e.pod.as_ref().is_some_and(|p| p.pod_uid == uid) => {
            Some(e)
        }
        _ => None,
    })
}

const UID_PRESSURE: &str = "5d2a7c1e-000b-4a6d-8e9f-0a1b2c3d4e5f";

/// A container leaking about a MiB a second from 24 MiB towards its 64 MiB
/// limit is warned before the OOM killer takes it, at least five seconds
/// before (the lead is printed), and its kill says so; its episodes end
/// with the kill. A container steady at a quarter of its limit beside it
/// is never warned. The agent's own reads and ticks, on this kernel (v1
/// on the host; v2 with PSI and `memory.events` in the VMs).
#[tokio::test(flavor = "current_thread")]
async fn a_slowly_growing_container_is_warned_before_its_kill_and_a_steady_one_never_is() {
    let mut watch = Watch::start();
    let mut pod = KubePod::build("pressure", UID_PRESSURE, false, 3);
    for i in [A, B] {
        pod.cg.set_memory_limit(&pod.paths[i], 64 << 20);
    }
    pod.start_init(SANDBOX, "exec sleep 1000");
    pod.start_init(A, &grower(24, 1));
    pod.start_init(B, &holder(16));
    for i in [SANDBOX, A, B] {
        pod.trigger(i);
    }
    let grower_pid = pod.init_pid(A);
    let started = std::time::Instant::now();
    while !watch.warned.iter().any(|(pid, _)| *pid == grower_pid) {
        assert!(started.elapsed() < Duration::from_secs(150), "the grower was never OOM-killed: {:#?}", watch.pressure);
        watch.losing(Duration::from_secs(1), |_| false).await;
        watch.tick();
    }
    let warned = watch.warned.iter().find(|(pid, _)| *pid == grower_pid).and_then(|(_, w)| w.clone());
    let warned = warned.unwrap_or_else(|| panic!("the grower's kill came unwarned: {:#?}", watch.pressure));
    let lead = warned.for_ns as f64 / 1e9;
    eprintln!(
        "the grower was warned {lead:.1} s before its kill, of {:?}, after {:.0} s",
        warned.reasons,
        started.elapsed().as_secs_f64()
    );
    assert!(lead >= 5.0, "warned {lead:.1} s before the kill: {:#?}", watch.pressure);
    let grower_edges: Vec<_> =
        watch.pressure.iter().filter(|p| p.pod.container_id.as_deref() == Some(cid(2).as_str())).collect();
    assert!(grower_edges.iter().any(|p| p.change == PressureChange::End(PressureEnd::Killed)), "{grower_edges:#?}");
    let steady: Vec<_> =
        watch.pressure.iter().filter(|p| p.pod.container_id.as_deref() == Some(cid(3).as_str())).collect();
    assert!(steady.is_empty(), "the steady container at a quarter was never warned: {steady:#?}");
    drop(pod);
}

#[cfg(feature = "vm")]
const UID_QOS: &str = "5d2a7c1e-000f-4a6d-8e9f-0a1b2c3d4e5f";

/// A container shaped as the kubelet's MemoryQoS makes it (`memory.high`
/// at 80 % of its 64 MiB limit) that grows slowly is said throttled at
/// `memory.high` before it is near its limit and before any kill; one held
/// steady below its `memory.high` beside it never is. cgroup v2 (the VMs):
/// v1 has no `memory.high`.
#[cfg(feature = "vm")]
#[tokio::test(flavor = "current_thread")]
async fn a_container_held_at_memory_high_is_throttled_before_it_is_near_its_limit() {
    use sandwatch::watchdog::pressure::PressureReason;
    let mut watch = Watch::start();
    let mut pod = KubePod::build("qos", UID_QOS, false, 3);
    for i in [A, B] {
        pod.cg.set_memory_limit(&pod.paths[i], 64 << 20);
        let high = pod.cg.layout.dir(&pod.paths[i]).join("memory.high");
        std::fs::write(&high, ((64u64 << 20) * 8 / 10).to_string()).expect("memory.high");
    }
    pod.start_init(SANDBOX, "exec sleep 1000");
    pod.start_init(A, &grower(40, 1));
    pod.start_init(B, &holder(24));
    for i in [SANDBOX, A, B] {
        pod.trigger(i);
    }
    let grower_pid = pod.init_pid(A);
    let edges_of = |watch: &Watch, n: u8| -> Vec<(PressureReason, PressureChange)> {
        watch
            .pressure
            .iter()
            .filter(|p| p.pod.container_id.as_deref() == Some(cid(n).as_str()))
            .map(|p| (p.reason, p.change))
            .collect()
    };
    let started = std::time::Instant::now();
    // Until, once it is throttled, it is near its limit or killed (or it
    // stayed throttled, held there, for 30 s).
    let mut throttled_at = None;
    loop {
        let edges = edges_of(&watch, 2);
        let killed = watch.warned.iter().any(|(pid, _)| *pid == grower_pid);
        let near = edges.contains(&(PressureReason::NearLimit, PressureChange::Start));
        if throttled_at.is_none() && edges.contains(&(PressureReason::Throttled, PressureChange::Start)) {
            throttled_at = Some(std::time::Instant::now());
        }
        if near || killed || throttled_at.is_some_and(|t| t.elapsed() > Duration::from_secs(30)) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(240), "never throttled nor near its limit: {edges:?}");
        watch.losing(Duration::from_secs(1), |_| false).await;
        watch.tick();
    }
    let grower = edges_of(&watch, 2);
    eprintln!("the grower's edges after {:.0} s: {grower:?}", started.elapsed().as_secs_f64());
    let throttled = grower.iter().position(|e| *e == (PressureReason::Throttled, PressureChange::Start));
    let near = grower.iter().position(|e| e.0 == PressureReason::NearLimit);
    let throttled = throttled.unwrap_or_else(|| panic!("never said throttled: {grower:?}"));
    assert!(near.is_none_or(|n| throttled < n), "throttled before near its limit: {grower:?}");
    if let Some((_, w)) = watch.warned.iter().find(|(pid, _)| *pid == grower_pid) {
        let w = w.as_ref().expect("its kill was warned");
        assert!(w.reasons.contains(&PressureReason::Throttled), "{w:?}");
    }
    assert!(edges_of(&watch, 3).is_empty(), "the steady container below memory.high: {:?}", edges_of(&watch, 3));
    drop(pod);
}
