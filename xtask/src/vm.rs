//! The privileged tests on other kernels, with cgroup v2, in QEMU VMs.
//!
//! Each kernel is a Debian cloud kernel package, fetched with
//! `apt-get download` and unpacked with `dpkg -x` under `target/vm/` (never
//! installed). The initramfs holds the privileged test binaries, the host
//! programs they run (`sh`, `dd`, `sleep`) with their shared libraries, and
//! a static busybox for the init script, which mounts proc, sysfs, devtmpfs
//! and cgroup2, delegates the memory controller, runs each test binary and
//! reports over the serial console. KVM does not work on these machines, so
//! QEMU emulates (TCG): slower, but the same kernel code paths.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::{
    debs::Suite,
    util::{cargo_path, output, run as run_cmd, workspace_root, Tally},
};

/// Debian cloud kernels, `SUITE/PACKAGE` (meta-packages resolve to their
/// current kernel): bullseye's 5.10 (the last to charge BPF maps to
/// RLIMIT_MEMLOCK; `oom:mark_victim` has only `pid`), bookworm's 6.1 and
/// 6.12 (no `group_dead` in `sched_process_exit`), sid's 7.x. All have
/// BTF and cgroup v2 with the memory controller.
pub const DEFAULT_KERNELS: &[&str] = &[
    "bullseye/linux-image-5.10.0-32-cloud-amd64",
    "bookworm/linux-image-cloud-amd64",
    "bookworm/linux-image-6.12-cloud-amd64",
    "sid/linux-image-cloud-amd64",
];

/// The integration test binaries that run inside the VMs: real exits and
/// OOM kills through the loaded programs, and kubelet-shaped pods through
/// the agent's event path.
const VM_TESTS: &[&str] = &["pipeline", "pods", "global_oom"];

/// Tests whose kernel side is one on every VM kernel (cgroup v2 files the
/// agent reads, written and charged alike since 5.10; none of its
/// programs): they take a minute and a half of emulated time each, so
/// only the newest kernel runs them (the host runs them on v1, the
/// runtime VM's CRI pressure test on v2 with containerd). The others
/// skip them (`sandwatch.newest` on the kernel's command line says which).
const NEWEST_KERNEL_ONLY: &[&str] = &[
    "a_slowly_growing_container_is_warned_before_its_kill_and_a_steady_one_never_is",
    "a_container_held_at_memory_high_is_throttled_before_it_is_near_its_limit",
];

/// On a VM kernel's command line: this VM runs `NEWEST_KERNEL_ONLY` too.
const NEWEST_ARG: &str = "sandwatch.newest";

/// Host programs the tests start (by name, or `/bin/dd` copied as `pause`).
const HOST_PROGRAMS: &[&str] = &["/bin/sh", "/bin/dd", "/bin/sleep", "/bin/true"];

/// The runtime tests on cgroup v2 — what the host runs on v1 — with a real
/// containerd 2.x (sid's, unpacked by `cargo xtask setup`) and bookworm's
/// runc in one VM kernel: containers OOM-killed as they start, TaskExit
/// lag, late runtime exits, crashes, CRI names, the #12038 churn, and CRI
/// group kills (`memory.oom.group`, which only v2 has).
const RUNTIME_KERNEL: &str = "bookworm/linux-image-6.12-cloud-amd64";
const RUNTIME_TESTS: &[&str] = &["runtime"];
/// The runtime tests the VM runs: sid's containerd 2.x with runc, and
/// bookworm's containerd 1.6 with crun (which runs on cgroup v2 only).
const RUNTIME_FILTERS: &[&str] = &["containerd_2_sid", "containerd_1_6_crun"];
const RUNTIME_SUITE: &str = "sid";

pub const MARK: &str = "sandwatch-vm:";

/// The cgroup v2 kernels `cargo xtask bench` runs its storms in: where
/// `mark_victim` passes the victim's task, so no program runs at fork.
pub const BENCH_KERNELS: &[&str] = &["bookworm/linux-image-6.12-cloud-amd64", "sid/linux-image-cloud-amd64"];

#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Kernels to boot, `SUITE/PACKAGE` (Debian; a bare package is
    /// bookworm's); default: 5.10, 6.1, 6.12 and sid's 7.x.
    #[arg(long = "kernel")]
    pub kernels: Vec<String>,
    /// Give up on a VM after this many minutes.
    #[arg(long, default_value_t = 20)]
    pub timeout_minutes: u64,
    /// VMs booted at once. Their tests mostly wait (for a kill, a
    /// growth, a timer), so two share this machine's two cores well.
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Only tests whose name contains this.
    pub filter: Option<String>,
}

impl Args {
    pub fn all() -> Self {
        Self { kernels: Vec::new(), timeout_minutes: 20, jobs: 2, filter: None }
    }
}

