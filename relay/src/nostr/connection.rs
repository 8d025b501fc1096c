//! One NIP-01 WebSocket connection.
//!
//! A single task per connection reads client messages, answers them, and forwards live events
//! from the relay's broadcast to the matching subscriptions. `EVENT`s go through the
//! connection's pipeline (`crate::nostr::pipeline`): independent events are verified and
//! admitted side by side, their `OK`s leave in order, and every other message waits until the
//! events before it are answered. Everything the client sends is
//! hostile: unparseable, oversized or binary messages get a NOTICE (or `OK false` / `CLOSED`
//! when the message can be attributed) and the connection stays usable. NIP-77 `NEG-*`
//! messages go to the connection's negentropy sessions (`crate::nostr::negentropy`).
//!
//! Bounded in time (docs/security.md): a connection that sends nothing for `--ws-idle-timeout`
//! is closed when it has no subscription (nor NIP-77 session), and pinged when it has (closed
//! without a timely answer); a NIP-77 session without `NEG-MSG` for `--negentropy-idle-timeout`
//! is closed; a client that stops reading is dropped by the listener's write deadline
//! (`crate::net::write_deadline`); shutdown is observed while writing too.
//!
//! Trust (docs/protocol.md#trust): on a private service the connection is sent a NIP-42
//! challenge when it opens; on a public one only when something needs authentication (an answer
//! `auth-required:`, an `AUTH` before any challenge), never as an unasked first frame (ngit drops
//! such a relay). It remembers the keys it authenticates as ([`crate::nostr::auth`]); every `EVENT` takes a token
//! from the connection's and the client address's write buckets, every `NEG-OPEN` one from the
//! address's negentropy bucket; on a private service every `REQ`, `EVENT` and `NEG-*` message
//! (but `NEG-CLOSE`) needs a member's AUTH, and live events stop when membership ends.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, SinkExt, StreamExt};
use nostr::prelude::*;
use serde_json::Value;
use std::collections::HashSet;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::grasp::Grasp;
use crate::nostr::answer::{StoredAnswer, CHUNK_BYTES};
use crate::nostr::subscriptions::MAX_SUBSCRIPTION_ID_LEN;
use crate::nostr::auth::{AuthOutcome, ConnectionAuth};
use crate::nostr::negentropy::{NegentropyLimits, Sessions};
use crate::nostr::pipeline::{Answer, EventPipeline};
use crate::nostr::subscriptions::Subscriptions;
use crate::shutdown::Shutdown;
use grasp_state::trust::rate::TokenBucket;

/// Limits applied to each connection.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_message_bytes: usize,
    pub max_subscriptions: usize,
    pub max_filters: usize,
    pub max_limit: usize,
    /// Most bytes of `EVENT` messages one REQ's stored answer sends (`--max-answer-bytes`).
    pub max_answer_bytes: usize,
    /// NIP-77 negentropy sessions; `None`: NIP-77 is not served.
    pub negentropy: Option<NegentropyLimits>,
    /// A connection that sends nothing for this long is closed, or pinged if it has
    /// subscriptions (`--ws-idle-timeout`).
    pub idle_timeout: Duration,
}

/// `--ws-idle-timeout`'s default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Longest wait for the answer to a ping (shorter when the idle timeout is).
pub const MAX_PONG_WAIT: Duration = Duration::from_secs(30);

impl Limits {
    /// The WebSocket transport limit: well above `max_message_bytes`, so that oversized messages
    /// are read and answered rather than killing the connection.
    pub fn websocket_config(&self) -> WebSocketConfig {
        let hard = self.max_message_bytes.saturating_mul(4).max(1 << 20);
        WebSocketConfig::default()
            .max_message_size(Some(hard))
            .max_frame_size(Some(hard))
    }
}


