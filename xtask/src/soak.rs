//! `cargo xtask soak --minutes N`: the agent under everything at once for N
//! minutes — exit storms, OOM churn in kubelet-shaped pods (half of them
//! lose their sandbox to the OOM killer while starting), ring-buffer
//! overload while the agent is stalled (SIGSTOP), and agent restarts — then
//! checks what a long-running node agent must keep true.

use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::node::{sh, start_agent, storm, storm_in, workers, Agent, OwnCgroup};

#[derive(clap::Args)]
pub struct Args {
    /// How long to soak.
    #[arg(long, default_value_t = 2)]
    minutes: u32,
}

const HOG: &str = "if=/dev/zero of=/dev/null bs=256M count=1";
/// Each pod's kills are read off its series as soon as they are counted:
/// no hold at 0 (that is for Prometheus, which the soak does not run).
const NO_HOLD: [&str; 2] = ["--pod-series-hold", "0"];
const KINDS: [&str; 5] = ["exit", "oom_kill", "cgroup_mkdir", "cgroup_rmdir", "cgroup_attach"];

/// Binaries called `pause`: one that runs out of memory (a copy of dd),
/// one that idles (a copy of sleep).
struct Pauses {
    dir: PathBuf,
}

impl Pauses {
    fn create() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("sandwatch-soak-{}", std::process::id()));
        for (sub, src) in [("oom", "/bin/dd"), ("idle", "/bin/sleep")] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d)?;
            std::fs::copy(src, d.join("pause")).with_context(|| format!("copy {src}"))?;
            std::fs::set_permissions(d.join("pause"), std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(Self { dir })
    }

    fn oom(&self) -> String {
        format!("{}/oom/pause {HOG}", self.dir.display())
    }

    fn idle(&self) -> String {
        format!("{}/idle/pause 100000", self.dir.display())
    }
}

