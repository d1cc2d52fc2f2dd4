//! `tollgate-demo`: the whole flow in one process, offline.
//!
//! [`start`] runs the facilitator on the embedded Solana ledger with SQLite (in a data folder),
//! a seller app ("the shop") with three priced routes behind [`tollgate::PaymentLayer`], a web
//! page that pays through the facilitator's hosted mode, and funded demo buyers, then returns
//! what a newcomer needs: the URLs and a `tollgate-pay` command that works.
//!
//! Given the JSON-RPC of a local EVM development node (anvil), the shop also takes ETH and an
//! EIP-3009 token there, and — with Permit2 installed on the node (`scripts/install-permit2`) —
//! any ERC-20 through Permit2 and a metered route charged per word (`upto`): the demo funds its
//! accounts with `anvil_setBalance` and deploys the tokens itself.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tollgate_facilitator::AppState;
use tollgate_facilitator::admin::{self, NewKey};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::chains::solana::rpc::SolanaRpc;
use tollgate_facilitator::config::{Config, DatabaseUrl, EvmChainConfig, RpcUrl, Secret};
use tollgate_facilitator::devnet::SplDevToken;
use tollgate_facilitator::plans::Plan;
use tollgate_protocol::{Address, ChainFamily};

mod evm;
pub mod mcp;
mod page;
mod proxied;
mod shop;

pub use proxied::Proxied;

pub use shop::{DEMO_TOKEN_DECIMALS, DEMO_TOKEN_NAME, DEMO_TOKEN_SYMBOL, PERMIT2_TOKEN_NAME, PERMIT2_TOKEN_SYMBOL};

/// SOL each demo wallet (the command-line buyer, the page's hosted buyer, the seller) starts with.
pub const DEMO_FUNDING_SOL: u64 = 10;
/// Demo tokens (whole units) each buyer starts with, on each chain.
pub const DEMO_FUNDING_TOKENS: u64 = 100;

/// What to start, and where.
#[derive(Debug, Clone)]
pub struct Options {
    /// Data folder: SQLite database, master key, demo key files.
    pub data_dir: PathBuf,
    /// Where the facilitator listens (port 0: any free port).
    pub facilitator_addr: SocketAddr,
    /// Where the shop listens (port 0: any free port).
    pub shop_addr: SocketAddr,
    /// Where the proxied Python service's `tollgate-proxy` listens (port 0: any free port).
    pub proxy_addr: SocketAddr,
    /// JSON-RPC of a local EVM development node (anvil), for ETH and EIP-3009 prices.
    pub evm_rpc_url: Option<String>,
}

impl Options {
    /// Everything on free ports of 127.0.0.1, data in `data_dir`, Solana only.
    #[must_use]
    pub fn new(data_dir: &Path) -> Self {
        Self {
            data_dir: data_dir.to_path_buf(),
            facilitator_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            shop_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            proxy_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            evm_rpc_url: None,
        }
    }
}

/// The demo's EVM side, when a development node was given.
#[derive(Debug, Clone)]
pub struct EvmDemo {
    /// The node's JSON-RPC.
    pub rpc_url: String,
    /// Its chain id.
    pub chain_id: u64,
    /// The command-line buyer's key file (hex private key, mode 0600).
    pub buyer_key_file: PathBuf,
    /// The buyer's address.
    pub buyer: String,
    /// The seller's address.
    pub seller: String,
    /// The demo EIP-3009 token.
    pub token: String,
    /// The demo token paid through Permit2 (an ERC-20 with EIP-2612, without EIP-3009), when
    /// Permit2 could be installed on the node (`scripts/install-permit2`).
    pub permit2_token: Option<String>,
}

/// A running demo.
#[derive(Debug)]
pub struct Demo {
    /// The seller app (paid routes and the demo page).
    pub shop_url: String,
    /// The facilitator.
    pub facilitator_url: String,
    /// The embedded ledger's JSON-RPC.
    pub solana_rpc_url: String,
    /// The command-line buyer's keypair file.
    pub buyer_key_file: PathBuf,
    /// The command-line buyer's address.
    pub buyer: String,
    /// The web page's buyer: a custodial wallet the facilitator holds (hosted mode).
    pub page_buyer: String,
    /// The seller's address (paid by the routes).
    pub seller: String,
    /// The demo SPL token's mint.
    pub spl_token: String,
    /// The shop's API key at the facilitator (it sees the shop's payments).
    pub seller_api_key: String,
    /// The same key, in a file of the data folder (mode 0600), for `tollgate-demo-mcp`.
    pub seller_api_key_file: PathBuf,
    /// EVM, when a development node was given.
    pub evm: Option<EvmDemo>,
    /// The Python service sold through `tollgate-proxy` (none without `python3`).
    pub proxied: Option<Proxied>,
    /// The facilitator's state (the ledger lives as long as it does).
    pub state: AppState,
}

