//! The pod model: cgroup paths → pod identity, the registry of sandboxes,
//! containers and tasks, the nil-safe TaskExit / OomKill dispatcher, the
//! names the runtime gave, and what a container's exit means. No I/O
//! here; what the node says reaches the model through the watchdog. The
//! rules that span events (OOM events and storms, which limit fired,
//! kernel/runtime correlation, the runtime's own crashes) are the
//! watchdog's.
pub mod cgroup_path;
pub mod dispatch;
pub mod exit_reason;
pub mod metadata;
pub mod registry;

#[cfg(test)]
mod tests;

pub use cgroup_path::{PodCgroup, QosClass};
pub use dispatch::{
    DeathCause, Dispatcher, ExitReport, LateReason, OomReport, OomVictim, Outcome, PodRef, Report, Source, TaskExit,
    TaskRole, Trigger,
};
pub use exit_reason::ExitReason;
pub use metadata::Names;
pub use registry::{Limits, PodRegistry, TaskKey};
