//! Input rules of the gateway API that go beyond JSON shape (source contract limits).

use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::{Address, AtomicAmount, ChainFamily, DecimalAmount};

use crate::api::error::ApiError;

/// `/payment/send` amount bounds, whole native units.
pub const SEND_MIN_AMOUNT: &str = "0.001";
/// Upper bound of `/payment/send` amounts.
pub const SEND_MAX_AMOUNT: &str = "100";
/// `/payment/send` priority fee bounds.
pub const PRIORITY_FEE_MIN: &str = "0.00001";
/// Upper bound of priority fees.
pub const PRIORITY_FEE_MAX: &str = "0.01";
/// Longest resource URL accepted.
pub const MAX_RESOURCE_LEN: usize = 2048;
/// Largest metadata object accepted, bytes of JSON.
pub const MAX_METADATA_BYTES: usize = 4096;
/// `/payment/receive` timeout bounds, seconds.
pub const TIMEOUT_RANGE_SECS: std::ops::RangeInclusive<u64> = 1..=300;
/// Default `/payment/receive` timeout, seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;

/// Whether `id` can be one of the ids this API makes (`pay_…`, `whe_…`: a prefix and a ULID).
/// Anything else names nothing, and never reaches the database (PostgreSQL refuses NUL in text).
#[must_use]
pub fn is_identifier(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A wallet address field (any field but the recipient).
///
/// # Errors
/// 400 `INVALID_PARAMETERS` naming the field.
pub fn address(field: &str, text: &str) -> Result<Address, ApiError> {
    text.parse().map_err(|e| ApiError::invalid_params(format!("{field}: {e}")))
}

/// The recipient, which must be of the payer's family and not the payer.
///
/// # Errors
/// 400 `INVALID_RECIPIENT`.
pub fn recipient(text: &str, payer: &Address) -> Result<Address, ApiError> {
    let to: Address = text.parse().map_err(|e| ApiError::invalid_recipient(format!("recipientAddress: {e}")))?;
    if to.family() != payer.family() {
        return Err(ApiError::invalid_recipient(format!(
            "recipientAddress is a {} address but walletAddress is a {} address",
            to.family(),
            payer.family()
        )));
    }
    if to == *payer {
        return Err(ApiError::invalid_recipient("recipientAddress must differ from walletAddress"));
    }
    if to == Address::Evm([0; 20]) {
        return Err(ApiError::invalid_recipient("recipientAddress is the zero address: what it receives is lost"));
    }
    Ok(to)
}

fn whole_units(text: &str, decimals: u8) -> AtomicAmount {
    // The constants above are valid for both families' decimals.
    DecimalAmount::parse(text).and_then(|d| d.to_atomic(decimals)).unwrap_or_default()
}

/// A native amount converted exactly to atomic units, within optional bounds.
///
/// # Errors
/// 400 `INVALID_PARAMETERS` naming the field: too many decimals, zero, or out of bounds.
pub fn native_amount(
    field: &str,
    value: &DecimalAmount,
    family: ChainFamily,
    bounds: Option<(&str, &str)>,
) -> Result<AtomicAmount, ApiError> {
    let decimals = family.native_decimals();
    let atomic = value
        .to_atomic(decimals)
        .map_err(|e| ApiError::invalid_params(format!("{field}: {e} for {}", family.native_symbol())))?;
    if atomic == AtomicAmount::ZERO {
        return Err(ApiError::invalid_params(format!("{field} must be greater than 0")));
    }
    if let Some((min, max)) = bounds
        && (atomic < whole_units(min, decimals) || atomic > whole_units(max, decimals))
    {
        return Err(ApiError::invalid_params(format!(
            "{field} must be between {min} and {max} {} (got {value})",
            family.native_symbol()
        )));
    }
    Ok(atomic)
}

/// An optional resource URL.
///
/// # Errors
/// 400 `INVALID_PARAMETERS` unless it is an absolute http(s) URL — or `mcp://` (a paid MCP tool,
/// `mcp://tool/<name>` in x402's MCP transport) — of reasonable length.
pub fn resource(value: Option<&str>) -> Result<(), ApiError> {
    let Some(url) = value else { return Ok(()) };
    let ok = url.len() <= MAX_RESOURCE_LEN
        && ["https://", "http://", "mcp://"].iter().any(|scheme| url.len() > scheme.len() && url.starts_with(scheme))
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid_params(format!(
            "resource must be an absolute http(s) or mcp URL of at most {MAX_RESOURCE_LEN} characters"
        )))
    }
}

/// The resource an x402 request names (any URL scheme: x402 sells more than HTTP), bounded and
/// free of control characters, which no URL has and PostgreSQL cannot store (NUL).
///
/// # Errors
/// 400 `INVALID_PARAMETERS`.
pub fn x402_resource(value: Option<&str>) -> Result<(), ApiError> {
    match value {
        Some(url) if url.chars().count() > MAX_RESOURCE_LEN || url.chars().any(char::is_control) => {
            Err(ApiError::invalid_params(format!(
                "resource.url must be at most {MAX_RESOURCE_LEN} characters, without control characters"
            )))
        }
        _ => Ok(()),
    }
}

/// The HTTP method a seller names for the request paid for: a token of 1 to 16 uppercase ASCII
/// letters (`GET`, `POST`, ...).
///
/// # Errors
/// 400 `INVALID_PARAMETERS`.
pub fn method(value: Option<&str>) -> Result<Option<String>, ApiError> {
    match value {
        None => Ok(None),
        Some(m) if (1..=16).contains(&m.len()) && m.bytes().all(|b| b.is_ascii_uppercase()) => Ok(Some(m.to_owned())),
        Some(_) => Err(ApiError::invalid_params("method must be an HTTP method in capitals (GET, POST, ...)")),
    }
}