/// Serves one WebSocket connection until the client leaves or shutdown is signalled. `client` is
/// the client's address (the peer's, or the one a trusted proxy forwarded) for the write limits.
pub async fn handle<S>(
    mut ws: WebSocketStream<S>,
    grasp: Arc<Grasp>,
    limits: Limits,
    mut shutdown: Shutdown,
    remote: SocketAddr,
    client: IpAddr,
    from_replica: bool,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut conn = Connection {
        grasp: grasp.clone(),
        limits,
        subs: Subscriptions::new(limits.max_subscriptions, limits.max_filters),
        out: Vec::new(),
        answer: None,
        live: grasp.relay.subscribe(),
        negentropy: limits.negentropy.map(|l| Sessions::new(l, grasp.relay.negentropy_items().clone())),
        auth: ConnectionAuth::new(),
        writes: grasp.trust().limits.connection_bucket(),
        client,
        pipeline: EventPipeline::new(grasp.clone(), Some(grasp.trust().limits.address_key(client))).forwarded_by_replica(from_replica),
    };
    let _open = grasp.metrics().websocket_opened();
    tracing::debug!(%remote, %client, "websocket open");
    // NIP-42: a private service needs AUTH for everything, so its challenge comes first; a
    // public service challenges when something needs it (`Connection::challenge_for`).
    if grasp.trust().private {
        conn.challenge();
        if !deliver(&mut ws, conn.out.drain(..).map(Message::text), &mut shutdown).await {
            return;
        }
    }
    let (idle, pong_wait) = (limits.idle_timeout, limits.idle_timeout.min(MAX_PONG_WAIT));
    let mut last_heard = Instant::now();
    // When the connection was pinged and has not answered since.
    let mut pinged: Option<Instant> = None;
    loop {
        let quiet_until = match pinged {
            Some(at) => at + pong_wait,
            None => last_heard + idle,
        };
        let negentropy_due = conn.negentropy.as_ref().and_then(Sessions::next_expiry);
        tokio::select! {
            _ = shutdown.recv() => {
                let frame = CloseFrame { code: CloseCode::Away, reason: "relay shutting down".into() };
                let _ = tokio::time::timeout(Duration::from_secs(1), ws.send(Message::Close(Some(frame)))).await;
                break;
            }
            _ = tokio::time::sleep_until(quiet_until) => {
                let reason = if pinged.is_some() {
                    format!("no answer to a ping within {pong_wait:?}")
                } else if conn.subs.is_empty() && conn.pipeline.is_empty() && conn.negentropy.as_ref().is_none_or(Sessions::is_empty) {
                    format!("idle for {idle:?} without a subscription; reconnect when you need the relay")
                } else {
                    pinged = Some(Instant::now());
                    if !deliver(&mut ws, [Message::Ping(Default::default())], &mut shutdown).await {
                        break;
                    }
                    continue;
                };
                tracing::debug!(%remote, %client, reason = %reason, "websocket closed: idle");
                let frame = CloseFrame { code: CloseCode::Policy, reason: reason.into() };
                let _ = tokio::time::timeout(Duration::from_secs(1), ws.send(Message::Close(Some(frame)))).await;
                break;
            }
            // NIP-77 sessions the client left idle are closed (NEG-ERR "closed: ...").
            _ = tokio::time::sleep_until(negentropy_due.unwrap_or(quiet_until)), if negentropy_due.is_some() => {
                if let Some(sessions) = conn.negentropy.as_mut() {
                    for closed in sessions.expire(Instant::now()) {
                        conn.send(closed);
                    }
                }
            }
            msg = ws.next() => {
                if let Some(Ok(_)) = msg {
                    // Anything, a pong included, shows the client is there.
                    last_heard = Instant::now();
                    pinged = None;
                }
                match msg {
                    None => break,
                    Some(Err(e)) => {
                        tracing::debug!(%remote, error = %e, "websocket read error");
                        break;
                    }
                    Some(Ok(Message::Text(text))) => conn.on_text(text.as_str()).await,
                    Some(Ok(Message::Binary(_))) => {
                        conn.notice("invalid: binary messages are not supported; send NIP-01 JSON as text frames")
                    }
                    Some(Ok(Message::Close(_))) => break,
                    // Pings are answered by tungstenite itself.
                    Some(Ok(_)) => {}
                }
            }
            Some(answer) = conn.pipeline.next(), if !conn.pipeline.is_empty() => {
                conn.answer(answer);
                // The answers ready by now go out with it, in one write.
                while let Some(Some(answer)) = conn.pipeline.next().now_or_never() {
                    conn.answer(answer);
                }
            }
            // Only a connection with subscriptions listens: the others are not woken for every
            // stored event (it resubscribes at its next REQ, see `Connection::on_req`).
            ev = conn.live.recv(), if !conn.subs.is_empty() => {
                match ev {
                    Ok(event) => conn.on_live(&event, None),
                    Err(RecvError::Lagged(n)) => conn.lagged(n),
                    Err(RecvError::Closed) => break,
                }
            }
        }
        if !flush(&mut ws, &mut conn, &mut shutdown).await {
            break;
        }
    }
    tracing::debug!(%remote, "websocket closed");
}

