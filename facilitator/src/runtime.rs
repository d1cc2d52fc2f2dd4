//! The application running: serving a router on a listener ([`run`]) beside its background
//! loops — the reconciler, the idempotency purge, the webhook sender and, on PostgreSQL, the
//! follower of the database's announcements — until shutdown ([`shutdown_signal`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::AppState;
use crate::auth::Authenticator;
use crate::events::EventBus;
use crate::store::{Announcement, Announcements, Store};
use crate::{api, settlement, webhooks};

/// Serves the API on `listener` until `shutdown` completes, then lets in-flight requests finish
/// (for at most [`api::SHUTDOWN_GRACE`]).
///
/// # Errors
/// When accepting connections fails.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let purge = tokio::spawn(purge_idempotency_keys(state.clone(), stop_rx.clone()));
    let reconciler = tokio::spawn(reconcile_periodically(state.clone(), stop_rx.clone()));
    // The webhook outbox: every instance sends; claims keep them off each other's rows.
    let webhooks = match webhooks::Sender::new(
        state.store.clone(),
        state.master_key.clone(),
        state.config.webhooks.clone(),
        state.clock.clone(),
    ) {
        Ok(sender) => Some(tokio::spawn(webhooks::send_periodically(sender, stop_rx.clone()))),
        Err(e) => {
            tracing::error!(error = %e, "webhooks will not be sent");
            None
        }
    };
    // PostgreSQL: changes made on every instance reach this one's WebSocket feed and key cache.
    // Listening starts before the first connection is accepted.
    let follow = if state.store.announces_changes() {
        let first = match state.store.listen().await {
            Ok(first) => first,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen to the database's announcements yet; retrying");
                None
            }
        };
        Some(tokio::spawn(follow_announcements(
            state.store.clone(),
            state.events.clone(),
            state.auth.clone(),
            stop_rx.clone(),
            first,
        )))
    } else {
        None
    };
    let app = api::router(state);
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.await;
        tracing::info!("shutting down: finishing in-flight requests");
        let _ = stop_tx.send(true);
    });
    let server = tokio::spawn(server.into_future());
    // Wait for the server; once shutdown began, give it the grace period at most.
    let result = tokio::select! {
        r = server => r,
        () = async {
            let _ = stop_rx.wait_for(|stopped| *stopped).await;
            tokio::time::sleep(api::SHUTDOWN_GRACE).await;
        } => {
            tracing::warn!("grace period over: dropping remaining connections");
            Ok(Ok(()))
        }
    };
    purge.abort();
    reconciler.abort();
    if let Some(webhooks) = webhooks {
        webhooks.abort();
    }
    if let Some(follow) = follow {
        follow.abort();
    }
    result.unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

/// How often unfinished payments are checked against the chain.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(5);

/// Finishes what a previous run left open and what slow chains leave open, in the background
/// (the server does not wait for it): at start-up every unfinished payment is made due at once,
/// then a pass runs every [`RECONCILE_EVERY`], the first one right away.
async fn reconcile_periodically(state: AppState, mut stop: tokio::sync::watch::Receiver<bool>) {
    match state.store.bring_checks_forward(state.clock.now()).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(payments = n, "looking at payments a previous run left unfinished"),
        Err(e) => tracing::warn!(error = %e, "could not reschedule unfinished payments at start-up"),
    }
    let mut every = tokio::time::interval(RECONCILE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.changed() => return,
        }
        match settlement::reconcile::reconcile_once(&*state.store, &*state.clock, &state.chains).await {
            Ok(r) if r.examined > 0 => {
                tracing::info!(examined = r.examined, finished = r.finished, "reconciled unfinished payments");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "reconciliation pass failed"),
        }
    }
}

/// Deletes idempotency records past their retention, announcements read long ago and catalog
/// entries aged out, hourly.
async fn purge_idempotency_keys(state: AppState, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut every = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.changed() => return,
        }
        let ttl = chrono::Duration::seconds(
            i64::try_from(state.config.limits.idempotency_ttl_secs).unwrap_or(i64::MAX / 1000),
        );
        match state.store.idempotency_purge(state.clock.now() - ttl).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "purged expired idempotency keys"),
            Err(e) => tracing::warn!(error = %e, "could not purge idempotency keys"),
        }
        // Announced changes are read within moments; an hour is ample.
        match state.store.purge_announcements(state.clock.now() - chrono::Duration::hours(1)).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "purged announced payment changes"),
            Err(e) => tracing::warn!(error = %e, "could not purge announced payment changes"),
        }
        // Catalog entries no longer listed (not settled for `[discovery] max_age_days`).
        let max_age = chrono::Duration::days(i64::from(state.config.discovery.max_age_days));
        match state.store.catalog_purge((state.clock.now() - max_age).timestamp_millis()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "purged discovery entries not settled for max_age_days"),
            Err(e) => tracing::warn!(error = %e, "could not purge discovery entries"),
        }
    }
}

/// Completes on SIGTERM or ctrl-c (SIGINT).
///
/// The handlers are installed when this is called, not when it is first awaited: call it before
/// saying the process is ready, so that a signal sent at once stops it gracefully instead of
/// killing it.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &'static str| {
            signal(kind).inspect_err(|e| tracing::error!(error = %e, "cannot listen for {name}")).ok()
        };
        let (terminate, interrupt) =
            (listen(SignalKind::terminate(), "SIGTERM"), listen(SignalKind::interrupt(), "ctrl-c"));
        let received = |s: Option<tokio::signal::unix::Signal>| async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        async move {
            tokio::select! {
                () = received(terminate) => {}
                () = received(interrupt) => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    }
}

