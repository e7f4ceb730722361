//! Any bytes from the ring buffer: decoding never panics, and what decodes
//! re-encodes to a record that decodes to the same event.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandwatch::events::{decode, encode};

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = decode(data) {
        let again = decode(&encode(&event)).expect("an encoded event decodes");
        assert_eq!(again, event);
    }
});
