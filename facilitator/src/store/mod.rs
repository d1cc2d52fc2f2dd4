//! Storage: traits split by concern, one SQL implementation for two engines.
//!
//! * [`AccountStore`]: accounts, API keys (hashed), custodial wallets (sealed).
//! * [`PaymentStore`]: payments with their per-wallet history index and the reconciler's schedule.
//! * [`AnswerStore`]: the answers each payment has served (what one payment buys).
//! * [`IdempotencyStore`]: answers remembered per `Idempotency-Key`.
//! * [`WebhookStore`]: webhook endpoints and the outbox of their deliveries.
//!
//! [`Store`] is all of them. [`SqlStore`] implements them once over sqlx's `Any` driver for SQLite
//! (the embedded default: a file in WAL mode) and PostgreSQL (several instances sharing one
//! database). Each engine has its own migrations folder because their DDL differs; the queries are
//! shared.
//!
//! Invariants the database enforces (not only the code):
//! * a proof is claimed by inserting the payment that settles it: `payments.proof_id` is unique,
//!   so a claim and its payment are one row, written at once, never one without the other;
//! * a transaction is the own transfer of at most one payment per account and side (unique
//!   `(owner_account, network, tx_id, owner_side)`);
//! * a payment's status only changes through a compare-and-set on its current status
//!   ([`PaymentStore::transition_payment`]), so two writers cannot both move it;
//! * history pages are newest first and stable: each entry has a unique insertion sequence;
//! * a payment change and its webhook deliveries are written in one transaction: neither is
//!   recorded without the other, and an (endpoint, event) pair is queued once.

mod sql;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use tollgate_protocol::gateway::{Direction, PaymentMode, PaymentRecord, PaymentStatus};
use tollgate_protocol::ticket::{Answered, Ticket};
use tollgate_protocol::{AtomicAmount, ChainFamily, DecimalAmount, Network};

pub use sql::SqlStore;

use crate::plans::Plan;

/// Storage failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The row does not exist.
    #[error("not found")]
    NotFound,
    /// A compare-and-set lost: the row is no longer in the expected state.
    #[error("conflict: current status is {current:?}")]
    Conflict {
        /// The status found instead.
        current: PaymentStatus,
    },
    /// The proof is claimed already, by this payment.
    #[error("proof already used (payment {payment_id})")]
    ProofUsed {
        /// The payment that holds it.
        payment_id: String,
    },
    /// The transaction is already another payment's own transfer (on the same side, of any
    /// account).
    #[error("the transaction is already recorded by payment {payment_id}")]
    TransactionUsed {
        /// That payment.
        payment_id: String,
    },
    /// The database failed or holds a value this version cannot read.
    #[error("database error: {0}")]
    Database(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        Self::Database(e.to_string())
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        Self::Database(e.to_string())
    }
}

/// Result of storage operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// An API key as stored: never the key itself, only its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredApiKey {
    /// `key_<ulid>`, shown in listings.
    pub id: String,
    /// Owning account.
    pub account_id: String,
    /// `live` or `test`.
    pub env: String,
    /// Indexed prefix of the hash, to find the row.
    pub lookup: String,
    /// Hex SHA-256 of the whole key, compared in constant time.
    pub hash: String,
    /// Last four characters of the key, to tell keys apart in listings.
    pub hint: String,
    /// Plan.
    pub plan: Plan,
    /// Own requests-per-minute limit (enterprise keys), overriding the plan's.
    pub rpm: Option<u32>,
    /// Free text.
    pub label: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last authenticated use (updated at most once per key-cache period).
    pub last_used_at: Option<DateTime<Utc>>,
}

/// A custodial wallet: its secret key only in sealed form.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredWallet {
    /// Canonical address.
    pub address: String,
    /// Owning account.
    pub account_id: String,
    /// Chain family.
    pub family: ChainFamily,
    /// Secret key sealed under the master key (see [`crate::wallets`]).
    pub sealed_secret: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

impl std::fmt::Debug for StoredWallet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredWallet")
            .field("address", &self.address)
            .field("account_id", &self.account_id)
            .field("family", &self.family)
            .finish_non_exhaustive()
    }
}

