//! `cargo xtask bench`, memory and the node at scale, for each build users
//! run (the image's static musl binary and the glibc one): RSS at idle on
//! a node with one pod, and its peak through an exit storm inside that
//! pod, whose every exit the agent streams and decodes; then 1 000
//! kubelet-shaped pods (a sandbox and an
//! app container, a live process in each) running before the agent
//! starts: its ready time and steady RSS, then OOM kills in 600 of them —
//! counted, lost, the agent's reads and CPU per kill, RSS after — and the
//! /metrics scrape they leave. Targets: ≤ 12 MiB peak through the storm,
//! ≤ 16 MiB steady at 1 000 pods after the kills. Then the memory pressure
//! watch at 1 000 pods, against itself off in the same run: its CPU, read
//! syscalls and RSS a second with none under pressure, and with 50
//! containers held at about 92 % of their limits.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::node::{cpu_ns, get, metric, start_agent, status_kib, storm_in, workers, Agent, Pods};

/// Fork+exit pairs of the storm in a pod.
const STORM: u32 = 100_000;
/// Pods of the at-scale part that get OOM kills.
const KILLS: usize = 600;
const PEAK_TARGET_MIB: f64 = 12.0;
const STEADY_TARGET_MIB: f64 = 16.0;

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "MISSED"
    }
}

/// What the agent read (its read syscalls, from /proc/PID/io) and its CPU
/// (ns, every thread).
fn reads_and_cpu(pid: u32) -> (u64, u64) {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let reads = io.lines().find_map(|l| l.strip_prefix("syscr: ")?.trim().parse().ok()).unwrap_or(0);
    (reads, cpu_ns(pid))
}

/// One build's figures.
struct Figures {
    idle_kib: u64,
    storm_peak_kib: u64,
    storm_lost: f64,
    ready: Duration,
    tracked: f64,
    steady_kib: u64,
    counted: f64,
    lost: f64,
    reads_per_kill: f64,
    cpu_ms_per_kill: f64,
    after_kib: u64,
    scrape_p99_ms: f64,
    scrape_kb: usize,
    /// Series on /metrics with the pods, before and after the kills.
    series: (usize, usize),
}

/// The series in a scrape: its lines that are not comments.
fn series_in(text: &str) -> usize {
    text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count()
}

/// The agent idle beside one pod, then through a storm of exits in it.
fn storm(bin: &Path, agent_args: &[String]) -> Result<(u64, u64, f64)> {
    let pods = Pods::create(1)?;
    let agent = start_agent(bin, agent_args, None)?;
    std::thread::sleep(Duration::from_secs(3));
    let idle = status_kib(agent.pid(), "VmRSS:");
    let before = agent.metrics()?;
    let container = pods.unlimit(1)?;
    storm_in(&container.join("cgroup.procs"), STORM, workers())?;
    std::thread::sleep(Duration::from_secs(2));
    let peak = status_kib(agent.pid(), "VmHWM:");
    let after = agent.metrics()?;
    let m = |text: &str, s: &str| metric(text, s).unwrap_or(0.0);
    let lost = ["kernel", "channel"]
        .iter()
        .map(|stage| {
            let s = format!("sandwatch_events_dropped_total{{stage=\"{stage}\"}}");
            m(&after, &s) - m(&before, &s)
        })
        .sum();
    agent.stop()?;
    Ok((idle, peak, lost))
}

/// The agent started with the pods running, then OOM kills in `KILLS` of
/// them.
fn at_scale(bin: &Path, agent_args: &[String], pods: &Pods, count: u32, idle: (u64, u64, f64)) -> Result<Figures> {
    let (idle_kib, storm_peak_kib, storm_lost) = idle;
    let started = Instant::now();
    let agent = start_agent(bin, agent_args, None)?;
    let ready = started.elapsed();
    let tracked = agent.value("sandwatch_tracked_sandboxes");
    std::thread::sleep(Duration::from_secs(3));
    let steady_kib = status_kib(agent.pid(), "VmRSS:");
    let steady_series = series_in(&agent.metrics()?);
    let kills = (count as usize).min(KILLS);
    let (counted, lost, reads_per_kill, cpu_ms_per_kill) = kill(&agent, pods, kills)?;
    let text = agent.metrics()?;
    let mut scrapes = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        get(agent.addr, "/metrics").context("scrape")?;
        scrapes.push(t.elapsed().as_secs_f64() * 1e3);
    }
    scrapes.sort_by(f64::total_cmp);
    // Steady: what the agent holds between scrapes, as the figures before
    // the kills are taken seconds after start-up.
    std::thread::sleep(Duration::from_secs(2));
    let after_kib = status_kib(agent.pid(), "VmRSS:");
    agent.stop()?;
    Ok(Figures {
        idle_kib,
        storm_peak_kib,
        storm_lost,
        ready,
        tracked,
        steady_kib,
        counted,
        lost,
        reads_per_kill,
        cpu_ms_per_kill,
        after_kib,
        scrape_p99_ms: scrapes[((scrapes.len() - 1) as f64 * 0.99).round() as usize],
        scrape_kb: text.len() / 1000,
        series: (steady_series, series_in(&text)),
    })
}

