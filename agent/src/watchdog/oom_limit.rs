//! Which limit fired on an OOM kill: the container's, the pod's, or the
//! node's (a limit above the pods — the kubelet's allocatable — or none at
//! all: a global OOM, which means the kubelet's eviction did not keep up).
//!
//! The kernel's OOM tracepoint does not say; its OOM report does (in the
//! kernel log), and so do the cgroups' own counters of limit hits, read
//! right after the kill and compared with what they said before: on cgroup
//! v2 `memory.events.local`'s `oom` (only OOMs at that cgroup's own
//! limit), on v1 `memory.failcnt` (every time a charge failed at that
//! cgroup's limit, reclaim or not). The level whose count moved is the one
//! that fired. Where that cannot be known — a count that could not be read,
//! a cgroup gone before it was read, or on v1 both container and pod at
//! their limits — it is `unknown`, never a guess. Pure: the watchdog reads
//! the counters.

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

/// The kernel's OOM constraint, as far as cgroup counters tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum OomConstraint {
    /// A memory cgroup's limit (`CONSTRAINT_MEMCG`).
    Memcg,
    /// No cgroup's limit: the machine's memory (`CONSTRAINT_NONE`; an OOM
    /// constrained by a cpuset or a memory policy reads so too: cgroup
    /// counters do not tell them apart).
    Global,
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

/// How much a level's count of limit hits moved across the kill; `None`
/// when it could not be read then or before.
pub type Moved = Option<u64>;

/// Which limit fired, from how the counts of the victim's container, its
/// pod, and the cgroups above the pod (up to the kubelet's root) moved.
pub fn judge(container: Moved, pod: Moved, above: &[Moved]) -> Fired {
    let memcg = |limit| Fired { limit, constraint: OomConstraint::Memcg };
    match (container, pod) {
        (Some(c), Some(0)) if c > 0 => memcg(OomLimit::Container),
        (Some(0), Some(p)) if p > 0 => memcg(OomLimit::Pod),
        (Some(0), Some(0)) => {
            if above.iter().any(|m| m.is_some_and(|n| n > 0)) {
                memcg(OomLimit::Node)
            } else if above.iter().all(Option::is_some) {
                Fired { limit: OomLimit::Node, constraint: OomConstraint::Global }
            } else {
                Fired { limit: OomLimit::Node, constraint: OomConstraint::Unknown }
            }
        }
        // Both moved (v1: one at its limit reclaiming, the other out of
        // memory), or one could not be read.
        _ => Fired::UNKNOWN,
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

    #[test]
    fn the_level_whose_count_moved_fired() {
        use OomConstraint::{Global, Memcg};
        use OomLimit::{Container, Node, Pod};
        let f = |limit, constraint| Fired { limit, constraint };
        assert_eq!(judge(Some(1), Some(0), &[Some(0), Some(0)]), f(Container, Memcg));
        // v1's failcnt moves many times per hit.
        assert_eq!(judge(Some(27), Some(0), &[]), f(Container, Memcg));
        assert_eq!(judge(Some(0), Some(112), &[Some(0)]), f(Pod, Memcg));
        assert_eq!(judge(Some(0), Some(0), &[Some(0), Some(3)]), f(Node, Memcg), "the node's allocatable");
        assert_eq!(judge(Some(0), Some(0), &[Some(0), Some(0)]), f(Node, Global), "no limit: a global OOM");
        assert_eq!(judge(Some(0), Some(0), &[Some(0), None]), f(Node, OomConstraint::Unknown));
        assert_eq!(judge(Some(2), Some(5), &[Some(0)]), Fired::UNKNOWN, "both at their limits: not a guess");
        assert_eq!(judge(None, Some(0), &[Some(0)]), Fired::UNKNOWN, "the container's cgroup gone");
        assert_eq!(judge(Some(0), None, &[]), Fired::UNKNOWN);
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
