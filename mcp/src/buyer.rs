//! The buyer side: [`PaidClient`] calls tools of an `rmcp` client and pays the ones that ask,
//! with a [`Buyer`]'s keys, within its cap and budget.

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::{Peer, ServiceError};
use tollgate_client::{Buyer, PayError, PaymentMade};
use tollgate_protocol::x402::SettleResponse;

use crate::{PAYMENT_META, PAYMENT_RESPONSE_META, PENDING_KEY, SIGN_IN_META, payment_required};

/// Why a paid tool call did not succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpPayError {
    /// The MCP call failed (transport, or a JSON-RPC error from the server).
    #[error("the MCP call failed: {0}")]
    Mcp(#[from] ServiceError),
    /// Paying failed: nothing fits (keys, cap, budget), the proof cannot be built, the payment
    /// was refused or stays pending ([`PayError`]).
    #[error(transparent)]
    Pay(#[from] PayError),
    /// The server asked to be paid for a tool this client was not told to pay
    /// ([`PaidClient::paying_only`]): nothing was paid.
    #[error("the server asks to be paid for {0}, which this client does not pay for")]
    NotPaid(String),
}

/// A tool call's result, and what was paid for it.
#[derive(Debug)]
#[non_exhaustive]
pub struct PaidCall {
    /// The tool's result (without the payment-required result that came first).
    pub result: CallToolResult,
    /// What was paid, when something was.
    pub payment: Option<PaymentMade>,
    /// The seller's `x402/payment-response`, when it sent one.
    pub settlement: Option<SettleResponse>,
    /// The wallet that signed in with a pass it bought before (`_meta["sign-in-with-x"]`)
    /// instead of paying, when one did.
    pub signed_in: Option<String>,
}

/// A tool of the server, with the ways to pay it its `tools/list` entry names
/// ([`crate::ACCEPTS_META`]); none for a free tool (or a server that does not say).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PricedTool {
    /// The tool, as listed.
    pub tool: rmcp::model::Tool,
    /// Its ways to pay (advisory: a call's payment-required result decides).
    pub accepts: Vec<tollgate_protocol::x402::PaymentRequirements>,
}

/// Calls tools through an `rmcp` client, paying those that answer payment-required: once per
/// call, with the offer its [`Buyer`] takes (the first its keys can pay within its cap and
/// budget). Cheap to clone.
#[derive(Debug, Clone)]
pub struct PaidClient {
    peer: Peer<RoleClient>,
    buyer: Arc<Buyer>,
    server: String,
    paying: Option<Arc<HashSet<String>>>,
}

impl PaidClient {
    /// Pays through `buyer` the tools of the server `peer` is connected to. `server` names that
    /// server in the buyer's budget and spend log (its limits per origin count each server
    /// apart): its URL for streamable HTTP, `mcp+stdio://<command>` for a child process.
    pub fn new(peer: Peer<RoleClient>, buyer: Arc<Buyer>, server: impl Into<String>) -> Self {
        Self { peer, buyer, server: server.into(), paying: None }
    }

