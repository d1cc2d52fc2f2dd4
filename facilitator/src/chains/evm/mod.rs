//! EVM chains: one JSON-RPC code path ([`rpc::EvmRpc`], alloy) for every configured chain, and
//! the [`Chain`] each serves, split by scheme:
//!
//! | module | what |
//! |---|---|
//! | [`exact_native`] | `exact-native` proofs: a signed EIP-1559 ETH transfer, or a receipt of a mined one |
//! | [`exact`] | x402 `exact`: an EIP-3009 authorization, settled by `transferWithAuthorization` |
//! | [`send`] | hosted sends from custodial wallets, local-mode builds, reported transactions |
//! | [`verify`], [`build`], [`erc20`] | transfer rules without the chain; signing and receipts; token calls |
//! | [`nonce`] | per-account nonces, held from signing until the broadcast's fate is known |

pub mod build;
pub mod erc20;
pub mod exact;
pub mod exact_native;
pub mod nonce;
pub mod rpc;
pub mod send;
pub mod verify;

use std::sync::Arc;

use alloy::primitives::B256;
use alloy::signers::local::PrivateKeySigner;
use async_trait::async_trait;
use tollgate_protocol::Network;
use tollgate_protocol::gateway::TokenInfo;
use tollgate_protocol::x402::{Asset, PaymentPayload, SCHEME_EXACT, SCHEME_EXACT_NATIVE};

use super::{
    Chain, ChainError, Checked, Expected, Intent, Kinds, Order, OrderError, PlannedSend, ProofError, Reason, Refusal,
    Seen, SendError, Settler, Terms, TxOutcome, TxStatus, Unsigned, Watched,
};

/// Wei in one ETH.
pub const WEI_PER_ETH: u128 = 1_000_000_000_000_000_000;

/// An EVM chain served by this daemon.
#[derive(Debug)]
pub struct EvmBackend {
    /// Its RPC.
    pub rpc: rpc::EvmRpc,
    /// Nonces of the accounts the facilitator signs for.
    pub nonces: Arc<nonce::NonceManager>,
    /// Blocks a receipt's transaction must be buried under (1 = mined).
    pub confirmations: u64,
    /// Most gas a transaction built or broadcast here may use.
    pub max_gas: u64,
    /// Highest max fee per gas the facilitator's own transactions may pay, wei.
    pub max_fee_per_gas: u128,
    /// The facilitator's account, which sends EIP-3009 settlements; `None` disables x402 `exact`.
    pub signer: Option<FacilitatorSigner>,
    /// Decimals of tokens found to check EIP-3009 signatures, remembered between requests.
    pub decimals: super::memo::Facts<alloy::primitives::Address, u8>,
    /// Token EIP-712 names and versions read from the chain, remembered between requests.
    pub domains: super::memo::Facts<alloy::primitives::Address, (String, String)>,
}

/// The facilitator's own EVM key (its `Debug` shows only the address).
#[derive(Clone)]
pub struct FacilitatorSigner(pub PrivateKeySigner);

impl std::fmt::Debug for FacilitatorSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("FacilitatorSigner").field(&self.0.address()).finish()
    }
}

impl EvmBackend {
    /// A backend over `rpc`: one confirmation, 500,000 gas, 500 gwei at most, no signer.
    #[must_use]
    pub fn new(rpc: rpc::EvmRpc) -> Self {
        Self {
            rpc,
            nonces: Arc::new(nonce::NonceManager::default()),
            confirmations: 1,
            max_gas: 500_000,
            max_fee_per_gas: 500_000_000_000,
            signer: None,
            decimals: super::memo::Facts::default(),
            domains: super::memo::Facts::default(),
        }
    }

    /// The same backend, its accounts' nonces shared with every instance using `store` (several
    /// instances on one PostgreSQL).
    #[must_use]
    pub fn with_shared_nonces(mut self, store: Arc<dyn crate::store::NonceStore>) -> Self {
        self.nonces = Arc::new(nonce::NonceManager::shared(store, self.rpc.network().clone()));
        self
    }

    /// The same backend, settling x402 `exact` from `signer`'s account.
    #[must_use]
    pub fn with_signer(mut self, signer: PrivateKeySigner) -> Self {
        self.signer = Some(FacilitatorSigner(signer));
        self
    }
}

/// The alloy address of a validated EVM address.
#[must_use]
pub fn address(a: &tollgate_protocol::Address) -> Option<alloy::primitives::Address> {
    match a {
        tollgate_protocol::Address::Evm(bytes) => Some(alloy::primitives::Address::from(*bytes)),
        tollgate_protocol::Address::Solana(_) => None,
    }
}

