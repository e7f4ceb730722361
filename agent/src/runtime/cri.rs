//! Pod and container names from the container runtime's CRI socket.
//!
//! A task lists pod sandboxes and containers (`ListPodSandbox`,
//! `ListContainers`) every refresh period, and sooner when the watchdog
//! asks for container ids it cannot name; each listing is published as one
//! [`Snapshot`] through a `watch` channel, so the event pipeline never
//! waits on the runtime and a slow consumer only ever misses stale
//! listings. Asked-for ids the listing lacks are asked again a few times
//! (the runtime may list a container only after its cgroup appeared), then
//! counted as unresolved. A lost or missing socket is retried with backoff.
//!
//! A second task answers the watchdog's questions on containers whose init
//! ended (`ContainerStatus`: the reason and exit code the kubelet will
//! report), as runtime events: the runtime's word on an end, to be held
//! against the kernel's.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_cri::v1::{
    runtime_service_client::RuntimeServiceClient, Container, ContainerState, ContainerStatusRequest,
    ListContainersRequest, ListPodSandboxRequest, PodSandbox, VersionRequest,
};
use prometheus::IntCounter;
use tokio::sync::{mpsc, watch, Notify};
use tokio_util::sync::CancellationToken;

use super::workload::workload;
use super::{
    metrics::{MetadataMetrics, RefreshResult},
    Retry,
};
use crate::{
    events::RuntimeEvent,
    model::metadata::{ContainerMeta, PodMeta, Snapshot, SANDBOX_CONTAINER_NAME},
};

/// Container ids waiting for a listing, at most; more are left to the
/// periodic refresh.
const MAX_WANTED: usize = 4096;
/// Listings that may miss an asked-for id before it counts as unresolved.
const MAX_ATTEMPTS: u8 = 5;
/// At most one listing per this interval, however many ids are asked for.
const MIN_SPACING: Duration = Duration::from_secs(1);
/// One listing may take this long before the runtime counts as down.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest listing accepted (kubelet's own limit).
const MAX_MESSAGE: usize = 16 << 20;

#[derive(Debug, Clone)]
pub struct CriConfig {
    pub socket: PathBuf,
    pub refresh: Duration,
}

/// Container ids the watchdog wants named, and those whose status it
/// wants: filled without waiting, taken by the CRI's tasks.
#[derive(Default)]
pub struct MetadataRequests {
    wanted: Mutex<HashMap<String, u8>>,
    notify: Notify,
    statuses: Mutex<Vec<String>>,
    status_notify: Notify,
}

/// Containers whose status is asked for, at most; more are dropped (their
/// checks settle unanswered).
const MAX_STATUSES: usize = 1024;
/// A container's status is asked this long after its init's end was seen
/// (the runtime handles its own TaskExit meanwhile), then again each
/// second until it says the container exited, at most `STATUS_ATTEMPTS`
/// times.
const STATUS_DELAY: Duration = Duration::from_millis(500);
const STATUS_ATTEMPTS: u8 = 5;

impl MetadataRequests {
    /// Asks for `container_id`'s status (its init ended).
    pub fn want_status(&self, container_id: String) {
        if let Ok(mut statuses) = self.statuses.lock() {
            if statuses.len() < MAX_STATUSES {
                statuses.push(container_id);
            }
        }
        self.status_notify.notify_one();
    }

    fn take_statuses(&self) -> Vec<String> {
        self.statuses.lock().map(|mut s| std::mem::take(&mut *s)).unwrap_or_default()
    }

    /// Asks for `container_id` to be named by the next listing.
    pub fn want(&self, container_id: String) {
        if let Ok(mut wanted) = self.wanted.lock() {
            if wanted.len() < MAX_WANTED {
                wanted.entry(container_id).or_insert(0);
            }
        }
        self.notify.notify_one();
    }

    fn pending(&self) -> bool {
        self.wanted.lock().is_ok_and(|w| !w.is_empty())
    }

    /// After a listing: drops the ids it named, counts one more attempt
    /// for the others; returns how many were given up on.
    fn settle(&self, snapshot: &Snapshot) -> u64 {
        let Ok(mut wanted) = self.wanted.lock() else { return 0 };
        if wanted.is_empty() {
            return 0;
        }
        let listed: HashSet<&str> = snapshot.containers.iter().map(|c| c.id.as_str()).collect();
        let mut given_up = 0;
        wanted.retain(|id, attempts| {
            if listed.contains(id.as_str()) {
                return false;
            }
            *attempts += 1;
            let keep = *attempts < MAX_ATTEMPTS;
            given_up += u64::from(!keep);
            keep
        });
        given_up
    }
}

