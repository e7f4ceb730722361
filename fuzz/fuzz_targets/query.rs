//! Any query string of `/events`: parsed into a filter, or one line saying
//! what is wrong; never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandwatch::telemetry::server::parse_query;

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else { return };
    if let Err(line) = parse_query(query) {
        assert!(!line.contains('\n'), "{line:?}");
    }
});
