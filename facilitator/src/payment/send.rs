//! Outgoing payments: a hosted send from a custodial wallet ([`Payments::send`]), an unsigned
//! transfer for local mode ([`Payments::build`]), and the transaction a local-mode caller reports
//! ([`Payments::confirm`]).

use std::time::Duration;

use tollgate_protocol::gateway::{Direction, PaymentMode, PaymentStatus};
use tollgate_protocol::{ChainFamily, Network};

use super::pipeline::SIGN_ATTEMPTS;
use super::pipeline::Source;
use super::receive::VALIDITY;
use super::{PaymentError, Payments, detached, new_id};
use crate::chains::{Chain, Landed, Order, Reason, Refusal, TxStatus, Unsigned, Watched};
use crate::settlement::state::ExpiryEvidence;
use crate::settlement::{AdvanceError, Event, advance, record_outcome_revealing};
use crate::store::{NewPayment, StoreError, StoredPayment};

/// A transfer the caller asks for.
#[derive(Debug, Clone)]
pub struct SendOrder {
    /// The paying account (the API key's).
    pub account: String,
    /// On which chain.
    pub network: Network,
    /// What to transfer.
    pub order: Order,
    /// Resource paid for (the receipt is bound to it).
    pub resource: Option<String>,
    /// Caller metadata.
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// How long to wait for the chain's verdict (hosted).
    pub wait: Duration,
}

/// A hosted send as it stands after the wait.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The payment.
    pub payment: StoredPayment,
    /// Once confirmed: an `exact-native` receipt signed by the sending wallet, for `X-PAYMENT`.
    pub proof: Option<String>,
}

/// A local-mode transfer, built and recorded.
#[derive(Debug, Clone)]
pub struct Built {
    /// The payment (`built`).
    pub payment: StoredPayment,
    /// The unsigned transaction.
    pub unsigned: Unsigned,
}

impl Payments {
    /// The payment a send order makes (status `verified`, hosted, paid by the caller).
    async fn sent(&self, s: &SendOrder, fee: tollgate_protocol::AtomicAmount) -> Result<NewPayment, PaymentError> {
        let (from, to) = (s.order.from.to_string(), s.order.to.to_string());
        let counterparty = self.account_of(&to).await?;
        Ok(NewPayment {
            counterparty_account: counterparty,
            fee_atomic: Some(fee),
            resource: s.resource.clone(),
            metadata: s.metadata.clone(),
            ..NewPayment::native(new_id(), s.account.clone(), s.network.clone(), (from, to), s.order.amount, self.now())
        })
    }

    /// Pays from one of the caller's custodial wallets: signed with a transaction of its own
    /// (N identical sends are N transfers), broadcast once, watched for `s.wait`.
    ///
    /// # Errors
    /// [`PaymentError::Forbidden`] for a wallet that is not the caller's; [`PaymentError::InsufficientBalance`];
    /// [`PaymentError::InvalidRecipient`]; [`PaymentError::Unavailable`]; [`PaymentError::Internal`].
    pub async fn send(&self, s: SendOrder) -> Result<Sent, PaymentError> {
        let this = self.clone();
        detached(async move { this.send_now(s).await }).await
    }

    async fn send_now(&self, s: SendOrder) -> Result<Sent, PaymentError> {
        let chain = self.chain(&s.network)?;
        let key = self.custodial_key(&s.account, &s.order.from).await?;
        let planned = chain.plan_send(&s.order, &key).await?;
        let payment = self.sent(&s, planned.fee).await?;
        let stored = self.settle_new(&*chain, payment, Source::Sign(planned.tx), s.wait).await?;
        let proof = match (&stored.payment.status, &stored.payment.transaction) {
            (PaymentStatus::Confirmed, Some(tx)) => {
                Some(chain.sign_receipt(&key, tx, &s.order.to, s.resource.as_deref())?)
            }
            _ => None,
        };
        Ok(Sent { payment: stored, proof })
    }

