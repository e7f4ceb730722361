//! Who ended it: the senders of the signals that end pods' processes. The
//! kernel streams every signal that can end a pod's process, in its
//! sender's context (`events::kernel::Signal`); each is classified as it
//! comes, by the sender's place and by the runtime's processes, never by a
//! name, and kept for its target until that process ends. A process that
//! ends by a signal then says who sent it: the OOM killer, the kernel (a
//! fault, a limit), its own container, its pod, another pod, the runtime,
//! another host process (with its systemd unit), or unknown; and where
//! the same sender asked it to stop first (a SIGTERM, then a SIGKILL), how
//! long the grace lasted. No I/O: the host's cgroup paths come from the
//! cgroup records, the runtime's processes from the runtime's side.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::{
    events::{
        kernel::{SenderPlace, Signal, SignalOrigin},
        ExitStatus,
    },
    model::{cgroup_path, registry::CgroupOwner, Names, PodRef, PodRegistry, TaskKey},
};

/// Who sent the signal that ended a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Sender {
    /// The OOM killer picked it.
    OomKiller,
    /// The kernel on its own: a fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE), a
    /// CPU or file size limit, its PID namespace's init gone, a broken pipe,
    /// a timer the process set (whichever task ran when it fired).
    Kernel,
    /// A process of the same container (the process itself included).
    SameContainer,
    /// A process of another container of the same pod (a shared process
    /// namespace).
    SamePod,
    /// A process of another pod.
    OtherPod,
    /// The container runtime's own processes (its shim, runc): a stop.
    Runtime,
    /// Any other host process.
    Host,
    /// Not known: no record of the signal (lost, or sent before the agent
    /// started), a sender the kernel's task table had lost, or a file's
    /// I/O notice (`O_ASYNC`: whoever set the file's owner chose the
    /// process, unseen; whoever did the I/O only fired it).
    Unknown,
}

/// Signals the kernel raises with a positive code of its own in the
/// process they are about: faults (SIGILL, SIGTRAP, SIGBUS, SIGFPE,
/// SIGSEGV), a child's change (SIGCHLD), a seccomp kill (SIGSYS).
const FAULT_OR_CHILD: [u32; 7] = [4, 5, 7, 8, 11, 17, 31];
/// SIGIO (SIGPOLL).
const SIGIO: u32 = 29;

/// How long before its SIGKILL a request to stop can have come.
const STOP_WINDOW_NS: u64 = 3600 * 1_000_000_000;

/// Whether `sig` can be a request to stop (a container's STOPSIGNAL is any
/// signal its image names: SIGTERM, SIGQUIT for nginx, SIGWINCH for httpd,
/// SIGRTMIN+3 for systemd), but not those that say something else: a
/// reload or hang-up (SIGHUP), a user's (SIGUSR1, SIGUSR2), a child's, a
/// resumption, urgent data, I/O, a timer's.
fn asks_to_stop(sig: u32) -> bool {
    !matches!(sig, 1 | 10 | 12 | 14 | 17 | 18 | 23 | 26 | 27 | 29)
}

/// The kernel's SIGKILL to every process of a PID namespace whose init
/// died, which runs in the dying init: in a pod that shares its process
/// namespace, the pod's sandbox (`kill -TERM 1` from any container ends
/// it). Not the kernel's verdict: the sandbox's death, by its place (the
/// pod's own), the init as the sending process. The init's exit has
/// dropped it from the kernel's task table by then: its place reads as a
/// host task's, in the sandbox's cgroup. The sandbox's cgroup, if so.
fn ends_a_pid_namespace(s: &Signal, registry: &PodRegistry) -> Option<u64> {
    if s.origin != SignalOrigin::Priv || s.sig != SIGKILL || s.sender_tgid == s.target_tgid {
        return None;
    }
    let (SenderPlace::Tracked(from) | SenderPlace::Host(from)) = s.sender else { return None };
    let pod = match s.target_cgroup_id.and_then(|id| registry.owner(id)) {
        Some(CgroupOwner::Pod { pod_uid } | CgroupOwner::Container { pod_uid, .. }) => pod_uid,
        None => return None,
    };
    let sandbox = registry.sandbox(pod).and_then(|s| s.sandbox_container.as_ref()).map(|c| c.cgroup_id);
    (sandbox == Some(from)).then_some(from)
}

