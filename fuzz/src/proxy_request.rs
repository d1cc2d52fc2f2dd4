//! What tollgate-proxy reads of a request before it prices it: the path (made canonical, or
//! refused), the host, the query, and a route's path pattern with the upstream path it fills.
//!
//! An input is lines: a route's path pattern, a request path, a host, a query.

use tollgate_proxy::route::{PathPattern, canonical_host, canonical_path, query_pairs};

/// What this target feeds and what it asserts.
pub const ABOUT: &str = "proxy request paths, hosts, queries and route patterns: canonical forms are fixed points \
                         without dot segments, encoded slashes or parameters; a matched route's upstream path \
                         gains no query, fragment or segment from what it captured";

/// Runs one input; panics when a property breaks.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.split('\n');
    let (pattern, path, host, query) = (lines.next(), lines.next(), lines.next(), lines.next());
    let canonical = path.and_then(|p| canonical_path(p).ok());
    if let Some(c) = &canonical {
        assert_eq!(canonical_path(c).as_deref(), Ok(c.as_str()), "a canonical path is not a fixed point");
        assert!(c.starts_with('/'));
        let segments: Vec<&str> = c[1..].split('/').collect();
        for (i, segment) in segments.iter().enumerate() {
            assert!(!matches!(*segment, "." | ".."), "dot segment in {c:?}");
            assert!(!segment.is_empty() || i + 1 == segments.len(), "empty segment in {c:?}");
            let upper = segment.to_ascii_uppercase();
            assert!(!upper.contains("%2F") && !upper.contains("%5C"), "encoded slash in {c:?}");
            assert!(!segment.contains(['\\', ';', '?', '#']), "{c:?}");
        }
    }
    if let Some(h) = host.and_then(|h| canonical_host(h).ok()) {
        assert_eq!(canonical_host(&h).as_deref(), Ok(h.as_str()), "a canonical host is not a fixed point");
        assert_eq!(h, h.to_ascii_lowercase());
        assert!(!h.ends_with('.'));
        // A name, or one bracketed IPv6 literal: no port or stray colon is left in it.
        let name = h.strip_prefix('[').and_then(|l| l.strip_suffix(']'));
        assert!(name.map_or(!h.contains([':', '[', ']']), |l| !l.contains(['[', ']'])), "host {h:?}");
    }
    if let Some(query) = query {
        let pairs = query_pairs(query);
        assert!(pairs.len() <= query.split('&').count());
    }
    let (Some(pattern), Some(path)) = (pattern.and_then(|p| p.parse::<PathPattern>().ok()), canonical) else { return };
    let Some(captures) = pattern.matches(&path) else { return };
    let names = pattern.names();
    assert_eq!(captures.len(), names.iter().collect::<std::collections::BTreeSet<_>>().len());
    // The upstream path a route rewrites to: a fixed prefix, then each capture as a segment.
    let template: String =
        std::iter::once("/upstream".to_owned()).chain(names.iter().map(|n| format!("/{{{n}}}"))).collect();
    let filled = PathPattern::fill(&template, &captures);
    assert!(!filled.contains(['?', '#']), "a capture added a query or fragment: {filled:?}");
    assert!(filled.starts_with("/upstream"));
    if let Ok(upstream) = canonical_path(&filled) {
        assert!(!upstream.split('/').any(|s| s == ".."), "{upstream:?}");
    }
}
