//! `sandwatch events`: reads a running agent's `/events` stream and prints
//! one aligned row per record under a header, as `kubectl get -w` does —
//! or the raw JSON lines with `-o json`. A client only: it shares nothing
//! with the agent but the record types. It needs whatever reaches the
//! agent's events listener: on the node its root-only unix socket.

use std::{
    io::{IsTerminal as _, Write},
    process::ExitCode,
    time::Duration,
};

use http_body_util::{BodyExt as _, Empty};
use hyper::{body::Bytes, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;

use crate::{
    events::runtime::WorkloadKind,
    labels::Label,
    model::{dispatch::OutcomeKind, ExitReason},
    telemetry::{
        records::wire::{Body, Incoming, Kind, PodFields, PressureState},
        server::NDJSON,
    },
    watchdog::OomLimit,
};

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// Where the agent serves /events (its --events-listen): unix:PATH, on
    /// the node or in the agent's container (`kubectl exec`), or
    /// http://HOST:PORT where it is served over TCP.
    #[arg(long, env = "SANDWATCH_EVENTS_URL", default_value = crate::config::DEFAULT_EVENTS_LISTEN)]
    pub url: String,

    /// table (aligned rows), or json (the records as the agent sends them).
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Output,

    /// Only records of these kinds, comma-separated: oom_kill,
    /// sandbox_death, container_exit, late_exit, runtime_crash,
    /// runtime_restart, oom_storm_start, oom_storm_end, events_dropped,
    /// memory_pressure.
    #[arg(long, value_delimiter = ',')]
    pub kind: Vec<String>,

    /// Only records of pods in this namespace.
    #[arg(long)]
    pub namespace: Option<String>,

    /// Only records of pods with this name.
    #[arg(long)]
    pub pod: Option<String>,

    /// Print the agent's recent history and exit instead of following.
    #[arg(long)]
    pub no_follow: bool,

    /// Only containers that ended badly — an error code, a signal, an OOM
    /// kill, not a clean completion: crash loops as they happen.
    #[arg(long, conflicts_with = "pressure")]
    pub crashes: bool,

    /// Only memory pressure warnings (and their ends) and OOM kills: what
    /// was warned of, and what came of it.
    #[arg(long)]
    pub pressure: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// Why the client stopped: one line for the user.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Url(String),
    #[error("cannot reach the agent at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} is not a sandwatch agent: {why}")]
    NotSandwatch { url: String, why: String },
    #[error("the agent at {url} refused the stream: {message}")]
    Refused { url: String, message: String },
    #[error("the agent at {url} ended the stream (it stopped or restarted)")]
    Ended { url: String },
    #[error("lost the agent at {url}: {reason}")]
    Lost { url: String, reason: String },
    #[error("{url} sent a line longer than {MAX_LINE} bytes: no event record is that long")]
    LineTooLong { url: String },
}

/// The longest line the client buffers: a record is a few hundred bytes.
pub const MAX_LINE: usize = 64 * 1024;

