//! The pod model: cgroup paths → pod identity, the registry of sandboxes,
//! containers and tasks, the nil-safe TaskExit / OomKill dispatcher, and
//! the rules that span events (OOM events and storms, kernel/runtime
//! correlation, the runtime's own crashes). No I/O here; what the node says
//! reaches the model through the watchdog's host.
pub mod cgroup_path;
pub mod correlation;
pub mod crashes;
pub mod dispatch;
pub mod exit_reason;
pub mod known_issues;
pub mod metadata;
pub mod oom_events;
pub mod oom_limit;
pub mod registry;
pub mod storm;
pub mod workload;

#[cfg(test)]
mod tests;

pub use cgroup_path::{PodCgroup, QosClass};
pub use dispatch::{
    DeathCause, Dispatcher, ExitReport, LateReason, OomReport, OomVictim, Outcome, PodRef, Report, Source, TaskExit,
    TaskRole, Trigger,
};
pub use exit_reason::ExitReason;
pub use metadata::Names;
pub use oom_events::{OomEvent, OomScope};
pub use oom_limit::{Fired, OomConstraint, OomLimit};
pub use registry::{Limits, PodRegistry, TaskKey};