/// The protocol form (EIP-55 when displayed) of an alloy address.
#[must_use]
pub fn protocol_address(a: alloy::primitives::Address) -> tollgate_protocol::Address {
    tollgate_protocol::Address::Evm(a.into_array())
}

fn refuse(reason: Reason, message: impl Into<String>) -> ProofError {
    ProofError::Refused(Refusal::new(reason, message))
}

fn signer_of(key: &[u8]) -> Result<PrivateKeySigner, ChainError> {
    PrivateKeySigner::from_slice(key).map_err(|_| ChainError("the wallet's key is not a secp256k1 key".into()))
}

fn hash_of(tx_id: &str) -> Result<B256, ChainError> {
    tx_id.parse().map_err(|_| ChainError(format!("not a transaction hash: {tx_id}")))
}

#[async_trait]
impl Chain for EvmBackend {
    fn network(&self) -> &Network {
        self.rpc.network()
    }

    fn kinds(&self) -> Kinds {
        let signer = self.signer.as_ref().map(|s| s.0.address().to_string());
        super::schemes_with(signer.as_deref(), None)
    }

    fn proof_id(&self, payload: &PaymentPayload, asset: &Asset) -> Option<String> {
        match payload.scheme() {
            SCHEME_EXACT => exact::identity(payload, asset),
            SCHEME_EXACT_NATIVE => exact_native::identity(payload),
            _ => None,
        }
    }

    async fn check(
        &self,
        payload: &PaymentPayload,
        terms: &Terms,
        settler: Settler,
        intent: Intent,
        now: i64,
    ) -> Result<Checked, ProofError> {
        let pay_to = address(&terms.pay_to)
            .ok_or_else(|| refuse(Reason::InvalidPaymentRequirements, "payTo must be an EVM address"))?;
        match payload.scheme() {
            SCHEME_EXACT_NATIVE => exact_native::check(self, payload, terms, &pay_to, settler).await,
            SCHEME_EXACT => exact::check(self, payload, terms, (&pay_to, now), (settler, intent)).await,
            other => Err(refuse(Reason::UnsupportedScheme, format!("unsupported scheme {other}"))),
        }
    }

    async fn plan_send(&self, order: &Order, key: &[u8]) -> Result<PlannedSend, OrderError> {
        send::plan(self, order, signer_of(key)?).await
    }

    async fn build(&self, order: &Order) -> Result<Unsigned, OrderError> {
        send::build(self, order).await
    }

    fn signed_identity(&self, transaction: &[u8]) -> Option<String> {
        build::signed_identity(transaction)
    }

    fn sign_receipt(
        &self,
        key: &[u8],
        tx_id: &str,
        pay_to: &tollgate_protocol::Address,
        resource: Option<&str>,
    ) -> Result<String, ChainError> {
        build::signed_receipt(&signer_of(key)?, self.rpc.network(), tx_id, pay_to, resource)
            .map_err(|e| ChainError(format!("cannot write the receipt: {e}")))
    }

    async fn broadcast(&self, raw: &[u8]) -> Result<(), SendError> {
        self.rpc.send_raw(raw).await.map(|_| ())
    }

    async fn outcome(&self, tx_id: &str) -> Result<Option<TxOutcome>, ChainError> {
        self.rpc.outcome(hash_of(tx_id)?).await
    }

    /// Mined (at any age), or — its sender's nonce taken by another transaction — dropped.
    async fn status(&self, tx: &Watched<'_>) -> Result<TxStatus, ChainError> {
        let hash = hash_of(tx.id)?;
        if let Some(outcome) = self.rpc.outcome(hash).await? {
            return Ok(TxStatus::Landed(outcome));
        }
        let decoded = tx.raw.and_then(|raw| verify::decode_bytes(raw).ok());
        let Some((sender, nonce)) = decoded.and_then(|(envelope, _)| verify::sender_and_nonce(&envelope)) else {
            return Ok(TxStatus::Unseen);
        };
        if self.rpc.mined_nonce(sender).await? <= nonce {
            return Ok(TxStatus::Unseen);
        }
        // Nonce taken: unless it is this very transaction (mined between the two calls), it
        // can never land.
        Ok(match self.rpc.outcome(hash).await? {
            Some(outcome) => TxStatus::Landed(outcome),
            None => TxStatus::Dropped { reason: format!("nonce {nonce} of {sender} was used by another transaction") },
        })
    }

    async fn observe(&self, expected: &Expected<'_>, tx: &str) -> Result<Seen, OrderError> {
        send::observe(&self.rpc, expected, tx).await
    }

    async fn token_info(&self, address: &tollgate_protocol::Address) -> Result<Option<TokenInfo>, ChainError> {
        match self::address(address) {
            Some(contract) => erc20::token_info(&self.rpc, contract).await,
            None => Ok(None),
        }
    }
}
