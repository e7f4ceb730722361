//! Kubelet cgroup paths → pod identity, for both cgroup drivers, on v1 and
//! v2, under any prefix (nested runtimes, kind, a test's own cgroup).
//!
//! cgroupfs: `…/kubepods[/burstable|/besteffort]/pod<uid>[/<container-id>]`
//! systemd:  `…/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid>.slice[/<runtime>-<id>.scope]`
//! Deeper cgroups inside a container's belong to that container: they are
//! a tenant's own business, never a pod or a container of their own.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "lowercase")]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    fn from_word(word: &str) -> Option<Self> {
        match word {
            "burstable" => Some(QosClass::Burstable),
            "besteffort" => Some(QosClass::BestEffort),
            _ => None,
        }
    }
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(crate::labels::Label::label(*self))
    }
}

/// What a cgroup path says about a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCgroup {
    pub qos: QosClass,
    /// Canonical form: lower-case, dashed (`_` in systemd names becomes `-`).
    pub pod_uid: String,
    /// `None` for the pod-level cgroup itself.
    pub container_id: Option<String>,
}

/// Container runtimes' scope prefixes under the systemd driver.
const RUNTIME_PREFIXES: [&str; 4] = ["cri-containerd-", "crio-", "docker-", "cri-o-"];

/// Parses a cgroup path; `None` means "not a pod".
pub fn parse(path: &str) -> Option<PodCgroup> {
    parse_counted(path).map(|(pod, _)| pod)
}

/// The part of `path` that is the kubelet's and the runtime's: the pod's
/// or the container's own cgroup, without what is nested below a
/// container's (its own business: it belongs to the container). `None`
/// for a path that is no pod's.
pub fn owner_path(path: &str) -> Option<&str> {
    let (_, owned) = parse_counted(path)?;
    // The end of the `owned`-th non-empty component.
    let (end, _) = path
        .split('/')
        .scan(0, |at, part| {
            let end = *at + part.len();
            *at = end + 1;
            Some((end, part))
        })
        .filter(|(_, part)| !part.is_empty())
        .nth(owned.checked_sub(1)?)?;
    Some(&path[..end])
}

/// Whether `path` is a cgroup nested below a container's.
pub fn nested(path: &str) -> bool {
    owner_path(path).is_some_and(|owned| owned.len() < path.trim_end_matches('/').len())
}

/// The pod and how many components of the path (from its first) are the
/// pod's or container's own.
fn parse_counted(path: &str) -> Option<(PodCgroup, usize)> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let top = parts.iter().position(|p| *p == "kubepods" || *p == "kubepods.slice")?;
    let rest = &parts[top + 1..];
    let (pod, used) = if parts[top] == "kubepods" { parse_cgroupfs(rest) } else { parse_systemd(rest) }?;
    Some((pod, top + 1 + used))
}

fn parse_cgroupfs(rest: &[&str]) -> Option<(PodCgroup, usize)> {
    let (qos, skip) = match rest.first().and_then(|w| QosClass::from_word(w)) {
        Some(q) => (q, 1),
        None => (QosClass::Guaranteed, 0),
    };
    let rest = &rest[skip..];
    let pod_uid = canonical_uid(rest.first()?.strip_prefix("pod")?)?;
    let container_id = match rest.get(1) {
        Some(c) => Some(container_id(c)?),
        None => None,
    };
    let used = skip + 1 + usize::from(container_id.is_some());
    Some((PodCgroup { qos, pod_uid, container_id }, used))
}

