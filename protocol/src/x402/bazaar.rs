//! The x402 `bazaar` extension: what a paid route or MCP tool takes and gives, declared by its
//! seller in the 402 so that agents can find it (x402 `specs/extensions/bazaar.md`).
//!
//! * A seller puts a [`Declaration`] in `extensions["bazaar"]` of its 402: the [`Info`] (how to
//!   call the resource: [`Input::Http`] or [`Input::Mcp`]; what comes back: [`Output`]) and the
//!   JSON Schema that `info` must satisfy ([`Declaration::new`] writes it from the info).
//! * Beside it, the 402's `resource` may carry service metadata (`serviceName`, `tags`,
//!   `iconUrl`): [`ServiceMetadata`]. Anyone who reads it from a stranger applies the spec's
//!   soft-drop rules ([`ServiceMetadata::sanitized`]): a field that breaks its rule is dropped, the
//!   rest kept.
//! * A dynamic route names its template in `routeTemplate` (`/users/:id`), checked by
//!   [`is_valid_route_template`] before anyone keys a catalog on it.
//!
//! These are the wire types and the checks that need no JSON Schema engine: a seller's own
//! declaration is checked when it is built ([`Declaration::check`]); checking a stranger's `info`
//! against a stranger's `schema` is the facilitator's job.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The extension's key in `extensions`.
pub const EXTENSION: &str = "bazaar";
/// The most bytes a declaration (info, schema and template, as JSON) may take. A seller's larger
/// declaration is refused when it is built; a facilitator catalogs none larger.
pub const MAX_DECLARATION_BYTES: usize = 64 * 1024;

/// The deepest nesting of arrays and objects a declaration may have (the spec's shapes need
/// about ten; a JSON reader stops at 128, and one entry that deep would break a whole page of
/// search results for such readers).
pub const MAX_DEPTH: usize = 32;

/// `text` without control characters (a line break becomes a space) and without the characters
/// that change the direction of text (U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069).
#[must_use]
pub fn printable(text: &str) -> String {
    text.chars()
        .filter_map(|c| match c {
            '\n' | '\r' | '\t' => Some(' '),
            c if c.is_control() => None,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' => None,
            c => Some(c),
        })
        .collect()
}

/// How deeply `value` nests arrays and objects (a scalar: 0).
#[must_use]
pub fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0)];
    while let Some((value, level)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(level + 1);
        stack.extend(children.map(|child| (child, level + 1)));
    }
    deepest
}
/// The JSON Schema dialect of a declaration's `schema`.
pub const SCHEMA_DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";
/// The most characters of a `serviceName` or of one tag.
pub const MAX_NAME_CHARS: usize = 32;
/// The most tags kept.
pub const MAX_TAGS: usize = 5;
/// The most characters of an `iconUrl`.
pub const MAX_ICON_URL_CHARS: usize = 2048;

/// `extensions["bazaar"]` of a 402 (and of the payment that echoes it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Declaration {
    /// How to call the resource and what it answers.
    pub info: Info,
    /// The JSON Schema (draft 2020-12) that `info` satisfies.
    pub schema: Value,
    /// A dynamic route's template (`/users/:id`); absent for a static route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_template: Option<String>,
}

/// What a declaration says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Info {
    /// How to call it.
    pub input: Input,
    /// What it answers (absent: unspecified; for an MCP tool, text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Output>,
}

/// How to call a resource: an HTTP request or an MCP tool call (`input.type`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Input {
    /// `"http"`.
    Http(HttpInput),
    /// `"mcp"`.
    Mcp(McpInput),
}

/// An HTTP request: a query method (`GET`, `HEAD`, `DELETE`) with query parameters, or a body
/// method (`POST`, `PUT`, `PATCH`) with a body of `bodyType`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpInput {
    /// The request's method, upper case.
    pub method: String,
    /// Example query parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_params: Option<Map<String, Value>>,
    /// Example request headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// A body method's body type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_type: Option<BodyType>,
    /// A body method's example body (an object, or a string for `text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// A dynamic route's parameters in this request (`{"id": "123"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_params: Option<Map<String, Value>>,
}

