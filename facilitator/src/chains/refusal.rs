//! Why a payment proof is refused: an x402 reason (the string x402 facilitators use in
//! `invalidReason` / `errorReason`, so x402 clients can act on it) and a sentence for people.
//! The API renders a refusal as `402 INVALID_PAYMENT_PROOF` on the gateway endpoints and as the
//! reason string on `/verify` and `/settle`; nothing here knows HTTP.
//!
//! The few Tollgate-only reasons (`exact-native` recipients and receipts) follow x402's naming.

use super::ChainError;

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
    /// The payment has served the answers its seller's ticket says it buys (Tollgate).
    AnswersUsed,
    /// A `sign-in-with-x` message is not bound to the seller's origin (domain or URI).
    SignInDomain,
    /// A `sign-in-with-x` message's times: too old, in the future, expired or not yet valid.
    SignInTime,
    /// A `sign-in-with-x` message whose nonce was used before.
    SignInNonce,
    /// A `sign-in-with-x` signature that is not the signer's, or cannot be read.
    SignInSignature,
    /// A `sign-in-with-x` message that cannot be read, or for a chain not served.
    SignInMessage,
    /// The wallet that signed in holds no pass for what is asked (none bought, or expired).
    NoPass,
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
    Permit2Spender,
    Permit2Recipient,
    Permit2DeadlineExpired,
    Permit2NotYetValid,
    Permit2AmountMismatch,
    Permit2TokenMismatch,
    Permit2Signature,
    Permit2AllowanceRequired,
    Permit2InsufficientBalance,
    Permit2NonceUsed,
    Permit2ProxyNotDeployed,
    Permit2SimulationFailed,
    UptoFacilitatorMismatch,
    UptoSettlementExceeds,
    Eip2612Format,
    Eip2612From,
    Eip2612Asset,
    Eip2612Spender,
    Eip2612Deadline,
    Erc20ApprovalFormat,
    Erc20ApprovalFrom,
    Erc20ApprovalAsset,
    Erc20ApprovalSpender,
    Erc20ApprovalSigner,
    Erc20ApprovalTarget,
    Erc20ApprovalCalldata,
    Erc20ApprovalTxFailed,
    /// x402 `batch-settlement` on EVM: its own reasons.
    Batch(BatchReason),
}

/// Why x402 `batch-settlement` refuses, as the scheme names it (`invalid_batch_settlement_evm_…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // each variant is its reason string
pub enum BatchReason {
    Scheme,
    NetworkMismatch,
    PayloadType,
    DepositPayload,
    VoucherPayload,
    RefundPayload,
    ClaimPayload,
    SettlePayload,
    ChannelIdMismatch,
    TokenMismatch,
    ReceiverMismatch,
    ReceiverAuthorizerMismatch,
    WithdrawDelayMismatch,
    WithdrawDelayOutOfRange,
    VoucherSignature,
    ChannelNotFound,
    InsufficientBalance,
    CumulativeExceedsBalance,
    CumulativeBelowClaimed,
    MissingEip712Domain,
    ValidAfter,
    ValidBefore,
    ReceiveAuthorizationSignature,
    Erc3009AuthorizationRequired,
    Permit2InvalidSpender,
    Permit2AmountMismatch,
    Permit2DeadlineExpired,
    Permit2InvalidSignature,
    Permit2AllowanceRequired,
    DepositSimulationFailed,
    DepositTransactionFailed,
    WaitForReceiptFailed,
    AuthorizerAddressMismatch,
    ClaimSimulationFailed,
    ClaimTransactionFailed,
    SettleSimulationFailed,
    SettleTransactionFailed,
    NothingToSettle,
    RefundNoBalance,
    RefundSimulationFailed,
    RefundTransactionFailed,
}

