//! EVM chains: one JSON-RPC code path ([`rpc::EvmRpc`], alloy) for every configured chain, and
//! the [`Chain`] each serves, split by scheme:
//!
//! | module | what |
//! |---|---|
//! | [`exact_native`] | `exact-native` proofs: a signed EIP-1559 ETH transfer, or a receipt of a mined one |
//! | [`exact`] | x402 `exact`: an EIP-3009 authorization, settled by `transferWithAuthorization` |
//! | [`permit2`] | x402 `exact` through Permit2 and `upto`: a Permit2 witness transfer, settled by an x402 proxy |
//! | [`batch`] | x402 `batch-settlement`: channels read from the contract, a buyer's deposit, voucher or refund checked against them |
//! | `call` | a settling contract call: simulated for a verdict, signed by the facilitator or handed to the seller |
//! | [`send`] | hosted sends from custodial wallets, local-mode builds, reported transactions |
//! | [`verify`], [`build`], [`erc20`] | transfer rules without the chain; signing and receipts; token calls |
//! | [`nonce`] | per-account nonces, held from signing until the broadcast's fate is known |

pub mod batch;
pub mod build;
mod call;
mod coalesce;
pub mod erc20;
pub mod exact;
pub mod exact_native;
pub mod nonce;
pub mod permit2;
pub mod rpc;
pub mod send;
pub mod verify;

use std::sync::Arc;

use alloy::primitives::B256;
use alloy::signers::local::PrivateKeySigner;
use async_trait::async_trait;
use tollgate_protocol::Network;
use tollgate_protocol::gateway::TokenInfo;
use tollgate_protocol::x402::schemes::Permit2Payload;
use tollgate_protocol::x402::{Asset, PaymentPayload, SCHEME_EXACT, SCHEME_EXACT_NATIVE, SCHEME_UPTO};

use super::{
    Chain, ChainError, Checked, Intent, Kinds, Landed, Order, OrderError, PlannedSend, Proof, ProofError, Reason,
    Refusal, SendError, Settler, Terms, TxStatus, Unsigned, Watched,
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
    /// Seconds an EIP-3009 authorization must stay valid after it is checked (the time a
    /// settlement takes to land here).
    pub valid_before_margin_secs: u64,
    /// The facilitator's account, which sends EIP-3009 settlements; `None` disables x402 `exact`.
    pub signer: Option<FacilitatorSigner>,
    /// Decimals of tokens found to check EIP-3009 signatures, remembered between requests.
    pub decimals: super::memo::Facts<alloy::primitives::Address, u8>,
    /// Decimals of tokens paid through Permit2, remembered between requests.
    pub token_decimals: super::memo::Facts<alloy::primitives::Address, u8>,
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
            valid_before_margin_secs: 30,
            signer: None,
            decimals: super::memo::Facts::default(),
            token_decimals: super::memo::Facts::default(),
            domains: super::memo::Facts::default(),
        }
    }

    /// The same backend, its accounts' nonces shared with every instance using `store` (several
    /// instances on one PostgreSQL).
    #[must_use]
    pub fn with_shared_nonces(mut self, store: Arc<dyn crate::store::NonceStore>) -> Self {
        let shared = nonce::NonceManager::shared(store, self.rpc.network().clone());
        self.nonces = Arc::new(shared.with_gap_after(self.nonces.gap_after()));
        self
    }

    /// The same backend, taking its own transactions' nonces still unknown to the node after
    /// `gap` as lost (see [`nonce`]).
    #[must_use]
    pub fn with_nonce_gap(mut self, gap: chrono::Duration) -> Self {
        self.nonces = Arc::new(self.nonces.with_gap_after(gap));
        self
    }

    /// The same backend, settling x402 `exact` from `signer`'s account.
    #[must_use]
    pub fn with_signer(mut self, signer: PrivateKeySigner) -> Self {
        self.signer = Some(FacilitatorSigner(signer));
        self
    }

    /// Reads what the facilitator's next settlement signs with — the fees and its account's
    /// pending nonce — unless known recently, so that a settlement makes only the calls that must
    /// be made then (estimate, send, receipt). Done at start and beside every verify's own call
    /// (a settlement usually follows); the settlements' receipts keep both current after that.
    /// What cannot be read now is read when needed.
    pub async fn warm_for_settlement(&self) {
        let nonce = async {
            match &self.signer {
                Some(signer) => self.nonces.warm(&self.rpc, signer.0.address()).await,
                None => Ok(()),
            }
        };
        let (fees, nonce) = tokio::join!(self.rpc.warm_fees(), nonce);
        if let Err(e) = fees.and(nonce) {
            tracing::debug!(error = %e, "could not read ahead what the next settlement signs with");
        }
    }
}

