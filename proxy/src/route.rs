//! Which route a request takes: its path made canonical (or refused), its host, and the route
//! patterns of the configuration matched against them.
//!
//! A route that a crafted request could escape would sell the upstream for free, so the proxy
//! matches on the same path it forwards, and refuses what an upstream could read otherwise:
//!
//! * dot segments (`.`, `..`, also encoded: `%2e%2e`), empty segments (`//`), backslashes, and
//!   encoded slashes or backslashes (`%2f`, `%5c`) are refused (400);
//! * `;` (path parameters, which some servers strip: `/paid;x=1` served as `/paid`) and
//!   control characters are refused;
//! * percent-encoded unreserved characters are decoded (`/%70aid` is `/paid`), other escapes
//!   kept with upper-case hex;
//! * literal segments match ASCII case-insensitively (`/PAID` is priced as `/paid`: an upstream
//!   that ignores case is not a way around the price);
//! * a trailing slash matches as if absent; the host is lower-cased, without its port or a
//!   trailing dot.

use std::collections::BTreeMap;

/// Why a request's path or host is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The path could reach another route at the upstream than the one it matches here.
    #[error("the request path is refused: {0}")]
    Path(&'static str),
    /// The host is malformed.
    #[error("the request host is refused: {0}")]
    Host(&'static str),
    /// A query parameter that decides the route is given twice (in any case), or the query
    /// uses `;` separators, which some servers read and others do not.
    #[error("the query parameter {0:?} is given more than once, or the query is ambiguous")]
    AmbiguousQuery(String),
    /// A request body on a method whose body has no meaning (GET, HEAD, TRACE).
    #[error("a {0} request with a body is refused")]
    Body(String),
    /// The path is a route's, but not for this method.
    #[error("{0} is not allowed here")]
    Method(String),
}

/// Characters kept as they are in a path segment (RFC 3986 `pchar`, without `;` and `%`).
fn plain(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,=:@".contains(&byte)
}

fn unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~".contains(&byte)
}

fn hex(byte: u8) -> Option<u8> {
    char::from(byte).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// The canonical form of a request path (see the module docs), or why it is refused.
///
/// # Errors
/// [`RequestError::Path`] for anything that could be read as another path.
pub fn canonical_path(raw: &str) -> Result<String, RequestError> {
    let Some(rest) = raw.strip_prefix('/') else { return Err(RequestError::Path("it must start with /")) };
    if rest.is_empty() {
        return Ok("/".to_owned());
    }
    let segments: Vec<&str> = rest.split('/').collect();
    let mut out = String::with_capacity(raw.len());
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        if segment.is_empty() && !last {
            return Err(RequestError::Path("empty segment (//)"));
        }
        out.push('/');
        let canonical = canonical_segment(segment)?;
        if canonical == "." || canonical == ".." {
            return Err(RequestError::Path("dot segment"));
        }
        out.push_str(&canonical);
    }
    Ok(out)
}

fn canonical_segment(segment: &str) -> Result<String, RequestError> {
    let bytes = segment.as_bytes();
    let mut out = String::with_capacity(segment.len());
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if byte == b'%' {
            let (Some(high), Some(low)) =
                (bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex))
            else {
                return Err(RequestError::Path("malformed percent-escape"));
            };
            let decoded = high * 16 + low;
            match decoded {
                b'/' | b'\\' => return Err(RequestError::Path("encoded slash or backslash")),
                b';' => return Err(RequestError::Path("path parameter (;)")),
                d if d.is_ascii_control() => return Err(RequestError::Path("control character")),
                d if unreserved(d) => out.push(char::from(d)),
                d => out.push_str(&format!("%{d:02X}")),
            }
            i += 3;
            continue;
        }
        match byte {
            b'\\' => return Err(RequestError::Path("backslash")),
            b';' => return Err(RequestError::Path("path parameter (;)")),
            b if plain(b) => out.push(char::from(b)),
            _ => return Err(RequestError::Path("character not allowed in a path")),
        }
        i += 1;
    }
    Ok(out)
}

