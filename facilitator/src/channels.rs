//! x402 `batch-settlement`, the facilitator's part: a buyer's `deposit`, `voucher` or `refund`
//! verified against the seller's requirement and the channel on chain; a deposit, a seller's
//! claim, a sweep and a completed refund settled.
//!
//! A batch payment is not one transfer to the seller, so it does not go through the payment
//! core's single-transfer checks ([`crate::chains::Terms`]): the requirement binds the channel
//! (token, receiver, receiver authorizer, withdrawal delay, and the channel id that hashes
//! them), and the voucher must fit in what the chain holds. Every answer carries the channel as
//! the chain holds it.
//!
//! | payload | settled as |
//! |---|---|
//! | `deposit` | a payment from the payer into the escrow, once per authorization ([`ContractPayment`]) |
//! | `claim` | one `claimWithSignature` transaction (accounting only; a claim sent again is a no-op on chain) |
//! | `settle` | a payment from the escrow to the receiver, once per claimed total |
//! | `refund` | the claims and `refundWithSignature` in one transaction: a payment back to the payer, once per refund nonce |
//!
//! The facilitator signs claims and refunds as the channels' delegated receiver authorizer only
//! for a receiver that is one of the caller account's own wallets.

use std::sync::Arc;

use tollgate_protocol::gateway::PaymentStatus;
use tollgate_protocol::x402::batch::{BatchPayload, ChannelState};
use tollgate_protocol::x402::{PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse};

use crate::chains::evm::batch::{self, Bound};
use crate::chains::evm::protocol_address;
use crate::chains::{BatchReason, Chains, Intent, ProofError, Reason, Refusal};
use crate::clock::Clock;
use crate::payment::{ContractPayment, MAX_X402_WAIT, PaymentError, Payments, Prepared};
use crate::plans::Sponsorship;
use crate::store::{Store, StoredPayment};

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
    /// A claim: its transaction, whether it was mined and succeeded (`None`: not within the
    /// wait), and the channels after it.
    Claimed {
        /// Its hash.
        transaction: String,
        /// Its outcome.
        succeeded: Option<bool>,
        /// The claimed channels as the chain holds them after it (when it succeeded).
        channels: Vec<ChannelState>,
    },
    /// A refund: its payment from the escrow back to the payer, and the channel after it.
    Refunded {
        /// The payment.
        payment: Box<StoredPayment>,
        /// The channel after it.
        channel: Option<ChannelState>,
    },
    /// A sweep: its payment from the escrow to the receiver.
    Swept {
        /// The payment.
        payment: Box<StoredPayment>,
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
    store: Arc<dyn Store>,
}

fn refusal(reason: Reason, message: impl Into<String>) -> ProofError {
    ProofError::Refused(Refusal::new(reason, message))
}

impl Channels {
    /// The service over these chains.
    #[must_use]
    pub fn new(chains: Arc<Chains>, clock: Arc<dyn Clock>, payments: Payments, store: Arc<dyn Store>) -> Self {
        Self { chains, clock, payments, store }
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
        let passed = batch::check(&backend, &bound, &read, (sender, Intent::Verify), now).await?;
        Ok(Verdict { payer: protocol_address(passed.config.payer), channel: passed.snapshot.state() })
    }

    /// [`Self::verify`] in x402's words (`/verify`'s answer, whoever asks: the HTTP API, a
    /// seller's layer in process): valid with the channel in `extra`, or the scheme's reason.
    ///
    /// # Errors
    /// [`PaymentError`] when the chain cannot be asked (no verdict on the payment).
    pub async fn verify_x402(
        &self,
        payload: &PaymentPayload,
        requirement: &PaymentRequirements,
    ) -> Result<VerifyResponse, PaymentError> {
        let (valid, reason) = match self.verify(payload, requirement).await {
            Ok(verdict) => (Some(verdict), None),
            Err(ProofError::Refused(r)) => {
                tracing::info!(reason = r.reason.as_str(), detail = %r.message, "x402 batch verify refused");
                (None, Some(r))
            }
            Err(ProofError::Chain(e)) => return Err(e.into()),
        };
        Ok(VerifyResponse {
            is_valid: valid.is_some(),
            invalid_reason: reason.as_ref().map(|r| r.reason.as_str().to_owned()),
            invalid_message: reason.map(|r| r.message),
            payer: valid.as_ref().map(|v| v.payer.to_string()),
            extra: valid.and_then(|v| serde_json::to_value(&v.channel).ok()),
        })
    }

