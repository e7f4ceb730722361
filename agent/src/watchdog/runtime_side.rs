//! The container runtime's side of the core: its own processes (crashes,
//! stops, restarts, whether it runs) and the kernel's view of container
//! inits and OOM kills against the runtime's TaskExit and TaskOom (lag,
//! what only one side said).

use super::{
    correlation::{Correlator, CorrelatorLimits, Expired},
    crashes::{RuntimeChange, RuntimeProcesses},
    senders::RuntimePlace,
    Finding, Host,
};
use crate::{
    events::kernel::Exit,
    model::{ExitReport, TaskRole},
};

/// Ticks (seconds) between /proc scans for runtime processes while none
/// is awaited back.
const SLOW_SCAN_TICKS: u64 = 30;

/// The runtime's side: whose processes are watched, and how long each side
/// waits for the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeSettings {
    /// Process names (comm) of container runtimes.
    pub names: Vec<String>,
    pub correlation: CorrelatorLimits,
}

/// The runtime's view against the kernel's.
#[derive(Debug)]
pub struct RuntimeSide {
    correlator: Correlator,
    processes: RuntimeProcesses,
    /// What expiry had settled when last reported.
    reported: Expired,
    ticks: u64,
    place: RuntimePlace,
}

impl RuntimeSide {
    pub fn new(settings: RuntimeSettings) -> Self {
        Self {
            correlator: Correlator::new(settings.correlation),
            processes: RuntimeProcesses::new(&settings.names),
            reported: Expired::default(),
            ticks: 0,
            place: RuntimePlace::default(),
        }
    }

    /// Looks for the runtime's processes in /proc.
    pub fn scan(&mut self, host: &impl Host, out: &mut Vec<Finding>) {
        let procs = host.runtime_processes();
        let changes = self.processes.scanned(&procs, host.runtime_peer());
        out.extend(changes.into_iter().map(change));
        self.report_up(out);
        self.place = self.processes.place();
    }

    /// Where the runtime's processes are, as last scanned: the senders of
    /// its stops.
    pub fn place(&self) -> &RuntimePlace {
        &self.place
    }

    fn report_up(&self, out: &mut Vec<Finding>) {
        for (runtime, up) in self.processes.up() {
            out.push(Finding::RuntimeUp { runtime, up });
        }
    }

    /// Once a second: /proc is read every second only while a runtime
    /// that ran is down (exits tell when one goes), pending pairs settle.
    pub fn tick(&mut self, host: &impl Host, now_ns: u64, out: &mut Vec<Finding>) {
        self.ticks += 1;
        if self.processes.awaiting_restart() || self.ticks.is_multiple_of(SLOW_SCAN_TICKS) {
            self.scan(host, out);
        }
        self.correlator.expire(now_ns);
        let now = self.correlator.expired;
        let seen = std::mem::replace(&mut self.reported, now);
        let delta = Expired {
            runtime_exits_unmatched: now.runtime_exits_unmatched - seen.runtime_exits_unmatched,
            kernel_only_ooms: now.kernel_only_ooms - seen.kernel_only_ooms,
            runtime_only_ooms: now.runtime_only_ooms - seen.runtime_only_ooms,
            evicted: now.evicted - seen.evicted,
        };
        if delta != Expired::default() {
            out.push(Finding::Mismatch(delta));
        }
    }

    /// A whole process ended, as the kernel classified it (`r`): a
    /// runtime's own end (a process in a pod is never the runtime,
    /// whatever its name), or a container init's, which the runtime will
    /// report too.
    pub fn kernel_exit(&mut self, r: &ExitReport, e: &Exit, out: &mut Vec<Finding>) {
        if let Some(c) = self.processes.exited(e.tgid, &e.comm, e.status, r.pod.is_some()) {
            out.push(change(c));
            self.report_up(out);
        }
        if matches!(r.role, TaskRole::Sandbox | TaskRole::ContainerInit) {
            if let Some(lag_ns) = self.correlator.kernel_exit(e.tgid, e.ts_ns) {
                out.push(Finding::ExitLag { lag_ns });
            }
        }
    }

    /// The kernel OOM-killed a process of `container_id` at `ts_ns`; the
    /// runtime, if its stream is up, will say so too.
    pub fn kernel_oom(&mut self, host: &impl Host, container_id: &str, ts_ns: u64, out: &mut Vec<Finding>) {
        if host.stream_up() && self.correlator.kernel_oom(container_id, ts_ns) {
            out.push(Finding::OomMatched { count: 1 });
        }
    }

    /// The runtime's TaskExit of init `pid`, handed over at `now_ns`.
    pub fn task_exit(&mut self, pid: u32, now_ns: u64, out: &mut Vec<Finding>) {
        if let Some(lag_ns) = self.correlator.runtime_exit(pid, now_ns) {
            out.push(Finding::ExitLag { lag_ns });
        }
    }

    /// The runtime's TaskOom of `container_id`, published at `at_ns` (boot time).
    pub fn task_oom(&mut self, container_id: &str, at_ns: u64, out: &mut Vec<Finding>) {
        let matched = self.correlator.runtime_oom(container_id, at_ns);
        if matched > 0 {
            out.push(Finding::OomMatched { count: matched as u64 });
        }
    }
}

fn change(change: RuntimeChange) -> Finding {
    match change {
        RuntimeChange::Crashed { runtime, pid, reason } => Finding::RuntimeCrash { runtime, pid, reason },
        RuntimeChange::Stopped { runtime, pid } => Finding::RuntimeStopped { runtime, pid },
        RuntimeChange::Restarted { runtime, pid } => Finding::RuntimeRestart { runtime, pid },
    }
}
