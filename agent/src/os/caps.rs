//! The calling thread's capabilities, read and reduced with capget(2) and
//! capset(2). Capabilities belong to each thread: a thread created after a
//! reduction inherits it, one created before keeps what it had, so the
//! agent reduces them while it runs on one thread.

use std::io;

pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_SYS_RESOURCE: u32 = 24;
pub const CAP_PERFMON: u32 = 38;
pub const CAP_BPF: u32 = 39;

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// A thread's capability sets, one bit per capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sets {
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
}

pub fn bit(cap: u32) -> u64 {
    1u64 << cap
}

/// The calling thread's sets.
pub fn current() -> io::Result<Sets> {
    let mut header = Header { version: VERSION_3, pid: 0 };
    let mut data = [Data::default(); 2];
    // SAFETY: capget writes two Data words for version 3 into our array.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut Header, data.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok(Sets {
        effective: join(data[0].effective, data[1].effective),
        permitted: join(data[0].permitted, data[1].permitted),
        inheritable: join(data[0].inheritable, data[1].inheritable),
    })
}

/// Sets the calling thread's sets (only ever to fewer capabilities than it
/// holds: capset refuses more).
pub fn set(sets: Sets) -> io::Result<()> {
    let mut header = Header { version: VERSION_3, pid: 0 };
    let word = |v: u64, i: u32| (v >> (32 * i)) as u32;
    let data = [0, 1].map(|i| Data {
        effective: word(sets.effective, i),
        permitted: word(sets.permitted, i),
        inheritable: word(sets.inheritable, i),
    });
    // SAFETY: capset reads two Data words for version 3 from our array.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Keeps only `keep` of what the calling thread holds, in every set, and
/// empties its ambient set: nothing it execs gets any back.
pub fn retain(keep: u64) -> io::Result<()> {
    let now = current()?;
    set(Sets { effective: now.effective & keep, permitted: now.permitted & keep, inheritable: 0 })?;
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    // EINVAL: a kernel without ambient capabilities (before 4.3) has none.
    if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The names of the capabilities in `mask` the agent cares about, and the
/// count of the others: for a log line.
pub fn describe(mask: u64) -> String {
    if mask == 0 {
        return "none".to_string();
    }
    let known =
        [(CAP_SYS_ADMIN, "SYS_ADMIN"), (CAP_SYS_RESOURCE, "SYS_RESOURCE"), (CAP_PERFMON, "PERFMON"), (CAP_BPF, "BPF")];
    let mut names: Vec<String> =
        known.iter().filter(|(cap, _)| mask & bit(*cap) != 0).map(|(_, n)| (*n).to_string()).collect();
    let others = (mask & !known.iter().fold(0, |m, (cap, _)| m | bit(*cap))).count_ones();
    if others > 0 {
        names.push(format!("{others} other(s)"));
    }
    names.join(", ")
}

/// Threads of this process.
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_read_back_as_written_and_names_say_what_is_held() {
        let now = current().expect("capget");
        // Setting what is held is always allowed, privileged or not.
        set(now).expect("capset to the same sets");
        assert_eq!(current().expect("capget"), now);
        assert_eq!(describe(0), "none");
        assert_eq!(describe(bit(CAP_BPF) | bit(CAP_PERFMON)), "PERFMON, BPF");
        assert_eq!(describe(bit(CAP_BPF) | bit(0) | bit(1)), "BPF, 2 other(s)");
    }

    #[test]
    fn a_thread_that_drops_everything_holds_nothing() {
        // In a thread of its own: capabilities are per thread.
        let after = std::thread::spawn(|| {
            retain(0)?;
            current()
        })
        .join()
        .expect("thread");
        let after = after.expect("drop");
        assert_eq!((after.effective, after.permitted, after.inheritable), (0, 0, 0));
    }
}