/// A payment to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPayment {
    /// `pay_<ulid>`.
    pub id: String,
    /// Account that created it (payer for sends, receiver for receives).
    pub owner_account: String,
    /// Which side of the payment the owner is on (`sent`: payer, `received`: payee).
    pub owner_side: Direction,
    /// The other party's account, when it is also ours (custodial recipient, say).
    pub counterparty_account: Option<String>,
    /// Initial status (`built` or `verified`).
    pub status: PaymentStatus,
    /// Hosted or local.
    pub mode: PaymentMode,
    /// Chain.
    pub network: Network,
    /// Payer address (canonical form).
    pub from: String,
    /// Recipient address (canonical form).
    pub to: String,
    /// Atomic amount.
    pub amount_atomic: AtomicAmount,
    /// `native` or token address.
    pub asset: String,
    /// Decimals of the asset, to render whole units.
    pub decimals: u8,
    /// Fee in native atomic units, when known.
    pub fee_atomic: Option<AtomicAmount>,
    /// Transaction id, when known (written with the row: ahead of any broadcast).
    pub transaction: Option<String>,
    /// The signed transaction (or, in local mode, what was handed out), in the chain's bytes.
    pub tx_raw: Option<Vec<u8>>,
    /// Resource paid for.
    pub resource: Option<String>,
    /// Caller metadata.
    pub metadata: Option<Map<String, Value>>,
    /// Identity of the proof this payment settles: inserting the payment claims it.
    pub proof_id: Option<String>,
    /// Local mode: when the unsigned transaction expires.
    pub expires_at: Option<DateTime<Utc>>,
    /// Last block height (Solana) or number (EVM local mode) at which the transaction can land.
    pub last_valid_block_height: Option<u64>,
    /// When the reconciler should first look at it, if it is not finished by then.
    pub next_check_at: Option<DateTime<Utc>>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// What a received payment buys, when its seller said: inserting the payment claims its
    /// first answer with it (`answers`, in the same transaction). Written there, never read back
    /// with the payment: [`AnswerStore::claim_answer`] reads and counts the ticket.
    pub ticket: Option<Ticket>,
}

impl NewPayment {
    /// A `verified` hosted payment of `amount` in `network`'s native currency from `from` to `to`,
    /// owned by its payer `owner`, created `at`, with nothing else known yet. Other payments start
    /// from it and set what they know with struct update syntax.
    #[must_use]
    pub fn native(
        id: impl Into<String>,
        owner: impl Into<String>,
        network: Network,
        (from, to): (String, String),
        amount: AtomicAmount,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            id: id.into(),
            owner_account: owner.into(),
            owner_side: Direction::Sent,
            counterparty_account: None,
            status: PaymentStatus::Verified,
            mode: PaymentMode::Hosted,
            decimals: network.family().native_decimals(),
            network,
            from,
            to,
            amount_atomic: amount,
            asset: "native".into(),
            fee_atomic: None,
            transaction: None,
            tx_raw: None,
            resource: None,
            metadata: None,
            proof_id: None,
            expires_at: None,
            last_valid_block_height: None,
            next_check_at: None,
            created_at: at,
            ticket: None,
        }
    }
}

/// A payment as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPayment {
    /// Everything given at insert time (with `status` the current one).
    pub payment: NewPayment,
    /// Insertion sequence (newest is largest).
    pub seq: i64,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// When it was confirmed.
    pub confirmed_at: Option<DateTime<Utc>>,
    /// Why it failed or expired.
    pub error: Option<String>,
    /// How many times the reconciler found no verdict yet.
    pub checks: u32,
    /// The answers the payment has served, when this read claimed one (a receive with a ticket):
    /// never read with the payment itself.
    pub answers: Option<Answered>,
}

impl StoredPayment {
    /// Whether `account` may see this payment.
    #[must_use]
    pub fn visible_to(&self, account: &str) -> bool {
        self.payment.owner_account == account || self.payment.counterparty_account.as_deref() == Some(account)
    }

    /// The API's view of it.
    #[must_use]
    pub fn to_record(&self) -> PaymentRecord {
        let p = &self.payment;
        let native_decimals = p.network.family().native_decimals();
        PaymentRecord {
            payment_id: p.id.clone(),
            status: p.status,
            mode: p.mode,
            network: p.network.clone(),
            from: p.from.clone(),
            to: p.to.clone(),
            amount: DecimalAmount::from_atomic(p.amount_atomic, p.decimals),
            amount_atomic: p.amount_atomic,
            asset: p.asset.clone(),
            fee: p.fee_atomic.map(|f| DecimalAmount::from_atomic(f, native_decimals)),
            transaction: p.transaction.clone(),
            resource: p.resource.clone(),
            metadata: p.metadata.clone(),
            created_at: p.created_at,
            updated_at: self.updated_at,
            confirmed_at: self.confirmed_at,
            error: self.error.clone(),
            direction: None,
            payment_proof: None,
            payer: None,
            answers: self.answers,
        }
    }
}

