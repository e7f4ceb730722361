//! A real Prometheus scrapes the agent every second while a kubelet-shaped
//! pod goes through an OOM storm; its query API must then report exactly
//! what happened.

mod harness;

use std::time::Duration;

use harness::{
    needs_live_pressure, needs_runtime_names, needs_warned_kill, require_root, shipped_queries, AgentProcess, KubePod,
    PrometheusProcess,
};

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
        // As a node's agent: a new series served at 0 for two scrapes, so
        // that the panels' increase() counts its first kill.
        "--pod-series-hold",
        "2s",
    ]);
    let prom = PrometheusProcess::start(agent.addr);
    let up = prom.wait_for("sandwatch_programs_attached", Duration::from_secs(30), |v| v >= 6.0);
    assert!(up >= Some(6.0), "Prometheus never scraped the agent: {}", prom.log());

    // The storm: three children of container A and container B's init.
    let mut pod = KubePod::build("prom", UID, false, 5);
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

    // One pod's storm (with no runtime, each pod is a namespace of its
    // own): its own series rose, and went once the 6 s window emptied;
    // the node's storm, which takes more than one namespace, never rose.
    let own = format!("max_over_time(sandwatch_oom_storm_namespace{{pod_uid=\"{UID}\"}}[5m])");
    let rose = prom.wait_for(&own, Duration::from_secs(10), |v| v >= 3.0);
    assert!(rose >= Some(3.0), "the pod's own storm never showed: {rose:?}\n{}", agent.metrics());
    let node = prom.scalar("max_over_time(sandwatch_oom_storm[5m])", None);
    assert_eq!(node, Some(0.0), "one namespace raised the node's storm");
    let now = format!("count(sandwatch_oom_storm_namespace{{pod_uid=\"{UID}\"}}) or vector(0)");
    let fell = prom.wait_for(&now, Duration::from_secs(30), |v| v == 0.0);
    assert_eq!(fell, Some(0.0), "the pod's storm never ended");
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
    assert_eq!(prom.scalar("sandwatch_pod_series_evicted_total{family=\"oom_kills\"}", None), Some(1.0));
    let kept = prom.query("sandwatch_pod_oom_kills_total", None);
    assert_eq!(kept.first().map(|(l, v)| (l["victim_role"].clone(), *v)), Some(("container_init".into(), 1.0)));

    // Container C runs into the node's allocatable (a limit on `kubepods`
    // below its own): a kill of the node's limit, which the panels of that
    // limit show.
    let kubepods = pod.pod_path.rsplitn(3, '/').nth(2).expect("kubepods above the pod").to_string();
    pod.cg.set_memory_limit(&kubepods, 24 << 20);
    pod.start_init(3, &format!("exec {HOG}"));
    pod.trigger(3);
    let node_kills = "sum(sandwatch_pod_oom_kills_total{limit=\"node\"})";
    assert_eq!(prom.wait_for(node_kills, Duration::from_secs(30), |v| v == 1.0), Some(1.0), "{}", agent.metrics());
    // Container D's init fails: a container exit of reason `error`.
    pod.start_init(4, "exit 3");
    pod.trigger(4);
    // Each counted by increase(): scraped at 0, then at 1 (after the hold).
    // increase() extrapolates past the last sample to the range's end (up
    // to about one scrape interval): soon after the 1 is scraped
    // (a few samples since the 0) one kill reads up to about 1.2, two
    // would read 2 or more.
    for scraped in [
        "sum(increase(sandwatch_pod_oom_kills_total{limit=\"node\"}[10m]))",
        "sum(increase(sandwatch_pod_container_exits_total{reason=\"error\"}[10m]))",
    ] {
        let counted = prom.wait_for(scraped, Duration::from_secs(30), |v| v >= 1.0);
        assert!(counted.is_some_and(|v| (1.0..1.5).contains(&v)), "{scraped}: {counted:?}");
    }

    // Every PromQL expression that ships — dashboard panels and alert rules
    // — parses on this Prometheus, and every panel has data to show (those
    // of workloads, which need the runtime's names, in runtime.rs's
    // container-exits test, with a real CRI; those of containers under
    // memory pressure in its pressure test, as it warns and after its
    // warned kill).
    for (origin, expr) in shipped_queries() {
        let (status, body) = prom.raw_query(&expr);
        assert_eq!(status, 200, "{origin}: {expr}: {body}");
        let later = needs_runtime_names(&expr) || needs_live_pressure(&expr) || needs_warned_kill(&expr);
        if origin.starts_with("dashboard") && !later {
            assert!(!prom.query(&expr, None).is_empty(), "{origin} returns no data: {expr}");
        }
    }
    drop(pod);
}

const UID_SLOW: &str = "9a8b7c6d-0003-4a3b-8c2d-1e0f9a8b7c6d";