/// A body method's body type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BodyType {
    /// `"json"`.
    #[serde(rename = "json")]
    Json,
    /// `"form-data"`.
    #[serde(rename = "form-data")]
    FormData,
    /// `"text"`.
    #[serde(rename = "text")]
    Text,
}

/// An MCP tool: the name passed to `tools/call` and the JSON Schema of its arguments (the one the
/// tool declares in `tools/list`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpInput {
    /// The tool's name.
    pub tool_name: String,
    /// What the tool does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `streamable-http` (the default) or `sse`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// The JSON Schema of the tool's `arguments`.
    pub input_schema: Value,
    /// Example `arguments`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example: Option<Value>,
}

/// What a resource answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// The answer's kind (`json`, `text`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// More about its format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// An example answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example: Option<Value>,
}

/// The methods that carry their input in the query.
pub const QUERY_METHODS: [&str; 3] = ["GET", "HEAD", "DELETE"];
/// The methods that carry their input in a body.
pub const BODY_METHODS: [&str; 3] = ["POST", "PUT", "PATCH"];

/// Why a seller's declaration cannot be published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeclarationError {
    /// The method is none of the six the extension knows.
    #[error("bazaar: method {0:?} is not one of GET, HEAD, DELETE, POST, PUT, PATCH")]
    Method(String),
    /// A body method without a body type or body, or a query method with one.
    #[error("bazaar: {0}")]
    Body(&'static str),
    /// An MCP tool without a name, or whose input schema is not an object schema.
    #[error("bazaar: {0}")]
    Tool(&'static str),
    /// A JSON Schema that names another document (`$ref` / `$id` not starting with `#`).
    #[error("bazaar: the schema refers outside itself ({0:?}); only same-document `#…` references are allowed")]
    ExternalReference(String),
    /// The declaration is larger than [`MAX_DECLARATION_BYTES`].
    #[error("bazaar: the declaration takes {0} bytes, more than the {MAX_DECLARATION_BYTES} allowed")]
    TooLarge(usize),
    /// A route template that [`is_valid_route_template`] refuses.
    #[error("bazaar: route template {0:?} is not a path of `/`, letters, digits, `_-.~%` and `:name` segments")]
    RouteTemplate(String),
    /// A text field with control characters.
    #[error("bazaar: {0} holds control characters")]
    ControlCharacters(&'static str),
    /// Arrays and objects nested deeper than [`MAX_DEPTH`].
    #[error("bazaar: the declaration nests {0} levels deep, more than the {MAX_DEPTH} allowed")]
    TooDeep(usize),
}

impl Declaration {
    /// The declaration of `info`, with the schema its shape calls for (the one the official SDKs
    /// write): `input.type` and the method pinned, the method's fields required, nothing else
    /// allowed in `input`; the caller's JSON Schemas (an MCP tool's `inputSchema`, or the
    /// query/body schema given to [`Declaration::with_input_schema`]) kept as they are.
    #[must_use]
    pub fn new(info: Info) -> Self {
        let schema = schema_for(&info, None);
        Self { info, schema, route_template: None }
    }

    /// As [`Declaration::new`], with a JSON Schema for an HTTP input's query parameters (query
    /// methods) or body (body methods) in place of the loose `object` the spec's examples use.
    #[must_use]
    pub fn with_input_schema(info: Info, input_schema: Value) -> Self {
        let schema = schema_for(&info, Some(input_schema));
        Self { info, schema, route_template: None }
    }

    /// The same declaration for a dynamic route (`/users/:id`).
    #[must_use]
    pub fn route_template(mut self, template: impl Into<String>) -> Self {
        self.route_template = Some(template.into());
        self
    }

    /// What a seller checks before publishing it: a method the extension knows and the fields
    /// it calls for, an MCP tool's name and object schema, schemas that refer only inside
    /// themselves, no control characters in names, a valid route template, and at most
    /// [`MAX_DECLARATION_BYTES`].
    ///
    /// # Errors
    /// The first rule broken.
    pub fn check(&self) -> Result<(), DeclarationError> {
        match &self.info.input {
            Input::Http(http) => {
                let method = http.method.as_str();
                if BODY_METHODS.contains(&method) {
                    if http.body_type.is_none() || http.body.is_none() {
                        return Err(DeclarationError::Body("a body method needs bodyType and an example body"));
                    }
                } else if QUERY_METHODS.contains(&method) {
                    if http.body_type.is_some() || http.body.is_some() {
                        return Err(DeclarationError::Body("a query method takes no bodyType or body"));
                    }
                } else {
                    return Err(DeclarationError::Method(http.method.clone()));
                }
                let names = http.headers.iter().flat_map(|headers| headers.iter());
                if names.into_iter().any(|(name, value)| has_control(name) || has_control(value)) {
                    return Err(DeclarationError::ControlCharacters("a header example"));
                }
            }
            Input::Mcp(tool) => {
                if tool.tool_name.trim().is_empty() {
                    return Err(DeclarationError::Tool("an MCP tool needs its name"));
                }
                if has_control(&tool.tool_name) {
                    return Err(DeclarationError::ControlCharacters("the tool's name"));
                }
                if !tool.input_schema.is_object() {
                    return Err(DeclarationError::Tool("an MCP tool's inputSchema is a JSON Schema object"));
                }
                if let Some(transport) = &tool.transport
                    && transport != "streamable-http"
                    && transport != "sse"
                {
                    return Err(DeclarationError::Tool("an MCP transport is streamable-http or sse"));
                }
                if let Some(reference) = external_reference(&tool.input_schema) {
                    return Err(DeclarationError::ExternalReference(reference));
                }
            }
        }
        if let Some(reference) = external_reference(&self.schema) {
            return Err(DeclarationError::ExternalReference(reference));
        }
        if let Some(template) = &self.route_template
            && !is_valid_route_template(template)
        {
            return Err(DeclarationError::RouteTemplate(template.clone()));
        }
        let size = serde_json::to_vec(self).map_or(usize::MAX, |bytes| bytes.len());
        if size > MAX_DECLARATION_BYTES {
            return Err(DeclarationError::TooLarge(size));
        }
        let nesting = serde_json::to_value(self).map_or(usize::MAX, |value| depth(&value));
        if nesting > MAX_DEPTH {
            return Err(DeclarationError::TooDeep(nesting));
        }
        Ok(())
    }

    /// The catalog's key for this declaration's resource: the tool's name for an MCP tool (one
    /// server URL serves many), else nothing beyond the URL.
    #[must_use]
    pub fn tool_name(&self) -> Option<&str> {
        match &self.info.input {
            Input::Mcp(tool) => Some(&tool.tool_name),
            Input::Http(_) => None,
        }
    }
}

impl Input {
    /// `http` or `mcp`.
    #[must_use]
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Http(_) => "http",
            Self::Mcp(_) => "mcp",
        }
    }
}

