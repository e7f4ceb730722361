//! Which cgroup hierarchy attributes a task to its pod: the memory
//! controller's on cgroup v1, the unified one on v2. Also reads a task's
//! cgroup from /proc to seed the in-kernel task table.

use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use crate::events::memory::{MemoryLimits, MemorySample, Psi};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("unknown cgroup layout: no cgroup v1 memory hierarchy and no cgroup v2 mount in /proc/mounts")]
    UnknownLayout,
    #[error("cannot read {0}: {1}")]
    Read(&'static str, std::io::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupMode {
    /// cgroup v1: the memory controller's hierarchy.
    V1Memory { hierarchy_id: u32 },
    /// cgroup v2: the unified hierarchy (kernel hierarchy id 0).
    V2,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLayout {
    pub mode: CgroupMode,
    /// Where the tracked hierarchy is mounted.
    pub mount: PathBuf,
    /// Host path of this process's cgroup-namespace root: `/` unless the
    /// agent runs in a private cgroup namespace (containers on cgroup v2),
    /// where /proc/<pid>/cgroup paths are relative to it.
    pub ns_root: String,
}

impl CgroupLayout {
    pub fn detect() -> Result<Self, CgroupError> {
        let mounts = std::fs::read_to_string("/proc/mounts").map_err(|e| CgroupError::Read("/proc/mounts", e))?;
        let cgroups = std::fs::read_to_string("/proc/cgroups").map_err(|e| CgroupError::Read("/proc/cgroups", e))?;
        let mut layout = Self::from_tables(&mounts, &cgroups)?;
        layout.ns_root = find_ns_root(&layout);
        Ok(layout)
    }

    /// Decides from the text of /proc/mounts and /proc/cgroups. A v1 memory
    /// hierarchy wins over a controller-less v2 mount (hybrid systems).
    pub fn from_tables(mounts: &str, proc_cgroups: &str) -> Result<Self, CgroupError> {
        let memory_hierarchy = proc_cgroups
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|cols| cols.first() == Some(&"memory"))
            .and_then(|cols| {
                let hierarchy = cols.get(1)?.parse::<u32>().ok()?;
                let enabled = cols.get(3) == Some(&"1");
                (enabled && hierarchy != 0).then_some(hierarchy)
            });
        let mut v2_mount = None;
        for line in mounts.lines() {
            let cols: Vec<_> = line.split_whitespace().collect();
            let (Some(dir), Some(fstype), Some(opts)) = (cols.get(1), cols.get(2), cols.get(3)) else {
                continue;
            };
            if *fstype == "cgroup" && opts.split(',').any(|o| o == "memory") {
                if let Some(hierarchy_id) = memory_hierarchy {
                    return Ok(Self {
                        mode: CgroupMode::V1Memory { hierarchy_id },
                        mount: PathBuf::from(dir),
                        ns_root: "/".to_string(),
                    });
                }
            }
            // Prefer /sys/fs/cgroup itself over a hybrid's /sys/fs/cgroup/unified.
            if *fstype == "cgroup2" && (v2_mount.is_none() || *dir == "/sys/fs/cgroup") {
                v2_mount = Some(PathBuf::from(dir));
            }
        }
        v2_mount
            .map(|mount| Self { mode: CgroupMode::V2, mount, ns_root: "/".to_string() })
            .ok_or(CgroupError::UnknownLayout)
    }

    pub fn hierarchy_id(&self) -> u32 {
        match self.mode {
            CgroupMode::V1Memory { hierarchy_id } => hierarchy_id,
            CgroupMode::V2 => 0,
        }
    }

    pub fn is_unified(&self) -> bool {
        self.mode == CgroupMode::V2
    }

    /// The path of a task's cgroup in the tracked hierarchy, from the text of
    /// /proc/<pid>/cgroup (lines `id:controllers:path`).
    pub fn task_path<'a>(&self, proc_cgroup: &'a str) -> Option<&'a str> {
        proc_cgroup.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let id = parts.next()?.parse::<u32>().ok()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            let wanted = match self.mode {
                CgroupMode::V1Memory { hierarchy_id } => {
                    id == hierarchy_id && controllers.split(',').any(|c| c == "memory")
                }
                CgroupMode::V2 => id == 0 && controllers.is_empty(),
            };
            wanted.then_some(path)
        })
    }

    /// A path as /proc/<pid>/cgroup shows it, as the kernel's tracepoints
    /// and the hierarchy's mount show it (from the hierarchy root).
    pub fn host_path(&self, proc_path: &str) -> String {
        resolve(&self.ns_root, proc_path)
    }

    /// Directory of a cgroup path relative to the hierarchy root.
    pub fn dir(&self, path: &str) -> PathBuf {
        self.mount.join(path.trim_start_matches('/'))
    }

    /// The kernel's cgroup id is the inode number of its directory.
    pub fn cgroup_id(&self, path: &str) -> std::io::Result<u64> {
        std::fs::metadata(self.dir(path)).map(|m| m.ino())
    }

    /// How many times the kernel entered the OOM path for the limit of the
    /// cgroup at `path` itself (v2 `memory.events.local` `oom`); `None` on
    /// v1, where no file shows it.
    pub fn oom_count(&self, path: &str) -> Option<u64> {
        match self.mode {
            CgroupMode::V1Memory { .. } => None,
            CgroupMode::V2 => {
                let text = std::fs::read_to_string(self.dir(path).join("memory.events.local")).ok()?;
                stat_field(&text, "oom")
            }
        }
    }

    /// Whether the OOM killer kills the cgroup as a whole
    /// (`memory.oom.group`, cgroup v2 only: `Some(false)` on v1); `None`
    /// when it cannot be read (the cgroup is gone, or no memory controller).
    pub fn oom_group(&self, path: &str) -> Option<bool> {
        match self.mode {
            CgroupMode::V1Memory { .. } => Some(false),
            CgroupMode::V2 => {
                let text = std::fs::read_to_string(self.dir(path).join("memory.oom.group")).ok()?;
                match text.trim() {
                    "1" => Some(true),
                    "0" => Some(false),
                    _ => None,
                }
            }
        }
    }
}