impl Demo {
    /// Stops what runs outside this process (the proxied service's Python process) and waits for
    /// it; the rest stops with the runtime.
    pub async fn stop(self) {
        if let Some(proxied) = self.proxied {
            proxied.stop().await;
        }
    }

    /// The shop's MCP tools over streamable HTTP.
    #[must_use]
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.shop_url)
    }

    /// The command that serves the demo's MCP tools over stdio (for an MCP client's
    /// configuration), paid to the demo seller through the demo facilitator.
    #[must_use]
    pub fn mcp_stdio_command(&self) -> String {
        format!(
            "cargo run --release -p tollgate-demo --bin tollgate-demo-mcp -- --facilitator {} --api-key-file {} --pay-to {}",
            self.facilitator_url,
            self.seller_api_key_file.display(),
            self.seller
        )
    }

    /// A `tollgate-pay` command that pays for a summary of the text it posts.
    #[must_use]
    pub fn post_pay_command(&self) -> String {
        format!(
            "cargo run --release -p tollgate-client --bin tollgate-pay -- --solana-key {} --solana-rpc {} --max 0.01SOL -d 'any text to summarize' {}/summarize",
            self.buyer_key_file.display(),
            self.solana_rpc_url,
            self.shop_url
        )
    }

    /// A `tollgate-pay` command that pays the cheapest route.
    #[must_use]
    pub fn pay_command(&self) -> String {
        format!(
            "cargo run --release -p tollgate-client --bin tollgate-pay -- --solana-key {} --solana-rpc {} --max 0.01SOL {}/quote",
            self.buyer_key_file.display(),
            self.solana_rpc_url,
            self.shop_url
        )
    }

    /// The `tollgate-pay` command that buys the shop's day pass (`/daily`): run again during the
    /// day, it signs in with the buyer's wallet instead of paying.
    #[must_use]
    pub fn day_pass_command(&self) -> String {
        format!(
            "cargo run --release -p tollgate-client --bin tollgate-pay -- --solana-key {} --solana-rpc {} --max 0.02SOL {}/daily",
            self.buyer_key_file.display(),
            self.solana_rpc_url,
            self.shop_url
        )
    }

    /// A page of `wallet`'s payments (`direction`: `sent`, `received` or `all`) as the shop's
    /// account sees them, from the facilitator's `GET /payment/history`.
    ///
    /// # Errors
    /// When the facilitator cannot be reached or refuses.
    pub async fn history(&self, wallet: &str, direction: &str) -> anyhow::Result<serde_json::Value> {
        history(&reqwest::Client::new(), &self.facilitator_url, &self.seller_api_key, wallet, direction).await
    }

    /// A `tollgate-pay` command that pays with the EIP-3009 token (at most 0.1 of it), when EVM
    /// is on.
    #[must_use]
    pub fn evm_pay_command(&self, path: &str) -> Option<String> {
        let evm = self.evm.as_ref()?;
        Some(self.evm_command(evm, &format!("0.1@{}", evm.token), path))
    }

    /// A `tollgate-pay` command that pays with the Permit2 token (at most 0.05 of it: the
    /// metered route's maximum), when EVM is on and Permit2 was installed.
    #[must_use]
    pub fn permit2_pay_command(&self, path: &str) -> Option<String> {
        let evm = self.evm.as_ref()?;
        Some(self.evm_command(evm, &format!("0.05@{}", evm.permit2_token.as_ref()?), path))
    }

    /// The `tollgate-pay` command that pays `/ticker` from a payment channel (x402
    /// `batch-settlement`), when EVM is on: the first run deposits a hundred calls' worth, the next
    /// ones sign a voucher each (no transaction); the channel's count is kept in the buyer's
    /// budget file beside its key. `tollgate-pay channels refund` returns what is left.
    #[must_use]
    pub fn channel_pay_command(&self) -> Option<String> {
        let evm = self.evm.as_ref()?;
        let budget = evm.buyer_key_file.with_file_name("evm-buyer-budget.sqlite");
        // The seller's announced deposit (a hundred calls), allowed by --deposit-max.
        let url =
            format!("--deposit-max 0.01@{} --budget-file {} {}/ticker", evm.token, budget.display(), self.shop_url);
        Some(self.evm_command(evm, &format!("{}@{}", crate::shop::TICK_PRICE, evm.token), &url))
    }

    fn evm_command(&self, evm: &EvmDemo, max: &str, path: &str) -> String {
        let url = if path.starts_with('/') { format!("{}{path}", self.shop_url) } else { path.to_owned() };
        format!(
            "TOLLGATE_EVM_KEY=$(cat {}) cargo run --release -p tollgate-client --bin tollgate-pay -- --evm-rpc {} --max {max} {url}",
            evm.buyer_key_file.display(),
            evm.rpc_url,
        )
    }

    /// The proxied service's priced URL the demo prints.
    #[must_use]
    pub fn proxy_url(&self) -> Option<String> {
        Some(format!("{}/forecast?city=Lisbon", self.proxied.as_ref()?.url))
    }

    /// A `tollgate-pay` command that pays the proxied service's forecast in SOL.
    #[must_use]
    pub fn proxy_pay_command(&self) -> Option<String> {
        Some(format!(
            "cargo run --release -p tollgate-client --bin tollgate-pay -- --solana-key {} --solana-rpc {} --max 0.001SOL {}",
            self.buyer_key_file.display(),
            self.solana_rpc_url,
            self.proxy_url()?
        ))
    }

    /// A `tollgate-pay` command that pays the proxied service's metered summary (`upto`), when
    /// EVM is on and Permit2 was installed.
    #[must_use]
    pub fn proxy_metered_command(&self) -> Option<String> {
        let url = format!("{}/summary?words=12", self.proxied.as_ref()?.url);
        self.permit2_pay_command(&url)
    }
}

