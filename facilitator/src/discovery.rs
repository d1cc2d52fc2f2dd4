//! The discovery catalog (x402 `bazaar`): the paid resources sellers settle through this
//! facilitator and declared findable, listed and searched by `GET /discovery/resources` and
//! `GET /discovery/search`.
//!
//! An entry is made from the **seller's side** of a confirmed settlement ([`entry_of`]): the
//! resource the seller's call names and the declaration it sends (Tollgate's layer sends its own
//! in place of the buyer's echo), under the seller's account. Before it is written:
//!
//! * the declaration is read as the extension's shape ([`Declaration`]), at most
//!   [`MAX_DECLARATION_BYTES`], its `info` checked against its `schema` by a JSON Schema
//!   (draft 2020-12) validator with no reference resolved outside the document (one that names
//!   another document is refused before anything is compiled) and linear-time patterns;
//! * the service metadata goes through the spec's soft-drop rules ([`tollgate_protocol::x402::bazaar::ServiceMetadata::sanitized`]);
//! * a valid `routeTemplate` replaces the concrete path (`/users/:id`, not `/users/42`); the
//!   query is never part of the key; an MCP tool is keyed by (URL, tool name).
//!
//! Each entry belongs to the account that settled it; another account naming the same URL gets
//! an entry of its own and cannot change this one. Entries not settled for `max_age_days` leave
//! the lists, then the table.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use tollgate_protocol::x402::bazaar::{Declaration, EXTENSION, Input, MAX_DECLARATION_BYTES, external_reference};
use tollgate_protocol::x402::{PaymentRequirements, ResourceInfo};

pub use crate::store::{CatalogEntry, CatalogFilter as Filter, MAX_ACCEPTS, NewCatalogEntry as NewEntry};

/// The most entries one list or search answers.
pub const MAX_LIMIT: u32 = 100;

/// Why a settlement's declaration is not cataloged (the payment itself is unaffected).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The seller declared nothing: nothing to catalog.
    #[error("no bazaar declaration")]
    Undeclared,
    /// The declaration is not the extension's shape.
    #[error("the bazaar declaration is malformed: {0}")]
    Malformed(String),
    /// It is larger than the extension allows.
    #[error("the bazaar declaration takes more than {MAX_DECLARATION_BYTES} bytes")]
    TooLarge,
    /// Its schema names another document.
    #[error("the bazaar schema refers outside itself ({0})")]
    ExternalReference(String),
    /// Its `info` does not satisfy its `schema` (or the schema does not compile).
    #[error("the bazaar info fails its schema: {0}")]
    Invalid(String),
    /// The resource URL is not an absolute http(s) URL.
    #[error("the resource URL is not an absolute http(s) URL")]
    Url,
}

/// The catalog entry a confirmed settlement makes, from what the **seller** sent: its account,
/// the resource it named, the requirement it settled and the extensions of the payload it
/// forwarded (Tollgate's layer replaces the buyer's `bazaar` echo with its own declaration).
///
/// # Errors
/// [`Rejected`]: why nothing is cataloged.
pub fn entry_of(
    account_id: &str,
    x402_version: u8,
    resource: &ResourceInfo,
    requirement: &PaymentRequirements,
    extensions: &Map<String, Value>,
    at: DateTime<Utc>,
) -> Result<NewEntry, Rejected> {
    let declared = extensions.get(EXTENSION).ok_or(Rejected::Undeclared)?;
    let size = serde_json::to_vec(declared).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_DECLARATION_BYTES {
        return Err(Rejected::TooLarge);
    }
    let nesting = tollgate_protocol::x402::bazaar::depth(declared);
    if nesting > tollgate_protocol::x402::bazaar::MAX_DEPTH {
        return Err(Rejected::Malformed(format!("nested {nesting} levels deep, more than 32")));
    }
    let declaration: Declaration =
        serde_json::from_value(declared.clone()).map_err(|e| Rejected::Malformed(e.to_string()))?;
    validate(declared, &declaration)?;
    let mut url = url::Url::parse(&resource.url).map_err(|_| Rejected::Url)?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(Rejected::Url);
    }
    url.set_query(None);
    url.set_fragment(None);
    if let Some(template) = declaration.route_template.as_deref()
        && tollgate_protocol::x402::bazaar::is_valid_route_template(template)
    {
        url.set_path(template);
    }
    let tool_name = declaration.tool_name().unwrap_or_default().to_owned();
    let service = resource.service.clone().sanitized();
    let tool_description = match &declaration.info.input {
        Input::Mcp(tool) => tool.description.clone().unwrap_or_default(),
        Input::Http(_) => String::new(),
    };
    // What buyers read is text: no control or direction-changing characters (a terminal or page
    // showing it must not be steered), a MIME type of visible ASCII.
    let description = tollgate_protocol::x402::bazaar::printable(&resource.description);
    let mime_type =
        if resource.mime_type.len() <= 128 && resource.mime_type.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            resource.mime_type.clone()
        } else {
            String::new()
        };
    let search_text = [
        description.as_str(),
        service.service_name.as_deref().unwrap_or_default(),
        &service.tags.join(" "),
        url.as_str(),
        &tool_name,
        &tool_description,
    ]
    .join(" ")
    .to_lowercase();
    let mut kept = Map::new();
    kept.insert(EXTENSION.to_owned(), declared.clone());
    Ok(NewEntry {
        id: format!("dres_{}", ulid::Ulid::new()),
        account_id: account_id.to_owned(),
        url: url.to_string(),
        tool_name,
        kind: declaration.info.input.kind().to_owned(),
        x402_version,
        description,
        mime_type,
        service,
        accept: requirement.clone(),
        extensions: kept,
        search_text,
        at,
    })
}

