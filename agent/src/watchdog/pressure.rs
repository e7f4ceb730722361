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
//! **Cheap at scale, fast where it matters.** Every container's usage is
//! screened once per `screen_interval` (one small file; spread over the
//! interval), sooner while it grows towards half its limit (a third of the
//! way there at its pace, down to a second), and a new container at once;
//! only a container at half its limit or more, one the kernel woke, or
//! one under pressure is read in full, at most once per `detail_interval`,
//! at most `max_details` a tick. The kernel wakes a container: on v2 when
//! its `memory.events` change (inotify), on v1 when its usage crosses half
//! its limit (a threshold registered through `cgroup.event_control`), on
//! v2 when its tasks stall (a PSI trigger); the last two are writes to
//! cgroupfs, refused where it is mounted read-only (the DaemonSet's
//! default), and counted: the screens stand in. No limit is ever written.
//!
//! An OOM kill in a container ends its episodes (`killed`): the kill is
//! what they warned of; the kill's post-mortem says how long before it was
//! warned, and of what.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use super::Host;
pub use crate::events::memory::{MemorySample, Psi};
use crate::model::{registry::ContainerRole, PodRegistry};

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

const SEC: u64 = 1_000_000_000;
/// A screened container's limit is read again every this many screens.
const LIMIT_EVERY_SCREENS: u32 = 6;
/// Reads kept for the trend, at most, and how far back.
const TREND_READS: usize = 32;
const TREND_WINDOW_NS: u64 = 120 * SEC;

/// The thresholds, in one place (see the module's doc).
mod limits {
    pub const NEAR_ENTER: u64 = 900;
    pub const NEAR_LEAVE: u64 = 800;
    pub const CANDIDATE: u64 = 500;
    pub const THRASH_WORKING_SET: u64 = 800;
    pub const THRASH_LEAVE_WORKING_SET: u64 = 600;
    /// PSI, hundredths of a percent.
    pub const STALL_SOME: u32 = 2000;
    pub const STALL_FULL: u32 = 500;
    pub const CALM_SOME: u32 = 500;
    pub const CALM_FULL: u32 = 100;
    /// Refaults a second, as thousandths of the limit.
    pub const STALL_REFAULTS: u64 = 50;
    pub const CALM_REFAULTS: u64 = 10;
    pub const CALM_READS: u8 = 3;
    pub const GROWTH_READS: usize = 8;
    pub const GROWTH_SPAN_NS: u64 = 8 * super::SEC;
    /// r², thousandths.
    pub const GROWTH_FIT: u64 = 700;
    pub const GROWTH_FIT_LOST: u64 = 300;
    pub const GROWTH_ENTER_WORKING_SET: u64 = 500;
    pub const GROWTH_LEAVE_WORKING_SET: u64 = 400;
    pub const GROWTH_ENTER_SECONDS: u64 = 600;
    pub const GROWTH_LEAVE_SECONDS: u64 = 1200;
    pub const FAST_GROWTH_READS: usize = 3;
    pub const FAST_GROWTH_SPAN_NS: u64 = 2 * super::SEC;
    pub const FAST_GROWTH_FIT: u64 = 900;
    /// Usage against `memory.high`, thousandths, below which throttling
    /// has eased whatever the counts say.
    pub const THROTTLE_LEAVE: u64 = 900;
}

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
    /// The last screen: when, and the usage it read.
    last_screen: Option<(u64, u64)>,
    /// The usage the kernel was asked to say it crossed (v1; on v2 any
    /// threshold stands for the PSI trigger), and whether it agreed.
    notice: Option<(u64, bool)>,
    /// Read in full while set.
    detail: Option<Box<Detail>>,
    woken: bool,
}

