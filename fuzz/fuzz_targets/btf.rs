//! Any BTF blob: parsing and member lookups never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandwatch::probes::btf::Btf;

fuzz_target!(|data: &[u8]| {
    if let Ok(btf) = Btf::parse(data.to_vec()) {
        let _ = btf.member_offset("task_struct", "pid");
        let _ = btf.member_offset("outer", "wanted");
    }
});
