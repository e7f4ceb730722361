//! A real Prometheus scrapes the agent every second while a kubelet-shaped
//! pod goes through an OOM storm; its query API must then report exactly
//! what happened.

mod harness;

use std::time::Duration;

use harness::{require_root, AgentProcess, KubePod, PrometheusProcess};

const UID: &str = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d";
const HOG: &str = "dd if=/dev/zero of=/dev/null bs=256M count=1";

#[test]
fn prometheus_sees_an_oom_storm_exactly() {
    require_root();
    let agent = AgentProcess::start(&[
        "--oom-storm-threshold",
        "3",
        "--oom-storm-clear",
        "1",
        "--oom-window-seconds",
        "6",
        "--max-pod-series",
        "1",
    ]);
    let prom = PrometheusProcess::start(agent.addr);
    let up = prom.wait_for("sandwatch_programs_attached", Duration::from_secs(30), |v| v == 6.0);
    assert_eq!(up, Some(6.0), "Prometheus never scraped the agent: {}", prom.log());

    // The storm: three children of container A and container B's init.
    let mut pod = KubePod::build("prom", UID, false, 3);
    pod.start_init(1, &format!("{HOG}; {HOG}; {HOG}; exec sleep 1000"));
    pod.start_init(2, &format!("exec {HOG}"));
    pod.trigger(1);
    // B's kill comes after A's three, so the per-pod series cap of one
    // evicts exactly once.
    let a_kills = prom.wait_for("sum(sandwatch_oom_kills_total)", Duration::from_secs(30), |v| v >= 3.0);
    assert_eq!(a_kills, Some(3.0), "{}", agent.metrics());
    pod.trigger(2);

    let total = prom.wait_for("sum(sandwatch_oom_kills_total)", Duration::from_secs(30), |v| v >= 4.0);
    assert_eq!(total, Some(4.0), "{}", agent.metrics());

    // increase() evaluated at the newest scrape: the series start at 0, so
    // nothing is extrapolated and the answer is exact.
    let last = prom
        .scalar("max(timestamp(sandwatch_oom_kills_total))", None)
        .expect("a scrape timestamp");
    let increase = prom.scalar("sum(increase(sandwatch_oom_kills_total[10m]))", Some(last));
    assert_eq!(increase, Some(4.0));
    let split = prom.query(
        "sum by (victim_role) (increase(sandwatch_oom_kills_total{qos_class=\"burstable\"}[10m]))",
        Some(last),
    );
    let role = |name: &str| {
        split
            .iter()
            .find(|(labels, _)| labels["victim_role"] == name)
            .map(|(_, v)| *v)
    };
    assert_eq!(role("container_child"), Some(3.0), "{split:?}");
    assert_eq!(role("container_init"), Some(1.0), "{split:?}");
    assert_eq!(role("sandbox"), Some(0.0), "{split:?}");

    // The storm flag rose, and falls once the 6 s window has emptied.
    let rose = prom.wait_for("max_over_time(sandwatch_oom_storm[5m])", Duration::from_secs(10), |v| v == 1.0);
    assert_eq!(rose, Some(1.0), "sandwatch_oom_storm never reached 1");
    let fell = prom.wait_for("sandwatch_oom_storm", Duration::from_secs(30), |v| v == 0.0);
    assert_eq!(fell, Some(0.0), "sandwatch_oom_storm never went back to 0");
    // The storm ends at the clear level (1), before the window is empty.
    let emptied = prom.wait_for("sandwatch_oom_kills_window", Duration::from_secs(30), |v| v == 0.0);
    assert_eq!(emptied, Some(0.0), "the window never emptied");

    // Two pod series (A's children, B's init) against a cap of one.
    let served = agent.metrics();
    assert_eq!(
        prom.scalar("count(sandwatch_pod_oom_kills_total)", None),
        Some(1.0),
        "{:?}\n{}",
        prom.query("sandwatch_pod_oom_kills_total", None),
        served.lines().filter(|l| l.contains("pod_")).collect::<Vec<_>>().join("\n")
    );
    assert_eq!(prom.scalar("sandwatch_pod_series_evicted_total", None), Some(1.0));
    let kept = prom.query("sandwatch_pod_oom_kills_total", None);
    assert_eq!(kept.first().map(|(l, v)| (l["victim_role"].clone(), *v)), Some(("container_init".into(), 1.0)));

    // Every PromQL expression that ships — dashboard panels and alert rules
    // — parses on this Prometheus, and every panel has data to show.
    for (origin, expr) in shipped_queries() {
        let (status, body) = prom.raw_query(&expr);
        assert_eq!(status, 200, "{origin}: {expr}: {body}");
        if origin.starts_with("dashboard") {
            assert!(!prom.query(&expr, None).is_empty(), "{origin} returns no data: {expr}");
        }
    }
    drop(pod);
}

/// (where, expression) for each dashboard target and alert rule, with
/// Grafana's variables replaced the way Grafana would for "All".
fn shipped_queries() -> Vec<(String, String)> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{root}/dashboards/sandwatch.json")).expect("dashboard"),
    )
    .expect("dashboard JSON");
    let mut out = Vec::new();
    for panel in dash["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let expr = expr
                    .replace("$node", ".*")
                    .replace("$namespace", ".*")
                    .replace("$__rate_interval", "1m")
                    .replace("$__range", "10m");
                out.push((format!("dashboard panel {:?}", panel["title"]), expr));
            }
        }
    }
    let rules = std::fs::read_to_string(format!("{root}/deploy/prometheus/rules.yml")).expect("rules");
    for expr in rules.lines().filter_map(|l| l.trim().strip_prefix("expr: ")) {
        out.push(("alert rule".to_string(), expr.to_string()));
    }
    assert!(out.len() >= 20, "{out:?}");
    out
}