/// Publishes what the database announces on this instance's bus, and drops cached keys when one
/// is deleted anywhere, until `stop` changes. `first` is a stream opened already (before the
/// server accepted its first connection, so nothing a client could see is missed); without one,
/// or once it fails, it listens anew (waiting a little longer each time, at most
/// [`RELISTEN_MAX`]); a lost connection is a gap (see the module's notes).
pub async fn follow_announcements(
    store: Arc<dyn Store>,
    bus: EventBus,
    auth: Arc<Authenticator>,
    mut stop: watch::Receiver<bool>,
    mut first: Option<Box<dyn Announcements>>,
) {
    let mut delay = std::time::Duration::from_millis(100);
    loop {
        let listening = match first.take() {
            Some(opened) => Ok(Some(opened)),
            None => tokio::select! {
                l = store.listen() => l,
                _ = stop.changed() => return,
            },
        };
        let mut announcements = match listening {
            Ok(Some(a)) => a,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen to the database's announcements yet; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stop.changed() => return,
                }
                delay = (delay * 2).min(RELISTEN_MAX);
                continue;
            }
        };
        delay = std::time::Duration::from_millis(100);
        // Whatever happened before listening began (or while it was down) is unknown here.
        auth.forget_cached_keys();
        loop {
            let next = tokio::select! {
                n = announcements.next() => n,
                _ = stop.changed() => return,
            };
            match next {
                Ok(Announcement::Payment(notice)) => bus.publish_notice(notice),
                Ok(Announcement::KeyDeleted(key_id)) => {
                    tracing::info!(%key_id, "API key deleted: cached keys dropped, its connections closed");
                    auth.forget_cached_keys();
                    bus.revoke(&key_id);
                }
                Ok(Announcement::Gap) => {
                    tracing::warn!("lost the database's announcements for a moment: followers must resubscribe");
                    auth.forget_cached_keys();
                    bus.gap();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading the database's announcements failed; listening again");
                    auth.forget_cached_keys();
                    bus.gap();
                    break;
                }
            }
        }
    }
}

/// Longest wait between two attempts to listen to the database.
pub const RELISTEN_MAX: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use tollgate_protocol::gateway::PaymentStatus;

    use super::*;
    use crate::auth::rate_limit::InMemoryRateLimiter;
    use crate::plans::Plans;
    use crate::store::{PaymentNotice, PaymentRoute, SqlStore, StoreResult};

    /// Announcements the test sends one by one.
    struct Scripted(tokio::sync::mpsc::UnboundedReceiver<Announcement>);

    #[async_trait]
    impl Announcements for Scripted {
        async fn next(&mut self) -> StoreResult<Announcement> {
            match self.0.recv().await {
                Some(next) => Ok(next),
                None => std::future::pending().await,
            }
        }
    }

    fn notice(status: PaymentStatus) -> PaymentNotice {
        PaymentNotice {
            route: PaymentRoute {
                payment_id: "pay_1".into(),
                owner_account: "acct".into(),
                counterparty_account: None,
                wallets: ["f".into(), "t".into()],
                status,
            },
            message: format!("{{\"status\":\"{}\"}}", status.as_str()),
        }
    }

    #[tokio::test]
    async fn announcements_reach_the_bus_in_order_and_deletions_and_gaps_drop_cached_keys() {
        let dir = tempfile::tempdir().unwrap();
        let url = crate::config::DatabaseUrl::parse(dir.path().join("t.db").to_str().unwrap()).unwrap();
        let store: Arc<dyn Store> = Arc::new(SqlStore::connect(&url).await.unwrap());
        let auth = Arc::new(crate::auth::Authenticator::new(
            store.clone(),
            Plans::default(),
            Arc::new(InMemoryRateLimiter::new()),
            Arc::new(crate::clock::SystemClock),
            std::time::Duration::from_secs(600),
        ));
        let cache_a_verdict = || async {
            // An unknown key: its verdict is cached too.
            let _ = auth.authenticate_key(&format!("tg_test_{}", "1".repeat(40))).await;
            auth.cache_sync();
            assert_eq!(auth.cached_keys(), 1);
        };
        let bus = EventBus::default();
        let mut events = bus.subscribe();
        let mut gaps = bus.subscribe_gaps();
        let (script, announcements) = tokio::sync::mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = watch::channel(false);
        let follower = tokio::spawn(follow_announcements(
            store,
            bus.clone(),
            auth.clone(),
            stop_rx,
            Some(Box::new(Scripted(announcements))),
        ));
        script.send(Announcement::Payment(notice(PaymentStatus::Submitted))).unwrap();
        script.send(Announcement::Payment(notice(PaymentStatus::Confirmed))).unwrap();
        assert_eq!(events.recv().await.unwrap().route.status, PaymentStatus::Submitted);
        assert_eq!(events.recv().await.unwrap().route.status, PaymentStatus::Confirmed);

        cache_a_verdict().await;
        script.send(Announcement::KeyDeleted("key_1".into())).unwrap();
        script.send(Announcement::Payment(notice(PaymentStatus::Failed))).unwrap();
        assert_eq!(events.recv().await.unwrap().route.status, PaymentStatus::Failed, "in order after the deletion");
        auth.cache_sync();
        assert_eq!(auth.cached_keys(), 0, "a deletion anywhere drops the cached verdicts");

        cache_a_verdict().await;
        script.send(Announcement::Gap).unwrap();
        gaps.changed().await.unwrap();
        assert_eq!(*gaps.borrow(), 1, "followers told once");
        auth.cache_sync();
        assert_eq!(auth.cached_keys(), 0, "a gap drops the cached verdicts");
        stop_tx.send(true).unwrap();
        follower.await.unwrap();
    }
}
