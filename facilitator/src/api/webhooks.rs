//! `/webhooks`: an account's webhook endpoints and their delivery log.
//!
//! `POST /webhooks` answers the signing secret once; it is not replayed under an
//! `Idempotency-Key` (a replay would have to keep the secret in the clear), so registering twice
//! makes two endpoints.

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, ApiQuery};
use crate::app::AppState;
use crate::auth::Caller;
use crate::store::{DeliveryRecord, StoredWebhookEndpoint};
use crate::webhooks::{self, WebhookError};

/// Body of `POST /webhooks`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEndpoint {
    /// Where deliveries are POSTed: an `https` URL of a public address.
    #[schema(example = "https://shop.example/hooks/tollgate", max_length = 2048)]
    pub url: String,
    /// A note for the owner.
    #[schema(max_length = 200)]
    pub description: Option<String>,
}

/// A webhook endpoint.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// `whe_…`.
    pub id: String,
    /// Where deliveries go.
    pub url: String,
    /// The owner's note.
    pub description: Option<String>,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
}

impl From<StoredWebhookEndpoint> for Endpoint {
    fn from(e: StoredWebhookEndpoint) -> Self {
        Self { id: e.id, url: e.url, description: e.description, created_at: e.created_at }
    }
}

/// A registered endpoint with its signing secret.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedEndpoint {
    /// The endpoint.
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// `whsec_…`: the HMAC-SHA256 key of `Tollgate-Signature`. Shown only this once.
    pub secret: String,
}

/// `GET /webhooks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointList {
    /// The account's endpoints, oldest first.
    pub endpoints: Vec<Endpoint>,
}

/// One delivery of one event to one endpoint.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// The outbox row.
    pub id: i64,
    /// The event (`evt_<paymentId>_<status>`), also in the body and the `Tollgate-Event-Id` header.
    pub event_id: String,
    /// `payment.<status>`.
    pub event_type: String,
    /// `pending` (will be tried, again), `delivered` or `failed` (given up).
    pub state: String,
    /// Attempts made.
    pub attempts: u32,
    /// When the next attempt is due.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The status of the last answer.
    pub last_status: Option<u16>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// When the event was queued.
    pub created_at: DateTime<Utc>,
    /// When it was delivered.
    pub delivered_at: Option<DateTime<Utc>>,
}

impl From<DeliveryRecord> for Delivery {
    fn from(d: DeliveryRecord) -> Self {
        Self {
            id: d.id,
            event_id: d.event_id,
            event_type: d.event_type,
            state: d.state,
            attempts: d.attempts,
            next_attempt_at: d.next_attempt_at,
            last_status: d.last_status,
            last_error: d.last_error,
            created_at: d.created_at,
            delivered_at: d.delivered_at,
        }
    }
}

/// `GET /webhooks/{id}/deliveries`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    /// Newest first.
    pub deliveries: Vec<Delivery>,
}

/// Query of `GET /webhooks/{id}/deliveries`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeliveriesQuery {
    /// How many, newest first (1–100, default 50).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
}

/// `DELETE /webhooks/{id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted {
    /// The endpoint deleted.
    pub id: String,
    /// Always true.
    pub deleted: bool,
}

/// An endpoint id as the API makes them; anything else names no endpoint.
fn endpoint_id(id: &str) -> Result<String, ApiError> {
    if super::validate::is_identifier(id) {
        Ok(id.to_owned())
    } else {
        Err(ApiError::not_found("no webhook endpoint with that id"))
    }
}

fn api_error(e: WebhookError) -> ApiError {
    match e {
        WebhookError::Invalid(m) => ApiError::invalid_params(m),
        // A quota, like a plan's: the request is well-formed, the account is full.
        WebhookError::TooMany => ApiError::forbidden(e.to_string()).with_remedy("Delete an endpoint first"),
        WebhookError::NoMasterKey => {
            ApiError::forbidden(e.to_string()).with_remedy("The operator sets TOLLGATE_MASTER_KEY on the facilitator")
        }
        WebhookError::NotFound(id) => ApiError::not_found(format!("no webhook endpoint {id}")),
        WebhookError::Failed(m) => ApiError::internal(m),
    }
}

/// Registers an endpoint for the caller's account: every change of a payment the account can
/// see is POSTed to it, signed (`Tollgate-Signature: t=…,v1=…`).
#[utoipa::path(post, path = "/webhooks", tag = "webhooks", request_body = NewEndpoint,
    responses(
        (status = 201, body = CreatedEndpoint),
        (status = 400, description = "INVALID_PARAMETERS (URL not https or not public)", body = tollgate_protocol::ErrorEnvelope),
        (status = 403, description = "FORBIDDEN (the account has 16 endpoints already, or no master key on this facilitator)", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiJson(body): ApiJson<NewEndpoint>,
) -> Result<Response, ApiError> {
    let registered = webhooks::register(
        &*state.store,
        state.master_key.as_deref(),
        &state.config.webhooks,
        &caller.account_id,
        &body.url,
        body.description,
        state.clock.now(),
    )
    .await
    .map_err(api_error)?;
    let created = CreatedEndpoint { endpoint: registered.endpoint.into(), secret: registered.secret };
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

/// The caller's account's endpoints.
#[utoipa::path(get, path = "/webhooks", tag = "webhooks",
    responses((status = 200, body = EndpointList)), security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
) -> Result<Json<EndpointList>, ApiError> {
    let endpoints = state.store.webhook_endpoints(Some(&caller.account_id)).await.map_err(ApiError::internal)?;
    Ok(Json(EndpointList { endpoints: endpoints.into_iter().map(Endpoint::from).collect() }))
}

/// Deletes one of the caller's account's endpoints, and its pending deliveries.
#[utoipa::path(delete, path = "/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint's id (`whe_…`)")),
    responses(
        (status = 200, body = Deleted),
        (status = 404, description = "NOT_FOUND (unknown, or not the caller's)", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Deleted>, ApiError> {
    let id = endpoint_id(&id)?;
    if state.store.delete_webhook_endpoint(&caller.account_id, &id).await.map_err(ApiError::internal)? {
        Ok(Json(Deleted { id, deleted: true }))
    } else {
        Err(api_error(WebhookError::NotFound(id)))
    }
}

/// The delivery log of one of the caller's account's endpoints, newest first.
#[utoipa::path(get, path = "/webhooks/{id}/deliveries", tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint's id (`whe_…`)"), DeliveriesQuery),
    responses(
        (status = 200, body = DeliveryList),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 404, description = "NOT_FOUND (unknown, or not the caller's)", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn deliveries(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<DeliveriesQuery>,
) -> Result<Json<DeliveryList>, ApiError> {
    let limit = query.limit.unwrap_or(50);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::invalid_params("limit must be between 1 and 100"));
    }
    let id = endpoint_id(&id)?;
    match state.store.webhook_endpoint(&id).await.map_err(ApiError::internal)? {
        Some(e) if e.account_id == caller.account_id => {}
        _ => return Err(api_error(WebhookError::NotFound(id))),
    }
    let log = state.store.webhook_deliveries(Some(&id), limit).await.map_err(ApiError::internal)?;
    Ok(Json(DeliveryList { deliveries: log.into_iter().map(Delivery::from).collect() }))
}
