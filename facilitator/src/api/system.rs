//! Liveness, readiness and the OpenAPI document (no authentication).

use std::sync::LazyLock;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};
use utoipa::OpenApi as _;

use tollgate_protocol::address::PATTERN as ADDRESS_PATTERN;

use super::error::ApiError;
use crate::app::AppState;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "system", responses((status = 200, description = "`{\"status\": \"ok\"}`")))]
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The process can serve: storage answers, and so does each chain's RPC. `rateLimits` says where
/// requests are counted: `in-process`, `shared` (Redis), or `degraded` (Redis configured but
/// failing: counted in this process, which is still ready — rate limits fail open to
/// per-instance limits). `chains` gives each network's RPC: its height, or why it did not answer.
#[utoipa::path(get, path = "/readyz", tag = "system",
    responses((status = 200, description = "`{\"status\": \"ready\", \"rateLimits\": \"in-process\" | \"shared\" | \"degraded\", \"chains\": {network: {\"ok\": true, \"height\": n}}}`"), (status = 503, description = "storage or a chain RPC unreachable (`reason`: `storage` or `chain`)")))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    use crate::auth::rate_limit::Counting;
    if let Err(e) = state.store.ping().await {
        tracing::warn!(error = %e, "readiness check failed: storage");
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "unavailable", "reason": "storage"})))
            .into_response();
    }
    let counting = state.auth.rate_limit_counting();
    let rate_limits = match counting {
        Counting::InProcess => "in-process",
        Counting::Shared => "shared",
        Counting::Degraded { .. } => "degraded",
    };
    let (chains, all_answer) = chain_readiness(&state).await;
    let mut body = json!({"status": "ready", "rateLimits": rate_limits, "chains": chains});
    if let Counting::Degraded { fallbacks } = counting {
        body["rateLimitFallbacks"] = fallbacks.into();
    }
    if all_answer {
        Json(body).into_response()
    } else {
        body["status"] = "unavailable".into();
        body["reason"] = "chain".into();
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
    }
}

/// Each chain's RPC asked at most once per [`READY_PROBE_EVERY`] however often `/readyz` is
/// called (it is public: it must not spend the provider's quota), concurrent callers sharing
/// one probe. The answer says whether each answered, never what it said: RPC error bodies can
/// quote the URL, its key and credentials. The error itself is logged, redacted and cut short.
async fn chain_readiness(state: &AppState) -> (serde_json::Map<String, Value>, bool) {
    let mut cached = state.readiness.lock().await;
    if let Some((at, chains, ok)) = &*cached
        && at.elapsed() < READY_PROBE_EVERY
    {
        return (chains.clone(), *ok);
    }
    let mut chains = serde_json::Map::new();
    let mut all_answer = true;
    match tokio::time::timeout(READY_PROBE_TIMEOUT, state.chains.probe_rpcs()).await {
        Ok(probes) => {
            for (network, answer) in probes {
                let entry = match answer {
                    Ok(height) => json!({"ok": true, "height": height}),
                    Err(e) => {
                        all_answer = false;
                        let reason: String = e.to_string().chars().take(200).collect();
                        tracing::warn!(%network, error = %reason, "readiness check failed: chain RPC");
                        json!({"ok": false, "error": "the RPC did not answer as expected"})
                    }
                };
                chains.insert(network.to_string(), entry);
            }
        }
        Err(_) => {
            all_answer = false;
            tracing::warn!("readiness check failed: the chain RPCs did not answer in time");
            for network in state.chains.served() {
                chains.insert(network.to_string(), json!({"ok": false, "error": "no answer in time"}));
            }
        }
    }
    *cached = Some((std::time::Instant::now(), chains.clone(), all_answer));
    (chains, all_answer)
}

