//! Serving: connections accepted until shutdown, then drained; the configuration reloaded on
//! `SIGHUP` and whenever its file changes.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::config::ProxyFile;
use crate::proxy::Proxy;

/// How long a client may take to send a request's head (slow-header clients are cut off).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `proxy` on `listener` (over TLS when it has `[tls]`) until `shutdown` resolves, then
/// stops accepting and waits up to `drain` for requests in progress (and the settlements they
/// started) to finish.
pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>, shutdown: impl Future<Output = ()>, drain: Duration) {
    let (tls, most) = (proxy.clone(), proxy.max_connections);
    serve_with(
        (listener, most),
        shutdown,
        drain,
        move || tls.tls(),
        move |request, client, scheme| {
            let proxy = proxy.clone();
            async move { proxy.handle(request, client, scheme).await }
        },
    )
    .await;
}

/// Serves only `/healthz`, `/readyz` and `/metrics` of `proxy` on `listener` (`ops_listen`,
/// plain HTTP).
pub async fn serve_ops(listener: TcpListener, proxy: Arc<Proxy>, shutdown: impl Future<Output = ()>) {
    serve_with(
        (listener, 64),
        shutdown,
        Duration::from_secs(1),
        || None,
        move |request, _, _| {
            let proxy = proxy.clone();
            async move {
                match proxy.ops(request.uri().path(), true).await {
                    Some(answer) => answer,
                    None => crate::forward::error(http::StatusCode::NOT_FOUND, "no such path"),
                }
            }
        },
    )
    .await;
}

/// The longest a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

async fn serve_with<T, F, Fut>(
    (listener, most): (TcpListener, usize),
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    tls: T,
    handle: F,
) where
    T: Fn() -> Option<tokio_rustls::TlsAcceptor>,
    F: Fn(http::Request<hyper::body::Incoming>, std::net::SocketAddr, &'static str) -> Fut
        + Clone
        + Send
        + Sync
        + 'static,
    Fut: Future<Output = http::Response<crate::forward::ProxyBody>> + Send + 'static,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    tokio::pin!(shutdown);
    let open = Arc::new(tokio::sync::Semaphore::new(most));
    loop {
        // At most `most` connections: the next is accepted when one closes.
        let permit = tokio::select! {
            permit = open.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, client) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Answers are written whole: no waiting for more to fill a segment.
        let _ = stream.set_nodelay(true);
        let (handle, builder, watcher) = (handle.clone(), builder.clone(), graceful.watcher());
        let acceptor = tls();
        tokio::spawn(async move {
            let _open = permit;
            let scheme = if acceptor.is_some() { "https" } else { "http" };
            let service = hyper::service::service_fn(move |request| {
                let handle = handle.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(request, client, scheme).await) }
            });
            let served = match acceptor {
                None => watcher.watch(builder.serve_connection(TokioIo::new(stream), service)).await,
                Some(acceptor) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => watcher.watch(builder.serve_connection(TokioIo::new(tls), service)).await,
                    Ok(Err(e)) => return tracing::debug!(error = %e, %client, "TLS handshake failed"),
                    Err(_) => return tracing::debug!(%client, "TLS handshake timed out"),
                },
            };
            if let Err(e) = served {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("every connection finished"),
        () = tokio::time::sleep(drain) => tracing::warn!("connections still open after the drain time; stopping"),
    }
}

/// Reloads `proxy` from `path` on `SIGHUP` and when the file's content changes (checked every
/// `every`). An invalid file leaves the routes in force, and says why in the log.
pub async fn watch(proxy: Arc<Proxy>, path: PathBuf, every: Duration) {
    let mut seen = std::fs::read(&path).ok();
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    loop {
        #[cfg(unix)]
        let signalled = async {
            match hangup.as_mut() {
                Some(h) => {
                    h.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let signalled = std::future::pending::<()>();
        let forced = tokio::select! {
            () = signalled => true,
            () = tokio::time::sleep(every) => false,
        };
        let now = std::fs::read(&path).ok();
        if !forced && now == seen {
            continue;
        }
        seen = now;
        match ProxyFile::read(&path).and_then(|file| proxy.reload(&file)) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "configuration reloaded");
                metrics::counter!("tollgate_proxy_reloads_total", "result" => "ok").increment(1);
            }
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "configuration not reloaded; the previous one stays in force");
                metrics::counter!("tollgate_proxy_reloads_total", "result" => "error").increment(1);
            }
        }
    }
}
