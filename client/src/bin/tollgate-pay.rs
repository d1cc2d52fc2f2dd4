//! `tollgate-pay`: like curl, but pays a 402 with a local key.
//!
//! Sends any request (`-X`, `-d`, `-H`), prints the answer's body on stdout (or into `-o`) and
//! what was paid on stderr (one JSON line with `--json`). `--dry-run` prints the seller's offers
//! and what it would pay, paying nothing. Exit codes: see [`EXIT_CODES`].

use std::io::{IsTerminal as _, Read as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tollgate_client::discovery::ForSale;
use tollgate_client::{Budget, Buyer, Cap, Limit, PayError, PaymentMade, Request};

/// What each exit code means (also in `--help`).
macro_rules! exit_codes {
    () => {
        "Exit codes:
  0  answered 2xx or 3xx (paid, or free)
  1  answered 4xx or 5xx other than a refused payment, or the request could not be sent
  2  the command line is wrong (unknown flag, bad header, unreadable --data file)
  3  nothing to pay with: no offer fits this buyer's keys, the price is above --max or a budget,
     nothing caps it (give --max, a budget in its asset, or --no-cap), a channel deposit is above
     --deposit-max, or the buyer stopped signing on the channel
  4  the seller refused the payment
  5  the payment is still pending after the retries (retry later: the same proof is reused)
  6  the payment could not be built (chain unreachable, bad key)"
    };
}

/// What `tollgate-pay --help` says after the flags.
const AFTER_HELP: &str = concat!(
    "Payment channels (x402 batch-settlement): tollgate-pay channels list | refund <url> | \
withdraw <channel> | finish <channel> (tollgate-pay channels --help).\n\n\
What is for sale: tollgate-pay discover <origin> (its /.well-known/x402.json) | search <words> \
(a facilitator's catalog; tollgate-pay search --help).\n\n",
    exit_codes!()
);

/// What `tollgate-pay channels --help` says after the flags.
const EXIT_CODES: &str = exit_codes!();

/// Send a request, paying an HTTP 402 with a local key.
#[derive(Debug, Parser)]
#[command(name = "tollgate-pay", version, after_help = AFTER_HELP)]
struct Args {
    #[command(flatten)]
    buying: Buying,
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

/// The keys, caps and budgets of a buyer (every command's).
#[derive(Debug, clap::Args)]
struct Buying {
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
    /// Most one payment-channel deposit may lock (x402 `batch-settlement`), naming its asset
    /// as --max does. Default: ten times --max, and never more than a budget in that asset.
    #[arg(long)]
    deposit_max: Option<String>,
}

/// `tollgate-pay channels …`: the payment channels this buyer paid from (x402 `batch-settlement`).
#[derive(Debug, Parser)]
#[command(name = "tollgate-pay channels", bin_name = "tollgate-pay channels", version, after_help = EXIT_CODES)]
struct ChannelsArgs {
    #[command(flatten)]
    buying: Buying,
    /// Print JSON lines instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    action: ChannelAction,
}

#[derive(Debug, clap::Subcommand)]
enum ChannelAction {
    /// The channels in the budget file: deposited, charged, left.
    List,
    /// Ask the seller at URL to return what is left in this buyer's channel with it (one
    /// transaction: the charges claimed, the rest sent back).
    Refund {
        /// A URL of the seller's, priced in `batch-settlement`.
        url: String,
        /// How much to return, in the token's atomic units (default: all that is left).
        #[arg(long)]
        amount: Option<u128>,
    },
    /// Start a timed withdrawal of all that is unclaimed, without the seller (a transaction
    /// this buyer sends and pays the gas of); finish it once the channel's delay has passed.
    Withdraw {
        /// The channel's id (`tollgate-pay channels list`).
        channel: String,
    },
    /// Finish a timed withdrawal whose delay has passed.
    Finish {
        /// The channel's id.
        channel: String,
    },
}

/// `tollgate-pay discover <origin>`: what an origin sells, from its `/.well-known/x402.json`.
#[derive(Debug, Parser)]
#[command(name = "tollgate-pay discover", bin_name = "tollgate-pay discover", version)]
struct DiscoverArgs {
    /// Print the manifest as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
    /// The origin (`https://api.example.com`).
    origin: String,
}

/// `tollgate-pay search <words>`: what a facilitator's catalog holds (what it settled).
#[derive(Debug, Parser)]
#[command(name = "tollgate-pay search", bin_name = "tollgate-pay search", version)]
struct SearchArgs {
    /// The facilitator whose catalog is searched.
    #[arg(long, env = "TOLLGATE_FACILITATOR_URL", default_value = "http://127.0.0.1:8402")]
    facilitator: String,
    /// The most results (1–100; the facilitator's default: 20).
    #[arg(long)]
    limit: Option<u32>,
    /// Print the results as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
    /// The words to find (every one must match).
    #[arg(required = true)]
    words: Vec<String>,
}

/// A failure and its exit code.
struct Failed(u8, String);

impl From<PayError> for Failed {
    fn from(e: PayError) -> Self {
        let code = match &e {
            PayError::NoOption(_)
            | PayError::OverCap { .. }
            | PayError::OverBudget { .. }
            | PayError::DepositOverLimit { .. }
            | PayError::Channel(_)
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

/// The buyer the flags describe.
fn buyer(args: &Buying) -> Result<Buyer, Failed> {
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
    if let Some(most) = &args.deposit_max {
        buyer = buyer.with_deposit_cap(Cap::parse(most)?);
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
    Ok(buyer)
}

async fn run(args: Args) -> Result<ExitCode, Failed> {
    let buyer = buyer(&args.buying)?;
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
    if let Some(channel) = &p.channel {
        let deposit = p.transaction.as_deref().map(|t| format!(", deposit transaction {t}")).unwrap_or_default();
        return format!(
            "paid {} {} on {} from payment channel {channel}{deposit}",
            p.whole,
            asset_name(&p.asset, &p.network),
            p.network
        );
    }
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
            "approval": p.approval, "channel": p.channel,
        }
    })
}

/// `tollgate-pay channels …`.
async fn channels(args: ChannelsArgs) -> Result<ExitCode, Failed> {
    let buyer = buyer(&args.buying)?;
    match args.action {
        ChannelAction::List => {
            if args.buying.budget_file.is_none() {
                return Err(Failed(2, "channels are remembered in the budget file: give --budget-file".into()));
            }
            let mut stdout = std::io::stdout().lock();
            let all = buyer.channels().await?;
            if all.is_empty() && !args.json {
                eprintln!("no payment channels in this budget file");
            }
            for c in all {
                let line = if args.json {
                    serde_json::json!({
                        "channel": c.id, "network": c.network.to_string(), "token": c.config.token.to_string(),
                        "receiver": c.config.receiver.to_string(), "url": c.url, "balance": c.balance.to_string(),
                        "charged": c.charged.to_string(), "signed": c.signed.to_string(),
                        "unspent": c.unspent().to_string(), "halted": c.halted, "stale": c.stale,
                    })
                    .to_string()
                } else {
                    let halted = c.halted.as_deref().map(|h| format!(" — stopped: {h}")).unwrap_or_default();
                    format!(
                        "{} on {} to {} ({}): deposited {}, charged {}, left {} atomic units of token {}{halted}",
                        c.id,
                        c.network,
                        c.config.receiver,
                        c.url,
                        c.balance,
                        c.charged,
                        c.unspent(),
                        c.config.token
                    )
                };
                writeln!(stdout, "{line}").map_err(|e| Failed(1, e.to_string()))?;
            }
        }
        ChannelAction::Refund { url, amount } => {
            let refunded = buyer.refund(&url, amount.map(tollgate_client::protocol::AtomicAmount)).await?;
            let transaction = refunded.transaction.as_deref().unwrap_or("unknown");
            if args.json {
                eprintln!(
                    "{}",
                    serde_json::json!({"refunded": {"channel": refunded.channel, "amount": refunded.amount.to_string(),
                        "transaction": refunded.transaction}})
                );
            } else {
                eprintln!(
                    "refunded {} atomic units from channel {} (transaction {transaction})",
                    refunded.amount, refunded.channel
                );
            }
        }
        ChannelAction::Withdraw { channel } => {
            let (transaction, amount, at) = buyer.start_withdrawal(&channel).await?;
            if args.json {
                eprintln!(
                    "{}",
                    serde_json::json!({"withdrawing": {"channel": channel, "amount": amount.to_string(),
                        "transaction": transaction, "finishableAt": at}})
                );
            } else {
                eprintln!(
                    "started withdrawing {amount} atomic units from channel {channel} (transaction {transaction}); \
                     finish it from Unix time {at} with: tollgate-pay channels finish {channel}"
                );
            }
        }
        ChannelAction::Finish { channel } => {
            let transaction = buyer.finish_withdrawal(&channel).await?;
            if args.json {
                eprintln!("{}", serde_json::json!({"withdrawn": {"channel": channel, "transaction": transaction}}));
            } else {
                eprintln!("withdrew what was left of channel {channel} (transaction {transaction})");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `tollgate-pay discover` and `search`: each item, its prices and a command line that buys it.
async fn for_sale(items: Vec<ForSale>, json: Option<String>) -> Result<ExitCode, Failed> {
    let mut out = std::io::stdout().lock();
    let written = (|| -> std::io::Result<()> {
        if let Some(json) = json {
            return writeln!(out, "{json}");
        }
        if items.is_empty() {
            eprintln!("nothing found");
        }
        // What a seller or a catalog wrote, shown without anything a terminal would act on.
        let shown = |text: &str| tollgate_client::protocol::x402::bazaar::printable(text);
        for item in &items {
            let service = match (&item.service_name, item.tags.is_empty()) {
                (Some(name), true) => format!(" [{name}]"),
                (Some(name), false) => format!(" [{name}: {}]", item.tags.join(", ")),
                (None, false) => format!(" [{}]", item.tags.join(", ")),
                (None, true) => String::new(),
            };
            let how = match (item.kind.as_str(), item.input.get("toolName").and_then(|t| t.as_str())) {
                ("mcp", Some(tool)) => format!("MCP tool {tool} at"),
                _ => item.method().unwrap_or("(an unknown method)").to_owned(),
            };
            let line = format!("{how} {} — {}{service}", item.url, item.description);
            writeln!(out, "{}", shown(&line))?;
            for requirement in &item.accepts {
                writeln!(out, "  {}", ForSale::price(requirement))?;
            }
            if let Some(line) = item.command_line() {
                writeln!(out, "  {line}")?;
            }
        }
        Ok(())
    })();
    written.map_err(|e| Failed(1, format!("cannot write: {e}")))?;
    Ok(ExitCode::SUCCESS)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // `tollgate-pay channels …`, `discover …` and `search …` have their own arguments; anything
    // else is a URL to send.
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let command = argv.get(1).and_then(|a| a.to_str()).map(str::to_owned);
    let outcome = match command.as_deref() {
        Some("channels") => {
            argv.remove(1);
            channels(ChannelsArgs::parse_from(argv)).await
        }
        Some("discover") => {
            argv.remove(1);
            let args = DiscoverArgs::parse_from(argv);
            match Buyer::new().discover(&args.origin).await {
                Ok(manifest) => {
                    let json = args.json.then(|| serde_json::to_string_pretty(&manifest).unwrap_or_default());
                    for_sale(manifest.items.into_iter().map(ForSale::from).collect(), json).await
                }
                Err(e) => Err(Failed(1, e.to_string())),
            }
        }
        Some("search") => {
            argv.remove(1);
            let args = SearchArgs::parse_from(argv);
            match Buyer::new().search(&args.facilitator, &args.words.join(" "), args.limit).await {
                Ok(found) => {
                    let json = args.json.then(|| serde_json::to_string_pretty(&found).unwrap_or_default());
                    for_sale(found.resources.into_iter().map(ForSale::from).collect(), json).await
                }
                Err(e) => Err(Failed(1, e.to_string())),
            }
        }
        _ => run(Args::parse_from(argv)).await,
    };
    match outcome {
        Ok(code) => code,
        Err(Failed(code, why)) => {
            eprintln!("tollgate-pay: {why}");
            ExitCode::from(code)
        }
    }
}