fn parse_systemd(rest: &[&str]) -> Option<(PodCgroup, usize)> {
    let first = rest.first()?.strip_suffix(".slice")?.strip_prefix("kubepods-")?;
    let (qos, pod_slice, skip) = match QosClass::from_word(first) {
        Some(q) => {
            let pod = rest.get(1)?.strip_suffix(".slice")?;
            let pod = pod.strip_prefix("kubepods-")?.strip_prefix(first)?.strip_prefix('-')?;
            (q, pod, 2)
        }
        None => (QosClass::Guaranteed, first, 1),
    };
    let rest = &rest[skip..];
    let pod_uid = canonical_uid(pod_slice.strip_prefix("pod")?)?;
    let container_id = match rest.first() {
        Some(scope) => {
            let name = scope.strip_suffix(".scope")?;
            let id = RUNTIME_PREFIXES.iter().find_map(|p| name.strip_prefix(p))?;
            Some(container_id(id)?)
        }
        None => None,
    };
    let used = skip + usize::from(container_id.is_some());
    Some((PodCgroup { qos, pod_uid, container_id }, used))
}

/// A pod UID: 32 hex digits, dashed (8-4-4-4-12) or not (static pods use a
/// hash). `_` counts as `-`.
fn canonical_uid(raw: &str) -> Option<String> {
    let uid: String = raw.chars().map(|c| if c == '_' { '-' } else { c.to_ascii_lowercase() }).collect();
    let hex = uid.chars().filter(char::is_ascii_hexdigit).count();
    let dashes: Vec<usize> = uid.match_indices('-').map(|(i, _)| i).collect();
    let dashed_ok = uid.len() == 36 && dashes == [8, 13, 18, 23];
    let plain_ok = uid.len() == 32 && dashes.is_empty();
    (hex == 32 && (dashed_ok || plain_ok)).then_some(uid)
}

