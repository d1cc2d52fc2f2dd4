//! Which chain a request is about, and whether this daemon can serve it.
//!
//! A request names a chain through its addresses (the family) and an optional CAIP-2 `network`;
//! [`Chains::target`] turns that into a [`Target`]. The Solana and EVM backends are added by
//! their own work items; until a backend serves a network, every request for it answers
//! `502 PAYMENT_VERIFICATION_FAILED` "no chain backend configured for <network>"
//! ([`Chains::unavailable`]), the same answer as for a network the operator did not configure.

pub mod evm;
pub mod solana;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use tollgate_protocol::x402::{SCHEME_EXACT, SCHEME_EXACT_NATIVE, Supported, SupportedKind};
use tollgate_protocol::{ChainFamily, Network};

use crate::error::ApiError;

/// A chain node could not be asked (down, slow, or answered nonsense).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ChainError(pub String);

impl From<ChainError> for ApiError {
    fn from(e: ChainError) -> Self {
        Self::verification_failed(e.0)
    }
}

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
    chain: &str,
    limit: std::time::Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, ChainError> {
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ChainError(format!("{chain} RPC {what} failed: {e}"))),
        Err(_) => Err(ChainError(format!("{chain} RPC {what}: no answer within {limit:?}"))),
    }
}

/// Why a signed transaction was not (known to be) accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The node refused it: it was not broadcast and will not land.
    #[error("rejected: {0}")]
    Rejected(String),
    /// No clear answer: it may or may not have reached the chain.
    #[error("outcome unknown: {0}")]
    Uncertain(String),
}

/// What the chain says about a broadcast transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxOutcome {
    /// Confirmed, with the fee when the chain reports it.
    Confirmed {
        /// Fee in native atomic units.
        fee: Option<tollgate_protocol::AtomicAmount>,
    },
    /// Landed and failed, or can no longer land.
    Failed {
        /// Why.
        reason: String,
    },
}

/// What the settlement engine needs from a chain: broadcast and watch transactions.
#[async_trait]
pub trait Ledger: Send + Sync {
    /// The chain's CAIP-2 id.
    fn network(&self) -> &Network;
    /// Broadcasts a signed transaction (chain-specific wire bytes).
    async fn broadcast(&self, tx: &[u8]) -> Result<(), SendError>;
    /// The outcome of a transaction, `None` while the chain has no verdict.
    async fn outcome(&self, tx_id: &str) -> Result<Option<TxOutcome>, ChainError>;
}

/// A Solana network served by this daemon.
#[derive(Debug)]
pub struct SolanaBackend {
    /// Its RPC.
    pub rpc: solana::rpc::SolanaRpc,
    /// The facilitator's fee payer for x402 `exact` (SPL) payments; `None` disables them.
    pub sponsor: Option<Sponsor>,
    /// The in-process ledger behind the RPC, when this is the development ledger.
    #[cfg(feature = "embedded-ledger")]
    pub embedded: Option<solana::embedded::EmbeddedLedger>,
}

/// The key that pays the fees of x402 `exact` Solana payments, and how much it will pay.
pub struct Sponsor {
    /// The fee payer.
    pub keypair: solana_sdk::signature::Keypair,
    /// Caps on what it sponsors.
    pub policy: solana::spl::SponsorPolicy,
}

impl std::fmt::Debug for Sponsor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use solana_sdk::signer::Signer as _;
        f.debug_struct("Sponsor").field("pubkey", &self.keypair.pubkey()).field("policy", &self.policy).finish()
    }
}

impl SolanaBackend {
    /// A backend over `rpc`, without fee payer.
    #[must_use]
    pub const fn new(rpc: solana::rpc::SolanaRpc) -> Self {
        Self {
            rpc,
            sponsor: None,
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
    pub fn with_embedded(mut self, ledger: solana::embedded::EmbeddedLedger) -> Self {
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
    pub fn fee_payer(&self) -> Option<solana_sdk::pubkey::Pubkey> {
        use solana_sdk::signer::Signer as _;
        self.sponsor.as_ref().map(|s| s.keypair.pubkey())
    }
}

/// The chain a request is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An explicit (or default) network.
    Network(Network),
    /// Only the family is known: no `network` given and no default for the family.
    Family(ChainFamily),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Network(n) => n.fmt(f),
            Self::Family(family) => write!(f, "{family} (no network given and none configured)"),
        }
    }
}