/// The alloy address of a validated EVM address.
pub use tollgate_encoding::evm::address;

/// The protocol form (EIP-55 when displayed) of an alloy address.
#[must_use]
pub fn protocol_address(a: alloy::primitives::Address) -> tollgate_protocol::Address {
    tollgate_protocol::Address::Evm(a.into_array())
}

/// An EVM payment payload read once ([`Chain::decode`]), per scheme: what its check takes, or
/// why it cannot be read (said in the check's turn).
enum Reading {
    /// `exact-native`: a signed transfer, or a receipt of a mined one.
    Native(Result<exact_native::Native, Refusal>),
    /// x402 `exact`: an EIP-3009 authorization.
    Authorization(Result<exact::Authorization, Refusal>),
    /// x402 `exact` through Permit2, or `upto`.
    Permit2(Box<Result<permit2::Transfer, Refusal>>),
    /// A scheme not served here.
    Unsupported(String),
}

fn refuse(reason: Reason, message: impl Into<String>) -> ProofError {
    ProofError::Refused(Refusal::new(reason, message))
}

fn signer_of(key: &[u8]) -> Result<PrivateKeySigner, ChainError> {
    PrivateKeySigner::from_slice(key).map_err(|_| ChainError("the wallet's key is not a secp256k1 key".into()))
}

/// A payment's transaction as the chain has it.
enum Read {
    /// Not mined.
    NotMined,
    /// Mined, under fewer blocks than the confirmations required.
    Shallow,
    /// Mined deep enough: read whole.
    Landed(Landed),
}

impl EvmBackend {
    /// A payment's transaction read whole: what its sender signed, and what arrived at the
    /// payee — for a token, its `Transfer` logs from the payer to the payee; for ETH, the
    /// transaction's own value when it goes from the payer to the payee.
    async fn read(&self, tx: &Watched<'_>, hash: B256) -> Result<Read, ChainError> {
        let Some(mined) = self.rpc.mined(hash, tx.raw).await? else { return Ok(Read::NotMined) };
        // The nonces this instance hands out, checked by the chain; and the base fee of the
        // block, told by the facilitator's own transactions.
        self.nonces.confirmed(mined.from, mined.nonce);
        if self.signer.as_ref().is_some_and(|s| s.0.address() == mined.from) {
            self.rpc.learn_fees(&mined);
        }
        if self.confirmations > 1 && self.rpc.block_number().await?.saturating_sub(mined.block) + 1 < self.confirmations
        {
            return Ok(Read::Shallow);
        }
        let unreadable = || ChainError("the stored payment has unreadable addresses".into());
        let from: alloy::primitives::Address = tx.parties.from.parse().map_err(|_| unreadable())?;
        let to: alloy::primitives::Address = tx.parties.to.parse().map_err(|_| unreadable())?;
        let arrived = if !mined.success {
            alloy::primitives::U256::ZERO
        } else if tx.parties.asset == "native" {
            if mined.from == from && mined.to == Some(to) { mined.value } else { alloy::primitives::U256::ZERO }
        } else if to == tollgate_encoding::batch::BATCH_SETTLEMENT {
            // A batch-settlement deposit: what the contract credited to the payer's channel,
            // which it does only once its own balance rose by as much.
            let credited = mined.deposits.iter().filter(|(payer, _)| *payer == from).map(|(_, amount)| *amount);
            alloy::primitives::U256::from(credited.fold(0u128, u128::saturating_add))
        } else {
            let token: alloy::primitives::Address = tx.parties.asset.parse().map_err(|_| unreadable())?;
            mined
                .token_transfers
                .iter()
                .filter(|(t, f, r, _)| *t == token && *f == from && *r == to)
                .fold(alloy::primitives::U256::ZERO, |sum, (_, _, _, v)| sum.saturating_add(*v))
        };
        Ok(Read::Landed(Landed {
            tx_id: format!("{hash:#x}"),
            signed: format!("{:#x}", mined.signed),
            error: (!mined.success).then(|| "the transaction reverted".to_owned()),
            arrived: u128::try_from(arrived).unwrap_or(u128::MAX),
            fee: Some(tollgate_protocol::AtomicAmount(mined.fee)),
        }))
    }
}

