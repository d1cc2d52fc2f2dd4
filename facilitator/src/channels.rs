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
use crate::payment::{Deposit, MAX_X402_WAIT, PaymentError, Payments};
use crate::plans::Sponsorship;
use crate::store::StoredPayment;

/// A buyer's payload that would pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The payer.
    pub payer: tollgate_protocol::Address,
    /// The channel as the chain holds it (before any deposit the payload carries).
    pub channel: ChannelState,
}

/// What a settlement did.
#[derive(Debug)]
pub enum Settled {
    /// A deposit: its payment (confirmed, failed, or still pending on chain), and the channel
    /// read after it was confirmed.
    Deposit {
        /// The payment into the channel's escrow.
        payment: Box<StoredPayment>,
        /// The channel after it.
        channel: Option<ChannelState>,
    },
}

/// Who asks for a settlement.
#[derive(Debug, Clone)]
pub struct Seller {
    /// Its account.
    pub account: String,
    /// Its plan's daily budget of network fees the facilitator pays.
    pub sponsorship: Sponsorship,
}

/// The facilitator's `batch-settlement` service.
pub struct Channels {
    chains: Arc<Chains>,
    clock: Arc<dyn Clock>,
    payments: Payments,
}

fn refusal(reason: Reason, message: impl Into<String>) -> ProofError {
    ProofError::Refused(Refusal::new(reason, message))
}

impl Channels {
    /// The service over these chains.
    #[must_use]
    pub fn new(chains: Arc<Chains>, clock: Arc<dyn Clock>, payments: Payments) -> Self {
        Self { chains, clock, payments }
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
    pub async fn verify(
        &self,
        payload: &PaymentPayload,
        requirement: &PaymentRequirements,
    ) -> Result<Verdict, ProofError> {
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

    /// Settles `payload` for `seller`: a `deposit` is sent from the facilitator's account into
    /// the channel's escrow, once (its payment claims the authorization), then the channel is
    /// read back.
    ///
    /// # Errors
    /// [`PaymentError::Refused`] with the scheme's reason; as [`Payments::deposit`].
    pub async fn settle(
        &self,
        seller: &Seller,
        payload: &PaymentPayload,
        requirement: &PaymentRequirements,
        resource: Option<String>,
    ) -> Result<Settled, PaymentError> {
        let (backend, bound, read) = self.admit(payload, requirement)?;
        let BatchPayload::Deposit(deposit) = &read else {
            return Err(refusal(
                Reason::Batch(BatchReason::PayloadType),
                format!("settling a {} payload is not served yet", read.kind()),
            )
            .into());
        };
        let signer =
            backend.signer.as_ref().map(|s| s.0.address()).ok_or_else(|| {
                PaymentError::Invalid("this facilitator has no EVM account to send deposits from".into())
            })?;
        let why = BatchReason::DepositPayload;
        let (config, id) = batch::bind(&bound, &deposit.channel_config, &deposit.voucher.channel_id, why)?;
        let wait = std::time::Duration::from_secs(requirement.max_timeout_seconds.clamp(1, MAX_X402_WAIT.as_secs()));
        let mut job = Deposit {
            account: seller.account.clone(),
            sponsorship: seller.sponsorship,
            network: requirement.network.clone(),
            payer: protocol_address(config.payer).to_string(),
            escrow: protocol_address(tollgate_encoding::batch::BATCH_SETTLEMENT).to_string(),
            token: (protocol_address(bound.token).to_string(), 0),
            amount: deposit.deposit.amount.get(),
            proof_id: batch::deposit_identity(&requirement.network, (&config, id), &deposit.deposit)?,
            payload: payload.clone(),
            fee: None,
            resource,
            wait,
        };
        let payment = match self.payments.deposit_claimed(&job).await? {
            Some(payment) => payment,
            None => {
                let now = u64::try_from(self.clock.now().timestamp()).unwrap_or_default();
                let passed = batch::check(&backend, &bound, &read, signer, now).await?;
                let Some(call) = passed.deposit_call else {
                    return Err(PaymentError::Internal("a checked deposit has no call".into()));
                };
                let (call, fee) = batch::prepare_deposit(&backend, signer, call).await?;
                job.token.1 = batch::decimals(&backend, bound.token).await?;
                job.fee = fee;
                self.payments.deposit(job, call).await?
            }
        };
        let channel = match payment.payment.status {
            tollgate_protocol::gateway::PaymentStatus::Confirmed => Some(batch::read(&backend, id).await?.state()),
            _ => None,
        };
        Ok(Settled::Deposit { payment: Box::new(payment), channel })
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
            return Err(refusal(
                Reason::Batch(BatchReason::Scheme),
                "the payload and the requirement must both be batch-settlement",
            ));
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
