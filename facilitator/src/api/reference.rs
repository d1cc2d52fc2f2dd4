//! The API reference served at `GET /docs` ([`super::openapi::docs`]): this daemon's own
//! `/openapi.json` document rendered into one self-contained HTML page (inline style, no script,
//! nothing fetched from elsewhere), so it never disagrees with the contract and works on a machine
//! with no network.
//!
//! Each operation is a `<section class="operation" data-method="GET" data-path="/…">`, each
//! schema a `<section class="schema" id="schema-Name">`; a `$ref` is a link to its schema.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::dashboard::escape;

/// The methods an OpenAPI path item may hold, in the order they are shown.
const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// The whole page for an OpenAPI 3.1 `document`.
pub fn render(document: &Value) -> String {
    let info = &document["info"];
    let title = info["title"].as_str().unwrap_or("API");
    let mut out = String::with_capacity(128 * 1024);
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} — API reference</title><style>{STYLE}</style></head><body>\
         <header><h1>{title} <small>{version}</small></h1>{description}\
         <p>The machine-readable contract: <a href=\"/openapi.json\">/openapi.json</a> (OpenAPI {openapi}).</p></header>",
        title = escape(title),
        version = escape(info["version"].as_str().unwrap_or("")),
        description = paragraph(info["description"].as_str().unwrap_or("")),
        openapi = escape(document["openapi"].as_str().unwrap_or("")),
    );
    let operations = operations(document);
    let schemas = document.pointer("/components/schemas").and_then(Value::as_object);

    let groups = by_tag(&operations);

    out.push_str("<nav><h2>Operations</h2>");
    for (tag, group) in &groups {
        let _ = write!(out, "<h3>{}</h3><ul>", escape(tag));
        for op in group {
            let _ = write!(
                out,
                "<li><a href=\"#{id}\"><span class=\"method {method}\">{upper}</span> {path}</a></li>",
                id = op.anchor(),
                method = op.method,
                upper = op.method.to_uppercase(),
                path = escape(op.path),
            );
        }
        out.push_str("</ul>");
    }
    if let Some(schemas) = schemas {
        out.push_str("<h3>Schemas</h3><ul>");
        for name in schemas.keys() {
            let _ = write!(out, "<li><a href=\"#schema-{0}\">{0}</a></li>", escape(name));
        }
        out.push_str("</ul>");
    }
    out.push_str("</nav><main>");

    for (tag, group) in &groups {
        let _ = write!(out, "<h2>{}</h2>", escape(tag));
        for op in group {
            operation(&mut out, document, op);
        }
    }
    if let Some(schemas) = schemas {
        out.push_str("<h2 id=\"schemas\">Schemas</h2>");
        for (name, schema) in schemas {
            let _ = write!(out, "<section class=\"schema\" id=\"schema-{0}\"><h3>{0}</h3>", escape(name));
            schema_block(&mut out, schema);
            out.push_str("</section>");
        }
    }
    out.push_str("</main></body></html>");
    out
}

/// One operation of the document.
struct Operation<'a> {
    path: &'a str,
    method: &'static str,
    tag: &'a str,
    body: &'a Value,
    /// Parameters declared on the path item, shared by its operations.
    shared_parameters: Option<&'a Value>,
}

impl Operation<'_> {
    /// The fragment naming it: `op-get-payment-status-paymentId`.
    fn anchor(&self) -> String {
        let slug: String =
            self.path.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect::<String>();
        let slug = slug.split('-').filter(|s| !s.is_empty()).collect::<Vec<_>>().join("-");
        format!("op-{}-{}", self.method, slug)
    }
}

/// Every operation, in the document's order.
fn operations(document: &Value) -> Vec<Operation<'_>> {
    let mut all = Vec::new();
    let Some(paths) = document["paths"].as_object() else { return all };
    for (path, item) in paths {
        for method in METHODS {
            if let Some(body) = item.get(method).filter(|b| b.is_object()) {
                let tag = body["tags"].get(0).and_then(Value::as_str).unwrap_or("other");
                all.push(Operation { path, method, tag, body, shared_parameters: item.get("parameters") });
            }
        }
    }
    all
}

