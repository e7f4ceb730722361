//! A real containerd — bookworm's 1.6 (installed), or trixie's 1.7 and
//! sid's 2.x (unpacked under `target/` by `cargo xtask setup`) — with its
//! own root, state, config and socket under a temporary directory, a local
//! busybox OCI image (nothing can be pulled), and containers placed in
//! kubelet-shaped cgroups inside the test's own cgroup. containerd runs in
//! a cgroup of its own, `…/containerd.service`, as on a node (its shims
//! and the runc they run start there: the runtime's place). Everything it
//! started is stopped by pid and removed on drop, in every hierarchy runc
//! created cgroups in.
#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use super::TestCgroup;

pub const IMAGE: &str = "docker.io/local/busybox:1";
pub const NAMESPACE: &str = "k8s.io";

/// One containerd build: where its binaries are (containerd, its runc
/// shim and ctr come from one package; runc is the system's).
#[derive(Debug, Clone)]
pub struct Runtime {
    bin: PathBuf,
    /// What `containerd --version` says, for failure messages.
    pub version: String,
    /// The OCI runtime the CRI's containers run with, if not runc.
    oci: Option<PathBuf>,
}

impl Runtime {
    /// Debian bookworm's containerd, installed by `cargo xtask setup`.
    pub fn system() -> Self {
        Self::at(PathBuf::from("/usr/bin"), "containerd missing: run `cargo xtask setup`")
    }

    /// The containerd of another Debian suite, unpacked by `cargo xtask setup`.
    pub fn suite(suite: &str) -> Self {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../target/runtimes/containerd-{suite}/usr/bin"));
        Self::at(dir, &format!("containerd from Debian {suite} missing: run `cargo xtask setup`"))
    }

    /// Bookworm's containerd with bookworm's crun for the CRI's
    /// containers (unpacked by `cargo xtask setup`; it runs on cgroup v2
    /// only, and only with containerd 1.6's OCI spec version).
    pub fn system_with_crun() -> Self {
        let crun = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/runtimes/crun/usr/bin/crun");
        let out = Command::new(&crun).arg("--version").output();
        let version = match out {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").to_string(),
            other => panic!("crun missing or broken ({}): {other:?}; run `cargo xtask setup`", crun.display()),
        };
        let system = Self::system();
        Self { version: format!("{} with {version}", system.version), oci: Some(crun), ..system }
    }

    fn at(bin: PathBuf, missing: &str) -> Self {
        let out = Command::new(bin.join("containerd")).arg("--version").output();
        let version = match out {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            _ => panic!("{missing} ({})", bin.join("containerd").display()),
        };
        Self { bin, version, oci: None }
    }

    /// The release, e.g. `2.1.9+unknown`: the word after the module path.
    pub fn release(&self) -> &str {
        self.version.split_whitespace().nth(2).unwrap_or(&self.version)
    }

    /// The command name of the OCI runtime's `kill`: `runc`; crun runs
    /// every command from a sealed memfd copy of itself (its guard against
    /// a container overwriting the host's binary), whose name the kernel
    /// keeps, cut to 15 bytes.
    pub fn oci_comm(&self) -> &'static str {
        match self.oci {
            None => "runc",
            Some(_) => "memfd:crun_clon",
        }
    }

    /// PATH with this build's binaries first (containerd finds its shim there).
    fn path(&self) -> String {
        format!("{}:{}", self.bin.display(), std::env::var("PATH").unwrap_or_default())
    }
}

pub struct Containerd {
    pub runtime: Runtime,
    pub dir: PathBuf,
    pub socket: PathBuf,
    child: Option<Child>,
    containers: Vec<String>,
    /// Its own cgroup, `containerd.service` (relative to the hierarchy
    /// root); removed after it stopped (the field dropped last).
    pub service_cgroup: String,
    cgroup: TestCgroup,
}

impl Containerd {
    /// containerd without its CRI plugin.
    pub fn start(runtime: &Runtime, name: &str) -> Self {
        Self::start_with(runtime, name, false)
    }

