//! The agent binary, started on a free loopback port as a user starts it,
//! its log in a file (a chatty agent must never block on a pipe), ready
//! once /readyz says so; killed on drop if a test fails before stopping it.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::http;

/// How to start it.
pub struct Launch<'a> {
    pub bin: &'a Path,
    /// Run through these first (e.g. `unshare --cgroup --`); they must exec
    /// the agent so its pid stays the one started.
    pub wrapper: &'a [&'a str],
    pub args: &'a [&'a str],
    pub log_level: &'a str,
    /// Where its stderr goes; `None`: a file of its own, removed on drop.
    pub log: Option<&'a Path>,
    pub ready_within: Duration,
}

impl<'a> Launch<'a> {
    pub fn new(bin: &'a Path, args: &'a [&'a str]) -> Self {
        Self { bin, wrapper: &[], args, log_level: "info", log: None, ready_within: Duration::from_secs(30) }
    }
}

/// Where the agent serves `/events`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventsAt {
    /// A unix socket of its own, as the agent serves it by default.
    Unix(PathBuf),
    /// `--events-listen HOST:PORT`, as the caller asked.
    Tcp(SocketAddr),
    /// `--events-listen ""`, or whatever the caller passed that is neither.
    Elsewhere,
}

pub struct Agent {
    child: Child,
    pub addr: SocketAddr,
    pub events: EventsAt,
    log: PathBuf,
    /// The log file is ours to remove.
    owns_log: bool,
}

impl Agent {
    pub fn start(launch: Launch<'_>) -> Result<Self> {
        let addr: SocketAddr = SocketAddr::from(([127, 0, 0, 1], crate::free_port()?));
        let (log, owns_log) = match launch.log {
            Some(path) => (path.to_path_buf(), false),
            None => (std::env::temp_dir().join(format!("sandwatch-{}-{}.log", std::process::id(), addr.port())), true),
        };
        // /events on a socket of its own unless the caller says where.
        let asked = launch.args.iter().position(|a| *a == "--events-listen").and_then(|i| launch.args.get(i + 1));
        let (events, events_arg) = match asked {
            Some(a) => match a.parse::<SocketAddr>() {
                Ok(tcp) => (EventsAt::Tcp(tcp), None),
                Err(_) => match a.strip_prefix("unix:") {
                    Some(path) => (EventsAt::Unix(PathBuf::from(path)), None),
                    None => (EventsAt::Elsewhere, None),
                },
            },
            None => {
                let path = std::env::temp_dir().join(format!("sandwatch-{}-{}.sock", std::process::id(), addr.port()));
                let arg = format!("unix:{}", path.display());
                (EventsAt::Unix(path), Some(arg))
            }
        };
        let log_file = std::fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let mut cmd = match launch.wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(launch.bin);
                c
            }
            None => Command::new(launch.bin),
        };
        let child = cmd
            .args(["--listen", &addr.to_string(), "--log-level", launch.log_level])
            .args(events_arg.iter().flat_map(|a| ["--events-listen", a.as_str()]))
            .args(launch.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("cannot start {}", launch.bin.display()))?;
        let mut agent = Self { child, addr, events, log, owns_log };
        // Over TLS plain HTTP gets nowhere: its log says when it is ready.
        let tls = launch.args.contains(&"--tls-cert-file");
        let start = Instant::now();
        while start.elapsed() < launch.ready_within {
            if let Some(status) = agent.child.try_wait()? {
                bail!("the agent exited early with {status}: {}", agent.log_text());
            }
            let ready = if tls {
                agent.log_text().contains("sandwatch ready:")
            } else {
                matches!(http::get(addr, "/readyz"), Some((200, _)))
            };
            if ready {
                return Ok(agent);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("the agent was not ready within {:?}: {}", launch.ready_within, agent.log_text())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One scrape of /metrics.
    pub fn metrics(&self) -> Result<String> {
        http::get(self.addr, "/metrics").map(|(_, t)| t).context("the agent did not answer /metrics")
    }

    /// GET `path_and_query` where the agent serves `/events`.
    pub fn events_get(&self, path_and_query: &str) -> Option<(u16, String)> {
        match &self.events {
            EventsAt::Unix(path) => http::get_unix(path, path_and_query, std::time::Duration::from_secs(5)),
            EventsAt::Tcp(addr) => http::get(*addr, path_and_query),
            EventsAt::Elsewhere => None,
        }
    }

    /// One series' value now (0 if absent or unreachable).
    pub fn value(&self, series: &str) -> f64 {
        self.metrics().ok().and_then(|t| http::metric(&t, series)).unwrap_or(0.0)
    }

    /// A `kB` field of /proc/<pid>/status (VmHWM: peak RSS, VmRSS: now).
    pub fn status_kib(&self, field: &str) -> u64 {
        status_kib(self.pid(), field)
    }

    /// Sends `signal` to the agent (by its pid).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) of the agent we started, by its pid.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// SIGTERM, then wait up to `timeout`; its exit status and log.
    pub fn terminate(&mut self, timeout: Duration) -> Result<(ExitStatus, String)> {
        self.signal(libc::SIGTERM);
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok((status, self.log_text()));
            }
            if start.elapsed() > timeout {
                bail!("the agent did not exit within {timeout:?} of SIGTERM: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM; fails unless the agent exits 0 within 30 s. Returns its log.
    pub fn stop(mut self) -> Result<String> {
        let (status, log) = self.terminate(Duration::from_secs(30))?;
        if !status.success() {
            bail!("the agent exited with {status} after SIGTERM: {log}");
        }
        Ok(log)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if self.owns_log {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// A `kB` field of /proc/<pid>/status (0 when unreadable).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
