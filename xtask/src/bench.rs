//! `cargo xtask bench`: sandwatch side by side with the peer and the
//! floor, in one run. An exit storm (fork + _exit on every core) is timed
//! in alternating rounds with nothing attached (baseline), with the agent,
//! with bpftrace printing every exit (the usual peer) and with the floor
//! (one tracepoint program doing one map update per exit, loaded by the
//! benchmark itself); a round with BPF run-time statistics gives each
//! one's kernel cost per hook. The same storms, without the peer, run in
//! VMs of cgroup v2 kernels (6.12 and 7.x), where sandwatch needs no
//! program at fork. Then the agent at scale (1 000 kubelet-shaped pods,
//! OOM kills in 600 of them), the OOM kill → /metrics latency, and the
//! /metrics render. Ratios and per-event costs are measured in this run;
//! no absolute time is a pass/fail criterion because these machines are
//! shared.

use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::{
    bpf::{self, Floor},
    node::{cpu_ns, start_agent, status_kib, storm, workers, Agent, Launch, OwnCgroup},
    util::cargo,
};

#[derive(clap::Args)]
pub struct Args {
    /// fork+exit pairs per storm.
    #[arg(long, default_value_t = 100_000)]
    forks: u32,
    /// Rounds; each runs one storm per setup (baseline, sandwatch, peer,
    /// floor), in turn.
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// Pods for the at-scale measurement (0 skips it).
    #[arg(long, default_value_t = 1000)]
    pods: u32,
    /// Only the exit storms (no at-scale, OOM latency or render parts).
    #[arg(long)]
    storms_only: bool,
    /// Only the endpoints under load (half-sent requests, unread scrapes,
    /// scrapes during an exit storm).
    #[arg(long)]
    endpoints_only: bool,
    /// Only memory and the node at scale, for each build.
    #[arg(long)]
    memory_only: bool,
    /// Setups besides the baseline, comma-separated: sandwatch, peer, floor.
    #[arg(long, value_delimiter = ',', default_value = "sandwatch,peer,floor")]
    setups: Vec<String>,
    /// Benchmark this agent binary instead of the image's static one (which
    /// `cargo xtask image` builds), e.g. target/release/sandwatch.
    #[arg(long)]
    pub agent: Option<PathBuf>,
    /// Kernels whose VMs run the storms too (`SUITE/PACKAGE`, cgroup v2,
    /// QEMU); default: bookworm's 6.12 and sid's 7.x.
    #[arg(long = "vm-kernel")]
    vm_kernels: Vec<String>,
    /// No storms in VMs.
    #[arg(long)]
    no_vm: bool,
    /// fork+exit pairs per storm in the VMs (emulated, so fewer).
    #[arg(long, default_value_t = 20_000)]
    vm_forks: u32,
    /// Extra flags for the agent, e.g. `-- --ring-buffer-bytes 1M`.
    #[arg(last = true)]
    agent_args: Vec<String>,
}

/// Inside a VM: the storms of one kernel, reported on the serial console.
#[derive(clap::Args)]
pub struct GuestArgs {
    #[arg(long)]
    forks: u32,
    #[arg(long)]
    rounds: u32,
    #[arg(long)]
    agent: PathBuf,
}

/// What runs during a storm.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Setup {
    Baseline,
    Sandwatch,
    /// bpftrace printing every exit: what people run on a node today.
    Peer,
    /// One program counting exits in a kernel map: the least a tracer can
    /// do, loaded by the benchmark ([`Floor`]).
    Floor,
}

impl Setup {
    const ALL: [Setup; 4] = [Setup::Baseline, Setup::Sandwatch, Setup::Peer, Setup::Floor];

    fn label(self) -> &'static str {
        match self {
            Setup::Baseline => "baseline (nothing attached)",
            Setup::Sandwatch => "sandwatch",
            Setup::Peer => "bpftrace printing every exit (peer)",
            Setup::Floor => "one program, one map update per exit (floor)",
        }
    }
}

const PEER_SCRIPT: &str = r#"tracepoint:sched:sched_process_exit { printf("%d %s\n", pid, comm); }"#;

