//! What one payment buys: a **ticket** for the answers a seller serves for it (Tollgate's
//! extension of the gateway's receive and of x402's `/verify` and `/settle` bodies).
//!
//! A seller's layer sends its [`Ticket`] terms with every claim of a proof. Tollgate's
//! facilitator counts the answers in its database, one row per payment: the first answer is
//! claimed with the payment itself, each repeat with one more call, and an answer that never
//! reached the buyer is given back. So more seller instances, processes or restarts never add
//! answers to a payment. The facilitator says what was counted in [`Answered`].

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The most answers one payment may buy.
pub const MAX_USES: u32 = 10_000;
/// The longest a payment may serve repeats after its first answer: 30 days.
pub const MAX_SECONDS: u64 = 30 * 86_400;

/// A seller's terms for the answers one payment buys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Ticket {
    /// Answers the payment serves, the first included (1 to 10,000).
    #[serde(deserialize_with = "crate::seconds::count")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10_000))]
    pub uses: u32,
    /// Seconds after its first answer during which a repeat of the request is served (at most
    /// 30 days).
    #[serde(deserialize_with = "crate::seconds::deserialize")]
    #[cfg_attr(feature = "openapi", schema(maximum = 2_592_000))]
    pub seconds: u64,
    /// The request answered, as [`request_digest`] writes it: a repeat is answered only for the
    /// same request. Absent for a request that cannot be told again (its body streamed): the
    /// payment then serves it once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub request: Option<String>,
    /// The payment also buys a pass: the wallet that paid may sign in (`sign-in-with-x`) for
    /// `scope` during its `seconds` instead of paying again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<PassTerms>,
}

/// Access for a period, sold to the wallet that pays: what the seller names it, and how long.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PassTerms {
    /// What the pass opens, as the seller names it (by default the resource without its query):
    /// a sign-in is looked up for the same scope.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 2048, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$")
    )]
    pub scope: String,
    /// How long after the payment is recorded (at most a year).
    #[serde(deserialize_with = "crate::seconds::deserialize")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000))]
    pub seconds: u64,
}

/// The longest pass: a year.
pub const MAX_PASS_SECONDS: u64 = 365 * 86_400;

impl Ticket {
    /// Why these terms cannot be counted, if they cannot.
    ///
    /// # Errors
    /// The reason, for a `uses` or `seconds` out of bounds or a malformed digest.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_USES).contains(&self.uses) {
            return Err(format!("ticket.uses must be between 1 and {MAX_USES}"));
        }
        if self.seconds > MAX_SECONDS {
            return Err(format!("ticket.seconds must be at most {MAX_SECONDS}"));
        }
        if let Some(request) = &self.request
            && !(request.len() == 64 && request.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        {
            return Err("ticket.request must be 64 lowercase hexadecimal digits (a SHA-256 digest)".into());
        }
        if let Some(pass) = &self.pass {
            if !(1..=MAX_PASS_SECONDS).contains(&pass.seconds) {
                return Err(format!("ticket.pass.seconds must be between 1 and {MAX_PASS_SECONDS}"));
            }
            if pass.scope.is_empty() || pass.scope.chars().count() > 2048 || pass.scope.chars().any(char::is_control) {
                return Err("ticket.pass.scope must be 1 to 2,048 characters, without control characters".into());
            }
        }
        Ok(())
    }
}

/// What a payment's ticket has served once an answer was claimed: `served` of `uses`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Answered {
    /// Answers claimed for the payment and not given back, this one included.
    pub served: u32,
    /// Answers the payment buys.
    pub uses: u32,
}

/// The digest that tells a request again: hex SHA-256 over its method, the resource the seller
/// named for it (URL with its query, or `mcp://tool/<name>`), and its body (for a paid MCP tool,
/// its arguments), each length-prefixed so that no two requests share one.
#[must_use]
pub fn request_digest(method: &str, resource: &str, body: &[u8]) -> String {
    let mut hash = Sha256::new();
    for part in [method.as_bytes(), resource.as_bytes(), body] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_differ_in_method_resource_and_body() {
        let get = request_digest("GET", "https://shop/a", b"");
        assert_eq!(get.len(), 64);
        assert_eq!(get, request_digest("GET", "https://shop/a", b""));
        assert_ne!(get, request_digest("POST", "https://shop/a", b""));
        assert_ne!(get, request_digest("GET", "https://shop/a?x=1", b""));
        assert_ne!(request_digest("POST", "r", b"one"), request_digest("POST", "r", b"two"));
        // Parts cannot slide into one another.
        assert_ne!(request_digest("GET", "ab", b"c"), request_digest("GET", "a", b"bc"));
    }

    #[test]
    fn terms_out_of_bounds_are_refused() {
        let ok = Ticket { uses: 2, seconds: 60, request: Some(request_digest("GET", "r", b"")), pass: None };
        assert_eq!(ok.check(), Ok(()));
        assert!(Ticket { uses: 0, ..ok.clone() }.check().is_err());
        assert!(Ticket { uses: MAX_USES + 1, ..ok.clone() }.check().is_err());
        assert!(Ticket { seconds: MAX_SECONDS + 1, ..ok.clone() }.check().is_err());
        assert!(Ticket { request: Some("AB".repeat(32)), ..ok.clone() }.check().is_err());
        assert!(Ticket { request: None, ..ok.clone() }.check().is_ok());
        let pass = |scope: &str, seconds| Some(PassTerms { scope: scope.into(), seconds });
        assert!(Ticket { pass: pass("https://shop/report", 86_400), ..ok.clone() }.check().is_ok());
        assert!(Ticket { pass: pass("https://shop/report", 0), ..ok.clone() }.check().is_err());
        assert!(Ticket { pass: pass("", 60), ..ok.clone() }.check().is_err());
        assert!(Ticket { pass: pass("a\nb", 60), ..ok.clone() }.check().is_err());
        let read: Result<Ticket, _> = serde_json::from_str(r#"{"uses": 2, "seconds": 60, "other": 1}"#);
        assert!(read.is_err(), "unknown fields are refused");
        // 2048 characters, not bytes.
        assert!(Ticket { pass: pass(&"é".repeat(2048), 60), ..ok.clone() }.check().is_ok());
        assert!(Ticket { pass: pass(&"é".repeat(2049), 60), ..ok }.check().is_err());
    }

    #[test]
    fn counts_read_as_json_writes_them() {
        let read = |json: &str| serde_json::from_str::<Ticket>(json).map(|t| (t.uses, t.seconds, t.pass));
        let (uses, seconds, pass) =
            read(r#"{"uses": 3.0, "seconds": 6e1, "pass": {"scope": "s", "seconds": 86400.0}}"#).unwrap();
        assert_eq!((uses, seconds, pass.map(|p| p.seconds)), (3, 60, Some(86_400)));
        for bad in [
            r#"{"uses": 2.5, "seconds": 60}"#,
            r#"{"uses": -1, "seconds": 60}"#,
            r#"{"uses": 4294967296, "seconds": 60}"#,
            r#"{"uses": 2, "seconds": "60"}"#,
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
