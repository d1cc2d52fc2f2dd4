//! Solana: one JSON-RPC code path ([`rpc::SolanaRpc`]) for devnet, mainnet and the embedded
//! ledger ([`embedded::EmbeddedLedger`]), and the [`Chain`] it serves, split by scheme:
//!
//! | module | what |
//! |---|---|
//! | [`exact_native`] | `exact-native` proofs: a signed System transfer, or a receipt of a confirmed one |
//! | [`exact`] | x402 `exact`: an SPL `TransferChecked` the facilitator (or the seller) sponsors |
//! | [`send`] | hosted sends from custodial wallets, local-mode builds, reported transactions |
//! | [`verify`], [`spl`] | the rules a transaction must follow, checked without the chain |
//! | [`build`], [`token`] | native transfer messages and receipts; mint accounts |

pub mod build;
#[cfg(feature = "embedded-ledger")]
pub mod embedded;
pub mod exact;
pub mod exact_native;
pub mod rpc;
pub mod send;
pub mod spl;
pub mod token;
pub mod verify;

use std::sync::Arc;

use async_trait::async_trait;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signature};
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::VersionedTransaction;
use tollgate_protocol::gateway::TokenInfo;
use tollgate_protocol::x402::{Asset, PaymentPayload, SCHEME_EXACT, SCHEME_EXACT_NATIVE};
use tollgate_protocol::{Address, Network};

use super::{
    Chain, ChainError, Checked, Intent, Kinds, Landed, Order, OrderError, PlannedSend, Proof, ProofError, Reason,
    Refusal, SendError, Settler, Terms, TxStatus, Unsigned, Watched,
};

/// Lamports in one SOL.
pub const LAMPORTS_PER_SOL: u64 = 1_000_000_000;

/// The key that pays the fees of x402 `exact` Solana payments, and how much it will pay.
pub struct Sponsor {
    /// The fee payer.
    pub keypair: Arc<Keypair>,
    /// Caps on what it sponsors.
    pub policy: spl::SponsorPolicy,
}

impl Sponsor {
    /// `keypair` sponsoring within `policy`.
    #[must_use]
    pub fn new(keypair: Keypair, policy: spl::SponsorPolicy) -> Self {
        Self { keypair: Arc::new(keypair), policy }
    }
}

impl std::fmt::Debug for Sponsor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sponsor").field("pubkey", &self.keypair.pubkey()).field("policy", &self.policy).finish()
    }
}

/// A Solana network served by this daemon.
#[derive(Debug)]
pub struct SolanaBackend {
    /// Its RPC.
    pub rpc: rpc::SolanaRpc,
    /// The facilitator's fee payer for x402 `exact` (SPL) payments; `None` disables them.
    pub sponsor: Option<Sponsor>,
    /// Mints' token program and decimals, remembered between requests.
    pub mints: super::memo::Facts<Pubkey, (Pubkey, u8)>,
    /// Sponsored transfers a verify checked moments ago.
    pub passed: super::memo::Passed,
    /// The cluster's lamports per signature, learned from a fee answer for a message without
    /// priority fee and remembered for a while: meanwhile fees are derived from a transaction's
    /// signatures and compute-unit price.
    pub signature_fee: super::memo::Facts<(), u64>,
    /// The rent-exempt minimum of an account without data, once learned.
    pub rent_minimum: super::memo::Facts<(), u64>,
    /// Payees found holding lamports (a payment of any amount to them lands), for a while.
    pub funded_payees: super::memo::Facts<Pubkey, ()>,
    /// The in-process ledger behind the RPC, when this is the development ledger.
    #[cfg(feature = "embedded-ledger")]
    pub embedded: Option<embedded::EmbeddedLedger>,
}

impl SolanaBackend {
    /// A backend over `rpc`, without fee payer.
    #[must_use]
    pub fn new(rpc: rpc::SolanaRpc) -> Self {
        Self {
            rpc,
            sponsor: None,
            mints: super::memo::Facts::default(),
            passed: super::memo::Passed::default(),
            signature_fee: super::memo::Facts::default(),
            rent_minimum: super::memo::Facts::default(),
            funded_payees: super::memo::Facts::default(),
            #[cfg(feature = "embedded-ledger")]
            embedded: None,
        }
    }

    /// The same backend, paying the fees of x402 `exact` payments with `sponsor`.
    #[must_use]
    pub fn with_sponsor(mut self, sponsor: Sponsor) -> Self {
        self.sponsor = Some(sponsor);
        self
    }