/// A running tool: its process, and what to read from it.
enum Tool {
    None,
    Agent(Agent),
    Bpftrace { child: Child, reader: std::thread::JoinHandle<u64> },
    Floor(Floor),
}

impl Tool {
    fn start(setup: Setup, bin: &Path, agent_args: &[String]) -> Result<Self> {
        Ok(match setup {
            Setup::Baseline => Tool::None,
            Setup::Sandwatch => {
                let args: Vec<&str> = agent_args.iter().map(String::as_str).collect();
                // Emulated VMs load the programs slowly.
                Tool::Agent(Agent::start(Launch {
                    log_level: "warn",
                    ready_within: Duration::from_secs(180),
                    ..Launch::new(bin, &args)
                })?)
            }
            Setup::Peer => bpftrace(PEER_SCRIPT)?,
            Setup::Floor => Tool::Floor(Floor::attach()?),
        })
    }

    fn pid(&self) -> Option<u32> {
        match self {
            Tool::None | Tool::Floor(_) => None,
            Tool::Agent(a) => Some(a.pid()),
            Tool::Bpftrace { child, .. } => Some(child.id()),
        }
    }

    fn stop(self) -> Result<()> {
        match self {
            Tool::None | Tool::Floor(_) => Ok(()),
            Tool::Agent(a) => a.stop().map(|_| ()),
            Tool::Bpftrace { mut child, reader } => {
                // SAFETY: kill(2) of the bpftrace we started, by its pid.
                unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
                let _ = child.wait();
                let _ = reader.join();
                Ok(())
            }
        }
    }
}

/// bpftrace with `script`, once its probes are attached; its output is
/// read (and discarded) as a terminal or a log shipper would.
fn bpftrace(script: &str) -> Result<Tool> {
    let mut child = Command::new("bpftrace")
        .args(["-e", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("bpftrace (Debian package bpftrace, installed by cargo xtask setup)")?;
    let stdout = child.stdout.take().context("bpftrace stdout")?;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = 0u64;
        let mut ready = Some(ready_tx);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("Attaching") {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
            }
            lines += 1;
        }
        lines
    });
    if ready_rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        bail!("bpftrace did not attach within 60 s");
    }
    // The probes attach right after the banner.
    std::thread::sleep(Duration::from_millis(500));
    Ok(Tool::Bpftrace { child, reader })
}

/// One storm with one setup.
#[derive(Clone, Debug, Default)]
struct Storm {
    wall: Duration,
    /// The tool's CPU from the storm's start until 500 ms after its end.
    cpu_ns: f64,
    /// The tool's CPU when idle, right after, scaled to `window`.
    idle_cpu_ns: f64,
    window: Duration,
    peak_rss_kib: u64,
    /// sandwatch: exits the kernel streamed or counted; the floor: exits
    /// it counted (the whole node's).
    seen_exits: f64,
    /// sandwatch only: exits lost.
    lost: f64,
    /// Kernel ns per run of each of the tool's programs (stats rounds).
    ns_per_hook: BTreeMap<String, (f64, u64)>,
    /// sandwatch only: how its kernel programs name OOM victims
    /// (`sandwatch_kernel_path`).
    path: Option<String>,
}

/// Keeps `kernel.bpf_stats_enabled` at 1 while alive, then restores it.
struct BpfStats(String);

impl BpfStats {
    const SYSCTL: &'static str = "/proc/sys/kernel/bpf_stats_enabled";

    fn enable() -> Result<Self> {
        let before = std::fs::read_to_string(Self::SYSCTL).context("kernel.bpf_stats_enabled")?;
        std::fs::write(Self::SYSCTL, "1").context("cannot enable BPF run-time statistics")?;
        Ok(Self(before.trim().to_string()))
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::SYSCTL, &self.0);
    }
}

