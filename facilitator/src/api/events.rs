//! `GET /ws`: live payment events over WebSocket.
//!
//! Authentication (`Authorization: Bearer` or `?api-key=`) and the plan check happen in the route
//! guard, before any upgrade: a refused caller gets the usual JSON error, never a socket.
//!
//! The client sends `{"method": "subscribeWallet" | "subscribePayment" | "unsubscribeWallet" |
//! "unsubscribePayment", "keys": [...]}`. The server answers `{"event": "subscribed" |
//! "unsubscribed", "method", "keys"}`, then sends `{"event": "payment.updated", "payment": <record>}`
//! for every change of a followed wallet's or payment's payments that the caller's account owns,
//! and `{"event": "error", "code", "message"}` for a message it cannot accept (the connection stays
//! up). A wallet that is another account's custodial wallet, and a payment the account cannot see,
//! are refused. `subscribePayment` is followed by each payment's current state (as a
//! `payment.updated` event), so a change made just before subscribing is not missed.
//!
//! Bounds: `[limits] ws_max_subscriptions` per connection, `ws_max_message_bytes` per message,
//! [`WS_MESSAGES_PER_SECOND`](crate::auth::WS_MESSAGES_PER_SECOND) messages a second for all of a key's connections (counted by the
//! shared rate limiter, so on every instance together),
//! a ping every `ws_ping_secs` (a client silent for three of them is closed), a send that takes
//! more than [`SEND_TIMEOUT`] closes the connection, and a client that falls behind the event bus
//! (see [`crate::events`]) is closed with the reason instead of being buffered for.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tollgate_protocol::ErrorCode;

use crate::api::error::ApiError;
use crate::app::AppState;
use crate::auth::{Caller, WS_MESSAGES_PER_SECOND};
use crate::events::PaymentEvent;

/// Bytes read from a client's socket at a time.
const READ_BUFFER: usize = 4 * 1024;

/// Longest a single send to a client may take before the connection is closed.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Live payment events over WebSocket.
#[utoipa::path(get, path = "/ws", tag = "events",
    params(("api-key" = Option<String>, Query, description = "API key, for clients that cannot set headers")),
    responses(
        (status = 101, description = "Upgraded: send subscribe messages, receive `payment.updated` events"),
        (status = 400, description = "INVALID_PARAMETERS: not a WebSocket upgrade", body = tollgate_protocol::ErrorEnvelope),
        (status = 401, description = "UNAUTHORIZED", body = tollgate_protocol::ErrorEnvelope),
        (status = 403, description = "FORBIDDEN: plan without the event feed", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn ws(
    State(state): State<AppState>,
    Extension(caller): Extension<std::sync::Arc<Caller>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let Ok(upgrade) = upgrade else {
        return ApiError::invalid_params(
            "GET /ws expects a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)",
        )
        .into_response();
    };
    let limit = state.config.limits.ws_max_message_bytes;
    upgrade
        .max_message_size(limit)
        .max_frame_size(limit)
        // Clients send small messages and every send is flushed at once: small buffers keep a
        // connection's memory to a few KiB (the defaults are 128 KiB each).
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(0)
        .on_upgrade(move |socket| Connection::new(state, (*caller).clone()).run(socket))
}

/// What a client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    SubscribeWallet,
    SubscribePayment,
    UnsubscribeWallet,
    UnsubscribePayment,
}

impl Method {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "subscribeWallet" => Self::SubscribeWallet,
            "subscribePayment" => Self::SubscribePayment,
            "unsubscribeWallet" => Self::UnsubscribeWallet,
            "unsubscribePayment" => Self::UnsubscribePayment,
            _ => return None,
        })
    }

    const fn name(self) -> &'static str {
        match self {
            Self::SubscribeWallet => "subscribeWallet",
            Self::SubscribePayment => "subscribePayment",
            Self::UnsubscribeWallet => "unsubscribeWallet",
            Self::UnsubscribePayment => "unsubscribePayment",
        }
    }
}

/// An `error` event.
fn error_event(code: ErrorCode, message: impl Into<String>) -> Value {
    json!({"event": "error", "code": code.as_str(), "message": message.into()})
}

