//! What a seller asks for ([`Terms`]), what a chain found a proof to pay ([`Checked`]), and the
//! one comparison between the two ([`Terms::admit`]) that every mode and version goes through.
//!
//! A chain's check refuses early, with its own precise reason, whatever it can see is wrong; the
//! payment core then admits the result against the terms once more before anything is signed or
//! broadcast, so no chain can let another asset, network, recipient or a smaller amount through.

use tollgate_protocol::x402::{Asset, PaymentPayload, PaymentRequirements, SCHEME_EXACT, SCHEME_UPTO};
use tollgate_protocol::{Address, AtomicAmount, DecimalAmount, Network};

use super::refusal::{Reason, Refusal};
use super::{Outgoing, Signable};

/// How much must be paid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Price {
    /// At least this amount in the asset's whole units (the gateway's `expectedAmount`); read in
    /// the asset's decimals once the asset is known.
    AtLeast(DecimalAmount),
    /// At least these base units (`exact-native` requirements).
    AtLeastAtomic(u128),
    /// Exactly these base units (x402 `exact`).
    Exactly(u128),
}

impl Price {
    /// Checks `paid` base units of an asset with `decimals` against the price; `mismatch` is the
    /// chain's reason for a wrong amount.
    ///
    /// # Errors
    /// `mismatch` when it pays less (or, for `exact`, anything else).
    pub fn check(&self, paid: u128, decimals: u8, mismatch: Reason) -> Result<(), Refusal> {
        let (wanted, exact) = match self {
            Self::AtLeast(amount) => {
                let atomic = amount.to_atomic(decimals).map_err(|_| {
                    Refusal::new(
                        Reason::InvalidPaymentRequirements,
                        format!("the expected amount {amount} has more than the asset's {decimals} decimals"),
                    )
                })?;
                (atomic.get(), false)
            }
            Self::AtLeastAtomic(n) => (*n, false),
            Self::Exactly(n) => (*n, true),
        };
        if paid < wanted || (exact && paid != wanted) {
            let relation = if exact { "not exactly" } else { "less than" };
            return Err(Refusal::new(
                mismatch,
                format!("the proof pays {paid} base units, {relation} the {wanted} expected"),
            ));
        }
        Ok(())
    }

    /// The price of an x402 requirement: exactly its amount for `exact` and `upto` (for
    /// `upto`, the most at a verify and the charge at a settlement), at least it for
    /// `exact-native`.
    #[must_use]
    pub fn of_requirement(scheme: &str, amount: AtomicAmount) -> Self {
        if scheme == SCHEME_EXACT || scheme == SCHEME_UPTO {
            Self::Exactly(amount.get())
        } else {
            Self::AtLeastAtomic(amount.get())
        }
    }
}

/// What the seller asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    /// The chain the proof must pay on.
    pub network: Network,
    /// Who must be paid.
    pub pay_to: Address,
    /// What with: always named (the gateway's default is the chain's native currency).
    pub asset: Asset,
    /// How much.
    pub price: Price,
    /// The resource paid for; a receipt must be bound to it.
    pub resource: Option<String>,
    /// The HTTP method of the request paid for, when the seller names it: recorded with the
    /// payment, and a repeat of the proof is answered only for the same.
    pub method: Option<String>,
    /// The requirement's scheme details (EVM `exact`: the token's EIP-712 `name` and `version`;
    /// Solana `exact`: the `feePayer` the buyer was offered).
    pub extra: Option<serde_json::Value>,
    /// x402: the whole requirement, which a v2 payload must have accepted as it is.
    pub requirement: Option<PaymentRequirements>,
    /// Local mode: the most priority fee the seller pays as the transaction's fee payer, native
    /// base units.
    pub fee_cap: Option<AtomicAmount>,
}