    /// Builds an unsigned transfer for the caller to sign with their own wallet, recorded as a
    /// `built` payment.
    ///
    /// # Errors
    /// [`PaymentError::InsufficientBalance`]; [`PaymentError::InvalidRecipient`];
    /// [`PaymentError::Unavailable`]; [`PaymentError::Internal`].
    ///
    /// The payment holds the transaction built for it and claims it (its
    /// [`signed identity`](crate::chains::Chain::signed_identity), under the proof index): no two
    /// payments, of one account or of two, hold one built transaction, and only a transaction
    /// that signs what was built confirms the payment ([`Self::confirm`]).
    pub async fn build(&self, s: SendOrder) -> Result<Built, PaymentError> {
        let chain = self.chain(&s.network)?;
        for _ in 0..SIGN_ATTEMPTS {
            let unsigned = chain.build(&s.order).await?;
            let identity = chain
                .signed_identity(&unsigned.transaction)
                .ok_or_else(|| PaymentError::Internal("the chain built a transaction it cannot read back".into()))?;
            let payment = NewPayment {
                status: PaymentStatus::Built,
                mode: PaymentMode::Local,
                expires_at: Some(self.now() + VALIDITY),
                last_valid_block_height: Some(unsigned.horizon),
                tx_raw: Some(unsigned.transaction.clone()),
                proof_id: Some(built_claim(&s.network, &identity)),
                // Anyone may build a payment to anyone's wallet: the payee's account (a custodial
                // wallet's) learns of it, with the builder's metadata, only once it is confirmed.
                counterparty_account: None,
                ..self.sent(&s, unsigned.fee).await?
            };
            match self.store().insert_payment(&payment).await {
                Ok(payment) => return Ok(Built { payment, unsigned }),
                // Another build drew the same transaction (rare): build another.
                Err(StoreError::ProofUsed { payment_id }) => {
                    tracing::info!(other = %payment_id, "built transaction already held; building another");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(PaymentError::Internal("no transaction of its own after retries".into()))
    }

    /// Checks a transaction reported for a local-mode payment of `account` and records what the
    /// chain says: `confirmed` / `failed` when it has it, `expired` when it is past the payment's
    /// horizon without it, unchanged otherwise. One transaction settles one payment. A hosted
    /// payment is answered as it is when the transaction reported is its own.
    ///
    /// # Errors
    /// [`PaymentError::NotFound`] for a payment that is not the caller's; [`PaymentError::Refused`]
    /// for a transaction that cannot be its transaction (another family's, one that does not pay
    /// it, another payment's, or not the one a hosted payment has); [`PaymentError::Unavailable`].
    pub async fn confirm(&self, account: &str, payment_id: &str, tx: &str) -> Result<StoredPayment, PaymentError> {
        let this = self.clone();
        let (account, payment_id, tx) = (account.to_owned(), payment_id.to_owned(), tx.to_owned());
        detached(async move { this.confirm_now(&account, &payment_id, &tx).await }).await
    }

    async fn confirm_now(&self, account: &str, payment_id: &str, tx: &str) -> Result<StoredPayment, PaymentError> {
        let stored = self.store().get_payment(payment_id).await?;
        let stored = stored.filter(|p| p.visible_to(account)).ok_or_else(|| {
            PaymentError::NotFound(format!("no payment {}", payment_id.chars().take(64).collect::<String>()))
        })?;
        let p = &stored.payment;
        // The facilitator sent or saw a hosted payment's transaction itself: a report of that one
        // is answered with the record, and no other can be its transaction.
        if p.mode != PaymentMode::Local {
            return match &p.transaction {
                Some(known) if same_transaction(known, tx) => Ok(stored),
                _ => Err(not_its_transaction(format!(
                    "payment {} is hosted: its transaction is the one the facilitator sent or received, not this one",
                    p.id
                ))),
            };
        }
        if p.status.is_final() {
            return Ok(stored);
        }
        let chain = self.chain(&p.network)?;
        let tx_id = reported_id(&*chain, p, tx)?;
        let landed = match chain.status(&Watched::of(p, &tx_id)).await? {
            TxStatus::Landed(landed) => landed,
            // Expired only on the chain's word that the built transaction can no longer land.
            TxStatus::Dropped { reason } if p.status == PaymentStatus::Built => {
                let event = Event::Expire { evidence: ExpiryEvidence::Chain, reason };
                return self.advance(&p.id, &event).await;
            }
            // Not on chain (yet): nothing to record.
            TxStatus::Dropped { .. } | TxStatus::Unseen => return Ok(stored),
        };
        is_its_transaction(&*chain, p, &landed)?;
        if p.status == PaymentStatus::Built {
            let submit = Event::Submit { transaction: landed.tx_id.clone() };
            match advance(self.store(), &p.id, &submit, self.now()).await {
                Ok(_) | Err(AdvanceError::Transition(_)) => {}
                Err(AdvanceError::Store(StoreError::TransactionUsed { .. })) => {
                    return Err(not_its_transaction(
                        "that transaction was already reported for another payment".into(),
                    ));
                }
                Err(e) => return Err(PaymentError::Internal(e.to_string())),
            }
        }
        // A build is revealed to its payee's account once confirmed.
        let payee = match (p.owner_side, &p.counterparty_account) {
            (Direction::Sent, None) => self.account_of(&p.to).await?,
            _ => None,
        };
        record_outcome_revealing(self.store(), &p.id, &landed, self.now(), payee.as_deref())
            .await
            .map_err(|e| PaymentError::Internal(e.to_string()))
    }
}

/// The canonical id of a transaction reported for local payment `p`: of `p`'s chain family,
/// and well formed.
fn reported_id(chain: &dyn Chain, p: &NewPayment, tx: &str) -> Result<String, PaymentError> {
    // A well-formed id of another chain family cannot be this payment's transaction.
    if let Some(family) = ChainFamily::of_transaction_id(tx).filter(|f| *f != p.network.family()) {
        return Err(not_its_transaction(format!(
            "that is a {family} transaction id; this payment is on {}",
            p.network
        )));
    }
    chain.transaction_id(tx).ok_or_else(|| {
        PaymentError::Invalid(match p.network.family() {
            ChainFamily::Solana => "transaction must be a Solana signature".into(),
            ChainFamily::Evm => "transaction must be a transaction hash (0x + 64 hex digits)".into(),
        })
    })
}

/// Whether a landed transaction is local payment `p`'s: the one built or handed over for it
/// (what its signers sign), when the payment holds it — payments built before it did are
/// judged by what the transfer moved alone —, and no other one reported before.
fn is_its_transaction(chain: &dyn Chain, p: &NewPayment, landed: &Landed) -> Result<(), PaymentError> {
    match p.tx_raw.as_deref().and_then(|built| chain.signed_identity(built)) {
        Some(built) if built != landed.signed => {
            return Err(not_its_transaction(
                "that transaction is not the one built for this payment (it signs another message)".into(),
            ));
        }
        None if landed.error.is_some() || landed.arrived < p.amount_atomic.get() => {
            return Err(not_its_transaction(
                "that transaction does not pay this payment (payer, recipient or amount differ)".into(),
            ));
        }
        _ => {}
    }
    if p.transaction.as_ref().is_some_and(|known| *known != landed.tx_id) {
        return Err(not_its_transaction("another transaction was reported for this payment".into()));
    }
    Ok(())
}

/// The claim a built transaction is held under (in the proof index): its network and what its
/// signers sign.
fn built_claim(network: &Network, identity: &str) -> String {
    format!("{network}:built:{identity}")
}

/// A transaction reported for a payment that cannot be its transaction: the payment's proof is
/// invalid (`INVALID_PAYMENT_PROOF`), and nothing is recorded.
fn not_its_transaction(why: String) -> PaymentError {
    PaymentError::Refused(Refusal::new(Reason::InvalidPayload, why))
}

/// Two spellings of one transaction id (EVM hashes are hex in either case).
fn same_transaction(a: &str, b: &str) -> bool {
    a == b || (a.starts_with("0x") && a.eq_ignore_ascii_case(b))
}
