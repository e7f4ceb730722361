//! Any tracefs `format` text: parsing never panics; every field it returns
//! has a name.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandwatch::probes::tracefs::parse_format;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(fields) = parse_format(text) {
        assert!(fields.keys().all(|name| !name.is_empty()));
    }
});