/// Boots every kernel with the test binaries; returns the tests' counts
/// over all kernels and one line per kernel that failed.
pub fn run(args: &Args) -> Result<(Tally, Vec<String>)> {
    let root = workspace_root()?;
    let dir = root.join("target/vm");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let packages: Vec<String> = if args.kernels.is_empty() {
        DEFAULT_KERNELS.iter().map(|s| s.to_string()).collect()
    } else {
        args.kernels.clone()
    };
    let mut failures = Vec::new();
    let mut jobs = Vec::new();
    // A filter naming the runtime tests runs only the runtime VM; the
    // runtime VM, the longest, boots first.
    let runtime_only = args.filter.as_deref().is_some_and(|f| RUNTIME_FILTERS.iter().any(|r| f.contains(r)));
    if args.kernels.is_empty() && (args.filter.is_none() || runtime_only) {
        let what = ", containerd 2.x with runc and 1.6 with crun";
        let filter = match args.filter.as_deref() {
            Some(f) if runtime_only => f.to_string(),
            _ => RUNTIME_FILTERS.join(" "),
        };
        let prepared = (|| -> Result<Job> {
            let binaries = build_test_binaries(&root, RUNTIME_TESTS)?;
            let expected = count_tests(&binaries, Some(&filter), &[])?;
            let kernel = fetch_kernel(&root, RUNTIME_KERNEL)?;
            let extras = Extras::runtime(&root, &kernel, &dir)?;
            let initramfs = build_initramfs(&dir, "initramfs-runtime", &binaries, Some(&filter), &extras)?;
            Ok(Job { kernel, initramfs, what: what.to_string(), memory_mib: 3072, expected, newest: true })
        })();
        match prepared {
            Ok(job) => jobs.push(job),
            Err(e) => failures.push(format!("{RUNTIME_KERNEL} (cgroup v2{what}): cannot prepare the VM: {e:#}")),
        }
    }
    if !runtime_only {
        let binaries = build_test_binaries(&root, VM_TESTS)?;
        let filter = args.filter.as_deref();
        let all = count_tests(&binaries, filter, &[])?;
        let fewer = count_tests(&binaries, filter, NEWEST_KERNEL_ONLY)?;
        if filter.is_none() && all - fewer != NEWEST_KERNEL_ONLY.len() as u64 {
            bail!(
                "NEWEST_KERNEL_ONLY names {} tests, the VM binaries hold {} of them",
                NEWEST_KERNEL_ONLY.len(),
                all - fewer
            );
        }
        let initramfs = build_initramfs(&dir, "initramfs", &binaries, filter, &Extras::default())?;
        let last = packages.len().saturating_sub(1);
        // Newest first, after the runtime VM: the longest boots start first
        // (the newest runs the most tests), so that the lanes end together
        // (in `cargo xtask test`: about a minute sooner than oldest first).
        for (i, package) in packages.iter().enumerate().rev() {
            // A kernel that cannot be had is one failure; the others still run.
            let newest = i == last;
            let expected = if newest { all } else { fewer };
            match fetch_kernel(&root, package) {
                Ok(kernel) => jobs.push(Job {
                    kernel,
                    initramfs: initramfs.clone(),
                    what: String::new(),
                    memory_mib: 2048,
                    expected,
                    newest,
                }),
                Err(e) => {
                    failures.push(format!("kernel {package}: cannot fetch it: {e:#} ({expected} tests did not run)"))
                }
            }
        }
    }
    let timeout = Duration::from_secs(args.timeout_minutes * 60);
    let (total, failed) = run_jobs(&dir, jobs, args.jobs.max(1), timeout);
    failures.extend(failed);
    Ok((total, failures))
}

/// One VM to boot: a kernel, what it runs, and how many tests that is.
struct Job {
    kernel: Kernel,
    initramfs: PathBuf,
    /// What the VM has beyond cgroup v2 (`, containerd 2.x and runc`).
    what: String,
    memory_mib: u32,
    expected: u64,
    /// Runs the tests only the newest kernel runs.
    newest: bool,
}

