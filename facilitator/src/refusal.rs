//! Why a payment proof is refused, in two renderings: a sentence for the gateway's error
//! envelope (`402 INVALID_PAYMENT_PROOF`), and the x402 reason string for `/verify` and `/settle`
//! (`invalidReason`, `errorReason`).
//!
//! The reason strings are the ones x402 facilitators use, so x402 clients can act on them; the
//! few Tollgate-only ones (`exact-native` recipients and receipts) follow the same naming.

use tollgate_protocol::ErrorCode;

use crate::chains::ChainError;
use crate::error::ApiError;

/// An x402 reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // each variant is its reason string
pub enum Reason {
    InsufficientFunds,
    InvalidNetwork,
    InvalidScheme,
    UnsupportedScheme,
    InvalidPayload,
    InvalidPaymentRequirements,
    PaymentExpired,
    /// The proof was settled (or is being settled) already.
    AlreadyUsed,
    SvmTransaction,
    SvmInstructions,
    SvmInstructionsLength,
    SvmComputeLimit,
    SvmComputePrice,
    SvmComputePriceTooHigh,
    SvmNotTransferChecked,
    SvmNotATransfer,
    SvmFeePayerInAccounts,
    SvmFeePayerTransferring,
    SvmIncorrectAta,
    SvmReceiverAtaNotFound,
    SvmSenderAtaNotFound,
    SvmAmountMismatch,
    SvmSimulationFailed,
    NativeRecipientMismatch,
    NativeReceipt,
    FailedOnChain,
    EvmTransaction,
    EvmSignature,
    EvmRecipientMismatch,
    EvmValue,
    EvmValidAfter,
    EvmValidBefore,
    EvmNonceUsed,
    EvmSimulationFailed,
}

impl Reason {
    /// The x402 reason string.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InsufficientFunds => "insufficient_funds",
            Self::InvalidNetwork => "invalid_network",
            Self::InvalidScheme => "invalid_scheme",
            Self::UnsupportedScheme => "unsupported_scheme",
            Self::InvalidPayload => "invalid_payload",
            Self::InvalidPaymentRequirements => "invalid_payment_requirements",
            Self::PaymentExpired => "payment_expired",
            Self::AlreadyUsed => "invalid_transaction_state",
            Self::SvmTransaction => "invalid_exact_svm_payload_transaction",
            Self::SvmInstructions => "invalid_exact_svm_payload_transaction_instructions",
            Self::SvmInstructionsLength => "invalid_exact_svm_payload_transaction_instructions_length",
            Self::SvmComputeLimit => "invalid_exact_svm_payload_transaction_instructions_compute_limit_instruction",
            Self::SvmComputePrice => "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction",
            Self::SvmComputePriceTooHigh => {
                "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction_too_high"
            }
            Self::SvmNotTransferChecked => {
                "invalid_exact_svm_payload_transaction_instruction_not_spl_token_transfer_checked"
            }
            Self::SvmNotATransfer => "invalid_exact_svm_payload_transaction_not_a_transfer_instruction",
            Self::SvmFeePayerInAccounts => {
                "invalid_exact_svm_payload_transaction_fee_payer_included_in_instruction_accounts"
            }
            Self::SvmFeePayerTransferring => "invalid_exact_svm_payload_transaction_fee_payer_transferring_funds",
            Self::SvmIncorrectAta => "invalid_exact_svm_payload_transaction_transfer_to_incorrect_ata",
            Self::SvmReceiverAtaNotFound => "invalid_exact_svm_payload_transaction_receiver_ata_not_found",
            Self::SvmSenderAtaNotFound => "invalid_exact_svm_payload_transaction_sender_ata_not_found",
            Self::SvmAmountMismatch => "invalid_exact_svm_payload_transaction_amount_mismatch",
            Self::SvmSimulationFailed => "invalid_exact_svm_payload_transaction_simulation_failed",
            Self::NativeRecipientMismatch => "invalid_exact_native_payload_recipient_mismatch",
            Self::NativeReceipt => "invalid_exact_native_payload_receipt",
            Self::FailedOnChain => "settle_exact_failed_onchain",
            Self::EvmTransaction => "invalid_exact_evm_payload_transaction",
            Self::EvmSignature => "invalid_exact_evm_payload_signature",
            Self::EvmRecipientMismatch => "invalid_exact_evm_payload_recipient_mismatch",
            Self::EvmValue => "invalid_exact_evm_payload_authorization_value",
            Self::EvmValidAfter => "invalid_exact_evm_payload_authorization_valid_after",
            Self::EvmValidBefore => "invalid_exact_evm_payload_authorization_valid_before",
            Self::EvmNonceUsed => "invalid_exact_evm_payload_authorization_nonce_used",
            Self::EvmSimulationFailed => "invalid_exact_evm_payload_simulation_failed",
        }
    }
}

/// A refused proof: the x402 reason and a sentence saying exactly what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// The x402 reason.
    pub reason: Reason,
    /// What is wrong, for people.
    pub message: String,
}

impl Refusal {
    /// A refusal for `reason`.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self { reason, message: message.into() }
    }
}

impl From<Refusal> for ApiError {
    /// `402 INVALID_PAYMENT_PROOF` with the sentence; insufficient funds keep their x402 prefix so
    /// a client can tell them apart.
    fn from(r: Refusal) -> Self {
        let message = match r.reason {
            Reason::InsufficientFunds => format!("{}: {}", r.reason.as_str(), r.message),
            _ => r.message,
        };
        Self::new(ErrorCode::InvalidPaymentProof, message)
    }
}

/// A proof check that did not pass: refused, or the chain could not be asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The proof breaks a rule.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The chain could not be read: no verdict either way.
    #[error(transparent)]
    Chain(#[from] ChainError),
}

impl From<ProofError> for ApiError {
    /// 402 for a refusal, 502 `PAYMENT_VERIFICATION_FAILED` when the chain could not be read.
    fn from(e: ProofError) -> Self {
        match e {
            ProofError::Refused(r) => r.into(),
            ProofError::Chain(c) => c.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_and_x402_renderings() {
        let r = Refusal::new(Reason::SvmAmountMismatch, "the transfer pays 5, not 10");
        assert_eq!(r.reason.as_str(), "invalid_exact_svm_payload_transaction_amount_mismatch");
        let e = ApiError::from(r);
        assert_eq!((e.code(), e.message()), (ErrorCode::InvalidPaymentProof, "the transfer pays 5, not 10"));
        let poor = ApiError::from(Refusal::new(Reason::InsufficientFunds, "the payer holds 1 SOL"));
        assert_eq!(poor.message(), "insufficient_funds: the payer holds 1 SOL");
    }
}
