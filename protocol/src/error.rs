//! The gateway API's error envelope and the one table from error code to HTTP status.
//!
//! Every failure the facilitator answers has the body
//! `{"error": {"code": "...", "message": "...", "remedy": "..."}}`. The status is never chosen by
//! the handler: it follows from the code through [`ErrorCode::http_status`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// Machine-readable error codes of the gateway API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub enum ErrorCode {
    /// Malformed JSON, a missing or wrongly typed field, an out-of-range value, a bad address.
    InvalidParameters,
    /// The recipient address is invalid or not a valid destination on that chain.
    InvalidRecipient,
    /// The API key is missing, unknown or deleted.
    Unauthorized,
    /// Not enough funds for the amount plus fees.
    InsufficientBalance,
    /// The proof is malformed, pays the wrong amount / recipient / network, expired or used.
    InvalidPaymentProof,
    /// The key's plan does not include this endpoint (or the resource is not the caller's).
    Forbidden,
    /// Unknown payment, token or route.
    NotFound,
    /// The route exists, but not with this HTTP method (the `Allow` header lists those it has).
    MethodNotAllowed,
    /// The `Idempotency-Key` was used with another request body (or is still in progress).
    IdempotencyConflict,
    /// The key's plan limit is exceeded.
    RateLimit,
    /// A bug; no detail is given.
    InternalError,
    /// The chain or the external facilitator could not verify or settle.
    PaymentVerificationFailed,
}

impl ErrorCode {
    /// Every code, in the order of the API table.
    pub const ALL: [Self; 12] = [
        Self::InvalidParameters,
        Self::InvalidRecipient,
        Self::Unauthorized,
        Self::InsufficientBalance,
        Self::InvalidPaymentProof,
        Self::Forbidden,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::IdempotencyConflict,
        Self::RateLimit,
        Self::InternalError,
        Self::PaymentVerificationFailed,
    ];

    /// The HTTP status that goes with the code. This is the only place the mapping lives.
    #[must_use]
    pub const fn http_status(self) -> u16 {
        match self {
            Self::InvalidParameters | Self::InvalidRecipient => 400,
            Self::Unauthorized => 401,
            Self::InsufficientBalance | Self::InvalidPaymentProof => 402,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::IdempotencyConflict => 409,
            Self::RateLimit => 429,
            Self::InternalError => 500,
            Self::PaymentVerificationFailed => 502,
        }
    }

    /// The code as it appears on the wire (`INVALID_PARAMETERS`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidParameters => "INVALID_PARAMETERS",
            Self::InvalidRecipient => "INVALID_RECIPIENT",
            Self::Unauthorized => "UNAUTHORIZED",
            Self::InsufficientBalance => "INSUFFICIENT_BALANCE",
            Self::InvalidPaymentProof => "INVALID_PAYMENT_PROOF",
            Self::Forbidden => "FORBIDDEN",
            Self::NotFound => "NOT_FOUND",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::IdempotencyConflict => "IDEMPOTENCY_CONFLICT",
            Self::RateLimit => "RATE_LIMIT",
            Self::InternalError => "INTERNAL_ERROR",
            Self::PaymentVerificationFailed => "PAYMENT_VERIFICATION_FAILED",
        }
    }

    /// What the caller can do about it.
    #[must_use]
    pub const fn default_remedy(self) -> &'static str {
        match self {
            Self::InvalidParameters => "Fix the request parameters and retry",
            Self::InvalidRecipient => "Verify the recipient address",
            Self::Unauthorized => "Send a valid API key as 'Authorization: Bearer <API_KEY>'",
            Self::InsufficientBalance => "Add funds to the wallet",
            Self::InvalidPaymentProof => "Retry with a fresh proof",
            Self::Forbidden => "Use a key whose plan includes this endpoint",
            Self::NotFound => "Check the identifier or path",
            Self::MethodNotAllowed => "Use one of the methods in the Allow header",
            Self::IdempotencyConflict => "Use a new Idempotency-Key for a different request",
            Self::RateLimit => "Slow down; retry with exponential backoff",
            Self::InternalError => "Retry later; report the X-Request-Id if it persists",
            Self::PaymentVerificationFailed => "Check payment status and retry",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The inner object of the error envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// Machine-readable code.
    pub code: ErrorCode,
    /// What went wrong, for a human.
    pub message: String,
    /// What to do about it.
    pub remedy: String,
    /// `INVALID_PAYMENT_PROOF` for a used proof: the payment holding it, when it is the
    /// caller's (so a seller that lost the first answer can follow it).
    #[serde(default, rename = "paymentId", skip_serializing_if = "Option::is_none")]
    pub payment_id: Option<String>,
}

/// `{"error": {...}}`: the body of every error response of the gateway API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ErrorBody,
}

impl ErrorEnvelope {
    /// An envelope with the code's default remedy.
    #[must_use]
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            error: ErrorBody {
                code,
                message: message.into(),
                remedy: code.default_remedy().to_owned(),
                payment_id: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_table_matches_the_contract() {
        let expected = [400, 400, 401, 402, 402, 403, 404, 405, 409, 429, 500, 502];
        assert_eq!(expected.len(), ErrorCode::ALL.len());
        for (code, status) in ErrorCode::ALL.iter().zip(expected) {
            assert_eq!(code.http_status(), status, "{code}");
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }

    #[test]
    fn envelope_shape() {
        let e = ErrorEnvelope::new(ErrorCode::InvalidPaymentProof, "proof already used");
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["error"]["code"], "INVALID_PAYMENT_PROOF");
        assert_eq!(v["error"]["message"], "proof already used");
        assert_eq!(v["error"]["remedy"], "Retry with a fresh proof");
    }
}
