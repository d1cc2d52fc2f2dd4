//! [`Wallet`]: what builds and signs a buyer's payments on one chain family. The crate's own are
//! local keys ([`SolanaWallet`], [`EvmWallet`], made by [`crate::Buyer::with_solana`] and
//! [`crate::Buyer::with_evm`]); another signer — a remote one, a hardware key, a wallet that
//! asks a person — implements the trait and is given with [`crate::Buyer::with_wallet`]. The
//! buyer does the rest: choosing the offer, the cap and budget, sending, retrying, recording.

use async_trait::async_trait;
use serde_json::{Map, Value};
use tollgate_protocol::ChainFamily;
use tollgate_protocol::x402::PaymentRequirements;

use crate::PayError;
pub use crate::evm::EvmWallet;
pub use crate::solana::SolanaWallet;
use tollgate_protocol::AtomicAmount;
use tollgate_protocol::x402::batch::{ChannelConfig, DepositAuthorization, Voucher};

/// A proof a wallet made for one requirement.
#[derive(Debug, Default, Clone)]
#[non_exhaustive]
pub struct Proof {
    /// The scheme payload (x402 `payload`).
    pub payload: Value,
    /// The transaction it carries, when known before settlement (a signed transfer's hash).
    pub transaction: Option<String>,
    /// Extensions for the payment payload (a signed EIP-2612 permit).
    pub extensions: Map<String, Value>,
    /// A transaction the wallet sent before paying (a one-time approval of Permit2).
    pub approval: Option<String>,
}

impl Proof {
    /// A proof carrying `payload` and nothing else.
    #[must_use]
    pub fn new(payload: Value) -> Self {
        Self { payload, ..Self::default() }
    }

    /// The same proof, naming its transaction.
    #[must_use]
    pub fn with_transaction(mut self, transaction: impl Into<String>) -> Self {
        self.transaction = Some(transaction.into());
        self
    }

    /// A payload and its transaction, with nothing else.
    pub(crate) fn of((payload, transaction): (Value, Option<String>)) -> Self {
        Self { payload, transaction, ..Self::default() }
    }
}

/// Builds and signs payments on one chain family.
#[async_trait]
pub trait Wallet: Send + Sync + std::fmt::Debug {
    /// The chain family it pays on (a buyer has one wallet per family).
    fn family(&self) -> ChainFamily;

    /// Its address, as that chain writes it.
    fn address(&self) -> String;

    /// Whether it can pay `requirement` (its network, scheme and asset): the decimals of the
    /// asset when it can, `None` when it cannot.
    ///
    /// # Errors
    /// [`PayError::Build`] when the chain cannot be read.
    async fn decimals(&self, requirement: &PaymentRequirements) -> Result<Option<u8>, PayError>;

    /// Builds and signs the proof for `requirement` (which [`Self::decimals`] accepted), with
    /// the extensions the seller declared in its payment request (`declared`).
    ///
    /// # Errors
    /// [`PayError::Build`] when it cannot.
    async fn prove(&self, requirement: &PaymentRequirements, declared: &Map<String, Value>) -> Result<Proof, PayError>;

    /// The symbol of `requirement`'s asset as its chain says it (an ERC-20's `symbol()`), for
    /// caps and budgets that name assets by symbol (`0.05USDC`); `None` when the chain says none.
    async fn symbol(&self, requirement: &PaymentRequirements) -> Option<String> {
        let _ = requirement;
        None
    }

    /// Signs `message` (a `sign-in-with-x` message) as its chain's wallets sign text: EIP-191
    /// (`personal_sign`, `0x` hex) on EVM, ed25519 (base58) on Solana. A wallet that cannot
    /// answers an error: its buyer then pays instead of signing in.
    ///
    /// # Errors
    /// [`PayError::Build`] when it cannot sign.
    async fn sign_message(&self, message: &str) -> Result<String, PayError> {
        let _ = message;
        Err(PayError::Build("this wallet does not sign messages".into()))
    }

