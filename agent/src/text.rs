//! Text from outside the agent — a tenant's process names, names from the
//! runtime, whatever a client reads off the wire — is data: stored as it
//! came, and escaped wherever a person or a line-oriented reader meets it,
//! so it can neither drive a terminal nor forge or scramble lines.
//!
//! Escaped are the C0 controls and DEL (`\x1b`, `\x0a`, `\x7f`), the C1
//! controls (`\u{9b}`), the bidirectional overrides and isolates that
//! reorder what is shown (`\u{202e}`), and the backslash itself (`\\`), so
//! that what is shown reads back unambiguously. Invalid UTF-8 never gets
//! this far: the decoder turns each invalid byte of a kernel string into `?`.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal or a log line as itself.
pub fn is_hostile(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every hostile character and every backslash shown escaped;
/// borrowed as it is when there is none.
pub fn visible(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c == '\\' || is_hostile(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x80 && is_hostile(c) => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if is_hostile(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A serde_json formatter that also escapes what serde_json leaves as it
/// is inside strings — DEL, the C1 controls, the bidirectional controls —
/// as `\u00XX`: a JSON line stays valid JSON, and printed as it is, it
/// drives nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct JsonEscapes;

impl serde_json::ser::Formatter for JsonEscapes {
    fn write_string_fragment<W: ?Sized + std::io::Write>(&mut self, w: &mut W, fragment: &str) -> std::io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            // serde_json escapes the C0 controls itself, before this.
            if is_hostile(c) {
                w.write_all(&fragment.as_bytes()[start..i])?;
                write!(w, "\\u{:04x}", c as u32)?;
                start = i + c.len_utf8();
            }
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
}

/// `value` as one JSON line, with [`JsonEscapes`].
pub fn json_line<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, serde_json::Error> {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, JsonEscapes);
    value.serialize(&mut ser)?;
    // serde_json writes UTF-8 only.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A JSON text as received, with the characters [`JsonEscapes`] escapes
/// escaped the same way (valid JSON holds them only inside strings, where
/// `\u00XX` means the same): safe to print as it is.
pub fn json_escaped(line: &str) -> Cow<'_, str> {
    if !line.chars().any(is_hostile) {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len() + 12);
    for c in line.chars() {
        if is_hostile(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_shown_not_obeyed() {
        assert_eq!(visible("\u{1b}[2J\u{1b}[HPWNED"), "\\x1b[2J\\x1b[HPWNED");
        assert_eq!(visible("two\nlines\r"), "two\\x0alines\\x0d");
        assert_eq!(visible("del\u{7f} csi\u{9b}2J"), "del\\x7f csi\\u{9b}2J");
        assert_eq!(visible("\u{202e}gpj.exe"), "\\u{202e}gpj.exe");
        assert_eq!(visible("a\\x1b"), "a\\\\x1b", "a backslash in the name is not an escape");
        assert!(matches!(visible("dd"), Cow::Borrowed("dd")));
        assert_eq!(visible("naïve ✓"), "naïve ✓", "other text is text");
    }

    #[test]
    fn json_lines_carry_no_raw_controls_and_read_back_the_same() {
        let name = "\u{1b}[2J\u{7f}\u{9b}\u{202e}x\n";
        let line = json_line(&serde_json::json!({ "comm": name })).unwrap();
        assert!(line.chars().all(|c| !is_hostile(c)), "{line:?}");
        assert_eq!(line, r#"{"comm":"\u001b[2J\u007f\u009b\u202ex\n"}"#);
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["comm"], name);
        let raw = "{\"comm\":\"a\u{9b}b\"}";
        let safe = json_escaped(raw);
        assert_eq!(safe, "{\"comm\":\"a\\u009bb\"}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap()["comm"], "a\u{9b}b");
    }
}