    /// [`Self::settle`] in x402's words (`/settle`'s answer): what a deposit, sweep or refund
    /// moved (`amount`) with the channel after it, a claim's channels, or why not — a refusal, a
    /// transaction that failed, or one sent and not yet mined
    /// ([`tollgate_protocol::x402::batch::reason::WAIT_FOR_RECEIPT`]: settle again to follow it).
    ///
    /// # Errors
    /// [`PaymentError`] that is no verdict on the payment (storage, the chain unreachable).
    pub async fn settle_x402(
        &self,
        seller: &Seller,
        payload: &PaymentPayload,
        requirement: &PaymentRequirements,
        resource: Option<String>,
    ) -> Result<SettleResponse, PaymentError> {
        let answer = SettleResponse {
            success: false,
            error_reason: None,
            error_message: None,
            payer: None,
            transaction: String::new(),
            network: requirement.network.to_string(),
            amount: None,
            payment_id: None,
            answers: None,
            extra: None,
        };
        let failed = |why: BatchReason, message: String, done: &SettleResponse| SettleResponse {
            error_reason: Some(Reason::Batch(why).as_str().to_owned()),
            error_message: Some(message),
            ..done.clone()
        };
        let (payment, channel, failure) = match self.settle(seller, payload, requirement, resource).await {
            Ok(Settled::Deposit { payment, channel }) => (payment, channel, BatchReason::DepositTransactionFailed),
            Ok(Settled::Swept { payment }) => (payment, None, BatchReason::SettleTransactionFailed),
            Ok(Settled::Refunded { payment, channel }) => (payment, channel, BatchReason::RefundTransactionFailed),
            Ok(Settled::Claimed { transaction, succeeded, channels }) => {
                // A claim moves no money: `amount` stays empty.
                let done = SettleResponse { transaction, ..answer };
                return Ok(match succeeded {
                    Some(true) => {
                        let extra = serde_json::json!({ "channelStates": channels });
                        SettleResponse { success: true, extra: Some(extra), ..done }
                    }
                    Some(false) => {
                        failed(BatchReason::ClaimTransactionFailed, "the claim reverted on chain".into(), &done)
                    }
                    None => {
                        failed(BatchReason::WaitForReceiptFailed, "broadcast; not mined within the wait".into(), &done)
                    }
                });
            }
            Err(e) => {
                let (r, holder) = e.into_x402_refusal()?;
                tracing::info!(reason = r.reason.as_str(), detail = %r.message, "x402 batch settle refused");
                let (transaction, payer) = holder.map_or((String::new(), None), |h| {
                    (h.payment.transaction.unwrap_or_default(), Some(h.payment.from))
                });
                return Ok(SettleResponse {
                    transaction,
                    payer,
                    error_reason: Some(r.reason.as_str().to_owned()),
                    error_message: Some(r.message),
                    ..answer
                });
            }
        };
        let error = payment.error.clone();
        let p = payment.payment;
        let done = SettleResponse {
            payer: Some(p.from.clone()),
            transaction: p.transaction.clone().unwrap_or_default(),
            payment_id: Some(p.id.clone()),
            ..answer
        };
        Ok(match p.status {
            PaymentStatus::Confirmed => SettleResponse {
                success: true,
                amount: Some(p.amount_atomic),
                extra: channel.map(|c| serde_json::json!({ "channelState": c })),
                ..done
            },
            PaymentStatus::Failed | PaymentStatus::Expired => {
                let message = error.unwrap_or_else(|| format!("the transaction {}", p.status.as_str()));
                failed(failure, message, &done)
            }
            _ => failed(
                BatchReason::WaitForReceiptFailed,
                "broadcast; not confirmed within the wait: settle again to follow it".into(),
                &done,
            ),
        })
    }

