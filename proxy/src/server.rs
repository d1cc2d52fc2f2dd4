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
/// stops accepting and waits up to `drain` for requests in progress, and the settlements they
/// started that outlive them (a buyer who hung up), to finish.
pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>, shutdown: impl Future<Output = ()>, drain: Duration) {
    let (tls, open, tasks) = (proxy.clone(), proxy.connections.clone(), proxy.tasks.clone());
    let deadline = serve_with(
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
    // The money that moved is recorded, and what was served is settled, before the runtime
    // (which would cancel them) stops.
    tasks.close();
    if tokio::time::timeout_at(deadline, tasks.wait()).await.is_err() {
        tracing::error!(running = tasks.len(), "settlements still running after the drain time; stopping them");
    }
}

/// The most serving threads (each costs a runtime, a socket and a few descriptors).
pub const MAX_THREADS: usize = 1024;

/// The serving threads of [`serve_threads`].
#[derive(Debug)]
pub struct Serving {
    /// The address listened on (a port 0 asked for is resolved).
    pub address: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Serving {
    /// Stops accepting on every thread; each drains as [`serve`] does.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Waits until every thread has drained and stopped (blocking: call it off the runtime).
    pub fn join(self) {
        for thread in self.threads {
            if thread.join().is_err() {
                tracing::error!("a serving thread panicked");
            }
        }
    }
}

/// How `tollgate-proxy` serves: `threads` threads (at most [`MAX_THREADS`]), each running a
/// single-threaded runtime with its own socket listening on `address` (`SO_REUSEPORT`: Linux
/// spreads new connections among them by their addresses), each serving as [`serve`] does
/// until [`Serving::stop`]. A connection, its requests and the upstream connections they are
/// sent on stay on one thread: no task is stolen and no wake-up crosses threads, which costs a
/// proxy more than its own work (`scripts/bench-proxy`). A thread never takes another's
/// connections: a few long-lived connections may all land on one. Every runtime runs until
/// every thread has drained (a settlement on one may use a connection another made). The
/// `max_connections` bound is shared. Other systems than Linux get one thread.
///
/// Must be called within a Tokio runtime (the sockets are made listening there).
///
/// # Errors
/// When `address` is in use (also by sockets that would share it), cannot be listened on, or a
/// thread or its runtime cannot be made; then nothing is left serving.
pub fn serve_threads(
    address: SocketAddr,
    proxy: &Arc<Proxy>,
    threads: usize,
    drain: Duration,
) -> std::io::Result<Serving> {
    if !(1..=MAX_THREADS).contains(&threads) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{threads} serving threads: from 1 to {MAX_THREADS}"),
        ));
    }
    let threads = if cfg!(target_os = "linux") { threads } else { 1 };
    let listeners = listen_shared(address, threads)?;
    let address = listeners.first().map_or(Ok(address), std::net::TcpListener::local_addr)?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (ready, readies) = std::sync::mpsc::channel::<std::io::Result<()>>();
    let mut started = Vec::with_capacity(threads);
    let mut failed = None;
    for (i, listener) in listeners.into_iter().enumerate() {
        let (go, gone) = std::sync::mpsc::sync_channel::<Option<Arc<tokio::sync::Barrier>>>(1);
        let (proxy, mut stopped, ready) = (proxy.clone(), stopped.clone(), ready.clone());
        // The runtime is made, and dropped, on its own thread (never within the caller's).
        let spawned = std::thread::Builder::new().name(format!("proxy-{i}")).spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => return drop(ready.send(Err(e))),
            };
            let listener = {
                let _inside = runtime.enter();
                match TcpListener::from_std(listener) {
                    Ok(listener) => listener,
                    Err(e) => return drop(ready.send(Err(e))),
                }
            };
            if ready.send(Ok(())).is_err() {
                return;
            }
            // Served only once every thread is ready.
            let Ok(Some(drained)) = gone.recv() else { return };
            runtime.block_on(async move {
                let stop = async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                };
                serve(listener, proxy, stop, drain).await;
                // This runtime keeps running what it holds while the other threads drain.
                drained.wait().await;
            });
        });
        match spawned {
            Ok(thread) => started.push((thread, go)),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    drop(ready);
    for _ in 0..started.len() {
        match readies.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                failed.get_or_insert(e);
            }
            Err(_) => {
                failed.get_or_insert_with(|| std::io::Error::other("a serving thread ended before it was ready"));
            }
        }
    }
    let drained = Arc::new(tokio::sync::Barrier::new(started.len()));
    let mut handles = Vec::with_capacity(started.len());
    for (thread, go) in started {
        let _ = go.send(failed.is_none().then(|| drained.clone()));
        handles.push(thread);
    }
    if let Some(e) = failed {
        for thread in handles {
            let _ = thread.join();
        }
        return Err(e);
    }
    Ok(Serving { address, stop, threads: handles })
}

