//! The node as the watchdog core asks it: the real [`Host`]. Cgroup
//! settings and trees through the detected cgroup layout, process names
//! from /proc, the kernel's tracked-cgroup map and task table, the
//! pipeline's loss counters, and the runtime clients' state.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use strum::IntoEnumIterator as _;

use crate::{
    events::Event,
    os::{self, inotify::Inotify, notices::Notices},
    pipeline::Pipeline,
    probes::{
        cgroups::CgroupLayout,
        scan::{self, MAX_CGROUPS},
        CgroupTracker, KernelCounters, TrackedKind,
    },
    runtime::{cri::MetadataRequests, metrics::RuntimeMetrics},
    stats::PipelineStats,
    watchdog::crashes::RuntimeProcess,
    watchdog::{
        explain::MemoryStat, host::Tracking, limits::MemoryLimits, pressure::MemorySample, CgroupTree, Host,
        LossTotals, MemoryWakeups, WatchFailures,
    },
};

/// What the kernel says of pods' and containers' cgroups: writes to their
/// limit files (inotify on the cgroup's directory names the file written:
/// the kubelet's and the runtime's writes alike) and, for containers on
/// v2, changes of `memory.events` (the kernel raises them; a watch on the
/// file itself keeps its inode, which the kernel's notice needs). Every
/// root process on the node shares inotify's instances and watches (a
/// container's too): a refusal is counted by why, said once in the log,
/// and the cgroup asked for again later (see `watchdog::limits`); without
/// an instance at all, one is asked for again every 10 s.
struct MemoryWatches {
    inotify: Option<Inotify>,
    /// When to ask for an instance again, while there is none.
    retry_at: std::time::Instant,
    by_watch: HashMap<i32, (u64, Watched)>,
    by_cgroup: HashMap<u64, Vec<i32>>,
    limit_files: &'static [&'static str],
    failures: WatchFailures,
    /// Watches are being refused: said once, until one is granted again.
    refusing: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watched {
    Directory,
    Events,
}

/// How long without an inotify instance before one is asked for again.
const INSTANCE_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

impl MemoryWatches {
    fn new(layout: &CgroupLayout) -> Self {
        let mut w = Self {
            inotify: None,
            retry_at: std::time::Instant::now(),
            by_watch: HashMap::new(),
            by_cgroup: HashMap::new(),
            limit_files: layout.limit_files(),
            failures: WatchFailures::default(),
            refusing: false,
        };
        w.instance();
        w
    }

    /// The inotify instance, asked for now if there is none and it is time.
    fn instance(&mut self) -> Option<&Inotify> {
        if self.inotify.is_none() && std::time::Instant::now() >= self.retry_at {
            match Inotify::new() {
                Ok(inotify) => self.inotify = Some(inotify),
                Err(e) => {
                    self.retry_at = std::time::Instant::now() + INSTANCE_RETRY;
                    self.refused(&e, "no inotify instance");
                }
            }
        }
        self.inotify.as_ref()
    }

    /// Counts a refusal by why, and says it once.
    fn refused(&mut self, e: &std::io::Error, what: &str) {
        let f = &mut self.failures;
        let reason = match e.raw_os_error() {
            Some(libc::EMFILE) => {
                f.instances += 1;
                "every inotify instance of this user is in use (fs.inotify.max_user_instances, shared by every root process on the node, a container's too)"
            }
            Some(libc::ENOSPC) => {
                f.watches += 1;
                "every inotify watch of this user is in use (fs.inotify.max_user_watches)"
            }
            Some(libc::ENOENT) => {
                f.gone += 1;
                return;
            }
            _ => {
                f.other += 1;
                "refused"
            }
        };
        if !self.refusing {
            self.refusing = true;
            log::warn!(
                "the kernel will not say when cgroups' memory limits or events change ({what}: {reason}; {e}): their limits are read once a minute and their memory pressure screened (every 10 s, sooner as they grow) until it agrees, asked again every 10 s to a minute (sandwatch_memory_watch_failures_total)"
            );
        }
    }

    /// Whether the kernel will say when its limit files are written (and,
    /// with `events`, when its memory events change).
    fn watch(&mut self, cgroup_id: u64, dir: &std::path::Path, events: bool) -> bool {
        if self.instance().is_none() {
            self.failures.instances += 1;
            return false;
        }
        let mut wds = Vec::new();
        let mut all = true;
        for (file, what) in [
            (Some(dir.to_path_buf()), Watched::Directory),
            (events.then(|| dir.join("memory.events")), Watched::Events),
        ] {
            let Some(file) = file else { continue };
            let Some(inotify) = self.inotify.as_ref() else { return false };
            match inotify.watch(&file) {
                Ok(wd) => {
                    self.by_watch.insert(wd, (cgroup_id, what));
                    wds.push(wd);
                }
                Err(e) => {
                    all = false;
                    self.refused(&e, "a watch refused");
                }
            }
        }
        self.by_cgroup.insert(cgroup_id, wds);
        if all && self.refusing {
            self.refusing = false;
            log::info!("the kernel watches cgroups' memory files again");
        }
        all
    }