impl Terms {
    /// Checks what a payload says of itself, before any chain is asked: its network, its scheme
    /// (x402), and for v2 the requirement it accepted — the whole requirement on the x402 API, its
    /// recipient, asset and network on the gateway.
    ///
    /// # Errors
    /// [`Reason::InvalidNetwork`], [`Reason::InvalidScheme`] or
    /// [`Reason::InvalidPaymentRequirements`].
    pub fn admit_payload(&self, payload: &PaymentPayload) -> Result<(), Refusal> {
        if payload.network() != &self.network {
            return Err(Refusal::new(
                Reason::InvalidNetwork,
                format!("the proof pays on {}, not {}", payload.network(), self.network),
            ));
        }
        if let Some(required) = &self.requirement
            && payload.scheme() != required.scheme
        {
            return Err(Refusal::new(
                Reason::InvalidScheme,
                format!("the payload's scheme {} differs from the requirement's {}", payload.scheme(), required.scheme),
            ));
        }
        let PaymentPayload::V2(p) = payload else { return Ok(()) };
        let other = |what: String| Err(Refusal::new(Reason::InvalidPaymentRequirements, what));
        if p.accepted.pay_to != self.pay_to {
            return other(format!("the proof was made to pay {}, not {}", p.accepted.pay_to, self.pay_to));
        }
        if p.accepted.asset != self.asset {
            return other(format!(
                "the proof was made to pay {}, but {} is asked (name the asset the price is in)",
                asset_name(p.accepted.asset),
                asset_name(self.asset)
            ));
        }
        let Some(required) = &self.requirement else { return Ok(()) };
        if required.scheme == SCHEME_UPTO {
            // A seller settles `upto` for what was used: the requirement it accepted, but its
            // amount the charge, at most the accepted one.
            if required.amount > p.accepted.amount {
                return Err(Refusal::new(
                    Reason::UptoSettlementExceeds,
                    format!("the charge of {} is above the {} the buyer allowed", required.amount, p.accepted.amount),
                ));
            }
            let most = PaymentRequirements { amount: p.accepted.amount, ..required.clone() };
            if p.accepted != most {
                return other("the proof was made for another requirement (timeout or terms differ)".into());
            }
        } else if p.accepted != *required {
            return other("the proof was made for another requirement (amount, timeout or terms differ)".into());
        }
        Ok(())
    }

    /// An `upto` settlement charging nothing: nothing moves (the buyer's authorization is still
    /// checked, for the most it allows).
    #[must_use]
    pub fn charges_nothing(&self) -> bool {
        self.requirement.as_ref().is_some_and(|r| r.scheme == SCHEME_UPTO) && self.price == Price::Exactly(0)
    }

    /// Checks what a chain found a proof to pay against these terms: the recipient, the asset
    /// (and, for v2, the asset the payload accepted) and the amount.
    ///
    /// # Errors
    /// The [`Refusal`] naming the first difference.
    pub fn admit(&self, payload: &PaymentPayload, checked: &Checked) -> Result<(), Refusal> {
        let family = self.network.family();
        // Paying oneself moves nothing: it buys nothing, and costs whoever pays the fee (the
        // facilitator, for a sponsored settlement).
        if checked.payer == self.pay_to {
            return Err(Refusal::new(
                Reason::InvalidPayload,
                format!("the proof pays {} from {0} itself: nothing would move", self.pay_to),
            ));
        }
        if checked.pay_to != self.pay_to {
            return Err(Refusal::new(
                match family {
                    tollgate_protocol::ChainFamily::Solana => Reason::SvmIncorrectAta,
                    tollgate_protocol::ChainFamily::Evm => Reason::EvmRecipientMismatch,
                },
                format!("the proof pays {}, not {}", checked.pay_to, self.pay_to),
            ));
        }
        let accepted_asset = match payload {
            PaymentPayload::V2(p) => Some(p.accepted.asset),
            PaymentPayload::V1(_) => None,
        };
        if checked.asset != self.asset || accepted_asset.is_some_and(|a| a != checked.asset) {
            return Err(Refusal::new(
                Reason::InvalidPaymentRequirements,
                format!("the proof pays {}, but {} is asked", asset_name(checked.asset), asset_name(self.asset)),
            ));
        }
        self.price.check(checked.amount, checked.decimals, Reason::amount_mismatch(family))
    }
}

fn asset_name(asset: Asset) -> String {
    match asset {
        Asset::Native => "the native currency".to_owned(),
        Asset::Token(token) => format!("token {token}"),
    }
}