    /// The same backend, keeping the embedded ledger behind its RPC alive.
    #[cfg(feature = "embedded-ledger")]
    #[must_use]
    pub fn with_embedded(mut self, ledger: embedded::EmbeddedLedger) -> Self {
        self.embedded = Some(ledger);
        self
    }

    /// Whether this is the embedded development ledger (airdrops allowed).
    #[must_use]
    pub fn is_embedded(&self) -> bool {
        #[cfg(feature = "embedded-ledger")]
        return self.embedded.is_some();
        #[cfg(not(feature = "embedded-ledger"))]
        return false;
    }

    /// The fee payer's address, when x402 `exact` is served.
    #[must_use]
    pub fn fee_payer(&self) -> Option<Pubkey> {
        self.sponsor.as_ref().map(|s| s.keypair.pubkey())
    }
}

/// A Solana payment payload read once ([`Chain::decode`]), per scheme: what its check takes, or
/// why it cannot be read (said in the check's turn).
enum Reading {
    /// `exact-native`: a signed System transfer, or a receipt of a confirmed one.
    Native(Result<exact_native::Native, Refusal>),
    /// x402 `exact`: the buyer's SPL transfer, for a sponsor to sign.
    Sponsored(Result<VersionedTransaction, Refusal>),
    /// A scheme not served here.
    Unsupported(String),
}

fn refuse(reason: Reason, message: impl Into<String>) -> ProofError {
    ProofError::Refused(Refusal::new(reason, message))
}

/// Proof identity of a Solana payment: network and the payer's signature.
fn proof_id(network: &Network, signature: &str) -> String {
    format!("{network}:{signature}")
}