/// The networks this daemon serves, with a default per family.
#[derive(Debug, Clone, Default)]
pub struct Chains {
    defaults: BTreeMap<ChainFamily, Network>,
    solana: BTreeMap<Network, Arc<SolanaBackend>>,
    evm: BTreeMap<Network, Arc<evm::EvmBackend>>,
}

/// The backend of one served network.
#[derive(Debug, Clone)]
pub enum Backend {
    /// A Solana cluster.
    Solana(Arc<SolanaBackend>),
    /// An EVM chain.
    Evm(Arc<evm::EvmBackend>),
}

impl Backend {
    /// Its ledger, for the settlement engine.
    #[must_use]
    pub fn ledger(&self) -> &dyn Ledger {
        match self {
            Self::Solana(b) => &b.rpc,
            Self::Evm(b) => &b.rpc,
        }
    }
}

impl Chains {
    /// No chain backend at all.
    #[must_use]
    pub fn none() -> Self {
        Self::default()
    }

    /// Adds a Solana network; the first one added becomes the default for Solana addresses.
    #[must_use]
    pub fn with_solana(mut self, backend: SolanaBackend) -> Self {
        let network = backend.rpc.network().clone();
        self.defaults.entry(ChainFamily::Solana).or_insert_with(|| network.clone());
        self.solana.insert(network, Arc::new(backend));
        self
    }

    /// Adds an EVM chain; the first one added becomes the default for EVM addresses.
    #[must_use]
    pub fn with_evm(mut self, backend: evm::EvmBackend) -> Self {
        let network = backend.rpc.network().clone();
        self.defaults.entry(ChainFamily::Evm).or_insert_with(|| network.clone());
        self.evm.insert(network, Arc::new(backend));
        self
    }

    /// The EVM backend serving `target`.
    ///
    /// # Errors
    /// 502 `PAYMENT_VERIFICATION_FAILED` when none does.
    pub fn evm(&self, target: &Target) -> Result<Arc<evm::EvmBackend>, ApiError> {
        match target {
            Target::Network(n) => self.evm.get(n).cloned().ok_or_else(|| self.unavailable(target)),
            Target::Family(_) => Err(self.unavailable(target)),
        }
    }

    /// The backend serving `target`, whatever its chain.
    ///
    /// # Errors
    /// 502 `PAYMENT_VERIFICATION_FAILED` when none does.
    pub fn backend(&self, target: &Target) -> Result<Backend, ApiError> {
        match target {
            Target::Network(n) if n.family() == ChainFamily::Solana => self.solana(target).map(Backend::Solana),
            Target::Network(_) => self.evm(target).map(Backend::Evm),
            Target::Family(_) => Err(self.unavailable(target)),
        }
    }

    /// The Solana backend serving `target`.
    ///
    /// # Errors
    /// 502 `PAYMENT_VERIFICATION_FAILED` when none does.
    pub fn solana(&self, target: &Target) -> Result<Arc<SolanaBackend>, ApiError> {
        match target {
            Target::Network(n) => self.solana.get(n).cloned().ok_or_else(|| self.unavailable(target)),
            Target::Family(_) => Err(self.unavailable(target)),
        }
    }

    /// The networks with a backend.
    #[must_use]
    pub fn served(&self) -> Vec<Network> {
        self.solana.keys().chain(self.evm.keys()).cloned().collect()
    }

    /// The embedded development ledger, if this daemon runs one.
    #[must_use]
    pub fn embedded_solana(&self) -> Option<Arc<SolanaBackend>> {
        self.solana.values().find(|b| b.is_embedded()).cloned()
    }

