//! What the agent reads off the machine it runs on, below any policy:
//! clocks, `/proc`, and the few libc calls that say who and where it is.
//! Every helper here is a thin, fallible read; deciding what a reading
//! means is the caller's business.

pub mod caps;
pub mod inotify;
pub mod notices;
pub mod proc;

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, SystemTime},
};

/// One malloc arena for every thread (glibc builds; musl's allocator has
/// none). glibc gives each new thread an arena of its own: the HTTP
/// server's thread, rendering scrapes, grew and fragmented one until the
/// agent's RSS crept up over a soak (+12 % in 2 minutes; +2 % with one).
/// The agent's few threads do not contend enough for more to pay. And
/// fixed mmap and trim thresholds (128 KiB, glibc's defaults): glibc
/// raises both each time it frees a large mmapped block, such as a
/// scrape's body, after which such blocks come from the heap and what
/// they free is kept. Before any thread starts.
pub fn one_malloc_arena() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets allocator parameters.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 10);
    }
}

/// Gives the heap's free pages back to the kernel (glibc builds; musl's
/// allocator returns them as it frees). glibc keeps what a burst freed —
/// the start-up scan's strings, a storm's findings, a scrape's buffers —
/// in its arena, counted in the agent's RSS, unless it is at the heap's
/// top; `malloc_trim` releases free pages anywhere in it.
pub fn return_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory of the allocator's own.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Set where a burst of allocations ran outside the agent loop, which
/// sees only its own: a scrape's render (its families gathered as many
/// small blocks, freed when the body is done).
static HEAP_CHURNED: AtomicBool = AtomicBool::new(false);

/// Says that a burst outside the agent loop freed heap, for
/// [`take_heap_churned`].
pub fn heap_churned() {
    HEAP_CHURNED.store(true, Ordering::Relaxed);
}

/// Whether heap was freed outside the agent loop since the last call.
pub fn take_heap_churned() -> bool {
    HEAP_CHURNED.swap(false, Ordering::Relaxed)
}

/// Lets the kernel take back the pages of `bytes`, read-only data of the
/// binary that is not needed again (the embedded eBPF object, once
/// loaded): they stop counting in the agent's RSS. Still readable: a
/// later read faults the page in again from the file.
pub fn release_pages(bytes: &'static [u8]) {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
    let start = (bytes.as_ptr() as usize).div_ceil(page) * page;
    let end = (bytes.as_ptr() as usize + bytes.len()) / page * page;
    if end > start {
        // SAFETY: whole pages inside a static, read-only mapping of the
        // binary; MADV_DONTNEED on a private file mapping only drops their
        // copies from this process, and nothing here writes them.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    }
}

/// CLOCK_BOOTTIME, the clock of the kernel's event timestamps.
pub fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

/// CLOCK_REALTIME, the clock of the runtime's event timestamps.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// Both clocks at one moment: the kernel's (boot time) and the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// CLOCK_BOOTTIME ns.
    pub boot_ns: u64,
    /// CLOCK_REALTIME ns since the epoch.
    pub wall_ns: u64,
}

impl Now {
    pub fn read() -> Self {
        Self { boot_ns: boottime_ns(), wall_ns: realtime_ns() }
    }

    /// The boot-clock time of a wall-clock timestamp (the runtime stamps
    /// its events with the wall clock, the kernel with boot time).
    pub fn boot_of_wall(&self, wall_ns: u64) -> u64 {
        wall_ns.saturating_sub(self.wall_ns.saturating_sub(self.boot_ns))
    }

    /// The wall-clock time of a boot-clock timestamp; one from the future
    /// is now.
    pub fn wall_of_boot(&self, boot_ns: u64) -> SystemTime {
        let now = SystemTime::UNIX_EPOCH + Duration::from_nanos(self.wall_ns);
        let ago = Duration::from_nanos(self.boot_ns.saturating_sub(boot_ns));
        now.checked_sub(ago).unwrap_or(now)
    }
}

/// This machine's hostname, the node name when none is given.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::from("unknown");
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Clock ticks per second (USER_HZ), the unit of /proc start times.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// The size of a memory page, which the kernel's page counters count in
/// (4096 when it cannot be read).
pub fn page_size() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| {
        u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok().filter(|p| *p > 0).unwrap_or(4096)
    })
}

/// The CPUs the kernel may run on (1 when it cannot be read): the node's,
/// not this process's share of them.
pub fn cpus() -> u64 {
    static CPUS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *CPUS.get_or_init(|| {
        u64::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }).ok().filter(|n| *n > 0).unwrap_or(1)
    })
}

/// The kernel's largest pid (32768 when it cannot be read).
pub fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse::<u32>().ok()).unwrap_or(32768)
}

/// Raises this process's soft descriptor limit to its hard limit (no
/// privilege needed); returns the soft limit now.
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the rlimit we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    lim.rlim_cur
}

/// This process's real user id.
pub fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_and_wall_timestamps_convert_both_ways() {
        let now = Now { boot_ns: 10_000_000_000, wall_ns: 1_000_000_000_000 };
        assert_eq!(now.wall_of_boot(7_000_000_000), SystemTime::UNIX_EPOCH + Duration::from_secs(997));
        assert_eq!(
            now.wall_of_boot(11_000_000_000),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1000),
            "a timestamp from the future is now"
        );
        assert_eq!(now.boot_of_wall(999_000_000_000), 9_000_000_000);
        assert_eq!(now.boot_of_wall(1), 0, "before boot is boot");
    }

    #[test]
    fn the_clocks_run() {
        let a = Now::read();
        let b = Now::read();
        assert!(a.boot_ns > 0 && b.boot_ns >= a.boot_ns);
        assert!(a.wall_ns > 1_700_000_000_000_000_000, "wall clock after 2023");
    }
}
