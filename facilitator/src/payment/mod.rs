//! The payment core: the one place that claims proofs, records payments and settles them.
//!
//! [`Payments`] has one method per job; each runs the same steps in the same order, whatever the
//! chain, mode or x402 version:
//!
//! 1. **admit the payload** against the terms without the chain (network, scheme, for v2 the
//!    requirement it accepted) — [`Terms::admit_payload`];
//! 2. **look for a claim**: a proof held by a payment is refused as used (or, for its owner with
//!    the same terms, answered with that payment and resumed if it was left unfinished);
//! 3. **check it on chain** ([`Chain::check`]) and **admit what it pays** — recipient, asset,
//!    amount — against the terms ([`Terms::admit`]) before anything is signed or broadcast;
//! 4. **claim and record in one write**: the payment row carries the proof's identity and the
//!    transaction's id and bytes, under unique indexes, so a claim never exists without its
//!    payment and a transaction is never two payments' own transfer;
//! 5. **submit, broadcast, watch** ([`pipeline`]): `verified → submitted` before broadcasting,
//!    then the chain's verdict within the wait budget, or `pending` for the reconciler.
//!
//! Every job runs detached from the caller's future ([`detached`]): a request that is dropped
//! (client hang-up, a timeout layer) cannot cut a payment between two steps; the caller awaits
//! the result when it is still there.
//!
//! The core returns domain values and [`PaymentError`]; the HTTP API makes statuses of them.

mod contract;
mod pipeline;
mod receive;
mod send;
mod sign_in;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use tollgate_protocol::gateway::{Direction, PaymentMode, PaymentStatus};
use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::{Address, AtomicAmount, Network};

pub use self::contract::{ContractPayment, Prepared};
pub use self::receive::{Handed, Settlement};
pub use self::send::{Built, SendOrder, Sent};
pub use self::sign_in::{SignInRequest, SignedIn};
use crate::chains::{Chain, ChainError, Chains, Checked, OrderError, ProofError, Refusal, Terms, Unserved};
use crate::clock::SharedClock;
use crate::plans::Sponsorship;
use crate::store::{NewPayment, Store, StoreError, StoredPayment};
use crate::wallets::MasterKey;

/// Why a payment job did not produce a payment.
#[derive(Debug, thiserror::Error)]
pub enum PaymentError {
    /// A field is not valid for the chain it names.
    #[error("{0}")]
    Invalid(String),
    /// The recipient cannot receive this payment.
    #[error("{0}")]
    InvalidRecipient(String),
    /// The proof does not pay as asked.
    #[error(transparent)]
    Refused(Refusal),
    /// The proof is held by another payment (or by one of the caller's with other terms).
    #[error("proof already used (payment {payment_id})")]
    ProofUsed {
        /// The payment holding it.
        payment_id: String,
        /// That payment, when the caller may see it.
        holder: Option<Box<StoredPayment>>,
    },
    /// The payer cannot pay amount plus fees.
    #[error("{0}")]
    InsufficientBalance(String),
    /// The wallet is not the caller's custodial wallet.
    #[error("{0}")]
    Forbidden(String),
    /// No such payment for the caller.
    #[error("{0}")]
    NotFound(String),
    /// No chain of this daemon serves the network.
    #[error(transparent)]
    Unserved(Unserved),
    /// The chain could not be asked, or custodial wallets are off: no verdict either way.
    #[error("{0}")]
    Unavailable(String),
    /// The plan's daily budget of network fees the facilitator pays for the account is spent.
    #[error("{message}")]
    SponsorshipSpent {
        /// What is spent and when it renews.
        message: String,
        /// Seconds until the budget renews (00:00 UTC).
        renews_in_secs: u64,
    },
    /// The payment has served what it buys: every answer, its window after the first, or the
    /// request it was made for (a repeat must be the same request).
    #[error("{message}")]
    AnswersUsed {
        /// The payment.
        payment_id: String,
        /// Why, for the buyer.
        message: String,
    },
    /// Storage failed or a bug: logged, never shown.
    #[error("{0}")]
    Internal(String),
}