/// A status change with the facts learned along with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentUpdate {
    /// New status.
    pub status: PaymentStatus,
    /// Transaction id (local mode: the one reported; hosted mode writes it with the row).
    pub transaction: Option<String>,
    /// Fee paid.
    pub fee_atomic: Option<AtomicAmount>,
    /// What arrived, read from the chain (the payment's amount from then on).
    pub amount_atomic: Option<AtomicAmount>,
    /// The other side's account, learning of the payment now (a payment that has none yet: a
    /// local build, revealed to its payee's account once confirmed).
    pub counterparty_account: Option<String>,
    /// Failure reason.
    pub error: Option<String>,
    /// The payment never reached the chain: its proof may be used again.
    pub release_proof: bool,
    /// When it happened.
    pub at: DateTime<Utc>,
}

impl PaymentUpdate {
    /// A move to `status` at `at` with nothing else learned.
    #[must_use]
    pub const fn to(status: PaymentStatus, at: DateTime<Utc>) -> Self {
        Self {
            status,
            transaction: None,
            fee_atomic: None,
            amount_atomic: None,
            counterparty_account: None,
            error: None,
            release_proof: false,
            at,
        }
    }
}

/// One history page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryPage {
    /// Entries matching the filter in all pages.
    pub total: u64,
    /// This page, newest first, with the wallet's side of each.
    pub entries: Vec<(StoredPayment, Direction)>,
}

/// A response remembered for an `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status.
    pub status: u16,
    /// JSON body.
    pub body: String,
}

/// What an `Idempotency-Key` lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencyBegin {
    /// First use: the request is now claimed; finish with `complete` or `abandon`.
    Started,
    /// Same key, same body, finished: answer with this.
    Replay(StoredResponse),
    /// Same key, different body.
    Mismatch,
    /// Same key, same body, still being processed, since `started`.
    InProgress {
        /// When the first request began.
        started: DateTime<Utc>,
    },
}

/// Accounts, API keys and custodial wallets.
#[async_trait]
pub trait AccountStore: Send + Sync + 'static {
    /// Creates an account.
    async fn create_account(&self, id: &str, at: DateTime<Utc>) -> StoreResult<()>;
    /// Whether an account exists.
    async fn account_exists(&self, id: &str) -> StoreResult<bool>;
    /// Stores a new key (its account must exist).
    async fn insert_api_key(&self, key: &StoredApiKey) -> StoreResult<()>;
    /// The key whose hash starts with `lookup`, if any.
    async fn find_api_key(&self, lookup: &str) -> StoreResult<Option<StoredApiKey>>;
    /// Every key, oldest first.
    async fn list_api_keys(&self) -> StoreResult<Vec<StoredApiKey>>;
    /// Deletes a key; false when there was none.
    async fn delete_api_key(&self, id: &str) -> StoreResult<bool>;
    /// Records a use of a key.
    async fn touch_api_key(&self, id: &str, at: DateTime<Utc>) -> StoreResult<()>;
    /// Stores a custodial wallet (its account must exist).
    async fn insert_wallet(&self, wallet: &StoredWallet) -> StoreResult<()>;
    /// A custodial wallet by canonical address.
    async fn get_wallet(&self, address: &str) -> StoreResult<Option<StoredWallet>>;
    /// The account whose custodial wallet `address` (canonical) is, if any: [`Self::get_wallet`]'s
    /// account, the question every settlement asks of its payer.
    async fn wallet_account(&self, address: &str) -> StoreResult<Option<String>> {
        Ok(self.get_wallet(address).await?.map(|w| w.account_id))
    }
    /// How many custodial wallets are stored (sealed under the master key).
    async fn count_wallets(&self) -> StoreResult<u64>;
    /// The oldest custodial wallet, if any (to check the master key opens what is sealed).
    async fn first_wallet(&self) -> StoreResult<Option<StoredWallet>>;
    /// Adds `amount` to what the facilitator paid in fees for `account` on chain `family` on
    /// `day` (days since the Unix epoch), only if the sum stays within `budget`: in one statement,
    /// so racing settlements never spend past it together. The sum after, or `None` when it
    /// would pass the budget (nothing added).
    async fn reserve_sponsorship(
        &self,
        account: &str,
        family: ChainFamily,
        day: i64,
        amount: u64,
        budget: u64,
    ) -> StoreResult<Option<u64>>;
    /// Gives back `amount` reserved for a settlement that sent nothing (another request claimed
    /// its proof first): never below nothing.
    async fn release_sponsorship(&self, account: &str, family: ChainFamily, day: i64, amount: u64) -> StoreResult<()>;
    /// The epoch dashboard sessions are signed with now.
    async fn dashboard_epoch(&self) -> StoreResult<i64>;
    /// Ends every dashboard session: raises the epoch; the new one.
    async fn end_dashboard_sessions(&self) -> StoreResult<i64>;
    /// What the facilitator paid in fees for `account` on chain `family` on `day`, and the
    /// dearest single settlement counted in it.
    async fn sponsorship_spent(&self, account: &str, family: ChainFamily, day: i64) -> StoreResult<(u64, u64)>;
}

