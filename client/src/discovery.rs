//! Finding what is for sale before paying: an origin's own `/.well-known/x402.json`
//! ([`Buyer::discover`]) and a facilitator's catalog of what it settled ([`Buyer::search`]),
//! both read into [`ForSale`] items: how to call each, its prices, and a `tollgate-pay` command
//! line that buys it.

use serde_json::{Map, Value};
use tollgate_protocol::x402::bazaar::{Declaration, DiscoveryResource, Manifest, ManifestItem, SearchResults};
use tollgate_protocol::x402::{Asset, PaymentRequirements};
use tollgate_protocol::{DecimalAmount, x402::bazaar::WELL_KNOWN_PATH};

use crate::{Buyer, PayError};

/// The largest manifest or catalog page read (a bigger one is refused, not buffered).
const MAX_BYTES: usize = 4 * 1024 * 1024;

/// One thing for sale, from a manifest or a catalog.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ForSale {
    /// Its URL (a dynamic route's `:parameters` left for the buyer to fill).
    pub url: String,
    /// `http` or `mcp`.
    pub kind: String,
    /// What the buyer gets.
    pub description: String,
    /// The service's name, when declared.
    pub service_name: Option<String>,
    /// Its tags.
    pub tags: Vec<String>,
    /// How to call it: the declared input (`method`, `queryParams`, `body`, `toolName`, …).
    pub input: Map<String, Value>,
    /// The ways to pay (advisory: the live 402 decides).
    pub accepts: Vec<PaymentRequirements>,
}

impl From<ManifestItem> for ForSale {
    fn from(item: ManifestItem) -> Self {
        Self {
            url: item.resource.url,
            kind: item.kind,
            description: item.resource.description.unwrap_or_default(),
            service_name: item.resource.service.service_name,
            tags: item.resource.service.tags,
            input: item.input,
            accepts: item.accepts,
        }
    }
}

impl From<DiscoveryResource> for ForSale {
    fn from(resource: DiscoveryResource) -> Self {
        let declaration = resource
            .extensions
            .get(tollgate_protocol::x402::bazaar::EXTENSION)
            .and_then(|d| serde_json::from_value::<Declaration>(d.clone()).ok());
        Self {
            url: resource.resource,
            kind: resource.kind,
            description: resource.description,
            service_name: resource.service.service_name,
            tags: resource.service.tags,
            input: declaration.map(|d| d.lifted_input()).unwrap_or_default(),
            accepts: resource.accepts,
        }
    }
}

impl ForSale {
    /// The declared method, `GET` when none is; `None` for one that is not an HTTP method x402
    /// declares (`GET`, `HEAD`, `DELETE`, `POST`, `PUT`, `PATCH`).
    #[must_use]
    pub fn method(&self) -> Option<&str> {
        let method = self.input.get("method").map_or(Some("GET"), Value::as_str)?;
        ["GET", "HEAD", "DELETE", "POST", "PUT", "PATCH"].into_iter().find(|known| *known == method)
    }

    /// One way to pay, for people: "0.001 SOL (exact-native on solana:…)", or its atomic units
    /// for a token (whose decimals only its chain knows).
    #[must_use]
    pub fn price(requirement: &PaymentRequirements) -> String {
        match requirement.asset {
            Asset::Native => {
                let family = requirement.network.family();
                let whole = DecimalAmount::from_atomic(requirement.amount, family.native_decimals());
                format!("{whole} {} ({} on {})", family.native_symbol(), requirement.scheme, requirement.network)
            }
            Asset::Token(token) => format!(
                "{} atomic units of token {token} ({} on {})",
                requirement.amount, requirement.scheme, requirement.network
            ),
        }
    }

    /// A `tollgate-pay` command line that buys it with the first way to pay, capped at its price
    /// for a native coin (a token's cap is named by the buyer: `tollgate-pay` says which flag
    /// to add). The declared example query or body is filled in; an HTTP route only (`None`
    /// for an MCP tool).
    #[must_use]
    pub fn command_line(&self) -> Option<String> {
        // A hostile manifest or catalog writes these: nothing a terminal would act on goes in.
        let clean = |text: &str| tollgate_protocol::x402::bazaar::printable(text) == text;
        let method = self.method()?;
        if self.kind != "http" || !clean(&self.url) || !self.url.starts_with("http") {
            return None;
        }
        let mut url = self.url.clone();
        if let Some(Value::Object(query)) = self.input.get("queryParams") {
            let pairs: Vec<String> = query
                .iter()
                .filter_map(|(k, v)| {
                    let value = match v {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        _ => return None,
                    };
                    Some(format!("{}={}", encode(k), encode(&value)))
                })
                .collect();
            if !pairs.is_empty() {
                url = format!("{url}{}{}", if url.contains('?') { '&' } else { '?' }, pairs.join("&"));
            }
        }
        let mut line = String::from("tollgate-pay");
        let body = self.input.get("body");
        if method != "GET" && !(method == "POST" && body.is_some()) {
            line.push_str(&format!(" -X {method}"));
        }
        if let Some(body) = body {
            let text = match body {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            if !clean(&text) {
                return None;
            }
            if self.input.get("bodyType").and_then(Value::as_str) == Some("json") {
                line.push_str(" -H 'Content-Type: application/json'");
            }
            line.push_str(&format!(" -d {}", quoted(&text)));
        }
        line.push_str(&format!(" {}", quoted(&url)));
        if let Some(first) = self.accepts.first()
            && first.asset == Asset::Native
        {
            let family = first.network.family();
            let whole = DecimalAmount::from_atomic(first.amount, family.native_decimals());
            line.push_str(&format!(" --max {whole}{}", family.native_symbol()));
        }
        Some(line)
    }
}

/// Percent-encodes a query's key or value (RFC 3986 unreserved characters kept).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A shell word: single-quoted, its own single quotes closed and escaped.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

impl Buyer {
    /// What `origin` (`https://api.example.com`) sells, from its `/.well-known/x402.json`.
    ///
    /// # Errors
    /// [`PayError::Http`] when it cannot be fetched; [`PayError::Discovery`] when the origin
    /// has no manifest or it cannot be read.
    pub async fn discover(&self, origin: &str) -> Result<Manifest, PayError> {
        let url = format!("{}{WELL_KNOWN_PATH}", origin.trim_end_matches('/'));
        let body = self.fetch(&url).await?;
        serde_json::from_slice(&body).map_err(|e| PayError::Discovery(format!("{url}: not a manifest: {e}")))
    }