/// A second process in `kills` pods' app containers allocates past the
/// container's 16 MiB; returns (counted, lost, reads per kill, CPU ms per
/// kill) of the agent over the kills and until they are counted.
fn kill(agent: &Agent, pods: &Pods, kills: usize) -> Result<(f64, f64, f64, f64)> {
    let series = "sandwatch_oom_kills_total{qos_class=\"burstable\",victim_role=\"container_child\"}";
    let before = agent.metrics()?;
    let oom0 = metric(&before, series).unwrap_or(0.0);
    let (reads0, cpu0) = reads_and_cpu(agent.pid());
    for dir in pods.containers.iter().skip(1).step_by(2).take(kills) {
        let status = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "echo $$ > {} && exec dd if=/dev/zero of=/dev/null bs=64M count=1",
                    dir.join("cgroup.procs").display()
                ),
            ])
            .stderr(Stdio::null())
            .status()?;
        if status.success() {
            bail!("a memory hog in {} was not OOM-killed", dir.display());
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while agent.value(series) - oom0 < kills as f64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    let (reads1, cpu1) = reads_and_cpu(agent.pid());
    let after = agent.metrics()?;
    let m = |t: &str, s: &str| metric(t, s).unwrap_or(0.0);
    let lost = ["kernel", "channel"]
        .iter()
        .map(|stage| {
            let s = format!("sandwatch_events_dropped_total{{stage=\"{stage}\"}}");
            m(&after, &s) - m(&before, &s)
        })
        .sum();
    let n = kills.max(1) as f64;
    Ok((m(&after, series) - oom0, lost, (reads1 - reads0) as f64 / n, (cpu1 - cpu0) as f64 / 1e6 / n))
}

/// Containers held under memory pressure in the pressure part.
const UNDER_PRESSURE: usize = 50;
/// How long each of its windows is measured.
const WINDOW: Duration = Duration::from_secs(20);

/// The agent over one window: CPU (user, and all) and read syscalls a
/// second, its reads of cgroups' limits a second, and at the end its RSS,
/// its open file descriptors, and the kernel notices it holds.
#[derive(Clone, Copy, Default)]
struct Cost {
    user_ms: f64,
    cpu_ms: f64,
    reads: f64,
    limit_reads: f64,
    rss_kib: u64,
    fds: usize,
    notices: f64,
}

/// The agent's reads of cgroups' memory limits so far, by every reason.
fn limit_reads(agent: &Agent) -> f64 {
    ["start", "kernel_notice", "runtime", "timer"]
        .iter()
        .map(|r| agent.value(&format!("sandwatch_memory_limit_reads_total{{reason=\"{r}\"}}")))
        .sum()
}

/// A process's user CPU (clock ticks of /proc/PID/stat, as ns).
fn user_ns(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    // Fields after the name: state is the first, utime the twelfth.
    let ticks: u64 = after.split_whitespace().nth(11).and_then(|t| t.parse().ok()).unwrap_or(0);
    ticks * 10_000_000
}

