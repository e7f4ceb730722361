//! The container runtime's own processes, seen from the kernel: a crash is
//! the runtime's main process ending with Go's panic status (2) or a fatal
//! signal; a restart is a new process after it went down. Exits come from
//! the kernel exit stream, live processes from periodic /proc scans (the
//! watchdog's host reads them). No I/O here.

use std::collections::{HashMap, HashSet};

use crate::events::ExitStatus;

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
        ExitStatus::Signal { signo, .. } => match i32::from(signo) {
            libc::SIGTERM | libc::SIGINT | libc::SIGHUP => None,
            libc::SIGKILL => Some(CrashReason::Killed),
            libc::SIGSEGV
            | libc::SIGBUS
            | libc::SIGABRT
            | libc::SIGILL
            | libc::SIGFPE
            | libc::SIGSYS
            | libc::SIGTRAP
            | libc::SIGQUIT => Some(CrashReason::FatalSignal),
            _ => Some(CrashReason::Signal),
        },
    }
}

/// A change in a runtime's life worth counting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeChange {
    Crashed { runtime: String, pid: u32, reason: CrashReason },
    Stopped { runtime: String, pid: u32 },
    Restarted { runtime: String, pid: u32 },
}

#[derive(Debug, Default)]
pub struct RuntimeProcesses {
    names: Vec<String>,
    /// runtime → its live main processes.
    live: HashMap<String, HashSet<u32>>,
    /// Runtimes ever seen running (a new process of one is a restart).
    seen: HashSet<String>,
}

impl RuntimeProcesses {
    pub fn new(names: &[String]) -> Self {
        Self { names: names.to_vec(), ..Self::default() }
    }

    fn runtime_of(&self, comm: &str) -> Option<&String> {
        self.names.iter().find(|n| crate::host::proc::as_comm(n) == comm.as_bytes())
    }

    /// A process ended (whole process, not a thread).
    pub fn exited(&mut self, tgid: u32, comm: &str, status: ExitStatus) -> Option<RuntimeChange> {
        let runtime = self.runtime_of(comm)?.clone();
        self.seen.insert(runtime.clone());
        if let Some(live) = self.live.get_mut(&runtime) {
            live.remove(&tgid);
        }
        Some(match crash_reason(status) {
            Some(reason) => RuntimeChange::Crashed { runtime, pid: tgid, reason },
            None => RuntimeChange::Stopped { runtime, pid: tgid },
        })
    }

    /// The runtime processes alive now, as (tgid, comm) from /proc. A new
    /// process of a runtime that had none is a restart.
    pub fn scanned(&mut self, procs: &[(u32, String)]) -> Vec<RuntimeChange> {
        let mut now: HashMap<String, HashSet<u32>> = HashMap::new();
        for (pid, comm) in procs {
            if let Some(runtime) = self.runtime_of(comm) {
                now.entry(runtime.clone()).or_default().insert(*pid);
            }
        }
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

    /// (runtime, up) for every configured runtime.
    pub fn up(&self) -> Vec<(String, bool)> {
        self.names.iter().map(|r| (r.clone(), self.live.get(r).is_some_and(|p| !p.is_empty()))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(r.scanned(&[(10, "containerd".into()), (11, "bash".into())]).is_empty());
        assert_eq!(r.up()[0], ("containerd".to_string(), true));
        assert_eq!(r.up()[1], ("crio".to_string(), false));
        assert_eq!(r.exited(11, "bash", ExitStatus::Code(2)), None);
        assert_eq!(
            r.exited(10, "containerd", ExitStatus::Code(2)),
            Some(RuntimeChange::Crashed { runtime: "containerd".into(), pid: 10, reason: CrashReason::Panic })
        );
        assert_eq!(r.up()[0], ("containerd".to_string(), false));
        assert!(r.awaiting_restart());
        assert!(r.scanned(&[]).is_empty(), "still down");
        assert_eq!(
            r.scanned(&[(20, "containerd".into())]),
            vec![RuntimeChange::Restarted { runtime: "containerd".into(), pid: 20 }]
        );
        assert!(r.scanned(&[(20, "containerd".into())]).is_empty(), "counted once");
        assert!(!r.awaiting_restart(), "crio and dockerd never ran: nothing to wait for");
        assert_eq!(r.up()[0], ("containerd".to_string(), true));
    }

    #[test]
    fn first_sighting_is_not_a_restart_and_long_names_match_their_comm() {
        let mut r = RuntimeProcesses::new(&names());
        assert!(r.scanned(&[(5, "a-runtime-with-".into())]).is_empty());
        assert_eq!(r.up()[3], ("a-runtime-with-a-long-name".to_string(), true));
        assert_eq!(
            r.exited(5, "a-runtime-with-", ExitStatus::Signal { signo: libc::SIGTERM as u8, core_dumped: false }),
            Some(RuntimeChange::Stopped { runtime: "a-runtime-with-a-long-name".into(), pid: 5 })
        );
        assert!(r.exited(6, "containerd-shim", ExitStatus::Code(2)).is_none(), "the shim is not the runtime");
    }
}
