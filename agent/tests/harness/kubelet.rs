//! A kubelet stand-in for one pod template: it reads a manifest's pod spec
//! and turns it into the CRI calls the kubelet makes — namespaces,
//! security context, volumes, env, args, resources, the pod's cgroup —
//! then probes the pod and stops it as the kubelet does. A field it does
//! not translate fails the test: nothing in the manifest is skipped
//! silently. What this machine cannot give (a capability outside root's
//! bounding set) is named in `notes` and printed.
#![allow(dead_code)]

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_cri::v1::{
    image_service_client::ImageServiceClient, runtime_service_client::RuntimeServiceClient,
    security_profile::ProfileType, Capability, ContainerConfig, ContainerMetadata, ContainerStatusRequest,
    CreateContainerRequest, ImageSpec, ImageStatusRequest, Int64Value, KeyValue, LinuxContainerConfig,
    LinuxContainerResources, LinuxContainerSecurityContext, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, Mount,
    MountPropagation, NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata, PodSandboxStatusRequest,
    RemovePodSandboxRequest, RunPodSandboxRequest, SecurityProfile, StartContainerRequest, StopContainerRequest,
    StopPodSandboxRequest,
};
use serde_json::Value;
use tonic::transport::Channel;

/// The kubelet's default masked and read-only /proc and /sys paths
/// (`procMount: Default`).
const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const READONLY_PATHS: &[&str] = &["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];
/// What the kubelet gives node-critical pods (system-node-critical).
const CRITICAL_OOM_SCORE_ADJ: i64 = -997;

/// The node the pod lands on, as the kubelet sees it.
pub struct NodeContext {
    pub node_name: String,
    /// The pod's cgroup (cgroupfs driver: `…/kubepods/<qos>/pod<uid>`),
    /// relative to the hierarchy roots; the kubelet creates it.
    pub pod_cgroup: String,
    pub pod_uid: String,
    pub pod_name: String,
    /// The kubelet's directory for this pod (logs, /etc/hosts, the
    /// termination log).
    pub pod_dir: PathBuf,
    /// hostPath → where it is on this test node (e.g. /run/containerd →
    /// the test containerd's directory); other paths are used as they are.
    pub host_paths: HashMap<String, PathBuf>,
}

/// One HTTP probe, as the manifest gives it (with the API's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub path: String,
    pub port: u16,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub failure_threshold: u32,
    pub success_threshold: u32,
}

/// The CRI calls for the template's pod.
pub struct PodPlan {
    pub sandbox: PodSandboxConfig,
    pub container: ContainerConfig,
    pub image: String,
    pub readiness: Option<Probe>,
    pub liveness: Option<Probe>,
    pub grace: Duration,
    /// The container's memory limit, bytes.
    pub memory_limit: i64,
    pub host_network: bool,
    /// What this machine could not give, and what was done instead.
    pub notes: Vec<String>,
}

/// Fails unless `obj` has only `known` keys: a field the stand-in does
/// not translate must not pass unnoticed.
fn only(obj: &Value, at: &str, known: &[&str]) {
    let Some(map) = obj.as_object() else { panic!("{at}: expected an object, got {obj}") };
    for key in map.keys() {
        assert!(
            known.contains(&key.as_str()),
            "{at}.{key}: the kubelet stand-in does not translate this field (translate it in agent/tests/harness/kubelet.rs)"
        );
    }
}

fn string(v: &Value, at: &str) -> String {
    v.as_str().unwrap_or_else(|| panic!("{at}: expected a string, got {v}")).to_string()
}

/// Kubernetes quantities as the kubelet reads them: CPU in millicores,
/// memory in bytes.
pub fn millicpu(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or_else(|_| panic!("CPU quantity {q}")),
        None => (q.parse::<f64>().unwrap_or_else(|_| panic!("CPU quantity {q}")) * 1000.0).round() as i64,
    }
}

