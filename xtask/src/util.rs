//! Small process helpers shared by the tasks.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

pub fn workspace_root() -> Result<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).context("xtask has no parent directory")
}

/// Where cargo puts what it builds: `CARGO_TARGET_DIR` if set (relative
/// to the current directory, as cargo reads it), else the workspace's
/// `target/`.
pub fn target_dir() -> Result<PathBuf> {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => Ok(std::env::current_dir()?.join(dir)),
        None => Ok(workspace_root()?.join("target")),
    }
}

/// Free bytes on the file system holding `path`, for the suite's phase
/// lines: a full disk fails a link with an error that says little.
pub fn free_bytes(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs(3) fills the zeroed struct it is given, from a
    // NUL-terminated path that outlives the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

pub fn require_root(why: &str) -> Result<()> {
    if !is_root() {
        bail!("this needs root: {why}. Run it as root (e.g. `sudo -E cargo xtask ...`)");
    }
    Ok(())
}

/// Runs a command, failing with its name if it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd.status().with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

/// Attempts at a download before it counts as failed.
pub const DOWNLOAD_ATTEMPTS: u32 = 3;

/// Runs a command that downloads (apt, cargo install, pip, rustup): a
/// failure is retried, after 5 and then 10 s, up to DOWNLOAD_ATTEMPTS in
/// all, each retry logged; the last failure is the error.
pub fn download(what: &str, mut cmd: impl FnMut() -> Command) -> Result<()> {
    retrying(what, DOWNLOAD_ATTEMPTS, std::time::Duration::from_secs(5), || run(&mut cmd()))
}

/// `attempt` until it succeeds, at most `attempts` times, waiting `first`
/// and then twice as long before each retry.
pub fn retrying<T>(
    what: &str,
    attempts: u32,
    first: std::time::Duration,
    mut attempt: impl FnMut() -> Result<T>,
) -> Result<T> {
    let mut wait = first;
    for n in 1.. {
        match attempt() {
            Ok(v) => return Ok(v),
            Err(e) if n < attempts => {
                eprintln!("retry: {what} failed ({e:#}); attempt {} of {attempts} in {} s", n + 1, wait.as_secs());
                std::thread::sleep(wait);
                wait *= 2;
            }
            Err(e) => return Err(e.context(format!("{what} failed {attempts} times"))),
        }
    }
    unreachable!("the loop returns")
}

/// Runs a command and returns its stdout, or None if it could not run or failed.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The cargo that runs xtask.
pub fn cargo_path() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

/// Runs cargo (the same one that runs xtask) in the workspace root.
pub fn cargo(args: &[&str]) -> Result<()> {
    run(Command::new(cargo_path()).args(args).current_dir(workspace_root()?))
}

/// Tracked files that differ from the commit, with their content hashes:
/// what a run must leave as it found it.
pub struct TrackedFiles(std::collections::BTreeMap<String, String>);

impl TrackedFiles {
    pub fn snapshot() -> Result<Self> {
        let root = workspace_root()?;
        let status =
            output(Command::new("git").args(["status", "--porcelain", "--untracked-files=no"]).current_dir(&root))
                .context("`git status` failed: is this a git checkout?")?;
        let files = status
            .lines()
            .filter_map(|l| l.get(3..))
            .map(|path| {
                let hash =
                    output(Command::new("git").args(["hash-object", path]).current_dir(&root)).unwrap_or_default();
                (path.to_string(), hash.trim().to_string())
            })
            .collect();
        Ok(Self(files))
    }

    /// Tracked files changed since the snapshot (newly modified, or
    /// modified further).
    pub fn changed_since(&self) -> Result<Vec<String>> {
        let now = Self::snapshot()?;
        let mut changed: Vec<String> =
            now.0.iter().filter(|(path, hash)| self.0.get(*path) != Some(hash)).map(|(p, _)| p.clone()).collect();
        // Reverted to the commit by the run is a change too.
        changed.extend(self.0.keys().filter(|p| !now.0.contains_key(*p)).cloned());
        Ok(changed)
    }
}

/// Test counts taken from libtest's `test result:` lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
}

impl Tally {
    /// Adds the counts of one `test result: …` line; other lines are ignored.
    pub fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim_start().strip_prefix("test result: ") else {
            return;
        };
        let count = |what: &str| {
            rest.split(';')
                .find_map(|p| p.trim().strip_suffix(what)?.trim().rsplit(' ').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        self.passed += count("passed");
        self.failed += count("failed");
        self.ignored += count("ignored");
    }

    pub fn add(&mut self, other: Tally) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }

    /// `N passed, N failed` (and `N skipped`: ignored tests never count as passed).
    pub fn summary(&self) -> String {
        let mut s = format!("{} passed, {} failed", self.passed, self.failed);
        if self.ignored > 0 {
            s.push_str(&format!(", {} skipped", self.ignored));
        }
        s
    }
}

/// What one `cargo test` run did.
#[derive(Debug, Default)]
pub struct CargoTest {
    pub tally: Tally,
    /// Test binaries that failed or died, as cargo names them
    /// (`-p sandwatch --test runtime`).
    pub failed_targets: Vec<String>,
    pub success: bool,
}

/// Runs `cargo test …`, echoing its output; returns the counts over every
/// test binary and the binaries that failed.
pub fn cargo_test(args: &[&str]) -> Result<CargoTest> {
    cargo_test_to(args, &mut |line| println!("{line}"))
}

