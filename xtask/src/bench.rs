//! `cargo xtask bench`: an exit storm (fork + _exit, on every core) timed
//! without and with the agent attached, in alternating rounds of one run.
//! Reports ratios and per-event costs measured in that run; no absolute
//! time is a pass/fail criterion because these machines are shared.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Result};

use crate::{
    node::{clock_ticks, storm, workers, Agent, OwnCgroup},
    util::cargo,
};

#[derive(clap::Args)]
pub struct Args {
    /// fork+exit pairs per storm.
    #[arg(long, default_value_t = 200_000)]
    forks: u32,
    /// Rounds; each runs one storm without and one with the agent.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Benchmark this agent binary instead of the release build (e.g. the
    /// image's static one, target/image/rootfs/usr/local/bin/sandwatch).
    #[arg(long)]
    pub agent: Option<std::path::PathBuf>,
    /// Extra flags for the agent, e.g. `-- --ring-buffer-bytes 1M`.
    #[arg(last = true)]
    agent_args: Vec<String>,
}

struct Round {
    base: Duration,
    with_agent: Duration,
    produced: f64,
    delivered: f64,
    dropped: f64,
    cpu_ns_per_event: f64,
    peak_rss_kib: u64,
    rss_kib: u64,
}

pub fn run(bin: &std::path::Path, args: Args) -> Result<()> {
    if args.forks == 0 || args.rounds == 0 {
        bail!("--forks and --rounds must be at least 1");
    }
    let bin = bin.to_path_buf();
    let workers = workers();
    eprintln!(
        "bench: exit storm of {} fork+exit on {workers} workers, {} rounds",
        args.forks, args.rounds
    );

    let mut rounds = Vec::new();
    for r in 0..args.rounds {
        let base = storm(args.forks, workers)?;
        let agent = Agent::start(&bin, &args.agent_args, None)?;
        let before = sample(&agent)?;
        let with_agent = storm(args.forks, workers)?;
        let after = settled(&agent)?;
        let peak_rss_kib = agent.status_kib("VmHWM:");
        let rss_kib = agent.status_kib("VmRSS:");
        agent.stop()?;

        let produced = after.produced - before.produced;
        let delivered = after.delivered - before.delivered;
        let dropped = after.dropped - before.dropped;
        let events = after.all_events - before.all_events;
        let cpu_ns = (after.cpu_ticks - before.cpu_ticks) as f64 * 1e9 / clock_ticks() as f64;
        let round = Round {
            base,
            with_agent,
            produced,
            delivered,
            dropped,
            cpu_ns_per_event: if events > 0.0 { cpu_ns / events } else { f64::NAN },
            peak_rss_kib,
            rss_kib,
        };
        eprintln!(
            "round {}: without {:.2} s, with {:.2} s (x{:.3}); exit events produced {produced}, delivered {delivered}, dropped {dropped}; agent {:.2} µs CPU/event, RSS {:.1} MiB (peak {:.1} MiB)",
            r + 1,
            base.as_secs_f64(),
            with_agent.as_secs_f64(),
            with_agent.as_secs_f64() / base.as_secs_f64(),
            round.cpu_ns_per_event / 1e3,
            rss_kib as f64 / 1024.0,
            peak_rss_kib as f64 / 1024.0,
        );
        rounds.push(round);
    }
    report(&args, &rounds);

    let latency = oom_latency(&bin, &args, workers)?;
    println!("{latency}");
    cargo(&["bench", "--package", "sandwatch", "--bench", "metrics_render"])?;
    Ok(())
}

