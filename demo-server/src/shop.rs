//! The demo seller: paid routes behind [`PaymentLayer`], as any axum app would mount them —
//! fixed prices, a paid `POST` (`/summarize`), a price per request (`/words`), a day pass
//! (`/daily`: its payer signs in for 24 h instead of paying again), and with EVM and Permit2 a
//! metered route (`/story`, x402 `upto`) charged for the words it answers.

use std::sync::Arc;

use axum::extract::Query;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::json;
use tollgate::discovery::{BodyType, Discovery, ServiceMetadata, Storefront};
use tollgate::{Charge, FacilitatorClient, Payment, PaymentLayer, Price};
use tollgate_protocol::{Address, AtomicAmount, Network};

use crate::EvmDemo;

/// The demo token's name (also its EIP-712 domain name on EVM).
pub const DEMO_TOKEN_NAME: &str = "Tollgate USD";
/// The demo token's symbol.
pub const DEMO_TOKEN_SYMBOL: &str = "TUSD";
/// The demo token's decimals (as USDC).
pub const DEMO_TOKEN_DECIMALS: u8 = 6;
/// The EIP-712 domain version of the demo EVM token.
const DEMO_TOKEN_VERSION: &str = "2";
/// What one call of `/ticker` costs, from a payment channel.
pub const TICK_PRICE: &str = "0.0001";
/// The demo token paid through Permit2 (an ERC-20 with EIP-2612, without EIP-3009).
pub const PERMIT2_TOKEN_NAME: &str = "Permit USD";
/// Its symbol.
pub const PERMIT2_TOKEN_SYMBOL: &str = "PUSD";
/// Its EIP-2612 domain version.
const PERMIT2_TOKEN_VERSION: &str = "1";
/// The most a story costs (whole PUSD): 50 words.
const STORY_MAX: &str = "0.05";
/// What a word of story costs, in atomic PUSD (0.001).
const STORY_PER_WORD: AtomicAmount = AtomicAmount(1_000);
/// The longest story told.
const STORY_MAX_WORDS: u64 = 50;
/// What the day pass to `/daily` costs, in SOL.
const DAILY_PASS: &str = "0.02";

/// One priced route, as the demo page lists it.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    /// The method (`GET`, `POST`).
    pub method: &'static str,
    /// Path (with a query for the dynamic route), as the page fetches it.
    pub path: &'static str,
    /// The body the page sends, for a route that takes one.
    pub body: Option<&'static str>,
    /// What it is.
    pub title: &'static str,
    /// Its prices, for people ("0.001 SOL").
    pub labels: Vec<String>,
    /// Set for a route the page's hosted (SOL) wallet cannot pay: how to pay it instead.
    pub note: Option<&'static str>,
}

impl Item {
    /// A GET route, payable from the page.
    fn get(path: &'static str, title: &'static str, labels: Vec<String>) -> Self {
        Self { method: "GET", path, body: None, title, labels, note: None }
    }
}

/// What the page posts to `/summarize`.
pub(crate) const SUMMARIZE_SAMPLE: &str =
    "Tollgate sells any request, not only a GET: this text was posted, paid for, and summarized by the shop.";