/// The host a request names (its URI's authority, else its `Host` header), lower-cased,
/// without port or trailing dot: a DNS name (letters, digits, `-`, `_`, `.`) or a bracketed
/// IPv6 literal, then at most a `:` and a port of digits. Anything else is refused, so what is
/// read as a host is one (`a:b:443` is not read as the host `a:b`, nor `]:` as one at all).
///
/// # Errors
/// [`RequestError::Host`] for a malformed one.
pub fn canonical_host(raw: &str) -> Result<String, RequestError> {
    let (host, port) = if let Some(rest) = raw.strip_prefix('[') {
        // An IPv6 literal: `[::1]:8080`.
        let (literal, after) = rest.split_once(']').ok_or(RequestError::Host("unclosed IPv6 literal"))?;
        if literal.is_empty() || !literal.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return Err(RequestError::Host("malformed IPv6 literal"));
        }
        let port = match after {
            "" => None,
            after => Some(after.strip_prefix(':').ok_or(RequestError::Host("text after the IPv6 literal"))?),
        };
        (format!("[{}]", literal.to_ascii_lowercase()), port)
    } else {
        let (name, port) = match raw.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (raw, None),
        };
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        if name.is_empty() || name.ends_with('.') {
            return Err(RequestError::Host("empty"));
        }
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)) {
            return Err(RequestError::Host("character not allowed in a host"));
        }
        (name, port)
    };
    // RFC 3986: a port is digits, possibly none.
    if port.is_some_and(|p| p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit())) {
        return Err(RequestError::Host("malformed port"));
    }
    Ok(host)
}

/// One segment of a route's path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// Matches this text, ASCII case-insensitively (kept lower-case).
    Literal(String),
    /// `{name}`: any one segment.
    Capture(String),
    /// `{*name}`: the rest of the path (last only), possibly empty.
    Rest(String),
}

/// A route's path pattern: `/reports/{id}`, `/files/{*path}`, `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    segments: Vec<Segment>,
}

/// A pattern that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("path pattern {pattern:?}: {why}")]
pub struct PatternError {
    pattern: String,
    why: &'static str,
}

impl std::str::FromStr for PathPattern {
    type Err = PatternError;

    fn from_str(pattern: &str) -> Result<Self, Self::Err> {
        let bad = |why| PatternError { pattern: pattern.to_owned(), why };
        let rest = pattern.strip_prefix('/').ok_or_else(|| bad("it must start with /"))?;
        let mut segments = Vec::new();
        let parts: Vec<&str> =
            if rest.is_empty() { Vec::new() } else { rest.trim_end_matches('/').split('/').collect() };
        for (i, part) in parts.iter().enumerate() {
            let segment = if let Some(name) = part.strip_prefix("{*").and_then(|p| p.strip_suffix('}')) {
                if i + 1 != parts.len() {
                    return Err(bad("{*rest} must be the last segment"));
                }
                Segment::Rest(name.to_owned())
            } else if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                Segment::Capture(name.to_owned())
            } else {
                let canonical =
                    canonical_segment(part).map_err(|_| bad("a literal segment must be a plain path segment"))?;
                if canonical.is_empty() || canonical == "." || canonical == ".." || canonical.contains(['{', '}']) {
                    return Err(bad("empty, dot or brace in a literal segment"));
                }
                Segment::Literal(canonical.to_ascii_lowercase())
            };
            if let Segment::Capture(name) | Segment::Rest(name) = &segment
                && (name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            {
                return Err(bad("a capture's name is letters, digits and _"));
            }
            segments.push(segment);
        }
        Ok(Self { segments })
    }
}

/// What a matched path captured, by name.
pub type Captures = BTreeMap<String, String>;

impl PathPattern {
    /// The captures when `path` (canonical, from [`canonical_path`]) matches.
    #[must_use]
    pub fn matches(&self, path: &str) -> Option<Captures> {
        let trimmed = path.strip_prefix('/').unwrap_or(path);
        let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
        let parts = if trimmed.is_empty() { Vec::new() } else { trimmed.split('/').collect::<Vec<_>>() };
        let mut captures = Captures::new();
        for (i, segment) in self.segments.iter().enumerate() {
            match segment {
                Segment::Rest(name) => {
                    captures.insert(name.clone(), parts.get(i..).unwrap_or_default().join("/"));
                    return Some(captures);
                }
                Segment::Literal(text) => {
                    if !parts.get(i)?.eq_ignore_ascii_case(text) {
                        return None;
                    }
                }
                Segment::Capture(name) => {
                    captures.insert(name.clone(), (*parts.get(i)?).to_owned());
                }
            }
        }
        (parts.len() == self.segments.len()).then_some(captures)
    }