impl CgroupLayout {
    /// The memory limit of a cgroup (`memory.max` on v2; on v1 the lower of
    /// `memory.limit_in_bytes` and `memory.memsw.limit_in_bytes`, which
    /// runc holds equal); `None` when unlimited, unreadable or gone.
    pub fn memory_limit(&self, path: &str) -> Option<u64> {
        let dir = self.dir(path);
        let read = |file: &str| std::fs::read_to_string(dir.join(file)).ok().and_then(|t| parse_memory_limit(&t));
        match self.mode {
            CgroupMode::V1Memory { .. } => {
                let memory = read("memory.limit_in_bytes");
                match (memory, read("memory.memsw.limit_in_bytes")) {
                    (Some(m), Some(sw)) => Some(m.min(sw)),
                    (m, sw) => m.or(sw),
                }
            }
            CgroupMode::V2 => read("memory.max"),
        }
    }

    /// A cgroup's memory limits (`None` when unreadable or gone).
    pub fn memory_limits(&self, path: &str) -> Option<MemoryLimits> {
        let dir = self.dir(path);
        let read = |file: &str| std::fs::read_to_string(dir.join(file)).ok();
        let limit = |file: &str| read(file).and_then(|t| parse_memory_limit(&t));
        Some(match self.mode {
            CgroupMode::V1Memory { .. } => MemoryLimits {
                max: parse_memory_limit(&read("memory.limit_in_bytes")?),
                high: None,
                swap: limit("memory.memsw.limit_in_bytes"),
            },
            CgroupMode::V2 => MemoryLimits {
                max: parse_memory_limit(&read("memory.max")?),
                high: limit("memory.high"),
                swap: limit("memory.swap.max"),
            },
        })
    }