/// Boots the jobs, `parallel` at a time, in their order; returns their
/// counts and one line per VM that failed.
fn run_jobs(dir: &Path, jobs: Vec<Job>, parallel: usize, timeout: Duration) -> (Tally, Vec<String>) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..parallel.min(jobs.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let result = boot_job(dir, job, timeout);
                if let Ok(mut results) = results.lock() {
                    results.push((i, result));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by_key(|(i, _)| *i);
    let mut total = Tally::default();
    let mut failures = Vec::new();
    for (_, (tally, failure)) in results {
        total.add(tally);
        failures.extend(failure);
    }
    (total, failures)
}

/// Boots one VM; its counts, and its failure if it failed. A kernel that
/// died under the emulator before the tests finished (its own Oops or
/// panic on the console: TCG once crashed 6.12 with int3 at a static-key
/// site being live-patched) is said, and booted once more; that boot's
/// result stands.
fn boot_job(dir: &Path, job: &Job, timeout: Duration) -> (Tally, Option<String>) {
    let Job { kernel, initramfs, what, memory_mib, expected, newest } = job;
    let mut outcome = boot(dir, kernel, initramfs, timeout, what, *memory_mib, *newest);
    if let Ok(Outcome { finished: false, kernel_crash: Some(crash), log, .. }) = &outcome {
        println!(
            "vm: the kernel {} crashed before the tests finished ({crash}); serial log {}; booting it once more",
            kernel.release,
            log.display()
        );
        let _ = std::fs::rename(log, log.with_extension("crashed.log"));
        outcome = boot(dir, kernel, initramfs, timeout, what, *memory_mib, *newest);
    }
    match outcome {
        Ok(mut outcome) => {
            outcome.expected = *expected;
            println!("vm {} (cgroup v2{what}): {}", kernel.release, outcome.tally.summary());
            let failure = outcome.failure().map(|why| {
                format!("kernel {} (cgroup v2{what}): {why}; serial log {}", kernel.release, outcome.log.display())
            });
            (outcome.tally, failure)
        }
        Err(e) => (
            Tally::default(),
            Some(format!("kernel {} (cgroup v2{what}): {e:#} ({expected} tests did not run)", kernel.release)),
        ),
    }
}

/// `cargo xtask bench`'s storms in a VM of `kernel` (`SUITE/PACKAGE`):
/// this xtask binary runs them there (`bench-guest`) with the agent `bin`
/// and the floor, and its report comes back over the serial console.
pub fn bench(kernel: &str, bin: &Path, forks: u32, rounds: u32) -> Result<String> {
    let root = workspace_root()?;
    let dir = root.join("target/vm");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let kernel = fetch_kernel(&root, kernel)?;
    let xtask = std::env::current_exe().context("this xtask binary")?;
    let extras = Extras {
        files: vec![(xtask, PathBuf::from("/bin/xtask")), (bin.to_path_buf(), PathBuf::from("/bin/sandwatch"))],
        applets: vec!["ip", "uname"],
        init: vec![
            "$B mount -t tmpfs run /run".into(),
            "$B ip link set lo up".into(),
            format!("/bin/xtask bench-guest --forks {forks} --rounds {rounds} --agent /bin/sandwatch"),
        ],
        ..Extras::default()
    };
    let initramfs = build_initramfs(&dir, "initramfs-bench", &[], None, &extras)?;
    let outcome = boot(&dir, &kernel, &initramfs, Duration::from_secs(60 * 60), ", benchmark", 2048, true)?;
    if !outcome.finished || outcome.report.is_empty() {
        bail!("the benchmark in the {} VM did not report (serial log {})", kernel.release, outcome.log.display());
    }
    Ok(outcome.report.join("\n"))
}

/// What a flavour of VM adds to the initramfs: files at their host paths
/// (the test binaries have paths compiled in), busybox applets, and lines
/// for the init script before the tests run.
#[derive(Default)]
struct Extras {
    /// (source on the host, path in the VM)
    files: Vec<(PathBuf, PathBuf)>,
    applets: Vec<&'static str>,
    dirs: Vec<PathBuf>,
    init: Vec<String>,
    /// Init lines after the tests (before `done`).
    after: Vec<String>,
    /// Files written into the VM: (path, content).
    written: Vec<(PathBuf, String)>,
    /// Move the initramfs into a tmpfs root first: runc's pivot_root
    /// cannot leave an initramfs, and a node has a real root file system.
    switch_root: bool,
}

impl Extras {
    /// containerd (sid's and the system's 1.6), its shim and ctr where the
    /// runtime tests look for them, runc, crun, the agent binary they start, and a VM set up as a node: /run,
    /// loopback up, the controllers runc writes delegated, overlayfs (a
    /// module of `kernel`'s; containerd 2's CRI snapshots with it).
    fn runtime(root: &Path, kernel: &Kernel, dir: &Path) -> Result<Self> {
        let link = root.join("target/runtimes").join(format!("containerd-{RUNTIME_SUITE}"));
        let unpacked = std::fs::canonicalize(&link)
            .with_context(|| format!("{} missing: run `cargo xtask setup`", link.display()))?;
        let mut files = Vec::new();
        for bin in ["containerd", "containerd-shim-runc-v2", "ctr"] {
            files.push((unpacked.join("usr/bin").join(bin), link.join("usr/bin").join(bin)));
            // The system's containerd 1.6, which crun runs with.
            let system = Path::new("/usr/bin").join(bin);
            files.push((std::fs::canonicalize(&system)?, system));
        }
        // crun and the library this machine lacks for it, where its
        // loader looks.
        let runtimes = root.join("target/runtimes");
        let crun = runtimes.join("crun/usr/bin/crun");
        files.push((
            std::fs::canonicalize(&crun)
                .with_context(|| format!("{} missing: run `cargo xtask setup`", crun.display()))?,
            crun,
        ));
        let yajl_dir = std::fs::canonicalize(runtimes.join("libyajl2/usr/lib/x86_64-linux-gnu"))
            .context("libyajl2 missing: run `cargo xtask setup`")?;
        for lib in std::fs::read_dir(&yajl_dir)?.flatten().map(|e| e.path()) {
            if let Some(name) = lib.file_name() {
                files.push((std::fs::canonicalize(&lib)?, Path::new("/usr/lib/x86_64-linux-gnu").join(name)));
            }
        }
        let runc = output(Command::new("sh").args(["-c", "command -v runc"]))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        if runc.is_empty() {
            bail!("runc missing: run `cargo xtask setup`");
        }
        files.push((std::fs::canonicalize(&runc)?, PathBuf::from(&runc)));
        let agent = crate::util::target_dir()?.join("debug/sandwatch");
        files.push((agent.clone(), agent));
        let package_root =
            kernel.vmlinuz.ancestors().find(|a| a.join("lib/modules").is_dir()).context("kernel modules")?;
        let module = package_root.join("lib/modules").join(&kernel.release).join("kernel/fs/overlayfs/overlay.ko.xz");
        let unpacked_module = dir.join(format!("overlay-{}.ko", kernel.release));
        run_cmd(
            Command::new("sh")
                .args(["-c", &format!("xz -dc '{}' > '{}'", module.display(), unpacked_module.display())]),
        )
        .with_context(|| format!("cannot unpack {}", module.display()))?;
        files.push((unpacked_module, PathBuf::from("/lib/modules/overlay.ko")));
        Ok(Self {
            files,
            applets: vec!["tar", "sha256sum", "ip", "mount"],
            // The tests' paths are resolved through CARGO_MANIFEST_DIR.
            dirs: vec![root.join("agent"), root.join("target/churn")],
            init: vec![
                "$B mount -t tmpfs run /run".into(),
                "$B insmod /lib/modules/overlay.ko".into(),
                "$B ip link set lo up".into(),
                "$B hostname sandwatch-vm".into(),
                "for c in cpu pids io; do echo +$c > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; done".into(),
                "export PATH=/bin:/usr/bin:/usr/sbin:/sbin".into(),
            ],
            // What a CRI copies from the node into host-network pods.
            written: vec![
                (PathBuf::from("/etc/hosts"), "127.0.0.1\tlocalhost sandwatch-vm\n::1\tlocalhost\n".into()),
                (PathBuf::from("/etc/resolv.conf"), "nameserver 127.0.0.1\n".into()),
                (PathBuf::from("/etc/hostname"), "sandwatch-vm\n".into()),
            ],
            // The churn test's figures, into the serial log.
            after: vec![format!(
                "for f in {}/*.txt; do [ -f \"$f\" ] && echo \"{MARK} churn $($B cat \"$f\")\"; done",
                root.join("target/churn").display()
            )],
            switch_root: true,
        })
    }
}

struct Kernel {
    release: String,
    vmlinuz: PathBuf,
}

/// The unpacked kernel of `spec` (`SUITE/PACKAGE`, or a bookworm
/// PACKAGE): the package unpacked under `target/debs/<suite>/`, following
/// a meta-package to the image it depends on, and an image to the
/// `linux-binary-*` package that holds its kernel (as sid's 7.x does).
fn fetch_kernel(root: &Path, spec: &str) -> Result<Kernel> {
    let (suite, package) = spec.split_once('/').unwrap_or(("bookworm", spec));
    let suite = Suite::new(root, suite);
    let mut todo = vec![package.to_string()];
    for _ in 0..4 {
        let Some(package) = todo.pop() else { break };
        let unpacked = suite.unpacked(&package)?;
        if let Some((release, vmlinuz)) = find_vmlinuz(&unpacked) {
            return Ok(Kernel { release, vmlinuz });
        }
        todo.extend(
            suite
                .depends(&package)?
                .into_iter()
                .filter(|d| d.starts_with("linux-image-") || d.starts_with("linux-binary-")),
        );
    }
    bail!("no kernel (boot/vmlinuz-* or usr/lib/modules/*/vmlinuz) in {spec} or the packages it depends on")
}

/// (release, path) of the kernel in an unpacked package.
fn find_vmlinuz(unpacked: &Path) -> Option<(String, PathBuf)> {
    let in_boot = std::fs::read_dir(unpacked.join("boot")).ok().into_iter().flatten().flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        Some((name.strip_prefix("vmlinuz-")?.to_string(), e.path()))
    });
    in_boot.or_else(|| {
        std::fs::read_dir(unpacked.join("usr/lib/modules")).ok()?.flatten().find_map(|e| {
            let vmlinuz = e.path().join("vmlinuz");
            vmlinuz.exists().then(|| (e.file_name().to_string_lossy().into_owned(), vmlinuz))
        })
    })
}

