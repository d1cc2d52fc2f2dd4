//! [`Charge`]: what a request priced with [`crate::Price::upto`] used, reported by its handler.

use tollgate_protocol::AtomicAmount;

/// What a metered request (`upto`) costs, in atomic units of the price's asset, as its handler
/// reports it: put in the **response's** extensions (with axum, return
/// `(Extension(Charge::atomic(n)), body)`). The layer settles it after the handler, capped at
/// the price's maximum; a charge of zero settles nothing. A response without one is charged the
/// maximum. Prices of other schemes ignore it.
///
/// ```
/// use axum::Extension;
/// use tollgate::Charge;
/// use tollgate::protocol::AtomicAmount;
///
/// // 0.0001 of a 6-decimal token per word of the answer.
/// async fn complete() -> (Extension<Charge>, String) {
///     let answer = "four words of answer".to_owned();
///     let words = answer.split_whitespace().count() as u64;
///     (Extension(Charge::per_unit(words, AtomicAmount(100))), answer)
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Charge(AtomicAmount);

impl Charge {
    /// `amount` atomic units.
    #[must_use]
    pub const fn atomic(amount: u128) -> Self {
        Self(AtomicAmount(amount))
    }

    /// `units` used at `each` atomic units apiece (words, tokens, bytes, seconds); a product too
    /// large for 128 bits is the largest amount (and is capped at the maximum anyway).
    #[must_use]
    pub const fn per_unit(units: u64, each: AtomicAmount) -> Self {
        Self(AtomicAmount((units as u128).saturating_mul(each.0)))
    }

    /// Nothing: the request is not charged (nothing is settled).
    #[must_use]
    pub const fn nothing() -> Self {
        Self(AtomicAmount(0))
    }

    /// The amount, in atomic units.
    #[must_use]
    pub const fn amount(self) -> AtomicAmount {
        self.0
    }

    /// What is settled against an authorized `max`: the charge, at most `max` (a handler that
    /// reports more is capped, and the layer logs it).
    #[must_use]
    pub fn capped(self, max: AtomicAmount) -> AtomicAmount {
        if self.0.get() > max.get() {
            tracing::warn!(charge = %self.0, max = %max, "a handler charged more than the most authorized; settling the most");
        }
        AtomicAmount(self.0.get().min(max.get()))
    }
}

/// A metered request's charge known only when its answer's body has ended: usage a streamed
/// answer reports last (an HTTP trailer, a final event). Put it in the **response's**
/// extensions instead of a [`Charge`], and [`Self::report`] the charge (or [`Self::fail`])
/// from the body as it ends.
///
/// The layer then **streams** the answer (it is not held in memory), settles the reported
/// charge once the body has ended — capped at the maximum — and sends the settlement as an
/// HTTP trailer (`PAYMENT-RESPONSE`, announced in `Trailer`) to buyers that accept trailers
/// (`TE: trailers`). A buyer who hangs up before the end does not stop it: the rest of the
/// body is read (at most [`DeferredCharge::DRAIN`]) for its report, and that charge is settled,
/// once. A body that fails, or ends without a report, is not charged (and the layer logs it).
#[derive(Debug, Clone, Default)]
pub struct DeferredCharge(std::sync::Arc<std::sync::OnceLock<Result<Charge, String>>>);

impl DeferredCharge {
    /// The longest the layer reads the rest of a body whose buyer hung up, for its report.
    pub const DRAIN: std::time::Duration = std::time::Duration::from_secs(60);

    /// A charge to be reported.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Reports the charge (the first report or failure counts).
    pub fn report(&self, charge: Charge) {
        let _ = self.0.set(Ok(charge));
    }

    /// Says no charge can be reported (`why`): nothing is settled.
    pub fn fail(&self, why: impl Into<String>) {
        let _ = self.0.set(Err(why.into()));
    }

    /// What was reported, if anything yet.
    #[must_use]
    pub fn reported(&self) -> Option<Result<Charge, String>> {
        self.0.get().cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_are_exact_and_capped() {
        assert_eq!(Charge::per_unit(7, AtomicAmount(100)).amount(), AtomicAmount(700));
        assert_eq!(Charge::per_unit(u64::MAX, AtomicAmount(u128::MAX)).amount(), AtomicAmount(u128::MAX));
        assert_eq!(Charge::atomic(900).capped(AtomicAmount(500)), AtomicAmount(500));
        assert_eq!(Charge::atomic(499).capped(AtomicAmount(500)), AtomicAmount(499));
        assert_eq!(Charge::nothing().capped(AtomicAmount(500)), AtomicAmount(0));
    }

    /// The first report or failure is the one settled; a clone (the body's) reports to the same.
    #[test]
    fn the_first_report_or_failure_counts() {
        let charge = DeferredCharge::new();
        assert_eq!(charge.reported(), None);
        let body = charge.clone();
        body.fail("the stream broke");
        body.report(Charge::atomic(5));
        assert_eq!(charge.reported(), Some(Err("the stream broke".to_owned())));
        let charge = DeferredCharge::new();
        charge.report(Charge::atomic(5));
        charge.fail("too late");
        charge.report(Charge::atomic(9));
        assert_eq!(charge.reported(), Some(Ok(Charge::atomic(5))));
    }
}
