//! `tollgate-demo-mcp`: the demo's MCP tools over stdio, paid through a Tollgate facilitator.
//! An MCP client starts it as a child process; `tollgate-demo` prints the command.

use std::path::PathBuf;

use clap::Parser;
use rmcp::ServiceExt as _;
use tollgate::{FacilitatorClient, Price};
use tollgate_demo::mcp::{DemoTools, paywall};

/// Serve the demo's MCP tools (summarize: 0.001 SOL; count_words: free) on stdin/stdout.
#[derive(Debug, Parser)]
#[command(name = "tollgate-demo-mcp", version)]
struct Args {
    /// The facilitator that verifies and settles (the demo's, e.g. http://127.0.0.1:8402).
    #[arg(long, env = "TOLLGATE_FACILITATOR_URL")]
    facilitator: String,
    /// A file holding the seller's API key at that facilitator (the demo writes one).
    #[arg(long, env = "TOLLGATE_API_KEY_FILE")]
    api_key_file: PathBuf,
    /// The Solana address paid.
    #[arg(long, env = "TOLLGATE_PAY_TO")]
    pay_to: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // stdout carries the protocol: logs go to stderr.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(std::env::var("TOLLGATE_LOG").unwrap_or_else(|_| "warn".into()))
        .init();
    let args = Args::parse();
    let key = std::fs::read_to_string(&args.api_key_file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.api_key_file.display()))?;
    let facilitator = FacilitatorClient::new(&args.facilitator, key.trim());
    let pay_to = args.pay_to.parse().map_err(|e| anyhow::anyhow!("--pay-to: {e}"))?;
    let tools = paywall(&facilitator, &[Price::native_sol("0.001")?.pay_to(pay_to)], None, None)?;
    let server = tools.wrap(DemoTools { story: false }).serve(rmcp::transport::stdio()).await?;
    server.waiting().await?;
    // The client hung up: finish the settlements of calls it did not wait for.
    tools.tasks().close();
    tools.tasks().wait().await;
    Ok(())
}