/// A page of `wallet`'s payments in `direction` as `api_key`'s account sees them.
pub(crate) async fn history(
    http: &reqwest::Client,
    facilitator_url: &str,
    api_key: &str,
    wallet: &str,
    direction: &str,
) -> anyhow::Result<serde_json::Value> {
    let answer = http
        .get(format!("{facilitator_url}/payment/history/{wallet}?type={direction}"))
        .bearer_auth(api_key)
        .send()
        .await?;
    anyhow::ensure!(answer.status().is_success(), "history of {wallet}: {}", answer.status());
    Ok(answer.json().await?)
}

/// Writes `text` readable by its owner only.
pub(crate) fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
        f.write_all(text.as_bytes())?;
    }
    #[cfg(not(unix))]
    std::fs::write(path, text)?;
    Ok(())
}

/// Writes a keypair as the Solana CLI does (a JSON array of its 64 bytes), readable by its owner only.
fn write_keypair(path: &Path, keypair: &Keypair) -> anyhow::Result<()> {
    write_private(path, &serde_json::to_string(&keypair.to_bytes().to_vec())?)
}

/// Starts everything.
///
/// # Errors
/// When the ledger, the database, the EVM node or a listener cannot start.
pub async fn start(options: &Options) -> anyhow::Result<Demo> {
    let data_dir = &options.data_dir;
    std::fs::create_dir_all(data_dir)?;
    let evm_signer = alloy::signers::local::PrivateKeySigner::random();
    let (config, evm_chain) = demo_config(options, &evm_signer).await?;
    let state = AppState::from_config(config).await?;
    let backend = state.chains.embedded_solana().ok_or_else(|| anyhow::anyhow!("no embedded ledger"))?;
    let solana_rpc_url = backend
        .embedded
        .as_ref()
        .map(|l| l.rpc_url().to_owned())
        .ok_or_else(|| anyhow::anyhow!("no embedded ledger"))?;
    let rpc = &backend.rpc;

    // The shop's API key (enterprise: the demo page reads its history and follows its events).
    let seller_key = new_key(&state, "demo seller").await?;
    // The page's buyer: an account with a custodial Solana wallet (hosted mode).
    let page_key = new_key(&state, "demo page buyer").await?;
    let master = state.master_key.as_ref().ok_or_else(|| anyhow::anyhow!("no master key for custodial wallets"))?;
    let page_buyer =
        admin::create_wallet(&*state.store, master, &page_key.record.id, ChainFamily::Solana, chrono::Utc::now())
            .await?;

    let page_buyer_key: solana_sdk::pubkey::Pubkey = page_buyer.parse()?;
    let Funded { buyer, seller, token, buyer_key_file } = fund(rpc, data_dir, &page_buyer_key).await?;

    let evm = match (&options.evm_rpc_url, evm_chain) {
        (Some(url), Some(chain_id)) => {
            let seller = admin::create_wallet(
                &*state.store,
                master,
                &seller_key.record.id,
                ChainFamily::Evm,
                chrono::Utc::now(),
            )
            .await?;
            Some(evm::prepare(&state, (url, chain_id), data_dir, &evm_signer, &seller).await?)
        }
        _ => None,
    };

    let listener = tokio::net::TcpListener::bind(options.facilitator_addr).await?;
    let facilitator_url = format!("http://{}", listener.local_addr()?);
    // The demo runs until the process ends.
    tokio::spawn(tollgate_facilitator::run(listener, state.clone(), std::future::pending()));

    let listener = tokio::net::TcpListener::bind(options.shop_addr).await?;
    let shop_url = format!("http://{}", listener.local_addr()?);
    let seller_address: Address = seller.pubkey().to_string().parse()?;
    let catalog = shop::Catalog::new(seller_address, token.mint.to_string().parse()?, evm.as_ref())?;
    let facilitator = tollgate::FacilitatorClient::new(&facilitator_url, seller_key.secret.expose());
    let page = Arc::new(page::Page {
        http: reqwest::Client::new(),
        shop_url: shop_url.clone(),
        facilitator_url: facilitator_url.clone(),
        buyer_api_key: page_key.secret.expose().to_owned(),
        buyer_wallet: page_buyer.clone(),
        seller_api_key: seller_key.secret.expose().to_owned(),
        seller: seller.pubkey().to_string(),
        evm_seller: evm.as_ref().map(|e| e.seller.clone()),
        catalog: catalog.clone(),
        channels: if catalog.sells_ticker() {
            Some(tollgate::batch::FileChannels::open(data_dir.join("channels.jsonl"))?)
        } else {
            None
        },
    });
    let (live, _) = tokio::sync::broadcast::channel(256);
    let followed: Vec<String> =
        std::iter::once(seller.pubkey().to_string()).chain(evm.as_ref().map(|e| e.seller.clone())).collect();
    tokio::spawn(page::follow(
        format!("{}/ws", facilitator_url.replacen("http://", "ws://", 1)),
        seller_key.secret.expose().to_owned(),
        followed,
        live.clone(),
    ));
    let (shop, storefront) = shop::router(&catalog, &facilitator, &shop_url, &data_dir.join("channels.jsonl"))?;
    // The storefront's layer around everything: /.well-known/x402.json is no route's.
    let app = shop.merge(page::router(page, live)).layer(storefront.layer());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let proxied = match proxied::start(
        data_dir,
        options.proxy_addr,
        (&facilitator_url, seller_key.secret.expose()),
        (&seller.pubkey().to_string(), &token.mint.to_string()),
        evm.as_ref(),
    )
    .await
    {
        Ok(proxied) => Some(proxied),
        Err(e) => {
            tracing::warn!(error = %e, "the proxied Python service is left out");
            None
        }
    };

    let seller_api_key_file = data_dir.join("demo-seller-api-key");
    write_private(&seller_api_key_file, seller_key.secret.expose())?;

    Ok(Demo {
        shop_url,
        facilitator_url,
        solana_rpc_url,
        buyer_key_file,
        buyer: buyer.pubkey().to_string(),
        page_buyer,
        seller: seller.pubkey().to_string(),
        spl_token: token.mint.to_string(),
        seller_api_key: seller_key.secret.expose().to_owned(),
        seller_api_key_file,
        evm,
        proxied,
        state,
    })
}

