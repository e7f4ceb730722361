//! Where the programs read the kernel's structs: member offsets and enum
//! values from the kernel's BTF, handed to them as load-time globals
//! (no CO-RE relocation). All or nothing per struct: what a kernel lacks
//! is `ABSENT`, and the programs skip it.

use agent_common::{MemcgOffsets, OomControlOffsets, SignalOffsets, TaskOffsets, ABSENT};

use super::btf::{Btf, BtfError};

pub(super) fn task_offsets(btf: &Btf) -> Result<TaskOffsets, BtfError> {
    let (cgroup_ancestors, ancestor_ids) = ancestor_offsets(btf);
    let o = btf.member_offsets(&[
        ("task_struct", "exit_code"),
        ("task_struct", "pid"),
        ("task_struct", "tgid"),
        ("task_struct", "real_parent"),
        ("task_struct", "start_boottime"),
        ("task_struct", "group_leader"),
        ("task_struct", "signal"),
        ("signal_struct", "live"),
        ("signal_struct", "nr_threads"),
        ("signal_struct", "sum_sched_runtime"),
        ("task_struct", "comm"),
        ("cgroup", "root"),
        ("cgroup_root", "hierarchy_id"),
        ("cgroup", "level"),
        ("cgroup", "kn"),
        ("kernfs_node", "id"),
    ])?;
    Ok(TaskOffsets {
        exit_code: o[0],
        pid: o[1],
        tgid: o[2],
        real_parent: o[3],
        start_boottime: o[4],
        group_leader: o[5],
        signal: o[6],
        signal_live: o[7],
        signal_nr_threads: o[8],
        signal_sum_runtime: o[9],
        comm: o[10],
        cgroup_root: o[11],
        root_hierarchy_id: o[12],
        cgroup_level: o[13],
        cgroup_kn: o[14],
        kn_id: o[15],
        // Where a task's cgroup is read off it (v2).
        task_cgroups: btf.member_offset("task_struct", "cgroups").unwrap_or(ABSENT),
        css_dfl_cgrp: btf.member_offset("css_set", "dfl_cgrp").unwrap_or(ABSENT),
        cgroup_ancestors,
        ancestor_ids: u32::from(ancestor_ids),
    })
}

/// Where a cgroup's ancestors are listed by level: `cgroup.ancestors`
/// (pointers, Linux 6.0 on) or `cgroup.ancestor_ids` (ids, before); where
/// neither is, a cgroup nested below a container's is not found (its
/// tasks read as the host's) and the agent says so once.
pub(super) fn ancestor_offsets(btf: &Btf) -> (u32, bool) {
    if let Ok(at) = btf.member_offset("cgroup", "ancestors") {
        return (at, false);
    }
    if let Ok(at) = btf.member_offset("cgroup", "ancestor_ids") {
        return (at, true);
    }
    log::warn!("this kernel's BTF has neither cgroup.ancestors nor cgroup.ancestor_ids: processes in cgroups a container made below its own read as the host's");
    (ABSENT, false)
}

/// Where the OOM program finds the page counters of the task that ran out
/// of memory and of each memory cgroup above it (which limit fired). All
/// or nothing: where this kernel's BTF lacks one, none are read and every
/// kill's limit is said unknown, for that reason.
pub(super) fn memcg_offsets(btf: &Btf, v1: bool) -> Result<MemcgOffsets, BtfError> {
    let memory_id = btf
        .enumerator("cgroup_subsys_id", "memory_cgrp_id")
        .and_then(|id| u32::try_from(id).ok())
        .ok_or_else(|| BtfError::NoMember("cgroup_subsys_id".into(), "memory_cgrp_id".into()))?;
    let o = btf.member_offsets(&[
        ("css_set", "subsys"),
        ("cgroup_subsys_state", "cgroup"),
        ("mem_cgroup", "memory"),
        ("page_counter", "usage"),
        ("page_counter", "max"),
        ("page_counter", "parent"),
    ])?;
    let pointer = core::mem::size_of::<u64>() as u32;
    Ok(MemcgOffsets {
        css_set_memory: o[0] + memory_id * pointer,
        css_cgroup: o[1],
        memory: o[2],
        // v1 charges memory + swap first where a limit is set on it (runc
        // sets it to the memory limit): its counter can be the one that fails.
        memsw: if v1 { btf.member_offset("mem_cgroup", "memsw")? } else { ABSENT },
        counter_usage: o[3],
        counter_max: o[4],
        counter_parent: o[5],
        oom_events: oom_events(btf),
    })
}

