//! The OpenAPI 3.1 document served at `/openapi.json`: generated from the handlers' and wire
//! types' annotations ([`ApiDoc`]), then told what the validation checks beyond types (formats
//! and patterns, bounds), once; each request adds what this daemon serves (its networks, its
//! allowed facilitators).

use std::sync::LazyLock;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse, Response};
use serde_json::{Map, Value, json};
use tollgate_protocol::address::PATTERN as ADDRESS_PATTERN;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{dev, discovery, events, passes, payments, reference, system, tokens, transactions, webhooks, x402};
use crate::app::AppState;

/// The OpenAPI 3.1 description of the facilitator (served at `/openapi.json`).
#[derive(OpenApi)]
#[openapi(
    info(title = "Tollgate facilitator", description = "Payment gateway API (hosted and local modes) and x402 facilitator API. Errors: `{\"error\": {\"code\", \"message\", \"remedy\"}}`."),
    paths(
        payments::send, payments::receive, payments::release_answer, payments::status, payments::history,
        passes::sign_in,
        transactions::send, transactions::receive, transactions::confirm,
        tokens::info,
        x402::verify, x402::settle, x402::supported,
        events::ws,
        webhooks::create, webhooks::list, webhooks::delete, webhooks::deliveries,
        discovery::list, discovery::search, discovery::own, discovery::change, discovery::delete,
        system::healthz, system::readyz, openapi, docs,
        dev::airdrop,
    ),
    components(schemas(tollgate_protocol::ErrorEnvelope, tollgate_protocol::ErrorBody, tollgate_protocol::ErrorCode)),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{HttpMethod, RefOr, ResponseBuilder};
        // What the guard answers on every operation that takes a key, documented once here.
        let envelope = || {
            utoipa::openapi::content::ContentBuilder::new()
                .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorEnvelope")))
                .build()
        };
        let guarded = [
            ("401", "UNAUTHORIZED: key missing, unknown or deleted"),
            ("403", "FORBIDDEN: the key's plan does not include this endpoint"),
            (
                "429",
                "RATE_LIMIT: the key's limit is exceeded, or the account's daily budget of network fees the facilitator pays for its settlements is spent (`Retry-After`)",
            ),
        ];
        for (path, item) in openapi.paths.paths.iter_mut() {
            let methods = [
                (HttpMethod::Get, &mut item.get),
                (HttpMethod::Post, &mut item.post),
                (HttpMethod::Delete, &mut item.delete),
                (HttpMethod::Patch, &mut item.patch),
            ];
            for (method, operation) in methods {
                let Some(operation) = operation.as_mut() else { continue };
                if operation.security.is_none() {
                    continue;
                }
                let mut add = |status: &str, text: &str| {
                    operation.responses.responses.entry(status.to_owned()).or_insert_with(|| {
                        RefOr::T(
                            ResponseBuilder::new().description(text).content("application/json", envelope()).build(),
                        )
                    });
                };
                for (status, text) in guarded {
                    add(status, text);
                }
                // POSTs go through the Idempotency-Key layer (except /webhooks, whose answer
                // carries a secret and is not replayed).
                if method == HttpMethod::Post && path != "/webhooks" {
                    add(
                        "409",
                        "IDEMPOTENCY_CONFLICT: the Idempotency-Key was used with another body, or is in progress",
                    );
                }
            }
        }
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("tg_live_… / tg_test_…").build(),
            ),
        );
    }
}

