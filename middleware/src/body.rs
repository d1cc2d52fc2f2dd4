//! The layer's bodies: [`PaymentBody`], the answer it gives (the inner service's, or one it built
//! or held), and [`RequestBody`], a request body the layer can read and hand on (for servers
//! whose own body type cannot be made from bytes, such as hyper's `Incoming`).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;

use crate::answer::Counted;

/// Errors of response bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Response body of [`crate::PaymentService`].
pub struct PaymentBody {
    inner: UnsyncBoxBody<Bytes, BoxError>,
    /// A paid answer's count, given back if the body is dropped before its first frame went out.
    counted: Option<Counted>,
}

impl std::fmt::Debug for PaymentBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentBody").finish_non_exhaustive()
    }
}

impl PaymentBody {
    /// A body held in memory.
    pub(crate) fn full(bytes: Bytes) -> Self {
        Self { inner: http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed_unsync(), counted: None }
    }

    /// The inner service's body, streamed as it is.
    pub(crate) fn stream<B>(body: B) -> Self
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        Self { inner: body.map_err(Into::into).boxed_unsync(), counted: None }
    }

    /// The same body, carrying the count of the answer it is: the answer is the buyer's once its
    /// first frame (or its end, for an empty one) is taken by the server; dropped before that —
    /// the buyer hung up — the answer is given back.
    pub(crate) fn counting(mut self, counted: Option<Counted>) -> Self {
        self.counted = counted;
        self
    }
}

impl Body for PaymentBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Ok(_))))
            && let Some(counted) = self.counted.take()
        {
            counted.delivered();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        // An answer still counted is polled once, so that its delivery is seen.
        self.counted.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body the layer can read and hand on again: any body, or bytes. The layer reads a
/// paid request's body (when small, see [`crate::PaymentLayerBuilder::request_digest_limit`]) to
/// tell a repeat of it from another request, then gives the handler the same bytes; a server
/// whose body type cannot be made from bytes wraps it in this one first:
///
/// ```
/// # use tollgate::body::RequestBody;
/// let request: http::Request<http_body_util::Empty<bytes::Bytes>> = http::Request::new(Default::default());
/// let request = request.map(RequestBody::new);
/// # let _ = request;
/// ```
pub struct RequestBody(UnsyncBoxBody<Bytes, BoxError>);

impl RequestBody {
    /// Wraps any body whose data are bytes.
    pub fn new<B>(body: B) -> Self
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        Self(body.map_err(Into::into).boxed_unsync())
    }
}

impl From<Bytes> for RequestBody {
    fn from(bytes: Bytes) -> Self {
        Self(http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed_unsync())
    }
}

impl Default for RequestBody {
    fn default() -> Self {
        Self::from(Bytes::new())
    }
}

impl std::fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestBody").finish_non_exhaustive()
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.0).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}
