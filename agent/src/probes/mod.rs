//! The kernel side as seen from user space: tracefs and BTF offsets, the
//! cgroup layout, loading/attaching the programs, and the ring-buffer reader.
pub mod btf;
pub mod cgroups;
pub mod loader;
pub mod reader;
pub mod sandbox;
pub mod scan;
pub mod tracefs;

pub use loader::{CgroupTracker, KernelCounters, LoadError, ProbeOptions, Probes, ReaderFlag, Ring, Unstreamed};
