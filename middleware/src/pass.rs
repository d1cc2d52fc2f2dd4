//! Passes: access for a period, sold to the wallet that pays ([`crate::Price::pass`]), and that
//! wallet signing in during it (x402 `sign-in-with-x`) instead of paying again.
//!
//! A route that sells a pass declares the sign-in in its 402 (`extensions["sign-in-with-x"]`):
//! a fresh nonce, issued now, bound to the seller's configured public origin (never the request's
//! `Host`), for the chains its passes are paid on. A payment of a pass offer tells the facilitator
//! what it buys (the ticket's `pass`: the layer's scope and the seconds). A request with a
//! `SIGN-IN-WITH-X` header and no payment is handed to the facilitator, which checks the message
//! (origin, age, signature — the wallet's key, or its EIP-1271 contract), uses its nonce once for
//! every instance, and finds the wallet's pass for the scope: served with the pass's payment in
//! its extensions, or refused with the reason in a new 402.

use std::borrow::Cow;

use http::Response;
use serde_json::{Map, Value};
use tollgate_protocol::siwx::{self, Declaration, Info, Origin, SupportedChain};
use tollgate_protocol::ticket::PassTerms;
use tollgate_protocol::x402::{PaymentRequirements, ResourceInfo};

use crate::body::PaymentBody;
use crate::challenge;
use crate::config::Config;
use crate::facilitator::{Payment, SignInClaim, Verdict};
use crate::price::{Offer, pass_seconds as seconds};

/// How long a challenge's message may be signed: the extension's 5 minutes.
const CHALLENGE_SECS: i64 = siwx::MAX_AGE_SECS;

/// Whether one of `offers` sells a pass.
pub(crate) fn sold(offers: &[Offer]) -> bool {
    offers.iter().any(|(r, _)| seconds(r.extra.as_ref()).is_some())
}

/// What a pass opens for `resource`: the layer's scope, else the resource without its query.
pub(crate) fn scope(config: &Config, resource: &str) -> String {
    match &config.pass_scope {
        Some(scope) => scope.clone(),
        None => resource.split(['?', '#']).next().unwrap_or(resource).to_owned(),
    }
}

/// The pass a payment of `requirement` buys for `resource`, if it sells one.
pub(crate) fn terms(config: &Config, requirement: &PaymentRequirements, resource: &str) -> Option<PassTerms> {
    let seconds = seconds(requirement.extra.as_ref())?;
    Some(PassTerms { scope: scope(config, resource), seconds })
}

/// The extensions of a 402 for `resource`: the layer's, with the sign-in declared (fresh) when
/// `offers` sell a pass and the seller's origin is known.
pub(crate) fn extensions<'a>(config: &'a Config, resource: &str, offers: &[Offer]) -> Cow<'a, Map<String, Value>> {
    match &config.sign_in_origin {
        Some(origin) if sold(offers) => {
            let mut extensions = config.extensions.clone();
            let declared = serde_json::to_value(declaration(origin, resource, offers)).unwrap_or_default();
            extensions.insert(siwx::EXTENSION.to_owned(), declared);
            Cow::Owned(extensions)
        }
        _ => Cow::Borrowed(&config.extensions),
    }
}

/// A fresh sign-in challenge for `resource`, on `origin`, for the chains `offers`' passes are
/// paid on.
fn declaration(origin: &Origin, resource: &str, offers: &[Offer]) -> Declaration {
    use rand::RngCore as _;
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    let nonce: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let now = chrono::Utc::now();
    let iso = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    // The resource on the seller's public origin (an MCP tool's is the origin itself).
    let path = match (Origin::of_url(resource), resource.split_once("://")) {
        (Some(_), Some((_, rest))) => rest.find(['/', '?', '#']).map_or("/", |i| &rest[i..]),
        _ => "/",
    };
    let uri = format!("{}{path}", origin.origin);
    let mut chains: Vec<SupportedChain> = Vec::new();
    for (requirement, _) in offers.iter().filter(|(r, _)| seconds(r.extra.as_ref()).is_some()) {
        let chain = SupportedChain {
            chain_id: requirement.network.to_string(),
            kind: siwx::signature_type(requirement.network.family()).to_owned(),
        };
        if !chains.contains(&chain) {
            chains.push(chain);
        }
    }
    Declaration {
        info: Info {
            domain: origin.host.clone(),
            uri: uri.clone(),
            version: "1".into(),
            nonce,
            issued_at: iso(now),
            expiration_time: Some(iso(now + chrono::Duration::seconds(CHALLENGE_SECS))),
            statement: Some("Sign in with the wallet that bought a pass, instead of paying again.".into()),
            resources: vec![uri],
        },
        supported_chains: chains,
        schema: Some(Declaration::schema()),
    }
}

/// The payment a pass's holder, signed in (`header`), is served with: the pass's, or the
/// answer to give instead — a new 402 saying why not (502/504 when the facilitator cannot be
/// asked).
pub(crate) async fn signed_in(
    config: &Config,
    request: &http::request::Parts,
    header: &str,
    offers: &[Offer],
    resource: &ResourceInfo,
) -> Result<Payment, Response<PaymentBody>> {
    let Some(origin) = &config.sign_in_origin else { return Err(challenge::unavailable(false).into_response()) };
    let scope = scope(config, &resource.url);
    let claim = SignInClaim { header, origin: &origin.origin, scope: &scope };
    let holder = match config.facilitator.sign_in(claim).await {
        Ok(holder) => holder,
        Err(Verdict::Refused { reason }) => {
            let extensions = extensions(config, &resource.url, offers);
            let why = format!("sign-in refused: {reason}");
            return Err(
                challenge::payment_required(&why, resource, offers, &extensions, &request.headers).into_response()
            );
        }
        Err(Verdict::Unavailable { timed_out, reason }) => {
            tracing::warn!(%reason, "payment facilitator unavailable");
            return Err(challenge::unavailable(timed_out).into_response());
        }
        Err(_) => return Err(challenge::unavailable(false).into_response()),
    };
    // What the pass was bought with: the pass offer on its network (the first pass offer else).
    let passes = || offers.iter().map(|(r, _)| r).filter(|r| seconds(r.extra.as_ref()).is_some());
    let Some(offer) = passes().find(|r| r.network == holder.network).or_else(|| passes().next()) else {
        return Err(challenge::unavailable(false).into_response());
    };
    let mut payment = Payment::new(holder.network.clone(), offer.asset, offer.amount, offer.pay_to)
        .with_payer(holder.payer)
        .with_payment_id(holder.payment_id);
    payment.pass_until = Some(holder.valid_until.timestamp());
    Ok(payment)
}