/// Writes what the connection has queued, and a REQ's stored answer chunk by chunk (each
/// written and flushed before the next is read, `crate::nostr::answer`); `false` when the
/// connection is to be dropped ([`deliver`]).
async fn flush<S>(ws: &mut WebSocketStream<S>, conn: &mut Connection, shutdown: &mut Shutdown) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        if !conn.out.is_empty() && !deliver(ws, conn.out.drain(..).map(Message::text), shutdown).await {
            return false;
        }
        if !conn.next_chunk().await {
            return true;
        }
    }
}

/// Writes `msgs` and flushes; `false` when the connection is to be dropped: a write failed (the
/// listener's write deadline included) or shutdown came while writing.
async fn deliver<S>(ws: &mut WebSocketStream<S>, msgs: impl IntoIterator<Item = Message>, shutdown: &mut Shutdown) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let write = async {
        for m in msgs {
            ws.feed(m).await?;
        }
        ws.flush().await
    };
    tokio::select! {
        r = write => r.is_ok(),
        _ = shutdown.recv() => false,
    }
}

/// Per-connection state; replies are queued in `out` and flushed by the loop.
struct Connection {
    grasp: Arc<Grasp>,
    limits: Limits,
    subs: Subscriptions,
    out: Vec<String>,
    /// The stored answer of a REQ being sent, chunk by chunk ([`flush`]).
    answer: Option<StoredAnswer>,
    live: broadcast::Receiver<Arc<Event>>,
    negentropy: Option<Sessions>,
    /// NIP-42 challenge and authenticated keys.
    auth: ConnectionAuth,
    /// This connection's write bucket.
    writes: TokenBucket,
    /// The client's address, for the per-address write bucket.
    client: IpAddr,
    /// `EVENT`s in flight; their `OK`s leave in order (`crate::nostr::pipeline`).
    pipeline: EventPipeline,
}

impl Connection {
    fn send(&mut self, msg: RelayMessage<'_>) {
        self.out.push(msg.as_json());
    }

    fn answer(&mut self, a: Answer) {
        self.challenge_for(&a.message);
        self.send(RelayMessage::ok(a.id, a.ok, a.message));
    }

    /// Sends the NIP-42 challenge unless it was sent already.
    fn challenge(&mut self) {
        if let Some(challenge) = self.auth.challenge_to_send() {
            let msg = RelayMessage::auth(challenge.to_string());
            self.send(msg);
        }
    }

    /// Before a refusal that asks for authentication (`auth-required:`), the challenge to
    /// answer: the client then has it when it reads the refusal.
    fn challenge_for(&mut self, refusal: &str) {
        if refusal.starts_with("auth-required:") {
            self.challenge();
        }
    }

    /// Answers every `EVENT` in flight: any other message is handled after them, as if the
    /// client had waited for each `OK`.
    async fn drain_pipeline(&mut self) {
        for a in self.pipeline.drain().await {
            self.answer(a);
        }
    }

    fn notice(&mut self, text: &str) {
        self.send(RelayMessage::notice(text.to_string()));
    }

