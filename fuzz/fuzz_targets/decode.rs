//! Any bytes from the ring buffer: decoding never panics, and what decodes
//! re-encodes to a record that decodes to the same event.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandwatch::events::{decode, encode};

/// Pages as on x86-64.
const PAGE: u64 = 4096;

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = decode(data, PAGE) {
        let again = decode(&encode(&event, PAGE), PAGE).expect("an encoded event decodes");
        assert_eq!(again, event);
    }
});
