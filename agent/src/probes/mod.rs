//! The kernel side as seen from user space: tracefs and BTF offsets, the
//! cgroup layout, loading/attaching the programs (parsing BTF under
//! Landlock), the start-up scan of what exists, and the ring-buffer reader.
pub mod btf;
pub mod cgroups;
pub mod counters;
pub mod landlock;
pub mod loader;
mod offsets;
pub mod privileges;
pub mod reader;
pub mod scan;
pub mod tracefs;
pub mod tracker;

pub use counters::{KernelCounters, Unstreamed};
pub use loader::{KernelPath, LoadError, OomDecision, ProbeOptions, Probes, ReaderFlag, Ring};
pub use tracker::{CgroupTracker, TrackedKind};
