//! Warning before the kill: each workload container's memory against its
//! own limit, from the kernel's own signals, with a verdict that rises and
//! clears with hysteresis, so a platform team that pages on it gets few
//! false alarms, each one actionable. We warn; we never kill.
//!
//! Three reasons, each an episode of its own:
//! - **near its limit**: what no reclaim frees — usage less page cache:
//!   anonymous memory, tmpfs and shared memory, kernel memory, what an OOM
//!   kill comes of — at 90 % of the limit; it clears below 80 %. The
//!   kubelet's working set (usage less *inactive* page cache) is reported
//!   beside it, but does not decide: page cache a container reads again is
//!   active and counts there, though the kernel reclaims it at the limit
//!   (a file streamed through a container at its limit read 96 % of it).
//! - **thrashing at its limit**: at its limit (usage within the OOM
//!   margin, or the kernel counted limit hits or `memory.high` crossings
//!   since the last read), and stalling: PSI (`memory.pressure`, v2)
//!   `some` at 20 % or `full` at 5 % over the last 10 s with the kubelet's
//!   working set at 80 % (PSI counts stalls on reclaim and on pages of the
//!   working set read back, not a stream's), or, without PSI (v1), pages
//!   evicted in use and read back (`workingset_refault_*`) at 5 % of the
//!   limit a second with 80 % of it unreclaimable (refaults alone would
//!   be a stream's too). It clears after three calm reads.
//! - **growing to its limit**: the unreclaimable memory, fitted over the
//!   last reads (at least 8, over at least 8 s, a straight line explaining
//!   70 % of them), reaches the limit within 10 minutes; or, for a fast
//!   grower, over at least 3 reads and 2 s, a line explaining 90 % of them
//!   reaches it in no longer than the reads span; it clears beyond 20
//!   minutes, or below 40 % of the limit.
//! - **throttled at `memory.high`** (v2; the kubelet's MemoryQoS sets it
//!   on Burstable and BestEffort containers): the kernel counted crossings
//!   of `memory.high` since the last read (`memory.events` `high`) while
//!   the usage sits at it: the container reclaims in its own context and
//!   stalls, long before any kill. It clears after three reads without a
//!   crossing, or below 90 % of `memory.high`. A container with
//!   `memory.high` and no `memory.max` is watched for this alone.
//!
//! **Cheap at scale, fast where it matters, fair.** Every container's
//! usage is screened once per `screen_interval` (one small file; spread
//! over the interval), sooner while it grows towards half its limit (a
//! third of the way there at its pace, down to a second), and a new
//! container at once; only a container at half its limit or more, one the
//! kernel woke, or one under pressure is read in full, at most once per
//! `detail_interval`, at most `max_details` a tick, taken in turn from
//! each namespace (each pod, where the runtime has not named its
//! namespace) with reads due: a tenant with a thousand containers near
//! their limits costs another namespace's container none of its reads.
//! A trend is fitted over the reads it has, however far apart the budget
//! spaced them. The kernel wakes a container: on v2 when
//! its `memory.events` change (inotify), on v1 when its usage crosses half
//! its limit (a threshold registered through `cgroup.event_control`), on
//! v2 when its tasks stall (a PSI trigger); the last two are writes to
//! cgroupfs, refused where it is mounted read-only (the DaemonSet's
//! default), and counted: the screens stand in. No limit is ever written.
//!
//! An OOM kill in a container ends its episodes (`killed`): the kill is
//! what they warned of; the kill's post-mortem says how long before it was
//! warned, and of what.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    hash::{Hash as _, Hasher as _},
};

use super::Host;
pub use crate::events::memory::{MemorySample, Psi};
use crate::model::{registry::ContainerRole, PodRegistry};
use verdict::{judge, limits, permille, Detail};

/// Why a container is under memory pressure.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, strum::IntoStaticStr, strum::EnumIter, strum::EnumCount,
)]
#[strum(serialize_all = "snake_case")]
pub enum PressureReason {
    NearLimit,
    Thrashing,
    Growing,
    Throttled,
}

/// How an episode of pressure ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum PressureEnd {
    /// The signal fell below its clearing threshold.
    Eased,
    /// The OOM killer took a process of the container.
    Killed,
    /// The container went.
    Gone,
    /// Its limit was lifted.
    Unlimited,
}