/// The schema [`Declaration::new`] writes for `info`.
fn schema_for(info: &Info, input_schema: Option<Value>) -> Value {
    let string = || json!({"type": "string"});
    let string_map = || json!({"type": "object", "additionalProperties": {"type": "string"}});
    let input = match &info.input {
        Input::Http(http) if BODY_METHODS.contains(&http.method.as_str()) => {
            let body = input_schema.unwrap_or_else(|| match http.body_type {
                Some(BodyType::Text) => json!({"type": "string"}),
                _ => json!({"type": "object"}),
            });
            json!({
                "type": "object",
                "properties": {
                    "type": {"type": "string", "const": "http"},
                    "method": {"type": "string", "enum": BODY_METHODS},
                    "bodyType": {"type": "string", "enum": ["json", "form-data", "text"]},
                    "body": body,
                    "queryParams": string_map(),
                    "headers": string_map(),
                    "pathParams": {"type": "object"},
                },
                "required": ["type", "method", "bodyType", "body"],
                "additionalProperties": false,
            })
        }
        Input::Http(_) => {
            let query = input_schema.unwrap_or_else(|| json!({"type": "object"}));
            json!({
                "type": "object",
                "properties": {
                    "type": {"type": "string", "const": "http"},
                    "method": {"type": "string", "enum": QUERY_METHODS},
                    "queryParams": query,
                    "headers": string_map(),
                    "pathParams": {"type": "object"},
                },
                "required": ["type", "method"],
                "additionalProperties": false,
            })
        }
        Input::Mcp(_) => json!({
            "type": "object",
            "properties": {
                "type": {"type": "string", "const": "mcp"},
                "toolName": string(),
                "description": string(),
                "transport": {"type": "string", "enum": ["streamable-http", "sse"]},
                "inputSchema": {"type": "object"},
                "example": {"type": "object"},
            },
            "required": ["type", "toolName", "inputSchema"],
            "additionalProperties": false,
        }),
    };
    json!({
        "$schema": SCHEMA_DIALECT,
        "type": "object",
        "properties": {
            "input": input,
            "output": {
                "type": "object",
                "properties": {"type": string(), "format": string(), "example": {}},
                "required": ["type"],
            },
        },
        "required": ["input"],
    })
}