    /// Settles `payload` for `seller`: a `deposit` sent from the facilitator's account into the
    /// channel's escrow (once: its payment claims the authorization) and the channel read back;
    /// a `claim`, a `settle` (sweep) or a completed `refund` (see the module's table). A
    /// `voucher` is refused: it is the seller's to keep and claim.
    ///
    /// # Errors
    /// [`PaymentError::Refused`] with the scheme's reason; as [`Payments::contract_payment_checked`].
    pub async fn settle(
        &self,
        seller: &Seller,
        payload: &PaymentPayload,
        requirement: &PaymentRequirements,
        resource: Option<String>,
    ) -> Result<Settled, PaymentError> {
        let (backend, bound, read) = self.admit(payload, requirement)?;
        let signer = backend
            .signer
            .as_ref()
            .map(|s| s.0.address())
            .ok_or_else(|| PaymentError::Invalid("this facilitator has no EVM account to send from".into()))?;
        let wait = std::time::Duration::from_secs(requirement.max_timeout_seconds.clamp(1, MAX_X402_WAIT.as_secs()));
        let deposit = match &read {
            BatchPayload::Deposit(deposit) => deposit,
            BatchPayload::Claim(claim) => return self.claim(seller, (&backend, &bound, signer), claim, wait).await,
            BatchPayload::Settle(sweep) => {
                let job = (payload, requirement, resource);
                return self.sweep(seller, (&backend, &bound, signer), sweep, job, wait).await;
            }
            BatchPayload::Refund(refund) => {
                let job = (payload, requirement, resource);
                return self.refund(seller, (&backend, &bound, signer), (&read, refund), job, wait).await;
            }
            BatchPayload::Voucher(_) => {
                return Err(refusal(
                    Reason::Batch(BatchReason::PayloadType),
                    "a voucher is the seller's to keep and claim, not to settle",
                )
                .into());
            }
        };
        let why = BatchReason::DepositPayload;
        let (config, id) = batch::bind(&bound, &deposit.channel_config, &deposit.voucher.channel_id, why)?;
        let proof_id = batch::deposit_identity(&requirement.network, (&config, id), &deposit.deposit)?;
        let job = job(seller, (payload, requirement, resource), wait, (config.payer, ESCROW), bound.token, proof_id);
        let prepare = async {
            let now = u64::try_from(self.clock.now().timestamp()).unwrap_or_default();
            let passed = batch::check(&backend, &bound, &read, (signer, Intent::Settle), now).await?;
            let call =
                passed.deposit_call.ok_or_else(|| PaymentError::Internal("a checked deposit has no call".into()))?;
            let (call, fee) = batch::prepare(&backend, signer, call, BatchReason::DepositSimulationFailed).await?;
            let decimals = batch::decimals(&backend, bound.token).await?;
            Ok(Prepared { call, decimals, amount: deposit.deposit.amount.get(), fee })
        };
        let payment = self.payments.contract_payment_checked(job, prepare).await?;
        let channel = channel_after(&backend, &payment, id).await?;
        Ok(Settled::Deposit { payment: Box::new(payment), channel })
    }

    /// A seller's claim: checked row by row, signed by this facilitator where it is the channels'
    /// receiver authorizer (only for a receiver that is one of the seller's own wallets here:
    /// see [`Self::receives_for`]), else sent under the seller's own authorizer's signature.
    async fn claim(
        &self,
        seller: &Seller,
        (backend, bound, signer): (&crate::chains::evm::EvmBackend, &Bound, alloy::primitives::Address),
        claim: &tollgate_protocol::x402::batch::ClaimPayload,
        wait: std::time::Duration,
    ) -> Result<Settled, PaymentError> {
        let claims = batch::check_claims(backend, bound, &claim.claims).await?;
        let digest = batch::claim_digest(bound.chain_id, &claims);
        // Every row's channel pays the requirement's receiver (checked above).
        let given = claim.claim_authorizer_signature.as_deref();
        let signature = self
            .authorization(seller, (backend, bound, signer), (given, digest), BatchReason::AuthorizerAddressMismatch)
            .await?;
        let call = batch::claim_call(&claims, &signature);
        let (signable, fee) = batch::prepare(backend, signer, call, BatchReason::ClaimSimulationFailed).await?;
        self.payments.reserve_fees(&seller.account, seller.sponsorship, backend.rpc.network().family(), fee).await?;
        let (hash, succeeded) = batch::send(backend, &*signable, wait).await?;
        let mut channels = Vec::new();
        if succeeded == Some(true) {
            for c in &claims {
                channels.push(batch::read(backend, c.channel_id).await?.state());
            }
        }
        Ok(Settled::Claimed { transaction: format!("{hash:#x}"), succeeded, channels })
    }

