//! The container runtime's own processes, seen from the kernel: a crash is
//! the runtime's main process ending with Go's panic status (2) or a fatal
//! signal; a restart is a new process after it went down. Exits come from
//! the kernel exit stream, live processes from periodic /proc scans (the
//! watchdog's host reads them). No I/O here.
//!
//! A name is not an identity: anyone can name a process `containerd`. A
//! runtime is a process of that name *outside every pod's cgroup*; and
//! where the runtime's socket is known, the process at its other end (its
//! peer credentials) is the runtime, and no other of that name is.

use std::collections::{HashMap, HashSet};

use crate::events::ExitStatus;
use crate::model::ExitReason;

/// How a runtime process ended without being asked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum CrashReason {
    /// Go exits 2 on a panic or a fatal runtime error (a SIGSEGV included).
    Panic,
    /// Another non-zero exit code.
    ExitCode,
    /// SIGKILL.
    Killed,
    /// A signal that means a fault (SEGV, BUS, ABRT, ILL, FPE, SYS, TRAP, QUIT).
    FatalSignal,
    /// Any other signal that is not a request to stop.
    Signal,
}

/// Why a runtime process ended, when it was not asked to stop.
pub fn crash_reason(status: ExitStatus) -> Option<CrashReason> {
    match status {
        ExitStatus::Code(0) => None,
        ExitStatus::Code(2) => Some(CrashReason::Panic),
        ExitStatus::Code(_) => Some(CrashReason::ExitCode),
        ExitStatus::Signal { .. } => {
            use ExitReason::*;
            match ExitReason::of(status, false) {
                Sigterm | Sigint | Sighup => None,
                Killed => Some(CrashReason::Killed),
                Sigsegv | Sigbus | Sigabrt | Sigill | Sigfpe | Sigsys | Sigtrap | Sigquit => {
                    Some(CrashReason::FatalSignal)
                }
                _ => Some(CrashReason::Signal),
            }
        }
    }
}

/// A change in a runtime's life worth counting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeChange {
    Crashed { runtime: String, pid: u32, reason: CrashReason },
    Stopped { runtime: String, pid: u32 },
    Restarted { runtime: String, pid: u32 },
}

/// A live process named like a runtime, as /proc shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeProcess {
    pub pid: u32,
    pub comm: String,
    /// Its cgroup in the tracked hierarchy, if /proc said.
    pub cgroup: Option<String>,
}

impl RuntimeProcess {
    /// In a pod's cgroup: a tenant's process, whatever its name.
    pub fn in_pod(&self) -> bool {
        self.cgroup.as_deref().is_some_and(|c| super::cgroup_path::parse(c).is_some())
    }
}

#[derive(Debug, Default)]
pub struct RuntimeProcesses {
    names: Vec<String>,
    /// runtime → its live main processes.
    live: HashMap<String, HashSet<u32>>,
    /// Runtimes ever seen running (a new process of one is a restart).
    seen: HashSet<String>,
    /// The runtime the socket's peer is, and its pid: the one process of
    /// that runtime while it lives.
    pinned: Option<(String, u32)>,
    /// The cgroups of the live processes counted as runtimes: where their
    /// shims and runc run too.
    cgroups: Vec<String>,
}

impl RuntimeProcesses {
    pub fn new(names: &[String]) -> Self {
        Self { names: names.to_vec(), ..Self::default() }
    }

    fn runtime_of(&self, comm: &str) -> Option<&String> {
        self.names.iter().find(|n| agent_common::as_comm(n) == comm.as_bytes())
    }

    /// A process ended (whole process, not a thread); `in_pod`: the
    /// kernel attributed it to a pod.
    pub fn exited(&mut self, tgid: u32, comm: &str, status: ExitStatus, in_pod: bool) -> Option<RuntimeChange> {
        if in_pod {
            return None;
        }
        let runtime = self.runtime_of(comm)?.clone();
        match &self.pinned {
            Some((pinned, pid)) if *pinned == runtime && *pid != tgid => return None,
            Some((_, pid)) if *pid == tgid => self.pinned = None,
            _ => {}
        }
        self.seen.insert(runtime.clone());
        if let Some(live) = self.live.get_mut(&runtime) {
            live.remove(&tgid);
        }
        Some(match crash_reason(status) {
            Some(reason) => RuntimeChange::Crashed { runtime, pid: tgid, reason },
            None => RuntimeChange::Stopped { runtime, pid: tgid },
        })
    }

