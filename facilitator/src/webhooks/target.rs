//! Where a webhook may be sent: never into the facilitator's own network.
//!
//! A registered URL is checked when it is registered, and again on every delivery, where the
//! addresses it resolves to are filtered *by the resolver the connection uses* (so a name that
//! resolves to a public address when registered and to `127.0.0.1` later reaches nothing).
//! Redirects are not followed and no proxy is used.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::config::WebhookSettings;

/// Whether `ip` is an address of the public internet: not loopback, private, link-local (cloud
/// metadata services live there), shared (CGNAT), multicast, reserved or documentation space,
/// nor such an address wrapped in IPv6.
#[must_use]
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (18..20).contains(&b)))
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let s = ip.segments();
    // IPv4-translated (::ffff:0:0:0/96), local-use NAT64 (64:ff9b:1::/48), Teredo (2001::/32),
    // discard-only (100::/64): not addresses of the public internet to call.
    if (s[0..4] == [0, 0, 0, 0] && s[4] == 0xffff && s[5] == 0)
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1)
        || (s[0] == 0x2001 && s[1] == 0)
        || s[0..4] == [0x100, 0, 0, 0]
    {
        return false;
    }
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return is_public_v4(Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8));
    }
    if s[0] == 0x2002 {
        return is_public_v4(Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8));
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || s[0..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible and other ::/96
}

/// Checks a URL given for an endpoint.
///
/// # Errors
/// Why it cannot be an endpoint, in words for the caller.
pub async fn check_url(text: &str, settings: &WebhookSettings) -> Result<Url, String> {
    if text.len() > 2048 {
        return Err("url is longer than 2048 characters".into());
    }
    let url = Url::parse(text).map_err(|e| format!("url is not an absolute URL: {e}"))?;
    match url.scheme() {
        "https" => {}
        "http" if !settings.require_https => {}
        "http" => return Err("url must use https".into()),
        other => return Err(format!("url must be https, not {other}")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("url must not carry credentials: deliveries are signed (Tollgate-Signature)".into());
    }
    if url.fragment().is_some() {
        return Err("url must not have a fragment".into());
    }
    let Some(host) = url.host_str() else { return Err("url has no host".into()) };
    let host = host.trim_end_matches('.');
    if settings.allow_private_targets {
        return Ok(url);
    }
    let port = url.port_or_known_default().unwrap_or(443);
    let addresses: Vec<IpAddr> = match url.host() {
        Some(url::Host::Ipv4(ip)) => vec![IpAddr::V4(ip)],
        Some(url::Host::Ipv6(ip)) => vec![IpAddr::V6(ip)],
        _ if host.eq_ignore_ascii_case("localhost") || host.to_ascii_lowercase().ends_with(".localhost") => {
            return Err("url must be a public address, not localhost".into());
        }
        // A name that does not resolve yet is accepted: each delivery resolves it again.
        _ => tokio::net::lookup_host((host, port)).await.map(|a| a.map(|a| a.ip()).collect()).unwrap_or_default(),
    };
    // Which address a name has is not told: the answer would map the facilitator's network.
    if addresses.iter().any(|ip| !is_public(*ip)) {
        return Err("url must be a public address".into());
    }
    Ok(url)
}

/// Whether a delivery may go to `url` as it stands: its host, when an address, must be public
/// (names are filtered by [`PublicOnly`] when connecting).
#[must_use]
pub fn literal_host_allowed(url: &Url, settings: &WebhookSettings) -> bool {
    settings.allow_private_targets
        || match url.host() {
            Some(url::Host::Ipv4(ip)) => is_public(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => is_public(IpAddr::V6(ip)),
            Some(url::Host::Domain(name)) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                !(name == "localhost" || name.ends_with(".localhost"))
            }
            None => false,
        }
}

/// A resolver that drops every non-public address: the connection can only reach what it
/// returns.
#[derive(Debug, Clone, Copy)]
pub struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = found.into_iter().filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                return Err(format!("blocked: {host} resolves to no public address").into());
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "192.0.2.1",
            "198.18.0.1",
            "192.0.0.8",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "::127.0.0.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["::ffff:0:7f00:1", "64:ff9b:1::1", "2001::1", "100::1"] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["1.1.1.1", "93.184.216.34", "100.128.0.1", "2606:4700::1111", "::ffff:1.1.1.1", "64:ff9b::101:101"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn urls_into_the_facilitator_network_are_refused() {
        let strict = WebhookSettings::default();
        for url in [
            "http://hooks.example/x",
            "https://127.0.0.1/x",
            "https://[::1]:8443/x",
            "https://10.0.0.5/x",
            "https://169.254.169.254/latest/meta-data",
            "https://localhost/x",
            "https://api.localhost/x",
            "https://localhost./x",
            "https://foo.localhost./x",
            "https://user:pw@hooks.example/x",
            "https://hooks.example/x#frag",
            "ftp://hooks.example/x",
            "not a url",
            "https://[::ffff:7f00:1]/x",
        ] {
            assert!(check_url(url, &strict).await.is_err(), "{url}");
        }
        assert!(check_url("https://93.184.216.34/hook", &strict).await.is_ok());
        let open = WebhookSettings { allow_private_targets: true, require_https: false, ..WebhookSettings::default() };
        assert!(check_url("http://127.0.0.1:9/x", &open).await.is_ok());
        let url: Url = "https://127.0.0.1/x".parse().unwrap();
        assert!(!literal_host_allowed(&url, &strict) && literal_host_allowed(&url, &open));
    }

    #[tokio::test]
    async fn the_resolver_drops_private_answers() {
        let name: Name = "localhost".parse().unwrap();
        let err = match PublicOnly.resolve(name).await {
            Ok(addrs) => panic!("localhost resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("no public address"), "{err}");
    }
}
