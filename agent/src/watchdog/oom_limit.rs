//! Which limit fired on an OOM kill: the container's, the pod's, or the
//! node's (a limit above the pods — the kubelet's allocatable — or none at
//! all: a global OOM, which means the kubelet's eviction did not keep up).
//!
//! The kernel's OOM tracepoint does not say; the OOM killer's own control
//! (`struct oom_control`) does, and its OOM report in the kernel log
//! prints it. Where the kernel lets a program see that control on the kill
//! path (a BPF trampoline at `out_of_memory`: every kernel of the tested
//! matrix), the OOM program reads the memory cgroup the killer ran for and
//! its constraint, and the page counters from that cgroup up: the verdict
//! is the kernel's, whichever task ran the kill. That is not always the
//! victim's own: a runtime that lowers a container's `memory.max` below
//! its usage (a pod resized in place) runs the kill inside its write, from
//! the host's cgroup; on cgroup v1 a thread charges its process's memory
//! owner's cgroup while the killer runs in its own. The decision is placed
//! against the victim's container and pod: the container's cgroup or one
//! it nests, the container's; the pod's, the pod's; above it, the node's;
//! no memory cgroup, `global` (or the `cpuset` or `memory_policy` that
//! constrained the allocation).
//!
//! Where the kernel offers no such program (no trampolines), the OOM
//! program reads, at the kill, the memory cgroup of the victim (or of the
//! task that ran out of memory) and each one above it: the kernel's count
//! of the OOMs each ran for its own limit, and its page counters. The
//! innermost level whose count rose since the agent last saw it, and which
//! is still near its limit, is the one the killer ran for
//! (`super::oom_counts`). Where no count rose, or a level's past is
//! unknown, the page counters judge: a charge is tried from the innermost
//! cgroup up, and the OOM killer acts on the first whose limit it failed
//! at; the kernel calls the OOM killer only for charges of a few
//! pages (8 at most: larger ones fail instead), after reclaim failed. So
//! the innermost level whose usage is within 8 pages of its limit — of
//! memory, or on cgroup v1 of memory + swap, which runc holds to the memory
//! limit and which is charged first — is the one whose limit fired. None:
//! no cgroup's limit, a global OOM. Placed against the victim's container
//! and pod (or, when the task that ran out of memory is elsewhere, its
//! own): at the container or a cgroup inside it, the container's; at the
//! pod's cgroup, the pod's; above it, the node's. `unknown` only where the
//! kernel's counters could not be read or the limit cannot be placed, and
//! then with why. Pure: the kernel reads, the watchdog places.

use crate::events::kernel::{KernelDecision, MemcgUse};

/// Whose memory limit the OOM killer acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum OomLimit {
    /// The victim's container's own limit.
    Container,
    /// Its pod's limit (the sum the kubelet sets on the pod cgroup).
    Pod,
    /// Neither: a limit above the pods (the node's allocatable) or the
    /// machine's memory (a global OOM).
    Node,
    Unknown,
}

/// The kernel's OOM constraint: its own word where it was read, else as
/// far as cgroup counters tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum OomConstraint {
    /// A memory cgroup's limit (`CONSTRAINT_MEMCG`).
    Memcg,
    /// No cgroup's limit: the machine's memory (`CONSTRAINT_NONE`; judged
    /// from counters, an OOM constrained by a cpuset or a memory policy
    /// reads so too: counters do not tell them apart).
    Global,
    /// The memory nodes of the allocating task's cpuset (`CONSTRAINT_CPUSET`).
    Cpuset,
    /// The nodes of a memory policy (`CONSTRAINT_MEMORY_POLICY`).
    MemoryPolicy,
    Unknown,
}

/// The verdict on one OOM kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fired {
    pub limit: OomLimit,
    pub constraint: OomConstraint,
}

impl Fired {
    pub const UNKNOWN: Fired = Fired { limit: OomLimit::Unknown, constraint: OomConstraint::Unknown };
}