impl PaymentError {
    /// This error as x402 says a proof is refused: its own refusal, a used proof
    /// (`duplicate_settlement`, with the payment holding it when the caller may see it), a network
    /// no chain serves (`invalid_network`). `Err(self)` when it is no verdict on the proof (the
    /// chain could not be asked, storage failed, a bad request): x402 answers those as errors.
    ///
    /// # Errors
    /// `self`, when it is no refusal of the proof.
    pub fn into_x402_refusal(self) -> Result<(Refusal, Option<Box<StoredPayment>>), Self> {
        match self {
            Self::Refused(r) => Ok((r, None)),
            Self::ProofUsed { payment_id, holder } => Ok((
                Refusal::new(crate::chains::Reason::AlreadyUsed, format!("proof already used (payment {payment_id})")),
                holder,
            )),
            Self::AnswersUsed { message, .. } => Ok((Refusal::new(crate::chains::Reason::AnswersUsed, message), None)),
            Self::Unserved(u @ Unserved::Unavailable(_)) => Ok((
                Refusal::new(crate::chains::Reason::InvalidNetwork, format!("this facilitator does not settle: {u}")),
                None,
            )),
            other => Err(other),
        }
    }
}

impl From<StoreError> for PaymentError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::ProofUsed { payment_id } => Self::ProofUsed { payment_id, holder: None },
            // The transfer a proof names is already another payment's: the proof is used.
            StoreError::TransactionUsed { payment_id } => Self::ProofUsed { payment_id, holder: None },
            other => Self::Internal(other.to_string()),
        }
    }
}

impl From<ChainError> for PaymentError {
    fn from(e: ChainError) -> Self {
        Self::Unavailable(e.to_string())
    }
}

impl From<ProofError> for PaymentError {
    fn from(e: ProofError) -> Self {
        match e {
            ProofError::Refused(r) => Self::Refused(r),
            ProofError::Chain(c) => c.into(),
        }
    }
}

impl From<Refusal> for PaymentError {
    fn from(r: Refusal) -> Self {
        Self::Refused(r)
    }
}

impl From<OrderError> for PaymentError {
    fn from(e: OrderError) -> Self {
        match e {
            OrderError::Invalid(m) => Self::Invalid(m),
            OrderError::InvalidRecipient(m) => Self::InvalidRecipient(m),
            OrderError::InsufficientBalance(m) => Self::InsufficientBalance(m),
            OrderError::Chain(c) => c.into(),
        }
    }
}

impl From<Unserved> for PaymentError {
    fn from(e: Unserved) -> Self {
        Self::Unserved(e)
    }
}

/// Runs a job on its own task, so that dropping the caller's future cannot stop it halfway; the
/// caller gets its result when it still waits for it.
async fn detached<T: Send + 'static>(
    job: impl Future<Output = Result<T, PaymentError>> + Send + 'static,
) -> Result<T, PaymentError> {
    tokio::spawn(job).await.unwrap_or_else(|e| Err(PaymentError::Internal(format!("payment task ended: {e}"))))
}

/// How much longer than a job's own wait the reconciler leaves a payment alone: the job watches
/// it meanwhile.
const RECONCILE_AFTER_WAIT: Duration = Duration::from_secs(5);

/// An incoming payment to check and settle: a proof, and the terms it must meet.
#[derive(Debug, Clone)]
pub struct Receive {
    /// The receiving account (the API key's).
    pub account: String,
    /// The buyer's proof.
    pub payload: PaymentPayload,
    /// What must be paid.
    pub terms: Terms,
    /// How long to wait for the chain's verdict before answering `pending`.
    pub wait: Duration,
    /// What the same account presenting the same proof for the same terms again is answered
    /// once the payment is confirmed.
    pub repeat: Repeat,
    /// The account's plan's daily budget of network fees the facilitator pays for it.
    pub sponsorship: Sponsorship,
}

/// Longest an x402 settlement waits for confirmation before answering that it is pending.
pub const MAX_X402_WAIT: Duration = Duration::from_secs(60);

