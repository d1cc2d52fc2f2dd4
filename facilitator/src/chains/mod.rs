//! The chains this daemon serves, behind one [`Chain`] trait per network.
//!
//! A chain answers questions and signs what it is asked to; it never claims a proof, writes a
//! payment or decides an HTTP status. The payment core ([`crate::payment`]) drives it:
//!
//! | the core asks | the chain answers |
//! |---|---|
//! | [`Chain::decode`] | the payload read once ([`Proof`]): the identity it is claimed under and the chain's typed reading (no chain call) |
//! | [`Chain::check`] | what a decoded proof pays, and how it settles ([`Checked`]), or a [`Refusal`] |
//! | [`Chain::plan_send`] / [`Chain::build`] | a hosted transfer to sign / a local one to hand out |
//! | [`Signable::sign`] | a fresh signed transaction ([`Outgoing`]), holding what must be held until it is sent |
//! | [`Chain::broadcast`], [`Chain::outcome`], [`Chain::status`] | sending it, and what became of it: what it moved ([`Landed`]), never its status alone |
//! | [`Chain::kinds`], [`Chain::token_info`] | what it settles, token facts |
//!
//! [`solana`] and [`evm`] implement it, each split by scheme (`exact_native`, `exact`).
//! [`Chains`] maps networks to their chain, with a default network per address family.

pub mod evm;
pub mod memo;
pub mod refusal;
mod registry;
pub mod solana;
pub mod terms;

use async_trait::async_trait;
use tollgate_protocol::gateway::TokenInfo;
use tollgate_protocol::redact::redact_urls;
use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::{Address, AtomicAmount, Network};

pub use refusal::{BatchReason, ProofError, Reason, Refusal};
pub use registry::{Chains, Unserved, schemes_with};
pub use solana::{SolanaBackend, Sponsor};
pub use terms::{Checked, Intent, Price, Settle, Settler, Terms};

/// A chain node could not be asked (down, slow, or answered nonsense). Shown with every URL in
/// it cut to scheme, host and port: RPC clients quote the endpoint, and providers put their API
/// key in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", redact_urls(.0))]
pub struct ChainError(pub String);

/// How long to wait before asking a node about a transaction again after `attempt` fruitless
/// polls: 2 ms, doubling, up to `cap`. A local ledger usually answers within a few ms and a
/// public chain within seconds; starting small costs a handful of extra calls and saves up to
/// a whole interval of latency on every fast confirmation.
#[must_use]
pub fn poll_delay(attempt: u32, cap: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_millis(2).saturating_mul(1u32 << attempt.min(16)).min(cap)
}

/// Runs one call to a `chain` node with a deadline, mapping every failure to [`ChainError`].
pub(crate) async fn bounded<T, E: std::fmt::Display>(
    chain: &'static str,
    limit: std::time::Duration,
    what: &'static str,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, ChainError> {
    use crate::telemetry::{CallEnd, rpc_call};
    use tracing::Instrument as _;
    let started = std::time::Instant::now();
    // A client span per call, for trace export only: without it, a span per RPC call would
    // cost every request its formatting and nothing would read it.
    let span = if cfg!(feature = "otel") {
        tracing::info_span!("rpc", chain, method = what, "otel.name" = what, "otel.kind" = "client")
    } else {
        tracing::Span::none()
    };
    let answer = tokio::time::timeout(limit, call).instrument(span).await;
    let end = match &answer {
        Ok(Ok(_)) => CallEnd::Answered,
        Ok(Err(_)) => CallEnd::Failed,
        Err(_) => CallEnd::TimedOut,
    };
    rpc_call(chain, what, end, started.elapsed());
    match answer {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ChainError(format!("{chain} RPC {what} failed: {e}"))),
        Err(_) => Err(ChainError(format!("{chain} RPC {what}: no answer within {limit:?}"))),
    }
}

/// Why a signed transaction was not (known to be) accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The node refused it: it was not broadcast (it may still be on chain from another sender).
    #[error("rejected: {}", redact_urls(.0))]
    Rejected(String),
    /// No clear answer: it may or may not have reached the chain.
    #[error("outcome unknown: {}", redact_urls(.0))]
    Uncertain(String),
}

