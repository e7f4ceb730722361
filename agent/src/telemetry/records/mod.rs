//! Event records beside the counters: every OOM kill, sandbox death,
//! container exit, late exit, runtime crash or restart, OOM storm edge and
//! second with lost events becomes one record, for people watching a node
//! (`GET /events`, `sandwatch events`). By role: [`kinds`] (each kind's
//! fields, declared once), [`wire`] (the types a client reads), [`mapping`]
//! (a finding's record), [`hub`] (history and subscribers).
pub mod hub;
pub mod kinds;
pub mod mapping;
pub mod wire;

pub use hub::{Filter, RecordHub, RecordSettings, Refused, Subscription};
pub use mapping::{record_of, Stamp};
pub use wire::{Body, Incoming, Kind, Record};

/// The settings of a hub in unit tests: `node`, `max_subscribers`, the
/// default history.
#[cfg(test)]
pub fn tests_settings(node: &str, max_subscribers: usize) -> RecordSettings {
    RecordSettings { node: node.to_string(), max_subscribers, history: hub::HISTORY }
}