    fn unwatch(&mut self, cgroup_id: u64) {
        for wd in self.by_cgroup.remove(&cgroup_id).unwrap_or_default() {
            self.by_watch.remove(&wd);
            if let Some(inotify) = self.inotify.as_ref() {
                inotify.unwatch(wd);
            }
        }
    }

    fn changed(&mut self) -> MemoryWakeups {
        let mut woken = MemoryWakeups { failures: self.failures, ..MemoryWakeups::default() };
        let Some(inotify) = self.inotify.as_ref() else { return woken };
        let changes = inotify.changes();
        woken.overflowed = changes.overflowed;
        for (wd, name) in &changes.watches {
            match self.by_watch.get(wd) {
                Some(&(id, Watched::Events)) => woken.events.push(id),
                Some(&(id, Watched::Directory)) if self.limit_files.contains(&name.as_str()) => woken.limits.push(id),
                // The directory's own `memory.events` is read from the
                // file's watch; anything else written there says nothing.
                _ => {}
            }
        }
        for ids in [&mut woken.events, &mut woken.limits] {
            ids.sort_unstable();
            ids.dedup();
        }
        woken
    }
}

pub struct NodeHost {
    layout: CgroupLayout,
    /// The kernel's notices of containers' memory nearing their limits
    /// (v1 usage thresholds, v2 PSI triggers); `None` where epoll failed.
    notices: Option<Notices>,
    /// Why the last notice was refused, said once.
    notice_refused: Option<String>,
    /// The kernel says when a cgroup's limits are written and (v2) when a
    /// container's `memory.events` changes.
    memory_watches: MemoryWatches,
    tracker: Option<CgroupTracker>,
    stats: Arc<PipelineStats>,
    kernel: Arc<KernelCounters>,
    runtime_names: Vec<String>,
    runtime: Option<RuntimeMetrics>,
    /// Where container ids without names are asked for (CRI listing on).
    names_wanted: Option<Arc<MetadataRequests>>,
}

impl NodeHost {
    /// The node of a running pipeline: its cgroup layout, its counters, and
    /// the kernel's maps (taken from it).
    pub fn new(pipeline: &mut Pipeline) -> Self {
        let layout = pipeline.probes.layout().clone();
        Self {
            memory_watches: MemoryWatches::new(&layout),
            notices: Notices::new()
                .map_err(|e| {
                    log::warn!("kernel notices of memory near its limit are unavailable ({e}): containers are screened")
                })
                .ok(),
            notice_refused: None,
            layout,
            tracker: pipeline.probes.take_tracker(),
            stats: pipeline.stats.clone(),
            kernel: pipeline.kernel.clone(),
            runtime_names: Vec::new(),
            runtime: None,
            names_wanted: None,
        }
    }

    /// Also answers for the container runtime: processes named `names`,
    /// the clients' state, and names asked of the CRI listing (if on).
    pub fn with_runtime(
        mut self,
        names: &[String],
        metrics: RuntimeMetrics,
        names_wanted: Option<Arc<MetadataRequests>>,
    ) -> Self {
        self.runtime_names = names.to_vec();
        self.runtime = Some(metrics);
        self.names_wanted = names_wanted;
        self
    }
}

impl Host for NodeHost {
    fn oom_group(&self, path: &str) -> Option<bool> {
        self.layout.oom_group(path)
    }

    fn oom_count(&self, path: &str) -> Option<u64> {
        self.layout.oom_count(path)
    }

    fn memory_stat(&self, path: &str) -> Option<MemoryStat> {
        self.layout.memory_stat(path)
    }

    fn memory_usage(&self, path: &str) -> Option<u64> {
        self.layout.memory_usage(path)
    }

    fn memory_limit(&self, path: &str) -> Option<u64> {
        self.layout.memory_limit(path)
    }

    fn memory_sample(&self, path: &str) -> Option<MemorySample> {
        self.layout.memory_sample(path)
    }

    fn memory_limits(&self, path: &str) -> Option<MemoryLimits> {
        self.layout.memory_limits(path)
    }

    fn watch_memory(&mut self, cgroup_id: u64, path: &str, events: bool) -> bool {
        // v1 has no `memory.events`.
        let events = events && self.layout.is_unified();
        let dir = self.layout.dir(path);
        self.memory_watches.watch(cgroup_id, &dir, events)
    }

