//! One WebSocket connection to another relay, as a client: connect to the checked addresses
//! only (no second DNS lookup, no redirects), bounded frames, a deadline on every read, and the
//! relay's NIP-11 limits when it publishes them. `wss://` relays (and their `https://` NIP-11
//! document) go through [`super::tls`].

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use nostr::prelude::{ClientMessage, RelayMessage};
use serde_json::Value;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::sync::relay_url::RelayUrl;
use super::tls::Tls;

/// Largest message accepted from a peer relay.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// Message size assumed for a relay that publishes none (many relays take 128 KiB or more).
pub const DEFAULT_MESSAGE_LENGTH: usize = 65_536;

/// Smallest `max_message_length` believed: below it no useful REQ fits.
pub const MIN_MESSAGE_LENGTH: usize = 4_096;

/// Largest NIP-11 document read.
const MAX_NIP11_BYTES: usize = 64 * 1024;

/// Why a connection failed.
#[derive(Debug, Error)]
pub enum WireError {
    #[error("connect timed out after {0:?}")]
    ConnectTimeout(Duration),
    #[error("connect failed: {0}")]
    Connect(String),
    #[error("TLS handshake with {url} failed: {reason}")]
    Tls { url: RelayUrl, reason: String },
    #[error("no message from the relay within {0:?}")]
    ReadTimeout(Duration),
    #[error("connection closed by the relay")]
    Closed,
    #[error("the relay sent a binary frame ({0} bytes); NIP-01 messages are text frames")]
    BinaryFrame(usize),
    #[error("shutting down")]
    Shutdown,
    #[error("websocket error: {0}")]
    WebSocket(String),
}

/// A relay's published limits (NIP-11 `limitation`), with defaults when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayLimits {
    pub max_filters: usize,
    pub max_subscriptions: usize,
    pub max_limit: usize,
    /// Longest message the relay takes (`max_message_length`), bytes.
    pub max_message_length: usize,
    /// `Some(true)` if NIP-11 lists 77, `Some(false)` if it lists NIPs without 77, `None`
    /// without a document.
    pub negentropy: Option<bool>,
}

impl Default for RelayLimits {
    fn default() -> Self {
        RelayLimits { max_filters: 10, max_subscriptions: 10, max_limit: 500, max_message_length: DEFAULT_MESSAGE_LENGTH, negentropy: None }
    }
}

impl RelayLimits {
    /// Reads a NIP-11 document; absent or silly values keep the defaults.
    pub fn from_nip11(doc: &Value) -> RelayLimits {
        let d = RelayLimits::default();
        let lim = &doc["limitation"];
        let num = |k: &str, default: usize| lim[k].as_u64().filter(|n| *n > 0).map_or(default, |n| n.min(1_000) as usize);
        RelayLimits {
            max_filters: num("max_filters", d.max_filters),
            max_subscriptions: num("max_subscriptions", d.max_subscriptions),
            max_limit: num("max_limit", d.max_limit),
            max_message_length: lim["max_message_length"]
                .as_u64()
                .map_or(d.max_message_length, |n| (n as usize).clamp(MIN_MESSAGE_LENGTH, MAX_MESSAGE_BYTES)),
            negentropy: doc["supported_nips"].as_array().map(|nips| nips.iter().any(|n| n.as_u64() == Some(77))),
        }
    }
}

async fn connect_tcp(addresses: &[SocketAddr], timeout: Duration) -> Result<TcpStream, WireError> {
    let mut last = WireError::Connect("no address".into());
    for address in addresses {
        match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = WireError::Connect(format!("{address}: {e}")),
            Err(_) => last = WireError::ConnectTimeout(timeout),
        }
    }
    Err(last)
}

/// A TCP connection to the checked addresses, wrapped in TLS for a `wss://` URL.
async fn connect_stream(url: &RelayUrl, addresses: &[SocketAddr], tls: &Tls, timeout: Duration) -> Result<MaybeTlsStream<TcpStream>, WireError> {
    let tcp = connect_tcp(addresses, timeout).await?;
    if !url.is_tls() {
        return Ok(MaybeTlsStream::Plain(tcp));
    }
    let stream = tokio::time::timeout(timeout, tls.connect(url, tcp))
        .await
        .map_err(|_| WireError::ConnectTimeout(timeout))?
        .map_err(|e| WireError::Tls { url: url.clone(), reason: e.to_string() })?;
    Ok(MaybeTlsStream::Rustls(stream))
}

/// `GET /` with `Accept: application/nostr+json` on the checked addresses (`https` for a
/// `wss://` URL).
pub async fn fetch_nip11(url: &RelayUrl, addresses: &[SocketAddr], tls: &Tls, timeout: Duration) -> Option<Value> {
    let fetch = async {
        let stream = connect_stream(url, addresses, tls, timeout).await.ok()?;
        match stream {
            MaybeTlsStream::Plain(s) => read_nip11(url, s).await,
            MaybeTlsStream::Rustls(s) => read_nip11(url, s).await,
            _ => None,
        }
    };
    tokio::time::timeout(timeout, fetch).await.ok().flatten()
}

