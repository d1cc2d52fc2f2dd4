//! The layer's response body: the inner service's body, or one the layer built or buffered.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;

/// Errors of response bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Response body of [`crate::PaymentService`].
pub struct PaymentBody(UnsyncBoxBody<Bytes, BoxError>);

impl std::fmt::Debug for PaymentBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentBody").finish_non_exhaustive()
    }
}

impl PaymentBody {
    /// A body held in memory.
    pub(crate) fn full(bytes: Bytes) -> Self {
        Self(http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed_unsync())
    }

    /// The inner service's body, streamed as it is.
    pub(crate) fn stream<B>(body: B) -> Self
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        Self(body.map_err(Into::into).boxed_unsync())
    }
}

impl Body for PaymentBody {
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
