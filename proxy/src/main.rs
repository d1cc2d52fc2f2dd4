//! `tollgate-proxy`: a paying reverse proxy configured in one TOML file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tollgate_proxy::{Proxy, ProxyFile, server};

/// Sell any HTTP service per request: answers 402 with the configured prices, settles through
/// a facilitator, forwards paid requests to the upstream.
#[derive(Debug, Parser)]
#[command(name = "tollgate-proxy", version)]
struct Args {
    /// The configuration file (TOML).
    #[arg(long, short, env = "TOLLGATE_PROXY_CONFIG", default_value = "tollgate-proxy.toml")]
    config: PathBuf,
    /// Check the configuration and exit (0: valid).
    #[arg(long)]
    check: bool,
    /// Seconds in-flight requests get to finish at shutdown.
    #[arg(long, env = "TOLLGATE_PROXY_DRAIN_SECS", default_value_t = 30)]
    drain_secs: u64,
    /// How often the file is checked for changes, in milliseconds.
    #[arg(long, env = "TOLLGATE_PROXY_WATCH_MS", default_value_t = 1_000)]
    watch_ms: u64,
    /// Threads serving connections, each with its own runtime and socket (0: one per CPU, at
    /// most 1,024).
    #[arg(long, env = "TOLLGATE_PROXY_THREADS", default_value_t = 0)]
    threads: usize,
}

/// Reloads, signals and `ops_listen` run here; connections on the threads of
/// [`server::serve_threads`].
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("TOLLGATE_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let file = ProxyFile::read(&args.config)?;
    let metrics = tollgate_proxy::telemetry::install()?;
    let proxy = Arc::new(Proxy::new(&file, Some(metrics))?);
    if args.check {
        println!("{}: valid ({} routes)", args.config.display(), file.routes.len());
        return Ok(());
    }
    let threads = match args.threads {
        0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(server::MAX_THREADS),
        n => n,
    };
    // Everything that can fail to listen does so before anything is served.
    let ops = match file.ops_listen {
        Some(address) => Some(tokio::net::TcpListener::bind(address).await?),
        None => None,
    };
    let stopped = shutdown_signal();
    let serving = server::serve_threads(file.listen, &proxy, threads, Duration::from_secs(args.drain_secs))?;
    tracing::info!(address = %serving.address, upstream = %file.upstream, threads, "tollgate-proxy listening");
    // Printed for scripts and tests that start the proxy on port 0.
    let scheme = if file.tls.is_some() { "https" } else { "http" };
    println!("listening on {scheme}://{}", serving.address);
    if let Some(ops) = ops {
        println!("ops on http://{}", ops.local_addr()?);
        tokio::spawn(server::serve_ops(ops, proxy.clone(), std::future::pending()));
    }
    tokio::spawn(server::watch(proxy.clone(), args.config.clone(), Duration::from_millis(args.watch_ms)));
    stopped.await;
    serving.stop();
    tokio::task::spawn_blocking(move || serving.join()).await?;
    Ok(())
}

/// SIGTERM or Ctrl-C. The handlers are installed when this is called, before the proxy says it
/// listens: a signal sent at once stops it gracefully instead of killing it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    #[cfg(unix)]
    let int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt());
    async move {
        #[cfg(unix)]
        {
            let received = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = received(term.ok()) => {}
                () = received(int.ok()) => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down: no new connections, finishing those in progress");
    }
}
