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

/// Runs `cargo test …`, echoing its output; returns the counts over every
/// test binary and whether cargo succeeded.
pub fn cargo_test(args: &[&str]) -> Result<(Tally, bool)> {
    use std::io::{BufRead as _, BufReader};
    let mut child = Command::new(cargo_path())
        .args(args)
        .current_dir(workspace_root()?)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot start cargo test")?;
    let mut tally = Tally::default();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            tally.add_line(&line);
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    Ok((tally, status.success()))
}

/// Replaces this process with `bin args…` so signals reach the agent directly.
pub fn exec(bin: &Path, args: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt as _;
    let err = Command::new(bin).args(args).exec();
    Err(err).with_context(|| format!("cannot run {}", bin.display()))
}

#[cfg(test)]
mod tests {
    use super::Tally;

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