    /// A sweep of what the requirement's receiver claimed in its token, recorded as its payment
    /// from the escrow, once per claimed total.
    async fn sweep(
        &self,
        seller: &Seller,
        (backend, bound, signer): (&crate::chains::evm::EvmBackend, &Bound, alloy::primitives::Address),
        sweep: &tollgate_protocol::x402::batch::SettlePayload,
        (payload, requirement, resource): (&PaymentPayload, &PaymentRequirements, Option<String>),
        wait: std::time::Duration,
    ) -> Result<Settled, PaymentError> {
        let why = Reason::Batch(BatchReason::SettlePayload);
        let (receiver, token) =
            (crate::chains::evm::address(&sweep.receiver), crate::chains::evm::address(&sweep.token));
        if receiver != Some(bound.receiver) || token != Some(bound.token) {
            return Err(refusal(why, "the sweep must name the requirement's payTo and asset").into());
        }
        let (claimed, pending) = batch::unsettled(backend, bound.receiver, bound.token).await?;
        // Once per claimed total: two sweeps of the same claims are one (the second is answered
        // with the first, which left nothing pending).
        let proof_id =
            format!("{}:batch-sweep:{:#x}:{:#x}:{claimed}", requirement.network, bound.receiver, bound.token);
        let job = job(seller, (payload, requirement, resource), wait, (ESCROW, bound.receiver), bound.token, proof_id);
        let prepare = async {
            if pending == 0 {
                return Err(refusal(
                    Reason::Batch(BatchReason::NothingToSettle),
                    format!("{:#x} has nothing claimed and not yet sent in {:#x}", bound.receiver, bound.token),
                )
                .into());
            }
            let call = batch::sweep_call(bound.receiver, bound.token);
            let (call, fee) = batch::prepare(backend, signer, call, BatchReason::SettleSimulationFailed).await?;
            let decimals = batch::decimals(backend, bound.token).await?;
            Ok(Prepared { call, decimals, amount: pending, fee })
        };
        let payment = self.payments.contract_payment_checked(job, prepare).await?;
        Ok(Settled::Swept { payment: Box::new(payment) })
    }

    /// A cooperative refund the seller completed (refund nonce, claims of what it charged, its
    /// authorizer's signatures, or none where it delegates to this facilitator): the claims and
    /// `refundWithSignature` in one transaction, recorded as a payment from the escrow back to the
    /// payer, once per refund nonce.
    async fn refund(
        &self,
        seller: &Seller,
        (backend, bound, signer): (&crate::chains::evm::EvmBackend, &Bound, alloy::primitives::Address),
        (read, refund): (&BatchPayload, &tollgate_protocol::x402::batch::RefundPayload),
        (payload, requirement, resource): (&PaymentPayload, &PaymentRequirements, Option<String>),
        wait: std::time::Duration,
    ) -> Result<Settled, PaymentError> {
        let bad = |m: String| PaymentError::from(refusal(Reason::Batch(BatchReason::RefundPayload), m));
        let (config, id) =
            batch::bind(bound, &refund.channel_config, &refund.voucher.channel_id, BatchReason::RefundPayload)?;
        let nonce = refund
            .refund_nonce
            .ok_or_else(|| bad("refundNonce is missing: the seller completes a refund before settling it".into()))?;
        // Once per refund nonce: the contract takes each nonce once.
        let proof_id = format!("{}:batch-refund:{id:#x}:{}", requirement.network, nonce.get());
        let job = job(seller, (payload, requirement, resource), wait, (ESCROW, config.payer), bound.token, proof_id);
        let prepare = self.checked_refund(seller, (backend, bound, signer), (read, refund), (&config, id, nonce.get()));
        let payment = self.payments.contract_payment_checked(job, prepare).await?;
        let channel = channel_after(backend, &payment, id).await?;
        Ok(Settled::Refunded { payment: Box::new(payment), channel })
    }

