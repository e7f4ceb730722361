//! Findings an operator reads by name — a pod's OOM series, a sandbox
//! death, a container exit — wait here for the runtime to name their pod,
//! at most [`NAME_WAIT_NS`]; beyond [`MAX_AWAITING`] waiting, they go out
//! at once with what is known.

use std::collections::VecDeque;

use super::{ContainerExit, Finding, PodOom, SandboxDeath};
use crate::model::{Names, PodRef};

/// How long an OOM event's per-pod series, or a sandbox death's log line
/// and record, waits for the runtime to name a container it has not
/// listed yet (one killed as it starts, typically).
pub const NAME_WAIT_NS: u64 = 10 * 1_000_000_000;
/// Findings waiting for names, at most.
const MAX_AWAITING: usize = 1024;

/// A finding that waits for names.
#[derive(Debug)]
pub enum Awaiting {
    PodOom(PodOom),
    Death(SandboxDeath),
    Exit(ContainerExit),
}

impl Awaiting {
    pub fn pod(&self) -> Option<&PodRef> {
        match self {
            Awaiting::PodOom(p) => p.report.pod.as_ref(),
            Awaiting::Death(d) => d.report.pod.as_ref(),
            Awaiting::Exit(e) => e.report.pod.as_ref(),
        }
    }

    /// The finding, with the names known now (`names`; `names_of` for the
    /// other pods it speaks of: the sender of the signal that ended it).
    fn named(self, names: Names, names_of: &impl Fn(Option<&PodRef>) -> Names) -> Finding {
        match self {
            Awaiting::PodOom(p) => Finding::PodOom(PodOom { names, ..p }),
            Awaiting::Death(d) => Finding::SandboxDeath(SandboxDeath { names, ..d }),
            Awaiting::Exit(mut e) => {
                if let Some((pod, sender)) = e.ended.as_mut().and_then(|end| end.pod.as_mut()) {
                    let now = names_of(Some(pod));
                    if now.complete() || sender.pod.is_empty() {
                        *sender = now;
                    }
                }
                Finding::ContainerExit(ContainerExit { names, ..e })
            }
        }
    }
}

/// What waits, oldest first, with when it started waiting.
#[derive(Debug, Default)]
pub struct NameWait {
    awaiting: VecDeque<(Awaiting, u64)>,
}

impl NameWait {
    /// `what`, whose pod's names are `names` now, goes out at once unless
    /// the runtime is listing (`listing_up`) and has not named its
    /// container yet: then it waits, and the container's id is returned,
    /// for the listing to be asked.
    pub fn defer(
        &mut self,
        what: Awaiting,
        names_of: impl Fn(Option<&PodRef>) -> Names,
        listing_up: bool,
        now_ns: u64,
        out: &mut Vec<Finding>,
    ) -> Option<String> {
        let names = names_of(what.pod());
        let container = what.pod().and_then(|p| p.container_id.clone());
        match container {
            Some(id) if !names.complete() && listing_up && self.awaiting.len() < MAX_AWAITING => {
                self.awaiting.push_back((what, now_ns));
                Some(id)
            }
            _ => {
                out.push(what.named(names, &names_of));
                None
            }
        }
    }

    /// What is named now, or waited long enough, goes out.
    pub fn release(&mut self, now_ns: u64, names_of: impl Fn(Option<&PodRef>) -> Names, out: &mut Vec<Finding>) {
        let mut waiting = VecDeque::with_capacity(self.awaiting.len());
        while let Some((what, since)) = self.awaiting.pop_front() {
            let names = names_of(what.pod());
            if !names.complete() && now_ns.saturating_sub(since) < NAME_WAIT_NS {
                waiting.push_back((what, since));
            } else {
                out.push(what.named(names, &names_of));
            }
        }
        self.awaiting = waiting;
    }

    /// At shutdown: everything goes out with what is known.
    pub fn flush(&mut self, names_of: impl Fn(Option<&PodRef>) -> Names, out: &mut Vec<Finding>) {
        while let Some((what, _)) = self.awaiting.pop_front() {
            let names = names_of(what.pod());
            out.push(what.named(names, &names_of));
        }
    }
}
