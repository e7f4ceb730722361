//! Start-up scan: what exists already, as the events that would have
//! created it. An agent restarted while pods run learns them here: every
//! cgroup of the tracked hierarchy becomes a mkdir, and every process in a
//! pod container an attach, oldest first (so the oldest is the init). The
//! walk does not go below a container's cgroup: what a container nests
//! there is its own (its processes are the container's), so no tenant can
//! make the walk long, or hide another pod behind its cgroups.

use std::{collections::HashMap, os::unix::fs::MetadataExt as _, path::Path};

use super::cgroups::CgroupLayout;
use crate::{
    events::{
        kernel::{CgroupAttach, CgroupChange},
        Event,
    },
    model::{cgroup_path, registry::TICK_NS},
};

/// Directories deeper than this are not walked (kubelet trees are ~6 deep
/// under any prefix).
const MAX_DEPTH: usize = 32;
/// At most this many cgroups are reported, so a pathological tree cannot
/// stall start-up.
pub const MAX_CGROUPS: usize = 100_000;

/// Synthetic mkdir and attach events for what exists now; `now_ns` stamps them.
pub fn scan(layout: &CgroupLayout, now_ns: u64) -> Vec<Event> {
    let mut events = Vec::new();
    let mut pod_cgroups: HashMap<String, u64> = HashMap::new();
    walk(layout, "", 0, now_ns, &mut events, &mut pod_cgroups);
    events.extend(attachments(layout, &pod_cgroups, now_ns));
    events
}

/// Synthetic mkdir events for the cgroups that exist now, parents first
/// (no /proc walk).
pub fn cgroups(layout: &CgroupLayout, now_ns: u64) -> Vec<Event> {
    let mut events = Vec::new();
    walk(layout, "", 0, now_ns, &mut events, &mut HashMap::new());
    events
}

fn walk(
    layout: &CgroupLayout,
    rel: &str,
    depth: usize,
    now_ns: u64,
    events: &mut Vec<Event>,
    pod_cgroups: &mut HashMap<String, u64>,
) {
    if depth > MAX_DEPTH || events.len() >= MAX_CGROUPS {
        return;
    }
    let dir = layout.dir(rel);
    let Ok(meta) = std::fs::metadata(&dir) else { return };
    let path = if rel.is_empty() { "/".to_string() } else { rel.to_string() };
    let container = cgroup_path::parse(&path).is_some_and(|p| p.container_id.is_some());
    if container {
        pod_cgroups.insert(path.clone(), meta.ino());
    }
    events.push(Event::CgroupMkdir(CgroupChange {
        ts_ns: now_ns,
        hierarchy_id: layout.hierarchy_id(),
        level: depth as u32,
        cgroup_id: meta.ino(),
        path: path.clone(),
        truncated: false,
    }));
    if container {
        return;
    }
    let Ok(entries) = std::fs::read_dir(&dir) else { return };
    let mut children: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    children.sort();
    for child in children {
        walk(layout, &format!("{rel}/{child}"), depth + 1, now_ns, events, pod_cgroups);
    }
}

/// Attach events for processes in pod containers, oldest first per cgroup.
fn attachments(layout: &CgroupLayout, pod_cgroups: &HashMap<String, u64>, now_ns: u64) -> Vec<Event> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found: Vec<(u64, u64, u32, String, String)> = Vec::new();
    for pid in procs.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())) {
        let base = Path::new("/proc").join(pid.to_string());
        let Ok(text) = std::fs::read_to_string(base.join("cgroup")) else { continue };
        let Some(path) = layout.task_path(&text).map(|p| layout.host_path(p)) else { continue };
        // A process in a cgroup nested below a container's is the container's.
        let path = cgroup_path::owner_path(&path).map_or(path.as_str(), |p| p).to_string();
        let Some(&cgroup_id) = pod_cgroups.get(&path) else { continue };
        let Ok(stat) = std::fs::read_to_string(base.join("stat")) else { continue };
        let Some(ticks) = crate::os::proc::start_ticks(&stat) else { continue };
        let comm = std::fs::read_to_string(base.join("comm")).unwrap_or_default();
        found.push((cgroup_id, ticks, pid, comm.trim().to_string(), path));
    }
    found.sort();
    found
        .into_iter()
        .map(|(cgroup_id, ticks, pid, comm, path)| {
            Event::CgroupAttach(CgroupAttach {
                cgroup: CgroupChange {
                    ts_ns: now_ns,
                    hierarchy_id: layout.hierarchy_id(),
                    level: path.matches('/').count() as u32,
                    cgroup_id,
                    path,
                    truncated: false,
                },
                pid,
                start_ns: ticks * TICK_NS,
                comm,
            })
        })
        .collect()
}
