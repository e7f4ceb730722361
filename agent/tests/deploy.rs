//! What ships beside the agent: Kubernetes manifests, alert rules and their
//! runbooks, and the Grafana dashboard — each checked with the real tool
//! that will consume it. (Every PromQL expression is also evaluated against
//! a live Prometheus in `tests/prometheus.rs`.)

use std::{path::PathBuf, process::Command};

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e} (run `cargo xtask setup`)"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn manifests_validate_strictly_against_kubernetes_schemas() {
    let files = [
        "namespace.yaml",
        "daemonset.yaml",
        "service.yaml",
        "networkpolicy.yaml",
        "servicemonitor.yaml",
        "prometheusrule.yaml",
        "tls/certificates.yaml",
        "tls/servicemonitor.yaml",
    ];
    let out = run(Command::new("python3")
        .args(["-m", "kubernetes_validate", "--strict"])
        .args(files.map(|f| repo(&format!("deploy/kubernetes/{f}")))));
    for resource in [
        "namespace/sandwatch",
        "serviceaccount/sandwatch",
        "daemonset/sandwatch",
        "service/sandwatch",
        "networkpolicy/sandwatch-metrics",
    ] {
        assert!(out.contains(&format!("passed for resource {resource} ")), "{resource} not validated:\n{out}");
    }
    // Only the Prometheus Operator's and cert-manager's kinds lack an
    // offline schema; their content is checked below (rules by promtool,
    // equality with rules.yml) and in the TLS test.
    for line in out.lines().filter(|l| l.starts_with("WARN")) {
        assert!(
            ["PrometheusRule", "ServiceMonitor", "Certificate", "Issuer"]
                .iter()
                .any(|k| line.contains(&format!("kind {k} "))),
            "unexpected warning: {line}"
        );
    }
}

/// The TLS patch turns the DaemonSet into a valid one that runs with TLS
/// and client certificates from cert-manager's secret, probing over HTTPS.
#[test]
fn the_tls_patch_makes_a_valid_daemonset_with_tls_on() {
    let manifest = read("deploy/kubernetes/daemonset.yaml");
    let daemonset = manifest.split("\n---\n").find(|d| d.contains("\nkind: DaemonSet\n")).expect("a DaemonSet");
    let dir = std::env::temp_dir().join(format!("sandwatch-deploy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("daemonset.yaml"), daemonset).expect("write");
    let patched = run(Command::new("kubectl")
        .args(["patch", "--local", "--type", "strategic", "-o", "yaml", "-f"])
        .arg(dir.join("daemonset.yaml"))
        .arg("--patch-file")
        .arg(repo("deploy/kubernetes/tls/daemonset-patch.yaml")));
    std::fs::write(dir.join("patched.yaml"), &patched).expect("write");
    let out =
        run(Command::new("python3").args(["-m", "kubernetes_validate", "--strict"]).arg(dir.join("patched.yaml")));
    assert!(out.contains("passed for resource daemonset/sandwatch "), "{out}");
    for needle in [
        "SANDWATCH_TLS_CERT_FILE",
        "/etc/sandwatch/tls/tls.crt",
        "SANDWATCH_TLS_CLIENT_CA_FILE",
        "secretName: sandwatch-tls",
        "scheme: HTTPS",
        "SANDWATCH_LOG_LEVEL",
        "mountPath: /run/sandwatch",
    ] {
        assert!(patched.contains(needle), "{needle} not in the patched DaemonSet:\n{patched}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn alert_rules_pass_promtool_check_and_unit_tests() {
    let out = run(Command::new("promtool").args(["check", "rules"]).arg(repo("deploy/prometheus/rules.yml")));
    assert!(out.contains("SUCCESS: 17 rules found"), "{out}");
    let out = run(Command::new("promtool").args(["test", "rules"]).arg(repo("deploy/prometheus/rules.test.yml")));
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn every_alert_has_a_unit_test_and_a_runbook() {
    let rules = read("deploy/prometheus/rules.yml");
    let tests = read("deploy/prometheus/rules.test.yml");
    let runbooks = read("docs/runbooks.md");
    let alerts: Vec<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).collect();
    // One alert has a warning and a critical rule.
    assert_eq!(alerts.len(), 17);
    for alert in alerts {
        assert!(tests.contains(&format!("alertname: {alert}\n        exp_alerts:\n")), "{alert} never fires in a test");
        let anchor = format!("docs/runbooks.md#{}", alert.to_lowercase());
        assert!(rules.contains(&format!("runbook_url: \"{anchor}\"")), "{alert} lacks runbook_url {anchor}");
        assert!(runbooks.contains(&format!("\n## {alert}\n")), "docs/runbooks.md has no section {alert}");
    }
    let block = |name: &str| {
        rules.split("- alert: ").find(|b| b.starts_with(&format!("{name}\n"))).map(str::to_string).unwrap_or_default()
    };
    for alert in rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")) {
        let b = block(alert);
        for key in ["summary:", "description:", "runbook_url:"] {
            assert!(b.contains(key), "{alert} lacks {key}");
        }
    }
}

#[test]
fn prometheusrule_carries_exactly_the_rules_file() {
    let rules = read("deploy/prometheus/rules.yml");
    let expected: String = rules
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| if l.is_empty() { "\n".to_string() } else { format!("  {l}\n") })
        .collect();
    let manifest = read("deploy/kubernetes/prometheusrule.yaml");
    let spec = manifest.split_once("\nspec:\n").map(|(_, s)| s).unwrap_or_default();
    assert_eq!(
        spec, expected,
        "regenerate deploy/kubernetes/prometheusrule.yaml from rules.yml (spec = rules indented by two)"
    );
}

#[test]
fn dashboard_is_current_grafana_json_with_variables() {
    let dash: serde_json::Value = serde_json::from_str(&read("dashboards/sandwatch.json")).expect("dashboard JSON");
    assert!(dash["schemaVersion"].as_u64().is_some_and(|v| v >= 39));
    let vars: Vec<&str> =
        dash["templating"]["list"].as_array().expect("variables").iter().filter_map(|v| v["name"].as_str()).collect();
    assert_eq!(vars, ["datasource", "node", "namespace"]);
    let panels = dash["panels"].as_array().expect("panels");
    let mut queries = 0;
    for p in panels.iter().filter(|p| p["type"] != "row") {
        assert_eq!(p["datasource"]["uid"], "${datasource}", "panel {} uses the datasource variable", p["title"]);
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} has a query", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            assert!(expr.contains("$node"), "panel {} filters by node: {expr}", p["title"]);
            queries += 1;
        }
    }
    assert!(queries >= 12);
    // The panels the deployment promises.
    for title in [
        "OOM kills by victim role",
        "Top pods by OOM kills",
        "OOM storm per node",
        "Sandbox deaths by cause",
        "Late exit events",
        "Exit handling delay",
        "Events per second",
        "Dropped events by stage",
        "Tracked objects",
        "Decode errors",
        "OOM events by whose limit fired",
        "Container exits by reason",
        "Top containers by failed exits",
        "Top workloads by OOM kills",
        "Top workloads by failed exits",
        "OOM events by what filled the memory",
        "Top containers by what filled the memory",
    ] {
        assert!(panels.iter().any(|p| p["title"] == title), "no panel {title:?}");
    }
}
