//! The event stream as operators use it: `GET /events` from the real
//! agent while real OOM kills and a sandbox death happen in a
//! kubelet-shaped pod; `sandwatch events` read off a tmux screen as a
//! person would; bad queries, too many followers, a client that goes; and
//! 50 stuck followers during an exit storm, which must cost the pipeline
//! nothing while every record they missed is counted.

mod harness;

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    process::{Command, Stdio},
    time::{Duration, Instant, SystemTime},
};

use harness::{cid, http_get, metric, require_root, AgentProcess, KubePod, WireRecord as Record};

const UID: &str = "6e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b";
const SANDBOX: usize = 0;
const APP: usize = 1;
const HOG: &str = "if=/dev/zero of=/dev/null bs=256M count=1";

/// A client of `/events`: the response's status line and headers read,
/// then one record per line.
struct Follower {
    reader: BufReader<TcpStream>,
    status: u16,
    content_type: String,
    lines: std::collections::VecDeque<String>,
}

impl Follower {
    fn connect(addr: SocketAddr, query: &str) -> Self {
        Self::connect_with_buffer(addr, query, None)
    }

    /// With a tiny receive buffer, a client that does not read backs up
    /// into the agent at once.
    fn connect_with_buffer(addr: SocketAddr, query: &str, rcvbuf: Option<i32>) -> Self {
        let stream = match rcvbuf {
            None => TcpStream::connect(addr).expect("connect to the agent"),
            Some(bytes) => test_support::http::connect_small(addr, bytes).expect("connect"),
        };
        stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        let mut writer = stream.try_clone().expect("clone");
        write!(writer, "GET /events?{query} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").expect("request");
        let mut reader = BufReader::new(stream);
        let mut status_line = String::new();
        reader.read_line(&mut status_line).expect("status line");
        let status = status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let mut content_type = String::new();
        let mut chunked = false;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("header");
            if line.trim().is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-type:") {
                content_type = v.trim().to_string();
            }
            chunked |= lower.starts_with("transfer-encoding:") && lower.contains("chunked");
        }
        assert!(chunked || status != 200, "a stream of unknown length is chunked");
        Self { reader, status, content_type, lines: Default::default() }
    }

    /// The next line of the body (chunk framing removed); `None` at its end.
    fn line(&mut self) -> Option<String> {
        loop {
            if let Some(line) = self.lines.pop_front() {
                return Some(line);
            }
            let mut size = String::new();
            if self.reader.read_line(&mut size).ok()? == 0 {
                return None;
            }
            let n = usize::from_str_radix(size.trim(), 16).ok()?;
            if n == 0 {
                return None;
            }
            let mut chunk = vec![0; n + 2];
            self.reader.read_exact(&mut chunk).ok()?;
            let text = String::from_utf8_lossy(&chunk[..n]);
            self.lines.extend(text.lines().filter(|l| !l.trim().is_empty()).map(str::to_string));
        }
    }

    fn record(&mut self) -> Option<Record> {
        Some(Record::parse(&self.line()?))
    }

    /// Records until `done` says so (or the stream ends).
    fn until(&mut self, mut done: impl FnMut(&[Record]) -> bool) -> Vec<Record> {
        let mut got = Vec::new();
        while !done(&got) {
            match self.record() {
                Some(r) => got.push(r),
                None => break,
            }
        }
        got
    }

    /// The whole body of a response that is not a stream.
    fn rest(mut self) -> String {
        let mut text = String::new();
        let _ = self.reader.read_to_string(&mut text);
        text
    }
}

/// A pod whose sandbox (`pause`) and app container each wait to run out
/// of memory.
fn doomed_pod(name: &str) -> KubePod {
    let mut pod = KubePod::build(name, UID, false, 2);
    let pause = pod.pause_binary();
    pod.start_init(SANDBOX, &format!("exec {pause} {HOG}"));
    pod.start_init(APP, &format!("exec dd {HOG}"));
    pod
}