/// Payments, their history index and the reconciler's schedule.
#[async_trait]
pub trait PaymentStore: Send + Sync + 'static {
    /// Inserts a payment — claiming its proof and its transaction in the same write — and indexes
    /// it in the history of both wallets for each owning account.
    ///
    /// # Errors
    /// [`StoreError::ProofUsed`] when another payment holds the proof,
    /// [`StoreError::TransactionUsed`] when the transaction is another payment's on the same
    /// side (of any account); nothing is written then.
    async fn insert_payment(&self, payment: &NewPayment) -> StoreResult<StoredPayment>;
    /// A payment by id.
    async fn get_payment(&self, id: &str) -> StoreResult<Option<StoredPayment>>;
    /// The payment holding a proof, if any.
    async fn payment_by_proof(&self, proof_id: &str) -> StoreResult<Option<StoredPayment>>;
    /// Moves a payment from `expected` to `update.status` if it is still in `expected`. A final
    /// status takes the payment off the reconciler's schedule.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] with the current status when it moved meanwhile,
    /// [`StoreError::NotFound`] when there is no such payment, [`StoreError::TransactionUsed`]
    /// when `update.transaction` is another payment's.
    async fn transition_payment(
        &self,
        id: &str,
        expected: PaymentStatus,
        update: &PaymentUpdate,
    ) -> StoreResult<StoredPayment>;
    /// Claims, until `claim_until`, up to `limit` unfinished payments due for a look at `now`,
    /// most overdue first: those on `networks` (the chain can tell), and `verified` ones without a
    /// transaction id anywhere (never broadcast). A payment claimed by another caller (another
    /// instance's reconciler) and not yet released is skipped, so each is looked at by one
    /// instance at a time; a claim lapses at its time (its holder died).
    async fn claim_due_payments(
        &self,
        networks: &[Network],
        now: DateTime<Utc>,
        limit: u32,
        claim_until: DateTime<Utc>,
    ) -> StoreResult<Vec<StoredPayment>>;
    /// Puts an unfinished payment back on the schedule for `at` (one more check without verdict),
    /// releasing its claim.
    async fn reschedule_payment(&self, id: &str, at: DateTime<Utc>) -> StoreResult<()>;
    /// Makes every unfinished payment scheduled after `at`, and not claimed by a running
    /// reconciler, due at `at` (a restart looks at what the stopped process left at once);
    /// returns how many moved.
    async fn bring_checks_forward(&self, at: DateTime<Utc>) -> StoreResult<u64>;
    /// How many payments the reconciler still follows (unfinished, with a check scheduled).
    async fn unfinished_payments(&self) -> StoreResult<u64>;
    /// The latest `limit` payments of every account, newest first (the operator's dashboard).
    async fn recent_payments(&self, limit: u32) -> StoreResult<Vec<StoredPayment>>;
    /// A page of a wallet's payments visible to `account`, newest first.
    async fn history(
        &self,
        account: &str,
        wallet: &str,
        direction: Option<Direction>,
        limit: u32,
        offset: u64,
    ) -> StoreResult<HistoryPage>;
}

