//! The discovery catalog over HTTP (x402 `bazaar`, [`crate::discovery`]):
//!
//! * `GET /discovery/resources` (list, filters, `limit`/`offset` paging) and
//!   `GET /discovery/search` (words, filters, `limit`/`cursor` paging), in the shapes the official
//!   discovery client reads; open like `/supported` unless `[discovery] public = false`.
//! * `GET /discovery/own`, `PATCH /discovery/own/{id}` (hide or list again) and
//!   `DELETE /discovery/own/{id}`: a seller's own entries, with its key.

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, ApiQuery};
use crate::app::AppState;
use crate::auth::Caller;
use crate::discovery::{CatalogEntry, Filter, MAX_LIMIT, words};
pub use tollgate_protocol::x402::bazaar::{CursorPage, DiscoveryResource, OffsetPage, ResourceList, SearchResults};

/// Entries listed when `limit` is not given.
const DEFAULT_LIMIT: u32 = 20;
/// The deepest page: `offset` (or a cursor) beyond this is refused.
const MAX_OFFSET: u64 = 100_000;

impl From<CatalogEntry> for DiscoveryResource {
    fn from(e: CatalogEntry) -> Self {
        Self {
            resource: e.url,
            kind: e.kind,
            x402_version: e.x402_version,
            accepts: e.accepts,
            last_updated: e.last_settled_at,
            description: e.description,
            mime_type: e.mime_type,
            service: e.service,
            tool_name: e.tool_name,
            extensions: e.extensions,
        }
    }
}

/// Filters common to listing and search.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    /// `http` or `mcp`.
    #[serde(rename = "type")]
    #[param(rename = "type", max_length = 16)]
    pub kind: Option<String>,
    /// A recipient of one of the ways to pay.
    #[param(max_length = 128)]
    pub pay_to: Option<String>,
    /// A scheme of one of them (`exact`).
    #[param(max_length = 64)]
    pub scheme: Option<String>,
    /// A network of one of them (CAIP-2, `eip155:8453`).
    #[param(max_length = 128)]
    pub network: Option<String>,
    /// An extension key the entry carries (`bazaar`).
    #[param(max_length = 64)]
    pub extensions: Option<String>,
    /// The most entries (1–100, default 20).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// Entries to skip (at most 100,000).
    #[param(maximum = 100_000)]
    pub offset: Option<u64>,
}

/// `GET /discovery/search`'s query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct SearchQuery {
    /// The words to find (in descriptions, service names, tags, URLs and tool names; all must
    /// appear; at most 8 read).
    #[param(min_length = 1, max_length = 512)]
    pub query: String,
    /// `http` or `mcp`.
    #[serde(rename = "type")]
    #[param(rename = "type", max_length = 16)]
    pub kind: Option<String>,
    /// A recipient of one of the ways to pay.
    #[param(max_length = 128)]
    pub pay_to: Option<String>,
    /// A scheme of one of them.
    #[param(max_length = 64)]
    pub scheme: Option<String>,
    /// A network of one of them.
    #[param(max_length = 128)]
    pub network: Option<String>,
    /// An extension key the entry carries.
    #[param(max_length = 64)]
    pub extensions: Option<String>,
    /// The most entries (1–100, default 20).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// The cursor of the previous page's `pagination`.
    #[param(max_length = 6, pattern = "^(100000|[0-9]{0,5})$")]
    pub cursor: Option<String>,
}

/// A filter value of at most `max` characters (compared for equality only: any other text
/// matches nothing).
fn bounded(name: &str, value: Option<String>, max: usize) -> Result<Option<String>, ApiError> {
    match value {
        Some(v) if v.chars().count() > max => {
            Err(ApiError::invalid_params(format!("{name} must be at most {max} characters")))
        }
        other => Ok(other),
    }
}

fn limit(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(n @ 1..=MAX_LIMIT) => Ok(n),
        Some(_) => Err(ApiError::invalid_params(format!("limit must be 1 to {MAX_LIMIT}"))),
    }
}

#[allow(clippy::too_many_arguments)] // the filters, each checked by name
fn filter(
    state: &AppState,
    kind: Option<String>,
    pay_to: Option<String>,
    scheme: Option<String>,
    network: Option<String>,
    extension: Option<String>,
    limit: u32,
    offset: u64,
) -> Result<Filter, ApiError> {
    if offset > MAX_OFFSET {
        return Err(ApiError::invalid_params(format!("offset must be at most {MAX_OFFSET}")));
    }
    let max_age = chrono::Duration::days(i64::from(state.config.discovery.max_age_days));
    Ok(Filter {
        kind: bounded("type", kind, 16)?,
        pay_to: bounded("payTo", pay_to, 128)?,
        scheme: bounded("scheme", scheme, 64)?,
        network: bounded("network", network, 128)?,
        extension: bounded("extensions", extension, 64)?,
        words: Vec::new(),
        settled_since: (state.clock.now() - max_age).timestamp_millis(),
        limit,
        offset,
    })
}

