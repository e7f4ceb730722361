//! Command-line flags and `SANDWATCH_*` environment variables: [`Config`]
//! is what the user typed, [`Settings`] what it means to each part of the
//! agent (probes, watchdog, metrics, records, runtime clients, logs),
//! resolved and validated before anything binds or loads. Errors are one
//! line. The command line is parsed in `cli`, the one parse path.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Parser;

use crate::{
    model::Limits,
    probes::{loader::DEFAULT_DRAIN_INTERVAL_MS, ProbeOptions},
    runtime::{containerd::StreamConfig, cri::CriConfig},
    telemetry::{
        logs::LogFormat,
        records::RecordSettings,
        server::{self, conns, tls::TlsFiles, Address},
        watchdog_metrics::MetricsSettings,
    },
    watchdog::{self, pressure::PressureSettings, RuntimeSettings},
    watchdog::{correlation::CorrelatorLimits, storm::StormSettings},
};

#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(name = "sandwatch", version, about = "eBPF node watchdog: OOM kills, process exits and pod sandboxes")]
pub struct Config {
    /// Address of the /metrics, /healthz and /readyz endpoints.
    #[arg(long, env = "SANDWATCH_LISTEN", default_value = "127.0.0.1:9432")]
    pub listen: SocketAddr,

    /// Where /events is served: a unix socket (unix:PATH; on the node, so
    /// `sandwatch events` there or through `kubectl exec` finds it), or
    /// HOST:PORT over TCP, which anyone who reaches it can read: the records
    /// name every namespace's pods and processes. Empty: not served.
    #[arg(long, env = "SANDWATCH_EVENTS_LISTEN", default_value = DEFAULT_EVENTS_LISTEN)]
    pub events_listen: String,

    /// PEM certificate (chain) for TLS on the metrics listener; with
    /// --tls-key-file. Read again when it changes on disk.
    #[arg(long, env = "SANDWATCH_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key of --tls-cert-file. Read again when it changes.
    #[arg(long, env = "SANDWATCH_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,

    /// PEM CA certificates: /metrics then requires a client certificate one
    /// of them signed (/healthz and /readyz do not, for the kubelet's probes).
    #[arg(long, env = "SANDWATCH_TLS_CLIENT_CA_FILE")]
    pub tls_client_ca_file: Option<PathBuf>,

    /// A file whose first line is a token: /metrics then requires
    /// `Authorization: Bearer <token>`. Needs TLS. Read again when it changes.
    #[arg(long, env = "SANDWATCH_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,

    /// Open connections per listener, at most; at the cap the one idle the
    /// longest is closed (counted). Kept below the descriptor limit.
    #[arg(long, env = "SANDWATCH_MAX_CONNECTIONS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(2..=65_536))]
    pub max_connections: u32,

    /// A client that has not read what it was sent for this long is
    /// disconnected (counted): a stalled scrape, a follower of /events.
    #[arg(long, env = "SANDWATCH_WRITE_TIMEOUT_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub write_timeout_seconds: u64,

    /// A scrape whose response is not read in full this long after its
    /// request is disconnected (counted): a reader taking a byte at a
    /// time, whose writes never stall, holds a connection no longer.
    #[arg(long, env = "SANDWATCH_RESPONSE_TIMEOUT_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub response_timeout_seconds: u64,

    /// Ring buffer size in bytes (power of two, at least 4096; suffixes K, M
    /// accepted, e.g. 8M). The kernel maps it twice: RSS shows twice this.
    #[arg(long, env = "SANDWATCH_RING_BUFFER_BYTES", default_value = DEFAULT_RING_BUFFER, value_parser = parse_ring_size)]
    pub ring_buffer_bytes: u32,

    /// Longest wait, in ms, before the reader drains exit and cgroup records
    /// (OOM kills and bursts wake it at once).
    #[arg(long, env = "SANDWATCH_DRAIN_INTERVAL_MS", default_value_t = DEFAULT_DRAIN_INTERVAL_MS, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub drain_interval_ms: u32,

    /// Records the reader may queue for decoding before it drops (counted);
    /// the default holds more than a full 1 MiB ring of exits.
    #[arg(long, env = "SANDWATCH_CHANNEL_CAPACITY", default_value_t = 16384, value_parser = clap::value_parser!(u32).range(1..=4_194_304))]
    pub channel_capacity: u32,

