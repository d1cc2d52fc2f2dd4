//! The demo web page at `/`: the priced resources, a "Pay & fetch" button for each, and a live
//! feed of the shop's payments.
//!
//! The button pays the way a custodial wallet service would, through the facilitator's hosted
//! mode: the page's server side meets the 402, asks the facilitator to send the price from the
//! page buyer's custodial wallet (`POST /payment/send`), and retries the resource with the
//! `paymentProof` it gets back as `X-PAYMENT`. The feed polls the shop's received history.
//!
//! The page buyer's API key stays on the server. Anyone who can reach the shop can spend the
//! page buyer's demo SOL on the shop's own routes (and nothing else): the demo listens on
//! 127.0.0.1.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use tollgate_protocol::gateway::{PaymentRecord, SendPaymentRequest};
use tollgate_protocol::x402::header::{PAYMENT_REQUIRED, X_PAYMENT};
use tollgate_protocol::x402::{Asset, PaymentRequired, SCHEME_EXACT_NATIVE};
use tollgate_protocol::{ChainFamily, DecimalAmount};

use crate::shop::Catalog;

/// What the page's handlers need.
#[derive(Debug)]
pub(crate) struct Page {
    pub http: reqwest::Client,
    pub shop_url: String,
    pub facilitator_url: String,
    pub buyer_api_key: String,
    pub buyer_wallet: String,
    pub seller_api_key: String,
    pub seller: String,
    pub evm_seller: Option<String>,
    pub catalog: Catalog,
}

pub(crate) fn router(page: Arc<Page>) -> Router {
    Router::new().route("/", get(index)).route("/demo/pay", post(pay)).route("/demo/feed", get(feed)).with_state(page)
}

const TEMPLATE: &str = include_str!("page.html");

/// The page, with the catalog inlined as JSON.
async fn index(State(page): State<Arc<Page>>) -> Html<String> {
    let items: Vec<Value> =
        page.catalog.items.iter().map(|i| json!({"path": i.path, "title": i.title, "prices": i.labels})).collect();
    let catalog = json!({"items": items, "buyer": page.buyer_wallet, "seller": page.seller}).to_string();
    // Inside a <script> element, "</" would end it early.
    Html(TEMPLATE.replace("/*CATALOG*/null", &catalog.replace("</", "<\\/")))
}

/// An error for the page: status and message.
fn fail(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

/// `POST /demo/pay {"path": "/quote"}`: pays one of the catalog's routes in hosted mode and
/// returns what it served, with the payment.
async fn pay(State(page): State<Arc<Page>>, Json(body): Json<Value>) -> Response {
    let Some(path) = body["path"].as_str() else { return fail(StatusCode::BAD_REQUEST, "path is required") };
    if !page.catalog.items.iter().any(|i| i.path == path) {
        return fail(StatusCode::BAD_REQUEST, format!("{path} is not one of the shop's priced routes"));
    }
    match pay_hosted(&page, path).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => fail(StatusCode::BAD_GATEWAY, e.to_string()),
    }
}

async fn pay_hosted(page: &Page, path: &str) -> anyhow::Result<Value> {
    let url = format!("{}{path}", page.shop_url);
    let first = page.http.get(&url).send().await?;
    anyhow::ensure!(first.status().as_u16() == 402, "the shop answered {} instead of 402", first.status());
    let header = first.headers().get(PAYMENT_REQUIRED).and_then(|h| h.to_str().ok()).map(str::to_owned);
    let challenge: PaymentRequired = match header {
        Some(h) => tollgate_protocol::x402::header::decode(&h)?,
        None => serde_json::from_slice(&first.bytes().await?)?,
    };
    let (requirement, resource) = challenge
        .requirements()
        .into_iter()
        .find(|(r, _)| {
            r.scheme == SCHEME_EXACT_NATIVE && r.asset == Asset::Native && r.network.family() == ChainFamily::Solana
        })
        .ok_or_else(|| anyhow::anyhow!("the shop offers no SOL price for {path}"))?;

    // The facilitator sends from the custodial wallet and hands back a receipt bound to the resource.
    let send = SendPaymentRequest {
        wallet_address: page.buyer_wallet.clone(),
        recipient_address: requirement.pay_to.to_string(),
        amount: DecimalAmount::from_atomic(requirement.amount, ChainFamily::Solana.native_decimals()),
        resource: Some(resource.url.clone()),
        metadata: None,
        priority_fee: None,
        network: Some(requirement.network.clone()),
    };
    let sent = page
        .http
        .post(format!("{}/payment/send", page.facilitator_url))
        .bearer_auth(&page.buyer_api_key)
        .json(&send)
        .send()
        .await?;
    let status = sent.status();
    let text = sent.text().await?;
    anyhow::ensure!(status.as_u16() == 200, "the facilitator answered {status}: {text}");
    let record: PaymentRecord = serde_json::from_str(&text)?;
    let proof = record.payment_proof.clone().ok_or_else(|| anyhow::anyhow!("no paymentProof in {text}"))?;

    let paid = page.http.get(&url).header(X_PAYMENT, proof).send().await?;
    let status = paid.status().as_u16();
    let text = paid.text().await?;
    let content = serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text));
    Ok(json!({
        "status": status,
        "content": content,
        "paymentId": record.payment_id,
        "transaction": record.transaction,
        "amount": record.amount,
        "network": record.network,
    }))
}

/// `GET /demo/feed`: the shop's latest received payments, newest first.
async fn feed(State(page): State<Arc<Page>>) -> Response {
    let mut payments = Vec::new();
    for seller in std::iter::once(&page.seller).chain(page.evm_seller.as_ref()) {
        let url = format!("{}/payment/history/{seller}?type=received&limit=10", page.facilitator_url);
        let answer = match page.http.get(url).bearer_auth(&page.seller_api_key).send().await {
            Ok(a) if a.status().is_success() => a.json::<Value>().await,
            Ok(a) => return fail(StatusCode::BAD_GATEWAY, format!("history: {}", a.status())),
            Err(e) => return fail(StatusCode::BAD_GATEWAY, e.to_string()),
        };
        match answer {
            Ok(history) => payments.extend(history["payments"].as_array().cloned().unwrap_or_default()),
            Err(e) => return fail(StatusCode::BAD_GATEWAY, e.to_string()),
        }
    }
    // RFC 3339 times in UTC sort as text.
    payments.sort_by(|a, b| b["createdAt"].as_str().cmp(&a["createdAt"].as_str()));
    payments.truncate(10);
    Json(json!({"payments": payments})).into_response()
}
