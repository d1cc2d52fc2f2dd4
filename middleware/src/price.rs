//! What a route costs: one [`Price`] per accepted way to pay.

use serde_json::Value;
use tollgate_protocol::x402::{Asset, PaymentRequirements, SCHEME_EXACT, SCHEME_EXACT_NATIVE};
use tollgate_protocol::{Address, AtomicAmount, ChainFamily, DecimalAmount, Network};

/// A price that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PriceError {
    /// The amount is not a positive decimal with at most the asset's decimals.
    #[error("invalid amount {amount:?}: {reason}")]
    Amount {
        /// What was given.
        amount: String,
        /// Why it is refused.
        reason: String,
    },
}

/// A requirement offered for a request, with the decimals of its asset.
pub(crate) type Offer = (PaymentRequirements, u8);

/// One way to pay for a route: scheme, asset, amount, recipient and (optionally) network.
///
/// Amounts are given in whole units as decimal text (`"0.01"` SOL) and kept in atomic units; no
/// float is involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Price {
    pub(crate) scheme: &'static str,
    pub(crate) family: ChainFamily,
    pub(crate) network: Option<Network>,
    pub(crate) asset: Asset,
    pub(crate) amount: AtomicAmount,
    pub(crate) decimals: u8,
    pub(crate) pay_to: Option<Address>,
    pub(crate) extra: Option<Value>,
}

fn atomic(amount: &str, decimals: u8) -> Result<AtomicAmount, PriceError> {
    let bad = |reason: String| PriceError::Amount { amount: amount.to_owned(), reason };
    let parsed = DecimalAmount::parse(amount).map_err(|e| bad(e.to_string()))?;
    let atomic = parsed.to_atomic(decimals).map_err(|e| bad(e.to_string()))?;
    if atomic.get() == 0 {
        return Err(bad("a price must be more than zero".into()));
    }
    Ok(atomic)
}

impl Price {
    /// Its requirement on `network`, with `extra` (`None` without a recipient).
    pub(crate) fn offer(&self, network: Network, extra: Option<Value>, max_timeout_seconds: u64) -> Option<Offer> {
        Some((
            PaymentRequirements {
                scheme: self.scheme.to_owned(),
                network,
                amount: self.amount,
                asset: self.asset,
                pay_to: self.pay_to?,
                max_timeout_seconds,
                extra,
            },
            self.decimals,
        ))
    }

    /// Native SOL (`exact-native`), e.g. `"0.01"`.
    ///
    /// # Errors
    /// [`PriceError`] for a malformed, zero or too precise amount.
    pub fn native_sol(amount: &str) -> Result<Self, PriceError> {
        Self::native(ChainFamily::Solana, amount)
    }

    /// Native ETH (`exact-native`), e.g. `"0.0001"`; name the chain with [`Price::on`].
    ///
    /// # Errors
    /// [`PriceError`] for a malformed, zero or too precise amount.
    pub fn native_eth(amount: &str) -> Result<Self, PriceError> {
        Self::native(ChainFamily::Evm, amount)
    }

    fn native(family: ChainFamily, amount: &str) -> Result<Self, PriceError> {
        let decimals = family.native_decimals();
        Ok(Self {
            scheme: SCHEME_EXACT_NATIVE,
            family,
            network: None,
            asset: Asset::Native,
            amount: atomic(amount, decimals)?,
            decimals,
            pay_to: None,
            extra: None,
        })
    }

    /// A token paid with x402 `exact`: an SPL mint (Solana) or an EIP-3009 contract (EVM), with
    /// its decimals. EVM tokens also need their EIP-712 domain in [`Price::extra`]
    /// (`{"name": ..., "version": ...}`).
    ///
    /// # Errors
    /// [`PriceError`] for a malformed, zero or too precise amount.
    pub fn token(token: Address, amount: &str, decimals: u8) -> Result<Self, PriceError> {
        Ok(Self {
            scheme: SCHEME_EXACT,
            family: token.family(),
            network: None,
            asset: Asset::Token(token),
            amount: atomic(amount, decimals)?,
            decimals,
            pay_to: None,
            extra: None,
        })
    }

    /// Who is paid (required).
    #[must_use]
    pub const fn pay_to(mut self, address: Address) -> Self {
        self.pay_to = Some(address);
        self
    }

    /// The network to be paid on; by default the facilitator's network for this chain family
    /// (from its `/supported`).
    #[must_use]
    pub fn on(mut self, network: Network) -> Self {
        self.network = Some(network);
        self
    }

    /// Scheme details carried in the requirement's `extra`.
    #[must_use]
    pub fn extra(mut self, extra: Value) -> Self {
        self.extra = Some(extra);
        self
    }

    /// The amount in atomic units.
    #[must_use]
    pub const fn amount(&self) -> AtomicAmount {
        self.amount
    }

    /// The amount in whole units.
    #[must_use]
    pub fn whole(&self) -> DecimalAmount {
        DecimalAmount::from_atomic(self.amount, self.decimals)
    }
}

/// What a pricing function answers for one request: its prices and, optionally, the resource
/// they pay for (by default the request's URL, path and query). A proof serves only the
/// resource it paid for, so a function that prices by something else than the URL (a header, a
/// body field) names the resource to bind proofs to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quote {
    pub(crate) prices: Vec<Price>,
    pub(crate) resource: Option<String>,
}

impl Quote {
    /// These prices, for the request's URL.
    #[must_use]
    pub const fn new(prices: Vec<Price>) -> Self {
        Self { prices, resource: None }
    }

    /// The resource (an absolute URL) the prices pay for.
    #[must_use]
    pub fn for_resource(mut self, url: impl Into<String>) -> Self {
        self.resource = Some(url.into());
        self
    }
}

impl From<Vec<Price>> for Quote {
    fn from(prices: Vec<Price>) -> Self {
        Self::new(prices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_are_exact_and_validated() {
        let p = Price::native_sol("0.01").unwrap();
        assert_eq!(p.amount(), AtomicAmount(10_000_000));
        assert_eq!(p.whole().to_string(), "0.01");
        assert_eq!(Price::native_eth("0.0001").unwrap().amount(), AtomicAmount(100_000_000_000_000));
        for bad in ["0", "-1", "abc", "0.0000000001", ""] {
            assert!(Price::native_sol(bad).is_err(), "{bad}");
        }
        let mint: Address = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v".parse().unwrap();
        let usdc = Price::token(mint, "1.5", 6).unwrap();
        assert_eq!(
            (usdc.amount(), usdc.scheme, usdc.family),
            (AtomicAmount(1_500_000), SCHEME_EXACT, ChainFamily::Solana)
        );
        assert!(Price::token(mint, "1.0000001", 6).is_err());
    }
}
