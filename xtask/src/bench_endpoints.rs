//! The agent's HTTP endpoints under the load a hostile or broken client
//! puts on them, with the agent at a 1 024-descriptor limit (containers
//! get that by default): half-sent requests held open, `/metrics`
//! responses never read, and clients hammering `/metrics` while a pod
//! floods the node with exits. Each part prints what a kubelet probe, the
//! agent's memory and log, and its event pipeline saw.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Result;

use crate::node::{get, metric, status_kib, storm_in, workers, Agent, Launch, Pods};

/// The descriptor limit the agent runs under.
const NOFILE: &str = "--nofile=1024:1024";

pub fn run(bin: &Path, agent_args: &[String]) -> Result<String> {
    raise_own_nofile();
    let mut out = String::from(
        "\nEndpoints under load, the agent at a 1 024-descriptor limit (`prlimit --nofile=1024:1024`):\n\n\
         | load | kubelet-style probes of /healthz (1 s timeout) | the agent | its log, memory and pipeline |\n\
         |---|---|---|---|\n",
    );
    out.push_str(&half_sent(bin, agent_args)?);
    out.push_str(&unread_metrics(bin, agent_args)?);
    out.push_str(&hammered_storm(bin, agent_args)?);
    Ok(out)
}

/// This process holds more than a thousand client sockets.
fn raise_own_nofile() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on an rlimit we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit { rlim_cur: lim.rlim_max.min(1 << 16), rlim_max: lim.rlim_max };
            libc::setrlimit(libc::RLIMIT_NOFILE, &raised);
        }
    }
}

/// The agent under the limit, its log in a file we can measure.
fn start(bin: &Path, agent_args: &[String], name: &str) -> Result<(Agent, PathBuf)> {
    let log = std::env::temp_dir().join(format!("sandwatch-bench-{name}-{}.log", std::process::id()));
    let args: Vec<&str> = agent_args.iter().map(String::as_str).collect();
    let wrapper = ["prlimit", NOFILE, "--"];
    let agent = Agent::start(Launch { wrapper: &wrapper, log: Some(&log), ..Launch::new(bin, &args) })?;
    Ok((agent, log))
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Probes /healthz as the kubelet does, every `every` for `total`;
/// (answered, asked).
fn probe(addr: SocketAddr, every: Duration, total: Duration) -> (u32, u32) {
    let (mut ok, mut asked) = (0, 0);
    let start = Instant::now();
    while start.elapsed() < total {
        let t = Instant::now();
        asked += 1;
        if matches!(test_support::http::get_timeout(addr, "/healthz", Duration::from_secs(1)), Some((200, _))) {
            ok += 1;
        }
        std::thread::sleep(every.saturating_sub(t.elapsed()));
    }
    (ok, asked)
}

/// Whether the agent closed this connection (EOF or reset, without
/// waiting).
fn closed_by_agent(s: &mut TcpStream) -> bool {
    let _ = s.set_nonblocking(true);
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

fn closed(text: &str, reason: &str) -> f64 {
    metric(text, &format!("sandwatch_http_connections_closed_total{{listener=\"metrics\",reason=\"{reason}\"}}"))
        .unwrap_or(0.0)
}

/// 1 100 connections that send half a request and hold it for 30 s.
fn half_sent(bin: &Path, agent_args: &[String]) -> Result<String> {
    let (agent, log) = start(bin, agent_args, "half-sent")?;
    let log0 = file_size(&log);
    let mut held = Vec::new();
    for _ in 0..1100 {
        let Ok(mut s) = TcpStream::connect_timeout(&agent.addr, Duration::from_secs(2)) else { continue };
        if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: slow\r\nX-Slow: ").is_ok() {
            held.push(s);
        }
    }
    let opened = held.len();
    let (ok, asked) = probe(agent.addr, Duration::from_secs(2), Duration::from_secs(30));
    let closed_count = held.iter_mut().map(closed_by_agent).filter(|c| *c).count();
    let text = agent.metrics().unwrap_or_default();
    let growth = file_size(&log).saturating_sub(log0);
    let accept_errors = metric(&text, "sandwatch_http_accept_errors_total{listener=\"metrics\"}").unwrap_or(0.0);
    let row = format!(
        "| 1 100 half-sent requests held 30 s ({opened} opened) | {ok} / {asked} answered | closed {closed_count} of them \
         ({} evicted at the cap, {} by the header timeout), {accept_errors} failed accepts | log +{:.1} KiB, peak RSS {:.1} MiB |\n",
        closed(&text, "evicted"),
        closed(&text, "header_timeout"),
        growth as f64 / 1024.0,
        status_kib(agent.pid(), "VmHWM:") as f64 / 1024.0,
    );
    drop(held);
    agent.stop()?;
    let _ = std::fs::remove_file(&log);
    Ok(row)
}

/// 300 scrapes whose responses are never read, with 200 pods' series.
fn unread_metrics(bin: &Path, agent_args: &[String]) -> Result<String> {
    let pods = Pods::create(200)?;
    let (agent, log) = start(bin, agent_args, "unread")?;
    std::thread::sleep(Duration::from_secs(2));
    let rss0 = status_kib(agent.pid(), "VmRSS:");
    let size = get(agent.addr, "/metrics").map_or(0, |(_, b)| b.len());
    let mut unread = Vec::new();
    for _ in 0..300 {
        let Ok(mut s) = test_support::http::connect_small(agent.addr, 2048) else { continue };
        if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: unread\r\n\r\n").is_ok() {
            unread.push(s);
        }
    }
    let (ok, asked) = probe(agent.addr, Duration::from_secs(2), Duration::from_secs(16));
    let rss1 = status_kib(agent.pid(), "VmRSS:");
    let closed_count = unread.iter_mut().map(closed_by_agent).filter(|c| *c).count();
    let text = agent.metrics().unwrap_or_default();
    let row = format!(
        "| 300 scrapes of /metrics ({:.0} KiB, 200 pods) never read, held 16 s | {ok} / {asked} answered | closed {closed_count} of them \
         ({} when their writes stalled 10 s, {} evicted at the cap) | RSS {:.1} → {:.1} MiB (+{:.1}), peak {:.1} MiB |\n",
        size as f64 / 1024.0,
        closed(&text, "write_timeout"),
        closed(&text, "evicted"),
        rss0 as f64 / 1024.0,
        rss1 as f64 / 1024.0,
        rss1.saturating_sub(rss0) as f64 / 1024.0,
        status_kib(agent.pid(), "VmHWM:") as f64 / 1024.0,
    );
    drop(unread);
    agent.stop()?;
    drop(pods);
    let _ = std::fs::remove_file(&log);
    Ok(row)
}