impl Default for Fired {
    fn default() -> Self {
        Self::UNKNOWN
    }
}

/// Why a kill's limit is `unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum UnknownLimit {
    /// The kernel's page counters were not read (this kernel's BTF lacks
    /// what the OOM program needs, or the reads failed).
    NoCounters,
    /// A cgroup's limit fired that is neither the victim's container, its
    /// pod, nor above a known pod: where the victim is not in a pod, or the
    /// task that ran out of memory and the victim are in cgroups the agent
    /// does not know.
    Unplaced,
    /// The task that ran out of memory was in a cgroup nested so deep
    /// below its container's (more than `agent_common::MEMCG_WALK`) that
    /// the kernel's walk up gave out before the container's: no level read
    /// was at its limit, yet the walk did not end at the root.
    NestedTooDeep,
}

/// Where the victim's (or the triggering task's) container and pod are
/// among the levels read at the kill: their indexes, innermost first;
/// `known` when that container is one of a known pod's at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Placed {
    pub container: Option<usize>,
    pub pod: Option<usize>,
    pub known: bool,
}

/// The verdict on one kill: which limit, and at which level it fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judged {
    pub fired: Fired,
    /// Index into the levels of the cgroup whose limit fired.
    pub level: Option<usize>,
    pub unknown: Option<UnknownLimit>,
    /// Said by the kernel's counts of the OOMs each cgroup ran
    /// (`super::oom_counts`), not by page counters.
    pub by_count: bool,
}

/// How far under its limit a cgroup whose limit fired can read when the
/// OOM killer marks its victim (`agent_common::oom_margin_pages`: the
/// largest charge that calls the OOM killer, and the other CPUs' charge
/// caches). With 8 pages alone, a container's own kill through containerd
/// 2.1 on the v1 host once read as a global OOM (1 run of 6); the caches
/// are the likely reason.
pub fn margin(page_size: u64, cpus: u64) -> u64 {
    u64::from(agent_common::oom_margin_pages(u32::try_from(cpus).unwrap_or(u32::MAX))) * page_size
}

/// The margins a kill is judged with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Margins {
    /// A level without the kernel's word is at its limit within this
    /// ([`margin`]).
    pub limit: u64,
    /// A level whose count of OOMs rose was at its limit at the kill if
    /// it is within this (every cached charge below it handed back since,
    /// `agent_common::oom_drained_margin_pages`); further, its rise is an
    /// OOM that killed nothing, since its cgroup's last kill.
    pub risen: u64,
}

impl Margins {
    pub fn of(page_size: u64, cpus: u64) -> Self {
        let drained = agent_common::oom_drained_margin_pages(u32::try_from(cpus).unwrap_or(u32::MAX));
        Self { limit: margin(page_size, cpus), risen: u64::from(drained) * page_size }
    }
}

/// Whether a level was at its limit at the kill: within `margin` bytes of
/// its memory limit or (v1) of its memory + swap limit.
pub fn at_limit(l: &MemcgUse, margin: u64) -> bool {
    let near = |usage: u64, limit: Option<u64>| limit.is_some_and(|max| usage.saturating_add(margin) > max);
    near(l.usage_bytes, l.limit_bytes) || near(l.memsw_usage_bytes, l.memsw_limit_bytes)
}

/// What was read at a kill: its levels (innermost first; `cut` when the
/// walk gave out among cgroups nested below the container's), the
/// kernel's decision where it was read (the levels then start at the
/// cgroup it ran for), and for each level whether the kernel ran the OOM
/// killer for its limit since it was last seen (`rose`, from
/// `super::oom_counts`; `None`: no word).
#[derive(Debug, Clone, Copy)]
pub struct Read<'a> {
    pub levels: &'a [MemcgUse],
    pub cut: bool,
    pub decision: Option<KernelDecision>,
    pub rose: &'a [Option<bool>],
}

