//! The kernel's notices that a cgroup's memory crossed a line, read
//! without waiting: on cgroup v1 a usage threshold (an eventfd registered
//! through `cgroup.event_control` on `memory.usage_in_bytes`), on v2 a PSI
//! trigger (`memory.pressure` opened for writing, a stall threshold
//! written; the kernel raises `EPOLLPRI` on it). Each is one descriptor,
//! kept in one epoll set, asked without blocking once a tick.
//!
//! Both need a writable cgroupfs (the registration is a write), and a PSI
//! trigger without `CAP_SYS_RESOURCE` needs a window of a whole number of
//! 2 s (Linux 6.5 on): the window used here is 2 s everywhere.

use std::{
    collections::HashMap,
    io::Write as _,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    path::Path,
};

/// A PSI trigger: some task stalled 100 ms on memory within 2 s (5 %).
pub const PSI_TRIGGER: &str = "some 100000 2000000";

/// What kind of notice a cgroup has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum NoticeKind {
    /// v1: its usage crossed a threshold (either way).
    UsageThreshold,
    /// v2: its tasks stalled on memory (PSI).
    Stall,
}

/// One cgroup's notice: the descriptor the kernel signals.
struct Notice {
    fd: OwnedFd,
    kind: NoticeKind,
}

pub struct Notices {
    epoll: OwnedFd,
    by_cgroup: HashMap<u64, Notice>,
}

impl Notices {
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: no pointer arguments.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a new descriptor this value alone owns.
        Ok(Self { epoll: unsafe { OwnedFd::from_raw_fd(fd) }, by_cgroup: HashMap::new() })
    }

    /// Cgroups with a notice now.
    pub fn len(&self) -> usize {
        self.by_cgroup.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_cgroup.is_empty()
    }

    /// v1: the kernel says when cgroup `id` (its directory `dir`) crosses
    /// `threshold` bytes of usage, either way. Replaces what it had.
    pub fn usage_threshold(&mut self, id: u64, dir: &Path, threshold: u64) -> std::io::Result<()> {
        self.forget(id);
        // SAFETY: no pointer arguments.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a new descriptor this value alone owns.
        let efd = unsafe { OwnedFd::from_raw_fd(efd) };
        let usage = std::fs::File::open(dir.join("memory.usage_in_bytes"))?;
        let line = format!("{} {} {threshold}", efd.as_raw_fd(), usage.as_raw_fd());
        std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.event_control"))?.write_all(line.as_bytes())?;
        // The registration holds what it needs: the usage file may close.
        drop(usage);
        self.add(id, Notice { fd: efd, kind: NoticeKind::UsageThreshold }, libc::EPOLLIN as u32)
    }

    /// v2: the kernel says when cgroup `id`'s tasks stall on memory.
    pub fn stall_trigger(&mut self, id: u64, dir: &Path) -> std::io::Result<()> {
        self.forget(id);
        let mut file = std::fs::OpenOptions::new().read(true).write(true).open(dir.join("memory.pressure"))?;
        file.write_all(PSI_TRIGGER.as_bytes())?;
        self.add(id, Notice { fd: OwnedFd::from(file), kind: NoticeKind::Stall }, libc::EPOLLPRI as u32)
    }

    fn add(&mut self, id: u64, notice: Notice, events: u32) -> std::io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: id };
        // SAFETY: the event is ours; the descriptor lives as long as the entry.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, notice.fd.as_raw_fd(), &mut ev) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.by_cgroup.insert(id, notice);
        Ok(())
    }

    /// Drops cgroup `id`'s notice (closing it ends the registration).
    pub fn forget(&mut self, id: u64) {
        if let Some(n) = self.by_cgroup.remove(&id) {
            // SAFETY: removing a descriptor the set holds; none is passed.
            unsafe {
                libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_DEL, n.fd.as_raw_fd(), std::ptr::null_mut())
            };
        }
    }

    /// The cgroups the kernel signalled since the last call, without
    /// waiting; their notices are re-armed.
    pub fn signalled(&mut self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        loop {
            // SAFETY: a buffer of `events.len()` entries we own; no wait.
            let n = unsafe {
                libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), events.len() as libc::c_int, 0)
            };
            let Ok(n) = usize::try_from(n) else { break };
            for ev in &events[..n] {
                let id = ev.u64;
                if let Some(notice) = self.by_cgroup.get(&id) {
                    if notice.kind == NoticeKind::UsageThreshold {
                        // The count since the last read; reading resets it.
                        let mut count = [0u8; 8];
                        // SAFETY: 8 bytes into a buffer of 8.
                        unsafe { libc::read(notice.fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
                    }
                    out.push(id);
                }
            }
            if n < events.len() {
                break;
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}
