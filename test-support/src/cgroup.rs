//! A cgroup inside this process's own memory cgroup (v1) or unified cgroup
//! (v2): never anywhere else. Dropping it kills what is left inside (only
//! processes the test started can be there) and removes it with every
//! cgroup below it, deepest first: those it made, and those a container
//! runtime made inside and a failed test left behind; on v1 also the same
//! path in the other hierarchies, where runc creates it too.
//!
//! Paths are relative to the hierarchy's root, as the kernel's tracepoints
//! and /proc/<pid>/cgroup show them.

use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, Context as _, Result};

/// Where the memory controller's hierarchy is mounted on cgroup v1.
const V1_MEMORY: &str = "/sys/fs/cgroup/memory";
const V2: &str = "/sys/fs/cgroup";

pub struct OwnCgroup {
    mount: PathBuf,
    v2: bool,
    path: String,
    /// Cgroups made below, in the order they were made.
    made: Vec<String>,
}

impl OwnCgroup {
    /// `sandwatch-<name>-<pid>` in this process's own cgroup.
    pub fn create(name: &str) -> Result<Self> {
        let own = std::fs::read_to_string("/proc/self/cgroup").context("cannot read /proc/self/cgroup")?;
        let (mount, own_path, v2) = own_cgroup(&own)?;
        let path = format!("{}/sandwatch-{name}-{}", own_path.trim_end_matches('/'), std::process::id());
        let cg = Self { mount: PathBuf::from(mount), v2, path, made: Vec::new() };
        cg.delegate_memory(&own_path);
        std::fs::create_dir(cg.dir(&cg.path)).with_context(|| format!("cannot create cgroup {}", cg.path))?;
        Ok(cg)
    }

    /// This cgroup's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Where its hierarchy is mounted.
    pub fn mount(&self) -> &Path {
        &self.mount
    }

    pub fn is_v2(&self) -> bool {
        self.v2
    }

    /// The directory of the cgroup at `path`.
    pub fn dir(&self, path: &str) -> PathBuf {
        self.mount.join(path.trim_start_matches('/'))
    }

    /// Creates `rel` (and its parents) below this cgroup; returns its path.
    pub fn child(&mut self, rel: &str) -> Result<String> {
        let mut path = self.path.clone();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            let parent = path;
            path = format!("{parent}/{part}");
            if !self.dir(&path).exists() {
                self.delegate_memory(&parent);
                std::fs::create_dir(self.dir(&path)).with_context(|| format!("cannot create cgroup {path}"))?;
                self.made.push(path.clone());
            }
        }
        Ok(path)
    }

    pub fn procs_file(&self, path: &str) -> PathBuf {
        self.dir(path).join("cgroup.procs")
    }

    /// The kernel's id of the cgroup: the inode of its directory.
    pub fn id(&self, path: &str) -> Result<u64> {
        Ok(std::fs::metadata(self.dir(path)).with_context(|| format!("no cgroup {path}"))?.ino())
    }

    pub fn set_memory_limit(&self, path: &str, bytes: u64) -> Result<()> {
        let file = if self.v2 { "memory.max" } else { "memory.limit_in_bytes" };
        let target = self.dir(path).join(file);
        std::fs::write(&target, bytes.to_string()).with_context(|| format!("cannot write {}", target.display()))?;
        if !self.v2 {
            // Without swap accounting the limit is the whole story; with it,
            // keep the OOM from being delayed by swapping.
            let _ = std::fs::write(self.dir(path).join("memory.swappiness"), "0");
        }
        Ok(())
    }

    /// Holds memory + swap of `path` to its memory limit of `bytes`, as runc
    /// does under the CRI: v1 `memory.memsw.limit_in_bytes` (with swap
    /// accounting; without it there is nothing to set), v2
    /// `memory.swap.max` 0.
    pub fn limit_swap(&self, path: &str, bytes: u64) -> Result<()> {
        let (file, value) = if self.v2 {
            ("memory.swap.max", "0".to_string())
        } else {
            ("memory.memsw.limit_in_bytes", bytes.to_string())
        };
        let target = self.dir(path).join(file);
        if !target.exists() {
            return Ok(());
        }
        std::fs::write(&target, value).with_context(|| format!("cannot write {}", target.display()))
    }

    /// Lifts the memory limit of `path` (v2 `max`, v1 `-1`).
    pub fn unlimit_memory(&self, path: &str) -> Result<()> {
        let (file, value) = if self.v2 { ("memory.max", "max") } else { ("memory.limit_in_bytes", "-1") };
        let target = self.dir(path).join(file);
        std::fs::write(&target, value).with_context(|| format!("cannot write {}", target.display()))
    }

    /// The kernel's own count of OOM kills in `path` and below: `oom_kill`
    /// of `memory.events` on v2, of `memory.oom_control` on v1.
    pub fn oom_kills(&self, path: &str) -> Result<u64> {
        let file = if self.v2 { "memory.events" } else { "memory.oom_control" };
        let target = self.dir(path).join(file);
        let text = std::fs::read_to_string(&target).with_context(|| format!("cannot read {}", target.display()))?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill ").and_then(|v| v.trim().parse().ok()))
            .with_context(|| format!("no oom_kill line in {}: {text}", target.display()))
    }

    /// Kills what is inside `path` and removes it with everything below.
    pub fn remove(&mut self, path: &str) {
        remove_tree(&self.mount, path);
        self.made.retain(|p| !is_below(p, path));
    }

    /// On v2, children get a memory controller only if their parent
    /// delegates it; a cgroup that holds processes (other than the root)
    /// cannot, and then `set_memory_limit` says which file is missing.
    fn delegate_memory(&self, parent: &str) {
        if self.v2 {
            let _ = std::fs::write(self.dir(parent).join("cgroup.subtree_control"), "+memory");
        }
    }
}

