//! The benchmark's own view of BPF, through the bpf(2) and
//! perf_event_open(2) system calls (no bpftool or bpftrace, so it runs in
//! the VMs' initramfs too): every loaded program's run-time statistics, and
//! the one-program floor — a tracepoint program on `sched_process_exit`
//! doing one map update per exit (a per-CPU hash count, the work of
//! bpftrace's `count()`), the least any exit tracer does.

use std::{
    collections::BTreeMap,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

use anyhow::{bail, Context as _, Result};

const BPF_MAP_CREATE: i64 = 0;
const BPF_MAP_LOOKUP_ELEM: i64 = 1;
const BPF_PROG_LOAD: i64 = 5;
const BPF_PROG_GET_NEXT_ID: i64 = 11;
const BPF_PROG_GET_FD_BY_ID: i64 = 13;
const BPF_OBJ_GET_INFO_BY_FD: i64 = 15;
const BPF_MAP_TYPE_PERCPU_HASH: u32 = 5;
const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_EVENT_IOC_ENABLE: u64 = 0x2400;
const PERF_FLAG_FD_CLOEXEC: u64 = 1 << 3;
const PERF_EVENT_IOC_SET_BPF: u64 = 0x4004_2408;

/// `union bpf_attr`, as zeroed bytes the commands fill in.
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Self {
        Self([0; 128])
    }

    fn put_u32(&mut self, at: usize, v: u32) -> &mut Self {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }

    fn put_u64(&mut self, at: usize, v: u64) -> &mut Self {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }

    fn u32_at(&self, at: usize) -> u32 {
        u32::from_ne_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }
}

fn bpf(cmd: i64, attr: &mut Attr) -> std::io::Result<i64> {
    // SAFETY: bpf(2) with a 128-byte zero-padded attribute buffer that
    // lives across the call; the kernel reads no further than its size.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), attr.0.len()) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: `fd` was just returned by the kernel and is owned by no one else.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// One loaded program's statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramStats {
    pub name: String,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// Every BPF program loaded now, by id (name, run time, runs; the run
/// figures move only while `kernel.bpf_stats_enabled` is 1).
pub fn programs() -> BTreeMap<u32, ProgramStats> {
    let mut found = BTreeMap::new();
    let mut id = 0u32;
    loop {
        let mut attr = Attr::new();
        attr.put_u32(0, id);
        if bpf(BPF_PROG_GET_NEXT_ID, &mut attr).is_err() {
            break;
        }
        id = attr.u32_at(4);
        let mut attr = Attr::new();
        attr.put_u32(0, id);
        // A program unloaded meanwhile is skipped.
        let Ok(fd) = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr).map(owned) else { continue };
        if let Some(stats) = program_info(&fd) {
            found.insert(id, stats);
        }
    }
    found
}

/// `struct bpf_prog_info`: name at 64, run_time_ns at 192, run_cnt at 200.
fn program_info(fd: &OwnedFd) -> Option<ProgramStats> {
    let mut info = [0u8; 232];
    let mut attr = Attr::new();
    attr.put_u32(0, fd.as_raw_fd() as u32).put_u32(4, info.len() as u32).put_u64(8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr).ok()?;
    let name = &info[64..80];
    let name = String::from_utf8_lossy(&name[..name.iter().position(|&b| b == 0).unwrap_or(16)]).into_owned();
    let u64_at = |at: usize| u64::from_ne_bytes(info[at..at + 8].try_into().unwrap_or([0; 8]));
    Some(ProgramStats { name, run_time_ns: u64_at(192), run_cnt: u64_at(200) })
}

/// `struct bpf_insn`.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = (src << 4) | (dst & 0xf);
    b[2..4].copy_from_slice(&off.to_le_bytes());
    b[4..8].copy_from_slice(&imm.to_le_bytes());
    b
}

