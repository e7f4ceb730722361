//! The command line: `sandwatch [FLAGS]` runs the agent; `sandwatch
//! events` is a client of a running agent. Parsing only; each subcommand
//! lives in its own module (`events`, with its `table` and its
//! `transport`).

pub mod events;
pub mod table;
pub mod transport;

use std::ffi::OsString;

use clap::{Parser, Subcommand};

use crate::config::{Config, ConfigExit, Settings};

#[derive(Parser, Debug)]
#[command(
    name = "sandwatch",
    version,
    about = "eBPF node watchdog: OOM kills, process exits and pod sandboxes",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    agent: Config,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Follow a running agent's event records (OOM kills, sandbox deaths,
    /// container exits, late exits, runtime crashes, storms, losses) as a
    /// live table. Reads the agent's events socket on the node (root only,
    /// as the records name every namespace's pods), or --url.
    Events(events::Args),
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Invocation {
    /// Run the agent.
    Agent(Box<Settings>),
    /// Read an agent's event stream.
    Events(events::Args),
}

/// Parses the command line; errors and --help are [`ConfigExit`]s, as for
/// the agent's own flags.
pub fn parse<I, T>(args: I) -> Result<Invocation, ConfigExit>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::try_parse_from(args).map_err(ConfigExit::from_clap)?;
    match cli.command {
        Some(Command::Events(args)) => Ok(Invocation::Events(args)),
        None => Ok(Invocation::Agent(Box::new(cli.agent.resolve().map_err(ConfigExit::Invalid)?))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_subcommand_is_the_agent_and_events_is_the_client() {
        assert!(
            matches!(parse(["sandwatch", "--listen", "127.0.0.1:1"]), Ok(Invocation::Agent(c)) if c.server.metrics.port() == 1)
        );
        let Ok(Invocation::Events(a)) =
            parse(["sandwatch", "events", "--kind", "oom_kill,sandbox_death", "-o", "json", "--no-follow"])
        else {
            panic!("events parses");
        };
        assert_eq!(a.kind, ["oom_kill", "sandbox_death"]);
        assert_eq!(a.output, events::Output::Json);
        assert!(a.no_follow);
        assert_eq!(a.url, "unix:/run/sandwatch/events.sock");
    }

    #[test]
    fn agent_flags_do_not_mix_with_the_client() {
        match parse(["sandwatch", "--listen", "127.0.0.1:1", "events"]) {
            Err(ConfigExit::Invalid(line)) => assert!(!line.contains('\n'), "{line}"),
            other => panic!("expected one line, got {other:?}"),
        }
        // Cross-flag checks apply to the agent only.
        assert!(matches!(
            parse(["sandwatch", "--oom-storm-threshold", "2", "--oom-storm-clear", "3"]),
            Err(ConfigExit::Invalid(l)) if l.contains("--oom-storm-clear")
        ));
        assert!(
            matches!(parse(["sandwatch", "events", "--output", "yaml"]), Err(ConfigExit::Invalid(l)) if l.contains("yaml"))
        );
        assert!(matches!(parse(["sandwatch", "--help"]), Err(ConfigExit::Info(t)) if t.contains("events")));
    }
}