/// Runs the client; exit 0 when done, 1 with one line otherwise.
pub fn main(args: &Args) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandwatch events: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal();
    let format = match args.output {
        Output::Json => Format::Json,
        Output::Table => Format::Table(Table { colour: terminal, width: terminal.then(terminal_width) }),
    };
    let mut out = stdout.lock();
    match runtime.block_on(run(args, &format, &mut out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = out.flush();
            eprintln!("sandwatch events: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How records are printed.
pub enum Format {
    Table(Table),
    Json,
}

/// Reads the stream and prints it until it ends (or stdout closes).
pub async fn run(args: &Args, format: &Format, out: &mut impl Write) -> Result<(), ClientError> {
    let target = Target::parse(&args.url)?;
    let url = args.url.clone();
    let unreachable = |reason: String| ClientError::Unreachable { url: url.clone(), reason };
    let mut sender = tokio::time::timeout(Duration::from_secs(5), target.connect())
        .await
        .map_err(|_| unreachable("no answer within 5 s".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
    let request = Request::get(target.events_path(args))
        .header(hyper::header::HOST, target.authority.as_str())
        .body(Empty::<Bytes>::new())
        .map_err(|e| ClientError::Url(format!("{url}: {e}")))?;
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .map_err(|_| unreachable("no answer within 10 s".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
    let status = response.status();
    let content_type =
        response.headers().get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let mut body = response.into_body();
    if status != StatusCode::OK || !content_type.starts_with(NDJSON) {
        // At most a line's worth of an answer that is not the stream.
        let first = match http_body_util::Limited::new(body, MAX_LINE).collect().await {
            Ok(all) => {
                let text = String::from_utf8_lossy(&all.to_bytes()).into_owned();
                crate::text::visible(text.lines().next().unwrap_or("").trim()).into_owned()
            }
            Err(_) => String::new(),
        };
        let ours = content_type.starts_with("text/plain");
        return Err(match status {
            StatusCode::BAD_REQUEST | StatusCode::SERVICE_UNAVAILABLE if ours => {
                ClientError::Refused { url, message: first }
            }
            StatusCode::OK => {
                ClientError::NotSandwatch { url, why: format!("/events answered {content_type:?}, not {NDJSON}") }
            }
            _ => ClientError::NotSandwatch { url, why: format!("/events answered HTTP {status}") },
        });
    }
    let mut printer = Printer { format, header_done: false };
    if printer.print_header(out).is_err() {
        return Ok(());
    }
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let frame = match body.frame().await {
            None => break,
            Some(Ok(frame)) => frame,
            Some(Err(e)) => return Err(ClientError::Lost { url, reason: e.to_string() }),
        };
        let Ok(data) = frame.into_data() else { continue };
        pending.extend_from_slice(&data);
        if pending.len() > MAX_LINE && !pending[..MAX_LINE + 1].contains(&b'\n') {
            return Err(ClientError::LineTooLong { url });
        }
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]);
            if line.trim().is_empty() {
                continue;
            }
            let record = Incoming::parse(&line).ok_or_else(|| ClientError::NotSandwatch {
                url: url.clone(),
                why: format!("it sent \"{}\", which is no event record", crate::text::visible(&cut(&line, 60))),
            })?;
            if args.crashes && !crashed(&record) {
                continue;
            }
            if printer.print(&record, &line, out).is_err() {
                // stdout closed (e.g. piped into head): done.
                return Ok(());
            }
        }
    }
    if args.no_follow {
        Ok(())
    } else {
        Err(ClientError::Ended { url })
    }
}

async fn handshake<S>(stream: S) -> Result<Sender, hyper::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Where the agent is: `host:port` and a path prefix (for proxies), or a
/// unix socket.
struct Target {
    authority: String,
    prefix: String,
    socket: Option<std::path::PathBuf>,
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

impl Target {
    async fn connect(&self) -> Result<Sender, Box<dyn std::error::Error + Send + Sync>> {
        Ok(match &self.socket {
            Some(path) => {
                handshake(tokio::net::UnixStream::connect(path).await.map_err(|e| {
                    if e.kind() == std::io::ErrorKind::PermissionDenied {
                        format!("{e} (the socket is root's: run as root, or through kubectl exec)")
                    } else {
                        e.to_string()
                    }
                })?)
                .await?
            }
            None => handshake(tokio::net::TcpStream::connect(self.authority.as_str()).await?).await?,
        })
    }

    fn parse(url: &str) -> Result<Self, ClientError> {
        if let Some(path) = url.strip_prefix("unix:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if !path.starts_with('/') {
                return Err(ClientError::Url(format!("{url:?}: a unix socket needs an absolute path")));
            }
            return Ok(Self { authority: "localhost".into(), prefix: String::new(), socket: Some(path.into()) });
        }
        let uri: Uri = url.parse().map_err(|_| {
            ClientError::Url(format!(
                "{url:?} is not a URL (e.g. unix:/run/sandwatch/events.sock, http://127.0.0.1:9433)"
            ))
        })?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => return Err(ClientError::Url(format!("{url}: only http:// is spoken, not {other}://"))),
            None => {
                return Err(ClientError::Url(format!(
                    "{url:?} has no scheme (e.g. unix:/run/sandwatch/events.sock, http://127.0.0.1:9433)"
                )))
            }
        }
        let host = uri.host().ok_or_else(|| ClientError::Url(format!("{url:?} names no host")))?;
        let port = uri.port_u16().unwrap_or(80);
        Ok(Self {
            authority: format!("{host}:{port}"),
            prefix: uri.path().trim_end_matches('/').to_string(),
            socket: None,
        })
    }

    fn events_path(&self, args: &Args) -> String {
        let mut query = vec![format!("follow={}", if args.no_follow { 0 } else { 1 })];
        if args.crashes {
            query.push("kind=container_exit".to_string());
        } else if args.pressure {
            query.push("kind=memory_pressure,oom_kill".to_string());
        } else if !args.kind.is_empty() {
            query.push(format!("kind={}", encode(&args.kind.join(","))));
        }
        if let Some(ns) = &args.namespace {
            query.push(format!("namespace={}", encode(ns)));
        }
        if let Some(pod) = &args.pod {
            query.push(format!("pod={}", encode(pod)));
        }
        format!("{}/events?{}", self.prefix, query.join("&"))
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b',' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

struct Printer<'a> {
    format: &'a Format,
    header_done: bool,
}

impl Printer<'_> {
    fn print_header(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if let (Format::Table(t), false) = (self.format, self.header_done) {
            self.header_done = true;
            writeln!(out, "{}", t.header())?;
            out.flush()?;
        }
        Ok(())
    }

    fn print(&mut self, record: &Incoming, line: &str, out: &mut impl Write) -> std::io::Result<()> {
        match self.format {
            Format::Json => writeln!(out, "{}", crate::text::json_escaped(line))?,
            Format::Table(t) => {
                self.print_header(out)?;
                writeln!(out, "{}", t.row(record))?;
                for line in t.story(record) {
                    writeln!(out, "{line}")?;
                }
            }
        }
        out.flush()
    }
}

/// Column titles and widths; the last column takes what is left.
const COLUMNS: [(&str, usize); 9] = [
    ("TIME", 8),
    ("KIND", 15),
    ("NAMESPACE/POD", 22),
    ("CONTAINER", 12),
    ("ROLE", 15),
    ("PID", 7),
    ("COMM", 13),
    ("RSS/LIMIT", 11),
    ("DETAIL", 0),
];

/// The table: on a terminal, coloured kinds and cells cut to their
/// columns (and the row to the terminal's width); elsewhere whole values.
pub struct Table {
    pub colour: bool,
    pub width: Option<usize>,
}

impl Table {
    pub fn header(&self) -> String {
        let cells: Vec<String> = COLUMNS.iter().map(|(title, _)| title.to_string()).collect();
        self.join(&cells, None)
    }

    pub fn row(&self, incoming: &Incoming) -> String {
        let (time, kind, body) = match incoming {
            Incoming::Known(r) => (r.time.as_str(), r.body.kind().into(), Some(&r.body)),
            Incoming::Newer { time, kind, .. } => (time.as_str(), kind.as_str(), None),
        };
        let dash = || "-".to_string();
        let row = body.map(row_of).unwrap_or_default();
        let cells = vec![
            time.get(11..19).unwrap_or(time).to_string(),
            kind.to_string(),
            row.pod.map_or_else(dash, pod_name),
            row.pod.map_or_else(dash, container_name),
            row.role.map_or_else(dash, str::to_string),
            row.pid.map_or_else(dash, |p| p.to_string()),
            row.comm.map_or_else(dash, str::to_string),
            match row.memory {
                (None, None) => dash(),
                (rss, limit) => format!("{}/{}", rss.map_or_else(dash, human), limit.map_or_else(dash, human)),
            },
            if row.detail.is_empty() { dash() } else { row.detail },
        ];
        self.join(&cells, body.and_then(|b| colour(b.kind())))
    }

    /// An OOM kill's post-mortem, under its row: whose limit fired and what
    /// filled it, the victim's own memory, who asked for the page, what
    /// else the pod held. Names escaped like the row's; cut to the width.
    pub fn story(&self, incoming: &Incoming) -> Vec<String> {
        let Incoming::Known(record) = incoming else { return Vec::new() };
        let Body::OomKill(r) = &record.body else { return Vec::new() };
        let size = |b: Option<u64>| b.map_or_else(|| "-".to_string(), human);
        let mut lines = Vec::new();
        let limit = r.limit.unwrap_or(OomLimit::Unknown);
        let mut fired = match (r.usage_bytes, r.limit_bytes) {
            _ if limit == OomLimit::Unknown => {
                format!("unknown ({})", r.limit_unknown.map_or("not decided", Label::label))
            }
            (Some(usage), Some(bytes)) => format!("{} limit {}, used {}", limit.label(), human(bytes), human(usage)),
            _ => format!("{} limit", limit.label()),
        };
        if let Some(c) = r.constraint {
            fired.push_str(&format!(" [{}]", c.label()));
        }
        lines.push(("limit", fired));
        if let Some(cause) = r.cause.map(Label::label) {
            let read =
                r.memory_read_after_us.map_or_else(String::new, |us| format!(", read {:.1} ms after", us as f64 / 1e3));
            lines.push((
                "filled",
                format!(
                    "mostly {cause}: anon {} page_cache {} shmem {} kernel {}{read}",
                    size(r.anon_bytes),
                    size(r.page_cache_bytes),
                    size(r.shmem_bytes),
                    size(r.kernel_bytes)
                ),
            ));
        }
        let adj = r.oom_score_adj.map_or_else(String::new, |a| format!(", oom_score_adj {a}"));
        lines.push((
            "victim",
            format!(
                "pid {} {}: anon {} file {} shmem {}{adj}",
                r.pid,
                r.comm.as_deref().unwrap_or("?"),
                size(r.victim_anon_bytes),
                size(r.victim_file_bytes),
                size(r.victim_shmem_bytes)
            ),
        ));
        if let Some(pid) = r.trigger_pid.filter(|p| *p != r.pid) {
            let container = match (&r.trigger_container, &r.trigger_container_id) {
                (Some(name), _) => format!(" in container {name}"),
                (None, Some(id)) => format!(" in container {}", cut_plain(id, 12)),
                (None, None) => String::new(),
            };
            lines.push(("asked", format!("pid {pid} {}{container}", r.trigger_comm.as_deref().unwrap_or("?"))));
        }
        lines.push((
            "warned",
            match r.warned_ms {
                Some(ms) => {
                    let reasons: Vec<&str> = r.warned_reasons.iter().map(|w| w.label()).collect();
                    format!("{:.1} s before: {}", ms as f64 / 1000.0, reasons.join(", "))
                }
                None => "no: no memory pressure was seen before it".to_string(),
            },
        ));
        if !r.pod_containers.is_empty() {
            let held: Vec<String> = r
                .pod_containers
                .iter()
                .map(|c| {
                    let name = c.container.clone().unwrap_or_else(|| cut_plain(&c.container_id, 12).to_string());
                    format!("{name} {}", human(c.usage_bytes))
                })
                .collect();
            lines.push(("pod held", held.join(", ")));
        }
        let indent = " ".repeat(COLUMNS[0].1 + 1);
        lines
            .into_iter()
            .map(|(what, text)| {
                let line = format!("{indent}{what:<9}{}", crate::text::visible(&text));
                match self.width {
                    Some(total) => cut(&line, total),
                    None => line,
                }
            })
            .collect()
    }

    /// The cells in their columns; `colour` (SGR) paints the kind's.
    fn join(&self, cells: &[String], colour: Option<&str>) -> String {
        let mut line = String::new();
        // Where the KIND cell is, to colour it once the line is cut.
        let mut kind_cell = 0..0;
        for (i, (cell, (_, width))) in cells.iter().zip(COLUMNS).enumerate() {
            if i > 0 {
                line.push(' ');
            }
            // Names are a tenant's (and the server's): shown, never obeyed.
            let cell = crate::text::visible(if cell.is_empty() { "-" } else { cell.as_str() });
            let last = i + 1 == COLUMNS.len();
            let text = match self.width {
                Some(_) if !last => cut(&cell, width),
                _ => cell.to_string(),
            };
            let start = line.len();
            line.push_str(&text);
            if i == 1 {
                kind_cell = start..line.len();
            }
            if !last {
                line.extend(std::iter::repeat_n(' ', width.saturating_sub(text.chars().count())));
            }
        }
        let mut line = match self.width {
            Some(total) => cut(line.trim_end(), total),
            None => line.trim_end().to_string(),
        };
        if let (true, Some(code), Some(kind)) = (self.colour, colour, cells.get(1)) {
            if line.get(kind_cell.clone()) == Some(kind.as_str()) {
                line.replace_range(kind_cell, &format!("\x1b[{code}m{kind}\x1b[0m"));
            }
        }
        line
    }
}

/// What one record puts in the table's columns.
#[derive(Default)]
struct Row<'a> {
    pod: Option<&'a PodFields>,
    role: Option<&'a str>,
    pid: Option<u32>,
    comm: Option<&'a str>,
    memory: (Option<u64>, Option<u64>),
    /// What the fixed columns do not say.
    detail: String,
}

fn row_of(body: &Body) -> Row<'_> {
    match body {
        Body::OomKill(r) => {
            let mut detail = Vec::new();
            if let Some(limit) = r.limit {
                detail.push(format!("limit={}", limit.label()));
            }
            if let Some(pid) = r.trigger_pid.filter(|p| *p != r.pid) {
                detail.push(format!("by {pid} {}", r.trigger_comm.as_deref().unwrap_or("")).trim_end().to_string());
            }
            if r.outcome != OutcomeKind::Handled {
                detail.push(r.outcome.label().to_string());
            }
            Row {
                pod: Some(&r.pod),
                role: Some(r.victim_role.label()),
                pid: Some(r.pid),
                comm: r.comm.as_deref(),
                memory: (r.rss_bytes, r.limit_bytes),
                detail: with_workload(detail.join(", "), &r.pod),
            }
        }
        Body::SandboxDeath(r) => Row {
            pod: Some(&r.pod),
            role: Some(r.victim_role.label()),
            pid: Some(r.pid),
            comm: r.comm.as_deref(),
            detail: format!("cause={}", r.cause.label()),
            ..Row::default()
        },
        Body::ContainerExit(r) => {
            let how = match (r.exit_code, r.signal) {
                (Some(code), _) => format!(" code={code}"),
                (_, Some(signo)) => format!(" signal={signo}{}", if r.core_dumped { " (core)" } else { "" }),
                _ => String::new(),
            };
            Row {
                pod: Some(&r.pod),
                role: Some(r.victim_role.label()),
                pid: Some(r.pid),
                comm: r.comm.as_deref(),
                detail: with_workload(format!("{}{how}", r.reason.label()), &r.pod),
                ..Row::default()
            }
        }
        Body::LateExit(r) => Row {
            pod: Some(&r.pod),
            role: Some(r.victim_role.label()),
            pid: r.pid,
            comm: r.comm.as_deref(),
            detail: format!("{} ({})", r.reason.label(), r.source.label()),
            ..Row::default()
        },
        Body::RuntimeCrash(r) | Body::RuntimeRestart(r) => Row {
            pid: Some(r.pid),
            detail: [Some(r.runtime.as_str()), r.reason.map(Label::label)]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", "),
            ..Row::default()
        },
        Body::OomStormStart(r) | Body::OomStormEnd(r) => {
            Row { detail: format!("{} OOM events in {}s", r.count, r.window_seconds), ..Row::default() }
        }
        Body::EventsDropped(r) => Row { detail: format!("{} lost at {}", r.count, r.stage.label()), ..Row::default() },
        Body::MemoryPressure(r) => {
            let mut detail = vec![match (r.state, r.ended, r.lasted_ms) {
                (PressureState::Start, ..) => format!("{} start", r.reason.label()),
                (PressureState::End, ended, lasted) => format!(
                    "{} end ({}) after {:.1}s",
                    r.reason.label(),
                    ended.map_or("eased", Label::label),
                    lasted.unwrap_or(0) as f64 / 1000.0
                ),
            }];
            if let Some(p) = r.unreclaimable_permille {
                detail.push(format!("{:.0}%", f64::from(p) / 10.0));
            }
            if let Some(secs) = r.seconds_to_limit.filter(|_| r.state == PressureState::Start) {
                detail.push(format!("limit in {secs}s"));
            }
            if let Some(some) = r.psi_some_permille.filter(|p| *p > 0) {
                detail.push(format!("psi {:.1}%", f64::from(some) / 10.0));
            }
            Row {
                pod: Some(&r.pod),
                memory: (Some(r.unreclaimable_bytes), r.limit_bytes),
                detail: with_workload(detail.join(", "), &r.pod),
                ..Row::default()
            }
        }
        Body::Missed(r) => {
            Row { detail: format!("{} records missed: this client read too slowly", r.count), ..Row::default() }
        }
    }
}