    /// The payment channels (x402 `batch-settlement`) it opens and pays from, when it has them.
    fn channels(&self) -> Option<&dyn ChannelWallet> {
        None
    }

    /// A proof it made for `requirement` was sent and not settled as far as the buyer knows
    /// (refused, no answer): state kept for the next proof may be stale (an EVM nonce).
    async fn unsettled(&self, requirement: &PaymentRequirements) {
        let _ = requirement;
    }
}

/// A payment channel a wallet pays from: its configuration as the wire writes it, and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Channel {
    /// The configuration (payer, authorizers, receiver, token, withdrawal delay, salt).
    pub config: ChannelConfig,
    /// Its id (on EVM, the configuration's EIP-712 hash), as the wire writes it.
    pub id: String,
}

impl Channel {
    /// A channel of `config` named `id`.
    #[must_use]
    pub const fn new(config: ChannelConfig, id: String) -> Self {
        Self { config, id }
    }
}

/// What the chain holds for a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct OnChain {
    /// Escrowed: deposits less refunds and withdrawals (claimed amounts included until swept).
    pub balance: AtomicAmount,
    /// Claimed by the receiver in all.
    pub claimed: AtomicAmount,
    /// A timed withdrawal started: its amount and the Unix second it can be finished.
    pub withdrawal: Option<(AtomicAmount, u64)>,
}

/// Opens and pays from payment channels (x402 `batch-settlement`): a deposit once, then a signed
/// cumulative voucher per request. The buyer keeps the count ([`crate::Buyer`]); a wallet only
/// names, reads and signs.
#[async_trait]
pub trait ChannelWallet: Send + Sync {
    /// The channel this wallet pays `requirement` from: itself as payer and voucher signer, the
    /// requirement's receiver, token, receiver authorizer and withdrawal delay.
    ///
    /// # Errors
    /// [`PayError::Build`] for a requirement that names no channel (no receiver authorizer).
    async fn channel(&self, requirement: &PaymentRequirements) -> Result<Channel, PayError>;

    /// What the chain holds for `channel`.
    ///
    /// # Errors
    /// [`PayError::Build`] when the chain cannot be read.
    async fn on_chain(&self, channel: &Channel) -> Result<OnChain, PayError>;

    /// A voucher for `max_claimable` in all from `channel`.
    ///
    /// # Errors
    /// [`PayError::Build`] when it cannot sign.
    async fn voucher(&self, channel: &Channel, max_claimable: AtomicAmount) -> Result<Voucher, PayError>;

    /// Whether `signature` is this wallet's voucher for `max_claimable` from `channel` (a seller
    /// that says the buyer signed more than the buyer remembers shows the voucher).
    async fn signed(&self, channel: &Channel, max_claimable: AtomicAmount, signature: &str) -> bool;

    /// An authorization to deposit `amount` into `channel` for `requirement` (whose `extra` says
    /// how the token is moved).
    ///
    /// # Errors
    /// [`PayError::Build`] when it cannot.
    async fn deposit(
        &self,
        requirement: &PaymentRequirements,
        channel: &Channel,
        amount: AtomicAmount,
    ) -> Result<DepositAuthorization, PayError>;

    /// Starts a timed withdrawal of `amount` from `channel` (a transaction this wallet sends and
    /// pays the fee of): its hash once mined.
    ///
    /// # Errors
    /// [`PayError::Build`] when it cannot be sent or fails.
    async fn start_withdrawal(&self, channel: &Channel, amount: AtomicAmount) -> Result<String, PayError>;

    /// Finishes the timed withdrawal `channel` started, once its delay has passed: the hash of
    /// the transaction that returned the funds.
    ///
    /// # Errors
    /// [`PayError::Build`] when it cannot be sent or fails (the delay not yet over).
    async fn finish_withdrawal(&self, channel: &Channel) -> Result<String, PayError>;
}