/// `cargo test …` with each line of its output, stdout and stderr in the
/// order they came, given to `echo` (printed, or kept to be printed later
/// when another phase prints at the same time).
pub fn cargo_test_to(args: &[&str], echo: &mut dyn FnMut(String)) -> Result<CargoTest> {
    use std::io::{BufRead as _, BufReader};
    let mut child = Command::new(cargo_path())
        .args(args)
        .current_dir(workspace_root()?)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("cannot start cargo test")?;
    let stderr = child.stderr.take().context("cargo test stderr")?;
    let stdout = child.stdout.take().context("cargo test stdout")?;
    // cargo's own messages (which binary failed or died) on stderr, the
    // tests' output on stdout: read beside each other, kept apart.
    let (lines, read) = std::sync::mpsc::channel::<(bool, String)>();
    let from_stderr = lines.clone();
    let errors = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = from_stderr.send((true, line));
        }
    });
    let output = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send((false, line));
        }
    });
    let mut tally = Tally::default();
    let mut failed_targets = Vec::new();
    for (is_stderr, line) in read {
        if is_stderr {
            failed_targets.extend(failed_target(&line));
        } else {
            tally.add_line(&line);
        }
        echo(line);
    }
    let _ = (errors.join(), output.join());
    let status = child.wait().context("waiting for cargo test")?;
    failed_targets.dedup();
    Ok(CargoTest { tally, failed_targets, success: status.success() })
}

/// The integration test binaries of the workspace's default members that
/// build with `features` on: what `cargo test --tests` would run.
pub fn test_targets(features: &[&str]) -> Result<Vec<String>> {
    let out = Command::new(cargo_path())
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(workspace_root()?)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot run cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed with {}", out.status);
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).context("cargo metadata's JSON")?;
    integration_tests(&meta, features)
}

/// `test_targets` read from `cargo metadata`'s JSON.
fn integration_tests(meta: &serde_json::Value, features: &[&str]) -> Result<Vec<String>> {
    let members = meta["workspace_default_members"].as_array().context("no workspace_default_members")?;
    let packages = meta["packages"].as_array().context("no packages")?;
    let mut names = Vec::new();
    for package in packages.iter().filter(|p| members.contains(&p["id"])) {
        for target in package["targets"].as_array().into_iter().flatten() {
            let is_test = target["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "test"));
            let builds = target["required-features"]
                .as_array()
                .is_none_or(|needed| needed.iter().all(|f| f.as_str().is_some_and(|f| features.contains(&f))));
            if let (true, true, Some(name)) = (is_test, builds, target["name"].as_str()) {
                names.push(name.to_string());
            }
        }
    }
    if names.is_empty() {
        bail!("cargo metadata lists no test binaries");
    }
    Ok(names)
}

/// The target of cargo's `error: test failed, to rerun pass `…``.
fn failed_target(line: &str) -> Option<String> {
    let rest = line.trim().strip_prefix("error: test failed, to rerun pass `")?;
    Some(rest.split('`').next()?.to_string())
}

/// Replaces this process with `bin args…` so signals reach the agent directly.
pub fn exec(bin: &Path, args: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt as _;
    let err = Command::new(bin).args(args).exec();
    Err(err).with_context(|| format!("cannot run {}", bin.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_binaries_are_those_whose_features_are_on() {
        let meta = serde_json::json!({
            "workspace_default_members": ["a"],
            "packages": [
                {"id": "a", "targets": [
                    {"name": "lib", "kind": ["lib"]},
                    {"name": "plain", "kind": ["test"]},
                    {"name": "privileged", "kind": ["test"], "required-features": ["integration"]},
                    {"name": "in_vm", "kind": ["test"], "required-features": ["integration", "vm"]},
                ]},
                {"id": "b", "targets": [{"name": "not_a_default_member", "kind": ["test"]}]},
            ],
        });
        assert_eq!(integration_tests(&meta, &["integration"]).unwrap(), ["plain", "privileged"]);
        assert_eq!(integration_tests(&meta, &[]).unwrap(), ["plain"]);
    }

    #[test]
    fn cargo_names_the_test_binary_that_failed() {
        assert_eq!(
            failed_target("error: test failed, to rerun pass `-p sandwatch --test runtime`").as_deref(),
            Some("-p sandwatch --test runtime")
        );
        assert_eq!(failed_target("warning: unused import"), None);
    }

    #[test]
    fn retries_are_bounded_and_the_last_error_is_kept() {
        let mut calls = 0;
        let r: Result<()> = retrying("fetch", 3, std::time::Duration::ZERO, || {
            calls += 1;
            anyhow::bail!("try {calls}")
        });
        assert_eq!(calls, 3);
        let text = format!("{:#}", r.unwrap_err());
        assert!(text.contains("fetch failed 3 times") && text.contains("try 3"), "{text}");
        let mut calls = 0;
        let r = retrying("fetch", 3, std::time::Duration::ZERO, || {
            calls += 1;
            if calls < 2 {
                anyhow::bail!("flaky")
            }
            Ok(calls)
        });
        assert_eq!(r.unwrap(), 2);
    }

    #[test]
    fn tally_reads_libtest_result_lines() {
        let mut t = Tally::default();
        t.add_line("test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 1.2s");
        t.add_line("test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 5 filtered out");
        t.add_line("test foo ... ok");
        t.add_line("[vm] running 3 tests");
        assert_eq!(t, Tally { passed: 5, failed: 1, ignored: 1 });
        assert_eq!(t.summary(), "5 passed, 1 failed, 1 skipped");
    }
}
