//! The kernel programs, by hook family: process exits, forks and execs
//! ([`exit`]), OOM kills ([`oom`]), cgroup changes ([`cgroup`]), the
//! senders of fatal signals ([`signal`]), and what they share
//! ([`common`]): the task table ([`tasks`]) and each container's room in
//! the rings ([`rooms`]). One thin entry per hook, made by [`entry!`];
//! each `try_*` copies fixed-size fields only.

mod cgroup;
mod common;
mod exit;
mod oom;
mod rooms;
mod signal;
mod tasks;

/// Why a probe gave up on a record; logged through aya-log.
type ProbeResult = Result<(), i64>;

/// A hook's entry: the program `$name` of kind `$kind` (an aya-ebpf
/// program attribute) over `$ctx`, which runs `$try` and logs why it gave
/// up, if it did. A program always returns 0.
macro_rules! entry {
    ($kind:ident, $name:ident, $ctx:ty, $try:ident) => {
        #[aya_ebpf::macros::$kind]
        pub fn $name(ctx: $ctx) -> u32 {
            if let Err(e) = $try(&ctx) {
                aya_log_ebpf::warn!(&ctx, "{} probe failed: {}", stringify!($name), e);
            }
            0
        }
    };
}
pub(crate) use entry;