/// A container id: hex digits (runtimes use 64; accept 12 and up).
fn container_id(raw: &str) -> Option<String> {
    let ok = raw.len() >= 12 && raw.len() <= 128 && raw.chars().all(|c| c.is_ascii_hexdigit());
    ok.then(|| raw.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const UID: &str = "7e3c1f2a-0b4d-4c5e-9f60-1a2b3c4d5e6f";
    const UID_: &str = "7e3c1f2a_0b4d_4c5e_9f60_1a2b3c4d5e6f";
    const CID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn pod(qos: QosClass, container: Option<&str>) -> Option<PodCgroup> {
        Some(PodCgroup { qos, pod_uid: UID.to_string(), container_id: container.map(str::to_string) })
    }

    #[test]
    fn cgroupfs_layouts() {
        use QosClass::*;
        assert_eq!(parse(&format!("/kubepods/pod{UID}/{CID}")), pod(Guaranteed, Some(CID)));
        assert_eq!(parse(&format!("/kubepods/burstable/pod{UID}/{CID}")), pod(Burstable, Some(CID)));
        assert_eq!(parse(&format!("/kubepods/besteffort/pod{UID}/{CID}")), pod(BestEffort, Some(CID)));
        assert_eq!(parse(&format!("/kubepods/burstable/pod{UID}")), pod(Burstable, None));
        assert_eq!(parse(&format!("/kubepods/pod{UID}")), pod(Guaranteed, None));
    }

    #[test]
    fn systemd_layouts_with_every_runtime() {
        use QosClass::*;
        for rt in ["cri-containerd", "crio", "docker"] {
            assert_eq!(
                parse(&format!("/kubepods.slice/kubepods-pod{UID_}.slice/{rt}-{CID}.scope")),
                pod(Guaranteed, Some(CID))
            );
            assert_eq!(
                parse(&format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/{rt}-{CID}.scope"
                )),
                pod(Burstable, Some(CID))
            );
            assert_eq!(
                parse(&format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/{rt}-{CID}.scope"
                )),
                pod(BestEffort, Some(CID))
            );
        }
        assert_eq!(
            parse(&format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice")),
            pod(Burstable, None)
        );
    }

    #[test]
    fn any_prefix_and_deeper_cgroups() {
        let p = format!("/process_api/abc/sandwatch-test-1/kubepods/burstable/pod{UID}/{CID}/init.scope");
        assert_eq!(parse(&p), pod(QosClass::Burstable, Some(CID)));
        let kind = format!(
            "/kubelet.slice/kubelet-kubepods.slice/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope"
        );
        assert_eq!(parse(&kind), pod(QosClass::Guaranteed, Some(CID)));
    }

    #[test]
    fn what_a_container_nests_below_its_own_cgroup_is_its_own() {
        let container = format!("/x/kubepods/burstable/pod{UID}/{CID}");
        assert_eq!(owner_path(&container), Some(container.as_str()));
        assert!(!nested(&container));
        // A tenant's cgroups below its container, however named (even
        // like a pod of its own): the container's.
        for below in ["/init.scope", "/a/b/c", &format!("/kubepods/pod{UID}/{CID}"), "/x/"] {
            let path = format!("{container}{below}");
            assert_eq!(owner_path(&path), Some(container.as_str()), "{path}");
            assert!(nested(&path), "{path}");
            assert_eq!(parse(&path), parse(&container));
        }
        let pod = format!("/kubepods.slice/kubepods-pod{UID_}.slice");
        let scope = format!("{pod}/cri-containerd-{CID}.scope");
        assert_eq!(owner_path(&pod), Some(pod.as_str()));
        assert_eq!(owner_path(&format!("{scope}/sub/deeper")), Some(scope.as_str()));
        assert!(!nested(&scope) && !nested(&format!("{scope}/")) && nested(&format!("{scope}//sub")));
        assert_eq!(owner_path("/system.slice/x"), None);
        assert!(!nested("/system.slice/x"));
    }

    #[test]
    fn static_pod_uid_without_dashes() {
        let hash = "6a1b2c3d4e5f60718293a4b5c6d7e8f9";
        let p = parse(&format!("/kubepods/burstable/pod{hash}/{CID}")).unwrap();
        assert_eq!(p.pod_uid, hash);
    }

    #[test]
    fn not_pods() {
        for p in [
            "/",
            "",
            "/system.slice/containerd.service",
            "/kubepods",
            "/kubepods/burstable",
            "/kubepods.slice/kubepods-burstable.slice",
            "/kubepods/burstable/podnot-a-uid/abc",
            &format!("/kubepods/burstable/pod{UID}/not-hex!"),
            &format!("/kubepods.slice/kubepods-pod{UID_}.slice/runc-{CID}.scope"),
            &format!("/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-pod{UID_}.slice"),
            "/user.slice/user-1000.slice/kubepods",
        ] {
            assert_eq!(parse(p), None, "{p:?}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_paths_never_panic(path in "[/a-z0-9_.-]{0,200}") {
            let _ = parse(&path);
            if let Some(owned) = owner_path(&path) {
                prop_assert!(path.starts_with(owned));
                prop_assert_eq!(parse(owned), parse(&path));
            }
        }

        #[test]
        fn arbitrary_unicode_never_panics(path in "\\PC{0,100}") {
            let _ = parse(&path);
        }

        #[test]
        fn kubelet_shaped_paths_round_trip(prefix in "(/[a-z0-9]{1,8}){0,3}", uid in "[0-9a-f]{32}", cid in "[0-9a-f]{64}",
                                            qos in 0..3usize, systemd in any::<bool>()) {
            let dashed = format!("{}-{}-{}-{}-{}", &uid[..8], &uid[8..12], &uid[12..16], &uid[16..20], &uid[20..]);
            let q = [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort][qos];
            let path = match (systemd, q) {
                (false, QosClass::Guaranteed) => format!("{prefix}/kubepods/pod{dashed}/{cid}"),
                (false, _) => format!("{prefix}/kubepods/{q}/pod{dashed}/{cid}"),
                (true, QosClass::Guaranteed) => format!("{prefix}/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{cid}.scope", dashed.replace('-', "_")),
                (true, _) => format!("{prefix}/kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{}.slice/crio-{cid}.scope", dashed.replace('-', "_")),
            };
            let parsed = parse(&path).unwrap();
            prop_assert_eq!(parsed.qos, q);
            prop_assert_eq!(parsed.pod_uid, dashed);
            prop_assert_eq!(parsed.container_id, Some(cid));
        }
    }
}