    /// Searches the catalog of the facilitator at `facilitator` (its base URL) for `query` (all
    /// its words must match): at most `limit` entries (the facilitator's default when `None`).
    ///
    /// # Errors
    /// [`PayError::Http`] when it cannot be asked; [`PayError::Discovery`] when it answers
    /// other than a page of results.
    pub async fn search(&self, facilitator: &str, query: &str, limit: Option<u32>) -> Result<SearchResults, PayError> {
        let mut url = reqwest::Url::parse(&format!("{}/discovery/search", facilitator.trim_end_matches('/')))
            .map_err(|e| PayError::Discovery(format!("facilitator URL: {e}")))?;
        url.query_pairs_mut().append_pair("query", query);
        if let Some(limit) = limit {
            url.query_pairs_mut().append_pair("limit", &limit.to_string());
        }
        let body = self.fetch(url.as_str()).await?;
        serde_json::from_slice(&body).map_err(|e| PayError::Discovery(format!("{url}: not search results: {e}")))
    }

    /// The body of a JSON answer of at most [`MAX_BYTES`].
    async fn fetch(&self, url: &str) -> Result<Vec<u8>, PayError> {
        let mut answer = self.http.get(url).header("accept", "application/json").send().await?;
        let status = answer.status();
        if !status.is_success() {
            return Err(PayError::Discovery(format!("{url} answered {status}")));
        }
        let mut body = Vec::new();
        while let Some(chunk) = answer.chunk().await? {
            if body.len() + chunk.len() > MAX_BYTES {
                return Err(PayError::Discovery(format!("{url} answered more than {MAX_BYTES} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn item(input: Value, accepts: Value) -> ForSale {
        let Value::Object(input) = input else { panic!() };
        ForSale {
            url: "https://shop.example/weather".into(),
            kind: "http".into(),
            description: "Weather".into(),
            service_name: None,
            tags: Vec::new(),
            input,
            accepts: serde_json::from_value(accepts).unwrap(),
        }
    }

    fn sol(amount: &str) -> Value {
        json!([{"scheme": "exact-native", "network": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", "amount": amount,
            "asset": "native", "payTo": "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin", "maxTimeoutSeconds": 60}])
    }

    #[test]
    fn the_command_line_fills_in_the_declared_example_and_caps_at_the_price() {
        let get = item(json!({"method": "GET", "queryParams": {"city": "São Paulo", "days": 3}}), sol("1000000"));
        assert_eq!(
            get.command_line().unwrap(),
            "tollgate-pay 'https://shop.example/weather?city=S%C3%A3o%20Paulo&days=3' --max 0.001SOL"
        );
        let post = item(json!({"method": "POST", "bodyType": "json", "body": {"q": "it's"}}), sol("5"));
        assert_eq!(
            post.command_line().unwrap(),
            r#"tollgate-pay -H 'Content-Type: application/json' -d '{"q":"it'\''s"}' 'https://shop.example/weather' --max 0.000000005SOL"#
        );
        let put = item(json!({"method": "PUT", "bodyType": "text", "body": "hello"}), sol("1"));
        assert!(put.command_line().unwrap().starts_with("tollgate-pay -X PUT -d 'hello' "), "{:?}", put.command_line());
        let hostile = item(json!({"method": "PUT $(touch /tmp/x) ;#", "bodyType": "text", "body": "hi"}), sol("1"));
        assert_eq!(hostile.command_line(), None, "a method that is no method");
        let escapes = item(json!({"method": "POST", "bodyType": "text", "body": "\u{1b}[2J"}), sol("1"));
        assert_eq!(escapes.command_line(), None, "a terminal escape in the body");
        let tool = ForSale { kind: "mcp".into(), ..get };
        assert_eq!(tool.command_line(), None);
        assert_eq!(
            ForSale::price(&post.accepts[0]),
            "0.000000005 SOL (exact-native on solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1)"
        );
    }
}