/// `cargo test --no-run` for `tests`; returns (name, executable).
fn build_test_binaries(root: &Path, tests: &[&str]) -> Result<Vec<(String, PathBuf)>> {
    let mut cmd = Command::new(cargo_path());
    cmd.args(["test", "--no-run", "--package", "sandwatch", "--features", "integration vm", "--message-format=json"]);
    for t in tests {
        cmd.args(["--test", t]);
    }
    let out = cmd.current_dir(root).stderr(Stdio::inherit()).output().context("cannot run cargo test --no-run")?;
    if !out.status.success() {
        bail!("building the VM test binaries failed");
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut found = Vec::new();
    for line in text.lines() {
        let Some(exe) = json_string(line, "executable") else { continue };
        let Some(name) = json_string(line, "name").filter(|n| tests.contains(&n.as_str())) else {
            continue;
        };
        found.push((name, PathBuf::from(exe)));
    }
    if found.len() != tests.len() {
        bail!("expected test binaries {tests:?}, cargo built {found:?}");
    }
    Ok(found)
}

/// How many tests the binaries hold that `filter` selects and `skip`
/// does not (`--list`, run on the host: listing runs nothing).
fn count_tests(binaries: &[(String, PathBuf)], filter: Option<&str>, skip: &[&str]) -> Result<u64> {
    let mut n = 0;
    for (name, exe) in binaries {
        let mut cmd = Command::new(exe);
        cmd.args(["--list", "--format", "terse"]).args(filter.into_iter().flat_map(str::split_whitespace));
        for s in skip {
            cmd.args(["--skip", s]);
        }
        let listed = output(&mut cmd).with_context(|| format!("cannot list the tests of {name}"))?;
        n += listed.lines().filter(|l| l.ends_with(": test")).count() as u64;
    }
    Ok(n)
}

/// The first `"key":"value"` string in a line of cargo's JSON messages
/// (paths and target names hold no escaped quotes).
fn json_string(line: &str, key: &str) -> Option<String> {
    let start = line.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let len = line[start..].find('"')?;
    Some(line[start..start + len].to_string())
}

fn build_initramfs(
    dir: &Path,
    name: &str,
    binaries: &[(String, PathBuf)],
    filter: Option<&str>,
    extras: &Extras,
) -> Result<PathBuf> {
    let stage = dir.join(name);
    let _ = std::fs::remove_dir_all(&stage);
    for d in ["bin", "proc", "sys", "dev", "tmp", "tests", "etc", "run"] {
        std::fs::create_dir_all(stage.join(d))?;
    }
    for d in &extras.dirs {
        std::fs::create_dir_all(stage.join(d.strip_prefix("/").unwrap_or(d)))?;
    }
    for (path, content) in &extras.written {
        std::fs::write(stage.join(path.strip_prefix("/").unwrap_or(path)), content)?;
    }
    for applet in &extras.applets {
        let link = stage.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", &link)?;
        }
    }
    copy_into(&stage, Path::new("/bin/busybox"), Path::new("/bin/busybox"))
        .context("static busybox missing: run `cargo xtask setup` (package busybox-static)")?;
    let mut elves: Vec<PathBuf> = Vec::new();
    for prog in HOST_PROGRAMS {
        let src = std::fs::canonicalize(prog).with_context(|| format!("{prog} missing on the host"))?;
        copy_into(&stage, &src, Path::new(prog))?;
        elves.push(src);
    }
    let mut strip_into = |src: &Path, dest: &Path| -> Result<()> {
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Debug info is most of a test binary's size; the VM needs none.
        let stripped = Command::new("strip").arg("--strip-debug").arg("-o").arg(dest).arg(src).status();
        if !stripped.is_ok_and(|s| s.success()) {
            std::fs::copy(src, dest).with_context(|| format!("cannot copy {}", src.display()))?;
        }
        set_executable(dest)?;
        elves.push(src.to_path_buf());
        Ok(())
    };
    for (name, exe) in binaries {
        strip_into(exe, &stage.join("tests").join(name))?;
    }
    for (src, dest) in &extras.files {
        strip_into(src, &stage.join(dest.strip_prefix("/").unwrap_or(dest)))?;
    }
    for lib in shared_libraries(&elves)? {
        copy_into(&stage, &lib, &lib)?;
    }
    let init = stage.join("init");
    let mut script = init_script(binaries, filter, &extras.init);
    if !extras.after.is_empty() {
        let done = format!("echo \"{MARK} done\"");
        script = script.replacen(&done, &format!("{}\n{done}", extras.after.join("\n")), 1);
    }
    if extras.switch_root {
        std::fs::create_dir_all(stage.join("newroot"))?;
        script = script.replacen("B=/bin/busybox\n", &format!("B=/bin/busybox\n{SWITCH_ROOT}"), 1);
    }
    std::fs::write(&init, script)?;
    set_executable(&init)?;
    let image = dir.join(format!("{name}.cpio.gz"));
    let pack = format!(
        "cd '{}' && find . -print0 | cpio --null -o -H newc --quiet | gzip -1 > '{}'",
        stage.display(),
        image.display()
    );
    run_cmd(Command::new("sh").args(["-c", &pack])).context("cpio missing? run `cargo xtask setup`")?;
    Ok(image)
}