/// A container that ended badly (`--crashes`).
fn crashed(record: &Incoming) -> bool {
    matches!(record, Incoming::Known(r) if matches!(&r.body, Body::ContainerExit(e) if e.reason != ExitReason::Completed))
}

/// `detail`, and the pod's workload where it is not the pod itself.
fn with_workload(detail: String, p: &PodFields) -> String {
    let workload = match (&p.workload_kind, &p.workload) {
        (Some(kind), Some(name)) if kind != WorkloadKind::Pod.label() => format!("{kind}/{name}"),
        _ => return detail,
    };
    if detail.is_empty() {
        workload
    } else {
        format!("{detail}, {workload}")
    }
}

fn pod_name(p: &PodFields) -> String {
    match (&p.namespace, &p.pod, &p.pod_uid) {
        (Some(ns), Some(pod), _) => format!("{ns}/{pod}"),
        (None, Some(pod), _) => pod.clone(),
        (_, None, Some(uid)) => format!("uid:{}", cut_plain(uid, 8)),
        _ => "-".into(),
    }
}

fn container_name(p: &PodFields) -> String {
    match (&p.container, &p.container_id) {
        (Some(c), _) => c.clone(),
        (None, Some(id)) => cut_plain(id, 12).to_string(),
        _ => "-".into(),
    }
}

