//! Kubelet cgroup paths → pod identity, for both cgroup drivers, on v1 and
//! v2, under any prefix (nested runtimes, kind, a test's own cgroup).
//!
//! cgroupfs: `…/kubepods[/burstable|/besteffort]/pod<uid>[/<container-id>]`
//! systemd:  `…/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid>.slice[/<runtime>-<id>.scope]`
//! Deeper cgroups inside a container's belong to that container.

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
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let top = parts.iter().position(|p| *p == "kubepods" || *p == "kubepods.slice")?;
    let rest = &parts[top + 1..];
    if parts[top] == "kubepods" {
        parse_cgroupfs(rest)
    } else {
        parse_systemd(rest)
    }
}

fn parse_cgroupfs(rest: &[&str]) -> Option<PodCgroup> {
    let (qos, rest) = match rest.first().and_then(|w| QosClass::from_word(w)) {
        Some(q) => (q, &rest[1..]),
        None => (QosClass::Guaranteed, rest),
    };
    let pod_uid = canonical_uid(rest.first()?.strip_prefix("pod")?)?;
    let container_id = match rest.get(1) {
        Some(c) => Some(container_id(c)?),
        None => None,
    };
    Some(PodCgroup { qos, pod_uid, container_id })
}

fn parse_systemd(rest: &[&str]) -> Option<PodCgroup> {
    let first = rest.first()?.strip_suffix(".slice")?.strip_prefix("kubepods-")?;
    let (qos, pod_slice, rest) = match QosClass::from_word(first) {
        Some(q) => {
            let pod = rest.get(1)?.strip_suffix(".slice")?;
            let pod = pod.strip_prefix("kubepods-")?.strip_prefix(first)?.strip_prefix('-')?;
            (q, pod, &rest[2..])
        }
        None => (QosClass::Guaranteed, first, &rest[1..]),
    };
    let pod_uid = canonical_uid(pod_slice.strip_prefix("pod")?)?;
    let container_id = match rest.first() {
        Some(scope) => {
            let name = scope.strip_suffix(".scope")?;
            let id = RUNTIME_PREFIXES.iter().find_map(|p| name.strip_prefix(p))?;
            Some(container_id(id)?)
        }
        None => None,
    };
    Some(PodCgroup { qos, pod_uid, container_id })
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