/// A rising or falling edge of one reason's episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PressureChange {
    Start,
    End(PressureEnd),
}

/// An episode's edge: which container, which reason, what the kernel said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PressureEdge {
    pub cgroup_id: u64,
    pub reason: PressureReason,
    pub change: PressureChange,
    /// When the episode started (CLOCK_BOOTTIME ns); its start's own time.
    pub since_ns: u64,
    /// When this edge was read.
    pub ts_ns: u64,
    pub figures: Figures,
}

/// What the last full read said, as an operator reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Figures {
    /// What no reclaim frees (see [`MemorySample::unreclaimable`]).
    pub unreclaimable_bytes: u64,
    /// The kubelet's working set (see [`MemorySample::working_set`]).
    pub working_set_bytes: u64,
    pub limit_bytes: Option<u64>,
    /// Unreclaimable / limit, in thousandths.
    pub unreclaimable_permille: Option<u32>,
    /// At the unreclaimable memory's current growth, when it meets the
    /// limit.
    pub seconds_to_limit: Option<u64>,
    pub psi: Option<Psi>,
    /// Refaulted bytes a second since the read before.
    pub refault_bytes_per_second: u64,
    /// Limit hits since the read before.
    pub limit_hits: u64,
    /// `memory.high` (v2), where set, and its crossings since the read
    /// before (the kernel throttled the container that often).
    pub high_bytes: Option<u64>,
    pub high_hits: u64,
}

/// A container under pressure now: what its per-pod series say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PressureLevel {
    pub cgroup_id: u64,
    pub reasons: Vec<PressureReason>,
    pub figures: Figures,
}

/// Whether, and of what, a container was warned when it was OOM-killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warned {
    /// From the first start of the episodes still open, to the kill.
    pub for_ns: u64,
    pub reasons: Vec<PressureReason>,
}

/// How often and how much is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PressureSettings {
    /// Every container's usage is looked at once this often.
    pub screen_interval_ns: u64,
    /// A candidate is read in full at most this often.
    pub detail_interval_ns: u64,
    /// Usage reads a tick, at most.
    pub max_screens: usize,
    /// Full reads a tick, at most.
    pub max_details: usize,
}

impl Default for PressureSettings {
    fn default() -> Self {
        Self { screen_interval_ns: 10 * SEC, detail_interval_ns: SEC, max_screens: 512, max_details: 64 }
    }
}

pub(super) const SEC: u64 = 1_000_000_000;
/// A new container's first screens, closer together.
const FIRST_SCREENS: u32 = 4;
/// Screens kept to start a full read's trend.
const SCREENS_KEPT: usize = 4;
/// A screened container's limit is read again every this many screens.
const LIMIT_EVERY_SCREENS: u32 = 6;
/// One watched container (its path is the registry's).
#[derive(Debug)]
struct Watched {
    limit: Option<u64>,
    /// `memory.high`, where set (v2).
    high: Option<u64>,
    /// Screens so far.
    screens: u32,
    next_screen_ns: u64,
    next_detail_ns: u64,
    /// The last screens: when, and the usage each read (at most
    /// `SCREENS_KEPT`); they start a full read's trend.
    last_screens: VecDeque<(u64, u64)>,
    /// The usage the kernel was asked to say it crossed (v1; on v2 any
    /// threshold stands for the PSI trigger), and whether it agreed.
    notice: Option<(u64, bool)>,
    /// Read in full while set.
    detail: Option<Box<Detail>>,
    woken: bool,
    /// Its namespace (its pod, where the runtime has not named it): full
    /// reads are shared out by it.
    group: u64,
}

/// Totals since start, for the agent's own metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PressureReads {
    pub screens: u64,
    pub details: u64,
    pub wakeups: u64,
    /// The kernel agreed (or refused) to say when a container's usage
    /// crosses its line (v1) or its tasks stall (v2).
    pub notices: u64,
    pub notices_refused: u64,
}

/// Every workload container's pressure, as the ticks read it.
#[derive(Debug, Default)]
pub struct PressureWatch {
    settings: PressureSettings,
    watched: HashMap<u64, Watched>,
    /// The registry generation last reconciled with.
    generation: Option<u64>,
    pub reads: PressureReads,
}