pub fn bytes(q: &str) -> i64 {
    for (suffix, mult) in
        [("Ki", 1i64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("K", 1000), ("M", 1_000_000), ("G", 1_000_000_000)]
    {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<i64>().unwrap_or_else(|_| panic!("memory quantity {q}")) * mult;
        }
    }
    q.parse().unwrap_or_else(|_| panic!("memory quantity {q}"))
}

/// Capabilities root may hold on this machine (its bounding set).
fn bounding_set() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(u64::MAX)
}

fn capability_bit(name: &str) -> Option<u32> {
    const NAMES: &[&str] = &[
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ];
    NAMES.iter().position(|n| *n == name).map(|i| i as u32)
}

/// The pod template of the first DaemonSet in a manifest file.
pub fn daemonset_template(manifest: &Path) -> (Value, String) {
    let text = std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    for doc in text.split("\n---") {
        let value: Value = yaml_serde::from_str(doc).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        if value["kind"] == "DaemonSet" {
            let namespace = string(&value["metadata"]["namespace"], "metadata.namespace");
            return (value["spec"]["template"].clone(), namespace);
        }
    }
    panic!("no DaemonSet in {}", manifest.display());
}

/// Translates a pod template with one container, as the kubelet would.
pub fn plan(template: &Value, namespace: &str, node: &NodeContext) -> PodPlan {
    only(template, "template", &["metadata", "spec"]);
    only(&template["metadata"], "template.metadata", &["labels"]);
    let spec = &template["spec"];
    only(
        spec,
        "spec",
        &[
            "serviceAccountName",
            "automountServiceAccountToken",
            "hostPID",
            "hostNetwork",
            "priorityClassName",
            "nodeSelector",
            "tolerations",
            "terminationGracePeriodSeconds",
            "containers",
            "volumes",
        ],
    );
    // The service account matters to the API only once no token is
    // mounted; a mounted token needs an API server this node lacks.
    assert_eq!(spec["automountServiceAccountToken"], Value::Bool(false), "a token volume cannot be translated here");
    // The scheduler's part: a node selector must match this node's own
    // well-known labels, or the DaemonSet would not run here at all.
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let node_labels = [("kubernetes.io/os", std::env::consts::OS), ("kubernetes.io/arch", arch)];
    for (key, value) in spec["nodeSelector"].as_object().into_iter().flatten() {
        let ours = node_labels.iter().find(|(k, _)| k == key).map(|(_, v)| *v);
        assert_eq!(ours, value.as_str(), "spec.nodeSelector {key}: this node ({:?}) does not match", node_labels);
    }
    // Tolerations only steer scheduling; this node takes the pod.
    let host_pid = spec["hostPID"].as_bool().unwrap_or(false);
    let host_network = spec["hostNetwork"].as_bool().unwrap_or(false);
    let critical =
        matches!(spec["priorityClassName"].as_str(), Some("system-node-critical" | "system-cluster-critical"));
    let grace = Duration::from_secs(spec["terminationGracePeriodSeconds"].as_u64().unwrap_or(30));
    let mut notes = Vec::new();

    let mut labels: HashMap<String, String> = template["metadata"]["labels"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), string(v, "label"))).collect())
        .unwrap_or_default();
    labels.insert("io.kubernetes.pod.name".into(), node.pod_name.clone());
    labels.insert("io.kubernetes.pod.namespace".into(), namespace.into());
    labels.insert("io.kubernetes.pod.uid".into(), node.pod_uid.clone());

    let mode =
        |node_wide: bool, otherwise: NamespaceMode| if node_wide { NamespaceMode::Node } else { otherwise } as i32;
    let namespaces = NamespaceOption {
        network: mode(host_network, NamespaceMode::Pod),
        pid: mode(host_pid, NamespaceMode::Container),
        ipc: NamespaceMode::Pod as i32,
        ..NamespaceOption::default()
    };
    let log_dir = node.pod_dir.join("logs");
    std::fs::create_dir_all(&log_dir).expect("pod log dir");

    // Volumes: hostPath only.
    let mut volumes: HashMap<String, (PathBuf, String)> = HashMap::new();
    for (i, v) in spec["volumes"].as_array().cloned().unwrap_or_default().iter().enumerate() {
        let at = format!("spec.volumes[{i}]");
        only(v, &at, &["name", "hostPath"]);
        only(&v["hostPath"], &format!("{at}.hostPath"), &["path", "type"]);
        let path = string(&v["hostPath"]["path"], &format!("{at}.hostPath.path"));
        let kind = v["hostPath"]["type"].as_str().unwrap_or("").to_string();
        let on_node = node.host_paths.get(&path).cloned().unwrap_or_else(|| PathBuf::from(&path));
        match kind.as_str() {
            "Directory" => {
                assert!(on_node.is_dir(), "{at}: hostPath {path} ({}) must be a directory", on_node.display())
            }
            "DirectoryOrCreate" => std::fs::create_dir_all(&on_node).expect("DirectoryOrCreate"),
            other => panic!("{at}: hostPath type {other:?} is not translated"),
        }
        volumes.insert(string(&v["name"], &format!("{at}.name")), (on_node, path));
    }

    let containers = spec["containers"].as_array().expect("spec.containers");
    assert_eq!(containers.len(), 1, "one container per pod is what this stand-in runs");
    let c = &containers[0];
    only(
        c,
        "spec.containers[0]",
        &[
            "name",
            "image",
            "imagePullPolicy",
            "args",
            "env",
            "ports",
            "livenessProbe",
            "readinessProbe",
            "resources",
            "securityContext",
            "volumeMounts",
        ],
    );
    let name = string(&c["name"], "containers[0].name");
    let image = string(&c["image"], "containers[0].image");
    // Nothing can be pulled here: the image must be on the node already,
    // which IfNotPresent (or Never) accepts.
    let policy = c["imagePullPolicy"].as_str().unwrap_or("IfNotPresent");
    assert!(matches!(policy, "IfNotPresent" | "Never"), "imagePullPolicy {policy} would pull");
    let args: Vec<String> =
        c["args"].as_array().map(|a| a.iter().map(|v| string(v, "args[]")).collect()).unwrap_or_default();

    let mut envs = Vec::new();
    for (i, e) in c["env"].as_array().cloned().unwrap_or_default().iter().enumerate() {
        let at = format!("containers[0].env[{i}]");
        only(e, &at, &["name", "value", "valueFrom"]);
        let value = if let Some(v) = e.get("value") {
            string(v, &at)
        } else {
            only(&e["valueFrom"], &format!("{at}.valueFrom"), &["fieldRef"]);
            only(&e["valueFrom"]["fieldRef"], &format!("{at}.valueFrom.fieldRef"), &["fieldPath", "apiVersion"]);
            match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("spec.nodeName") => node.node_name.clone(),
                Some("metadata.name") => node.pod_name.clone(),
                Some("metadata.namespace") => namespace.to_string(),
                Some("metadata.uid") => node.pod_uid.clone(),
                other => panic!("{at}: fieldRef {other:?} is not translated"),
            }
        };
        envs.push(KeyValue { key: string(&e["name"], &at), value });
    }

    let mut ports = HashMap::new();
    for (i, p) in c["ports"].as_array().cloned().unwrap_or_default().iter().enumerate() {
        let at = format!("containers[0].ports[{i}]");
        only(p, &at, &["name", "containerPort", "protocol"]);
        // No hostPort: the kubelet maps nothing; the port is the pod's.
        let port = p["containerPort"].as_u64().expect("containerPort") as u16;
        if let Some(n) = p["name"].as_str() {
            ports.insert(n.to_string(), port);
        }
    }
    let probe = |v: &Value, at: &str| -> Option<Probe> {
        if v.is_null() {
            return None;
        }
        only(
            v,
            at,
            &[
                "httpGet",
                "periodSeconds",
                "failureThreshold",
                "timeoutSeconds",
                "initialDelaySeconds",
                "successThreshold",
            ],
        );
        only(&v["httpGet"], &format!("{at}.httpGet"), &["path", "port"]);
        let port = match &v["httpGet"]["port"] {
            Value::String(name) => *ports.get(name).unwrap_or_else(|| panic!("{at}: no port named {name}")),
            Value::Number(n) => n.as_u64().expect("port") as u16,
            other => panic!("{at}: port {other}"),
        };
        let secs = |key: &str, default: u64| v[key].as_u64().unwrap_or(default);
        Some(Probe {
            path: string(&v["httpGet"]["path"], at),
            port,
            initial_delay: Duration::from_secs(secs("initialDelaySeconds", 0)),
            period: Duration::from_secs(secs("periodSeconds", 10)),
            timeout: Duration::from_secs(secs("timeoutSeconds", 1)),
            failure_threshold: secs("failureThreshold", 3) as u32,
            success_threshold: secs("successThreshold", 1) as u32,
        })
    };
    let readiness = probe(&c["readinessProbe"], "containers[0].readinessProbe");
    let liveness = probe(&c["livenessProbe"], "containers[0].livenessProbe");

    // Resources, as the kubelet's cgroupfs driver writes them.
    let r = &c["resources"];
    only(r, "containers[0].resources", &["requests", "limits"]);
    only(&r["requests"], "resources.requests", &["cpu", "memory"]);
    only(&r["limits"], "resources.limits", &["cpu", "memory"]);
    let cpu_request = r["requests"]["cpu"].as_str().map(millicpu);
    let cpu_limit = r["limits"]["cpu"].as_str().map(millicpu);
    let memory_limit = r["limits"]["memory"].as_str().map(bytes).unwrap_or(0);
    // A memory request sets no cgroup value without the MemoryQoS feature
    // (off by default); it only steers scheduling.
    let resources = LinuxContainerResources {
        cpu_shares: cpu_request.map_or(2, |m| (m * 1024 / 1000).max(2)),
        cpu_period: if cpu_limit.is_some() { 100_000 } else { 0 },
        cpu_quota: cpu_limit.map_or(0, |m| m * 100_000 / 1000),
        memory_limit_in_bytes: memory_limit,
        oom_score_adj: if critical { CRITICAL_OOM_SCORE_ADJ } else { 1000 },
        ..LinuxContainerResources::default()
    };

    let sc = &c["securityContext"];
    only(
        sc,
        "containers[0].securityContext",
        &[
            "runAsUser",
            "runAsNonRoot",
            "privileged",
            "allowPrivilegeEscalation",
            "readOnlyRootFilesystem",
            "capabilities",
            "seccompProfile",
        ],
    );
    let run_as_user = sc["runAsUser"].as_i64();
    if sc["runAsNonRoot"].as_bool() == Some(true) {
        assert_ne!(run_as_user, Some(0), "runAsNonRoot with runAsUser 0 is refused by the kubelet");
    }
    only(&sc["capabilities"], "securityContext.capabilities", &["add", "drop"]);
    let caps = |key: &str| -> Vec<String> {
        sc["capabilities"][key].as_array().map(|a| a.iter().map(|v| string(v, key)).collect()).unwrap_or_default()
    };
    let mut add = caps("add");
    let bounding = bounding_set();
    add.retain(|cap| {
        let bit = capability_bit(cap).unwrap_or_else(|| panic!("unknown capability {cap}"));
        let held = bounding & (1 << bit) != 0;
        if !held {
            notes.push(format!(
                "capability {cap}: root on this machine cannot hold it (not in its bounding set), so no runtime can grant it here; \
                 the container runs without it"
            ));
        }
        held
    });
    only(&sc["seccompProfile"], "securityContext.seccompProfile", &["type"]);
    let seccomp = match sc["seccompProfile"]["type"].as_str() {
        Some("Unconfined") | None => ProfileType::Unconfined,
        Some("RuntimeDefault") => ProfileType::RuntimeDefault,
        Some(other) => panic!("seccompProfile {other} is not translated"),
    };
    let security = LinuxContainerSecurityContext {
        capabilities: Some(Capability {
            add_capabilities: add,
            drop_capabilities: caps("drop"),
            ..Capability::default()
        }),
        privileged: sc["privileged"].as_bool().unwrap_or(false),
        namespace_options: Some(namespaces.clone()),
        run_as_user: run_as_user.map(|value| Int64Value { value }),
        readonly_rootfs: sc["readOnlyRootFilesystem"].as_bool().unwrap_or(false),
        // allowPrivilegeEscalation: false is what sets no_new_privs.
        no_new_privs: sc["allowPrivilegeEscalation"].as_bool() == Some(false),
        masked_paths: MASKED_PATHS.iter().map(|p| p.to_string()).collect(),
        readonly_paths: READONLY_PATHS.iter().map(|p| p.to_string()).collect(),
        seccomp: Some(SecurityProfile { profile_type: seccomp as i32, ..SecurityProfile::default() }),
        ..LinuxContainerSecurityContext::default()
    };

    let mut mounts = Vec::new();
    for (i, m) in c["volumeMounts"].as_array().cloned().unwrap_or_default().iter().enumerate() {
        let at = format!("containers[0].volumeMounts[{i}]");
        only(m, &at, &["name", "mountPath", "readOnly"]);
        let volume = string(&m["name"], &at);
        let (host, _) = volumes.get(&volume).unwrap_or_else(|| panic!("{at}: no volume {volume}"));
        mounts.push(Mount {
            container_path: string(&m["mountPath"], &at),
            host_path: host.display().to_string(),
            readonly: m["readOnly"].as_bool().unwrap_or(false),
            propagation: MountPropagation::PropagationPrivate as i32,
            ..Mount::default()
        });
    }
    // What the kubelet adds to every container: its /etc/hosts (pod
    // network only) and the termination log.
    if !host_network {
        let hosts = node.pod_dir.join("etc-hosts");
        std::fs::write(&hosts, format!("127.0.0.1\tlocalhost\n::1\tlocalhost\n10.88.0.2\t{}\n", node.pod_name))
            .expect("etc-hosts");
        mounts.push(Mount {
            container_path: "/etc/hosts".into(),
            host_path: hosts.display().to_string(),
            ..Mount::default()
        });
    }
    let termination = node.pod_dir.join("termination-log");
    std::fs::write(&termination, "").expect("termination log");
    mounts.push(Mount {
        container_path: "/dev/termination-log".into(),
        host_path: termination.display().to_string(),
        ..Mount::default()
    });

    let sandbox = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: node.pod_name.clone(),
            uid: node.pod_uid.clone(),
            namespace: namespace.into(),
            attempt: 0,
        }),
        hostname: if host_network { String::new() } else { node.pod_name.clone() },
        log_directory: log_dir.display().to_string(),
        labels: labels.clone(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: node.pod_cgroup.clone(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces),
                privileged: security.privileged,
                // The kubelet's default without a pod-level profile
                // (--seccomp-default is off).
                seccomp: Some(SecurityProfile {
                    profile_type: ProfileType::Unconfined as i32,
                    ..SecurityProfile::default()
                }),
                ..LinuxSandboxSecurityContext::default()
            }),
            ..LinuxPodSandboxConfig::default()
        }),
        ..PodSandboxConfig::default()
    };
    let container = ContainerConfig {
        metadata: Some(ContainerMetadata { name: name.clone(), attempt: 0 }),
        image: Some(ImageSpec { image: image.clone(), ..ImageSpec::default() }),
        args,
        envs,
        mounts,
        labels: {
            let mut l = HashMap::new();
            l.insert("io.kubernetes.container.name".into(), name.clone());
            l.insert("io.kubernetes.pod.name".into(), node.pod_name.clone());
            l.insert("io.kubernetes.pod.namespace".into(), namespace.into());
            l.insert("io.kubernetes.pod.uid".into(), node.pod_uid.clone());
            l
        },
        log_path: format!("{name}/0.log"),
        linux: Some(LinuxContainerConfig { resources: Some(resources), security_context: Some(security) }),
        ..ContainerConfig::default()
    };
    PodPlan { sandbox, container, image, readiness, liveness, grace, memory_limit, host_network, notes }
}

