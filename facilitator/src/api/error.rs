//! The facilitator's one error type at the HTTP boundary, and the one place domain errors become
//! HTTP errors.
//!
//! Every failure becomes an [`ApiError`]: a wire [`ErrorCode`], a message for the caller and,
//! for 5xx, a private detail that is logged once and never sent. The status is derived from the
//! code by [`ErrorCode::http_status`], nowhere else. The domain's errors convert here:
//! [`PaymentError`], [`AuthError`], [`Refusal`] and [`Unserved`].

use std::fmt;

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};
use tollgate_protocol::{ErrorCode, ErrorEnvelope};

use crate::auth::AuthError;
use crate::chains::{Reason, Refusal, Unserved};
use crate::payment::PaymentError;

/// An error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    code: ErrorCode,
    message: String,
    remedy: Option<String>,
    retry_after_secs: Option<u64>,
    /// The caller's payment holding a used proof.
    payment_id: Option<String>,
    /// Logged, never sent.
    detail: Option<String>,
    /// Known to have happened before anything was claimed, recorded or sent: an
    /// `Idempotency-Key` may be used again ([`NothingDone`] on the response).
    nothing_done: bool,
}

/// Marks an error answer given before anything was claimed, recorded or sent (the idempotency
/// layer releases the key of such an answer; any other answer, 5xx included, is kept: a retry
/// after a broadcast must not send again).
#[derive(Debug, Clone, Copy)]
pub struct NothingDone;

impl ApiError {
    /// An error with the code's default remedy.
    #[must_use]
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            remedy: None,
            retry_after_secs: None,
            payment_id: None,
            detail: None,
            nothing_done: false,
        }
    }

    /// Replaces the default remedy.
    #[must_use]
    pub fn with_remedy(mut self, remedy: impl Into<String>) -> Self {
        self.remedy = Some(remedy.into());
        self
    }

    /// 400 `INVALID_PARAMETERS`.
    #[must_use]
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidParameters, message)
    }

    /// 400 `INVALID_RECIPIENT`.
    #[must_use]
    pub fn invalid_recipient(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRecipient, message)
    }

    /// 401 `UNAUTHORIZED`.
    #[must_use]
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }

    /// 403 `FORBIDDEN`.
    #[must_use]
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }

    /// 404 `NOT_FOUND`.
    #[must_use]
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// 409 `IDEMPOTENCY_CONFLICT`.
    #[must_use]
    pub fn idempotency_conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::IdempotencyConflict, message)
    }

    /// 429 `RATE_LIMIT` with `Retry-After`.
    #[must_use]
    pub fn rate_limited(message: impl Into<String>, retry_after_secs: u64) -> Self {
        Self { retry_after_secs: Some(retry_after_secs), ..Self::new(ErrorCode::RateLimit, message) }
    }

    /// 502 `PAYMENT_VERIFICATION_FAILED`.
    #[must_use]
    pub fn verification_failed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::PaymentVerificationFailed, message)
    }

    /// 500 `INTERNAL_ERROR`; `detail` is logged, the caller sees a generic message.
    #[must_use]
    pub fn internal(detail: impl fmt::Display) -> Self {
        Self { detail: Some(detail.to_string()), ..Self::new(ErrorCode::InternalError, "internal error") }
    }

    /// The wire code.
    #[must_use]
    pub const fn code(&self) -> ErrorCode {
        self.code
    }

    /// The caller-facing message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HTTP status.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The body.
    #[must_use]
    pub fn envelope(&self) -> ErrorEnvelope {
        let mut e = ErrorEnvelope::new(self.code, self.message.clone());
        if let Some(remedy) = &self.remedy {
            e.error.remedy.clone_from(remedy);
        }
        e.error.payment_id.clone_from(&self.payment_id);
        e
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

/// Marks an answer that refused the payment proof it was asked about (see
/// [`crate::auth::Authenticator::forgive_refusal`]).
#[derive(Debug, Clone, Copy)]
pub struct ProofRefused;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(code = %self.code, detail = self.detail.as_deref().unwrap_or(""), "request failed");
        }
        let mut response = (status, Json(self.envelope())).into_response();
        if self.code == ErrorCode::InvalidPaymentProof {
            response.extensions_mut().insert(ProofRefused);
        }
        if self.nothing_done {
            response.extensions_mut().insert(NothingDone);
        }
        if let Some(secs) = self.retry_after_secs
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(http::header::RETRY_AFTER, v);
        }
        response
    }
}