/// The document as generated, then told what validation checks beyond types (once).
static OPENAPI: LazyLock<Value> = LazyLock::new(|| {
    let mut document = serde_json::to_value(ApiDoc::openapi()).unwrap_or(Value::Null);
    if let Some(schemas) = document.pointer_mut("/components/schemas").and_then(Value::as_object_mut) {
        hosted_send_schema(schemas);
        bounds(schemas);
        string_formats(schemas);
        narrowed_fields(schemas);
    }
    if let Some(body) = document.pointer_mut("/paths/~1payment~1send/post/requestBody/content/application~1json/schema")
    {
        *body = json!({"$ref": "#/components/schemas/HostedSendRequest"});
    }
    parameters(&mut document);
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

/// Adds a field's entry of [`STRING_FORMATS`] (format, pattern, and an example address) to its
/// schema, when it is a string.
fn annotate(name: &str, schema: &mut Value) {
    let Some((_, format, pattern)) = STRING_FORMATS.iter().find(|(field, _, _)| *field == name) else { return };
    let Some(object) = schema.as_object_mut() else { return };
    let string =
        object.get("type").is_some_and(|t| t == "string" || t.as_array().is_some_and(|a| a.contains(&"string".into())));
    if !string {
        return;
    }
    object.insert("format".into(), (*format).into());
    object.insert("pattern".into(), (*pattern).into());
    // Two different wallets as examples of a payer and a payee.
    let example = match name {
        "walletAddress" | "address" => Some("9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"),
        "recipientAddress" => Some("2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"),
        _ => None,
    };
    if let Some(example) = example {
        object.insert("examples".into(), json!([example]));
    }
}

/// `/payment/send` bounds its amount (0.001 to 100); `/transaction/send`, with the same body,
/// does not: the hosted send gets a schema of its own.
fn hosted_send_schema(schemas: &mut Map<String, Value>) {
    if let Some(mut hosted) = schemas.get("SendPaymentRequest").cloned() {
        hosted["properties"]["amount"]["minimum"] = json!(0.001);
        hosted["properties"]["amount"]["maximum"] = json!(100);
        hosted["description"] = "Body of `POST /payment/send`.".into();
        schemas.insert("HostedSendRequest".into(), hosted);
    }
}

/// The amount bounds the validation enforces (whole units), beside each amount's `$ref`, and
/// priority fees, where a body takes one: 0.00001 to 0.01 native units.
fn bounds(schemas: &mut Map<String, Value>) {
    for (schema, property, bounds) in [
        ("SendPaymentRequest", "amount", json!({"exclusiveMinimum": 0})),
        ("ReceivePaymentRequest", "expectedAmount", json!({"exclusiveMinimum": 0})),
        ("LocalReceiveRequest", "expectedAmount", json!({"exclusiveMinimum": 0})),
        ("AirdropRequest", "amount", json!({"minimum": 0.001, "maximum": 1000})),
    ] {
        let target = schemas.get_mut(schema).and_then(|s| s.pointer_mut(&format!("/properties/{property}")));
        if let (Some(Value::Object(target)), Value::Object(bounds)) = (target, bounds) {
            target.extend(bounds);
        }
    }
    for schema in ["SendPaymentRequest", "HostedSendRequest", "LocalReceiveRequest"] {
        let fee = schemas.get_mut(schema).and_then(|s| s.pointer_mut("/properties/priorityFee/oneOf"));
        for branch in fee.and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(branch) = branch.as_object_mut().filter(|b| b.contains_key("$ref")) {
                branch.insert("minimum".into(), json!(0.00001));
                branch.insert("maximum".into(), json!(0.01));
            }
        }
    }
}

/// [`STRING_FORMATS`] on the request bodies' properties.
fn string_formats(schemas: &mut Map<String, Value>) {
    let requests = [
        "HostedSendRequest",
        "SendPaymentRequest",
        "ReceivePaymentRequest",
        "LocalReceiveRequest",
        "ConfirmTransactionRequest",
        "AirdropRequest",
        "NewEndpoint",
    ];
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

/// Fields narrower than their type: a hosted send's wallet, amounts, the airdrop's address,
/// recipients, descriptions.
fn narrowed_fields(schemas: &mut Map<String, Value>) {
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

/// Path and header parameters: [`STRING_FORMATS`], and `/token/info`'s network named as one.
fn parameters(document: &mut Value) {
    if let Some(parameters) =
        document.pointer_mut("/paths/~1token~1info~1{mintAddress}/get/parameters").and_then(Value::as_array_mut)
    {
        for parameter in parameters.iter_mut().filter(|p| p.get("name").is_some_and(|n| n == "network")) {
            parameter["schema"] = json!({"$ref": "#/components/schemas/Network"});
        }
    }
    let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) else { return };
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

/// This API as OpenAPI 3.1.
#[utoipa::path(get, path = "/openapi.json", tag = "system", responses((status = 200, description = "OpenAPI 3.1 document")))]
pub async fn openapi(State(state): State<AppState>) -> Json<Value> {
    Json(document(&state))
}

/// The API reference of this daemon: its `/openapi.json`, rendered ([`reference::render`]).
#[utoipa::path(get, path = "/docs", tag = "system",
    responses((status = 200, description = "The API reference as one HTML page, rendered from `/openapi.json`", content_type = "text/html")))]
pub async fn docs(State(state): State<AppState>) -> Response {
    let mut response = Html(reference::render(&document(&state))).into_response();
    let headers = response.headers_mut();
    // Nothing but this page and its inline style: no script, no font, no image from anywhere.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"),
    );
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// The document as this daemon serves it (`/openapi.json`, rendered at `/docs`): the generated
/// one, told this daemon's networks, allowed facilitators, and whether `/supported` takes a key.
pub fn document(state: &AppState) -> Value {
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
    // `GET /supported` is open unless configured behind a key (`public_supported`): open, it
    // takes no key and answers none of the guard's refusals.
    // So are the discovery catalog's list and search (`[discovery] public`).
    let open = [
        ("/paths/~1supported/get", state.config.public_supported),
        ("/paths/~1discovery~1resources/get", state.config.discovery.public),
        ("/paths/~1discovery~1search/get", state.config.discovery.public),
    ];
    for (pointer, public) in open {
        if public && let Some(operation) = document.pointer_mut(pointer).and_then(Value::as_object_mut) {
            operation.insert("security".into(), json!([]));
            if let Some(responses) = operation.get_mut("responses").and_then(Value::as_object_mut) {
                for status in ["401", "403", "429"] {
                    responses.remove(status);
                }
            }
        }
    }
    document
}
