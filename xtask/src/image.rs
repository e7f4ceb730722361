//! `cargo xtask image`: the agent as one static binary in an OCI image
//! layout archive, with no base image and no Docker. Reproducible: every
//! time in it is the commit's, entries are sorted, build paths are
//! remapped; two builds of one commit give one digest.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use crate::util::{self, cargo_path, output, workspace_root};

/// The Rust target of the image's binary (setup installs it).
pub use crate::setup::IMAGE_TARGET as TARGET;
/// Where the binary lives in the image; PATH finds it (`kubectl exec
/// ds/sandwatch -- sandwatch events`).
pub const BINARY: &str = "usr/local/bin/sandwatch";
pub const ENTRYPOINT: &[&str] = &["/usr/local/bin/sandwatch"];
pub const CMD: &[&str] = &["--listen", "0.0.0.0:9432"];
pub const ENV: &[&str] = &["PATH=/usr/local/bin"];
pub const PORT: &str = "9432/tcp";
pub const USER: &str = "0:0";
/// The repository part of the image reference (the DaemonSet's
/// `image: sandwatch:0.1.0` normalises to it).
pub const REPOSITORY: &str = "docker.io/library/sandwatch";

#[derive(clap::Args, Debug, Default, Clone)]
pub struct Args {
    /// Also import the image into the containerd at this socket
    /// (namespace k8s.io, where the kubelet's CRI finds it).
    #[arg(long, value_name = "SOCKET")]
    pub import: Option<PathBuf>,
    /// The ctr binary for --import.
    #[arg(long, default_value = "ctr")]
    pub ctr: String,
    /// Build the binary in this target directory instead of target/
    /// (a clean build, e.g. to check reproducibility).
    #[arg(long)]
    pub target_dir: Option<PathBuf>,
}

/// What a build produced.
#[derive(Debug, Clone)]
pub struct Image {
    /// The OCI image layout archive (`oci-archive:` for skopeo).
    pub archive: PathBuf,
    /// `docker.io/library/sandwatch:<version>`.
    pub reference: String,
    /// The manifest's digest: the image digest a registry shows.
    pub digest: String,
    /// The static agent binary in it (the copy in its root file system).
    pub binary: PathBuf,
}

/// `cargo xtask image`: builds, optionally imports, and prints
/// `<archive> <reference>` as its last line.
pub fn run(args: &Args) -> Result<()> {
    let image = build(args)?;
    if let Some(socket) = &args.import {
        import(&image, socket, &args.ctr)?;
    }
    println!("{} {}", image.archive.display(), image.reference);
    Ok(())
}

pub fn build(args: &Args) -> Result<Image> {
    let target_dir = match &args.target_dir {
        Some(dir) if dir.is_relative() => std::env::current_dir()?.join(dir),
        Some(dir) => dir.clone(),
        None => crate::util::target_dir()?,
    };
    build_into(&target_dir, &target_dir.join("image"))
}

/// The image built again into `out`: this workspace's crates (the agent,
/// its eBPF programs, the shared types) cleaned and compiled afresh in the
/// target directory of the first build, against the dependencies it built
/// from the same lock file. Two builds of our code must be one image. (A
/// second target directory changes the remapped paths in RUSTFLAGS, so
/// cargo would rebuild every dependency as well: four minutes more, and
/// the image test checks build paths in the binary directly.)
pub fn rebuild(out: &Path) -> Result<Image> {
    let target_dir = crate::util::target_dir()?;
    let mut clean = Command::new(cargo_path());
    clean.args(["clean", "--release", "--target", TARGET, "--target-dir"]).arg(&target_dir);
    for package in WORKSPACE_CRATES {
        clean.args(["--package", package]);
    }
    util::run(clean.current_dir(workspace_root()?))?;
    let binary = target_dir.join(TARGET).join("release/sandwatch");
    if binary.exists() {
        bail!("{} survived cargo clean: the second build would not be one", binary.display());
    }
    build_into(&target_dir, out)
}

/// The crates of this workspace the agent's binary is built from (the
/// eBPF crate is built by the agent's build script, into its output).
const WORKSPACE_CRATES: &[&str] = &["sandwatch", "agent-common"];

