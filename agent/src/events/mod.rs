//! What comes into the watchdog: the kernel's ring-buffer records decoded
//! into typed [`Event`]s, the container runtime's events, and what a read
//! of a container's memory says.
pub mod kernel;
pub mod memory;
pub mod runtime;

pub use kernel::{decode, encode, DecodeError, Event, ExitStatus};
pub use runtime::RuntimeEvent;
