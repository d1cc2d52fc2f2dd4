//! `tollgate-facilitator`: serve the API, or manage API keys.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tollgate_facilitator::admin::{self, NewKey};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::config::{Config, Flags, LogFormat};
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::store::{AccountStore, SqlStore};
use tollgate_facilitator::{AppState, run, shutdown_signal};
use tollgate_protocol::ChainFamily;

#[derive(Debug, Parser)]
#[command(name = "tollgate-facilitator", version, about = "Tollgate payment gateway and x402 facilitator")]
struct Cli {
    /// Config file (TOML). Env: TOLLGATE_CONFIG.
    #[arg(long, global = true, env = "TOLLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Database URL: sqlite://FILE (default sqlite://tollgate.db) or postgres://…
    #[arg(long, global = true)]
    database: Option<String>,
    /// Development mode: the embedded Solana ledger, a generated master key, `/dev/airdrop`.
    /// Never for real money. Env: TOLLGATE_DEV=1.
    #[arg(long, global = true)]
    dev: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the API (the default).
    Serve {
        /// Address to listen on (default 127.0.0.1:8402). Env: TOLLGATE_LISTEN.
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Manage API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Manage custodial wallets (hosted mode).
    #[command(subcommand)]
    Wallets(WalletsCommand),
}

#[derive(Debug, Subcommand)]
enum WalletsCommand {
    /// Create a custodial wallet for a key's account and print its address, alone, on stdout.
    Create {
        /// The key (`key_…`, from `keys list`) whose account owns the wallet.
        #[arg(long)]
        key: String,
        /// solana or evm.
        #[arg(long, value_parser = parse_family)]
        chain: ChainFamily,
    },
}

fn parse_family(s: &str) -> Result<ChainFamily, String> {
    match s {
        "solana" => Ok(ChainFamily::Solana),
        "evm" => Ok(ChainFamily::Evm),
        _ => Err(format!("unknown chain {s:?}: expected solana or evm")),
    }
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Create a key and print it, alone, on stdout. It is not shown again.
    Create {
        /// standard, premium or enterprise.
        #[arg(long, value_parser = parse_plan)]
        plan: Plan,
        /// Requests per minute (enterprise keys only).
        #[arg(long)]
        rpm: Option<u32>,
        /// A label shown in listings.
        #[arg(long)]
        label: Option<String>,
        /// Add the key to this account (rotation) instead of creating a new account.
        #[arg(long)]
        account: Option<String>,
        /// Create a `tg_test_` key instead of a `tg_live_` key.
        #[arg(long)]
        test: bool,
        /// Print `{"key", "id", "accountId", "plan"}` as JSON instead of the key alone.
        #[arg(long)]
        json: bool,
    },
    /// List keys (never the keys themselves).
    List,
    /// Delete a key by id (`key_…`).
    Delete {
        /// The key's id, as `keys list` shows it.
        id: String,
    },
}

fn parse_plan(s: &str) -> Result<Plan, String> {
    s.parse()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let listen = match &cli.command {
        Some(Command::Serve { listen }) => *listen,
        _ => None,
    };
    let flags = Flags { listen, database_url: cli.database.clone(), dev: cli.dev };
    let config = match Config::load(cli.config.as_deref(), |k| std::env::var(k).ok(), &flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let tracing = match init_tracing(config.log_format) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command.unwrap_or(Command::Serve { listen: None }) {
            Command::Serve { .. } => serve(config).await,
            Command::Keys(cmd) => keys(config, cmd).await,
            Command::Wallets(cmd) => wallets(config, cmd).await,
        }
    });
    // The runtime ends first: trace export sends its last spans from outside it.
    drop(runtime);
    tracing.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What logging set up that must be closed at exit: the trace export, when there is one.
struct Tracing {
    #[cfg(feature = "otel")]
    export: Option<tollgate_facilitator::otel::Exporting>,
}

impl Tracing {
    fn shutdown(self) {
        #[cfg(feature = "otel")]
        if let Some(export) = self.export {
            export.shutdown();
        }
    }
}

/// Logs to stderr (filtered by `TOLLGATE_LOG`) and, with the `otel` feature and an OTLP
/// endpoint configured, exports spans (at INFO and above, whatever `TOLLGATE_LOG` says).
fn init_tracing(format: LogFormat) -> anyhow::Result<Tracing> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOLLGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    // Colours only for a terminal: redirected logs stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let fmt = match format {
        LogFormat::Text => fmt.with_filter(capped(filter)).boxed(),
        LogFormat::Json => fmt.json().with_filter(capped(filter)).boxed(),
    };
    let registry = tracing_subscriber::registry().with(fmt);
    #[cfg(feature = "otel")]
    {
        let export = tollgate_facilitator::otel::layer()?;
        let (layer, export) = export.map_or((None, None), |(layer, export)| (Some(layer), Some(export)));
        let spans = capped(tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
        registry.with(layer.with_filter(spans)).init();
        if let Some(endpoint) = tollgate_facilitator::otel::configured_endpoint() {
            tracing::info!(%endpoint, "exporting traces (OpenTelemetry, OTLP over HTTP)");
        }
        Ok(Tracing { export })
    }
    #[cfg(not(feature = "otel"))]
    {
        registry.init();
        let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
        if set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            tracing::warn!(
                "OTEL_EXPORTER_OTLP_ENDPOINT is set, but this build has no trace export (cargo feature `otel`)"
            );
        }
        Ok(Tracing {})
    }
}