impl BatchReason {
    /// The scheme's reason string.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Scheme => "invalid_batch_settlement_evm_scheme",
            Self::NetworkMismatch => "invalid_batch_settlement_evm_network_mismatch",
            Self::PayloadType => "invalid_batch_settlement_evm_payload_type",
            Self::DepositPayload => "invalid_batch_settlement_evm_deposit_payload",
            Self::VoucherPayload => "invalid_batch_settlement_evm_voucher_payload",
            Self::RefundPayload => "invalid_batch_settlement_evm_refund_payload",
            Self::ClaimPayload => "invalid_batch_settlement_evm_claim_payload",
            Self::SettlePayload => "invalid_batch_settlement_evm_settle_payload",
            Self::ChannelIdMismatch => "invalid_batch_settlement_evm_channel_id_mismatch",
            Self::TokenMismatch => "invalid_batch_settlement_evm_token_mismatch",
            Self::ReceiverMismatch => "invalid_batch_settlement_evm_receiver_mismatch",
            Self::ReceiverAuthorizerMismatch => "invalid_batch_settlement_evm_receiver_authorizer_mismatch",
            Self::WithdrawDelayMismatch => "invalid_batch_settlement_evm_withdraw_delay_mismatch",
            Self::WithdrawDelayOutOfRange => "invalid_batch_settlement_evm_withdraw_delay_out_of_range",
            Self::VoucherSignature => "invalid_batch_settlement_evm_voucher_signature",
            Self::ChannelNotFound => "invalid_batch_settlement_evm_channel_not_found",
            Self::InsufficientBalance => "invalid_batch_settlement_evm_insufficient_balance",
            Self::CumulativeExceedsBalance => "invalid_batch_settlement_evm_cumulative_exceeds_balance",
            Self::CumulativeBelowClaimed => "invalid_batch_settlement_evm_cumulative_below_claimed",
            Self::MissingEip712Domain => "invalid_batch_settlement_evm_missing_eip712_domain",
            Self::ValidAfter => "invalid_batch_settlement_evm_payload_authorization_valid_after",
            Self::ValidBefore => "invalid_batch_settlement_evm_payload_authorization_valid_before",
            Self::ReceiveAuthorizationSignature => "invalid_batch_settlement_evm_receive_authorization_signature",
            Self::Erc3009AuthorizationRequired => "invalid_batch_settlement_evm_erc3009_authorization_required",
            Self::Permit2InvalidSpender => "invalid_batch_settlement_evm_permit2_invalid_spender",
            Self::Permit2AmountMismatch => "invalid_batch_settlement_evm_permit2_amount_mismatch",
            Self::Permit2DeadlineExpired => "invalid_batch_settlement_evm_permit2_deadline_expired",
            Self::Permit2InvalidSignature => "invalid_batch_settlement_evm_permit2_invalid_signature",
            Self::Permit2AllowanceRequired => "invalid_batch_settlement_evm_permit2_allowance_required",
            Self::DepositSimulationFailed => "invalid_batch_settlement_evm_deposit_simulation_failed",
            Self::DepositTransactionFailed => "invalid_batch_settlement_evm_deposit_transaction_failed",
            Self::WaitForReceiptFailed => "invalid_batch_settlement_evm_wait_for_receipt_failed",
            Self::AuthorizerAddressMismatch => "invalid_batch_settlement_evm_authorizer_address_mismatch",
            Self::ClaimSimulationFailed => "invalid_batch_settlement_evm_claim_simulation_failed",
            Self::ClaimTransactionFailed => "invalid_batch_settlement_evm_claim_transaction_failed",
            Self::SettleSimulationFailed => "invalid_batch_settlement_evm_settle_simulation_failed",
            Self::SettleTransactionFailed => "invalid_batch_settlement_evm_settle_transaction_failed",
            Self::NothingToSettle => "invalid_batch_settlement_evm_nothing_to_settle",
            Self::RefundNoBalance => "invalid_batch_settlement_evm_refund_no_balance",
            Self::RefundSimulationFailed => "invalid_batch_settlement_evm_refund_simulation_failed",
            Self::RefundTransactionFailed => "invalid_batch_settlement_evm_refund_transaction_failed",
        }
    }
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
            Self::AlreadyUsed => "duplicate_settlement",
            Self::AnswersUsed => "answers_used",
            Self::SignInDomain => "invalid_siwx_domain_mismatch",
            Self::SignInTime => "invalid_siwx_time",
            Self::SignInNonce => "invalid_siwx_nonce",
            Self::SignInSignature => "invalid_siwx_signature",
            Self::SignInMessage => "invalid_siwx_message",
            Self::NoPass => "no_pass",
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
            Self::Permit2Spender => "invalid_permit2_spender",
            Self::Permit2Recipient => "invalid_permit2_recipient_mismatch",
            Self::Permit2DeadlineExpired => "permit2_deadline_expired",
            Self::Permit2NotYetValid => "permit2_not_yet_valid",
            Self::Permit2AmountMismatch => "permit2_amount_mismatch",
            Self::Permit2TokenMismatch => "permit2_token_mismatch",
            Self::Permit2Signature => "invalid_permit2_signature",
            Self::Permit2AllowanceRequired => "permit2_allowance_required",
            Self::Permit2InsufficientBalance => "permit2_insufficient_balance",
            Self::Permit2NonceUsed => "permit2_invalid_nonce",
            Self::Permit2ProxyNotDeployed => "permit2_proxy_not_deployed",
            Self::Permit2SimulationFailed => "permit2_simulation_failed",
            Self::UptoFacilitatorMismatch => "upto_facilitator_mismatch",
            Self::UptoSettlementExceeds => "invalid_upto_evm_payload_settlement_exceeds_amount",
            Self::Eip2612Format => "invalid_eip2612_extension_format",
            Self::Eip2612From => "eip2612_from_mismatch",
            Self::Eip2612Asset => "eip2612_asset_mismatch",
            Self::Eip2612Spender => "eip2612_spender_not_permit2",
            Self::Eip2612Deadline => "eip2612_deadline_expired",
            Self::Erc20ApprovalFormat => "invalid_erc20_approval_extension_format",
            Self::Erc20ApprovalFrom => "erc20_approval_from_mismatch",
            Self::Erc20ApprovalAsset => "erc20_approval_asset_mismatch",
            Self::Erc20ApprovalSpender => "erc20_approval_spender_not_permit2",
            Self::Erc20ApprovalSigner => "erc20_approval_tx_signer_mismatch",
            Self::Erc20ApprovalTarget => "erc20_approval_tx_wrong_target",
            Self::Erc20ApprovalCalldata => "erc20_approval_tx_invalid_calldata",
            Self::Erc20ApprovalTxFailed => "erc20_approval_tx_failed",
            Self::Batch(batch) => batch.as_str(),
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

