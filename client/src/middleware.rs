//! [`PaymentMiddleware`]: the buyer as a `reqwest-middleware` middleware, so that a program's own
//! `reqwest` client pays the 402 answers it meets — any method, headers and body — with a
//! [`Buyer`]'s keys, cap and budget.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use tollgate_client::{Buyer, Cap, PaymentMade, PaymentMiddleware};
//!
//! let keypair = solana_sdk::signature::Keypair::new();
//! let buyer = Buyer::new().with_solana(keypair, "http://127.0.0.1:8899").with_cap(Cap::parse("0.01SOL")?);
//! let http = PaymentMiddleware::client(Arc::new(buyer));
//! let answer = http.post("http://127.0.0.1:8080/summarize").body("a text to summarize").send().await?;
//! let paid = answer.extensions().get::<PaymentMade>().cloned();
//! println!("{} (paid: {paid:?})", answer.text().await?);
//! # Ok(()) }
//! ```

use std::sync::Arc;

use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};
use tollgate_protocol::x402::SettleResponse;
use tollgate_protocol::x402::header::{
    PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE, X_PAYMENT, X_PAYMENT_RESPONSE,
};

use crate::{Buyer, PayError, pending_wait, read_challenge};

/// Pays the 402 answers of the requests it sees, once each, and sends them again with the
/// payment. The paid answer carries the [`crate::PaymentMade`] in its extensions.
///
/// - A request whose body streams cannot be sent again: its 402 is an error
///   ([`PayError::Body`]); give the body as bytes or a string.
/// - A pending settlement (503) is retried with the same proof, as [`Buyer::send`] does, and
///   so are a lost answer and a settlement that timed out (504) when that cannot run the
///   request twice (an idempotent method, or the seller's `payment-identifier`); other answers
///   to the paid request are returned as they are (a refusal stays counted in the budget).
/// - A request that carries a payment header already passes through.
/// - A seller selling a pass this buyer's wallet bought signs it in (x402 `sign-in-with-x`)
///   instead of paying: the answer then carries [`SignedIn`].
///
/// Build the client with [`crate::same_origin_redirects`] (as [`Self::client`] does): a redirect
/// to another origin must not carry the payment header there.
#[derive(Debug, Clone)]
pub struct PaymentMiddleware {
    buyer: Arc<Buyer>,
}

/// In a response's extensions: the wallet that signed in with a pass it bought before (x402
/// `sign-in-with-x`) instead of paying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn(pub String);

impl PaymentMiddleware {
    /// Pays with `buyer`.
    #[must_use]
    pub const fn new(buyer: Arc<Buyer>) -> Self {
        Self { buyer }
    }

    /// A `reqwest` client that follows redirects only within a request's origin, with this
    /// middleware.
    #[must_use]
    pub fn client(buyer: Arc<Buyer>) -> ClientWithMiddleware {
        let http = reqwest::Client::builder().redirect(crate::same_origin_redirects()).build().unwrap_or_default();
        reqwest_middleware::ClientBuilder::new(http).with(Self::new(buyer)).build()
    }
}

fn header<'a>(response: &'a reqwest::Response, names: &[&str]) -> Option<&'a str> {
    names.iter().find_map(|name| response.headers().get(*name)).and_then(|v| v.to_str().ok())
}