fn cost(agent: &Agent) -> Cost {
    let pid = agent.pid();
    let limits0 = limit_reads(agent);
    let (reads0, cpu0, user0) = (reads_and_cpu(pid).0, cpu_ns(pid), user_ns(pid));
    std::thread::sleep(WINDOW);
    let (reads1, cpu1, user1) = (reads_and_cpu(pid).0, cpu_ns(pid), user_ns(pid));
    let secs = WINDOW.as_secs_f64();
    Cost {
        user_ms: (user1 - user0) as f64 / 1e6 / secs,
        cpu_ms: (cpu1 - cpu0) as f64 / 1e6 / secs,
        reads: (reads1 - reads0) as f64 / secs,
        limit_reads: (limit_reads(agent) - limits0) / secs,
        rss_kib: status_kib(pid, "VmRSS:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0),
        notices: agent.value("sandwatch_memory_notices_total{result=\"registered\"}"),
    }
}

/// The pressure watch's cost at `pods`: off, on with none under pressure,
/// on with `UNDER_PRESSURE` app containers held at about 92 % of their
/// 16 MiB; and how many of those it warned of.
fn pressure(bin: &Path, agent_args: &[String], pods: &Pods) -> Result<([Cost; 3], f64)> {
    // Off, whatever the extra flags say about the watch.
    let mut args: Vec<String> = Vec::new();
    let mut rest = agent_args.iter();
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--pressure-screen-seconds" => drop(rest.next()),
            a if a.starts_with("--pressure-screen-seconds=") => {}
            _ => args.push(a.clone()),
        }
    }
    args.extend(["--pressure-screen-seconds".to_string(), "0".to_string()]);
    let agent = start_agent(bin, &args, None)?;
    // Past start-up, as the other windows are past their first screens.
    std::thread::sleep(Duration::from_secs(12));
    let off = cost(&agent);
    agent.stop()?;
    let agent = start_agent(bin, agent_args, None)?;
    std::thread::sleep(Duration::from_secs(12));
    let quiet = cost(&agent);
    // The last app containers' (the kills took the first ones').
    let apps: Vec<&Path> = pods.containers.iter().skip(1).step_by(2).map(|p| p.as_path()).collect();
    let held: Vec<&Path> = apps.iter().rev().take(UNDER_PRESSURE).copied().collect();
    let mut holders = Vec::new();
    for dir in &held {
        // 13 MiB of 1 KiB strings: about 14 MiB with awk's own, 92 % with
        // the container's shell and kernel memory.
        let script = format!(
            "echo $$ > {} && exec /bin/busybox awk 'BEGIN {{ s = sprintf(\"%01000d\", 0); \
             for (n = 0; n < 13 * 1024; n++) a[n] = s n; system(\"sleep 3600\") }}'",
            dir.join("cgroup.procs").display()
        );
        holders.push(Command::new("sh").args(["-c", &script]).stdin(Stdio::null()).stdout(Stdio::null()).spawn()?);
    }
    let near = "sandwatch_memory_pressure_containers{reason=\"near_limit\"}";
    let deadline = Instant::now() + Duration::from_secs(40);
    while agent.value(near) < UNDER_PRESSURE as f64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let warned = agent.value(near);
    let under = cost(&agent);
    agent.stop()?;
    for mut h in holders {
        // SAFETY: kill(2) of the holder this bench started, by its pid.
        unsafe { libc::kill(h.id() as i32, libc::SIGKILL) };
        let _ = h.wait();
    }
    Ok(([off, quiet, under], warned))
}

/// Growth rates (MiB a second) whose warning lead is measured, each from
/// 8 MiB towards a 64 MiB limit.
const RATES: [u32; 4] = [1, 2, 4, 8];

