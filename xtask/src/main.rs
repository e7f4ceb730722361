//! Project tasks: `cargo xtask setup | build | image | run | lint | mutants | test | vm | bench | fuzz | soak`.

mod bench;
mod bench_endpoints;
mod bench_memory;
mod bpf;
mod debs;
mod fuzz;
mod image;
mod lint;
mod mirror;
mod mutants;
mod node;
mod purity;
mod setup;
mod soak;
mod util;
mod vm;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask", about = "sandwatch project tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install what the build needs (idempotent): nightly rust-src, LLVM,
    /// bpf-linker, and the tools the tests use.
    Setup,
    /// Set up, then build the release agent (target/release/sandwatch).
    Build,
    /// Build the container image: the agent as one static binary in an OCI
    /// archive (no base image, no Docker); prints `<archive> <reference>`.
    Image(image::Args),
    /// Set up, build, and run the agent with sensible defaults (needs root).
    Run {
        /// Arguments passed to sandwatch, e.g. `-- --listen 0.0.0.0:9432`.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Formatting and clippy (host crates and the eBPF crate): the first
    /// step of `test`.
    Lint,
    /// Put each bug the watchdog core's unit tests guard back into the
    /// code, one at a time, and check that its test fails. Part of `test`.
    Mutants,
    /// Set up, then run every test, the privileged ones included (needs root).
    Test {
        /// Only tests whose name contains this.
        filter: Option<String>,
    },
    /// The privileged pipeline and pod tests on other kernels (6.1, 6.12)
    /// with cgroup v2, in QEMU VMs. Part of `test`.
    Vm(vm::Args),
    /// Exit-storm benchmark: drops, agent CPU per event, RSS, slowdown.
    Bench(bench::Args),
    /// Inside a benchmark VM (started by `bench`): its storms, reported on
    /// the console.
    #[command(hide = true)]
    BenchGuest(bench::GuestArgs),
    /// Run every fuzz target (decoder, cgroup paths, tracefs formats, BTF).
    Fuzz(fuzz::Args),
    /// Soak the agent: storms, OOM churn in pods, overload, restarts.
    Soak(soak::Args),
}

/// An error is one line on stderr and a failed exit: the closing lines of
/// a run stay its summary, never a backtrace (CI sets `RUST_BACKTRACE`,
/// which an `anyhow` error returned from `main` would print).
fn main() -> std::process::ExitCode {
    match dispatch(Cli::parse().command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Setup => setup::run(),
        Command::Build => build().map(|_| ()),
        Command::Image(args) => image::run(&args),
        Command::Run { args } => {
            let bin = build()?;
            util::require_root("the agent loads eBPF programs")?;
            util::exec(&bin, &args)
        }
        Command::Lint => {
            setup::run()?;
            let failed = lint::run()?;
            if !failed.is_empty() {
                anyhow::bail!("{}", failed.join("\n"));
            }
            Ok(())
        }
        Command::Mutants => {
            setup::run()?;
            let missed = mutants::run()?;
            if !missed.is_empty() {
                anyhow::bail!("{}", missed.join("\n"));
            }
            Ok(())
        }
        Command::Test { filter } => test(filter),
        Command::Vm(args) => {
            setup::run()?;
            let (tally, failures) = vm::run(&args)?;
            finish(tally, &failures)
        }
        Command::Fuzz(args) => {
            setup::run()?;
            fuzz::run_all(&args)
        }
        Command::Soak(args) => {
            // The binary a node runs: the image's static one.
            let bin = image::build(&image::Args::default())?.binary;
            util::require_root("the soak loads the agent and creates cgroups")?;
            soak::run(&bin, &args)
        }
        Command::Bench(args) => {
            // By default the binary users deploy, the image's static one,
            // and the glibc build beside it where memory is measured.
            let (bin, glibc) = match args.agent.clone() {
                Some(bin) => (bin, None),
                None => (image::build(&image::Args::default())?.binary, Some(build()?)),
            };
            util::require_root("the benchmark loads the agent's eBPF programs")?;
            bench::run(&bin, glibc.as_deref(), args)
        }
        Command::BenchGuest(args) => {
            for line in bench::guest(&args)?.lines() {
                println!("{} report {line}", vm::MARK);
            }
            Ok(())
        }
    }
}

/// Test binaries that mostly wait (on containerd through the CRI, on a
/// real Prometheus): `cargo xtask test` runs them on this kernel while the
/// VM kernels run, where they cost little of the CPUs the emulators take.
const BESIDE_THE_VMS: [&str; 3] = ["runtime", "daemonset", "alerts"];