    /// Pays only for these tools: another tool that asks for a payment (a tool the agent takes
    /// to be free) is answered [`McpPayError::NotPaid`], and nothing is paid.
    #[must_use]
    pub fn paying_only<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tools: I) -> Self {
        self.paying = Some(Arc::new(tools.into_iter().map(Into::into).collect()));
        self
    }

    /// The server's tools and their prices, before calling any: what a Tollgate server lists in
    /// each priced tool's `_meta["tollgate/accepts"]` (an entry that cannot be read counts as no
    /// price; the call's payment-required result is what is paid, within the buyer's cap).
    ///
    /// # Errors
    /// [`McpPayError::Mcp`] when `tools/list` fails.
    pub async fn priced_tools(&self) -> Result<Vec<PricedTool>, McpPayError> {
        let tools = self.peer.list_all_tools().await?;
        Ok(tools
            .into_iter()
            .map(|tool| {
                let accepts = tool
                    .meta
                    .as_ref()
                    .and_then(|meta| meta.get(crate::ACCEPTS_META))
                    .and_then(|accepts| serde_json::from_value(accepts.clone()).ok())
                    .unwrap_or_default();
                PricedTool { tool, accepts }
            })
            .collect())
    }

    /// The client it calls through.
    #[must_use]
    pub const fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// Calls a tool, paying it once if it asks: the payment goes in `_meta["x402/payment"]` of
    /// the same call sent again, and a pending settlement is called again with the same
    /// payment. A tool that asks again after being paid is not paid twice.
    ///
    /// # Errors
    /// [`McpPayError`]. A payment that was sent stays counted in the budget whatever the error.
    pub async fn call_tool(&self, params: CallToolRequestParams) -> Result<PaidCall, McpPayError> {
        let first = self.peer.call_tool(params.clone()).await?;
        let Some(challenge) = payment_required(&first) else {
            return Ok(PaidCall { result: first, payment: None, settlement: None, signed_in: None });
        };
        let tool = params.name.to_string();
        if self.paying.as_ref().is_some_and(|paying| !paying.contains(&tool)) {
            return Err(McpPayError::NotPaid(tool));
        }
        // A pass bought before: its wallet signs in instead of paying again; refused (no pass
        // yet), the tool's new payment request is paid.
        let challenge = match self.buyer.sign_in(&challenge, &self.server).await {
            Some((header, wallet)) => {
                let payload = tollgate_protocol::siwx::SignIn::from_header(&header)
                    .ok()
                    .and_then(|s| serde_json::to_value(s).ok())
                    .unwrap_or_default();
                let mut signed = params.clone();
                signed.meta.get_or_insert_with(RequestMetaObject::default).insert(SIGN_IN_META.into(), payload);
                let answer = self.peer.call_tool(signed).await?;
                match payment_required(&answer) {
                    Some(again) => again,
                    None => {
                        let signed_in = (answer.is_error != Some(true)).then_some(wallet);
                        return Ok(PaidCall { result: answer, payment: None, settlement: None, signed_in });
                    }
                }
            }
            None => challenge,
        };
        // A payment channel's count the seller corrects (a payment-required result naming it) is
        // paid again once.
        let mut corrections = 1;
        'pay: loop {
            let authorization = self.buyer.authorize(&challenge, &format!("{}#{tool}", self.server)).await?;
            let payment = serde_json::to_value(authorization.payload()).map_err(|e| PayError::Build(e.to_string()))?;
            let mut paid = params.clone();
            paid.meta.get_or_insert_with(RequestMetaObject::default).insert(PAYMENT_META.into(), payment);
            let mut retries = 0;
            loop {
                let answer = match self.peer.call_tool(paid.clone()).await {
                    Ok(answer) => answer,
                    Err(e) => {
                        self.buyer.unsettled(authorization).await;
                        return Err(e.into());
                    }
                };
                if let Some(wait) = pending(&answer) {
                    if retries < self.buyer.pending_retries() {
                        retries += 1;
                        tokio::time::sleep(tollgate_client::pending_wait(wait)).await;
                        continue;
                    }
                    self.buyer.unsettled(authorization).await;
                    return Err(PayError::StillPending(retries).into());
                }
                let settlement = answer
                    .meta
                    .as_ref()
                    .and_then(|meta| meta.get(PAYMENT_RESPONSE_META))
                    .and_then(|value| serde_json::from_value::<SettleResponse>(value.clone()).ok());
                if let Some(again) = payment_required(&answer) {
                    if self.buyer.refused(authorization, &again).await && corrections > 0 {
                        corrections -= 1;
                        continue 'pay;
                    }
                    let reason = match again {
                        tollgate_protocol::x402::PaymentRequired::V1(r) => r.error,
                        tollgate_protocol::x402::PaymentRequired::V2(r) => r.error.unwrap_or_default(),
                    };
                    return Err(PayError::Refused { status: 402, reason }.into());
                }
                return match settlement {
                    Some(settlement) if settlement.success => {
                        let made = self.buyer.settled(authorization, Some(&settlement)).await;
                        Ok(PaidCall {
                            result: answer,
                            payment: Some(made),
                            settlement: Some(settlement),
                            signed_in: None,
                        })
                    }
                    Some(settlement) => {
                        self.buyer.unsettled(authorization).await;
                        let reason = settlement.error_message.or(settlement.error_reason).unwrap_or_default();
                        Err(PayError::Refused { status: 402, reason }.into())
                    }
                    // A tool that failed unsettled: nothing said it was charged, but the proof left;
                    // it stays counted.
                    None if answer.is_error == Some(true) => {
                        self.buyer.unsettled(authorization).await;
                        Ok(PaidCall { result: answer, payment: None, settlement: None, signed_in: None })
                    }
                    // Served without a settlement message (a seller that sends none): paid.
                    None => {
                        let made = self.buyer.settled(authorization, None).await;
                        Ok(PaidCall { result: answer, payment: Some(made), settlement: None, signed_in: None })
                    }
                };
            }
        }
    }
}

/// Seconds to wait before calling again, when the result says the payment is pending.
fn pending(result: &CallToolResult) -> Option<u64> {
    if result.is_error != Some(true) {
        return None;
    }
    let pending = result.structured_content.as_ref()?.get(PENDING_KEY)?;
    Some(pending.get("retryAfter").and_then(serde_json::Value::as_u64).unwrap_or(1))
}