/// The colour (SGR) of a kind on a terminal: red a kill, bold red a death,
/// a crash or a storm, yellow what was lost or late, green a recovery,
/// magenta a warning; a container's exit plain.
fn colour(kind: Kind) -> Option<&'static str> {
    Some(match kind {
        Kind::OomKill => "31",
        Kind::SandboxDeath | Kind::RuntimeCrash | Kind::OomStormStart => "1;31",
        Kind::LateExit | Kind::EventsDropped | Kind::Missed => "33",
        Kind::RuntimeRestart | Kind::OomStormEnd => "32",
        Kind::MemoryPressure => "35",
        Kind::ContainerExit => return None,
    })
}

/// `text` in at most `room` characters, the cut marked with `…`.
fn cut(text: &str, room: usize) -> String {
    if text.chars().count() <= room {
        return text.to_string();
    }
    if room == 0 {
        return String::new();
    }
    let mut s: String = text.chars().take(room - 1).collect();
    s.push('…');
    s
}

fn cut_plain(text: &str, n: usize) -> &str {
    text.char_indices().nth(n).map_or(text, |(i, _)| &text[..i])
}

/// Sizes as people read them: 512K, 31.9M, 2.0G.
fn human(bytes: u64) -> String {
    const K: f64 = 1024.0;
    let b = bytes as f64;
    if b >= K * K * K {
        format!("{:.1}G", b / (K * K * K))
    } else if b >= K * K {
        format!("{:.1}M", b / (K * K))
    } else if b >= K {
        format!("{:.0}K", b / K)
    } else {
        format!("{bytes}B")
    }
}

