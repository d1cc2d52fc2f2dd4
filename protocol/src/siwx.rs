//! The x402 `sign-in-with-x` extension (CAIP-122): a buyer proves it holds the wallet that paid
//! for a pass by signing a message bound to the seller's public origin, instead of paying again.
//!
//! * A seller declares it in its 402 (`extensions["sign-in-with-x"]`: [`Declaration`]), with a
//!   fresh nonce and the chains it takes signatures of.
//! * The buyer signs the message [`message`] writes (EIP-4361 on EVM, Sign-In With Solana on
//!   Solana) and sends [`SignIn`] in the `SIGN-IN-WITH-X` header ([`SignIn::to_header`]).
//! * Whoever verifies reads it back ([`SignIn::from_header`]), writes the same message and checks
//!   the signature (the facilitator: it also claims the nonce once and looks up the wallet's pass).

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::network::{ChainFamily, Network};

/// The extension's key in `extensions`.
pub const EXTENSION: &str = "sign-in-with-x";
/// The request header carrying a signed message (base64 JSON of [`SignIn`]).
pub const HEADER: &str = "SIGN-IN-WITH-X";
/// The most bytes of a `SIGN-IN-WITH-X` header read.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;
/// How long a challenge's message may be signed after it was issued: 5 minutes.
pub const MAX_AGE_SECS: i64 = 300;

/// The signature algorithm of a chain family, as the extension names it.
#[must_use]
pub const fn signature_type(family: ChainFamily) -> &'static str {
    match family {
        ChainFamily::Evm => "eip191",
        ChainFamily::Solana => "ed25519",
    }
}

/// What the seller puts in `extensions["sign-in-with-x"].info`: the message's fields, the same
/// for every chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Info {
    /// The seller's public origin's host (and port), never read from the request.
    pub domain: String,
    /// The resource, on the seller's public origin.
    pub uri: String,
    /// Always `"1"`.
    pub version: String,
    /// A fresh random nonce (32 hexadecimal digits): a signed message is used once.
    pub nonce: String,
    /// When the challenge was made (RFC 3339, UTC).
    pub issued_at: String,
    /// When it may no longer be signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    /// Why the buyer signs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    /// The resources the message speaks of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
}

/// One chain whose wallets may sign in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedChain {
    /// CAIP-2 network.
    pub chain_id: String,
    /// `eip191` (EVM) or `ed25519` (Solana).
    #[serde(rename = "type")]
    pub kind: String,
}

/// `extensions["sign-in-with-x"]` of a 402.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Declaration {
    /// The message's fields.
    pub info: Info,
    /// The chains whose wallets may sign.
    pub supported_chains: Vec<SupportedChain>,
    /// The JSON Schema of the signed payload (x402 extensions carry one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Value>,
}

impl Declaration {
    /// The JSON Schema of [`SignIn`], as the extension declares it.
    #[must_use]
    pub fn schema() -> serde_json::Value {
        let string = || serde_json::json!({"type": "string"});
        serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "domain": string(), "address": string(), "statement": string(),
                "uri": {"type": "string", "format": "uri"}, "version": string(), "chainId": string(),
                "type": string(), "nonce": string(),
                "issuedAt": {"type": "string", "format": "date-time"},
                "expirationTime": {"type": "string", "format": "date-time"},
                "notBefore": {"type": "string", "format": "date-time"},
                "requestId": string(),
                "resources": {"type": "array", "items": {"type": "string", "format": "uri"}},
                "signature": string()
            },
            "required": ["domain", "address", "uri", "version", "chainId", "type", "nonce", "issuedAt", "signature"]
        })
    }
}

/// A signed message, as a buyer sends it in `SIGN-IN-WITH-X`: the seller's fields echoed, and
/// the signer's address, chain and signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignIn {
    /// The seller's domain, as challenged.
    pub domain: String,
    /// The signer: checksummed on EVM, base58 on Solana.
    pub address: String,
    /// Why the buyer signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    /// The resource, as challenged.
    pub uri: String,
    /// `"1"`.
    pub version: String,
    /// CAIP-2 network of the signer.
    pub chain_id: String,
    /// `eip191` or `ed25519`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The challenge's nonce.
    pub nonce: String,
    /// When the challenge was made.
    pub issued_at: String,
    /// When it may no longer be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    /// Before when it may not be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// A correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The resources the message speaks of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
    /// A hint for wallets (`eip191`, `eip1271`, `eip6492`, `siws`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_scheme: Option<String>,
    /// `0x` hex on EVM (65 bytes for a key, any length for a contract wallet), base58 on Solana.
    pub signature: String,
}

/// Why a `SIGN-IN-WITH-X` header cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid SIGN-IN-WITH-X header: {0}")]
pub struct HeaderError(String);