/// Which limit fired: the kernel's own decision where it was read, else
/// the innermost level the kernel ran the OOM killer for since it was last
/// seen (unless a level inside it without that word was at its limit by
/// its page counters), else the innermost at its limit by its page
/// counters; `placed` against the victim's container and pod.
pub fn judge(read: Read<'_>, placed: Placed, margins: Margins) -> Judged {
    match read.decision {
        Some(decision) => decided(read.levels, read.cut, decision, placed),
        None => from_counters(read, placed, margins),
    }
}

/// The kernel's decision, placed: the levels start at the cgroup whose
/// limit fired, so the victim's container among them means it fired at
/// the container or one it nests; its pod first, at the pod; neither, above
/// the pod.
fn decided(levels: &[MemcgUse], cut: bool, decision: KernelDecision, placed: Placed) -> Judged {
    let node = |constraint| Judged {
        fired: Fired { limit: OomLimit::Node, constraint },
        level: None,
        unknown: None,
        by_count: false,
    };
    let memcg = |limit, level| Judged {
        fired: Fired { limit, constraint: OomConstraint::Memcg },
        level,
        unknown: None,
        by_count: false,
    };
    match decision {
        KernelDecision::Global => node(OomConstraint::Global),
        KernelDecision::Cpuset => node(OomConstraint::Cpuset),
        KernelDecision::MemoryPolicy => node(OomConstraint::MemoryPolicy),
        KernelDecision::Memcg { .. } if levels.is_empty() => Judged {
            fired: Fired { limit: OomLimit::Unknown, constraint: OomConstraint::Memcg },
            level: None,
            unknown: Some(UnknownLimit::NoCounters),
            by_count: false,
        },
        // Nested below a container's deeper than the walk: a container's
        // own cgroup fired, but which one the levels cannot say.
        KernelDecision::Memcg { .. } if cut => match placed.container {
            Some(_) => memcg(OomLimit::Container, Some(0)),
            None => Judged {
                fired: Fired { limit: OomLimit::Unknown, constraint: OomConstraint::Memcg },
                level: Some(0),
                unknown: Some(UnknownLimit::NestedTooDeep),
                by_count: false,
            },
        },
        KernelDecision::Memcg { .. } => match placed {
            Placed { container: Some(_), .. } => memcg(OomLimit::Container, Some(0)),
            Placed { pod: Some(0), .. } => memcg(OomLimit::Pod, Some(0)),
            // The victim's pod is known, and the cgroup that fired is
            // neither its container's nor its pod's: one above the pod.
            Placed { pod: None, container: None, known: true } => memcg(OomLimit::Node, Some(0)),
            _ => Judged {
                fired: Fired { limit: OomLimit::Unknown, constraint: OomConstraint::Memcg },
                level: Some(0),
                unknown: Some(UnknownLimit::Unplaced),
                by_count: false,
            },
        },
    }
}