/// The first `$ref` or `$id` in `schema` that is not a same-document fragment (`#…`), if any.
#[must_use]
pub fn external_reference(schema: &Value) -> Option<String> {
    match schema {
        Value::Object(map) => {
            for key in ["$ref", "$id", "$dynamicRef"] {
                if let Some(value) = map.get(key) {
                    match value.as_str() {
                        Some(text) if text.starts_with('#') => {}
                        Some(text) => return Some(text.to_owned()),
                        None => return Some(value.to_string()),
                    }
                }
            }
            map.values().find_map(external_reference)
        }
        Value::Array(items) => items.iter().find_map(external_reference),
        _ => None,
    }
}

fn has_control(text: &str) -> bool {
    text.chars().any(char::is_control)
}

/// Service metadata of a 402's `resource`: who sells it, under which topics, with which icon.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceMetadata {
    /// The service's name (printable ASCII, at most 32 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Topical tags (at most 5, each printable ASCII of at most 32 characters).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// An absolute http(s) URL of an icon, on a public host name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon_url: Option<String>,
}

impl ServiceMetadata {
    /// The metadata with the spec's soft-drop rules applied: an invalid name or icon dropped,
    /// invalid tags dropped, tags deduplicated ignoring case (the first kept), at most 5.
    #[must_use]
    pub fn sanitized(self) -> Self {
        Self {
            service_name: self.service_name.filter(|name| is_valid_service_name(name)),
            tags: sanitize_tags(self.tags),
            icon_url: self.icon_url.filter(|url| is_valid_icon_url(url)),
        }
    }

    /// Whether every field would survive [`ServiceMetadata::sanitized`] (a seller's own
    /// metadata must: it is refused when the route is built rather than silently shortened).
    #[must_use]
    pub fn is_valid(&self) -> bool {
        self.clone().sanitized() == *self && self.tags.len() <= MAX_TAGS
    }
}

/// The rule for a name or a tag: non-empty printable ASCII (U+0020–U+007E), at most 32 characters.
#[must_use]
pub fn is_valid_service_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_CHARS && name.bytes().all(|byte| (0x20..=0x7e).contains(&byte))
}

/// The valid tags of `tags`, deduplicated ignoring ASCII case (the first kept), at most 5.
#[must_use]
pub fn sanitize_tags(tags: Vec<String>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::new();
    for tag in tags {
        if kept.len() == MAX_TAGS {
            break;
        }
        if is_valid_service_name(&tag) && !kept.iter().any(|seen| seen.eq_ignore_ascii_case(&tag)) {
            kept.push(tag);
        }
    }
    kept
}

/// Host names that name this machine.
const LOOPBACK_NAMES: [&str; 4] = ["localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"];