/// The pod, run.
pub struct RunningPod {
    pub sandbox_id: String,
    pub container_id: String,
    /// The container's init (the agent), by the runtime's account.
    pub pid: u32,
    /// The pod's IP, as the kubelet probes it.
    pub ip: String,
    pub started: Instant,
}

/// The kubelet's CRI side for one pod.
pub struct Kubelet {
    rt: tokio::runtime::Runtime,
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    sandboxes: Vec<String>,
}

impl Kubelet {
    pub fn connect(socket: &Path) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
        let channel = rt.block_on(containerd_client::connect(socket)).expect("CRI socket");
        Self {
            rt,
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
            sandboxes: Vec::new(),
        }
    }

    /// IfNotPresent: the image must be on the node (nothing is pulled here).
    pub fn image_present(&mut self, image: &str) -> bool {
        let request = ImageStatusRequest {
            image: Some(ImageSpec { image: image.into(), ..ImageSpec::default() }),
            verbose: false,
        };
        self.rt.block_on(self.images.image_status(request)).map(|r| r.into_inner().image.is_some()).unwrap_or(false)
    }

    /// RunPodSandbox, CreateContainer, StartContainer.
    pub fn run(&mut self, plan: &PodPlan) -> RunningPod {
        let request = RunPodSandboxRequest { config: Some(plan.sandbox.clone()), runtime_handler: String::new() };
        let sandbox_id = self
            .rt
            .block_on(self.runtime.run_pod_sandbox(request))
            .unwrap_or_else(|s| panic!("RunPodSandbox: {}", s.message()))
            .into_inner()
            .pod_sandbox_id;
        self.sandboxes.push(sandbox_id.clone());
        let status = self
            .rt
            .block_on(
                self.runtime
                    .pod_sandbox_status(PodSandboxStatusRequest { pod_sandbox_id: sandbox_id.clone(), verbose: false }),
            )
            .unwrap_or_else(|s| panic!("PodSandboxStatus: {}", s.message()))
            .into_inner();
        let ip = status.status.and_then(|s| s.network).map(|n| n.ip).unwrap_or_default();
        let request = CreateContainerRequest {
            pod_sandbox_id: sandbox_id.clone(),
            config: Some(plan.container.clone()),
            sandbox_config: Some(plan.sandbox.clone()),
        };
        let container_id = self
            .rt
            .block_on(self.runtime.create_container(request))
            .unwrap_or_else(|s| panic!("CreateContainer: {}", s.message()))
            .into_inner()
            .container_id;
        let started = Instant::now();
        self.rt
            .block_on(self.runtime.start_container(StartContainerRequest { container_id: container_id.clone() }))
            .unwrap_or_else(|s| panic!("StartContainer: {}", s.message()));
        let pid = self.container_pid(&container_id);
        RunningPod { sandbox_id, container_id, pid, ip, started }
    }

    /// The init pid from the runtime's verbose status.
    fn container_pid(&mut self, id: &str) -> u32 {
        let request = ContainerStatusRequest { container_id: id.into(), verbose: true };
        let response = self
            .rt
            .block_on(self.runtime.container_status(request))
            .unwrap_or_else(|s| panic!("ContainerStatus: {}", s.message()))
            .into_inner();
        let info: Value =
            serde_json::from_str(response.info.get("info").map(String::as_str).unwrap_or("{}")).unwrap_or_default();
        info["pid"].as_u64().unwrap_or_else(|| panic!("no pid in the runtime's status: {info}")) as u32
    }

    /// (state, exit code, reason): state 1 running, 2 exited.
    pub fn status(&mut self, id: &str) -> (i32, i32, String) {
        let request = ContainerStatusRequest { container_id: id.into(), verbose: false };
        let status = self
            .rt
            .block_on(self.runtime.container_status(request))
            .unwrap_or_else(|s| panic!("ContainerStatus: {}", s.message()))
            .into_inner()
            .status
            .expect("a status");
        (status.state, status.exit_code, status.reason)
    }

    /// StopContainer with the pod's grace period, as the kubelet stops a
    /// pod: SIGTERM, then SIGKILL when the grace runs out.
    pub fn stop(&mut self, id: &str, grace: Duration) -> Duration {
        let start = Instant::now();
        let request = StopContainerRequest { container_id: id.into(), timeout: grace.as_secs() as i64 };
        self.rt
            .block_on(self.runtime.stop_container(request))
            .unwrap_or_else(|s| panic!("StopContainer: {}", s.message()));
        start.elapsed()
    }

    pub fn remove_pod(&mut self, id: &str) {
        let _ = self.rt.block_on(self.runtime.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: id.into() }));
        let _ =
            self.rt.block_on(self.runtime.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id.into() }));
        self.sandboxes.retain(|s| s != id);
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        for id in self.sandboxes.clone() {
            self.remove_pod(&id);
        }
    }
}

