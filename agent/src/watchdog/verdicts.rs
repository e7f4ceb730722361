//! The runtime's word against the kernel's: for each container init the
//! kernel saw end, what containerd's TaskExit (its exit status) and the
//! CRI's container status (its reason and exit code, what the kubelet
//! reports) say of the same end. The kernel knows whether the OOM killer
//! took the init and who sent the signal that ended it; a runtime that
//! says `OOMKilled` for an init another sender ended (its cgroup's OOM
//! count is cumulative: an earlier child's kill), or `Error` for one the
//! OOM killer took (its OOM event came after the exit), disagrees, and is
//! counted by direction. No I/O: the CRI is asked through the host, and
//! answers as a runtime event.
//!
//! This is per container end, what the kubelet will report. The
//! correlator's OOM mismatch (`correlation`) is per OOM kill, children
//! included: whether the runtime heard each kill at all. Both are kept.

use std::collections::{HashMap, VecDeque};

use super::senders::Sender;
use crate::{
    events::ExitStatus,
    model::{ExitReason, Names, PodRef},
};

/// Which way the runtime's word differs from the kernel's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Disagreement {
    /// The runtime says `OOMKilled`; the OOM killer did not end the init
    /// (another sender did, or it exited).
    RuntimeSaysOom,
    /// The OOM killer ended the init; the runtime says otherwise (`Error`).
    KernelSaysOom,
    /// The runtime's exit code is not the kernel's.
    ExitCode,
}

/// How one container end's check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum VerdictResult {
    Agreed,
    Disagreed,
    /// The CRI never said the container had exited.
    Unanswered,
}

/// The kernel's side of a container init's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelEnd {
    pub pod: PodRef,
    pub pid: u32,
    pub status: ExitStatus,
    pub reason: ExitReason,
    /// Who sent the signal that ended it, if one did.
    pub sender: Option<Sender>,
    pub ts_ns: u64,
}

impl KernelEnd {
    /// The exit code a runtime reports for it: the code, or 128 + the
    /// signal.
    pub fn exit_code(&self) -> i32 {
        match self.status {
            ExitStatus::Code(c) => i32::from(c),
            ExitStatus::Signal { signo, .. } => 128 + i32::from(signo),
        }
    }
}

/// What the CRI said of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeStatus {
    /// CONTAINER_EXITED.
    pub exited: bool,
    pub reason: String,
    pub exit_code: i32,
}

/// One container end checked: both sides, and how they compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub kernel: KernelEnd,
    pub names: Names,
    /// The exit status containerd's TaskExit gave, if it came.
    pub task_exit_status: Option<u32>,
    /// The CRI's reason and exit code, if it answered.
    pub runtime_reason: Option<String>,
    pub runtime_exit_code: Option<i32>,
    pub result: VerdictResult,
    pub disagreement: Option<Disagreement>,
}

/// The reason the CRI gives a container the OOM killer ended.
pub const OOM_REASON: &str = "OOMKilled";
/// How long after the kernel's exit the CRI is asked when no TaskExit
/// came (the event stream is down or behind).
const ASK_AFTER_NS: u64 = 3 * 1_000_000_000;
/// How long a check waits for the runtime's answer at most.
const CHECK_TTL_NS: u64 = 60 * 1_000_000_000;
/// Checks waiting, at most; the oldest is settled unanswered first.
const MAX_CHECKS: usize = 1024;

#[derive(Debug)]
struct Check {
    kernel: Option<KernelEnd>,
    task_exit: Option<u32>,
    asked: bool,
    since_ns: u64,
}

/// Container ends waiting for the runtime's word, by container id.
#[derive(Debug, Default)]
pub struct Verdicts {
    checks: HashMap<String, Check>,
    order: VecDeque<(String, u64)>,
}

impl Verdicts {
    /// The kernel saw container `id`'s init end. Returns true once both
    /// sides are in (its TaskExit came already): the CRI is to be asked
    /// now ([`Verdicts::asked`]), or the check settled ([`Verdicts::settle`]).
    pub fn kernel_exit(&mut self, id: &str, end: KernelEnd, now_ns: u64, out: &mut Vec<Verdict>) -> bool {
        let check = self.check(id, now_ns, out);
        check.kernel = Some(end);
        check.task_exit.is_some() && !check.asked
    }

    /// containerd's TaskExit of container `id`'s init. Returns true once
    /// both sides are in, as [`Verdicts::kernel_exit`].
    pub fn task_exit(&mut self, id: &str, exit_status: u32, now_ns: u64, out: &mut Vec<Verdict>) -> bool {
        let check = self.check(id, now_ns, out);
        check.task_exit = Some(exit_status);
        check.kernel.is_some() && !check.asked
    }

    /// The CRI was asked for container `id`'s status.
    pub fn asked(&mut self, id: &str) {
        if let Some(check) = self.checks.get_mut(id) {
            check.asked = true;
        }
    }