/// How long a readiness probe of the chains is reused.
const READY_PROBE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// How long readiness waits for the chains' RPCs.
const READY_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Prometheus metrics (text format), for the bearer of `TOLLGATE_ADMIN_TOKEN`; see
/// [`crate::telemetry`] for what is counted.
pub async fn metrics(State(state): State<AppState>, headers: http::HeaderMap) -> Response {
    use subtle::ConstantTimeEq as _;
    let Some(token) = state.config.admin_token.as_ref().map(|t| t.expose()).filter(|t| !t.is_empty()) else {
        return ApiError::not_found("metrics are off: this facilitator has no TOLLGATE_ADMIN_TOKEN")
            .with_remedy("Set TOLLGATE_ADMIN_TOKEN and scrape with it as a bearer token")
            .into_response();
    };
    let given =
        headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    if !given.is_some_and(|g| bool::from(g.as_bytes().ct_eq(token.as_bytes()))) {
        return ApiError::unauthorized("metrics need the admin token as a bearer token").into_response();
    }
    let Some(handle) = crate::telemetry::install() else {
        return ApiError::internal("another metrics recorder is installed in this process").into_response();
    };
    // Gauges read now: backlogs and balances, each bounded so a slow chain cannot stall a scrape.
    let backlogs = async {
        let reconciler = state.store.unfinished_payments().await.ok();
        let webhooks = state.store.webhook_backlog().await.ok();
        crate::telemetry::set_backlogs(reconciler, webhooks);
    };
    let balances = async {
        if let Ok(balances) = tokio::time::timeout(READY_PROBE_TIMEOUT, state.chains.signer_balances()).await {
            for (network, role, address, balance) in balances {
                if let Ok(atomic) = balance {
                    crate::telemetry::signer_balance(&network.to_string(), role, &address, atomic);
                }
            }
        }
    };
    futures_util::future::join(backlogs, balances).await;
    ([(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render()).into_response()
}

static OPENAPI: LazyLock<Value> = LazyLock::new(|| {
    let mut document = serde_json::to_value(super::ApiDoc::openapi()).unwrap_or(Value::Null);
    with_string_formats(&mut document);
    document
});

/// Fields whose text the validation checks beyond "a string": an address, a transaction id, a
/// webhook URL. The document says so with a custom `format` (and a `pattern` every valid value
/// matches), so that clients and contract tests can tell a well-formed value.
const STRING_FORMATS: [(&str, &str, &str); 9] = [
    ("walletAddress", "address", ADDRESS_PATTERN),
    ("recipientAddress", "address", ADDRESS_PATTERN),
    ("mintAddress", "address", ADDRESS_PATTERN),
    ("address", "address", ADDRESS_PATTERN),
    ("transaction", "transaction-id", "^(0x[0-9a-fA-F]{64}|[1-9A-HJ-NP-Za-km-z]{64,88})$"),
    ("url", "webhook-url", "^https://"),
    ("asset", "asset", tollgate_protocol::x402::ASSET_PATTERN),
    ("Idempotency-Key", "idempotency-key", "^[!-~]{1,255}$"),
    ("resource", "resource-url", "^https?://[^\\s]{1,2040}$"),
];

/// Adds [`STRING_FORMATS`] to request bodies' properties and to path and header parameters.
fn with_string_formats(document: &mut Value) {
    let annotate = |name: &str, schema: &mut Value| {
        if let Some((_, format, pattern)) = STRING_FORMATS.iter().find(|(field, _, _)| *field == name)
            && let Some(object) = schema.as_object_mut()
            && object
                .get("type")
                .is_some_and(|t| t == "string" || t.as_array().is_some_and(|a| a.contains(&"string".into())))
        {
            object.insert("format".into(), (*format).into());
            object.insert("pattern".into(), (*pattern).into());
            // Two different wallets as examples of a payer and a payee.
            let example = match name {
                "walletAddress" | "address" => Some("9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"),
                "recipientAddress" => Some("2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"),
                _ => None,
            };
            if let Some(example) = example {
                object.insert("examples".into(), serde_json::json!([example]));
            }
        }
    };
    // Amount bounds the validation enforces (whole units), beside each amount's `$ref`.
    // `/payment/send` bounds its amount (0.001 to 100); `/transaction/send`, with the same body,
    // does not: it gets a schema of its own.
    if let Some(schemas) = document.pointer_mut("/components/schemas").and_then(Value::as_object_mut) {
        if let Some(mut hosted) = schemas.get("SendPaymentRequest").cloned() {
            hosted["properties"]["amount"]["minimum"] = serde_json::json!(0.001);
            hosted["properties"]["amount"]["maximum"] = serde_json::json!(100);
            hosted["description"] = "Body of `POST /payment/send`.".into();
            schemas.insert("HostedSendRequest".into(), hosted);
        }
        for (schema, property, bounds) in [
            ("SendPaymentRequest", "amount", serde_json::json!({"exclusiveMinimum": 0})),
            ("ReceivePaymentRequest", "expectedAmount", serde_json::json!({"exclusiveMinimum": 0})),
            ("LocalReceiveRequest", "expectedAmount", serde_json::json!({"exclusiveMinimum": 0})),
            ("AirdropRequest", "amount", serde_json::json!({"minimum": 0.001, "maximum": 1000})),
        ] {
            let target = schemas.get_mut(schema).and_then(|s| s.pointer_mut(&format!("/properties/{property}")));
            if let (Some(Value::Object(target)), Value::Object(bounds)) = (target, bounds) {
                target.extend(bounds);
            }
        }
    }
    // Priority fees, where a body takes one: 0.00001 to 0.01 native units.
    if let Some(schemas) = document.pointer_mut("/components/schemas").and_then(Value::as_object_mut) {
        for schema in ["SendPaymentRequest", "HostedSendRequest", "LocalReceiveRequest"] {
            let fee = schemas.get_mut(schema).and_then(|s| s.pointer_mut("/properties/priorityFee/oneOf"));
            for branch in fee.and_then(Value::as_array_mut).into_iter().flatten() {
                if let Some(branch) = branch.as_object_mut().filter(|b| b.contains_key("$ref")) {
                    branch.insert("minimum".into(), serde_json::json!(0.00001));
                    branch.insert("maximum".into(), serde_json::json!(0.01));
                }
            }
        }
    }
    if let Some(body) = document.pointer_mut("/paths/~1payment~1send/post/requestBody/content/application~1json/schema")
    {
        *body = serde_json::json!({"$ref": "#/components/schemas/HostedSendRequest"});
    }
    let requests = [
        "HostedSendRequest",
        "SendPaymentRequest",
        "ReceivePaymentRequest",
        "LocalReceiveRequest",
        "ConfirmTransactionRequest",
        "AirdropRequest",
        "NewEndpoint",
    ];
    if let Some(schemas) = document.pointer_mut("/components/schemas").and_then(Value::as_object_mut) {
        for name in requests {
            if let Some(properties) =
                schemas.get_mut(name).and_then(|s| s.get_mut("properties")).and_then(Value::as_object_mut)
            {
                for (field, schema) in properties.iter_mut() {
                    annotate(field, schema);
                }
            }
        }
    }
    if let Some(schemas) = document.pointer_mut("/components/schemas").and_then(Value::as_object_mut) {
        // A hosted send spends from a custodial wallet of the caller's account.
        if let Some(Value::Object(wallet)) =
            schemas.get_mut("HostedSendRequest").and_then(|s| s.pointer_mut("/properties/walletAddress"))
        {
            wallet.insert("format".into(), "custodial-address".into());
            wallet.insert(
                "description".into(),
                "A custodial wallet of the caller's account (`tollgate-facilitator wallets create`).".into(),
            );
        }
        // Amounts are never negative.
        if let Some(Value::Object(amount)) = schemas.get_mut("DecimalAmount") {
            amount.insert("minimum".into(), 0.into());
        }
        // The development ledger funds Solana accounts, never the system program (all zeros).
        if let Some(Value::Object(address)) =
            schemas.get_mut("AirdropRequest").and_then(|s| s.pointer_mut("/properties/address"))
        {
            address.insert("format".into(), "solana-address".into());
            address.insert("pattern".into(), "^(?!1{32}$)[1-9A-HJ-NP-Za-km-z]{32,44}$".into());
        }
        // Nor is any payment to it possible (nor to another program or a sysvar, which only the
        // chain knows: INVALID_RECIPIENT).
        for schema in ["SendPaymentRequest", "HostedSendRequest"] {
            if let Some(Value::Object(recipient)) =
                schemas.get_mut(schema).and_then(|s| s.pointer_mut("/properties/recipientAddress"))
            {
                recipient.insert("pattern".into(), format!("^(?!1{{32}}$){}", &ADDRESS_PATTERN[1..]).into());
                recipient.insert(
                    "description".into(),
                    "Who is paid: a wallet, not a program or a sysvar (400 INVALID_RECIPIENT).".into(),
                );
            }
        }
        // Descriptions are one line of text.
        if let Some(Value::Object(description)) =
            schemas.get_mut("NewEndpoint").and_then(|s| s.pointer_mut("/properties/description"))
        {
            description.insert("pattern".into(), "^[^\\u0000-\\u001F\\u007F-\\u009F]*$".into());
        }
    }
    if let Some(parameters) =
        document.pointer_mut("/paths/~1token~1info~1{mintAddress}/get/parameters").and_then(Value::as_array_mut)
    {
        for parameter in parameters.iter_mut().filter(|p| p.get("name").is_some_and(|n| n == "network")) {
            parameter["schema"] = serde_json::json!({"$ref": "#/components/schemas/Network"});
        }
    }
    if let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) {
        for operation in paths.values_mut().filter_map(Value::as_object_mut).flat_map(|item| item.values_mut()) {
            for parameter in operation.get_mut("parameters").and_then(Value::as_array_mut).into_iter().flatten() {
                if parameter.get("in").is_some_and(|i| i == "path" || i == "header") {
                    let name = parameter.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
                    if let Some(schema) = parameter.get_mut("schema") {
                        annotate(&name, schema);
                    }
                }
            }
        }
    }
}

/// This API as OpenAPI 3.1.
#[utoipa::path(get, path = "/openapi.json", tag = "system", responses((status = 200, description = "OpenAPI 3.1 document")))]
pub async fn openapi(State(state): State<AppState>) -> Json<Value> {
    let mut document = OPENAPI.clone();
    // This daemon's networks: a network it does not serve is refused, so the document says which.
    let mut served: Vec<Value> = Vec::new();
    for network in state.chains.served() {
        served.push(network.to_string().into());
        if let Some(v1) = network.v1_name() {
            served.push(v1.into());
        }
    }
    // Its example is a served network, of the family of the address examples (Solana first).
    let example =
        served.iter().find(|n| n.as_str().is_some_and(|n| n.starts_with("solana:"))).or(served.first()).cloned();
    // The x402 facilitators a receive may name: this daemon's allow-list (none by default).
    let mut allowed: Vec<Value> = vec![Value::Null];
    allowed.extend(state.config.facilitator_allow_list.iter().map(|u| Value::from(u.as_str())));
    for schema in ["ReceivePaymentRequest", "LocalReceiveRequest"] {
        if let Some(Value::Object(url)) =
            document.pointer_mut(&format!("/components/schemas/{schema}/properties/facilitatorUrl"))
        {
            url.insert("enum".into(), Value::Array(allowed.clone()));
        }
    }
    if let Some(schema) = document.pointer_mut("/components/schemas/Network").and_then(Value::as_object_mut) {
        schema.remove("pattern");
        schema.insert("enum".into(), served.into());
        match example {
            Some(example) => schema.insert("examples".into(), Value::Array(vec![example])),
            None => schema.remove("examples"),
        };
    }
    Json(document)
}
