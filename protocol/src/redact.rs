//! Keeping endpoint credentials out of logs, errors and `Debug` output.
//!
//! RPC providers put their API key in the URL: the path (`…/v2/KEY`), the query (`?api-key=KEY`)
//! or the user info (`https://user:KEY@host`). Only the scheme, host and port of an endpoint are
//! ever shown.

/// `https://user:pw@host:8545/v2/KEY?x=y` → `https://host:8545/…`; `http://127.0.0.1:8545` stays
/// as it is. Text that is not a URL is replaced whole.
#[must_use]
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else { return "[REDACTED]".to_owned() };
    let rest = &url[scheme_end + 3..];
    // A backslash ends the authority too (URL parsers read it as `/` in http URLs).
    let authority_end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let tail = rest[authority_end..].trim_start_matches('/');
    let mut out = format!("{}://{host}", &url[..scheme_end]);
    if !tail.is_empty() {
        out.push_str("/…");
    }
    out
}

/// `text` with every `http`, `https`, `ws` and `wss` URL in it passed through [`redact_url`]:
/// for error messages of HTTP and RPC clients, which quote the URL they failed on.
#[must_use]
pub fn redact_urls(text: &str) -> String {
    const SCHEMES: [&str; 4] = ["https://", "http://", "wss://", "ws://"];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((start, scheme)) =
        SCHEMES.iter().filter_map(|s| rest.find(s).map(|i| (i, *s))).min_by_key(|(i, _)| *i)
    {
        out.push_str(&rest[..start]);
        let after = &rest[start + scheme.len()..];
        // A URL ends at whitespace or at what quotes or brackets it.
        let len = after.find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | '>' | ']' | ',' | '`'));
        let end = start + scheme.len() + len.unwrap_or(after.len());
        out.push_str(&redact_url(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_show_scheme_host_and_port_only() {
        for (url, shown) in [
            ("https://eth-mainnet.g.alchemy.com/v2/SECRET", "https://eth-mainnet.g.alchemy.com/…"),
            ("https://mainnet.helius-rpc.com/?api-key=SECRET", "https://mainnet.helius-rpc.com/…"),
            ("https://user:SECRET@rpc.example:8545", "https://rpc.example:8545"),
            ("wss://rpc.example/ws/SECRET#x", "wss://rpc.example/…"),
            ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
            ("http://127.0.0.1:8545/", "http://127.0.0.1:8545"),
            ("SECRET", "[REDACTED]"),
            ("http://127.0.0.1:18546\\v2\\SECRET", "http://127.0.0.1:18546/…"),
            ("http://127.0.0.1:18546\\@SECRET", "http://127.0.0.1:18546/…"),
        ] {
            assert_eq!(redact_url(url), shown);
        }
    }

    #[test]
    fn every_url_in_a_message_is_redacted() {
        let message = "error sending request for url (https://rpc.example/v2/SECRET): connection refused; \
                       retried \"http://u:SECRET@10.0.0.1:8899/?k=SECRET\" then wss://x.example/SECRET";
        let redacted = redact_urls(message);
        assert!(!redacted.contains("SECRET"), "{redacted}");
        assert_eq!(
            redacted,
            "error sending request for url (https://rpc.example/…): connection refused; \
             retried \"http://10.0.0.1:8899/…\" then wss://x.example/…"
        );
        assert_eq!(redact_urls("no url here"), "no url here");
        assert_eq!(redact_urls("ends with https://"), "ends with https://");
    }
}