/// Who will send a checked payment's settling transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settler {
    /// The facilitator (hosted mode, x402): it signs as fee payer / sender and broadcasts.
    Facilitator,
    /// The seller's wallet (local mode): it gets the transaction to sign and broadcast itself.
    Seller(Address),
}

/// What a proof is checked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// A verdict only (x402 `/verify`): nothing is sent, so what only sending needs (fees,
    /// nonces, a settlement's horizon) is not read, and [`Checked::settle`] is
    /// [`Settle::Nothing`]. The chain may remember a pass briefly, for a settlement of the same
    /// proof; a verify itself always asks the chain.
    Verify,
    /// The proof settles now: its settlement is prepared. A pass the chain remembers from a
    /// verify of this very proof moments ago may stand in for asking the chain again.
    Settle,
}

/// How a checked proof settles.
pub enum Settle {
    /// Nothing: the check was for a verdict only ([`Intent::Verify`]).
    Nothing,
    /// A complete signed transaction: broadcast it.
    Broadcast(Outgoing),
    /// The facilitator signs it at settlement time (Solana: as sponsor of an `exact` transfer;
    /// EVM: sending `transferWithAuthorization` under its account's nonce).
    Sign(Box<dyn Signable>),
    /// The transfer is already confirmed on chain (a receipt): record it.
    Recorded {
        /// Its id.
        tx_id: String,
    },
    /// Local mode: what the seller signs (or just broadcasts) to settle it.
    Handover {
        /// The transaction, in the chain's bytes.
        transaction: Vec<u8>,
        /// Network fee the seller pays, native base units.
        fee: u128,
        /// Last block at which it can land (EVM: a horizon this service treats as expiry).
        horizon: u64,
    },
}

impl std::fmt::Debug for Settle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Nothing => f.write_str("Nothing"),
            Self::Broadcast(o) => f.debug_tuple("Broadcast").field(&o.tx_id).finish(),
            Self::Sign(_) => f.write_str("Sign"),
            Self::Recorded { tx_id } => f.debug_struct("Recorded").field("tx_id", tx_id).finish(),
            Self::Handover { fee, horizon, .. } => {
                f.debug_struct("Handover").field("fee", fee).field("horizon", horizon).finish_non_exhaustive()
            }
        }
    }
}

/// A proof that passed every check of its chain: what it pays, and how it settles.
#[derive(Debug)]
pub struct Checked {
    /// How it settles.
    pub settle: Settle,
    /// Who paid.
    pub payer: Address,
    /// Who it pays.
    pub pay_to: Address,
    /// What with.
    pub asset: Asset,
    /// Base units paid.
    pub amount: u128,
    /// The asset's decimals.
    pub decimals: u8,
    /// Network fee in native base units, when known.
    pub fee: Option<u128>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_protocol::x402::schemes::ExactNativePayload;

    #[test]
    fn prices() {
        let at_least = Price::AtLeast(DecimalAmount::parse("0.5").unwrap());
        let m = Reason::SvmAmountMismatch;
        assert!(at_least.check(500_000, 6, m).is_ok());
        assert!(at_least.check(600_000, 6, m).is_ok());
        assert_eq!(at_least.check(499_999, 6, m).unwrap_err().reason, m);
        let too_fine = Price::AtLeast(DecimalAmount::parse("0.0000001").unwrap());
        assert_eq!(too_fine.check(1, 6, m).unwrap_err().reason, Reason::InvalidPaymentRequirements);
        assert!(Price::Exactly(10).check(10, 0, m).is_ok());
        assert!(Price::Exactly(10).check(11, 0, m).unwrap_err().message.contains("not exactly"));
        assert!(Price::AtLeastAtomic(10).check(11, 0, m).is_ok());
        assert_eq!(Price::of_requirement("exact", AtomicAmount(5)), Price::Exactly(5));
        assert_eq!(Price::of_requirement("exact-native", AtomicAmount(5)), Price::AtLeastAtomic(5));
    }

    fn seller() -> Address {
        Address::Solana([7; 32])
    }

    fn terms() -> Terms {
        Terms {
            network: Network::solana_devnet(),
            pay_to: seller(),
            asset: Asset::Token(Address::Solana([1; 32])),
            price: Price::AtLeastAtomic(50_000),
            resource: None,
            method: None,
            extra: None,
            requirement: None,
            fee_cap: None,
        }
    }

