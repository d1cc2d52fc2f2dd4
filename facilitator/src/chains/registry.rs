//! [`Chains`]: the networks this daemon serves, each behind its [`Chain`], with a default network
//! per address family; and what a request that names no served network is told ([`Unserved`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use tollgate_protocol::x402::{SCHEME_EXACT, SCHEME_EXACT_NATIVE, SCHEME_UPTO, Supported, SupportedKind};
use tollgate_protocol::{ChainFamily, Network};

use super::{Chain, ChainError, Kinds, SolanaBackend, evm};

/// Why a request names no chain this daemon serves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unserved {
    /// `network` is of another family than the addresses.
    #[error("network {network} is not a {family} network, but the addresses are {family} addresses")]
    WrongFamily {
        /// The network given.
        network: Network,
        /// The addresses' family.
        family: ChainFamily,
    },
    /// No chain serves it.
    #[error("no chain backend configured for {0}")]
    Unavailable(String),
}

/// The networks this daemon serves, with a default per family.
#[derive(Debug, Clone, Default)]
pub struct Chains {
    defaults: BTreeMap<ChainFamily, Network>,
    all: BTreeMap<Network, Arc<dyn Chain>>,
    solana: BTreeMap<Network, Arc<SolanaBackend>>,
    evm: BTreeMap<Network, Arc<evm::EvmBackend>>,
}

impl Chains {
    /// No chain at all.
    #[must_use]
    pub fn none() -> Self {
        Self::default()
    }

    /// Adds a chain; the first one of its family becomes that family's default.
    #[must_use]
    pub fn with(mut self, chain: Arc<dyn Chain>) -> Self {
        let network = chain.network().clone();
        self.defaults.entry(network.family()).or_insert_with(|| network.clone());
        self.all.insert(network, chain);
        self
    }

    /// Adds a Solana network.
    #[must_use]
    pub fn with_solana(mut self, backend: SolanaBackend) -> Self {
        let backend = Arc::new(backend);
        self.solana.insert(backend.rpc.network().clone(), backend.clone());
        self.with(backend)
    }

    /// Adds an EVM chain.
    #[must_use]
    pub fn with_evm(mut self, backend: evm::EvmBackend) -> Self {
        let backend = Arc::new(backend);
        self.evm.insert(backend.rpc.network().clone(), backend.clone());
        self.with(backend)
    }

    /// The chain serving `network`.
    ///
    /// # Errors
    /// [`Unserved::Unavailable`] when none does.
    pub fn get(&self, network: &Network) -> Result<Arc<dyn Chain>, Unserved> {
        self.all.get(network).cloned().ok_or_else(|| Unserved::Unavailable(network.to_string()))
    }

    /// The network meant by addresses of `family` and an optional explicit `network`.
    ///
    /// # Errors
    /// [`Unserved`] when `network` is of another family, or none is given and the family has no
    /// default.
    pub fn network_for(&self, family: ChainFamily, network: Option<&Network>) -> Result<Network, Unserved> {
        match network {
            Some(n) if n.family() != family => Err(Unserved::WrongFamily { network: n.clone(), family }),
            Some(n) => Ok(n.clone()),
            None => self
                .defaults
                .get(&family)
                .cloned()
                .ok_or_else(|| Unserved::Unavailable(format!("{family} (no network given and none configured)"))),
        }
    }

    /// The EVM backend of `network` (tests and the demo reach its RPC).
    #[must_use]
    pub fn evm(&self, network: &Network) -> Option<Arc<evm::EvmBackend>> {
        self.evm.get(network).cloned()
    }

    /// The networks served.
    #[must_use]
    pub fn served(&self) -> Vec<Network> {
        self.all.keys().cloned().collect()
    }

    /// The embedded development ledger, if this daemon runs one.
    #[must_use]
    pub fn embedded_solana(&self) -> Option<Arc<SolanaBackend>> {
        self.solana.values().find(|b| b.is_embedded()).cloned()
    }