impl PressureWatch {
    pub fn new(settings: PressureSettings) -> Self {
        Self { settings, ..Self::default() }
    }

    /// Watched containers now.
    pub fn watched(&self) -> usize {
        self.watched.len()
    }

    /// Containers read in full now.
    pub fn candidates(&self) -> usize {
        self.watched.values().filter(|w| w.detail.is_some()).count()
    }

    /// Follows the registry's workload containers: new ones are watched,
    /// gone ones end their episodes. (The kernel is asked to say when their
    /// memory events change by the limits' watch, which owns the cgroups'
    /// notices: see [`super::limits`].)
    pub fn reconcile(&mut self, registry: &PodRegistry, now_ns: u64, edges: &mut Vec<PressureEdge>) {
        if self.generation == Some(registry.generation()) {
            return;
        }
        let first = self.generation.is_none();
        self.generation = Some(registry.generation());
        let mut live = HashSet::new();
        for sandbox in registry.sandboxes() {
            let group = group_of(registry, &sandbox.pod_uid);
            for container in sandbox.workloads() {
                if container.role != ContainerRole::Workload {
                    continue;
                }
                live.insert(container.cgroup_id);
                if let Some(w) = self.watched.get_mut(&container.cgroup_id) {
                    // Its namespace may have been named since.
                    w.group = group;
                    continue;
                }
                self.watch(container.cgroup_id, group, first, now_ns);
            }
        }
        let gone: Vec<u64> = self.watched.keys().filter(|id| !live.contains(id)).copied().collect();
        for id in gone {
            if let Some(w) = self.watched.remove(&id) {
                close_all(id, w.detail.as_deref(), PressureEnd::Gone, now_ns, edges);
            }
        }
    }

    /// Starts watching container `cgroup_id` of namespace `group`. Those
    /// found at start-up (`first`) are spread over the interval; a new one
    /// (a new container grows fastest) is screened at once.
    fn watch(&mut self, cgroup_id: u64, group: u64, first: bool, now_ns: u64) {
        let offset = if first {
            cgroup_id.wrapping_mul(0x9e37_79b9_7f4a_7c15) % self.settings.screen_interval_ns.max(1)
        } else {
            0
        };
        self.watched.insert(
            cgroup_id,
            Watched {
                limit: None,
                high: None,
                screens: 0,
                next_screen_ns: now_ns.saturating_add(offset),
                next_detail_ns: now_ns,
                last_screens: VecDeque::new(),
                notice: None,
                detail: None,
                woken: false,
                group,
            },
        );
    }

