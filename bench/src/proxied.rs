//! The fixtures of `scripts/bench-proxy`: an upstream that answers at once, and a facilitator
//! stub that accepts every proof at once — as an x402 facilitator, and as Tollgate's gateway
//! (`POST /payment/receive`), which counts a payment's answers: the stub says every claim is its
//! payment's first of 10,000, so a proof presented again is a repeat the proxy claims with one
//! call, as it would from a real gateway, and the run measures the proxy and that call.

use axum::Json;
use axum::routing::{get, post};
use serde_json::{Value, json};

/// What the upstream answers: a small JSON document, as a typical API would.
const HELLO: &str = r#"{"hello":"world","items":[1,2,3],"note":"a small JSON answer of about a hundred bytes"}"#;

async fn serve(app: axum::Router) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

/// How long `/work` takes: an API call that waits on something (a database, a model), not
/// on this machine's CPU.
const WORK: std::time::Duration = std::time::Duration::from_millis(2);

/// `GET /hello`: [`HELLO`] at once; `GET /work`: the same after [`WORK`].
pub async fn upstream() -> anyhow::Result<()> {
    let hello = || async { ([("content-type", "application/json")], HELLO) };
    let work = || async {
        tokio::time::sleep(WORK).await;
        ([("content-type", "application/json")], HELLO)
    };
    serve(axum::Router::new().route("/hello", get(hello)).route("/work", get(work))).await
}

/// The network named by a `/verify` or `/settle` body's requirements.
fn network(body: &Value) -> Value {
    body["paymentRequirements"]["network"].clone()
}

/// Lamports per SOL: the benchmark's prices are native SOL.
const SOL_DECIMALS: u8 = 9;

/// Tollgate's `POST /payment/receive`, confirming every proof for what the request asks (native
/// SOL), as its answer of 10,000.
async fn receive(Json(r): Json<tollgate_protocol::gateway::ReceivePaymentRequest>) -> Json<Value> {
    let atomic = r.expected_amount.to_atomic(SOL_DECIMALS).map(|a| a.to_string()).unwrap_or_default();
    Json(json!({
        "paymentId": "pay_bench", "status": "confirmed", "mode": "hosted", "network": r.network,
        "from": "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4", "to": r.wallet_address,
        "amount": r.expected_amount, "amountAtomic": atomic, "asset": "native", "transaction": "bench-transaction",
        "resource": r.resource, "metadata": {"method": r.method},
        "createdAt": "2026-11-28T00:00:00Z", "updatedAt": "2026-11-28T00:00:00Z",
        "answers": {"served": 1, "uses": 10_000},
    }))
}

/// `/verify` and `/settle` that accept every proof, paid by "bench"; the gateway's receive.
pub async fn stub_facilitator() -> anyhow::Result<()> {
    let verify = || async { Json(json!({"isValid": true, "payer": "bench"})) };
    let settle = |Json(body): Json<Value>| async move {
        Json(json!({"success": true, "payer": "bench", "transaction": "bench-transaction", "network": network(&body)}))
    };
    let supported = || async { Json(json!({"kinds": [], "extensions": [], "signers": {}})) };
    serve(
        axum::Router::new()
            .route("/verify", post(verify))
            .route("/settle", post(settle))
            .route("/supported", get(supported))
            .route("/payment/receive", post(receive)),
    )
    .await
}
