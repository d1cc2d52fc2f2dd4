//! Incoming payment proofs, checked against what the seller asks for.
//!
//! One path serves the gateway (`/payment/receive`, `/transaction/receive`) and the x402 API
//! (`/verify`, `/settle`): the caller states its [`Terms`], a chain module checks the proof
//! against them and the chain, and the settlement engine settles what passed.

pub mod solana;

use tollgate_protocol::x402::{Asset, PaymentPayload};
use tollgate_protocol::{Address, DecimalAmount};

use crate::refusal::{Reason, Refusal};

/// How much must be paid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Price {
    /// At least this amount in the asset's whole units (the gateway's `expectedAmount`); read in
    /// the asset's decimals once the asset is known.
    AtLeast(DecimalAmount),
    /// At least these base units (`exact-native` requirements).
    AtLeastAtomic(u64),
    /// Exactly these base units (x402 `exact`).
    Exactly(u64),
}

impl Price {
    /// Checks `paid` base units of an asset with `decimals` against the price.
    ///
    /// # Errors
    /// [`Reason::SvmAmountMismatch`] when it pays less (or, for `exact`, anything else).
    pub fn check(&self, paid: u64, decimals: u8) -> Result<(), Refusal> {
        let (wanted, exact) = match self {
            Self::AtLeast(amount) => {
                let atomic = amount.to_atomic(decimals).map_err(|_| {
                    Refusal::new(
                        Reason::InvalidPaymentRequirements,
                        format!("the expected amount {amount} has more than the asset's {decimals} decimals"),
                    )
                })?;
                (u64::try_from(atomic.get()).unwrap_or(u64::MAX), false)
            }
            Self::AtLeastAtomic(n) => (*n, false),
            Self::Exactly(n) => (*n, true),
        };
        if paid < wanted || (exact && paid != wanted) {
            let relation = if exact { "not exactly" } else { "less than" };
            return Err(Refusal::new(
                Reason::SvmAmountMismatch,
                format!("the proof pays {paid} base units, {relation} the {wanted} expected"),
            ));
        }
        Ok(())
    }
}

/// What the seller asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    /// Who must be paid.
    pub pay_to: Address,
    /// What with; `None` lets the proof name it (the gateway's receive has no asset field).
    pub asset: Option<Asset>,
    /// How much.
    pub price: Price,
    /// The resource paid for; a receipt must be bound to it.
    pub resource: Option<String>,
}

impl Terms {
    /// Checks that a v2 payload's `accepted` requirement is for these terms (v1 payloads carry
    /// none).
    ///
    /// # Errors
    /// [`Reason::InvalidPaymentRequirements`] when it names another recipient or asset.
    pub fn check_accepted(&self, payload: &PaymentPayload) -> Result<(), Refusal> {
        let PaymentPayload::V2(p) = payload else { return Ok(()) };
        let asset_differs = self.asset.is_some_and(|a| a != p.accepted.asset);
        if p.accepted.pay_to != self.pay_to || asset_differs {
            return Err(Refusal::new(
                Reason::InvalidPaymentRequirements,
                "the proof was made for another recipient or asset",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices() {
        let at_least = Price::AtLeast(DecimalAmount::parse("0.5").unwrap());
        assert!(at_least.check(500_000, 6).is_ok());
        assert!(at_least.check(600_000, 6).is_ok());
        assert_eq!(at_least.check(499_999, 6).unwrap_err().reason, Reason::SvmAmountMismatch);
        let too_fine = Price::AtLeast(DecimalAmount::parse("0.0000001").unwrap());
        assert_eq!(too_fine.check(1, 6).unwrap_err().reason, Reason::InvalidPaymentRequirements);
        assert!(Price::Exactly(10).check(10, 0).is_ok());
        assert!(Price::Exactly(10).check(11, 0).unwrap_err().message.contains("not exactly"));
        assert!(Price::AtLeastAtomic(10).check(11, 0).is_ok());
    }
}