/// What a node says of a transaction's status alone (what moved is not read): for waiting on
/// transactions that are not payments (airdrops, funding). Payments are judged by [`Landed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxOutcome {
    /// Confirmed, with the fee when the chain reports it.
    Confirmed {
        /// Fee in native atomic units.
        fee: Option<AtomicAmount>,
    },
    /// Landed and failed.
    Failed {
        /// Why.
        reason: String,
    },
}

/// A payment's transaction as the chain holds it, read whole: what its signers signed, whether
/// it failed, and what it moved of the payment's asset to the payee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    /// Its id in canonical form.
    pub tx_id: String,
    /// What its signers signed ([`Chain::signed_identity`]).
    pub signed: String,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Base units of the payment's asset that arrived at the payee (EVM: the token's `Transfer`
    /// logs from the payer, or the transaction's own value to the payee; Solana: the payee's
    /// balance before and after, the fee added back when the payee paid it).
    pub arrived: u128,
    /// Fee paid, native base units, when the chain reports it.
    pub fee: Option<AtomicAmount>,
}

/// What a thorough look at the chain ([`Chain::status`]) tells about a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxStatus {
    /// It landed (found in the chain's history, however old, at the depth required).
    Landed(Landed),
    /// Not seen, and it may still land.
    Unseen,
    /// Not seen, and it can no longer land: Solana past its last valid block height, EVM its
    /// sender's nonce taken by another transaction.
    Dropped {
        /// The evidence.
        reason: String,
    },
}

/// Who pays whom, in what: what a payment's transaction is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parties<'a> {
    /// Payer (canonical text).
    pub from: &'a str,
    /// Payee (canonical text).
    pub to: &'a str,
    /// `native` or the token's address.
    pub asset: &'a str,
}

/// A payment's transaction as the payment core keeps it, for [`Chain::outcome`] and
/// [`Chain::status`].
#[derive(Debug, Clone, Copy)]
pub struct Watched<'a> {
    /// Its id.
    pub id: &'a str,
    /// Its bytes, when kept: signed (hosted sends, settlements) or as built or handed over
    /// (local mode); whether it can still land is read from them (EVM: its nonce).
    pub raw: Option<&'a [u8]>,
    /// Solana: the last block height at which it can land.
    pub horizon: Option<u64>,
    /// What it must move.
    pub parties: Parties<'a>,
}

impl<'a> Watched<'a> {
    /// The transaction `tx_id` of payment `p`, with what `p` keeps of it.
    #[must_use]
    pub fn of(p: &'a crate::store::NewPayment, tx_id: &'a str) -> Self {
        Self {
            id: tx_id,
            raw: p.tx_raw.as_deref(),
            horizon: p.last_valid_block_height,
            parties: Parties { from: &p.from, to: &p.to, asset: &p.asset },
        }
    }
}

/// How a broadcast went, for what an [`Outgoing`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// The node took it.
    Accepted,
    /// Unknown whether the node got it (or not broadcast at all).
    Unknown,
}

/// Held from signing until the broadcast's fate is known (an EVM account's nonce). Dropped
/// without [`Hold::release`], it counts as [`Sent::Unknown`].
#[async_trait]
pub trait Hold: Send + Sync {
    /// Releases it, saying how the broadcast went.
    async fn release(self: Box<Self>, sent: Sent);
}

/// A signed transaction ready to go out.
pub struct Outgoing {
    /// Its id (Solana: first signature; EVM: hash).
    pub tx_id: String,
    /// The bytes to broadcast.
    pub raw: Vec<u8>,
    /// Solana: the last block height at which it can land.
    pub horizon: Option<u64>,
    /// What it holds until it is sent (dropped unreleased = not sent).
    pub hold: Option<Box<dyn Hold>>,
}

impl Outgoing {
    /// A transaction that holds nothing.
    #[must_use]
    pub const fn ready(tx_id: String, raw: Vec<u8>, horizon: Option<u64>) -> Self {
        Self { tx_id, raw, horizon, hold: None }
    }

    /// Releases what it holds (dropped unreleased, it counts as [`Sent::Unknown`]).
    pub async fn release(&mut self, sent: Sent) {
        if let Some(hold) = self.hold.take() {
            hold.release(sent).await;
        }
    }
}

/// Something the facilitator signs when its turn comes; each call signs anew (Solana: with a
/// unique compute-unit limit; EVM: with the account's next nonce, held in the [`Outgoing`]).
#[async_trait]
pub trait Signable: Send + Sync {
    /// A fresh signed transaction.
    ///
    /// # Errors
    /// [`ChainError`] when what signing needs (a nonce, fees) cannot be read, or costs more than
    /// this facilitator pays.
    async fn sign(&self) -> Result<Outgoing, ChainError>;
}

