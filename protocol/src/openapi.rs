//! OpenAPI schemas of the scalar types whose JSON form is custom (feature `openapi`).

use std::borrow::Cow;

use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, SchemaFormat, Type};
use utoipa::openapi::{Ref, RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::network::X402Network;
use crate::x402::{Asset, FacilitatorRequest, FacilitatorRequestV1, FacilitatorRequestV2, V1, V2};
use crate::{Address, AtomicAmount, DecimalAmount, Network};

fn scalar(ty: Type, description: &str, example: &str, pattern: Option<&str>) -> RefOr<Schema> {
    formatted(ty, description, example, pattern, None)
}

/// A scalar whose text the validation checks beyond its pattern, named by a custom `format`
/// (clients and contract tests tell well-formed values by it).
fn formatted(ty: Type, description: &str, example: &str, pattern: Option<&str>, format: Option<&str>) -> RefOr<Schema> {
    let mut b = ObjectBuilder::new().schema_type(ty).description(Some(description));
    if let Some(p) = pattern {
        b = b.pattern(Some(p));
    }
    if let Some(f) = format {
        b = b.format(Some(SchemaFormat::Custom(f.to_owned())));
    }
    let example: serde_json::Value = serde_json::from_str(example).unwrap_or(serde_json::Value::Null);
    RefOr::T(Schema::Object(b.examples([example]).build()))
}

impl PartialSchema for DecimalAmount {
    fn schema() -> RefOr<Schema> {
        scalar(Type::Number, "Whole native units, read exactly from the JSON text (never rounded).", "0.01", None)
    }
}
impl ToSchema for DecimalAmount {}

impl PartialSchema for AtomicAmount {
    fn schema() -> RefOr<Schema> {
        scalar(
            Type::String,
            "Atomic units (lamports, wei, token base units) as a decimal string, at most 2^128 - 1.",
            "\"10000000\"",
            Some(&atomic_pattern()),
        )
    }
}
impl ToSchema for AtomicAmount {}

impl PartialSchema for Network {
    fn schema() -> RefOr<Schema> {
        scalar(
            Type::String,
            "CAIP-2 chain id.",
            "\"solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1\"",
            Some("^(eip155:[0-9]+|solana:[1-9A-HJ-NP-Za-km-z]{1,32})$"),
        )
    }
}
impl ToSchema for Network {}

impl PartialSchema for Address {
    fn schema() -> RefOr<Schema> {
        formatted(
            Type::String,
            "EVM (0x + 40 hex, EIP-55 when mixed case) or Solana (base58, 32 bytes) address.",
            "\"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin\"",
            Some(crate::address::PATTERN),
            Some("address"),
        )
    }
}
impl ToSchema for Address {}

/// The decimal strings [`AtomicAmount`] reads: digits (leading zeros allowed) whose value fits in
/// a `u128`. Numbers of fewer digits than `u128::MAX` always fit; of as many, each prefix of it
/// followed by a smaller digit and any others, or `u128::MAX` itself.
fn atomic_pattern() -> String {
    let max = u128::MAX.to_string();
    let mut branches = vec![format!("[0-9]{{1,{}}}", max.len() - 1)];
    for (i, digit) in max.bytes().enumerate() {
        if digit > b'0' {
            let rest = max.len() - i - 1;
            branches.push(format!("{}[0-{}][0-9]{{{rest}}}", &max[..i], char::from(digit - 1)));
        }
    }
    branches.push(max);
    format!("^0*({})$", branches.join("|"))
}

impl PartialSchema for Asset {
    fn schema() -> RefOr<Schema> {
        formatted(
            Type::String,
            "`native` (SOL or ETH), or the token's mint (Solana) or contract (EVM) address.",
            "\"native\"",
            Some(crate::x402::ASSET_PATTERN),
            Some("asset"),
        )
    }
}
impl ToSchema for Asset {}

impl PartialSchema for X402Network {
    fn schema() -> RefOr<Schema> {
        let names: Vec<&str> = crate::network::v1_names().collect();
        let pattern =
            format!("^({}|eip155:(0|[1-9][0-9]{{0,18}})|solana:[1-9A-HJ-NP-Za-km-z]{{1,32}})$", names.join("|"));
        scalar(Type::String, "x402 v1 network name or CAIP-2 chain id.", "\"base-sepolia\"", Some(&pattern))
    }
}
impl ToSchema for X402Network {}

fn version(n: u8) -> RefOr<Schema> {
    RefOr::T(Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .enum_values(Some([n]))
            .description(Some(format!("x402 protocol version {n}.")))
            .build(),
    ))
}

impl PartialSchema for V1 {
    fn schema() -> RefOr<Schema> {
        version(1)
    }
}
impl ToSchema for V1 {}

impl PartialSchema for V2 {
    fn schema() -> RefOr<Schema> {
        version(2)
    }
}
impl ToSchema for V2 {}

/// `POST /verify` and `POST /settle` bodies: the version's form, told apart by `x402Version`.
impl PartialSchema for FacilitatorRequest {
    fn schema() -> RefOr<Schema> {
        RefOr::T(Schema::OneOf(
            OneOfBuilder::new()
                .item(Ref::from_schema_name(FacilitatorRequestV1::name()))
                .item(Ref::from_schema_name(FacilitatorRequestV2::name()))
                .description(Some("x402 v1 or v2 facilitator request"))
                .build(),
        ))
    }
}

impl ToSchema for FacilitatorRequest {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("FacilitatorRequest")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((FacilitatorRequestV1::name().into(), FacilitatorRequestV1::schema()));
        FacilitatorRequestV1::schemas(schemas);
        schemas.push((FacilitatorRequestV2::name().into(), FacilitatorRequestV2::schema()));
        FacilitatorRequestV2::schemas(schemas);
    }
}

#[cfg(test)]
mod tests {
    use super::atomic_pattern;

    proptest::proptest! {
        #[test]
        fn digits_match_the_atomic_pattern_exactly_when_they_parse(text in "0{0,3}[0-9]{0,42}") {
            let pattern = regex::Regex::new(&atomic_pattern()).unwrap();
            proptest::prop_assert_eq!(pattern.is_match(&text), text.parse::<crate::AtomicAmount>().is_ok());
        }
    }

    #[test]
    fn the_atomic_pattern_is_exactly_what_parses() {
        let pattern = regex::Regex::new(&atomic_pattern()).unwrap();
        let max = u128::MAX.to_string();
        for text in [
            "0",
            "007",
            "10000000",
            &"9".repeat(38),
            &max,
            &format!("000{max}"),
            "340282366920938463463374607431768211454",
        ] {
            assert!(pattern.is_match(text), "{text}");
            assert!(text.parse::<crate::AtomicAmount>().is_ok(), "{text}");
        }
        for text in [
            "",
            "-1",
            "1.5",
            "1e3",
            "340282366920938463463374607431768211456",
            "340282366920938463463374607431768211460",
            &"9".repeat(39),
            "400000000000000000000000000000000000000",
        ] {
            assert!(!pattern.is_match(text), "{text}");
            assert!(text.parse::<crate::AtomicAmount>().is_err(), "{text}");
        }
    }
}