    /// The files whose writes change a cgroup's memory limits: the names a
    /// watch on its directory reports.
    pub fn limit_files(&self) -> &'static [&'static str] {
        match self.mode {
            CgroupMode::V1Memory { .. } => &["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"],
            CgroupMode::V2 => &["memory.max", "memory.high", "memory.swap.max"],
        }
    }

    /// A full read of a cgroup's memory for its pressure (usage, limit,
    /// working set, limit hits, refaults, PSI); `None` when unreadable or
    /// gone.
    pub fn memory_sample(&self, path: &str) -> Option<MemorySample> {
        let dir = self.dir(path);
        let read = |file: &str| std::fs::read_to_string(dir.join(file)).ok();
        let usage = self.memory_usage(path)?;
        let stat = read("memory.stat")?;
        let field = |name: &str| stat_field(&stat, name).unwrap_or(0);
        Some(match self.mode {
            CgroupMode::V1Memory { .. } => {
                let fails = ["memory.failcnt", "memory.memsw.failcnt"]
                    .iter()
                    .filter_map(|f| read(f)?.trim().parse::<u64>().ok())
                    .sum();
                MemorySample {
                    usage,
                    limit: self.memory_limit(path),
                    inactive_file: field("total_inactive_file"),
                    file: field("total_cache"),
                    shmem: field("total_shmem"),
                    limit_hits: Some(fails),
                    high_hits: None,
                    high: None,
                    refaults: field("total_workingset_refault_anon") + field("total_workingset_refault_file"),
                    psi: None,
                }
            }
            CgroupMode::V2 => {
                let events = read("memory.events").unwrap_or_default();
                MemorySample {
                    usage,
                    limit: self.memory_limit(path),
                    inactive_file: field("inactive_file"),
                    file: field("file"),
                    shmem: field("shmem"),
                    limit_hits: stat_field(&events, "max"),
                    high_hits: stat_field(&events, "high"),
                    high: read("memory.high").and_then(|t| parse_memory_limit(&t)),
                    // Before 5.9 one count for both.
                    refaults: stat_field(&stat, "workingset_refault")
                        .unwrap_or_else(|| field("workingset_refault_anon") + field("workingset_refault_file")),
                    psi: read("memory.pressure").and_then(|t| parse_psi(&t)),
                }
            }
        })
    }
}

/// A `name value` line of a flat-keyed cgroup file (`memory.stat`,
/// `memory.events`).
pub fn stat_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// PSI's `some avg10=…` and `full avg10=…` (`memory.pressure`), in
/// hundredths of a percent.
pub fn parse_psi(text: &str) -> Option<Psi> {
    let avg10 = |kind: &str| -> Option<u32> {
        let line = text.lines().find(|l| l.split_whitespace().next() == Some(kind))?;
        let value = line.split_whitespace().find_map(|w| w.strip_prefix("avg10="))?;
        let (whole, frac) = value.split_once('.').unwrap_or((value, "0"));
        let frac: String = frac.chars().chain(std::iter::repeat('0')).take(2).collect();
        let hundredths = whole.parse::<u32>().ok()?.checked_mul(100)?.checked_add(frac.parse::<u32>().ok()?)?;
        Some(hundredths.min(10_000))
    };
    Some(Psi { some_avg10: avg10("some")?, full_avg10: avg10("full").unwrap_or(0) })
}