/// The shop's prices.
#[derive(Debug, Clone)]
pub(crate) struct Catalog {
    quote: Vec<Price>,
    report: Vec<Price>,
    /// The day pass to `/daily`.
    daily: Vec<Price>,
    /// The metered story's price (with EVM and Permit2).
    story: Option<Price>,
    /// The ticker's price per call, from a payment channel (with EVM).
    ticker: Option<Price>,
    seller: Address,
    pub items: Arc<Vec<Item>>,
    /// The demo tokens' symbols by address (lowercase), for people.
    pub symbols: Arc<Vec<(String, &'static str)>>,
}

impl Catalog {
    /// Whether `/ticker` is sold (from payment channels, with EVM).
    pub(crate) const fn sells_ticker(&self) -> bool {
        self.ticker.is_some()
    }

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
        let mut story = None;
        let mut ticker = None;
        let mut symbols = vec![(spl_token.to_string().to_lowercase(), DEMO_TOKEN_SYMBOL)];
        if let Some(evm) = evm {
            symbols.push((evm.token.to_lowercase(), DEMO_TOKEN_SYMBOL));
            if let Some(pusd) = &evm.permit2_token {
                symbols.push((pusd.to_lowercase(), PERMIT2_TOKEN_SYMBOL));
            }
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
            report.push(Price::native_eth("0.001")?.pay_to(evm_seller).on(network.clone()));
            ticker = Some(
                Price::batch(token, TICK_PRICE, DEMO_TOKEN_DECIMALS)?
                    .pay_to(evm_seller)
                    .on(network.clone())
                    // A hundred calls' deposit, announced to buyers (x402's `minDeposit`).
                    .extra(json!({"name": DEMO_TOKEN_NAME, "version": DEMO_TOKEN_VERSION, "minDeposit": "10000"})),
            );
            report_labels.push(format!("0.05 {DEMO_TOKEN_SYMBOL} (EIP-3009)"));
            report_labels.push("0.001 ETH".to_owned());
            if let Some(permit2_token) = &evm.permit2_token {
                let pusd: Address = permit2_token.parse()?;
                report.push(
                    Price::token(pusd, "0.05", DEMO_TOKEN_DECIMALS)?
                        .pay_to(evm_seller)
                        .on(network.clone())
                        .permit2()
                        .extra(json!({"name": PERMIT2_TOKEN_NAME, "version": PERMIT2_TOKEN_VERSION})),
                );
                report_labels.push(format!("0.05 {PERMIT2_TOKEN_SYMBOL} (Permit2)"));
                story = Some(
                    Price::upto(pusd, STORY_MAX, DEMO_TOKEN_DECIMALS)?
                        .pay_to(evm_seller)
                        .on(network)
                        .extra(json!({"name": PERMIT2_TOKEN_NAME, "version": PERMIT2_TOKEN_VERSION})),
                );
            }
        }
        let mut items = vec![
            Item::get("/quote", "A SOL/USD quote", quote_labels.clone()),
            Item::get("/report", "The daily report", report_labels),
            Item {
                method: "POST",
                path: "/summarize",
                body: Some(SUMMARIZE_SAMPLE),
                title: "A summary of the text you post",
                labels: quote_labels,
                note: None,
            },
            Item {
                method: "GET",
                body: None,
                path: "/words?hello+tollgate",
                title: "Words, priced per word",
                labels: vec!["0.001 SOL a word (up to 9)".to_owned()],
                note: None,
            },
            Item {
                method: "GET",
                body: None,
                path: "/daily",
                title: "Today's figures, with a day pass",
                labels: vec![format!("{DAILY_PASS} SOL for 24 h")],
                note: Some(
                    "A pass for the wallet that pays: pay once with the demo's printed tollgate-pay command (on /daily), and for 24 h it signs in instead of paying again.",
                ),
            },
        ];
        if ticker.is_some() {
            items.push(Item {
                method: "GET",
                body: None,
                path: "/ticker",
                title: "A price tick, paid per call from a payment channel",
                labels: vec![format!("{TICK_PRICE} {DEMO_TOKEN_SYMBOL} a call (batch-settlement)")],
                note: Some(
                    "One deposit into an on-chain channel, then a signed voucher per call: no transaction per request. Paid by tollgate-pay (the command the demo prints) or any x402 batch-settlement client; the channels are listed below.",
                ),
            });
        }
        if story.is_some() {
            items.push(Item {
                method: "GET",
                body: None,
                path: "/story?words=12",
                title: "A story, charged for the words it tells (metered)",
                labels: vec![format!(
                    "0.001 {PERMIT2_TOKEN_SYMBOL} a word, at most {STORY_MAX} (upto, Permit2)"
                )],
                note: Some("Paid on EVM by a permit for the most, settled for the words told: pay it with the demo's printed tollgate-pay command."),
            });
        }
        let daily = vec![Price::native_sol(DAILY_PASS)?.pay_to(seller).pass(std::time::Duration::from_secs(86_400))];
        Ok(Self { quote, report, daily, story, ticker, seller, items: Arc::new(items), symbols: Arc::new(symbols) })
    }