    /// Capacity of the in-kernel per-task table (default: from pid_max,
    /// between 8192 and 131072).
    #[arg(long, env = "SANDWATCH_TASK_TABLE_ENTRIES", value_parser = clap::value_parser!(u32).range(1024..=4_194_304))]
    pub task_table_entries: Option<u32>,

    /// Entries of the task table one pod's or container's tasks may hold
    /// (default: an eighth of the table); its tasks beyond read unknown,
    /// no other pod's do.
    #[arg(long, env = "SANDWATCH_TASK_TABLE_QUOTA", value_parser = clap::value_parser!(u32).range(16..=4_194_304))]
    pub task_table_quota: Option<u32>,

    /// Most series kept of each per-pod family (sandwatch_pod_oom_kills_total,
    /// sandwatch_pod_container_exits_total); beyond it the family's least
    /// recently updated is dropped (counted in sandwatch_pod_series_evicted_total).
    #[arg(long, env = "SANDWATCH_MAX_POD_SERIES", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_pod_series: u32,

    /// How long after its pod is torn down a pod's OOM series are removed
    /// (e.g. 90s, 15m, 1h; 0 keeps them until evicted by the cap). Long
    /// enough for Prometheus to scrape the last increment.
    #[arg(long, env = "SANDWATCH_POD_SERIES_TTL", default_value = "15m", value_parser = parse_duration_secs)]
    pub pod_series_ttl: u64,

    /// How long a new per-pod or per-workload counter series is served at
    /// 0 before its first events are added (e.g. 30s; at most 10m; 0 adds
    /// them at once). Prometheus never counts a series' first sample, so a
    /// scrape must see the 0 first: a scraper slower than this lengthens
    /// it to 1.5 times its interval (up to 5m).
    #[arg(long, env = "SANDWATCH_POD_SERIES_HOLD", default_value = "30s", value_parser = parse_hold)]
    pub pod_series_hold: u64,

    /// Most series kept of each per-workload family
    /// (sandwatch_workload_oom_kills_total,
    /// sandwatch_workload_container_exits_total); beyond it the family's
    /// least recently updated is dropped (counted in
    /// sandwatch_workload_series_evicted_total).
    #[arg(long, env = "SANDWATCH_MAX_WORKLOAD_SERIES", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_workload_series: u32,

    /// Length of the OOM-churn window, in seconds.
    #[arg(long, env = "SANDWATCH_OOM_WINDOW_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub oom_window_seconds: u64,

    /// OOM kills within the window that raise sandwatch_oom_storm to 1.
    #[arg(long, env = "SANDWATCH_OOM_STORM_THRESHOLD", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub oom_storm_threshold: u64,

    /// OOM kills within the window at or below which the storm is over
    /// (must be below the threshold, so the flag does not flap).
    #[arg(long, env = "SANDWATCH_OOM_STORM_CLEAR", default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub oom_storm_clear: u64,

    /// containerd's socket, for its event stream (TaskExit lag, late runtime
    /// events, OOM mismatches). Empty: do not follow containerd. A missing
    /// socket is retried with backoff (sandwatch_runtime_events_up says 0).
    #[arg(long, env = "SANDWATCH_CONTAINERD_SOCKET", default_value = "/run/containerd/containerd.sock")]
    pub containerd_socket: String,

    /// containerd namespace whose events are followed (the CRI's is k8s.io).
    #[arg(long, env = "SANDWATCH_CONTAINERD_NAMESPACE", default_value = "k8s.io", value_parser = parse_name)]
    pub containerd_namespace: String,

    /// The runtime's CRI socket, for pod and container names (labels of
    /// sandwatch_pod_oom_kills_total, logs) and which container is a pod's
    /// sandbox. Empty: UIDs and ids only. A missing socket is retried with
    /// backoff (sandwatch_runtime_metadata_up says 0). CRI-O: /run/crio/crio.sock.
    #[arg(long, env = "SANDWATCH_CRI_SOCKET", default_value = "/run/containerd/containerd.sock")]
    pub cri_socket: String,

    /// Seconds between full listings of pods and containers over the CRI;
    /// containers that appear unnamed are asked for sooner.
    #[arg(long, env = "SANDWATCH_CRI_REFRESH_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub cri_refresh_seconds: u64,

    /// Process names (comm) of container runtimes whose crashes and
    /// restarts are counted, comma-separated.
    #[arg(long, env = "SANDWATCH_RUNTIME_NAMES", default_value = "containerd,crio,dockerd", value_delimiter = ',', value_parser = parse_name)]
    pub runtime_names: Vec<String>,