impl CgroupLayout {
    /// What a cgroup's memory holds, from its `memory.stat` (hierarchical:
    /// its children's too) and its usage file; `None` when unreadable or
    /// gone. v2: `anon`, `file`, `shmem`, and `kernel` (or, before 5.18,
    /// its parts); v1: `total_rss`, `total_cache`, `total_shmem`, and the
    /// kernel memory `memory.kmem.usage_in_bytes` counts.
    pub fn memory_stat(&self, path: &str) -> Option<crate::events::kernel::MemoryStat> {
        let dir = self.dir(path);
        let text = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
        let field = |name: &str| stat_field(&text, name);
        let usage = self.memory_usage(path)?;
        Some(match self.mode {
            CgroupMode::V1Memory { .. } => {
                let kmem = std::fs::read_to_string(dir.join("memory.kmem.usage_in_bytes")).ok();
                crate::events::kernel::MemoryStat {
                    usage,
                    anon: field("total_rss").unwrap_or(0),
                    file: field("total_cache").unwrap_or(0),
                    shmem: field("total_shmem").unwrap_or(0),
                    kernel: kmem.and_then(|t| t.trim().parse().ok()).unwrap_or(0),
                    swap: field("total_swap").unwrap_or(0),
                    zswap: 0,
                }
            }
            CgroupMode::V2 => crate::events::kernel::MemoryStat {
                usage,
                anon: field("anon").unwrap_or(0),
                file: field("file").unwrap_or(0),
                shmem: field("shmem").unwrap_or(0),
                kernel: field("kernel").unwrap_or_else(|| {
                    ["slab", "kernel_stack", "pagetables", "sock", "percpu"].iter().filter_map(|f| field(f)).sum()
                }),
                swap: std::fs::read_to_string(dir.join("memory.swap.current"))
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                    .unwrap_or(0),
                zswap: field("zswap").unwrap_or(0),
            },
        })
    }

    /// A cgroup's memory usage (`memory.usage_in_bytes` on v1,
    /// `memory.current` on v2).
    pub fn memory_usage(&self, path: &str) -> Option<u64> {
        let file = match self.mode {
            CgroupMode::V1Memory { .. } => "memory.usage_in_bytes",
            CgroupMode::V2 => "memory.current",
        };
        std::fs::read_to_string(self.dir(path).join(file)).ok()?.trim().parse().ok()
    }
}

/// v2 writes `max`; v1's "unlimited" is a page-rounded i64::MAX.
fn parse_memory_limit(text: &str) -> Option<u64> {
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes < 1 << 62).then_some(bytes)
}

/// The memory cgroup this process is in (v1) or its unified cgroup (v2),
/// relative to the hierarchy root.
pub fn own_cgroup(layout: &CgroupLayout) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    layout.task_path(&text).map(|p| layout.host_path(p))
}

/// `base` joined with `rel`, `..` and `.` resolved, never above the root.
pub fn resolve(base: &str, rel: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in base.split('/').chain(rel.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Where this process's cgroup namespace is rooted in the hierarchy. If
/// the cgroup that /proc/self/cgroup names does not list our pid when read
/// from the hierarchy's mount, that path is namespace-relative: the root
/// is the cgroup under which our path lists us. The kernel says how deep
/// it is without a walk (the mount's root as this namespace shows it in
/// /proc/self/mountinfo: `/..` once per level); the directories at that
/// depth are looked at, none below a container's cgroup (what a tenant
/// nests there is never walked), at most [`NS_ROOT_WALK`] of them. Where
/// the mount says nothing, every depth is looked at, within the same
/// bounds.
fn find_ns_root(layout: &CgroupLayout) -> String {
    let me = std::process::id().to_string();
    let Some(own_rel) =
        std::fs::read_to_string("/proc/self/cgroup").ok().and_then(|t| layout.task_path(&t).map(str::to_string))
    else {
        return "/".to_string();
    };
    if lists_pid(layout, &own_rel, &me) {
        return "/".to_string();
    }
    let depth = std::fs::read_to_string("/proc/self/mountinfo").ok().and_then(|t| ns_root_depth(&t, &layout.mount));
    let mut walk = NsRootWalk { layout, own_rel: &own_rel, pid: &me, depth, visited: 0 };
    match walk.find("") {
        Some(root) => {
            log::info!("the cgroup namespace is rooted at {root} ({} cgroups looked at)", walk.visited);
            root
        }
        None => {
            log::warn!(
                "cgroup {own_rel} (from /proc/self/cgroup) does not list this process and no cgroup{} lists it there ({} looked at); pod discovery at start-up may miss processes",
                depth.map_or(String::new(), |d| format!(" {d} levels down")),
                walk.visited
            );
            "/".to_string()
        }
    }
}

/// Directories the namespace root is looked for in, at most.
pub const NS_ROOT_WALK: usize = 100_000;

/// How many levels below the mount of `mount` this process's cgroup
/// namespace is rooted, from /proc/self/mountinfo's text: the kernel shows
/// a cgroup mount's root relative to the reader's namespace root (`/..`
/// per level up). `None` when the mount is not there or its root says
/// something else (a mount of a sub-tree).
pub fn ns_root_depth(mountinfo: &str, mount: &Path) -> Option<usize> {
    let mount = mount.to_str()?;
    let root = mountinfo.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.get(4) == Some(&mount)).then(|| cols.get(3).copied()).flatten()
    })?;
    let parts: Vec<&str> = root.split('/').filter(|p| !p.is_empty()).collect();
    parts.iter().all(|p| *p == "..").then_some(parts.len())
}

