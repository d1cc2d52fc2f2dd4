//! What a request is offered: the requirements of its prices (with what the facilitator's
//! `/supported` adds), the resource paid for, and which offer a payment pays.

use serde_json::{Map, Value};
use tollgate_protocol::x402::{PaymentFlow, PaymentPayload, ResourceInfo, SCHEME_EXACT, SCHEME_UPTO, SupportedKind};
use tollgate_protocol::{ChainFamily, Network};

use crate::challenge::{self, Buffered};
use crate::config::{Config, ResourceUrl, SettlementOrder};
use crate::facilitator::Verdict;
use crate::price::{Offer, Price};

/// Whether a price's requirement needs what the facilitator's `/supported` says: its network,
/// a Solana fee payer, or the account that settles `upto`.
pub(crate) fn needs_supported(price: &Price) -> bool {
    price.network.is_none()
        || (price.scheme == SCHEME_EXACT && price.family == ChainFamily::Solana)
        || (price.scheme == SCHEME_UPTO && price.extra.as_ref().is_none_or(|e| e.get("facilitatorAddress").is_none()))
        || (crate::batch::is_batch(price.scheme)
            && price.extra.as_ref().is_none_or(|e| e.get("receiverAuthorizer").is_none()))
}

/// The flow a price is settled in: the one its `extra` names, else the layer's order's (`upto`
/// only by authorization: its charge is known after the handler).
///
/// # Errors
/// Why the flow named cannot be: unknown, or not one the scheme can be paid in.
pub(crate) fn flow(price: &Price, order: SettlementOrder) -> Result<PaymentFlow, String> {
    let named = price.extra.as_ref().is_some_and(|e| e.get(PaymentFlow::KEY).is_some());
    let flow = match PaymentFlow::of(price.extra.as_ref()) {
        Ok(flow) if named => flow,
        Ok(_) if price.scheme == SCHEME_UPTO || crate::batch::is_batch(price.scheme) => PaymentFlow::Authorization,
        Ok(_) => match order {
            SettlementOrder::SettleBefore => PaymentFlow::Upfront,
            SettlementOrder::VerifyThenSettle => PaymentFlow::Authorization,
        },
        Err(value) => return Err(format!("paymentFlow {value} is not authorization, upfront or escrow")),
    };
    if flow.fits(price.scheme) {
        Ok(flow)
    } else {
        Err(format!("{} is not paid in the {} flow", price.scheme, flow.as_str()))
    }
}

/// A price's requirement `extra`: its own, with its flow (written only when it is not
/// `authorization`), and what the facilitator's `/supported` (`kinds`) adds on `network`: the
/// fee payer of Solana `exact`, the settling account of `upto`. `None` when one is needed and
/// not given (the price is left out).
pub(crate) fn extra(
    price: &Price,
    flow: PaymentFlow,
    network: &Network,
    kinds: &[SupportedKind],
) -> Option<Option<Value>> {
    let mut map: Map<String, Value> = price.extra.as_ref().and_then(|e| e.as_object().cloned()).unwrap_or_default();
    map.remove(PaymentFlow::KEY);
    if flow != PaymentFlow::Authorization {
        map.insert(PaymentFlow::KEY.into(), Value::String(flow.as_str().into()));
    }
    let from_supported = |key: &str| {
        kinds
            .iter()
            .find(|k| k.x402_version == 2 && k.scheme == price.scheme && k.network == network.to_string())
            .and_then(|k| k.extra.as_ref())
            .and_then(|e| e.get(key))
            .cloned()
    };
    if price.scheme == SCHEME_EXACT && price.family == ChainFamily::Solana {
        let Some(fee_payer) = from_supported("feePayer") else {
            tracing::warn!(%network, "the facilitator has no Solana fee payer; exact price left out");
            return None;
        };
        map.insert("feePayer".into(), fee_payer);
    }
    if price.scheme == SCHEME_UPTO && !map.contains_key("facilitatorAddress") {
        let Some(account) = from_supported("facilitatorAddress") else {
            tracing::warn!(%network, "the facilitator names no account settling upto; metered price left out");
            return None;
        };
        map.insert("facilitatorAddress".into(), account);
    }
    if crate::batch::is_batch(price.scheme) && !map.contains_key("receiverAuthorizer") {
        let Some(authorizer) = from_supported("receiverAuthorizer") else {
            tracing::warn!(%network, "the facilitator names no receiver authorizer; batch-settlement price left out");
            return None;
        };
        map.insert("receiverAuthorizer".into(), authorizer);
    }
    // A price given without `extra` keeps none, when nothing is added.
    Some((price.extra.is_some() || !map.is_empty()).then_some(Value::Object(map)))
}