impl Drop for Pauses {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Creates pod `n` (burstable, cgroupfs names) with a sandbox container
/// running `sandbox` and an app container running `app`, each limited to
/// 32 MiB; returns the pod's cgroup path and UID.
fn pod(root: &mut OwnCgroup, n: u32, sandbox: &str, app: &str) -> Result<(String, String)> {
    let uid = format!("{n:08x}-0000-4000-8000-{:012x}", std::process::id());
    let pod_rel = format!("kubepods/burstable/pod{uid}");
    let pod_path = root.child(&pod_rel)?;
    for (i, script) in [sandbox, app].iter().enumerate() {
        let path = root.child(&format!("{pod_rel}/{}", format!("{:02x}", i + 1).repeat(32)))?;
        root.set_memory_limit(&path, 32 << 20)?;
        let procs = root.procs_file(&path);
        // Started and left alone: the cgroup's removal kills it.
        let _child = sh(&format!("echo $$ > {} && exec {script}", procs.display()))?;
        // The first task in the cgroup is its init: wait until it is there.
        for _ in 0..200 {
            if !std::fs::read_to_string(&procs).unwrap_or_default().trim().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok((pod_path, uid))
}

/// OOM kills the agent attributed to pod `uid` (all its series).
fn pod_oom_kills(agent: &Agent, uid: &str) -> f64 {
    let needle = format!("pod_uid=\"{uid}\"");
    agent
        .metrics()
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("sandwatch_pod_oom_kills_total{") && l.contains(&needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What the agent's registry holds: sandboxes, containers, live inits.
/// A real node runs other pods, so the soak asserts on what it changed
/// from the count it found at start, never on node-wide totals.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Registry {
    sandboxes: f64,
    containers: f64,
    processes: f64,
}

impl Registry {
    fn of(agent: &Agent) -> Self {
        Self {
            sandboxes: agent.value("sandwatch_tracked_sandboxes"),
            containers: agent.value("sandwatch_tracked_containers"),
            processes: agent.value("sandwatch_tracked_processes"),
        }
    }

    /// The same registry without the keeper pod (one sandbox, two
    /// containers, each with its init).
    fn without_keeper(self) -> Self {
        Self { sandboxes: self.sandboxes - 1.0, containers: self.containers - 2.0, processes: self.processes - 2.0 }
    }
}

fn wait_until(timeout: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

struct Soak<'a> {
    bin: &'a Path,
    logs: PathBuf,
    agent: Agent,
    starts: u32,
    /// Every agent's log, checked at the end.
    log_texts: Vec<String>,
}

impl Soak<'_> {
    fn restart(&mut self) -> Result<()> {
        self.starts += 1;
        let log = self.logs.join(format!("agent-{}.log", self.starts));
        let next = start_agent(self.bin, &NO_HOLD.map(String::from), Some(&log))?;
        let old = std::mem::replace(&mut self.agent, next);
        self.log_texts.push(old.stop()?);
        Ok(())
    }

    /// Stalls the agent and runs a storm big enough to overflow its ring
    /// buffer, in a pod's container (host exits are only counted in the
    /// kernel, never streamed); returns the kernel drops it caused.
    fn overload(&self, root: &mut OwnCgroup) -> Result<f64> {
        let dropped = |a: &Agent| a.value("sandwatch_events_dropped_total{stage=\"kernel\"}");
        let pod = format!("kubepods/besteffort/pod{:08x}-1111-4000-8000-{:012x}", self.starts, std::process::id());
        let container = root.child(&format!("{pod}/{}", "ee".repeat(32)))?;
        let before = dropped(&self.agent);
        self.agent.signal(libc::SIGSTOP);
        let result = storm_in(&root.procs_file(&container), 60_000, workers());
        self.agent.signal(libc::SIGCONT);
        let pod_path = format!("{}/{pod}", root.path());
        root.remove(&pod_path);
        result?;
        let mut after = before;
        wait_until(Duration::from_secs(10), || {
            after = dropped(&self.agent);
            after > before
        });
        Ok(after - before)
    }
}

impl Args {
    /// What `cargo xtask test` runs.
    pub fn ci() -> Self {
        Self { minutes: 2 }
    }
}

pub fn run(bin: &Path, args: &Args) -> Result<()> {
    if args.minutes == 0 {
        bail!("--minutes must be at least 1");
    }
    let total = Duration::from_secs(u64::from(args.minutes) * 60);
    let start = Instant::now();
    let pauses = Pauses::create()?;
    let mut root = OwnCgroup::create("soak")?;
    let logs = pauses.dir.join("logs");
    std::fs::create_dir_all(&logs)?;

    // A pod that lives through the whole soak: every restarted agent must
    // rediscover it, with both inits.
    let (keeper, _) = pod(&mut root, 0, &pauses.idle(), "sleep 100000")?;
    let agent = start_agent(bin, &NO_HOLD.map(String::from), Some(&logs.join("agent-0.log")))?;
    // What the first agent found: the keeper and whatever else this node
    // runs (its start-up scan has the keeper's two inits once it is up).
    let mut node = Registry::of(&agent);
    wait_until(Duration::from_secs(5), || {
        node = Registry::of(&agent);
        node.sandboxes >= 1.0 && node.processes >= 2.0
    });
    let mut soak = Soak { bin, logs, agent, starts: 0, log_texts: Vec::new() };

    // Restarts happen in the first half; the second half measures memory.
    let restarts_until = start + total / 2;
    let (mut cycle, mut pods, mut oom_expected, mut overload_drops) = (0u32, 0u32, 0f64, 0f64);
    let mut rss_base: Option<u64> = None;
    let mut ooms_counted = 0f64;
    while start.elapsed() < total {
        cycle += 1;
        storm(3_000, workers())?;

        // OOM churn: odd pods lose their sandbox while it starts.
        pods += 1;
        let sandbox_dies = pods % 2 == 1;
        let sandbox = if sandbox_dies { pauses.oom() } else { pauses.idle() };
        let expected = if sandbox_dies { 3.0 } else { 2.0 };
        let (dir, uid) = pod(&mut root, pods, &sandbox, &format!("sh -c 'dd {HOG}; dd {HOG}; exec sleep 100000'"))?;
        let mut now = 0.0;
        if !wait_until(Duration::from_secs(15), || {
            now = pod_oom_kills(&soak.agent, &uid);
            now >= expected
        }) {
            bail!("cycle {cycle}: expected {expected} OOM kills in pod {uid}, the agent counted {now}");
        }
        // A moment for any extra (wrong) count to show.
        std::thread::sleep(Duration::from_millis(200));
        ooms_counted += pod_oom_kills(&soak.agent, &uid);
        oom_expected += expected;
        root.remove(&dir);

        if cycle % 4 == 1 {
            overload_drops += soak.overload(&mut root)?;
        }
        if cycle % 5 == 0 && Instant::now() < restarts_until {
            soak.restart()?;
            // The keeper pod, with its sandbox and app inits, is found again.
            let mut now = Registry::of(&soak.agent);
            let found = wait_until(Duration::from_secs(5), || {
                now = Registry::of(&soak.agent);
                now == node
            });
            if !found {
                bail!(
                    "after restart {} the running pod was not rediscovered: the first agent found {node:?}, this one {now:?}:\n{}",
                    soak.starts,
                    soak.agent.metrics()?
                );
            }
        }
        if rss_base.is_none() && Instant::now() >= restarts_until {
            // Warm-up of the last agent includes an overload.
            overload_drops += soak.overload(&mut root)?;
            rss_base = Some(soak.agent.status_kib("VmRSS:"));
        }
        eprintln!("soak: cycle {cycle}, {:.0} s", start.elapsed().as_secs_f64());
    }

    // Teardown: only tombstones may remain.
    root.remove(&keeper);
    let agent = &soak.agent;
    let others = node.without_keeper();
    let mut now = Registry::of(agent);
    let emptied = wait_until(Duration::from_secs(10), || {
        now = Registry::of(agent);
        now == others
    });
    if !emptied {
        bail!("after teardown the registry holds {now:?}, the node's other pods are {others:?}:\n{}", agent.metrics()?);
    }
    // Loss accounting of the last agent, per kind, once it has caught up.
    let mut unbalanced = Vec::new();
    let balanced = wait_until(Duration::from_secs(15), || {
        let Ok(text) = agent.metrics() else { return false };
        let m = |s: String| crate::node::metric(&text, &s).unwrap_or(0.0);
        unbalanced = KINDS
            .iter()
            .filter_map(|k| {
                let produced = m(format!("sandwatch_kernel_events_total{{kind=\"{k}\"}}"));
                let delivered = m(format!("sandwatch_events_total{{kind=\"{k}\"}}"));
                let dropped = m(format!("sandwatch_kernel_events_dropped_total{{kind=\"{k}\"}}"));
                (produced != delivered + dropped).then(|| format!("{k}: {produced} != {delivered} + {dropped}"))
            })
            .collect();
        unbalanced.is_empty()
    });
    if !balanced {
        bail!("kernel produced != delivered + dropped: {unbalanced:?}");
    }
    let decode_drops = agent.value("sandwatch_events_dropped_total{stage=\"decode\"}");
    let channel_drops = agent.value("sandwatch_events_dropped_total{stage=\"channel\"}");
    let resyncs = agent.value("sandwatch_cgroup_resyncs_total");
    let recovered = agent.value("sandwatch_cgroup_resync_changes_total{change=\"created\"}")
        + agent.value("sandwatch_cgroup_resync_changes_total{change=\"removed\"}");
    let rss_end = agent.status_kib("VmRSS:");
    let rss_base = rss_base.unwrap_or(rss_end);
    let growth = (rss_end as f64 - rss_base as f64) / rss_base.max(1) as f64;

    let Soak { agent, starts, mut log_texts, .. } = soak;
    log_texts.push(agent.stop()?);
    let bad: Vec<&str> =
        log_texts.iter().flat_map(|t| t.lines()).filter(|l| l.contains("panicked") || l.contains(" ERROR ")).collect();

    println!();
    println!("| soak, {} min | value | check |", args.minutes);
    println!("|---|---|---|");
    println!("| cycles / pods / agent restarts | {cycle} / {pods} / {starts} | |");
    println!("| OOM kills expected / counted | {oom_expected} / {ooms_counted} | equal |");
    println!("| kernel drops caused by stalling the agent | {overload_drops} | > 0, all counted |");
    println!("| produced == delivered + dropped, per kind | {} | yes |", if balanced { "yes" } else { "no" });
    println!("| channel / decode drops | {channel_drops} / {decode_drops} | decode 0 |");
    println!("| cgroup tree re-reads after lost cgroup events (last agent) / changes applied | {resyncs} / {recovered} | registry back to the node's other pods after teardown |");
    println!(
        "| RSS after warm-up → end | {:.1} → {:.1} MiB ({:+.1} %) | < +10 % |",
        rss_base as f64 / 1024.0,
        rss_end as f64 / 1024.0,
        growth * 100.0
    );
    println!("| panic or error lines in agent logs | {} | 0 |", bad.len());
    if ooms_counted != oom_expected || overload_drops <= 0.0 || decode_drops > 0.0 || growth >= 0.10 || !bad.is_empty()
    {
        bail!("soak failed: {bad:?}");
    }
    Ok(())
}