/// p-quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// 20 000 short processes in a pod's container (every exit streamed),
/// once quiet and once with 4 clients scraping /metrics as fast as they
/// can: what the pipeline lost, and how long exits waited.
fn hammered_storm(bin: &Path, agent_args: &[String]) -> Result<String> {
    let pods = Pods::create(200)?;
    let container = pods.unlimit(1)?;
    let procs = container.join("cgroup.procs");
    let (agent, log) = start(bin, agent_args, "hammer")?;
    let lost = |text: &str| -> f64 {
        ["kernel", "channel", "decode"]
            .iter()
            .map(|s| metric(text, &format!("sandwatch_events_dropped_total{{stage=\"{s}\"}}")).unwrap_or(0.0))
            .sum()
    };
    // The exit handling delay histogram's buckets: (le, count).
    let buckets = |text: &str| -> Vec<(f64, f64)> {
        text.lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("sandwatch_exit_handling_delay_seconds_bucket{le=\"")?;
                let (le, n) = rest.split_once("\"} ")?;
                Some((if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? }, n.parse().ok()?))
            })
            .collect()
    };
    // The bucket bound under which 99 % of the exits between two scrapes
    // were handled.
    let delay_p99 = |before: &str, after: &str| -> String {
        let (b, a) = (buckets(before), buckets(after));
        let delta: Vec<(f64, f64)> = a.iter().zip(&b).map(|((le, n1), (_, n0))| (*le, n1 - n0)).collect();
        let total = delta.last().map_or(0.0, |d| d.1);
        delta.iter().find(|(_, n)| *n >= 0.99 * total).map_or("?".into(), |(le, _)| format!("≤ {:.1} ms", le * 1e3))
    };
    let mut rows = String::new();
    for hammering in [false, true] {
        let before = agent.metrics()?;
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..if hammering { 4 } else { 0 })
            .map(|_| {
                let (stop, addr) = (stop.clone(), agent.addr);
                std::thread::spawn(move || {
                    let mut ms = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        if get(addr, "/metrics").is_some() {
                            ms.push(t.elapsed().as_secs_f64() * 1e3);
                        }
                    }
                    ms
                })
            })
            .collect();
        let wall = storm_in(&procs, 20_000, workers())?;
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        let mut scrapes: Vec<f64> = clients.into_iter().filter_map(|c| c.join().ok()).flatten().collect();
        scrapes.sort_by(f64::total_cmp);
        std::thread::sleep(Duration::from_secs(1));
        let after = agent.metrics()?;
        let streamed = metric(&after, "sandwatch_kernel_events_total{kind=\"exit\"}").unwrap_or(0.0)
            - metric(&before, "sandwatch_kernel_events_total{kind=\"exit\"}").unwrap_or(0.0);
        let probes = if hammering {
            format!(
                "{} scrapes, p50 {:.2} ms, p99 {:.2} ms",
                scrapes.len(),
                quantile(&scrapes, 0.5),
                quantile(&scrapes, 0.99)
            )
        } else {
            "no scrapes".to_string()
        };
        rows.push_str(&format!(
            "| 20 000 exits in a pod in {:.1} s, {} | {probes} | {streamed} exits streamed, {} lost | exit handling delay p99 {} |\n",
            wall.as_secs_f64(),
            if hammering { "4 clients hammering /metrics" } else { "quiet" },
            lost(&after) - lost(&before),
            delay_p99(&before, &after),
        ));
    }
    agent.stop()?;
    drop(pods);
    let _ = std::fs::remove_file(&log);
    Ok(rows)
}