/// The reason `result` was refused with, `None` when it passed: how tests read a check's verdict.
///
/// # Panics
/// When the chain could not be read (no verdict either way).
#[cfg(test)]
pub(crate) fn refusal_reason<T>(result: Result<T, ProofError>) -> Option<Reason> {
    match result {
        Ok(_) => None,
        Err(ProofError::Refused(refusal)) => Some(refusal.reason),
        Err(other) => panic!("expected a refusal, got {other}"),
    }
}

impl Reason {
    /// The reason for an amount that does not meet the price, on `family`'s chains.
    #[must_use]
    pub const fn amount_mismatch(family: tollgate_protocol::ChainFamily) -> Self {
        match family {
            tollgate_protocol::ChainFamily::Solana => Self::SvmAmountMismatch,
            tollgate_protocol::ChainFamily::Evm => Self::EvmValue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_protocol::ChainFamily;

    /// The strings x402 clients act on, as the x402 facilitators write them.
    #[test]
    fn reasons_are_the_strings_x402_clients_read() {
        assert_eq!(Reason::InsufficientFunds.as_str(), "insufficient_funds");
        assert_eq!(Reason::AlreadyUsed.as_str(), "duplicate_settlement");
        assert_eq!(Reason::SvmAmountMismatch.as_str(), "invalid_exact_svm_payload_transaction_amount_mismatch");
        assert_eq!(Reason::EvmValue.as_str(), "invalid_exact_evm_payload_authorization_value");
        assert_eq!(Reason::Permit2AmountMismatch.as_str(), "permit2_amount_mismatch");
        assert_eq!(
            Reason::Batch(BatchReason::CumulativeExceedsBalance).as_str(),
            "invalid_batch_settlement_evm_cumulative_exceeds_balance"
        );
        assert_eq!(BatchReason::ChannelNotFound.as_str(), "invalid_batch_settlement_evm_channel_not_found");
    }

    #[test]
    fn an_amount_below_the_price_is_named_in_its_chain_familys_words() {
        assert_eq!(Reason::amount_mismatch(ChainFamily::Solana), Reason::SvmAmountMismatch);
        assert_eq!(Reason::amount_mismatch(ChainFamily::Evm), Reason::EvmValue);
    }

    #[test]
    fn a_refusal_says_its_reason_and_sentence() {
        let refusal = Refusal::new(Reason::InvalidNetwork, "the proof pays on base");
        assert_eq!(refusal.reason, Reason::InvalidNetwork);
        assert_eq!(refusal.to_string(), "the proof pays on base");
        assert_eq!(ProofError::from(refusal.clone()).to_string(), "the proof pays on base");
    }
}