impl SignIn {
    /// The fields of `info`, answered for `chain` by `address` with `signature` (see
    /// [`message`] for what is signed).
    #[must_use]
    pub fn answer(info: &Info, chain: &SupportedChain, address: String, signature: String) -> Self {
        Self {
            domain: info.domain.clone(),
            address,
            statement: info.statement.clone(),
            uri: info.uri.clone(),
            version: info.version.clone(),
            chain_id: chain.chain_id.clone(),
            kind: chain.kind.clone(),
            nonce: info.nonce.clone(),
            issued_at: info.issued_at.clone(),
            expiration_time: info.expiration_time.clone(),
            not_before: None,
            request_id: None,
            resources: (!info.resources.is_empty()).then(|| info.resources.clone()),
            signature_scheme: None,
            signature,
        }
    }

    /// Reads a `SIGN-IN-WITH-X` header (base64 of the JSON).
    ///
    /// # Errors
    /// [`HeaderError`] for a header too long, not base64, or not the payload's JSON.
    pub fn from_header(header: &str) -> Result<Self, HeaderError> {
        if header.len() > MAX_HEADER_BYTES {
            return Err(HeaderError(format!("longer than {MAX_HEADER_BYTES} bytes")));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(header.trim())
            .map_err(|_| HeaderError("not base64".into()))?;
        serde_json::from_slice(&bytes).map_err(|e| HeaderError(format!("not a signed message: {e}")))
    }

    /// The header value: base64 of the JSON.
    #[must_use]
    pub fn to_header(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// The network it was signed for, when it names one.
    #[must_use]
    pub fn network(&self) -> Option<Network> {
        self.chain_id.parse().ok()
    }
}

/// A seller's public origin, as a sign-in message must name it: `scheme://host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `https://host[:port]`, lowercase, the scheme's default port left out.
    pub origin: String,
    /// `host[:port]`: what a message's `domain` must be.
    pub host: String,
}

impl Origin {
    /// Reads `https://host[:port]` or `http://host[:port]`, without credentials, path, query or
    /// fragment (a trailing `/` allowed).
    ///
    /// # Errors
    /// Why it is no origin.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bare = text.strip_suffix('/').unwrap_or(text);
        let authority = bare.split_once("://").map_or("", |(_, a)| a);
        let plain = !authority.contains(['/', '?', '#', '@']);
        Self::of(bare).filter(|_| plain).ok_or_else(|| {
            format!("{text:?} is not an origin: http(s)://host[:port], without credentials, path, query or fragment")
        })
    }

    /// The origin of a URL (`None` when it has no http(s) origin).
    #[must_use]
    pub fn of_url(url: &str) -> Option<Self> {
        let end = url.find("://").map_or(0, |i| i + 3);
        let authority_end = url[end..].find(['/', '?', '#']).map_or(url.len(), |i| end + i);
        Self::of(&url[..authority_end])
    }

    fn of(text: &str) -> Option<Self> {
        let (scheme, authority) = text.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "https" => "443",
            "http" => "80",
            _ => return None,
        };
        let authority = authority.to_ascii_lowercase();
        let (name, port) = match authority.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (authority.as_str(), None),
        };
        let named = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'));
        let port_ok = port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
        if !named || !port_ok {
            return None;
        }
        let host = match port {
            Some(port) if port != default_port => format!("{name}:{port}"),
            _ => name.to_owned(),
        };
        Some(Self { origin: format!("{scheme}://{host}"), host })
    }
}