/// The answers payments have served (`tollgate_protocol::ticket`): counted in the database, so
/// that seller instances, processes and restarts never add answers to a payment.
#[async_trait]
pub trait AnswerStore: Send + Sync + 'static {
    /// Claims one more answer of payment `payment_id`'s ticket at `at`, in one guarded upsert:
    /// counted only while it has answers left and, once one is served, within its window and for
    /// the request answered first. A payment with no ticket yet gets one, on `ticket`'s terms,
    /// with this answer its first; an existing ticket keeps its first terms.
    async fn claim_answer(&self, payment_id: &str, ticket: &Ticket, at: DateTime<Utc>) -> StoreResult<AnswerClaim>;
    /// Gives back one answer of payment `payment_id`'s ticket (it never reached its buyer); the
    /// answers still counted, or `None` when it has no ticket.
    async fn release_answer(&self, payment_id: &str) -> StoreResult<Option<Answered>>;
    /// The pass of `payer` (canonical address) for `account`'s `scope` that runs longest past
    /// `at`, among those bought by a confirmed payment.
    async fn find_pass(&self, account: &str, scope: &str, payer: &str, at: DateTime<Utc>) -> StoreResult<Option<Pass>>;
    /// Claims a sign-in message's nonce for `account` (one insert): `false` when it was claimed
    /// before. Claims that expired before `at` are purged on the way.
    async fn claim_sign_in_nonce(
        &self,
        account: &str,
        nonce: &str,
        expires_at: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> StoreResult<bool>;
}

/// A pass a payment bought ([`AnswerStore::find_pass`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pass {
    /// The payment that bought it.
    pub payment_id: String,
    /// The network it was paid on.
    pub network: Network,
    /// Until when it opens its scope.
    pub valid_until: DateTime<Utc>,
}

/// The outcome of [`AnswerStore::claim_answer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerClaim {
    /// Counted: this answer may be served.
    Claimed(Answered),
    /// Every answer the payment buys has been served.
    UsedUp(Answered),
    /// The ticket's window after its first answer has passed.
    Expired {
        /// Its length in seconds.
        seconds: u64,
    },
    /// A repeat for another request than the one answered first (or one that cannot be told
    /// again).
    OtherRequest,
}

/// Answers remembered per API key and `Idempotency-Key`.
#[async_trait]
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Starts a request under an `Idempotency-Key` (records older than `expire_before` are forgotten).
    async fn idempotency_begin(
        &self,
        key_id: &str,
        idem_key: &str,
        request_hash: &str,
        at: DateTime<Utc>,
        expire_before: DateTime<Utc>,
    ) -> StoreResult<IdempotencyBegin>;
    /// Stores the response of a started request.
    async fn idempotency_complete(&self, key_id: &str, idem_key: &str, response: &StoredResponse) -> StoreResult<()>;
    /// Forgets a started request (it failed in a way worth retrying).
    async fn idempotency_abandon(&self, key_id: &str, idem_key: &str) -> StoreResult<()>;
    /// Deletes idempotency records created before `before`; returns how many.
    async fn idempotency_purge(&self, before: DateTime<Utc>) -> StoreResult<u64>;
}

/// The most ways to pay kept per entry (the newest settled).
pub const MAX_ACCEPTS: usize = 8;
/// A discovery catalog entry (x402 `bazaar`), as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogEntry {
    /// `dres_…`.
    pub id: String,
    /// The seller account that settled it.
    pub account_id: String,
    /// The resource URL (a dynamic route's template in place of its concrete path).
    pub url: String,
    /// An MCP tool's name; empty for an HTTP route.
    pub tool_name: String,
    /// `http` or `mcp`.
    pub kind: String,
    /// The x402 version it was settled in.
    pub x402_version: u8,
    /// What the buyer gets.
    pub description: String,
    /// MIME type of the answer.
    pub mime_type: String,
    /// Service metadata, sanitized.
    pub service: tollgate_protocol::x402::bazaar::ServiceMetadata,
    /// The ways to pay seen settled, newest first.
    pub accepts: Vec<tollgate_protocol::x402::PaymentRequirements>,
    /// `{"bazaar": declaration}`.
    pub extensions: Map<String, Value>,
    /// Taken out of the lists by its seller.
    pub hidden: bool,
    /// When it was first cataloged.
    pub created_at: DateTime<Utc>,
    /// When it was last settled.
    pub last_settled_at: DateTime<Utc>,
}