/// A transfer of the chain's native currency to make (hosted) or build (local).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// Payer.
    pub from: Address,
    /// Recipient.
    pub to: Address,
    /// Base units.
    pub amount: AtomicAmount,
    /// Priority fee on top of the base fee, native base units.
    pub priority_fee: Option<AtomicAmount>,
}

/// Why an order cannot be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    /// A field is not valid for this chain.
    #[error("{0}")]
    Invalid(String),
    /// The recipient cannot receive it.
    #[error("{0}")]
    InvalidRecipient(String),
    /// Not enough funds for amount plus fees.
    #[error("{0}")]
    InsufficientBalance(String),
    /// The chain could not be asked.
    #[error(transparent)]
    Chain(#[from] ChainError),
}

/// A hosted transfer, planned: its fee, and the transaction to sign with the payer's key.
pub struct PlannedSend {
    /// Fee (Solana: exact; EVM: the most it can cost), native base units.
    pub fee: AtomicAmount,
    /// The transaction.
    pub tx: Box<dyn Signable>,
}

/// An unsigned transaction for local mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsigned {
    /// The chain's bytes (Solana: the message as a transaction; EVM: the EIP-1559 signing payload).
    pub transaction: Vec<u8>,
    /// Solana: last valid block height; EVM: a block-number horizon treated as expiry.
    pub horizon: u64,
    /// Fee (Solana: exact; EVM: the most it can cost), native base units.
    pub fee: AtomicAmount,
}

/// A payment payload read once by its chain ([`Chain::decode`]): the identity a payment claims
/// it under, and the chain's own typed reading of it (the decoded transaction or authorization,
/// or why it cannot be read), which [`Chain::check`] takes. Nothing decodes the payload again.
pub struct Proof {
    id: Option<String>,
    reading: Box<dyn std::any::Any + Send + Sync>,
}

impl Proof {
    /// A proof claimed under `id` (`None`: it cannot be read, and the check says why), read by
    /// its chain as `reading`.
    #[must_use]
    pub fn new<T: std::any::Any + Send + Sync>(id: Option<String>, reading: T) -> Self {
        Self { id, reading: Box::new(reading) }
    }

    /// The identity a payment claims it under; `None` when the payload cannot be read.
    #[must_use]
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The chain's reading, as the chain that decoded it wrote it.
    ///
    /// # Errors
    /// [`ProofError::Chain`] when another chain decoded it (a bug: the core checks a proof on the
    /// chain that read it).
    pub fn reading<T: std::any::Any>(&self) -> Result<&T, ProofError> {
        self.reading
            .downcast_ref()
            .ok_or_else(|| ProofError::Chain(ChainError("the proof was decoded by another chain".into())))
    }
}

impl std::fmt::Debug for Proof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proof").field("id", &self.id).finish_non_exhaustive()
    }
}

/// How many payload transactions this thread decoded (base64 or hex, then bincode or RLP): the
/// tests keep every request at one.
#[cfg(test)]
pub(crate) mod decodes {
    use std::cell::Cell;

    thread_local! {
        static COUNT: Cell<usize> = const { Cell::new(0) };
    }

    /// One more decode.
    pub(crate) fn count() {
        COUNT.with(|c| c.set(c.get() + 1));
    }

    /// The decodes so far on this thread.
    pub(crate) fn so_far() -> usize {
        COUNT.with(Cell::get)
    }
}

/// What a chain settles, for `GET /supported`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kinds {
    /// Schemes with their `extra`.
    pub schemes: Vec<(&'static str, Option<serde_json::Value>)>,
    /// The facilitator's signing address here (fee payer / settling account), when it has one.
    pub signer: Option<String>,
    /// x402 extensions it honours (`eip2612GasSponsoring`).
    pub extensions: Vec<&'static str>,
}