    /// One tick: the kernel's wake-ups (`woken`: the containers whose
    /// memory events changed; `all`: any may have, its queue overflowed:
    /// every container is screened again soon), the screens due, the full
    /// reads due, within their budgets and shared out by namespace; the
    /// episodes' edges in `edges`. The containers' paths are `registry`'s
    /// (reconciled with first).
    pub fn tick(
        &mut self,
        host: &mut impl Host,
        registry: &PodRegistry,
        woken: &[u64],
        all: bool,
        now_ns: u64,
        edges: &mut Vec<PressureEdge>,
    ) {
        let path = |id: u64| registry.container_of(id).map(|c| c.path.as_str());
        for id in woken {
            self.reads.wakeups += 1;
            if let Some(w) = self.watched.get_mut(id) {
                w.woken = true;
            }
        }
        if all {
            // What overflowed cannot be said: a usage read each (screens,
            // within their budget) finds who is near, not a full read each.
            for w in self.watched.values_mut() {
                w.next_screen_ns = w.next_screen_ns.min(now_ns);
            }
        }
        let s = self.settings;
        // Screens: usage only, against the last known limit.
        let mut due: Vec<(u64, u64)> = self
            .watched
            .iter()
            .filter(|(_, w)| w.detail.is_none() && !w.woken && w.next_screen_ns <= now_ns)
            .map(|(id, w)| (w.next_screen_ns, *id))
            .collect();
        due.sort_unstable();
        for &(_, id) in due.iter().take(s.max_screens) {
            let Some(w) = self.watched.get_mut(&id) else { continue };
            w.next_screen_ns = now_ns.saturating_add(s.screen_interval_ns);
            // The limit, when not known (a new container, or unlimited at
            // the last look) or once a minute (a pod resized in place).
            let Some(path) = path(id) else { continue };
            w.screens = w.screens.wrapping_add(1);
            if (w.limit.is_none() && w.high.is_none()) || w.screens % LIMIT_EVERY_SCREENS == 0 {
                self.reads.screens += 1;
                let limits = host.memory_limits(path).unwrap_or_default();
                (w.limit, w.high) = (limits.max, limits.high);
            }
            let Some(line) = candidate_line(w.limit, w.high) else { continue };
            // The kernel says at once when the usage crosses the line
            // (where it can); asked again when the line moved.
            if w.notice.map(|(at, _)| at) != Some(line) {
                let agreed = host.watch_usage(id, path, line);
                self.reads.notices += u64::from(agreed);
                self.reads.notices_refused += u64::from(!agreed);
                w.notice = Some((line, agreed));
            }
            self.reads.screens += 1;
            let Some(usage) = host.memory_usage(path) else { continue };
            if candidate(usage, 0, w.limit, w.high) {
                w.woken = true;
            }
            // A new container's first screens come 1, 2, 4, 8 s apart, so
            // that its pace is known early; one growing towards the line is
            // looked at again before it gets there (a third of the way), down
            // to a second.
            if w.screens < FIRST_SCREENS {
                let first = SEC << w.screens.min(FIRST_SCREENS);
                w.next_screen_ns = now_ns.saturating_add(first.min(s.screen_interval_ns));
            }
            if let Some(&(then, before)) = w.last_screens.back() {
                let grew = usage.saturating_sub(before);
                let took = now_ns.saturating_sub(then);
                if grew > 0 && took > 0 && usage < line {
                    let eta = u128::from(line - usage) * u128::from(took) / u128::from(grew);
                    let next = (eta / 3).clamp(u128::from(SEC), u128::from(s.screen_interval_ns)) as u64;
                    w.next_screen_ns = w.next_screen_ns.min(now_ns.saturating_add(next));
                }
            }
            if w.last_screens.len() >= SCREENS_KEPT {
                w.last_screens.pop_front();
            }
            w.last_screens.push_back((now_ns, usage));
        }
        // Full reads: candidates and what the kernel or a screen woke, in
        // turn by namespace.
        let due: Vec<(u64, u64, u64)> = self
            .watched
            .iter()
            .filter(|(_, w)| (w.detail.is_some() || w.woken) && w.next_detail_ns <= now_ns)
            .map(|(id, w)| (w.group, w.next_detail_ns, *id))
            .collect();
        for id in in_turn(due, s.max_details) {
            let Some(w) = self.watched.get_mut(&id) else { continue };
            w.woken = false;
            w.next_detail_ns = now_ns.saturating_add(s.detail_interval_ns);
            self.reads.details += 1;
            let Some(sample) = path(id).and_then(|p| host.memory_sample(p)) else { continue };
            w.limit = sample.limit;
            w.high = sample.high;
            // Nothing to hold it: no episode can go on.
            if sample.limit.filter(|l| *l > 0).is_none() && sample.high.is_none() {
                close_all(id, w.detail.as_deref(), PressureEnd::Unlimited, now_ns, edges);
                w.detail = None;
                continue;
            }
            // A full read's trend starts with the screens that led to it,
            // less the page cache the full read sees (screens read usage
            // only): a fast grower's pace is known at its first full read.
            let screens = std::mem::take(&mut w.last_screens);
            let detail = w.detail.get_or_insert_with(|| {
                let cache = sample.usage.saturating_sub(sample.unreclaimable());
                Box::new(Detail::seeded(screens.iter().map(|&(t, u)| (t, u.saturating_sub(cache)))))
            });
            judge(id, detail, &sample, now_ns, edges);
            // Back to screening once nothing is near.
            if detail.open.is_empty() && !candidate(sample.usage, sample.unreclaimable(), sample.limit, sample.high) {
                w.detail = None;
            }
        }
    }