/// The rule for `iconUrl`: at most 2,048 characters, no control characters, an absolute `http`
/// or `https` URL without user information, whose host (percent-decoded and IDN-normalized, as a
/// URL parser reads it) is a name: not an IP address in any spelling (`127.0.0.1`, `[::1]`,
/// `2130706433`, `0x7f000001`, `%31%32%37.0.0.1`), not `localhost` or one of its names.
#[must_use]
pub fn is_valid_icon_url(text: &str) -> bool {
    if text.chars().count() > MAX_ICON_URL_CHARS || has_control(text) {
        return false;
    }
    let Ok(url) = url::Url::parse(text) else { return false };
    if !matches!(url.scheme(), "http" | "https") || !url.username().is_empty() || url.password().is_some() {
        return false;
    }
    // The WHATWG parser has percent-decoded the host, applied UTS #46, and read every IPv4
    // spelling (decimal, hex, octal, dotted or not) as an address.
    let Some(url::Host::Domain(host)) = url.host() else { return false };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let is_number = |label: &str| {
        !label.is_empty()
            && (label.bytes().all(|byte| byte.is_ascii_digit())
                || (label.len() > 2
                    && label.get(..2).is_some_and(|prefix| prefix.eq_ignore_ascii_case("0x"))
                    && label.bytes().skip(2).all(|byte| byte.is_ascii_hexdigit())))
    };
    !host.is_empty()
        && !LOOPBACK_NAMES.contains(&host.as_str())
        && !host.ends_with(".localhost")
        && !host.split('.').all(is_number)
}

/// The rule for `routeTemplate`: starts with `/`, only letters, digits and `_/:.-~%`, and once
/// percent-decoded no `..` and no `://`.
#[must_use]
pub fn is_valid_route_template(template: &str) -> bool {
    let allowed = |byte: u8| byte.is_ascii_alphanumeric() || b"_/:.-~%".contains(&byte);
    if template.len() < 2 || !template.starts_with('/') || !template.bytes().all(allowed) {
        return false;
    }
    let decoded = percent_encoding::percent_decode_str(template).decode_utf8_lossy();
    !decoded.contains("..") && !decoded.contains("://")
}

/// Where an origin serves its own manifest (x402 `specs/extensions/well-known-discovery.md`).
pub const WELL_KNOWN_PATH: &str = "/.well-known/x402.json";

/// `/.well-known/x402.json`: what an origin sells, generated from the routes that make its 402s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub x402_version: u32,
    /// When the entries were resolved (Unix seconds).
    pub last_updated: i64,
    /// One entry per paid route or tool.
    pub items: Vec<ManifestItem>,
}

/// One paid route or tool of a [`Manifest`]. Advisory: the live 402 decides the price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestItem {
    /// Its URL (on the origin the manifest was asked of) and service metadata.
    pub resource: ManifestResource,
    /// `http` or `mcp`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The ways to pay, as its 402 offers them.
    pub accepts: Vec<super::PaymentRequirements>,
    /// How to call it: the declared input without its `type`, and a dynamic route's
    /// `routeTemplate`.
    pub input: Map<String, Value>,
    /// What it answers, when declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Output>,
    /// The extensions a buyer must take part in (e.g. `sign-in-with-x`), when any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
}

/// A [`ManifestItem`]'s resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestResource {
    /// The resource's URL.
    pub url: String,
    /// What the buyer gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type of the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Service metadata.
    #[serde(flatten)]
    pub service: ServiceMetadata,
}

// A facilitator's catalog (`GET /discovery/resources`, `GET /discovery/search`), as both sides
// read it: the shapes the official discovery client reads.

/// One cataloged resource, as the official discovery client reads it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryResource {
    /// The resource's URL (a dynamic route's template in place of its path).
    pub resource: String,
    /// `http` or `mcp`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The x402 version it was settled in.
    pub x402_version: u8,
    /// The ways to pay it was settled in, newest first (advisory: its live 402 decides).
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub accepts: Vec<super::PaymentRequirements>,
    /// When it was last settled.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub last_updated: chrono::DateTime<chrono::Utc>,
    /// What the buyer gets.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// MIME type of the answer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mime_type: String,
    /// Who sells it: `serviceName`, `tags`, `iconUrl`, as the bazaar rules keep them.
    #[serde(flatten)]
    pub service: ServiceMetadata,
    /// An MCP tool's name (the catalog's key is the URL and this).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool_name: String,
    /// `{"bazaar": declaration}`: how to call it and what it answers.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    #[serde(default)]
    pub extensions: Map<String, Value>,
}