impl From<Refusal> for ApiError {
    /// `402 INVALID_PAYMENT_PROOF` with the sentence; insufficient funds and a missing Permit2
    /// allowance keep their x402 prefix so a client (a seller's layer answering 412) can tell
    /// them apart.
    fn from(r: Refusal) -> Self {
        let message = match r.reason {
            Reason::InsufficientFunds | Reason::Permit2AllowanceRequired => {
                format!("{}: {}", r.reason.as_str(), r.message)
            }
            _ => r.message,
        };
        Self::new(ErrorCode::InvalidPaymentProof, message)
    }
}

impl From<Unserved> for ApiError {
    /// 400 for a network of another family than the addresses; 502 for one no chain serves.
    fn from(e: Unserved) -> Self {
        let answer = match e {
            Unserved::WrongFamily { .. } => Self::invalid_params(e.to_string()),
            Unserved::Unavailable(_) => Self::verification_failed(e.to_string()).with_remedy(
                "Configure a chain backend for this network, or use a network the facilitator serves (see GET /supported)",
            ),
        };
        // No chain was asked: nothing was done.
        Self { nothing_done: true, ..answer }
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Unauthorized(m) => Self::unauthorized(m),
            AuthError::Forbidden(m) => Self::forbidden(m),
            AuthError::RateLimited { message, retry_after_secs } => Self::rate_limited(message, retry_after_secs),
            AuthError::Internal(detail) => Self::internal(detail),
        }
    }
}

impl From<PaymentError> for ApiError {
    fn from(e: PaymentError) -> Self {
        // Every failure of the payment core but `Internal` happens before anything is claimed
        // or sent: the chain unreachable while checking or signing, a plan's limit, a refusal.
        // `Internal` (storage, a bug) may come after a broadcast.
        let nothing_done = !matches!(e, PaymentError::Internal(_));
        Self { nothing_done, ..Self::from_payment(e) }
    }
}

impl ApiError {
    fn from_payment(e: PaymentError) -> Self {
        match e {
            PaymentError::Invalid(m) => Self::invalid_params(m),
            PaymentError::InvalidRecipient(m) => Self::invalid_recipient(m),
            PaymentError::Refused(r) => r.into(),
            PaymentError::ProofUsed { payment_id, holder } => Self {
                // Named to the caller only when the payment is the caller's own.
                payment_id: holder.map(|h| h.payment.id),
                ..Self::new(ErrorCode::InvalidPaymentProof, format!("proof already used (payment {payment_id})"))
            },
            PaymentError::AnswersUsed { payment_id, message } => Self {
                payment_id: Some(payment_id),
                ..Self::new(ErrorCode::InvalidPaymentProof, message).with_remedy("Pay again with a new proof")
            },
            PaymentError::InsufficientBalance(m) => Self::new(ErrorCode::InsufficientBalance, m),
            PaymentError::Forbidden(m) => {
                Self::forbidden(m).with_remedy("Create one with `tollgate-facilitator wallets create`")
            }
            PaymentError::NotFound(m) => Self::not_found(m),
            PaymentError::Unserved(u) => u.into(),
            PaymentError::Unavailable(m) => Self::verification_failed(m),
            PaymentError::SponsorshipSpent { message, renews_in_secs } => Self::rate_limited(message, renews_in_secs)
                .with_remedy("Wait until the budget renews, or ask for a plan with a larger one"),
            PaymentError::Internal(detail) => Self::internal(detail),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_errors_do_not_leak_their_detail() {
        let e = ApiError::internal("password=hunter2 in connection string");
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_string(&e.envelope()).unwrap();
        assert!(!body.contains("hunter2"));
        assert!(body.contains("INTERNAL_ERROR"));
    }

    #[test]
    fn refusals_render_as_invalid_payment_proof() {
        let r = Refusal::new(Reason::SvmAmountMismatch, "the transfer pays 5, not 10");
        let e = ApiError::from(r);
        assert_eq!((e.code(), e.message()), (ErrorCode::InvalidPaymentProof, "the transfer pays 5, not 10"));
        let poor = ApiError::from(Refusal::new(Reason::InsufficientFunds, "the payer holds 1 SOL"));
        assert_eq!(poor.message(), "insufficient_funds: the payer holds 1 SOL");
        let used = ApiError::from(PaymentError::ProofUsed { payment_id: "pay_1".into(), holder: None });
        assert_eq!(
            (used.code(), used.message()),
            (ErrorCode::InvalidPaymentProof, "proof already used (payment pay_1)")
        );
        let unserved = ApiError::from(PaymentError::Unserved(Unserved::Unavailable("eip155:8453".into())));
        assert_eq!(unserved.code(), ErrorCode::PaymentVerificationFailed);
        assert_eq!(unserved.message(), "no chain backend configured for eip155:8453");
    }

    #[test]
    fn rate_limit_carries_retry_after() {
        let r = ApiError::rate_limited("slow down", 42).into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[http::header::RETRY_AFTER], "42");
    }
}