    fn checked(pay_to: Address, asset: Asset, amount: u128) -> Checked {
        Checked {
            settle: Settle::Recorded { tx_id: "sig".into() },
            payer: Address::Solana([9; 32]),
            pay_to,
            asset,
            amount,
            decimals: 6,
            fee: None,
        }
    }

    fn v1() -> PaymentPayload {
        PaymentPayload::exact_native_v1(&Network::solana_devnet(), &ExactNativePayload::Transaction("x".into()))
    }

    /// The backstop every chain's result passes: another asset, recipient or a smaller amount
    /// is refused whatever the chain's own check said.
    #[test]
    fn admit_refuses_another_asset_recipient_or_less() {
        let t = terms();
        let token = t.asset;
        assert!(t.admit(&v1(), &checked(seller(), token, 50_000)).is_ok());
        let junk = Asset::Token(Address::Solana([2; 32]));
        assert_eq!(
            t.admit(&v1(), &checked(seller(), junk, 50_000)).unwrap_err().reason,
            Reason::InvalidPaymentRequirements
        );
        assert_eq!(
            t.admit(&v1(), &checked(seller(), Asset::Native, 50_000)).unwrap_err().reason,
            Reason::InvalidPaymentRequirements
        );
        assert_eq!(
            t.admit(&v1(), &checked(Address::Solana([8; 32]), token, 50_000)).unwrap_err().reason,
            Reason::SvmIncorrectAta
        );
        assert_eq!(t.admit(&v1(), &checked(seller(), token, 49_999)).unwrap_err().reason, Reason::SvmAmountMismatch);
        let mut itself = checked(seller(), token, 50_000);
        itself.payer = seller();
        assert!(t.admit(&v1(), &itself).unwrap_err().message.contains("itself"), "a payer paying itself");
    }

    /// A v2 payload that accepted `accepted`.
    fn v2(accepted: &PaymentRequirements) -> PaymentPayload {
        serde_json::from_value(serde_json::json!({
            "x402Version": 2, "accepted": accepted, "payload": {"transaction": "x"},
        }))
        .unwrap()
    }

    fn requirement(scheme: &str, amount: u128) -> PaymentRequirements {
        PaymentRequirements {
            scheme: scheme.into(),
            network: Network::solana_devnet(),
            amount: AtomicAmount(amount),
            asset: terms().asset,
            pay_to: seller(),
            max_timeout_seconds: 60,
            extra: None,
        }
    }

    /// The x402 API's terms: the whole requirement the seller offered.
    fn offered(scheme: &str, amount: u128) -> Terms {
        Terms { requirement: Some(requirement(scheme, amount)), ..terms() }
    }

    #[test]
    fn admit_payload_holds_a_v2_proof_to_the_requirement_it_accepted() {
        let t = offered("exact", 50_000);
        assert!(t.admit_payload(&v2(&requirement("exact", 50_000))).is_ok());
        // Another scheme, amount, timeout, recipient or asset than the one offered.
        assert_eq!(t.admit_payload(&v2(&requirement("upto", 50_000))).unwrap_err().reason, Reason::InvalidScheme);
        let cheaper = requirement("exact", 49_999);
        assert_eq!(t.admit_payload(&v2(&cheaper)).unwrap_err().reason, Reason::InvalidPaymentRequirements);
        let longer = PaymentRequirements { max_timeout_seconds: 61, ..requirement("exact", 50_000) };
        assert_eq!(t.admit_payload(&v2(&longer)).unwrap_err().reason, Reason::InvalidPaymentRequirements);
        let elsewhere = PaymentRequirements { pay_to: Address::Solana([8; 32]), ..requirement("exact", 50_000) };
        let refused = t.admit_payload(&v2(&elsewhere)).unwrap_err();
        assert_eq!(refused.reason, Reason::InvalidPaymentRequirements);
        assert!(refused.message.contains("made to pay"), "{}", refused.message);
        let native = PaymentRequirements { asset: Asset::Native, ..requirement("exact", 50_000) };
        let refused = t.admit_payload(&v2(&native)).unwrap_err();
        assert!(refused.message.contains("the native currency"), "{}", refused.message);
        // The gateway names no requirement: recipient and asset are still held.
        assert!(terms().admit_payload(&v2(&requirement("exact", 1))).is_ok());
        assert_eq!(terms().admit_payload(&v2(&elsewhere)).unwrap_err().reason, Reason::InvalidPaymentRequirements);
        assert_eq!(terms().admit_payload(&v2(&native)).unwrap_err().reason, Reason::InvalidPaymentRequirements);
    }