    /// A completed refund checked against the channel as the chain holds it (its refund nonce the
    /// channel's next, its claims the channel's own, something unclaimed left to return), with
    /// the receiver authorizer's signatures: the claims and `refundWithSignature` as one call.
    async fn checked_refund(
        &self,
        seller: &Seller,
        (backend, bound, signer): (&crate::chains::evm::EvmBackend, &Bound, alloy::primitives::Address),
        (read, refund): (&BatchPayload, &tollgate_protocol::x402::batch::RefundPayload),
        (config, id, nonce): (&tollgate_encoding::batch::ChannelConfig, alloy::primitives::B256, u128),
    ) -> Result<Prepared, PaymentError> {
        let bad = |m: String| PaymentError::from(refusal(Reason::Batch(BatchReason::RefundPayload), m));
        let now = u64::try_from(self.clock.now().timestamp()).unwrap_or_default();
        let passed = batch::check(backend, bound, read, (signer, Intent::Settle), now).await?;
        let snapshot = passed.snapshot;
        if alloy::primitives::U256::from(nonce) != snapshot.refund_nonce {
            return Err(bad(format!("refundNonce {} is not the channel's next, {}", nonce, snapshot.refund_nonce)));
        }
        let claims = batch::check_claims(backend, bound, refund.claims.as_deref().unwrap_or_default()).await?;
        if claims.iter().any(|c| c.channel_id != id) {
            return Err(bad("a refund's claims are its own channel's".into()));
        }
        let claimed = claims.iter().map(|c| c.total).fold(snapshot.total_claimed, u128::max);
        let available = snapshot.balance.saturating_sub(claimed);
        if available == 0 {
            return Err(refusal(
                Reason::Batch(BatchReason::RefundNoBalance),
                "the channel holds nothing unclaimed to return",
            )
            .into());
        }
        let asked = refund.amount.map_or(available, |a| a.get());
        let digest = tollgate_encoding::batch::refund_digest(bound.chain_id, id, snapshot.refund_nonce, asked);
        let given = refund.refund_authorizer_signature.as_deref();
        let authorizing = (backend, bound, signer);
        let refund_signature =
            self.authorization(seller, authorizing, (given, digest), BatchReason::RefundPayload).await?;
        let mut calls = Vec::new();
        if !claims.is_empty() {
            let digest = batch::claim_digest(bound.chain_id, &claims);
            let given = refund.claim_authorizer_signature.as_deref();
            let signature =
                self.authorization(seller, authorizing, (given, digest), BatchReason::RefundPayload).await?;
            calls.push(batch::claim_call(&claims, &signature));
        }
        calls.push(batch::refund_call(config, asked, snapshot.refund_nonce, &refund_signature));
        let call = if calls.len() == 1 { calls.remove(0) } else { batch::multicall(calls) };
        let (call, fee) = batch::prepare(backend, signer, call, BatchReason::RefundSimulationFailed).await?;
        let decimals = batch::decimals(backend, bound.token).await?;
        Ok(Prepared { call, decimals, amount: asked.min(available), fee })
    }

    /// The receiver authorizer's signature of `digest`: the seller's own (`given`, checked), or
    /// this facilitator's as the delegated authorizer — only where it is the requirement's
    /// authorizer and the receiver is one of the seller's own wallets here
    /// ([`Self::receives_for`]; refused with `not_theirs` otherwise).
    async fn authorization(
        &self,
        seller: &Seller,
        (backend, bound, signer): (&crate::chains::evm::EvmBackend, &Bound, alloy::primitives::Address),
        (given, digest): (Option<&str>, alloy::primitives::B256),
        not_theirs: BatchReason,
    ) -> Result<Vec<u8>, PaymentError> {
        if let Some(text) = given {
            return authorizer_signature(backend, bound, text, digest).await;
        }
        if bound.receiver_authorizer != signer {
            return Err(refusal(
                Reason::Batch(BatchReason::AuthorizerAddressMismatch),
                format!("this facilitator ({signer:#x}) is not the channel's receiver authorizer: sign it yourself"),
            )
            .into());
        }
        if !self.receives_for(seller, bound.receiver).await? {
            return Err(refusal(Reason::Batch(not_theirs), not_receiver(bound.receiver)).into());
        }
        let key = backend.signer.as_ref().map(|s| &s.0).ok_or_else(|| PaymentError::Internal("no signer".into()))?;
        Ok(alloy::signers::SignerSync::sign_hash_sync(key, &digest)
            .map_err(|e| PaymentError::Internal(format!("cannot sign: {e}")))?
            .as_bytes()
            .to_vec())
    }