/// Which limit fired, judged from the levels read at the kill (the
/// allocating task's or the victim's memory cgroups, innermost first).
///
/// The kernel's word is a count that rose, and only that: a count that did
/// not rise clears no level of its own (the OOM program keeps one of a
/// tenant's nested cgroups by its page counters, and the one whose count
/// rose may not be among those read; a group kill's later victims find
/// the counts already seen), so where none rose every level is judged by
/// its page counters, as without counts. A rise is taken where its level
/// is still near its limit (`Margins::risen`): further off, it is an OOM
/// that killed nothing since its cgroup's last kill (an allocator that
/// ran into the limit again while the victim exited). Inside the level
/// that rose, a level without the kernel's word that is at its limit by
/// its page counters is the innermost that fired.
fn from_counters(read: Read<'_>, placed: Placed, margins: Margins) -> Judged {
    let Read { levels, cut, rose, .. } = read;
    let memcg = |limit, level, by_count| Judged {
        fired: Fired { limit, constraint: OomConstraint::Memcg },
        level,
        unknown: None,
        by_count,
    };
    let unknown = |why| Judged { fired: Fired::UNKNOWN, level: None, unknown: Some(why), by_count: false };
    if levels.is_empty() {
        return unknown(UnknownLimit::NoCounters);
    }
    let word = |i: usize| rose.get(i).copied().flatten();
    let counted = levels.iter().enumerate().position(|(i, l)| word(i) == Some(true) && at_limit(l, margins.risen));
    let fired = match counted {
        Some(c) => {
            let unsaid =
                levels.iter().take(c).enumerate().position(|(i, l)| word(i).is_none() && at_limit(l, margins.limit));
            Some(unsaid.map_or((c, true), |i| (i, false)))
        }
        None => levels.iter().position(|l| at_limit(l, margins.limit)).map(|i| (i, false)),
    };
    let Some((at, by_count)) = fired else {
        // Levels above were not read: no global OOM can be said.
        if cut {
            return unknown(UnknownLimit::NestedTooDeep);
        }
        return Judged {
            fired: Fired { limit: OomLimit::Node, constraint: OomConstraint::Global },
            level: None,
            unknown: None,
            by_count: false,
        };
    };
    match placed {
        Placed { pod: Some(p), .. } if at == p => memcg(OomLimit::Pod, Some(at), by_count),
        Placed { container: Some(c), .. } if at <= c => memcg(OomLimit::Container, Some(at), by_count),
        Placed { pod: Some(p), .. } if at > p => memcg(OomLimit::Node, Some(at), by_count),
        _ => unknown(UnknownLimit::Unplaced),
    }
}