/// HTTP from inside a network namespace (the pod's): a thread joins it,
/// connects and asks. Loopback-only: the pod's own addresses.
pub struct PodNetwork {
    netns: PathBuf,
}

impl PodNetwork {
    /// The network namespace of process `pid`.
    pub fn of(pid: u32) -> Self {
        Self { netns: PathBuf::from(format!("/proc/{pid}/ns/net")) }
    }

    /// The namespace itself, kept open (the process may go first).
    pub fn keep(&self) -> std::fs::File {
        std::fs::File::open(&self.netns).expect("open netns")
    }

    pub fn get(ns: &std::fs::File, addr: SocketAddr, path: &str, timeout: Duration) -> Option<(u16, String)> {
        use std::os::fd::AsRawFd as _;
        let fd = ns.as_raw_fd();
        let path = path.to_string();
        std::thread::scope(|s| {
            s.spawn(move || {
                // SAFETY: setns on this thread only, with a namespace fd we hold open.
                if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                    return None;
                }
                super::http_get_timeout(addr, &path, timeout)
            })
            .join()
            .ok()
            .flatten()
        })
    }
}

/// What a prober saw: per probe, (time since start, success).
#[derive(Debug, Default, Clone)]
pub struct ProbeLog {
    pub results: Vec<(Duration, bool)>,
}

