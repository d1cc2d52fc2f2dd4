//! What the layer remembers about proofs: a moka cache of verdicts (key: SHA-256 of the decoded
//! payload), and the proofs being settled right now, so concurrent requests with one new proof
//! make one settlement: they share its answer when it paid nothing (a refusal, pending), and each
//! claims an answer of its own once it paid.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use tokio::sync::watch;
use tollgate_protocol::x402::PaymentPayload;

use crate::answer::LocalCount;
use crate::challenge::Buffered;
use crate::facilitator::Payment;

/// A payment header decoded and matched: its cache key, the offer it pays, the payload.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub key: String,
    pub offer: usize,
    pub payload: PaymentPayload,
}

/// What a paid proof is a ticket for: the resource the seller named for the request it paid,
/// and that request's method. A repeat of the proof is served only for the same.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Ticket {
    pub resource: String,
    pub method: http::Method,
}

impl Ticket {
    /// Why a request for `other` is not what this ticket paid for, if it is not.
    pub(crate) fn refuses(&self, other: &Self) -> Option<String> {
        if self.resource != other.resource {
            return Some("this payment was made for another resource".into());
        }
        (self.method != other.method).then(|| format!("this payment was made for a {} request", self.method))
    }
}

/// A verdict remembered for a proof: only what serves the next request faster, never what decides
/// how many answers it buys (the facilitator counts those, unless it does not count at all).
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant, reason = "kept behind an Arc in the cache, never moved around")]
pub(crate) enum Known {
    /// Settled for `ticket`: a repeat of it is claimed from the facilitator without verifying
    /// again, or — when the facilitator does not count answers (`local`) — counted here.
    Accepted { ticket: Ticket, payment: Payment, local: Option<Arc<LocalCount>> },
    /// Refused for `ticket` and the request whose digest is `request`: that request is refused
    /// again without the facilitator while remembered. (A refusal can be the ticket's: "made for
    /// another resource", or the request's: "made for another request".)
    Refused { ticket: Ticket, request: Option<String>, reason: String },
    /// Paid, not yet confirmed: a retry of `ticket` asks the facilitator how it ended (for a
    /// metered price, how its settlement of `charged` ended).
    Pending { ticket: Ticket, payment_id: Option<String>, charged: Option<tollgate_protocol::AtomicAmount> },
}

impl Known {
    /// An accepted proof, and its answers counted here when the facilitator does not.
    pub(crate) fn accepted(ticket: &Ticket, payment: &Payment, local: Option<Arc<LocalCount>>) -> Self {
        Self::Accepted { ticket: ticket.clone(), payment: payment.clone(), local }
    }
}

struct Ttl {
    accepted: Duration,
    refused: Duration,
}

impl moka::Expiry<String, Arc<Known>> for Ttl {
    fn expire_after_create(&self, _key: &String, value: &Arc<Known>, _created_at: Instant) -> Option<Duration> {
        Some(match **value {
            Known::Refused { .. } => self.refused,
            Known::Accepted { .. } | Known::Pending { .. } => self.accepted,
        })
    }

    fn expire_after_update(
        &self,
        key: &String,
        value: &Arc<Known>,
        updated_at: Instant,
        _duration_until_expiry: Option<Duration>,
    ) -> Option<Duration> {
        self.expire_after_create(key, value, updated_at)
    }
}

/// The outcome of one settlement, shared with the requests that waited for it when it paid
/// nothing (a refusal, pending, unavailable); `None` when it paid: each waiting request then
/// claims an answer of its own (or is refused once the payment has served what it buys).
pub(crate) type Shared = Option<Arc<Buffered>>;

/// Proof verdicts and in-flight settlements.
pub(crate) struct ProofCache {
    known: moka::future::Cache<String, Arc<Known>>,
    in_flight: Mutex<HashMap<String, watch::Receiver<Shared>>>,
}

/// Either this request settles the proof (and must [`Leader::finish`]), or it waits for the one
/// that does.
pub(crate) enum Flight {
    /// This request goes first.
    Leader(Leader),
    /// Another request is settling this proof: wait for its outcome.
    Follower(watch::Receiver<Shared>),
}

