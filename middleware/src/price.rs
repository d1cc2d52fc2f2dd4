//! What a route costs: one [`Price`] per accepted way to pay.

use serde_json::Value;
use tollgate_protocol::x402::{Asset, PaymentRequirements, SCHEME_EXACT, SCHEME_EXACT_NATIVE, SCHEME_UPTO};
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
    /// The scheme cannot be paid with this asset.
    #[error("{scheme} cannot be paid in {asset}: {reason}")]
    Scheme {
        /// The scheme.
        scheme: &'static str,
        /// The asset.
        asset: String,
        /// Why.
        reason: &'static str,
    },
}

/// A requirement offered for a request, with the decimals of its asset.
pub(crate) type Offer = (PaymentRequirements, u8);

/// The key of a requirement's `extra` that says it sells a pass ([`Price::pass`]):
/// `{"seconds": N}`.
pub(crate) const PASS: &str = "pass";

/// The seconds of the pass a requirement's `extra` sells.
pub(crate) fn pass_seconds(extra: Option<&Value>) -> Option<u64> {
    extra?.get(PASS)?.get("seconds")?.as_u64()
}

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

    /// A metered price (x402 `upto`): the buyer authorizes at most `max` of an ERC-20 `token`
    /// (any ERC-20, through Permit2), the handler reports what the request used with a
    /// [`crate::Charge`] in its response's extensions, and the layer settles that after the
    /// handler answered — never more than `max`; nothing when the charge is zero or the handler
    /// failed (status 400 or more). A handler that reports no charge is charged `max`.
    ///
    /// `upto` is settled after the handler whatever the layer's [`crate::SettlementOrder`] (it is
    /// paid by authorization only). The layer names the facilitator's settling account
    /// (`extra.facilitatorAddress`, from its `/supported`), which the buyer's permit binds.
    ///
    /// # Errors
    /// [`PriceError`] for a malformed, zero or too precise amount, or a token that is not an
    /// EVM address (`upto` is an EVM scheme).
    pub fn upto(token: Address, max: &str, decimals: u8) -> Result<Self, PriceError> {
        if token.family() != ChainFamily::Evm {
            return Err(PriceError::Scheme {
                scheme: SCHEME_UPTO,
                asset: token.to_string(),
                reason: "upto is paid through Permit2, on EVM chains",
            });
        }
        // Named as x402's servers name it (`upto` has no other transfer method).
        Ok(Self { scheme: SCHEME_UPTO, ..Self::token(token, max, decimals)? }.permit2())
    }

    /// A price per request paid from a payment channel (x402 `batch-settlement`, EVM tokens):
    /// the buyer deposits once into the channel (at least ten requests' worth by default,
    /// announced as `extra.minDeposit`), then signs a cumulative voucher per request, which the
    /// layer checks in process and charges once the handler answered below 400 (a metered
    /// handler's [`crate::Charge`] is charged, at most `amount`). Claims and sweeps settle the
    /// charges in the background ([`crate::batch::ClaimPolicy`]); keep the channels across
    /// restarts with [`crate::PaymentLayerBuilder::channels`].
    ///
    /// Deposits are EIP-3009 by default (name the token's EIP-712 `name` and `version` with
    /// [`Price::extra`], as for `exact`), or Permit2 ([`Price::permit2`]). The receiver
    /// authorizer, who signs claims and refunds, is the facilitator's (its `/supported`) unless
    /// `extra.receiverAuthorizer` names another; a buyer may take its funds back after the
    /// withdrawal delay (15 minutes by default, [`Price::withdraw_delay`]).
    ///
    /// # Errors
    /// [`PriceError`] for a malformed, zero or too precise amount, or a token that is not an
    /// EVM address.
    pub fn batch(token: Address, amount: &str, decimals: u8) -> Result<Self, PriceError> {
        if token.family() != ChainFamily::Evm {
            return Err(PriceError::Scheme {
                scheme: crate::batch::SCHEME,
                asset: token.to_string(),
                reason: "batch-settlement channels are EVM contracts",
            });
        }
        let price = Self { scheme: crate::batch::SCHEME, ..Self::token(token, amount, decimals)? };
        let min_deposit = price.amount.get().saturating_mul(10).to_string();
        Ok(price.extra(serde_json::json!({
            "withdrawDelay": tollgate_protocol::x402::batch::MIN_WITHDRAW_DELAY,
            "minDeposit": min_deposit,
        })))
    }

    /// A batch-settlement channel's withdrawal delay (whole seconds, 15 minutes to 30 days):
    /// how long a buyer waits to take back what it did not spend without the seller's refund.
    /// The layer claims at least three times within it.
    #[must_use]
    pub fn withdraw_delay(self, delay: std::time::Duration) -> Self {
        self.extra(serde_json::json!({ "withdrawDelay": delay.as_secs() }))
    }

    /// The withdrawal delay a batch-settlement price names, in seconds.
    pub(crate) fn delay_secs(&self) -> Option<u64> {
        self.extra.as_ref()?.get("withdrawDelay")?.as_u64()
    }

    /// The same `exact` price of an EVM token, paid through Permit2 instead of EIP-3009
    /// (`extra.assetTransferMethod: "permit2"`): any ERC-20, once the buyer has approved
    /// Permit2 (or offers a signed EIP-2612 permit when the token has one and
    /// [`Price::extra`] names its EIP-712 `name` and `version`).
    #[must_use]
    pub fn permit2(mut self) -> Self {
        let mut extra = self.extra.take().and_then(|e| e.as_object().cloned()).unwrap_or_default();
        extra.insert("assetTransferMethod".into(), Value::String("permit2".into()));
        self.extra = Some(Value::Object(extra));
        self
    }

    /// Its scheme (`exact`, `exact-native` or `upto`).
    #[must_use]
    pub const fn scheme(&self) -> &'static str {
        self.scheme
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

    /// Scheme details carried in the requirement's `extra` (merged into what is there, such as
    /// [`Price::permit2`]'s transfer method).
    #[must_use]
    pub fn extra(mut self, extra: Value) -> Self {
        self.extra = match (self.extra.take().and_then(|e| e.as_object().cloned()), extra) {
            (Some(mut had), Value::Object(more)) => {
                had.extend(more);
                Some(Value::Object(had))
            }
            (_, extra) => Some(extra),
        };
        self
    }

    /// The same price buys a **pass**: access for `duration` (at most a year), from when the
    /// payment is recorded, for the wallet that pays — its holder signs in (x402
    /// `sign-in-with-x`) instead of paying again, for the layer's pass scope
    /// ([`crate::PaymentLayerBuilder::pass_scope`]). The requirement says so in
    /// `extra.pass.seconds`; the layer declares the sign-in in its 402 (it needs the seller's
    /// public origin: [`crate::PaymentLayerBuilder::sign_in_origin`] or `resource_base`). Pay
    /// in x402 v2 (its `accepted` names this offer) where a route also sells single answers
    /// of the same scheme and network.
    #[must_use]
    pub fn pass(self, duration: std::time::Duration) -> Self {
        self.extra(serde_json::json!({ PASS: { "seconds": duration.as_secs() } }))
    }

    /// The pass this price sells, in seconds ([`Self::pass`]).
    #[must_use]
    pub fn pass_seconds(&self) -> Option<u64> {
        pass_seconds(self.extra.as_ref())
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
        assert!(matches!(Price::upto(mint, "1", 6), Err(PriceError::Scheme { .. })), "upto is EVM only");
        let erc20: Address = "0x1111111111111111111111111111111111111111".parse().unwrap();
        let metered = Price::upto(erc20, "0.5", 6).unwrap();
        assert_eq!((metered.scheme(), metered.amount()), (SCHEME_UPTO, AtomicAmount(500_000)));
        let p2 = Price::token(erc20, "1", 6).unwrap().extra(serde_json::json!({"name": "T", "version": "1"})).permit2();
        assert_eq!(p2.extra, Some(serde_json::json!({"name": "T", "version": "1", "assetTransferMethod": "permit2"})));
        let merged = Price::token(erc20, "1", 6).unwrap().permit2().extra(serde_json::json!({"name": "T"}));
        assert_eq!(merged.extra, Some(serde_json::json!({"assetTransferMethod": "permit2", "name": "T"})));
    }
}