    /// The processes named like a runtime alive now (from /proc), and the
    /// pid at the other end of the runtime's socket if known. Those in a
    /// pod are not runtimes; the peer, if it is one of them, is its
    /// runtime's only process. A new process of a runtime that had none is
    /// a restart.
    pub fn scanned(&mut self, procs: &[RuntimeProcess], peer: Option<u32>) -> Vec<RuntimeChange> {
        let outside: Vec<&RuntimeProcess> = procs.iter().filter(|p| !p.in_pod()).collect();
        let pinned = peer
            .and_then(|pid| outside.iter().find(|p| p.pid == pid))
            .and_then(|p| Some((self.runtime_of(&p.comm)?.clone(), p.pid)));
        // A pin whose process is gone no longer holds.
        self.pinned = pinned.or_else(|| self.pinned.take().filter(|(_, pid)| outside.iter().any(|p| p.pid == *pid)));
        let mut now: HashMap<String, HashSet<u32>> = HashMap::new();
        let mut cgroups = Vec::new();
        for p in outside {
            if let Some(runtime) = self.runtime_of(&p.comm) {
                if self.pinned.as_ref().is_some_and(|(r, pid)| r == runtime && *pid != p.pid) {
                    continue;
                }
                now.entry(runtime.clone()).or_default().insert(p.pid);
                if let Some(c) = p.cgroup.as_ref().filter(|c| !cgroups.contains(*c)) {
                    cgroups.push(c.clone());
                }
            }
        }
        self.cgroups = cgroups;
        let mut changes = Vec::new();
        for (runtime, pids) in &now {
            let before = self.live.get(runtime);
            let was_down = before.is_none_or(HashSet::is_empty);
            if was_down && self.seen.contains(runtime) {
                if let Some(&pid) = pids.iter().min() {
                    changes.push(RuntimeChange::Restarted { runtime: runtime.clone(), pid });
                }
            }
            self.seen.insert(runtime.clone());
        }
        self.live = now;
        changes
    }

    /// True while a runtime that ran before is down: its restart should be
    /// noticed within a scan interval, not a slow one.
    pub fn awaiting_restart(&self) -> bool {
        self.seen.iter().any(|r| self.live.get(r).is_none_or(HashSet::is_empty))
    }

    /// Where the runtime's processes are: their pids and cgroups.
    pub fn place(&self) -> super::senders::RuntimePlace {
        super::senders::RuntimePlace {
            pids: self.live.values().flatten().copied().collect(),
            cgroups: self.cgroups.clone(),
        }
    }

