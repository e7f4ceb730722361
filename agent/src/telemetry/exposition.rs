//! The Prometheus text exposition: a registry's families, and families
//! kept as text between scrapes, as one body.

use std::sync::Arc;

use prometheus::Registry;

/// Renders the registry in the Prometheus text format.
pub fn render(registry: &Registry) -> Result<String, prometheus::Error> {
    render_with(registry, &[])
}

/// Renders the registry, then families kept as text between scrapes
/// (each a whole family, none also in the registry).
pub fn render_with(registry: &Registry, kept: &[Arc<str>]) -> Result<String, prometheus::Error> {
    use prometheus::Encoder as _;
    let mut out = Vec::with_capacity(16 * 1024 + kept.iter().map(|t| t.len()).sum::<usize>());
    prometheus::TextEncoder::new().encode(&registry.gather(), &mut out)?;
    for text in kept {
        out.extend_from_slice(text.as_bytes());
    }
    String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
}
