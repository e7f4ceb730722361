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

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// GitHub's anchor for a heading: lower case, punctuation dropped
    /// (but `-` and `_`), spaces to `-`.
    fn slug(heading: &str) -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    }

    fn anchors(text: &str) -> Vec<String> {
        let mut found: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim_start_matches('#').strip_prefix(' ').filter(|_| l.starts_with('#')))
            .map(slug)
            .collect();
        found.extend(text.split("<a id=\"").skip(1).filter_map(|s| s.split('"').next()).map(str::to_string));
        found
    }

    /// Every link between the README and the docs lands: the file exists
    /// and, where the link names a section, the section does.
    #[test]
    fn links_between_the_docs_land() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = vec![root.join("README.md")];
        for entry in std::fs::read_dir(root.join("docs")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
        let mut broken = Vec::new();
        let mut checked = 0;
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for link in text.split("](").skip(1).filter_map(|s| s.split(')').next()) {
                if link.starts_with("http") || link.contains(' ') {
                    continue;
                }
                let (target, anchor) = link.split_once('#').unwrap_or((link, ""));
                let target = if target.is_empty() { file.clone() } else { file.parent().unwrap().join(target) };
                if target.extension().is_none_or(|e| e != "md") {
                    if !target.exists() {
                        broken.push(format!("{}: {link}", file.display()));
                    }
                    continue;
                }
                checked += 1;
                match std::fs::read_to_string(&target) {
                    Ok(t) if anchor.is_empty() || anchors(&t).iter().any(|a| a == anchor) => {}
                    _ => broken.push(format!("{}: {link}", file.display())),
                }
            }
        }
        assert!(checked > 20, "only {checked} links between the docs found");
        assert!(broken.is_empty(), "links that land nowhere: {broken:#?}");
    }

    #[test]
    fn slugs_as_github_makes_them() {
        assert_eq!(slug("The #12038 churn"), "the-12038-churn");
        assert_eq!(slug("Other kernels, cgroup v2 (`cargo xtask vm`)"), "other-kernels-cgroup-v2-cargo-xtask-vm");
        assert_eq!(slug("One hook per process"), "one-hook-per-process");
    }
}
