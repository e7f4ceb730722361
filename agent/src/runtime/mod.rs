//! The container runtime's side: containerd's event stream, pod and
//! container names over the CRI, and the runtime's own processes as the
//! kernel sees them (crashes, restarts).
pub mod containerd;
pub mod crash;
pub mod cri;