/// What a Solana transaction's signers sign: SHA-256 of its message, hex.
fn message_identity(message: &solana_sdk::message::VersionedMessage) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(message.serialize()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes a Solana transaction is broadcast as.
fn encode(tx: &VersionedTransaction) -> Result<Vec<u8>, ChainError> {
    bincode::serialize(tx).map_err(|e| ChainError(format!("cannot encode the transaction: {e}")))
}

fn keypair(key: &[u8]) -> Result<Keypair, ChainError> {
    Keypair::try_from(key).map_err(|_| ChainError("the wallet's key is not a Solana keypair".into()))
}

/// [`Chain::decode`] on Solana, which needs nothing of the backend: the payload read once by its
/// scheme, and the signature it is claimed under — the payer's (the second) for `exact`, the
/// transfer's first or the receipt's for `exact-native`.
#[must_use]
pub fn decode(payload: &PaymentPayload) -> Proof {
    let reading = match payload.scheme() {
        SCHEME_EXACT_NATIVE => Reading::Native(exact_native::read(payload)),
        SCHEME_EXACT => Reading::Sponsored(exact::read(payload)),
        other => Reading::Unsupported(other.to_owned()),
    };
    let signature = match &reading {
        Reading::Native(Ok(native)) => Some(native.identity()),
        Reading::Sponsored(Ok(tx)) => exact::identity(tx),
        Reading::Native(Err(_)) | Reading::Sponsored(Err(_)) | Reading::Unsupported(_) => None,
    };
    Proof::new(signature.map(|s| proof_id(payload.network(), &s)), reading)
}

#[async_trait]
impl Chain for SolanaBackend {
    fn network(&self) -> &Network {
        self.rpc.network()
    }

    fn kinds(&self) -> Kinds {
        let fee_payer = self.fee_payer().map(|k| k.to_string());
        let extra = fee_payer.as_ref().map(|f| serde_json::json!({ "feePayer": f }));
        super::schemes_with(fee_payer.as_deref(), extra)
    }

    fn decode(&self, payload: &PaymentPayload, _asset: &Asset) -> Proof {
        decode(payload)
    }

    async fn check(
        &self,
        proof: &Proof,
        terms: &Terms,
        settler: Settler,
        intent: Intent,
        _now: i64,
    ) -> Result<Checked, ProofError> {
        let pay_to = build::pubkey(&terms.pay_to)
            .ok_or_else(|| refuse(Reason::InvalidPaymentRequirements, "payTo must be a Solana address"))?;
        match proof.reading::<Reading>()? {
            Reading::Native(native) => exact_native::check(self, native, terms, &pay_to, (settler, intent)).await,
            Reading::Sponsored(tx) => exact::check(self, tx, terms, &pay_to, (settler, intent)).await,
            Reading::Unsupported(other) => {
                Err(refuse(Reason::UnsupportedScheme, format!("unsupported scheme {other}")))
            }
        }
    }

    async fn plan_send(&self, order: &Order, key: &[u8]) -> Result<PlannedSend, OrderError> {
        send::plan(&self.rpc, order, keypair(key)?).await
    }

    async fn build(&self, order: &Order) -> Result<Unsigned, OrderError> {
        send::build(&self.rpc, order).await
    }

    fn signed_identity(&self, transaction: &[u8]) -> Option<String> {
        let tx: VersionedTransaction = bincode::deserialize(transaction).ok()?;
        Some(message_identity(&tx.message))
    }

    fn sign_receipt(
        &self,
        key: &[u8],
        tx_id: &str,
        pay_to: &Address,
        resource: Option<&str>,
    ) -> Result<String, ChainError> {
        build::signed_receipt(&keypair(key)?, self.rpc.network(), tx_id, pay_to, resource)
            .map_err(|e| ChainError(format!("cannot write the receipt: {e}")))
    }

    async fn broadcast(&self, raw: &[u8]) -> Result<(), SendError> {
        self.rpc.send_raw(raw).await.map(|_| ())
    }

    async fn outcome(&self, tx: &Watched<'_>) -> Result<Option<Landed>, ChainError> {
        let signature = signature(tx.id)?;
        if self.rpc.outcome(&signature, false).await?.is_none() {
            return Ok(None);
        }
        self.landed(tx, &signature).await
    }

    async fn status(&self, tx: &Watched<'_>) -> Result<TxStatus, ChainError> {
        let signature = signature(tx.id)?;
        if self.rpc.outcome(&signature, true).await?.is_some() {
            // Landed; read whole (a node that has its status but not yet the transaction is
            // asked again later).
            return Ok(self.landed(tx, &signature).await?.map_or(TxStatus::Unseen, TxStatus::Landed));
        }
        let Some(last_valid) = tx.horizon else { return Ok(TxStatus::Unseen) };
        let height = self.rpc.block_height().await?;
        if height <= last_valid {
            return Ok(TxStatus::Unseen);
        }
        // Past the horizon: it can no longer land. Ask once more, so a confirmation that raced
        // the height check is not missed.
        Ok(match self.landed(tx, &signature).await? {
            Some(landed) => TxStatus::Landed(landed),
            None => TxStatus::Dropped {
                reason: format!("block height {height} passed {last_valid} without the transaction"),
            },
        })
    }

    fn transaction_id(&self, tx: &str) -> Option<String> {
        tx.parse::<Signature>().ok().map(|s| s.to_string())
    }

    async fn token_info(&self, address: &Address) -> Result<Option<TokenInfo>, ChainError> {
        match build::pubkey(address) {
            Some(mint) => token::token_info(&self.rpc, &mint).await,
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
        let tollgate_protocol::Address::Solana(key) = address else {
            return Err(refused("the signer is not a Solana address"));
        };
        let signature: solana_sdk::signature::Signature =
            signature.parse().map_err(|_| refused("the signature is not 64 bytes of base58"))?;
        if signature.verify(key, message.as_bytes()) {
            Ok(crate::chains::Signer::Key)
        } else {
            Err(refused("the signature is not the address's key's"))
        }
    }
}

impl SolanaBackend {
    /// A payment's transaction read whole: what its signers signed, and what arrived at the
    /// payee (its balance before and after); `None` while the cluster does not have it.
    async fn landed(&self, tx: &Watched<'_>, signature: &Signature) -> Result<Option<Landed>, ChainError> {
        let Some(seen) = self.rpc.confirmed_transaction(signature).await? else { return Ok(None) };
        let unreadable = || ChainError("the stored payment has unreadable addresses".into());
        let to: Pubkey = tx.parties.to.parse().map_err(|_| unreadable())?;
        let mint: Option<Pubkey> = match tx.parties.asset {
            "native" => None,
            mint => Some(mint.parse().map_err(|_| unreadable())?),
        };
        Ok(Some(Landed {
            tx_id: signature.to_string(),
            signed: message_identity(&seen.transaction.message),
            arrived: seen.arrived(&to, mint.as_ref()),
            error: seen.error,
            fee: seen.fee.map(tollgate_protocol::AtomicAmount::from),
        }))
    }
}

fn signature(tx_id: &str) -> Result<Signature, ChainError> {
    tx_id.parse().map_err(|_| ChainError(format!("not a Solana signature: {tx_id}")))
}
