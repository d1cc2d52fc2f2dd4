//! What a paid route declares so that agents can find it (x402 `bazaar`): how to call it and
//! what it answers ([`Discovery`], given to [`crate::PaymentLayerBuilder::discovery`]), and who
//! sells it ([`ServiceMetadata`], [`crate::PaymentLayerBuilder::service`]).
//!
//! The declaration is resolved once, when the layer is built, checked there (a bad one is a
//! [`crate::BuildError`], never a request-time surprise), and put in every 402 of the route as
//! `extensions["bazaar"]`; buyers echo it and the facilitator catalogs it from the seller's side.

use serde_json::{Map, Value};
use tollgate_protocol::x402::bazaar::{BODY_METHODS, HttpInput, Info, Input, McpInput};
pub use tollgate_protocol::x402::bazaar::{BodyType, Declaration, DeclarationError, Manifest, Output, ServiceMetadata};

pub use crate::storefront::{ListingError, Storefront, StorefrontLayer, StorefrontService, route_template};

/// How to call a paid route or MCP tool, and what it answers. Start with [`Discovery::http`] or
/// [`Discovery::tool`].
///
/// ```
/// use serde_json::json;
/// use tollgate::discovery::Discovery;
///
/// let weather = Discovery::http()
///     .query_example(json!({"city": "Lisbon"}))
///     .output_example(json!({"city": "Lisbon", "celsius": 18}));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Discovery {
    input: Call,
    output: Option<Output>,
    input_schema: Option<Value>,
    route_template: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Call {
    Http {
        method: Option<String>,
        query: Option<Value>,
        headers: Vec<(String, String)>,
        body: Option<(BodyType, Value)>,
    },
    Tool(McpInput),
}

impl Discovery {
    /// An HTTP route. Its method is `GET`, or `POST` once a body is declared, unless
    /// [`Self::method`] names it.
    #[must_use]
    pub const fn http() -> Self {
        Self {
            input: Call::Http { method: None, query: None, headers: Vec::new(), body: None },
            output: None,
            input_schema: None,
            route_template: None,
        }
    }

    /// An MCP tool: its name (as passed to `tools/call`) and the JSON Schema of its arguments
    /// (the `inputSchema` it declares in `tools/list`).
    #[must_use]
    pub fn tool(name: impl Into<String>, input_schema: Value) -> Self {
        Self {
            input: Call::Tool(McpInput {
                tool_name: name.into(),
                description: None,
                transport: None,
                input_schema,
                example: None,
            }),
            output: None,
            input_schema: None,
            route_template: None,
        }
    }

    /// The HTTP method (`GET`, `HEAD`, `DELETE` take a query; `POST`, `PUT`, `PATCH` a body).
    #[must_use]
    pub fn method(mut self, method: &str) -> Self {
        if let Call::Http { method: m, .. } = &mut self.input {
            *m = Some(method.to_ascii_uppercase());
        }
        self
    }

    /// Example query parameters (a JSON object).
    #[must_use]
    pub fn query_example(mut self, query: Value) -> Self {
        if let Call::Http { query: q, .. } = &mut self.input {
            *q = Some(query);
        }
        self
    }

