//! sandwatch kernel programs.
//!
//! Thin tracepoint handlers: each copies fixed-size fields into one ring
//! buffer record and counts what it emitted or dropped. Field offsets come
//! from the agent (read from tracefs and BTF at start-up), never from here.
#![no_std]
#![no_main]
// The one atomic add (`maps::atomic_add`): the BPF target has no atomic
// read-modify-write in Rust, its instruction set does.
#![feature(asm_experimental_arch)]
// aya-ebpf's map methods take `impl Borrow<K>`: passing keys by value is
// what this lint wants, and it makes LLVM emit different (longer) code for
// the hot exit and fork paths, which are measured at their floor.
#![allow(clippy::needless_borrows_for_generic_args)]

mod maps;
mod programs;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects programs that could reach this; it exists only to
    // satisfy no_std.
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