/// `count` sockets listening on `address`, sharing it with `SO_REUSEPORT` when more than one;
/// a port 0 is resolved by the first and taken by the others. An address in use is refused
/// before any socket is made to share it (another proxy listening there with sockets that share
/// would otherwise silently get half of the connections).
fn listen_shared(address: SocketAddr, count: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    let socket = |reuse_port: bool| -> std::io::Result<tokio::net::TcpSocket> {
        let socket =
            if address.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        #[cfg(unix)]
        if reuse_port {
            socket.set_reuseport(true)?;
        }
        #[cfg(not(unix))]
        let _ = reuse_port;
        Ok(socket)
    };
    if count > 1 && address.port() != 0 {
        // Bound without sharing, then released: fails while anything listens there.
        socket(false)?.bind(address)?;
    }
    let mut listeners = Vec::with_capacity(count);
    let mut address = address;
    for _ in 0..count {
        let socket = socket(count > 1)?;
        socket.bind(address)?;
        let listener = socket.listen(1024)?;
        address = listener.local_addr()?;
        listeners.push(listener.into_std()?);
    }
    Ok(listeners)
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
) -> tokio::time::Instant
where
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
    let deadline = tokio::time::Instant::now() + drain;
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("every connection finished"),
        () = tokio::time::sleep_until(deadline) => tracing::warn!("connections still open after the drain time; stopping"),
    }
    deadline
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

    /// An x402 facilitator that accepts every proof and holds each `/settle` until `release`;
    /// `arrived` is told when one comes.
    async fn holding_facilitator(
        arrived: tokio::sync::mpsc::UnboundedSender<()>,
        release: Arc<tokio::sync::Notify>,
    ) -> SocketAddr {
        use axum::routing::{get, post};
        let settle = move |axum::Json(body): axum::Json<serde_json::Value>| async move {
            let _ = arrived.send(());
            release.notified().await;
            let network = body["paymentRequirements"]["network"].clone();
            axum::Json(serde_json::json!({"success": true, "payer": "p", "transaction": "t", "network": network}))
        };
        let app = axum::Router::new()
            .route("/verify", post(|| async { axum::Json(serde_json::json!({"isValid": true, "payer": "p"})) }))
            .route("/settle", post(settle))
            .route("/supported", get(|| async { axum::Json(serde_json::json!({"kinds": []})) }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        address
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_waits_for_the_settlement_of_a_buyer_who_hung_up() {
        let (arrived, mut settling) = tokio::sync::mpsc::unbounded_channel();
        let release = Arc::new(tokio::sync::Notify::new());
        let facilitator = holding_facilitator(arrived, release.clone()).await;
        let network = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
        let file = ProxyFile::parse(&format!(
            "listen = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\
             [facilitator]\nurl = \"http://{facilitator}\"\n\
             [[route]]\nname = \"paid\"\npath = \"/free\"\nsettle = \"after\"\n\
             [[route.accept]]\nasset = \"SOL\"\namount = \"0.001\"\nnetwork = \"{network}\"\n\
             pay_to = \"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin\"\n",
            upstream().await
        ))
        .unwrap();
        let proxy = Arc::new(Proxy::new(&file, None).unwrap());
        let serving = serve_threads(file.listen, &proxy, 2, Duration::from_secs(10)).unwrap();
        let proof = tollgate::protocol::x402::header::encode(&serde_json::json!({
            "x402Version": 1, "scheme": "exact-native", "network": network, "payload": {"transaction": "dGVzdA=="}
        }))
        .unwrap();

        // Served, and its settlement under way at the facilitator when the buyer hangs up.
        let mut buyer = TcpStream::connect(serving.address).await.unwrap();
        let request = format!("GET /free HTTP/1.1\r\nHost: shop.example\r\nX-PAYMENT: {proof}\r\n\r\n");
        buyer.write_all(request.as_bytes()).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), settling.recv()).await.unwrap().unwrap();
        drop(buyer);

        serving.stop();
        let stopped = tokio::task::spawn_blocking(move || serving.join());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!stopped.is_finished(), "stopped with a settlement under way");
        release.notify_one();
        tokio::time::timeout(Duration::from_secs(10), stopped).await.unwrap().unwrap();
        assert!(proxy.tasks.is_empty(), "the settlement ran to its end");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_address_in_use_is_refused_even_by_sockets_that_would_share_it() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = taken.local_addr().unwrap();
        let e = listen_shared(address, 3).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
        drop(taken);
        let shared = listen_shared(address, 3).unwrap();
        assert_eq!(shared.len(), 3);
        // A second group on the same address: refused, not half of the connections.
        assert_eq!(listen_shared(address, 2).unwrap_err().kind(), std::io::ErrorKind::AddrInUse);
        assert_eq!(listen_shared(address, 1).unwrap_err().kind(), std::io::ErrorKind::AddrInUse);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn thread_counts_out_of_bounds_are_refused_not_attempted() {
        let file = ProxyFile::parse(
            "listen = \"127.0.0.1:0\"\nupstream = \"http://127.0.0.1:9\"\n[facilitator]\nurl = \"http://127.0.0.1:9\"\n",
        )
        .unwrap();
        let proxy = Arc::new(Proxy::new(&file, None).unwrap());
        for threads in [0, MAX_THREADS + 1, usize::MAX] {
            let e = serve_threads(file.listen, &proxy, threads, Duration::from_secs(1)).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{threads}");
        }
        let huge = ProxyFile { max_connections: usize::MAX, ..file };
        assert!(matches!(Proxy::new(&huge, None), Err(crate::config::ConfigError::Invalid(_))));
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
        let serving = serve_threads(file.listen, &proxy, 3, Duration::from_secs(5)).unwrap();
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

        serving.stop();
        tokio::time::timeout(long, tokio::task::spawn_blocking(move || serving.join())).await.unwrap().unwrap();
        assert!(TcpStream::connect(address).await.is_err(), "no socket listens after the stop");
    }
}
