//! The demo web page at `/`: the priced resources, a "Pay & fetch" button for each, a live
//! feed of the shop's payments, and the payment channels `/ticker` is paid from.
//!
//! The button pays the way a custodial wallet service would, through the facilitator's hosted
//! mode: the page's server side meets the 402, asks the facilitator to send the price from the
//! page buyer's custodial wallet (`POST /payment/send`), and retries the resource with the
//! `paymentProof` it gets back as `X-PAYMENT`. The feed lists the shop's received history,
//! refreshed on every event of the facilitator's WebSocket feed (relayed to the page as
//! server-sent events, so the shop's API key never reaches the browser) and every 10 s in case
//! the stream drops.
//!
//! The page buyer's API key stays on the server. Anyone who can reach the shop can spend the
//! page buyer's demo SOL on the shop's own routes (and nothing else): the demo listens on
//! 127.0.0.1.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::sync::broadcast;
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
    /// The payment channels `/ticker` is paid from (its layer's journal), when it is sold.
    pub channels: Option<tollgate::batch::FileChannels>,
}

pub(crate) fn router(page: Arc<Page>, live: broadcast::Sender<String>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/demo/pay", post(pay))
        .route("/demo/feed", get(feed))
        .route("/demo/channels", get(channels))
        .with_state(page)
        .route("/demo/events", get(move || events(live.subscribe())))
}

/// Follows the shop's wallets on the facilitator's WebSocket feed (with the shop's key, which
/// stays on the server) and forwards each `payment.updated` message to `live`. Reconnects after
/// a second when the connection drops.
pub(crate) async fn follow(ws_url: String, api_key: String, wallets: Vec<String>, live: broadcast::Sender<String>) {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    loop {
        let connected = async {
            let mut request = ws_url.as_str().into_client_request()?;
            request.headers_mut().insert("authorization", format!("Bearer {api_key}").parse()?);
            let (mut socket, _) = tokio_tungstenite::connect_async(request).await?;
            let subscribe = json!({"method": "subscribeWallet", "keys": wallets}).to_string();
            socket.send(Message::Text(subscribe.into())).await?;
            while let Some(message) = socket.next().await {
                if let Message::Text(text) = message?
                    && text.contains("\"payment.updated\"")
                {
                    let _ = live.send(text.to_string());
                }
            }
            anyhow::Ok(())
        };
        if let Err(e) = connected.await {
            tracing::warn!(error = %e, "the demo's live feed lost the facilitator; reconnecting");
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// `GET /demo/events`: the live feed as server-sent events (one `payment.updated` per event).
async fn events(receiver: broadcast::Receiver<String>) -> impl IntoResponse {
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(text) => return Some((Ok::<_, std::convert::Infallible>(Event::default().data(text)), receiver)),
                // A page that fell behind just refreshes its list on the next event.
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

const TEMPLATE: &str = include_str!("page.html");

/// The page, with the catalog inlined as JSON.
async fn index(State(page): State<Arc<Page>>) -> Html<String> {
    let items: Vec<Value> = page
        .catalog
        .items
        .iter()
        .map(|i| json!({"method": i.method, "path": i.path, "title": i.title, "prices": i.labels, "note": i.note}))
        .collect();
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
    let Some(item) = page.catalog.items.iter().find(|i| i.path == path) else {
        return fail(StatusCode::BAD_REQUEST, format!("{path} is not one of the shop's priced routes"));
    };
    match pay_hosted(&page, item).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => fail(StatusCode::BAD_GATEWAY, e.to_string()),
    }
}

async fn pay_hosted(page: &Page, item: &crate::shop::Item) -> anyhow::Result<Value> {
    let (path, url) = (item.path, format!("{}{}", page.shop_url, item.path));
    let method = axum::http::Method::from_bytes(item.method.as_bytes())?;
    // The same request twice: unpaid for its price, then paid.
    let request = || {
        let request = page.http.request(method.clone(), &url);
        match item.body {
            Some(body) => request.header("content-type", "text/plain").body(body),
            None => request,
        }
    };
    let first = request().send().await?;
    anyhow::ensure!(first.status().as_u16() == 402, "the shop answered {} instead of 402", first.status());
    let header = first.headers().get(PAYMENT_REQUIRED).and_then(|h| h.to_str().ok()).map(str::to_owned);
    let challenge =
        PaymentRequired::from_answer(header.as_deref(), &first.bytes().await?).map_err(anyhow::Error::msg)?;
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

    let paid = request().header(X_PAYMENT, proof).send().await?;
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
        match crate::history(&page.http, &page.facilitator_url, &page.seller_api_key, seller, "received").await {
            Ok(history) => payments.extend(history["payments"].as_array().cloned().unwrap_or_default()),
            Err(e) => return fail(StatusCode::BAD_GATEWAY, e.to_string()),
        }
    }
    newest_first(&mut payments);
    payments.truncate(10);
    // Tokens by their symbols (`0.05 TUSD`), not their addresses.
    for payment in &mut payments {
        let (network, asset) = (payment["network"].as_str().unwrap_or_default(), payment["asset"].as_str());
        if let Some(symbol) = asset.and_then(|asset| page.catalog.symbol(network, asset)) {
            payment["symbol"] = json!(symbol);
        }
    }
    Json(json!({"payments": payments})).into_response()
}

/// Sorts payments by `createdAt`, newest first. By time, not as text: the facilitator writes
/// whole seconds without a fraction (`…:08Z`), which sorts as text after `…:08.054Z`.
fn newest_first(payments: &mut [Value]) {
    let created = |p: &Value| p["createdAt"].as_str().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
    payments.sort_by_key(|p| std::cmp::Reverse(created(p)));
}

/// `GET /demo/channels`: the channels `/ticker` is paid from, as its layer keeps them — what each
/// buyer deposited, what the shop charged, what is claimed on chain and what is not yet.
async fn channels(State(page): State<Arc<Page>>) -> Response {
    use tollgate::batch::ChannelStore as _;
    let Some(store) = &page.channels else { return Json(json!({"channels": []})).into_response() };
    let mut records = match store.all().await {
        Ok(records) => records,
        Err(e) => return fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    records.sort_by_key(|r| std::cmp::Reverse(r.synced_at));
    let decimals = crate::shop::DEMO_TOKEN_DECIMALS;
    let whole =
        |atomic: u128| DecimalAmount::from_atomic(tollgate_protocol::AtomicAmount(atomic), decimals).to_string();
    let listed: Vec<Value> = records
        .iter()
        .map(|r| {
            json!({
                "channel": r.channel_id,
                "payer": r.config.payer.to_string(),
                "deposited": whole(r.chain.balance.get()),
                "charged": whole(r.charged.get()),
                "claimed": whole(r.chain.total_claimed.get()),
                "unclaimed": whole(r.unclaimed()),
                "symbol": crate::shop::DEMO_TOKEN_SYMBOL,
            })
        })
        .collect();
    Json(json!({"channels": listed})).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payments_are_listed_newest_first_by_time_whatever_their_precision() {
        let at = |t: &str| json!({"createdAt": t});
        let mut payments =
            vec![at("2026-11-29T13:47:08Z"), at("2026-11-29T13:47:08.054Z"), at("2026-11-29T13:47:07.999Z")];
        newest_first(&mut payments);
        let order: Vec<&str> = payments.iter().map(|p| p["createdAt"].as_str().unwrap()).collect();
        assert_eq!(order, ["2026-11-29T13:47:08.054Z", "2026-11-29T13:47:08Z", "2026-11-29T13:47:07.999Z"]);
    }
}
