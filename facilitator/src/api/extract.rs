//! Extractors whose rejections are API errors.
//!
//! axum's own `Json`, `Path` and `Query` answer malformed input with plain text; these answer
//! `400 INVALID_PARAMETERS` in the error envelope, naming the offending field.

use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use bytes::Bytes;
use http::request::Parts;
use serde::de::DeserializeOwned;

use crate::api::error::ApiError;

/// A JSON body, read exactly (amounts keep their digits) and with field-level errors.
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| match e {
            BytesRejection::FailedToBufferBody(_) => {
                ApiError::invalid_params(format!("request body could not be read: {}", e.body_text()))
            }
            other => ApiError::invalid_params(other.body_text()),
        })?;
        parse_json(&bytes).map(Self)
    }
}

/// Parses a JSON document into `T`, naming the field at fault.
///
/// # Errors
/// 400 `INVALID_PARAMETERS`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::invalid_params("request body must be a JSON object"));
    }
    // Nearly every body is valid: read once without tracking the path (which copies every key),
    // and read again with it only to name what is wrong.
    if let Ok(value) = serde_json::from_slice(bytes) {
        return Ok(value);
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::invalid_params(format!("malformed JSON: {inner}"))
        } else if path == "." {
            ApiError::invalid_params(format!("invalid request: {inner}"))
        } else {
            ApiError::invalid_params(format!("invalid field `{path}`: {inner}"))
        }
    })?;
    de.end().map_err(|e| ApiError::invalid_params(format!("malformed JSON: {e}")))?;
    Ok(value)
}

/// Path parameters.
#[derive(Debug, Clone)]
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| Self(v))
            .map_err(|e| ApiError::invalid_params(format!("invalid path parameter: {}", e.body_text())))
    }
}

/// Query parameters.
#[derive(Debug, Clone)]
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state).await.map(|Query(v)| Self(v)).map_err(|e| {
            ApiError::invalid_params(format!(
                "invalid query: {}",
                e.body_text().trim_start_matches("Failed to deserialize query string: ")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_protocol::ErrorCode;
    use tollgate_protocol::gateway::SendPaymentRequest;

    #[test]
    fn json_errors_name_the_field() {
        let e = parse_json::<SendPaymentRequest>(br#"{"walletAddress": "a", "recipientAddress": "b", "amount": "1"}"#)
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidParameters);
        assert!(e.message().contains("amount"), "{}", e.message());
        let e = parse_json::<SendPaymentRequest>(br#"{"walletAddress": 1}"#).unwrap_err();
        assert!(e.message().contains("walletAddress"), "{}", e.message());
        let e = parse_json::<SendPaymentRequest>(b"{not json").unwrap_err();
        assert!(e.message().starts_with("malformed JSON"), "{}", e.message());
        let e =
            parse_json::<SendPaymentRequest>(br#"{"walletAddress":"a","recipientAddress":"b","amount":1} trailing"#)
                .unwrap_err();
        assert!(e.message().starts_with("malformed JSON"), "{}", e.message());
        let ok =
            parse_json::<SendPaymentRequest>(br#"{"walletAddress":"a","recipientAddress":"b","amount":0.1}"#).unwrap();
        assert_eq!(ok.amount.to_atomic(9).unwrap().get(), 100_000_000);
    }
}