    /// An OOM kill in container `cgroup_id` at `ts_ns`: what it was warned
    /// of, and for how long; its episodes end (`killed`).
    pub fn killed(&mut self, cgroup_id: u64, ts_ns: u64, edges: &mut Vec<PressureEdge>) -> Option<Warned> {
        let detail = self.watched.get_mut(&cgroup_id)?.detail.as_mut()?;
        let since = detail.open.values().min().copied()?;
        let reasons: Vec<PressureReason> = detail.open.keys().copied().collect();
        close_all(cgroup_id, Some(detail), PressureEnd::Killed, ts_ns, edges);
        detail.open.clear();
        detail.trend.clear();
        detail.calm_reads = 0;
        detail.unthrottled_reads = 0;
        Some(Warned { for_ns: ts_ns.saturating_sub(since), reasons })
    }

    /// The containers under pressure now, for their per-pod series.
    pub fn levels(&self) -> Vec<PressureLevel> {
        let mut levels: Vec<PressureLevel> = self
            .watched
            .iter()
            .filter_map(|(id, w)| {
                let d = w.detail.as_ref().filter(|d| !d.open.is_empty())?;
                let reasons = d.open.keys().copied().collect();
                Some(PressureLevel { cgroup_id: *id, reasons, figures: d.figures })
            })
            .collect();
        levels.sort_by_key(|l| l.cgroup_id);
        levels
    }
}

/// The key a pod's containers share their full reads by: its namespace,
/// or, where the runtime has not named it, the pod itself.
fn group_of(registry: &PodRegistry, pod_uid: &str) -> u64 {
    let namespace = registry.names(pod_uid, None).namespace;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if namespace.is_empty() {
        ("pod", pod_uid).hash(&mut h);
    } else {
        ("namespace", namespace.as_str()).hash(&mut h);
    }
    h.finish()
}

/// Up to `budget` of the reads `due` (namespace, due time, container), in
/// turn: each namespace's longest due first, then each one's second, and
/// so on; within a turn, the namespaces that have waited longest first.
/// A namespace with a thousand reads due gets one a turn, as one with one.
fn in_turn(mut due: Vec<(u64, u64, u64)>, budget: usize) -> Vec<u64> {
    due.sort_unstable();
    // (turn, the namespace's longest wait, namespace, due, container)
    let mut ranked: Vec<(usize, u64, u64, u64, u64)> = Vec::with_capacity(due.len());
    let mut at = 0;
    while at < due.len() {
        let group = due[at].0;
        let oldest = due[at].1;
        let run = due[at..].iter().take_while(|(g, ..)| *g == group).count();
        ranked.extend(due[at..at + run].iter().enumerate().map(|(turn, &(g, t, id))| (turn, oldest, g, t, id)));
        at += run;
    }
    if ranked.len() > budget {
        ranked.select_nth_unstable(budget);
        ranked.truncate(budget);
    }
    ranked.sort_unstable();
    ranked.into_iter().map(|(.., id)| id).collect()
}

/// The usage from which a container is read in full: half its limit, or
/// where it has none, near its `memory.high`; `None`: neither is set.
fn candidate_line(limit: Option<u64>, high: Option<u64>) -> Option<u64> {
    match (limit.filter(|l| *l > 0), high) {
        (Some(l), _) => Some((u128::from(l) * u128::from(limits::CANDIDATE) / 1000) as u64),
        (None, Some(h)) => Some((u128::from(h) * u128::from(limits::THROTTLE_LEAVE) / 1000) as u64),
        (None, None) => None,
    }
}

/// Whether a container's usage (or what of it no reclaim frees) is worth
/// full reads: at half its limit, or near its `memory.high`.
fn candidate(usage: u64, unreclaimable: u64, limit: Option<u64>, high: Option<u64>) -> bool {
    let near_limit =
        limit.filter(|l| *l > 0).is_some_and(|l| permille(usage.max(unreclaimable), l) >= limits::CANDIDATE);
    let near_high = high.is_some_and(|h| permille(usage, h) >= limits::THROTTLE_LEAVE);
    near_limit || near_high
}

/// Ends every open episode of a container.
fn close_all(cgroup_id: u64, detail: Option<&Detail>, end: PressureEnd, now_ns: u64, edges: &mut Vec<PressureEdge>) {
    let Some(d) = detail else { return };
    for (&reason, &since_ns) in &d.open {
        edges.push(PressureEdge {
            cgroup_id,
            reason,
            change: PressureChange::End(end),
            since_ns,
            ts_ns: now_ns,
            figures: d.figures,
        });
    }
}

#[cfg(test)]
mod tests;
mod verdict;
