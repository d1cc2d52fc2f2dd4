//! Who paid, told to the upstream in request headers it can trust.
//!
//! A paid request reaches the upstream with `<prefix>Payer`, `<prefix>Amount` (atomic units),
//! `<prefix>Asset` (`native` or the token's address), `<prefix>Network` (CAIP-2),
//! `<prefix>Transaction` and `<prefix>Payment-Id` (when known), `<prefix>Nonce` (random, one per
//! request), and `<prefix>Signature:
//! t=<unix seconds>,v1=<hex HMAC-SHA256>` — the scheme of Tollgate's webhooks
//! ([`tollgate::webhook`]), keyed with a secret the proxy and the upstream share, over
//!
//! ```text
//! tollgate-proxy-identity-v1\n<METHOD>\n<path and query as the upstream receives them>\n
//! <payer>\n<amount>\n<asset>\n<network>\n<transaction>\n<payment id>\n<nonce>
//! ```
//!
//! (absent values empty). The proxy removes any such header a client sent, on every route, so
//! an upstream that checks the signature trusts the headers only from the proxy, only for that
//! request, and only within the tolerance. An upstream that also remembers the nonces it saw
//! within the tolerance refuses every replay of a captured request.
//!
//! On a route settled after the upstream answers (`settle = "after"`, metered prices) the
//! request arrives verified, not yet settled: no `Transaction`, and the money moves only if the
//! upstream answers below 400 (and, metered, for what it reports).

use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate::Payment;
use tollgate::webhook;

/// The identity headers' names, each `<prefix><field>`.
const FIELDS: [&str; 7] = ["Payer", "Amount", "Asset", "Network", "Transaction", "Payment-Id", "Nonce"];
/// The signature's field.
const SIGNATURE: &str = "Signature";
/// What the signed text starts with (a version: signatures of other messages never match).
const CONTEXT: &str = "tollgate-proxy-identity-v1";

/// The signed identity headers a proxy adds (see the module docs).
#[derive(Clone)]
pub struct Identity {
    secret: String,
    prefix: String,
    /// `<prefix><field>` for each of [`FIELDS`], made once (they are stripped from every request).
    names: [HeaderName; 7],
    /// `<prefix>Signature`.
    signature: HeaderName,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

/// Why identity headers were not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// No signature header, or one that is not ASCII.
    #[error("no identity signature")]
    Missing,
    /// The signature does not match, or is outside the tolerance.
    #[error(transparent)]
    Signature(#[from] webhook::WebhookError),
}

/// The identity a checked request carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaidBy {
    /// Who paid, when the facilitator said.
    pub payer: Option<String>,
    /// Atomic units paid (for a metered route: the most authorized).
    pub amount: String,
    /// `native` or the token's address.
    pub asset: String,
    /// CAIP-2 network.
    pub network: String,
    /// The settling transaction, when settled before the upstream was asked.
    pub transaction: Option<String>,
    /// The gateway's payment id.
    pub payment_id: Option<String>,
    /// This request's nonce (remember it within the tolerance to refuse replays).
    pub nonce: String,
}

impl Identity {
    /// Headers named `<prefix>…`, signed with `secret`.
    ///
    /// # Errors
    /// When `<prefix>…` is not a header name.
    pub fn new(secret: impl Into<String>, prefix: impl Into<String>) -> Result<Self, http::header::InvalidHeaderName> {
        let prefix = prefix.into();
        let name = |field: &str| HeaderName::try_from(format!("{prefix}{field}"));
        let names = [
            name(FIELDS[0])?,
            name(FIELDS[1])?,
            name(FIELDS[2])?,
            name(FIELDS[3])?,
            name(FIELDS[4])?,
            name(FIELDS[5])?,
            name(FIELDS[6])?,
        ];
        let signature = name(SIGNATURE)?;
        Ok(Self { secret: secret.into(), prefix, names, signature })
    }

    /// Removes every identity header (a client's own, on any route).
    pub fn strip(&self, headers: &mut HeaderMap) {
        for name in self.names.iter().chain(std::iter::once(&self.signature)) {
            headers.remove(name);
        }
    }