/// The requirements for `prices`: each price's network (or the facilitator's for its chain),
/// its flow, and what the facilitator's `/supported` adds (see [`extra`]).
pub(crate) async fn offers(config: &Config, prices: &[Price]) -> Result<Vec<Offer>, Buffered> {
    let needs_supported = prices.iter().any(needs_supported);
    let supported = if needs_supported {
        match config.facilitator.supported().await {
            Ok(s) => Some(s),
            Err(Verdict::Unavailable { timed_out, reason }) => {
                tracing::warn!(%reason, "payment facilitator unavailable");
                return Err(challenge::unavailable(timed_out));
            }
            Err(_) => return Err(challenge::unavailable(false)),
        }
    } else {
        None
    };
    let kinds = supported.as_ref().map(|s| s.kinds.as_slice()).unwrap_or_default();
    let mut out = Vec::with_capacity(prices.len());
    for price in prices {
        let Some(network) = network(price, kinds) else {
            tracing::warn!(scheme = price.scheme, family = %price.family, "the facilitator settles no such payment; price left out");
            continue;
        };
        let flow = match flow(price, config.order) {
            Ok(flow) => flow,
            Err(why) => {
                tracing::warn!(scheme = price.scheme, %why, "price left out");
                continue;
            }
        };
        let Some(extra) = extra(price, flow, &network, kinds) else { continue };
        if let Some(offer) = price.offer(network, extra, config.max_timeout_seconds) {
            out.push(offer);
        }
    }
    if out.is_empty() {
        return Err(challenge::unavailable(false));
    }
    Ok(out)
}

/// The network a price is offered on: its own, else the first of its chain family on which the
/// facilitator settles its scheme (x402 v2).
fn network(price: &Price, kinds: &[SupportedKind]) -> Option<Network> {
    price.network.clone().or_else(|| {
        kinds
            .iter()
            .filter(|k| k.x402_version == 2 && k.scheme == price.scheme)
            .filter_map(|k| k.network.parse::<Network>().ok())
            .find(|n| n.family() == price.family)
    })
}

/// The offered requirement a payload pays: v2 must have accepted one whole (scheme, network,
/// amount, asset, recipient, timeout and `extra`); v1 names scheme and network, and the
/// facilitator checks the rest against the requirement.
pub(crate) fn matching(offers: &[Offer], payload: &PaymentPayload) -> Option<usize> {
    offers.iter().position(|(r, _)| match payload {
        PaymentPayload::V2(p) => p.accepted == *r,
        PaymentPayload::V1(p) => p.scheme == r.scheme && p.network == r.network,
    })
}

/// The resource of this request: the configured URL, the one the pricing function named, or
/// the request's own (scheme and host from the configured base, `Forwarded`,
/// `X-Forwarded-Proto` / `X-Forwarded-Host` or `Host`; then path and query).
pub(crate) fn resource_info(config: &Config, parts: &http::request::Parts, named: Option<String>) -> ResourceInfo {
    let url = match (&config.resource, named) {
        (_, Some(url)) => url,
        (ResourceUrl::Fixed(url), None) => url.clone(),
        (ResourceUrl::FromRequest { base }, None) => {
            let base = base.clone().unwrap_or_else(|| request_base(&parts.headers, &parts.uri));
            let path = parts.uri.path_and_query().map_or("/", http::uri::PathAndQuery::as_str);
            format!("{base}{path}")
        }
    };
    ResourceInfo {
        url,
        description: config.description.clone(),
        mime_type: config.mime_type.clone(),
        method: None,
        service: config.service.clone(),
    }
}