/// How long before its kill a growing container is warned, at each of
/// `RATES`, among `pods` (app containers no other part uses): one
/// container per rate, growing at once. (rate, seconds from half its
/// limit to its kill, lead in seconds; `None`: not warned.)
fn leads(bin: &Path, agent_args: &[String], pods: &Pods) -> Result<Vec<(u32, f64, Option<f64>)>> {
    let agent = start_agent(bin, agent_args, None)?;
    std::thread::sleep(Duration::from_secs(12));
    let apps: Vec<&Path> = pods.containers.iter().skip(1).step_by(2).map(|p| p.as_path()).collect();
    // Past the kills' pods and before the pressure part's.
    let picked: Vec<&Path> = apps.iter().skip(apps.len() * 7 / 10).take(RATES.len()).copied().collect();
    if picked.len() < RATES.len() {
        bail!("too few pods for the growth rates");
    }
    let mut growers = Vec::new();
    for (dir, rate) in picked.iter().zip(RATES) {
        // Raised to 64 MiB (v1: memory + swap first, which bounds it).
        for file in ["memory.memsw.limit_in_bytes", "memory.limit_in_bytes", "memory.max"] {
            let path = dir.join(file);
            if path.exists() {
                std::fs::write(&path, (64u64 << 20).to_string())
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
        let script = format!(
            "echo $$ > {} && exec /bin/busybox awk 'BEGIN {{ s = sprintf(\"%01000d\", 0); \
             for (n = 0; n < 8 * 1024; n++) a[n] = s n; \
             while (1) {{ for (i = 0; i < {rate} * 1024; i++) a[n++] = s n; system(\"sleep 1\") }} }}'",
            dir.join("cgroup.procs").display()
        );
        growers.push(Command::new("sh").args(["-c", &script]).stdin(Stdio::null()).stdout(Stdio::null()).spawn()?);
    }
    let ids: Vec<String> =
        picked.iter().map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()).collect();
    let deadline = Instant::now() + Duration::from_secs(150);
    let mut found: Vec<Option<Option<f64>>> = vec![None; RATES.len()];
    while found.iter().any(Option::is_none) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let Some((_, body)) = agent.events_get("/events?kind=oom_kill") else { continue };
        for line in body.lines() {
            let Ok(record) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            let Some(i) = ids.iter().position(|id| record["container_id"].as_str() == Some(id.as_str())) else {
                continue;
            };
            found[i].get_or_insert(record["warned_ms"].as_u64().map(|ms| ms as f64 / 1000.0));
        }
    }
    agent.stop()?;
    for mut g in growers {
        // SAFETY: kill(2) of the grower this bench started, by its pid.
        unsafe { libc::kill(g.id() as i32, libc::SIGKILL) };
        let _ = g.wait();
    }
    // From half its limit (32 MiB, from 8 at `rate` a second, about 7 %
    // more for awk's own) to its limit.
    Ok(RATES.iter().zip(found).map(|(&rate, lead)| (rate, 32.0 / (f64::from(rate) * 1.07), lead.flatten())).collect())
}