/// The paid resources sellers settled through this facilitator and declared findable.
#[utoipa::path(get, path = "/discovery/resources", tag = "discovery", params(ListQuery),
    responses(
        (status = 200, body = ResourceList),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<ResourceList>, ApiError> {
    let limit = limit(q.limit)?;
    let offset = q.offset.unwrap_or(0);
    let filter = filter(&state, q.kind, q.pay_to, q.scheme, q.network, q.extensions, limit, offset)?;
    let (entries, total) = state.store.catalog_list(&filter).await.map_err(ApiError::internal)?;
    Ok(Json(ResourceList {
        x402_version: 2,
        items: entries.into_iter().map(Into::into).collect(),
        pagination: OffsetPage { limit, offset, total },
    }))
}

/// The cataloged resources whose description, service name, tags, URL or tool name hold every
/// word of `query`.
#[utoipa::path(get, path = "/discovery/search", tag = "discovery", params(SearchQuery),
    responses(
        (status = 200, body = SearchResults),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn search(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<SearchQuery>,
) -> Result<Json<SearchResults>, ApiError> {
    // Words are runs of letters and digits: anything else separates them.
    if q.query.is_empty() || q.query.chars().count() > 512 {
        return Err(ApiError::invalid_params("query must be 1 to 512 characters"));
    }
    let found = words(&q.query);
    let limit = limit(q.limit)?;
    let offset = match q.cursor.as_deref() {
        None | Some("") => 0,
        Some(cursor) => {
            cursor.parse::<u64>().map_err(|_| ApiError::invalid_params("cursor is not one this facilitator gave"))?
        }
    };
    let mut filter = filter(&state, q.kind, q.pay_to, q.scheme, q.network, q.extensions, limit, offset)?;
    // A query without a word (only punctuation) finds nothing.
    let (entries, total) = if found.is_empty() {
        (Vec::new(), 0)
    } else {
        filter.words = found;
        state.store.catalog_list(&filter).await.map_err(ApiError::internal)?
    };
    let next = offset.saturating_add(entries.len() as u64);
    let more = next < total;
    Ok(Json(SearchResults {
        x402_version: 2,
        resources: entries.into_iter().map(Into::into).collect(),
        partial_results: more,
        pagination: CursorPage { limit, cursor: more.then(|| next.to_string()) },
    }))
}

/// One of the caller's own entries.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OwnResource {
    /// `dres_…`.
    pub id: String,
    /// Whether it is out of the lists.
    pub hidden: bool,
    /// When it was first cataloged.
    pub created_at: DateTime<Utc>,
    /// The entry as listed.
    #[serde(flatten)]
    pub resource: DiscoveryResource,
}

/// `GET /discovery/own`.
#[derive(Debug, Serialize, ToSchema)]
pub struct OwnList {
    /// The caller's account's entries, hidden ones too, most recently settled first.
    pub items: Vec<OwnResource>,
}

/// Body of `PATCH /discovery/own/{id}`, and its answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OwnChange {
    /// True: out of the lists (still in yours); false: listed again.
    pub hidden: bool,
}

/// `DELETE /discovery/own/{id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct OwnDeleted {
    /// The entry deleted (a later settlement catalogs it again).
    pub id: String,
    /// Always true.
    pub deleted: bool,
}

/// An id that names no entry is not found, as an unknown one is.
fn own_id(id: &str) -> Result<&str, ApiError> {
    if id.len() <= 64 && id.starts_with("dres_") && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Ok(id)
    } else {
        Err(ApiError::not_found(format!("no catalog entry {id:?} of this account")))
    }
}

/// The caller's account's catalog entries.
#[utoipa::path(get, path = "/discovery/own", tag = "discovery",
    responses(
        (status = 200, body = OwnList),
        (status = 401, description = "UNAUTHORIZED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn own(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
) -> Result<Json<OwnList>, ApiError> {
    let entries = state.store.catalog_of(&caller.account_id).await.map_err(ApiError::internal)?;
    let items = entries
        .into_iter()
        .map(|e| OwnResource { id: e.id.clone(), hidden: e.hidden, created_at: e.created_at, resource: e.into() })
        .collect();
    Ok(Json(OwnList { items }))
}

/// Hides one of the caller's entries from the lists, or lists it again.
#[utoipa::path(patch, path = "/discovery/own/{id}", tag = "discovery",
    params(("id" = String, Path, description = "The entry's id (`dres_…`)")),
    request_body = OwnChange,
    responses(
        (status = 200, body = OwnChange),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 404, description = "NOT_FOUND (unknown, or not the caller's)", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn change(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<OwnChange>,
) -> Result<Json<OwnChange>, ApiError> {
    let id = own_id(&id)?;
    if state.store.catalog_hide(&caller.account_id, id, body.hidden).await.map_err(ApiError::internal)? {
        Ok(Json(body))
    } else {
        Err(ApiError::not_found(format!("no catalog entry {id} of this account")))
    }
}

/// Deletes one of the caller's entries.
#[utoipa::path(delete, path = "/discovery/own/{id}", tag = "discovery",
    params(("id" = String, Path, description = "The entry's id (`dres_…`)")),
    responses(
        (status = 200, body = OwnDeleted),
        (status = 404, description = "NOT_FOUND (unknown, or not the caller's)", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<OwnDeleted>, ApiError> {
    let id = own_id(&id)?;
    if state.store.catalog_delete(&caller.account_id, id).await.map_err(ApiError::internal)? {
        Ok(Json(OwnDeleted { id: id.to_owned(), deleted: true }))
    } else {
        Err(ApiError::not_found(format!("no catalog entry {id} of this account")))
    }
}
