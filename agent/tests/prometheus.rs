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
    let last = prom.scalar("max(timestamp(sandwatch_oom_kills_total))", None).expect("a scrape timestamp");
    let increase = prom.scalar("sum(increase(sandwatch_oom_kills_total[10m]))", Some(last));
    assert_eq!(increase, Some(4.0));
    let split = prom
        .query("sum by (victim_role) (increase(sandwatch_oom_kills_total{qos_class=\"burstable\"}[10m]))", Some(last));
    let role = |name: &str| split.iter().find(|(labels, _)| labels["victim_role"] == name).map(|(_, v)| *v);
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

const UID_TTL: &str = "9a8b7c6d-0002-4a3b-8c2d-1e0f9a8b7c6d";

/// `--pod-series-ttl`: a torn-down pod's OOM series is scraped with its last
/// increment, then removed and goes stale in Prometheus; the node-wide
/// counters keep every kill.
#[test]
fn a_torn_down_pods_series_goes_stale_after_the_ttl() {
    require_root();
    let agent = AgentProcess::start(&["--pod-series-ttl", "5s"]);
    let prom = PrometheusProcess::start(agent.addr);
    let up = prom.wait_for("sandwatch_programs_attached", Duration::from_secs(30), |v| v == 6.0);
    assert_eq!(up, Some(6.0), "Prometheus never scraped the agent: {}", prom.log());
    let kills0 = prom.scalar("sum(sandwatch_oom_kills_total)", None).expect("node-wide kills");

    let mut pod = KubePod::build("ttl", UID_TTL, false, 2);
    pod.start_init(1, &format!("{HOG}; exec sleep 1000"));
    pod.trigger(1);
    let series = format!("sum(sandwatch_pod_oom_kills_total{{pod_uid=\"{UID_TTL}\"}})");
    assert_eq!(prom.wait_for(&series, Duration::from_secs(30), |v| v == 1.0), Some(1.0), "{}", agent.metrics());
    // Torn down: the series stays for the TTL, then goes.
    drop(pod);
    let expired = prom.wait_for("sandwatch_pod_series_expired_total", Duration::from_secs(30), |v| v >= 1.0);
    assert_eq!(expired, Some(1.0), "{}", agent.metrics());
    let start = std::time::Instant::now();
    while !prom.query(&format!("sandwatch_pod_oom_kills_total{{pod_uid=\"{UID_TTL}\"}}"), None).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(30), "the series never went stale in Prometheus");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(!agent.metrics().contains(UID_TTL), "the agent no longer serves it");
    // Prometheus kept its last value, and the node-wide count every kill.
    let last =
        prom.scalar(&format!("max_over_time(sandwatch_pod_oom_kills_total{{pod_uid=\"{UID_TTL}\"}}[10m])"), None);
    assert_eq!(last, Some(1.0));
    let kills = prom.scalar("sum(sandwatch_oom_kills_total)", None).expect("node-wide kills");
    assert_eq!(kills - kills0, 1.0);
}

/// (where, expression) for each dashboard target and alert rule, with
/// Grafana's variables replaced the way Grafana would for "All".
fn shipped_queries() -> Vec<(String, String)> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{root}/dashboards/sandwatch.json")).expect("dashboard"))
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
