//! `cargo xtask bench`: an exit storm with and without the agent attached.
//! Reports ratios measured in the same run, never absolute pass/fail times.
use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Result<()> {
    anyhow::bail!("not implemented yet")
}