/// The floor's instructions: `v = lookup(&counts, &0); if v { *v += 1 }
/// else { update(&counts, &0, &1) }`, on the map `map_fd`.
fn floor_instructions(map_fd: i32) -> Vec<[u8; 8]> {
    const R0: u8 = 0;
    const R1: u8 = 1;
    const R2: u8 = 2;
    const R3: u8 = 3;
    const R4: u8 = 4;
    const FP: u8 = 10;
    let load_map = |dst| [insn(0x18, dst, 1, 0, map_fd), insn(0, 0, 0, 0, 0)];
    let mut p = Vec::new();
    p.push(insn(0x62, FP, 0, -4, 0)); // 0: *(u32 *)(fp - 4) = 0
    p.extend(load_map(R1)); // 1-2: r1 = counts
    p.push(insn(0xbf, R2, FP, 0, 0)); // 3: r2 = fp
    p.push(insn(0x07, R2, 0, 0, -4)); // 4: r2 -= 4
    p.push(insn(0x85, 0, 0, 0, 1)); // 5: call map_lookup_elem
    p.push(insn(0x15, R0, 0, 4, 0)); // 6: if r0 == 0 goto 11
    p.push(insn(0x79, R1, R0, 0, 0)); // 7: r1 = *(u64 *)r0
    p.push(insn(0x07, R1, 0, 0, 1)); // 8: r1 += 1
    p.push(insn(0x7b, R0, R1, 0, 0)); // 9: *(u64 *)r0 = r1
    p.push(insn(0x05, 0, 0, 9, 0)); // 10: goto 20
    p.push(insn(0x7a, FP, 0, -16, 1)); // 11: *(u64 *)(fp - 16) = 1
    p.extend(load_map(R1)); // 12-13: r1 = counts
    p.push(insn(0xbf, R2, FP, 0, 0)); // 14: r2 = fp
    p.push(insn(0x07, R2, 0, 0, -4)); // 15: r2 -= 4
    p.push(insn(0xbf, R3, FP, 0, 0)); // 16: r3 = fp
    p.push(insn(0x07, R3, 0, 0, -16)); // 17: r3 -= 16
    p.push(insn(0xb7, R4, 0, 0, 0)); // 18: r4 = BPF_ANY
    p.push(insn(0x85, 0, 0, 0, 2)); // 19: call map_update_elem
    p.push(insn(0xb7, R0, 0, 0, 0)); // 20: r0 = 0
    p.push(insn(0x95, 0, 0, 0, 0)); // 21: exit
    p
}

/// The one-program floor, attached while alive.
pub struct Floor {
    map: OwnedFd,
    _program: OwnedFd,
    _event: OwnedFd,
}

impl Floor {
    /// The program's name in [`programs`].
    pub const NAME: &'static str = "floor_exit";

    pub fn attach() -> Result<Self> {
        let mut attr = Attr::new();
        attr.put_u32(0, BPF_MAP_TYPE_PERCPU_HASH).put_u32(4, 4).put_u32(8, 8).put_u32(12, 1);
        let map = bpf(BPF_MAP_CREATE, &mut attr).map(owned).context("cannot create the floor's map")?;

        let code: Vec<u8> = floor_instructions(map.as_raw_fd()).concat();
        let license = c"GPL";
        let mut log = vec![0u8; 64 * 1024];
        let mut attr = Attr::new();
        attr.put_u32(0, BPF_PROG_TYPE_TRACEPOINT)
            .put_u32(4, (code.len() / 8) as u32)
            .put_u64(8, code.as_ptr() as u64)
            .put_u64(16, license.as_ptr() as u64)
            .put_u32(24, 1)
            .put_u32(28, log.len() as u32)
            .put_u64(32, log.as_mut_ptr() as u64);
        attr.0[48..48 + Self::NAME.len()].copy_from_slice(Self::NAME.as_bytes());
        let program = match bpf(BPF_PROG_LOAD, &mut attr) {
            Ok(fd) => owned(fd),
            Err(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                bail!("the verifier refused the floor program ({e}): {}", String::from_utf8_lossy(&log[..end]).trim());
            }
        };

        let id = tracepoint_id("sched", "sched_process_exit")?;
        // struct perf_event_attr (PERF_ATTR_SIZE_VER5): type, size, config,
        // sample_period 1, wakeup_events 1.
        let mut pattr = Attr::new();
        pattr.put_u32(0, PERF_TYPE_TRACEPOINT).put_u32(4, 112).put_u64(8, id).put_u64(16, 1).put_u32(48, 1);
        // SAFETY: perf_event_open(2) with a zero-padded attribute buffer;
        // pid -1 on CPU 0: a BPF program on a tracepoint runs on every CPU.
        let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, pattr.0.as_ptr(), -1, 0, -1, PERF_FLAG_FD_CLOEXEC) };
        if fd < 0 {
            bail!("perf_event_open on sched:sched_process_exit: {}", std::io::Error::last_os_error());
        }
        let event = owned(fd);
        // SAFETY: ioctls on the perf event just opened, the program's fd as
        // argument.
        unsafe {
            if libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_SET_BPF as _, program.as_raw_fd()) != 0
                || libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_ENABLE as _, 0) != 0
            {
                bail!("cannot attach the floor program: {}", std::io::Error::last_os_error());
            }
        }
        Ok(Self { map, _program: program, _event: event })
    }

    /// Exits counted so far, over every CPU.
    pub fn count(&self) -> Result<u64> {
        let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible").context("possible CPUs")?;
        let cpus = possible
            .trim()
            .split(',')
            .filter_map(|r| r.rsplit('-').next()?.parse::<usize>().ok())
            .max()
            .context("/sys/devices/system/cpu/possible")?
            + 1;
        let key = 0u32;
        let mut values = vec![0u64; cpus];
        let mut attr = Attr::new();
        attr.put_u32(0, self.map.as_raw_fd() as u32)
            .put_u64(8, &key as *const u32 as u64)
            .put_u64(16, values.as_mut_ptr() as u64);
        match bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) {
            Ok(_) => Ok(values.iter().sum()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(0),
            Err(e) => Err(e).context("cannot read the floor's count"),
        }
    }
}

