//! `tollgate-pay`: like curl, but pays a 402 with a local key.
//!
//! Sends any request (`-X`, `-d`, `-H`), prints the answer's body on stdout (or into `-o`) and
//! what was paid on stderr (one JSON line with `--json`). `--dry-run` prints the seller's offers
//! and what it would pay, paying nothing. Exit codes: see [`EXIT_CODES`].

use std::io::{IsTerminal as _, Read as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tollgate_client::{Budget, Buyer, Cap, Limit, PayError, PaymentMade, Request};

/// What each exit code means (also in `--help`).
const EXIT_CODES: &str = "Exit codes:
  0  answered 2xx or 3xx (paid, or free)
  1  answered 4xx or 5xx other than a refused payment, or the request could not be sent
  2  the command line is wrong (unknown flag, bad header, unreadable --data file)
  3  nothing to pay with: no offer fits this buyer's keys, the price is above --max or a budget,
     or nothing caps it (give --max, a budget in its asset, or --no-cap)
  4  the seller refused the payment
  5  the payment is still pending after the retries (retry later: the same proof is reused)
  6  the payment could not be built (chain unreachable, bad key)";

/// Send a request, paying an HTTP 402 with a local key.
#[derive(Debug, Parser)]
#[command(name = "tollgate-pay", version, after_help = EXIT_CODES)]
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
    /// Most to pay for this request, naming its asset: `0.01SOL`, `0.001ETH`, `0.05USDC` (an
    /// ERC-20 by its `symbol()`), or `1.5@<token address>` (whole tokens; SPL tokens by address).
    /// Offers in other assets are not taken.
    /// Without it (or a budget in the offer's asset), nothing is paid: the offer and the flag to
    /// add are printed, and the exit code is 3.
    #[arg(long)]
    max: Option<String>,
    /// Pay whatever the seller asks (within a budget, if one is given): no cap.
    #[arg(long, conflicts_with = "max")]
    no_cap: bool,
    /// A file that remembers what was spent (SQLite; made if missing): the budgets count it, so
    /// they hold across runs and concurrent runs; it is also the spend log.
    #[arg(long, env = "TOLLGATE_BUDGET_FILE")]
    budget_file: Option<PathBuf>,
    /// A budget over every origin: `1SOL/day`, `0.5ETH/hour`, `20@<token>/week`, `3SOL` (ever)
    /// (repeatable; needs --budget-file).
    #[arg(long = "budget")]
    budgets: Vec<String>,
    /// A budget counted apart for each origin (repeatable; needs --budget-file).
    #[arg(long = "budget-per-origin")]
    budgets_per_origin: Vec<String>,
    /// The method (default GET, or POST with --data).
    #[arg(short = 'X', long = "request")]
    method: Option<String>,
    /// The body: text, `@file`, or `@-` for stdin (sent again whole with the payment).
    #[arg(short = 'd', long = "data")]
    data: Option<String>,
    /// A header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// Print the answer's status line and headers before its body.
    #[arg(short = 'i', long)]
    include: bool,
    /// Write the body to this file instead of stdout.
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Print what was paid as one JSON line on stderr (with --dry-run: the offers).
    #[arg(long)]
    json: bool,
    /// Print the offers and the one that would be paid; pay nothing.
    #[arg(long)]
    dry_run: bool,
    /// The URL.
    url: String,
}

/// A failure and its exit code.
struct Failed(u8, String);

impl From<PayError> for Failed {
    fn from(e: PayError) -> Self {
        let code = match &e {
            PayError::NoOption(_)
            | PayError::OverCap { .. }
            | PayError::OverBudget { .. }
            | PayError::Uncapped { .. } => 3,
            PayError::Refused { .. } => 4,
            PayError::StillPending(_) => 5,
            PayError::Build(_) => 6,
            PayError::Cap(_) | PayError::Header(_) | PayError::Budget(_) => 2,
            _ => 1,
        };
        Self(code, e.to_string())
    }
}

impl From<anyhow::Error> for Failed {
    fn from(e: anyhow::Error) -> Self {
        Self(2, e.to_string())
    }
}

