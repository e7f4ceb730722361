//! The table of `sandwatch events`: one aligned row per record under a
//! header, as `kubectl get -w` prints, an OOM kill's post-mortem under its
//! row, and on a terminal the kind in its colour and cells cut to their
//! columns. Every cell is escaped: names are a tenant's.

use crate::{
    events::runtime::WorkloadKind,
    labels::Label,
    model::dispatch::OutcomeKind,
    telemetry::records::wire::{Body, Incoming, Kind, PodFields, PressureState},
    watchdog::OomLimit,
};

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
        if let Body::ContainerExit(r) = &record.body {
            return self.lines(ended_story(r).into_iter().collect());
        }
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
            let swapped = match (r.swap_bytes, r.zswap_bytes) {
                (None, None) => String::new(),
                (swap, zswap) => format!(" (swap {} zswap {})", size(swap), size(zswap)),
            };
            lines.push((
                "filled",
                format!(
                    "mostly {cause}: anon {} page_cache {} shmem {} kernel {}{swapped}{read}",
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
        if let Some(ms) = r.lowered_ms {
            let limit = |b: Option<u64>| b.map_or_else(|| "none".to_string(), human);
            lines.push((
                "lowered",
                format!(
                    "{} lowered from {} to {}, {:.1} s before",
                    r.lowered_limit.map_or("limit", Label::label),
                    limit(r.lowered_from_bytes),
                    limit(r.lowered_to_bytes),
                    ms as f64 / 1000.0
                ),
            ));
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
        self.lines(lines)
    }

    /// A story's lines under its row: each titled, escaped, cut.
    fn lines(&self, lines: Vec<(&str, String)>) -> Vec<String> {
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
            let how = match r.sender {
                Some(sender) => format!("{how} by {}", sender.label()),
                None => how,
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
        Body::RuntimeDisagreement(r) => Row {
            pod: Some(&r.pod),
            pid: Some(r.pid),
            detail: format!(
                "{}: runtime {} ({}), kernel {} ({}){}",
                r.direction.label(),
                r.runtime_reason.as_deref().unwrap_or("-"),
                r.runtime_exit_code.map_or_else(|| "-".to_string(), |c| c.to_string()),
                r.reason.label(),
                r.kernel_exit_code,
                r.sender.map_or_else(String::new, |s| format!(" by {}", s.label())),
            ),
            ..Row::default()
        },
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
        Body::LimitChange(r) => {
            let limit = |b: Option<u64>| b.map_or_else(|| "none".to_string(), human);
            Row {
                pod: Some(&r.pod),
                memory: (None, r.to_bytes),
                detail: with_workload(
                    format!(
                        "{} {} {} {} -> {}",
                        r.scope.label(),
                        r.limit.label(),
                        r.direction.label(),
                        limit(r.from_bytes),
                        limit(r.to_bytes)
                    ),
                    &r.pod,
                ),
                ..Row::default()
            }
        }
        Body::Missed(r) => {
            Row { detail: format!("{} records missed: this client read too slowly", r.count), ..Row::default() }
        }
    }
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
        Kind::LateExit | Kind::EventsDropped | Kind::Missed | Kind::RuntimeDisagreement => "33",
        Kind::RuntimeRestart | Kind::OomStormEnd => "32",
        Kind::MemoryPressure => "35",
        Kind::LimitChange => "36",
        Kind::ContainerExit => return None,
    })
}

/// Under a container exit a signal caused: who sent it, and a stop's grace.
fn ended_story(r: &crate::telemetry::records::wire::ContainerExitRecord) -> Option<(&'static str, String)> {
    let (sender, signo) = (r.sender?, r.signal?);
    let mut text = format!("{} from {}", crate::telemetry::logs::signal_name(signo), sender.label());
    if let Some(pid) = r.sender_pid {
        text.push_str(&format!(", pid {pid} {}", r.sender_comm.as_deref().unwrap_or("?")));
    }
    match (&r.sender_pod, &r.sender_unit) {
        (Some(pod), _) => text.push_str(&format!(
            ", pod {}/{pod} container {}",
            r.sender_namespace.as_deref().unwrap_or(""),
            r.sender_container.as_deref().unwrap_or("-")
        )),
        (None, Some(unit)) => text.push_str(&format!(", unit {unit}")),
        (None, None) => {}
    }
    if let (Some(first), Some(ms)) = (r.stop_signal, r.grace_ms) {
        text.push_str(&format!(
            ", {:.1} s after its {}: a stop past its grace",
            ms as f64 / 1000.0,
            crate::telemetry::logs::signal_name(first)
        ));
    }
    Some(("ended", text))
}

/// `text` in at most `room` characters, the cut marked with `…`.
pub fn cut(text: &str, room: usize) -> String {
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
pub fn terminal_width() -> usize {
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

    /// A container's end by a signal says who sent it on its row, and
    /// under it the sending process, its unit or pod, and a stop's grace;
    /// the runtime's disagreement says both words.
    #[test]
    fn who_ended_a_container_shows_on_its_row_and_under_it() {
        use crate::{
            model::ExitReason,
            telemetry::records::wire::{ContainerExitRecord, RuntimeDisagreementRecord},
            watchdog::{senders::Sender, verdicts::Disagreement},
        };
        let stop = ContainerExitRecord {
            pod: shop_web(),
            victim_role: TaskRole::ContainerInit,
            pid: 4893,
            comm: Some("sleep".into()),
            reason: ExitReason::Killed,
            exit_code: None,
            signal: Some(9),
            core_dumped: false,
            sender: Some(Sender::Runtime),
            sender_pid: Some(5120),
            sender_comm: Some("runc".into()),
            sender_pod_uid: None,
            sender_namespace: None,
            sender_pod: None,
            sender_container: None,
            sender_container_id: None,
            sender_unit: None,
            stop_signal: Some(15),
            grace_ms: Some(2_004),
        };
        assert_eq!(detail(Body::ContainerExit(stop.clone())), "killed signal=9 by runtime");
        let story = Table { colour: false, width: None }.story(&known(Body::ContainerExit(stop.clone())));
        assert_eq!(story.len(), 1, "{story:?}");
        assert!(
            story[0].contains(
                "ended    SIGKILL from runtime, pid 5120 runc, 2.0 s after its SIGTERM: a stop past its grace"
            ),
            "{story:?}"
        );
        let host = ContainerExitRecord {
            sender: Some(Sender::Host),
            sender_comm: Some("kill\u{1b}[2J".into()),
            sender_unit: Some("ops.service".into()),
            stop_signal: None,
            grace_ms: None,
            ..stop.clone()
        };
        let story = Table { colour: false, width: None }.story(&known(Body::ContainerExit(host)));
        assert!(story[0].contains("from host, pid 5120 kill\\x1b[2J, unit ops.service"), "escaped: {story:?}");
        let code = ContainerExitRecord { signal: None, exit_code: Some(3), sender: None, ..stop };
        assert!(Table { colour: false, width: None }.story(&known(Body::ContainerExit(code))).is_empty());
        let disagreement = RuntimeDisagreementRecord {
            pod: shop_web(),
            pid: 4893,
            direction: Disagreement::RuntimeSaysOom,
            reason: ExitReason::Sigterm,
            kernel_exit_code: 143,
            sender: Some(Sender::Runtime),
            task_exit_status: Some(143),
            runtime_reason: Some("OOMKilled".into()),
            runtime_exit_code: Some(143),
        };
        assert_eq!(
            detail(Body::RuntimeDisagreement(disagreement)),
            "runtime_says_oom: runtime OOMKilled (143), kernel sigterm (143) by runtime"
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
}