/// Whether cgroup `rel`'s `cgroup.procs` lists `pid`.
fn lists_pid(layout: &CgroupLayout, rel: &str, pid: &str) -> bool {
    std::fs::read_to_string(layout.dir(rel).join("cgroup.procs"))
        .is_ok_and(|procs| procs.lines().any(|l| l.trim() == pid))
}

/// The walk for the namespace root.
struct NsRootWalk<'a> {
    layout: &'a CgroupLayout,
    /// Our cgroup as the namespace shows it.
    own_rel: &'a str,
    pid: &'a str,
    /// The root's depth, where the mount says it.
    depth: Option<usize>,
    visited: usize,
}

impl NsRootWalk<'_> {
    /// The namespace root at or below `rel`.
    fn find(&mut self, rel: &str) -> Option<String> {
        self.visited += 1;
        if self.visited > NS_ROOT_WALK {
            return None;
        }
        let level = rel.split('/').filter(|p| !p.is_empty()).count();
        let here = if rel.is_empty() { "/" } else { rel };
        if self.depth.is_none_or(|d| d == level) && lists_pid(self.layout, &resolve(here, self.own_rel), self.pid) {
            return Some(here.to_string());
        }
        // Not below the root's depth, nor below a container's cgroup, nor
        // deeper than any kubelet tree goes.
        let container = crate::model::cgroup_path::parse(here).is_some_and(|p| p.container_id.is_some());
        if self.depth.is_some_and(|d| level >= d) || container || level >= 32 {
            return None;
        }
        let entries = std::fs::read_dir(self.layout.dir(rel)).ok()?;
        let children: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        children.into_iter().find_map(|child| self.find(&format!("{rel}/{child}")))
    }
}

