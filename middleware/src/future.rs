//! [`ResponseFuture`]: the future [`crate::PaymentService`] returns.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

use crate::body::PaymentBody;

type Inner<E> = Pin<Box<dyn Future<Output = Result<Response<PaymentBody>, E>> + Send>>;

/// Resolves to the handler's answer, or to the layer's own (402, 400, 502/504, 503).
pub struct ResponseFuture<E> {
    inner: Inner<E>,
}

impl<E> ResponseFuture<E> {
    pub(crate) fn new(inner: Inner<E>) -> Self {
        Self { inner }
    }
}

impl<E> std::fmt::Debug for ResponseFuture<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<E> Future for ResponseFuture<E> {
    type Output = Result<Response<PaymentBody>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}
