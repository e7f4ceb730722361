//! Room per container in the rings (the rules: `agent_common::rooms`).
//! While a ring is less than a quarter full a record costs one look at
//! how full it is; past that, each owner's records are counted until the
//! reader is past its last one, an owner past its share is refused once
//! the ring is half full, and the last eighth is kept for the records
//! that must not be lost.

use agent_common::{lost, rooms, RingShares};
use aya_ebpf::maps::RingBuf;

use crate::maps::{BPF_RB_CONS_POS, BPF_RB_PROD_POS, SHARES, TRACKED};

/// One owner's count in one ring: its records in the spell, those of them
/// that took the reserve (null where the reserve is not counted so), and
/// where the spell ends. All null: no owner to count (a runtime's exit on
/// the host: always admitted).
#[derive(Clone, Copy)]
pub(crate) struct Spell {
    records: *mut u32,
    firsts: *mut u32,
    until: *mut u64,
}

impl Spell {
    const NONE: Spell =
        Spell { records: core::ptr::null_mut(), firsts: core::ptr::null_mut(), until: core::ptr::null_mut() };

    /// The exit ring's count of `shares` (null: none).
    #[inline(always)]
    fn exits(shares: *mut RingShares) -> Spell {
        if shares.is_null() {
            return Spell::NONE;
        }
        // SAFETY: fields of a map value; only addresses are taken here.
        unsafe {
            Spell {
                records: core::ptr::addr_of_mut!((*shares).exit_records),
                firsts: core::ptr::addr_of_mut!((*shares).exit_first),
                until: core::ptr::addr_of_mut!((*shares).exit_until),
            }
        }
    }

    /// The OOM ring's count of `shares` (null: none).
    #[inline(always)]
    fn oom_kills(shares: *mut RingShares) -> Spell {
        if shares.is_null() {
            return Spell::NONE;
        }
        // SAFETY: as above.
        unsafe {
            Spell {
                records: core::ptr::addr_of_mut!((*shares).oom_records),
                firsts: core::ptr::null_mut(),
                until: core::ptr::addr_of_mut!((*shares).oom_until),
            }
        }
    }
}

/// The shares of tracked cgroup `cgroup_id`, or else of `SHARES` slot
/// `slot` (`rooms::SHARE_*`; `u32::MAX`: none).
#[inline(always)]
pub(crate) fn shares_of(cgroup_id: u64, slot: u32) -> *mut RingShares {
    if cgroup_id != 0 {
        if let Some(t) = TRACKED.get_ptr_mut(&cgroup_id) {
            // SAFETY: a field of the map's value; only its address.
            return unsafe { core::ptr::addr_of_mut!((*t).shares) };
        }
    }
    SHARES.get_ptr_mut(slot).unwrap_or_default()
}

/// Whether a ring of `size` bytes with `pending` in it is busy: owners'
/// records are counted.
#[inline(always)]
pub(crate) fn busy(size: u64, pending: u64) -> bool {
    pending >= size / rooms::BUSY_DIVISOR
}

/// Admits a record of `record` bytes (with its ring header) of the owner
/// counted in `spell` into `ring` (`size` bytes, `pending` of them
/// unread; busy), or says why not (`lost::*`). `first` says whether it is
/// one the reserve is kept for; asked only when the owner's share or the
/// reserve is reached. On admission the owner's count has it; [`sent`]
/// then notes where it ends.
#[inline(always)]
fn admit(
    ring: &RingBuf,
    size: u64,
    pending: u64,
    record: u64,
    spell: Spell,
    first_limit: u32,
    first: impl FnOnce(u32) -> bool,
) -> Result<(), u32> {
    if spell.records.is_null() || spell.until.is_null() {
        return Ok(());
    }
    let consumed = ring.query(BPF_RB_CONS_POS);
    // SAFETY: fields of a map value, which lives while the program runs;
    // two CPUs may race on them, which only blurs a count.
    unsafe {
        if *spell.until <= consumed {
            // The reader is past its last record: a new spell.
            *spell.records = 0;
            if !spell.firsts.is_null() {
                *spell.firsts = 0;
            }
        }
        let reserve_only = size.saturating_sub(pending) < size / rooms::SHARE_DIVISOR;
        let crowded = pending >= size / rooms::CROWDED_DIVISOR
            && u64::from(*spell.records).saturating_mul(record) >= size / rooms::SHARE_DIVISOR;
        if reserve_only || crowded {
            let firsts = if spell.firsts.is_null() { 0 } else { *spell.firsts };
            if firsts >= first_limit || !first(*spell.records) {
                return Err(if reserve_only { lost::RESERVE } else { lost::CONTAINER_SHARE });
            }
            if !spell.firsts.is_null() {
                *spell.firsts += 1;
            }
        }
        *spell.records += 1;
    }
    Ok(())
}

