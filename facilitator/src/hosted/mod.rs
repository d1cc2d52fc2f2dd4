//! Hosted mode: the facilitator signs and settles for the caller with a custodial wallet.
//!
//! Handlers validate the request shape; this module does the payment: ownership of the wallet,
//! balance, building, signing, settlement, and the receipt the buyer hands to the seller.

pub mod solana;

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use tollgate_protocol::gateway::PaymentRecord;

/// The result of a hosted send or receive.
#[derive(Debug)]
pub enum SendOutcome {
    /// Confirmed: the record with its `paymentProof`.
    Confirmed(PaymentRecord),
    /// Broadcast, no verdict within the wait budget.
    Pending(PaymentRecord),
}

impl IntoResponse for SendOutcome {
    /// 200 with the confirmed record, 202 with the pending one.
    fn into_response(self) -> Response {
        match self {
            Self::Confirmed(record) => (StatusCode::OK, Json(record)).into_response(),
            Self::Pending(record) => (StatusCode::ACCEPTED, Json(record)).into_response(),
        }
    }
}
