//! The container image as `cargo xtask image` writes it (and `cargo xtask
//! test` builds it twice, the second time in a clean target directory of
//! its own): one digest for one commit, small, one static binary that
//! runs, the settings the DaemonSet relies on — and the Dockerfile, built
//! with buildah from the same files, makes the same image.

use std::{
    collections::BTreeMap,
    io::Read as _,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

mod harness;

/// An OCI image layout archive, read into memory.
struct OciArchive {
    files: BTreeMap<String, Vec<u8>>,
}

impl OciArchive {
    fn open(path: &Path) -> Self {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut files = BTreeMap::new();
        let mut archive = tar::Archive::new(&data[..]);
        for entry in archive.entries().expect("a tar archive") {
            let mut entry = entry.expect("tar entry");
            let name = entry.path().expect("path").display().to_string().trim_start_matches("./").to_string();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).expect("read entry");
            files.insert(name, bytes);
        }
        Self { files }
    }

    fn json(&self, name: &str) -> Value {
        let bytes =
            self.files.get(name).unwrap_or_else(|| panic!("{name} missing from the archive: {:?}", self.files.keys()));
        serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn blob(&self, digest: &str) -> &[u8] {
        let name = format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
        self.files.get(&name).unwrap_or_else(|| panic!("{name} missing")).as_slice()
    }

    /// The image's manifest digest, manifest and config.
    fn image(&self) -> (String, Value, Value) {
        let index = self.json("index.json");
        let digest = index["manifests"][0]["digest"].as_str().expect("manifest digest").to_string();
        let manifest: Value = serde_json::from_slice(self.blob(&digest)).expect("manifest");
        let config: Value =
            serde_json::from_slice(self.blob(manifest["config"]["digest"].as_str().expect("config digest")))
                .expect("config");
        (digest, manifest, config)
    }

    /// The files of the (single) layer: path → (mode, content).
    fn layer(&self) -> BTreeMap<String, (u32, Vec<u8>)> {
        let (_, manifest, _) = self.image();
        let layers = manifest["layers"].as_array().expect("layers");
        assert_eq!(layers.len(), 1, "one layer: {manifest}");
        let blob = self.blob(layers[0]["digest"].as_str().expect("layer digest"));
        let media = layers[0]["mediaType"].as_str().unwrap_or("");
        let tar_bytes = if media.ends_with("gzip") {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(blob).read_to_end(&mut out).expect("gunzip layer");
            out
        } else {
            blob.to_vec()
        };
        let mut files = BTreeMap::new();
        for entry in tar::Archive::new(&tar_bytes[..]).entries().expect("layer tar") {
            let mut entry = entry.expect("entry");
            let path = entry.path().expect("path").display().to_string();
            let path = path.trim_start_matches("./").trim_end_matches('/').to_string();
            if path.is_empty() {
                continue;
            }
            let mode = entry.header().mode().expect("mode") & 0o7777;
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).expect("read");
            files.insert(path, (mode, bytes));
        }
        files
    }
}

/// The second build, this workspace's crates cleaned and built again
/// (`cargo xtask test` makes it and sets SANDWATCH_IMAGE_REBUILD).
fn rebuilt_archive() -> PathBuf {
    let path = std::env::var("SANDWATCH_IMAGE_REBUILD").unwrap_or_else(|_| {
        panic!(
            "SANDWATCH_IMAGE_REBUILD is not set: `cargo xtask test` builds the image twice and sets it \
                (by hand: `cargo xtask image --target-dir target/image-rebuild`, a cold build)"
        )
    });
    PathBuf::from(path)
}

