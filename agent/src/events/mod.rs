//! Typed events decoded from the kernel's ring-buffer records.
pub mod decode;

pub use decode::{decode, encode, DecodeError, Event, ExitStatus};