    /// containerd serving the CRI on its socket, set up for this machine:
    /// root here lacks CAP_SYS_RESOURCE, so runc cannot give the sandbox
    /// oom_score_adj -998 (`restrict_oom_score_adj`); the sandbox image is
    /// the local one; pods use the host network, so no CNI is needed.
    pub fn start_cri(runtime: &Runtime, name: &str) -> Self {
        Self::start_with(runtime, name, true)
    }

    /// containerd serving the CRI, whose pods can also have a network of
    /// their own: Debian's `loopback` CNI plugin for `lo`, and a plugin of
    /// the test's that gives the pod an `eth0` with 10.88.0.2 — one end of
    /// a veth pair whose both ends are in the pod's own network namespace,
    /// nothing on the host.
    pub fn start_cri_with_pod_network(runtime: &Runtime, name: &str) -> Self {
        let dir = Self::dir_for(name);
        let _ = std::fs::remove_dir_all(&dir);
        let (bin, conf) = (dir.join("cni/bin"), dir.join("cni/conf"));
        std::fs::create_dir_all(&bin).expect("cni bin dir");
        std::fs::create_dir_all(&conf).expect("cni conf dir");
        std::fs::copy("/usr/lib/cni/loopback", bin.join("loopback")).expect(
            "/usr/lib/cni/loopback (Debian package containernetworking-plugins, installed by cargo xtask setup)",
        );
        let which = |tool: &str| -> String {
            let out = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().expect("sh");
            let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
            assert!(!path.is_empty(), "{tool} not found");
            path
        };
        let (ip, nsenter) = (which("ip"), which("nsenter"));
        let plugin = r#"#!/bin/sh
# A test's CNI plugin: eth0 with one address inside the pod's own network
# namespace (a veth pair with both ends in it); nothing changes on the host.
cat >/dev/null
case "$CNI_COMMAND" in
ADD)
  NSENTER --net="$CNI_NETNS" IP link add "$CNI_IFNAME" type veth peer name peer0 || exit 1
  NSENTER --net="$CNI_NETNS" IP link set peer0 up || exit 1
  NSENTER --net="$CNI_NETNS" IP addr add 10.88.0.2/24 dev "$CNI_IFNAME" || exit 1
  NSENTER --net="$CNI_NETNS" IP link set "$CNI_IFNAME" up || exit 1
  printf '{"cniVersion":"1.0.0","interfaces":[{"name":"%s","sandbox":"%s"}],"ips":[{"address":"10.88.0.2/24","interface":0}]}' "$CNI_IFNAME" "$CNI_NETNS"
  ;;
VERSION) printf '{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0"]}' ;;
*) exit 0 ;;
esac
"#
        .replace("NSENTER", &nsenter)
        .replace("IP ", &format!("{ip} "));
        let path = bin.join("sandwatch-test-net");
        std::fs::write(&path, plugin).expect("cni plugin");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod plugin");
        std::fs::write(
            conf.join("10-sandwatch-test.conflist"),
            r#"{"cniVersion":"1.0.0","name":"sandwatch-test","plugins":[{"type":"sandwatch-test-net"}]}"#,
        )
        .expect("cni conf");
        Self::start_in(runtime, name, true, false)
    }

    /// Imports an OCI image archive into the k8s.io namespace, where the
    /// CRI finds it.
    pub fn import_archive(&self, archive: &Path) {
        let path = archive.display().to_string();
        let mut args = vec!["images", "import", "--snapshotter", "native", "--platform", "linux/amd64"];
        if !self.runtime.release().starts_with('1') {
            args.push("--local");
        }
        args.push(&path);
        self.ctr_ok(&args);
    }

    /// Where `start*(name)` puts the socket, before it exists.
    pub fn socket_for(name: &str) -> PathBuf {
        Self::dir_for(name).join("containerd.sock")
    }

    fn dir_for(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("sandwatch-ctrd-{}-{name}", std::process::id()))
    }

    fn start_with(runtime: &Runtime, name: &str, cri: bool) -> Self {
        Self::start_in(runtime, name, cri, true)
    }

    fn start_in(runtime: &Runtime, name: &str, cri: bool, fresh: bool) -> Self {
        let dir = Self::dir_for(name);
        if fresh {
            let _ = std::fs::remove_dir_all(&dir);
        }
        std::fs::create_dir_all(&dir).expect("containerd dir");
        let socket = dir.join("containerd.sock");
        // Top-level keys first: TOML puts anything after a table into it.
        let (top, plugins) = if cri {
            (
                String::new(),
            format!(
                "[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"{IMAGE}\"\n  \
                 restrict_oom_score_adj = true\n  stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"native\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"{d}/cni/bin\"\n  conf_dir = \"{d}/cni/conf\"\n{oci}",
                    d = dir.display(),
                    oci = runtime.oci.as_ref().map(|oci| format!(
                        "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  \
                         runtime_type = \"io.containerd.runc.v2\"\n\
                         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  \
                         BinaryName = \"{}\"\n",
                        oci.display()
                    )).unwrap_or_default(),
                ),
            )
        } else {
            ("disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n".to_string(), String::new())
        };
        let config = format!(
            "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n{top}\
             [grpc]\n  address = \"{s}\"\n[ttrpc]\n  address = \"{s}.ttrpc\"\n{plugins}",
            d = dir.display(),
            s = socket.display()
        );
        std::fs::write(dir.join("config.toml"), config).expect("containerd config");
        let mut cgroup = TestCgroup::create(&format!("containerd-{name}"));
        let service_cgroup = cgroup.child("containerd.service");
        let mut c =
            Self { runtime: runtime.clone(), dir, socket, child: None, containers: Vec::new(), service_cgroup, cgroup };
        c.spawn();
        c.import_image();
        c
    }

    /// (Re)starts the containerd process and waits for its socket.
    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("containerd.log"))
            .expect("containerd log");
        // Into its cgroup first, then containerd itself (the pid stays).
        let child = Command::new("sh")
            .args(["-c", "echo $$ > \"$1\" && exec \"$0\" --config \"$2\""])
            .arg(self.runtime.bin.join("containerd"))
            .arg(self.cgroup.procs_file(&self.service_cgroup))
            .arg(self.dir.join("config.toml"))
            .env("PATH", self.runtime.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("containerd {}: {e}", self.runtime.version));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.ctr(&["version"]).status.success() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("containerd {} did not answer within 30 s: {}", self.runtime.version, self.log());
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("containerd running")
    }

    /// Sends `signal` to containerd (by pid).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) of the containerd this test started.
        unsafe { libc::kill(self.pid() as i32, signal) };
    }

    /// Stops containerd, every thread of it (`harness::suspend`).
    pub fn suspend(&self) {
        super::suspend(self.pid());
    }

    /// Waits for containerd to end (after a fatal signal).
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        self.child.take().expect("containerd running").wait().expect("wait containerd")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    pub fn ctr(&self, args: &[&str]) -> std::process::Output {
        Command::new(self.runtime.bin.join("ctr"))
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", NAMESPACE])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ctr missing: run `cargo xtask setup`")
    }

    fn ctr_ok(&self, args: &[&str]) -> String {
        let out = self.ctr(args);
        assert!(
            out.status.success(),
            "ctr {args:?} (containerd {}): {}{}",
            self.runtime.version,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// An OCI image of one layer: a static busybox and the applets the
    /// tests run.
    fn import_image(&self) {
        let layout = self.dir.join("image");
        let rootfs = self.dir.join("image-rootfs");
        std::fs::create_dir_all(rootfs.join("bin")).expect("rootfs");
        std::fs::create_dir_all(layout.join("blobs/sha256")).expect("layout");
        std::fs::copy("/bin/busybox", rootfs.join("bin/busybox"))
            .expect("busybox-static missing: run `cargo xtask setup`");
        for applet in ["sh", "sleep", "dd", "cat"] {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).expect("symlink");
        }
        for d in ["proc", "sys", "dev", "tmp", "etc"] {
            std::fs::create_dir_all(rootfs.join(d)).expect("rootfs dir");
        }
        let layer = self.dir.join("layer.tar");
        run(Command::new("tar").arg("-C").arg(&rootfs).arg("-cf").arg(&layer).arg("."));
        let blob = |path: &Path| -> (String, u64) {
            let digest = sha256(path);
            let size = std::fs::metadata(path).expect("blob").len();
            std::fs::copy(path, layout.join("blobs/sha256").join(&digest)).expect("blob copy");
            (digest, size)
        };
        let (layer_digest, layer_size) = blob(&layer);
        let config = self.dir.join("config.json");
        std::fs::write(
            &config,
            format!(
                r#"{{"architecture":"amd64","os":"linux","config":{{"Env":["PATH=/bin"],"Cmd":["sleep","2147483647"]}},"rootfs":{{"type":"layers","diff_ids":["sha256:{layer_digest}"]}}}}"#
            ),
        )
        .expect("config");
        let (config_digest, config_size) = blob(&config);
        let manifest = self.dir.join("manifest.json");
        std::fs::write(
            &manifest,
            format!(
                r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:{config_digest}","size":{config_size}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:{layer_digest}","size":{layer_size}}}]}}"#
            ),
        )
        .expect("manifest");
        let (manifest_digest, manifest_size) = blob(&manifest);
        std::fs::write(
            layout.join("index.json"),
            format!(
                r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{manifest_digest}","size":{manifest_size},"annotations":{{"io.containerd.image.name":"{IMAGE}","org.opencontainers.image.ref.name":"1"}}}}]}}"#
            ),
        )
        .expect("index");
        std::fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).expect("oci-layout");
        let tarball = self.dir.join("image.tar");
        run(Command::new("tar").arg("-C").arg(&layout).arg("-cf").arg(&tarball).arg("."));
        let path = tarball.display().to_string();
        let mut args = vec!["images", "import", "--snapshotter", "native"];
        if !self.runtime.release().starts_with('1') {
            // containerd 2 imports through its transfer service, which
            // unpacks only for the snapshotters of its own config; the
            // client-side import unpacks for the one named here.
            args.push("--local");
        }
        args.push(&path);
        self.ctr_ok(&args);
    }

    /// Runs a detached container `id` in cgroup `cgroup_path` (relative to
    /// the hierarchy root, as kubelet would place it) and returns its init pid.
    pub fn run(&mut self, id: &str, cgroup_path: &str, memory_limit: Option<u64>, script: &str) -> u32 {
        let limit = memory_limit.map(|b| b.to_string());
        let mut args = vec!["run", "-d", "--snapshotter", "native", "--cgroup", cgroup_path];
        if let Some(l) = limit.as_deref() {
            args.extend(["--memory-limit", l]);
        }
        args.extend([IMAGE, id, "sh", "-c", script]);
        self.ctr_ok(&args);
        self.containers.push(id.to_string());
        self.task_pid(id).expect("task pid")
    }

    pub fn task_pid(&self, id: &str) -> Option<u32> {
        let out = self.ctr_ok(&["tasks", "ls"]);
        out.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                Some((w.next()?, w.next()?))
            })
            .find(|(task, _)| *task == id)
            .and_then(|(_, pid)| pid.parse().ok())
    }

    /// Removes a container and its task (whatever state they are in).
    pub fn remove(&mut self, id: &str) {
        let _ = self.ctr(&["tasks", "kill", "--signal", "SIGKILL", id]);
        let _ = self.ctr(&["tasks", "rm", "--force", id]);
        let _ = self.ctr(&["containers", "rm", id]);
        self.containers.retain(|c| c != id);
    }
}