/// Optional metadata, bounded in size.
///
/// # Errors
/// 400 `INVALID_PARAMETERS` when larger than [`MAX_METADATA_BYTES`].
pub fn metadata(value: Option<&serde_json::Map<String, serde_json::Value>>) -> Result<(), ApiError> {
    let size = value.map_or(0, |m| serde_json::Value::Object(m.clone()).to_string().len());
    if size > MAX_METADATA_BYTES {
        return Err(ApiError::invalid_params(format!("metadata must be at most {MAX_METADATA_BYTES} bytes of JSON")));
    }
    Ok(())
}

/// `facilitatorUrl`, which must be allow-listed.
///
/// # Errors
/// 400 `INVALID_PARAMETERS` when it is not in the list.
pub fn facilitator_url(value: Option<&str>, allow_list: &[String]) -> Result<(), ApiError> {
    let Some(url) = value else { return Ok(()) };
    let norm = |u: &str| u.trim_end_matches('/').to_owned();
    if allow_list.iter().any(|a| norm(a) == norm(url)) {
        Ok(())
    } else {
        Err(ApiError::invalid_params("facilitatorUrl is not in the facilitator allow-list")
            .with_remedy("Omit facilitatorUrl, or ask the operator to allow it"))
    }
}

/// The buyer's proof: a base64 x402 payment payload.
///
/// # Errors
/// 402 `INVALID_PAYMENT_PROOF` saying what is wrong with it.
pub fn payment_proof(text: &str) -> Result<PaymentPayload, ApiError> {
    PaymentPayload::from_header(text)
        .map_err(|e| ApiError::new(tollgate_protocol::ErrorCode::InvalidPaymentProof, format!("paymentProof: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_protocol::ErrorCode;

    fn d(s: &str) -> DecimalAmount {
        DecimalAmount::parse(s).unwrap()
    }

    #[test]
    fn send_bounds_are_inclusive_and_exact() {
        let b = Some((SEND_MIN_AMOUNT, SEND_MAX_AMOUNT));
        assert_eq!(native_amount("amount", &d("0.001"), ChainFamily::Solana, b).unwrap().get(), 1_000_000);
        assert_eq!(native_amount("amount", &d("100"), ChainFamily::Evm, b).unwrap().get(), 100_000_000_000_000_000_000);
        for bad in ["0.000999999999", "100.000000001", "0"] {
            let e = native_amount("amount", &d(bad), ChainFamily::Solana, b).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidParameters, "{bad}");
        }
        // More decimals than SOL has.
        let e = native_amount("amount", &d("0.0010000000001"), ChainFamily::Solana, b).unwrap_err();
        assert!(e.message().contains("too many decimal places"), "{}", e.message());
        // The same text is fine for ETH's 18 decimals.
        assert!(native_amount("amount", &d("0.0010000000001"), ChainFamily::Evm, b).is_ok());
        let fee = Some((PRIORITY_FEE_MIN, PRIORITY_FEE_MAX));
        assert!(native_amount("priorityFee", &d("0.00001"), ChainFamily::Solana, fee).is_ok());
        assert!(native_amount("priorityFee", &d("0.011"), ChainFamily::Solana, fee).is_err());
    }

    #[test]
    fn recipient_rules() {
        let sol: Address = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin".parse().unwrap();
        assert_eq!(
            recipient("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed", &sol).unwrap_err().code(),
            ErrorCode::InvalidRecipient
        );
        assert_eq!(recipient("nope", &sol).unwrap_err().code(), ErrorCode::InvalidRecipient);
        assert_eq!(recipient(&sol.to_string(), &sol).unwrap_err().code(), ErrorCode::InvalidRecipient);
        assert!(recipient("2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4", &sol).is_ok());
        assert_eq!(address("walletAddress", "0x12").unwrap_err().code(), ErrorCode::InvalidParameters);
    }

    #[test]
    fn other_fields() {
        assert!(resource(Some("https://seller.example/a")).is_ok());
        assert!(resource(Some("mcp://tool/summarize")).is_ok(), "a paid MCP tool");
        assert!(resource(Some("mcp://")).is_err());
        assert!(resource(Some("ftp://seller.example/a")).is_err());
        assert!(resource(Some("ftp://x")).is_err());
        assert!(resource(Some("https://a b")).is_err());
        assert!(resource(Some("https://a\u{0}b")).is_err(), "NUL");
        let payer: Address = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed".parse().unwrap();
        assert!(recipient("0x0000000000000000000000000000000000000000", &payer).is_err(), "the zero address");
        assert!(recipient("0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359", &payer).is_ok());
        assert!(method(Some("GET")).unwrap().is_some() && method(None).unwrap().is_none());
        assert!(method(Some("get")).is_err() && method(Some("G E")).is_err() && method(Some("")).is_err());
        assert!(resource(Some("https://a\u{7f}b")).is_err(), "DEL");
        assert!(x402_resource(Some("mcp://tools/weather")).is_ok());
        assert!(x402_resource(Some("https://a/\u{0}")).is_err());
        assert!(x402_resource(Some(&"a".repeat(MAX_RESOURCE_LEN + 1))).is_err());
        assert!(x402_resource(None).is_ok());
        assert!(facilitator_url(Some("https://x402.example/"), &["https://x402.example".into()]).is_ok());
        assert!(facilitator_url(Some("https://evil.example"), &[]).is_err());
        assert_eq!(payment_proof("garbage!").unwrap_err().code(), ErrorCode::InvalidPaymentProof);
        let big: serde_json::Map<_, _> =
            [("k".to_owned(), serde_json::Value::String("x".repeat(5000)))].into_iter().collect();
        assert!(metadata(Some(&big)).is_err());
    }
}
