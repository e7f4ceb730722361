//! The kernel side as seen from user space: tracefs and BTF offsets, the
//! cgroup layout, loading/attaching the programs (parsing BTF under
//! Landlock), the start-up scan of what exists, and the ring-buffer reader.
pub mod btf;
pub mod cgroups;
pub mod landlock;
pub mod loader;
pub mod privileges;
pub mod reader;
pub mod scan;
pub mod tracefs;

pub use loader::{
    CgroupTracker, KernelCounters, KernelPath, LoadError, OomDecision, ProbeOptions, Probes, ReaderFlag, Ring,
    Unstreamed,
};
