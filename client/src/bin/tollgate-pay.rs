//! `tollgate-pay`: like curl, but pays a 402 with a local key.
//!
//! Prints the body on stdout and what was paid (amount, network, transaction) on stderr. Exits
//! non-zero, with the reason on stderr, when the price is over `--max`, nothing can pay it, or
//! the payment is refused.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tollgate_client::{Buyer, Cap};

/// Fetch a URL, paying an HTTP 402 with a local key.
#[derive(Debug, Parser)]
#[command(name = "tollgate-pay", version)]
struct Args {
    /// Solana keypair file (Solana CLI JSON: an array of 64 bytes).
    #[arg(long, env = "TOLLGATE_SOLANA_KEY")]
    solana_key: Option<PathBuf>,
    /// Solana JSON-RPC for recent blockhashes.
    #[arg(long, env = "TOLLGATE_SOLANA_RPC_URL", default_value = "http://127.0.0.1:8899")]
    solana_rpc: String,
    /// EVM private key, hex (prefer the environment variable: arguments are visible to other users).
    #[arg(long, env = "TOLLGATE_EVM_KEY", hide_env_values = true)]
    evm_key: Option<String>,
    /// EVM JSON-RPC for the chain id, nonces, fees and token details.
    #[arg(long, env = "TOLLGATE_EVM_RPC_URL", default_value = "http://127.0.0.1:8545")]
    evm_rpc: String,
    /// Most to pay for this request, naming its asset: `0.01SOL`, `0.001ETH`, or
    /// `1.5@<token address>` (whole tokens). Offers in other assets are not taken.
    #[arg(long)]
    max: Option<String>,
    /// The URL to fetch.
    url: String,
}

fn read_keypair(path: &PathBuf) -> anyhow::Result<solana_sdk::signature::Keypair> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read the Solana key {}: {e}", path.display()))?;
    let bytes: Vec<u8> = serde_json::from_str(&text)
        .map_err(|_| anyhow::anyhow!("{} is not a Solana keypair file (a JSON array of 64 bytes)", path.display()))?;
    solana_sdk::signature::Keypair::try_from(bytes.as_slice())
        .map_err(|_| anyhow::anyhow!("{} does not hold a valid Solana keypair", path.display()))
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut buyer = Buyer::new();
    if let Some(path) = &args.solana_key {
        buyer = buyer.with_solana(read_keypair(path)?, &args.solana_rpc);
    }
    if let Some(key) = &args.evm_key {
        let signer: tollgate_client::PrivateKeySigner =
            key.trim().parse().map_err(|_| anyhow::anyhow!("--evm-key is not a hex secp256k1 private key"))?;
        buyer = buyer.with_evm(signer, &args.evm_rpc)?;
    }
    if let Some(max) = &args.max {
        buyer = buyer.with_cap(Cap::parse(max)?);
    }
    let paid = buyer.get(&args.url).await?;
    if let Some(p) = &paid.payment {
        if let Some(approval) = &p.approval {
            eprintln!("approved Permit2 to move this token (once, transaction {approval})");
        }
        let authorized = p.authorized.map(|most| format!(" of {} atomic units authorized", most)).unwrap_or_default();
        eprintln!(
            "paid {} {}{authorized} on {} (transaction {})",
            p.whole,
            match p.asset {
                tollgate_client::protocol::x402::Asset::Native => match p.network.family() {
                    tollgate_client::protocol::ChainFamily::Solana => "SOL".to_owned(),
                    tollgate_client::protocol::ChainFamily::Evm => "ETH".to_owned(),
                },
                tollgate_client::protocol::x402::Asset::Token(t) => format!("of token {t}"),
            },
            p.network,
            p.transaction.as_deref().filter(|t| !t.is_empty()).unwrap_or(if p.amount.get() == 0 {
                "none: nothing charged"
            } else {
                "unknown"
            })
        );
    }
    print!("{}", paid.body_text());
    Ok(if (200..400).contains(&paid.status) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tollgate-pay: {e}");
            ExitCode::FAILURE
        }
    }
}
