//! Any BTF blob: parsing, member lookups and tracepoint prototypes never
//! panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandwatch::probes::btf::Btf;

fuzz_target!(|data: &[u8]| {
    if let Ok(btf) = Btf::parse(data.to_vec()) {
        let _ = btf.member_offset("task_struct", "pid");
        let _ = btf.member_offset("outer", "wanted");
        let _ = btf.tracepoint_passes("mark_victim", 0, "task_struct");
    }
});