/// Every shared library (and the dynamic loader) the programs need, by
/// their host paths.
fn shared_libraries(elves: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut libs: Vec<PathBuf> = Vec::new();
    for elf in elves {
        // A static binary or a kernel module has none (ldd fails on it).
        let Some(text) = output(Command::new("ldd").arg(elf)) else { continue };
        for line in text.lines() {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or
            // "/lib64/ld-linux-x86-64.so.2 (0x…)".
            let path = match line.split_once("=>") {
                Some((_, right)) => right.trim().split(' ').next().unwrap_or(""),
                None => line.trim().split(' ').next().unwrap_or(""),
            };
            if path.starts_with('/') && !libs.iter().any(|l| l == Path::new(path)) {
                libs.push(PathBuf::from(path));
            }
        }
    }
    Ok(libs)
}

/// Copies `src` to `stage/dest` (following symlinks), keeping it executable.
fn copy_into(stage: &Path, src: &Path, dest: &Path) -> Result<()> {
    let target = stage.join(dest.strip_prefix("/").unwrap_or(dest));
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(src, &target).with_context(|| format!("cannot copy {}", src.display()))?;
    set_executable(&target)
}

fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot chmod {}", path.display()))
}

/// PID 1 of the VM: mount what the agent and tests read, delegate the
/// memory controller, run each test binary, report, power off.
fn init_script(binaries: &[(String, PathBuf)], filter: Option<&str>, extra: &[String]) -> String {
    // A filter of several words: libtest runs the tests any of them names.
    let filter_arg: String =
        filter.into_iter().flat_map(str::split_whitespace).map(|f| format!(" '{}'", f.replace('\'', ""))).collect();
    // /tmp gets a tmpfs only when the initramfs put nothing there: a
    // checkout under /tmp has the tests' compiled paths (containerd, the
    // agent) below it.
    let mut s = String::from(
        "#!/bin/busybox sh\n\
         B=/bin/busybox\n\
         $B mount -t proc proc /proc\n\
         $B mount -t sysfs sys /sys\n\
         $B mount -t devtmpfs dev /dev\n\
         [ -z \"$($B ls -A /tmp)\" ] && $B mount -t tmpfs tmp /tmp\n\
         $B mount -t cgroup2 cgroup2 /sys/fs/cgroup\n\
         echo +memory > /sys/fs/cgroup/cgroup.subtree_control\n\
         export PATH=/bin HOME=/tmp TMPDIR=/tmp RUST_BACKTRACE=1\n\
         cd /tmp\n",
    );
    s.push_str(&format!(
        "echo \"{MARK} kernel $($B uname -r), cgroup2 controllers: $($B cat /sys/fs/cgroup/cgroup.subtree_control)\"\n"
    ));
    // The tracepoint fields that differ between kernels, for README's
    // kernel table (the serial log keeps them).
    s.push_str("$B mount -t tracefs nodev /sys/kernel/tracing\n");
    for tp in ["oom/mark_victim", "sched/sched_process_exit"] {
        s.push_str(&format!(
            "echo \"{MARK} {tp} fields: $($B sed -n 's/.*field:[^;]* \\([a-z_]*\\)\\(\\[[0-9]*\\]\\)*;.*/\\1/p' /sys/kernel/tracing/events/{tp}/format | $B tr '\\n' ' ')\"\n"
        ));
    }
    for line in extra {
        s.push_str(line);
        s.push('\n');
    }
    // The tests only the newest kernel runs, skipped on the others.
    let skips: String = NEWEST_KERNEL_ONLY.iter().map(|t| format!(" --skip {t}")).collect();
    s.push_str(&format!("SKIP='{skips}'\n$B grep -qw {NEWEST_ARG} /proc/cmdline && SKIP=\n"));
    for (name, _) in binaries {
        s.push_str(&format!("/tests/{name} --test-threads=1 $SKIP{filter_arg}\n"));
        s.push_str("rc=$?\n");
        s.push_str(&format!("echo \"{MARK} binary {name} exit $rc\"\n"));
        // The console shows only critical messages (a printed OOM report
        // would slow the emulated kernel down); on a failure, the kernel's
        // own account of its OOM kills goes to the serial log.
        s.push_str(&format!("[ $rc -eq 0 ] || $B dmesg | $B grep -E 'invoked oom-killer|oom-kill:|Killed process|reaped process' | $B sed 's/^/{MARK} dmesg: /'\n"));
    }
    s.push_str(&format!("echo \"{MARK} done\"\n$B poweroff -f\n"));
    s
}