    /// What people call `asset` on `network` (the symbol of a native currency or of a demo
    /// token), when the demo knows it.
    pub(crate) fn symbol(&self, network: &str, asset: &str) -> Option<&'static str> {
        if asset == "native" {
            return Some(if network.starts_with("eip155:") { "ETH" } else { "SOL" });
        }
        let asset = asset.to_lowercase();
        self.symbols.iter().find(|(address, _)| *address == asset).map(|(_, symbol)| *symbol)
    }
}

async fn quote(Extension(payment): Extension<Payment>) -> Json<serde_json::Value> {
    Json(json!({
        "quote": {"pair": "SOL/USD", "price": "142.17", "at": chrono::Utc::now().to_rfc3339()},
        "paidBy": payment.payer, "transaction": payment.transaction,
    }))
}

async fn ticker(Extension(payment): Extension<Payment>) -> Json<serde_json::Value> {
    Json(json!({
        "tick": {"pair": "ETH/USD", "price": "3120.55", "at": chrono::Utc::now().to_rfc3339()},
        "paidBy": payment.payer, "deposit": payment.transaction,
    }))
}

async fn report(Extension(payment): Extension<Payment>) -> Json<serde_json::Value> {
    Json(json!({
        "report": "Daily report: 1,284 paid requests, 0 double spends, median settlement 0.4 s.",
        "paidBy": payment.payer, "transaction": payment.transaction,
    }))
}

/// `POST /summarize`: how many words the posted text has, and its first eight.
async fn summarize(Extension(payment): Extension<Payment>, text: String) -> Json<serde_json::Value> {
    let words: Vec<&str> = text.split_whitespace().collect();
    Json(json!({
        "words": words.len(), "summary": words.iter().take(8).copied().collect::<Vec<_>>().join(" "),
        "paidBy": payment.payer, "transaction": payment.transaction,
    }))
}

/// `/daily`: today's figures, for the holder of a day pass (or its payment).
async fn daily(Extension(payment): Extension<Payment>) -> Json<serde_json::Value> {
    Json(json!({
        "figures": {"paidRequests": 1_284, "medianSettlementMs": 400},
        "paidBy": payment.payer, "passUntil": payment.pass_until, "payment": payment.payment_id,
    }))
}

async fn words(Extension(payment): Extension<Payment>, uri: axum::http::Uri) -> Json<serde_json::Value> {
    Json(json!({
        "words": uri.query().unwrap_or_default(),
        "paidBy": payment.payer, "transaction": payment.transaction,
    }))
}

/// `/story?words=N`: a story of N words (1 to 50), charged per word told.
async fn story(
    Query(q): Query<std::collections::HashMap<String, String>>,
    Extension(payment): Extension<Payment>,
) -> (Extension<Charge>, Json<serde_json::Value>) {
    const WORDS: [&str; 10] = ["once", "a", "buyer", "paid", "only", "for", "the", "words", "it", "read"];
    let told = q.get("words").and_then(|w| w.parse::<u64>().ok()).unwrap_or(12).clamp(1, STORY_MAX_WORDS);
    let text: Vec<&str> = (0..told).map(|i| WORDS[usize::try_from(i).unwrap_or(0) % WORDS.len()]).collect();
    let charge = Charge::per_unit(told, STORY_PER_WORD);
    let body = json!({
        "story": text.join(" "), "words": told,
        "charged": charge.amount().to_string(), "authorized": payment.maximum.map(|m| m.to_string()),
        "paidBy": payment.payer,
    });
    (Extension(charge), Json(body))
}

