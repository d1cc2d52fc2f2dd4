//! x402 `batch-settlement`, the facilitator's part: a buyer's `deposit`, `voucher` or `refund`
//! verified against the seller's requirement and the channel on chain.
//!
//! A batch payment is not one transfer to the seller, so it does not go through the payment
//! core's single-transfer checks ([`crate::chains::Terms`]): the requirement binds the channel
//! (token, receiver, receiver authorizer, withdrawal delay, and the channel id that hashes
//! them), and the voucher must fit in what the chain holds. Every answer carries the channel as
//! the chain holds it.

use std::sync::Arc;

use tollgate_protocol::x402::batch::{BatchPayload, ChannelState};
use tollgate_protocol::x402::{PaymentPayload, PaymentRequirements};

use crate::chains::evm::batch::{self, Bound};
use crate::chains::evm::protocol_address;
use crate::chains::{BatchReason, Chains, ProofError, Reason, Refusal};
use crate::clock::Clock;

/// A buyer's payload that would pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The payer.
    pub payer: tollgate_protocol::Address,
    /// The channel as the chain holds it (before any deposit the payload carries).
    pub channel: ChannelState,
}

/// The facilitator's `batch-settlement` service.
pub struct Channels {
    chains: Arc<Chains>,
    clock: Arc<dyn Clock>,
}

fn refusal(reason: Reason, message: impl Into<String>) -> ProofError {
    ProofError::Refused(Refusal::new(reason, message))
}

impl Channels {
    /// The service over these chains.
    #[must_use]
    pub fn new(chains: Arc<Chains>, clock: Arc<dyn Clock>) -> Self {
        Self { chains, clock }
    }

    /// Whether a requirement is `batch-settlement`'s (answered here, not by the payment core).
    #[must_use]
    pub fn handles(requirement: &PaymentRequirements) -> bool {
        requirement.scheme == tollgate_protocol::x402::batch::SCHEME
    }

    /// Would `payload` pass `requirement`? A `deposit`, `voucher` or `refund` checked against
    /// the channel on chain (nothing is sent or written).
    ///
    /// # Errors
    /// [`ProofError::Refused`] with the scheme's reason; [`ProofError::Chain`] when the chain
    /// cannot be asked.
    pub async fn verify(&self, payload: &PaymentPayload, requirement: &PaymentRequirements) -> Result<Verdict, ProofError> {
        let (backend, bound, read) = self.admit(payload, requirement)?;
        let signer = backend.signer.as_ref().map(|s| s.0.address());
        let now = u64::try_from(self.clock.now().timestamp()).unwrap_or_default();
        // A deposit is simulated from the account that would send it (the payer's, where this
        // facilitator sends none).
        let payer_guess = read.channel().and_then(|(c, _)| crate::chains::evm::address(&c.payer));
        let sender = signer.or(payer_guess).unwrap_or_default();
        let passed = batch::check(&backend, &bound, &read, sender, now).await?;
        Ok(Verdict { payer: protocol_address(passed.payer), channel: passed.snapshot.state() })
    }

    /// What a payload and its requirement say of themselves, before any chain is asked: the
    /// scheme, the network (served here), the requirement a v2 payload accepted, and the
    /// payload's shape.
    fn admit(
        &self,
        payload: &PaymentPayload,
        requirement: &PaymentRequirements,
    ) -> Result<(Arc<crate::chains::evm::EvmBackend>, Bound, BatchPayload), ProofError> {
        if !Self::handles(requirement) || payload.scheme() != requirement.scheme {
            return Err(refusal(Reason::Batch(BatchReason::Scheme), "the payload and the requirement must both be batch-settlement"));
        }
        if payload.network() != &requirement.network {
            return Err(refusal(
                Reason::Batch(BatchReason::NetworkMismatch),
                format!("the payload pays on {}, not {}", payload.network(), requirement.network),
            ));
        }
        if let PaymentPayload::V2(p) = payload {
            let a = &p.accepted;
            let same = a.asset == requirement.asset
                && a.pay_to == requirement.pay_to
                && a.amount == requirement.amount
                && a.max_timeout_seconds == requirement.max_timeout_seconds;
            if !same {
                return Err(refusal(
                    Reason::InvalidPaymentRequirements,
                    "the payload was made for another requirement (asset, payTo, amount or timeout differ)",
                ));
            }
        }
        let backend = self.chains.evm(&requirement.network).ok_or_else(|| {
            refusal(Reason::InvalidNetwork, format!("{} is not served here for batch-settlement", requirement.network))
        })?;
        let bound = Bound::of(requirement, backend.rpc.chain_id())?;
        let read = BatchPayload::from_value(payload.payload()).map_err(|e| {
            let kind = payload.payload().get("type").and_then(serde_json::Value::as_str).unwrap_or_default();
            let why = match kind {
                "deposit" => BatchReason::DepositPayload,
                "voucher" => BatchReason::VoucherPayload,
                "refund" => BatchReason::RefundPayload,
                "claim" => BatchReason::ClaimPayload,
                "settle" => BatchReason::SettlePayload,
                _ => BatchReason::PayloadType,
            };
            refusal(Reason::Batch(why), e.reason)
        })?;
        Ok((backend, bound, read))
    }
}