/// A file's I/O notice: `fcntl(F_SETOWN)` names the process and
/// `F_SETSIG` any signal, SIGKILL included, which the kernel then sends
/// with a `POLL_*` code (1 to 6), or plain SIGIO from its private siginfo,
/// in whatever task does I/O on the file (the runtime writing a
/// container's stdin, say). Neither the kernel's verdict nor that task's.
fn is_io_notice(sig: u32, origin: SignalOrigin) -> bool {
    match origin {
        SignalOrigin::Info(code) => (1..=6).contains(&code) && !FAULT_OR_CHILD.contains(&sig),
        SignalOrigin::Priv => sig == SIGIO,
        SignalOrigin::NoInfo | SignalOrigin::Kernel(_) => false,
    }
}

/// How a process ended by a signal, and who sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalEnd {
    pub sender: Sender,
    pub signal: u8,
    /// The sending process, where a process sent it.
    pub pid: Option<u32>,
    pub comm: Option<String>,
    /// A pod's process: its pod and container, and their names.
    pub pod: Option<(PodRef, Names)>,
    /// A host process's systemd unit (the innermost `.service` or
    /// `.scope` of its cgroup path), where it has one.
    pub unit: Option<String>,
    /// The same sender asked it to stop before it killed it.
    pub stop: Option<Stop>,
}

impl SignalEnd {
    /// An end by `signal` whose sender names no process (the OOM killer's,
    /// or one no record says).
    fn unnamed(sender: Sender, signal: u8) -> Self {
        Self { sender, signal, pid: None, comm: None, pod: None, unit: None, stop: None }
    }
}

/// A stop past its grace period: the signal that asked first, and how
/// long before the kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    pub signal: u8,
    pub grace_ns: u64,
}

/// The container runtime's processes, as its side knows them: their pids
/// and cgroups (the host's view of the path).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimePlace {
    pub pids: HashSet<u32>,
    pub cgroups: Vec<String>,
}