/// `GET /discovery/resources`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceList {
    /// Always 2.
    pub x402_version: u8,
    /// The page, most recently settled first.
    pub items: Vec<DiscoveryResource>,
    /// Where the page is.
    pub pagination: OffsetPage,
}

/// A page by offset.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OffsetPage {
    /// The most entries in a page.
    pub limit: u32,
    /// Entries skipped.
    pub offset: u64,
    /// Entries matching in all.
    pub total: u64,
}

/// `GET /discovery/search`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchResults {
    /// Always 2.
    pub x402_version: u8,
    /// The matches of this page, most recently settled first.
    pub resources: Vec<DiscoveryResource>,
    /// Whether more matches follow this page.
    pub partial_results: bool,
    /// The next page's cursor.
    pub pagination: CursorPage,
}

/// A page by cursor.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CursorPage {
    /// The most entries in a page.
    pub limit: u32,
    /// The next page's cursor, or null after the last.
    pub cursor: Option<String>,
}

impl Declaration {
    /// The manifest's `input` for this declaration: its input's fields but `type`, with the
    /// route template when the route has one.
    #[must_use]
    pub fn lifted_input(&self) -> Map<String, Value> {
        let mut input = match serde_json::to_value(&self.info.input) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        input.remove("type");
        if let Some(template) = &self.route_template {
            input.insert("routeTemplate".into(), Value::String(template.clone()));
        }
        input
    }
}