    /// `template` with `{name}` replaced by the captures (for a route's upstream `rewrite`).
    /// A capture's `?`, `#`, `&`, `=` and `+` are escaped: a captured segment never adds a query
    /// or a parameter to the target.
    #[must_use]
    pub fn fill(template: &str, captures: &Captures) -> String {
        let mut out = template.to_owned();
        for (name, value) in captures {
            let escaped: String = value
                .chars()
                .map(|c| match c {
                    '?' | '#' | '&' | '=' | '+' => format!("%{:02X}", u32::from(c)),
                    c => c.to_string(),
                })
                .collect();
            out = out.replace(&format!("{{*{name}}}"), &escaped).replace(&format!("{{{name}}}"), &escaped);
        }
        out
    }

    /// The names a template may use.
    #[must_use]
    pub fn names(&self) -> Vec<&str> {
        self.segments
            .iter()
            .filter_map(|s| match s {
                Segment::Capture(n) | Segment::Rest(n) => Some(n.as_str()),
                Segment::Literal(_) => None,
            })
            .collect()
    }
}

/// A host a route is for: `api.example.com`, or `*.example.com` (any subdomain, not the apex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// This host.
    Exact(String),
    /// Any host ending in `.suffix`.
    Subdomains(String),
}

impl HostPattern {
    /// Reads `pattern` (made canonical like a request's host).
    ///
    /// # Errors
    /// [`RequestError::Host`] for a malformed host.
    pub fn parse(pattern: &str) -> Result<Self, RequestError> {
        match pattern.strip_prefix("*.") {
            Some(suffix) => Ok(Self::Subdomains(canonical_host(suffix)?)),
            None => Ok(Self::Exact(canonical_host(pattern)?)),
        }
    }

    /// Whether `host` (canonical) is this one.
    #[must_use]
    pub fn matches(&self, host: &str) -> bool {
        match self {
            Self::Exact(exact) => host == exact,
            Self::Subdomains(suffix) => {
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix.as_str())
                    && host[..host.len() - suffix.len()].ends_with('.')
            }
        }
    }
}

/// A query condition's wanted value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryValue {
    /// Present, whatever its value (`"*"` in the configuration).
    Any,
    /// This value (after percent-decoding).
    Is(String),
}

/// The decoded `(key, value)` pairs of a query (`+` is a space).
#[must_use]
pub fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode_component(k), decode_component(v))
        })
        .collect()
}

