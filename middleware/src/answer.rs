//! What one payment buys, on the seller's side: the answers it serves.
//!
//! The layer states its terms with every claim ([`Ticket`]: how many answers, for how long after
//! the first, and the digest of the request answered). A facilitator that counts answers
//! (Tollgate's, in its database) claims one for every verdict that pays, so more instances,
//! processes or restarts never add answers; the layer counts alone ([`LocalCount`]) only when the
//! facilitator does not — any other x402 facilitator, which settles a proof once and refuses it
//! afterwards, so only the layer that settled it can serve it again.
//!
//! A claimed answer is [`Counted`]: given back (to the facilitator, or the local count) when it
//! never reaches its buyer — the handler failed, or the buyer hung up before the first byte.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::task::TaskTracker;
use tollgate_protocol::ticket::Ticket;

use crate::facilitator::{Facilitator, Payment};

/// What the layer sells per payment (its builder's `ticket_uses` and `ticket_secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Terms {
    /// Answers one payment serves, the first included.
    pub uses: u32,
    /// How long after its first answer a repeat of the request is served.
    pub window: Duration,
}

impl Terms {
    /// The terms with the request answered: what a claim sends.
    pub(crate) fn ticket(self, request: Option<String>) -> Ticket {
        Ticket { uses: self.uses, seconds: self.window.as_secs(), request, pass: None }
    }
}

/// Answers counted by the layer itself, for a facilitator that does not count them.
#[derive(Debug)]
pub(crate) struct LocalCount {
    state: Mutex<Local>,
}

#[derive(Debug)]
struct Local {
    served: u32,
    /// The request answered first.
    request: Option<String>,
    /// When the count last went from nothing served to one.
    opened: Instant,
}

impl LocalCount {
    /// A count whose first answer, for `request`, is being served.
    pub(crate) fn first(request: Option<String>) -> Arc<Self> {
        Arc::new(Self { state: Mutex::new(Local { served: 1, request, opened: Instant::now() }) })
    }

    /// Claims one more answer on `ticket`'s terms, or says why the payment buys no more.
    pub(crate) fn claim(&self, ticket: &Ticket) -> Result<(), String> {
        let mut local = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if local.served == 0 {
            *local = Local { served: 1, request: ticket.request.clone(), opened: Instant::now() };
            return Ok(());
        }
        if local.served >= ticket.uses {
            return Err(used_up(ticket.uses));
        }
        if local.request.is_none() || local.request != ticket.request {
            return Err(OTHER_REQUEST.to_owned());
        }
        if local.opened.elapsed() >= Duration::from_secs(ticket.seconds) {
            return Err(expired(ticket.seconds));
        }
        local.served += 1;
        Ok(())
    }

    fn release(&self) {
        let mut local = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        local.served = local.served.saturating_sub(1);
    }
}

/// Why a payment whose answers are all served is refused.
pub(crate) fn used_up(uses: u32) -> String {
    format!(
        "answers_used: this payment has served the {uses} answer{} it buys: pay again",
        if uses == 1 { "" } else { "s" }
    )
}

/// Why a repeat of another request is refused.
pub(crate) const OTHER_REQUEST: &str = "answers_used: this payment was made for another request (a repeat is served \
                                        only for the same request: method, resource and body): pay for this one";

/// Why a repeat past the ticket's window is refused.
pub(crate) fn expired(seconds: u64) -> String {
    format!(
        "answers_used: this payment serves its request again for {seconds} s after its first answer, and that has passed: pay again"
    )
}

/// An answer claimed for a payment: given back when dropped before [`Counted::delivered`].
pub(crate) struct Counted {
    release: Option<Release>,
}

enum Release {
    /// Counted by the facilitator: given back with [`Facilitator::release`], in a task.
    Facilitator { facilitator: Arc<dyn Facilitator>, payment: Box<Payment>, tasks: TaskTracker },
    /// Counted here.
    Local(Arc<LocalCount>),
}

impl Counted {
    /// The answer `payment` claimed: counted by `facilitator` when the payment says so, else by
    /// `local` (none: not counted at all, as an `upto` charge of nothing).
    pub(crate) fn new(
        facilitator: &Arc<dyn Facilitator>,
        payment: &Payment,
        local: Option<&Arc<LocalCount>>,
        tasks: &TaskTracker,
    ) -> Option<Self> {
        let release = match (payment.answers, local) {
            (Some(_), _) => Release::Facilitator {
                facilitator: facilitator.clone(),
                payment: Box::new(payment.clone()),
                tasks: tasks.clone(),
            },
            (None, Some(local)) => Release::Local(local.clone()),
            (None, None) => return None,
        };
        Some(Self { release: Some(release) })
    }

    /// The answer reached its buyer: it stays counted.
    pub(crate) fn delivered(mut self) {
        self.release = None;
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        match self.release.take() {
            None => {}
            Some(Release::Local(local)) => local.release(),
            Some(Release::Facilitator { facilitator, payment, tasks }) => {
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    tracing::warn!("an answer that reached no buyer was dropped outside a runtime; it stays counted");
                    return;
                };
                tasks.spawn_on(async move { facilitator.release(&payment).await }, &runtime);
            }
        }
    }
}

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counted").field("armed", &self.release.is_some()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket(request: &str) -> Ticket {
        Terms { uses: 2, window: Duration::from_secs(60) }.ticket(Some(request.to_owned()))
    }

    #[test]
    fn a_local_count_serves_the_same_request_its_uses() {
        let count = LocalCount::first(Some("a".into()));
        assert!(count.claim(&ticket("b")).unwrap_err().contains("another request"));
        assert_eq!(count.claim(&ticket("a")), Ok(()));
        assert!(count.claim(&ticket("a")).unwrap_err().contains("served the 2 answers"));
        // An answer given back may be served again; with nothing served, any request opens it.
        count.release();
        assert_eq!(count.claim(&ticket("a")), Ok(()));
        count.release();
        count.release();
        assert_eq!(count.claim(&ticket("b")), Ok(()));
        let unhashable = LocalCount::first(None);
        assert!(unhashable.claim(&Terms { uses: 2, window: Duration::from_secs(60) }.ticket(None)).is_err());
    }

    /// An answer that never reached its buyer is given back to the count; one delivered stays.
    #[test]
    fn an_answer_dropped_before_delivery_is_given_back() {
        let count = LocalCount::first(Some("a".into()));
        let counted = || Counted { release: Some(Release::Local(count.clone())) };
        assert_eq!(count.claim(&ticket("a")), Ok(()), "the second of two answers");
        drop(counted());
        assert_eq!(count.claim(&ticket("a")), Ok(()), "the dropped answer was given back");
        counted().delivered();
        assert!(count.claim(&ticket("a")).is_err(), "a delivered answer stays counted");
    }

    #[test]
    fn a_local_count_keeps_its_window() {
        let count = LocalCount::first(Some("a".into()));
        let closed = Terms { uses: 3, window: Duration::ZERO }.ticket(Some("a".into()));
        assert!(count.claim(&closed).unwrap_err().contains("has passed"));
    }
}