/// Starts a local anvil (the project's, or `TOLLGATE_ANVIL`) on a free port of 127.0.0.1, and
/// the demo on it with data in `data_dir`: what the EVM tests and a newcomer trying EVM run. The
/// node stops when the returned instance is dropped.
///
/// # Errors
/// When anvil is not installed or does not start, or the demo cannot start.
pub async fn start_with_anvil(data_dir: &Path) -> anyhow::Result<(alloy::node_bindings::AnvilInstance, Demo)> {
    let anvil =
        alloy::node_bindings::Anvil::at(tollgate_facilitator::devnet::anvil_binary()?).host("127.0.0.1").try_spawn()?;
    let options = Options { evm_rpc_url: Some(anvil.endpoint()), ..Options::new(data_dir) };
    let demo = start(&options).await?;
    Ok((anvil, demo))
}

/// The demo facilitator's configuration: development mode (the embedded ledger, a generated
/// master key, `/dev/*`) on a SQLite file in the data directory, and the EVM chain at
/// `--evm-rpc-url` when given (its chain id, settled from `evm_signer`'s account).
async fn demo_config(
    options: &Options,
    evm_signer: &alloy::signers::local::PrivateKeySigner,
) -> anyhow::Result<(Config, Option<u64>)> {
    let data_dir = &options.data_dir;
    let mut config = Config {
        database_url: DatabaseUrl::parse(&data_dir.join("tollgate.db").to_string_lossy())?,
        listen: options.facilitator_addr,
        // The demo is development mode: the embedded ledger, a generated master key, `/dev/*`.
        dev: true,
        ..Config::default()
    };
    let evm_chain = match &options.evm_rpc_url {
        Some(url) => {
            let chain_id = evm::chain_id(url).await?;
            config.evm.push(EvmChainConfig {
                network: tollgate_protocol::Network::eip155(chain_id),
                rpc_url: RpcUrl::new(url.clone()),
            });
            config.evm_signer_key = Some(Secret::new(alloy::hex::encode(evm_signer.to_bytes())));
            Some(chain_id)
        }
        None => None,
    };
    Ok((config, evm_chain))
}

