//! Which chain a request is about, and whether this daemon can serve it.
//!
//! A request names a chain through its addresses (the family) and an optional CAIP-2 `network`;
//! [`Chains::target`] turns that into a [`Target`]. The Solana and EVM backends are added by
//! their own work items; until a backend serves a network, every request for it answers
//! `502 PAYMENT_VERIFICATION_FAILED` "no chain backend configured for <network>"
//! ([`Chains::unavailable`]), the same answer as for a network the operator did not configure.

use std::collections::BTreeMap;

use tollgate_protocol::x402::SupportedKind;
use tollgate_protocol::{ChainFamily, Network};

use crate::error::ApiError;

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
}

impl Chains {
    /// No chain backend at all.
    #[must_use]
    pub fn none() -> Self {
        Self::default()
    }

    /// Networks served, in a stable order.
    #[must_use]
    pub fn networks(&self) -> Vec<Network> {
        self.defaults.values().cloned().collect()
    }

    /// The x402 kinds (version, scheme, network) the served networks settle. Each backend
    /// contributes its own; with none, there are none.
    #[must_use]
    pub fn supported_kinds(&self) -> Vec<SupportedKind> {
        Vec::new()
    }

    /// The chain meant by addresses of `family` and an optional explicit `network`.
    ///
    /// # Errors
    /// 400 `INVALID_PARAMETERS` when `network` is of another family than the addresses.
    pub fn target(
        &self,
        family: ChainFamily,
        network: Option<&Network>,
    ) -> Result<Target, ApiError> {
        match network {
            Some(n) if n.family() != family => Err(ApiError::invalid_params(format!(
                "network {n} is not a {family} network, but the addresses are {family} addresses"
            ))),
            Some(n) => Ok(Target::Network(n.clone())),
            None => Ok(self
                .defaults
                .get(&family)
                .map_or(Target::Family(family), |n| Target::Network(n.clone()))),
        }
    }

    /// The answer for a chain no backend serves.
    #[must_use]
    pub fn unavailable(&self, target: &Target) -> ApiError {
        ApiError::verification_failed(format!("no chain backend configured for {target}"))
            .with_remedy("Configure a chain backend for this network, or use a network the facilitator serves (see GET /supported)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_protocol::ErrorCode;

    #[test]
    fn targets_and_honest_refusal() {
        let chains = Chains::none();
        let t = chains
            .target(ChainFamily::Evm, Some(&Network::eip155(8453)))
            .unwrap();
        let e = chains.unavailable(&t);
        assert_eq!(e.code(), ErrorCode::PaymentVerificationFailed);
        assert_eq!(e.message(), "no chain backend configured for eip155:8453");
        let t = chains.target(ChainFamily::Solana, None).unwrap();
        assert_eq!(t, Target::Family(ChainFamily::Solana));
        assert!(
            chains
                .unavailable(&t)
                .message()
                .starts_with("no chain backend configured for solana")
        );
        let mismatch = chains
            .target(ChainFamily::Solana, Some(&Network::eip155(1)))
            .unwrap_err();
        assert_eq!(mismatch.code(), ErrorCode::InvalidParameters);
        assert!(chains.networks().is_empty() && chains.supported_kinds().is_empty());
    }
}