/// What a candidate's full reads keep.
#[derive(Debug, Default)]
struct Detail {
    trend: VecDeque<(u64, u64)>,
    last: Option<(u64, MemorySample)>,
    /// Start of each reason's open episode, in the reasons' order.
    open: BTreeMap<PressureReason, u64>,
    calm_reads: u8,
    /// Reads in a row without a crossing of `memory.high`.
    unthrottled_reads: u8,
    figures: Figures,
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
        for container in registry.sandboxes().flat_map(|s| s.workloads()) {
            if container.role != ContainerRole::Workload {
                continue;
            }
            live.insert(container.cgroup_id);
            if self.watched.contains_key(&container.cgroup_id) {
                continue;
            }
            // Those found at start-up are spread over the interval; a new
            // one (a new container grows fastest) is screened at once.
            let offset = if first {
                container.cgroup_id.wrapping_mul(0x9e37_79b9_7f4a_7c15) % self.settings.screen_interval_ns.max(1)
            } else {
                0
            };
            self.watched.insert(
                container.cgroup_id,
                Watched {
                    limit: None,
                    high: None,
                    screens: 0,
                    next_screen_ns: now_ns.saturating_add(offset),
                    next_detail_ns: now_ns,
                    last_screen: None,
                    notice: None,
                    detail: None,
                    woken: false,
                },
            );
        }
        let gone: Vec<u64> = self.watched.keys().filter(|id| !live.contains(id)).copied().collect();
        for id in gone {
            if let Some(w) = self.watched.remove(&id) {
                close_all(id, w.detail.as_deref(), PressureEnd::Gone, now_ns, edges);
            }
        }
    }

    /// One tick: the kernel's wake-ups (`woken`: the containers whose
    /// memory events changed; `all`: any may have), the screens due, the
    /// full reads due, within their budgets; the episodes' edges in
    /// `edges`. The containers' paths are `registry`'s (reconciled with
    /// first).
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
            self.watched.values_mut().for_each(|w| w.woken = true);
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
            // Growing towards the line: looked at again before it gets
            // there (a third of the way), down to a second.
            if let Some((then, before)) = w.last_screen {
                let grew = usage.saturating_sub(before);
                let took = now_ns.saturating_sub(then);
                if grew > 0 && took > 0 && usage < line {
                    let eta = u128::from(line - usage) * u128::from(took) / u128::from(grew);
                    let next = (eta / 3).clamp(u128::from(SEC), u128::from(s.screen_interval_ns)) as u64;
                    w.next_screen_ns = now_ns.saturating_add(next);
                }
            }
            w.last_screen = Some((now_ns, usage));
        }
        // Full reads: candidates and what the kernel or a screen woke.
        let mut due: Vec<(u64, u64)> = self
            .watched
            .iter()
            .filter(|(_, w)| (w.detail.is_some() || w.woken) && w.next_detail_ns <= now_ns)
            .map(|(id, w)| (w.next_detail_ns, *id))
            .collect();
        due.sort_unstable();
        for &(_, id) in due.iter().take(s.max_details) {
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
            let detail = w.detail.get_or_insert_with(Box::default);
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

/// Thousandths of `of` that `part` is.
fn permille(part: u64, of: u64) -> u64 {
    if of == 0 {
        return 0;
    }
    (u128::from(part) * 1000 / u128::from(of)).min(u128::from(u64::MAX)) as u64
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

/// A straight line through the trend: bytes per second, and how much of
/// the reads it explains (r², thousandths).
fn fit(trend: &VecDeque<(u64, u64)>) -> Option<(f64, u64)> {
    let n = trend.len() as f64;
    let (t0, _) = *trend.front()?;
    let xs = trend.iter().map(|(t, _)| t.saturating_sub(t0) as f64 / SEC as f64);
    let ys = trend.iter().map(|(_, y)| *y as f64);
    let (mx, my) = (xs.clone().sum::<f64>() / n, ys.clone().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.zip(ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    // A flat line explains flat reads fully.
    let r2 = if syy <= 0.0 { 1.0 } else { (sxy * sxy) / (sxx * syy) };
    Some((slope, (r2 * 1000.0) as u64))
}

/// One full read of a container: its figures, and the edges of its
/// reasons' episodes.
fn judge(cgroup_id: u64, d: &mut Detail, sample: &MemorySample, now_ns: u64, edges: &mut Vec<PressureEdge>) {
    let pinned = sample.unreclaimable();
    // Without a limit (a container held by `memory.high` alone), only
    // throttling can be said; the ratios below read 0 then.
    let limit = sample.limit.filter(|l| *l > 0).unwrap_or(0);
    let ratio = permille(pinned, limit);
    let ws_ratio = permille(sample.working_set(), limit);
    d.trend.push_back((now_ns, pinned));
    while d.trend.len() > TREND_READS
        || d.trend.front().is_some_and(|(t, _)| now_ns.saturating_sub(*t) > TREND_WINDOW_NS)
    {
        d.trend.pop_front();
    }
    // Since the read before: limit hits, `memory.high` crossings,
    // refaults a second.
    let (hits, high_hits, refault_rate) = match d.last {
        Some((then, last)) => {
            let delta = |now: Option<u64>, before: Option<u64>| match (now, before) {
                (Some(n), Some(b)) => n.saturating_sub(b),
                _ => 0,
            };
            let secs = now_ns.saturating_sub(then).max(1);
            let bytes = sample.refaults.saturating_sub(last.refaults).saturating_mul(crate::os::page_size());
            (
                delta(sample.limit_hits, last.limit_hits),
                delta(sample.high_hits, last.high_hits),
                (u128::from(bytes) * u128::from(SEC) / u128::from(secs)) as u64,
            )
        }
        None => (0, 0, 0),
    };
    d.last = Some((now_ns, *sample));
    let span = d.trend.back().map_or(0, |(t, _)| *t).saturating_sub(d.trend.front().map_or(0, |(t, _)| *t));
    let fitted = fit(&d.trend);
    let seconds_to_limit = fitted
        .filter(|(slope, _)| *slope > 0.0)
        .map(|(slope, _)| (limit.saturating_sub(pinned) as f64 / slope).ceil().min(u64::MAX as f64) as u64);
    d.figures = Figures {
        unreclaimable_bytes: pinned,
        working_set_bytes: sample.working_set(),
        limit_bytes: Some(limit),
        unreclaimable_permille: Some(ratio.min(u64::from(u32::MAX)) as u32),
        seconds_to_limit,
        psi: sample.psi,
        refault_bytes_per_second: refault_rate,
        limit_hits: hits,
        high_bytes: sample.high,
        high_hits,
    };
    let mut change = |reason: PressureReason, start: bool, d: &mut Detail| {
        let open = d.open.contains_key(&reason);
        if start && !open {
            d.open.insert(reason, now_ns);
            edges.push(PressureEdge {
                cgroup_id,
                reason,
                change: PressureChange::Start,
                since_ns: now_ns,
                ts_ns: now_ns,
                figures: d.figures,
            });
        } else if !start && open {
            let since_ns = d.open.remove(&reason).unwrap_or(now_ns);
            edges.push(PressureEdge {
                cgroup_id,
                reason,
                change: PressureChange::End(PressureEnd::Eased),
                since_ns,
                ts_ns: now_ns,
                figures: d.figures,
            });
        }
    };

    // Near its limit, with a band between entering and leaving.
    let near_open = d.open.contains_key(&PressureReason::NearLimit);
    let near = limit > 0 && if near_open { ratio >= limits::NEAR_LEAVE } else { ratio >= limits::NEAR_ENTER };
    change(PressureReason::NearLimit, near, d);

    // Growing to its limit, by a line that fits.
    let growing_open = d.open.contains_key(&PressureReason::Growing);
    let growing = match (fitted, seconds_to_limit) {
        (Some((_, r2)), Some(secs)) if growing_open => {
            ratio >= limits::GROWTH_LEAVE_WORKING_SET
                && secs <= limits::GROWTH_LEAVE_SECONDS
                && (d.trend.len() < limits::GROWTH_READS || r2 >= limits::GROWTH_FIT_LOST)
        }
        (Some((_, r2)), Some(secs)) => {
            let slow = d.trend.len() >= limits::GROWTH_READS
                && span >= limits::GROWTH_SPAN_NS
                && r2 >= limits::GROWTH_FIT
                && secs <= limits::GROWTH_ENTER_SECONDS;
            // A fast grower has no time for eight reads: three or more on
            // one line, and at this pace the rest of the way to its limit
            // takes no longer than it has been watched growing (the first
            // upswing of a garbage-collected heap is still far from it).
            let fast = d.trend.len() >= limits::FAST_GROWTH_READS
                && span >= limits::FAST_GROWTH_SPAN_NS
                && r2 >= limits::FAST_GROWTH_FIT
                && secs.saturating_mul(SEC) <= span;
            ratio >= limits::GROWTH_ENTER_WORKING_SET && (slow || fast)
        }
        _ => false,
    };
    change(PressureReason::Growing, growing, d);

    // Thrashing at its limit: at it, mostly working set, and stalling.
    let margin = super::oom_limit::margin(crate::os::page_size(), crate::os::cpus());
    let at_limit = limit > 0 && (sample.usage.saturating_add(margin) >= limit || hits > 0);
    let refaults = permille(refault_rate, limit);
    // With PSI, the kernel's stalls and the kubelet's working set; without
    // it, pages read back, of a container mostly unreclaimable.
    let (stalling, calm, held) = match sample.psi {
        Some(p) => (
            p.some_avg10 >= limits::STALL_SOME || p.full_avg10 >= limits::STALL_FULL,
            p.some_avg10 < limits::CALM_SOME && p.full_avg10 < limits::CALM_FULL,
            ws_ratio,
        ),
        None => (refaults >= limits::STALL_REFAULTS, refaults < limits::CALM_REFAULTS, ratio),
    };
    let thrashing = if d.open.contains_key(&PressureReason::Thrashing) {
        d.calm_reads = if calm { d.calm_reads.saturating_add(1) } else { 0 };
        d.calm_reads < limits::CALM_READS && held >= limits::THRASH_LEAVE_WORKING_SET
    } else {
        d.calm_reads = 0;
        at_limit && held >= limits::THRASH_WORKING_SET && stalling
    };
    change(PressureReason::Thrashing, thrashing, d);

    // Throttled at `memory.high`: crossings counted while the usage sits
    // at it; eased after three reads without one, or well below it.
    let at_high = sample.high.is_some_and(|h| sample.usage.saturating_add(margin) >= h);
    d.unthrottled_reads = if high_hits > 0 { 0 } else { d.unthrottled_reads.saturating_add(1) };
    let throttled = if d.open.contains_key(&PressureReason::Throttled) {
        d.unthrottled_reads < limits::CALM_READS
            && sample.high.is_some_and(|h| permille(sample.usage, h) >= limits::THROTTLE_LEAVE)
    } else {
        high_hits > 0 && at_high
    };
    change(PressureReason::Throttled, throttled, d);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Full reads of one container, one a second from `t0`.
    struct Reads {
        d: Detail,
        edges: Vec<PressureEdge>,
        now: u64,
    }

    impl Reads {
        fn new() -> Self {
            Self { d: Detail::default(), edges: Vec::new(), now: 100 * SEC }
        }

        fn read(&mut self, sample: MemorySample) -> Vec<(PressureReason, PressureChange)> {
            self.now += SEC;
            let before = self.edges.len();
            judge(7, &mut self.d, &sample, self.now, &mut self.edges);
            self.edges[before..].iter().map(|e| (e.reason, e.change)).collect()
        }
    }

    /// A read of `usage`, `cache` of it page cache the kernel reclaims
    /// (inactive).
    fn sample(usage: u64, cache: u64) -> MemorySample {
        MemorySample { usage, limit: Some(64 * MIB), inactive_file: cache, file: cache, ..MemorySample::default() }
    }

    use PressureChange::{End, Start};
    use PressureReason::{Growing, NearLimit, Thrashing};

    #[test]
    fn a_slow_grower_is_warned_growing_long_before_near_and_both_clear_at_the_kill() {
        let mut r = Reads::new();
        let mut growing_at = None;
        let mut near_at = None;
        // 1 MiB a second from 16 MiB: the limit at 64 s.
        for s in 0..47u64 {
            for (reason, change) in r.read(sample((16 + s) * MIB, 0)) {
                match (reason, change) {
                    (Growing, Start) => growing_at = Some(16 + s),
                    (NearLimit, Start) => near_at = Some(16 + s),
                    other => panic!("{other:?} at {} MiB", 16 + s),
                }
            }
        }
        // Half the limit and eight reads fitted: growing; 90 %: near.
        assert_eq!(growing_at, Some(32), "warned at half its limit, 32 s before the kill");
        assert_eq!(near_at, Some(58));
        let mut w = PressureWatch::default();
        w.watched.insert(
            7,
            Watched {
                limit: Some(64 * MIB),
                high: None,
                screens: 0,
                next_screen_ns: 0,
                next_detail_ns: 0,
                last_screen: None,
                notice: None,
                detail: Some(Box::new(std::mem::take(&mut r.d))),
                woken: false,
            },
        );
        let mut edges = Vec::new();
        let warned = w.killed(7, r.now + 3 * SEC, &mut edges).expect("warned");
        assert_eq!(warned.reasons, [NearLimit, Growing]);
        // Growing from the read at 32 MiB (t = 117 s); killed at 150 s.
        assert_eq!(warned.for_ns, 33 * SEC, "from its first warning to the kill");
        let ends: Vec<_> = edges.iter().map(|e| (e.reason, e.change)).collect();
        assert_eq!(ends, [(NearLimit, End(PressureEnd::Killed)), (Growing, End(PressureEnd::Killed))]);
        assert!(w.killed(7, r.now + 4 * SEC, &mut edges).is_none(), "nothing open any more");
    }

    /// Guards: a container that goes from half its limit to its kill in
    /// ten seconds warned too late for anyone to act (eight reads and
    /// eight seconds are all it has). Read once a second from half its
    /// limit, it is warned growing at least 3 s before it reaches it.
    #[test]
    fn a_fast_grower_is_warned_growing_three_seconds_before_its_limit() {
        let mut r = Reads::new();
        let mut warned_at = None;
        // 32 MiB at t = 0, 64 MiB (the limit) at t = 10 s.
        for t in 0..10u64 {
            let usage = 32 * MIB + t * 32 * MIB / 10;
            if r.read(sample(usage, 0)).contains(&(Growing, Start)) && warned_at.is_none() {
                warned_at = Some(t);
            }
        }
        let warned_at = warned_at.expect("warned");
        assert!(10 - warned_at >= 3, "warned {} s before its limit", 10 - warned_at);
    }

    #[test]
    fn steady_at_a_quarter_is_never_warned_and_a_sawtooth_is_no_growth() {
        let mut r = Reads::new();
        for _ in 0..200 {
            assert_eq!(r.read(sample(16 * MIB, 0)), []);
        }
        // A garbage-collected heap between 34 and 50 MiB: no line fits.
        let mut r = Reads::new();
        for s in 0..200u64 {
            let usage = 34 * MIB + (s % 8) * 2 * MIB;
            assert_eq!(r.read(sample(usage, 0)), [], "read {s}");
        }
    }

    #[test]
    fn page_cache_streamed_at_the_limit_is_no_warning() {
        // At its limit, hitting it every read, mostly inactive cache.
        let mut r = Reads::new();
        for s in 0..120u64 {
            let s = MemorySample {
                limit_hits: Some(s * 500),
                psi: Some(Psi { some_avg10: 300, full_avg10: 0 }),
                ..sample(64 * MIB - 4096, 50 * MIB)
            };
            assert_eq!(r.read(s), []);
        }
        // Read again and again: the cache active (the kubelet's working set
        // at 98 %), pages read back 130 MB a second, no stall (v2) — or no
        // PSI to say so (v1): no warning either way. (Seen through the CRI
        // on v1: near_limit, from the working set.)
        for psi in [Some(Psi { some_avg10: 150, full_avg10: 0 }), None] {
            let mut r = Reads::new();
            for s in 0..120u64 {
                let streamed =
                    MemorySample { inactive_file: MIB, refaults: s * 32_000, psi, ..sample(64 * MIB - 4096, 56 * MIB) };
                assert!(streamed.working_set() > 62 * MIB);
                assert_eq!(r.read(streamed), [], "read {s} with PSI {psi:?}");
            }
        }
    }

    #[test]
    fn near_the_limit_has_a_band_and_no_flapping() {
        let mut r = Reads::new();
        assert_eq!(r.read(sample(58 * MIB, 0)), [(NearLimit, Start)]);
        // Between 80 % and 90 %: stays; at 79 %: eases.
        for mib in [55, 57, 53, 58, 52] {
            assert_eq!(r.read(sample(mib * MIB, 0)), [], "{mib} MiB");
        }
        assert_eq!(r.read(sample(50 * MIB, 0)), [(NearLimit, End(PressureEnd::Eased))]);
        assert_eq!(r.read(sample(56 * MIB, 0)), [], "below 90 % again: nothing");
    }

    /// Guards: a container held at `memory.high` (the kubelet's MemoryQoS)
    /// never said throttled, or said so for a one-off crossing far below
    /// it. Crossings counted while its usage sits at `memory.high` start
    /// it, before `near_limit`; three reads without one end it; one steady
    /// below `memory.high` never is; one with `memory.high` and no limit
    /// (BestEffort) is throttled too, and nothing else.
    #[test]
    fn throttled_at_memory_high_needs_crossings_at_it_and_clears_after_quiet_reads() {
        use PressureReason::Throttled;
        let high = 51 * MIB; // 80 % of 64 MiB.
        let at = |usage: u64, crossings: u64| MemorySample {
            high: Some(high),
            high_hits: Some(crossings),
            limit_hits: Some(0),
            ..sample(usage, 0)
        };
        // A slow climb (a second is an hour here: the growth rules are
        // another test's).
        let mut r = Reads::new();
        let mut read = |usage: u64, crossings: u64| -> Vec<(PressureReason, PressureChange)> {
            r.read(at(usage, crossings)).into_iter().filter(|(reason, _)| *reason != Growing).collect()
        };
        assert_eq!(read(46 * MIB, 0), []);
        assert_eq!(read(47 * MIB, 0), [], "below memory.high");
        assert_eq!(read(high, 40), [(Throttled, Start)], "crossings, at memory.high");
        assert_eq!(read(high + MIB, 90), []);
        assert_eq!(read(high + 2 * MIB, 150), []);
        // Held there, then past the limit's 90 %: near_limit comes after.
        assert_eq!(read(58 * MIB, 200), [(NearLimit, Start)]);
        for _ in 0..2 {
            assert_eq!(read(58 * MIB, 200), []);
        }
        assert_eq!(read(58 * MIB, 200), [(Throttled, End(PressureEnd::Eased))], "three quiet reads");
        // Crossings far below memory.high (a past burst) are no throttling.
        let mut r = Reads::new();
        assert_eq!(r.read(at(20 * MIB, 0)), []);
        assert_eq!(r.read(at(20 * MIB, 7)), []);
        // Held by memory.high alone: throttled, and no limit's reason.
        let mut r = Reads::new();
        let best_effort = |usage: u64, crossings: u64| MemorySample { limit: None, ..at(usage, crossings) };
        assert_eq!(r.read(best_effort(high, 0)), []);
        assert_eq!(r.read(best_effort(high, 30)), [(Throttled, Start)]);
        assert_eq!(r.read(best_effort(40 * MIB, 30)), [(Throttled, End(PressureEnd::Eased))], "well below it");
    }

    #[test]
    fn thrashing_needs_the_limit_a_working_set_and_a_stall_and_clears_after_calm_reads() {
        // Its hot page cache read back: active, in the kubelet's working set.
        let stalled = |psi| MemorySample {
            psi: Some(psi),
            limit_hits: Some(0),
            inactive_file: MIB,
            ..sample(64 * MIB, 30 * MIB)
        };
        let mut r = Reads::new();
        let hot = Psi { some_avg10: 3500, full_avg10: 900 };
        assert_eq!(r.read(stalled(hot)), [(Thrashing, Start)], "thrashing, but half of it reclaimable: not near");
        // Two calm reads keep it, the third clears it.
        let calm = Psi { some_avg10: 100, full_avg10: 0 };
        assert_eq!(r.read(stalled(calm)), []);
        assert_eq!(r.read(stalled(hot)), [], "a stall again resets the count");
        assert_eq!(r.read(stalled(calm)), []);
        assert_eq!(r.read(stalled(calm)), []);
        assert_eq!(r.read(stalled(calm)), [(Thrashing, End(PressureEnd::Eased))]);
        // Stalling far from its limit is no thrashing at it.
        let mut r = Reads::new();
        let far = MemorySample { psi: Some(hot), ..sample(30 * MIB, 0) };
        assert_eq!(r.read(far), []);
        // Without PSI (v1): pages read back at 5 % of the limit a second.
        let mut r = Reads::new();
        let v1 = |refaults| MemorySample { refaults, ..sample(64 * MIB, MIB) };
        assert_eq!(r.read(v1(0)), [(NearLimit, Start)]);
        let pages_a_second = 64 * MIB / 20 / crate::os::page_size() + 1;
        assert_eq!(r.read(v1(pages_a_second)), [(Thrashing, Start)]);
    }

    /// A node whose containers all read `sample`, counting the reads.
    #[derive(Default)]
    struct Node {
        sample: Option<MemorySample>,
        /// Per container (by path), where it differs.
        by_path: HashMap<String, MemorySample>,
        reads: std::cell::Cell<(u64, u64, u64)>,
    }

    impl Node {
        fn of(&self, path: &str) -> Option<MemorySample> {
            self.by_path.get(path).copied().or(self.sample)
        }

        fn count(&self, read: usize) {
            let mut r = self.reads.get();
            match read {
                0 => r.0 += 1,
                1 => r.1 += 1,
                _ => r.2 += 1,
            }
            self.reads.set(r);
        }
    }

    impl Host for Node {
        fn oom_group(&self, _: &str) -> Option<bool> {
            None
        }
        fn memory_stat(&self, _: &str) -> Option<crate::events::kernel::MemoryStat> {
            None
        }
        fn memory_usage(&self, path: &str) -> Option<u64> {
            self.count(0);
            self.of(path).map(|s| s.usage)
        }
        fn memory_limit(&self, path: &str) -> Option<u64> {
            self.count(1);
            self.of(path).and_then(|s| s.limit)
        }
        fn memory_sample(&self, path: &str) -> Option<MemorySample> {
            self.count(2);
            self.of(path)
        }
        fn cgroup_id(&self, _: &str) -> Option<u64> {
            None
        }
        fn scan(&self, _: u64) -> Vec<crate::events::Event> {
            Vec::new()
        }
        fn cgroup_tree(&self, _: u64) -> super::super::CgroupTree {
            super::super::CgroupTree::default()
        }
        fn comm(&self, _: u32, _: u64) -> Option<String> {
            None
        }
        fn runtime_processes(&self) -> Vec<super::super::crashes::RuntimeProcess> {
            Vec::new()
        }
        fn track(&mut self, _: u64, _: super::super::Tracking) -> bool {
            true
        }
        fn untrack(&mut self, _: u64) {}
        fn seed_tasks(&mut self, _: &HashSet<u64>) -> usize {
            0
        }
        fn memory_limits(&self, path: &str) -> Option<super::super::limits::MemoryLimits> {
            self.count(1);
            self.of(path).map(|s| super::super::limits::MemoryLimits { max: s.limit, high: s.high, swap: None })
        }
        fn watch_memory(&mut self, _: u64, _: &str, _: bool) -> bool {
            true
        }
        fn watch_usage(&mut self, _: u64, _: &str, _: u64) -> bool {
            false
        }
        fn unwatch_memory(&mut self, _: u64) {}
        fn take_memory_wakeups(&mut self) -> super::super::MemoryWakeups {
            super::super::MemoryWakeups::default()
        }
        fn losses(&self) -> super::super::LossTotals {
            super::super::LossTotals::default()
        }
        fn listing_up(&self) -> bool {
            false
        }
        fn stream_up(&self) -> bool {
            false
        }
        fn runtime_peer(&self) -> Option<u32> {
            None
        }
        fn want_names(&self, _: &str) {}
    }

    const UID: &str = "7e3c1f2a-0b4d-4c5e-9f60-1a2b3c4d5e6f";

    /// `pods` pods of a sandbox and one workload each: the workloads are
    /// cgroups 1000 + n at `/kubepods/burstable/pod…/02…02`.
    fn registry(pods: u64) -> PodRegistry {
        let mut reg = PodRegistry::new(crate::model::Limits::default());
        for n in 0..pods {
            let uid = format!("{:08x}{}", n, &UID[8..]);
            reg.cgroup_created(100_000 + n * 10, &format!("/kubepods/burstable/pod{uid}"));
            reg.cgroup_created(100_001 + n * 10, &format!("/kubepods/burstable/pod{uid}/{}", "01".repeat(32)));
            reg.cgroup_created(1000 + n, &format!("/kubepods/burstable/pod{uid}/{}", "02".repeat(32)));
        }
        reg
    }

    #[test]
    fn a_gone_container_and_a_lifted_limit_end_their_episodes() {
        let mut reg = registry(1);
        let mut node = Node { sample: Some(sample(60 * MIB, 0)), ..Node::default() };
        let mut w = PressureWatch::default();
        let mut edges = Vec::new();
        w.reconcile(&reg, SEC, &mut edges);
        assert_eq!(w.watched(), 1, "the workload, not the sandbox");
        // Its first screen (within the interval) finds it near: a full read.
        for t in 2..=12 {
            w.tick(&mut node, &reg, &[], false, t * SEC, &mut edges);
        }
        assert_eq!(edges.iter().map(|e| (e.reason, e.change)).collect::<Vec<_>>(), [(NearLimit, Start)]);
        assert_eq!(w.levels().len(), 1);
        // The limit lifted: the episode ends, and it is screened again.
        node.sample = Some(MemorySample { limit: None, ..sample(60 * MIB, 0) });
        edges.clear();
        w.tick(&mut node, &reg, &[], false, 13 * SEC, &mut edges);
        assert_eq!(edges.iter().map(|e| e.change).collect::<Vec<_>>(), [End(PressureEnd::Unlimited)]);
        assert!(w.levels().is_empty());
        // Its limit back, under pressure again, then the container goes.
        node.sample = Some(sample(60 * MIB, 0));
        for t in 14..=30 {
            w.tick(&mut node, &reg, &[], false, t * SEC, &mut edges);
        }
        assert_eq!(w.levels().len(), 1);
        edges.clear();
        reg.cgroup_removed(1000, 31 * SEC);
        w.reconcile(&reg, 31 * SEC, &mut edges);
        assert_eq!(edges.iter().map(|e| e.change).collect::<Vec<_>>(), [End(PressureEnd::Gone)]);
        assert_eq!(w.watched(), 0);
    }

    #[test]
    fn a_thousand_containers_cost_a_usage_read_each_per_interval_and_fifty_near_a_full_read_a_second() {
        let reg = registry(1000);
        let mut node = Node { sample: Some(sample(8 * MIB, 0)), ..Node::default() };
        let near = |n: u64| format!("/kubepods/burstable/pod{:08x}{}/{}", n, &UID[8..], "02".repeat(32));
        for n in 0..50 {
            node.by_path.insert(near(n * 20), sample(50 * MIB, 0));
        }
        let mut w = PressureWatch::default();
        let mut edges = Vec::new();
        w.reconcile(&reg, 0, &mut edges);
        // Settled after the first interval, then 60 s counted.
        for t in 1..=20 {
            w.tick(&mut node, &reg, &[], false, t * SEC, &mut edges);
        }
        node.reads.set((0, 0, 0));
        for t in 21..=80 {
            w.tick(&mut node, &reg, &[], false, t * SEC, &mut edges);
        }
        let (usage, limit, full) = node.reads.get();
        assert_eq!(w.candidates(), 50);
        // 950 screened every 10 s: 5 700 usage reads, a limit each minute.
        assert!((5_600..=5_800).contains(&usage), "{usage} usage reads");
        assert!(limit <= 1_000, "{limit} limit reads");
        assert!((2_950..=3_050).contains(&full), "fifty full reads a second: {full}");
        // None of them is warned: half their limit, steady.
        assert!(edges.is_empty(), "{edges:?}");
    }

    /// Guards: a container crossing half its limit seen up to a whole
    /// screen interval late (a fast grower is killed before its first full
    /// read). One growing towards the line is screened sooner, a third of
    /// the way there at its pace; a steady one stays on the interval; and
    /// the kernel is asked (here it refuses) to say when the line is
    /// crossed, once per line.
    #[test]
    fn a_container_growing_towards_half_its_limit_is_screened_sooner() {
        let reg = registry(2);
        let grower = format!("/kubepods/burstable/pod{:08x}{}/{}", 0, &UID[8..], "02".repeat(32));
        let mut node = Node { sample: Some(sample(8 * MIB, 0)), ..Node::default() };
        let mut w = PressureWatch::default();
        let mut edges = Vec::new();
        w.reconcile(&reg, 0, &mut edges);
        let mut candidate_at = None;
        // 8 MiB, growing 2 MiB a second from t = 10 s: half its limit (32
        // MiB) at t = 22 s.
        for t in 1..=40u64 {
            let usage = 8 * MIB + t.saturating_sub(10) * 2 * MIB;
            node.by_path.insert(grower.clone(), sample(usage, 0));
            w.tick(&mut node, &reg, &[], false, t * SEC, &mut edges);
            if candidate_at.is_none() && w.candidates() == 1 {
                candidate_at = Some(t);
            }
        }
        let at = candidate_at.expect("read in full");
        assert!((22..=24).contains(&at), "read in full at {at} s, half its limit at 22 s");
        assert_eq!(w.reads.notices_refused, 2, "asked once each, at its line: {:?}", w.reads);
    }

    #[test]
    fn the_kernels_wakeup_makes_a_full_read_at_once_and_budgets_hold() {
        let reg = registry(200);
        let mut node = Node { sample: Some(sample(8 * MIB, 0)), ..Node::default() };
        let mut w = PressureWatch::new(PressureSettings { max_details: 10, ..PressureSettings::default() });
        let mut edges = Vec::new();
        w.reconcile(&reg, 0, &mut edges);
        for t in 1..=12 {
            w.tick(&mut node, &reg, &[], false, t * SEC, &mut edges);
        }
        node.reads.set((0, 0, 0));
        // Every container's memory.events changed: ten full reads a tick.
        let woken: Vec<u64> = (1000..1200).collect();
        w.tick(&mut node, &reg, &woken, false, 13 * SEC, &mut edges);
        assert_eq!(node.reads.get().2, 10);
        assert_eq!(w.reads.wakeups, 200);
        for t in 14..=32 {
            w.tick(&mut node, &reg, &[], false, t * SEC, &mut edges);
        }
        assert_eq!(node.reads.get().2, 200, "each woken container read once, then screened again");
        assert_eq!(w.candidates(), 0);
    }
}
