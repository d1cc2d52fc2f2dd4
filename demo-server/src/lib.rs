//! `tollgate-demo`: the whole flow in one process, offline.
//!
//! [`start`] runs the facilitator on the embedded Solana ledger with SQLite (in a data folder),
//! a seller app with three priced routes behind [`tollgate::PaymentLayer`], and a funded demo
//! buyer whose keypair file it writes, then returns what a newcomer needs: the URLs and a
//! `tollgate-pay` command that works.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::json;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tollgate::{FacilitatorClient, Payment, PaymentLayer, Price};
use tollgate_facilitator::AppState;
use tollgate_facilitator::admin::{self, NewKey};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::auth::plans::Plan;
use tollgate_facilitator::config::{Config, DatabaseUrl};

/// SOL each demo wallet (buyer, seller) starts with.
pub const DEMO_FUNDING_SOL: u64 = 10;

/// A running demo.
#[derive(Debug)]
pub struct Demo {
    /// The seller app (paid routes).
    pub shop_url: String,
    /// The facilitator.
    pub facilitator_url: String,
    /// The embedded ledger's JSON-RPC.
    pub solana_rpc_url: String,
    /// The demo buyer's keypair file.
    pub buyer_key_file: PathBuf,
    /// The demo buyer's address.
    pub buyer: String,
    /// The seller's address (paid by the routes).
    pub seller: String,
    /// The shop's API key at the facilitator (it sees the shop's payments).
    pub seller_api_key: String,
    /// The facilitator's state (the ledger lives as long as it does).
    pub state: AppState,
}

impl Demo {
    /// A `tollgate-pay` command that pays the cheapest route.
    #[must_use]
    pub fn pay_command(&self) -> String {
        format!(
            "cargo run --release -p tollgate-client --bin tollgate-pay -- --solana-key {} --solana-rpc {} --max 0.01 {}/quote",
            self.buyer_key_file.display(),
            self.solana_rpc_url,
            self.shop_url
        )
    }
}

async fn quote(Extension(payment): Extension<Payment>) -> Json<serde_json::Value> {
    Json(json!({
        "quote": {"pair": "SOL/USD", "price": "142.17", "at": chrono::Utc::now().to_rfc3339()},
        "paidBy": payment.payer, "transaction": payment.transaction,
    }))
}

async fn report(Extension(payment): Extension<Payment>) -> Json<serde_json::Value> {
    Json(json!({
        "report": "Daily report: 1,284 paid requests, 0 double spends, median settlement 0.4 s.",
        "paidBy": payment.payer, "transaction": payment.transaction,
    }))
}

async fn words(Extension(payment): Extension<Payment>, uri: axum::http::Uri) -> Json<serde_json::Value> {
    Json(json!({
        "words": uri.query().unwrap_or_default(),
        "paidBy": payment.payer, "transaction": payment.transaction,
    }))
}

/// Writes a keypair as the Solana CLI does (a JSON array of its 64 bytes), readable by its owner only.
fn write_keypair(path: &Path, keypair: &Keypair) -> anyhow::Result<()> {
    let text = serde_json::to_string(&keypair.to_bytes().to_vec())?;
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

/// Starts everything: the facilitator on `facilitator_addr`, the shop on `shop_addr`, with data
/// in `data_dir`.
///
/// # Errors
/// When the ledger, the database or a listener cannot start.
pub async fn start(data_dir: &Path, facilitator_addr: SocketAddr, shop_addr: SocketAddr) -> anyhow::Result<Demo> {
    std::fs::create_dir_all(data_dir)?;
    let db = data_dir.join("tollgate.db");
    let config = Config {
        database_url: DatabaseUrl::parse(&db.to_string_lossy())?,
        listen: facilitator_addr,
        ..Config::default()
    };
    let state = AppState::from_config(config).await?;
    let backend = state.chains.embedded_solana().ok_or_else(|| anyhow::anyhow!("no embedded ledger"))?;
    let solana_rpc_url = backend
        .embedded
        .as_ref()
        .map(|l| l.rpc_url().to_owned())
        .ok_or_else(|| anyhow::anyhow!("no embedded ledger"))?;

    // The seller's API key (enterprise: the demo page may poll).
    let key = admin::create_key(
        &*state.store,
        NewKey {
            plan: Plan::Enterprise,
            rpm: Some(100_000),
            label: Some("demo seller".into()),
            account: None,
            env: KeyEnv::Test,
        },
        chrono::Utc::now(),
    )
    .await?;

    // Wallets: the seller's receiving address and the buyer's key, both funded on the ledger.
    let (buyer, seller) = (Keypair::new(), Keypair::new());
    let buyer_key_file = data_dir.join("demo-buyer.json");
    write_keypair(&buyer_key_file, &buyer)?;
    write_keypair(&data_dir.join("demo-seller.json"), &seller)?;
    for who in [&buyer, &seller] {
        let signature = backend.rpc.request_airdrop(&who.pubkey(), DEMO_FUNDING_SOL * 1_000_000_000).await?;
        backend.rpc.wait_for_outcome(&signature, std::time::Duration::from_secs(30)).await?;
    }

    let listener = tokio::net::TcpListener::bind(facilitator_addr).await?;
    let facilitator_url = format!("http://{}", listener.local_addr()?);
    // The demo runs until the process ends.
    tokio::spawn(tollgate_facilitator::run(listener, state.clone(), std::future::pending()));

    let seller_address: tollgate_protocol::Address = seller.pubkey().to_string().parse()?;
    let facilitator = FacilitatorClient::new(&facilitator_url, key.secret.expose());
    let priced = |amount: &str, description: &str| -> anyhow::Result<PaymentLayer> {
        Ok(PaymentLayer::builder()
            .facilitator(facilitator.clone())
            .accept(Price::native_sol(amount)?.pay_to(seller_address))
            .description(description)
            .build()?)
    };
    // Dynamic: a penny per word asked for, at least one.
    let per_word = PaymentLayer::builder()
        .facilitator(facilitator.clone())
        .pricing(move |parts| {
            let words = parts.uri.query().unwrap_or_default().split('+').filter(|w| !w.is_empty()).count().max(1);
            let amount = format!("0.00{}", words.min(9));
            async move { Some(vec![Price::native_sol(&amount).ok()?.pay_to(seller_address)]) }
        })
        .description("Words, priced per word (0.001 SOL each, up to 9)")
        .build()?;
    let shop = Router::new()
        .route("/quote", get(quote).route_layer(priced("0.001", "A SOL/USD quote")?))
        .route("/report", get(report).route_layer(priced("0.01", "The daily report")?))
        .route("/words", get(words).route_layer(per_word))
        .route(
            "/",
            get(|| async {
                "Tollgate demo shop: GET /quote (0.001 SOL), /report (0.01 SOL), /words?a+b (0.001 SOL a word)\n"
            }),
        );
    let listener = tokio::net::TcpListener::bind(shop_addr).await?;
    let shop_url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, shop).await });

    Ok(Demo {
        shop_url,
        facilitator_url,
        solana_rpc_url,
        buyer_key_file,
        buyer: buyer.pubkey().to_string(),
        seller: seller.pubkey().to_string(),
        seller_api_key: key.secret.expose().to_owned(),
        state,
    })
}
