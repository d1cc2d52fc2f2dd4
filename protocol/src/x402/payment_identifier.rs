//! The x402 `payment-identifier` extension: an idempotency key a buyer attaches to a payment.
//!
//! A seller declares it in its 402 answer (`extensions["payment-identifier"]`, with
//! `info.required`); a buyer echoes the declaration in its payload and adds `info.id`. A seller
//! answers a repeat of the same id and payload with the answer it gave, a repeat of the id with
//! another payload with 409 Conflict, and a payment without an id, where one is required, with
//! 400.

use serde_json::{Map, Value, json};

/// The extension's key in `extensions`.
pub const KEY: &str = "payment-identifier";

/// Shortest id accepted.
pub const MIN_LEN: usize = 16;
/// Longest id accepted.
pub const MAX_LEN: usize = 128;

/// The declaration a seller puts in `PaymentRequired.extensions["payment-identifier"]`.
#[must_use]
pub fn declaration(required: bool) -> Value {
    json!({
        "info": {"required": required},
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "required": {"type": "boolean"},
                "id": {"type": "string", "minLength": MIN_LEN, "maxLength": MAX_LEN, "pattern": "^[a-zA-Z0-9_-]+$"}
            },
            "required": ["required"]
        }
    })
}

/// Why an id is not one: 16 to 128 characters, each a letter, a digit, `-` or `_`.
///
/// # Errors
/// A sentence naming what is wrong.
pub fn check(id: &str) -> Result<(), String> {
    if !(MIN_LEN..=MAX_LEN).contains(&id.len()) {
        return Err(format!("a payment identifier has {MIN_LEN} to {MAX_LEN} characters, not {}", id.len()));
    }
    if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err("a payment identifier has only letters, digits, '-' and '_'".into());
    }
    Ok(())
}

/// The id in a payload's extensions (`extensions["payment-identifier"].info.id`), checked;
/// `Ok(None)` when the payload carries none.
///
/// # Errors
/// A sentence naming what is wrong with an id that is there.
pub fn id_of(extensions: &Map<String, Value>) -> Result<Option<&str>, String> {
    let Some(id) = extensions.get(KEY).and_then(|e| e.get("info")).and_then(|i| i.get("id")) else {
        return Ok(None);
    };
    let id = id.as_str().ok_or_else(|| "a payment identifier is a string".to_owned())?;
    check(id)?;
    Ok(Some(id))
}

/// Adds `id` to a payload's extensions, echoing the seller's declaration (as the extension's
/// buyers do); does nothing when the seller declared no such extension.
pub fn append(declared: &Map<String, Value>, extensions: &mut Map<String, Value>, id: &str) {
    let Some(declaration) = declared.get(KEY) else { return };
    let mut echoed = declaration.as_object().cloned().unwrap_or_default();
    let mut info = echoed.get("info").and_then(Value::as_object).cloned().unwrap_or_default();
    info.insert("id".into(), Value::String(id.to_owned()));
    echoed.insert("info".into(), Value::Object(info));
    extensions.insert(KEY.into(), Value::Object(echoed));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_and_echoed_with_the_declaration() {
        assert!(check("pay_7d5d747be160e280504c099d984bcfe0").is_ok());
        for bad in ["short_id", &"a".repeat(129), "pay_7d5d747be160e2 0504c099d984bcfe0", "pay_7d5d747be160e2/0504c09"]
        {
            assert!(check(bad).is_err(), "{bad}");
        }
        let mut declared = Map::new();
        declared.insert(KEY.into(), declaration(true));
        let mut extensions = Map::new();
        append(&declared, &mut extensions, "pay_7d5d747be160e280504c099d984bcfe0");
        assert_eq!(id_of(&extensions), Ok(Some("pay_7d5d747be160e280504c099d984bcfe0")));
        assert_eq!(extensions[KEY]["info"]["required"], true, "the declaration is echoed");
        let mut none = Map::new();
        append(&Map::new(), &mut none, "pay_7d5d747be160e280504c099d984bcfe0");
        assert!(none.is_empty(), "nothing is added where the seller declared nothing");
        let number: Map<String, Value> = serde_json::from_value(json!({KEY: {"info": {"id": 7}}})).unwrap();
        assert!(id_of(&number).is_err());
    }
}