fn build_into(target_dir: &Path, out: &Path) -> Result<Image> {
    crate::setup::run()?;
    let root = workspace_root()?;
    let binary = static_binary(&root, target_dir)?;
    let source = Source::of(&root)?;
    // The image's files as a tree too: deploy/Dockerfile copies it.
    let rootfs = out.join("rootfs");
    let _ = std::fs::remove_dir_all(&rootfs);
    let bin_path = rootfs.join(BINARY);
    std::fs::create_dir_all(bin_path.parent().context("binary path")?)?;
    std::fs::copy(&binary, &bin_path).with_context(|| format!("copy {}", binary.display()))?;

    let version = env!("CARGO_PKG_VERSION");
    let reference = format!("{REPOSITORY}:{version}");
    let bytes = std::fs::read(&binary)?;
    let layer_tar = tar(
        &[
            Entry::Dir("usr/"),
            Entry::Dir("usr/local/"),
            Entry::Dir("usr/local/bin/"),
            Entry::File(BINARY, &bytes, 0o755),
        ],
        source.time,
    )?;
    let diff_id = sha256(&layer_tar);
    let layer = gzip(&layer_tar)?;
    let labels = source.labels(version);
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "created": source.created,
        "config": {
            "User": USER,
            "Env": ENV,
            "Entrypoint": ENTRYPOINT,
            "Cmd": CMD,
            "ExposedPorts": { PORT: {} },
            "Labels": labels,
        },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{diff_id}")] },
        "history": [{ "created": source.created, "created_by": "cargo xtask image" }],
    }))?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", &config),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar+gzip", &layer)],
        "annotations": labels,
    }))?;
    let digest = format!("sha256:{}", sha256(&manifest));
    let mut manifest_descriptor = descriptor("application/vnd.oci.image.manifest.v1+json", &manifest);
    manifest_descriptor["platform"] = json!({ "architecture": "amd64", "os": "linux" });
    manifest_descriptor["annotations"] = json!({
        "org.opencontainers.image.ref.name": version,
        "io.containerd.image.name": reference,
    });
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [manifest_descriptor],
    }))?;
    let blob = |data: &[u8]| format!("blobs/sha256/{}", sha256(data));
    let (config_path, layer_path, manifest_path) = (blob(&config), blob(&layer), blob(&manifest));
    let mut blobs = [(config_path, &config), (layer_path, &layer), (manifest_path, &manifest)];
    blobs.sort();
    let mut entries = vec![Entry::Dir("blobs/"), Entry::Dir("blobs/sha256/")];
    entries.extend(blobs.iter().map(|(path, data)| Entry::File(path, data, 0o644)));
    entries.push(Entry::File("index.json", &index, 0o644));
    entries.push(Entry::File("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#, 0o644));
    let archive = out.join(format!("sandwatch-{version}.oci.tar"));
    std::fs::write(&archive, tar(&entries, source.time)?)?;
    let size = std::fs::metadata(&archive)?.len();
    println!(
        "image: {} ({:.1} MiB; binary {:.1} MiB, layer {:.1} MiB gzip), digest {digest}, revision {}",
        archive.display(),
        size as f64 / 1048576.0,
        bytes.len() as f64 / 1048576.0,
        layer.len() as f64 / 1048576.0,
        source.revision
    );
    // The image's own copy: a rebuild of the agent in the same target
    // directory leaves this image's binary as it was.
    Ok(Image { archive, reference, digest, binary: bin_path })
}

/// `ctr images import` into the k8s.io namespace.
pub fn import(image: &Image, socket: &Path, ctr: &str) -> Result<()> {
    util::run(
        Command::new(ctr)
            .arg("--address")
            .arg(socket)
            .args(["--namespace", "k8s.io", "images", "import", "--platform", "linux/amd64"])
            .arg(&image.archive),
    )
    .with_context(|| format!("importing {} into the containerd at {}", image.reference, socket.display()))
}

/// The release agent, linked statically, with the build's own paths
/// remapped so that they do not end up in the binary.
fn static_binary(root: &Path, target_dir: &Path) -> Result<PathBuf> {
    let cargo_home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    // crt-static is musl's default; said anyway, so that the flags are
    // complete whatever the target.
    // When several prefixes match, rustc takes the last: the target
    // directory (inside the workspace) comes last.
    let flags = format!(
        "-C target-feature=+crt-static --remap-path-prefix={}=/cargo --remap-path-prefix={}=/sandwatch --remap-path-prefix={}=/target",
        cargo_home.display(),
        root.display(),
        target_dir.display(),
    );
    let triple = TARGET.to_uppercase().replace('-', "_");
    let status = Command::new(cargo_path())
        .args(["build", "--release", "--package", "sandwatch", "--target", TARGET])
        .arg("--target-dir")
        .arg(target_dir)
        .env(format!("CARGO_TARGET_{triple}_RUSTFLAGS"), flags)
        // ring's C and assembly, for musl (`musl-tools`, installed by setup).
        .env(format!("CC_{}", TARGET.replace('-', "_")), "musl-gcc")
        .current_dir(root)
        .status()
        .context("cannot run cargo")?;
    if !status.success() {
        bail!("the static build of the agent failed ({status})");
    }
    let binary = target_dir.join(TARGET).join("release/sandwatch");
    let interp = output(Command::new("readelf").args(["-l"]).arg(&binary)).unwrap_or_default();
    if interp.contains("Requesting program interpreter") {
        bail!("{} is dynamically linked; the image has no libraries", binary.display());
    }
    Ok(binary)
}

/// What the image says about where it comes from.
struct Source {
    revision: String,
    /// The commit's time, RFC 3339 and Unix seconds.
    created: String,
    time: u64,
    url: Option<String>,
}

impl Source {
    fn of(root: &Path) -> Result<Self> {
        let git =
            |args: &[&str]| output(Command::new("git").args(args).current_dir(root)).map(|s| s.trim().to_string());
        let commit = git(&["rev-parse", "HEAD"]).context("`git rev-parse HEAD` failed: the image names its commit")?;
        let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        let time: u64 = git(&["log", "-1", "--format=%ct"]).and_then(|t| t.parse().ok()).context("commit time")?;
        let created = output(
            Command::new("git")
                .args(["log", "-1", "--format=%cd", "--date=format-local:%Y-%m-%dT%H:%M:%SZ"])
                .env("TZ", "UTC")
                .current_dir(root),
        )
        .map(|s| s.trim().to_string())
        .context("commit date")?;
        let url = std::env::var("SANDWATCH_IMAGE_SOURCE").ok().or_else(|| {
            git(&["remote", "get-url", "origin"]).filter(|u| u.starts_with("https://") || u.starts_with("http://"))
        });
        let revision = if dirty { format!("{commit}-dirty") } else { commit };
        Ok(Self { revision, created, time, url })
    }

    fn labels(&self, version: &str) -> Value {
        let mut labels = json!({
            "org.opencontainers.image.title": "sandwatch",
            "org.opencontainers.image.description": "eBPF-backed Kubernetes node watchdog: OOM kills, exits, pod sandboxes",
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.revision": self.revision,
            "org.opencontainers.image.created": self.created,
            "org.opencontainers.image.licenses": "MIT OR Apache-2.0",
        });
        if let Some(url) = &self.url {
            labels["org.opencontainers.image.source"] = json!(url);
        }
        labels
    }
}

fn descriptor(media_type: &str, data: &[u8]) -> Value {
    json!({ "mediaType": media_type, "digest": format!("sha256:{}", sha256(data)), "size": data.len() })
}

pub fn sha256(data: &[u8]) -> String {
    Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

enum Entry<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8], u32),
}

