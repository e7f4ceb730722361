//! Idempotent installation of everything the build and tests need. Each
//! step says what it did or that it skipped.

use std::{path::PathBuf, process::Command};

use anyhow::{bail, Context as _, Result};

use crate::util::{download, is_root, output};

/// Version pinned because newer bpf-linker releases need a newer rustc.
const BPF_LINKER_VERSION: &str = "0.13.0";

/// Debian packages the tests use, besides LLVM (which depends on nightly):
/// setpriv (util-linux) for the unprivileged run, Prometheus and promtool,
/// Alertmanager and amtool (the shipped inhibitions are run in one);
/// QEMU, cpio and a static busybox for the second-kernel VMs (the kernels
/// themselves are fetched by `cargo xtask vm`, see xtask/src/vm.rs).
/// containerd and runc for the runtime tests; protoc because the containerd
/// and CRI client crates generate their code at build time; tmux, in which
/// `sandwatch events` is read off a terminal screen; CNI's loopback plugin
/// for pods with a network of their own, and buildah, which builds the
/// Dockerfile to compare it with `cargo xtask image`; bpftrace (the peer and
/// the floor) and bpftool (run-time statistics) for `cargo xtask bench`.
const TEST_PACKAGES: &[&str] = &[
    "util-linux",
    "prometheus",
    "prometheus-alertmanager",
    "qemu-system-x86",
    "cpio",
    "busybox-static",
    "containerd",
    "runc",
    "protobuf-compiler",
    "tmux",
    "containernetworking-plugins",
    "buildah",
    "bpftrace",
    "bpftool",
    // The runtime VM unpacks the kernel's overlay module; the test CNI
    // plugin sets the pod's eth0 up with `ip`.
    "xz-utils",
    "iproute2",
    // musl-gcc: ring (rustls's cryptography) has C and assembly that the
    // image's static musl build compiles.
    "musl-tools",
    // Debian's own python3 (/usr/bin/python3): a test's process whose
    // threads sit in different memory cgroups (cgroup v1).
    "python3",
];

/// (command, Debian package): curl for the HTTPS probe of the TLS test,
/// kubectl to apply the TLS patch to the DaemonSet offline.
const COMMANDS: &[(&str, &str)] = &[("curl", "curl"), ("kubectl", "kubernetes-client")];

fn on_path(command: &str) -> bool {
    output(Command::new("sh").args(["-c", &format!("command -v {command}")])).is_some_and(|p| !p.trim().is_empty())
}

pub fn run() -> Result<()> {
    let nightly = ensure_nightly()?;
    ensure_lint_components()?;
    let llvm = llvm_major(&nightly)?;
    let mut packages: Vec<String> = vec![format!("llvm-{llvm}-dev"), format!("libpolly-{llvm}-dev")];
    packages.extend(TEST_PACKAGES.iter().map(|p| p.to_string()));
    // Commands that may come from elsewhere than Debian (kubectl often
    // does): their package only where the command is missing.
    packages.extend(COMMANDS.iter().filter(|(cmd, _)| !on_path(cmd)).map(|(_, p)| p.to_string()));
    ensure_apt(&packages)?;
    ensure_bpf_linker(llvm)?;
    ensure_pip(KUBERNETES_VALIDATE)?;
    ensure_cargo_fuzz()?;
    ensure_runtimes()?;
    ensure_image_target()?;
    Ok(())
}

/// The Rust target of the image's binary: musl, static by default. Chosen
/// by `cargo xtask bench --agent`: the same CPU per event as a static
/// glibc build within the measurement's resolution, 5 MiB less peak RSS,
/// and name lookups that work without glibc's NSS libraries (docs/design.md).
pub const IMAGE_TARGET: &str = "x86_64-unknown-linux-musl";

fn ensure_image_target() -> Result<()> {
    let target = IMAGE_TARGET;
    let installed = output(rustup().args(["target", "list", "--installed"])).unwrap_or_default();
    if installed.lines().any(|l| l.trim() == target) {
        say(format!("Rust target {target} present"));
        return Ok(());
    }
    say(format!("adding the Rust target {target} (the image's static binary)"));
    download(&format!("rustup target add {target}"), || {
        let mut cmd = rustup();
        cmd.args(["target", "add", target]);
        cmd
    })
}

/// The containerd lines users run besides bookworm's 1.6: Debian trixie
/// carries 1.7, sid 2.x. Their binaries need only glibc; they run with
/// bookworm's runc (sid's runc needs a newer glibc).
pub const RUNTIME_SUITES: &[&str] = &["trixie", "sid"];

