//! Least privilege once the programs are attached: every capability the
//! agent no longer uses is dropped. Loading and attaching needed CAP_BPF
//! and CAP_PERFMON (CAP_SYS_RESOURCE before 5.11); what the agent does
//! afterwards — map reads and updates through the descriptors it holds,
//! the ring buffers through their mappings, cgroupfs and `/proc` (readable
//! by root without capabilities), the runtime's socket (root's) — needs
//! none, except where the kernel still checks unprivileged BPF on every
//! bpf() call (before 6.5, with `kernel.unprivileged_bpf_disabled` set):
//! there map operations keep needing CAP_BPF. That is tried, not assumed.

use crate::os::caps::{self, bit, CAP_BPF, CAP_SYS_ADMIN};

use super::KernelCounters;

/// What the agent holds after the drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    /// Effective capabilities now.
    pub effective: u64,
    /// Threads of the process when it dropped them (each thread holds its
    /// own: only this one, and those created later, hold the reduced sets).
    pub threads: usize,
}

/// Drops every capability but what map operations need on this kernel;
/// `counters` are a held map to try them on. Must run before the agent
/// starts other threads.
pub fn drop_after_start(counters: &KernelCounters) -> std::io::Result<Kept> {
    let held = caps::current()?;
    let threads = caps::threads();
    // Effective first (permitted kept, so it can come back), to try.
    let works = |effective: u64| -> std::io::Result<bool> {
        caps::set(caps::Sets { effective, ..held })?;
        Ok(counters.readable())
    };
    let mut keep = 0;
    if !works(0)? {
        keep = [bit(CAP_BPF), bit(CAP_SYS_ADMIN)]
            .into_iter()
            .filter(|b| held.permitted & b != 0)
            .find(|b| works(*b).unwrap_or(false))
            // Neither helps (nothing reads the map at all): keep what
            // might, rather than lose the counters for nothing.
            .unwrap_or(held.effective & (bit(CAP_BPF) | bit(CAP_SYS_ADMIN)));
    }
    caps::set(caps::Sets { effective: held.effective, ..held })?;
    caps::retain(keep)?;
    Ok(Kept { effective: caps::current()?.effective, threads })
}

impl Kept {
    /// For the log: what is held, and why.
    pub fn describe(&self) -> String {
        let held = caps::describe(self.effective);
        let why = if self.effective == 0 {
            String::new()
        } else {
            " (this kernel checks unprivileged BPF on every map operation: before Linux 6.5 with \
             kernel.unprivileged_bpf_disabled set)"
                .to_string()
        };
        let threads = if self.threads > 1 {
            format!("; {} other thread(s) existed and keep theirs", self.threads - 1)
        } else {
            String::new()
        };
        format!("{held}{why}{threads}")
    }
}