    /// `upto`: the seller's charge replaces the amount, and may not exceed what the buyer allowed.
    #[test]
    fn admit_payload_lets_an_upto_charge_up_to_the_amount_allowed() {
        let allowed = v2(&requirement("upto", 50_000));
        assert!(offered("upto", 50_000).admit_payload(&allowed).is_ok());
        assert!(offered("upto", 1).admit_payload(&allowed).is_ok());
        assert!(offered("upto", 0).admit_payload(&allowed).is_ok());
        assert_eq!(offered("upto", 50_001).admit_payload(&allowed).unwrap_err().reason, Reason::UptoSettlementExceeds);
        let longer = PaymentRequirements { max_timeout_seconds: 61, ..requirement("upto", 50_000) };
        assert_eq!(
            offered("upto", 10).admit_payload(&v2(&longer)).unwrap_err().reason,
            Reason::InvalidPaymentRequirements
        );
        // An `exact` requirement is not an upper bound.
        assert_eq!(
            offered("exact", 1).admit_payload(&v2(&requirement("exact", 50_000))).unwrap_err().reason,
            Reason::InvalidPaymentRequirements
        );
    }

    #[test]
    fn only_an_upto_charge_of_zero_charges_nothing() {
        let zero = |scheme| Terms { price: Price::Exactly(0), ..offered(scheme, 0) };
        assert!(zero("upto").charges_nothing());
        assert!(!zero("exact").charges_nothing());
        assert!(!Terms { price: Price::Exactly(1), ..offered("upto", 1) }.charges_nothing());
        assert!(!Terms { price: Price::Exactly(0), ..terms() }.charges_nothing());
    }

    /// A v2 proof is held to the asset it accepted, even where the chain and terms agree.
    #[test]
    fn admit_holds_a_v2_proof_to_its_accepted_asset() {
        let t = terms();
        let token = t.asset;
        assert!(t.admit(&v2(&requirement("exact", 50_000)), &checked(seller(), token, 50_000)).is_ok());
        let native = PaymentRequirements { asset: Asset::Native, ..requirement("exact", 50_000) };
        assert_eq!(
            t.admit(&v2(&native), &checked(seller(), token, 50_000)).unwrap_err().reason,
            Reason::InvalidPaymentRequirements
        );
    }

    #[test]
    fn admit_names_the_evm_reasons_on_an_evm_network() {
        let payee = Address::Evm([7; 20]);
        let t = Terms {
            network: Network::eip155(8453),
            pay_to: payee,
            asset: Asset::Native,
            price: Price::Exactly(10),
            ..terms()
        };
        let paid = |pay_to, amount| Checked { payer: Address::Evm([9; 20]), ..checked(pay_to, Asset::Native, amount) };
        let v1 = PaymentPayload::exact_native_v1(&t.network, &ExactNativePayload::Transaction("x".into()));
        assert!(t.admit(&v1, &paid(payee, 10)).is_ok());
        assert_eq!(t.admit(&v1, &paid(Address::Evm([8; 20]), 10)).unwrap_err().reason, Reason::EvmRecipientMismatch);
        assert_eq!(t.admit(&v1, &paid(payee, 9)).unwrap_err().reason, Reason::EvmValue);
        assert_eq!(t.admit(&v1, &paid(payee, 11)).unwrap_err().reason, Reason::EvmValue);
    }

    #[test]
    fn admit_payload_checks_the_network_before_any_chain() {
        let mut t = terms();
        t.network = Network::eip155(1);
        assert_eq!(t.admit_payload(&v1()).unwrap_err().reason, Reason::InvalidNetwork);
        assert!(terms().admit_payload(&v1()).is_ok());
    }
}
