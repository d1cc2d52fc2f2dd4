//! A pass's holder signing in instead of paying again (the x402 `sign-in-with-x` extension):
//! [`Payments::sign_in`]. The message must be bound to the seller's public origin (as the seller
//! configured it, never a request's `Host`), recent, signed by the wallet it names (its key, or
//! on EVM its wallet contract, asked on the chain it names), its nonce never used before for the
//! seller (claimed in the database: every instance sees it), and that wallet must hold a pass for
//! the seller's scope, bought by a confirmed payment, still running.

use chrono::{DateTime, Utc};
use tollgate_protocol::Address;
use tollgate_protocol::siwx::{self, Origin, SignIn};

use super::{PaymentError, Payments};
use crate::chains::{ProofError, Reason, Refusal, Signer};
use crate::store::Pass;

/// How far in the future a message's `issuedAt` may be (instances' clocks differ a little).
const CLOCK_SKEW_SECS: i64 = 5;
/// How long a used nonce is kept after its message expired: more than the clocks of several
/// instances differ.
const NONCE_KEPT_EXTRA_SECS: i64 = 300;

/// A sign-in to check for a seller's account.
#[derive(Debug, Clone)]
pub struct SignInRequest {
    /// The seller's account (the API key's).
    pub account: String,
    /// The buyer's `SIGN-IN-WITH-X` header, as sent.
    pub header: String,
    /// The seller's public origin.
    pub origin: Origin,
    /// What the pass must open, as the seller names it.
    pub scope: String,
}

/// A wallet signed in, holding a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    /// The wallet (canonical address).
    pub payer: Address,
    /// Its pass.
    pub pass: Pass,
}

fn refused(reason: Reason, message: impl Into<String>) -> PaymentError {
    PaymentError::Refused(Refusal::new(reason, message))
}

/// A message time (RFC 3339).
fn time(name: &str, text: &str) -> Result<DateTime<Utc>, PaymentError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| refused(Reason::SignInTime, format!("{name} is not an RFC 3339 time")))
}

impl Payments {
    /// Checks a sign-in and finds the signer's pass (see the module docs). The message's nonce
    /// is used up once its signature is checked, whatever the pass.
    ///
    /// # Errors
    /// [`PaymentError::Refused`] naming what is wrong (`invalid_siwx_*`, or `no_pass`),
    /// [`PaymentError::Unavailable`] when the chain that must check a wallet contract cannot be
    /// asked, [`PaymentError::Internal`] when storage fails.
    pub async fn sign_in(&self, r: SignInRequest) -> Result<SignedIn, PaymentError> {
        let s = SignIn::from_header(&r.header).map_err(|e| refused(Reason::SignInMessage, e.to_string()))?;
        self.bound(&s, &r.origin)?;
        let now = self.now();
        let expires = self.timely(&s, now)?;
        let network = s.network().ok_or_else(|| refused(Reason::SignInMessage, "chainId is not a CAIP-2 network"))?;
        let chain = self.chain(&network).map_err(|_| {
            refused(Reason::SignInMessage, format!("this facilitator serves no {network}: its wallets cannot sign in"))
        })?;
        let family = network.family();
        if s.kind != siwx::signature_type(family) {
            return Err(refused(
                Reason::SignInMessage,
                format!("{family} wallets sign {}", siwx::signature_type(family)),
            ));
        }
        let payer: Address = s
            .address
            .parse()
            .ok()
            .filter(|a: &Address| a.family() == family)
            .ok_or_else(|| refused(Reason::SignInMessage, format!("address is not an address of {family}")))?;
        let message =
            siwx::message(&s).ok_or_else(|| refused(Reason::SignInMessage, "the message cannot be written"))?;
        let signer = match chain.verify_message(&payer, &message, &s.signature).await {
            Ok(signer) => signer,
            Err(ProofError::Refused(refusal)) => return Err(PaymentError::Refused(refusal)),
            Err(ProofError::Chain(e)) => return Err(e.into()),
        };
        // Claims are purged a while after they expire, not at once: an instance whose clock is
        // behind this one's may still take the message.
        let purge_before = now - chrono::Duration::seconds(NONCE_KEPT_EXTRA_SECS);
        if !self.store().claim_sign_in_nonce(&r.account, &s.nonce, expires, purge_before).await? {
            return Err(refused(Reason::SignInNonce, "this signed message was used before: sign a new one"));
        }
        let pass = self.store().find_pass(&r.account, &r.scope, &payer.to_string(), now).await?;
        // A wallet contract is the one on the chain it signed for: the pass must be paid there.
        let pass = pass.filter(|p| signer == Signer::Key || p.network == network);
        match pass {
            Some(pass) => Ok(SignedIn { payer, pass }),
            None => Err(refused(
                Reason::NoPass,
                format!("{payer} holds no pass for {} (none bought, or it ended)", r.scope),
            )),
        }
    }

    /// The message names the seller's own origin: its domain, and its URI's origin.
    fn bound(&self, s: &SignIn, origin: &Origin) -> Result<(), PaymentError> {
        if s.domain != origin.host {
            return Err(refused(
                Reason::SignInDomain,
                format!("the message was signed for {}, not {}", s.domain, origin.host),
            ));
        }
        if Origin::of_url(&s.uri).is_none_or(|uri| uri.origin != origin.origin) {
            return Err(refused(Reason::SignInDomain, format!("uri is not on {}", origin.origin)));
        }
        let nonce_ok = (8..=128).contains(&s.nonce.len()) && s.nonce.bytes().all(|b| b.is_ascii_alphanumeric());
        if s.version != "1" || !nonce_ok {
            return Err(refused(Reason::SignInMessage, "version must be 1, and the nonce 8 to 128 letters or digits"));
        }
        Ok(())
    }

    /// The message is recent and within its own bounds at `now`; when it can no longer be used.
    fn timely(&self, s: &SignIn, now: DateTime<Utc>) -> Result<DateTime<Utc>, PaymentError> {
        let issued = time("issuedAt", &s.issued_at)?;
        let oldest = issued + chrono::Duration::seconds(siwx::MAX_AGE_SECS);
        if now > oldest {
            return Err(refused(Reason::SignInTime, "the message is older than 5 minutes: sign a new one"));
        }
        if issued > now + chrono::Duration::seconds(CLOCK_SKEW_SECS) {
            return Err(refused(Reason::SignInTime, "issuedAt is in the future"));
        }
        let mut expires = oldest;
        if let Some(text) = &s.expiration_time {
            let expiration = time("expirationTime", text)?;
            if expiration <= now {
                return Err(refused(Reason::SignInTime, "the message has expired"));
            }
            expires = expires.min(expiration);
        }
        if let Some(text) = &s.not_before
            && time("notBefore", text)? > now
        {
            return Err(refused(Reason::SignInTime, "the message is not valid yet (notBefore)"));
        }
        Ok(expires)
    }
}