/// A Prometheus that scrapes every 10 s, slower than the agent's hold
/// (2 s here; 30 s by default against a 60 s scrape): a pod's first kill,
/// right after a scrape, is still counted by increase(). The agent learns
/// the scraper's interval and holds the new series for 1.5 times it, so a
/// scrape reads the 0 first. (Before: the kill was added 2 s after it, the
/// next scrape read the series at 1 first, and increase() never counted
/// it.)
#[test]
fn a_first_kill_counts_for_a_scraper_slower_than_the_hold() {
    require_root();
    let agent = AgentProcess::start(&["--pod-series-hold", "2s"]);
    // Nothing else scrapes the agent here: from the same loopback address
    // its polls would read as this scraper's scrapes.
    let scrape = format!(
        "  - job_name: sandwatch\n    scrape_interval: 10s\n    static_configs:\n      - targets: ['{}']\n",
        agent.addr
    );
    let prom = PrometheusProcess::start_with(agent.addr.port(), &scrape);
    let hold = prom.wait_for("sandwatch_pod_series_hold_seconds", Duration::from_secs(60), |v| v >= 14.0);
    assert!(hold.is_some_and(|h| (14.0..=16.0).contains(&h)), "the hold after 10 s scrapes: {hold:?}");

    let mut pod = KubePod::build("slow", UID_SLOW, false, 2);
    pod.start_init(1, &format!("exec {HOG}"));
    // Right after a scrape: the furthest from the next one.
    let last = |p: &PrometheusProcess| p.scalar("max(timestamp(up{job=\"sandwatch\"}))", None);
    let before = last(&prom);
    assert!(prom
        .wait_for("max(timestamp(up{job=\"sandwatch\"}))", Duration::from_secs(20), |t| Some(t) != before)
        .is_some());
    pod.trigger(1);
    let series = format!("sum(sandwatch_pod_oom_kills_total{{pod_uid=\"{UID_SLOW}\"}})");
    let killed = prom.wait_for(&series, Duration::from_secs(60), |v| v >= 1.0);
    assert_eq!(killed, Some(1.0), "the kill never reached Prometheus: {}", prom.log());
    let at = last(&prom).expect("a scrape");
    let samples = prom.raw_query(&format!("sandwatch_pod_oom_kills_total{{pod_uid=\"{UID_SLOW}\"}}[2m]"));
    let counted =
        prom.scalar(&format!("sum(increase(sandwatch_pod_oom_kills_total{{pod_uid=\"{UID_SLOW}\"}}[5m]))"), Some(at));
    assert!(
        counted.is_some_and(|v| v >= 0.9),
        "increase() counts the first kill: {counted:?}; the samples: {samples:?}"
    );
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
    let up = prom.wait_for("sandwatch_programs_attached", Duration::from_secs(30), |v| v >= 6.0);
    assert!(up >= Some(6.0), "Prometheus never scraped the agent: {}", prom.log());
    let kills0 = prom.scalar("sum(sandwatch_oom_kills_total)", None).expect("node-wide kills");

    let mut pod = KubePod::build("ttl", UID_TTL, false, 2);
    pod.start_init(1, &format!("{HOG}; exec sleep 1000"));
    pod.trigger(1);
    let series = format!("sum(sandwatch_pod_oom_kills_total{{pod_uid=\"{UID_TTL}\"}})");
    assert_eq!(prom.wait_for(&series, Duration::from_secs(30), |v| v == 1.0), Some(1.0), "{}", agent.metrics());
    // Torn down: the series stays for the TTL, then goes.
    drop(pod);
    let expired =
        prom.wait_for("sandwatch_pod_series_expired_total{family=\"oom_kills\"}", Duration::from_secs(30), |v| {
            v >= 1.0
        });
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

/// A CA, and certificates it signs.
struct Pki {
    dir: std::path::PathBuf,
    ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
}

impl Pki {
    fn new(name: &str) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let dir = std::env::temp_dir().join(format!("sandwatch-pki-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("pki dir");
        let ca_key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, format!("sandwatch test CA {name}"));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let ca = params.self_signed(&ca_key).expect("CA");
        std::fs::write(dir.join("ca.pem"), ca.pem()).expect("ca.pem");
        Self { dir, ca, ca_key }
    }

    /// A certificate for `names` (for a server or a client), written as
    /// `<file>.pem` and `<file>-key.pem`; returns both paths.
    fn issue(&self, file: &str, names: &[&str], client: bool) -> (String, String) {
        use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair};
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("params");
        params.distinguished_name.push(DnType::CommonName, names[0]);
        params.extended_key_usages =
            vec![if client { ExtendedKeyUsagePurpose::ClientAuth } else { ExtendedKeyUsagePurpose::ServerAuth }];
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).expect("sign");
        let (cert_path, key_path) = (self.dir.join(format!("{file}.pem")), self.dir.join(format!("{file}-key.pem")));
        // As a secret volume does: the new files appear at once.
        for (path, text) in [(&cert_path, cert.pem()), (&key_path, key.serialize_pem())] {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text).expect("write");
            std::fs::rename(&tmp, path).expect("rename");
        }
        (cert_path.display().to_string(), key_path.display().to_string())
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// TLS as a cluster runs it: the agent's certificate and key, a CA that
/// signs the scraper's client certificate, a bearer token. A real
/// Prometheus with both scrapes (job `tls`); scrapers without the client
/// certificate, without the token, with a certificate of another CA, and
/// over plain HTTP are each refused and counted by reason; the probes'
/// /healthz needs neither. The agent's certificate is then rotated on
/// disk: reloaded, counted, and the scrapes go on. (Before: no TLS.)
#[test]
fn prometheus_scrapes_over_tls_with_a_client_certificate_and_the_rest_are_refused() {
    require_root();
    let pki = Pki::new("tls");
    let rogue = Pki::new("rogue");
    let (cert, key) = pki.issue("agent", &["localhost", "127.0.0.1"], false);
    let (client, client_key) = pki.issue("prometheus", &["prometheus"], true);
    let (rogue_client, rogue_key) = rogue.issue("prometheus", &["prometheus"], true);
    let token = pki.path("token");
    std::fs::write(&token, "s3cret-scrape-token\n").expect("token");
    let ca = pki.path("ca.pem");
    let agent = AgentProcess::start(&[
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-client-ca-file",
        &ca,
        "--auth-token-file",
        &token,
    ]);
    let target = agent.addr;
    let job = |name: &str, scheme: &str, tls: &str, auth: bool| {
        let auth = if auth { format!("    authorization:\n      credentials_file: {token}\n") } else { String::new() };
        format!(
            "  - job_name: {name}\n    scheme: {scheme}\n{tls}{auth}    static_configs:\n      - targets: ['{target}']\n"
        )
    };
    let tls = |cert: &str, key: &str| {
        format!("    tls_config:\n      ca_file: {ca}\n      cert_file: {cert}\n      key_file: {key}\n")
    };
    let configs = [
        job("tls", "https", &tls(&client, &client_key), true),
        job("nocert", "https", &format!("    tls_config:\n      ca_file: {ca}\n"), true),
        job("notoken", "https", &tls(&client, &client_key), false),
        job("rogue", "https", &tls(&rogue_client, &rogue_key), true),
        job("plain", "http", "", false),
    ]
    .concat();
    let prom = PrometheusProcess::start_with(target.port(), &configs);
    let up = |job: &str| prom.wait_for(&format!("up{{job=\"{job}\"}}"), Duration::from_secs(30), |_| true);
    let scraped = prom.wait_for("up{job=\"tls\"}", Duration::from_secs(30), |v| v == 1.0);
    assert_eq!(scraped, Some(1.0), "Prometheus with the client certificate and token scrapes: {}", prom.log());
    let attached = prom.wait_for("sandwatch_programs_attached{job=\"tls\"}", Duration::from_secs(10), |v| v >= 6.0);
    assert!(attached >= Some(6.0), "{attached:?}");
    for refused in ["nocert", "notoken", "rogue", "plain"] {
        assert_eq!(up(refused), Some(0.0), "{refused} is refused");
    }
    // Each refusal counted by its reason, as the agent reports it.
    for reason in ["client_certificate", "token", "tls_handshake"] {
        let q = format!("sandwatch_http_refused_total{{job=\"tls\",listener=\"metrics\",reason=\"{reason}\"}}");
        let n = prom.wait_for(&q, Duration::from_secs(15), |v| v >= 2.0);
        assert!(n.is_some_and(|v| v >= 2.0), "{reason}: {n:?}");
    }
    // The probes need no certificate.
    let (status, _) = probe_https(target, "/healthz");
    assert_eq!(status, 200, "a client without a certificate reads /healthz");

    // Rotation: a new certificate and key in place of the old.
    pki.issue("agent", &["localhost", "127.0.0.1"], false);
    let reloaded =
        prom.wait_for("sandwatch_tls_reloads_total{job=\"tls\",result=\"ok\"}", Duration::from_secs(20), |v| v >= 1.0);
    assert_eq!(reloaded, Some(1.0), "the new certificate was loaded once");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(up("tls"), Some(1.0), "scrapes go on with the new certificate: {}", prom.log());
    drop(prom);
    drop(agent);
}

/// GET over TLS without a client certificate, trusting any server
/// certificate (as the kubelet's HTTPS probes do): (status, body).
fn probe_https(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-sk", "--max-time", "5", "-o", "-", "-w", "\n%{http_code}"])
        .arg(format!("https://{addr}{path}"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}