/// The request the arguments describe.
fn request(args: &Args) -> Result<Request, Failed> {
    let body = match args.data.as_deref() {
        None => None,
        Some("@-") => {
            let mut read = Vec::new();
            std::io::stdin().read_to_end(&mut read).map_err(|e| Failed(2, format!("cannot read stdin: {e}")))?;
            Some(read)
        }
        Some(data) => match data.strip_prefix('@') {
            Some(path) => Some(std::fs::read(path).map_err(|e| Failed(2, format!("cannot read {path}: {e}")))?),
            None => Some(data.as_bytes().to_vec()),
        },
    };
    let method = match (&args.method, &body) {
        (Some(m), _) => reqwest::Method::from_bytes(m.to_ascii_uppercase().as_bytes())
            .map_err(|_| Failed(2, format!("{m:?} is not an HTTP method")))?,
        (None, Some(_)) => reqwest::Method::POST,
        (None, None) => reqwest::Method::GET,
    };
    let mut request = Request::new(method, args.url.clone());
    for header in &args.headers {
        let (name, value) =
            header.split_once(':').ok_or_else(|| Failed(2, format!("{header:?} is not `Name: value`")))?;
        request = request.header(name, value)?;
    }
    Ok(match body {
        Some(body) => request.body(body),
        None => request,
    })
}

fn read_keypair(path: &PathBuf) -> anyhow::Result<solana_sdk::signature::Keypair> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read the Solana key {}: {e}", path.display()))?;
    let bytes: Vec<u8> = serde_json::from_str(&text)
        .map_err(|_| anyhow::anyhow!("{} is not a Solana keypair file (a JSON array of 64 bytes)", path.display()))?;
    solana_sdk::signature::Keypair::try_from(bytes.as_slice())
        .map_err(|_| anyhow::anyhow!("{} does not hold a valid Solana keypair", path.display()))
}

