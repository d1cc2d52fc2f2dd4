//! `tollgate-demo`: starts the whole flow offline and prints how to try it.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// Try Tollgate end to end on this machine: facilitator, embedded Solana ledger, a paid shop.
#[derive(Debug, Parser)]
#[command(name = "tollgate-demo", version)]
struct Args {
    /// Where the shop (and its demo page) listens.
    #[arg(long, env = "TOLLGATE_DEMO_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where the proxied Python service's tollgate-proxy listens.
    #[arg(long, env = "TOLLGATE_DEMO_PROXY", default_value = "127.0.0.1:8090")]
    proxy: SocketAddr,
    /// Where the facilitator listens.
    #[arg(long, env = "TOLLGATE_DEMO_FACILITATOR", default_value = "127.0.0.1:8402")]
    facilitator: SocketAddr,
    /// Data folder (SQLite database, demo keys).
    #[arg(long, env = "TOLLGATE_DEMO_DATA", default_value = "demo-data")]
    data: PathBuf,
    /// JSON-RPC of a local EVM development node (e.g. `anvil`): adds ETH and EIP-3009 prices,
    /// and with Permit2 installed (`scripts/install-permit2`) a Permit2 price and a metered route.
    #[arg(long, env = "TOLLGATE_DEMO_EVM_RPC_URL")]
    evm_rpc: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter(std::env::var("TOLLGATE_LOG").unwrap_or_else(|_| "warn".into())).init();
    let args = Args::parse();
    let options = tollgate_demo::Options {
        data_dir: args.data,
        facilitator_addr: args.facilitator,
        shop_addr: args.listen,
        proxy_addr: args.proxy,
        evm_rpc_url: args.evm_rpc,
    };
    // Listening from the start: a signal sent while it starts stops it once started.
    let stopped = tollgate_facilitator::shutdown_signal();
    let demo = tollgate_demo::start(&options).await?;
    println!("Tollgate demo is running (offline, embedded Solana ledger).");
    println!();
    println!("  demo page    {}/", demo.shop_url);
    println!("  shop         {}   (/quote, /report, POST /summarize, /words?a+b, /daily day pass)", demo.shop_url);
    if let (Some(url), Some(proxied)) = (demo.proxy_url(), &demo.proxied) {
        println!(
            "  proxy        {url}   (a Python service sold by tollgate-proxy; config: {})",
            proxied.config.display()
        );
    }
    println!("  facilitator  {0}   (API reference: {0}/docs)", demo.facilitator_url);
    println!("  solana rpc   {}", demo.solana_rpc_url);
    println!("  spl token    {} at {}", tollgate_demo::DEMO_TOKEN_SYMBOL, demo.spl_token);
    println!(
        "  demo buyer   {}  (key: {}, {} SOL and {} {})",
        demo.buyer,
        demo.buyer_key_file.display(),
        tollgate_demo::DEMO_FUNDING_SOL,
        tollgate_demo::DEMO_FUNDING_TOKENS,
        tollgate_demo::DEMO_TOKEN_SYMBOL
    );
    if let Some(evm) = &demo.evm {
        println!(
            "  evm chain    {} (chain id {}), token {} at {}",
            evm.rpc_url,
            evm.chain_id,
            tollgate_demo::DEMO_TOKEN_SYMBOL,
            evm.token
        );
        if let Some(pusd) = &evm.permit2_token {
            println!(
                "  permit2      token {} at {pusd} (any ERC-20, paid through Permit2)",
                tollgate_demo::PERMIT2_TOKEN_SYMBOL
            );
        }
        println!("  evm buyer    {}  (key: {})", evm.buyer, evm.buyer_key_file.display());
    }
    println!();
    println!("Without paying:  curl -i {}/quote", demo.shop_url);
    println!("Paying:          {}", demo.pay_command());
    println!("Paying a POST:   {}", demo.post_pay_command());
    println!("A day pass:      {}   (again: signs in, pays nothing)", demo.day_pass_command());
    println!("MCP tools:       {}  (streamable HTTP; summarize is paid, count_words free)", demo.mcp_url());
    println!("MCP over stdio:  {}", demo.mcp_stdio_command());
    if let Some(command) = demo.proxy_pay_command() {
        println!("Through the proxy: {command}");
    }
    if let Some(command) = demo.evm_pay_command("/report") {
        println!("Paying on EVM:   {command}");
    }
    if let Some(command) = demo.permit2_pay_command("/report") {
        println!("Through Permit2: {command}");
    }
    if let Some(command) = demo.permit2_pay_command("/story?words=12") {
        println!("Metered (upto):  {command}");
    }
    if let Some(command) = demo.proxy_metered_command() {
        println!("Metered, proxied: {command}");
    }
    if let Some(command) = demo.channel_pay_command() {
        println!("Per call, from a channel: {command}   (again: a voucher, no transaction)");
    }
    println!();
    println!("Ctrl-C to stop.");
    // Ctrl-C, or SIGTERM (what `docker stop` and service managers send): the proxied service's
    // Python process stops with the demo, never left behind.
    stopped.await;
    demo.stop().await;
    Ok(())
}
