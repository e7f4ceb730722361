//! The container runtime's side: containerd's event stream, and the
//! runtime's own processes as the kernel sees them (crashes, restarts).
pub mod containerd;
pub mod crash;