impl Receive {
    /// An x402 request (over HTTP, or from a seller's layer in process) as the core's job: the
    /// requirement whole as the terms, the resource and method the seller names as what the
    /// payment is bound to, the requirement's timeout (at most [`MAX_X402_WAIT`]) as the wait.
    #[must_use]
    pub fn x402(
        account: String,
        payload: PaymentPayload,
        requirement: tollgate_protocol::x402::PaymentRequirements,
        (resource, method): (Option<String>, Option<String>),
        repeat: Repeat,
        sponsorship: Sponsorship,
    ) -> Self {
        let wait = Duration::from_secs(requirement.max_timeout_seconds.clamp(1, MAX_X402_WAIT.as_secs()));
        let terms = Terms {
            network: requirement.network.clone(),
            pay_to: requirement.pay_to,
            asset: requirement.asset,
            price: crate::chains::Price::of_requirement(&requirement.scheme, requirement.amount),
            resource: resource.filter(|u| !u.is_empty()),
            method,
            extra: requirement.extra.clone(),
            requirement: Some(requirement),
            fee_cap: None,
        };
        Self { account, payload, terms, wait, repeat, sponsorship }
    }
}

/// The answer to a proof presented again by the account that claimed it, for the same terms,
/// once its payment is confirmed. (An unfinished payment is always pushed on and answered; any
/// other caller, and other terms, always get [`PaymentError::ProofUsed`].)
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repeat {
    /// The seller counts what the payment buys (Tollgate's layer sends its ticket): the payment
    /// claims its first answer when it is recorded (given back when it does not end confirmed in
    /// this job), and each repeat claims one more in the database, or is refused with
    /// [`PaymentError::AnswersUsed`].
    Counted(tollgate_protocol::ticket::Ticket),
    /// [`PaymentError::ProofUsed`]: one verdict per proof. The gateway's one-call receive: a
    /// seller that serves on every success would otherwise serve a replayed proof again.
    Used,
    /// The confirmed payment again, for [`REPEAT_WINDOW`] after its confirmation: x402
    /// `/settle` is idempotent, so a seller following a settlement it saw pending learns how it
    /// ended. Safe because x402 sellers `/verify` a proof they do not remember before they settle
    /// it, and `/verify` refuses a used proof; and the seller names the resource (the same one,
    /// or the proof is used).
    Confirmed,
}

/// How long after its confirmation a settlement is answered again to the account that made it
/// ([`Repeat::Confirmed`]): a paid request is a ticket for a while (the seller layer's default
/// ticket lifetime), not forever.
pub const REPEAT_WINDOW: chrono::Duration = chrono::Duration::minutes(10);

/// The payment service. Cheap to clone.
#[derive(Clone)]
pub struct Payments {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    clock: SharedClock,
    chains: Arc<Chains>,
    master_key: Option<Arc<MasterKey>>,
}

impl std::fmt::Debug for Payments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Payments").field("chains", &self.inner.chains.served()).finish_non_exhaustive()
    }
}