/// The paid routes; `origin` is the shop's public origin (a pass's sign-ins are bound to it);
/// payment channels are kept in `channels` (a journal file). With the storefront listing them
/// (`/.well-known/x402.json`), for a layer around the whole app.
pub(crate) fn router(
    catalog: &Catalog,
    facilitator: &FacilitatorClient,
    origin: &str,
    channels: &std::path::Path,
) -> anyhow::Result<(Router, Storefront)> {
    // Every paid route is declared (how to call it, what it answers: x402 `bazaar`) and listed
    // in the shop's /.well-known/x402.json.
    let storefront = Storefront::new();
    let service = || ServiceMetadata {
        service_name: Some("Tollgate demo shop".into()),
        tags: vec!["demo".into(), "market-data".into()],
        icon_url: None,
    };
    // The shop names its own origin: the resources it sells (and catalogs list) are on it,
    // whatever Host a buyer sends.
    let listed = |path: &str, description: &str, discovery: Discovery| {
        PaymentLayer::builder()
            .facilitator(facilitator.clone())
            .resource_base(origin)
            .description(description)
            .discovery(discovery)
            .service(service())
            .listed(&storefront, path)
    };
    let priced = |prices: &[Price], path: &str, description: &str, discovery: Discovery| {
        let mut builder = listed(path, description, discovery);
        for price in prices {
            builder = builder.accept(price.clone());
        }
        builder.build()
    };
    let pair = json!({"pair": "SOL/USD", "price": "142.17", "at": "2026-12-07T12:00:00Z"});
    // Dynamic: 0.001 SOL per word asked for, at least one, at most nine.
    let seller = catalog.seller;
    let per_word = listed(
        "/words",
        "Words, priced per word (0.001 SOL each, up to 9)",
        Discovery::http().output_example(json!({"words": "hello+world"})),
    )
    .pricing(move |parts| {
        let words = parts.uri.query().unwrap_or_default().split('+').filter(|w| !w.is_empty()).count().max(1);
        let amount = format!("0.00{}", words.min(9));
        async move { Some(vec![Price::native_sol(&amount).ok()?.pay_to(seller)]) }
    })
    .build()?;
    let mut router = Router::new()
        .route(
            "/quote",
            get(quote).route_layer(priced(
                &catalog.quote,
                "/quote",
                "A SOL/USD quote",
                Discovery::http().output_example(json!({"quote": pair})),
            )?),
        )
        .route(
            "/report",
            get(report).route_layer(priced(
                &catalog.report,
                "/report",
                "The daily report",
                Discovery::http().output_example(json!({"report": "Daily report: 1,284 paid requests"})),
            )?),
        )
        .route(
            "/summarize",
            post(summarize).route_layer(priced(
                &catalog.quote,
                "/summarize",
                "A summary of the text posted",
                Discovery::http()
                    .body_example(BodyType::Text, json!("Paid per request, settled on chain."))
                    .output_example(json!({"words": 6, "summary": "Paid per request, settled on chain."})),
            )?),
        )
        .route("/words", get(words).route_layer(per_word));
    let mut pass = listed(
        "/daily",
        "Today's figures: a day pass for the wallet that pays",
        Discovery::http().output_example(json!({"figures": {"paidRequests": 1_284, "medianSettlementMs": 400}})),
    )
    .sign_in_origin(origin);
    for price in &catalog.daily {
        pass = pass.accept(price.clone());
    }
    router = router.route("/daily", get(daily).route_layer(pass.build()?));
    if let Some(price) = &catalog.story {
        let told = "A story, charged 0.001 PUSD a word it tells (at most 50 words, 0.05 PUSD)";
        let declared = Discovery::http()
            .query_example(json!({"words": "12"}))
            .output_example(json!({"story": "once a buyer paid", "words": 4, "charged": "4000"}));
        router = router
            .route("/story", get(story).route_layer(priced(std::slice::from_ref(price), "/story", told, declared)?));
    }
    if let Some(price) = &catalog.ticker {
        let per_call = listed(
            "/ticker",
            "A price tick, paid per call from a payment channel",
            Discovery::http().output_example(json!({"tick": {"pair": "ETH/USD", "price": "3120.55"}})),
        )
        .accept(price.clone())
        .channels(tollgate::batch::FileChannels::open(channels)?)
        .build()?;
        router = router.route("/ticker", get(ticker).route_layer(per_call));
    }
    // The same goods as MCP tools, paid in x402's MCP transport.
    let tools = crate::mcp::paywall(facilitator, &catalog.quote, catalog.story.as_ref(), Some(&storefront))?;
    router = router.nest_service("/mcp", crate::mcp::http_service(tools, catalog.story.is_some()));
    Ok((router, storefront))
}