/// The text a wallet signs: EIP-4361 (Sign-In With Ethereum) for `eip155:*`, Sign-In With
/// Solana for `solana:*`; `None` for another namespace, an EVM chain id that is not a number, or
/// a field with a line break (the text is one field per line: a field spanning lines could pass
/// for others, so one signed text would read as two different sign-ins — found by fuzzing,
/// `fuzz/regressions/siwx/`).
#[must_use]
pub fn message(s: &SignIn) -> Option<String> {
    let optional = [&s.statement, &s.expiration_time, &s.not_before, &s.request_id].into_iter().flatten();
    let mut fields = [&s.domain, &s.address, &s.uri, &s.version, &s.chain_id, &s.nonce, &s.issued_at]
        .into_iter()
        .chain(optional)
        .chain(s.resources.iter().flatten());
    if fields.any(|field| field.contains(['\n', '\r'])) {
        return None;
    }
    let (namespace, reference) = s.chain_id.split_once(':')?;
    let (account, chain) = match namespace {
        "eip155" if !reference.is_empty() && reference.bytes().all(|b| b.is_ascii_digit()) => ("Ethereum", reference),
        "solana" if !reference.is_empty() => ("Solana", reference),
        _ => return None,
    };
    let mut out = format!("{} wants you to sign in with your {account} account:\n{}\n", s.domain, s.address);
    // EIP-4361 keeps an empty line for a missing statement; Sign-In With Solana does not.
    match (&s.statement, account) {
        (Some(statement), _) => out.push_str(&format!("\n{statement}\n\n")),
        (None, "Ethereum") => out.push_str("\n\n"),
        (None, _) => out.push('\n'),
    }
    out.push_str(&format!(
        "URI: {}\nVersion: {}\nChain ID: {chain}\nNonce: {}\nIssued At: {}",
        s.uri, s.version, s.nonce, s.issued_at
    ));
    for (name, value) in
        [("Expiration Time", &s.expiration_time), ("Not Before", &s.not_before), ("Request ID", &s.request_id)]
    {
        if let Some(value) = value {
            out.push_str(&format!("\n{name}: {value}"));
        }
    }
    if let Some(resources) = s.resources.as_ref().filter(|r| !r.is_empty()) {
        out.push_str("\nResources:");
        for resource in resources {
            out.push_str(&format!("\n- {resource}"));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(chain_id: &str, statement: Option<&str>) -> SignIn {
        let info = Info {
            domain: "api.example.com".into(),
            uri: "https://api.example.com/premium-data".into(),
            version: "1".into(),
            nonce: "a1b2c3d4e5f67890a1b2c3d4e5f67890".into(),
            issued_at: "2024-01-15T10:30:00.000Z".into(),
            expiration_time: Some("2024-01-15T10:35:00.000Z".into()),
            statement: statement.map(str::to_owned),
            resources: vec!["https://api.example.com/premium-data".into()],
        };
        let family = if chain_id.starts_with("solana") { ChainFamily::Solana } else { ChainFamily::Evm };
        let chain = SupportedChain { chain_id: chain_id.into(), kind: signature_type(family).into() };
        SignIn::answer(&info, &chain, "0x857b06519E91e3A54538791bDbb0E22373e36b66".into(), "0xsig".into())
    }

    #[test]
    fn messages_are_written_as_the_extension_specifies() {
        // The spec's examples (specs/extensions/sign-in-with-x.md).
        let evm = message(&signed("eip155:8453", Some("Sign in to access premium data"))).unwrap();
        assert_eq!(
            evm,
            "api.example.com wants you to sign in with your Ethereum account:\n\
             0x857b06519E91e3A54538791bDbb0E22373e36b66\n\nSign in to access premium data\n\n\
             URI: https://api.example.com/premium-data\nVersion: 1\nChain ID: 8453\n\
             Nonce: a1b2c3d4e5f67890a1b2c3d4e5f67890\nIssued At: 2024-01-15T10:30:00.000Z\n\
             Expiration Time: 2024-01-15T10:35:00.000Z\nResources:\n- https://api.example.com/premium-data"
        );
        let solana = message(&signed("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", None)).unwrap();
        assert!(solana.starts_with("api.example.com wants you to sign in with your Solana account:\n0x857b"));
        assert!(solana.contains("\n\nURI: ") && !solana.contains("\n\n\nURI: "), "{solana}");
        assert!(solana.contains("\nChain ID: 5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp\n"));
        let bare = message(&signed("eip155:1", None)).unwrap();
        assert!(bare.contains("66\n\n\nURI: "), "EIP-4361 keeps the empty statement line: {bare}");
        for odd in ["cosmos:hub", "eip155:base", "eip155:", "solana:", "nonsense"] {
            assert_eq!(message(&signed(odd, None)), None, "{odd}");
        }
    }

    #[test]
    fn origins_are_bare() {
        let o = Origin::parse("https://Shop.Example").unwrap();
        assert_eq!((o.origin.as_str(), o.host.as_str()), ("https://shop.example", "shop.example"));
        let o = Origin::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!((o.origin.as_str(), o.host.as_str()), ("http://127.0.0.1:8080", "127.0.0.1:8080"));
        assert_eq!(Origin::parse("https://shop.example:443").unwrap().host, "shop.example");
        for bad in [
            "shop.example",
            "ftp://shop.example",
            "https://shop.example/api",
            "https://u:p@shop.example",
            "https://shop.example/?q=1",
            "https://",
            "https://:80",
            "https://shop.example:x",
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad}");
        }
        let of = |url: &str| Origin::of_url(url).map(|o| o.origin);
        assert_eq!(of("https://shop.example/report?x=1").as_deref(), Some("https://shop.example"));
        assert_eq!(of("http://shop.example:8080#a").as_deref(), Some("http://shop.example:8080"));
        assert_eq!(of("mcp://tool/summarize"), None);
    }

    #[test]
    fn headers_round_trip_and_junk_is_refused() {
        let s = signed("eip155:8453", None);
        assert_eq!(SignIn::from_header(&s.to_header()), Ok(s));
        assert!(SignIn::from_header("%%%").is_err());
        assert!(SignIn::from_header(&"A".repeat(MAX_HEADER_BYTES + 1)).is_err());
        let missing = base64::engine::general_purpose::STANDARD.encode(r#"{"domain": "x"}"#);
        assert!(SignIn::from_header(&missing).is_err());
    }

    /// One text, one reading: a field that spans lines could pass for the lines after it (a
    /// statement carrying `URI: …`), so no message is written from one.
    #[test]
    fn no_message_is_written_from_a_field_with_a_line_break() {
        assert!(message(&signed("eip155:8453", Some("Sign in"))).is_some());
        assert!(message(&signed("eip155:8453", Some("Sign in\nURI: https://evil.example"))).is_none());
        let mut s = signed("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", None);
        s.uri.push('\r');
        assert!(message(&s).is_none());
        let mut s = signed("eip155:1", None);
        s.resources = Some(vec!["https://a.example\n- https://b.example".into()]);
        assert!(message(&s).is_none());
        let mut s = signed("eip155:1", None);
        s.request_id = Some("r\n".into());
        assert!(message(&s).is_none());
    }
}