impl Containerd {
    /// containerd's own event stream, read by `ctr events` beside the
    /// agent: what the runtime really published, to check the agent's
    /// word against. Subscribed once `Witness::wait_for` read an event
    /// published after this returned.
    pub fn witness(&self) -> Witness {
        let out = self.dir.join(format!("events-{}.log", std::process::id()));
        let file = std::fs::File::create(&out).expect("events log");
        let child = Command::new(self.runtime.bin.join("ctr"))
            .arg("--address")
            .arg(&self.socket)
            .arg("events")
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("ctr missing: run `cargo xtask setup`");
        Witness { child, out }
    }
}

/// `ctr events`, running until dropped (stopped by its pid).
pub struct Witness {
    child: Child,
    out: PathBuf,
}

impl Witness {
    /// Whether containerd published `topic` (`/tasks/oom`) of `container`.
    pub fn published(&self, topic: &str, container: &str) -> bool {
        let quoted = format!("\"{container}\"");
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .any(|l| l.split_whitespace().any(|w| w == topic) && l.contains(&quoted))
    }

    /// Waits up to `timeout` for `topic` of `container`: the stream is
    /// subscribed once an event published after its start is read.
    pub fn wait_for(&self, topic: &str, container: &str, timeout: Duration) {
        let start = Instant::now();
        while !self.published(topic, container) {
            assert!(
                start.elapsed() < timeout,
                "ctr events: no {topic} of {container} in {timeout:?}: {}",
                std::fs::read_to_string(&self.out).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.out);
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.child.is_none() {
            // It crashed in the test: start it again to clean up its tasks.
            self.spawn();
        }
        self.signal(libc::SIGCONT);
        // Whatever runs in the namespace, CRI pods included.
        let listed = self.ctr(&["containers", "ls", "-q"]);
        let mut ids: Vec<String> =
            String::from_utf8_lossy(&listed.stdout).split_whitespace().map(String::from).collect();
        ids.extend(self.containers.clone());
        ids.sort();
        ids.dedup();
        for id in ids {
            self.remove(&id);
        }
        self.signal(libc::SIGTERM);
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The roots of the hierarchies runc creates cgroups in: every cgroup v1
/// controller's mount, or the one unified hierarchy of v2.
fn hierarchy_roots() -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    if base.join("cgroup.controllers").exists() {
        return vec![base.to_path_buf()];
    }
    let Ok(mounts) = std::fs::read_dir(base) else { return Vec::new() };
    mounts.flatten().map(|m| m.path()).filter(|p| !p.is_symlink() && p.join("cgroup.procs").exists()).collect()
}

/// Removes `rel` (relative to the hierarchy root) and everything below it
/// in every hierarchy where runc created it, deepest first.
pub fn remove_in_all_hierarchies(rel: &str) {
    for root in hierarchy_roots() {
        let top = root.join(rel.trim_start_matches('/'));
        if top.is_dir() {
            remove_tree(&top);
        }
    }
}

fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    for _ in 0..50 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A pod of containerd containers: kubelet's cgroupfs layout inside the
/// test's cgroup, `pod<uid>/<container id>`; the first container run is the
/// sandbox by the registry's rule.
pub struct RuntimePod {
    pub cg: TestCgroup,
    pub pod_path: String,
    /// In each hierarchy, the top-most directory of the pod's path that did
    /// not exist before (runc creates the whole path everywhere).
    created: Vec<PathBuf>,
}

impl RuntimePod {
    pub fn new(name: &str, uid: &str) -> Self {
        let cg = TestCgroup::create(name);
        let pod_path = format!("{}/kubepods/burstable/pod{uid}", cg.path);
        let mut created = Vec::new();
        for root in hierarchy_roots() {
            let mut dir = root;
            for part in pod_path.split('/').filter(|p| !p.is_empty()) {
                dir = dir.join(part);
                if !dir.exists() {
                    created.push(dir.clone());
                    break;
                }
            }
        }
        Self { cg, pod_path, created }
    }

    pub fn container_path(&self, id: &str) -> String {
        format!("{}/{id}", self.pod_path)
    }
}

impl Drop for RuntimePod {
    fn drop(&mut self) {
        // runc created the pod tree in every hierarchy; the memory one is
        // removed again by TestCgroup's own drop (already gone is fine).
        for top in &self.created {
            remove_tree(top);
        }
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("spawn");
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().expect("sha256sum");
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().expect("digest").to_string()
}