    /// An example request header.
    #[must_use]
    pub fn header_example(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Call::Http { headers, .. } = &mut self.input {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// The request body: its type and an example (an object, or a string for text).
    #[must_use]
    pub fn body_example(mut self, body_type: BodyType, example: Value) -> Self {
        if let Call::Http { body, .. } = &mut self.input {
            *body = Some((body_type, example));
        }
        self
    }

    /// A JSON Schema of the query parameters (query methods) or of the body (body methods), in
    /// place of the loose `object` of the spec's examples. Same-document `$ref`s only.
    #[must_use]
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// A tool's description.
    #[must_use]
    pub fn tool_description(mut self, description: impl Into<String>) -> Self {
        if let Call::Tool(tool) = &mut self.input {
            tool.description = Some(description.into());
        }
        self
    }

    /// Example arguments of a tool.
    #[must_use]
    pub fn tool_example(mut self, arguments: Value) -> Self {
        if let Call::Tool(tool) = &mut self.input {
            tool.example = Some(arguments);
        }
        self
    }

    /// An example JSON answer.
    #[must_use]
    pub fn output_example(self, example: Value) -> Self {
        self.output(Output { kind: "json".into(), format: None, example: Some(example) })
    }

    /// What the route answers.
    #[must_use]
    pub fn output(mut self, output: Output) -> Self {
        self.output = Some(output);
        self
    }

    /// A dynamic route's template, `:name` for each parameter (`/users/:id`).
    #[must_use]
    pub fn route_template(mut self, template: impl Into<String>) -> Self {
        self.route_template = Some(template.into());
        self
    }

    /// The declaration this describes, checked ([`Declaration::check`]).
    ///
    /// # Errors
    /// The rule the declaration breaks.
    pub fn declaration(&self) -> Result<Declaration, DeclarationError> {
        let input = match &self.input {
            Call::Http { method, query, headers, body } => {
                let method = method.clone().unwrap_or_else(|| if body.is_some() { "POST" } else { "GET" }.to_owned());
                let query_params = match query {
                    None => None,
                    Some(Value::Object(map)) => Some(map.clone()),
                    Some(_) => return Err(DeclarationError::Body("the query example is a JSON object of parameters")),
                };
                let (body_type, body) =
                    body.clone().map_or((None, None), |(kind, example)| (Some(kind), Some(example)));
                if let Some(example) = &body
                    && body_type != Some(BodyType::Text)
                    && !example.is_object()
                {
                    return Err(DeclarationError::Body("a json or form-data body example is a JSON object"));
                }
                if !BODY_METHODS.contains(&method.as_str()) && body.is_some() {
                    return Err(DeclarationError::Body("a query method takes no body"));
                }
                if body_type == Some(BodyType::Text) && body.as_ref().is_some_and(|b| !b.is_string()) {
                    return Err(DeclarationError::Body("a text body example is a string"));
                }
                Input::Http(HttpInput {
                    method,
                    query_params,
                    headers: (!headers.is_empty()).then(|| headers.iter().cloned().collect()),
                    body_type,
                    body,
                    path_params: None,
                })
            }
            Call::Tool(tool) => Input::Mcp(tool.clone()),
        };
        if self.input_schema.as_ref().is_some_and(|schema| !schema.is_object() && !schema.is_boolean()) {
            return Err(DeclarationError::Body("an input schema is a JSON Schema: an object"));
        }
        let info = Info { input, output: self.output.clone() };
        let mut declaration = match &self.input_schema {
            Some(schema) => Declaration::with_input_schema(info, schema.clone()),
            None => Declaration::new(info),
        };
        declaration.route_template.clone_from(&self.route_template);
        declaration.check()?;
        Ok(declaration)
    }
}

/// The declaration's JSON for `extensions["bazaar"]`.
pub(crate) fn extension(declaration: &Declaration) -> Value {
    serde_json::to_value(declaration).unwrap_or_else(|_| Value::Object(Map::new()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_method_follows_the_declared_input_unless_named() {
        let get = Discovery::http().query_example(json!({"city": "Lisbon"})).declaration();
        let Ok(Declaration { info: Info { input: Input::Http(http), .. }, .. }) = get else { panic!("{get:?}") };
        assert_eq!(http.method, "GET");
        let post = Discovery::http().body_example(BodyType::Json, json!({"q": "x"})).declaration();
        let Ok(Declaration { info: Info { input: Input::Http(http), .. }, .. }) = post else { panic!("{post:?}") };
        assert_eq!(http.method, "POST");
        let put = Discovery::http().method("put").body_example(BodyType::Text, json!("hello")).declaration();
        assert!(put.is_ok(), "{put:?}");
    }

    #[test]
    fn a_declaration_that_breaks_a_rule_is_refused() {
        let get_with_body = Discovery::http().method("GET").body_example(BodyType::Json, json!({"q": 1}));
        assert!(matches!(get_with_body.declaration(), Err(DeclarationError::Body(_))));
        let query_list = Discovery::http().query_example(json!(["not", "an", "object"]));
        assert!(matches!(query_list.declaration(), Err(DeclarationError::Body(_))));
        let trace = Discovery::http().method("TRACE");
        assert!(matches!(trace.declaration(), Err(DeclarationError::Method(_))));
        let outside = Discovery::http().input_schema(json!({"$ref": "file:///etc/schema.json"}));
        assert!(matches!(outside.declaration(), Err(DeclarationError::ExternalReference(_))));
        let huge = Discovery::http().output_example(json!("x".repeat(100_000)));
        assert!(matches!(huge.declaration(), Err(DeclarationError::TooLarge(_))));
        let unnamed = Discovery::tool(" ", json!({"type": "object"}));
        assert!(matches!(unnamed.declaration(), Err(DeclarationError::Tool(_))));
    }
}
