//! The fixtures of `scripts/bench-proxy`: an upstream that answers at once, and an x402
//! facilitator stub that accepts every proof — only the first request with a proof reaches it
//! (the proxy then serves the proof's ticket from memory), so the run measures the proxy.

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

/// `/verify` and `/settle` that accept every proof, paid by "bench".
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
            .route("/supported", get(supported)),
    )
    .await
}