/// Builds one snapshot from the runtime's two listings. Sandboxes are named
/// as containers too (their id is their pause container's); a container
/// whose sandbox is not listed is named through kubelet's pod-uid label,
/// or skipped.
pub fn snapshot(sandboxes: Vec<PodSandbox>, containers: Vec<Container>) -> Snapshot {
    let mut out = Snapshot::default();
    let mut uid_of: HashMap<String, String> = HashMap::new();
    for sb in sandboxes {
        let Some(meta) = sb.metadata else { continue };
        if meta.uid.is_empty() {
            continue;
        }
        uid_of.insert(sb.id.clone(), meta.uid.clone());
        out.containers.push(ContainerMeta {
            id: sb.id.clone(),
            name: SANDBOX_CONTAINER_NAME.to_string(),
            pod_uid: meta.uid.clone(),
            sandbox: true,
        });
        let workload = Some(workload(&meta.name, &sb.labels));
        out.pods.push(PodMeta {
            uid: meta.uid,
            namespace: meta.namespace,
            name: meta.name,
            sandbox_id: sb.id,
            workload,
        });
    }
    for c in containers {
        let pod_uid = uid_of.get(&c.pod_sandbox_id).cloned().or_else(|| c.labels.get("io.kubernetes.pod.uid").cloned());
        let (Some(pod_uid), Some(meta)) = (pod_uid, c.metadata) else { continue };
        out.containers.push(ContainerMeta { id: c.id, name: meta.name, pod_uid, sandbox: false });
    }
    out
}

/// Lists the runtime until `shutdown`, publishing each listing to `tx`.
pub async fn follow(
    config: CriConfig,
    requests: Arc<MetadataRequests>,
    tx: watch::Sender<Arc<Snapshot>>,
    metrics: MetadataMetrics,
    shutdown: CancellationToken,
) {
    let mut retry = Retry::new("runtime metadata (CRI)");
    let mut client: Option<RuntimeServiceClient<tonic::transport::Channel>> = None;
    loop {
        let result = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = list_once(&config, &mut client, &metrics) => r,
        };
        match result {
            Ok(snap) => {
                metrics.up.set(1);
                metrics.refreshed(RefreshResult::Ok);
                metrics.unresolved.inc_by(requests.settle(&snap));
                if retry.succeeded() {
                    log::info!("runtime metadata (CRI) available again at {}", config.socket.display());
                }
                tx.send_replace(Arc::new(snap));
                // Never two listings within MIN_SPACING; then the next one
                // when ids are asked for, or while some are still
                // unresolved, or when the period is up.
                if !pause(&shutdown, MIN_SPACING).await {
                    return;
                }
                if !requests.pending() {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(config.refresh.saturating_sub(MIN_SPACING)) => {}
                        _ = requests.notify.notified() => {}
                    }
                }
            }
            Err(e) => {
                client = None;
                metrics.up.set(0);
                metrics.refreshed(RefreshResult::Error);
                if !pause(&shutdown, retry.failed(&config.socket, &e)).await {
                    return;
                }
            }
        }
    }
}

/// Answers the watchdog's status requests until `shutdown`: each
/// container's `ContainerStatus` once the runtime says it exited (asked
/// again each second while it does not, a few times), as a
/// [`RuntimeEvent::ContainerStatus`] into `tx` (full: counted in `dropped`).
pub async fn follow_statuses(
    config: CriConfig,
    requests: Arc<MetadataRequests>,
    tx: mpsc::Sender<RuntimeEvent>,
    dropped: IntCounter,
    shutdown: CancellationToken,
) {
    let mut client: Option<RuntimeServiceClient<tonic::transport::Channel>> = None;
    // (container id, when to ask, attempts so far)
    let mut due: Vec<(String, tokio::time::Instant, u8)> = Vec::new();
    loop {
        let next = due.iter().map(|(_, at, _)| *at).min();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = requests.status_notify.notified() => {}
            _ = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
        let now = tokio::time::Instant::now();
        for id in requests.take_statuses() {
            if due.len() < MAX_STATUSES {
                due.push((id, now + STATUS_DELAY, 0));
            }
        }
        let (ready, waiting): (Vec<_>, Vec<_>) = due.drain(..).partition(|(_, at, _)| *at <= now);
        due = waiting;
        for (id, _, attempts) in ready {
            let answer = status_once(&config, &mut client, &id).await;
            let event = match answer {
                Ok(Some((reason, exit_code))) => {
                    RuntimeEvent::ContainerStatus { container_id: id, exited: true, reason, exit_code }
                }
                Ok(None) if attempts + 1 < STATUS_ATTEMPTS => {
                    due.push((id, now + Duration::from_secs(1), attempts + 1));
                    continue;
                }
                Ok(None) | Err(_) => {
                    if answer.is_err() {
                        client = None;
                    }
                    RuntimeEvent::ContainerStatus {
                        container_id: id,
                        exited: false,
                        reason: String::new(),
                        exit_code: 0,
                    }
                }
            };
            if tx.try_send(event).is_err() {
                dropped.inc();
            }
        }
    }
}