fn decode_component(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `pairs` (of the raw `query`) meet every condition. Keys are compared whatever their
/// case; a condition's key given more than once, or a query with `;` where conditions apply,
/// is an error (the proxy and the upstream could read different values).
///
/// # Errors
/// [`RequestError::AmbiguousQuery`].
pub fn query_matches(
    conditions: &BTreeMap<String, QueryValue>,
    pairs: &[(String, String)],
    query: Option<&str>,
) -> Result<bool, RequestError> {
    if !conditions.is_empty() && query.is_some_and(|q| q.contains(';')) {
        return Err(RequestError::AmbiguousQuery(";".into()));
    }
    for (key, wanted) in conditions {
        let mut values = pairs.iter().filter(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v);
        let (Some(value), more) = (values.next(), values.next()) else { return Ok(false) };
        if more.is_some() {
            return Err(RequestError::AmbiguousQuery(key.clone()));
        }
        if let QueryValue::Is(text) = wanted
            && value != text
        {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn crafted_paths_are_refused_or_made_canonical() {
        for (raw, canonical) in [
            ("/", "/"),
            ("/paid", "/paid"),
            ("/paid/", "/paid/"),
            ("/%70aid", "/paid"),
            ("/a%20b", "/a%20b"),
            ("/a%2a", "/a%2A"),
            ("/files/x.tar.gz", "/files/x.tar.gz"),
            ("/~user/..x", "/~user/..x"),
        ] {
            assert_eq!(canonical_path(raw).as_deref(), Ok(canonical), "{raw}");
        }
        for raw in [
            "paid",
            "/free/../paid",
            "/free/%2e%2e/paid",
            "/free/%2E./paid",
            "/free/.%2e/paid",
            "/./paid",
            "//paid",
            "/free//paid",
            "/free%2fpaid",
            "/free%2Fpaid",
            "/free%5cpaid",
            "/free\\paid",
            "/paid;x=1",
            "/paid%3bx",
            "/paid%00",
            "/paid%0a",
            "/pa%zzid",
            "/paid%",
            "/pa id",
            "/..",
        ] {
            assert!(canonical_path(raw).is_err(), "{raw} must be refused");
        }
    }

    #[test]
    fn patterns_match_segments_case_insensitively_with_captures() {
        let p: PathPattern = "/reports/{id}".parse().unwrap();
        assert_eq!(p.matches("/reports/42").unwrap().get("id").map(String::as_str), Some("42"));
        assert!(p.matches("/REPORTS/42").is_some());
        assert!(p.matches("/reports/42/").is_some());
        assert!(p.matches("/reports").is_none());
        assert!(p.matches("/reports/42/more").is_none());
        assert!(p.matches("/reportsx/42").is_none());
        let rest: PathPattern = "/files/{*path}".parse().unwrap();
        assert_eq!(rest.matches("/files/a/b/c").unwrap().get("path").map(String::as_str), Some("a/b/c"));
        assert_eq!(rest.matches("/files").unwrap().get("path").map(String::as_str), Some(""));
        assert!(rest.matches("/filesx/a").is_none());
        let root: PathPattern = "/".parse().unwrap();
        assert!(root.matches("/").is_some() && root.matches("/x").is_none());
        assert_eq!(PathPattern::fill("/v1/{id}/{*path}", &rest.matches("/files/a/b").unwrap()), "/v1/{id}/a/b");
        let city: PathPattern = "/plan/{city}".parse().unwrap();
        let filled =
            PathPattern::fill("/echo?plan=basic&city={city}", &city.matches("/plan/Paris&plan=premium").unwrap());
        assert_eq!(filled, "/echo?plan=basic&city=Paris%26plan%3Dpremium");
        for bad in ["reports", "/a/{*rest}/b", "/a/{}", "/a/{x-y}", "/a/../b", "/a b"] {
            assert!(bad.parse::<PathPattern>().is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts_are_canonical() {
        assert_eq!(canonical_host("API.Example.com.:8443").unwrap(), "api.example.com");
        assert_eq!(canonical_host("[::1]:80").unwrap(), "[::1]");
        assert!(canonical_host("").is_err() && canonical_host(".").is_err() && canonical_host("a b").is_err());
        assert!(canonical_host("api.example.com..").is_err());
        assert_eq!(canonical_host("[::1]").unwrap(), "[::1]");
        assert_eq!(canonical_host("[FE80::1]:").unwrap(), "[fe80::1]");
        assert_eq!(canonical_host("api.example.com:").unwrap(), "api.example.com");
        // What fuzzing found read as hosts that were not (fuzz/regressions/proxy_request/): a
        // colon outside a literal, brackets in a name, text after a literal, a port of letters.
        for bad in ["api.ple.com.:J.:808", "]:", "api.examp[::1]:80", "y::1]:80", "[::1]x", "[]", "[::g]", "a:b:443"] {
            assert!(canonical_host(bad).is_err(), "{bad:?}");
        }
        assert!(canonical_host("api.example.com:8o").is_err() && canonical_host("api.example.com:123456").is_err());
        let exact = HostPattern::parse("api.example.com").unwrap();
        assert!(exact.matches(&canonical_host("API.example.com.").unwrap()));
        assert!(!exact.matches("evil-api.example.com"));
        let sub = HostPattern::parse("*.example.com").unwrap();
        assert!(sub.matches("a.example.com") && !sub.matches("example.com") && !sub.matches("aexample.com"));
    }

    #[test]
    fn query_conditions_refuse_duplicates() {
        let conditions = BTreeMap::from([("model".to_owned(), QueryValue::Is("large one".into()))]);
        let check = |q: &str| query_matches(&conditions, &query_pairs(q), Some(q));
        assert_eq!(check("model=large+one&x=1"), Ok(true));
        assert_eq!(check("model=large%20one"), Ok(true));
        assert_eq!(check("MODEL=large+one"), Ok(true), "keys whatever their case");
        assert_eq!(check("model=small"), Ok(false));
        assert_eq!(check("x=1"), Ok(false));
        for ambiguous in ["model=large+one&model=small", "model=large+one&Model=small", "model=large+one;model=small"] {
            assert!(check(ambiguous).is_err(), "{ambiguous}");
        }
        let any = BTreeMap::from([("k".to_owned(), QueryValue::Any)]);
        assert_eq!(query_matches(&any, &query_pairs("k="), Some("k=")), Ok(true));
    }
}