/// `filter`, with what must never be written whatever it says: the EVM transport's debug spans
/// carry the whole RPC URL (providers put their key in it), the OpenTelemetry exporter's the
/// collector's.
fn capped(filter: tracing_subscriber::EnvFilter) -> tracing_subscriber::EnvFilter {
    ["alloy_transport_http=info", "alloy_rpc_client=info", "alloy_provider=info", "opentelemetry=warn"]
        .iter()
        .filter_map(|d| d.parse().ok())
        .fold(filter, tracing_subscriber::EnvFilter::add_directive)
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let listen = config.listen;
    let state = AppState::from_config(config).await?;
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    tracing::info!(database = %state.config.database_url, "listening on http://{addr}");
    run(listener, state, shutdown_signal()).await?;
    Ok(())
}

async fn wallets(config: Config, cmd: WalletsCommand) -> anyhow::Result<()> {
    let WalletsCommand::Create { key, chain } = cmd;
    let master = tollgate_facilitator::wallets::resolve_master_key(&config)?
        .ok_or_else(|| anyhow::anyhow!("custodial wallets need TOLLGATE_MASTER_KEY (32 bytes, hex or base64), or --dev for development mode's generated key"))?;
    let store = SqlStore::connect_with(&config.database_url, 2, 1)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open database {}: {e}", config.database_url))?;
    let address = admin::create_wallet(&store, &master, &key, chain, chrono::Utc::now()).await?;
    eprintln!("created a custodial {chain} wallet for the account of {key}:");
    println!("{address}");
    store.close().await;
    Ok(())
}

async fn keys(config: Config, cmd: KeysCommand) -> anyhow::Result<()> {
    let store = SqlStore::connect_with(&config.database_url, 2, 1)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open database {}: {e}", config.database_url))?;
    let now = chrono::Utc::now();
    match cmd {
        KeysCommand::Create { plan, rpm, label, account, test, json } => {
            let env = if test { KeyEnv::Test } else { KeyEnv::Live };
            let created = admin::create_key(&store, NewKey { plan, rpm, label, account, env }, now).await?;
            let r = &created.record;
            eprintln!(
                "created {} ({} plan) for account {}; the key is shown only this once:",
                r.id, r.plan, r.account_id
            );
            if json {
                let out = serde_json::json!({
                    "key": created.secret.expose(),
                    "id": r.id,
                    "accountId": r.account_id,
                    "plan": r.plan.as_str(),
                });
                println!("{out}");
            } else {
                println!("{}", created.secret.expose());
            }
        }
        KeysCommand::List => {
            println!(
                "{:<31} {:<31} {:<10} {:<5} {:>6} {:<6} {:<20} {:<20} label",
                "id", "account", "plan", "env", "rpm", "ends", "created", "last used"
            );
            for k in store.list_api_keys().await? {
                println!(
                    "{:<31} {:<31} {:<10} {:<5} {:>6} …{:<5} {:<20} {:<20} {}",
                    k.id,
                    k.account_id,
                    k.plan.as_str(),
                    k.env,
                    k.rpm.map_or_else(|| config.plans.get(k.plan).rpm.to_string(), |r| r.to_string()),
                    k.hint,
                    k.created_at.format("%Y-%m-%d %H:%M:%S"),
                    k.last_used_at.map_or_else(|| "never".to_owned(), |t| t.format("%Y-%m-%d %H:%M:%S").to_string()),
                    k.label.unwrap_or_default(),
                );
            }
        }
        KeysCommand::Delete { id } => {
            if store.delete_api_key(&id).await? {
                eprintln!(
                    "deleted {id} (a running facilitator stops accepting it within {} s)",
                    config.limits.key_cache_ttl_secs
                );
            } else {
                anyhow::bail!("no key {id}");
            }
        }
    }
    store.close().await;
    Ok(())
}