fn git(args: &[&str]) -> String {
    let out = Command::new("git").args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("git");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn two_builds_of_one_commit_are_one_image_of_one_static_binary() {
    let first = harness::image_archive();
    let second = rebuilt_archive();
    let (a, b) = (OciArchive::open(&first), OciArchive::open(&second));
    let (digest, manifest, config) = a.image();
    assert_eq!(digest, b.image().0, "{} and {} (our crates built afresh) differ", first.display(), second.display());
    assert_eq!(std::fs::read(&first).ok(), std::fs::read(&second).ok(), "byte for byte");
    let size = std::fs::metadata(&first).expect("archive").len();
    eprintln!("image {digest}: {:.1} MiB", size as f64 / 1048576.0);
    assert!(size <= 15 << 20, "the image is {size} bytes, more than 15 MiB");

    // What the DaemonSet relies on.
    let c = &config["config"];
    assert_eq!(c["Entrypoint"], serde_json::json!(["/usr/local/bin/sandwatch"]));
    assert_eq!(c["Cmd"], serde_json::json!(["--listen", "0.0.0.0:9432"]));
    assert_eq!(c["Env"], serde_json::json!(["PATH=/usr/local/bin"]));
    assert_eq!(c["ExposedPorts"], serde_json::json!({ "9432/tcp": {} }));
    assert_eq!(c["User"], "0:0");
    assert_eq!((config["os"].as_str(), config["architecture"].as_str()), (Some("linux"), Some("amd64")));
    let labels = &c["Labels"];
    assert_eq!(labels["org.opencontainers.image.version"], env!("CARGO_PKG_VERSION"));
    let revision = labels["org.opencontainers.image.revision"].as_str().unwrap_or("");
    assert!(revision.starts_with(&git(&["rev-parse", "HEAD"])), "revision {revision}");
    assert_eq!(labels["org.opencontainers.image.title"], "sandwatch");
    assert_eq!(manifest["annotations"], *labels, "the manifest carries the same annotations");
    let index = a.json("index.json");
    let name = &index["manifests"][0]["annotations"]["io.containerd.image.name"];
    assert_eq!(*name, format!("docker.io/library/sandwatch:{}", env!("CARGO_PKG_VERSION")));
    // Its time is the commit's, not the build's.
    let commit_time: i64 = git(&["log", "-1", "--format=%ct"]).parse().expect("commit time");
    let created = humantime::parse_rfc3339(config["created"].as_str().expect("created")).expect("RFC 3339");
    let created = created.duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs() as i64;
    assert_eq!(created, commit_time);

    // One static binary, and nothing else.
    let layer = a.layer();
    assert_eq!(layer.keys().collect::<Vec<_>>(), ["usr", "usr/local", "usr/local/bin", "usr/local/bin/sandwatch"]);
    let (mode, binary) = &layer["usr/local/bin/sandwatch"];
    assert_eq!(*mode, 0o755);
    assert!(!has_interpreter(binary), "the binary asks for a dynamic loader, which the image lacks");
    // Where it was built is not in it: the workspace, the target
    // directory and cargo's home are remapped, so a build of this commit
    // anywhere else is this image too (the rebuild above shares all three).
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo"));
    for path in [&workspace, &cargo_home] {
        let path = path.to_string_lossy();
        let found = binary.windows(path.len()).position(|w| w == path.as_bytes());
        assert_eq!(found, None, "the binary holds the build path {path}");
    }
    let dir = tempdir("image-bin");
    let bin = dir.join("sandwatch");
    std::fs::write(&bin, binary).expect("write binary");
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let out = Command::new(&bin).arg("--version").output().expect("run the image's binary");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("sandwatch {}", env!("CARGO_PKG_VERSION")));
    let out = Command::new(&bin).args(["events", "--help"]).output().expect("events --help");
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("--no-follow"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// True if the ELF has a PT_INTERP program header.
fn has_interpreter(elf: &[u8]) -> bool {
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().expect("8 bytes")) as usize;
    assert_eq!(&elf[..4], b"\x7fELF", "an ELF file");
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| u32::from_le_bytes(elf[phoff + i * phentsize..][..4].try_into().expect("4 bytes")) == 3)
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sandwatch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn the_dockerfile_built_by_buildah_makes_the_same_image() {
    let ours = OciArchive::open(&harness::image_archive());
    let (_, _, our_config) = ours.image();
    let dir = tempdir("buildah");
    let policy = dir.join("policy.json");
    std::fs::write(&policy, r#"{"default":[{"type":"insecureAcceptAnything"}]}"#).expect("policy");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let buildah = |args: &[&str]| -> String {
        let out = Command::new("buildah")
            .arg("--root")
            .arg(dir.join("root"))
            .arg("--runroot")
            .arg(dir.join("run"))
            .args(["--storage-driver", "vfs"])
            .args(args)
            .current_dir(&root)
            .output()
            .expect("buildah (Debian package buildah, installed by cargo xtask setup)");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "buildah {args:?}:\n{text}");
        text
    };
    let revision =
        our_config["config"]["Labels"]["org.opencontainers.image.revision"].as_str().unwrap_or("").to_string();
    let tag = "localhost/sandwatch-dockerfile:test";
    let policy_arg = policy.display().to_string();
    buildah(&[
        "bud",
        "--signature-policy",
        &policy_arg,
        "--isolation",
        "chroot",
        "--layers=false",
        "--build-arg",
        &format!("REVISION={revision}"),
        "-f",
        "deploy/Dockerfile",
        "-t",
        tag,
        ".",
    ]);
    let out = dir.join("dockerfile.oci.tar");
    buildah(&["push", "--signature-policy", &policy_arg, tag, &format!("oci-archive:{}", out.display())]);
    let theirs = OciArchive::open(&out);
    let (_, _, their_config) = theirs.image();
    for key in ["Entrypoint", "Cmd", "Env", "ExposedPorts", "User"] {
        assert_eq!(their_config["config"][key], our_config["config"][key], "{key}");
    }
    for (label, value) in our_config["config"]["Labels"].as_object().expect("labels") {
        if label.ends_with(".created") || label.ends_with(".source") {
            continue; // build-time facts the Dockerfile cannot know
        }
        assert_eq!(their_config["config"]["Labels"][label], *value, "label {label}");
    }
    assert_eq!(their_config["os"], our_config["os"]);
    assert_eq!(their_config["architecture"], our_config["architecture"]);
    // The same files, modes and bytes.
    let (a, b) = (ours.layer(), theirs.layer());
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "the same paths");
    for (path, (mode, bytes)) in &a {
        let (their_mode, their_bytes) = &b[path];
        assert_eq!(mode, their_mode, "{path}: mode");
        assert!(bytes == their_bytes, "{path}: content differs");
    }
    let _ = Command::new("buildah")
        .arg("--root")
        .arg(dir.join("root"))
        .arg("--runroot")
        .arg(dir.join("run"))
        .args(["--storage-driver", "vfs", "rmi", "--all", "--force"])
        .output();
    let _ = std::fs::remove_dir_all(&dir);
}
