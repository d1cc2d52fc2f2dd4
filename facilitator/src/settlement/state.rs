//! The payment state machine: one function, [`transition`], decides every status change.
//!
//! ```text
//! (new, local)  --Build-->  built  --Submit-->  submitted  --Confirm-->  confirmed
//! (new, hosted) --Verify--> verified --Submit--^          \--Fail----->  failed
//!                           built --Expire(any evidence)--> expired
//!                           submitted --WaitTimedOut--> pending --Confirm/Fail/Expire(chain)--> ...
//!                           verified --Abandon--> failed
//! ```
//!
//! `confirmed`, `failed` and `expired` are final. `pending` only leaves on evidence from the
//! chain, never on the clock alone: a broadcast transaction may still land. `verified` is left
//! by `Abandon` only when no transaction id was ever stored: the id is written before
//! broadcasting, so such a payment (left by a crash between its insert and that write) was never
//! broadcast and cannot land.

use tollgate_protocol::AtomicAmount;
use tollgate_protocol::gateway::PaymentStatus;

/// How an expiry was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryEvidence {
    /// The chain is past the transaction's last valid block height and does not have it.
    Chain,
    /// Only the wall clock is past `expiresAt`.
    Clock,
}

/// Something that happened to a payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Local mode: an unsigned transaction was built (creates the payment).
    Build,
    /// Hosted mode: the proof or request was checked and claimed (creates the payment).
    Verify,
    /// The transaction id is known and the transaction is (about to be) broadcast or was seen.
    Submit {
        /// Signature / hash.
        transaction: String,
    },
    /// The chain confirmed it, and what arrived is at least its amount.
    Confirm {
        /// Fee paid, when known.
        fee: Option<AtomicAmount>,
        /// What arrived at the payee, recorded as the payment's amount (`None`: the amount
        /// stands).
        arrived: Option<AtomicAmount>,
    },
    /// The chain reverted or dropped it.
    Fail {
        /// Why.
        reason: String,
    },
    /// The wait budget ran out with no verdict.
    WaitTimedOut,
    /// A `verified` payment whose transaction id was never stored, hence never broadcast, was
    /// left behind (by a crash).
    Abandon {
        /// Why, for the record.
        reason: String,
    },
    /// It can no longer land.
    Expire {
        /// How that is known.
        evidence: ExpiryEvidence,
        /// Why, for the record.
        reason: String,
    },
}

/// An event that the current status does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("payment cannot go from {from} on {event}")]
pub struct TransitionError {
    /// Current status (`new` for none).
    pub from: String,
    /// The event's name.
    pub event: &'static str,
}

impl Event {
    /// Short name for messages.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Build => "build",
            Self::Verify => "verify",
            Self::Submit { .. } => "submit",
            Self::Confirm { .. } => "confirm",
            Self::Fail { .. } => "fail",
            Self::WaitTimedOut => "wait timed out",
            Self::Abandon { .. } => "abandon",
            Self::Expire { evidence: ExpiryEvidence::Chain, .. } => "expire (chain evidence)",
            Self::Expire { evidence: ExpiryEvidence::Clock, .. } => "expire (clock only)",
        }
    }
}

/// The status after `event` happens to a payment in `from` (`None`: not created yet).
///
/// # Errors
/// [`TransitionError`] for every pair the state machine does not allow.
pub fn transition(from: Option<PaymentStatus>, event: &Event) -> Result<PaymentStatus, TransitionError> {
    use PaymentStatus as S;
    let to = match (from, event) {
        (None, Event::Build) => S::Built,
        (None, Event::Verify) => S::Verified,
        (Some(S::Built | S::Verified), Event::Submit { .. }) => S::Submitted,
        (Some(S::Built), Event::Expire { .. }) => S::Expired,
        (Some(S::Verified), Event::Abandon { .. }) => S::Failed,
        (Some(S::Submitted | S::Pending), Event::Confirm { .. }) => S::Confirmed,
        (Some(S::Submitted | S::Pending), Event::Fail { .. }) => S::Failed,
        (Some(S::Submitted), Event::WaitTimedOut) => S::Pending,
        (Some(S::Pending), Event::Expire { evidence: ExpiryEvidence::Chain, .. }) => S::Expired,
        _ => {
            return Err(TransitionError {
                from: from.map_or("new", PaymentStatus::as_str).to_owned(),
                event: event.name(),
            });
        }
    };
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use PaymentStatus as S;

    fn events() -> Vec<Event> {
        vec![
            Event::Build,
            Event::Verify,
            Event::Submit { transaction: "sig".into() },
            Event::Confirm { fee: None, arrived: None },
            Event::Fail { reason: "reverted".into() },
            Event::WaitTimedOut,
            Event::Abandon { reason: "never broadcast".into() },
            Event::Expire { evidence: ExpiryEvidence::Chain, reason: "block height passed".into() },
            Event::Expire { evidence: ExpiryEvidence::Clock, reason: "expiresAt passed".into() },
        ]
    }

    /// The whole table: every (status, event) pair, allowed or not.
    #[test]
    fn every_edge() {
        let allowed: &[(Option<S>, &str, S)] = &[
            (None, "build", S::Built),
            (None, "verify", S::Verified),
            (Some(S::Built), "submit", S::Submitted),
            (Some(S::Built), "expire (chain evidence)", S::Expired),
            (Some(S::Built), "expire (clock only)", S::Expired),
            (Some(S::Verified), "submit", S::Submitted),
            (Some(S::Verified), "abandon", S::Failed),
            (Some(S::Submitted), "confirm", S::Confirmed),
            (Some(S::Submitted), "fail", S::Failed),
            (Some(S::Submitted), "wait timed out", S::Pending),
            (Some(S::Pending), "confirm", S::Confirmed),
            (Some(S::Pending), "fail", S::Failed),
            (Some(S::Pending), "expire (chain evidence)", S::Expired),
        ];
        let froms = std::iter::once(None).chain(S::ALL.into_iter().map(Some));
        let mut checked = 0;
        for from in froms {
            for event in events() {
                let expected = allowed.iter().find(|(f, e, _)| *f == from && *e == event.name()).map(|(_, _, to)| *to);
                let got = transition(from, &event).ok();
                assert_eq!(got, expected, "{from:?} on {}", event.name());
                checked += 1;
            }
        }
        assert_eq!(checked, 8 * 9);
    }

    #[test]
    fn final_states_never_move_and_pending_never_expires_on_the_clock_alone() {
        for s in S::ALL.into_iter().filter(|s| s.is_final()) {
            for e in events() {
                assert!(transition(Some(s), &e).is_err(), "{s:?} moved on {}", e.name());
            }
        }
        let clock_only = Event::Expire { evidence: ExpiryEvidence::Clock, reason: String::new() };
        let err = transition(Some(S::Pending), &clock_only).unwrap_err();
        assert_eq!(err.to_string(), "payment cannot go from pending on expire (clock only)");
    }
}