/// Operations grouped by their first tag, groups in order of first appearance.
fn by_tag<'a, 'b>(operations: &'b [Operation<'a>]) -> Vec<(&'a str, Vec<&'b Operation<'a>>)> {
    let mut groups: Vec<(&str, Vec<&Operation<'_>>)> = Vec::new();
    for op in operations {
        match groups.iter_mut().find(|(tag, _)| *tag == op.tag) {
            Some((_, group)) => group.push(op),
            None => groups.push((op.tag, vec![op])),
        }
    }
    groups
}

fn operation(out: &mut String, document: &Value, op: &Operation<'_>) {
    let body = op.body;
    let _ = write!(
        out,
        "<section class=\"operation\" id=\"{id}\" data-method=\"{upper}\" data-path=\"{path}\">\
         <h3><span class=\"method {method}\">{upper}</span> <code>{path}</code></h3>",
        id = op.anchor(),
        upper = op.method.to_uppercase(),
        method = op.method,
        path = escape(op.path),
    );
    if let Some(summary) = body["summary"].as_str() {
        let _ = write!(out, "<p class=\"summary\">{}</p>", inline(summary));
    }
    if let Some(description) = body["description"].as_str() {
        out.push_str(&paragraph(description));
    }
    out.push_str(&access(document, body));

    let parameters: Vec<&Value> = op
        .shared_parameters
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .chain(body["parameters"].as_array().into_iter().flatten())
        .collect();
    if !parameters.is_empty() {
        out.push_str(
            "<h4>Parameters</h4><table><thead><tr><th>name</th><th>in</th><th>type</th><th>description</th></tr></thead><tbody>",
        );
        for p in parameters {
            let required = if p["required"].as_bool() == Some(true) { " <em>required</em>" } else { "" };
            let _ = write!(
                out,
                "<tr><td><code>{name}</code>{required}</td><td>{location}</td><td>{kind}</td><td>{description}</td></tr>",
                name = escape(p["name"].as_str().unwrap_or("")),
                location = escape(p["in"].as_str().unwrap_or("")),
                kind = type_of(&p["schema"]),
                description = inline(p["description"].as_str().unwrap_or("")),
            );
        }
        out.push_str("</tbody></table>");
    }

    if let Some(request) = body.get("requestBody") {
        out.push_str("<h4>Request body</h4>");
        if let Some(description) = request["description"].as_str() {
            out.push_str(&paragraph(description));
        }
        content(out, &request["content"]);
    }

    if let Some(responses) = body["responses"].as_object() {
        out.push_str(
            "<h4>Responses</h4><table><thead><tr><th>status</th><th>description</th><th>body</th></tr></thead><tbody>",
        );
        for (status, response) in responses {
            let response = resolve(document, response);
            let bodies = response["content"]
                .as_object()
                .map(|c| {
                    c.iter()
                        .map(|(media, m)| {
                            let schema = m.get("schema").map(type_of).unwrap_or_default();
                            format!("<code>{}</code> {schema}", escape(media))
                        })
                        .collect::<Vec<_>>()
                        .join("<br>")
                })
                .unwrap_or_default();
            let _ = write!(
                out,
                "<tr><td class=\"status\">{}</td><td>{}</td><td>{bodies}</td></tr>",
                escape(status),
                inline(response["description"].as_str().unwrap_or("")),
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>");
}

/// Who may call it: its security requirements, in words.
fn access(document: &Value, body: &Value) -> String {
    let requirements = body.get("security").or_else(|| document.get("security")).and_then(Value::as_array);
    let Some(requirements) = requirements.filter(|r| !r.is_empty()) else {
        return "<p class=\"access\">No API key needed.</p>".to_owned();
    };
    let optional = requirements.iter().any(|r| r.as_object().is_some_and(Map::is_empty));
    let names: Vec<String> = requirements
        .iter()
        .filter_map(Value::as_object)
        .flat_map(|r| r.keys())
        .map(|name| {
            let scheme = document.pointer(&format!("/components/securitySchemes/{name}"));
            match scheme.and_then(|s| s["scheme"].as_str()) {
                Some("bearer") => "an API key (<code>Authorization: Bearer …</code>)".to_owned(),
                _ => format!("<code>{}</code>", escape(name)),
            }
        })
        .collect();
    let needed = if optional { "May take" } else { "Needs" };
    format!("<p class=\"access\">{needed} {}.</p>", names.join(" or "))
}

/// A request or response `content` map: each media type and its schema.
fn content(out: &mut String, content: &Value) {
    let Some(content) = content.as_object() else { return };
    for (media, m) in content {
        let _ = write!(out, "<p><code>{}</code></p>", escape(media));
        if let Some(schema) = m.get("schema") {
            schema_block(out, schema);
        }
    }
}

/// A schema: its type line, description, and the table of its properties when it has any.
fn schema_block(out: &mut String, schema: &Value) {
    let _ = write!(out, "<p class=\"type\">{}</p>", type_of(schema));
    if let Some(description) = schema["description"].as_str() {
        out.push_str(&paragraph(description));
    }
    let Some(properties) = schema["properties"].as_object() else { return };
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    out.push_str("<table><thead><tr><th>field</th><th>type</th><th>description</th></tr></thead><tbody>");
    for (name, property) in properties {
        let mark = if required.contains(&name.as_str()) { " <em>required</em>" } else { "" };
        let _ = write!(
            out,
            "<tr><td><code>{}</code>{mark}</td><td>{}</td><td>{}</td></tr>",
            escape(name),
            type_of(property),
            inline(property["description"].as_str().unwrap_or("")),
        );
    }
    out.push_str("</tbody></table>");
}

/// A schema's type in a few words (`string (address)`, `array of Payment`, `one of A | B`),
/// with its constraints; a `$ref` is a link to the schema.
fn type_of(schema: &Value) -> String {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap_or(reference);
        return format!("<a href=\"#schema-{0}\">{0}</a>", escape(name));
    }
    for (key, word) in [("oneOf", "one of"), ("anyOf", "any of"), ("allOf", "all of")] {
        if let Some(options) = schema[key].as_array() {
            let options: Vec<String> = options.iter().map(type_of).collect();
            return format!("{word} {}", options.join(" | "));
        }
    }
    let mut words = match &schema["type"] {
        Value::String(kind) => kind_word(kind, schema),
        Value::Array(kinds) => {
            kinds.iter().filter_map(Value::as_str).map(|k| kind_word(k, schema)).collect::<Vec<_>>().join(" or ")
        }
        _ if schema.get("properties").is_some() => "object".to_owned(),
        _ => "any".to_owned(),
    };
    if let Some(format) = schema["format"].as_str() {
        let _ = write!(words, " ({})", escape(format));
    }
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| format!("<code>{}</code>", escape(&v.to_string()))).collect();
        let _ = write!(words, ", one of {}", values.join(", "));
    }
    if let Some(constant) = schema.get("const") {
        let _ = write!(words, ", always <code>{}</code>", escape(&constant.to_string()));
    }
    for (key, word) in [
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
    ] {
        if let Some(bound) = schema.get(key).filter(|b| b.is_number()) {
            let _ = write!(words, ", {word} {bound}");
        }
    }
    if let Some(pattern) = schema["pattern"].as_str() {
        let _ = write!(words, ", matching <code>{}</code>", escape(pattern));
    }
    if let Some(default) = schema.get("default") {
        let _ = write!(words, ", default <code>{}</code>", escape(&default.to_string()));
    }
    words
}

/// `array of …`, or the JSON type's name.
fn kind_word(kind: &str, schema: &Value) -> String {
    match (kind, schema.get("items")) {
        ("array", Some(items)) => format!("array of {}", type_of(items)),
        _ => escape(kind),
    }
}

/// A `$ref` to a component (response, schema) replaced by what it names.
fn resolve<'a>(document: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str().and_then(|r| r.strip_prefix('#')) {
        Some(pointer) => document.pointer(pointer).unwrap_or(value),
        None => value,
    }
}

