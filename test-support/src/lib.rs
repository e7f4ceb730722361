//! What sandwatch's end-to-end tests (`agent/tests`) and xtask's benchmark
//! and soak share: cgroups inside this process's own cgroup, removed even
//! when a test fails; the agent binary started as a user starts it; a
//! small HTTP client for its endpoints. It depends on nothing of the agent,
//! so xtask builds it before the eBPF toolchain exists.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod agent;
pub mod cgroup;
pub mod http;

use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, Result};

/// `sh -c script`, with nothing on its stdio.
pub fn sh(script: &str) -> Result<Child> {
    Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start sh")
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("no free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// Whether this process runs as root (euid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}
