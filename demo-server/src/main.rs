//! `tollgate-demo`: starts the whole flow offline and prints how to try it.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// Try Tollgate end to end on this machine: facilitator, embedded Solana ledger, a paid shop.
#[derive(Debug, Parser)]
#[command(name = "tollgate-demo", version)]
struct Args {
    /// Where the shop listens.
    #[arg(long, env = "TOLLGATE_DEMO_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where the facilitator listens.
    #[arg(long, env = "TOLLGATE_DEMO_FACILITATOR", default_value = "127.0.0.1:8402")]
    facilitator: SocketAddr,
    /// Data folder (SQLite database, demo keypairs).
    #[arg(long, env = "TOLLGATE_DEMO_DATA", default_value = "demo-data")]
    data: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter(std::env::var("TOLLGATE_LOG").unwrap_or_else(|_| "warn".into())).init();
    let args = Args::parse();
    let demo = tollgate_demo::start(&args.data, args.facilitator, args.listen).await?;
    println!("Tollgate demo is running (offline, embedded Solana ledger).");
    println!();
    println!("  shop         {}   (/quote 0.001 SOL, /report 0.01 SOL, /words?a+b per word)", demo.shop_url);
    println!("  facilitator  {}", demo.facilitator_url);
    println!("  solana rpc   {}", demo.solana_rpc_url);
    println!(
        "  demo buyer   {}  (key: {}, funded with {} SOL)",
        demo.buyer,
        demo.buyer_key_file.display(),
        tollgate_demo::DEMO_FUNDING_SOL
    );
    println!();
    println!("Without paying:  curl -i {}/quote", demo.shop_url);
    println!("Paying:          {}", demo.pay_command());
    println!();
    println!("Ctrl-C to stop.");
    tokio::signal::ctrl_c().await?;
    Ok(())
}