/// True if `path` exists as a cgroup directory in the layout.
pub fn exists(layout: &CgroupLayout, path: &str) -> bool {
    Path::new(&layout.dir(path)).is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n\
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n\
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
    const V1_CGROUPS: &str = "#subsys_name\thierarchy\tnum_cgroups\tenabled\n\
cpu\t1\t1\t1\nmemory\t4\t48\t1\n";
    const V2_MOUNTS: &str = "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n";
    const V2_CGROUPS: &str = "#subsys_name\thierarchy\tnum_cgroups\tenabled\nmemory\t0\t90\t1\n";

    #[test]
    fn hybrid_v1_uses_the_memory_hierarchy() {
        let l = CgroupLayout::from_tables(HYBRID_MOUNTS, V1_CGROUPS).unwrap();
        assert_eq!(l.mode, CgroupMode::V1Memory { hierarchy_id: 4 });
        assert_eq!(l.mount, PathBuf::from("/sys/fs/cgroup/memory"));
        let proc = "9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n";
        assert_eq!(l.task_path(proc), Some("/process_api/abc"));
        assert_eq!(l.dir("/a/b"), PathBuf::from("/sys/fs/cgroup/memory/a/b"));
    }

    #[test]
    fn pure_v2_uses_the_unified_hierarchy() {
        let l = CgroupLayout::from_tables(V2_MOUNTS, V2_CGROUPS).unwrap();
        assert_eq!(l.mode, CgroupMode::V2);
        assert_eq!(l.hierarchy_id(), 0);
        assert_eq!(l.task_path("0::/kubepods.slice/x.scope\n"), Some("/kubepods.slice/x.scope"));
    }

    #[test]
    fn no_cgroup_mount_is_an_unknown_layout() {
        let err = CgroupLayout::from_tables("proc /proc proc rw 0 0\n", V1_CGROUPS).unwrap_err();
        assert!(err.to_string().starts_with("unknown cgroup layout"));
    }

    #[test]
    fn namespaced_paths_resolve_against_the_namespace_root() {
        assert_eq!(resolve("/", "/kubepods/pod1"), "/kubepods/pod1");
        assert_eq!(resolve("/kubepods.slice/agent.scope", "/../../system.slice/x"), "/system.slice/x");
        assert_eq!(resolve("/a/b", "/../../../../x"), "/x", "never above the root");
        assert_eq!(resolve("/a", "/"), "/a");
        assert_eq!(resolve("/a", "./b/../c"), "/a/c");
    }

    #[test]
    fn garbage_proc_cgroup_lines_are_skipped() {
        let l = CgroupLayout::from_tables(V2_MOUNTS, V2_CGROUPS).unwrap();
        assert_eq!(l.task_path("garbage\n::\nx:y:z\n"), None);
    }

    #[test]
    fn psi_reads_its_ten_second_averages_in_hundredths() {
        let text =
            "some avg10=12.34 avg60=1.00 avg300=0.10 total=81234\nfull avg10=0.5 avg60=0.00 avg300=0.00 total=40\n";
        assert_eq!(parse_psi(text), Some(Psi { some_avg10: 1234, full_avg10: 50 }));
        assert_eq!(parse_psi("some avg10=100.00 avg60=0 total=1\n"), Some(Psi { some_avg10: 10_000, full_avg10: 0 }));
        for bad in ["", "some avg60=1.00\n", "some avg10=x.1\n", "some avg10=99999999999.00\n"] {
            assert_eq!(parse_psi(bad), None, "{bad:?}");
        }
        assert_eq!(stat_field("low 0\nhigh 3\nmax 17\noom 1\n", "max"), Some(17));
        assert_eq!(stat_field("max_usage 3\n", "max"), None, "a prefix is no field");
    }

    #[test]
    fn the_namespace_roots_depth_is_read_off_mountinfo() {
        let mountinfo = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
35 31 0:32 /../.. /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n\
37 31 0:34 /kubepods/x /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        assert_eq!(ns_root_depth(mountinfo, Path::new("/sys/fs/cgroup/memory")), Some(2));
        assert_eq!(ns_root_depth(mountinfo, Path::new("/sys/fs/cgroup/devices")), Some(0));
        assert_eq!(ns_root_depth(mountinfo, Path::new("/sys/fs/cgroup/pids")), None, "a sub-tree's mount");
        assert_eq!(ns_root_depth(mountinfo, Path::new("/sys/fs/cgroup/cpu")), None, "not mounted");
    }

    #[test]
    fn memory_limits_read_unlimited_as_none() {
        assert_eq!(parse_memory_limit("33554432\n"), Some(32 << 20));
        assert_eq!(parse_memory_limit("max\n"), None);
        assert_eq!(parse_memory_limit("9223372036854771712\n"), None);
        assert_eq!(parse_memory_limit(""), None);
    }
}