    /// Forwards a live event to the matching subscriptions, except to `skip.0` if its initial
    /// results (`skip.1`) already contained the event.
    fn on_live(&mut self, event: &Event, skip: Option<(&SubscriptionId, &HashSet<EventId>)>) {
        if self.subs.is_empty() {
            return;
        }
        // A private service serves nothing once the connection's membership ended.
        if let Err(reason) = self.membership() {
            for id in self.subs.remove_all() {
                self.send(RelayMessage::closed(id, reason.clone()));
            }
            return;
        }
        let ids: Vec<SubscriptionId> = self.subs.matching(event).cloned().collect();
        for id in ids {
            if skip.is_some_and(|(sid, sent)| *sid == id && sent.contains(&event.id)) {
                continue;
            }
            self.send(RelayMessage::event(id, event.clone()));
        }
    }

    fn lagged(&mut self, n: u64) {
        self.notice(&format!("error: this connection fell behind and missed {n} live events; re-subscribe to catch up"))
    }

    /// Handles the live events already broadcast, so a new subscription's initial query and its
    /// live feed neither miss nor repeat events.
    fn drain_live(&mut self, skip: Option<(&SubscriptionId, &HashSet<EventId>)>) {
        loop {
            match self.live.try_recv() {
                Ok(event) => self.on_live(&event, skip),
                Err(TryRecvError::Lagged(n)) => self.lagged(n),
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
    }

    async fn on_text(&mut self, text: &str) {
        if text.len() > self.limits.max_message_bytes {
            let reason = format!(
                "invalid: message too large ({} bytes, limit {}); send a smaller event or REQ",
                text.len(),
                self.limits.max_message_bytes
            );
            self.drain_pipeline().await;
            match sniff_event_id(text) {
                Some(id) => self.send(RelayMessage::ok(id, false, reason)),
                None => self.notice(&reason),
            }
            return;
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                self.drain_pipeline().await;
                return self.notice(&format!(
                    "invalid: message is not JSON ({e}); send a NIP-01 JSON array"
                ))
            }
        };
        let Value::Array(mut items) = value else {
            self.drain_pipeline().await;
            return self.notice("invalid: message must be a JSON array like [\"EVENT\", {...}]");
        };
        if items.first().and_then(Value::as_str) == Some("EVENT") {
            return self.on_event(&mut items, text.len()).await;
        }
        // `["EVENT"` with spaces, or not an EVENT after all.
        self.drain_pipeline().await;
        let items = &items[..];
        match items.first().and_then(Value::as_str) {
            Some("REQ") => self.on_req(items).await,
            Some("CLOSE") => self.on_close(items),
            Some("AUTH") => self.on_auth(items).await,
            Some("NEG-OPEN" | "NEG-MSG" | "NEG-CLOSE") if self.negentropy.is_some() => {
                self.on_negentropy(items).await
            }
            Some(other) => {
                let speaks = match self.negentropy {
                    Some(_) => "EVENT, REQ, CLOSE, AUTH, NEG-OPEN, NEG-MSG and NEG-CLOSE",
                    None => "EVENT, REQ, CLOSE and AUTH",
                };
                self.notice(&format!("invalid: unsupported message type {other:?}; this relay speaks {speaks}"))
            }
            None => self.notice("invalid: message must start with a type string such as \"EVENT\""),
        }
    }

    /// Hands the event to the pipeline; a malformed one is refused in its turn.
    /// Refuses an `EVENT` in its turn; answers that had to leave first to make room go out now.
    async fn refuse_event(&mut self, id: EventId, reason: String) {
        for a in self.pipeline.refuse(id, reason).await {
            self.answer(a);
        }
    }

    async fn on_event(&mut self, items: &mut [Value], bytes: usize) {
        let Some(raw) = items.get_mut(1).map(Value::take) else {
            self.drain_pipeline().await;
            return self.notice("invalid: EVENT message without an event");
        };
        let id = raw.get("id").and_then(Value::as_str).and_then(|s| EventId::from_hex(s).ok());
        let event: Event = match serde_json::from_value(raw) {
            Ok(e) => e,
            Err(e) => {
                let reason = format!("invalid: malformed event ({e})");
                self.grasp.metrics().event(None, false, &reason);
                match id {
                    Some(id) => self.refuse_event(id, reason).await,
                    None => {
                        self.drain_pipeline().await;
                        self.notice(&reason)
                    }
                }
                return;
            }
        };
        // Refusals made here still answer in their turn, after the events in flight.
        if let Err(reason) = self.membership() {
            self.grasp.metrics().event(Some(event.kind.as_u16()), false, &reason);
            return self.refuse_event(event.id, reason).await;
        }
        if let Err(reason) = self.grasp.trust().limits.take_write(&mut self.writes, self.client) {
            tracing::info!(event = %event.id, client = %self.client, reason = %reason, "event rate-limited");
            self.grasp.metrics().event(Some(event.kind.as_u16()), false, &reason);
            return self.refuse_event(event.id, reason).await;
        }
        // The keys authenticated now: an AUTH sent later waits for this event (it drains the
        // pipeline), as if the client had waited for the OK.
        let authenticated = self.auth.authenticated().to_vec();
        for a in self.pipeline.submit(event, authenticated, bytes).await {
            self.answer(a);
        }
    }

    async fn on_req(&mut self, items: &[Value]) {
        let Some(id) = items.get(1).and_then(Value::as_str) else {
            return self.notice("invalid: REQ needs a subscription id string");
        };
        if id.is_empty() || id.chars().count() > MAX_SUBSCRIPTION_ID_LEN {
            return self.notice("invalid: subscription id must be 1 to 64 characters");
        }
        let sub_id = SubscriptionId::new(id);
        let mut filters = Vec::with_capacity(items.len().saturating_sub(2));
        for raw in &items[2..] {
            match serde_json::from_value::<Filter>(raw.clone()) {
                Ok(f) => filters.push(f),
                Err(e) => {
                    // NIP-01: CLOSED ends the subscription, an open one of this id included.
                    self.subs.remove(&sub_id);
                    return self.send(RelayMessage::closed(
                        sub_id,
                        format!("invalid: malformed filter ({e})"),
                    ));
                }
            }
        }
        if let Err(reason) = self.membership() {
            self.subs.remove(&sub_id);
            self.challenge_for(&reason);
            return self.send(RelayMessage::closed(sub_id, reason));
        }
        if let Err(e) = self.subs.check(&sub_id, &filters) {
            // A rejected REQ that reuses an open id ends that subscription too.
            self.subs.remove(&sub_id);
            return self.send(RelayMessage::closed(sub_id, e.to_string()));
        }
        // Events broadcast before this REQ go to the existing subscriptions only. Without any,
        // the receiver was not read meanwhile: a fresh one starts here, lag-free.
        if self.subs.is_empty() {
            self.live = self.grasp.relay.subscribe();
        } else {
            self.drain_live(None);
        }
        // Another replica of this set, authenticated, deciding a push: the held announcements
        // and states it asks for come first (`crate::peers::replica_reads`).
        if let Some(reads) = self.grasp.replica_reads() {
            for event in reads.held_for(&self.grasp, self.auth.authenticated(), &filters).await {
                self.send(RelayMessage::event(sub_id.clone(), (*event).clone()));
            }
        }
        match self.grasp.relay.store().answer_ids(filters.clone(), self.limits.max_limit).await {
            // Sent chunk by chunk by the connection's loop (`next_chunk`), then EOSE.
            Ok(ids) => self.answer = Some(StoredAnswer::new(sub_id, filters, ids, self.limits.max_answer_bytes)),
            Err(e) => self.query_failed(sub_id, e),
        }
    }

    fn query_failed(&mut self, sub_id: SubscriptionId, e: crate::store::StoreError) {
        tracing::error!(error = %e, "query failed");
        self.subs.remove(&sub_id);
        self.send(RelayMessage::closed(sub_id, "error: could not query the event store; try again"));
    }

    /// Queues the next chunk of the stored answer being sent (about [`CHUNK_BYTES`] of events,
    /// read one at a time), and once it is complete or cut by the budget, `EOSE`: the
    /// subscription then goes live, with the events broadcast meanwhile that it did not get
    /// already. `false` when no answer is being sent.
    async fn next_chunk(&mut self) -> bool {
        let Some(mut answer) = self.answer.take() else {
            return false;
        };
        let mut chunk = 0;
        while chunk < CHUNK_BYTES {
            let Some(id) = answer.next_id() else {
                break;
            };
            match self.grasp.relay.store().event_by_id(&id).await {
                Ok(Some(event)) => {
                    let message = RelayMessage::event(answer.id.clone(), event).as_json();
                    let Some(message) = answer.take(id, message) else {
                        break;
                    };
                    chunk += message.len();
                    self.out.push(message);
                }
                // Deleted or replaced since the ids were read: its successor comes live.
                Ok(None) => {}
                Err(e) => {
                    self.query_failed(answer.id, e);
                    return true;
                }
            }
        }
        if chunk >= CHUNK_BYTES {
            self.answer = Some(answer);
            return true;
        }
        if let Some(left) = answer.cut() {
            tracing::info!(client = %self.client, subscription = %answer.id, sent = answer.bytes(), left,
                budget = self.limits.max_answer_bytes, "REQ answer cut at the byte budget (--max-answer-bytes): EOSE sent");
        }
        self.send(RelayMessage::eose(answer.id.clone()));
        // Checked when the REQ came; cannot fail.
        let _ = self.subs.insert(answer.id.clone(), answer.filters.clone());
        // Events broadcast while the answer was read: live, unless already sent.
        self.drain_live(Some((&answer.id, answer.sent())));
        true
    }

    async fn on_negentropy(&mut self, items: &[Value]) {
        let kind = items.first().and_then(Value::as_str);
        // Without a readable id a refusal here would have no session to name: such a message is
        // refused as malformed by the sessions below, which scan nothing for it.
        let id = items.get(1).and_then(Value::as_str).map(|id| SubscriptionId::new(truncate(id, MAX_SUBSCRIPTION_ID_LEN)));
        // A private service reconciles only with members (docs/protocol.md#trust): every NEG-*
        // message but NEG-CLOSE checks, so a session opened by a member ends when the
        // membership does.
        if kind != Some("NEG-CLOSE") {
            if let (Err(reason), Some(id)) = (self.membership(), id.clone()) {
                return self.refuse_negentropy(id, reason);
            }
        }
        // Each NEG-OPEN scans and sorts up to --negentropy-max-items events: metered per address.
        if kind == Some("NEG-OPEN") {
            if let (Err(reason), Some(id)) = (self.grasp.trust().limits.take_negentropy_open(self.client), id) {
                tracing::info!(client = %self.client, subscription = %id, reason = %reason, "NEG-OPEN rate-limited");
                return self.refuse_negentropy(id, reason);
            }
        }
        if let Some(sessions) = self.negentropy.as_mut() {
            if let Some(reply) = sessions.handle(items, self.grasp.relay.store(), Instant::now()).await {
                self.send(reply);
            }
        }
    }

    /// Answers a NIP-77 message of session `id` with `NEG-ERR`, which ends that session (a
    /// refused NEG-OPEN closes the session of its id too, NIP-77).
    fn refuse_negentropy(&mut self, id: SubscriptionId, reason: String) {
        if let Some(sessions) = self.negentropy.as_mut() {
            sessions.close(&id);
        }
        self.challenge_for(&reason);
        self.send(RelayMessage::NegErr { subscription_id: std::borrow::Cow::Owned(id), message: std::borrow::Cow::Owned(reason) });
    }

    /// On a private service: is this connection authenticated as a current member? The refusal
    /// is a complete `auth-required:` / `restricted:` message.
    fn membership(&self) -> Result<(), String> {
        if !self.grasp.trust().private {
            return Ok(());
        }
        let keys = self.auth.authenticated();
        if keys.is_empty() {
            return Err("auth-required: this is a private GRASP service; authenticate as a member (NIP-42 AUTH) first".into());
        }
        if self.grasp.any_member(keys) {
            return Ok(());
        }
        Err("restricted: this is a private GRASP service and no key this connection authenticated as is a member; ask the operator to add you".into())
    }

    /// NIP-42 `["AUTH", <event>]`: answered with `OK` like an `EVENT`.
    async fn on_auth(&mut self, items: &[Value]) {
        let Some(raw) = items.get(1) else {
            return self.notice("invalid: AUTH message without an event; send [\"AUTH\", <signed kind 22242 event>]");
        };
        let event: Event = match serde_json::from_value(raw.clone()) {
            Ok(e) => e,
            Err(e) => {
                let reason = format!("invalid: malformed AUTH event ({e})");
                match raw.get("id").and_then(Value::as_str).and_then(|s| EventId::from_hex(s).ok()) {
                    Some(id) => self.send(RelayMessage::ok(id, false, reason)),
                    None => self.notice(&reason),
                }
                return;
            }
        };
        if !self.auth.challenge_sent() {
            // Nothing asked for it yet (a public service challenges on demand): the client gets
            // the challenge now and signs it.
            tracing::info!(event = %event.id, client = %self.client, "AUTH before any challenge: challenge sent");
            self.challenge();
            let reason = "auth-required: this relay had sent no challenge yet; sign the AUTH challenge it just sent (NIP-42) and send AUTH again";
            return self.send(RelayMessage::ok(event.id, false, reason));
        }
        match self.auth.authenticate(&event, self.grasp.public_host()) {
            AuthOutcome::Authenticated(pk) => {
                // On a private service, another replica of the set is recognised before its
                // `OK`, so what it asks next is answered as a member's.
                if self.grasp.trust().private && !self.grasp.trust().is_member(&pk) && self.grasp.is_member(&pk).await {
                    tracing::info!(pubkey = %pk, client = %self.client, "connection authenticated as another replica of this set");
                }
                tracing::info!(pubkey = %pk, client = %self.client, "connection authenticated (NIP-42)");
                self.send(RelayMessage::ok(event.id, true, ""));
            }
            AuthOutcome::Refused(reason) => {
                tracing::info!(event = %event.id, client = %self.client, reason = %reason, "AUTH refused");
                self.send(RelayMessage::ok(event.id, false, format!("invalid: {reason}")));
            }
        }
    }

    fn on_close(&mut self, items: &[Value]) {
        match items.get(1).and_then(Value::as_str) {
            Some(id) => {
                self.subs.remove(&SubscriptionId::new(id));
            }
            None => self.notice("invalid: CLOSE needs a subscription id string"),
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// Finds the event id of an (oversized) `["EVENT", {..."id":"<hex>"...}]` message without parsing
/// it, so that the refusal can be an `OK false` the client is waiting for.
fn sniff_event_id(text: &str) -> Option<EventId> {
    let head = text
        .trim_start()
        .strip_prefix('[')?
        .trim_start()
        .strip_prefix("\"EVENT\"")?;
    let mut rest = head;
    while let Some(pos) = rest.find("\"id\"") {
        let after = rest[pos + 4..]
            .trim_start()
            .strip_prefix(':')
            .map(str::trim_start);
        if let Some(v) = after.and_then(|a| a.strip_prefix('"')) {
            if let Some(hex) = v.get(..64) {
                if let Ok(id) = EventId::from_hex(hex) {
                    return Some(id);
                }
            }
        }
        rest = &rest[pos + 4..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_event_id() {
        let id = "a".repeat(64);
        assert_eq!(
            sniff_event_id(&format!(r#"["EVENT", {{"content":"x","id" : "{id}"}}]"#)),
            Some(EventId::from_hex(&id).unwrap())
        );
        assert_eq!(
            sniff_event_id(&format!(r#"["REQ", {{"id":"{id}"}}]"#)),
            None
        );
        assert_eq!(sniff_event_id(r#"["EVENT", {"id":"zz"}]"#), None);
        assert_eq!(sniff_event_id("garbage"), None);
        assert_eq!(sniff_event_id(r#"["EVENT", {"id":"é"#), None);
    }
}
