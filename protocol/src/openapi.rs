//! OpenAPI schemas of the scalar types whose JSON form is custom (feature `openapi`).

use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::{Address, AtomicAmount, DecimalAmount, Network};

fn scalar(ty: Type, description: &str, example: &str, pattern: Option<&str>) -> RefOr<Schema> {
    let mut b = ObjectBuilder::new().schema_type(ty).description(Some(description));
    if let Some(p) = pattern {
        b = b.pattern(Some(p));
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
            "Atomic units (lamports, wei, token base units) as a decimal string.",
            "\"10000000\"",
            Some("^[0-9]+$"),
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
        scalar(
            Type::String,
            "EVM (0x + 40 hex, EIP-55 when mixed case) or Solana (base58, 32 bytes) address.",
            "\"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin\"",
            None,
        )
    }
}
impl ToSchema for Address {}