/// What a confirmed settlement adds to the catalog (or refreshes).
#[derive(Debug, Clone, PartialEq)]
pub struct NewCatalogEntry {
    /// A fresh id, used when the entry is new.
    pub id: String,
    /// The seller account.
    pub account_id: String,
    /// The catalog's URL of the resource.
    pub url: String,
    /// An MCP tool's name; empty for an HTTP route.
    pub tool_name: String,
    /// `http` or `mcp`.
    pub kind: String,
    /// The x402 version.
    pub x402_version: u8,
    /// What the buyer gets.
    pub description: String,
    /// MIME type of the answer.
    pub mime_type: String,
    /// Service metadata, sanitized.
    pub service: tollgate_protocol::x402::bazaar::ServiceMetadata,
    /// The way to pay just settled.
    pub accept: tollgate_protocol::x402::PaymentRequirements,
    /// `{"bazaar": declaration}`.
    pub extensions: Map<String, Value>,
    /// Lower-case words searched.
    pub search_text: String,
    /// When it was settled.
    pub at: DateTime<Utc>,
}

/// Which entries a list or search answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatalogFilter {
    /// `http` or `mcp`.
    pub kind: Option<String>,
    /// A recipient of one of the entry's ways to pay.
    pub pay_to: Option<String>,
    /// A scheme of one of them.
    pub scheme: Option<String>,
    /// A network of one of them.
    pub network: Option<String>,
    /// An extension key the entry carries (`bazaar`).
    pub extension: Option<String>,
    /// Words that must all appear (search).
    pub words: Vec<String>,
    /// Only entries settled at or after this (ms); older ones have aged out.
    pub settled_since: i64,
    /// At most this many.
    pub limit: u32,
    /// After skipping this many.
    pub offset: u64,
}

/// The discovery catalog (x402 `bazaar`): what settled payments declare.
#[async_trait]
pub trait CatalogStore: Send + Sync + 'static {
    /// Adds the entry a settlement makes, or refreshes the seller's entry of the same URL and
    /// tool (its description, metadata, declaration and last settlement), and records the way
    /// it was paid (the newest [`MAX_ACCEPTS`] kept).
    async fn catalog(&self, entry: &NewCatalogEntry) -> StoreResult<()>;
    /// The listed entries `filter` matches (not hidden, settled since `filter.settled_since`),
    /// the most recently settled first, with their ways to pay; and how many match in all.
    async fn catalog_list(&self, filter: &CatalogFilter) -> StoreResult<(Vec<CatalogEntry>, u64)>;
    /// An account's own entries, hidden ones too (at most 1,000, the most recent first).
    async fn catalog_of(&self, account_id: &str) -> StoreResult<Vec<CatalogEntry>>;
    /// Hides (or lists again) an account's entry; false when the account has no such entry.
    async fn catalog_hide(&self, account_id: &str, id: &str, hidden: bool) -> StoreResult<bool>;
    /// Deletes an account's entry; false when the account has no such entry.
    async fn catalog_delete(&self, account_id: &str, id: &str) -> StoreResult<bool>;
    /// Deletes the entries last settled before `settled_before` (Unix ms); how many.
    async fn catalog_purge(&self, settled_before: i64) -> StoreResult<u64>;
}

/// Everything Tollgate persists.
#[async_trait]
pub trait Store: AccountStore + PaymentStore + AnswerStore + IdempotencyStore + WebhookStore + CatalogStore {
    /// Checks the database answers.
    async fn ping(&self) -> StoreResult<()>;

    /// Whether the database itself announces payment changes and key deletions to every instance
    /// ([`Store::listen`]); when false, each instance publishes its own changes.
    fn announces_changes(&self) -> bool {
        false
    }

    /// Calls `hook` with every payment this store inserts or moves from now on, once the write
    /// has committed (on this instance only: other instances' changes come through
    /// [`Store::listen`] when the database announces them).
    fn on_change(&self, hook: ChangeHook);

    /// A stream of the changes announced by the database (see [`Store::announces_changes`]);
    /// `None` when it announces none.
    ///
    /// # Errors
    /// When the listening connection cannot be opened.
    async fn listen(&self) -> StoreResult<Option<Box<dyn Announcements>>> {
        Ok(None)
    }

    /// Deletes announced payment changes written before `before`; returns how many.
    ///
    /// # Errors
    /// When the database fails.
    async fn purge_announcements(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let _ = before;
        Ok(0)
    }
}

