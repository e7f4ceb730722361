//! Runs a piece of start-up work on a thread that may read files only
//! beneath a few directories (Landlock, Linux 5.13+).
//!
//! Why: aya 0.14's `EbpfLoader::new()` reads and parses the kernel's whole
//! BTF (`/sys/kernel/btf/vmlinux`, 5.5 MB here, ~12 MiB once parsed) before
//! `.btf(None)` can say it is not wanted. The agent computes its offsets
//! itself, so the loader's thread is denied that file: the parse never
//! happens, and start-up peaks that much lower. (aya's later releases parse
//! lazily; they need a newer rustc than this project builds with.)
//!
//! The restriction is the thread's own: the rest of the agent is not
//! confined, and the thread ends with the work. Where Landlock is missing
//! or refused, the work runs unconfined — it costs memory, not correctness.

use std::{ffi::CString, os::fd::AsRawFd as _, path::Path};

/// `LANDLOCK_ACCESS_FS_READ_FILE` (linux/landlock.h).
const ACCESS_FS_READ_FILE: u64 = 1 << 2;
/// `LANDLOCK_RULE_PATH_BENEATH`.
const RULE_PATH_BENEATH: libc::c_int = 1;

/// `struct landlock_ruleset_attr`, its first (ABI 1) member only: the
/// kernel accepts the shorter struct.
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the UAPI header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// How the work ran.
#[derive(Debug, PartialEq, Eq)]
pub enum Confinement {
    /// File reads outside `readable` were refused.
    Confined,
    /// Landlock was not available; the work ran with every file readable.
    Unconfined(String),
}

/// Runs `work` on its own thread, which may read files only beneath
/// `readable` (directories). If one of them cannot be opened the thread
/// is not confined at all: the work may need what is beneath it.
pub fn with_reads_only_beneath<T: Send>(readable: &[&Path], work: impl FnOnce() -> T + Send) -> (T, Confinement) {
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let confinement = match restrict_reads(readable) {
                Ok(()) => Confinement::Confined,
                Err(why) => Confinement::Unconfined(why),
            };
            (work(), confinement)
        });
        match worker.join() {
            Ok(done) => done,
            // The work's own panic, passed on unchanged.
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Confines the calling thread: reading a file needs a rule, and only the
/// directories in `readable` get one.
fn restrict_reads(readable: &[&Path]) -> Result<(), String> {
    let attr = RulesetAttr { handled_access_fs: ACCESS_FS_READ_FILE };
    // SAFETY: a valid attr pointer and its size; flags 0.
    let ruleset = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if ruleset < 0 {
        return Err(format!("landlock_create_ruleset: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: the syscall returned a new fd that nothing else owns.
    let ruleset = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(ruleset as i32) };
    for dir in readable {
        let c_dir =
            CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| format!("{}: NUL in path", dir.display()))?;
        // SAFETY: a NUL-terminated path; the fd is closed below.
        let fd = unsafe { libc::open(c_dir.as_ptr(), libc::O_PATH | libc::O_CLOEXEC | libc::O_DIRECTORY) };
        if fd < 0 {
            return Err(format!("{}: {}", dir.display(), std::io::Error::last_os_error()));
        }
        // SAFETY: the fd was just opened and is owned here.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let rule = PathBeneathAttr { allowed_access: ACCESS_FS_READ_FILE, parent_fd: fd.as_raw_fd() };
        // SAFETY: a valid ruleset fd, rule type and rule pointer; flags 0.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                RULE_PATH_BENEATH,
                &rule as *const PathBeneathAttr,
                0u32,
            )
        };
        if rc != 0 {
            return Err(format!("landlock_add_rule {}: {}", dir.display(), std::io::Error::last_os_error()));
        }
    }
    // Without CAP_SYS_ADMIN, Landlock needs no_new_privs; it is this
    // thread's own flag, and the thread ends with the work.
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(format!("PR_SET_NO_NEW_PRIVS: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a valid ruleset fd; flags 0.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) } != 0 {
        return Err(format!("landlock_restrict_self: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs a kernel with Landlock (5.13+, enabled): fails, rather than
    /// passes, where it is missing, so a test run says which it had.
    #[test]
    fn the_thread_reads_only_beneath_the_allowed_directories() {
        let dir = std::env::temp_dir().join(format!("sandwatch-sandbox-{}", std::process::id()));
        let allowed = dir.join("allowed");
        std::fs::create_dir_all(&allowed).unwrap();
        std::fs::write(allowed.join("f"), "yes").unwrap();
        std::fs::write(dir.join("g"), "no").unwrap();

        let ((inside, outside), how) = with_reads_only_beneath(&[&allowed], || {
            (std::fs::read_to_string(allowed.join("f")), std::fs::read_to_string(dir.join("g")))
        });
        // A directory that is not there: nothing is confined.
        let (missing, unconfined) =
            with_reads_only_beneath(&[&allowed, Path::new("/nonexistent")], || std::fs::read_to_string(dir.join("g")));
        // The caller's thread was never confined.
        let after = std::fs::read_to_string(dir.join("g"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(how, Confinement::Confined, "Landlock is needed for this test");
        assert_eq!(inside.unwrap(), "yes");
        assert_eq!(outside.unwrap_err().kind(), std::io::ErrorKind::PermissionDenied);
        assert_eq!(after.unwrap(), "no");
        assert!(
            matches!(unconfined, Confinement::Unconfined(ref why) if why.contains("/nonexistent")),
            "{unconfined:?}"
        );
        assert_eq!(missing.unwrap(), "no");
    }
}