/// A tar of `entries` in the order given, owned by root, every time `mtime`.
fn tar(entries: &[Entry], mtime: u64) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = tar::Header::new_ustar();
        let (path, data, mode, kind): (&str, &[u8], u32, tar::EntryType) = match entry {
            Entry::Dir(path) => (path, &[], 0o755, tar::EntryType::Directory),
            Entry::File(path, data, mode) => (path, data, *mode, tar::EntryType::Regular),
        };
        header.set_path(path)?;
        header.set_entry_type(kind);
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_mtime(mtime);
        header.set_uid(0);
        header.set_gid(0);
        header.set_username("")?;
        header.set_groupname("")?;
        header.set_cksum();
        builder.append(&header, data)?;
    }
    Ok(builder.into_inner()?)
}

/// gzip without a name or time in its header.
fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::best());
    encoder.write_all(data)?;
    Ok(encoder.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tars_and_gzips_depend_only_on_their_inputs() {
        let a = tar(&[Entry::Dir("usr/"), Entry::File("usr/x", b"hello", 0o755)], 1_700_000_000).unwrap();
        let b = tar(&[Entry::Dir("usr/"), Entry::File("usr/x", b"hello", 0o755)], 1_700_000_000).unwrap();
        assert_eq!(a, b);
        assert_eq!(gzip(&a).unwrap(), gzip(&b).unwrap());
        let mut archive = tar::Archive::new(&a[..]);
        let entries: Vec<(String, u32, u64, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (e.path().unwrap().display().to_string(), h.mode().unwrap(), h.mtime().unwrap(), h.uid().unwrap())
            })
            .collect();
        assert_eq!(entries, [("usr/".into(), 0o755, 1_700_000_000, 0), ("usr/x".into(), 0o755, 1_700_000_000, 0)]);
    }

    #[test]
    fn descriptors_name_their_content() {
        let d = descriptor("x", b"abc");
        assert_eq!(d["digest"], "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(d["size"], 3);
    }
}
