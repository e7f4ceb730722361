//! Any line a server sends `sandwatch events`: read as a record (or not),
//! and its table row is one line with no control character but the
//! table's own colour, at any width.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandwatch::{
    cli::table::Table,
    telemetry::records::Incoming,
    text::{is_hostile, json_escaped},
};

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    assert!(!json_escaped(&line).chars().any(is_hostile));
    let Some(incoming) = Incoming::parse(&line) else { return };
    for table in [
        Table { colour: false, width: Some(120) },
        Table { colour: false, width: None },
        Table { colour: false, width: Some(1) },
    ] {
        let row = table.row(&incoming);
        assert!(!row.chars().any(is_hostile), "{row:?}");
    }
    let coloured = Table { colour: true, width: Some(80) }.row(&incoming);
    let plain = ["\x1b[31m", "\x1b[1;31m", "\x1b[33m", "\x1b[32m", "\x1b[35m", "\x1b[0m"]
        .iter()
        .fold(coloured, |s, c| s.replace(c, ""));
    assert!(!plain.chars().any(is_hostile), "{plain:?}");
});