    fn watch_usage(&mut self, cgroup_id: u64, path: &str, threshold: u64) -> bool {
        let Some(notices) = self.notices.as_mut() else { return false };
        let dir = self.layout.dir(path);
        let asked = if self.layout.is_unified() {
            notices.stall_trigger(cgroup_id, &dir)
        } else {
            notices.usage_threshold(cgroup_id, &dir, threshold)
        };
        match asked {
            Ok(()) => true,
            Err(e) => {
                // Said once per reason (a read-only cgroupfs refuses every one).
                let why = e.kind().to_string();
                if self.notice_refused.as_deref() != Some(why.as_str()) {
                    log::warn!(
                        "the kernel's notices of containers' memory near their limits are refused ({e}, first at {}): those containers are screened (adaptively) instead",
                        dir.display()
                    );
                    self.notice_refused = Some(why);
                }
                false
            }
        }
    }

    fn unwatch_memory(&mut self, cgroup_id: u64) {
        self.memory_watches.unwatch(cgroup_id);
        if let Some(n) = self.notices.as_mut() {
            n.forget(cgroup_id);
        }
    }

    fn take_memory_wakeups(&mut self) -> MemoryWakeups {
        let mut woken = self.memory_watches.changed();
        if let Some(n) = self.notices.as_mut().filter(|n| !n.is_empty()) {
            woken.events.extend(n.signalled());
            woken.events.sort_unstable();
            woken.events.dedup();
        }
        woken
    }

    fn cgroup_id(&self, path: &str) -> Option<u64> {
        self.layout.cgroup_id(path).ok()
    }

    fn scan(&self, now_ns: u64) -> Vec<Event> {
        scan::scan(&self.layout, now_ns)
    }

    fn cgroup_tree(&self, now_ns: u64) -> CgroupTree {
        let cgroups: Vec<_> = scan::cgroups(&self.layout, now_ns)
            .into_iter()
            .filter_map(|e| match e {
                Event::CgroupMkdir(c) => Some(c),
                _ => None,
            })
            .collect();
        CgroupTree { complete: cgroups.len() < MAX_CGROUPS, cgroups }
    }

    fn comm(&self, pid: u32, start_ns: u64) -> Option<String> {
        os::proc::comm(pid, start_ns)
    }

    fn runtime_processes(&self) -> Vec<RuntimeProcess> {
        os::proc::processes_named(&self.runtime_names)
            .into_iter()
            .map(|(pid, comm)| {
                let cgroup = os::proc::cgroups(pid)
                    .and_then(|text| self.layout.task_path(&text).map(|p| self.layout.host_path(p)));
                RuntimeProcess { pid, comm, cgroup }
            })
            .collect()
    }

    fn track(&mut self, cgroup_id: u64, what: Tracking) -> bool {
        let (kind, level) = match what {
            Tracking::Pod => (TrackedKind::Pod, u32::MAX),
            Tracking::Container { level } => (TrackedKind::Container, level),
        };
        self.tracker.as_mut().is_none_or(|t| t.track(cgroup_id, kind, level))
    }

    fn untrack(&mut self, cgroup_id: u64) {
        if let Some(t) = self.tracker.as_mut() {
            t.untrack(cgroup_id);
        }
    }

    fn seed_tasks(&mut self, cgroups: &HashSet<u64>) -> usize {
        self.tracker.as_mut().map_or(0, |t| t.seed(cgroups))
    }

    fn losses(&self) -> LossTotals {
        use agent_common::EventKind;
        let dropped = |kind: EventKind| self.kernel.read(kind as u32).1;
        LossTotals {
            kernel: EventKind::iter().map(dropped).sum(),
            kernel_cgroup_changes: dropped(EventKind::CgroupMkdir) + dropped(EventKind::CgroupRmdir),
            channel: self.stats.channel_dropped(),
            channel_cgroup_changes: self.stats.channel_dropped_of(EventKind::CgroupMkdir)
                + self.stats.channel_dropped_of(EventKind::CgroupRmdir),
            decode: self.stats.decode_errors_total(),
            host_exits: self.kernel.unstreamed().host_exits,
        }
    }

    fn listing_up(&self) -> bool {
        self.names_wanted.is_some() && self.runtime.as_ref().is_some_and(|m| m.metadata.is_up())
    }

    fn stream_up(&self) -> bool {
        self.runtime.as_ref().is_some_and(|m| m.stream.is_up())
    }

    fn runtime_peer(&self) -> Option<u32> {
        self.runtime.as_ref().and_then(|m| m.stream.peer())
    }

    fn want_names(&self, container_id: &str) {
        if let Some(requests) = &self.names_wanted {
            requests.want(container_id.to_string());
        }
    }

    fn want_status(&self, container_id: &str) {
        if let Some(requests) = &self.names_wanted {
            requests.want_status(container_id.to_string());
        }
    }
}
