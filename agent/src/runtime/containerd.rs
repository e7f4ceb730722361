//! containerd's event stream: task exits, OOM events and deletes of one
//! namespace, decoded into [`RuntimeEvent`]s and handed to the watchdog
//! through a bounded channel. The stream reconnects with backoff; a full
//! channel and an undecodable payload are counted, never waited on.

use std::{collections::HashMap, path::PathBuf};

use containerd_client::{
    events::{ContainerCreate, ContainerDelete, ContainerUpdate, TaskCreate, TaskDelete, TaskExit, TaskOom, TaskStart},
    services::v1::{
        containers_client::ContainersClient, events_client::EventsClient, version_client::VersionClient,
        GetContainerRequest, SubscribeRequest,
    },
    tonic::{transport::Channel, Code, Request},
    types::Envelope,
};
use prost::Message as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use strum::IntoEnumIterator as _;

use super::{
    metrics::{LookupResult, RuntimeStreamMetrics},
    Retry,
};
use crate::{
    events::runtime::{RuntimeEvent, Topic},
    labels::Label as _,
    model::metadata::{ContainerMeta, PodMeta, Snapshot, SANDBOX_CONTAINER_NAME},
};

/// How long reading one container record may take.
const LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Why an envelope could not become an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvelopeError {
    NoPayload,
    BadPayload,
}

/// Decodes one envelope; `Ok(None)` for topics we do not follow.
pub fn decode(env: &Envelope) -> Result<Option<RuntimeEvent>, EnvelopeError> {
    let Some(topic) = Topic::from_path(&env.topic) else { return Ok(None) };
    let published_ns = env
        .timestamp
        .as_ref()
        .map(|t| (t.seconds.max(0) as u64).saturating_mul(1_000_000_000) + t.nanos.max(0) as u64)
        .unwrap_or(0);
    // The payload's type URL lacks the leading '/' that `Any` expects, so
    // the type is taken from the topic and the bytes decoded directly.
    let bytes = env.event.as_ref().map(|a| a.value.as_slice()).ok_or(EnvelopeError::NoPayload)?;
    let bad = |_| EnvelopeError::BadPayload;
    Ok(Some(match topic {
        Topic::TaskExit => {
            let e = TaskExit::decode(bytes).map_err(bad)?;
            RuntimeEvent::TaskExit {
                container_id: e.container_id,
                exec_id: e.id,
                pid: e.pid,
                exit_status: e.exit_status,
                published_ns,
            }
        }
        Topic::TaskCreate => {
            let e = TaskCreate::decode(bytes).map_err(bad)?;
            RuntimeEvent::TaskCreate { container_id: e.container_id, pid: e.pid, published_ns }
        }
        Topic::TaskStart => {
            let e = TaskStart::decode(bytes).map_err(bad)?;
            RuntimeEvent::TaskStart { container_id: e.container_id, pid: e.pid, published_ns }
        }
        Topic::TaskOom => {
            RuntimeEvent::TaskOom { container_id: TaskOom::decode(bytes).map_err(bad)?.container_id, published_ns }
        }
        Topic::TaskDelete => {
            let e = TaskDelete::decode(bytes).map_err(bad)?;
            RuntimeEvent::TaskDelete { container_id: e.container_id, pid: e.pid, published_ns }
        }
        Topic::ContainerCreate => RuntimeEvent::ContainerCreate {
            container_id: ContainerCreate::decode(bytes).map_err(bad)?.id,
            published_ns,
        },
        Topic::ContainerDelete => RuntimeEvent::ContainerDelete {
            container_id: ContainerDelete::decode(bytes).map_err(bad)?.id,
            published_ns,
        },
        Topic::ContainerUpdate => RuntimeEvent::ContainerUpdate {
            container_id: ContainerUpdate::decode(bytes).map_err(bad)?.id,
            published_ns,
        },
    }))
}

#[derive(Debug, Clone)]
pub struct StreamConfig {
    pub socket: PathBuf,
    pub namespace: String,
}