    /// Seconds to wait for the other side before an OOM kill seen by only
    /// the kernel or only the runtime counts as a mismatch.
    #[arg(long, env = "SANDWATCH_OOM_MATCH_WINDOW_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub oom_match_window_seconds: u64,

    /// Event records kept for newcomers to /events. When it is full, the
    /// namespace holding the most records gives its oldest: one tenant's
    /// flood never pushes out another namespace's evidence.
    #[arg(long, env = "SANDWATCH_EVENT_HISTORY", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(16..=65536))]
    pub event_history: u32,

    /// Every workload container's memory usage is looked at once in this
    /// many seconds (those near their limit, or that the kernel says hit
    /// it, each second); 0 turns the memory pressure warnings off.
    #[arg(long, env = "SANDWATCH_PRESSURE_SCREEN_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub pressure_screen_seconds: u64,

    /// Followers of /events?follow=1 at once; the next is refused (503).
    #[arg(long, env = "SANDWATCH_MAX_EVENT_SUBSCRIBERS", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_event_subscribers: u32,

    /// The node's name in event records (the DaemonSet sets NODE_NAME from
    /// spec.nodeName); default: the hostname.
    #[arg(long, env = "NODE_NAME", value_parser = parse_name)]
    pub node_name: Option<String>,

    /// error, warn, info, debug (every event) or trace.
    #[arg(long, env = "SANDWATCH_LOG_LEVEL", default_value = "info", value_parser = ["error", "warn", "info", "debug", "trace"])]
    pub log_level: String,

    /// text, or json (one object per line, for Loki, Elasticsearch, Fluent Bit).
    #[arg(long, env = "SANDWATCH_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// `--events-listen`'s default: a host path the DaemonSet mounts.
pub const DEFAULT_EVENTS_LISTEN: &str = "unix:/run/sandwatch/events.sock";

/// `--ring-buffer-bytes`'s default, as a user writes it (the probes'
/// `DEFAULT_RING_BUFFER_BYTES`; a unit test keeps them equal).
const DEFAULT_RING_BUFFER: &str = "1M";

/// What the flags mean to each part of the agent.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where /metrics, /healthz, /readyz and /events are served, and how.
    pub server: server::Settings,
    pub probes: ProbeOptions,
    /// Records the reader may queue for decoding before it drops.
    pub channel_capacity: usize,
    pub watchdog: watchdog::Settings,
    pub metrics: MetricsSettings,
    pub records: RecordSettings,
    /// The CRI listing of names; `None`: UIDs and ids only.
    pub cri: Option<CriConfig>,
    /// containerd's event stream; `None`: not followed.
    pub containerd: Option<StreamConfig>,
    pub log: LogSettings,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub level: String,
    pub format: LogFormat,
}

fn parse_ring_size(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (s, 1u64),
        Some((i, _)) => {
            let mult = match &s[i..] {
                "K" | "k" | "KiB" => 1024,
                "M" | "m" | "MiB" => 1024 * 1024,
                other => return Err(format!("unknown size suffix {other:?} (use K or M)")),
            };
            (&s[..i], mult)
        }
    };
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a size"))?;
    let bytes = n.saturating_mul(mult);
    if bytes < 4096 || !bytes.is_power_of_two() || bytes > 1 << 30 {
        return Err(format!("{bytes} bytes: the ring buffer must be a power of two between 4096 and 1G"));
    }
    u32::try_from(bytes).map_err(|_| format!("{bytes} bytes is too large"))
}

/// The per-pod series' hold: a duration of at most 10 minutes.
fn parse_hold(s: &str) -> Result<u64, String> {
    let secs = parse_duration_secs(s)?;
    if secs > 600 {
        return Err(format!("{s}: at most 10m (a scrape interval or two)"));
    }
    Ok(secs)
}

/// A duration in seconds: a number with an optional unit s, m or h.
fn parse_duration_secs(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        None => (s, 1),
        Some(i) => {
            let unit = match &s[i..] {
                "s" => 1,
                "m" => 60,
                "h" => 3600,
                other => return Err(format!("unknown duration unit {other:?} (use s, m or h)")),
            };
            (&s[..i], unit)
        }
    };
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a duration (e.g. 90s, 15m, 1h)"))?;
    let secs = n.saturating_mul(unit);
    if secs > 7 * 86_400 {
        return Err(format!("{s}: at most 7 days"));
    }
    Ok(secs)
}