/// Checks the declaration's `info` against its `schema`: no reference outside the document, a
/// schema that compiles (draft 2020-12 unless it names another), linear-time patterns.
fn validate(declared: &Value, declaration: &Declaration) -> Result<(), Rejected> {
    if let Some(reference) = external_reference(&declaration.schema) {
        return Err(Rejected::ExternalReference(reference));
    }
    if let Input::Mcp(tool) = &declaration.info.input
        && let Some(reference) = external_reference(&tool.input_schema)
    {
        return Err(Rejected::ExternalReference(reference));
    }
    let mut compiler = boon::Compiler::new();
    compiler.set_default_draft(boon::Draft::V2020_12);
    // Nothing is ever loaded: not a URL, not a file (a reference outside the document was
    // refused above; this holds for any the check could miss).
    compiler.use_loader(Box::new(NoLoader));
    let mut schemas = boon::Schemas::new();
    compiler.add_resource(SCHEMA_URL, declaration.schema.clone()).map_err(|e| Rejected::Invalid(format!("{e}")))?;
    let index = compiler.compile(SCHEMA_URL, &mut schemas).map_err(|e| Rejected::Invalid(format!("{e}")))?;
    let info = declared.get("info").ok_or_else(|| Rejected::Malformed("no info".into()))?;
    schemas.validate(info, index).map_err(|e| Rejected::Invalid(format!("{e}")))
}

/// The name a declaration's schema is compiled under (nothing is fetched from it).
const SCHEMA_URL: &str = "http://bazaar.invalid/schema.json";

/// A loader that loads nothing.
struct NoLoader;

impl boon::UrlLoader for NoLoader {
    fn load(&self, url: &str) -> Result<Value, Box<dyn std::error::Error>> {
        Err(format!("{url}: a bazaar schema is checked with no document but itself").into())
    }
}

/// How long a settlement that declares what one declared before goes without a check or a
/// write: settlements of one resource within it cost nothing (its `last_settled_at` is at most
/// this late).
pub const REFRESH: std::time::Duration = std::time::Duration::from_secs(60);

/// Catalogs what confirmed settlements declare, in the background of their answers. The same
/// declaration (same account, resource, requirement and `bazaar`) is checked and written at most
/// once per [`REFRESH`] per instance: the answer's path only hashes it.
pub struct Catalog {
    store: std::sync::Arc<dyn crate::store::Store>,
    /// Digests of the declarations handled within [`REFRESH`].
    handled: moka::sync::Cache<u64, Option<String>>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").finish_non_exhaustive()
    }
}

impl Catalog {
    /// A catalog over `store`.
    #[must_use]
    pub fn new(store: std::sync::Arc<dyn crate::store::Store>) -> Self {
        Self { store, handled: moka::sync::Cache::builder().max_capacity(10_000).time_to_live(REFRESH).build() }
    }

