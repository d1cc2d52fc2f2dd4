//! Serving: connections accepted until shutdown, then drained; the configuration reloaded on
//! `SIGHUP` and whenever its file changes.

use std::future::Future;
use std::net::SocketAddr;
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
    let (tls, open) = (proxy.clone(), proxy.connections.clone());
    serve_with(
        (listener, open),
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

/// The listening threads of [`serve_threads`].
#[derive(Debug)]
pub struct Serving {
    /// The address listened on (a port 0 asked for is resolved).
    pub address: SocketAddr,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Serving {
    /// Waits until every thread has drained and stopped (blocking: call it off the runtime).
    pub fn join(self) {
        for thread in self.threads {
            if thread.join().is_err() {
                tracing::error!("a serving thread panicked");
            }
        }
    }
}

/// How `tollgate-proxy` serves: `threads` threads, each running a single-threaded runtime with
/// its own socket listening on `address` (`SO_REUSEPORT`: the kernel spreads new connections
/// among them), each serving as [`serve`] does until `shutdown` turns true (or its sender is
/// dropped). A connection, its requests and the upstream connections they are sent on stay on
/// one thread: no task is stolen and no wake-up crosses threads, which costs a proxy more than
/// its own work (`scripts/bench-proxy`). Tasks a thread started (settling an answer whose buyer
/// hung up) keep running until every thread has drained. The `max_connections` bound is shared.
///
/// Must be called within a Tokio runtime (the sockets are made listening there).
///
/// # Errors
/// When `address` cannot be listened on, or a runtime cannot be made.
pub fn serve_threads(
    address: SocketAddr,
    proxy: &Arc<Proxy>,
    threads: usize,
    shutdown: &tokio::sync::watch::Receiver<bool>,
    drain: Duration,
) -> std::io::Result<Serving> {
    let threads = if cfg!(unix) { threads.max(1) } else { 1 };
    let mut address = address;
    let mut ready = Vec::with_capacity(threads);
    // Every socket listens, and every runtime exists, before any thread starts: a failure is
    // the caller's, not a thread's.
    for _ in 0..threads {
        let socket =
            if address.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        #[cfg(unix)]
        if threads > 1 {
            socket.set_reuseport(true)?;
        }
        socket.bind(address)?;
        let listener = socket.listen(1024)?;
        address = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        ready.push((listener.into_std()?, runtime));
    }
    let drained = Arc::new(tokio::sync::Barrier::new(threads));
    let mut handles = Vec::with_capacity(threads);
    for (i, (listener, runtime)) in ready.into_iter().enumerate() {
        let (proxy, mut shutdown, drained) = (proxy.clone(), shutdown.clone(), drained.clone());
        let thread = std::thread::Builder::new().name(format!("proxy-{i}")).spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => {
                        let stop = async move {
                            let _ = shutdown.wait_for(|stop| *stop).await;
                        };
                        serve(listener, proxy, stop, drain).await;
                    }
                    Err(e) => tracing::error!(error = %e, "a serving thread could not listen"),
                }
                // Settlements this runtime runs go on while the other threads drain.
                drained.wait().await;
            });
        })?;
        handles.push(thread);
    }
    Ok(Serving { address, threads: handles })
}

/// Serves only `/healthz`, `/readyz` and `/metrics` of `proxy` on `listener` (`ops_listen`,
/// plain HTTP).
pub async fn serve_ops(listener: TcpListener, proxy: Arc<Proxy>, shutdown: impl Future<Output = ()>) {
    serve_with(
        (listener, Arc::new(tokio::sync::Semaphore::new(64))),
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
    (listener, open): (TcpListener, Arc<tokio::sync::Semaphore>),
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
    loop {
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
        // At most as many connections served as `open` has permits. The permit is awaited
        // after the accept, not before: with several threads, each on its own socket, a thread
        // holding a permit while waiting on an empty socket would strand a connection the
        // kernel queued on another. Meanwhile this thread accepts nothing more, so the
        // connections open number at most the permits plus one per thread.
        let permit = tokio::select! {
            permit = open.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpStream;

    /// An upstream answering every request `ok`, connections kept alive.
    async fn upstream() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let ok = hyper::service::service_fn(|_| async {
                        Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                            bytes::Bytes::from_static(b"ok"),
                        )))
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), ok).await;
                });
            }
        });
        address
    }

    /// Sends `GET /free` on `stream` and reads the answer (`None`: none within `wait`).
    async fn get(stream: &mut TcpStream, wait: Duration) -> Option<String> {
        stream.write_all(b"GET /free HTTP/1.1\r\nHost: shop.example\r\n\r\n").await.unwrap();
        let read = async {
            let mut answer = Vec::new();
            let mut buffer = [0u8; 1024];
            while !answer.ends_with(b"\r\n\r\nok") {
                let n = stream.read(&mut buffer).await.unwrap();
                assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&answer));
                answer.extend_from_slice(&buffer[..n]);
            }
            String::from_utf8(answer).unwrap()
        };
        tokio::time::timeout(wait, read).await.ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serving_threads_share_the_connection_bound_and_stop_together() {
        let file = ProxyFile::parse(&format!(
            "listen = \"127.0.0.1:0\"\nupstream = \"http://{}\"\nmax_connections = 2\n\
             [facilitator]\nurl = \"http://127.0.0.1:9\"\n\
             [[route]]\nname = \"free\"\npath = \"/free\"\nfree = true\n",
            upstream().await
        ))
        .unwrap();
        let proxy = Arc::new(Proxy::new(&file, None).unwrap());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let serving = serve_threads(file.listen, &proxy, 3, &stopped, Duration::from_secs(5)).unwrap();
        let address = serving.address;
        assert_ne!(address.port(), 0);
        let long = Duration::from_secs(10);

        // Two connections, whichever threads took them, use the two permits of all three.
        let mut first = TcpStream::connect(address).await.unwrap();
        let mut second = TcpStream::connect(address).await.unwrap();
        for stream in [&mut first, &mut second] {
            let answer = get(stream, long).await.expect("answered");
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
        assert_eq!(proxy.connections.available_permits(), 0);
        let mut third = TcpStream::connect(address).await.unwrap();
        assert_eq!(get(&mut third, Duration::from_millis(300)).await, None, "a third connection waits");
        drop(first);
        let answer = get(&mut third, long).await.expect("answered once a connection closed");
        assert!(answer.ends_with("ok"), "{answer}");

        stop.send(true).unwrap();
        tokio::time::timeout(long, tokio::task::spawn_blocking(move || serving.join())).await.unwrap().unwrap();
        assert!(TcpStream::connect(address).await.is_err(), "no socket listens after the stop");
    }
}
