//! Events of the container runtime, as the watchdog takes them: what
//! containerd's event stream (and a container record read for its names)
//! says, and the CRI's listings of pods and containers, independent of the
//! wire format they came in.

/// A pod sandbox as the runtime lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodMeta {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The sandbox's id, which is also its (pause) container's id.
    pub sandbox_id: String,
    /// Its workload, from its labels; `None` where the runtime gave none.
    pub workload: Option<Workload>,
}

/// What a pod belongs to, as its controller labelled it
/// (`runtime::workload` reads it off the labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumIter)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    CronJob,
    Job,
    Pod,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub name: String,
}

/// A container as the runtime lists it; sandboxes are listed as their
/// own containers too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerMeta {
    pub id: String,
    pub name: String,
    pub pod_uid: String,
    pub sandbox: bool,
}

/// One complete listing of the runtime.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub pods: Vec<PodMeta>,
    pub containers: Vec<ContainerMeta>,
}

/// Container name given to a sandbox's own container (cAdvisor's word).
pub const SANDBOX_CONTAINER_NAME: &str = "POD";

/// One runtime event; times are the runtime's wall clock (ns since epoch)
/// at which containerd published it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeEvent {
    /// runc created a container's init (its pid), before it runs the
    /// container's program: the init is named from here on.
    TaskCreate {
        container_id: String,
        pid: u32,
        published_ns: u64,
    },
    /// A container's init started (its pid is the container's init).
    TaskStart {
        container_id: String,
        pid: u32,
        published_ns: u64,
    },
    /// A task's process exited; `exec_id` is empty or the container id for
    /// the init, another id for an exec'd process.
    TaskExit {
        container_id: String,
        exec_id: String,
        pid: u32,
        exit_status: u32,
        published_ns: u64,
    },
    TaskOom {
        container_id: String,
        published_ns: u64,
    },
    TaskDelete {
        container_id: String,
        pid: u32,
        published_ns: u64,
    },
    ContainerCreate {
        container_id: String,
        published_ns: u64,
    },
    ContainerDelete {
        container_id: String,
        published_ns: u64,
    },
    /// A container's record changed: for a CRI `UpdateContainerResources`
    /// (a pod resized in place), before runc writes its new limits.
    ContainerUpdate {
        container_id: String,
        published_ns: u64,
    },
    /// The CRI's names of a container just created, read from its record
    /// (a sandbox that fails to start is never listed by the CRI).
    ContainerNamed(Snapshot),
    /// The CRI's status of a container whose init ended, as asked for
    /// (`ContainerStatus`): its reason and exit code, what the kubelet
    /// reports; `exited` false where it never said it had exited.
    ContainerStatus {
        container_id: String,
        exited: bool,
        reason: String,
        exit_code: i32,
    },
}

/// The containerd topics followed: the label of
/// `sandwatch_runtime_events_total{topic}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Topic {
    TaskCreate,
    TaskStart,
    TaskExit,
    TaskOom,
    TaskDelete,
    ContainerCreate,
    ContainerDelete,
    ContainerUpdate,
}

impl Topic {
    /// containerd's name of the topic.
    pub fn path(self) -> &'static str {
        match self {
            Topic::TaskCreate => "/tasks/create",
            Topic::TaskStart => "/tasks/start",
            Topic::TaskExit => "/tasks/exit",
            Topic::TaskOom => "/tasks/oom",
            Topic::TaskDelete => "/tasks/delete",
            Topic::ContainerCreate => "/containers/create",
            Topic::ContainerDelete => "/containers/delete",
            Topic::ContainerUpdate => "/containers/update",
        }
    }

    pub fn from_path(path: &str) -> Option<Self> {
        <Self as strum::IntoEnumIterator>::iter().find(|t| t.path() == path)
    }
}

impl RuntimeEvent {
    /// The topic it came with (names are what a create's record said);
    /// `None` for what the CRI answered.
    pub fn topic(&self) -> Option<Topic> {
        Some(match self {
            RuntimeEvent::TaskCreate { .. } => Topic::TaskCreate,
            RuntimeEvent::TaskStart { .. } => Topic::TaskStart,
            RuntimeEvent::TaskExit { .. } => Topic::TaskExit,
            RuntimeEvent::TaskOom { .. } => Topic::TaskOom,
            RuntimeEvent::TaskDelete { .. } => Topic::TaskDelete,
            RuntimeEvent::ContainerCreate { .. } | RuntimeEvent::ContainerNamed(_) => Topic::ContainerCreate,
            RuntimeEvent::ContainerDelete { .. } => Topic::ContainerDelete,
            RuntimeEvent::ContainerUpdate { .. } => Topic::ContainerUpdate,
            RuntimeEvent::ContainerStatus { .. } => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Label as _;

    #[test]
    fn topics_have_a_path_and_a_label_each() {
        use strum::IntoEnumIterator as _;
        for topic in Topic::iter() {
            assert_eq!(Topic::from_path(topic.path()), Some(topic));
            let (noun, verb) = topic.path()[1..].split_once('/').unwrap();
            assert_eq!(topic.label(), format!("{}_{verb}", noun.trim_end_matches('s')));
        }
        assert_eq!(Topic::from_path("/snapshot/prepare"), None);
    }
}