    /// Catalogs, on a task of its own, what a confirmed settlement of `account_id` declares:
    /// nothing when it declares nothing (`None`); a refusal is logged and said to the seller
    /// (x402's `EXTENSION-RESPONSES`), never answered to the payment. The same declaration
    /// handled within a minute is not handled again: its outcome then is known.
    pub fn settled(
        self: &std::sync::Arc<Self>,
        account_id: &str,
        x402_version: u8,
        resource: &ResourceInfo,
        requirement: &PaymentRequirements,
        extensions: &Map<String, Value>,
        at: DateTime<Utc>,
    ) -> Option<Outcome> {
        use std::hash::{Hash as _, Hasher as _};
        let declared = extensions.get(EXTENSION)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (account_id, x402_version).hash(&mut hasher);
        for part in
            [serde_json::to_string(resource), serde_json::to_string(requirement), serde_json::to_string(declared)]
        {
            part.unwrap_or_default().hash(&mut hasher);
        }
        let digest = hasher.finish();
        if let Some(known) = self.handled.get(&digest) {
            return Some(known.map_or(Outcome::Cataloged, Outcome::Rejected));
        }
        let mut kept = Map::new();
        kept.insert(EXTENSION.to_owned(), declared.clone());
        let (catalog, account, resource, requirement) =
            (self.clone(), account_id.to_owned(), resource.clone(), requirement.clone());
        tokio::spawn(async move {
            match entry_of(&account, x402_version, &resource, &requirement, &kept, at) {
                Ok(entry) => match catalog.store.catalog(&entry).await {
                    Ok(()) => catalog.handled.insert(digest, None),
                    Err(e) => {
                        tracing::warn!(resource = %entry.url, error = %e, "discovery: the catalog could not be written")
                    }
                },
                Err(why) => {
                    tracing::info!(resource = %resource.url, reason = %why, "discovery: not cataloged");
                    catalog.handled.insert(digest, Some(why.to_string()));
                }
            }
        });
        Some(Outcome::Processing)
    }
}

/// What became of a settlement's declaration, as x402's `EXTENSION-RESPONSES` says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Cataloged (within the last minute).
    Cataloged,
    /// Taken, and being cataloged in the background.
    Processing,
    /// Refused, and why.
    Rejected(String),
}

