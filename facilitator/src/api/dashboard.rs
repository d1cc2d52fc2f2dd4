//! `GET /dashboard`: the operator's page — API keys (list, generate, delete) and recent payments.
//!
//! Off unless `TOLLGATE_ADMIN_TOKEN` is set. Signing in with that token sets a session cookie
//! (`HttpOnly`, `SameSite=Strict`, path `/dashboard`, 12 hours): `<epoch>.<expiry>.<HMAC-SHA256 of
//! both under a key derived from the admin token>`, so any instance with the same token accepts
//! it, changing the token signs everyone out, and so does signing out: it raises the epoch in the
//! database, which ends every session made before (a copied cookie too), on every instance.
//! Sign-in attempts are limited to [`crate::auth::LOGINS_PER_MINUTE`] (counted by the rate limiter, so shared
//! through Redis by instances that share it; a successful one is given back). Every form carries a
//! CSRF token (an HMAC of the session) that is checked on submit, on top of `SameSite=Strict`. A new key is shown once, in
//! the answer to the form that made it; the list shows id, label, plan, the last four characters,
//! created and last used — never a secret.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::admin::{self, NewKey};
use crate::api::error::ApiError;
use crate::app::AppState;
use crate::auth::keys::KeyEnv;
use crate::auth::sessions::{SESSION_SECS, csrf_for, equal, new_session, session_valid};
use crate::plans::Plan;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "tollgate_session";
/// Payments listed.
const RECENT_PAYMENTS: u32 = 20;

/// The dashboard's secret: the admin token, or `None` when the dashboard is off.
fn admin_token(state: &AppState) -> Option<&str> {
    state.config.admin_token.as_ref().map(|t| t.expose()).filter(|t| !t.is_empty())
}

/// The request's session cookie, if any.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(name, value)| (name == SESSION_COOKIE).then_some(value))
}

/// Why a dashboard request is not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Denied {
    /// No admin token is configured.
    Off,
    /// No valid session: the sign-in form.
    SignIn,
    /// The form's CSRF token does not match the session.
    Forged,
    /// Storage failed (the session epoch could not be read).
    Unavailable,
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        match self {
            Self::Off => off(),
            Self::SignIn => page(StatusCode::UNAUTHORIZED, login_page(None)),
            Self::Forged => {
                page(StatusCode::FORBIDDEN, message_page("This form has expired. Reload the dashboard and try again."))
            }
            Self::Unavailable => ApiError::internal("the dashboard's sessions cannot be read").into_response(),
        }
    }
}

/// The admin token and the signed-in session.
async fn signed_in(state: &AppState, headers: &HeaderMap) -> Result<(String, String), Denied> {
    let token = admin_token(state).ok_or(Denied::Off)?;
    let Some(session) = session_cookie(headers) else { return Err(Denied::SignIn) };
    let epoch = state.store.dashboard_epoch().await.map_err(|e| {
        tracing::error!(error = %e, "cannot read the dashboard's session epoch");
        Denied::Unavailable
    })?;
    if session_valid(token, epoch, session, state.clock.now()) {
        Ok((token.to_owned(), session.to_owned()))
    } else {
        Err(Denied::SignIn)
    }
}

/// The dashboard is off: 404 in the API's error shape.
fn off() -> Response {
    ApiError::not_found("the dashboard is off").with_remedy("Set TOLLGATE_ADMIN_TOKEN to turn it on").into_response()
}