/// The cgroups above a pod's, up to the kubelet's root (`kubepods` or
/// `kubepods.slice`), innermost first: the QoS class's cgroup, then the
/// root (a guaranteed pod sits right under the root).
pub fn above_pod(pod_path: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut path = pod_path;
    while let Some((parent, _)) = path.rsplit_once('/') {
        if parent.is_empty() {
            break;
        }
        found.push(parent.to_string());
        let last = parent.rsplit('/').next().unwrap_or("");
        if last == "kubepods" || last == "kubepods.slice" {
            return found;
        }
        path = parent;
    }
    // No kubelet root above: nothing of the node's to read.
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const MARGIN: u64 = 8 * 4096;
    /// Margins of one CPU: 8 pages, and as many for a level whose count rose.
    const MARGINS: Margins = Margins { limit: MARGIN, risen: MARGIN };

    fn level(id: u64, usage: u64, limit: Option<u64>) -> MemcgUse {
        MemcgUse {
            cgroup_id: id,
            usage_bytes: usage,
            limit_bytes: limit,
            memsw_usage_bytes: 0,
            memsw_limit_bytes: None,
            ooms: None,
        }
    }

    /// Levels read at a kill without the kernel's counts.
    fn read(levels: &[MemcgUse], cut: bool, decision: Option<KernelDecision>) -> Read<'_> {
        Read { levels, cut, decision, rose: &[] }
    }

    /// A container (1) of a pod (2) under the QoS class (3) and kubepods (4).
    fn chain(container: (u64, Option<u64>), pod: (u64, Option<u64>), kubepods: (u64, Option<u64>)) -> Vec<MemcgUse> {
        vec![
            level(1, container.0, container.1),
            level(2, pod.0, pod.1),
            level(3, pod.0, None),
            level(4, kubepods.0, kubepods.1),
        ]
    }

    const PLACED: Placed = Placed { container: Some(0), pod: Some(1), known: true };

    #[test]
    fn the_innermost_level_at_its_limit_fired_and_is_placed_against_the_pod() {
        use OomConstraint::{Global, Memcg};
        use OomLimit::{Container, Node, Pod};
        let verdict = |levels: &[MemcgUse], placed| {
            let j = judge(read(levels, false, None), placed, MARGINS);
            (j.fired.limit, j.fired.constraint, j.level)
        };
        let full = 48 * MIB;
        assert_eq!(
            verdict(&chain((full, Some(full)), (full, Some(96 * MIB)), (full, None)), PLACED),
            (Container, Memcg, Some(0))
        );
        // A pod of one container: the kubelet sets the pod's limit to the
        // container's, both are full; the innermost fired.
        assert_eq!(
            verdict(&chain((full, Some(full)), (full, Some(full)), (full, None)), PLACED),
            (Container, Memcg, Some(0))
        );
        // Within the margin of its limit: the last charge's pages did not fit.
        assert_eq!(
            verdict(&chain((full - 8192, Some(full)), (full, None), (full, None)), PLACED),
            (Container, Memcg, Some(0))
        );
        // The container had room for more than a charge that calls the OOM
        // killer: its pod's limit fired.
        let pod = 64 * MIB;
        assert_eq!(
            verdict(&chain((full - MIB, Some(full)), (pod, Some(pod)), (pod, None)), PLACED),
            (Pod, Memcg, Some(1))
        );
        assert_eq!(
            verdict(&chain((MIB, None), (MIB, None), (900 * MIB, Some(900 * MIB))), PLACED),
            (Node, Memcg, Some(3)),
            "the node's allocatable"
        );
        assert_eq!(
            verdict(&chain((MIB, None), (MIB, None), (MIB, None)), PLACED),
            (Node, Global, None),
            "no limit: a global OOM"
        );
        // A cgroup of its own inside the container, at its limit: the container's.
        let mut nested = vec![level(9, MIB, Some(MIB))];
        nested.extend(chain((2 * MIB, Some(full)), (2 * MIB, None), (2 * MIB, None)));
        assert_eq!(
            verdict(&nested, Placed { container: Some(1), pod: Some(2), known: true }),
            (Container, Memcg, Some(0))
        );
    }

    #[test]
    fn the_margin_holds_a_costly_charge_and_the_other_cpus_caches() {
        assert_eq!(margin(4096, 1), 8 * 4096);
        assert_eq!(margin(4096, 2), 72 * 4096);
        assert_eq!(margin(4096, 0), 8 * 4096, "no CPU count read: one");
    }

    /// The kernel's count of the OOMs each level ran is its word where it
    /// rose: a pod's limit that fired while its container sat within the
    /// margin of its own reads `pod`; a pod whose usage fell back past that
    /// margin by the time the victim was marked (the other CPUs' charge
    /// caches handed back late: on 6.18 each caches seven cgroups) reads
    /// `pod`, not a global OOM. A rise far from its limit is an OOM that
    /// killed nothing after an earlier kill: no word. Where nothing rose,
    /// the page counters judge every level; a level without a word inside
    /// the one that rose is judged by its page counters.
    #[test]
    fn the_level_the_kernel_ran_the_oom_killer_for_fired() {
        let margins = Margins { limit: MARGIN, risen: 4 * MIB };
        let verdict = |levels: &[MemcgUse], rose: &[Option<bool>]| {
            let j = judge(Read { levels, cut: false, decision: None, rose }, PLACED, margins);
            (j.fired.limit, j.fired.constraint, j.level, j.by_count)
        };
        use OomConstraint::{Global, Memcg};
        use OomLimit::{Container, Node, Pod};
        let (full, pod) = (32 * MIB, 48 * MIB);
        let at_both = chain((full - 4096, Some(full)), (pod, Some(pod)), (pod, None));
        assert_eq!(verdict(&at_both, &[]), (Container, Memcg, Some(0), false), "the page counters alone");
        let counted = [Some(false), Some(true), Some(false), Some(false)];
        assert_eq!(verdict(&at_both, &counted), (Pod, Memcg, Some(1), true));
        let drained = chain((MIB, Some(full)), (pod - 2 * MIB, Some(pod)), (pod, None));
        assert_eq!(verdict(&drained, &[]), (Node, Global, None, false));
        assert_eq!(verdict(&drained, &counted), (Pod, Memcg, Some(1), true));
        // No word on the container (found at start-up): its page counters.
        assert_eq!(verdict(&at_both, &[None, Some(true)]), (Container, Memcg, Some(0), false));
        assert_eq!(verdict(&drained, &[None, Some(true)]), (Pod, Memcg, Some(1), true));
        // The container's own limit; the node's allocatable.
        assert_eq!(verdict(&at_both, &[Some(true), Some(true)]), (Container, Memcg, Some(0), true));
        let allocatable = chain((MIB, Some(full)), (2 * MIB, Some(pod)), (900 * MIB - MIB, Some(900 * MIB)));
        assert_eq!(verdict(&allocatable, &[Some(false), Some(false), None, Some(true)]), (Node, Memcg, Some(3), true));
        // A container that ran OOMs that killed nothing since its last
        // kill, its memory freed since: the pod's rise is the word.
        let stale = [Some(true), Some(true), Some(false), Some(false)];
        assert_eq!(verdict(&drained, &stale), (Pod, Memcg, Some(1), true));
        // Nothing rose (a nested cgroup that rose was not among the levels
        // read; a group kill's later victim): the page counters, as
        // without counts — never a global OOM said by counts alone.
        let none = [Some(false); 4];
        assert_eq!(verdict(&at_both, &none), (Container, Memcg, Some(0), false));
        assert_eq!(verdict(&drained, &none), (Node, Global, None, false));
    }

    #[test]
    fn on_v1_memory_plus_swap_held_to_the_memory_limit_fires_as_the_memory_limit() {
        // runc under the CRI: memsw limit = memory limit; memsw is charged
        // first and is the counter at its limit (memory just under it).
        let mut levels = chain((40 * MIB, Some(48 * MIB)), (40 * MIB, Some(96 * MIB)), (40 * MIB, None));
        levels[0].memsw_usage_bytes = 48 * MIB;
        levels[0].memsw_limit_bytes = Some(48 * MIB);
        let j = judge(read(&levels, false, None), PLACED, MARGINS);
        assert_eq!((j.fired.limit, j.level), (OomLimit::Container, Some(0)));
    }

    #[test]
    fn unknown_only_without_counters_or_a_place_and_says_which() {
        assert_eq!(judge(read(&[], false, None), PLACED, MARGINS).unknown, Some(UnknownLimit::NoCounters));
        let levels = chain((48 * MIB, Some(48 * MIB)), (MIB, None), (MIB, None));
        let j = judge(read(&levels, false, None), Placed::default(), MARGINS);
        assert_eq!((j.fired, j.unknown), (Fired::UNKNOWN, Some(UnknownLimit::Unplaced)));
        // A global OOM needs no place.
        let global = chain((MIB, None), (MIB, None), (MIB, None));
        assert_eq!(
            judge(read(&global, false, None), Placed::default(), MARGINS).fired.constraint,
            OomConstraint::Global
        );
        // Cut short among a container's nested cgroups, none at its limit:
        // no global OOM can be said (a tenant nesting deep must not make its
        // own kills read as the node's).
        let nested = vec![level(9, MIB, None), level(8, MIB, None)];
        let j = judge(read(&nested, true, None), Placed::default(), MARGINS);
        assert_eq!((j.fired, j.unknown), (Fired::UNKNOWN, Some(UnknownLimit::NestedTooDeep)));
        // One of them at its limit fired, wherever the walk ended.
        let nested = vec![level(9, MIB, None), level(8, MIB, Some(MIB))];
        let j = judge(read(&nested, true, None), Placed { container: None, pod: None, known: false }, MARGINS);
        assert_eq!(j.unknown, Some(UnknownLimit::Unplaced), "at its limit, but not placed against the container");
    }

    /// Guards: the verdict taken from the task that ran the OOM killer.
    /// A runtime lowering a container's `memory.max` runs the kill inside
    /// its write: its own chain (the host's) is at no limit, and the
    /// counters alone read a node OOM that never happened.
    #[test]
    fn the_kernels_own_decision_names_the_cgroup_whatever_task_ran_the_kill() {
        let decided = |levels: &[MemcgUse], decision, placed| {
            let j = judge(read(levels, false, Some(decision)), placed, MARGINS);
            (j.fired.limit, j.fired.constraint, j.level, j.unknown)
        };
        // Lowered to 32 MiB under 64 MiB of use: the container's own limit,
        // though the usage is far past it.
        let lowered = chain((64 * MIB, Some(32 * MIB)), (64 * MIB, None), (64 * MIB, None));
        assert_eq!(
            decided(&lowered, KernelDecision::Memcg { cgroup_id: 1 }, PLACED),
            (OomLimit::Container, OomConstraint::Memcg, Some(0), None)
        );
        // The pod's: the levels start at the pod, the container is below.
        let pod = vec![level(2, 64 * MIB, Some(64 * MIB)), level(3, 64 * MIB, None), level(4, 64 * MIB, None)];
        let at_pod = Placed { container: None, pod: Some(0), known: true };
        assert_eq!(
            decided(&pod, KernelDecision::Memcg { cgroup_id: 2 }, at_pod),
            (OomLimit::Pod, OomConstraint::Memcg, Some(0), None)
        );
        // Above the pod: the kubelet's allocatable.
        let above = vec![level(4, 900 * MIB, Some(900 * MIB))];
        let beside = Placed { container: None, pod: None, known: true };
        assert_eq!(
            decided(&above, KernelDecision::Memcg { cgroup_id: 4 }, beside),
            (OomLimit::Node, OomConstraint::Memcg, Some(0), None)
        );
        // A cgroup a tenant nests below its container: the container's.
        let nested = vec![level(9, 32 * MIB, Some(32 * MIB)), level(1, 40 * MIB, Some(256 * MIB))];
        let below = Placed { container: Some(1), pod: None, known: true };
        assert_eq!(
            decided(&nested, KernelDecision::Memcg { cgroup_id: 9 }, below),
            (OomLimit::Container, OomConstraint::Memcg, Some(0), None)
        );
        // Global only where the kernel says so, whatever the counters read.
        let full = chain((48 * MIB, Some(48 * MIB)), (48 * MIB, None), (48 * MIB, None));
        assert_eq!(decided(&full, KernelDecision::Global, PLACED), (OomLimit::Node, OomConstraint::Global, None, None));
        assert_eq!(decided(&[], KernelDecision::Cpuset, PLACED), (OomLimit::Node, OomConstraint::Cpuset, None, None));
        assert_eq!(
            decided(&[], KernelDecision::MemoryPolicy, PLACED).1,
            OomConstraint::MemoryPolicy,
            "a memory policy's nodes"
        );
        // A memcg the kernel named that no known pod holds: unplaced.
        assert_eq!(
            decided(&lowered, KernelDecision::Memcg { cgroup_id: 1 }, Placed::default()).3,
            Some(UnknownLimit::Unplaced)
        );
        assert_eq!(
            decided(&[], KernelDecision::Memcg { cgroup_id: 1 }, PLACED),
            (OomLimit::Unknown, OomConstraint::Memcg, None, Some(UnknownLimit::NoCounters))
        );
    }

    #[test]
    fn above_a_pod_are_its_qos_class_and_the_kubelets_root() {
        assert_eq!(
            above_pod("/kubepods/burstable/pod1234"),
            vec!["/kubepods/burstable".to_string(), "/kubepods".to_string()]
        );
        assert_eq!(above_pod("/test/x/kubepods/pod1234"), vec!["/test/x/kubepods".to_string()]);
        assert_eq!(
            above_pod("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12.slice"),
            vec!["/kubepods.slice/kubepods-besteffort.slice".to_string(), "/kubepods.slice".to_string()]
        );
        assert!(above_pod("/system.slice/x").is_empty());
    }
}
