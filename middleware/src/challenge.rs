//! The answers the layer writes itself: the 402 challenge (x402 v1 JSON body, v2
//! `PAYMENT-REQUIRED` header, a small HTML page for browsers), refusals, and failures.

use base64::Engine as _;
use bytes::Bytes;
use http::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use tollgate_protocol::x402::header::PAYMENT_REQUIRED;
use tollgate_protocol::x402::schemes::{
    EIP2612_GAS_SPONSORING, ERC20_APPROVAL_GAS_SPONSORING, Eip2612Sponsoring, Erc20ApprovalSponsoring,
};
use tollgate_protocol::x402::{Asset, PaymentRequiredV2, PaymentRequirements, ResourceInfo};
use tollgate_protocol::{ChainFamily, DecimalAmount, Network};

use crate::body::PaymentBody;

/// A response the layer buffers or builds: status, headers, body.
#[derive(Debug, Clone)]
pub(crate) struct Buffered {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Buffered {
    pub(crate) fn into_response(self) -> Response<PaymentBody> {
        self.into_counted_response(None)
    }

    /// A paid answer, its count given back if it reaches no buyer.
    pub(crate) fn into_counted_response(self, counted: Option<crate::answer::Counted>) -> Response<PaymentBody> {
        let mut response = Response::new(PaymentBody::full(self.body).counting(counted));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}

/// The layer's own answers (402, refusals, failures) are no one's to keep: `no-store`.
fn json(status: StatusCode, value: &serde_json::Value) -> Buffered {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Buffered { status, headers, body: Bytes::from(value.to_string()) }
}

/// A paid answer carries its buyer's settlement: `private` is added to its `Cache-Control`, so
/// that no shared cache serves it to anyone else.
pub(crate) fn make_private(headers: &mut HeaderMap) {
    let merged = match headers.get(CACHE_CONTROL).and_then(|v| v.to_str().ok()) {
        None | Some("") => "private".to_owned(),
        Some(had) if had.split(',').any(|d| d.trim().eq_ignore_ascii_case("private")) => return,
        Some(had) => format!("{had}, private"),
    };
    if let Ok(value) = HeaderValue::from_str(&merged) {
        headers.insert(CACHE_CONTROL, value);
    }
}

/// Whether the client prefers HTML (a browser) to JSON.
pub(crate) fn wants_html(request_headers: &HeaderMap) -> bool {
    let accept = request_headers.get(ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let html = accept.find("text/html");
    let json = accept.find("application/json");
    matches!((html, json), (Some(_), None)) || matches!((html, json), (Some(h), Some(j)) if h < j)
}

/// How much, in whole units, for people.
fn human(requirement: &PaymentRequirements, decimals: u8) -> String {
    let amount = DecimalAmount::from_atomic(requirement.amount, decimals);
    let unit = match (requirement.asset, requirement.network.family()) {
        (Asset::Native, ChainFamily::Solana) => "SOL".to_owned(),
        (Asset::Native, ChainFamily::Evm) => "ETH".to_owned(),
        (Asset::Token(token), _) => format!("of token {token}"),
    };
    format!("{amount} {unit} on {} to {}", requirement.network, requirement.pay_to)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The 402 challenge: the v1 JSON body (or HTML for browsers) and the v2 header, both listing
/// every way to pay. `decimals` gives each requirement's asset decimals, for the HTML page.
pub(crate) fn payment_required(
    error: &str,
    resource: &ResourceInfo,
    accepts: &[(PaymentRequirements, u8)],
    extensions: &serde_json::Map<String, serde_json::Value>,
    request_headers: &HeaderMap,
) -> Buffered {
    let mut message = PaymentRequiredV2::new(error, resource.clone(), accepts.iter().map(|(r, _)| r.clone()).collect());
    message.extensions.clone_from(extensions);
    // A buyer without a Permit2 allowance may offer a signed EIP-2612 permit, or its signed
    // approval of Permit2, instead.
    if accepts.iter().any(|(r, _)| r.through_permit2()) {
        message.extensions.entry(EIP2612_GAS_SPONSORING.to_owned()).or_insert_with(Eip2612Sponsoring::declaration);
        message
            .extensions
            .entry(ERC20_APPROVAL_GAS_SPONSORING.to_owned())
            .or_insert_with(Erc20ApprovalSponsoring::declaration);
    }
    let v2 = tollgate_protocol::x402::header::encode(&message).unwrap_or_default();
    let mut out = if wants_html(request_headers) {
        let items: String = accepts
            .iter()
            .map(|(r, d)| format!("<li><code>{}</code>: {}</li>", escape(&r.scheme), escape(&human(r, *d))))
            .collect();
        let page = format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>Payment required</title></head>\
             <body style=\"font-family:sans-serif;max-width:40em;margin:3em auto\"><h1>402 Payment required</h1>\
             <p>{}</p><p>{}</p><p>Pay one of:</p><ul>{items}</ul>\
             <p>An x402 client (for example <code>tollgate-pay</code>) pays and retries this request with an \
             <code>X-PAYMENT</code> or <code>PAYMENT-SIGNATURE</code> header.</p></body></html>",
            escape(&resource.description),
            escape(error),
        );
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        Buffered { status: StatusCode::PAYMENT_REQUIRED, headers, body: Bytes::from(page) }
    } else {
        json(StatusCode::PAYMENT_REQUIRED, &serde_json::to_value(message.to_v1()).unwrap_or_default())
    };
    if let Ok(value) = HeaderValue::from_str(&v2) {
        out.headers.insert(PAYMENT_REQUIRED, value);
    }
    out
}

/// A malformed payment header: 400 with the reason, in the x402 body shape.
pub(crate) fn bad_request(reason: &str) -> Buffered {
    json(StatusCode::BAD_REQUEST, &serde_json::json!({"x402Version": 1, "error": reason, "accepts": []}))
}

/// A payment identifier held by another payment or request: 409.
pub(crate) fn conflict(id: &str) -> Buffered {
    json(
        StatusCode::CONFLICT,
        &serde_json::json!({"x402Version": 2, "error": format!(
            "the payment identifier {id} names another payment or request; use a new identifier for a new payment"
        )}),
    )
}

/// Paid but not yet confirmed: 503 with `Retry-After` and the transaction, so the buyer retries
/// with the same proof instead of paying again.
pub(crate) fn pending(payment_id: Option<&str>, transaction: Option<&str>, retry_after_secs: u64) -> Buffered {
    let mut out = json(
        StatusCode::SERVICE_UNAVAILABLE,
        &serde_json::json!({
            "error": "payment pending: retry with the same payment header",
            "paymentId": payment_id,
            "transaction": transaction,
        }),
    );
    out.headers.insert(RETRY_AFTER, HeaderValue::from(retry_after_secs));
    out
}

/// The facilitator could not be asked: 502, or 504 when it did not answer in time.
pub(crate) fn unavailable(timed_out: bool) -> Buffered {
    let status = if timed_out { StatusCode::GATEWAY_TIMEOUT } else { StatusCode::BAD_GATEWAY };
    json(
        status,
        &serde_json::json!({"error": "the payment facilitator is unavailable; nothing was charged by this request"}),
    )
}

/// The handler's answer could not be read whole (its body failed, or was over the held size):
/// 502. `paid`: its payment was settled before, and the same proof serves the request again.
pub(crate) fn unread(paid: bool) -> Buffered {
    let error = if paid {
        "the paid answer could not be read in full; retry with the same payment, which serves this request again"
    } else {
        "the answer could not be read in full; nothing was charged by this request"
    };
    json(StatusCode::BAD_GATEWAY, &serde_json::json!({ "error": error }))
}

/// The base64 settlement header of a refused proof: `{success: false, errorReason, network,
/// transaction: ""}`. `reason` is `code: sentence` or a bare sentence; the code is x402's when
/// the refusal gives one.
pub(crate) fn failure_header(reason: &str, network: &Network, v1: bool) -> Option<HeaderValue> {
    let code = reason.split_once(':').map_or(reason, |(code, _)| code).trim();
    let is_code = !code.is_empty() && code.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    let value = serde_json::json!({
        "success": false,
        "errorReason": if is_code { code } else { "invalid_payment" },
        "errorMessage": reason,
        "transaction": "",
        "network": if v1 { network.v1_name_or_caip2() } else { network.to_string() },
    });
    HeaderValue::from_str(&base64::engine::general_purpose::STANDARD.encode(value.to_string())).ok()
}

/// The base64 settlement header value (`X-PAYMENT-RESPONSE` / `PAYMENT-RESPONSE`).
pub(crate) fn settlement_header(payment: &crate::Payment, v1: bool) -> Option<HeaderValue> {
    let network = if v1 { payment.network.v1_name_or_caip2() } else { payment.network.to_string() };
    let mut value = serde_json::json!({
        "success": true,
        "transaction": payment.transaction.clone().unwrap_or_default(),
        "network": network,
        "payer": payment.payer,
    });
    // A metered price says what it charged (x402's `SettleResponse.amount`).
    if payment.maximum.is_some() {
        value["amount"] = serde_json::Value::String(payment.amount.to_string());
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(value.to_string());
    HeaderValue::from_str(&encoded).ok()
}
