//! The x402 `payment-identifier` extension, on the seller's side: a buyer's idempotency key
//! names one paid request. The same id with the same proof is answered with the paid answer
//! given before (the handler does not run again); the same id with another proof, or for
//! another resource or method, is a conflict (409); a payment without an id where the layer
//! requires one is refused (400).
//!
//! An id is claimed by its proof when the request arrives, so two proofs racing under one id
//! cannot both be settled by this layer; a claim whose payment is not made is released, and the
//! buyer may pay again under the same id.

use std::sync::Arc;
use std::time::Duration;

use crate::cache::Ticket;
use crate::challenge::Buffered;

/// The most memory the answers kept by id take.
const ANSWER_BYTES: u64 = 64 * 1024 * 1024;

/// What an id is held for: the proof (its cache key) and request that claimed it, and the paid
/// answer once there is one.
#[derive(Debug)]
struct Claim {
    key: String,
    ticket: Ticket,
    answer: Option<Buffered>,
}

/// What a request presenting an id finds.
#[derive(Debug)]
pub(crate) enum Claimed {
    /// Paid before with this proof, for this request: its answer.
    Answered(Buffered),
    /// The id is held by another proof or request.
    Conflict,
    /// The id is this proof's (new, or claimed by it and not answered yet): go on.
    Ours,
}

/// Ids claimed, with their answers, for the layer's `accepted_ttl`.
pub(crate) struct Identifiers {
    claims: moka::future::Cache<String, Arc<Claim>>,
}

impl Identifiers {
    pub(crate) fn new(lifetime: Duration) -> Self {
        let claims = moka::future::Cache::builder()
            .weigher(|id: &String, claim: &Arc<Claim>| {
                let answer = claim.answer.as_ref().map_or(0, |a| a.body.len() + a.headers.len() * 64);
                u32::try_from(id.len() + claim.key.len() + claim.ticket.resource.len() + answer + 128)
                    .unwrap_or(u32::MAX)
            })
            .max_capacity(ANSWER_BYTES)
            .time_to_live(lifetime)
            .build();
        Self { claims }
    }

    /// Claims `id` for the proof `key` paying `ticket`, or says who holds it.
    pub(crate) async fn claim(&self, id: &str, key: &str, ticket: &Ticket) -> Claimed {
        let fresh = Arc::new(Claim { key: key.to_owned(), ticket: ticket.clone(), answer: None });
        let held = self.claims.entry(id.to_owned()).or_insert_with(async { fresh }).await.into_value();
        if held.key != key || held.ticket != *ticket {
            return Claimed::Conflict;
        }
        held.answer.clone().map_or(Claimed::Ours, Claimed::Answered)
    }

    /// The paid answer to `id`'s request, kept for its repeats (when `key` still holds it).
    pub(crate) async fn answered(&self, id: &str, key: &str, answer: &Buffered) {
        if let Some(held) = self.claims.get(id).await
            && held.key == key
        {
            let claim = Claim { key: held.key.clone(), ticket: held.ticket.clone(), answer: Some(answer.clone()) };
            self.claims.insert(id.to_owned(), Arc::new(claim)).await;
        }
    }

    /// Lets `id` go when `key`'s payment was not made (refused, pending, unavailable).
    pub(crate) async fn release(&self, id: &str, key: &str) {
        if let Some(held) = self.claims.get(id).await
            && held.key == key
            && held.answer.is_none()
        {
            self.claims.invalidate(id).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::{HeaderMap, Method, StatusCode};

    use super::*;

    #[tokio::test]
    async fn an_id_serves_its_own_proof_and_request_only() {
        let ids = Identifiers::new(Duration::from_secs(60));
        let ticket = Ticket { resource: "https://shop.example/a".into(), method: Method::GET };
        let id = "pay_0123456789abcdef0123";
        assert!(matches!(ids.claim(id, "proof-a", &ticket).await, Claimed::Ours));
        assert!(matches!(ids.claim(id, "proof-b", &ticket).await, Claimed::Conflict), "another proof");
        let post = Ticket { method: Method::POST, ..ticket.clone() };
        assert!(matches!(ids.claim(id, "proof-a", &post).await, Claimed::Conflict), "another request");
        // Not paid: released, and another proof may use the id.
        ids.release(id, "proof-a").await;
        assert!(matches!(ids.claim(id, "proof-b", &ticket).await, Claimed::Ours));
        let answer = Buffered { status: StatusCode::OK, headers: HeaderMap::new(), body: Bytes::from_static(b"paid") };
        ids.answered(id, "proof-a", &answer).await;
        assert!(matches!(ids.claim(id, "proof-b", &ticket).await, Claimed::Ours), "only the holder answers");
        ids.answered(id, "proof-b", &answer).await;
        let Claimed::Answered(again) = ids.claim(id, "proof-b", &ticket).await else { panic!("answered") };
        assert_eq!(again.body, Bytes::from_static(b"paid"));
        ids.release(id, "proof-b").await;
        assert!(matches!(ids.claim(id, "proof-b", &ticket).await, Claimed::Answered(_)), "an answer stays");
    }
}