impl Payments {
    /// A service over `store` and `chains`, with custodial wallets sealed under `master_key`.
    #[must_use]
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        chains: Arc<Chains>,
        master_key: Option<Arc<MasterKey>>,
    ) -> Self {
        Self { inner: Arc::new(Inner { store, clock, chains, master_key }) }
    }

    fn store(&self) -> &dyn Store {
        &*self.inner.store
    }

    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.inner.clock.now()
    }

    fn chain(&self, network: &Network) -> Result<Arc<dyn Chain>, PaymentError> {
        Ok(self.inner.chains.get(network)?)
    }

    /// The secret key of one of `account`'s custodial wallets.
    async fn custodial_key(&self, account: &str, wallet: &Address) -> Result<Vec<u8>, PaymentError> {
        let stored = self.store().get_wallet(&wallet.to_string()).await?;
        let stored = stored
            .filter(|w| w.account_id == account && w.family == wallet.family())
            .ok_or_else(|| PaymentError::Forbidden("walletAddress is not a custodial wallet of this account".into()))?;
        let master = self.inner.master_key.as_ref().ok_or_else(|| {
            PaymentError::Unavailable("custodial wallets are disabled: no master key is configured".into())
        })?;
        master.open(&stored.address, &stored.sealed_secret).map_err(|e| PaymentError::Internal(e.to_string()))
    }

    /// The account of a custodial wallet, when `address` is one.
    async fn account_of(&self, address: &str) -> Result<Option<String>, PaymentError> {
        Ok(self.store().wallet_account(address).await?)
    }

    /// The payment `account` receives for a checked proof, `payload`, claimed under `proof_id`
    /// (status `verified`, hosted). Its metadata keeps the method it was made for and the
    /// proof's digest (see [`same_proof`]).
    async fn received(
        &self,
        account: &str,
        terms: &Terms,
        checked: &Checked,
        (proof_id, payload, repeat): (String, &PaymentPayload, &Repeat),
    ) -> Result<NewPayment, PaymentError> {
        let payer = checked.payer.to_string();
        let mut metadata = serde_json::Map::new();
        if let Some(method) = &terms.method {
            metadata.insert("method".to_owned(), serde_json::Value::String(method.clone()));
        }
        metadata.insert(PROOF_DIGEST.to_owned(), serde_json::Value::String(proof_digest(payload)));
        Ok(NewPayment {
            id: new_id(),
            owner_account: account.to_owned(),
            owner_side: Direction::Received,
            counterparty_account: self.account_of(&payer).await?,
            status: PaymentStatus::Verified,
            mode: PaymentMode::Hosted,
            network: terms.network.clone(),
            from: payer,
            to: checked.pay_to.to_string(),
            amount_atomic: AtomicAmount(checked.amount),
            asset: checked.asset.to_string(),
            decimals: checked.decimals,
            fee_atomic: checked.fee.map(AtomicAmount),
            transaction: None,
            tx_raw: None,
            resource: terms.resource.clone(),
            metadata: Some(metadata),
            proof_id: Some(proof_id),
            expires_at: None,
            last_valid_block_height: None,
            next_check_at: None,
            created_at: self.now(),
            ticket: match repeat {
                Repeat::Counted(ticket) => Some(ticket.clone()),
                Repeat::Used | Repeat::Confirmed => None,
            },
        })
    }
}

/// A new payment id.
fn new_id() -> String {
    format!("pay_{}", ulid::Ulid::new())
}

/// Whether a stored payment pays what `terms` ask: same network, recipient and asset, enough of
/// it, and the same resource and method — none only for none: a request that names no resource
/// is never answered with a payment made for one, nor a DELETE with a GET's. A proof answered again for its owner must meet the new
/// terms too, or a cheap proof would buy a dear request.
fn covers(p: &NewPayment, terms: &Terms) -> bool {
    p.network == terms.network
        && p.to == terms.pay_to.to_string()
        && p.asset == terms.asset.to_string()
        && terms.price.check(p.amount_atomic.get(), p.decimals, crate::chains::Reason::InvalidPayload).is_ok()
        && p.resource == terms.resource
        && method_of(p) == terms.method.as_deref()
}

/// The metadata key of a received payment's proof digest.
const PROOF_DIGEST: &str = "proofDigest";

/// SHA-256 (hex) of what a payload proves with: its scheme payload, as it was sent.
fn proof_digest(payload: &PaymentPayload) -> String {
    use sha2::Digest as _;
    let bytes = serde_json::to_vec(payload.payload()).unwrap_or_default();
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `payload` is the very proof `p` was made with (payments recorded before digests were
/// kept: whichever proof holds their identity).
fn same_proof(p: &NewPayment, payload: &PaymentPayload) -> bool {
    p.metadata
        .as_ref()
        .and_then(|m| m.get(PROOF_DIGEST))
        .and_then(serde_json::Value::as_str)
        .is_none_or(|digest| digest == proof_digest(payload))
}

/// The HTTP method a received payment was made for, when its seller named one.
fn method_of(p: &NewPayment) -> Option<&str> {
    p.metadata.as_ref()?.get("method")?.as_str()
}