    /// (runtime, up) for every configured runtime.
    pub fn up(&self) -> Vec<(String, bool)> {
        self.names.iter().map(|r| (r.clone(), self.live.get(r).is_some_and(|p| !p.is_empty()))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(pid: u32, comm: &str) -> RuntimeProcess {
        RuntimeProcess { pid, comm: comm.into(), cgroup: Some("/system.slice/containerd.service".into()) }
    }

    fn in_pod(pid: u32, comm: &str) -> RuntimeProcess {
        let cgroup = format!("/kubepods/burstable/pod{}/{}", "0c9e8d7f-6a5b-4c3d-9e2f-1a0b9c8d7e6f", "ab".repeat(32));
        RuntimeProcess { pid, comm: comm.into(), cgroup: Some(cgroup) }
    }

    /// Guards: a tenant's process named like the runtime counted as the
    /// runtime (its exit a crash, its life the runtime up).
    #[test]
    fn a_process_in_a_pod_is_never_the_runtime_whatever_its_name() {
        let mut r = RuntimeProcesses::new(&names());
        assert!(r.scanned(&[in_pod(30, "containerd")], None).is_empty());
        assert_eq!(r.up()[0], ("containerd".to_string(), false), "a decoy in a pod keeps it down");
        assert_eq!(r.exited(30, "containerd", ExitStatus::Code(2), true), None, "no crash");
        assert!(!r.awaiting_restart(), "nothing ran, nothing to wait for");
        assert!(r.scanned(&[host(10, "containerd"), in_pod(30, "containerd")], None).is_empty());
        assert_eq!(r.up()[0], ("containerd".to_string(), true));
    }

    /// Guards: another process of the runtime's name outside pods (a host
    /// decoy) taken for the runtime once the socket's peer says which it is.
    #[test]
    fn the_sockets_peer_is_the_runtime_and_no_other_of_its_name() {
        let mut r = RuntimeProcesses::new(&names());
        r.scanned(&[host(10, "containerd"), host(40, "containerd")], Some(10));
        assert_eq!(r.exited(40, "containerd", ExitStatus::Code(2), false), None, "not the peer: no crash");
        assert!(matches!(
            r.exited(10, "containerd", ExitStatus::Code(2), false),
            Some(RuntimeChange::Crashed { pid: 10, .. })
        ));
        // The peer is gone: until the socket names another, place decides.
        assert_eq!(r.up()[0], ("containerd".to_string(), false));
        assert_eq!(
            r.scanned(&[host(50, "containerd")], Some(10)),
            vec![RuntimeChange::Restarted { runtime: "containerd".into(), pid: 50 }]
        );
        r.scanned(&[host(50, "containerd"), host(60, "containerd")], Some(50));
        assert_eq!(r.exited(60, "containerd", ExitStatus::Code(2), false), None);
        assert_eq!(r.up()[0], ("containerd".to_string(), true));
    }

    fn names() -> Vec<String> {
        ["containerd", "crio", "dockerd", "a-runtime-with-a-long-name"].map(String::from).to_vec()
    }

    #[test]
    fn crash_reasons() {
        assert_eq!(crash_reason(ExitStatus::Code(0)), None);
        assert_eq!(crash_reason(ExitStatus::Code(2)), Some(CrashReason::Panic));
        assert_eq!(crash_reason(ExitStatus::Code(1)), Some(CrashReason::ExitCode));
        let sig = |s: i32| ExitStatus::Signal { signo: s as u8, core_dumped: false };
        assert_eq!(crash_reason(sig(libc::SIGTERM)), None);
        assert_eq!(crash_reason(sig(libc::SIGKILL)), Some(CrashReason::Killed));
        assert_eq!(crash_reason(sig(libc::SIGSEGV)), Some(CrashReason::FatalSignal));
        assert_eq!(crash_reason(sig(libc::SIGUSR1)), Some(CrashReason::Signal));
    }

    #[test]
    fn crash_then_restart() {
        let mut r = RuntimeProcesses::new(&names());
        assert!(r.scanned(&[host(10, "containerd"), host(11, "bash")], None).is_empty());
        assert_eq!(r.up()[0], ("containerd".to_string(), true));
        assert_eq!(r.up()[1], ("crio".to_string(), false));
        assert_eq!(r.exited(11, "bash", ExitStatus::Code(2), false), None);
        assert_eq!(
            r.exited(10, "containerd", ExitStatus::Code(2), false),
            Some(RuntimeChange::Crashed { runtime: "containerd".into(), pid: 10, reason: CrashReason::Panic })
        );
        assert_eq!(r.up()[0], ("containerd".to_string(), false));
        assert!(r.awaiting_restart());
        assert!(r.scanned(&[], None).is_empty(), "still down");
        assert_eq!(
            r.scanned(&[host(20, "containerd")], None),
            vec![RuntimeChange::Restarted { runtime: "containerd".into(), pid: 20 }]
        );
        assert!(r.scanned(&[host(20, "containerd")], None).is_empty(), "counted once");
        assert!(!r.awaiting_restart(), "crio and dockerd never ran: nothing to wait for");
        assert_eq!(r.up()[0], ("containerd".to_string(), true));
    }

    #[test]
    fn first_sighting_is_not_a_restart_and_long_names_match_their_comm() {
        let mut r = RuntimeProcesses::new(&names());
        assert!(r.scanned(&[host(5, "a-runtime-with-")], None).is_empty());
        assert_eq!(r.up()[3], ("a-runtime-with-a-long-name".to_string(), true));
        assert_eq!(
            r.exited(
                5,
                "a-runtime-with-",
                ExitStatus::Signal { signo: libc::SIGTERM as u8, core_dumped: false },
                false
            ),
            Some(RuntimeChange::Stopped { runtime: "a-runtime-with-a-long-name".into(), pid: 5 })
        );
        assert!(r.exited(6, "containerd-shim", ExitStatus::Code(2), false).is_none(), "the shim is not the runtime");
    }
}