/// Told of a payment the store inserted or moved ([`Store::on_change`]).
pub type ChangeHook = std::sync::Arc<dyn Fn(&StoredPayment) + Send + Sync>;

/// Which payment changed, to what, and who may see it: what the event feed routes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentRoute {
    /// The payment.
    pub payment_id: String,
    /// The account that owns it.
    pub owner_account: String,
    /// The other side's account, when it is a custodial wallet here.
    pub counterparty_account: Option<String>,
    /// Payer and payee addresses (canonical text).
    pub wallets: [String; 2],
    /// Its new status.
    pub status: PaymentStatus,
}

impl PaymentRoute {
    /// Whether `account` may see it.
    #[must_use]
    pub fn visible_to(&self, account: &str) -> bool {
        self.owner_account == account || self.counterparty_account.as_deref() == Some(account)
    }
}

/// A payment change as every instance's event feed needs it: its route, and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentNotice {
    /// Which payment, to what status, seen by whom.
    pub route: PaymentRoute,
    /// `{"event": "payment.updated", "payment": <record>}`.
    pub message: String,
}

/// The event name of a payment change.
pub const PAYMENT_UPDATED: &str = "payment.updated";

impl PaymentNotice {
    /// The notice of a payment as stored now.
    #[must_use]
    pub fn of(stored: &StoredPayment) -> Self {
        let p = &stored.payment;
        let route = PaymentRoute {
            payment_id: p.id.clone(),
            owner_account: p.owner_account.clone(),
            counterparty_account: p.counterparty_account.clone(),
            wallets: [p.from.clone(), p.to.clone()],
            status: p.status,
        };
        let message = serde_json::json!({"event": PAYMENT_UPDATED, "payment": stored.to_record()}).to_string();
        Self { route, message }
    }
}

/// A payment change as a webhook event: the body every endpoint of the accounts that may see
/// the payment receives (`{"id", "type", "createdAt", "data": {"payment"}}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookEvent {
    /// `evt_<payment id>_<status>`: a payment takes each status at most once, so a receiver
    /// deduplicates retried deliveries on it.
    pub id: String,
    /// `payment.<status>`.
    pub kind: String,
    /// The JSON body, signed and sent as is on every attempt.
    pub body: String,
}

impl WebhookEvent {
    /// The event of a payment as stored now.
    #[must_use]
    pub fn of(stored: &StoredPayment) -> Self {
        let status = stored.payment.status.as_str();
        let id = format!("evt_{}_{status}", stored.payment.id);
        let kind = format!("payment.{status}");
        let body = serde_json::json!({
            "id": id,
            "type": kind,
            "createdAt": stored.updated_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "data": {"payment": stored.to_record()},
        })
        .to_string();
        Self { id, kind, body }
    }
}

/// A registered webhook endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredWebhookEndpoint {
    /// `whe_…`.
    pub id: String,
    /// The account whose payments it hears about.
    pub account_id: String,
    /// Where deliveries are POSTed.
    pub url: String,
    /// The owner's note.
    pub description: Option<String>,
    /// The signing secret, sealed under the master key (associated data: the id).
    pub sealed_secret: String,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
}

/// A delivery claimed for sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueDelivery {
    /// The outbox row.
    pub id: i64,
    /// Its endpoint.
    pub endpoint_id: String,
    /// The event.
    pub event_id: String,
    /// The body to send.
    pub body: String,
    /// Attempts made before this one.
    pub attempts: u32,
    /// When the event was queued (retries stop a set time after it).
    pub created_at: DateTime<Utc>,
}

/// What came of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// The endpoint answered 2xx.
    Delivered {
        /// Its status.
        status: u16,
    },
    /// Try again at `next_at`.
    Retry {
        /// The endpoint's status, when it answered.
        status: Option<u16>,
        /// What went wrong.
        error: String,
        /// When to try again.
        next_at: DateTime<Utc>,
    },
    /// Given up (retried for the whole retry period, or the endpoint is gone).
    Failed {
        /// The endpoint's last status, when it answered.
        status: Option<u16>,
        /// What went wrong last.
        error: String,
    },
}

