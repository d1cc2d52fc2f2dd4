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

    /// A proof it made for `requirement` was sent and not settled as far as the buyer knows
    /// (refused, no answer): state kept for the next proof may be stale (an EVM nonce).
    async fn unsettled(&self, requirement: &PaymentRequirements) {
        let _ = requirement;
    }
}