    /// Asks each served chain's RPC for its height, at once: the answer or why not, per network.
    pub async fn probe_rpcs(&self) -> Vec<(Network, Result<u64, ChainError>)> {
        let solana = self.solana.iter().map(|(n, b)| async move { (n.clone(), b.rpc.block_height().await) });
        let evm = self.evm.iter().map(|(n, b)| async move { (n.clone(), b.rpc.block_number().await) });
        let (mut solana, evm) =
            futures_util::future::join(futures_util::future::join_all(solana), futures_util::future::join_all(evm))
                .await;
        solana.extend(evm);
        solana
    }

    /// The native balances of the facilitator's own accounts (Solana fee payers, EVM signers), at
    /// once: (network, role, address, atomic units or why not).
    pub async fn signer_balances(&self) -> Vec<(Network, &'static str, String, Result<u128, ChainError>)> {
        let solana = self.solana.iter().filter_map(|(n, b)| {
            let payer = solana_sdk::signer::Signer::pubkey(&*b.sponsor.as_ref()?.keypair);
            Some(
                async move { (n.clone(), "fee_payer", payer.to_string(), b.rpc.balance(&payer).await.map(u128::from)) },
            )
        });
        let evm = self.evm.iter().filter_map(|(n, b)| {
            let signer = b.signer.as_ref()?.0.address();
            Some(async move {
                let balance = b.rpc.balance(signer).await.map(|w| u128::try_from(w).unwrap_or(u128::MAX));
                (n.clone(), "signer", signer.to_checksum(None), balance)
            })
        });
        let (mut solana, evm) =
            futures_util::future::join(futures_util::future::join_all(solana), futures_util::future::join_all(evm))
                .await;
        solana.extend(evm);
        solana
    }

    /// The x402 kinds (version, scheme, network) the served networks settle, each in its v1 and
    /// v2 form, with the facilitator's signer of each network.
    #[must_use]
    pub fn supported(&self) -> Supported {
        let mut kinds = Vec::new();
        let mut signers = serde_json::Map::new();
        let mut extensions = Vec::new();
        for (network, chain) in &self.all {
            let Kinds { schemes, signer, extensions: honoured } = chain.kinds();
            for extension in honoured {
                if !extensions.iter().any(|e| e == extension) {
                    extensions.push(extension.to_owned());
                }
            }
            for (version, name) in [(1, network.v1_name_or_caip2()), (2, network.to_string())] {
                // `upto` and `batch-settlement` are x402 v2 schemes.
                let v2_only = |s: &str| s == SCHEME_UPTO || s == tollgate_protocol::x402::batch::SCHEME;
                for (scheme, extra) in schemes.iter().filter(|(s, _)| version == 2 || !v2_only(s)) {
                    kinds.push(SupportedKind {
                        x402_version: version,
                        scheme: (*scheme).to_owned(),
                        network: name.clone(),
                        extra: extra.clone(),
                    });
                }
            }
            if let Some(signer) = signer {
                signers.insert(network.to_string(), serde_json::json!([signer]));
            }
        }
        Supported { kinds, extensions, signers }
    }
}

/// The schemes of a chain whose facilitator signer is `signer`: `exact-native` always, `exact`
/// with a signer (`extra` as the chain publishes it).
#[must_use]
pub fn schemes_with(signer: Option<&str>, exact_extra: Option<serde_json::Value>) -> Kinds {
    let mut schemes = vec![(SCHEME_EXACT_NATIVE, None)];
    if signer.is_some() {
        schemes.push((SCHEME_EXACT, exact_extra));
    }
    Kinds { schemes, signer: signer.map(str::to_owned), extensions: Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_for_requests_and_honest_refusal() {
        let chains = Chains::none();
        assert_eq!(chains.network_for(ChainFamily::Evm, Some(&Network::eip155(8453))), Ok(Network::eip155(8453)));
        let e = chains.get(&Network::eip155(8453)).unwrap_err();
        assert_eq!(e.to_string(), "no chain backend configured for eip155:8453");
        let none = chains.network_for(ChainFamily::Solana, None).unwrap_err();
        assert!(none.to_string().starts_with("no chain backend configured for solana"), "{none}");
        let mismatch = chains.network_for(ChainFamily::Solana, Some(&Network::eip155(1))).unwrap_err();
        assert!(matches!(mismatch, Unserved::WrongFamily { .. }));
        assert!(chains.supported().kinds.is_empty());
    }
}
