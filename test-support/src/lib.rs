//! What sandwatch's end-to-end tests (`agent/tests`) and xtask's benchmark
//! and soak share: cgroups inside this process's own cgroup, removed even
//! when a test fails; the agent binary started as a user starts it; a
//! small HTTP client for its endpoints; exit storms. It depends on nothing of the agent,
//! so xtask builds it before the eBPF toolchain exists.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod agent;
pub mod cgroup;
pub mod http;

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

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

/// An exit storm: `forks` processes forked and reaped over `workers`
/// threads, each exiting at once (0). How long it took.
pub fn exit_storm(forks: u32, workers: u32) -> Result<Duration> {
    let start = Instant::now();
    let workers = workers.max(1);
    let (per, extra) = (forks / workers, forks % workers);
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let n = per + u32::from(w < extra);
            std::thread::spawn(move || -> bool {
                for _ in 0..n {
                    // SAFETY: the child calls only _exit, which is
                    // async-signal-safe; the parent reaps it.
                    let pid = unsafe { libc::fork() };
                    if pid == 0 {
                        unsafe { libc::_exit(0) };
                    }
                    if pid < 0 {
                        return false;
                    }
                    let mut status = 0;
                    // SAFETY: waits for the child just forked.
                    unsafe { libc::waitpid(pid, &mut status, 0) };
                }
                true
            })
        })
        .collect();
    for h in handles {
        if !h.join().map_err(|_| anyhow::anyhow!("a storm worker panicked"))? {
            bail!("fork failed during the storm");
        }
    }
    Ok(start.elapsed())
}