/// Unpacks each suite's containerd under `target/debs/` and points
/// `target/runtimes/containerd-<suite>` at it, where the runtime tests
/// look. Never installed.
fn ensure_runtimes() -> Result<()> {
    let root = crate::util::workspace_root()?;
    let links = root.join("target/runtimes");
    std::fs::create_dir_all(&links)?;
    for suite in RUNTIME_SUITES {
        let unpacked = crate::debs::Suite::new(&root, suite).unpacked("containerd")?;
        // A runc shipped beside it would shadow the system's on PATH.
        for runc in ["usr/bin/runc", "usr/sbin/runc"] {
            let _ = std::fs::remove_file(unpacked.join(runc));
        }
        let link = links.join(format!("containerd-{suite}"));
        point(&link, &unpacked)?;
        say(format!("containerd from Debian {suite} at {}", link.display()));
    }
    // crun, the other OCI runtime: bookworm's 1.8.1 with its one library
    // this machine lacks, for the runtime VM (it refuses this host's
    // hybrid cgroups, and containerd 1.7's and 2.x's OCI spec versions).
    let bookworm = crate::debs::Suite::new(&root, CRUN_SUITE);
    for package in ["crun", "libyajl2"] {
        let link = links.join(package);
        point(&link, &bookworm.unpacked(package)?)?;
        say(format!("{package} from Debian {CRUN_SUITE} at {}", link.display()));
    }
    Ok(())
}

/// Points symlink `link` at `target`, unless it already does.
fn point(link: &std::path::Path, target: &std::path::Path) -> Result<()> {
    if std::fs::read_link(link).ok().as_deref() != Some(target) {
        let _ = std::fs::remove_file(link);
        std::os::unix::fs::symlink(target, link).with_context(|| format!("cannot link {}", link.display()))?;
    }
    Ok(())
}

/// The suite whose crun runs with containerd 1.6 on cgroup v2.
pub const CRUN_SUITE: &str = "bookworm";

const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// cargo-fuzz drives libFuzzer for `cargo xtask fuzz`.
fn ensure_cargo_fuzz() -> Result<()> {
    let present =
        output(Command::new("cargo").args(["fuzz", "--version"])).is_some_and(|v| v.contains(CARGO_FUZZ_VERSION));
    if present {
        say(format!("cargo-fuzz {CARGO_FUZZ_VERSION} present"));
        return Ok(());
    }
    say(format!("installing cargo-fuzz {CARGO_FUZZ_VERSION}"));
    download("cargo install cargo-fuzz", || {
        let mut cmd = Command::new("cargo");
        cmd.args(["install", "cargo-fuzz", "--locked", "--force", "--version", CARGO_FUZZ_VERSION]);
        cmd
    })
}

/// Offline validation of the manifests against Kubernetes' schemas.
const KUBERNETES_VALIDATE: (&str, &str, &str) = ("kubernetes-validate", "kubernetes_validate", "1.37.0");

/// Installs a PyPI package (name, module, version) unless `python3 -m
/// module --version` already answers.
fn ensure_pip((package, module, version): (&str, &str, &str)) -> Result<()> {
    let present =
        output(Command::new("python3").args(["-m", module, "--version"])).is_some_and(|v| v.contains(version));
    if present {
        say(format!("{package} {version} present"));
        return Ok(());
    }
    say(format!("installing {package} {version} from PyPI"));
    let pip = |extra: &[&str]| {
        download(&format!("pip install {package}"), || {
            let mut cmd = Command::new("python3");
            cmd.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
                .args(extra)
                .arg(format!("{package}=={version}"));
            cmd
        })
    };
    // Debian's own python3 refuses plain installs (PEP 668); this tool is
    // self-contained, so allow it there.
    pip(&[]).or_else(|_| pip(&["--break-system-packages"]))
}

fn say(msg: impl AsRef<str>) {
    eprintln!("setup: {}", msg.as_ref());
}

fn rustup() -> Command {
    Command::new("rustup")
}

/// Makes sure the `nightly` toolchain with rust-src exists; returns its
/// `rustc -vV` output.
fn ensure_nightly() -> Result<String> {
    let version = || output(Command::new("rustc").args(["+nightly", "-vV"]));
    let text = match version() {
        Some(t) => {
            say("nightly toolchain present");
            t
        }
        None => {
            say("installing the nightly toolchain");
            download("rustup toolchain install nightly", || {
                let mut cmd = rustup();
                cmd.args(["toolchain", "install", "nightly", "--profile", "minimal"]);
                cmd
            })?;
            version().context("nightly installed but `rustc +nightly -vV` fails")?
        }
    };
    let installed =
        output(rustup().args(["component", "list", "--toolchain", "nightly", "--installed"])).unwrap_or_default();
    if installed.lines().any(|l| l.starts_with("rust-src")) {
        say("rust-src for nightly present");
    } else {
        say("adding rust-src to nightly (needed for -Z build-std=core)");
        download("rustup component add rust-src", || {
            let mut cmd = rustup();
            cmd.args(["component", "add", "rust-src", "--toolchain", "nightly"]);
            cmd
        })?;
    }
    Ok(text)
}