/// Where a memory cgroup keeps the kernel's count of the OOMs it ran for
/// its own limit: `memory_events_local[MEMCG_OOM]` (Linux 5.2 and later,
/// on v1 as on v2). `ABSENT` where this kernel's BTF lacks either: which
/// limit fired is then judged from the page counters alone.
fn oom_events(btf: &Btf) -> u32 {
    let at = btf.member_offset("mem_cgroup", "memory_events_local").ok();
    let index = btf.enumerator("memcg_memory_event", "MEMCG_OOM").and_then(|v| u32::try_from(v).ok());
    // atomic_long_t: a long.
    match at.zip(index).and_then(|(at, i)| i.checked_mul(8)?.checked_add(at)) {
        Some(offset) => offset,
        None => {
            log::warn!("this kernel's BTF has no mem_cgroup.memory_events_local[MEMCG_OOM]: which limit fired on an OOM kill is judged from page counters alone");
            ABSENT
        }
    }
}

/// Where the OOM record reads the killer's own decision (`struct
/// oom_control`, and the values of `enum oom_constraint`). All or nothing.
pub(super) fn oom_control_offsets(btf: &Btf) -> Result<OomControlOffsets, BtfError> {
    let o = btf.member_offsets(&[("oom_control", "memcg"), ("oom_control", "constraint")])?;
    let value = |name: &str| {
        btf.enumerator("oom_constraint", name)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| BtfError::NoMember("oom_constraint".into(), name.into()))
    };
    Ok(OomControlOffsets {
        memcg: o[0],
        constraint: o[1],
        none: value("CONSTRAINT_NONE")?,
        cpuset: value("CONSTRAINT_CPUSET")?,
        memory_policy: value("CONSTRAINT_MEMORY_POLICY")?,
        memcg_value: value("CONSTRAINT_MEMCG")?,
    })
}

/// Where the signal program reads a target's disposition and a siginfo's
/// `si_code` (see `SignalOffsets`). All or nothing.
pub(super) fn signal_offsets(btf: &Btf) -> Result<SignalOffsets, BtfError> {
    let o = btf.member_offsets(&[
        ("task_struct", "sighand"),
        ("sighand_struct", "action"),
        ("k_sigaction", "sa"),
        ("sigaction", "sa_handler"),
        ("task_struct", "blocked"),
        ("task_struct", "real_blocked"),
        ("kernel_siginfo", "si_code"),
        ("task_struct", "stack"),
    ])?;
    let size = btf.struct_size("k_sigaction").ok_or_else(|| BtfError::NoStruct("k_sigaction".into()))?;
    // x86-64's IRQ stack is THREAD_SIZE bytes, KASAN's doubling included.
    let thread_size = btf.struct_size("irq_stack").ok_or_else(|| BtfError::NoStruct("irq_stack".into()))?;
    Ok(SignalOffsets {
        task_sighand: o[0],
        sighand_action: o[1],
        k_sigaction_size: size,
        // `sa` is the first member of `struct k_sigaction` on every
        // architecture that has no `ka_restorer` before it.
        sa_handler: o[2] + o[3],
        task_blocked: o[4],
        task_real_blocked: o[5],
        siginfo_code: o[6],
        task_stack: o[7],
        thread_size,
        wakeup_bytes: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count the OOM verdict reads is this kernel's `MEMCG_OOM` slot
    /// of the local events, on v1 as on v2 (every kernel of the matrix
    /// has it).
    #[test]
    fn the_oom_count_is_the_local_events_oom_slot() {
        let btf = Btf::from_sys_fs().expect("kernel BTF at /sys/kernel/btf/vmlinux");
        let local = btf.member_offset("mem_cgroup", "memory_events_local").expect("memory_events_local");
        let oom = btf.enumerator("memcg_memory_event", "MEMCG_OOM").expect("MEMCG_OOM");
        let v1 = btf.member_offset("mem_cgroup", "memsw").is_ok();
        for v1 in [false, v1] {
            let o = memcg_offsets(&btf, v1).expect("memcg offsets");
            assert_eq!(o.oom_events, local + 8 * oom as u32);
            assert_ne!(o.oom_events, ABSENT);
        }
    }
}