/// Follows containerd's events until `shutdown`, reconnecting with backoff
/// (0.5 s doubling to 30 s, reset once a stream was established).
pub async fn follow(
    config: StreamConfig,
    tx: mpsc::Sender<RuntimeEvent>,
    metrics: RuntimeStreamMetrics,
    shutdown: CancellationToken,
) {
    let mut retry = Retry::new("containerd events");
    loop {
        let result = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = stream_once(&config, &tx, &metrics) => r,
        };
        metrics.up.set(0);
        let wait = match result {
            Ok(()) => {
                log::warn!("containerd event stream ended; reconnecting");
                retry.succeeded();
                Retry::FIRST
            }
            Err(e) => retry.failed(&config.socket, &e),
        };
        metrics.reconnects.inc();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

async fn stream_once(
    config: &StreamConfig,
    tx: &mpsc::Sender<RuntimeEvent>,
    metrics: &RuntimeStreamMetrics,
) -> Result<(), String> {
    let channel = containerd_client::connect(&config.socket).await.map_err(|e| format!("{e}"))?;
    // Who is at the other end of the socket is the runtime: its pid, from
    // the kernel, names it where a process name cannot (a tenant can name
    // its process containerd).
    match tokio::net::UnixStream::connect(&config.socket).await.and_then(|s| s.peer_cred()) {
        Ok(cred) => {
            let pid = cred.pid().and_then(|p| u32::try_from(p).ok()).unwrap_or(0);
            metrics.peer.store(pid, std::sync::atomic::Ordering::Relaxed);
        }
        Err(e) => log::debug!("no peer credentials of {}: {e}", config.socket.display()),
    }
    match VersionClient::new(channel.clone()).version(()).await {
        Ok(v) => {
            let v = v.into_inner();
            metrics.info.observe("containerd", &v.version, &v.revision);
        }
        Err(e) => log::warn!("containerd did not say its version: {}", e.message()),
    }
    let mut client = EventsClient::new(channel.clone());
    let filters = Topic::iter().map(|t| format!("namespace=={},topic==\"{}\"", config.namespace, t.path())).collect();
    // containerd sends the response headers with the first event, so the
    // subscription is counted as up once the connection is.
    metrics.up.set(1);
    log::info!("following containerd events at {} (namespace {})", config.socket.display(), config.namespace);
    let mut stream = client
        .subscribe(Request::new(SubscribeRequest { filters }))
        .await
        .map_err(|e| format!("subscribe: {}", e.message()))?
        .into_inner();
    loop {
        let Some(env) = stream.message().await.map_err(|e| format!("stream: {}", e.message()))? else {
            return Ok(());
        };
        match decode(&env) {
            Ok(Some(event)) => {
                if let Some(topic) = event.topic() {
                    metrics.events.with_label_values(&[topic.label()]).inc();
                }
                if let RuntimeEvent::ContainerCreate { container_id, .. } = &event {
                    // Read off the stream's path: a slow read never holds
                    // the events behind it.
                    let lookup = lookup(
                        channel.clone(),
                        config.namespace.clone(),
                        container_id.clone(),
                        tx.clone(),
                        metrics.clone(),
                    );
                    tokio::spawn(lookup);
                }
                if tx.try_send(event).is_err() {
                    metrics.dropped.inc();
                }
            }
            Ok(None) => {}
            Err(e) => {
                log::debug!("undecodable containerd event on {}: {e:?}", env.topic);
                metrics.malformed.inc();
            }
        }
    }
}

/// Reads a new container's record and passes on the CRI's names from its
/// OCI spec annotations (counted by result; a full channel is a drop).
async fn lookup(
    channel: Channel,
    namespace: String,
    id: String,
    tx: mpsc::Sender<RuntimeEvent>,
    metrics: RuntimeStreamMetrics,
) {
    let mut request = Request::new(GetContainerRequest { id: id.clone() });
    let Ok(ns) = namespace.parse() else { return };
    request.metadata_mut().insert("containerd-namespace", ns);
    let mut client = ContainersClient::new(channel);
    let call = client.get(request);
    let result = match tokio::time::timeout(LOOKUP_TIMEOUT, call).await {
        Ok(Ok(response)) => {
            let container = response.into_inner().container.unwrap_or_default();
            let spec = container.spec.map(|any| any.value).unwrap_or_default();
            match names_from_spec(&id, &spec, &container.labels) {
                Some(snapshot) => {
                    if tx.try_send(RuntimeEvent::ContainerNamed(snapshot)).is_err() {
                        metrics.dropped.inc();
                    }
                    LookupResult::Named
                }
                None => LookupResult::Unnamed,
            }
        }
        Ok(Err(status)) if status.code() == Code::NotFound => LookupResult::Gone,
        Ok(Err(status)) => {
            log::debug!("reading container {id}: {}", status.message());
            LookupResult::Error
        }
        Err(_) => LookupResult::Error,
    };
    metrics.lookups.with_label_values(&[result.label()]).inc();
}

/// The CRI plugin writes a container's pod and names into its OCI spec's
/// annotations; `None` for a container the CRI did not make.
pub fn names_from_spec(container_id: &str, spec: &[u8], labels: &HashMap<String, String>) -> Option<Snapshot> {
    let spec: serde_json::Value = serde_json::from_slice(spec).ok()?;
    let annotations = spec.get("annotations")?.as_object()?;
    let get = |key: &str| annotations.get(key).and_then(|v| v.as_str()).filter(|v| !v.is_empty());
    let kind = get("io.kubernetes.cri.container-type")?;
    let uid = get("io.kubernetes.cri.sandbox-uid")?.to_string();
    let sandbox_id = get("io.kubernetes.cri.sandbox-id").unwrap_or(container_id).to_string();
    let name = get("io.kubernetes.cri.sandbox-name")?.to_string();
    // The sandbox's record carries the pod's labels (containers' do not).
    let workload = (kind == "sandbox").then(|| crate::runtime::workload::workload(&name, labels));
    let pod = PodMeta {
        uid: uid.clone(),
        namespace: get("io.kubernetes.cri.sandbox-namespace")?.to_string(),
        name,
        sandbox_id,
        workload,
    };
    let container = match kind {
        "sandbox" => ContainerMeta {
            id: container_id.to_string(),
            name: SANDBOX_CONTAINER_NAME.to_string(),
            pod_uid: uid,
            sandbox: true,
        },
        "container" => ContainerMeta {
            id: container_id.to_string(),
            name: get("io.kubernetes.cri.container-name")?.to_string(),
            pod_uid: uid,
            sandbox: false,
        },
        _ => return None,
    };
    Some(Snapshot { pods: vec![pod], containers: vec![container] })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_types::{Any, Timestamp};

    #[test]
    fn cri_names_come_from_the_spec_annotations() {
        let sandbox = br#"{"ociVersion":"1.1.0","annotations":{"io.kubernetes.cri.container-type":"sandbox",
            "io.kubernetes.cri.sandbox-id":"s1","io.kubernetes.cri.sandbox-name":"web","io.kubernetes.cri.sandbox-namespace":"shop",
            "io.kubernetes.cri.sandbox-uid":"u1"}}"#;
        // The sandbox's record carries the pod's labels: a Deployment's pod.
        let labels: HashMap<String, String> =
            [("pod-template-hash", "5f7c9d8b6"), ("io.cri-containerd.kind", "sandbox")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into();
        let got = names_from_spec("s1", sandbox, &labels).expect("sandbox names");
        assert_eq!((got.pods[0].uid.as_str(), got.pods[0].name.as_str()), ("u1", "web"));
        assert_eq!(
            got.pods[0].workload,
            Some(crate::events::runtime::Workload {
                kind: crate::events::runtime::WorkloadKind::Pod,
                name: "web".into()
            }),
            "web is no Deployment's pod name: its own workload"
        );
        assert_eq!(
            got.containers[0],
            ContainerMeta { id: "s1".into(), name: "POD".into(), pod_uid: "u1".into(), sandbox: true }
        );
        let container = br#"{"annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.container-name":"app",
            "io.kubernetes.cri.sandbox-id":"s1","io.kubernetes.cri.sandbox-name":"web","io.kubernetes.cri.sandbox-namespace":"shop",
            "io.kubernetes.cri.sandbox-uid":"u1"}}"#;
        let got = names_from_spec("c1", container, &HashMap::new()).expect("container names");
        assert_eq!(got.pods[0].sandbox_id, "s1");
        assert_eq!((got.containers[0].name.as_str(), got.containers[0].sandbox), ("app", false));
        // Not the CRI's, or not JSON: nothing.
        assert_eq!(names_from_spec("x", br#"{"annotations":{}}"#, &HashMap::new()), None);
        assert_eq!(names_from_spec("x", br#"{"process":{}}"#, &HashMap::new()), None);
        assert_eq!(names_from_spec("x", b"\xff\x00garbage", &HashMap::new()), None);
        let no_uid =
            br#"{"annotations":{"io.kubernetes.cri.container-type":"sandbox","io.kubernetes.cri.sandbox-name":"web"}}"#;
        assert_eq!(names_from_spec("x", no_uid, &HashMap::new()), None);
    }

    fn envelope(topic: &str, payload: Vec<u8>) -> Envelope {
        Envelope {
            timestamp: Some(Timestamp { seconds: 1_700_000_000, nanos: 5 }),
            namespace: "k8s.io".into(),
            topic: topic.into(),
            // As containerd sends it: no leading '/'.
            event: Some(Any { type_url: "containerd.events.TaskExit".into(), value: payload }),
        }
    }

    #[test]
    fn task_exit_and_oom_decode() {
        let exit = TaskExit { container_id: "c".into(), id: "c".into(), pid: 42, exit_status: 137, exited_at: None };
        let ev = decode(&envelope("/tasks/exit", exit.encode_to_vec())).unwrap();
        assert_eq!(
            ev,
            Some(RuntimeEvent::TaskExit {
                container_id: "c".into(),
                exec_id: "c".into(),
                pid: 42,
                exit_status: 137,
                published_ns: 1_700_000_000_000_000_005
            })
        );
        let create = TaskCreate { container_id: "e".into(), pid: 7, ..TaskCreate::default() };
        assert!(matches!(
            decode(&envelope("/tasks/create", create.encode_to_vec())).unwrap(),
            Some(RuntimeEvent::TaskCreate { container_id, pid: 7, .. }) if container_id == "e"
        ));
        let oom = TaskOom { container_id: "d".into() };
        assert!(matches!(
            decode(&envelope("/tasks/oom", oom.encode_to_vec())).unwrap(),
            Some(RuntimeEvent::TaskOom { container_id, .. }) if container_id == "d"
        ));
    }

    #[test]
    fn other_topics_are_skipped_and_garbage_is_an_error() {
        assert_eq!(decode(&envelope("/images/create", vec![1, 2, 3])).unwrap(), None);
        assert_eq!(decode(&envelope("/tasks/exit", vec![0xff, 0xff, 0xff])), Err(EnvelopeError::BadPayload));
        let mut env = envelope("/tasks/oom", Vec::new());
        env.event = None;
        assert_eq!(decode(&env), Err(EnvelopeError::NoPayload));
    }
}