impl ProbeLog {
    /// When the container became ready: the first run of
    /// `success_threshold` successes.
    pub fn ready_at(&self, probe: &Probe) -> Option<Duration> {
        let mut run = 0;
        for (at, ok) in &self.results {
            run = if *ok { run + 1 } else { 0 };
            if run >= probe.success_threshold {
                return Some(*at);
            }
        }
        None
    }

    /// The kubelet restarts a container after `failure_threshold`
    /// failures in a row.
    pub fn would_restart(&self, probe: &Probe) -> bool {
        let mut run = 0;
        for (_, ok) in &self.results {
            run = if *ok { 0 } else { run + 1 };
            if run >= probe.failure_threshold {
                return true;
            }
        }
        false
    }
}

/// Probes `probe` against `ip` in the namespace `ns` at the probe's period
/// until `stop` is set, as the kubelet's prober does.
pub fn run_prober(
    ns: std::fs::File,
    ip: String,
    probe: Probe,
    started: Instant,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<ProbeLog> {
    std::thread::spawn(move || {
        let mut log = ProbeLog::default();
        let addr: SocketAddr = format!("{ip}:{}", probe.port).parse().expect("pod address");
        std::thread::sleep(probe.initial_delay);
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let ok = matches!(PodNetwork::get(&ns, addr, &probe.path, probe.timeout), Some((200..=399, _)));
            log.results.push((started.elapsed(), ok));
            let next = Instant::now() + probe.period;
            while Instant::now() < next && !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        log
    })
}