/// The section's report, each build a column.
pub fn run(builds: &[(&str, &Path)], agent_args: &[String], count: u32) -> Result<String> {
    let mut idle = Vec::new();
    for (name, bin) in builds {
        eprintln!("bench: memory through an exit storm, {name} build");
        idle.push(storm(bin, agent_args)?);
    }
    let pods = Pods::create(count.max(1))?;
    let mut figures = Vec::new();
    for ((name, bin), idle) in builds.iter().zip(idle) {
        eprintln!("bench: memory at scale, {name} build");
        figures.push(at_scale(bin, agent_args, &pods, count, idle)?);
    }
    let mut growth = Vec::new();
    if let Some((name, bin)) = builds.first() {
        eprintln!("bench: the warning's lead at growth rates {RATES:?} MiB/s, {name} build");
        growth = leads(bin, agent_args, &pods)?;
    }
    let mut pressures = Vec::new();
    for (name, bin) in builds {
        eprintln!("bench: the memory pressure watch at scale, {name} build");
        pressures.push(pressure(bin, agent_args, &pods)?);
    }
    drop(pods);
    let names: Vec<&str> = builds.iter().map(|(n, _)| *n).collect();
    let mut out = format!(
        "\nMemory and scale: a storm of {STORM} exits in a pod's container; then {count} pods ({} containers, one \
         live process each) running before the agent starts\n\n| measure | {} | target |\n|---|{}---|\n",
        count * 2,
        names.join(" | "),
        "---|".repeat(names.len())
    );
    let row = |out: &mut String, what: &str, cells: Vec<String>, target: &str| {
        out.push_str(&format!("| {what} | {} | {target} |\n", cells.join(" | ")));
    };
    let each = |f: &dyn Fn(&Figures) -> String| figures.iter().map(f).collect::<Vec<String>>();
    row(&mut out, "RSS idle, one pod", each(&|f| format!("{:.1} MiB", mib(f.idle_kib))), "");
    row(
        &mut out,
        "peak RSS through the storm (VmHWM, start-up included)",
        each(&|f| {
            format!(
                "{:.1} MiB, {} exits lost ({})",
                mib(f.storm_peak_kib),
                f.storm_lost,
                verdict(mib(f.storm_peak_kib) <= PEAK_TARGET_MIB)
            )
        }),
        &format!("≤ {PEAK_TARGET_MIB} MiB"),
    );
    row(
        &mut out,
        "ready after start with the pods",
        each(&|f| format!("{:.2} s ({} sandboxes)", f.ready.as_secs_f64(), f.tracked)),
        "",
    );
    row(&mut out, "steady RSS with the pods", each(&|f| format!("{:.1} MiB", mib(f.steady_kib))), "");
    row(
        &mut out,
        "series on /metrics with the pods, before / after the kills",
        each(&|f| format!("{} / {}", f.series.0, f.series.1)),
        "",
    );
    row(
        &mut out,
        &format!("OOM kills in {KILLS} pods"),
        each(&|f| format!("{} counted, {} lost", f.counted, f.lost)),
        "all counted, 0 lost",
    );
    row(
        &mut out,
        "agent reads / CPU per OOM kill",
        each(&|f| format!("{:.1} reads, {:.2} ms", f.reads_per_kill, f.cpu_ms_per_kill)),
        "",
    );
    row(
        &mut out,
        "steady RSS with the pods, after the kills and 50 scrapes (2 s later)",
        each(&|f| format!("{:.1} MiB ({})", mib(f.after_kib), verdict(mib(f.after_kib) <= STEADY_TARGET_MIB))),
        &format!("≤ {STEADY_TARGET_MIB} MiB"),
    );
    row(
        &mut out,
        "/metrics scrape after the kills, p99",
        each(&|f| format!("{:.2} ms ({} KB)", f.scrape_p99_ms, f.scrape_kb)),
        "≤ 3 ms",
    );
    out.push_str(&format!(
        "\nThe memory pressure watch at {count} pods: off (`--pressure-screen-seconds 0`), on with none under \
         pressure, on with {UNDER_PRESSURE} app containers held at about 92 % of their 16 MiB ({}s windows, \
         the same pods)\n\n| measure | {} |\n|---|{}\n",
        WINDOW.as_secs(),
        names.join(" | "),
        "---|".repeat(names.len())
    ));
    let per = |f: &dyn Fn(&Cost) -> f64, unit: &str, digits: usize| {
        pressures
            .iter()
            .map(|(c, _)| {
                let [off, quiet, under] = c.map(|x| f(&x));
                let ratio = |v: f64| if off > 0.0 { format!(" (×{:.2})", v / off) } else { String::new() };
                format!("{off:.digits$} → {quiet:.digits$}{} → {under:.digits$}{} {unit}", ratio(quiet), ratio(under))
            })
            .collect::<Vec<String>>()
    };
    let line = |out: &mut String, what: &str, cells: Vec<String>| {
        out.push_str(&format!("| {what} | {} |\n", cells.join(" | ")));
    };
    line(&mut out, "user CPU a second, off → none → 50 under pressure", per(&|c| c.user_ms, "ms", 2));
    line(&mut out, "all CPU a second (user + system)", per(&|c| c.cpu_ms, "ms", 2));
    line(&mut out, "read syscalls a second", per(&|c| c.reads, "", 0));
    line(&mut out, "reads of limits a second (limit tracking)", per(&|c| c.limit_reads, "", 2));
    line(&mut out, "open file descriptors at the end", per(&|c| c.fds as f64, "", 0));
    line(&mut out, "kernel notices registered (v1 thresholds, v2 PSI triggers)", per(&|c| c.notices, "", 0));
    line(&mut out, "RSS at the end of the window", per(&|c| mib(c.rss_kib), "MiB", 1));
    line(
        &mut out,
        "containers it warned of (near_limit)",
        pressures.iter().map(|(_, w)| format!("{w} of {UNDER_PRESSURE}")).collect(),
    );
    out.push_str(&format!(
        "\nThe warning's lead at {count} pods ({} build), a container growing from 8 MiB towards its 64 MiB \
         limit at each rate, all at once\n\n| growth | half its limit to its limit | warned before its kill |\n|---|---|---|\n",
        builds.first().map_or("", |(name, _)| *name)
    ));
    for (rate, half, lead) in &growth {
        let lead = lead.map_or("not warned".to_string(), |s| format!("{s:.1} s"));
        out.push_str(&format!("| {rate} MiB/s | {half:.0} s | {lead} |\n"));
    }
    Ok(out)
}