/// One client's connection: who it is and what it follows.
struct Connection {
    state: AppState,
    caller: Caller,
    wallets: HashSet<String>,
    payments: HashSet<String>,
    /// Events to send right after the answer being prepared.
    then_send: Vec<Value>,
}

/// Why a connection ends.
enum End {
    /// The client left or the socket failed.
    Gone,
    /// The server closes it, with a code and reason.
    Close(u16, String),
}

impl Connection {
    fn new(state: AppState, caller: Caller) -> Self {
        Self { state, caller, wallets: HashSet::new(), payments: HashSet::new(), then_send: Vec::new() }
    }

    fn wants(&self, event: &PaymentEvent) -> bool {
        let route = &event.route;
        route.visible_to(&self.caller.account_id)
            && (self.payments.contains(&route.payment_id) || route.wallets.iter().any(|w| self.wallets.contains(w)))
    }

    async fn run(mut self, mut socket: WebSocket) {
        crate::telemetry::ws_connections(1.0);
        let _closed = OnDrop(|| crate::telemetry::ws_connections(-1.0));
        let mut events = self.state.events.subscribe();
        let mut gaps = self.state.events.subscribe_gaps();
        let mut revoked = self.state.events.subscribe_revocations();
        let ping_every = Duration::from_secs(self.state.config.limits.ws_ping_secs);
        let mut ping = every(ping_every);
        let mut last_heard = tokio::time::Instant::now();
        // A deletion nobody announced here (the CLI on another process's SQLite file) is found
        // as soon as an HTTP request's cached key would be read again.
        let mut recheck = every(Duration::from_secs(self.state.config.limits.key_cache_ttl_secs.max(1)));
        let end = loop {
            tokio::select! {
                // Events first: what was published before a client's message is sent before the
                // answer to it, and a busy feed is not slowed by chatty clients.
                biased;
                event = events.recv() => {
                    if let Err(end) = self.on_event(&mut socket, event).await {
                        break end;
                    }
                }
                // The instance lost the database's announcements for a moment: this feed may miss
                // changes, so the client must reconnect and resubscribe (which sends current states).
                Ok(()) = gaps.changed() => {
                    break End::Close(close_code::AGAIN, "events may have been missed; reconnect and resubscribe".into());
                }
                // A key deleted (here, or anywhere the database announces it): its connections end.
                deleted = revoked.recv() => {
                    let ours = match deleted {
                        Ok(key_id) => *key_id == *self.caller.key_id,
                        // Deletions missed: ask about this key.
                        Err(RecvError::Lagged(_)) => !self.key_still_valid().await,
                        Err(RecvError::Closed) => false,
                    };
                    if ours {
                        break End::Close(close_code::POLICY, "the API key was deleted".into());
                    }
                }
                incoming = socket.recv() => {
                    last_heard = tokio::time::Instant::now();
                    if let Err(end) = self.on_message(&mut socket, incoming).await {
                        break end;
                    }
                }
                _ = recheck.tick() => {
                    if !self.key_still_valid().await {
                        break End::Close(close_code::POLICY, "the API key was deleted".into());
                    }
                }
                _ = ping.tick() => {
                    if silent_for_too_long(last_heard.elapsed(), ping_every) {
                        break End::Close(close_code::POLICY, "no answer to pings".into());
                    }

                    if let Err(end) = send(&mut socket, Message::Ping(Default::default())).await {
                        break end;
                    }
                }
            }
        };
        if let End::Close(code, reason) = end {
            tracing::debug!(code, %reason, "closing a WebSocket connection");
            let frame = CloseFrame { code, reason: reason.into() };
            let _ = tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Close(Some(frame)))).await;
        }
    }

    /// A published event: sent when the client follows it; a listener too far behind, or a
    /// server shutting down, ends the connection.
    async fn on_event(&self, socket: &mut WebSocket, event: Result<Arc<PaymentEvent>, RecvError>) -> Result<(), End> {
        match event {
            Ok(event) if self.wants(&event) => send(socket, Message::Text(text(&event.message))).await,
            Ok(_) => Ok(()),
            Err(RecvError::Lagged(missed)) => Err(End::Close(
                close_code::AGAIN,
                format!("too slow: {missed} events were missed; reconnect and resubscribe"),
            )),
            Err(RecvError::Closed) => Err(End::Close(close_code::AWAY, "the server is shutting down".into())),
        }
    }

    /// A client's message, answered (and followed by what the answer promised: current states);
    /// its rate is bounded as well as its size, since each may cost storage reads.
    async fn on_message(
        &mut self,
        socket: &mut WebSocket,
        incoming: Option<Result<Message, axum::Error>>,
    ) -> Result<(), End> {
        let reply = match incoming {
            None | Some(Err(_) | Ok(Message::Close(_))) => return Err(End::Gone),
            Some(Ok(Message::Text(text))) => {
                if self.state.auth.admit_ws_message(&self.caller).await {
                    self.handle(&text).await
                } else {
                    error_event(
                        ErrorCode::RateLimit,
                        format!("at most {WS_MESSAGES_PER_SECOND} messages a second; this one was ignored"),
                    )
                }
            }
            Some(Ok(Message::Binary(_))) => {
                error_event(ErrorCode::InvalidParameters, "send JSON text messages, not binary ones")
            }
            // Pings are answered by the library; pongs only prove the client is there.
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => return Ok(()),
        };
        for message in std::iter::once(reply).chain(std::mem::take(&mut self.then_send)) {
            send(socket, Message::Text(message.to_string().into())).await?;
        }
        Ok(())
    }

    /// Whether the connection's key still exists (storage failing: assumed so, asked again later).
    async fn key_still_valid(&self) -> bool {
        self.state.auth.still_valid(&self.caller).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot check a WebSocket connection's key");
            true
        })
    }

    /// Applies one client message; the reply to send.
    async fn handle(&mut self, text: &str) -> Value {
        let request: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => return error_event(ErrorCode::InvalidParameters, format!("not JSON: {e}")),
        };
        let Some(method) = request.get("method").and_then(Value::as_str) else {
            return error_event(ErrorCode::InvalidParameters, "method is required");
        };
        let Some(method) = Method::parse(method) else {
            return error_event(
                ErrorCode::InvalidParameters,
                format!(
                    "unknown method {method:?}: expected subscribeWallet, subscribePayment, unsubscribeWallet or unsubscribePayment"
                ),
            );
        };
        let Some(keys) = request.get("keys").and_then(Value::as_array) else {
            return error_event(ErrorCode::InvalidParameters, "keys must be an array of strings");
        };
        let Some(keys) = keys.iter().map(Value::as_str).collect::<Option<Vec<_>>>() else {
            return error_event(ErrorCode::InvalidParameters, "keys must be an array of strings");
        };
        let limit = self.state.config.limits.ws_max_subscriptions;
        if keys.is_empty() || keys.len() > limit {
            return error_event(ErrorCode::InvalidParameters, format!("keys must hold 1 to {limit} entries"));
        }
        let result = match method {
            Method::SubscribeWallet => self.subscribe_wallets(&keys).await,
            Method::SubscribePayment => self.subscribe_payments(&keys).await,
            Method::UnsubscribeWallet => Ok(keys.iter().map(|k| canonical_wallet(k)).collect()),
            Method::UnsubscribePayment => Ok(keys.iter().map(|k| (*k).to_owned()).collect()),
        };
        let keys = match result {
            Ok(keys) => keys,
            Err(e) => return e,
        };
        let event = match method {
            Method::UnsubscribeWallet => {
                keys.iter().for_each(|k| _ = self.wallets.remove(k));
                "unsubscribed"
            }
            Method::UnsubscribePayment => {
                keys.iter().for_each(|k| _ = self.payments.remove(k));
                "unsubscribed"
            }
            _ => "subscribed",
        };
        json!({"event": event, "method": method.name(), "keys": keys})
    }

    /// Room for `adding` more subscriptions, or the error event.
    fn room_for(&self, adding: &[String], already: &HashSet<String>) -> Result<(), Value> {
        let new = adding.iter().filter(|k| !already.contains(*k)).count();
        let limit = self.state.config.limits.ws_max_subscriptions;
        if self.wallets.len() + self.payments.len() + new > limit {
            return Err(error_event(
                ErrorCode::InvalidParameters,
                format!("at most {limit} wallets and payments may be followed on one connection"),
            ));
        }
        Ok(())
    }

    async fn subscribe_wallets(&mut self, keys: &[&str]) -> Result<Vec<String>, Value> {
        let mut wallets = Vec::with_capacity(keys.len());
        for key in keys {
            let address: tollgate_protocol::Address = key.parse().map_err(|e| {
                error_event(ErrorCode::InvalidParameters, format!("{key} is not a wallet address: {e}"))
            })?;
            let address = address.to_string();
            let custodial = self.state.store.get_wallet(&address).await.map_err(|e| {
                tracing::error!(error = %e, "reading a wallet for a WebSocket subscription");
                error_event(ErrorCode::InternalError, "storage failed")
            })?;
            if custodial.is_some_and(|w| w.account_id != self.caller.account_id) {
                return Err(error_event(ErrorCode::Forbidden, format!("{address} is another account's wallet")));
            }
            wallets.push(address);
        }
        self.room_for(&wallets, &self.wallets)?;
        self.wallets.extend(wallets.iter().cloned());
        Ok(wallets)
    }

    async fn subscribe_payments(&mut self, keys: &[&str]) -> Result<Vec<String>, Value> {
        let mut current = Vec::with_capacity(keys.len());
        for key in keys {
            let payment = self.state.store.get_payment(key).await.map_err(|e| {
                tracing::error!(error = %e, "reading a payment for a WebSocket subscription");
                error_event(ErrorCode::InternalError, "storage failed")
            })?;
            match payment {
                Some(p) if p.visible_to(&self.caller.account_id) => current.push(p),
                _ => return Err(error_event(ErrorCode::NotFound, format!("no payment {key}"))),
            }
        }
        let ids: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        self.room_for(&ids, &self.payments)?;
        self.payments.extend(ids.iter().cloned());
        // Each payment's state as of now follows the answer, so a change made just before the
        // subscription is not missed; later changes come as they happen.
        self.then_send
            .extend(current.iter().map(|p| json!({"event": crate::events::PAYMENT_UPDATED, "payment": p.to_record()})));
        Ok(ids)
    }
}