/// Columns of the terminal on stdout (COLUMNS, else 120).
fn terminal_width() -> usize {
    let mut size = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ fills the winsize we own.
    if unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0 && size.ws_col > 0 {
        return usize::from(size.ws_col);
    }
    std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).unwrap_or(120)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::{
        model::{DeathCause, LateReason, Source, TaskRole},
        telemetry::records::wire::{
            tests::bare_kill, LateExitRecord, OomKillRecord, Record, SandboxDeathRecord, StormRecord,
        },
        watchdog::{explain::OomCause, oom_limit::UnknownLimit, pressure::PressureReason, OomConstraint},
    };

    fn shop_web() -> PodFields {
        PodFields {
            namespace: Some("shop".into()),
            pod: Some("web".into()),
            container: Some("hog".into()),
            ..PodFields::default()
        }
    }

    fn oom_record() -> OomKillRecord {
        OomKillRecord {
            pod: shop_web(),
            comm: Some("dd".into()),
            trigger_pid: Some(4312),
            rss_bytes: Some(33_030_144),
            limit_bytes: Some(32 << 20),
            ..bare_kill(TaskRole::ContainerChild, 4312)
        }
    }

    fn known(body: Body) -> Incoming {
        Incoming::Known(Box::new(Record { time: "2026-12-01T08:03:46.123Z".into(), node: "n".into(), body }))
    }

    fn oom() -> Incoming {
        known(Body::OomKill(Box::new(oom_record())))
    }

    fn death(namespace: &str) -> Incoming {
        known(Body::SandboxDeath(SandboxDeathRecord {
            pod: PodFields { namespace: Some(namespace.into()), ..shop_web() },
            victim_role: TaskRole::Sandbox,
            pid: 4312,
            comm: Some("pause".into()),
            cause: DeathCause::Oom,
        }))
    }

    fn detail(body: Body) -> String {
        row_of(&body).detail
    }

    #[test]
    fn rows_line_up_under_the_header() {
        let t = Table { colour: false, width: Some(120) };
        let header = t.header();
        let row = t.row(&oom());
        assert_eq!(
            header,
            "TIME     KIND            NAMESPACE/POD          CONTAINER    ROLE            PID     COMM          RSS/LIMIT   DETAIL"
        );
        assert_eq!(
            row,
            "08:03:46 oom_kill        shop/web               hog          container_child 4312    dd            31.5M/32.0M -"
        );
        for title in ["KIND", "NAMESPACE/POD", "ROLE", "PID", "RSS/LIMIT"] {
            let col = header.find(title).unwrap();
            assert_ne!(row.as_bytes()[col], b' ', "{title} starts a cell");
            assert_eq!(row.as_bytes()[col - 1], b' ', "{title} is preceded by a gap");
        }
    }

    #[test]
    fn a_terminal_cuts_cells_and_the_row_and_colours_the_kind() {
        let r = death("a-very-long-namespace-name");
        let row = Table { colour: false, width: Some(80) }.row(&r);
        assert!(row.contains("a-very-long-namespace…"), "{row:?}");
        assert_eq!(row.chars().count(), 80, "{row}");
        let wide = Table { colour: false, width: Some(200) }.row(&r);
        assert!(wide.ends_with("cause=oom"), "{wide}");
        let piped = Table { colour: false, width: None }.row(&r);
        assert!(piped.contains("a-very-long-namespace-name/web") && piped.ends_with("cause=oom"), "{piped}");
        let coloured = Table { colour: true, width: Some(120) }.row(&r);
        assert!(coloured.contains("\x1b[1;31msandbox_death\x1b[0m"), "{coloured:?}");
    }

    /// The post-mortem under a kill's row: whose limit, what filled it, the
    /// victim, who asked, what the pod held; a tenant's names escaped.
    #[test]
    fn a_kill_tells_its_story_under_its_row() {
        use crate::telemetry::records::wire::ContainerUsage;
        let r = OomKillRecord {
            limit: Some(OomLimit::Pod),
            constraint: Some(OomConstraint::Memcg),
            usage_bytes: Some(48 << 20),
            limit_bytes: Some(48 << 20),
            anon_bytes: Some(15 << 20),
            page_cache_bytes: Some(0),
            shmem_bytes: Some(32 << 20),
            kernel_bytes: Some(1 << 20),
            memory_read_after_us: Some(2_400),
            cause: Some(OomCause::Shmem),
            victim_anon_bytes: Some(15 << 20),
            victim_file_bytes: Some(1 << 20),
            victim_shmem_bytes: Some(0),
            oom_score_adj: Some(-997),
            trigger_pid: Some(77),
            trigger_comm: Some("java".into()),
            trigger_container: Some("api\x1b[2J".into()),
            pod_containers: vec![
                ContainerUsage {
                    container: Some("holder".into()),
                    container_id: "aa".repeat(32),
                    usage_bytes: 32 << 20,
                },
                ContainerUsage { container: None, container_id: "bb".repeat(32), usage_bytes: 16 << 20 },
            ],
            ..oom_record()
        };
        let story = Table { colour: false, width: None }.story(&known(Body::OomKill(Box::new(r.clone()))));
        let text = story.join("\n");
        assert_eq!(
            story.iter().map(|l| l.split_whitespace().next().unwrap_or("")).collect::<Vec<_>>(),
            ["limit", "filled", "victim", "asked", "warned", "pod"],
            "{text}"
        );
        assert!(story[0].contains("pod limit 48.0M, used 48.0M [memcg]"), "{text}");
        assert!(
            story[1].contains("mostly shmem: anon 15.0M page_cache 0B shmem 32.0M kernel 1.0M, read 2.4 ms after"),
            "{text}"
        );
        assert!(story[2].contains("pid 4312 dd: anon 15.0M file 1.0M shmem 0B, oom_score_adj -997"), "{text}");
        assert!(story[3].contains("pid 77 java in container api") && !text.contains('\x1b'), "escaped: {text}");
        assert!(story[4].contains("warned   no: no memory pressure was seen before it"), "{text}");
        assert!(story[5].contains("holder 32.0M, bbbbbbbbbbbb 16.0M"), "{text}");
        // A warned kill says how long before, and of what.
        let warned = OomKillRecord {
            warned_ms: Some(33_400),
            warned_reasons: vec![PressureReason::NearLimit, PressureReason::Growing],
            ..oom_record()
        };
        let story = Table { colour: false, width: None }.story(&known(Body::OomKill(Box::new(warned))));
        assert!(story.iter().any(|l| l.contains("warned   33.4 s before: near_limit, growing")), "{story:?}");
        // Cut to the terminal's width; an unknown limit says why.
        let narrow = Table { colour: false, width: Some(40) }.story(&known(Body::OomKill(Box::new(r))));
        assert!(narrow.iter().all(|l| l.chars().count() <= 40), "{narrow:?}");
        let unknown = OomKillRecord {
            limit: Some(OomLimit::Unknown),
            limit_unknown: Some(UnknownLimit::Unplaced),
            ..oom_record()
        };
        let story = Table { colour: false, width: None }.story(&known(Body::OomKill(Box::new(unknown))));
        assert!(story[0].contains("unknown (unplaced)"), "{story:?}");
        // Other records have none.
        assert!(Table { colour: false, width: None }.story(&death("shop")).is_empty());
    }

    #[test]
    fn details_say_what_the_columns_do_not() {
        let by_java = OomKillRecord { trigger_pid: Some(77), trigger_comm: Some("java".into()), ..oom_record() };
        assert_eq!(detail(Body::OomKill(Box::new(by_java))), "by 77 java");
        assert_eq!(detail(Body::OomKill(Box::new(oom_record()))), "", "its own trigger, handled: nothing to add");
        let late = LateExitRecord {
            pod: PodFields::default(),
            victim_role: TaskRole::Unknown,
            pid: None,
            comm: None,
            outcome: OutcomeKind::Late,
            reason: LateReason::ContainerMissing,
            source: Source::Runtime,
        };
        assert_eq!(detail(Body::LateExit(late)), "container_missing (runtime)");
        assert_eq!(detail(Body::OomStormStart(StormRecord { count: 12, window_seconds: 60 })), "12 OOM events in 60s");
        let unknown =
            Incoming::Newer { time: "2026-12-01T08:03:46Z".into(), node: "n".into(), kind: "from_the_future".into() };
        assert_eq!(
            Table { colour: true, width: None }.row(&unknown).split_whitespace().nth(1),
            Some("from_the_future")
        );
    }

    #[test]
    fn unnamed_pods_show_their_uid_and_container_id() {
        let pod = PodFields {
            pod_uid: Some("0c9e8d7f-6a5b-4c3d-9e2f-1a0b9c8d7e6f".into()),
            container_id: Some("ab".repeat(32)),
            ..PodFields::default()
        };
        let r = known(Body::OomKill(Box::new(OomKillRecord { pod, ..oom_record() })));
        let row = Table { colour: false, width: None }.row(&r);
        assert!(
            row.contains("uid:0c9e8d7f") && row.contains(&"ab".repeat(6)) && !row.contains(&"ab".repeat(7)),
            "{row}"
        );
    }

    #[test]
    fn urls_are_checked_and_filters_become_the_query() {
        assert!(matches!(Target::parse("https://x:1"), Err(ClientError::Url(l)) if l.contains("only http://")));
        assert!(matches!(Target::parse("127.0.0.1:9432"), Err(ClientError::Url(_))));
        let t = Target::parse("http://127.0.0.1:9432/proxy/").unwrap();
        assert_eq!(t.authority, "127.0.0.1:9432");
        let args = Args {
            url: String::new(),
            output: Output::Table,
            kind: vec!["oom_kill".into(), "late_exit".into()],
            namespace: Some("kube system".into()),
            pod: None,
            no_follow: true,
            crashes: false,
            pressure: false,
        };
        assert_eq!(t.events_path(&args), "/proxy/events?follow=0&kind=oom_kill,late_exit&namespace=kube%20system");
        assert_eq!(Target::parse("http://localhost").unwrap().authority, "localhost:80");
        let t = Target::parse("unix:/run/sandwatch/events.sock").unwrap();
        assert_eq!(t.socket.as_deref(), Some(std::path::Path::new("/run/sandwatch/events.sock")));
        assert_eq!(t.events_path(&args), "/events?follow=0&kind=oom_kill,late_exit&namespace=kube%20system");
        assert!(matches!(Target::parse("unix:events.sock"), Err(ClientError::Url(_))));
    }

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(human(512), "512B");
        assert_eq!(human(2 << 20), "2.0M");
        assert_eq!(human(3 << 30), "3.0G");
        assert_eq!(human(10 << 10), "10K");
    }

    #[test]
    fn hostile_names_are_shown_escaped_and_stay_one_row() {
        let hostile = OomKillRecord {
            pod: PodFields { namespace: Some("shop\u{9b}2J".into()), ..shop_web() },
            comm: Some("\u{1b}[2J\u{1b}[HPWNED".into()),
            trigger_pid: Some(1),
            trigger_comm: Some("two\nlines".into()),
            ..oom_record()
        };
        for table in [Table { colour: false, width: Some(120) }, Table { colour: false, width: None }] {
            let row = table.row(&known(Body::OomKill(Box::new(hostile.clone()))));
            assert!(!row.chars().any(crate::text::is_hostile), "{row:?}");
            assert!(row.contains("\\x1b[2J"), "{row}");
            if table.width.is_none() {
                assert!(row.contains("two\\x0alines"), "{row}");
            }
        }
        let coloured = Table { colour: true, width: Some(120) }.row(&known(Body::OomKill(Box::new(hostile))));
        let unpainted = coloured.replace("\u{1b}[31m", "").replace("\u{1b}[0m", "");
        assert!(!unpainted.chars().any(crate::text::is_hostile), "only our colour: {coloured:?}");
    }

    #[tokio::test]
    async fn a_json_line_is_printed_escaped_and_an_endless_line_is_refused() {
        use tokio::io::AsyncWriteExt as _;
        async fn serve(body: Vec<u8>) -> String {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(async move {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut request = [0u8; 1024];
                let _ = tokio::io::AsyncReadExt::read(&mut conn, &mut request).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\nconnection: close\r\n\r\n";
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(&body).await;
            });
            format!("http://{addr}")
        }
        let args = |url: String| Args {
            url,
            output: Output::Json,
            kind: Vec::new(),
            namespace: None,
            pod: None,
            no_follow: true,
            crashes: false,
            pressure: false,
        };
        let line = "{\"time\":\"t\",\"node\":\"n\",\"kind\":\"missed\",\"count\":1,\"note\":\"a\u{9b}b\"}\n";
        let mut out = Vec::new();
        run(&args(serve(line.as_bytes().to_vec()).await), &Format::Json, &mut out).await.unwrap();
        let printed = String::from_utf8(out).unwrap();
        assert_eq!(printed, line.replace('\u{9b}', "\\u009b"), "the same JSON, escaped");
        let mut out = Vec::new();
        let endless = vec![b'x'; MAX_LINE * 2];
        let err = run(&args(serve(endless).await), &Format::Json, &mut out).await.unwrap_err();
        assert!(matches!(err, ClientError::LineTooLong { .. }), "{err}");
        assert!(!err.to_string().contains('\n'));
    }
}