    /// Adds the headers for `payment` of a `method` request to `path_and_query`, signed at `now`.
    pub fn add(&self, headers: &mut HeaderMap, method: &str, path_and_query: &str, payment: &Payment, now: i64) {
        let values = [
            payment.payer.clone().unwrap_or_default(),
            payment.amount.to_string(),
            payment.asset.to_string(),
            payment.network.to_string(),
            payment.transaction.clone().unwrap_or_default(),
            payment.payment_id.clone().unwrap_or_default(),
            format!("{:032x}", rand::random::<u128>()),
        ];
        let text = signed_text(method, path_and_query, &values);
        for (name, value) in self.names.iter().zip(&values) {
            if let Ok(value) = HeaderValue::from_str(value)
                && !value.is_empty()
            {
                headers.insert(name.clone(), value);
            }
        }
        if let Ok(value) = HeaderValue::from_str(&webhook::sign(&self.secret, now, text.as_bytes())) {
            headers.insert(self.signature.clone(), value);
        }
    }

    /// Checks the identity headers of a request the upstream received (for upstreams written in
    /// Rust): the signature over these headers, this method and this path, within
    /// `tolerance_secs` of `now`.
    ///
    /// # Errors
    /// [`IdentityError`] when the headers are missing, altered, for another request, or too old.
    pub fn verify(
        &self,
        headers: &HeaderMap,
        method: &str,
        path_and_query: &str,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<PaidBy, IdentityError> {
        let read =
            |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned).unwrap_or_default();
        let signature = headers.get(&self.signature).and_then(|v| v.to_str().ok()).ok_or(IdentityError::Missing)?;
        let values = self.names.each_ref().map(read);
        let text = signed_text(method, path_and_query, &values);
        webhook::verify(&self.secret, signature, text.as_bytes(), now, tolerance_secs)?;
        let [payer, amount, asset, network, transaction, payment_id, nonce] = values;
        let some = |s: String| (!s.is_empty()).then_some(s);
        Ok(PaidBy {
            payer: some(payer),
            amount,
            asset,
            network,
            transaction: some(transaction),
            payment_id: some(payment_id),
            nonce,
        })
    }
}

fn signed_text(method: &str, path_and_query: &str, values: &[String; 7]) -> String {
    let mut text = format!("{CONTEXT}\n{method}\n{path_and_query}");
    for value in values {
        text.push('\n');
        text.push_str(value);
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tollgate::protocol::x402::Asset;
    use tollgate::protocol::{AtomicAmount, Network};

    fn payment() -> Payment {
        Payment::new(
            "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1".parse::<Network>().unwrap(),
            Asset::Native,
            AtomicAmount(1_000),
            "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin".parse().unwrap(),
        )
        .with_payer("4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T")
        .with_transaction("5sig")
    }

    #[test]
    fn signed_headers_verify_only_for_their_request() {
        let identity = Identity::new("s3cret", "X-Tollgate-").unwrap();
        let mut headers = HeaderMap::new();
        identity.add(&mut headers, "GET", "/report?x=1", &payment(), 1_000);
        let paid = identity.verify(&headers, "GET", "/report?x=1", 1_010, 300).unwrap();
        assert_eq!(paid.amount, "1000");
        assert_eq!(paid.transaction.as_deref(), Some("5sig"));
        assert!(paid.payment_id.is_none());
        assert_eq!(paid.nonce.len(), 32);
        let mut again = HeaderMap::new();
        identity.add(&mut again, "GET", "/report?x=1", &payment(), 1_000);
        assert_ne!(again["x-tollgate-nonce"], headers["x-tollgate-nonce"], "a nonce per request");
        assert!(identity.verify(&headers, "POST", "/report?x=1", 1_010, 300).is_err(), "another method");
        assert!(identity.verify(&headers, "GET", "/report?x=2", 1_010, 300).is_err(), "another query");
        assert!(identity.verify(&headers, "GET", "/report?x=1", 2_000, 300).is_err(), "too old");
        assert!(
            Identity::new("other", "X-Tollgate-").unwrap().verify(&headers, "GET", "/report?x=1", 1_010, 300).is_err()
        );
        let mut forged = headers.clone();
        forged.insert("x-tollgate-amount", HeaderValue::from_static("999999"));
        assert!(identity.verify(&forged, "GET", "/report?x=1", 1_010, 300).is_err(), "altered amount");
        identity.strip(&mut headers);
        assert!(headers.is_empty());
        assert_eq!(identity.verify(&headers, "GET", "/", 0, 300), Err(IdentityError::Missing));
    }
}