async fn read_nip11(url: &RelayUrl, mut stream: impl AsyncRead + AsyncWrite + Unpin) -> Option<Value> {
    let path = url.as_str().split_once("://").map(|(_, r)| r).and_then(|r| r.find('/').map(|at| &r[at..])).unwrap_or("/");
    let request = format!("GET {path} HTTP/1.0\r\nHost: {}\r\nAccept: application/nostr+json\r\n\r\n", url.authority());
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    // A TLS peer that closes without close_notify still delivered what came before.
    let _ = (&mut stream).take(MAX_NIP11_BYTES as u64).read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.lines().next()?.contains(" 200") {
        return None;
    }
    serde_json::from_str(body).ok()
}

/// An open connection.
pub struct Wire {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// Bytes received (every frame's payload) and sent (the benchmark's figures).
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// When the last frame of any kind (a pong included) arrived, or the connection opened:
    /// the connection is known to be alive up to then.
    pub last_heard: Instant,
}

/// What arrived.
#[derive(Debug)]
pub enum Incoming {
    Message(RelayMessage<'static>),
    /// A text frame that is not a relay message this client knows.
    Unparsable(String),
}

impl Wire {
    /// Connects to `url` at `addresses` (already checked).
    pub async fn connect(url: &RelayUrl, addresses: &[SocketAddr], tls: &Tls, timeout: Duration) -> Result<Wire, WireError> {
        let stream = connect_stream(url, addresses, tls, timeout).await?;
        let config = WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE_BYTES)).max_frame_size(Some(MAX_MESSAGE_BYTES));
        let handshake = tokio_tungstenite::client_async_with_config(url.as_str(), stream, Some(config));
        let (ws, _) = tokio::time::timeout(timeout, handshake)
            .await
            .map_err(|_| WireError::ConnectTimeout(timeout))?
            .map_err(|e| WireError::Connect(e.to_string()))?;
        Ok(Wire { ws, bytes_in: 0, bytes_out: 0, last_heard: Instant::now() })
    }

    pub async fn send(&mut self, msg: &ClientMessage<'_>) -> Result<(), WireError> {
        self.send_text(msg.as_json()).await
    }

    pub async fn send_text(&mut self, text: String) -> Result<(), WireError> {
        self.bytes_out += text.len() as u64;
        self.ws.send(Message::text(text)).await.map_err(|e| WireError::WebSocket(e.to_string()))
    }

    pub async fn ping(&mut self) -> Result<(), WireError> {
        self.ws.send(Message::Ping(Vec::new().into())).await.map_err(|e| WireError::WebSocket(e.to_string()))
    }

    /// The next relay message, waiting at most `timeout` in all ([`Wire::recv_until`]).
    pub async fn recv(&mut self, timeout: Duration) -> Result<Incoming, WireError> {
        self.recv_until(Instant::now() + timeout).await
    }

    /// The next relay message, waiting until `deadline` at most. Pings and pongs are skipped
    /// (they count as life in [`Wire::last_heard`] and in `bytes_in`) but never move the
    /// deadline, so a peer sending only control frames cannot hold a wait open; a binary frame
    /// is counted and ends the connection ([`WireError::BinaryFrame`]).
    pub async fn recv_until(&mut self, deadline: Instant) -> Result<Incoming, WireError> {
        let waited = deadline.saturating_duration_since(Instant::now());
        loop {
            let frame = tokio::time::timeout_at(deadline.into(), self.ws.next())
                .await
                .map_err(|_| WireError::ReadTimeout(waited))?
                .ok_or(WireError::Closed)?
                .map_err(|e| WireError::WebSocket(e.to_string()))?;
            self.last_heard = Instant::now();
            match frame {
                Message::Text(t) => {
                    self.bytes_in += t.len() as u64;
                    return Ok(match RelayMessage::from_json(t.as_str()) {
                        Ok(m) => Incoming::Message(m),
                        Err(_) => Incoming::Unparsable(t.as_str().chars().take(200).collect()),
                    });
                }
                Message::Binary(b) => {
                    self.bytes_in += b.len() as u64;
                    return Err(WireError::BinaryFrame(b.len()));
                }
                Message::Ping(b) | Message::Pong(b) => self.bytes_in += b.len() as u64,
                Message::Close(_) => return Err(WireError::Closed),
                Message::Frame(_) => {}
            }
        }
    }

    pub async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.ws.close(None)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_from_nip11() {
        let l = RelayLimits::from_nip11(&json!({"supported_nips": [1, 11, 77], "limitation": {"max_filters": 3, "max_limit": 0}}));
        assert_eq!(l, RelayLimits { max_filters: 3, max_subscriptions: 10, max_limit: 500, max_message_length: DEFAULT_MESSAGE_LENGTH, negentropy: Some(true) });
        let sized = |n: u64| RelayLimits::from_nip11(&json!({"limitation": {"max_message_length": n}})).max_message_length;
        assert_eq!(sized(16_384), 16_384);
        assert_eq!(sized(10), MIN_MESSAGE_LENGTH);
        assert_eq!(sized(1 << 40), MAX_MESSAGE_BYTES);
        assert_eq!(RelayLimits::from_nip11(&json!({"supported_nips": [1]})).negentropy, Some(false));
        assert_eq!(RelayLimits::from_nip11(&json!("junk")), RelayLimits::default());
    }
}