/// The first lines of an init that moves itself into a tmpfs and starts
/// again from there (`switch_root` frees the initramfs).
const SWITCH_ROOT: &str = "if [ -z \"$SANDWATCH_SWITCHED\" ]; then\n\
    $B mount -t tmpfs -o size=90% root /newroot\n\
    for d in /*; do [ \"$d\" = /newroot ] || [ \"$d\" = /proc ] || [ \"$d\" = /sys ] || [ \"$d\" = /dev ] || $B cp -a \"$d\" /newroot/; done\n\
    $B mkdir -p /newroot/proc /newroot/sys /newroot/dev\n\
    export SANDWATCH_SWITCHED=1\n\
    exec $B switch_root /newroot /init\n\
fi\n";

struct Outcome {
    tally: Tally,
    /// What the guest reported (`MARK report …`), in order.
    report: Vec<String>,
    /// Test binaries that exited non-zero.
    failed_binaries: Vec<String>,
    finished: bool,
    /// The kernel's first line saying it crashed (`Oops:`, `Kernel
    /// panic`), if it did.
    kernel_crash: Option<String>,
    /// Tests the binaries hold for this run (0: not known).
    expected: u64,
    log: PathBuf,
}

/// The kernel's own words for a crash, in a line of the serial console.
fn kernel_crash(line: &str) -> Option<&str> {
    ["Oops:", "Kernel panic - not syncing", "BUG: unable to handle"]
        .iter()
        .find_map(|mark| line.find(mark).map(|at| line[at..].trim()))
}