impl Drop for OwnCgroup {
    fn drop(&mut self) {
        let path = self.path.clone();
        self.remove(&path);
        // On v1 a runtime (runc, cgroupfs driver) creates the same path in
        // every hierarchy; this cgroup's part of it goes too.
        if self.v2 {
            return;
        }
        let Some(root) = self.mount.parent() else { return };
        let Ok(hierarchies) = std::fs::read_dir(root) else { return };
        for h in hierarchies.flatten() {
            let dir = h.path().join(path.trim_start_matches('/'));
            if h.path() != self.mount && dir.is_dir() {
                remove_empty_tree(&dir);
            }
        }
    }
}

/// (mount, own path, v2) from /proc/self/cgroup: the memory controller's
/// line on v1, the unified `0::` line on v2.
fn own_cgroup(proc_self_cgroup: &str) -> Result<(&'static str, String, bool)> {
    let v1 = proc_self_cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let _ = parts.next();
        let controllers = parts.next()?;
        controllers.split(',').any(|c| c == "memory").then(|| parts.next()).flatten()
    });
    if let Some(path) = v1 {
        if !Path::new(V1_MEMORY).is_dir() {
            bail!("cgroup v1 memory controller, but {V1_MEMORY} is not mounted");
        }
        return Ok((V1_MEMORY, path.to_string(), false));
    }
    let path = proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .context("no memory controller nor a unified cgroup in /proc/self/cgroup")?;
    Ok((V2, path.to_string(), true))
}

fn is_below(path: &str, top: &str) -> bool {
    path == top || path.strip_prefix(top).is_some_and(|rest| rest.starts_with('/'))
}

/// Removes `path` and every cgroup below it, deepest first, killing what
/// runs inside each.
fn remove_tree(mount: &Path, path: &str) {
    let dir = mount.join(path.trim_start_matches('/'));
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(mount, &format!("{path}/{}", e.file_name().to_string_lossy()));
            }
        }
    }
    remove_one(&dir);
}

/// Kill what is inside (only processes a test started can be there), wait
/// for them to go, rmdir.
fn remove_one(dir: &Path) {
    for _ in 0..100 {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            // SAFETY: kill(2) of a process inside our own cgroup.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("warning: could not remove cgroup {}", dir.display());
}

/// rmdir of a tree of cgroups without processes (a hierarchy whose
/// processes were killed through the memory one), deepest first.
fn remove_empty_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_tree(&e.path());
            }
        }
    }
    if std::fs::remove_dir(dir).is_err() && dir.exists() {
        eprintln!("warning: could not remove cgroup {}", dir.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_cgroup_is_the_memory_controllers_on_v1_and_the_unified_one_on_v2() {
        let v2 = "0::/user.slice/session-3.scope\n";
        assert_eq!(own_cgroup(v2).unwrap(), (V2, "/user.slice/session-3.scope".to_string(), true));
        let none = "1:name=systemd:/\n";
        assert!(own_cgroup(none).is_err());
    }

    #[test]
    fn below_means_the_path_or_a_child() {
        assert!(is_below("/a/b", "/a/b") && is_below("/a/b/c", "/a/b"));
        assert!(!is_below("/a/bc", "/a/b"));
    }
}