/// Description text as paragraphs (blank lines separate them).
fn paragraph(text: &str) -> String {
    text.split("\n\n").filter(|p| !p.trim().is_empty()).map(|p| format!("<p>{}</p>", inline(p))).collect()
}

/// Description text, escaped, with its `code spans` as `<code>`.
fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", escape(part));
        } else {
            out.push_str(&escape(part));
        }
    }
    out
}

const STYLE: &str = "\
body{margin:0;font:15px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1d2330;display:grid;grid-template-columns:18rem 1fr}\
header{grid-column:1/3;padding:1rem 2rem;background:#14213d;color:#fff}header a{color:#9ecbff}header code{background:#2b3a5c;color:#fff}\
header h1{margin:0}header small{font-weight:normal;opacity:.7;font-size:.6em}\
nav{padding:1rem;border-right:1px solid #dde;position:sticky;top:0;align-self:start;max-height:100vh;overflow:auto;font-size:.85em}\
nav ul{list-style:none;padding:0;margin:0 0 1rem}nav li{margin:.15rem 0}nav a{color:#1d2330;text-decoration:none}\
nav h2{font-size:1em}nav h3{font-size:.9em;text-transform:uppercase;color:#667;margin:.8rem 0 .3rem}\
main{padding:1rem 2rem;min-width:0}h2{border-bottom:2px solid #14213d;text-transform:capitalize}\
section{border:1px solid #dde;border-radius:6px;padding:.5rem 1rem;margin:1rem 0}section h3{margin:.3rem 0}\
.method{display:inline-block;min-width:3.5em;text-align:center;border-radius:3px;color:#fff;font:bold .8em monospace;padding:.1em .3em}\
.get{background:#2a7ab0}.post{background:#2f8f4e}.delete{background:#b03a2e}.put,.patch{background:#a0701a}\
table{border-collapse:collapse;width:100%;font-size:.9em;margin:.5rem 0}th,td{border:1px solid #dde;padding:.25rem .5rem;text-align:left;vertical-align:top}\
th{background:#f4f5f8}code{background:#f4f5f8;padding:0 .2em;border-radius:3px;word-break:break-word}\
.access{color:#556;font-style:italic}.status{font-weight:bold}.type{margin:.3rem 0}";

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_operation_and_schema_is_rendered_and_text_is_escaped() {
        let document = json!({
            "openapi": "3.1.0",
            "info": {"title": "T <x>", "version": "1", "description": "Errors: `{\"error\"}`."},
            "paths": {
                "/a/{id}": {
                    "get": {"tags": ["one"], "summary": "Get <a>", "parameters": [
                        {"name": "id", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^[a-z]+$"}}
                    ], "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}}},
                    "security": [{"bearer": []}]},
                    "delete": {"tags": ["two"], "responses": {"204": {"description": "gone"}}}
                }
            },
            "components": {
                "schemas": {"Thing": {"type": "object", "required": ["n"], "properties": {
                    "n": {"type": "integer", "minimum": 1}, "tags": {"type": "array", "items": {"type": "string"}}
                }}},
                "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
            }
        });
        let page = render(&document);
        assert!(page.contains("data-method=\"GET\" data-path=\"/a/{id}\""), "{page}");
        assert!(page.contains("data-method=\"DELETE\" data-path=\"/a/{id}\""), "{page}");
        assert!(page.contains("id=\"op-get-a-id\""));
        assert!(page.contains("<a href=\"#schema-Thing\">Thing</a>"));
        assert!(page.contains("id=\"schema-Thing\""));
        assert!(page.contains("<code>n</code> <em>required</em>"));
        assert!(page.contains("integer, ≥ 1"));
        assert!(page.contains("array of string"));
        assert!(page.contains("Needs an API key"));
        assert!(page.contains("No API key needed"), "the DELETE has no security");
        assert!(page.contains("Get &lt;a&gt;") && page.contains("T &lt;x&gt;"), "text is escaped");
        assert!(!page.contains("<a>") && !page.contains("<script"), "{page}");
    }

    #[test]
    fn an_optional_key_is_said_so() {
        let document = json!({"components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}});
        let body = json!({"security": [{}, {"bearer": []}]});
        assert!(access(&document, &body).starts_with("<p class=\"access\">May take an API key"));
        assert_eq!(access(&document, &json!({"security": []})), "<p class=\"access\">No API key needed.</p>");
    }
}