fn wait_metric(agent: &AgentProcess, series: &str, ok: impl Fn(f64) -> bool) -> String {
    let start = Instant::now();
    loop {
        let text = agent.metrics();
        if metric(&text, series).is_some_and(&ok) || start.elapsed() > Duration::from_secs(10) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_stream_carries_oom_kills_and_sandbox_deaths_and_keeps_them_for_newcomers() {
    require_root();
    let events = SocketAddr::from(([127, 0, 0, 1], harness::free_port()));
    let listen = events.to_string();
    let agent = AgentProcess::start(&[
        "--node-name",
        "node-under-test",
        "--max-event-subscribers",
        "2",
        "--events-listen",
        &listen,
    ]);
    // Not on the metrics listener: that one is on the pod network.
    let (status, body) = http_get(agent.addr, "/events").expect("GET /events on --listen");
    assert_eq!((status, body.trim()), (404, "/events is served on the events listener (--events-listen)"));
    let mut follower = Follower::connect(events, "follow=1");
    assert_eq!((follower.status, follower.content_type.as_str()), (200, "application/x-ndjson"));
    let pod = doomed_pod("stream");

    pod.trigger(APP);
    let app = pod.init_pid(APP);
    let got = follower.until(|rs| rs.iter().any(|r| r.kind() == "oom_kill" && r.pid() == Some(app)));
    let kill =
        got.iter().find(|r| r.kind() == "oom_kill" && r.pid() == Some(app)).unwrap_or_else(|| panic!("{got:#?}"));
    assert_eq!(kill.node(), "node-under-test");
    assert_eq!(kill.pod_uid(), Some(UID));
    assert_eq!(kill.container_id(), Some(cid(2).as_str()));
    assert_eq!(kill.victim_role(), Some("container_init"));
    assert_eq!(kill.qos_class(), Some("burstable"));
    assert_eq!(kill.comm(), Some("dd"));
    assert_eq!(kill.outcome(), Some("handled"));
    assert_eq!(kill.limit_bytes(), Some(32 << 20), "the container's limit");
    let rss = kill.rss_bytes().expect("this kernel's mark_victim carries rss");
    assert!(rss > 16 << 20 && rss <= 40 << 20, "dd had filled most of its 32 MiB: {rss}");
    let when = humantime::parse_rfc3339(kill.time()).expect("RFC 3339 time");
    let age = SystemTime::now().duration_since(when).unwrap_or_default();
    assert!(age < Duration::from_secs(30), "the kernel's time of the kill, not long ago: {}", kill.time());

    pod.trigger(SANDBOX);
    let sandbox = pod.init_pid(SANDBOX);
    let got = follower.until(|rs| rs.iter().any(|r| r.kind() == "sandbox_death"));
    let death = got.iter().find(|r| r.kind() == "sandbox_death").unwrap_or_else(|| panic!("{got:#?}"));
    assert_eq!((death.pid(), death.comm(), death.cause()), (Some(sandbox), Some("pause"), Some("oom")));
    assert_eq!(death.pod_uid(), Some(UID));
    assert_eq!(death.victim_role(), Some("sandbox"));
    let pause_kill =
        got.iter().find(|r| r.kind() == "oom_kill" && r.pid() == Some(sandbox)).unwrap_or_else(|| panic!("{got:#?}"));
    assert_eq!(pause_kill.victim_role(), Some("sandbox"));

    // A newcomer reads the history at once and the response ends.
    let mut history = Follower::connect(events, "");
    let old = history.until(|_| false);
    assert!(old.iter().any(|r| r.kind() == "oom_kill" && r.pid() == Some(app)), "{old:#?}");
    assert!(old.iter().any(|r| r.kind() == "sandbox_death" && r.pid() == Some(sandbox)), "{old:#?}");
    let mut deaths = Follower::connect(events, "kind=sandbox_death");
    let only = deaths.until(|_| false);
    assert!(!only.is_empty() && only.iter().all(|r| r.kind() == "sandbox_death"), "{only:#?}");

    // Bad queries: 400 and one line.
    for query in ["follow=maybe", "kind=nope", "since=1h"] {
        let bad = Follower::connect(events, query);
        assert_eq!(bad.status, 400, "{query}");
        let body = bad.rest();
        assert_eq!(body.lines().filter(|l| !l.trim().is_empty()).count(), 1, "{query}: {body:?}");
    }

    // Two followers at most here: the third is refused with one line; one
    // that goes away frees its slot at once.
    let second = Follower::connect(events, "follow=1");
    assert_eq!(second.status, 200);
    let third = Follower::connect(events, "follow=1");
    assert_eq!(third.status, 503);
    assert!(third.rest().contains("too many event subscribers"));
    let text = agent.metrics();
    assert_eq!(metric(&text, "sandwatch_event_subscribers"), Some(2.0), "{text}");
    assert_eq!(metric(&text, "sandwatch_event_subscribers_refused_total"), Some(1.0));
    drop(second);
    wait_metric(&agent, "sandwatch_event_subscribers", |v| v == 1.0);
    let again = Follower::connect(events, "follow=1");
    assert_eq!(again.status, 200, "the slot was freed");
    drop(pod);

    // Shutdown ends the followers' streams.
    let (status, log) = agent.terminate(Duration::from_secs(10));
    assert!(status.success(), "{log}");
    assert!(follower.until(|_| false).iter().all(|r| r.node() == "node-under-test"));
}

/// A tmux server of the test's own (its own socket), killed through that
/// socket on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(command: &str) -> Self {
        let socket = format!("sandwatch-test-{}", std::process::id());
        let out = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d", "-x", "120", "-y", "40", command])
            .env("TERM", "xterm-256color")
            .output()
            .expect("tmux (installed by cargo xtask setup)");
        assert!(out.status.success(), "tmux: {}", String::from_utf8_lossy(&out.stderr));
        Self { socket }
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux").args(["-L", &self.socket, "capture-pane", "-p"]).output().expect("capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if ok(&screen) {
                return screen;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "no {what} on the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).output();
    }
}

fn sandwatch(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sandwatch")).args(args).stdin(Stdio::null()).output().expect("sandwatch")
}

/// A tenant names its process `ESC[2J ESC[H PWNED` (a copy of dd under
/// that file name: the kernel takes comm from it) and has it OOM-killed
/// while an operator watches: the rows already on the screen stay there,
/// and the hostile one shows its name escaped. (Before names were
/// escaped, the screen was cleared: one line left where two rows had been.)
#[test]
fn a_hostile_process_name_cannot_drive_the_live_table() {
    use std::os::unix::fs::PermissionsExt as _;
    require_root();
    let agent = AgentProcess::start(&[]);
    let url = events_url(&agent);
    let tmux = Tmux::start(&format!("{} events --url {url}", env!("CARGO_BIN_EXE_sandwatch")));
    tmux.wait_for("header", |s| s.starts_with("TIME"));
    let mut pod = KubePod::build("hostile", UID, false, 3);
    let hostile_name = "\x1b[2J\x1b[HPWNED";
    let hostile = pod.tmp.join(hostile_name);
    std::fs::copy("/bin/dd", &hostile).expect("copy dd");
    std::fs::set_permissions(&hostile, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    pod.start_init(SANDBOX, "exec sleep 1000");
    pod.start_init(APP, &format!("exec dd {HOG}"));
    pod.start_init(2, &format!("exec '{}' {HOG}", hostile.display()));

    pod.trigger(APP);
    let app = pod.init_pid(APP).to_string();
    tmux.wait_for("the first OOM kill", |s| s.lines().any(|l| l.contains("oom_kill") && l.contains(&app)));
    pod.trigger(2);
    let tenant = pod.init_pid(2).to_string();
    let screen = tmux.wait_for("the hostile OOM kill", |s| s.lines().any(|l| l.contains(tenant.as_str())));
    eprintln!("the screen:\n{screen}");
    let rows: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(rows[0].starts_with("TIME"), "the header stays: {screen}");
    assert!(rows.iter().any(|l| l.contains("oom_kill") && l.contains(&app)), "the earlier row stays: {screen}");
    let row = rows.iter().find(|l| l.contains(tenant.as_str())).expect("the hostile row");
    assert!(row.contains("\\x1b[2J\\x1b["), "its name shown escaped: {row}");
    // The record carries the name as it is, escaped on the wire.
    let (_, body) = agent.events_get("/events").expect("GET /events");
    assert!(!body.chars().any(|c| c.is_control() && c != '\n'), "no raw control on the wire: {body:?}");
    let kill = body.lines().map(Record::parse).find(|r| r.pid().map(|p| p.to_string()) == Some(tenant.clone()));
    assert_eq!(kill.as_ref().and_then(Record::comm), Some(hostile_name), "{body}");
    // And in the agent's own log the name stays on its one line.
    let log = agent.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(tenant.as_str())).collect();
    assert!(!lines.is_empty() && lines.iter().all(|l| l.contains("\\x1b[2J")), "{log}");
    assert!(!log.chars().any(|c| c.is_control() && c != '\n'), "no raw control in the log: {log:?}");
    drop(tmux);
    drop(pod);
}

#[test]
fn sandwatch_events_shows_the_kills_on_a_terminal() {
    require_root();
    // Where the agent serves it by default, and where the client looks by
    // default: on the node, as root.
    let agent = AgentProcess::start(&["--events-listen", "unix:/run/sandwatch/events.sock"]);
    let socket = std::fs::metadata("/run/sandwatch/events.sock").expect("the default socket");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&socket.permissions()) & 0o777, 0o600, "root's only");
    let url = events_url(&agent);
    let tmux = Tmux::start(&format!("{} events", env!("CARGO_BIN_EXE_sandwatch")));
    let header = "TIME     KIND            NAMESPACE/POD          CONTAINER    ROLE            PID     COMM          RSS/LIMIT   DETAIL";
    tmux.wait_for("header", |s| s.lines().next() == Some(header));

    let pod = doomed_pod("screen");
    pod.trigger(APP);
    let app = pod.init_pid(APP).to_string();
    let victim = format!("victim   pid {app} dd: anon ");
    let screen = tmux.wait_for("OOM kill row and its post-mortem", |s| {
        s.lines().any(|l| l.contains("oom_kill") && l.contains(&app)) && s.contains(&victim)
    });
    // Under the row, as an operator reads it: whose limit, what filled it,
    // the victim's own memory.
    let lines: Vec<&str> = screen.lines().collect();
    let at = lines.iter().position(|l| l.contains("oom_kill") && l.contains(&app)).unwrap_or_default();
    let story: Vec<&str> = lines[at + 1..].iter().take(3).map(|l| l.trim()).collect();
    assert!(
        story.len() == 3
            && story[0].starts_with("limit    container limit 32.0M, used ")
            && story[0].ends_with("[memcg]")
            && story[1].starts_with("filled   mostly anon: anon ")
            && story[2].starts_with(victim.trim()),
        "the kill's post-mortem under its row:\n{screen}"
    );
    pod.trigger(SANDBOX);
    let sandbox = pod.init_pid(SANDBOX).to_string();
    let screen2 = tmux.wait_for("sandbox death row", |s| s.contains("sandbox_death"));
    eprintln!("the screen:\n{screen2}");
    let row = |screen: &str, needle: &str| -> Vec<String> {
        let line = screen.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no {needle} in\n{screen}"));
        line.split_whitespace().map(str::to_string).collect()
    };
    let uid = format!("uid:{}", &UID[..8]);
    let container = &cid(2)[..12];
    let kill = row(&screen, "oom_kill");
    assert_eq!(kill[1..7], ["oom_kill", uid.as_str(), container, "container_init", app.as_str(), "dd"], "{screen}");
    assert!(kill[7].ends_with("M/32.0M"), "RSS/LIMIT {:?}", kill[7]);
    let death = row(&screen2, "sandbox_death");
    assert_eq!(death[1..7], ["sandbox_death", uid.as_str(), &cid(1)[..12], "sandbox", sandbox.as_str(), "pause"]);
    assert_eq!(death.last().map(String::as_str), Some("cause=oom"));
    // The columns line up under the header.
    let line = screen2.lines().find(|l| l.contains("sandbox_death")).unwrap_or_default();
    for title in ["KIND", "NAMESPACE/POD", "ROLE", "PID", "COMM"] {
        let col = header.find(title).unwrap_or(0);
        assert!(
            line.as_bytes().get(col).is_some_and(|b| *b != b' ') && line.as_bytes()[col - 1] == b' ',
            "{title}:\n{header}\n{line}"
        );
    }
    drop(tmux);

    // Piped: the history, filtered, without colour; -o json is the records.
    let out = sandwatch(&["events", "--url", &url, "--no-follow", "--kind", "sandbox_death"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 2, "header and the death:\n{text}");
    assert!(!text.contains('\x1b'), "no colour off a terminal");
    let out = sandwatch(&["events", "--url", &url, "--no-follow", "-o", "json"]);
    let records: Vec<Record> = String::from_utf8_lossy(&out.stdout).lines().map(Record::parse).collect();
    assert!(records.iter().any(|r| r.kind() == "oom_kill" && r.pid().map(|p| p.to_string()) == Some(app.clone())));

    // A wrong filter is the agent's one line.
    let out = sandwatch(&["events", "--url", &url, "--kind", "oops"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!((out.status.code(), err.lines().count()), (Some(1), 1), "{err}");
    assert!(err.contains("refused the stream") && err.contains("not a record kind"), "{err}");
    drop(pod);
}

/// The `--url` of the agent's events listener.
fn events_url(agent: &AgentProcess) -> String {
    match agent.events_at() {
        test_support::agent::EventsAt::Unix(path) => format!("unix:{}", path.display()),
        test_support::agent::EventsAt::Tcp(addr) => format!("http://{addr}"),
        test_support::agent::EventsAt::Elsewhere => panic!("no events listener"),
    }
}

#[test]
fn sandwatch_events_without_an_agent_says_so_in_one_line() {
    let port = harness::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let out = sandwatch(&["events", "--url", &url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!((out.status.code(), err.lines().count()), (Some(1), 1), "{err}");
    assert!(err.contains("cannot reach the agent at") && err.contains(&url), "{err}");

    // Something that is not sandwatch: a web server answering HTML.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        for _ in 0..2 {
            let Ok((mut s, _)) = listener.accept() else { return };
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 13\r\n\r\n<html></html>");
        }
    });
    let url = format!("http://{addr}");
    for args in [vec!["events", "--url", &url], vec!["events", "--url", &url, "-o", "json", "--no-follow"]] {
        let out = sandwatch(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!((out.status.code(), err.lines().count()), (Some(1), 1), "{err}");
        assert!(err.contains("is not a sandwatch agent"), "{err}");
    }
    let _ = server.join();
    let out = sandwatch(&["events", "--url", "https://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn fifty_stuck_followers_cost_the_pipeline_nothing_and_their_losses_are_counted() {
    require_root();
    // No storm flag to flip records on its own later; stuck followers
    // stay (the write timeout has its own test).
    let events = SocketAddr::from(([127, 0, 0, 1], harness::free_port()));
    let listen = events.to_string();
    let agent = AgentProcess::start(&[
        "--max-event-subscribers",
        "64",
        "--oom-storm-threshold",
        "100000",
        "--events-listen",
        &listen,
        "--write-timeout-seconds",
        "3600",
    ]);
    let before = agent.metrics();
    let records_before = total(&before, "sandwatch_event_records_total{");
    // Small receive buffers, so that little sits in the kernel; still a
    // few records' worth (a kill's record is ~1 KiB): with room for fewer
    // than two, the reader's window update waits for the sender's
    // zero-window probe, backed off to tens of seconds while it was stuck.
    let followers: Vec<Follower> =
        (0..50).map(|_| Follower::connect_with_buffer(events, "follow=1", Some(8192))).collect();
    assert!(followers.iter().all(|f| f.status == 200));
    assert_eq!(metric(&agent.metrics(), "sandwatch_event_subscribers"), Some(50.0));

    // OOM kills in a kubelet-shaped pod's container, one after another,
    // while an exit storm runs; the followers read nothing meanwhile.
    let pod = KubePod::build("stuck-followers", UID, false, 2);
    pod.cg.set_memory_limit(&pod.paths[APP], 8 << 20);
    const KILLS: u32 = 600;
    let procs = pod.cg.procs_file(&pod.paths[APP]).display().to_string();
    let storm = std::thread::spawn(|| test_support::exit_storm(40_000, 2).expect("exit storm"));
    let started = Instant::now();
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "i=0; while [ $i -lt {KILLS} ]; do sh -c 'echo $$ > {procs}; exec dd if=/dev/zero of=/dev/null bs=32M count=1' 2>/dev/null; i=$((i+1)); done"
        ))
        .status()
        .expect("OOM loop");
    assert!(status.success());
    storm.join().expect("storm");
    eprintln!("{KILLS} OOM kills and 40 000 exits in {:.1} s", started.elapsed().as_secs_f64());
    assert_eq!(http_get(agent.addr, "/healthz").map(|(s, _)| s), Some(200));

    // Every kill published, then nothing more.
    let text = wait_metric(&agent, "sandwatch_event_records_total{kind=\"oom_kill\"}", |v| v >= f64::from(KILLS));
    std::thread::sleep(Duration::from_secs(2));
    let text2 = agent.metrics();
    let published = total(&text2, "sandwatch_event_records_total{") - records_before;
    assert_eq!(published, total(&text, "sandwatch_event_records_total{") - records_before, "quiet now");
    assert_eq!(metric(&text2, "sandwatch_event_records_total{kind=\"oom_kill\"}"), Some(f64::from(KILLS)), "{text2}");
    for stage in ["kernel", "channel", "decode"] {
        assert_eq!(
            metric(&text2, &format!("sandwatch_events_dropped_total{{stage=\"{stage}\"}}")),
            Some(0.0),
            "{stage}: {text2}"
        );
    }
    for kind in ["exit", "oom_kill"] {
        let produced = metric(&text2, &format!("sandwatch_kernel_events_total{{kind=\"{kind}\"}}"));
        let delivered = metric(&text2, &format!("sandwatch_events_total{{kind=\"{kind}\"}}"));
        assert_eq!(produced, delivered, "{kind}: the kernel's records all reached the agent");
    }
    let dropped = metric(&text2, "sandwatch_event_stream_dropped_total").unwrap_or(-1.0);
    assert!(dropped > 0.0, "stuck followers missed records: {text2}");
    eprintln!("50 stuck followers missed {dropped} records of {published} each published; pipeline drops 0");

    // Now they read: each gets, or is told it missed, every record.
    let mut missed_total = 0.0;
    for (i, mut f) in followers.into_iter().enumerate() {
        let (mut received, mut missed) = (0u64, 0u64);
        let got = f.until(|rs| {
            (received, missed) = (0, 0);
            for r in rs {
                match r.kind() {
                    "missed" => missed += r.count().unwrap_or(0),
                    _ => received += 1,
                }
            }
            received + missed >= published as u64
        });
        assert_eq!(
            received + missed,
            published as u64,
            "follower {i}: {received} read + {missed} missed of {published}: {:?}",
            got.last()
        );
        missed_total += missed as f64;
    }
    assert_eq!(missed_total, dropped, "the counter is the sum of what each missed");
    let (status, log) = agent.terminate(Duration::from_secs(10));
    assert!(status.success(), "{log}");
    drop(pod);
}

/// Sum of a family's samples whose line starts with `prefix`.
fn total(text: &str, prefix: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// Guards: a follower that stops reading keeping its connection (and its
/// slot) for ever. With `--write-timeout-seconds 2`, a follower whose
/// writes have been stuck for 2 s is disconnected, counted
/// (`reason="write_timeout"`), and its slot freed; one that reads stays.
/// (Before: it stayed connected, its slot taken, until it went itself.)
#[test]
fn a_follower_that_stops_reading_is_dropped_and_counted() {
    require_root();
    let events = SocketAddr::from(([127, 0, 0, 1], harness::free_port()));
    let listen = events.to_string();
    let agent = AgentProcess::start(&[
        "--events-listen",
        &listen,
        "--write-timeout-seconds",
        "2",
        "--oom-storm-threshold",
        "100000",
    ]);
    // More records than the follower's socket and the agent's send buffer
    // hold (~130 KiB): OOM kills in four containers at once.
    let pod = KubePod::build("write-timeout", UID, false, 5);
    const LOOPS: usize = 4;
    const KILLS_EACH: u32 = 120;
    let loops: Vec<_> = (1..=LOOPS)
        .map(|i| {
            pod.cg.set_memory_limit(&pod.paths[i], 8 << 20);
            let procs = pod.cg.procs_file(&pod.paths[i]).display().to_string();
            Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "i=0; while [ $i -lt {KILLS_EACH} ]; do sh -c 'echo $$ > {procs}; exec dd if=/dev/zero of=/dev/null bs=32M count=1' 2>/dev/null; i=$((i+1)); done"
                ))
                .spawn()
                .expect("OOM loop")
        })
        .collect();
    for mut l in loops {
        assert!(l.wait().expect("OOM loop").success());
    }
    let kills = f64::from(KILLS_EACH) * LOOPS as f64;
    wait_metric(&agent, "sandwatch_event_records_total{kind=\"oom_kill\"}", |v| v >= kills);

    let mut reader = Follower::connect(events, "follow=1");
    let stuck = Follower::connect_with_buffer(events, "follow=1", Some(2048));
    assert_eq!((reader.status, stuck.status), (200, 200));
    let read = reader.until(|rs| rs.len() as f64 >= kills);
    assert!(read.len() as f64 >= kills, "the reader reads the history: {}", read.len());
    let closed = "sandwatch_http_connections_closed_total{listener=\"events\",reason=\"write_timeout\"}";
    let text = wait_metric(&agent, closed, |v| v == 1.0);
    assert_eq!(metric(&text, closed), Some(1.0), "{text}");
    let text = wait_metric(&agent, "sandwatch_event_subscribers", |v| v == 1.0);
    assert_eq!(metric(&text, "sandwatch_event_subscribers"), Some(1.0), "the reader stays: {text}");
    // The stuck one finds its stream ended instead of waiting for ever.
    let started = Instant::now();
    let _ = stuck.rest();
    assert!(started.elapsed() < Duration::from_secs(20), "its connection was closed");
    drop(pod);
}