    /// The CRI's status of container `id`: the check's verdict.
    pub fn status(&mut self, id: &str, status: &RuntimeStatus, names: impl Fn(&PodRef) -> Names) -> Option<Verdict> {
        let check = self.checks.remove(id)?;
        let kernel = check.kernel?;
        let names = names(&kernel.pod);
        let (runtime_reason, runtime_exit_code) =
            if status.exited { (Some(status.reason.clone()), Some(status.exit_code)) } else { (None, None) };
        let mut verdict = Verdict {
            kernel,
            names,
            task_exit_status: check.task_exit,
            runtime_reason,
            runtime_exit_code,
            result: VerdictResult::Unanswered,
            disagreement: None,
        };
        if status.exited {
            verdict.disagreement = compare(&verdict.kernel, verdict.task_exit_status, Some(status));
            verdict.result =
                if verdict.disagreement.is_some() { VerdictResult::Disagreed } else { VerdictResult::Agreed };
        }
        Some(verdict)
    }

    /// Once a tick: the containers whose CRI status is to be asked now
    /// (their TaskExit never came), and the checks settled unanswered.
    pub fn tick(
        &mut self,
        now_ns: u64,
        can_ask: bool,
        names: impl Fn(&PodRef) -> Names,
        out: &mut Vec<Verdict>,
    ) -> Vec<String> {
        let mut ask = Vec::new();
        for (id, check) in &mut self.checks {
            if can_ask
                && !check.asked
                && check.kernel.is_some()
                && now_ns.saturating_sub(check.since_ns) >= ASK_AFTER_NS
            {
                check.asked = true;
                ask.push(id.clone());
            }
        }
        while let Some((id, since)) = self.order.front().cloned() {
            if now_ns.saturating_sub(since) < CHECK_TTL_NS {
                break;
            }
            self.order.pop_front();
            if self.checks.get(&id).is_some_and(|c| c.since_ns == since) {
                if let Some(v) = self.settle(&id, &names) {
                    out.push(v);
                }
            }
        }
        ask
    }

    /// Checks waiting.
    pub fn pending(&self) -> usize {
        self.checks.len()
    }

    fn check(&mut self, id: &str, now_ns: u64, out: &mut Vec<Verdict>) -> &mut Check {
        if !self.checks.contains_key(id) {
            while self.checks.len() >= MAX_CHECKS {
                let Some((old, since)) = self.order.pop_front() else { break };
                if self.checks.get(&old).is_some_and(|c| c.since_ns == since) {
                    if let Some(v) = self.settle(&old, &|_: &PodRef| Names::default()) {
                        out.push(v);
                    }
                }
            }
            self.order.push_back((id.to_string(), now_ns));
        }
        self.checks.entry(id.to_string()).or_insert_with(|| Check {
            kernel: None,
            task_exit: None,
            asked: false,
            since_ns: now_ns,
        })
    }

    /// Settles container `id`'s check on what the TaskExit said, if
    /// anything: the CRI is not asked, or never answered.
    pub fn settle(&mut self, id: &str, names: &impl Fn(&PodRef) -> Names) -> Option<Verdict> {
        let check = self.checks.remove(id)?;
        // A TaskExit alone (the kernel never saw the init) is the
        // correlator's to count.
        let kernel = check.kernel?;
        let disagreement = compare(&kernel, check.task_exit, None);
        let result = match (disagreement, check.task_exit, check.asked) {
            (Some(_), ..) => VerdictResult::Disagreed,
            (None, Some(_), false) => VerdictResult::Agreed,
            _ => VerdictResult::Unanswered,
        };
        Some(Verdict {
            names: names(&kernel.pod),
            kernel,
            task_exit_status: check.task_exit,
            runtime_reason: None,
            runtime_exit_code: None,
            result,
            disagreement,
        })
    }
}

/// How the runtime's word differs from the kernel's, if it does: its
/// reason first (what the kubelet reports), then its exit codes.
fn compare(kernel: &KernelEnd, task_exit: Option<u32>, cri: Option<&RuntimeStatus>) -> Option<Disagreement> {
    let kernel_oom = kernel.reason == ExitReason::OomKilled;
    if let Some(cri) = cri {
        let runtime_oom = cri.reason == OOM_REASON;
        if runtime_oom && !kernel_oom {
            return Some(Disagreement::RuntimeSaysOom);
        }
        if kernel_oom && !runtime_oom {
            return Some(Disagreement::KernelSaysOom);
        }
    }
    let code = kernel.exit_code();
    let task_exit_differs = task_exit.is_some_and(|s| i64::from(s) != i64::from(code));
    let cri_differs = cri.is_some_and(|c| c.exit_code != code);
    (task_exit_differs || cri_differs).then_some(Disagreement::ExitCode)
}