/// A runtime or namespace name: non-empty, no spaces, quotes or commas.
fn parse_name(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() || s.len() > 253 || s.chars().any(|c| c.is_whitespace() || c == '"' || c == ',' || c.is_control()) {
        return Err(format!("{s:?} is not a valid name"));
    }
    Ok(s.to_string())
}

/// Why parsing did not produce a config.
#[derive(Debug)]
pub enum ConfigExit {
    /// --help or --version: print this and exit 0.
    Info(String),
    /// Invalid input: one line, exit 2.
    Invalid(String),
}

impl ConfigExit {
    /// --help and --version are information; anything else is one line.
    pub fn from_clap(e: clap::Error) -> Self {
        use clap::error::ErrorKind;
        match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ConfigExit::Info(e.to_string()),
            _ => {
                let rendered = e.to_string();
                let first = rendered.lines().next().unwrap_or("invalid arguments");
                ConfigExit::Invalid(first.trim_start_matches("error: ").to_string())
            }
        }
    }
}

impl Config {
    /// What the flags mean to each part; checks that span more than one
    /// flag are made here (one line each).
    pub fn resolve(self) -> Result<Settings, String> {
        if self.oom_storm_clear >= self.oom_storm_threshold {
            return Err(format!(
                "--oom-storm-clear ({}) must be below --oom-storm-threshold ({})",
                self.oom_storm_clear, self.oom_storm_threshold
            ));
        }
        let storm = StormSettings {
            window_secs: self.oom_window_seconds,
            threshold: self.oom_storm_threshold,
            clear: self.oom_storm_clear,
        };
        let correlation = CorrelatorLimits {
            oom_match_ns: self.oom_match_window_seconds.saturating_mul(1_000_000_000),
            ..CorrelatorLimits::default()
        };
        let socket = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
        let tls = match (self.tls_cert_file, self.tls_key_file) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key, client_ca: self.tls_client_ca_file }),
            (None, None) if self.tls_client_ca_file.is_some() => {
                return Err("--tls-client-ca-file needs TLS: set --tls-cert-file and --tls-key-file too".into())
            }
            (None, None) => None,
            _ => return Err("--tls-cert-file and --tls-key-file go together".into()),
        };
        if tls.is_none() && self.auth_token_file.is_some() {
            return Err("--auth-token-file needs TLS (a token sent in clear can be read on the way): \
                        set --tls-cert-file and --tls-key-file too"
                .into());
        }
        let events = (!self.events_listen.is_empty())
            .then(|| Address::parse(&self.events_listen).map_err(|e| format!("--events-listen {e}")))
            .transpose()?;
        if events == Some(Address::Tcp(self.listen)) {
            return Err(format!("--events-listen must differ from --listen ({})", self.listen));
        }
        let server = server::Settings {
            metrics: self.listen,
            events,
            limits: conns::Limits {
                max_connections: self.max_connections as usize,
                write_timeout: Duration::from_secs(self.write_timeout_seconds),
                response_timeout: Some(Duration::from_secs(self.response_timeout_seconds)),
                ..conns::Limits::default()
            },
            tls,
            token_file: self.auth_token_file,
        };
        Ok(Settings {
            server,
            probes: ProbeOptions {
                ring_buffer_bytes: self.ring_buffer_bytes,
                drain_interval: Duration::from_millis(self.drain_interval_ms.into()),
                task_table_entries: self.task_table_entries,
                task_table_quota: self.task_table_quota,
                runtime_names: self.runtime_names.clone(),
                ..ProbeOptions::default()
            },
            channel_capacity: self.channel_capacity as usize,
            watchdog: watchdog::Settings {
                limits: Limits::default(),
                storm,
                pod_series_ttl_ns: (self.pod_series_ttl > 0).then(|| self.pod_series_ttl.saturating_mul(1_000_000_000)),
                runtime: Some(RuntimeSettings { names: self.runtime_names.clone(), correlation }),
                pressure: (self.pressure_screen_seconds > 0).then(|| PressureSettings {
                    screen_interval_ns: self.pressure_screen_seconds.saturating_mul(1_000_000_000),
                    ..PressureSettings::default()
                }),
            },
            metrics: MetricsSettings {
                max_pod_series: self.max_pod_series as usize,
                max_workload_series: self.max_workload_series as usize,
                pod_series_hold: Duration::from_secs(self.pod_series_hold),
                window_secs: self.oom_window_seconds,
                runtime_names: self.runtime_names,
            },
            records: RecordSettings {
                node: self.node_name.unwrap_or_else(crate::os::hostname),
                max_subscribers: self.max_event_subscribers as usize,
                history: self.event_history as usize,
            },
            cri: socket(&self.cri_socket)
                .map(|socket| CriConfig { socket, refresh: Duration::from_secs(self.cri_refresh_seconds) }),
            containerd: socket(&self.containerd_socket)
                .map(|socket| StreamConfig { socket, namespace: self.containerd_namespace }),
            log: LogSettings { level: self.log_level, format: self.log_format },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cli::{parse, Invocation};

    /// The agent's settings from `args`, through the one parse path.
    fn settings(args: &[&str]) -> Settings {
        match parse(std::iter::once("sandwatch").chain(args.iter().copied())) {
            Ok(Invocation::Agent(s)) => *s,
            other => panic!("{args:?}: expected the agent, got {other:?}"),
        }
    }

    fn invalid(args: &[&str]) -> String {
        match parse(std::iter::once("sandwatch").chain(args.iter().copied())) {
            Err(ConfigExit::Invalid(line)) => line,
            other => panic!("expected an error for {args:?}, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_loopback_and_2mib() {
        let s = settings(&[]);
        assert_eq!(s.server.metrics, "127.0.0.1:9432".parse().unwrap());
        assert_eq!(s.server.events, Some(Address::Unix(PathBuf::from("/run/sandwatch/events.sock"))));
        assert_eq!((s.server.tls.clone(), s.server.token_file.clone()), (None, None));
        assert_eq!(s.server.limits.max_connections, 256);
        assert_eq!(s.probes.ring_buffer_bytes, 1024 * 1024);
        assert_eq!(s.probes.drain_interval, Duration::from_millis(25));
        assert_eq!(s.probes.task_table_entries, None);
        assert_eq!(s.watchdog.storm, StormSettings::default());
        assert_eq!(s.watchdog.pod_series_ttl_ns, Some(900 * 1_000_000_000));
        assert_eq!(s.metrics, MetricsSettings { runtime_names: s.probes.runtime_names.clone(), ..Default::default() });
        assert_eq!(s.log, LogSettings { level: "info".into(), format: LogFormat::Text });
        assert_eq!(s.cri.map(|c| c.socket), Some(PathBuf::from("/run/containerd/containerd.sock")));
        assert_eq!(s.records.max_subscribers, 8);
    }

    #[test]
    fn each_flag_reaches_the_part_it_configures() {
        let s = settings(&[
            "--oom-window-seconds",
            "30",
            "--oom-storm-threshold",
            "4",
            "--oom-storm-clear",
            "1",
            "--max-pod-series",
            "7",
            "--oom-match-window-seconds",
            "5",
            "--runtime-names",
            "crio",
            "--containerd-socket",
            "",
            "--cri-socket",
            "/run/crio/crio.sock",
            "--node-name",
            "node-7",
            "--channel-capacity",
            "64",
        ]);
        assert_eq!(s.watchdog.storm, StormSettings { window_secs: 30, threshold: 4, clear: 1 });
        assert_eq!((s.metrics.max_pod_series, s.metrics.window_secs), (7, 30));
        let runtime = s.watchdog.runtime.expect("runtime side");
        assert_eq!(runtime.names, ["crio"]);
        assert_eq!(runtime.correlation.oom_match_ns, 5_000_000_000);
        assert_eq!(s.probes.runtime_names, ["crio"]);
        assert!(s.containerd.is_none(), "an empty socket turns the stream off");
        assert_eq!(s.cri.map(|c| c.socket), Some(PathBuf::from("/run/crio/crio.sock")));
        assert_eq!(s.records.node, "node-7");
        assert_eq!(s.channel_capacity, 64);
    }

    #[test]
    fn the_ring_buffer_default_is_the_probes_default() {
        let default = crate::probes::loader::DEFAULT_RING_BUFFER_BYTES;
        assert_eq!(parse_ring_size(DEFAULT_RING_BUFFER), Ok(default));
        assert_eq!(settings(&[]).probes.ring_buffer_bytes, default);
    }

    /// docs/operating.md's flags table, row by row: each flag the agent
    /// has, its variable and its default, and no other.
    #[test]
    fn the_flags_reference_is_the_agents_flags() {
        use clap::CommandFactory as _;
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operating.md");
        let doc = std::fs::read_to_string(path).expect("docs/operating.md");
        let table = doc.split("\n## Flags\n").nth(1).and_then(|t| t.split("\n## ").next()).expect("a Flags section");
        let cell = |c: &str| c.trim().trim_matches('`').to_string();
        let documented: Vec<(String, String, String)> = table
            .lines()
            .filter(|l| l.starts_with("| `--"))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').skip(1).collect();
                (cell(cells[0]), cell(cells[1]), cells[2].trim().to_string())
            })
            .collect();
        let command = Config::command();
        let mut flags = Vec::new();
        for arg in command.get_arguments().filter(|a| a.get_long().is_some_and(|l| l != "help" && l != "version")) {
            let long = format!("--{}", arg.get_long().unwrap_or_default());
            flags.push(long.clone());
            let row = documented.iter().find(|(flag, ..)| *flag == long);
            let (_, env, default) = row.unwrap_or_else(|| panic!("{long} is not in {path}'s flags table"));
            let want_env = arg.get_env().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
            assert_eq!(*env, want_env, "{long}'s variable");
            let defaults: Vec<String> =
                arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
            if !defaults.is_empty() {
                assert_eq!(*default, format!("`{}`", defaults.join(",")), "{long}'s default");
            }
        }
        let extra: Vec<&String> = documented.iter().map(|(f, ..)| f).filter(|f| !flags.contains(f)).collect();
        assert!(extra.is_empty(), "documented but not a flag: {extra:?}");
    }

    #[test]
    fn sizes_accept_suffixes() {
        assert_eq!(settings(&["--ring-buffer-bytes", "64K"]).probes.ring_buffer_bytes, 65536);
        assert_eq!(settings(&["--ring-buffer-bytes", "4096"]).probes.ring_buffer_bytes, 4096);
    }

    #[test]
    fn each_invalid_value_is_one_clear_line() {
        let cases: [(&[&str], &str); 15] = [
            (&["--pod-series-ttl", "15x"], "unknown duration unit"),
            (&["--pod-series-ttl", "30d"], "--pod-series-ttl"),
            (&["--max-pod-series", "0"], "--max-pod-series"),
            (&["--oom-window-seconds", "0"], "--oom-window-seconds"),
            (&["--oom-storm-threshold", "4", "--oom-storm-clear", "4"], "must be below --oom-storm-threshold"),
            (&["--drain-interval-ms", "0"], "--drain-interval-ms"),
            (&["--listen", "nowhere"], "--listen"),
            (&["--ring-buffer-bytes", "5000"], "must be a power of two"),
            (&["--ring-buffer-bytes", "8X"], "unknown size suffix"),
            (&["--log-level", "loud"], "--log-level"),
            (&["--channel-capacity", "0"], "--channel-capacity"),
            (&["--max-event-subscribers", "0"], "--max-event-subscribers"),
            (&["--node-name", "a b"], "--node-name"),
            (&["--pod-series-hold", "1h"], "at most 10m"),
            (&["--bogus"], "--bogus"),
        ];
        for (args, needle) in cases {
            let line = invalid(args);
            assert!(!line.contains('\n'), "{line:?}");
            assert!(line.contains(needle), "{args:?}: {line:?} lacks {needle:?}");
        }
    }

    #[test]
    fn pod_series_ttl_takes_units() {
        for (text, secs) in [("15m", 900), ("90s", 90), ("1h", 3600), ("45", 45)] {
            let ttl = settings(&["--pod-series-ttl", text]).watchdog.pod_series_ttl_ns;
            assert_eq!(ttl, Some(secs * 1_000_000_000), "{text}");
        }
        assert_eq!(settings(&["--pod-series-ttl", "0"]).watchdog.pod_series_ttl_ns, None, "0 keeps them");
        let hold = |args: &[&str]| settings(args).metrics.pod_series_hold;
        assert_eq!(hold(&[]), Duration::from_secs(30));
        assert_eq!(hold(&["--pod-series-hold", "2m"]), Duration::from_secs(120));
        assert_eq!(hold(&["--pod-series-hold", "0"]), Duration::ZERO);
    }

    #[test]
    fn help_is_not_an_error() {
        assert!(matches!(parse(["sandwatch", "--help"]), Err(ConfigExit::Info(_))));
    }
}
