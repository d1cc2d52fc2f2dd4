//! `GET /token/info/{mintAddress}`: SPL / Token-2022 mints and ERC-20 contracts.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use tollgate_protocol::Network;
use tollgate_protocol::gateway::TokenInfo;

use crate::api::error::ApiError;
use crate::api::extract::{ApiPath, ApiQuery};
use crate::api::validate;
use crate::app::AppState;
use crate::chains::Unserved;

/// Query of the token lookup.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TokenQuery {
    /// CAIP-2 chain within the address family; default: the configured one.
    #[param(value_type = Option<String>)]
    pub network: Option<Network>,
}

/// Decimals, supply, authorities and (when published) name and symbol of a token.
#[utoipa::path(get, path = "/token/info/{mintAddress}", tag = "tokens",
    params(("mintAddress" = String, Path, description = "SPL mint or ERC-20 contract address"), TokenQuery),
    responses(
        (status = 200, body = TokenInfo),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 404, description = "NOT_FOUND: no such token", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn info(
    State(state): State<AppState>,
    ApiPath(mint): ApiPath<String>,
    ApiQuery(query): ApiQuery<TokenQuery>,
) -> Result<Json<TokenInfo>, ApiError> {
    let address = validate::address("mintAddress", &mint)?;
    let network = state.chains.network_for(address.family(), query.network.as_ref()).map_err(|e| match e {
        // An address of one family is no token on a network of the other: not found there.
        Unserved::WrongFamily { network, family } => {
            ApiError::not_found(format!("{address} is a {family} address: no token on {network}"))
        }
        other => other.into(),
    })?;
    let chain = state.chains.get(&network)?;
    let found = chain.token_info(&address).await.map_err(|e| ApiError::verification_failed(e.to_string()))?;
    found.map(Json).ok_or_else(|| ApiError::not_found(format!("{address} is not a token on {network}")))
}
