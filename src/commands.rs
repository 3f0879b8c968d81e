//! Client verbs (placeholder until the admin client lands).

use clap::Subcommand;

/// Client verbs.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Reclaim snapshot space.
    Gc,
}

/// Runs a client verb.
pub async fn run(_command: ClientCommand) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