/// The id of tracepoint `category:name`, from tracefs; tracefs is mounted
/// at /sys/kernel/tracing where no one has (as the agent does).
fn tracepoint_id(category: &str, name: &str) -> Result<u64> {
    let read = || {
        ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"].iter().find_map(|root| {
            let path = format!("{root}/events/{category}/{name}/id");
            std::fs::read_to_string(&path).ok().map(|text| (path, text))
        })
    };
    let found = match read() {
        Some(found) => Some(found),
        None if !std::path::Path::new("/sys/kernel/tracing/events").exists() => {
            let status = std::process::Command::new("mount")
                .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
                .status()
                .context("cannot run mount")?;
            if !status.success() {
                bail!("tracefs is not mounted and `mount -t tracefs nodev /sys/kernel/tracing` failed ({status})");
            }
            read()
        }
        None => None,
    };
    match found {
        Some((path, text)) => text.trim().parse().with_context(|| format!("{path}: not a number")),
        None => bail!("tracepoint {category}:{name} not found under /sys/kernel/tracing"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_branches_land_where_the_comments_say() {
        let p = floor_instructions(7);
        assert_eq!(p.len(), 22);
        let target = |i: usize| (i as i64 + 1 + i64::from(i16::from_le_bytes([p[i][2], p[i][3]]))) as usize;
        assert_eq!(target(6), 11, "a miss goes to the update");
        assert_eq!(target(10), 20, "a hit skips it");
        assert_eq!(p[21][0], 0x95, "ends in exit");
        assert_eq!(i32::from_le_bytes(p[1][4..8].try_into().unwrap()), 7, "the map's fd is loaded");
        assert_eq!(p[1][1] >> 4, 1, "as a map fd (BPF_PSEUDO_MAP_FD)");
    }

    /// Needs root (CI is root): the floor loads, runs on exits and is
    /// listed with its statistics.
    #[test]
    fn the_floor_counts_exits_and_is_listed() {
        let floor = Floor::attach().expect("the floor program loads and attaches (root, tracefs)");
        let before = floor.count().unwrap();
        for _ in 0..3 {
            std::process::Command::new("/bin/true").status().unwrap();
        }
        // Other processes exit too; these three at least.
        assert!(floor.count().unwrap() >= before + 3, "counted {} after {before}", floor.count().unwrap());
        let listed = programs();
        assert!(listed.values().any(|p| p.name == Floor::NAME), "listed: {listed:?}");
        drop(floor);
        let gone = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            !programs().values().any(|p| p.name == Floor::NAME)
        });
        assert!(gone, "unloaded with its descriptors");
    }
}