async fn run(args: Args) -> Result<ExitCode, Failed> {
    let mut buyer = Buyer::new();
    if let Some(path) = &args.solana_key {
        buyer = buyer.with_solana(read_keypair(path)?, &args.solana_rpc);
    }
    if let Some(key) = &args.evm_key {
        let signer: tollgate_client::PrivateKeySigner =
            key.trim().parse().map_err(|_| Failed(2, "--evm-key is not a hex secp256k1 private key".into()))?;
        buyer = buyer.with_evm(signer, &args.evm_rpc)?;
    }
    if let Some(max) = &args.max {
        buyer = buyer.with_cap(Cap::parse(max)?);
    }
    if args.no_cap {
        buyer = buyer.without_cap();
    }
    let limits = args
        .budgets
        .iter()
        .map(|l| Limit::parse(l, false))
        .chain(args.budgets_per_origin.iter().map(|l| Limit::parse(l, true)))
        .collect::<Result<Vec<_>, _>>()?;
    match &args.budget_file {
        Some(file) => buyer = buyer.with_budget(Budget::open(file, limits)?),
        None if !limits.is_empty() => return Err(Failed(2, "a budget needs --budget-file to count in".into())),
        None => {}
    }
    let request = request(&args)?;
    if args.dry_run {
        return dry_run(&buyer, &request, args.json).await;
    }
    let paid = buyer.send(&request).await?;
    if let Some(wallet) = &paid.signed_in {
        if args.json {
            eprintln!("{}", serde_json::json!({ "signedIn": wallet }));
        } else {
            eprintln!("signed in as {wallet} with a pass bought before: nothing paid");
        }
    }
    if let Some(p) = &paid.payment {
        if args.json {
            eprintln!("{}", payment_json(p));
        } else {
            if let Some(approval) = &p.approval {
                eprintln!("approved Permit2 to move this token (once, transaction {approval})");
            }
            eprintln!("{}", payment_line(p));
        }
    }
    let mut stdout = std::io::stdout().lock();
    let written = (|| -> std::io::Result<()> {
        if args.include {
            let reason = reqwest::StatusCode::from_u16(paid.status).ok().and_then(|s| s.canonical_reason());
            writeln!(stdout, "HTTP {} {}", paid.status, reason.unwrap_or_default())?;
            for (name, value) in &paid.headers {
                writeln!(stdout, "{name}: {}", String::from_utf8_lossy(value.as_bytes()))?;
            }
            writeln!(stdout)?;
        }
        match &args.output {
            Some(path) => std::fs::write(path, &paid.body)?,
            None => {
                stdout.write_all(&paid.body)?;
                // A terminal's prompt starts on a line of its own.
                if std::io::stdout().is_terminal() && !paid.body.ends_with(b"\n") && !paid.body.is_empty() {
                    writeln!(stdout)?;
                }
            }
        }
        stdout.flush()
    })();
    written.map_err(|e| Failed(1, format!("cannot write the answer: {e}")))?;
    Ok(if (200..400).contains(&paid.status) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `--dry-run`: the offers, and the one this buyer would pay (exit 3 when none).
async fn dry_run(buyer: &Buyer, request: &Request, json: bool) -> Result<ExitCode, Failed> {
    let Some(quote) = buyer.quote(request).await? else {
        if json {
            eprintln!("{}", serde_json::json!({"offers": [], "wouldPay": null, "free": true}));
        } else {
            eprintln!("{} asks for no payment", request.url());
        }
        return Ok(ExitCode::SUCCESS);
    };
    let planned = quote.chosen.as_ref().ok().map(|p| {
        serde_json::json!({
            "scheme": p.scheme, "amount": p.amount.to_string(), "whole": p.whole.to_string(),
            "asset": asset_name(&p.asset, &p.network), "network": p.network.to_string(), "payTo": p.pay_to.to_string(),
        })
    });
    if json {
        let why = quote.chosen.as_ref().err().map(ToString::to_string);
        eprintln!("{}", serde_json::json!({"offers": quote.offers, "wouldPay": planned, "whyNot": why}));
    } else {
        eprintln!("offers:");
        for offer in &quote.offers {
            eprintln!("  {offer}");
        }
        match &quote.chosen {
            Ok(p) => eprintln!(
                "would pay {} {} on {} to {} ({})",
                p.whole,
                asset_name(&p.asset, &p.network),
                p.network,
                p.pay_to,
                p.scheme
            ),
            Err(e) => eprintln!("would pay nothing: {e}"),
        }
    }
    Ok(match quote.chosen {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => ExitCode::from(Failed::from(e).0),
    })
}

fn asset_name(asset: &tollgate_client::protocol::x402::Asset, network: &tollgate_client::protocol::Network) -> String {
    match asset {
        tollgate_client::protocol::x402::Asset::Native => network.family().native_symbol().to_owned(),
        tollgate_client::protocol::x402::Asset::Token(t) => format!("of token {t}"),
    }
}

/// "paid 0.001 SOL on solana:… (transaction …)".
fn payment_line(p: &PaymentMade) -> String {
    let authorized = p.authorized.map(|most| format!(" of {most} atomic units authorized")).unwrap_or_default();
    format!(
        "paid {} {}{authorized} on {} (transaction {})",
        p.whole,
        asset_name(&p.asset, &p.network),
        p.network,
        p.transaction.as_deref().filter(|t| !t.is_empty()).unwrap_or(if p.amount.get() == 0 {
            "none: nothing charged"
        } else {
            "unknown"
        })
    )
}

/// What was paid, for programs.
fn payment_json(p: &PaymentMade) -> serde_json::Value {
    serde_json::json!({
        "paid": {
            "amount": p.amount.to_string(), "whole": p.whole.to_string(),
            "asset": asset_name(&p.asset, &p.network), "network": p.network.to_string(),
            "transaction": p.transaction, "authorized": p.authorized.map(|a| a.to_string()),
            "approval": p.approval,
        }
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(code) => code,
        Err(Failed(code, why)) => {
            eprintln!("tollgate-pay: {why}");
            ExitCode::from(code)
        }
    }
}