impl RuntimePlace {
    /// A process of the runtime, or in its cgroup (its shims and runc run
    /// there) or below it. The root cgroup is nobody's place: a runtime
    /// there is known by its own pid only.
    fn holds(&self, tgid: u32, path: Option<&str>) -> bool {
        self.pids.contains(&tgid)
            || path.is_some_and(|p| {
                self.cgroups
                    .iter()
                    .filter(|r| !r.is_empty() && r.as_str() != "/")
                    .any(|r| p.strip_prefix(r.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/')))
            })
    }
}

/// Signals kept per process, at most: the first of each kind of request
/// and the one that ends it come early.
const PER_PROCESS: usize = 8;
/// Processes with signals waiting for their end, at most; when full, the
/// oldest a pod's signal kept goes first, then the oldest kept by the
/// runtime's, a host's or the kernel's (counted).
const MAX_PENDING: usize = 4096;
/// Processes kept by one pod's signals, at most: a pod signalling
/// processes that live on (handled, or another container's) keeps no
/// more; beyond it its signals to other processes are forgotten (counted).
const PER_POD_PENDING: usize = MAX_PENDING / 16;
/// The one share of pod tasks the agent cannot place.
const UNPLACED: &str = "unplaced";
/// A signal that ended nothing is forgotten after this long: a stop's
/// grace rarely lasts longer.
const PENDING_TTL_NS: u64 = 15 * 60 * 1_000_000_000;
/// Host cgroups whose paths are kept (for the units of senders), at most.
const MAX_HOST_CGROUPS: usize = 4096;
/// Distinct systemd units named in the metrics' `unit` label, at most;
/// later ones read `other`.
pub const MAX_UNIT_LABELS: usize = 16;

const SIGKILL: u32 = 9;

/// One signal as it came, classified.
#[derive(Debug, Clone)]
struct Sent {
    ts_ns: u64,
    sig: u32,
    /// It was delivered (not dropped by the target).
    delivered: bool,
    sender: Sender,
    /// Which sender, for "the same sender": its container's cgroup, or a
    /// host process's cgroup (the runtime's are all one).
    place: u64,
    pid: Option<u32>,
    comm: Option<String>,
    pod: Option<(PodRef, Names)>,
    unit: Option<String>,
}

#[derive(Debug, Default)]
struct Pending {
    signals: Vec<Sent>,
    /// The OOM killer picked it.
    oom: bool,
    since_ns: u64,
    /// The pod whose signal made it kept (none: the runtime, a host
    /// process, the kernel).
    by_pod: Option<Box<str>>,
}

/// The signals of live processes, and what classifies their senders.
#[derive(Debug, Default)]
pub struct Senders {
    pending: HashMap<TaskKey, Pending>,
    /// Keys by when they were first kept, oldest first (stale entries of
    /// ended processes are skipped): those a pod's signal made, and the
    /// others.
    order_pods: VecDeque<(TaskKey, u64)>,
    order: VecDeque<(TaskKey, u64)>,
    /// Processes kept per pod whose signal made them kept.
    per_pod: HashMap<Box<str>, usize>,
    /// Host cgroups' paths, by id.
    host_paths: HashMap<u64, Box<str>>,
    /// Processes forgotten because the table was full, since start.
    pub evicted: u64,
    /// Signals not kept because their process's record was full of
    /// others that outrank them, since start.
    pub dropped: u64,
    /// Host cgroups not kept because their table was full, since start.
    pub host_cgroups_refused: u64,
}

impl Senders {
    /// A cgroup appeared: a host cgroup's path is kept for the units of
    /// its processes.
    pub fn cgroup_created(&mut self, cgroup_id: u64, path: &str) {
        if cgroup_path::parse(path).is_some() || cgroup_path::nested(path) {
            return;
        }
        if self.host_paths.len() >= MAX_HOST_CGROUPS && !self.host_paths.contains_key(&cgroup_id) {
            self.host_cgroups_refused += 1;
            return;
        }
        self.host_paths.insert(cgroup_id, path.into());
    }

    pub fn cgroup_removed(&mut self, cgroup_id: u64) {
        self.host_paths.remove(&cgroup_id);
    }

    /// A signal that can end a pod's process: classified now (its sender
    /// may be gone by the end), kept until its target ends.
    pub fn signal(&mut self, s: &Signal, registry: &PodRegistry, runtime: Option<&RuntimePlace>) {
        let sent = self.classify(s, registry, runtime);
        let key = TaskKey::new(s.target_tgid, s.target_start_ns);
        let by_pod = self.share_of(s, &sent, registry);
        let known = self.pending.contains_key(&key);
        if !known && by_pod.is_some_and(|uid| self.per_pod.get(uid).is_some_and(|&n| n >= PER_POD_PENDING)) {
            self.evicted += 1;
            return;
        }
        if known && by_pod.is_none() {
            self.vouch(key, s.ts_ns);
        }
        // A share is kept with a new entry only.
        let pending = self.pending_of(key, s.ts_ns, if known { None } else { by_pod.map(Box::from) });
        if pending.signals.len() < PER_PROCESS {
            pending.signals.push(sent);
            return;
        }
        // A full record: a kill, or a host's or the runtime's signal, takes
        // the place of the oldest that is neither (a tenant can have its
        // processes sent handled signals as fast as it likes, or the kernel
        // send them notices); what came from outside the container takes
        // that of the oldest the container sent itself. Else it is dropped.
        // A record full of trusted senders' signals (a host agent's handled
        // SIGUSR1 every minute) still takes a kill and the runtime's stop:
        // in the place of the oldest host's, else of the runtime's own
        // oldest request; a kill never goes for want of room.
        let trusted = |s: &Sent| matches!(s.sender, Sender::Runtime | Sender::Host);
        let oldest =
            |signals: &[Sent], keep: &dyn Fn(&Sent) -> bool| signals.iter().position(|s| s.sig != SIGKILL && !keep(s));
        let room = if sent.sig == SIGKILL || trusted(&sent) {
            let runtime = |s: &Sent| s.sender == Sender::Runtime;
            oldest(&pending.signals, &trusted).or_else(|| oldest(&pending.signals, &runtime)).or_else(|| {
                (sent.sig == SIGKILL || runtime(&sent)).then(|| oldest(&pending.signals, &|_| false)).flatten()
            })
        } else if sent.sender != Sender::SameContainer {
            pending.signals.iter().position(|s| s.sender == Sender::SameContainer && s.sig != SIGKILL)
        } else {
            None
        };
        match room {
            Some(i) => {
                pending.signals.remove(i);
                pending.signals.push(sent);
            }
            None => self.dropped += 1,
        }
    }

    /// The OOM killer picked process `key` (its SIGKILL came before).
    pub fn oom_victim(&mut self, key: TaskKey, ts_ns: u64) {
        if self.pending.contains_key(&key) {
            self.vouch(key, ts_ns);
        }
        self.pending_of(key, ts_ns, None).oom = true;
    }

    /// A trusted sender (the runtime, a host process, the OOM killer)
    /// signalled process `key`, kept already: its entry is no pod's any
    /// more, and lives its time from now (a sidecar's handled signal long
    /// ago neither takes the runtime's stop with it, nor makes it a pod's
    /// to forget first).
    fn vouch(&mut self, key: TaskKey, ts_ns: u64) {
        let Some(pending) = self.pending.get_mut(&key) else { return };
        pending.since_ns = ts_ns;
        if let Some(uid) = pending.by_pod.take() {
            self.release_share(&uid);
        }
        self.order.push_back((key, ts_ns));
    }

    /// One entry less in pod `uid`'s share.
    fn release_share(&mut self, uid: &str) {
        if let Some(n) = self.per_pod.get_mut(uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_pod.remove(uid);
            }
        }
    }

    /// Process `key` ended with `status`; `oom`: the pod model says the
    /// OOM killer took it (or its container's start). Who ended it, if a
    /// signal did.
    pub fn exit(&mut self, key: TaskKey, status: ExitStatus, oom: bool) -> Option<SignalEnd> {
        let pending = self.forget(&key);
        let ExitStatus::Signal { signo, .. } = status else { return None };
        let pending = pending.unwrap_or_default();
        if oom || pending.oom {
            return Some(SignalEnd::unnamed(Sender::OomKiller, signo));
        }
        let sig = u32::from(signo);
        // The last one delivered names the ender: an earlier one of the
        // same number found the signal handled, or blocked, and ended
        // nothing (a SIGKILL after the first finds the process dying, and
        // is not delivered).
        let Some(ender) = pending.signals.iter().rev().find(|s| s.sig == sig && s.delivered) else {
            return Some(SignalEnd::unnamed(Sender::Unknown, signo));
        };
        // A SIGKILL after the same sender's request to stop: the request
        // was not heeded within its grace. The request is its last signal
        // that can ask a process to stop, within the hour before the kill:
        // a unit's SIGHUP (a reload) hours earlier is no start of a grace.
        let stop = (sig == SIGKILL && !matches!(ender.sender, Sender::Kernel | Sender::Unknown))
            .then(|| {
                pending.signals.iter().rev().find(|s| {
                    s.sig != SIGKILL
                        && asks_to_stop(s.sig)
                        && s.ts_ns <= ender.ts_ns
                        && ender.ts_ns - s.ts_ns <= STOP_WINDOW_NS
                        && s.sender == ender.sender
                        && s.place == ender.place
                })
            })
            .flatten()
            .map(|first| Stop {
                signal: u8::try_from(first.sig).unwrap_or(u8::MAX),
                grace_ns: ender.ts_ns.saturating_sub(first.ts_ns),
            });
        Some(SignalEnd {
            sender: ender.sender,
            signal: signo,
            pid: ender.pid,
            comm: ender.comm.clone(),
            pod: ender.pod.clone(),
            unit: ender.unit.clone(),
            stop,
        })
    }

    /// Forgets the signals of processes that lived on.
    pub fn expire(&mut self, now_ns: u64) {
        for pods in [true, false] {
            loop {
                let order = if pods { &mut self.order_pods } else { &mut self.order };
                let Some(&(key, since)) = order.front() else { break };
                if now_ns.saturating_sub(since) < PENDING_TTL_NS {
                    break;
                }
                order.pop_front();
                if self.pending.get(&key).is_some_and(|p| p.since_ns == since) {
                    self.forget(&key);
                }
            }
        }
    }

    /// Drops process `key`'s entry, and its count in its pod's share.
    fn forget(&mut self, key: &TaskKey) -> Option<Pending> {
        let pending = self.pending.remove(key)?;
        if let Some(uid) = pending.by_pod.as_deref() {
            self.release_share(uid);
        }
        Some(pending)
    }

    /// Processes whose signals are kept.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Process `key`'s entry; a new one is kept for `by_pod` (none: a
    /// trusted sender's), making room in a full table.
    fn pending_of(&mut self, key: TaskKey, ts_ns: u64, by_pod: Option<Box<str>>) -> &mut Pending {
        if !self.pending.contains_key(&key) {
            while self.pending.len() >= MAX_PENDING {
                // Pods' entries go first: a flood of them never costs the
                // runtime's request to stop another pod's container.
                let Some((old, since)) = self.order_pods.pop_front().or_else(|| self.order.pop_front()) else {
                    break;
                };
                if self.pending.get(&old).is_some_and(|p| p.since_ns == since) {
                    self.forget(&old);
                    self.evicted += 1;
                }
            }
            // The orders keep the keys of processes that ended since: once
            // they hold more of those than live ones, only the live stay.
            if self.order.len() + self.order_pods.len() >= 2 * MAX_PENDING {
                let pending = &self.pending;
                let live = |(k, since): &(TaskKey, u64)| pending.get(k).is_some_and(|p| p.since_ns == *since);
                self.order.retain(live);
                self.order_pods.retain(live);
            }
            match &by_pod {
                Some(uid) => {
                    *self.per_pod.entry(uid.clone()).or_default() += 1;
                    self.order_pods.push_back((key, ts_ns));
                }
                None => self.order.push_back((key, ts_ns)),
            }
            self.pending.insert(key, Pending { signals: Vec::new(), oom: false, since_ns: ts_ns, by_pod });
        }
        // The entry is there: found, or just inserted.
        self.pending.entry(key).or_default()
    }

    /// Whose share of the table an entry made by `s` (classified `sent`)
    /// takes: a pod task's signals are its pod's, by the task's place,
    /// whatever they are taken for; the kernel's own notices (a timer's:
    /// the task it ran under is whichever was on the CPU) are the target's
    /// pod's. Pod tasks the agent cannot place share one. None for
    /// a host process's (the runtime's among them).
    fn share_of<'r>(&self, s: &Signal, sent: &Sent, registry: &'r PodRegistry) -> Option<&'r str> {
        let pod_of = |id: u64| match registry.owner(id).or_else(|| registry.tombstone(id).map(|t| &t.owner)) {
            Some(CgroupOwner::Pod { pod_uid } | CgroupOwner::Container { pod_uid, .. }) => pod_uid.as_str(),
            None => UNPLACED,
        };
        if sent.sender == Sender::Kernel {
            return Some(s.target_cgroup_id.map_or(UNPLACED, pod_of));
        }
        match s.sender {
            SenderPlace::Host(_) => None,
            SenderPlace::Tracked(id) if registry.owner(id).is_none() && self.host_paths.contains_key(&id) => None,
            SenderPlace::Tracked(id) => Some(pod_of(id)),
            SenderPlace::Lost => Some(UNPLACED),
        }
    }

    fn classify(&self, s: &Signal, registry: &PodRegistry, runtime: Option<&RuntimePlace>) -> Sent {
        let delivered =
            s.result == agent_common::signal_result::DELIVERED || s.result == agent_common::signal_result::LOSE_INFO;
        let mut sent = Sent {
            ts_ns: s.ts_ns,
            sig: s.sig,
            delivered,
            sender: Sender::Unknown,
            place: 0,
            pid: None,
            comm: None,
            pod: None,
            unit: None,
        };
        // The kernel's own: a siginfo it made (positive codes, SI_KERNEL;
        // user space may send those only to itself; a timer's notice, which
        // the program tells from a syscall's copy), its private one; and a
        // kernel path acting for the target itself (SIGPIPE, SIGXFSZ).
        // Those never name their sender, whichever task ran them. A
        // negative code in a siginfo a syscall copied (`rt_sigqueueinfo`
        // lets anyone send a timer's or a queue's code to anyone) is its
        // sender's, named, wherever it runs.
        if is_io_notice(s.sig, s.origin) {
            return sent;
        }
        let pid_namespace_end = ends_a_pid_namespace(s, registry);
        let by_kernel = match s.origin {
            SignalOrigin::Priv => pid_namespace_end.is_none(),
            SignalOrigin::Kernel(_) => true,
            SignalOrigin::Info(code) => code > 0,
            SignalOrigin::NoInfo => s.sender_tgid == s.target_tgid,
        };
        if by_kernel {
            sent.sender = Sender::Kernel;
            return sent;
        }
        sent.pid = Some(s.sender_tgid);
        sent.comm = (!s.sender_comm.is_empty()).then(|| s.sender_comm.clone());
        // The kernel tracks a new cgroup from its mkdir until the agent
        // places it: one that turned out to be the host's is the host's.
        let place = match s.sender {
            _ if pid_namespace_end.is_some() => pid_namespace_end.map_or(s.sender, SenderPlace::Tracked),
            SenderPlace::Tracked(id) if registry.owner(id).is_none() && self.host_paths.contains_key(&id) => {
                SenderPlace::Host(id)
            }
            place => place,
        };
        match place {
            SenderPlace::Lost => {}
            SenderPlace::Tracked(from) => {
                sent.place = from;
                let target = s.target_cgroup_id.and_then(|id| registry.owner(id));
                let sender = registry.owner(from).or_else(|| registry.tombstone(from).map(|t| &t.owner));
                let pod_of = |o: &CgroupOwner| match o {
                    CgroupOwner::Pod { pod_uid } | CgroupOwner::Container { pod_uid, .. } => pod_uid.clone(),
                };
                let container_of = |o: &CgroupOwner| match o {
                    CgroupOwner::Container { container_id, .. } => Some(container_id.clone()),
                    CgroupOwner::Pod { .. } => None,
                };
                if let Some(owner) = sender {
                    let (pod_uid, container_id) = (pod_of(owner), container_of(owner));
                    let qos = registry.sandbox(&pod_uid).map(|s| s.qos);
                    let names = registry.names(&pod_uid, container_id.as_deref());
                    // A container is its pod's: ids are compared within it.
                    sent.sender = match target {
                        Some(_) if s.target_cgroup_id == Some(from) => Sender::SameContainer,
                        Some(t)
                            if pod_of(t) == pod_uid && container_of(t).is_some() && container_of(t) == container_id =>
                        {
                            Sender::SameContainer
                        }
                        Some(t) if pod_of(t) == pod_uid => Sender::SamePod,
                        Some(_) => Sender::OtherPod,
                        None => Sender::Unknown,
                    };
                    sent.pod = Some((PodRef { pod_uid, qos, container_id }, names));
                }
            }
            SenderPlace::Host(cgroup_id) => {
                sent.place = cgroup_id;
                let path = self.host_paths.get(&cgroup_id).map(AsRef::as_ref);
                if runtime.is_some_and(|r| r.holds(s.sender_tgid, path)) {
                    // The runtime's processes are one sender: its shim and
                    // each runc it runs are others' pids.
                    sent.sender = Sender::Runtime;
                    sent.place = 0;
                } else {
                    sent.sender = Sender::Host;
                    sent.unit = path.and_then(unit_of).map(str::to_string);
                }
            }
        }
        sent
    }
}

