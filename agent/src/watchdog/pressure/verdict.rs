//! One full read of a container judged: its figures, and each reason's
//! episode rising or clearing with its hysteresis (the thresholds in one
//! place, [`limits`]). Pure: a read in, edges out.

use std::collections::{BTreeMap, VecDeque};

use super::{Figures, MemorySample, PressureChange, PressureEdge, PressureEnd, PressureReason, SEC};

/// Reads kept for the trend, at most: the line is fitted over the reads
/// there are, however far apart a busy node's budget spaced them (a
/// window of seconds would hold too few of them to ever fit one).
const TREND_READS: usize = 32;

/// The thresholds, in one place (see the module's doc).
pub(super) mod limits {
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

/// What a candidate's full reads keep.
#[derive(Debug, Default)]
pub(super) struct Detail {
    pub(super) trend: VecDeque<(u64, u64)>,
    pub(super) last: Option<(u64, MemorySample)>,
    /// Start of each reason's open episode, in the reasons' order.
    pub(super) open: BTreeMap<PressureReason, u64>,
    pub(super) calm_reads: u8,
    /// Reads in a row without a crossing of `memory.high`.
    pub(super) unthrottled_reads: u8,
    pub(super) figures: Figures,
}

impl Detail {
    /// A trend begun with `reads` (time, unreclaimable bytes).
    pub(super) fn seeded(reads: impl Iterator<Item = (u64, u64)>) -> Self {
        Self { trend: reads.collect(), ..Self::default() }
    }
}

/// Thousandths of `of` that `part` is.
pub(super) fn permille(part: u64, of: u64) -> u64 {
    if of == 0 {
        return 0;
    }
    (u128::from(part) * 1000 / u128::from(of)).min(u128::from(u64::MAX)) as u64
}

/// A straight line through the trend: bytes per second, and how much of
/// the reads it explains (r², thousandths).
pub(super) fn fit(trend: &VecDeque<(u64, u64)>) -> Option<(f64, u64)> {
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
pub(super) fn judge(cgroup_id: u64, d: &mut Detail, sample: &MemorySample, now_ns: u64, edges: &mut Vec<PressureEdge>) {
    let pinned = sample.unreclaimable();
    // Without a limit (a container held by `memory.high` alone), only
    // throttling can be said; the ratios below read 0 then.
    let limit = sample.limit.filter(|l| *l > 0).unwrap_or(0);
    let ratio = permille(pinned, limit);
    let ws_ratio = permille(sample.working_set(), limit);
    d.trend.push_back((now_ns, pinned));
    while d.trend.len() > TREND_READS {
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
    let margin = crate::watchdog::oom_limit::margin(crate::os::page_size(), crate::os::cpus());
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
