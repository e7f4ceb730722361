//! Any payload under any followed containerd topic (the first byte picks
//! it): an event or a typed error, never a panic; and any container spec
//! read for its CRI names: names with a pod UID, or none.
#![no_main]
use containerd_client::types::Envelope;
use libfuzzer_sys::fuzz_target;
use sandwatch::{
    events::runtime::Topic,
    runtime::containerd::{decode, names_from_spec},
};
use strum::IntoEnumIterator as _;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, payload)) = data.split_first() else { return };
    let topics: Vec<Topic> = Topic::iter().collect();
    let topic = topics[usize::from(pick) % topics.len()];
    let env = Envelope {
        timestamp: Some(prost_types::Timestamp { seconds: i64::from(pick) << 40, nanos: -1 }),
        namespace: "k8s.io".into(),
        topic: topic.path().into(),
        event: Some(prost_types::Any { type_url: String::new(), value: payload.to_vec() }),
    };
    if let Ok(Some(event)) = decode(&env) {
        assert_eq!(event.topic(), Some(topic));
    }
    if let Some(snapshot) = names_from_spec("c", payload, &std::collections::HashMap::new()) {
        assert!(snapshot.pods.iter().all(|p| !p.uid.is_empty()), "{snapshot:?}");
    }
});
