//! Any /proc text the agent reads: a stat line's start time, a cgroup
//! layout from /proc/mounts and /proc/cgroups (split at the first NUL), a
//! task's cgroup from /proc/<pid>/cgroup; never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandwatch::{os::proc::start_ticks, probes::cgroups::CgroupLayout};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = start_ticks(&text);
    let (mounts, cgroups) = text.split_once('\0').unwrap_or((&text, ""));
    if let Ok(layout) = CgroupLayout::from_tables(mounts, cgroups) {
        if let Some(path) = layout.task_path(cgroups) {
            let _ = layout.host_path(path);
        }
    }
    let v1 = CgroupLayout::from_tables(
        "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n",
        "#subsys_name hierarchy num_cgroups enabled\nmemory 4 1 1\n",
    );
    let v2 = CgroupLayout::from_tables("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n", "");
    for layout in [v1, v2].into_iter().flatten() {
        if let Some(path) = layout.task_path(&text) {
            let _ = layout.host_path(path);
        }
    }
});
