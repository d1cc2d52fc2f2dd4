//! `tollgate-mcp`: paid MCP tools, in x402's MCP transport, on the official Rust MCP SDK
//! ([`rmcp`]).
//!
//! * **Sellers** wrap any `rmcp` server ([`ToolPaywall::wrap`]) so that chosen tools carry a
//!   price — fixed, or metered (`upto`) — each set as a [`tollgate::PaymentLayer`] is. A call
//!   without payment gets a tool result with `isError: true` and the x402 `PaymentRequired`
//!   in `structuredContent` (and, wrapped as `x402/error`, in `content[0].text`). A call with
//!   `_meta["x402/payment"]` runs the tool only on a definite settlement, and its result carries
//!   `_meta["x402/payment-response"]`. The payment itself is the layer's: the tool call goes
//!   through a [`tollgate::PaymentService`] (the same offers, facilitator, proof cache, settlement
//!   order, metered charge and pending answers as an HTTP route), and this crate only translates.
//! * **Buyers** wrap an `rmcp` client ([`PaidClient`]): a tool call that answers
//!   payment-required is paid once by a [`tollgate_client::Buyer`] — its keys, cap and budget —
//!   and called again with the payment; a pending settlement is retried with the same proof.
//!
//! Both work over any `rmcp` transport: stdio, streamable HTTP, or any byte stream.
//!
//! # Layout
//!
//! | module | what |
//! |---|---|
//! | [`seller`] | [`ToolPaywall`] and the [`PaidServer`] it wraps around an `rmcp` service |
//! | [`buyer`] | [`PaidClient`], [`PaidCall`] and [`McpPayError`] |
//! | this file | the `_meta` keys and reading a payment-required result |

pub mod buyer;
pub mod seller;

pub use buyer::{McpPayError, PaidCall, PaidClient, PricedTool};
pub use rmcp;
pub use seller::{CHARGE_META, PaidServer, ToolPaywall, ToolPaywallBuilder, tool_resource};

use rmcp::model::CallToolResult;
use serde_json::Value;
use tollgate_protocol::x402::PaymentRequired;

/// The request `_meta` key of a payment (an x402 `PaymentPayload`).
pub const PAYMENT_META: &str = "x402/payment";
/// The result `_meta` key of a settlement (an x402 `SettleResponse`).
pub const PAYMENT_RESPONSE_META: &str = "x402/payment-response";
/// The request `_meta` key of a pass's sign-in: the x402 `sign-in-with-x` payload (the JSON the
/// `SIGN-IN-WITH-X` header carries in base64), sent instead of a payment by the wallet that
/// bought a pass.
pub const SIGN_IN_META: &str = "sign-in-with-x";
/// The wrapper of a payment-required error in `content[0].text` (`{code: 402, message, data}`).
pub const ERROR_KEY: &str = "x402/error";
/// Tollgate's key, in a tool result's `structuredContent`, of a payment broadcast but not yet
/// confirmed: call again with the same payment after `retryAfter` seconds.
pub const PENDING_KEY: &str = "tollgate/pending";
/// The `_meta` key of a priced tool in `tools/list` holding the ways to pay it (x402
/// `PaymentRequirements`, advisory: the payment-required result of a call decides), so that a
/// buyer sees the prices before calling ([`PaidClient::priced_tools`]). A Tollgate extension.
pub const ACCEPTS_META: &str = "tollgate/accepts";

/// The payment request of a tool result, read in the order x402's MCP transport asks of
/// clients: `structuredContent` as a `PaymentRequired`, then `structuredContent["x402/error"].data`,
/// then `content[0].text` holding either. `None` for any other result, or one not marked as an
/// error (a paid tool's own output is never read as a payment request).
#[must_use]
pub fn payment_required(result: &CallToolResult) -> Option<PaymentRequired> {
    if result.is_error != Some(true) {
        return None;
    }
    let read = |value: &Value| -> Option<PaymentRequired> {
        let direct = value.get("accepts").is_some().then(|| serde_json::from_value(value.clone()).ok()).flatten();
        direct.or_else(|| serde_json::from_value(value.get(ERROR_KEY)?.get("data")?.clone()).ok())
    };
    if let Some(found) = result.structured_content.as_ref().and_then(read) {
        return Some(found);
    }
    let text = &result.content.first()?.as_text()?.text;
    read(&serde_json::from_str::<Value>(text).ok()?)
}

/// The README's Rust code, compiled as doctests so that it keeps compiling.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    use rmcp::model::ContentBlock;
    use serde_json::json;

    use super::*;

    fn required() -> Value {
        json!({
            "x402Version": 2,
            "error": "payment required",
            "resource": {"url": "mcp://tool/summarize", "description": "", "mimeType": "application/json"},
            "accepts": [{
                "scheme": "exact", "network": "eip155:84532", "amount": "10000",
                "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
                "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60,
                "extra": {"name": "USDC", "version": "2"}
            }]
        })
    }

    fn error_result(structured: Option<Value>, text: &str) -> CallToolResult {
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        result.structured_content = structured;
        result
    }

    #[test]
    fn payment_requests_are_read_in_the_transports_order() {
        let direct = error_result(Some(required()), "payment required");
        assert_eq!(payment_required(&direct).unwrap().requirements()[0].0.amount.get(), 10_000);
        let wrapped = error_result(Some(json!({ERROR_KEY: {"code": 402, "data": required()}})), "");
        assert!(payment_required(&wrapped).is_some());
        let text = json!({ERROR_KEY: {"code": 402, "message": "Payment required", "data": required()}}).to_string();
        assert!(payment_required(&error_result(None, &text)).is_some(), "content[0].text");
        assert!(payment_required(&error_result(None, &required().to_string())).is_some());
    }

    #[test]
    fn only_error_results_holding_a_payment_request_are_read_as_one() {
        // A paid tool's own output that looks like a payment request is output, not a request.
        let mut success = CallToolResult::success(vec![ContentBlock::text(required().to_string())]);
        success.structured_content = Some(required());
        assert!(payment_required(&success).is_none());
        assert!(payment_required(&error_result(None, "the tool failed")).is_none());
        assert!(payment_required(&error_result(Some(json!({"accepts": "nope"})), "{}")).is_none());
        let mut other_version = required();
        other_version["x402Version"] = json!(7);
        assert!(payment_required(&error_result(Some(other_version), "")).is_none());
    }
}
