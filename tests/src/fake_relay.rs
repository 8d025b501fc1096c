//! A scripted Nostr relay on loopback for relay-sync tests: it plays the misbehaving peer a
//! relay under test follows (`--sync-allow-private`).
//!
//! [`FakeRelay::start`] answers each client message with what a [`Script`] returns;
//! [`FakeRelay::start_with`] hands each accepted WebSocket to a [`Conduct`] of the test's own
//! (stop reading, close at once, send control or binary frames, ...), with [`serve`] for the
//! scripted part. Every client message is recorded ([`FakeRelay::received`]); NIP-11 requests
//! are plain HTTP, fail the WebSocket handshake and get nothing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::future::BoxFuture;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// Answers to one client message.
pub type Script = Arc<dyn Fn(&Value) -> Vec<Value> + Send + Sync>;

/// One accepted connection: the WebSocket, its number (from 0) and the relay's log of client
/// messages.
pub struct Conn {
    pub ws: WebSocketStream<TcpStream>,
    pub n: usize,
    pub received: Arc<Mutex<Vec<Value>>>,
}

/// What the fake relay does with each connection.
pub type Conduct = Arc<dyn Fn(Conn) -> BoxFuture<'static, ()> + Send + Sync>;

/// The fake relay; it runs until the test's runtime ends.
pub struct FakeRelay {
    pub addr: SocketAddr,
    /// WebSocket connections accepted.
    pub connections: Arc<AtomicUsize>,
    /// When each connection was accepted.
    pub connected_at: Arc<Mutex<Vec<Instant>>>,
    /// Every client message, in order, over all connections.
    pub received: Arc<Mutex<Vec<Value>>>,
}

/// Reads client messages from `conn` and answers each with `script`, until the client closes
/// or `until` holds for a message (after its answers are sent); returns the connection then.
pub async fn serve(mut conn: Conn, script: &Script, until: impl Fn(&Value) -> bool) -> Option<Conn> {
    while let Some(Ok(msg)) = conn.ws.next().await {
        let Message::Text(text) = msg else { continue };
        let Ok(value) = serde_json::from_str::<Value>(text.as_str()) else { continue };
        conn.received.lock().unwrap().push(value.clone());
        for reply in script(&value) {
            if conn.ws.send(Message::text(reply.to_string())).await.is_err() {
                return None;
            }
        }
        if until(&value) {
            return Some(conn);
        }
    }
    None
}

impl FakeRelay {
    /// A relay answering every message of every connection with `script`.
    pub async fn start(script: Script) -> FakeRelay {
        FakeRelay::start_with(Arc::new(move |conn: Conn| {
            let script = script.clone();
            Box::pin(async move {
                serve(conn, &script, |_| false).await;
            })
        }))
        .await
    }

    /// A relay running `conduct` on each accepted WebSocket.
    pub async fn start_with(conduct: Conduct) -> FakeRelay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let connected_at = Arc::new(Mutex::new(Vec::new()));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (count, times, log) = (connections.clone(), connected_at.clone(), received.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let conduct = conduct.clone();
                let (count, times, log) = (count.clone(), times.clone(), log.clone());
                tokio::spawn(async move {
                    let Ok(ws) = tokio_tungstenite::accept_async(stream).await else { return };
                    let n = count.fetch_add(1, Ordering::SeqCst);
                    times.lock().unwrap().push(Instant::now());
                    conduct(Conn { ws, n, received: log }).await;
                });
            }
        });
        FakeRelay { addr, connections, connected_at, received }
    }

    pub fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// Client messages received so far whose first element is `verb` (`REQ`, `NEG-MSG`, ...).
    pub fn received(&self, verb: &str) -> Vec<Value> {
        self.received.lock().unwrap().iter().filter(|m| m[0] == verb).cloned().collect()
    }
}
