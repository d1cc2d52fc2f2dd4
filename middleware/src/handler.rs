//! Running a paid request's handler: the [`Payment`] in its extensions, its answer held in
//! memory with the [`Charge`] it reported.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::BodyExt as _;
use tower::Service;

use crate::body::BoxError;
use crate::challenge::Buffered;
use crate::charge::Charge;
use crate::config::Config;
use crate::facilitator::Payment;

/// Runs the handler with `payment` in the request's extensions and holds its answer in memory
/// (so requests waiting on the same proof can share it), with the [`Charge`] it reported;
/// `None` when the body fails or is over the configured size.
pub(crate) async fn run_buffered<S, ReqBody, ResBody>(
    config: &Config,
    inner: S,
    request: Request<ReqBody>,
    payment: Payment,
) -> Result<Option<(Buffered, Option<Charge>)>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let (head, body) = run_handler(inner, request, payment).await?;
    Ok(hold(config, head, body).await)
}

/// Runs the handler with `payment` in the request's extensions: its answer's head and body.
pub(crate) async fn run_handler<S, ReqBody, ResBody>(
    mut inner: S,
    mut request: Request<ReqBody>,
    payment: Payment,
) -> Result<(http::response::Parts, ResBody), S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send,
{
    request.extensions_mut().insert(payment);
    Ok(inner.call(request).await?.into_parts())
}

/// A handler's answer held in memory, with the [`Charge`] it reported; `None` when the body
/// fails or is over the configured size.
pub(crate) async fn hold<B>(config: &Config, head: http::response::Parts, body: B) -> Option<(Buffered, Option<Charge>)>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let charge = head.extensions.get::<Charge>().copied();
    match http_body_util::Limited::new(body, config.max_buffered_body).collect().await {
        Ok(collected) => {
            Some((Buffered { status: head.status, headers: head.headers, body: collected.to_bytes() }, charge))
        }
        Err(e) => {
            tracing::warn!(error = %e, "the paid response could not be read");
            None
        }
    }
}