/// Sandwatch's exit accounting: (streamed or counted, lost).
fn exit_accounting(agent: &Agent) -> (f64, f64) {
    let Ok(text) = agent.metrics() else { return (0.0, 0.0) };
    let m = |s: &str| crate::node::metric(&text, s).unwrap_or(0.0);
    let seen = m("sandwatch_kernel_events_total{kind=\"exit\"}")
        + m("sandwatch_kernel_exits_unstreamed_total{reason=\"host\"}")
        + m("sandwatch_kernel_exits_unstreamed_total{reason=\"thread\"}");
    let lost = m("sandwatch_events_dropped_total{stage=\"kernel\"}")
        + m("sandwatch_events_dropped_total{stage=\"channel\"}")
        + m("sandwatch_events_dropped_total{stage=\"decode\"}");
    (seen, lost)
}

/// How the agent's programs name OOM victims, from its metrics.
fn kernel_path(agent: &Agent) -> Option<String> {
    let text = agent.metrics().ok()?;
    ["fork_table", "victim_task"]
        .into_iter()
        .find(|p| crate::node::metric(&text, &format!("sandwatch_kernel_path{{path=\"{p}\"}}")) == Some(1.0))
        .map(str::to_string)
}

fn run_storm(setup: Setup, bin: &Path, agent_args: &[String], forks: u32, with_stats: bool) -> Result<Storm> {
    let before_programs = bpf::programs();
    let tool = Tool::start(setup, bin, agent_args)?;
    let (seen0, lost0) = match &tool {
        Tool::Agent(a) => exit_accounting(a),
        Tool::Floor(f) => (f.count()? as f64, 0.0),
        _ => (0.0, 0.0),
    };
    let stats = if with_stats { Some(BpfStats::enable()?) } else { None };
    let programs0 = bpf::programs();
    let started = Instant::now();
    let cpu0 = tool.pid().map_or(0, cpu_ns);
    let wall = storm(forks, workers())?;
    // Let the tool catch up with what the storm produced.
    std::thread::sleep(Duration::from_millis(500));
    let cpu = tool.pid().map_or(0, cpu_ns).saturating_sub(cpu0);
    let window = started.elapsed();
    let programs1 = bpf::programs();
    drop(stats);
    // The same tool idle (up to 5 s), scaled to the storm's window: what it
    // spends whatever happens.
    let idle_window = window.min(Duration::from_secs(5));
    let idle0 = tool.pid().map_or(0, cpu_ns);
    std::thread::sleep(idle_window);
    let idle =
        tool.pid().map_or(0, cpu_ns).saturating_sub(idle0) as f64 * window.as_secs_f64() / idle_window.as_secs_f64();
    let mut result = Storm {
        wall,
        cpu_ns: cpu as f64,
        idle_cpu_ns: idle,
        window,
        peak_rss_kib: tool.pid().map_or(0, |p| status_kib(p, "VmHWM:")),
        ..Storm::default()
    };
    if let Tool::Agent(a) = &tool {
        let (seen, lost) = exit_accounting(a);
        (result.seen_exits, result.lost) = (seen - seen0, lost - lost0);
        result.path = kernel_path(a);
    }
    if let Tool::Floor(f) = &tool {
        result.seen_exits = f.count()? as f64 - seen0;
    }
    if with_stats {
        for (id, p1) in &programs1 {
            if before_programs.contains_key(id) {
                continue; // not this tool's
            }
            let (time0, cnt0) = programs0.get(id).map_or((0, 0), |p| (p.run_time_ns, p.run_cnt));
            let runs = p1.run_cnt.saturating_sub(cnt0);
            if runs > 0 {
                let ns = p1.run_time_ns.saturating_sub(time0) as f64 / runs as f64;
                result.ns_per_hook.insert(p1.name.clone(), (ns, runs));
            }
        }
    }
    tool.stop()?;
    Ok(result)
}