/// After a counted record was reserved in `ring`: its owner's spell lasts
/// until the reader is past it.
#[inline(always)]
pub(crate) fn sent(ring: &RingBuf, spell: Spell) {
    if !spell.until.is_null() {
        // SAFETY: a field of a map value.
        unsafe { *spell.until = ring.query(BPF_RB_PROD_POS) };
    }
}

/// An exit record of the owner whose shares are `shares` (null: none) into
/// the exit ring; `first` says whether its process's parent is outside
/// its container (an init's or a sandbox's exit). The spell to pass to
/// [`sent`], or why it is refused.
#[inline(always)]
pub(crate) fn admit_exit(
    ring: &RingBuf,
    size: u64,
    pending: u64,
    record: u64,
    shares: *mut RingShares,
    first: impl FnOnce() -> bool,
) -> Result<Spell, u32> {
    let spell = Spell::exits(shares);
    admit(ring, size, pending, record, spell, rooms::FIRST_EXITS, |_| first())?;
    Ok(spell)
}

/// An OOM record of the owner whose shares are `shares` into the OOM
/// ring: a container's first kills of a spell may take the reserve.
#[inline(always)]
pub(crate) fn admit_oom_kill(
    ring: &RingBuf,
    size: u64,
    pending: u64,
    record: u64,
    shares: *mut RingShares,
) -> Result<Spell, u32> {
    let spell = Spell::oom_kills(shares);
    admit(ring, size, pending, record, spell, u32::MAX, |records| records < rooms::FIRST_OOM_KILLS)?;
    Ok(spell)
}

/// Whether a cgroup record may go into the cgroup ring (`size` bytes,
/// `pending` unread): mkdirs and rmdirs always (while there is room), an
/// attach not into the ring's last eighth.
#[inline(always)]
pub(crate) fn admit_cgroup(size: u64, pending: u64, attach: bool) -> Result<(), u32> {
    if attach && size.saturating_sub(pending) < size / rooms::SHARE_DIVISOR {
        return Err(lost::RESERVE);
    }
    Ok(())
}

/// Whether a signal record may go into the signal ring (`size` bytes,
/// `pending` unread). A pod's signals to its own container stop at half
/// the ring: a tenant can send those as fast as it likes and keep its
/// processes alive through them (`sigtimedwait` unblocks what it waits
/// for; a tracer holds its tracee). Signals from another container go up
/// to the last eighth, which is kept for the senders no pod controls
/// (`unowned`: the host's processes, a runtime's, the kubelet's, and the
/// kernel's kills, the OOM killer's). The kernel's notices a process asked
/// for (its timers, its CPU limit), streamed only as they end it, go up
/// to the last eighth whichever task ran when they fired.
#[inline(always)]
pub(crate) fn admit_signal(size: u64, pending: u64, inside: bool, unowned: bool) -> Result<(), u32> {
    if size == 0 || pending < size / rooms::CROWDED_DIVISOR {
        return Ok(());
    }
    if inside {
        return Err(lost::CONTAINER_SHARE);
    }
    if !unowned && size.saturating_sub(pending) < size / rooms::SHARE_DIVISOR {
        return Err(lost::RESERVE);
    }
    Ok(())
}

/// The ring header the kernel puts before each record.
pub(crate) const RING_HEADER: u64 = 8;
