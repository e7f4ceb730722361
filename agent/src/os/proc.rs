//! Reads of `/proc`: process start times, names, threads and capabilities.

use std::path::Path;

use agent_common::as_comm;

/// Field 22 (starttime, in clock ticks since boot) of /proc/<pid>/stat. The
/// comm field may hold spaces and parentheses: parse after the last ')'.
pub fn start_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Fields after comm start at field 3 (state); starttime is field 22.
    after.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// The comm of the live (or not yet reaped) process `pid` started at
/// `start_ns` (kernel boot time; 0 = unknown, then any).
pub fn comm(pid: u32, start_ns: u64) -> Option<String> {
    let base = Path::new("/proc").join(pid.to_string());
    let stat = std::fs::read_to_string(base.join("stat")).ok()?;
    if start_ns != 0 && start_ticks(&stat)? != start_ns / tick_ns() {
        return None; // the pid was reused
    }
    let comm = std::fs::read_to_string(base.join("comm")).ok()?;
    Some(comm.trim_end_matches('\n').to_string())
}

/// Nanoseconds per clock tick of /proc start times.
pub fn tick_ns() -> u64 {
    1_000_000_000 / super::clock_ticks().max(1)
}

/// (tgid, comm) of every process whose comm is one of `names` (as comm
/// shows them: cut to 15 bytes).
pub fn processes_named(names: &[String]) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let wanted: Vec<&[u8]> = names.iter().map(|n| as_comm(n)).collect();
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else { continue };
        let comm = comm.trim_end_matches('\n');
        if wanted.contains(&comm.as_bytes()) {
            found.push((pid, comm.to_string()));
        }
    }
    found
}

/// /proc/<pid>/cgroup.
pub fn cgroups(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()
}

/// (tgid, tid) of every thread under `proc`.
pub fn tasks(proc: &Path) -> Vec<(u32, u32)> {
    let numeric = |e: std::fs::DirEntry| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok());
    let Ok(procs) = std::fs::read_dir(proc) else { return Vec::new() };
    let mut out = Vec::new();
    for tgid in procs.flatten().filter_map(numeric) {
        let Ok(tasks) = std::fs::read_dir(proc.join(tgid.to_string()).join("task")) else { continue };
        out.extend(tasks.flatten().filter_map(numeric).map(|tid| (tgid, tid)));
    }
    out
}

/// This process's effective capabilities (CapEff of /proc/self/status); 0
/// when unreadable.
pub fn effective_capabilities() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_ticks_survives_odd_comms() {
        let stat = "4711 (a) b) (c) S 1 4711 4711 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(start_ticks(stat), Some(987654));
        assert_eq!(start_ticks("garbage"), None);
        assert_eq!(start_ticks("1 (x) S 1"), None);
    }

    #[test]
    fn own_process_is_listed_with_a_start_time_and_its_name() {
        let me = std::process::id();
        assert!(tasks(Path::new("/proc")).contains(&(me, me)));
        let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
        let start = start_ticks(&stat).unwrap();
        assert!(start > 0);
        let name = comm(me, start * tick_ns()).unwrap();
        assert!(!name.is_empty());
        assert_eq!(comm(me, (start + 1) * tick_ns()), None, "another start time is another process");
        assert!(processes_named(std::slice::from_ref(&name)).iter().any(|(pid, c)| *pid == me && *c == name));
    }

    #[test]
    fn long_names_compare_by_their_comm() {
        assert_eq!(as_comm("a-runtime-with-a-long-name"), b"a-runtime-with-");
        assert_eq!(as_comm("crio"), b"crio");
    }
}