/// The words of a search query: lower case, split on anything but letters and digits, at most
/// 8, each at most 64 characters.
#[must_use]
pub fn words(query: &str) -> Vec<String> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(|word| word.chars().take(64).collect::<String>().to_lowercase())
        .take(8)
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tollgate_protocol::x402::bazaar::ServiceMetadata;

    use super::*;

    fn requirement() -> PaymentRequirements {
        serde_json::from_value(json!({"scheme": "exact", "network": "eip155:8453", "amount": "1000",
            "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "payTo": "0x1111111111111111111111111111111111111111",
            "maxTimeoutSeconds": 60}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn resource(url: &str) -> ResourceInfo {
        ResourceInfo {
            url: url.into(),
            description: "Weather by city".into(),
            mime_type: "application/json".into(),
            method: Some("GET".into()),
            service: ServiceMetadata {
                service_name: Some("Weather Co".into()),
                tags: vec!["weather".into(), "WEATHER".into(), "bad\u{7}".into()],
                icon_url: Some("http://0x7f000001/icon.png".into()),
            },
        }
    }

    fn declared(declaration: Value) -> Map<String, Value> {
        let mut extensions = Map::new();
        extensions.insert("bazaar".into(), declaration);
        extensions
    }

    fn weather() -> Value {
        let info = tollgate_protocol::x402::bazaar::Info {
            input: Input::Http(tollgate_protocol::x402::bazaar::HttpInput {
                method: "GET".into(),
                query_params: json!({"city": "Lisbon"}).as_object().cloned(),
                headers: None,
                body_type: None,
                body: None,
                path_params: None,
            }),
            output: None,
        };
        serde_json::to_value(Declaration::new(info)).unwrap_or_default()
    }

    #[test]
    fn an_entry_holds_the_sellers_resource_without_its_query_and_its_metadata_soft_dropped() {
        let at = Utc::now();
        let entry = entry_of(
            "acct",
            2,
            &resource("https://api.example/weather?city=Porto"),
            &requirement(),
            &declared(weather()),
            at,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(entry.url, "https://api.example/weather");
        assert_eq!(entry.kind, "http");
        assert_eq!(entry.service.service_name.as_deref(), Some("Weather Co"));
        assert_eq!(entry.service.tags, ["weather"]);
        assert_eq!(entry.service.icon_url, None);
        assert!(entry.search_text.contains("weather co"));
    }

    #[test]
    fn a_route_template_keys_the_entry_and_a_bad_one_is_ignored() {
        let mut with_template = weather();
        with_template["routeTemplate"] = json!("/weather/:city");
        let entry = entry_of(
            "a",
            2,
            &resource("https://api.example/weather/porto"),
            &requirement(),
            &declared(with_template),
            Utc::now(),
        );
        assert_eq!(entry.map(|e| e.url).ok().as_deref(), Some("https://api.example/weather/:city"));
        let mut traversal = weather();
        traversal["routeTemplate"] = json!("/a/%2e%2e/admin");
        let entry = entry_of(
            "a",
            2,
            &resource("https://api.example/weather/porto"),
            &requirement(),
            &declared(traversal),
            Utc::now(),
        );
        assert_eq!(entry.map(|e| e.url).ok().as_deref(), Some("https://api.example/weather/porto"));
    }

    #[test]
    fn hostile_declarations_are_refused() {
        let entry = |declaration: Value| {
            entry_of("a", 2, &resource("https://api.example/w"), &requirement(), &declared(declaration), Utc::now())
        };
        let mut external = weather();
        external["schema"]["properties"]["input"] = json!({"$ref": "https://evil.example/s.json"});
        assert!(matches!(entry(external), Err(Rejected::ExternalReference(_))));
        let mut file = weather();
        file["schema"]["$id"] = json!("file:///etc/passwd");
        assert!(matches!(entry(file), Err(Rejected::ExternalReference(_))));
        let mut huge = weather();
        huge["info"]["output"] = json!({"type": "json", "example": "x".repeat(1 << 20)});
        assert_eq!(entry(huge), Err(Rejected::TooLarge));
        let mut lying = weather();
        lying["info"]["input"]["method"] = json!("POST");
        assert!(matches!(entry(lying), Err(Rejected::Invalid(_))));
        let mut redos = weather();
        redos["schema"]["properties"]["input"]["properties"]["method"] =
            json!({"type": "string", "pattern": "^(a+)+$"});
        redos["info"]["input"]["method"] = json!(format!("{}!", "a".repeat(40)));
        assert!(matches!(entry(redos), Err(Rejected::Malformed(_) | Rejected::Invalid(_))));
        assert_eq!(
            entry_of("a", 2, &resource("https://api.example/w"), &requirement(), &Map::new(), Utc::now()),
            Err(Rejected::Undeclared)
        );
        assert_eq!(
            entry_of("a", 2, &resource("ftp://api.example/w"), &requirement(), &declared(weather()), Utc::now()),
            Err(Rejected::Url)
        );
    }

    #[test]
    fn search_words_are_bounded() {
        assert_eq!(words("Weather, in LISBON!"), ["weather", "in", "lisbon"]);
        assert_eq!(words(&"a ".repeat(100)).len(), 8);
        assert_eq!(words(&"x".repeat(1000))[0].len(), 64);
    }

    #[test]
    fn what_buyers_read_is_text_and_a_declaration_too_deep_is_refused() {
        let mut hostile = resource("https://api.example/weather");
        hostile.description = "x\u{0}\u{1b}[31mRED\u{7}\u{202e}txt.exe\nnext".into();
        hostile.mime_type = "text/html\r\nX-Evil: 1".into();
        let entry = entry_of("acct", 2, &hostile, &requirement(), &declared(weather()), Utc::now())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(entry.description, "x[31mREDtxt.exe next");
        assert_eq!(entry.mime_type, "");
        let mut deep = json!(1);
        for _ in 0..40 {
            deep = json!([deep]);
        }
        let mut declaration = weather();
        declaration["info"]["output"] = json!({"type": "json", "example": deep});
        let refused =
            entry_of("acct", 2, &resource("https://api.example/w"), &requirement(), &declared(declaration), Utc::now());
        assert!(matches!(refused, Err(Rejected::Malformed(ref why)) if why.contains("levels deep")), "{refused:?}");
    }
}