    /// The x402 kinds (version, scheme, network) the served networks settle, each in its v1 and
    /// v2 form: `exact-native` on every Solana network, and `exact` (SPL) with its `feePayer`
    /// where a fee payer is configured. `signers` lists the fee payers by network.
    #[must_use]
    pub fn supported(&self) -> Supported {
        let mut kinds = Vec::new();
        let mut signers = serde_json::Map::new();
        for (network, backend) in &self.solana {
            let fee_payer = backend.fee_payer().map(|k| k.to_string());
            for (version, name) in [(1, network.v1_name_or_caip2()), (2, network.to_string())] {
                kinds.push(SupportedKind {
                    x402_version: version,
                    scheme: SCHEME_EXACT_NATIVE.to_owned(),
                    network: name.clone(),
                    extra: None,
                });
                if let Some(fee_payer) = &fee_payer {
                    kinds.push(SupportedKind {
                        x402_version: version,
                        scheme: SCHEME_EXACT.to_owned(),
                        network: name,
                        extra: Some(serde_json::json!({ "feePayer": fee_payer })),
                    });
                }
            }
            if let Some(fee_payer) = fee_payer {
                signers.insert(network.to_string(), serde_json::json!([fee_payer]));
            }
        }
        for (network, backend) in &self.evm {
            let signer = backend.signer.as_ref().map(|s| s.0.address().to_string());
            for (version, name) in [(1, network.v1_name_or_caip2()), (2, network.to_string())] {
                let mut schemes = vec![SCHEME_EXACT_NATIVE];
                if signer.is_some() {
                    schemes.push(SCHEME_EXACT);
                }
                for scheme in schemes {
                    kinds.push(SupportedKind {
                        x402_version: version,
                        scheme: scheme.to_owned(),
                        network: name.clone(),
                        extra: None,
                    });
                }
            }
            if let Some(signer) = signer {
                signers.insert(network.to_string(), serde_json::json!([signer]));
            }
        }
        Supported { kinds, extensions: Vec::new(), signers }
    }

    /// The chain meant by addresses of `family` and an optional explicit `network`.
    ///
    /// # Errors
    /// 400 `INVALID_PARAMETERS` when `network` is of another family than the addresses.
    pub fn target(&self, family: ChainFamily, network: Option<&Network>) -> Result<Target, ApiError> {
        match network {
            Some(n) if n.family() != family => Err(ApiError::invalid_params(format!(
                "network {n} is not a {family} network, but the addresses are {family} addresses"
            ))),
            Some(n) => Ok(Target::Network(n.clone())),
            None => Ok(self.defaults.get(&family).map_or(Target::Family(family), |n| Target::Network(n.clone()))),
        }
    }

    /// The answer for a chain no backend serves.
    #[must_use]
    pub fn unavailable(&self, target: &Target) -> ApiError {
        ApiError::verification_failed(format!("no chain backend configured for {target}")).with_remedy(
            "Configure a chain backend for this network, or use a network the facilitator serves (see GET /supported)",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_protocol::ErrorCode;

    #[test]
    fn targets_and_honest_refusal() {
        let chains = Chains::none();
        let t = chains.target(ChainFamily::Evm, Some(&Network::eip155(8453))).unwrap();
        let e = chains.unavailable(&t);
        assert_eq!(e.code(), ErrorCode::PaymentVerificationFailed);
        assert_eq!(e.message(), "no chain backend configured for eip155:8453");
        let t = chains.target(ChainFamily::Solana, None).unwrap();
        assert_eq!(t, Target::Family(ChainFamily::Solana));
        assert!(chains.unavailable(&t).message().starts_with("no chain backend configured for solana"));
        let mismatch = chains.target(ChainFamily::Solana, Some(&Network::eip155(1))).unwrap_err();
        assert_eq!(mismatch.code(), ErrorCode::InvalidParameters);
        assert!(chains.supported().kinds.is_empty());
    }
}

#[cfg(test)]
mod poll_tests {
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