/// rustfmt and clippy for the lint step: the default toolchain's for the
/// host crates, nightly's clippy for the eBPF crate (a minimal nightly has
/// neither).
fn ensure_lint_components() -> Result<()> {
    for (toolchain, components) in [(None, &["rustfmt", "clippy"][..]), (Some("nightly"), &["clippy"][..])] {
        let mut list = rustup();
        list.args(["component", "list", "--installed"]);
        if let Some(t) = toolchain {
            list.args(["--toolchain", t]);
        }
        let installed = output(&mut list).unwrap_or_default();
        let which = toolchain.unwrap_or("the default toolchain");
        for component in components {
            if installed.lines().any(|l| l.starts_with(component)) {
                say(format!("{component} for {which} present"));
                continue;
            }
            say(format!("adding {component} to {which} (the lint step)"));
            download(&format!("rustup component add {component}"), || {
                let mut add = rustup();
                add.args(["component", "add", component]);
                if let Some(t) = toolchain {
                    add.args(["--toolchain", t]);
                }
                add
            })?;
        }
    }
    Ok(())
}

/// The LLVM major version nightly was built with; bpf-linker must match it.
fn llvm_major(rustc_vv: &str) -> Result<u32> {
    rustc_vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.trim().parse().ok())
        .context("cannot find the LLVM version in `rustc +nightly -vV`")
}

fn dpkg_installed(package: &str) -> bool {
    output(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))
        .is_some_and(|s| s.contains("install ok installed"))
}

fn ensure_apt(packages: &[String]) -> Result<()> {
    let missing: Vec<&str> = packages.iter().map(String::as_str).filter(|p| !dpkg_installed(p)).collect();
    if missing.is_empty() {
        say(format!("apt packages present: {}", packages.join(" ")));
        return Ok(());
    }
    if !is_root() {
        bail!("missing apt packages {}: run `cargo xtask setup` as root", missing.join(" "));
    }
    say(format!("installing apt packages: {}", missing.join(" ")));
    download("apt-get update", || {
        let mut cmd = Command::new("apt-get");
        cmd.args(["update", "-qq"]);
        cmd
    })?;
    download("apt-get install", || {
        let mut cmd = Command::new("apt-get");
        cmd.args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive");
        cmd
    })
}

fn bpf_linker_path() -> Option<PathBuf> {
    output(Command::new("sh").args(["-c", "command -v bpf-linker"]))
        .map(|p| PathBuf::from(p.trim()))
        .filter(|p| !p.as_os_str().is_empty())
}

/// True if the installed bpf-linker is the pinned version linked against
/// LLVM `llvm`.
fn bpf_linker_matches(llvm: u32) -> bool {
    let Some(path) = bpf_linker_path() else { return false };
    let version_ok = output(Command::new(&path).arg("--version")).is_some_and(|v| v.contains(BPF_LINKER_VERSION));
    let linked = output(Command::new("ldd").arg(&path)).unwrap_or_default();
    version_ok && linked.contains(&format!("libLLVM.so.{llvm}"))
}

fn ensure_bpf_linker(llvm: u32) -> Result<()> {
    if bpf_linker_matches(llvm) {
        say(format!("bpf-linker {BPF_LINKER_VERSION} (LLVM {llvm}) present"));
        return Ok(());
    }
    say(format!("installing bpf-linker {BPF_LINKER_VERSION} against LLVM {llvm}"));
    let path = format!("/usr/lib/llvm-{llvm}/bin:{}", std::env::var("PATH").unwrap_or_default());
    download("cargo install bpf-linker", || {
        let mut cmd = Command::new("cargo");
        cmd.args(["install", "bpf-linker", "--locked", "--force", "--version", BPF_LINKER_VERSION])
            .args(["--no-default-features", "--features", &format!("llvm-{llvm}")])
            .env("PATH", &path);
        cmd
    })?;
    if !bpf_linker_matches(llvm) {
        bail!("bpf-linker was installed but is not on PATH or not linked against LLVM {llvm}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llvm_major_is_read_from_rustc_vv() {
        let vv = "rustc 1.97.0-nightly\nhost: x86_64-unknown-linux-gnu\nLLVM version: 22.1.4\n";
        assert_eq!(llvm_major(vv).unwrap(), 22);
        assert!(llvm_major("rustc 1.0\n").is_err());
    }
}
