//! The pod model: cgroup paths → pod identity, the registry of sandboxes,
//! containers and tasks, and the nil-safe TaskExit / OomKill dispatcher.
//! No I/O here; the start-up scan lives in `probes::scan`.
pub mod cgroup_path;
pub mod dispatch;
pub mod known_issues;
pub mod metadata;
pub mod oom_events;
pub mod registry;
pub mod runtime;

#[cfg(test)]
mod tests;

pub use cgroup_path::{PodCgroup, QosClass};
pub use dispatch::{
    DeathCause, Dispatcher, ExitReport, LateReason, OomReport, OomVictim, Outcome, PodRef, Report, Source, TaskExit,
    TaskRole, Trigger,
};
pub use metadata::Names;
pub use oom_events::{OomEvent, OomScope};
pub use registry::{Limits, Registry, TaskKey};
