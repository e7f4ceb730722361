//! `cargo xtask fuzz`: every cargo-fuzz target for a few seconds, starting
//! from the corpus kept in fuzz/corpus/<target>. New inputs go to a
//! scratch corpus, so a run never changes the repository; a crash fails
//! the run and names the reproducer to turn into a regression test.

use std::process::Command;

use anyhow::{bail, Context as _, Result};

use crate::util::workspace_root;

pub const TARGETS: [&str; 9] = [
    "decode",
    "cgroup_path",
    "tracefs_format",
    "btf",
    "query",
    "record_row",
    "containerd_event",
    "proc_parsers",
    "version",
];

#[derive(clap::Args)]
pub struct Args {
    /// Seconds per target.
    #[arg(long, default_value_t = 60)]
    seconds: u32,
    /// Instead of a random exploration, this many inputs from a fixed seed:
    /// the same commit then fuzzes the same way everywhere (CI uses it).
    #[arg(long)]
    runs: Option<u32>,
    /// Only this target.
    #[arg(long, value_parser = TARGETS)]
    target: Option<String>,
    /// Build without AddressSanitizer (faster to build and run). The
    /// fuzzed code is safe Rust but for the decoder's one length-checked
    /// `read_unaligned`: bounds checks, overflow checks and debug
    /// assertions still stop a run at the first fault.
    #[arg(long)]
    no_sanitizer: bool,
}

impl Args {
    /// What `cargo xtask test` runs: 200 000 inputs per target from seed 1
    /// (at most 60 s each), so CI never fails on a new random find; new
    /// finds come from `cargo xtask fuzz`. Without ASan: its cold build of
    /// the fuzz workspace took two minutes more of the suite's budget
    /// (6 min against 4), for code where it finds nothing bounds checks miss.
    pub fn short() -> Self {
        Self { seconds: 60, runs: Some(200_000), target: None, no_sanitizer: true }
    }
}

pub fn run_all(args: &Args) -> Result<()> {
    if args.seconds == 0 {
        bail!("--seconds must be at least 1");
    }
    let fuzz_dir = workspace_root()?.join("fuzz");
    let scratch = std::env::temp_dir().join(format!("sandwatch-fuzz-{}", std::process::id()));
    let targets: Vec<&str> = match &args.target {
        Some(t) => vec![t.as_str()],
        None => TARGETS.to_vec(),
    };
    for target in targets {
        let work = scratch.join(target);
        std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
        let seeds = fuzz_dir.join("corpus").join(target);
        match args.runs {
            Some(runs) => eprintln!("fuzz: {target}, {runs} inputs from seed 1"),
            None => eprintln!("fuzz: {target} for {} s", args.seconds),
        }
        let out = Command::new("cargo")
            .current_dir(&fuzz_dir)
            .args(["+nightly", "fuzz", "run", target])
            .args(if args.no_sanitizer { &["--sanitizer", "none"][..] } else { &[][..] })
            .arg(&work)
            .arg(&seeds)
            .arg("--")
            .arg(format!("-max_total_time={}", args.seconds))
            .args(args.runs.map(|r| [format!("-runs={r}"), "-seed=1".to_string()]).into_iter().flatten())
            .arg("-rss_limit_mb=2048")
            // cargo-fuzz needs the nightly toolchain; drop the stable one
            // that `cargo xtask` runs under.
            .env_remove("RUSTUP_TOOLCHAIN")
            .output()
            .context("cannot run cargo fuzz (cargo xtask setup installs it)")?;
        let log = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            eprintln!("{log}");
            let _ = std::fs::remove_dir_all(&scratch);
            bail!(
                "fuzz target {target} failed: its reproducer is under fuzz/artifacts/{target}/; \
                 add it as a regression test, fix, and run `cargo xtask fuzz --target {target}` again"
            );
        }
        // libFuzzer reports every new input; keep the log to its verdict.
        if let Some(done) = log.lines().rev().find(|l| l.starts_with("Done ")) {
            eprintln!("fuzz: {target}: {done}");
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