/// Lint, fuzz and soak first, then the VM kernels with the waiting tests
/// of this kernel beside them, then every other test on this kernel, so
/// that the combined summary closes the output. Each step
/// runs whether or not one before it failed (but for what needs a build
/// that failed); every failure is named in the closing lines.
fn test(filter: Option<String>) -> Result<()> {
    setup::run()?;
    util::require_root("the privileged tests load eBPF programs and create cgroups")?;
    let tracked = util::TrackedFiles::snapshot()?;
    let mut run = Run::default();
    let lint = timed("lint", lint::run)?;
    run.failures.extend(lint);
    if filter.is_none() {
        match timed("mutants", mutants::run) {
            Ok(missed) => run.failures.extend(missed),
            Err(e) => run.failures.push(format!("mutants: {e:#}")),
        }
        run.step("fuzz", || timed("fuzz", || fuzz::run_all(&fuzz::Args::short())));
    }
    // The image: the image and DaemonSet tests read it, and the soak runs
    // its binary (the one a node runs; a glibc release build only for the
    // soak cost the suite three minutes).
    let image = timed("the image", || image::build(&image::Args::default()));
    if let Err(e) = &image {
        run.failures.push(format!("image: {e:#} (the soak, the image and DaemonSet tests fail without it)"));
    }
    // SANDWATCH_IMAGE is read by the test binaries cargo starts from here.
    if let Ok(image) = &image {
        std::env::set_var("SANDWATCH_IMAGE", &image.archive);
    }
    let features = "sandwatch/integration,xtask/integration";
    let release = util::output(std::process::Command::new("uname").arg("-r")).unwrap_or_default();
    let host = format!("host kernel {}", release.trim());
    let mut host_tally = util::Tally::default();
    if filter.is_none() {
        if let Ok(image) = &image {
            run.step("soak", || timed("soak", || soak::run(&image.binary, &soak::Args::ci())));
        }
        // The tests that mostly wait on a runtime or a Prometheus run
        // beside the VMs (whose emulators take the CPUs); their output is
        // printed after the VMs'. Nothing else runs on this kernel then.
        let beside = std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let mut lines = Vec::new();
            // Their package's feature by its own name: `-p` selects no other.
            let mut args = vec!["test", "--no-fail-fast", "--features", "integration", "-p", "sandwatch"];
            for name in BESIDE_THE_VMS {
                args.extend(["--test", name]);
            }
            args.extend(["--", "--test-threads=1"]);
            let result = util::cargo_test_to(&args, &mut |line| lines.push(line));
            (result, lines, started.elapsed())
        });
        match timed("the VM kernels", || vm::run(&vm::Args::all())) {
            Ok((vm_tally, vm_failures)) => {
                run.tally.add(vm_tally);
                run.failures.extend(vm_failures.into_iter().map(|f| format!("vm: {f}")));
            }
            Err(e) => run.failures.push(format!("vm: {e:#}")),
        }
        println!("xtask: the tests run beside the VM kernels on this kernel ({}):", BESIDE_THE_VMS.join(", "));
        match beside.join() {
            Ok((result, lines, took)) => {
                for line in lines {
                    println!("{line}");
                }
                eprintln!("xtask: this kernel's tests beside the VMs took {:.0} s", took.as_secs_f64());
                host_tally.add(run.host_tests(&host, result));
            }
            Err(_) => run.failures.push(format!("{host}: the thread running the tests beside the VMs panicked")),
        }
    } else {
        println!("vm: a filtered run stays on this kernel; `cargo xtask vm FILTER` runs the VM kernels");
    }
    // The image again, our crates built afresh in a target directory of
    // their own: the image test compares the two.
    if image.is_ok() {
        match timed("the image rebuilt", rebuild_image) {
            Ok(second) => std::env::set_var("SANDWATCH_IMAGE_REBUILD", second.archive),
            Err(e) => run.failures.push(format!("image rebuild: {e:#} (the reproducibility test fails without it)")),
        }
    }
    // Default members and the privileged tests (and xtask's that run
    // `cargo xtask` itself), every test binary even if one before it
    // failed; one test at a time, since privileged tests share the kernel.
    // A full run names every test binary but those that ran beside the VMs.
    let targets = match &filter {
        Some(_) => Ok(vec!["--tests".to_string()]),
        None => util::test_targets(&["integration"]).map(|names| {
            names
                .into_iter()
                .filter(|n| !BESIDE_THE_VMS.contains(&n.as_str()))
                .flat_map(|n| ["--test".to_string(), n])
                .collect()
        }),
    };
    match targets {
        Ok(targets) => {
            let mut args = vec!["test", "--no-fail-fast", "--features", features, "--lib", "--bins"];
            args.extend(targets.iter().map(String::as_str));
            args.extend(["--", "--test-threads=1"]);
            if let Some(f) = filter.as_deref() {
                args.push(f);
            }
            let result = timed("this kernel's tests", || util::cargo_test(&args));
            host_tally.add(run.host_tests(&host, result));
        }
        Err(e) => run.failures.push(format!("{host}: cannot list the test binaries: {e:#}")),
    }
    println!("{host}: {}", host_tally.summary());
    run.tally.add(host_tally);
    match tracked.changed_since() {
        Ok(changed) if !changed.is_empty() => run.failures.push(format!(
            "the test run changed tracked files (a run must leave the repository as it found it): {}",
            changed.join(", ")
        )),
        Ok(_) => {}
        Err(e) => run.failures.push(format!("cannot tell whether the run changed tracked files: {e:#}")),
    }
    finish(run.tally, &run.failures)
}

