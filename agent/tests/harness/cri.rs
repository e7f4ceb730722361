//! A kubelet stand-in: pod sandboxes and containers run through the real
//! CRI of a test's containerd ([`super::containerd::Containerd::start_cri`]),
//! in cgroups inside the test's own subtree. Every sandbox it ran is
//! stopped and removed on drop (drop it before its containerd).
#![allow(dead_code)]

use std::path::PathBuf;

use k8s_cri::v1::{
    runtime_service_client::RuntimeServiceClient, ContainerConfig, ContainerMetadata, ContainerStatusRequest,
    CreateContainerRequest, ImageSpec, LinuxContainerConfig, LinuxContainerResources, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata,
    RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest, StopContainerRequest, StopPodSandboxRequest,
    UpdateContainerResourcesRequest,
};
use tonic::transport::Channel;

use super::containerd::IMAGE;

pub struct Cri {
    rt: tokio::runtime::Runtime,
    socket: PathBuf,
    client: RuntimeServiceClient<Channel>,
    log_dir: PathBuf,
    sandboxes: Vec<String>,
}

/// A pod sandbox that runs, with the config its containers are created in.
pub struct CriPod {
    pub id: String,
    config: PodSandboxConfig,
}

/// What the runtime says about a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// CRI's ContainerState: 0 created, 1 running, 2 exited, 3 unknown.
    pub state: i32,
    pub reason: String,
    pub exit_code: i32,
}