fn hash_of(tx_id: &str) -> Result<B256, ChainError> {
    tx_id.parse().map_err(|_| ChainError(format!("not a transaction hash: {tx_id}")))
}

/// [`Chain::decode`] on EVM chains, which needs nothing of the backend: the payload read once by
/// its scheme, and the identity it is claimed under — (token, payer, nonce) for EIP-3009, (payer,
/// Permit2 nonce) for Permit2 and `upto`, the transaction hash for `exact-native`, each in
/// canonical form, so two spellings of one authorization are one claim.
#[must_use]
pub fn decode(payload: &PaymentPayload, asset: &Asset) -> Proof {
    let reading = match payload.scheme() {
        SCHEME_EXACT_NATIVE => Reading::Native(exact_native::read(payload)),
        SCHEME_EXACT if Permit2Payload::is_permit2(payload.payload()) => {
            Reading::Permit2(Box::new(permit2::read(payload, permit2::Method::Exact)))
        }
        SCHEME_EXACT => Reading::Authorization(exact::read(payload)),
        SCHEME_UPTO => Reading::Permit2(Box::new(permit2::read(payload, permit2::Method::Upto))),
        other => Reading::Unsupported(other.to_owned()),
    };
    let id = match &reading {
        Reading::Native(Ok(native)) => native.identity(payload.network()),
        Reading::Authorization(Ok(authorization)) => authorization.identity(payload.network(), asset),
        Reading::Permit2(read) => read.as_ref().as_ref().ok().map(|t| t.identity(payload.network())),
        Reading::Native(Err(_)) | Reading::Authorization(Err(_)) | Reading::Unsupported(_) => None,
    };
    Proof::new(id, reading)
}

#[async_trait]
impl Chain for EvmBackend {
    fn network(&self) -> &Network {
        self.rpc.network()
    }

    fn kinds(&self) -> Kinds {
        let signer = self.signer.as_ref().map(|s| s.0.address().to_string());
        let mut kinds = super::schemes_with(signer.as_deref(), None);
        if let Some(signer) = signer {
            // `upto` is settled by the facilitator its witness names: this one's account.
            kinds.schemes.push((SCHEME_UPTO, Some(serde_json::json!({ "facilitatorAddress": signer }))));
            // `batch-settlement`: this account signs claims as the channels' delegated receiver
            // authorizer, and sends deposits, claims and sweeps.
            let authorizer = serde_json::json!({ "receiverAuthorizer": signer });
            kinds.schemes.push((tollgate_protocol::x402::batch::SCHEME, Some(authorizer)));
            kinds.extensions.push(tollgate_protocol::x402::schemes::EIP2612_GAS_SPONSORING);
            kinds.extensions.push(tollgate_protocol::x402::schemes::ERC20_APPROVAL_GAS_SPONSORING);
        }
        kinds
    }

    fn decode(&self, payload: &PaymentPayload, asset: &Asset) -> Proof {
        decode(payload, asset)
    }