/// OOM kills made while an exit storm runs: time from the victim's reaping
/// (just after the kill) to the counter showing it on /metrics.
fn oom_latency(bin: &std::path::Path, args: &Args, workers: u32) -> Result<String> {
    const KILLS: usize = 40;
    let agent = Agent::start(bin, &args.agent_args, None)?;
    let cgroup = OwnCgroup::create("bench")?;
    cgroup.limit_memory(cgroup.dir(), 32 << 20)?;
    let forks = args.forks;
    let storm = std::thread::spawn(move || storm(forks, workers));
    let series = "sandwatch_oom_kills_total{qos_class=\"none\",victim_role=\"host\"}";
    let mut latencies = Vec::with_capacity(KILLS);
    let mut timeouts = 0;
    for _ in 0..KILLS {
        let before = agent.value(series);
        let status = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "echo $$ > {} && exec dd if=/dev/zero of=/dev/null bs=256M count=1",
                    cgroup.dir().join("cgroup.procs").display()
                ),
            ])
            .stderr(Stdio::null())
            .status()?;
        let reaped = Instant::now();
        if status.success() {
            bail!("the memory hog was not OOM-killed ({status})");
        }
        loop {
            if agent.value(series) > before {
                latencies.push(reaped.elapsed().as_secs_f64() * 1e3);
                break;
            }
            if reaped.elapsed() > Duration::from_secs(5) {
                timeouts += 1;
                break;
            }
        }
    }
    let storm_time = storm.join().map_err(|_| anyhow::anyhow!("storm thread panicked"))??;
    agent.stop()?;
    drop(cgroup);
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies.get(((latencies.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN);
    let p99 = at(0.99);
    Ok(format!(
        "| OOM kill → counter on /metrics, {} kills during a {:.0} s exit storm | p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {timeouts} never seen | p99 ≤ 100 ms | {} |",
        latencies.len(),
        storm_time.as_secs_f64(),
        at(0.5),
        p99,
        at(1.0),
        if p99 <= 100.0 && timeouts == 0 { "ok" } else { "MISSED" }
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn report(args: &Args, rounds: &[Round]) {
    let ratio = median(rounds.iter().map(|r| r.with_agent.as_secs_f64() / r.base.as_secs_f64()).collect());
    let cpu = median(rounds.iter().map(|r| r.cpu_ns_per_event).collect());
    let rss = rounds.iter().map(|r| r.peak_rss_kib).max().unwrap_or(0) as f64 / 1024.0;
    let steady = rounds.iter().map(|r| r.rss_kib).max().unwrap_or(0) as f64 / 1024.0;
    let dropped: f64 = rounds.iter().map(|r| r.dropped).sum();
    let produced: f64 = rounds.iter().map(|r| r.produced).sum();
    let delivered: f64 = rounds.iter().map(|r| r.delivered).sum();
    let generated = u64::from(args.forks) * u64::from(args.rounds);
    let verdict = |ok: bool| if ok { "ok" } else { "MISSED" };
    println!();
    println!("| measure (median of {} rounds) | value | target | |", rounds.len());
    println!("|---|---|---|---|");
    println!("| exits generated / produced / delivered / dropped | {generated} / {produced} / {delivered} / {dropped} | 0 dropped | {} |", verdict(dropped == 0.0));
    println!("| storm wall time with / without agent | x{ratio:.3} ({:+.1} %) | ≤ +5 % | {} |", (ratio - 1.0) * 100.0, verdict(ratio <= 1.05));
    println!("| agent CPU per event | {:.2} µs ({:.2} s per million) | ≤ 2 µs | {} |", cpu / 1e3, cpu / 1e3, verdict(cpu <= 2000.0));
    println!("| agent peak RSS (VmHWM, start-up included) | {rss:.1} MiB | ≤ 32 MiB | {} |", verdict(rss <= 32.0));
    println!("| agent RSS after the storm | {steady:.1} MiB | | |");
}

/// Pipeline counters and CPU of the agent at one moment.
struct Sample {
    produced: f64,
    delivered: f64,
    dropped: f64,
    all_events: f64,
    cpu_ticks: u64,
}


fn sample(agent: &Agent) -> Result<Sample> {
    let text = agent.metrics()?;
    let m = |series: &str| crate::node::metric(&text, series).unwrap_or(0.0);
    let all_events = ["exit", "oom_kill", "cgroup_mkdir", "cgroup_rmdir", "cgroup_attach"]
        .iter()
        .map(|k| m(&format!("sandwatch_events_total{{kind=\"{k}\"}}")))
        .sum();
    Ok(Sample {
        produced: m("sandwatch_kernel_events_total{kind=\"exit\"}"),
        delivered: m("sandwatch_events_total{kind=\"exit\"}"),
        dropped: m("sandwatch_events_dropped_total{stage=\"kernel\"}")
            + m("sandwatch_events_dropped_total{stage=\"channel\"}"),
        all_events,
        cpu_ticks: agent.cpu_ticks(),
    })
}

/// Samples once the agent has caught up with what the kernel produced.
fn settled(agent: &Agent) -> Result<Sample> {
    let start = Instant::now();
    loop {
        let s = sample(agent)?;
        if s.delivered + s.dropped >= s.produced || start.elapsed() > Duration::from_secs(30) {
            return Ok(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