/// One `ContainerStatus`: the reason and exit code once it exited,
/// `None` while it has not.
async fn status_once(
    config: &CriConfig,
    client: &mut Option<RuntimeServiceClient<tonic::transport::Channel>>,
    id: &str,
) -> Result<Option<(String, i32)>, String> {
    let c = match client {
        Some(c) => c,
        None => {
            let channel = tokio::time::timeout(CALL_TIMEOUT, containerd_client::connect(&config.socket))
                .await
                .map_err(|_| "connect timed out".to_string())?
                .map_err(|e| format!("connect: {e}"))?;
            client.insert(RuntimeServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE))
        }
    };
    let request = ContainerStatusRequest { container_id: id.to_string(), verbose: false };
    let status = tokio::time::timeout(CALL_TIMEOUT, c.container_status(request))
        .await
        .map_err(|_| "ContainerStatus timed out".to_string())?
        .map_err(|s| format!("ContainerStatus: {}", s.message()))?
        .into_inner()
        .status;
    Ok(status.filter(|s| s.state == ContainerState::ContainerExited as i32).map(|s| (s.reason, s.exit_code)))
}

/// Sleeps `d`; false if shut down meanwhile.
async fn pause(shutdown: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

async fn list_once(
    config: &CriConfig,
    client: &mut Option<RuntimeServiceClient<tonic::transport::Channel>>,
    metrics: &MetadataMetrics,
) -> Result<Snapshot, String> {
    let c = match client {
        Some(c) => c,
        None => {
            let channel = tokio::time::timeout(CALL_TIMEOUT, containerd_client::connect(&config.socket))
                .await
                .map_err(|_| "connect timed out".to_string())?
                .map_err(|e| format!("connect: {e}"))?;
            let c = client.insert(RuntimeServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE));
            say_version(c, metrics).await;
            c
        }
    };
    let call = async {
        let sandboxes = c
            .list_pod_sandbox(ListPodSandboxRequest { filter: None })
            .await
            .map_err(|s| format!("ListPodSandbox: {}", s.message()))?
            .into_inner()
            .items;
        let containers = c
            .list_containers(ListContainersRequest { filter: None })
            .await
            .map_err(|s| format!("ListContainers: {}", s.message()))?
            .into_inner()
            .containers;
        Ok::<_, String>(snapshot(sandboxes, containers))
    };
    tokio::time::timeout(CALL_TIMEOUT, call).await.map_err(|_| "listing timed out".to_string())?
}

/// A runtime other than containerd (whose own Version API says more, with
/// its revision) gives its version over the CRI: CRI-O does.
async fn say_version(client: &mut RuntimeServiceClient<tonic::transport::Channel>, metrics: &MetadataMetrics) {
    let call = client.version(VersionRequest { version: "v1".into() });
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(v)) => {
            let v = v.into_inner();
            if v.runtime_name != "containerd" && !v.runtime_name.is_empty() {
                metrics.info.observe(&v.runtime_name, &v.runtime_version, "");
            }
        }
        Ok(Err(status)) => log::debug!("CRI Version: {}", status.message()),
        Err(_) => log::debug!("CRI Version timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::runtime::{Workload, WorkloadKind};
    use k8s_cri::v1::{ContainerMetadata, PodSandboxMetadata};

    fn sandbox(id: &str, uid: &str, name: &str) -> PodSandbox {
        PodSandbox {
            id: id.into(),
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: "shop".into(),
                attempt: 0,
            }),
            ..PodSandbox::default()
        }
    }

    fn container(id: &str, sandbox: &str, name: &str) -> Container {
        Container {
            id: id.into(),
            pod_sandbox_id: sandbox.into(),
            metadata: Some(ContainerMetadata { name: name.into(), attempt: 0 }),
            ..Container::default()
        }
    }

    #[test]
    fn listings_become_pods_and_named_containers() {
        let mut orphan = container("c3", "sb-gone", "late");
        orphan.labels.insert("io.kubernetes.pod.uid".into(), "uid-9".into());
        let snap = snapshot(
            vec![sandbox("sb1", "uid-1", "web"), PodSandbox { id: "sb-x".into(), ..PodSandbox::default() }],
            vec![container("c1", "sb1", "app"), orphan, container("c4", "sb-unknown", "lost")],
        );
        assert_eq!(
            snap.pods,
            vec![PodMeta {
                uid: "uid-1".into(),
                namespace: "shop".into(),
                name: "web".into(),
                sandbox_id: "sb1".into(),
                workload: Some(Workload { kind: WorkloadKind::Pod, name: "web".into() }),
            }]
        );
        let named: Vec<(&str, &str, &str, bool)> =
            snap.containers.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.pod_uid.as_str(), c.sandbox)).collect();
        assert_eq!(
            named,
            vec![("sb1", "POD", "uid-1", true), ("c1", "app", "uid-1", false), ("c3", "late", "uid-9", false)]
        );
    }

    #[test]
    fn asked_ids_are_dropped_when_named_and_given_up_after_attempts() {
        let requests = MetadataRequests::default();
        requests.want("c1".into());
        requests.want("c2".into());
        let named = snapshot(vec![sandbox("sb1", "uid-1", "web")], vec![container("c1", "sb1", "app")]);
        assert_eq!(requests.settle(&named), 0);
        assert!(requests.pending(), "c2 is still wanted");
        let given_up: u64 = (1..MAX_ATTEMPTS).map(|_| requests.settle(&named)).sum();
        assert_eq!(given_up, 1);
        assert!(!requests.pending());
    }
}