/// A row of the delivery log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// The outbox row.
    pub id: i64,
    /// Its endpoint.
    pub endpoint_id: String,
    /// The event.
    pub event_id: String,
    /// `payment.<status>`.
    pub event_type: String,
    /// `pending`, `delivered` or `failed`.
    pub state: String,
    /// Attempts made.
    pub attempts: u32,
    /// When the next attempt is due (pending only).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The last answer's status.
    pub last_status: Option<u16>,
    /// The last failure.
    pub last_error: Option<String>,
    /// When it was queued.
    pub created_at: DateTime<Utc>,
    /// When it was delivered.
    pub delivered_at: Option<DateTime<Utc>>,
}

/// Webhook endpoints and their outbox. Deliveries are queued by the payment store, in the
/// transaction of each payment change.
#[async_trait]
pub trait WebhookStore: Send + Sync + 'static {
    /// Registers an endpoint unless its account has `max_per_account` already (false then),
    /// checked and written at once, whoever registers concurrently.
    async fn insert_webhook_endpoint(
        &self,
        endpoint: &StoredWebhookEndpoint,
        max_per_account: u32,
    ) -> StoreResult<bool>;
    /// An account's endpoints, or every endpoint (`None`), oldest first.
    async fn webhook_endpoints(&self, account_id: Option<&str>) -> StoreResult<Vec<StoredWebhookEndpoint>>;
    /// One endpoint by id.
    async fn webhook_endpoint(&self, id: &str) -> StoreResult<Option<StoredWebhookEndpoint>>;
    /// The oldest endpoint of any account, if any (to check the master key opens what is sealed).
    async fn first_webhook_endpoint(&self) -> StoreResult<Option<StoredWebhookEndpoint>>;
    /// Deletes an account's endpoint and its deliveries; false when it has none of that id.
    async fn delete_webhook_endpoint(&self, account_id: &str, id: &str) -> StoreResult<bool>;
    /// Claims up to `limit` pending deliveries due by `now` until `claim_until` (others skip
    /// them), oldest due first, none of an endpoint in `skip`.
    async fn claim_webhook_deliveries(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        claim_until: DateTime<Utc>,
        skip: &[String],
    ) -> StoreResult<Vec<DueDelivery>>;
    /// Releases claims without recording an attempt: the rows are due again at once.
    async fn release_webhook_claims(&self, ids: &[i64]) -> StoreResult<()>;
    /// Records an attempt and releases the claim.
    async fn record_webhook_attempt(&self, id: i64, at: DateTime<Utc>, outcome: &DeliveryOutcome) -> StoreResult<()>;
    /// The newest deliveries of one endpoint, or of all (`None`), newest first.
    async fn webhook_deliveries(&self, endpoint_id: Option<&str>, limit: u32) -> StoreResult<Vec<DeliveryRecord>>;
    /// How many deliveries are waiting to be sent.
    async fn webhook_backlog(&self) -> StoreResult<u64>;
}

/// What the database announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announcement {
    /// A payment changed (on any instance).
    Payment(PaymentNotice),
    /// An API key was deleted (by any instance or the CLI).
    KeyDeleted(String),
    /// The listening connection was lost and is being reopened: announcements in between are
    /// lost (caches must be dropped, followers told).
    Gap,
}

/// Announcements in the order the database committed them.
#[async_trait]
pub trait Announcements: Send {
    /// The next announcement (waits for it).
    ///
    /// # Errors
    /// When the database cannot be reached; the next call tries again.
    async fn next(&mut self) -> StoreResult<Announcement>;
}

/// The next nonce of the EVM accounts the facilitator sends from, shared by every instance.
#[async_trait]
pub trait NonceStore: Send + Sync + 'static {
    /// Locks `address`'s nonce on `network` until the lock is advanced or dropped; other callers
    /// (on any instance) wait. Dropping it without [`NonceLock::advance`] changes nothing.
    ///
    /// # Errors
    /// When the database fails.
    async fn lock_nonce(&self, network: &Network, address: &str) -> StoreResult<Box<dyn NonceLock>>;
}

/// A held nonce row.
#[async_trait]
pub trait NonceLock: Send + Sync {
    /// The next nonce as last recorded and when, if any.
    fn recorded(&self) -> Option<(u64, DateTime<Utc>)>;
    /// Records `next` as the account's next nonce and releases the lock.
    ///
    /// # Errors
    /// When the database fails (nothing is recorded then).
    async fn advance(self: Box<Self>, next: u64, at: DateTime<Utc>) -> StoreResult<()>;
}

#[cfg(test)]
pub(crate) mod suite;
