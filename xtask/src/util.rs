//! Small process helpers shared by the tasks.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

pub fn workspace_root() -> Result<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map(Path::to_path_buf)
        .context("xtask has no parent directory")
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
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs cargo (the same one that runs xtask) in the workspace root.
pub fn cargo(args: &[&str]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    run(Command::new(cargo).args(args).current_dir(workspace_root()?))
}

/// Runs `cargo test …`, echoing its output, and closes with one summary line
/// over every test binary: `tests: N passed, N failed`.
pub fn cargo_test(args: &[&str]) -> Result<()> {
    use std::io::{BufRead as _, BufReader};
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut child = Command::new(cargo)
        .args(args)
        .current_dir(workspace_root()?)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot start cargo test")?;
    let (mut passed, mut failed, mut ignored) = (0u64, 0u64, 0u64);
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            if let Some(rest) = line.strip_prefix("test result: ") {
                let count = |what: &str| {
                    rest.split(';')
                        .find_map(|p| p.trim().strip_suffix(what)?.trim().rsplit(' ').next()?.parse::<u64>().ok())
                        .unwrap_or(0)
                };
                passed += count("passed");
                failed += count("failed");
                ignored += count("ignored");
            }
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    // Ignored tests are reported as skipped, never as passed.
    if ignored > 0 {
        println!("tests: {passed} passed, {failed} failed, {ignored} skipped");
    } else {
        println!("tests: {passed} passed, {failed} failed");
    }
    if !status.success() {
        bail!("cargo test failed with {status}");
    }
    if passed == 0 {
        bail!("no test ran");
    }
    Ok(())
}

/// Replaces this process with `bin args…` so signals reach the agent directly.
pub fn exec(bin: &Path, args: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt as _;
    let err = Command::new(bin).args(args).exec();
    Err(err).with_context(|| format!("cannot run {}", bin.display()))
}
