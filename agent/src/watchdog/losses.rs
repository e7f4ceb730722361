//! What the pipeline lost, second by second: each stage's losses since
//! the last tick become a finding, and a loss that may have held a
//! cgroup's mkdir or rmdir asks for the cgroup tree to be read again (the
//! coordinator does that, then notes when).

use super::{Finding, LossStage, LossTotals};

#[derive(Debug, Default)]
pub struct LossWatch {
    /// The pipeline's loss counters when last looked at.
    seen: LossTotals,
    /// When the cgroup tree was last read after a loss (boot time, ns): a
    /// mkdir produced before it may name a cgroup the read did not see
    /// because it was gone already, its rmdir lost.
    pub resynced_ns: u64,
}

impl LossWatch {
    pub fn new(seen: LossTotals) -> Self {
        Self { seen, resynced_ns: 0 }
    }

    /// Events lost that may have been a cgroup's mkdir or rmdir: the
    /// kernel's and the channels' drops of those kinds, and every record
    /// that did not decode.
    fn cgroup_losses(t: &LossTotals) -> u64 {
        t.kernel_cgroup_changes + t.channel_cgroup_changes + t.decode
    }

    /// Whether cgroup changes may have been lost since the last report.
    pub fn cgroups_lost(&self, now: &LossTotals) -> bool {
        Self::cgroup_losses(now) > Self::cgroup_losses(&self.seen)
    }

    /// Losses since the last report, by stage; the host exits the kernel
    /// only counted.
    pub fn report(&mut self, now: LossTotals, out: &mut Vec<Finding>) {
        let seen = std::mem::replace(&mut self.seen, now);
        let host_exits = now.host_exits.saturating_sub(seen.host_exits);
        if host_exits > 0 {
            out.push(Finding::HostExits { count: host_exits });
        }
        for (stage, now, seen) in [
            (LossStage::Kernel, now.kernel, seen.kernel),
            (LossStage::Channel, now.channel, seen.channel),
            (LossStage::Decode, now.decode, seen.decode),
        ] {
            let count = now.saturating_sub(seen);
            if count > 0 {
                out.push(Finding::EventsLost { stage, count });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stage_reports_what_it_lost_since_the_last_look_and_cgroup_losses_ask_for_a_reread() {
        let mut w = LossWatch::new(LossTotals { kernel: 5, ..LossTotals::default() });
        let mut out = Vec::new();
        let now = LossTotals { kernel: 7, channel: 1, host_exits: 3, ..LossTotals::default() };
        assert!(!w.cgroups_lost(&now), "the channels lost an exit");
        let now = LossTotals { channel: 1, channel_cgroup_changes: 1, ..now };
        assert!(w.cgroups_lost(&now), "a channel lost a cgroup's change");
        w.report(now, &mut out);
        assert_eq!(
            out,
            [
                Finding::HostExits { count: 3 },
                Finding::EventsLost { stage: LossStage::Kernel, count: 2 },
                Finding::EventsLost { stage: LossStage::Channel, count: 1 },
            ]
        );
        let exits_only = LossTotals { kernel: 9, ..now };
        assert!(!w.cgroups_lost(&exits_only), "the kernel dropped exits only");
    }
}