/// `glibc`: the glibc build too, for the memory part (the default bench
/// of the image's binary measures both builds users run).
pub fn run(bin: &Path, glibc: Option<&Path>, args: Args) -> Result<()> {
    if args.forks == 0 || args.rounds == 0 || args.vm_forks == 0 {
        bail!("--forks, --vm-forks and --rounds must be at least 1");
    }
    if args.endpoints_only {
        println!("{}", crate::bench_endpoints::run(bin, &args.agent_args)?);
        return Ok(());
    }
    let memory = |args: &Args| -> Result<()> {
        if args.pods > 0 {
            let mut builds = vec![(if glibc.is_some() { "musl (the image's)" } else { "this binary" }, bin)];
            if let Some(glibc) = glibc {
                builds.push(("glibc", glibc));
            }
            println!("{}", crate::bench_memory::run(&builds, &args.agent_args, args.pods)?);
        }
        Ok(())
    };
    if args.memory_only {
        return memory(&args);
    }
    let chosen: Vec<Setup> = Setup::ALL
        .into_iter()
        .filter(|s| match s {
            Setup::Baseline => true,
            Setup::Sandwatch => args.setups.iter().any(|x| x == "sandwatch"),
            Setup::Peer => args.setups.iter().any(|x| x == "peer"),
            Setup::Floor => args.setups.iter().any(|x| x == "floor"),
        })
        .collect();
    let shape = Shape { forks: args.forks, rounds: args.rounds };
    let (storms, costs) = storms(&chosen, bin, &args.agent_args, shape)?;
    let release = crate::util::output(Command::new("uname").arg("-r")).unwrap_or_default();
    println!("{}", report(&format!("this host, kernel {}", release.trim()), shape, &storms, &costs));
    if !args.no_vm {
        let kernels: Vec<String> = if args.vm_kernels.is_empty() {
            crate::vm::BENCH_KERNELS.iter().map(|k| k.to_string()).collect()
        } else {
            args.vm_kernels.clone()
        };
        let guest = Shape { forks: args.vm_forks, rounds: args.rounds };
        for kernel in &kernels {
            println!("{}", crate::vm::bench(kernel, bin, guest.forks, guest.rounds)?);
        }
    }
    if args.storms_only {
        return Ok(());
    }
    memory(&args)?;
    println!("{}", oom_latency(bin, &args)?);
    println!("{}", crate::bench_endpoints::run(bin, &args.agent_args)?);
    cargo(&["bench", "--package", "sandwatch", "--bench", "metrics_render"])?;
    Ok(())
}

/// Inside a VM: baseline, sandwatch and the floor (bpftrace is not there),
/// reported as on the host.
pub fn guest(args: &GuestArgs) -> Result<String> {
    if args.forks == 0 || args.rounds == 0 {
        bail!("--forks and --rounds must be at least 1");
    }
    let shape = Shape { forks: args.forks, rounds: args.rounds };
    let chosen = [Setup::Baseline, Setup::Sandwatch, Setup::Floor];
    let (storms, costs) = storms(&chosen, &args.agent, &[], shape)?;
    let release = crate::util::output(Command::new("uname").arg("-r")).unwrap_or_default();
    Ok(report(&format!("kernel {} in a VM (QEMU, emulated), cgroup v2", release.trim()), shape, &storms, &costs))
}

#[derive(Clone, Copy)]
struct Shape {
    forks: u32,
    rounds: u32,
}

type Storms = BTreeMap<Setup, Vec<Storm>>;