impl Outcome {
    fn failure(&self) -> Option<String> {
        let ran = self.tally.passed + self.tally.failed + self.tally.ignored;
        let missing = self.expected.saturating_sub(ran);
        if !self.finished {
            Some(format!(
                "the VM stopped before the tests finished (timeout, kernel panic or crash); {missing} of {} tests did not run",
                self.expected
            ))
        } else if !self.failed_binaries.is_empty() {
            Some(format!("{} test(s) failed in {}", self.tally.failed, self.failed_binaries.join(", ")))
        } else if self.tally.passed == 0 {
            Some("no test ran".to_string())
        } else if missing > 0 {
            Some(format!("{missing} of {} tests did not run (a test binary died?)", self.expected))
        } else {
            None
        }
    }
}

fn boot(
    dir: &Path,
    kernel: &Kernel,
    initramfs: &Path,
    timeout: Duration,
    what: &str,
    memory_mib: u32,
    newest: bool,
) -> Result<Outcome> {
    // The serial log is named after the kernel and the initramfs's flavour
    // (`initramfs-runtime.cpio.gz` → `<release>-runtime.log`).
    let name = initramfs.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let tag = name.trim_end_matches(".cpio.gz").trim_start_matches("initramfs");
    let log_path = dir.join(format!("{}{tag}.log", kernel.release));
    // Each line on this console says whose it is: VMs boot side by side.
    let label = format!("{}{tag}", kernel.release);
    let append = format!(
        "console=ttyS0 panic=-1 quiet loglevel=3{}",
        if newest { format!(" {NEWEST_ARG}") } else { String::new() }
    );
    let mut log = std::fs::File::create(&log_path)?;
    println!("vm: booting {} under QEMU (TCG), cgroup v2{what}", kernel.release);
    let mut child = Command::new("qemu-system-x86_64")
        .args(["-accel", "tcg", "-m", &memory_mib.to_string(), "-smp", "2", "-no-reboot"])
        .args(["-display", "none", "-monitor", "none", "-serial", "stdio"])
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(initramfs)
        .args(["-append", &append])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start qemu-system-x86_64: run `cargo xtask setup` (package qemu-system-x86)")?;
    let pid = child.id();
    let stdout = child.stdout.take().context("qemu stdout")?;
    // A watchdog: the VM is killed (by its pid) if it runs past the timeout.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(timeout).is_err() {
            // SAFETY: kill(2) of the QEMU process this function started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            return true;
        }
        false
    });
    let started = Instant::now();
    let mut outcome = Outcome {
        tally: Tally::default(),
        report: Vec::new(),
        failed_binaries: Vec::new(),
        finished: false,
        kernel_crash: None,
        expected: 0,
        log: log_path,
    };
    for raw in BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
        let line = String::from_utf8_lossy(&raw);
        let line = line.trim_end_matches('\r');
        let _ = writeln!(log, "{line}");
        println!("[vm {label}] {line}");
        outcome.tally.add_line(line);
        if outcome.kernel_crash.is_none() {
            outcome.kernel_crash = kernel_crash(line).map(str::to_string);
        }
        if let Some(rest) = line.strip_prefix(MARK) {
            if let Some(report) = rest.strip_prefix(" report ") {
                outcome.report.push(report.to_string());
            }
            let words: Vec<&str> = rest.split_whitespace().collect();
            match words.as_slice() {
                ["binary", name, "exit", code] if *code != "0" => outcome.failed_binaries.push(name.to_string()),
                ["done"] => outcome.finished = true,
                _ => {}
            }
        }
    }
    let status = child.wait()?;
    let _ = done_tx.send(());
    let timed_out = watchdog.join().unwrap_or(false);
    println!("vm: {label} ran {:.0} s ({status})", started.elapsed().as_secs_f64());
    if timed_out {
        bail!("no result within {} s; serial log {}", timeout.as_secs(), outcome.log.display());
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_json_fields_are_read() {
        let line = r#"{"reason":"compiler-artifact","target":{"kind":["test"],"name":"pods","src_path":"/x/pods.rs"},"executable":"/w/target/debug/deps/pods-1e76"}"#;
        assert_eq!(json_string(line, "executable").as_deref(), Some("/w/target/debug/deps/pods-1e76"));
        assert_eq!(json_string(line, "name").as_deref(), Some("pods"));
        assert_eq!(json_string(line, "missing"), None);
    }

    #[test]
    fn init_runs_every_binary_and_reports() {
        let bins = vec![("pipeline".to_string(), PathBuf::from("/a")), ("pods".to_string(), PathBuf::from("/b"))];
        let s = init_script(&bins, Some("oom"), &["$B ip link set lo up".to_string()]);
        assert!(s.contains("/tests/pipeline --test-threads=1 $SKIP 'oom'\n"));
        assert!(s.contains("/tests/pods --test-threads=1 $SKIP 'oom'\n"));
        // Every kernel but the newest skips what only the newest runs.
        let skip = s.lines().find(|l| l.starts_with("SKIP=")).expect("SKIP");
        assert!(NEWEST_KERNEL_ONLY.iter().all(|t| skip.contains(&format!("--skip {t}"))), "{skip}");
        assert!(s.contains(&format!("grep -qw {NEWEST_ARG} /proc/cmdline && SKIP=\n")));
        assert!(s.find("SKIP=") < s.find("/tests/pipeline"));
        assert!(s.contains("cgroup.subtree_control"));
        assert!(s.find("ip link set lo up") < s.find("/tests/pipeline"), "extra lines before the tests");
        assert!(s.trim_end().ends_with("poweroff -f"));
    }

    #[test]
    fn a_kernel_crash_is_read_off_the_console() {
        let oops = "[   91.183815] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI";
        assert_eq!(kernel_crash(oops), Some("Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"));
        let panic = "[    3.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100";
        assert!(kernel_crash(panic).is_some_and(|c| c.starts_with("Kernel panic")));
        // A test's own words are not the kernel's.
        assert_eq!(kernel_crash("thread 'x' panicked at agent/tests/pods.rs:282:9:"), None);
        assert_eq!(kernel_crash("test result: ok. 5 passed"), None);
    }

    #[test]
    fn outcome_fails_unless_finished_and_green() {
        let mut o = Outcome {
            tally: Tally { passed: 5, failed: 0, ignored: 0 },
            report: Vec::new(),
            failed_binaries: Vec::new(),
            finished: false,
            kernel_crash: None,
            expected: 6,
            log: PathBuf::new(),
        };
        assert!(o.failure().is_some_and(|f| f.contains("1 of 6 tests did not run")), "unfinished");
        o.finished = true;
        assert_eq!(o.failure().as_deref(), Some("1 of 6 tests did not run (a test binary died?)"));
        o.tally.passed = 6;
        assert!(o.failure().is_none());
        o.failed_binaries.push("pods".to_string());
        assert!(o.failure().is_some());
        o.failed_binaries.clear();
        o.tally.passed = 0;
        assert_eq!(o.failure().as_deref(), Some("no test ran"));
    }
}
