//! The watchdog core does no I/O: nothing under `agent/src/watchdog/`
//! (its unit tests aside: `tests.rs` and what follows a file's
//! `#[cfg(test)]`) reads a file, /proc or a clock, touches the
//! kernel's maps, spawns, talks to the network, or logs. What it must know
//! of the node comes through its `Host` trait; what it finds goes out as
//! findings. Checked by `cargo xtask lint` and by this crate's unit test.

use std::path::Path;

use anyhow::{Context as _, Result};

/// What the core's code must not name, and why.
const FORBIDDEN: &[(&str, &str)] = &[
    ("std::fs", "reads files"),
    ("File::", "reads files"),
    ("\"/proc", "reads /proc"),
    ("\"/sys", "reads /sys"),
    ("Now::read", "reads the clock"),
    ("boottime_ns(", "reads the clock"),
    ("realtime_ns(", "reads the clock"),
    ("SystemTime::now", "reads the clock"),
    ("Instant::now", "reads the clock"),
    ("libc::", "calls libc"),
    ("std::process", "spawns processes"),
    ("std::net", "talks to the network"),
    ("tokio::", "runs async I/O"),
    ("aya::", "touches the kernel's maps"),
    ("crate::probes", "touches the kernel side"),
    ("crate::node_host", "uses the real host"),
    ("crate::os::proc", "reads /proc"),
    ("crate::runtime::", "talks to the runtime"),
    ("crate::telemetry", "writes outputs itself"),
    ("log::", "logs (findings go to the log consumer)"),
    ("tracing::", "logs (findings go to the log consumer)"),
];

/// `file:line: names X (it reads files)` for every forbidden name in the
/// core's sources under `root`.
pub fn violations(root: &Path) -> Result<Vec<String>> {
    let core = root.join("agent/src/watchdog");
    let mut found = Vec::new();
    let entries = std::fs::read_dir(&core).with_context(|| format!("cannot read {}", core.display()))?;
    let mut files: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    for file in files {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // Tests may build what they like; only .rs sources count.
        if !name.ends_with(".rs") || name == "tests.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
        // A file's own unit tests sit after `#[cfg(test)]`, at its end.
        let lines = text.lines().take_while(|l| l.trim() != "#[cfg(test)]");
        for (n, line) in lines.enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for (name, why) in FORBIDDEN {
                if code.contains(name) {
                    let shown = file.strip_prefix(root).unwrap_or(&file).display().to_string();
                    found.push(format!("{shown}:{}: the watchdog core names `{name}` (it {why})", n + 1));
                }
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_core_does_no_io() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let found = violations(&root).unwrap();
        assert!(found.is_empty(), "{}", found.join("\n"));
    }

    #[test]
    fn a_clock_read_in_the_core_is_named_but_a_comment_or_a_test_is_not() {
        let root = std::env::temp_dir().join(format!("sandwatch-purity-{}", std::process::id()));
        let core = root.join("agent/src/watchdog");
        std::fs::create_dir_all(&core).unwrap();
        std::fs::write(core.join("mod.rs"), "// reads no clock: SystemTime::now\nfn f() {}\n").unwrap();
        std::fs::write(core.join("tests.rs"), "fn t() { std::fs::read(\"/proc/self/stat\"); }\n").unwrap();
        assert!(violations(&root).unwrap().is_empty());
        let with_tests = "fn now() -> u64 {\n    crate::os::boottime_ns()\n}\n#[cfg(test)]\nmod tests { const S: i32 = libc::SIGKILL; }\n";
        std::fs::write(core.join("clock.rs"), with_tests).unwrap();
        let found = violations(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            found,
            ["agent/src/watchdog/clock.rs:2: the watchdog core names `boottime_ns(` (it reads the clock)"]
        );
    }
}
