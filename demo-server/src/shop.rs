//! The demo seller: three paid routes behind [`PaymentLayer`], as any axum app would mount them.

use std::sync::Arc;

use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::json;
use tollgate::{FacilitatorClient, Payment, PaymentLayer, Price};
use tollgate_protocol::{Address, Network};

use crate::EvmDemo;

/// The demo token's name (also its EIP-712 domain name on EVM).
pub const DEMO_TOKEN_NAME: &str = "Tollgate USD";
/// The demo token's symbol.
pub const DEMO_TOKEN_SYMBOL: &str = "TUSD";
/// The demo token's decimals (as USDC).
pub const DEMO_TOKEN_DECIMALS: u8 = 6;
/// The EIP-712 domain version of the demo EVM token.
const DEMO_TOKEN_VERSION: &str = "2";

/// One priced route, as the demo page lists it.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    /// Path (with a query for the dynamic route), as the page fetches it.
    pub path: &'static str,
    /// What it is.
    pub title: &'static str,
    /// Its prices, for people ("0.001 SOL").
    pub labels: Vec<String>,
}

/// The shop's prices.
#[derive(Debug, Clone)]
pub(crate) struct Catalog {
    quote: Vec<Price>,
    report: Vec<Price>,
    seller: Address,
    pub items: Arc<Vec<Item>>,
}

impl Catalog {
    pub(crate) fn new(seller: Address, spl_token: Address, evm: Option<&EvmDemo>) -> anyhow::Result<Self> {
        let mut quote = vec![Price::native_sol("0.001")?.pay_to(seller)];
        let mut quote_labels = vec!["0.001 SOL".to_owned()];
        // The token first: a buyer who holds it pays with it; SOL for the others (and the page,
        // whose hosted wallet sends SOL).
        let mut report = vec![
            Price::token(spl_token, "0.05", DEMO_TOKEN_DECIMALS)?.pay_to(seller),
            Price::native_sol("0.01")?.pay_to(seller),
        ];
        let mut report_labels = vec![format!("0.05 {DEMO_TOKEN_SYMBOL} (SPL)"), "0.01 SOL".to_owned()];
        if let Some(evm) = evm {
            let network = Network::eip155(evm.chain_id);
            let evm_seller: Address = evm.seller.parse()?;
            let token: Address = evm.token.parse()?;
            quote.push(Price::native_eth("0.0001")?.pay_to(evm_seller).on(network.clone()));
            quote_labels.push("0.0001 ETH".to_owned());
            report.push(
                Price::token(token, "0.05", DEMO_TOKEN_DECIMALS)?
                    .pay_to(evm_seller)
                    .on(network.clone())
                    .extra(json!({"name": DEMO_TOKEN_NAME, "version": DEMO_TOKEN_VERSION})),
            );
            report.push(Price::native_eth("0.001")?.pay_to(evm_seller).on(network));
            report_labels.push(format!("0.05 {DEMO_TOKEN_SYMBOL} (EIP-3009)"));
            report_labels.push("0.001 ETH".to_owned());
        }
        let items = vec![
            Item { path: "/quote", title: "A SOL/USD quote", labels: quote_labels },
            Item { path: "/report", title: "The daily report", labels: report_labels },
            Item {
                path: "/words?hello+tollgate",
                title: "Words, priced per word",
                labels: vec!["0.001 SOL a word (up to 9)".to_owned()],
            },
        ];
        Ok(Self { quote, report, seller, items: Arc::new(items) })
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

/// The paid routes.
pub(crate) fn router(catalog: &Catalog, facilitator: &FacilitatorClient) -> anyhow::Result<Router> {
    let priced = |prices: &[Price], description: &str| -> anyhow::Result<PaymentLayer> {
        let mut builder = PaymentLayer::builder().facilitator(facilitator.clone()).description(description);
        for price in prices {
            builder = builder.accept(price.clone());
        }
        Ok(builder.build()?)
    };
    // Dynamic: 0.001 SOL per word asked for, at least one, at most nine.
    let seller = catalog.seller;
    let per_word = PaymentLayer::builder()
        .facilitator(facilitator.clone())
        .pricing(move |parts| {
            let words = parts.uri.query().unwrap_or_default().split('+').filter(|w| !w.is_empty()).count().max(1);
            let amount = format!("0.00{}", words.min(9));
            async move { Some(vec![Price::native_sol(&amount).ok()?.pay_to(seller)]) }
        })
        .description("Words, priced per word (0.001 SOL each, up to 9)")
        .build()?;
    Ok(Router::new()
        .route("/quote", get(quote).route_layer(priced(&catalog.quote, "A SOL/USD quote")?))
        .route("/report", get(report).route_layer(priced(&catalog.report, "The daily report")?))
        .route("/words", get(words).route_layer(per_word)))
}
