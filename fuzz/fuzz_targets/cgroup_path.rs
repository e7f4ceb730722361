//! Any cgroup path: parsing never panics, and a pod it names has a
//! canonical UID and a hex container id.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandwatch::model::cgroup_path::parse;

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else { return };
    if let Some(pod) = parse(path) {
        assert!(pod.pod_uid.len() == 32 || pod.pod_uid.len() == 36, "{pod:?}");
        assert!(!pod.pod_uid.contains('_'), "{pod:?}");
        if let Some(id) = &pod.container_id {
            assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{pod:?}");
        }
    }
});