/// Whether a client silent for `silence` has missed three pings sent every `ping_every`.
fn silent_for_too_long(silence: Duration, ping_every: Duration) -> bool {
    silence > ping_every * 3
}

/// A wallet key as events name it (canonical address text), or as given when it is not one.
fn canonical_wallet(key: &str) -> String {
    key.parse::<tollgate_protocol::Address>().map_or_else(|_| key.to_owned(), |a| a.to_string())
}

/// Sends one message within [`SEND_TIMEOUT`].
async fn send(socket: &mut WebSocket, message: Message) -> Result<(), End> {
    match tokio::time::timeout(SEND_TIMEOUT, socket.send(message)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(End::Gone),
        Err(_) => Err(End::Close(close_code::AGAIN, "too slow: a send timed out".into())),
    }
}

/// Runs its closure when dropped: however a connection ends, it is counted out.
struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// A published event's bytes as a WebSocket text frame: checked as UTF-8 (they are: the bus
/// holds serialized JSON), not copied.
fn text(message: &bytes::Bytes) -> axum::extract::ws::Utf8Bytes {
    axum::extract::ws::Utf8Bytes::try_from(message.clone()).unwrap_or_else(|_| "{}".into())
}

/// A timer ticking every `period`, the first tick one period from now, late ticks delayed.
fn every(period: Duration) -> tokio::time::Interval {
    let mut timer = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    timer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_unanswered_pings_end_a_connection() {
        let every = Duration::from_secs(30);
        assert!(!silent_for_too_long(Duration::from_secs(89), every));
        assert!(!silent_for_too_long(Duration::from_secs(90), every));
        assert!(silent_for_too_long(Duration::from_secs(91), every));
    }

    #[test]
    fn methods_are_read_by_name() {
        for name in ["subscribeWallet", "subscribePayment", "unsubscribeWallet", "unsubscribePayment"] {
            assert_eq!(Method::parse(name).map(Method::name), Some(name));
        }
        assert_eq!(Method::parse("subscribe"), None);
    }
}
