//! [`NostrClient`]: a minimal NIP-01 client over tokio-tungstenite for tests.
//!
//! Messages that arrive while the client waits for something else are kept in a backlog, so
//! interleaved live events, OKs and NOTICEs are never lost. A NIP-42 `["AUTH", <challenge>]` from
//! the relay is not queued: the client remembers the latest challenge ([`NostrClient::challenge`])
//! and answers it when asked to ([`NostrClient::auth`]).

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use futures_util::{SinkExt, StreamExt};
use nostr::prelude::*;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::wait::TIMEOUT;

/// The end of a REQ's stored results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReqOutcome {
    /// Stored events then EOSE.
    Eose(Vec<Event>),
    /// The relay refused or ended the subscription with this message.
    Closed(String),
}

/// A test Nostr client connected to one relay.
pub struct NostrClient {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    backlog: VecDeque<RelayMessage<'static>>,
    next_sub: u64,
    timeout: Duration,
    url: String,
    challenge: Option<String>,
}

impl NostrClient {
    /// Connects to `url` (`ws://ADDR/`), with `TCP_NODELAY` on the socket.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        Self::connect_with_headers(url, &[]).await
    }

    /// Connects to `url` sending extra HTTP headers with the upgrade request (e.g.
    /// `X-Forwarded-For`, as a reverse proxy would).
    pub async fn connect_with_headers(url: &str, headers: &[(&str, &str)]) -> anyhow::Result<Self> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut request = url.into_client_request()?;
        for (name, value) in headers {
            request.headers_mut().append(
                tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(name.as_bytes())?,
                value.parse()?,
            );
        }
        let (ws, _) = tokio::time::timeout(TIMEOUT, tokio_tungstenite::connect_async_with_config(request, None, true))
            .await
            .context("connect timed out")?
            .with_context(|| format!("connecting to {url}"))?;
        Ok(Self {
            ws,
            backlog: VecDeque::new(),
            next_sub: 0,
            timeout: TIMEOUT,
            url: url.to_string(),
            challenge: None,
        })
    }

    /// Sends a raw text frame.
    pub async fn raw_send(&mut self, text: impl Into<String>) -> anyhow::Result<()> {
        self.ws
            .send(Message::text(text.into()))
            .await
            .context("sending")
    }

    /// Sends a raw WebSocket message (binary frames, pings, ...).
    pub async fn send_ws(&mut self, msg: Message) -> anyhow::Result<()> {
        self.ws.send(msg).await.context("sending")
    }

    pub async fn send(&mut self, msg: ClientMessage<'_>) -> anyhow::Result<()> {
        self.raw_send(msg.as_json()).await
    }

    /// Reads the next relay message from the socket (not the backlog), with the deadline; NIP-42
    /// challenges are remembered, not returned.
    async fn read(&mut self) -> anyhow::Result<RelayMessage<'static>> {
        loop {
            match self.read_any().await? {
                RelayMessage::Auth { challenge } => self.challenge = Some(challenge.to_string()),
                m => return Ok(m),
            }
        }
    }

    /// Reads the next relay message of any type from the socket, with the deadline.
    async fn read_any(&mut self) -> anyhow::Result<RelayMessage<'static>> {
        loop {
            let frame = tokio::time::timeout(self.timeout, self.ws.next())
                .await
                .map_err(|_| anyhow!("no message from the relay within {:?}", self.timeout))?
                .ok_or_else(|| anyhow!("connection closed by the relay"))?
                .context("websocket error")?;
            match frame {
                Message::Text(t) => {
                    return RelayMessage::from_json(t.as_str())
                        .with_context(|| format!("relay sent an unparseable message: {t}"))
                }
                Message::Close(c) => bail!("relay closed the connection: {c:?}"),
                _ => continue,
            }
        }
    }

    /// Waits for the first message for which `pick` returns `Some`; other messages stay queued.
    pub async fn wait_for<T>(
        &mut self,
        mut pick: impl FnMut(&RelayMessage<'static>) -> Option<T>,
    ) -> anyhow::Result<T> {
        if let Some(pos) = self.backlog.iter().position(|m| pick(m).is_some()) {
            let m = self.backlog.remove(pos).unwrap();
            return Ok(pick(&m).unwrap());
        }
        loop {
            let m = self.read().await?;
            if let Some(v) = pick(&m) {
                return Ok(v);
            }
            self.backlog.push_back(m);
        }
    }

    /// Messages received but not yet consumed by a wait.
    pub fn backlog(&self) -> impl Iterator<Item = &RelayMessage<'static>> {
        self.backlog.iter()
    }

    /// Next message of any kind (backlog first).
    pub async fn next_message(&mut self) -> anyhow::Result<RelayMessage<'static>> {
        match self.backlog.pop_front() {
            Some(m) => Ok(m),
            None => self.read().await,
        }
    }

    /// Publishes `event` and returns the relay's `OK` (status, message).
    pub async fn send_event(&mut self, event: &Event) -> anyhow::Result<(bool, String)> {
        self.send(ClientMessage::event(event.clone())).await?;
        self.wait_ok(event.id).await
    }

    /// Waits for the `OK` about `id` (after a raw send).
    pub async fn wait_ok(&mut self, id: EventId) -> anyhow::Result<(bool, String)> {
        self.wait_for(|m| match m {
            RelayMessage::Ok {
                event_id,
                status,
                message,
            } if *event_id == id => Some((*status, message.to_string())),
            _ => None,
        })
        .await
    }

    /// Waits for a NOTICE and returns its text.
    pub async fn wait_notice(&mut self) -> anyhow::Result<String> {
        self.wait_for(|m| match m {
            RelayMessage::Notice(t) => Some(t.to_string()),
            _ => None,
        })
        .await
    }

    fn new_sub_id(&mut self) -> SubscriptionId {
        self.next_sub += 1;
        SubscriptionId::new(format!("sub{}", self.next_sub))
    }

    /// Opens subscription `id` and collects stored events until EOSE or CLOSED.
    pub async fn req_with_id(
        &mut self,
        id: &SubscriptionId,
        filters: Vec<Filter>,
    ) -> anyhow::Result<ReqOutcome> {
        self.send(ClientMessage::req(id.clone(), filters)).await?;
        let mut events = Vec::new();
        loop {
            let sid = id.clone();
            let m = self
                .wait_for(|m| match m {
                    RelayMessage::Event {
                        subscription_id, ..
                    }
                    | RelayMessage::EndOfStoredEvents(subscription_id)
                    | RelayMessage::Closed {
                        subscription_id, ..
                    } if **subscription_id == sid => Some(m.clone()),
                    _ => None,
                })
                .await?;
            match m {
                RelayMessage::Event { event, .. } => events.push(event.into_owned()),
                RelayMessage::EndOfStoredEvents(_) => return Ok(ReqOutcome::Eose(events)),
                RelayMessage::Closed { message, .. } => {
                    return Ok(ReqOutcome::Closed(message.to_string()))
                }
                _ => unreachable!(),
            }
        }
    }

    /// One-shot query: stored events matching `filters` (until EOSE); the subscription is closed.
    pub async fn req(&mut self, filters: Vec<Filter>) -> anyhow::Result<Vec<Event>> {
        let id = self.new_sub_id();
        match self.req_with_id(&id, filters).await? {
            ReqOutcome::Eose(events) => {
                self.close(&id).await?;
                Ok(events)
            }
            ReqOutcome::Closed(msg) => bail!("REQ refused: {msg}"),
        }
    }

    /// Opens a live subscription: returns its id and the stored events; then use
    /// [`next_event`](Self::next_event).
    pub async fn subscribe(
        &mut self,
        filters: Vec<Filter>,
    ) -> anyhow::Result<(SubscriptionId, Vec<Event>)> {
        let id = self.new_sub_id();
        match self.req_with_id(&id, filters).await? {
            ReqOutcome::Eose(events) => Ok((id, events)),
            ReqOutcome::Closed(msg) => bail!("REQ refused: {msg}"),
        }
    }

    /// The next live event on subscription `id`.
    pub async fn next_event(&mut self, id: &SubscriptionId) -> anyhow::Result<Event> {
        self.wait_for(|m| match m {
            RelayMessage::Event {
                subscription_id,
                event,
            } if **subscription_id == *id => Some(event.clone().into_owned()),
            _ => None,
        })
        .await
    }

    /// Closes subscription `id`.
    pub async fn close(&mut self, id: &SubscriptionId) -> anyhow::Result<()> {
        self.send(ClientMessage::close(id.clone())).await
    }

    /// Sends a WebSocket ping and waits for the matching pong (text messages are kept).
    pub async fn ws_ping(&mut self) -> anyhow::Result<()> {
        let payload = b"grasp-ping".to_vec();
        self.ws.send(Message::Ping(payload.clone().into())).await?;
        loop {
            let frame = tokio::time::timeout(self.timeout, self.ws.next())
                .await
                .map_err(|_| anyhow!("no pong within {:?}", self.timeout))?
                .ok_or_else(|| anyhow!("connection closed by the relay"))??;
            match frame {
                Message::Pong(p) if p.as_ref() == payload.as_slice() => return Ok(()),
                Message::Text(t) => match RelayMessage::from_json(t.as_str())? {
                    RelayMessage::Auth { challenge } => self.challenge = Some(challenge.to_string()),
                    m => self.backlog.push_back(m),
                },
                Message::Close(c) => bail!("relay closed the connection: {c:?}"),
                _ => {}
            }
        }
    }

    /// The latest NIP-42 challenge the relay sent, if one arrived yet.
    pub fn challenge(&self) -> Option<&str> {
        self.challenge.as_deref()
    }

    /// Waits (with the deadline) until the relay has sent a NIP-42 challenge; returns it.
    pub async fn wait_challenge(&mut self) -> anyhow::Result<String> {
        while self.challenge.is_none() {
            match self.read_any().await? {
                RelayMessage::Auth { challenge } => self.challenge = Some(challenge.to_string()),
                m => self.backlog.push_back(m),
            }
        }
        Ok(self.challenge.clone().unwrap_or_default())
    }

    /// Asks a relay that sent no challenge for one, as a client that authenticates first does: an
    /// `AUTH` before any challenge is answered `OK false "auth-required: ..."` and the challenge.
    /// Returns that `OK`'s message.
    pub async fn request_challenge(&mut self) -> anyhow::Result<String> {
        let unasked = EventBuilder::new(Kind::Custom(22242), "")
            .tags([Tag::parse(["relay", self.url.as_str()])?, Tag::parse(["challenge", "none yet"])?])
            .finalize(&Keys::generate())?;
        let (ok, msg) = self.send_auth(&unasked).await?;
        if ok {
            bail!("an AUTH without a challenge was accepted");
        }
        self.wait_challenge().await?;
        Ok(msg)
    }

    /// The connection's challenge: the one the relay sent, or (a public relay sends none until
    /// something needs it) one asked for with [`NostrClient::request_challenge`].
    pub async fn challenge_now(&mut self) -> anyhow::Result<String> {
        if self.challenge.is_none() {
            // A challenge sent on connect arrives before the answer to anything sent after it.
            self.ws_ping().await?;
        }
        if self.challenge.is_none() {
            self.request_challenge().await?;
        }
        self.wait_challenge().await
    }

    /// A kind 22242 AUTH event by `keys` for this connection's URL and challenge (asked for if
    /// the relay sent none).
    pub async fn auth_event(&mut self, keys: &Keys) -> anyhow::Result<Event> {
        let relay = self.url.clone();
        self.auth_event_naming(keys, &relay).await
    }

    /// [`NostrClient::auth_event`] naming `relay` (a service's public URL, as a client behind
    /// its front connects to it).
    pub async fn auth_event_naming(&mut self, keys: &Keys, relay: &str) -> anyhow::Result<Event> {
        let challenge = self.challenge_now().await?;
        Ok(EventBuilder::new(Kind::Custom(22242), "")
            .tags([
                Tag::parse(["relay", relay])?,
                Tag::parse(["challenge", challenge.as_str()])?,
            ])
            .finalize(keys)?)
    }

    /// Sends `["AUTH", event]` and returns the relay's `OK` (status, message).
    pub async fn send_auth(&mut self, event: &Event) -> anyhow::Result<(bool, String)> {
        self.send(ClientMessage::auth(event.clone())).await?;
        self.wait_ok(event.id).await
    }

    /// Authenticates this connection as `keys` (NIP-42); returns the relay's `OK`.
    pub async fn auth(&mut self, keys: &Keys) -> anyhow::Result<(bool, String)> {
        let event = self.auth_event(keys).await?;
        self.send_auth(&event).await
    }

    /// [`NostrClient::auth`] naming `relay` as the relay authenticated to.
    pub async fn auth_naming(&mut self, keys: &Keys, relay: &str) -> anyhow::Result<(bool, String)> {
        let event = self.auth_event_naming(keys, relay).await?;
        self.send_auth(&event).await
    }

    /// Proves the connection still works: a REQ round trip.
    pub async fn ping_relay(&mut self) -> anyhow::Result<()> {
        self.req(vec![Filter::new().limit(0)]).await.map(|_| ())
    }
}
