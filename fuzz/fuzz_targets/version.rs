//! Any version string a runtime reports: a version or none, and the known
//! issues it is exposed to, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandwatch::runtime::known_issues::{exposure, Version};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parsed = Version::parse(&text);
    let exposed: Vec<bool> = exposure("containerd", &text).into_iter().map(|(_, e)| e).collect();
    if parsed.is_none() {
        assert!(exposed.iter().all(|e| !e), "an unparsed version exposes nothing");
    }
});