/// One network this daemon serves.
#[async_trait]
pub trait Chain: Send + Sync + std::fmt::Debug {
    /// Its CAIP-2 id.
    fn network(&self) -> &Network;
    /// What it settles.
    fn kinds(&self) -> Kinds;
    /// Reads `payload`, paying `asset`, once and without the chain: the identity it is claimed
    /// under and the typed reading [`Self::check`] takes. A payload that cannot be read is a
    /// proof without identity, refused by the check in its turn (so every refusal comes in the
    /// same order whatever is wrong).
    fn decode(&self, payload: &PaymentPayload, asset: &tollgate_protocol::x402::Asset) -> Proof;
    /// Checks a proof this chain decoded against `terms` and the chain, for `settler` to
    /// settle, for a verdict only or to settle now (`intent`); `now` is Unix seconds.
    ///
    /// # Errors
    /// [`ProofError::Refused`] for a proof that does not pay as asked, [`ProofError::Chain`] when
    /// the chain cannot be read.
    async fn check(
        &self,
        proof: &Proof,
        terms: &Terms,
        settler: Settler,
        intent: Intent,
        now: i64,
    ) -> Result<Checked, ProofError>;
    /// Plans a hosted transfer from a custodial wallet whose secret key is `key`.
    ///
    /// # Errors
    /// [`OrderError`].
    async fn plan_send(&self, order: &Order, key: &[u8]) -> Result<PlannedSend, OrderError>;
    /// Builds an unsigned transfer for the payer to sign (local mode). Two builds of one order
    /// are two transactions ([`Self::signed_identity`] differs), so each payment has its own.
    ///
    /// # Errors
    /// [`OrderError`].
    async fn build(&self, order: &Order) -> Result<Unsigned, OrderError>;
    /// What the signers of `transaction` (the chain's bytes, unsigned, partly or fully signed)
    /// sign, as text: Solana the message, EVM the signing hash. A transaction that lands is the
    /// one built when this is the same. `None` for bytes that are no transaction of this chain.
    fn signed_identity(&self, transaction: &[u8]) -> Option<String>;
    /// An `exact-native` receipt for a confirmed transfer, signed by `key` (the sender's), as an
    /// `X-PAYMENT` value.
    ///
    /// # Errors
    /// When the key is not one of this chain's, or signing fails.
    fn sign_receipt(
        &self,
        key: &[u8],
        tx_id: &str,
        pay_to: &Address,
        resource: Option<&str>,
    ) -> Result<String, ChainError>;
    /// Broadcasts a signed transaction.
    ///
    /// # Errors
    /// [`SendError`].
    async fn broadcast(&self, raw: &[u8]) -> Result<(), SendError>;
    /// A quick look (recent history only) for a transaction's verdict, read whole ([`Landed`]:
    /// what it moved, not its status alone): `None` while none is seen at the depth required.
    ///
    /// # Errors
    /// [`ChainError`].
    async fn outcome(&self, tx: &Watched<'_>) -> Result<Option<Landed>, ChainError>;
    /// A thorough look: the whole history, and whether it can still land.
    ///
    /// # Errors
    /// [`ChainError`].
    async fn status(&self, tx: &Watched<'_>) -> Result<TxStatus, ChainError>;
    /// The canonical form of a transaction id of this chain, `None` when it is none.
    fn transaction_id(&self, tx: &str) -> Option<String>;
    /// A token's facts, `None` when `address` is no token here.
    ///
    /// # Errors
    /// [`ChainError`].
    async fn token_info(&self, address: &Address) -> Result<Option<TokenInfo>, ChainError>;
    /// Who signed `message` as `address` with `signature` (a `sign-in-with-x` message: EIP-191
    /// on EVM, ed25519 on Solana): the address's own key, or on EVM its wallet contract
    /// (EIP-1271, asked on this chain).
    ///
    /// # Errors
    /// [`ProofError::Refused`] when neither did (or the signature cannot be read),
    /// [`ProofError::Chain`] when the chain cannot be read.
    async fn verify_message(&self, address: &Address, message: &str, signature: &str) -> Result<Signer, ProofError>;
}

/// Who signed a message ([`Chain::verify_message`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    /// The address's own key.
    Key,
    /// The wallet contract at the address (EIP-1271), on the chain that answered.
    Contract,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_start_fast_and_back_off_to_the_cap() {
        let cap = std::time::Duration::from_millis(100);
        let delays: Vec<u64> =
            (0..9).map(|a| u64::try_from(poll_delay(a, cap).as_millis()).unwrap_or(u64::MAX)).collect();
        assert_eq!(delays, [2, 4, 8, 16, 32, 64, 100, 100, 100]);
        assert_eq!(poll_delay(u32::MAX, cap), cap);
    }
}
