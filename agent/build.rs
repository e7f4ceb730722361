//! Builds the eBPF object with nightly + bpf-linker (installed by
//! `cargo xtask setup`) so that a plain `cargo build` embeds fresh programs.
use std::path::PathBuf;

use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    if std::env::var_os("CARGO_FEATURE_EMBED_EBPF").is_none() {
        return Ok(());
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?);
    let root = manifest.parent().context("agent has no parent directory")?;
    let ebpf_dir = root.join("agent-ebpf");
    let common_dir = root.join("agent-common");
    println!("cargo:rerun-if-changed={}", common_dir.display());
    let ebpf_dir = ebpf_dir.to_str().context("non-UTF-8 path to agent-ebpf")?;
    // The programs' BTF keeps their source files' paths: trimmed (nightly
    // cargo's trim-paths, for the build aya-build starts), the object and
    // the binary it is embedded in are the same wherever the tree is.
    // aya-build sets the rustflags itself, so --remap-path-prefix cannot
    // be passed; the profile setting reaches its cargo through the
    // environment.
    std::env::set_var("CARGO_UNSTABLE_TRIM_PATHS", "true");
    std::env::set_var("CARGO_PROFILE_RELEASE_TRIM_PATHS", "all");
    aya_build::build_ebpf(
        [aya_build::Package { name: "agent-ebpf", root_dir: ebpf_dir, ..Default::default() }],
        aya_build::Toolchain::Nightly,
    )
    .context("building the eBPF programs failed; run `cargo xtask setup` first")
}