impl Cri {
    pub fn connect(socket: &std::path::Path, log_dir: PathBuf) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
        let channel = rt.block_on(containerd_client::connect(socket)).expect("CRI socket");
        std::fs::create_dir_all(&log_dir).expect("pod log dir");
        let socket = socket.to_path_buf();
        Self { rt, socket, client: RuntimeServiceClient::new(channel), log_dir, sandboxes: Vec::new() }
    }

    /// A new connection, after the runtime restarted.
    pub fn reconnect(&mut self) {
        if let Ok(channel) = self.rt.block_on(containerd_client::connect(&self.socket)) {
            self.client = RuntimeServiceClient::new(channel);
        }
    }

    /// RunPodSandbox with the host network in `cgroup_parent` (a path
    /// relative to the hierarchy roots, as kubelet's cgroupfs driver gives).
    pub fn run_pod(&mut self, name: &str, namespace: &str, uid: &str, cgroup_parent: &str) -> CriPod {
        self.try_run_pod(name, namespace, uid, cgroup_parent)
            .unwrap_or_else(|message| panic!("RunPodSandbox: {message}"))
    }

    /// RunPodSandbox, whose failure (e.g. the sandbox OOM-killed as it
    /// starts) is the runtime's message.
    pub fn try_run_pod(
        &mut self,
        name: &str,
        namespace: &str,
        uid: &str,
        cgroup_parent: &str,
    ) -> Result<CriPod, String> {
        self.try_run_pod_with(name, namespace, uid, cgroup_parent, &[], false)
    }

    /// RunPodSandbox with the pod's `labels` as the kubelet hands them over
    /// (the pod's own, plus its `io.kubernetes.pod.*`), and with
    /// `share_pids` one PID namespace for the pod (shareProcessNamespace:
    /// a container's init is not its namespace's PID 1, so it can be
    /// killed by any signal).
    pub fn run_pod_with(
        &mut self,
        name: &str,
        namespace: &str,
        uid: &str,
        cgroup_parent: &str,
        labels: &[(&str, &str)],
        share_pids: bool,
    ) -> CriPod {
        self.try_run_pod_with(name, namespace, uid, cgroup_parent, labels, share_pids)
            .unwrap_or_else(|message| panic!("RunPodSandbox: {message}"))
    }

    fn try_run_pod_with(
        &mut self,
        name: &str,
        namespace: &str,
        uid: &str,
        cgroup_parent: &str,
        labels: &[(&str, &str)],
        share_pids: bool,
    ) -> Result<CriPod, String> {
        let mut labels: std::collections::HashMap<String, String> =
            labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        for (k, v) in [
            ("io.kubernetes.pod.name", name),
            ("io.kubernetes.pod.namespace", namespace),
            ("io.kubernetes.pod.uid", uid),
        ] {
            labels.insert(k.into(), v.into());
        }
        let pid = if share_pids { NamespaceMode::Pod } else { NamespaceMode::Container };
        let config = PodSandboxConfig {
            labels,
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: namespace.into(),
                attempt: 0,
            }),
            // No hostname: with the node's network there is no private UTS
            // namespace to set one in (runc refuses).
            log_directory: self.log_dir.join(uid).display().to_string(),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: cgroup_parent.into(),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: NamespaceMode::Node as i32,
                        pid: pid as i32,
                        ipc: NamespaceMode::Pod as i32,
                        ..NamespaceOption::default()
                    }),
                    ..LinuxSandboxSecurityContext::default()
                }),
                ..LinuxPodSandboxConfig::default()
            }),
            ..PodSandboxConfig::default()
        };
        let request = RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() };
        let id = self
            .rt
            .block_on(self.client.run_pod_sandbox(request))
            .map_err(|s| s.message().to_string())?
            .into_inner()
            .pod_sandbox_id;
        self.sandboxes.push(id.clone());
        Ok(CriPod { id, config })
    }

    /// CreateContainer + StartContainer of `command` (run by busybox sh).
    pub fn run_container(&mut self, pod: &CriPod, name: &str, memory_limit: Option<i64>, script: &str) -> String {
        self.run_container_with(pod, name, memory_limit, script, std::collections::HashMap::new())
    }

    /// Also with `unified` cgroup v2 settings, as the kubelet passes
    /// `memory.oom.group` (runc refuses them on v1).
    pub fn run_container_with(
        &mut self,
        pod: &CriPod,
        name: &str,
        memory_limit: Option<i64>,
        script: &str,
        unified: std::collections::HashMap<String, String>,
    ) -> String {
        let resources = LinuxContainerResources {
            memory_limit_in_bytes: memory_limit.unwrap_or(0),
            unified,
            ..LinuxContainerResources::default()
        };
        self.run_container_resourced(pod, name, script, resources)
    }

    /// With the kubelet's resources as given (such as `oom_score_adj`).
    pub fn run_container_resourced(
        &mut self,
        pod: &CriPod,
        name: &str,
        script: &str,
        resources: LinuxContainerResources,
    ) -> String {
        self.run_attempt(pod, name, 0, script, resources)
    }

    /// The kubelet's restart of container `name`: its attempt `attempt`,
    /// a new container (a new id) under the same name in the same pod.
    pub fn restart_container(
        &mut self,
        pod: &CriPod,
        name: &str,
        attempt: u32,
        memory_limit: Option<i64>,
        script: &str,
    ) -> String {
        let resources = LinuxContainerResources {
            memory_limit_in_bytes: memory_limit.unwrap_or(0),
            ..LinuxContainerResources::default()
        };
        self.run_attempt(pod, name, attempt, script, resources)
    }

    fn run_attempt(
        &mut self,
        pod: &CriPod,
        name: &str,
        attempt: u32,
        script: &str,
        resources: LinuxContainerResources,
    ) -> String {
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata { name: name.into(), attempt }),
            image: Some(ImageSpec { image: IMAGE.into(), ..ImageSpec::default() }),
            command: vec!["sh".into(), "-c".into(), script.into()],
            log_path: format!("{name}-{attempt}.log"),
            linux: Some(LinuxContainerConfig { resources: Some(resources), ..LinuxContainerConfig::default() }),
            ..ContainerConfig::default()
        };
        let request = CreateContainerRequest {
            pod_sandbox_id: pod.id.clone(),
            config: Some(config),
            sandbox_config: Some(pod.config.clone()),
        };
        let id = self
            .rt
            .block_on(self.client.create_container(request))
            .unwrap_or_else(|s| panic!("CreateContainer: {}", s.message()))
            .into_inner()
            .container_id;
        self.rt
            .block_on(self.client.start_container(StartContainerRequest { container_id: id.clone() }))
            .unwrap_or_else(|s| panic!("StartContainer: {}", s.message()));
        id
    }

    /// UpdateContainerResources, as the kubelet resizes a pod in place:
    /// the container's memory limit (its swap held to it on v1, as runc
    /// sets it), what runc's `update` writes; `Err` with the runtime's
    /// message where it refuses.
    pub fn update_memory(&mut self, container_id: &str, memory_limit: i64) -> Result<(), String> {
        let request = UpdateContainerResourcesRequest {
            container_id: container_id.into(),
            linux: Some(LinuxContainerResources {
                memory_limit_in_bytes: memory_limit,
                ..LinuxContainerResources::default()
            }),
            ..UpdateContainerResourcesRequest::default()
        };
        self.rt
            .block_on(self.client.update_container_resources(request))
            .map(|_| ())
            .map_err(|s| s.message().to_string())
    }

    /// StopContainer with `timeout` seconds of grace, as the kubelet stops
    /// one (a probe's restart, a rollout, an eviction): the runtime sends
    /// the image's stop signal (SIGTERM), and SIGKILL once the grace is
    /// over. Returns when the container has stopped.
    pub fn stop_container(&mut self, container_id: &str, timeout: i64) {
        let request = StopContainerRequest { container_id: container_id.into(), timeout };
        self.rt
            .block_on(self.client.stop_container(request))
            .unwrap_or_else(|s| panic!("StopContainer: {}", s.message()));
    }

    /// ContainerStatus until the runtime says the container exited (state 2),
    /// for at most `within`.
    pub fn exited_status(&mut self, container_id: &str, within: std::time::Duration) -> Status {
        let start = std::time::Instant::now();
        loop {
            let status = self.status(container_id);
            if status.state == 2 || start.elapsed() > within {
                return status;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// The runtime's word on containers whose inits the OOM killer ended,
    /// each waited for until it exited: how many it reported otherwise than
    /// `OOMKilled`. containerd says `Error` when its OOM event comes after
    /// the exit (containerd #12372, #12260, #8893), a race no test decides,
    /// so a test asserts the agent's count of exactly these
    /// (`kernel_says_oom`), never the runtime's reason.
    pub fn missed_oom_kills(&mut self, container_ids: &[&str]) -> u32 {
        let mut missed = 0;
        for id in container_ids {
            let status = self.exited_status(id, std::time::Duration::from_secs(30));
            assert_eq!((status.state, status.exit_code), (2, 137), "{id} ended by SIGKILL: {status:?}");
            match status.reason.as_str() {
                "OOMKilled" => {}
                "Error" => missed += 1,
                other => panic!("{id}: the runtime's reason {other:?} is neither OOMKilled nor Error"),
            }
        }
        missed
    }

    pub fn status(&mut self, container_id: &str) -> Status {
        let request = ContainerStatusRequest { container_id: container_id.into(), verbose: false };
        let status = self
            .rt
            .block_on(self.client.container_status(request))
            .unwrap_or_else(|s| panic!("ContainerStatus: {}", s.message()))
            .into_inner()
            .status
            .expect("a status");
        Status { state: status.state, reason: status.reason, exit_code: status.exit_code }
    }

    /// StopPodSandbox + RemovePodSandbox (its containers go with it),
    /// reconnecting once if the runtime restarted meanwhile.
    pub fn remove_pod(&mut self, id: &str) {
        for attempt in 0..2 {
            let stop = StopPodSandboxRequest { pod_sandbox_id: id.into() };
            let remove = RemovePodSandboxRequest { pod_sandbox_id: id.into() };
            let result = self.rt.block_on(async {
                self.client.stop_pod_sandbox(stop).await?;
                self.client.remove_pod_sandbox(remove).await
            });
            match result {
                Ok(_) => break,
                Err(s) if attempt == 0 => {
                    eprintln!("removing pod sandbox {id}: {}; reconnecting", s.message());
                    self.reconnect();
                }
                Err(s) => eprintln!("removing pod sandbox {id}: {}", s.message()),
            }
        }
        self.sandboxes.retain(|s| s != id);
    }
}

impl Drop for Cri {
    fn drop(&mut self) {
        for id in self.sandboxes.clone() {
            self.remove_pod(&id);
        }
    }
}