/// The systemd unit a cgroup path is in: its innermost `.service` or
/// `.scope` component.
pub fn unit_of(path: &str) -> Option<&str> {
    path.rsplit('/').find(|c| {
        [".service", ".scope"].iter().any(|suffix| c.strip_suffix(suffix).is_some_and(|name| !name.is_empty()))
    })
}

/// The bounded `unit` label of host senders: a service's name, for the
/// first [`MAX_UNIT_LABELS`] services seen (`other` beyond); `scope` for
/// a transient unit (a login session, a runtime's scope: their names never
/// repeat); `none` without a unit (or where the sender's cgroup was not
/// known). Empty for senders that are not host processes.
#[derive(Debug, Default)]
pub struct UnitLabels {
    named: HashSet<String>,
}

impl UnitLabels {
    pub fn label(&mut self, end: &SignalEnd) -> String {
        if end.sender != Sender::Host {
            return String::new();
        }
        match end.unit.as_deref() {
            Some(u) if u.ends_with(".scope") => "scope".into(),
            Some(u) if self.named.contains(u) => u.into(),
            Some(u) if self.named.len() < MAX_UNIT_LABELS => {
                self.named.insert(u.to_string());
                u.into()
            }
            Some(_) => "other".into(),
            None => "none".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_is_the_innermost_service_or_scope_of_the_path() {
        assert_eq!(unit_of("/system.slice/kubelet.service"), Some("kubelet.service"));
        assert_eq!(unit_of("/system.slice/containerd.service/shims"), Some("containerd.service"));
        assert_eq!(unit_of("/user.slice/user-0.slice/session-3.scope"), Some("session-3.scope"));
        assert_eq!(unit_of("/system.slice"), None);
        assert_eq!(unit_of("/"), None);
        assert_eq!(unit_of("/a/.service"), None, "a name, not a suffix alone");
    }

    /// Guards: a runtime at the root cgroup (no systemd) making every host
    /// process at the root its own: there it is known by its pid only.
    #[test]
    fn the_runtimes_place_is_its_cgroup_and_below_never_the_root() {
        let place = RuntimePlace {
            pids: HashSet::from([500]),
            cgroups: vec!["/system.slice/containerd.service".into(), "/".into()],
        };
        assert!(place.holds(600, Some("/system.slice/containerd.service")));
        assert!(place.holds(600, Some("/system.slice/containerd.service/shim")));
        assert!(!place.holds(600, Some("/system.slice/containerd.service2")));
        assert!(!place.holds(600, Some("/")), "the root is nobody's place");
        assert!(!place.holds(600, None));
        assert!(place.holds(500, None));
    }

    /// Guards: the table of live processes' signals growing with every
    /// process a tenant signals and that lives on.
    #[test]
    fn the_tables_are_bounded_and_what_they_forget_is_counted() {
        let mut senders = Senders::default();
        for pid in 0..(MAX_PENDING as u32 + 10) {
            senders.oom_victim(TaskKey::new(pid, 1), u64::from(pid));
        }
        assert_eq!(senders.pending(), MAX_PENDING);
        assert_eq!(senders.evicted, 10);
        // The oldest went: its end says unknown, not oom_killer.
        let end = senders.exit(TaskKey::new(0, 1), ExitStatus::Signal { signo: 9, core_dumped: false }, false);
        assert_eq!(end.map(|e| e.sender), Some(Sender::Unknown));
        let end = senders.exit(TaskKey::new(20, 1), ExitStatus::Signal { signo: 9, core_dumped: false }, false);
        assert_eq!(end.map(|e| e.sender), Some(Sender::OomKiller));
        senders.expire(u64::MAX);
        assert_eq!(senders.pending(), 0, "forgotten after their time");
        // A kill storm: every process signalled ends at once. What orders
        // the table stays as small as the table, long before the TTL.
        for pid in 0..100_000u32 {
            senders.oom_victim(TaskKey::new(pid, 2), 1);
            senders.exit(TaskKey::new(pid, 2), ExitStatus::Signal { signo: 9, core_dumped: false }, false);
        }
        assert!(senders.order.len() <= 2 * MAX_PENDING, "{} keys kept for none", senders.order.len());
    }

    /// Guards: an entry a pod's signal made (a sidecar's handled SIGHUP
    /// to its main process) staying a pod's when the runtime's stop joined
    /// it: a full table of other pods' entries forgot it first.
    #[test]
    fn an_entry_the_runtime_joined_is_no_pods_to_forget_first() {
        let mut senders = Senders::default();
        let victim = TaskKey::new(1, 1);
        senders.pending_of(victim, 0, Some("pod-c".into()));
        senders.vouch(victim, 1);
        assert!(senders.per_pod.is_empty(), "pod c's count follows");
        for pid in 0..MAX_PENDING as u32 {
            senders.pending_of(TaskKey::new(1_000 + pid, 1), 2, Some(format!("tenant-{}", pid % 16).into()));
        }
        assert!(senders.pending.contains_key(&victim), "the entry holding the runtime's stop stays");
        assert_eq!(senders.per_pod.values().sum::<usize>(), MAX_PENDING - 1);
    }

    /// Guards: a full table forgetting the runtime's request to stop a
    /// container because pods' signals (many pods, each within its share)
    /// came after it.
    #[test]
    fn a_full_table_forgets_pods_entries_before_the_runtimes() {
        let mut senders = Senders::default();
        senders.pending_of(TaskKey::new(1, 1), 0, None);
        for pid in 0..MAX_PENDING as u32 {
            senders.pending_of(TaskKey::new(1_000 + pid, 1), 1, Some(format!("pod-{}", pid % 32).into()));
        }
        assert_eq!((senders.pending(), senders.evicted), (MAX_PENDING, 1));
        assert!(senders.pending.contains_key(&TaskKey::new(1, 1)), "the runtime's entry stays");
        assert!(!senders.pending.contains_key(&TaskKey::new(1_000, 1)), "the oldest pod's entry went");
        assert_eq!(senders.per_pod.values().sum::<usize>(), MAX_PENDING - 1, "each pod's count follows its entries");
        for id in 0..(MAX_HOST_CGROUPS as u64 + 3) {
            senders.cgroup_created(id, &format!("/system.slice/s{id}.service"));
        }
        assert_eq!(senders.host_cgroups_refused, 3);
        senders.cgroup_created(9, "/kubepods/burstable/pod0c9e8d7f-6a5b-4c3d-9e2f-1a0b9c8d7e6f");
        assert_eq!(senders.host_paths.len(), MAX_HOST_CGROUPS, "a pod's cgroup is no host's");
    }
}