/// The image's second build, in a target directory of its own: this
/// workspace's crates built afresh (`image::rebuild`).
fn rebuild_image() -> Result<image::Image> {
    let out = util::target_dir()?.join("image-rebuild");
    let second = image::rebuild(&out)?;
    println!("image: rebuilt, digest {}", second.digest);
    Ok(second)
}

/// A whole test run: the counts, and one line per failure.
#[derive(Default)]
struct Run {
    tally: util::Tally,
    failures: Vec<String>,
}

impl Run {
    /// Names what failed in one `cargo test` of this kernel's tests;
    /// returns its counts.
    fn host_tests(&mut self, host: &str, result: Result<util::CargoTest>) -> util::Tally {
        match result {
            Ok(tests) => {
                for target in &tests.failed_targets {
                    self.failures.push(format!("{host}: test binary `{target}` failed or died"));
                }
                if !tests.success && tests.failed_targets.is_empty() {
                    self.failures.push(format!("{host}: cargo test failed (see its errors above)"));
                }
                tests.tally
            }
            Err(e) => {
                self.failures.push(format!("{host}: {e:#}"));
                util::Tally::default()
            }
        }
    }

    /// Runs `step`; a failure is named, and the run goes on.
    fn step(&mut self, name: &str, step: impl FnOnce() -> Result<()>) {
        if let Err(e) = step() {
            self.failures.push(format!("{name}: {e:#}"));
        }
    }
}

/// Runs one phase of `cargo xtask test` and says how long it took (the
/// suite has a time budget: this says where it goes).
fn timed<T>(phase: &str, f: impl FnOnce() -> T) -> T {
    let start = std::time::Instant::now();
    let out = f();
    let free = util::target_dir()
        .ok()
        .and_then(|t| util::free_bytes(t.parent().unwrap_or(&t)))
        .map(|b| format!(", {:.1} GiB free on the target's disk", b as f64 / (1u64 << 30) as f64))
        .unwrap_or_default();
    eprintln!("xtask: {phase} took {:.0} s{free}", start.elapsed().as_secs_f64());
    out
}

/// Prints the closing summary (each failure on a line of its own, then
/// the counts, as cargo test closes); fails if anything failed or nothing ran.
fn finish(tally: util::Tally, failures: &[String]) -> Result<()> {
    for failure in failures {
        println!("FAILED: {failure}");
    }
    println!("test result: {}. {}", if failures.is_empty() { "ok" } else { "FAILED" }, tally.summary());
    if !failures.is_empty() {
        anyhow::bail!("{} failure(s), each named above", failures.len());
    }
    if tally.passed == 0 {
        anyhow::bail!("no test ran");
    }
    Ok(())
}

/// The one recipe for a release binary: setup, then cargo build.
fn build() -> Result<std::path::PathBuf> {
    setup::run()?;
    util::cargo(&["build", "--release", "--package", "sandwatch"])?;
    Ok(util::target_dir()?.join("release/sandwatch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Dockerfile packs what `cargo xtask image` built, with the same
    /// settings (CI also builds it with buildah and compares the images).
    #[test]
    fn dockerfile_packs_the_xtask_image() {
        let dockerfile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/Dockerfile"))
            .expect("deploy/Dockerfile");
        let instructions: Vec<&str> =
            dockerfile.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
        let json = |v: &[&str]| serde_json::to_string(v).unwrap().replace(',', ", ");
        for want in [
            "FROM scratch".to_string(),
            "COPY target/image/rootfs/ /".to_string(),
            format!("USER {}", image::USER),
            format!("ENV {}", image::ENV.join(" ")),
            format!("EXPOSE {}", image::PORT),
            format!("ENTRYPOINT {}", json(image::ENTRYPOINT)),
            format!("CMD {}", json(image::CMD)),
        ] {
            assert!(instructions.contains(&want.as_str()), "deploy/Dockerfile lacks `{want}`:\n{dockerfile}");
        }
        assert!(!instructions.iter().any(|l| l.starts_with("RUN ")), "nothing runs in a scratch image");
        assert_eq!(instructions.iter().filter(|l| l.starts_with("FROM ")).count(), 1);
        let cli = Cli::try_parse_from(["xtask", "image"]).expect("`cargo xtask image` exists");
        assert!(matches!(cli.command, Command::Image(_)));
    }
}