#[async_trait::async_trait]
impl Middleware for PaymentMiddleware {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        if [X_PAYMENT, PAYMENT_SIGNATURE].iter().any(|name| request.headers().contains_key(*name)) {
            return next.run(request, extensions).await;
        }
        let again = request.try_clone();
        let first = next.clone().run(request, extensions).await?;
        if first.status().as_u16() != 402 {
            return Ok(first);
        }
        let Some(again) = again else {
            return Err(reqwest_middleware::Error::middleware(PayError::Body(
                "a streaming body cannot be sent again with the payment: give it as bytes".into(),
            )));
        };
        let v2 = header(&first, &[PAYMENT_REQUIRED]).map(str::to_owned);
        let body = first.bytes().await?;
        let mut challenge = read_challenge(v2.as_deref(), &body).map_err(reqwest_middleware::Error::middleware)?;
        let url = again.url().to_string();
        // A pass bought before: its wallet signs in instead of paying again (answered with a
        // `SignedIn` in the response's extensions); refused, the new payment request is paid.
        if let Some((value, wallet)) = self.buyer.sign_in(&challenge, &url).await
            && let (Some(mut signed), Ok(value)) = (again.try_clone(), reqwest::header::HeaderValue::from_str(&value))
        {
            signed.headers_mut().insert(tollgate_protocol::siwx::HEADER, value);
            let mut answer = next.clone().run(signed, extensions).await?;
            if answer.status().as_u16() != 402 {
                if answer.status().is_success() || answer.status().is_redirection() {
                    answer.extensions_mut().insert(SignedIn(wallet));
                }
                return Ok(answer);
            }
            let v2 = header(&answer, &[PAYMENT_REQUIRED]).map(str::to_owned);
            let body = answer.bytes().await?;
            challenge = read_challenge(v2.as_deref(), &body).map_err(reqwest_middleware::Error::middleware)?;
        }
        // A payment channel's count the seller corrects (a 402 naming it) is paid again once.
        let mut corrections = 1;
        'pay: loop {
            let authorization =
                self.buyer.authorize(&challenge, &url).await.map_err(reqwest_middleware::Error::middleware)?;
            // Sent again when its answer is lost (or its settlement timed out) only when that cannot
            // run it twice: an idempotent method, or a seller that answers the payment's identifier.
            let resend = authorization.payment_id().is_some() || again.method().is_idempotent();
            let mut retries = 0;
            loop {
                let Some(mut paid) = again.try_clone() else {
                    self.buyer.unsettled(authorization).await;
                    return Err(reqwest_middleware::Error::middleware(PayError::Body(
                        "the request cannot be sent again".into(),
                    )));
                };
                let (name, value) = authorization.header();
                let value = reqwest::header::HeaderValue::from_str(value).map_err(|e| {
                    reqwest_middleware::Error::middleware(PayError::Build(format!("the payment header: {e}")))
                })?;
                paid.headers_mut().insert(name, value);
                let mut answer = match next.clone().run(paid, extensions).await {
                    Ok(answer) => answer,
                    Err(_) if resend && retries < self.buyer.pending_retries() => {
                        retries += 1;
                        tokio::time::sleep(pending_wait(1)).await;
                        continue;
                    }
                    Err(e) => {
                        self.buyer.unsettled(authorization).await;
                        return Err(e);
                    }
                };
                let status = answer.status().as_u16();
                if (status == 503 || (status == 504 && resend)) && retries < self.buyer.pending_retries() {
                    retries += 1;
                    let wait = header(&answer, &["retry-after"]).and_then(|v| v.parse::<u64>().ok()).unwrap_or(1);
                    tokio::time::sleep(pending_wait(wait)).await;
                    continue;
                }
                if !(200..400).contains(&status) {
                    let corrected = (status == 402)
                        .then(|| header(&answer, &[PAYMENT_REQUIRED]).map(|v2| read_challenge(Some(v2), b"")))
                        .flatten()
                        .and_then(Result::ok);
                    match corrected {
                        Some(corrected) => {
                            if self.buyer.refused(authorization, &corrected).await && corrections > 0 {
                                corrections -= 1;
                                continue 'pay;
                            }
                        }
                        None => self.buyer.unsettled(authorization).await,
                    }
                    return Ok(answer);
                }
                let settlement = header(&answer, &[PAYMENT_RESPONSE, X_PAYMENT_RESPONSE])
                    .and_then(|h| tollgate_protocol::x402::header::decode::<SettleResponse>(h).ok());
                let made = self.buyer.settled(authorization, settlement.as_ref()).await;
                answer.extensions_mut().insert(made);
                return Ok(answer);
            }
        }
    }
}