/// The demo's wallets on the ledger.
struct Funded {
    /// The buyer's key (also written to `buyer_key_file`).
    buyer: Keypair,
    /// The seller's receiving wallet.
    seller: Keypair,
    /// A stablecoin-like SPL token the buyer holds and the seller has an account for.
    token: SplDevToken,
    buyer_key_file: PathBuf,
}

/// The seller's receiving address and the buyer's key, written to the data directory, and the
/// page's custodial buyer `page_buyer`, all funded on the ledger; a token the buyer holds.
async fn fund(rpc: &SolanaRpc, data_dir: &Path, page_buyer: &solana_sdk::pubkey::Pubkey) -> anyhow::Result<Funded> {
    let (buyer, seller, treasury) = (Keypair::new(), Keypair::new(), Keypair::new());
    let buyer_key_file = data_dir.join("demo-buyer.json");
    write_keypair(&buyer_key_file, &buyer)?;
    write_keypair(&data_dir.join("demo-seller.json"), &seller)?;
    for who in [&buyer.pubkey(), &seller.pubkey(), &treasury.pubkey(), page_buyer] {
        let signature = rpc.request_airdrop(who, DEMO_FUNDING_SOL * 1_000_000_000).await?;
        rpc.wait_for_outcome(&signature, std::time::Duration::from_secs(30)).await?;
    }
    // A stablecoin-like SPL token: the buyer holds some, the seller has an account for it.
    let token = SplDevToken::create(rpc, treasury, DEMO_TOKEN_DECIMALS).await?;
    let whole = 10u64.pow(u32::from(DEMO_TOKEN_DECIMALS));
    token.fund(rpc, &buyer.pubkey(), DEMO_FUNDING_TOKENS * whole).await?;
    token.fund(rpc, &seller.pubkey(), 0).await?;

    Ok(Funded { buyer, seller, token, buyer_key_file })
}

/// A test-environment enterprise key of a new account.
async fn new_key(state: &AppState, label: &str) -> anyhow::Result<admin::CreatedKey> {
    Ok(admin::create_key(
        &*state.store,
        NewKey {
            plan: Plan::Enterprise,
            rpm: Some(100_000),
            label: Some(label.into()),
            account: None,
            env: KeyEnv::Test,
        },
        chrono::Utc::now(),
    )
    .await?)
}