    async fn check(
        &self,
        proof: &Proof,
        terms: &Terms,
        settler: Settler,
        intent: Intent,
        now: i64,
    ) -> Result<Checked, ProofError> {
        let pay_to = address(&terms.pay_to)
            .ok_or_else(|| refuse(Reason::InvalidPaymentRequirements, "payTo must be an EVM address"))?;
        // Nobody's wallet: what arrives there is read as batch-settlement deposits (see `read`).
        if pay_to == tollgate_encoding::batch::BATCH_SETTLEMENT {
            return Err(refuse(
                Reason::InvalidPaymentRequirements,
                "payTo is the batch-settlement contract, which is nobody's wallet",
            ));
        }
        match proof.reading::<Reading>()? {
            Reading::Native(native) => exact_native::check(self, native, terms, &pay_to, settler).await,
            Reading::Authorization(a) => exact::check(self, a, terms, (&pay_to, now), (settler, intent)).await,
            Reading::Permit2(t) => permit2::check(self, t, terms, (&pay_to, now), (settler, intent)).await,
            Reading::Unsupported(other) => {
                Err(refuse(Reason::UnsupportedScheme, format!("unsupported scheme {other}")))
            }
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

    async fn outcome(&self, tx: &Watched<'_>) -> Result<Option<Landed>, ChainError> {
        Ok(match self.read(tx, hash_of(tx.id)?).await? {
            Read::Landed(landed) => Some(landed),
            Read::Shallow | Read::NotMined => None,
        })
    }

    /// Mined (at any age) deep enough, or — its sender's nonce taken by another transaction —
    /// dropped.
    async fn status(&self, tx: &Watched<'_>) -> Result<TxStatus, ChainError> {
        let hash = hash_of(tx.id)?;
        match self.read(tx, hash).await? {
            Read::Landed(landed) => return Ok(TxStatus::Landed(landed)),
            Read::Shallow => return Ok(TxStatus::Unseen),
            Read::NotMined => {}
        }
        // Its sender: a signed transaction's signer, else (as built for local mode) the payer.
        let signed =
            tx.raw.and_then(|raw| verify::decode_bytes(raw).ok()).and_then(|(e, _)| verify::sender_and_nonce(&e));
        let built = || Some((tx.parties.from.parse().ok()?, build::nonce(tx.raw?)?));
        let Some((sender, nonce)) = signed.or_else(built) else {
            return Ok(TxStatus::Unseen);
        };
        if self.rpc.mined_nonce(sender).await? <= nonce {
            return Ok(TxStatus::Unseen);
        }
        // Nonce taken: unless it is this very transaction (mined between the two calls), it
        // can never land.
        Ok(match self.read(tx, hash).await? {
            Read::Landed(landed) => TxStatus::Landed(landed),
            Read::Shallow => TxStatus::Unseen,
            Read::NotMined => {
                TxStatus::Dropped { reason: format!("nonce {nonce} of {sender} was used by another transaction") }
            }
        })
    }

    fn transaction_id(&self, tx: &str) -> Option<String> {
        tx.parse::<B256>().ok().map(|h| format!("{h:#x}"))
    }

    async fn token_info(&self, address: &tollgate_protocol::Address) -> Result<Option<TokenInfo>, ChainError> {
        match self::address(address) {
            Some(contract) => erc20::token_info(&self.rpc, contract).await,
            None => Ok(None),
        }
    }

    async fn verify_message(
        &self,
        address: &tollgate_protocol::Address,
        message: &str,
        signature: &str,
    ) -> Result<crate::chains::Signer, ProofError> {
        let refused = |why: &str| ProofError::Refused(Refusal::new(Reason::SignInSignature, why.to_owned()));
        let signer = self::address(address).ok_or_else(|| refused("the signer is not an EVM address"))?;
        let bytes = signature
            .strip_prefix("0x")
            .and_then(|h| alloy::primitives::hex::decode(h).ok())
            .ok_or_else(|| refused("the signature is not 0x-hex"))?;
        // EIP-191 (`personal_sign`): the key's own signature, recovered here, or its wallet's.
        let digest = alloy::primitives::eip191_hash_message(message.as_bytes());
        if verify::recover_signer(&digest, &bytes) == Some(signer) {
            return Ok(crate::chains::Signer::Key);
        }
        if erc20::wallet_accepts(&self.rpc, signer, digest, &bytes).await? {
            return Ok(crate::chains::Signer::Contract);
        }
        Err(refused("the signature is neither the address's key's nor its wallet contract's (EIP-1271)"))
    }
}