    /// Whether this facilitator may sign for `seller` as the delegated receiver authorizer of
    /// channels paying `receiver`: only when `receiver` is one of the seller account's own
    /// wallets here. A claim raises what a payer owes, and a refund returns what a receiver
    /// earned but has not claimed yet: nobody else's word may have them signed (not even the
    /// account that settled the channel's deposit, which may be the payer's own).
    async fn receives_for(&self, seller: &Seller, receiver: alloy::primitives::Address) -> Result<bool, PaymentError> {
        let wallet = self.store.get_wallet(&protocol_address(receiver).to_string()).await?;
        Ok(wallet.is_some_and(|w| w.account_id == seller.account))
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
        let chain_id = backend.rpc.chain_id();
        let bound = match Bound::of(requirement, chain_id) {
            Ok(bound) => bound,
            // A seller's claim, sweep or completed refund may name its terms in the channels
            // alone (the official channel manager sends `extra: {}`).
            Err(e) if requirement.extra.as_ref().is_none_or(|x| x.get("receiverAuthorizer").is_none()) => {
                Bound::of_seller_payload(requirement, chain_id, &read)?.ok_or(e)?
            }
            Err(e) => return Err(e),
        };
        Ok((backend, bound, read))
    }
}

/// Channel `id` as the chain holds it once `payment` is confirmed (`None` before).
async fn channel_after(
    backend: &crate::chains::evm::EvmBackend,
    payment: &StoredPayment,
    id: alloy::primitives::B256,
) -> Result<Option<ChannelState>, PaymentError> {
    Ok(match payment.payment.status {
        tollgate_protocol::gateway::PaymentStatus::Confirmed => Some(batch::read(backend, id).await?.state()),
        _ => None,
    })
}

/// The settlement contract: the escrow deposits go into and sweeps and refunds come out of.
const ESCROW: alloy::primitives::Address = tollgate_encoding::batch::BATCH_SETTLEMENT;

/// A contract payment `seller` asks for: `from` → `to` in `token`, claimed under `proof_id` (its
/// decimals, amount and fee are its check's: [`Prepared`]).
fn job(
    seller: &Seller,
    (payload, requirement, resource): (&PaymentPayload, &PaymentRequirements, Option<String>),
    wait: std::time::Duration,
    (from, to): (alloy::primitives::Address, alloy::primitives::Address),
    token: alloy::primitives::Address,
    proof_id: String,
) -> ContractPayment {
    ContractPayment {
        account: seller.account.clone(),
        sponsorship: seller.sponsorship,
        network: requirement.network.clone(),
        from: protocol_address(from).to_string(),
        to: protocol_address(to).to_string(),
        token: (protocol_address(token).to_string(), 0),
        amount: 0,
        proof_id,
        payload: payload.clone(),
        fee: None,
        resource,
        wait,
    }
}

/// A receiver authorizer's `0x`-hex signature of `digest`, checked.
async fn authorizer_signature(
    backend: &crate::chains::evm::EvmBackend,
    bound: &Bound,
    text: &str,
    digest: alloy::primitives::B256,
) -> Result<Vec<u8>, PaymentError> {
    let mismatch = |m: String| PaymentError::from(refusal(Reason::Batch(BatchReason::AuthorizerAddressMismatch), m));
    let bytes = text
        .strip_prefix("0x")
        .and_then(|h| alloy::primitives::hex::decode(h).ok())
        .ok_or_else(|| mismatch("an authorizer signature must be 0x-hex".into()))?;
    if !batch::authorized(backend, bound.receiver_authorizer, digest, &bytes).await? {
        return Err(mismatch(format!("not signed by the receiver authorizer {:#x}", bound.receiver_authorizer)));
    }
    Ok(bytes)
}

/// Why this facilitator does not sign for a receiver.
fn not_receiver(receiver: alloy::primitives::Address) -> String {
    format!(
        "{receiver:#x} is not a wallet of this account here: this facilitator signs claims and refunds only for its \
         sellers' own wallets; sign them with your receiver authorizer's key"
    )
}