/// `shape.rounds` rounds of one storm per setup (`chosen[0]` the
/// baseline), then one round with BPF run-time statistics.
fn storms(
    chosen: &[Setup],
    bin: &Path,
    agent_args: &[String],
    shape: Shape,
) -> Result<(Storms, BTreeMap<Setup, Storm>)> {
    eprintln!(
        "bench: exit storms of {} fork+exit on {} workers, {} rounds of {} setups",
        shape.forks,
        workers(),
        shape.rounds,
        chosen.len()
    );
    let mut storms: Storms = BTreeMap::new();
    for r in 0..shape.rounds {
        // Each round in another order, so no setup always follows another.
        let mut order = chosen.to_vec();
        let n = order.len();
        order.rotate_left(r as usize % n);
        for setup in order {
            let s = run_storm(setup, bin, agent_args, shape.forks, false)?;
            eprintln!(
                "round {}: {:<46} {:.2} s, tool CPU {:.3} s (idle for as long: {:.3} s)",
                r + 1,
                setup.label(),
                s.wall.as_secs_f64(),
                s.cpu_ns / 1e9,
                s.idle_cpu_ns / 1e9
            );
            storms.entry(setup).or_default().push(s);
        }
    }
    let mut costs = BTreeMap::new();
    for setup in chosen.iter().filter(|s| **s != Setup::Baseline) {
        costs.insert(*setup, run_storm(*setup, bin, agent_args, shape.forks, true)?);
    }
    Ok((storms, costs))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Programs that run for every process: what a fork + exit costs. The
/// signal program runs at every exit too, for the SIGCHLD its parent is
/// sent (and returns at its first test).
fn per_process(name: &str) -> bool {
    name.starts_with("sched_process") || name == "signal_generate" || name == Floor::NAME
}

/// The storms' tables, in markdown, headed by `what`.
fn report(what: &str, shape: Shape, storms: &Storms, costs: &BTreeMap<Setup, Storm>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let forks = f64::from(shape.forks);
    let ratios = |setup: Setup| -> Vec<f64> {
        let baseline = storms.get(&Setup::Baseline).map(Vec::as_slice).unwrap_or_default();
        let runs = storms.get(&setup).map(Vec::as_slice).unwrap_or_default();
        runs.iter().zip(baseline).map(|(s, b)| s.wall.as_secs_f64() / b.wall.as_secs_f64()).collect()
    };
    let kernel_ns = |setup: Setup| -> f64 {
        costs
            .get(&setup)
            .map(|c| c.ns_per_hook.iter().filter(|(n, _)| per_process(n)).map(|(_, (ns, _))| ns).sum())
            .unwrap_or(f64::NAN)
    };
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Exit storm on {what}: {} × {} fork+exit, median of {} rounds (ratios to the baseline of the same round):",
        shape.rounds, shape.forks, shape.rounds
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| setup | wall time vs baseline | user-space CPU per exit | kernel ns per hook (fork + exit) | peak RSS |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    for setup in Setup::ALL.into_iter().filter(|s| storms.contains_key(s)) {
        let runs = storms.get(&setup).cloned().unwrap_or_default();
        let ratio = median(ratios(setup));
        let cpu = median(runs.iter().map(|s| s.cpu_ns / forks).collect());
        let rss = runs.iter().map(|s| s.peak_rss_kib).max().unwrap_or(0) as f64 / 1024.0;
        let kernel = costs.get(&setup).map(|c| {
            let total: f64 = c.ns_per_hook.values().map(|(ns, runs)| ns * *runs as f64).sum::<f64>() / forks;
            let each: Vec<String> = c.ns_per_hook.iter().map(|(name, (ns, _))| format!("{name} {ns:.0}")).collect();
            format!("{total:.0} ns ({})", each.join(", "))
        });
        let _ = match setup {
            Setup::Baseline => writeln!(out, "| {} | ×1 | – | – | – |", setup.label()),
            Setup::Floor => {
                writeln!(out, "| {} | ×{ratio:.3} | – | {} | – |", setup.label(), kernel.unwrap_or_else(|| "–".into()))
            }
            _ => writeln!(
                out,
                "| {} | ×{ratio:.3} | {:.2} µs | {} | {rss:.1} MiB |",
                setup.label(),
                cpu / 1e3,
                kernel.unwrap_or_else(|| "–".into())
            ),
        };
    }
    let ours = storms.get(&Setup::Sandwatch).cloned().unwrap_or_default();
    if ours.is_empty() {
        return out;
    }
    let seen: f64 = ours.iter().map(|s| s.seen_exits).sum();
    let lost: f64 = ours.iter().map(|s| s.lost).sum();
    let generated = forks * f64::from(shape.rounds);
    let ratio = median(ratios(Setup::Sandwatch));
    let floor_ratio = median(ratios(Setup::Floor));
    let cpu = median(ours.iter().map(|s| s.cpu_ns / forks).collect());
    let idle = median(ours.iter().map(|s| s.idle_cpu_ns / forks).collect());
    let idle_per_s = median(ours.iter().map(|s| s.idle_cpu_ns / s.window.as_secs_f64()).collect());
    let rss = ours.iter().map(|s| s.peak_rss_kib).max().unwrap_or(0) as f64 / 1024.0;
    let kernel = kernel_ns(Setup::Sandwatch);
    let floor = kernel_ns(Setup::Floor);
    let path = costs.get(&Setup::Sandwatch).and_then(|c| c.path.clone()).unwrap_or_else(|| "unknown".into());
    // The programs that ran for every process: fork and exit where the
    // task table is kept, exit alone where the victim's task names it.
    let hooks =
        costs.get(&Setup::Sandwatch).map_or(0, |c| c.ns_per_hook.keys().filter(|n| per_process(n)).count()).max(1)
            as f64;
    let verdict = |ok: bool| if ok { "ok" } else { "MISSED" };
    let _ = writeln!(out);
    let _ = writeln!(out, "| measure | value | target | |");
    let _ = writeln!(out, "|---|---|---|---|");
    let _ = writeln!(out, "| exits generated / seen by the kernel programs (streamed or counted) / lost | {generated} / {seen} / {lost} | 0 lost | {} |", verdict(lost == 0.0 && seen >= generated));
    let _ = writeln!(
        out,
        "| storm wall time with / without sandwatch (median) | ×{ratio:.3} ({:+.1} %) | ≤ +2 % | {} |",
        (ratio - 1.0) * 100.0,
        verdict(ratio <= 1.02)
    );
    if let Some(floor_runs) = storms.get(&Setup::Floor) {
        let counted: f64 = floor_runs.iter().map(|s| s.seen_exits).sum();
        let _ = writeln!(
            out,
            "| exits the floor counted (it ran on every one) | {counted} | ≥ {generated} | {} |",
            verdict(counted >= generated)
        );
    }
    if floor_ratio.is_finite() {
        let _ = writeln!(
            out,
            "| storm slowdown with sandwatch / with the floor | ×{ratio:.3} / ×{floor_ratio:.3} | within 2 % of the floor's | {} |",
            verdict(ratio / floor_ratio <= 1.02)
        );
    }
    let _ = writeln!(out, "| sandwatch CPU per exit (median; its whole CPU from the storm's start to 500 ms after) | {:.2} µs | ≤ 0.5 µs | {} |", cpu / 1e3, verdict(cpu <= 500.0));
    let _ = writeln!(
        out,
        "| sandwatch idle over as long a time, per exit of the storm (idle work: {:.1} ms CPU per s) | {:.2} µs | | |",
        idle_per_s / 1e6,
        idle / 1e3
    );
    let _ = writeln!(out, "| how OOM victims are named (`sandwatch_kernel_path`) | {path} | | |");
    if floor.is_finite() {
        let target = 1.1 * hooks * floor;
        let _ = writeln!(
            out,
            "| kernel ns per fork + exit (BPF run-time statistics) vs the floor's {floor:.0} ns | {kernel:.0} ns (×{:.2}) | ≤ 1.1 × {hooks} program{} = {target:.0} ns | {} |",
            kernel / floor,
            if hooks > 1.0 { "s" } else { "" },
            verdict(kernel <= target)
        );
    } else {
        let _ = writeln!(
            out,
            "| kernel ns per fork + exit (BPF run-time statistics) | {kernel:.0} ns | (no floor measured) | |"
        );
    }
    let _ = writeln!(
        out,
        "| sandwatch peak RSS (VmHWM, start-up included) | {rss:.1} MiB | ≤ 16 MiB | {} |",
        verdict(rss <= 16.0)
    );
    out
}

/// OOM kills made while an exit storm runs: time from the victim's reaping
/// (just after the kill) to the counter showing it on /metrics.
fn oom_latency(bin: &Path, args: &Args) -> Result<String> {
    const KILLS: usize = 40;
    let agent = start_agent(bin, &args.agent_args, None)?;
    let cgroup = OwnCgroup::create("bench")?;
    cgroup.set_memory_limit(cgroup.path(), 32 << 20)?;
    let forks = args.forks;
    let storm = std::thread::spawn(move || storm(forks, workers()));
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
                    cgroup.procs_file(cgroup.path()).display()
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
        "\n| OOM kill → counter on /metrics, {} kills during a {:.0} s exit storm | p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {timeouts} never seen | p99 ≤ 100 ms | {} |",
        latencies.len(),
        storm_time.as_secs_f64(),
        at(0.5),
        p99,
        at(1.0),
        if p99 <= 100.0 && timeouts == 0 { "ok" } else { "MISSED" }
    ))
}
