//! `cargo xtask lint`: formatting, clippy and the watchdog core's purity
//! (see `purity`), the first step of `cargo xtask test`. Each check runs even when one before it failed; the
//! result names every check that failed.

use std::process::Command;

use anyhow::Result;

use crate::util::{cargo_path, workspace_root};

/// One check: what it is called in the summary, and the command.
struct Check {
    name: &'static str,
    args: &'static [&'static str],
}

/// Host crates with every target and feature (the privileged tests
/// included), then the eBPF crate for its own target with nightly.
const CHECKS: &[Check] = &[
    Check { name: "cargo fmt --check", args: &["fmt", "--all", "--check"] },
    Check { name: "cargo fmt --check (fuzz)", args: &["fmt", "--manifest-path", "fuzz/Cargo.toml", "--check"] },
    Check {
        name: "cargo clippy (host crates)",
        args: &[
            "clippy",
            "--workspace",
            "--exclude",
            "agent-ebpf",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ],
    },
    Check {
        name: "cargo clippy (eBPF crate)",
        args: &[
            "+nightly",
            "clippy",
            "--package",
            "agent-ebpf",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--",
            "-D",
            "warnings",
        ],
    },
];

/// Runs every check; returns the names of those that failed.
pub fn run() -> Result<Vec<String>> {
    let root = workspace_root()?;
    let mut failed = Vec::new();
    for check in CHECKS {
        eprintln!("lint: {}", check.name);
        // `cargo +nightly` only works through rustup's proxy, not the
        // cargo binary xtask runs under.
        let program =
            if check.args.first().is_some_and(|a| a.starts_with('+')) { "cargo".into() } else { cargo_path() };
        let ok = Command::new(program).args(check.args).current_dir(&root).status().is_ok_and(|s| s.success());
        if !ok {
            failed.push(format!("lint: `{}` failed", check.name));
        }
    }
    eprintln!("lint: the watchdog core does no I/O");
    for violation in crate::purity::violations(&root)? {
        failed.push(format!("lint: {violation}"));
    }
    if failed.is_empty() {
        eprintln!("lint: formatting, clippy and the core's purity clean");
    }
    Ok(failed)
}