/// The request settling a proof; dropping it without finishing releases its followers (they
/// start over).
pub(crate) struct Leader {
    key: String,
    sender: watch::Sender<Shared>,
    cache: Arc<ProofCache>,
}

impl Leader {
    /// Hands the outcome to the followers and stops being in flight.
    pub(crate) fn finish(self, outcome: Shared) {
        self.sender.send_replace(outcome);
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.cache.in_flight.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.key);
    }
}

impl ProofCache {
    pub(crate) fn new(capacity: u64, accepted: Duration, refused: Duration) -> Self {
        let known =
            moka::future::Cache::builder().max_capacity(capacity).expire_after(Ttl { accepted, refused }).build();
        Self { known, in_flight: Mutex::new(HashMap::new()) }
    }

    /// The cache key of a proof: SHA-256 of the canonical JSON of what pays — its scheme, network
    /// and scheme payload — in either protocol version and whatever wraps it (v2's `accepted`,
    /// `resource`, extensions): a proof wrapped again, or in the other version, is the same
    /// proof, remembered for what it paid.
    pub(crate) fn key(payload: &PaymentPayload) -> String {
        let bytes = serde_json::to_vec(&(payload.scheme(), payload.network(), payload.payload()));
        Sha256::digest(bytes.unwrap_or_default()).iter().map(|b| format!("{b:02x}")).collect()
    }

    pub(crate) async fn get(&self, key: &str) -> Option<Arc<Known>> {
        self.known.get(key).await
    }

    pub(crate) async fn put(&self, key: &str, known: Known) {
        self.known.insert(key.to_owned(), Arc::new(known)).await;
    }

    /// Joins the settlement of `key` in flight, or becomes its leader.
    pub(crate) fn fly(self: &Arc<Self>, key: &str) -> Flight {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(receiver) = in_flight.get(key) {
            return Flight::Follower(receiver.clone());
        }
        let (sender, receiver) = watch::channel(None);
        in_flight.insert(key.to_owned(), receiver);
        Flight::Leader(Leader { key: key.to_owned(), sender, cache: self.clone() })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn v2(resource: Option<&str>, transaction: &str) -> PaymentPayload {
        let mut payload = json!({"x402Version": 2, "accepted": {"scheme": "exact-native", "network": "eip155:8453",
            "amount": "100", "asset": "native", "payTo": "0x1111111111111111111111111111111111111111",
            "maxTimeoutSeconds": 60}, "payload": {"transaction": transaction}});
        if let Some(url) = resource {
            payload["resource"] = json!({"url": url});
        }
        serde_json::from_value(payload).unwrap()
    }

    #[test]
    fn a_proof_wrapped_again_is_the_same_proof() {
        let key = ProofCache::key(&v2(Some("https://shop.example/a"), "0x01"));
        assert_eq!(ProofCache::key(&v2(Some("https://shop.example/b"), "0x01")), key);
        assert_eq!(ProofCache::key(&v2(None, "0x01")), key);
        assert_ne!(ProofCache::key(&v2(None, "0x02")), key, "another proof");
        let v1: PaymentPayload = serde_json::from_value(json!({"x402Version": 1, "scheme": "exact-native",
            "network": "eip155:8453", "payload": {"transaction": "0x01"}}))
        .unwrap();
        assert_eq!(ProofCache::key(&v1), key, "the same proof in a v1 header");
    }

    #[test]
    fn a_ticket_serves_its_resource_and_method_only() {
        let get = Ticket { resource: "https://shop.example/a".into(), method: http::Method::GET };
        assert_eq!(get.refuses(&get.clone()), None);
        let other = Ticket { resource: "https://shop.example/b".into(), ..get.clone() };
        assert!(get.refuses(&other).unwrap().contains("another resource"));
        let post = Ticket { method: http::Method::POST, ..get.clone() };
        assert!(get.refuses(&post).unwrap().contains("GET request"));
    }
}
