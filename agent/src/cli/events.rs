//! `sandwatch events`: reads a running agent's `/events` stream
//! ([`super::transport`]) and prints one aligned row per record under a
//! header ([`super::table`]), as `kubectl get -w` does — or the raw JSON
//! lines with `-o json`. A client only: it shares nothing with the agent
//! but the record types. It needs whatever reaches the agent's events
//! listener: on the node its root-only unix socket.

use std::{
    io::{IsTerminal as _, Write},
    process::ExitCode,
};

use super::{
    table::{cut, terminal_width, Table},
    transport::{encode, ClientError, Lines},
};
use crate::{
    model::ExitReason,
    telemetry::records::wire::{Body, Incoming},
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
    let mut lines = Lines::open(&args.url, &query(args)).await?;
    let mut printer = Printer { format, header_done: false };
    if printer.print_header(out).is_err() {
        return Ok(());
    }
    while let Some(line) = lines.next().await? {
        let record = Incoming::parse(&line).ok_or_else(|| ClientError::NotSandwatch {
            url: lines.url().to_string(),
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
    if args.no_follow {
        Ok(())
    } else {
        Err(ClientError::Ended { url: args.url.clone() })
    }
}

/// The query that asks the agent for what `args` want.
fn query(args: &Args) -> String {
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
    query.join("&")
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

/// A container that ended badly (`--crashes`).
fn crashed(record: &Incoming) -> bool {
    matches!(record, Incoming::Known(r) if matches!(&r.body, Body::ContainerExit(e) if e.reason != ExitReason::Completed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::transport::MAX_LINE;

    #[test]
    fn filters_become_the_query() {
        let mut args = Args {
            url: String::new(),
            output: Output::Table,
            kind: vec!["oom_kill".into(), "late_exit".into()],
            namespace: Some("kube system".into()),
            pod: None,
            no_follow: true,
            crashes: false,
            pressure: false,
        };
        assert_eq!(query(&args), "follow=0&kind=oom_kill,late_exit&namespace=kube%20system");
        args.crashes = true;
        args.no_follow = false;
        assert_eq!(query(&args), "follow=1&kind=container_exit&namespace=kube%20system");
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