/// `scheme://host` as the request, or the proxy in front of it, names them.
pub(crate) fn request_base(headers: &http::HeaderMap, uri: &http::Uri) -> String {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // RFC 7239: the first element is the one the client's first proxy wrote.
    let forwarded = text("forwarded").and_then(|f| f.split(',').next()).map(|first| {
        let pair = |key: &str| {
            first.split(';').find_map(|p| {
                let (k, v) = p.trim().split_once('=')?;
                k.eq_ignore_ascii_case(key).then(|| v.trim_matches('"').to_owned())
            })
        };
        (pair("proto"), pair("host"))
    });
    let (proto, host) = forwarded.unwrap_or_default();
    let first = |name: &str| text(name).and_then(|v| v.split(',').next()).map(|v| v.trim().to_owned());
    let proto = proto.or_else(|| first("x-forwarded-proto")).or_else(|| uri.scheme_str().map(str::to_owned));
    let host = host
        .or_else(|| first("x-forwarded-host"))
        .or_else(|| text("host").map(str::to_owned))
        .or_else(|| uri.authority().map(|a| a.as_str().to_owned()));
    let proto = match proto.as_deref() {
        Some(p) if p.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    // A host with anything but host characters is not used to make a URL.
    let host = host.filter(|h| {
        !h.is_empty() && h.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']' | '_'))
    });
    format!("{proto}://{}", host.as_deref().unwrap_or("localhost"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tollgate_protocol::x402::{Asset, PaymentRequirements};
    use tollgate_protocol::{Address, AtomicAmount};

    use super::*;

    const BASE: &str = "eip155:8453";
    const DEVNET: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";

    fn price(scheme: &'static str, family: ChainFamily, network: Option<&str>, extra: Option<Value>) -> Price {
        Price {
            scheme,
            family,
            network: network.map(|n| n.parse().unwrap()),
            asset: Asset::Native,
            amount: AtomicAmount(1_000),
            decimals: 6,
            pay_to: Some(Address::Evm([7; 20])),
            extra,
        }
    }

    fn kind(version: u8, scheme: &str, network: &str, extra: Option<Value>) -> SupportedKind {
        SupportedKind { x402_version: version, scheme: scheme.into(), network: network.into(), extra }
    }

    /// Without a network of its own, a price goes on the facilitator's network of its family
    /// that settles its scheme in v2 — not one of v1, of another scheme or another family.
    #[test]
    fn a_price_without_a_network_takes_the_facilitators_for_its_scheme_and_family() {
        let kinds = [
            kind(1, "exact", "eip155:1", None),
            kind(2, "exact-native", "eip155:10", None),
            kind(2, "exact", DEVNET, None),
            kind(2, "exact", BASE, None),
        ];
        let evm = price("exact", ChainFamily::Evm, None, None);
        assert_eq!(network(&evm, &kinds), Some(BASE.parse().unwrap()));
        let native = price("exact-native", ChainFamily::Evm, None, None);
        assert_eq!(network(&native, &kinds), Some("eip155:10".parse().unwrap()));
        let solana = price("exact", ChainFamily::Solana, None, None);
        assert_eq!(network(&solana, &kinds), Some(DEVNET.parse().unwrap()));
        assert_eq!(network(&price("upto", ChainFamily::Evm, None, None), &kinds), None);
        // Its own network stands, whatever the facilitator lists.
        assert_eq!(
            network(&price("exact", ChainFamily::Evm, Some("eip155:84532"), None), &kinds),
            Some("eip155:84532".parse().unwrap())
        );
    }

    /// `upto` names the account that settles it: the seller's own, else the facilitator's.
    #[test]
    fn an_upto_price_names_its_settling_account() {
        let network: Network = BASE.parse().unwrap();
        let kinds = [kind(2, "upto", BASE, Some(json!({"facilitatorAddress": "0xfac"})))];
        let from_facilitator =
            extra(&price("upto", ChainFamily::Evm, None, None), PaymentFlow::Authorization, &network, &kinds);
        assert_eq!(from_facilitator, Some(Some(json!({"facilitatorAddress": "0xfac"}))));
        let own = price("upto", ChainFamily::Evm, None, Some(json!({"facilitatorAddress": "0xown"})));
        assert_eq!(
            extra(&own, PaymentFlow::Authorization, &network, &kinds),
            Some(Some(json!({"facilitatorAddress": "0xown"})))
        );
        // None named anywhere: the price is left out.
        let other: Network = "eip155:1".parse().unwrap();
        assert_eq!(
            extra(&price("upto", ChainFamily::Evm, None, None), PaymentFlow::Authorization, &other, &kinds),
            None
        );
    }

    /// `batch-settlement` names the receiver's authorizer: the seller's own, else the facilitator's.
    #[test]
    fn a_batch_price_names_its_receivers_authorizer() {
        let network: Network = BASE.parse().unwrap();
        let scheme = crate::batch::SCHEME;
        let kinds = [kind(2, scheme, BASE, Some(json!({"receiverAuthorizer": "0xfac"})))];
        let flow = PaymentFlow::Authorization;
        let from_facilitator = extra(&price(scheme, ChainFamily::Evm, None, None), flow, &network, &kinds);
        assert_eq!(from_facilitator, Some(Some(json!({"receiverAuthorizer": "0xfac"}))));
        let own = price(scheme, ChainFamily::Evm, None, Some(json!({"receiverAuthorizer": "0xown"})));
        assert_eq!(extra(&own, flow, &network, &kinds), Some(Some(json!({"receiverAuthorizer": "0xown"}))));
        let other: Network = "eip155:1".parse().unwrap();
        assert_eq!(extra(&price(scheme, ChainFamily::Evm, None, None), flow, &other, &kinds), None);
    }

    /// A v1 payload names its scheme and network: it pays the offer with both, not one that
    /// shares only the scheme.
    #[test]
    fn a_v1_payload_pays_the_offer_of_its_scheme_and_network() {
        let offer = |network: &str| -> Offer {
            let requirement: PaymentRequirements = serde_json::from_value(json!({
                "scheme": "exact", "network": network, "amount": "1000", "asset": "native",
                "payTo": "0x0707070707070707070707070707070707070707", "maxTimeoutSeconds": 60,
            }))
            .unwrap();
            (requirement, 18)
        };
        let offers = [offer("eip155:84532"), offer(BASE)];
        let v1 = |scheme: &str, network: &str| -> PaymentPayload {
            serde_json::from_value(json!({"x402Version": 1, "scheme": scheme, "network": network, "payload": {}}))
                .unwrap()
        };
        assert_eq!(matching(&offers, &v1("exact", "base")), Some(1));
        assert_eq!(matching(&offers, &v1("exact", "base-sepolia")), Some(0));
        assert_eq!(matching(&offers, &v1("exact-native", "base")), None);
        assert_eq!(matching(&offers, &v1("exact", "solana-devnet")), None);
    }
}