impl fmt::Display for BodyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Json => "json",
            Self::FormData => "form-data",
            Self::Text => "text",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get() -> Info {
        Info {
            input: Input::Http(HttpInput {
                method: "GET".into(),
                query_params: Some(json!({"city": "Lisbon"}).as_object().cloned().unwrap_or_default()),
                headers: None,
                body_type: None,
                body: None,
                path_params: None,
            }),
            output: Some(Output { kind: "json".into(), format: None, example: Some(json!({"temp": 18})) }),
        }
    }

    #[test]
    fn a_declaration_reads_as_the_spec_writes_it() {
        let wire = json!({
            "info": {
                "input": {"type": "http", "method": "POST", "bodyType": "json", "body": {"query": "example"}},
                "output": {"type": "json", "example": {"results": []}}
            },
            "schema": {"type": "object"},
            "routeTemplate": "/search/:kind"
        });
        let declaration: Declaration = serde_json::from_value(wire.clone()).unwrap_or_else(|e| panic!("{e}"));
        let Input::Http(http) = &declaration.info.input else { panic!("not http") };
        assert_eq!(http.body_type, Some(BodyType::Json));
        assert_eq!(serde_json::to_value(&declaration).ok(), Some(wire));
        let tool = json!({"info": {"input": {"type": "mcp", "toolName": "analyse", "inputSchema": {"type": "object"}}}, "schema": {}});
        let declaration: Declaration = serde_json::from_value(tool).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(declaration.tool_name(), Some("analyse"));
    }

    #[test]
    fn a_sellers_declaration_is_checked_before_it_is_published() {
        assert_eq!(Declaration::new(get()).check(), Ok(()));
        let mut info = get();
        let Input::Http(http) = &mut info.input else { unreachable!() };
        http.method = "TRACE".into();
        assert!(matches!(Declaration::new(info).check(), Err(DeclarationError::Method(_))));
        let mut info = get();
        let Input::Http(http) = &mut info.input else { unreachable!() };
        http.method = "POST".into();
        assert!(matches!(Declaration::new(info.clone()).check(), Err(DeclarationError::Body(_))));
        let Input::Http(http) = &mut info.input else { unreachable!() };
        http.body_type = Some(BodyType::Json);
        http.body = Some(json!({"q": "x"}));
        assert_eq!(Declaration::new(info).check(), Ok(()));
        let big = Info {
            output: Some(Output { kind: "json".into(), format: None, example: Some(json!("x".repeat(1 << 20))) }),
            ..get()
        };
        assert!(matches!(Declaration::new(big).check(), Err(DeclarationError::TooLarge(_))));
        let external = Declaration::with_input_schema(get(), json!({"$ref": "https://evil.example/schema.json"}));
        assert_eq!(
            external.check(),
            Err(DeclarationError::ExternalReference("https://evil.example/schema.json".into()))
        );
        let inside = Declaration::with_input_schema(
            get(),
            json!({"$defs": {"c": {"type": "string"}}, "properties": {"city": {"$ref": "#/$defs/c"}}}),
        );
        assert_eq!(inside.check(), Ok(()));
        assert!(Declaration::new(get()).route_template("/a/../b").check().is_err());
        let tool = |schema: Value| Info {
            input: Input::Mcp(McpInput {
                tool_name: "t".into(),
                description: None,
                transport: None,
                input_schema: schema,
                example: None,
            }),
            output: None,
        };
        assert_eq!(Declaration::new(tool(json!({"type": "object"}))).check(), Ok(()));
        assert!(matches!(Declaration::new(tool(json!("object"))).check(), Err(DeclarationError::Tool(_))));
    }

    #[test]
    fn service_metadata_is_soft_dropped_field_by_field() {
        let metadata = ServiceMetadata {
            service_name: Some("Weather\u{7}".into()),
            tags: ["weather", "Weather", "", "x".repeat(33).as_str(), "a", "b", "c", "d", "e"]
                .map(String::from)
                .to_vec(),
            icon_url: Some("https://cdn.example.com/icon.png".into()),
        };
        let clean = metadata.sanitized();
        assert_eq!(clean.service_name, None);
        assert_eq!(clean.tags, ["weather", "a", "b", "c", "d"]);
        assert_eq!(clean.icon_url.as_deref(), Some("https://cdn.example.com/icon.png"));
        assert!(is_valid_service_name(&"n".repeat(32)));
        assert!(!is_valid_service_name(&"n".repeat(33)));
        assert!(!is_valid_service_name("Café"));
    }

    #[test]
    fn an_icon_url_must_name_a_public_host() {
        for bad in [
            "http://127.0.0.1/i.png",
            "http://0x7f000001/i.png",
            "http://2130706433/i.png",
            "http://0177.0.0.1/i.png",
            "http://%31%32%37.0.0.1/i.png",
            "http://[::1]/i.png",
            "http://localhost/i.png",
            "http://LOCALHOST./i.png",
            "http://ip6-loopback/i.png",
            "http://api.localhost/i.png",
            "http://user@cdn.example.com/i.png",
            "data:image/png;base64,AAAA",
            "file:///etc/passwd",
            "ftp://cdn.example.com/i.png",
            "/relative.png",
            "https://cdn.example.com/\u{0}.png",
        ] {
            assert!(!is_valid_icon_url(bad), "{bad} accepted");
        }
        let long = format!("https://cdn.example.com/{}", "a".repeat(2048));
        assert!(!is_valid_icon_url(&long));
        for good in
            ["https://cdn.example.com/icon.png", "http://xn--caf-dma.example/i.png", "https://café.example/i.png"]
        {
            assert!(is_valid_icon_url(good), "{good} refused");
        }
    }

    #[test]
    fn a_route_template_is_a_plain_path() {
        assert!(is_valid_route_template("/users/:id"));
        assert!(is_valid_route_template("/weather/:country/:city"));
        for bad in ["", "/", "users/:id", "/a/../b", "/a/%2e%2e/b", "/http://x", "/a%3A%2F%2Fb", "/a b", "/a?b"] {
            assert!(!is_valid_route_template(bad), "{bad} accepted");
        }
    }
}
