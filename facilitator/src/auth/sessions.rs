//! The operator dashboard's sessions: a signed-in session is `<epoch>.<expiry>.<HMAC-SHA256 of
//! both under a key derived from the admin token>`, so any instance with the same token accepts
//! it, a new token signs everyone out, and so does raising the epoch (signing out); every form
//! carries a CSRF token, an HMAC of the session.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

/// How long a sign-in lasts, seconds.
pub const SESSION_SECS: i64 = 12 * 3600;

type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA256 of `message` under a key derived from the admin token, hex.
fn sign(token: &str, message: &str) -> String {
    let mut mac = HmacSha256::new_from_slice(format!("tollgate-dashboard:{token}").as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(message.as_bytes());
    hex(&mac.finalize().into_bytes())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether two secrets are equal, compared in constant time.
pub fn equal(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A new session value of `epoch`, valid until `now` + [`SESSION_SECS`].
pub fn new_session(token: &str, epoch: i64, now: DateTime<Utc>) -> String {
    let expiry = now.timestamp() + SESSION_SECS;
    format!("{epoch}.{expiry}.{}", sign(token, &format!("session:{epoch}:{expiry}")))
}

/// Whether `session` was made with `token` in `epoch` and has not expired.
pub fn session_valid(token: &str, epoch: i64, session: &str, now: DateTime<Utc>) -> bool {
    let mut parts = session.splitn(3, '.');
    let (Some(made_in), Some(expiry), Some(mac)) = (parts.next(), parts.next(), parts.next()) else { return false };
    let (Ok(made_in), Ok(at)) = (made_in.parse::<i64>(), expiry.parse::<i64>()) else { return false };
    made_in == epoch && at > now.timestamp() && equal(mac, &sign(token, &format!("session:{made_in}:{at}")))
}

/// The CSRF token of a session.
pub fn csrf_for(token: &str, session: &str) -> String {
    sign(token, &format!("csrf:{session}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_and_csrf_tokens_are_bound_to_the_admin_token_and_expire() {
        let now = Utc::now();
        let session = new_session("secret", 3, now);
        assert!(session_valid("secret", 3, &session, now));
        assert!(!session_valid("another", 3, &session, now), "a new token signs everyone out");
        assert!(!session_valid("secret", 4, &session, now), "so does a new epoch (signing out)");
        assert!(!session_valid("secret", 3, &session, now + chrono::Duration::seconds(SESSION_SECS + 1)));
        let mut parts = session.splitn(3, '.');
        let (epoch, expiry, mac) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
        let later = format!("{epoch}.{}.{mac}", expiry.parse::<i64>().unwrap() + 3600);
        assert!(!session_valid("secret", 3, &later, now), "the expiry is signed");
        let moved = format!("4.{expiry}.{mac}");
        assert!(!session_valid("secret", 4, &moved, now), "the epoch is signed");
        assert!(!session_valid("secret", 3, "garbage", now));
        assert_ne!(
            csrf_for("secret", &session),
            csrf_for("secret", &new_session("secret", 3, now + chrono::Duration::seconds(1)))
        );
    }
}
