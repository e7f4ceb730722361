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
    assert!(out.contains("SUCCESS: 28 rules found"), "{out}");
    let out = run(Command::new("promtool").args(["test", "rules"]).arg(repo("deploy/prometheus/rules.test.yml")));
    assert!(out.contains("SUCCESS"), "{out}");
}

/// Where the shipped runbook links point until the deployer sets theirs.
const RUNBOOK_BASE: &str = "https://sandwatch.invalid/docs/runbooks.md";

#[test]
fn every_alert_has_a_unit_test_and_a_runbook() {
    let rules = read("deploy/prometheus/rules.yml");
    let tests = read("deploy/prometheus/rules.test.yml");
    let runbooks = read("docs/runbooks.md");
    let alerts: Vec<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).collect();
    // One alert has a warning and a critical rule.
    assert_eq!(alerts.len(), 28);
    for alert in alerts {
        assert!(tests.contains(&format!("alertname: {alert}\n        exp_alerts:\n")), "{alert} never fires in a test");
        let url = format!("{RUNBOOK_BASE}#{}", alert.to_lowercase());
        assert!(rules.contains(&format!("runbook_url: \"{url}\"")), "{alert} lacks the absolute runbook_url {url}");
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

/// The rules as a multi-tenant cluster needs them: a tenant's alert is
/// routable to its team (namespace in its labels) and never a page; a
/// page only where a node is at stake; a `for:` on everything that is not
/// an event which already happened to a node.
#[test]
fn alerts_are_tiered_for_a_shared_cluster() {
    let rules: serde_json::Value = yaml_serde::from_str(&read("deploy/prometheus/rules.yml")).expect("rules YAML");
    let groups = rules["groups"].as_array().expect("groups");
    let names: Vec<&str> = groups.iter().filter_map(|g| g["name"].as_str()).collect();
    assert_eq!(names, ["sandwatch-tenant", "sandwatch-node"]);
    let critical_at_once =
        ["SandwatchNodeOOMKill", "SandwatchContainerRuntimeCrashed", "SandwatchRuntimeExposedToSandboxExitCrash"];
    let mut criticals = Vec::new();
    for group in groups {
        for rule in group["rules"].as_array().expect("rules") {
            let alert = rule["alert"].as_str().expect("alert");
            let severity = rule["labels"]["severity"].as_str().expect("severity");
            let expr = rule["expr"].as_str().expect("expr");
            let for_ = rule["for"].as_str();
            if group["name"] == "sandwatch-tenant" {
                assert!(matches!(severity, "warning" | "info"), "{alert}: a tenant's alert pages no one ({severity})");
                assert!(for_.is_some(), "{alert}: a tenant's alert waits");
                assert!(
                    expr.contains("by (node, namespace,") || expr.contains("by (namespace,"),
                    "{alert} is routable by namespace: {expr}"
                );
                assert!(!expr.contains("container_id"), "{alert} groups by a per-restart id: {expr}");
            } else if severity == "critical" {
                criticals.push(alert);
                assert!(
                    for_.is_some() || critical_at_once.contains(&alert),
                    "{alert}: critical at once only for an event"
                );
            } else {
                assert!(matches!(severity, "warning" | "info"), "{alert}: {severity}");
                assert!(for_.is_some(), "{alert} has no for:");
            }
        }
    }
    criticals.sort_unstable();
    assert_eq!(
        criticals,
        [
            "SandwatchContainerRuntimeCrashed",
            "SandwatchContainerRuntimeDown",
            "SandwatchNodeOOMKill",
            "SandwatchRuntimeExposedToSandboxExitCrash"
        ]
    );
}

/// The documented sed sets the runbook links' base in the rules, their
/// PrometheusRule and their unit tests at once, and the tests still pass.
#[test]
fn the_runbook_base_is_set_by_the_documented_sed() {
    let doc = read("docs/operating.md");
    let sed = doc
        .lines()
        .find(|l| l.starts_with(&format!("sed -i 's|{RUNBOOK_BASE}|")))
        .expect("the sed line in operating.md");
    let base = "https://wiki.example.org/ops/sandwatch-runbooks.html";
    let sed = sed.replace("https://git.example.com/platform/sandwatch/blob/main/docs/runbooks.md", base);
    let dir = std::env::temp_dir().join(format!("sandwatch-runbook-base-{}", std::process::id()));
    let files =
        ["deploy/prometheus/rules.yml", "deploy/prometheus/rules.test.yml", "deploy/kubernetes/prometheusrule.yaml"];
    for f in files {
        let to = dir.join(f);
        std::fs::create_dir_all(to.parent().expect("parent")).expect("dir");
        std::fs::copy(repo(f), &to).expect("copy");
    }
    run(Command::new("sh").arg("-c").arg(&sed).current_dir(&dir));
    for f in files {
        let text = std::fs::read_to_string(dir.join(f)).expect("read");
        let urls: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("runbook_url: ")).collect();
        assert!(urls.len() >= 23, "{f}: {}", urls.len());
        assert!(urls.iter().all(|u| u.starts_with(&format!("\"{base}#"))), "{f}: {urls:?}");
    }
    let out = run(Command::new("promtool").args(["test", "rules"]).arg(dir.join("deploy/prometheus/rules.test.yml")));
    assert!(out.contains("SUCCESS"), "{out}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A matcher of an inhibition: `name="value"` or `name=~"a|b"`.
fn matcher(m: &str) -> (String, Vec<String>) {
    let (name, value) = m.split_once('=').unwrap_or_else(|| panic!("{m}: no ="));
    let value = value.trim_start_matches('~').trim_matches('"');
    (name.to_string(), value.split('|').map(str::to_string).collect())
}

/// The labels each alert carries when it fires, as promtool saw them in
/// rules.test.yml (alert name → label sets).
fn fired_labels() -> std::collections::HashMap<String, Vec<serde_json::Map<String, serde_json::Value>>> {
    let tests: serde_json::Value = yaml_serde::from_str(&read("deploy/prometheus/rules.test.yml")).expect("tests YAML");
    let mut fired: std::collections::HashMap<String, Vec<_>> = Default::default();
    for test in tests["tests"].as_array().expect("tests") {
        for case in test["alert_rule_test"].as_array().into_iter().flatten() {
            let alert = case["alertname"].as_str().expect("alertname").to_string();
            for exp in case["exp_alerts"].as_array().into_iter().flatten() {
                let mut labels = exp["exp_labels"].as_object().cloned().expect("exp_labels");
                labels.insert("alertname".into(), alert.clone().into());
                fired.entry(alert.clone()).or_default().push(labels);
            }
        }
    }
    fired
}

/// kubernetes-mixin's alerts (kube-prometheus-stack's default rules) that
/// the inhibitions name, labelled as its rules fire them: the labels of
/// their expressions' results, and their severity.
fn mixin_alerts() -> std::collections::HashMap<String, Vec<serde_json::Map<String, serde_json::Value>>> {
    let labels = |name: &str, pairs: &[(&str, &str)]| {
        let mut m = serde_json::Map::new();
        m.insert("alertname".into(), name.into());
        for (k, v) in pairs {
            m.insert((*k).into(), (*v).into());
        }
        (name.to_string(), vec![m])
    };
    [
        // max_over_time(kube_pod_container_status_waiting_reason{reason="CrashLoopBackOff"}[5m]) >= 1
        labels(
            "KubePodCrashLooping",
            &[
                ("severity", "warning"),
                ("namespace", "shop"),
                ("pod", "web-1"),
                ("container", "app"),
                ("uid", "p1"),
                ("reason", "CrashLoopBackOff"),
                ("job", "kube-state-metrics"),
            ],
        ),
        // count by (cluster, job, namespace, service) (up == 0) / count … > 10
        labels(
            "TargetDown",
            &[("severity", "warning"), ("job", "sandwatch"), ("namespace", "sandwatch"), ("service", "sandwatch")],
        ),
        // kube_node_status_condition{condition="Ready",status="true"} == 0
        labels(
            "KubeNodeNotReady",
            &[("severity", "warning"), ("node", "n1"), ("condition", "Ready"), ("status", "true")],
        ),
    ]
    .into_iter()
    .collect()
}

/// Each inhibition of deploy/alertmanager/inhibit-rules.yml, in a real
/// Alertmanager, with its source and target alerts labelled as the rules
/// fire them (promtool's view, in rules.test.yml): the target is held back
/// while its source fires, on the same node or pod; the same target
/// elsewhere is not. And every label it compares is one both alerts carry.
#[test]
fn inhibitions_hold_back_only_what_their_cause_explains() {
    let snippet = read("deploy/alertmanager/inhibit-rules.yml");
    let inhibit: serde_json::Value = yaml_serde::from_str(&snippet).expect("inhibit YAML");
    let mut fired = fired_labels();
    for (name, alerts) in mixin_alerts() {
        assert!(!fired.contains_key(&name), "{name} is kubernetes-mixin's");
        fired.insert(name, alerts);
    }
    let dir = std::env::temp_dir().join(format!("sandwatch-alertmanager-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("data")).expect("dir");
    let config = format!("route:\n  receiver: \"null\"\nreceivers:\n  - name: \"null\"\n{snippet}");
    std::fs::write(dir.join("alertmanager.yml"), &config).expect("config");
    let out = run(Command::new("amtool").args(["check-config"]).arg(dir.join("alertmanager.yml")));
    assert!(out.contains("SUCCESS") && out.contains("12 inhibit rules"), "{out}");

    // Pairs: (source labels, target labels held back, target labels elsewhere).
    let mut pairs = Vec::new();
    for rule in inhibit["inhibit_rules"].as_array().expect("inhibit_rules") {
        let matchers = |key: &str| -> Vec<(String, Vec<String>)> {
            rule[key].as_array().expect(key).iter().map(|m| matcher(m.as_str().expect("matcher"))).collect()
        };
        let (sources, targets) = (matchers("source_matchers"), matchers("target_matchers"));
        let equal: Vec<&str> = rule["equal"].as_array().expect("equal").iter().filter_map(|e| e.as_str()).collect();
        let find = |ms: &[(String, Vec<String>)], name: &str| {
            let alert = fired.get(name).unwrap_or_else(|| panic!("{name} never fires in rules.test.yml"));
            alert
                .iter()
                .find(|labels| {
                    ms.iter().all(|(k, vs)| vs.iter().any(|v| labels.get(k).and_then(|l| l.as_str()) == Some(v)))
                })
                .cloned()
                .unwrap_or_else(|| panic!("no {name} in rules.test.yml matches {ms:?}"))
        };
        let alertnames = |ms: &[(String, Vec<String>)]| {
            ms.iter().find(|(k, _)| k == "alertname").map(|(_, v)| v.clone()).expect("alertname")
        };
        for source_name in alertnames(&sources) {
            for target_name in alertnames(&targets) {
                let (mut source, mut target) = (find(&sources, &source_name), find(&targets, &target_name));
                // Values of the pair's own (node, pod…), so that pairs
                // sharing the Alertmanager never meet.
                let pair = pairs.len();
                for label in &equal {
                    let value = source.get(*label).and_then(|v| v.as_str()).map(str::to_string);
                    let value = value.unwrap_or_else(|| panic!("{source_name} has no {label} to compare"));
                    assert!(
                        target.contains_key(*label),
                        "{target_name} has no {label} to compare with {source_name}'s"
                    );
                    for alert in [&mut source, &mut target] {
                        alert.insert(label.to_string(), format!("{value}-{pair}").into());
                    }
                }
                let mut elsewhere = target.clone();
                elsewhere.insert(equal[0].to_string(), format!("elsewhere-{pair}").into());
                pairs.push((source, target, elsewhere));
            }
        }
    }
    assert!(pairs.len() >= 12, "{}", pairs.len());

    let port = test_support::free_port().expect("port");
    let mut am = Command::new("prometheus-alertmanager")
        .arg(format!("--config.file={}", dir.join("alertmanager.yml").display()))
        .arg(format!("--storage.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--cluster.listen-address=")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("alertmanager.log")).expect("log"))
        .spawn()
        .expect("prometheus-alertmanager (Debian package prometheus-alertmanager, installed by cargo xtask setup)");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let start = std::time::Instant::now();
    while !matches!(test_support::http::get(addr, "/-/ready"), Some((200, _))) {
        assert!(start.elapsed() < std::time::Duration::from_secs(20), "alertmanager not ready");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Each pair apart from the others: an `instance` of its own.
    let mut alerts = Vec::new();
    for (i, (source, target, elsewhere)) in pairs.iter().enumerate() {
        for (role, labels) in [("source", source), ("target", target), ("elsewhere", elsewhere)] {
            let mut labels = labels.clone();
            labels.insert("test_pair".into(), format!("{i}-{role}").into());
            alerts.push(serde_json::json!({"labels": labels, "annotations": {}}));
        }
    }
    let body = dir.join("alerts.json");
    std::fs::write(&body, serde_json::to_string(&alerts).expect("json")).expect("alerts");
    run(Command::new("curl")
        .args(["-sf", "-XPOST", "-H", "Content-Type: application/json", "--data-binary"])
        .arg(format!("@{}", body.display()))
        .arg(format!("http://{addr}/api/v2/alerts")));
    let held = |role: &str, i: usize, got: &serde_json::Value| {
        got.as_array()
            .into_iter()
            .flatten()
            .find(|a| a["labels"]["test_pair"] == format!("{i}-{role}"))
            .map(|a| a["status"]["inhibitedBy"].as_array().is_some_and(|by| !by.is_empty()))
    };
    let start = std::time::Instant::now();
    let got = loop {
        let (status, text) = test_support::http::get(addr, "/api/v2/alerts").expect("GET alerts");
        assert_eq!(status, 200, "{text}");
        let got: serde_json::Value = serde_json::from_str(&text).expect("alerts JSON");
        if (0..pairs.len()).all(|i| held("target", i, &got) == Some(true)) || start.elapsed().as_secs() > 10 {
            break got;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let _ = am.kill();
    let _ = am.wait();
    for (i, (source, target, _)) in pairs.iter().enumerate() {
        assert_eq!(held("source", i, &got), Some(false), "{source:?} is held back by nothing");
        assert_eq!(held("target", i, &got), Some(true), "{target:?} is held back while {source:?} fires");
        assert_eq!(held("elsewhere", i, &got), Some(false), "the same alert elsewhere is not held back by {source:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// What a deployer applies as it is: the DaemonSet runs only where its
/// image can (linux, the one architecture it is built for), kube-prometheus-
/// stack picks up its ServiceMonitor and rules, and the documented
/// `kubectl exec` reaches the agent of a named node by the DaemonSet's own
/// namespace and pod label.
#[test]
fn the_manifests_run_where_the_image_can_and_are_found_by_the_operator() {
    let manifest = read("deploy/kubernetes/daemonset.yaml");
    let docs: Vec<serde_json::Value> =
        manifest.split("\n---\n").map(|d| yaml_serde::from_str(d).expect("manifest YAML")).collect();
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet");
    let selector = &ds["spec"]["template"]["spec"]["nodeSelector"];
    assert_eq!(selector["kubernetes.io/os"], "linux");
    let image = read("xtask/src/image.rs");
    let arch = selector["kubernetes.io/arch"].as_str().expect("an arch selector");
    assert!(image.contains(&format!("\"architecture\": \"{arch}\"")), "the image is built for {arch}");
    for f in ["servicemonitor.yaml", "prometheusrule.yaml", "tls/servicemonitor.yaml"] {
        let doc: serde_json::Value = yaml_serde::from_str(&read(&format!("deploy/kubernetes/{f}"))).expect("YAML");
        assert_eq!(doc["metadata"]["labels"]["release"], "kube-prometheus-stack", "{f}");
    }
    let label = ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"].as_str().expect("pod label");
    let namespace = ds["metadata"]["namespace"].as_str().expect("namespace");
    let one_liner = format!(
        "kubectl exec -n {namespace} \"$(kubectl get pod -n {namespace} -l app.kubernetes.io/name={label} --field-selector spec.nodeName=NODE -o name)\" -- sandwatch events"
    );
    for doc in ["README.md", "docs/operating.md"] {
        let text = read(doc);
        assert!(text.contains(&one_liner), "{doc} has the one-line kubectl exec for a named node");
        assert!(
            !text.contains("ds/sandwatch -- sandwatch events"),
            "{doc}: ds/sandwatch reaches an arbitrary node's agent"
        );
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
    let vars = dash["templating"]["list"].as_array().expect("variables");
    let names: Vec<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();
    assert_eq!(names, ["datasource", "node", "namespace"]);
    // Drawn from series that exist before anything happens: the agent's
    // build info, and the pods it holds by namespace.
    assert_eq!(vars[1]["query"]["query"], "label_values(sandwatch_build_info, node)");
    assert_eq!(vars[2]["query"]["query"], "label_values(sandwatch_namespace_pods{node=~\"$node\"}, namespace)");
    let panels = dash["panels"].as_array().expect("panels");
    let mut queries = 0;
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let title = &p["title"];
        assert_eq!(p["datasource"]["uid"], "${datasource}", "panel {title} uses the datasource variable");
        let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
        assert!(!unit.is_empty(), "panel {title} has a unit");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title} has a query");
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            assert!(expr.contains("$node"), "panel {title} filters by node: {expr}");
            let per_pod = [
                "sandwatch_pod_oom",
                "sandwatch_pod_container",
                "sandwatch_pod_memory",
                "sandwatch_workload_oom",
                "sandwatch_workload_container",
            ];
            if per_pod.iter().any(|f| expr.contains(f)) {
                assert!(expr.contains("$namespace"), "panel {title} filters by namespace: {expr}");
            }
            // A count over $__rate_interval has no unit: its size changes with the zoom.
            assert!(
                !expr.contains("increase(") || !expr.contains("[$__rate_interval]") || expr.contains(" / "),
                "panel {title} plots increase() over $__rate_interval: {expr}"
            );
            queries += 1;
        }
    }
    assert!(queries >= 40, "{queries}");
    // The first screen answers "a kill happened": its table, full width, on top.
    let first = panels.iter().find(|p| p["type"] != "row").expect("a panel");
    assert_eq!(
        (first["type"].as_str(), first["gridPos"]["y"].as_u64(), first["gridPos"]["w"].as_u64()),
        (Some("table"), Some(1), Some(24))
    );
    let exprs: Vec<&str> =
        first["targets"].as_array().expect("targets").iter().filter_map(|t| t["expr"].as_str()).collect();
    for (what, needle) in [
        ("whose limit fired and what filled it", "limit, cause"),
        ("whether it was warned", "warned=\"true\""),
        ("how long before", "sandwatch_pod_oom_kills_warned_seconds_total"),
    ] {
        assert!(exprs.iter().any(|e| e.contains(needle)), "the first table says {what}: {exprs:?}");
    }
    // The panels the deployment promises.
    for title in [
        "OOM kills: pod, limit, what filled it, warning",
        "OOM kills by victim role",
        "Top pods by OOM kills",
        "OOM storm per node",
        "Sandbox deaths by cause",
        "Late exit events",
        "Runtime exit lag",
        "Blind spots",
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
