//! What comes into the watchdog: the kernel's ring-buffer records decoded
//! into typed [`Event`]s, and the container runtime's events.
pub mod kernel;
pub mod runtime;

pub use kernel::{as_comm, decode, encode, DecodeError, Event, ExitStatus};
pub use runtime::RuntimeEvent;
