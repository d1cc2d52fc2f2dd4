//! A WebSocket client of `GET /ws`, as the event-feed tests use it.

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The next text message as JSON (pings are skipped), within 20 s.
pub async fn next_json(socket: &mut Socket) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), socket.next()).await.expect("a message in time");
        match message.unwrap().unwrap() {
            Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

pub async fn send_json(socket: &mut Socket, value: Value) {
    socket.send(Message::Text(value.to_string().into())).await.unwrap();
}

/// The close frame the server sends next (pings and other messages skipped), within `within`.
pub async fn close_within(socket: &mut Socket, within: Duration) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let message = tokio::time::timeout_at(deadline, socket.next()).await.expect("closed in time");
        match message {
            Some(Ok(Message::Close(Some(frame)))) => return (frame.code.into(), frame.reason.to_string()),
            Some(Ok(Message::Close(None))) | None => return (1005, String::new()),
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("the socket failed instead of closing: {e}"),
        }
    }
}