/// An HTML answer with headers that keep it out of frames and caches.
fn page(status: StatusCode, body: String) -> Response {
    let mut response = (status, Html(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// `GET /dashboard`.
pub async fn show(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match signed_in(&state, &headers).await {
        Ok((token, session)) => render(&state, &csrf_for(&token, &session), None).await,
        Err(denied) => denied.into_response(),
    }
}

/// The sign-in form.
#[derive(Debug, Deserialize)]
pub struct Login {
    #[serde(default)]
    token: String,
}

/// `POST /dashboard/login`.
pub async fn login(State(state): State<AppState>, headers: HeaderMap, Form(form): Form<Login>) -> Response {
    let Some(token) = admin_token(&state) else { return off() };
    // Every attempt counts (a guesser learns nothing once over the limit); a right one is given back.
    let counted = state.auth.admit_login().await;
    if !counted.allowed {
        let mut answer = page(
            StatusCode::TOO_MANY_REQUESTS,
            login_page(Some("Too many sign-in attempts. Wait a minute and try again.")),
        );
        if let Ok(v) = HeaderValue::from_str(&counted.retry_after_secs(state.clock.now_millis()).to_string()) {
            answer.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return answer;
    }
    if !equal(form.token.trim(), token) {
        return page(StatusCode::UNAUTHORIZED, login_page(Some("That is not the admin token.")));
    }
    state.auth.forgive_login(&counted).await;
    let epoch = match state.store.dashboard_epoch().await {
        Ok(epoch) => epoch,
        Err(e) => return ApiError::internal(e).into_response(),
    };
    let session = new_session(token, epoch, state.clock.now());
    // Behind a TLS-terminating proxy that says so, the cookie is also marked Secure.
    let https = headers.get("x-forwarded-proto").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let secure = if https { "; Secure" } else { "" };
    let cookie = format!(
        "{SESSION_COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age={SESSION_SECS}{secure}"
    );
    let mut response = Redirect::to("/dashboard").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// A form that only carries the CSRF token.
#[derive(Debug, Deserialize)]
pub struct Csrf {
    #[serde(default)]
    csrf: String,
}

/// `POST /dashboard/logout`.
pub async fn logout(State(state): State<AppState>, headers: HeaderMap, Form(form): Form<Csrf>) -> Response {
    if let Err(denied) = checked(&state, &headers, &form.csrf).await {
        return denied.into_response();
    }
    // Every session ends, on every instance: a copy of this cookie too.
    if let Err(e) = state.store.end_dashboard_sessions().await {
        return ApiError::internal(e).into_response();
    }
    let mut response = Redirect::to("/dashboard").into_response();
    let cookie = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// A signed-in session whose form carried its CSRF token; the token for the next forms.
async fn checked(state: &AppState, headers: &HeaderMap, csrf: &str) -> Result<String, Denied> {
    let (token, session) = signed_in(state, headers).await?;
    let expected = csrf_for(&token, &session);
    if !equal(csrf, &expected) {
        return Err(Denied::Forged);
    }
    Ok(expected)
}

/// The "Generate New Key" form.
#[derive(Debug, Deserialize)]
pub struct Generate {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    label: String,
    #[serde(default)]
    plan: String,
    #[serde(default)]
    env: String,
    /// An existing account (rotation: its payments stay visible to the new key), or empty for a
    /// new account.
    #[serde(default)]
    account: String,
}

/// `POST /dashboard/keys`: makes a key (for a new account, or another key of an existing one)
/// and shows it once.
pub async fn generate(State(state): State<AppState>, headers: HeaderMap, Form(form): Form<Generate>) -> Response {
    let csrf = match checked(&state, &headers, &form.csrf).await {
        Ok(csrf) => csrf,
        Err(denied) => return denied.into_response(),
    };
    let Ok(plan) = form.plan.parse::<Plan>() else {
        return render(&state, &csrf, Some(Notice::Error(format!("Unknown plan {:?}.", form.plan)))).await;
    };
    let label = form.label.trim();
    let new = NewKey {
        plan,
        rpm: None,
        label: (!label.is_empty()).then(|| label.to_owned()),
        account: Some(form.account.trim()).filter(|a| !a.is_empty()).map(str::to_owned),
        env: if form.env == "live" { KeyEnv::Live } else { KeyEnv::Test },
    };
    match admin::create_key(&*state.store, new, state.clock.now()).await {
        Ok(created) => {
            let notice = Notice::NewKey { id: created.record.id.clone(), secret: created.secret.expose().to_owned() };
            render(&state, &csrf, Some(notice)).await
        }
        Err(e) => render(&state, &csrf, Some(Notice::Error(e.to_string()))).await,
    }
}

/// `POST /dashboard/keys/{id}/delete`: deletes a key; the API refuses it at once.
pub async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<Csrf>,
) -> Response {
    let csrf = match checked(&state, &headers, &form.csrf).await {
        Ok(csrf) => csrf,
        Err(denied) => return denied.into_response(),
    };
    let notice = match state.store.delete_api_key(&id).await {
        Ok(true) => {
            state.auth.forget_cached_keys();
            state.events.revoke(&id);
            Notice::Done(format!("Key {id} deleted. Requests with it now get 401; its connections are closed."))
        }
        Ok(false) => Notice::Error(format!("There is no key {id}.")),
        Err(e) => {
            tracing::error!(error = %e, "deleting a key from the dashboard");
            Notice::Error("Storage failed; nothing was deleted.".into())
        }
    };
    render(&state, &csrf, Some(notice)).await
}

/// The "Add endpoint" form.
#[derive(Debug, Deserialize)]
pub struct AddEndpoint {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    account: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    description: String,
}

/// `POST /dashboard/webhooks`: registers an endpoint for an account and shows its signing
/// secret once.
pub async fn add_endpoint(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<AddEndpoint>,
) -> Response {
    let csrf = match checked(&state, &headers, &form.csrf).await {
        Ok(csrf) => csrf,
        Err(denied) => return denied.into_response(),
    };
    let account = form.account.trim();
    match state.store.account_exists(account).await {
        Ok(true) => {}
        Ok(false) => {
            return render(&state, &csrf, Some(Notice::Error(format!("There is no account {account:?}.")))).await;
        }
        Err(e) => return ApiError::internal(e).into_response(),
    }
    let description = Some(form.description).filter(|d| !d.trim().is_empty());
    let registered = crate::webhooks::register(
        &*state.store,
        state.master_key.as_deref(),
        &state.config.webhooks,
        account,
        &form.url,
        description,
        state.clock.now(),
    )
    .await;
    let notice = match registered {
        Ok(r) => Notice::NewEndpoint { id: r.endpoint.id, secret: r.secret },
        Err(e) => Notice::Error(e.to_string()),
    };
    render(&state, &csrf, Some(notice)).await
}

/// The "Delete" button of an endpoint.
#[derive(Debug, Deserialize)]
pub struct DeleteEndpoint {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    account: String,
}

/// `POST /dashboard/webhooks/{id}/delete`: deletes an endpoint and its pending deliveries.
pub async fn delete_endpoint(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<DeleteEndpoint>,
) -> Response {
    let csrf = match checked(&state, &headers, &form.csrf).await {
        Ok(csrf) => csrf,
        Err(denied) => return denied.into_response(),
    };
    let notice = match state.store.delete_webhook_endpoint(&form.account, &id).await {
        Ok(true) => Notice::Done(format!("Endpoint {id} deleted; its pending deliveries are dropped.")),
        Ok(false) => Notice::Error(format!("There is no endpoint {id}.")),
        Err(e) => {
            tracing::error!(error = %e, "deleting a webhook endpoint from the dashboard");
            Notice::Error("Storage failed; nothing was deleted.".into())
        }
    };
    render(&state, &csrf, Some(notice)).await
}

/// Something to tell the operator at the top of the page.
enum Notice {
    /// A key was made: its secret, shown this once.
    NewKey { id: String, secret: String },
    /// An endpoint was registered: its signing secret, shown this once.
    NewEndpoint { id: String, secret: String },
    /// Something was done.
    Done(String),
    /// Something failed.
    Error(String),
}

/// Text safe inside HTML elements and attribute values.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

fn when(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(|| "never".to_owned(), |t| t.format("%Y-%m-%d %H:%M UTC").to_string())
}

const STYLE: &str = include_str!("dashboard.css");

fn shell(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{title}</title>\
         <style>{STYLE}</style></head><body>{body}</body></html>"
    )
}

fn login_page(error: Option<&str>) -> String {
    let error = error.map(|e| format!("<p class=\"notice error\">{}</p>", escape(e))).unwrap_or_default();
    shell(
        "Sign in · Tollgate",
        &format!(
            "<main class=\"narrow\"><h1>Tollgate dashboard</h1>{error}\
             <form method=\"post\" action=\"/dashboard/login\" class=\"card\">\
             <label for=\"token\">Admin token</label>\
             <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" required autofocus>\
             <button type=\"submit\">Sign in</button></form></main>"
        ),
    )
}

fn message_page(message: &str) -> String {
    shell(
        "Tollgate dashboard",
        &format!(
            "<main class=\"narrow\"><p class=\"notice error\">{}</p><a href=\"/dashboard\">Back</a></main>",
            escape(message)
        ),
    )
}

/// The signed-in page.
async fn render(state: &AppState, csrf: &str, notice: Option<Notice>) -> Response {
    let keys = match state.store.list_api_keys().await {
        Ok(keys) => keys,
        Err(e) => return ApiError::internal(e).into_response(),
    };
    let payments = match state.store.recent_payments(RECENT_PAYMENTS).await {
        Ok(payments) => payments,
        Err(e) => return ApiError::internal(e).into_response(),
    };
    let (endpoints, deliveries) = match (
        state.store.webhook_endpoints(None).await,
        state.store.webhook_deliveries(None, RECENT_PAYMENTS).await,
    ) {
        (Ok(e), Ok(d)) => (e, d),
        (Err(e), _) | (_, Err(e)) => return ApiError::internal(e).into_response(),
    };
    let csrf = escape(csrf);
    let webhooks = webhook_section(&endpoints, &deliveries, &csrf, &keys);
    let notice = notice_html(notice);
    let key_rows = key_rows(&keys, &csrf);
    let payment_rows = payment_rows(&payments);
    let (plans, accounts) = (plan_options(), account_options(&keys));
    let body = format!(
        "<header><h1>Tollgate dashboard</h1><form method=\"post\" action=\"/dashboard/logout\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><button class=\"quiet\" type=\"submit\">Sign out</button></form></header>\
         <main>{notice}\
         <section><h2>API Keys</h2>\
         <form method=\"post\" action=\"/dashboard/keys\" class=\"generate card\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label>Label <input name=\"label\" maxlength=\"100\" placeholder=\"e.g. production shop\"></label>\
         <label>Plan <select name=\"plan\">{plans}</select></label>\
         <label>Environment <select name=\"env\"><option value=\"test\">test</option><option value=\"live\">live</option></select></label>\
         <label>Account <select name=\"account\"><option value=\"\">a new account</option>{accounts}</select></label>\
         <button type=\"submit\" id=\"generate\">Generate New Key</button></form>\
         <div class=\"card\"><table id=\"keys\"><thead><tr><th>Id</th><th>Label</th><th>Plan</th><th>Key</th><th>Created</th><th>Last used</th><th></th></tr></thead>\
         <tbody>{key_rows}</tbody></table></div></section>\
         <section><h2>Recent payments</h2><div class=\"card\"><table id=\"payments\"><thead><tr><th>Payment</th><th>Created</th>\
         <th>Amount</th><th>Network</th><th>Status</th><th>Transaction</th></tr></thead><tbody>{payment_rows}</tbody></table></div></section>\
         {webhooks}\
         </main>\
         <script>function copyKey() {{\
           const text = document.getElementById('new-key').textContent;\
           const done = () => {{ document.getElementById('copy').textContent = 'Copied'; }};\
           if (navigator.clipboard) {{ navigator.clipboard.writeText(text).then(done, () => {{}}); }}\
         }}</script>"
    );
    page(StatusCode::OK, shell("Tollgate dashboard", &body))
}

/// The answer to the form just sent: a new key or endpoint secret (shown once), done, or why not.
fn notice_html(notice: Option<Notice>) -> String {
    match notice {
        None => String::new(),
        Some(Notice::NewKey { id, secret }) => format!(
            "<div class=\"notice new-key\"><strong>New key {id}</strong> — copy it now: it is not shown again.\
             <div class=\"secret\"><code id=\"new-key\">{secret}</code>\
             <button type=\"button\" id=\"copy\" onclick=\"copyKey()\">Copy</button></div></div>",
            id = escape(&id),
            secret = escape(&secret)
        ),
        Some(Notice::NewEndpoint { id, secret }) => format!(
            "<div class=\"notice new-key\"><strong>New webhook endpoint {id}</strong> — its signing secret, \
             shown only now: <div class=\"secret\"><code id=\"new-endpoint-secret\">{secret}</code></div></div>",
            id = escape(&id),
            secret = escape(&secret)
        ),
        Some(Notice::Done(text)) => format!("<p class=\"notice done\">{}</p>", escape(&text)),
        Some(Notice::Error(text)) => format!("<p class=\"notice error\">{}</p>", escape(&text)),
    }
}

/// One row per key, each with its delete form.
fn key_rows(keys: &[crate::store::StoredApiKey], csrf: &str) -> String {
    let rows: String = keys
        .iter()
        .map(|k| {
            format!(
                "<tr data-key=\"{id}\"><td><code>{id}</code></td><td>{label}</td><td>{plan}</td><td><code>…{hint}</code></td>\
                 <td>{created}</td><td>{used}</td><td>\
                 <form method=\"post\" action=\"/dashboard/keys/{id}/delete\" \
                 onsubmit=\"return confirm('Delete key {id}? Applications using it will get 401.')\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><button class=\"danger\" type=\"submit\">Delete</button></form></td></tr>",
                id = escape(&k.id),
                label = escape(k.label.as_deref().unwrap_or("—")),
                plan = k.plan.as_str(),
                hint = escape(&k.hint),
                created = when(Some(k.created_at)),
                used = when(k.last_used_at),
            )
        })
        .collect();
    if rows.is_empty() { "<tr><td colspan=\"7\" class=\"empty\">No keys yet.</td></tr>".into() } else { rows }
}

/// One row per recent payment.
fn payment_rows(payments: &[crate::store::StoredPayment]) -> String {
    let rows: String = payments
        .iter()
        .map(|p| {
            let r = p.to_record();
            format!(
                "<tr><td><code>{id}</code></td><td>{created}</td><td>{amount} {asset}</td><td>{network}</td>\
                 <td class=\"status status-{status}\">{status}</td><td><code title=\"{tx}\">{tx_short}</code></td></tr>",
                id = escape(&r.payment_id),
                created = when(Some(r.created_at)),
                amount = r.amount,
                asset = escape(&r.asset),
                network = escape(&r.network.to_string()),
                status = r.status.as_str(),
                tx = escape(r.transaction.as_deref().unwrap_or("")),
                tx_short = escape(&short(r.transaction.as_deref().unwrap_or("—"))),
            )
        })
        .collect();
    if rows.is_empty() { "<tr><td colspan=\"6\" class=\"empty\">No payments yet.</td></tr>".into() } else { rows }
}

/// The plans a new key can have.
fn plan_options() -> String {
    [Plan::Standard, Plan::Premium, Plan::Enterprise]
        .iter()
        .map(|p| format!("<option value=\"{0}\">{0}</option>", p.as_str()))
        .collect()
}

/// The accounts a new key can be added to (rotation), each named by its keys' labels.
fn account_options(keys: &[crate::store::StoredApiKey]) -> String {
    let mut accounts: Vec<(&str, Vec<&str>)> = Vec::new();
    for k in keys {
        let label = k.label.as_deref().unwrap_or(k.id.as_str());
        match accounts.iter_mut().find(|(a, _)| *a == k.account_id) {
            Some((_, labels)) => labels.push(label),
            None => accounts.push((k.account_id.as_str(), vec![label])),
        }
    }
    accounts
        .iter()
        .map(|(id, labels)| {
            format!("<option value=\"{}\">{} ({})</option>", escape(id), escape(id), escape(&labels.join(", ")))
        })
        .collect()
}

/// Endpoints (with the form to add one) and the newest deliveries with their outcome.
fn webhook_section(
    endpoints: &[crate::store::StoredWebhookEndpoint],
    deliveries: &[crate::store::DeliveryRecord],
    csrf: &str,
    keys: &[crate::store::StoredApiKey],
) -> String {
    let mut accounts: Vec<&str> = keys.iter().map(|k| k.account_id.as_str()).collect();
    accounts.dedup();
    let accounts: String = accounts.iter().map(|a| format!("<option value=\"{0}\">{0}</option>", escape(a))).collect();
    let endpoint_rows: String = endpoints
        .iter()
        .map(|e| {
            format!(
                "<tr data-endpoint=\"{id}\"><td><code>{id}</code></td><td><code>{account}</code></td><td>{url}</td>\
                 <td>{description}</td><td>{created}</td><td>\
                 <form method=\"post\" action=\"/dashboard/webhooks/{id}/delete\" \
                 onsubmit=\"return confirm('Delete endpoint {id}?')\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><input type=\"hidden\" name=\"account\" value=\"{account}\">\
                 <button class=\"danger\" type=\"submit\">Delete</button></form></td></tr>",
                id = escape(&e.id),
                account = escape(&e.account_id),
                url = escape(&e.url),
                description = escape(e.description.as_deref().unwrap_or("—")),
                created = when(Some(e.created_at)),
            )
        })
        .collect();
    let endpoint_rows = if endpoint_rows.is_empty() {
        "<tr><td colspan=\"6\" class=\"empty\">No endpoints yet.</td></tr>".into()
    } else {
        endpoint_rows
    };
    let delivery_rows: String = deliveries
        .iter()
        .map(|d| {
            let outcome = match (&d.state[..], d.last_status, &d.last_error) {
                ("delivered", Some(s), _) => format!("answered {s}"),
                (_, _, Some(e)) => e.clone(),
                _ => "—".into(),
            };
            format!(
                "<tr><td><code>{endpoint}</code></td><td><code>{event}</code></td><td>{kind}</td>\
                 <td class=\"status delivery-{state}\">{state}</td><td>{attempts}</td><td>{outcome}</td><td>{next}</td></tr>",
                endpoint = escape(&d.endpoint_id),
                event = escape(&d.event_id),
                kind = escape(&d.event_type),
                state = escape(&d.state),
                attempts = d.attempts,
                outcome = escape(&outcome),
                next = if d.state == "delivered" { when(d.delivered_at) } else { when(d.next_attempt_at) },
            )
        })
        .collect();
    let delivery_rows = if delivery_rows.is_empty() {
        "<tr><td colspan=\"7\" class=\"empty\">No deliveries yet.</td></tr>".into()
    } else {
        delivery_rows
    };
    format!(
        "<section><h2>Webhooks</h2>\
         <form method=\"post\" action=\"/dashboard/webhooks\" class=\"generate card\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label>Account <select name=\"account\">{accounts}</select></label>\
         <label>URL <input name=\"url\" maxlength=\"2048\" placeholder=\"https://shop.example/hooks/tollgate\"></label>\
         <label>Description <input name=\"description\" maxlength=\"200\"></label>\
         <button type=\"submit\" id=\"add-endpoint\">Add Endpoint</button></form>\
         <div class=\"card\"><table id=\"endpoints\"><thead><tr><th>Id</th><th>Account</th><th>URL</th><th>Description</th>\
         <th>Created</th><th></th></tr></thead><tbody>{endpoint_rows}</tbody></table></div>\
         <h3>Recent deliveries</h3><div class=\"card\"><table id=\"deliveries\"><thead><tr><th>Endpoint</th><th>Event</th>\
         <th>Type</th><th>State</th><th>Attempts</th><th>Last outcome</th><th>Delivered / next attempt</th></tr></thead>\
         <tbody>{delivery_rows}</tbody></table></div></section>"
    )
}

fn short(text: &str) -> String {
    if text.chars().count() > 20 {
        let head: String = text.chars().take(10).collect();
        let tail: String = text.chars().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect();
        format!("{head}…{tail}")
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_cookies_are_found() {
        assert_eq!(escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; tollgate_session=123.abc; b=2"));
        assert_eq!(session_cookie(&headers), Some("123.abc"));
        assert_eq!(session_cookie(&HeaderMap::new()), None);
    }
}
