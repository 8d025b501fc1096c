//! NIP-77 negentropy reconciliation served over the event store.
//!
//! A client (or a peer relay) sends `NEG-OPEN` with a filter and its first negentropy message;
//! the relay lists the (id, created_at) of the stored events matching the filter and answers
//! with `NEG-MSG` rounds until the client sends `NEG-CLOSE`. Only stored, served events take
//! part: events held in the purgatory are not in the store, so they are never offered.
//!
//! Everything the client sends is hostile: a refusal is a `NEG-ERR` (or a NOTICE when no
//! subscription id can be read), never a dropped connection, and the session is then closed.
//! Bounds (docs/security.md): a connection has at most [`NegentropyLimits::max_sessions`]
//! sessions of at most [`NegentropyLimits::max_items`] events each, holding at most
//! [`NegentropyLimits::max_items_per_connection`] together; all connections' sessions together
//! hold at most the [`ItemBudget`]'s total; a session that gets no `NEG-MSG` for
//! [`NegentropyLimits::idle_timeout`] is closed with `NEG-ERR "closed: ..."`
//! ([`Sessions::expire`]); each `NEG-OPEN` costs a token of the client address's bucket (taken by
//! the connection, `crate::trust::limits`). The relay's own messages are kept under
//! [`FRAME_SIZE_LIMIT`] (the protocol continues in more rounds).
//!
//! Layout: [`NegMessage::parse`] (pure parsing of the three client messages), [`Session`] (one
//! reconciliation over a fixed set of items), [`ItemBudget`] (the items held by every session of
//! the relay), [`Sessions`] (the open sessions of one connection; the connection hands every
//! `NEG-*` message to [`Sessions::handle`] and calls [`Sessions::expire`] when
//! [`Sessions::next_expiry`] comes).

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Duration;

use negentropy::{Id, Negentropy, NegentropyStorageVector};
use nostr::prelude::*;
use serde_json::Value;
use tokio::time::Instant;

use crate::config::LimitsConfig;
use crate::nostr::subscriptions::MAX_SUBSCRIPTION_ID_LEN;
use crate::store::Store;

/// Open negentropy sessions per connection.
pub const DEFAULT_MAX_SESSIONS: usize = 8;

/// Stored events one session may reconcile (`--negentropy-max-items`).
pub const DEFAULT_MAX_ITEMS: usize = crate::config::DEFAULT_NEGENTROPY_MAX_ITEMS;

/// Stored events all sessions of one connection may hold (`--negentropy-max-items-per-connection`).
pub const DEFAULT_MAX_ITEMS_PER_CONNECTION: usize = crate::config::DEFAULT_NEGENTROPY_MAX_ITEMS_PER_CONNECTION;

/// Stored events all sessions of the relay may hold (`--negentropy-max-items-total`): about
/// 200 MB.
pub const DEFAULT_MAX_ITEMS_TOTAL: usize = crate::config::DEFAULT_NEGENTROPY_MAX_ITEMS_TOTAL;

/// A session without `NEG-MSG` for this long is closed (`--negentropy-idle-timeout`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest negentropy message the relay sends, in bytes before hex encoding (so about 120 KB
/// on the wire); the protocol carries the rest over further rounds.
pub const FRAME_SIZE_LIMIT: u64 = 60_000;

/// Bounds of the negentropy sessions of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NegentropyLimits {
    pub max_sessions: usize,
    /// Items of one session.
    pub max_items: usize,
    /// Items of all sessions of the connection together.
    pub max_items_per_connection: usize,
    /// A session without `NEG-MSG` for this long is closed.
    pub idle_timeout: Duration,
}

impl NegentropyLimits {
    /// NIP-77 session limits per connection from the configuration, or `None` with `--no-negentropy`.
    pub fn from_config(limits: &LimitsConfig) -> Option<NegentropyLimits> {
        limits.negentropy_enabled().then(|| NegentropyLimits {
            max_items: limits.negentropy_max_items,
            max_items_per_connection: limits.negentropy_max_items_per_connection,
            idle_timeout: limits.negentropy_idle_timeout,
            ..NegentropyLimits::default()
        })
    }
}

impl Default for NegentropyLimits {
    fn default() -> Self {
        Self {
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_items: DEFAULT_MAX_ITEMS,
            max_items_per_connection: DEFAULT_MAX_ITEMS_PER_CONNECTION,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

pub use crate::store::item_budget::{ItemBudget, Reservation};

/// A client's `NEG-OPEN`, `NEG-MSG` or `NEG-CLOSE`, with the negentropy message hex-decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum NegMessage {
    Open {
        id: SubscriptionId,
        filter: Box<Filter>,
        message: Vec<u8>,
    },
    Msg {
        id: SubscriptionId,
        message: Vec<u8>,
    },
    Close {
        id: SubscriptionId,
    },
}

/// A refused `NEG-*` message: answered with `NEG-ERR` when its subscription id could be read
/// (which also closes that session), else with a NOTICE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub id: Option<SubscriptionId>,
    pub reason: String,
}

impl Refusal {
    fn notice(reason: impl Into<String>) -> Self {
        Self {
            id: None,
            reason: reason.into(),
        }
    }

    fn neg_err(id: &SubscriptionId, reason: impl Into<String>) -> Self {
        Self {
            id: Some(id.clone()),
            reason: reason.into(),
        }
    }

    /// The `NEG-ERR` or NOTICE that answers it.
    pub fn into_message(self) -> RelayMessage<'static> {
        match self.id {
            Some(id) => neg_err(id, self.reason),
            None => RelayMessage::notice(self.reason),
        }
    }
}

fn neg_err(id: SubscriptionId, reason: String) -> RelayMessage<'static> {
    RelayMessage::NegErr {
        subscription_id: Cow::Owned(id),
        message: Cow::Owned(reason),
    }
}

fn neg_msg(id: SubscriptionId, message: &[u8]) -> RelayMessage<'static> {
    RelayMessage::NegMsg {
        subscription_id: Cow::Owned(id),
        message: Cow::Owned(faster_hex::hex_string(message)),
    }
}

impl NegMessage {
    /// Parses a client message whose first element is `NEG-OPEN`, `NEG-MSG` or `NEG-CLOSE`:
    /// `["NEG-OPEN", <id>, <filter>, <hex>]`, `["NEG-MSG", <id>, <hex>]`, `["NEG-CLOSE", <id>]`.
    pub fn parse(items: &[Value]) -> Result<Self, Refusal> {
        let kind = items.first().and_then(Value::as_str).unwrap_or_default();
        let usage = match kind {
            "NEG-OPEN" => r#"["NEG-OPEN", <subscription id>, <filter>, <hex message>]"#,
            "NEG-MSG" => r#"["NEG-MSG", <subscription id>, <hex message>]"#,
            "NEG-CLOSE" => r#"["NEG-CLOSE", <subscription id>]"#,
            _ => return Err(Refusal::notice("invalid: not a NIP-77 message")),
        };
        let Some(id) = items.get(1).and_then(Value::as_str) else {
            return Err(Refusal::notice(format!(
                "invalid: {kind} needs a subscription id string: {usage}"
            )));
        };
        if id.is_empty() || id.chars().count() > MAX_SUBSCRIPTION_ID_LEN {
            return Err(Refusal::notice(
                "invalid: subscription id must be 1 to 64 characters",
            ));
        }
        let id = SubscriptionId::new(id);
        let message = |at: usize| -> Result<Vec<u8>, Refusal> {
            let Some(hex) = items.get(at).and_then(Value::as_str) else {
                return Err(Refusal::neg_err(
                    &id,
                    format!("invalid: {kind} needs a hex-encoded negentropy message: {usage}"),
                ));
            };
            decode_hex(hex).ok_or_else(|| {
                Refusal::neg_err(
                    &id,
                    format!("invalid: the {kind} message is not hex; send the negentropy message hex-encoded"),
                )
            })
        };
        match kind {
            "NEG-OPEN" => {
                let Some(raw) = items.get(2) else {
                    return Err(Refusal::neg_err(
                        &id,
                        format!("invalid: NEG-OPEN needs a filter: {usage}"),
                    ));
                };
                let filter: Filter = serde_json::from_value(raw.clone()).map_err(|e| {
                    Refusal::neg_err(&id, format!("invalid: malformed filter ({e})"))
                })?;
                let message = message(3)?;
                Ok(Self::Open {
                    id,
                    filter: Box::new(filter),
                    message,
                })
            }
            "NEG-MSG" => {
                let message = message(2)?;
                Ok(Self::Msg { id, message })
            }
            _ => Ok(Self::Close { id }),
        }
    }
}

/// Strict hex: an even number of hex digits (either case).
fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let mut out = vec![0u8; hex.len() / 2];
    faster_hex::hex_decode(hex.as_bytes(), &mut out).ok()?;
    Some(out)
}

/// One reconciliation, server side, over the items listed when it was opened.
#[derive(Debug)]
pub struct Session(Negentropy<'static, NegentropyStorageVector>);

impl Session {
    /// A session over `items` (id, created_at).
    pub fn new(items: Vec<(EventId, Timestamp)>) -> Result<Self, negentropy::Error> {
        let mut storage = NegentropyStorageVector::with_capacity(items.len());
        for (id, created_at) in items {
            storage.insert(created_at.as_secs(), Id::from_byte_array(id.to_bytes()))?;
        }
        storage.seal()?;
        Ok(Self(Negentropy::owned(storage, FRAME_SIZE_LIMIT)?))
    }

    /// The answer to one message of the client.
    pub fn reconcile(&mut self, message: &[u8]) -> Result<Vec<u8>, negentropy::Error> {
        self.0.reconcile(message)
    }
}

/// An open session with what it holds.
#[derive(Debug)]
struct Held {
    session: Session,
    /// Its items, reserved in the relay's budget.
    items: Reservation,
    /// When the client last sent it NEG-OPEN or NEG-MSG.
    last_used: Instant,
}

/// The open negentropy sessions of one connection.
#[derive(Debug)]
pub struct Sessions {
    open: HashMap<SubscriptionId, Held>,
    limits: NegentropyLimits,
    budget: ItemBudget,
}

impl Sessions {
    /// No sessions yet; the items of those to come are counted in `budget`, shared by every
    /// connection.
    pub fn new(limits: NegentropyLimits, budget: ItemBudget) -> Self {
        Self {
            open: HashMap::new(),
            limits,
            budget,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Items held by this connection's sessions.
    pub fn items(&self) -> usize {
        self.open.values().map(|h| h.items.items()).sum()
    }

    /// When the next session falls idle, if any is open.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.open
            .values()
            .map(|h| h.last_used + self.limits.idle_timeout)
            .min()
    }

    /// Closes the sessions idle at `now`; returns the `NEG-ERR "closed: ..."` telling the client.
    pub fn expire(&mut self, now: Instant) -> Vec<RelayMessage<'static>> {
        let idle = self.limits.idle_timeout;
        let due: Vec<SubscriptionId> = self
            .open
            .iter()
            .filter(|(_, h)| h.last_used + idle <= now)
            .map(|(id, _)| id.clone())
            .collect();
        due.into_iter()
            .map(|id| {
                let held = self.open.remove(&id);
                tracing::info!(subscription = %id, items = held.map_or(0, |h| h.items.items()), idle = ?idle, "negentropy session expired");
                neg_err(
                    id,
                    format!("closed: no NEG-MSG for {idle:?}; send NEG-OPEN to start again"),
                )
            })
            .collect()
    }

    /// Handles one `NEG-OPEN`, `NEG-MSG` or `NEG-CLOSE` (the message as a JSON array) received
    /// at `now` and returns the reply to send, if any.
    pub async fn handle(&mut self, items: &[Value], store: &Store, now: Instant) -> Option<RelayMessage<'static>> {
        let result = match NegMessage::parse(items) {
            Ok(NegMessage::Open {
                id,
                filter,
                message,
            }) => self.open(id, *filter, message, store, now).await.map(Some),
            Ok(NegMessage::Msg { id, message }) => self.reconcile(id, message, now).await.map(Some),
            Ok(NegMessage::Close { id }) => {
                self.close(&id);
                Ok(None)
            }
            Err(refusal) => Err(refusal),
        };
        match result {
            Ok(reply) => reply,
            Err(refusal) => {
                // NIP-77: after a NEG-ERR the subscription is closed.
                if let Some(id) = &refusal.id {
                    self.open.remove(id);
                }
                Some(refusal.into_message())
            }
        }
    }

    /// Ends session `id`, if open (NEG-CLOSE, or refused by the connection).
    pub fn close(&mut self, id: &SubscriptionId) {
        self.open.remove(id);
    }

    async fn open(
        &mut self,
        id: SubscriptionId,
        filter: Filter,
        message: Vec<u8>,
        store: &Store,
        now: Instant,
    ) -> Result<RelayMessage<'static>, Refusal> {
        // NIP-77: a NEG-OPEN for an open subscription id first closes it.
        self.open.remove(&id);
        let NegentropyLimits {
            max_sessions,
            max_items,
            max_items_per_connection,
            ..
        } = self.limits;
        if self.open.len() >= max_sessions {
            tracing::info!(subscription = %id, limit = max_sessions, reason = "too many sessions", "NEG-OPEN refused");
            return Err(Refusal::neg_err(
                &id,
                format!("blocked: too many open negentropy sessions on this connection (limit {max_sessions}); send NEG-CLOSE for one before opening another"),
            ));
        }
        let items = store
            .negentropy_items(filter, max_items.saturating_add(1))
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "negentropy query failed");
                Refusal::neg_err(&id, "error: could not query the event store; try again")
            })?;
        if items.len() > max_items {
            tracing::info!(subscription = %id, limit = max_items, reason = "too many events", "NEG-OPEN refused");
            return Err(Refusal::neg_err(
                &id,
                format!("blocked: the filter matches more than {max_items} events; narrow it (since/until, kinds, authors) and reconcile in parts"),
            ));
        }
        let held = self.items();
        if held.saturating_add(items.len()) > max_items_per_connection {
            tracing::info!(subscription = %id, held, limit = max_items_per_connection, reason = "connection holds too many events", "NEG-OPEN refused");
            return Err(Refusal::neg_err(
                &id,
                format!("blocked: this connection's negentropy sessions already hold {held} events and may hold {max_items_per_connection}; send NEG-CLOSE for the sessions you are done with, or narrow the filter"),
            ));
        }
        let count = items.len();
        let Some(reservation) = self.budget.reserve(count) else {
            tracing::info!(subscription = %id, items = count, held = self.budget.held(), limit = self.budget.total(), reason = "relay holds too many events", "NEG-OPEN refused");
            return Err(Refusal::neg_err(
                &id,
                format!("rate-limited: this relay's negentropy sessions hold as many events as it allows ({}) for all clients; retry NEG-OPEN in a minute, or narrow the filter", self.budget.total()),
            ));
        };
        // Sorting and fingerprinting up to max_items is CPU work: off the async workers.
        let built = tokio::task::spawn_blocking(move || {
            let mut session = Session::new(items)?;
            let reply = session.reconcile(&message)?;
            Ok::<_, negentropy::Error>((session, reply))
        })
        .await;
        let (session, reply) = match built {
            Ok(Ok(done)) => done,
            Ok(Err(e)) => return Err(bad_message(&id, e)),
            Err(e) => return Err(crashed(&id, e)),
        };
        tracing::debug!(subscription = %id, items = count, "NEG-OPEN");
        self.open.insert(
            id.clone(),
            Held {
                session,
                items: reservation,
                last_used: now,
            },
        );
        Ok(neg_msg(id, &reply))
    }

    async fn reconcile(
        &mut self,
        id: SubscriptionId,
        message: Vec<u8>,
        now: Instant,
    ) -> Result<RelayMessage<'static>, Refusal> {
        let Some(Held { mut session, items, .. }) = self.open.remove(&id) else {
            return Err(Refusal::neg_err(
                &id,
                "closed: no open negentropy session with this id; send NEG-OPEN to start one",
            ));
        };
        let done = tokio::task::spawn_blocking(move || {
            let reply = session.reconcile(&message);
            (session, reply)
        })
        .await;
        match done {
            Ok((session, Ok(reply))) => {
                self.open.insert(id.clone(), Held { session, items, last_used: now });
                Ok(neg_msg(id, &reply))
            }
            Ok((_, Err(e))) => Err(bad_message(&id, e)),
            Err(e) => Err(crashed(&id, e)),
        }
    }
}

fn bad_message(id: &SubscriptionId, e: negentropy::Error) -> Refusal {
    Refusal::neg_err(
        id,
        format!("invalid: bad negentropy message ({e}); send NEG-OPEN to start again"),
    )
}

fn crashed(id: &SubscriptionId, e: tokio::task::JoinError) -> Refusal {
    tracing::error!(subscription = %id, error = %e, "negentropy reconciliation failed");
    Refusal::neg_err(
        id,
        "error: the negentropy reconciliation failed; send NEG-OPEN to start again",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<NegMessage, Refusal> {
        NegMessage::parse(v.as_array().unwrap())
    }

    fn sid(s: &str) -> SubscriptionId {
        SubscriptionId::new(s)
    }

    #[test]
    fn parses_the_three_messages() {
        assert_eq!(
            parse(json!(["NEG-OPEN", "n1", {"kinds": [1]}, "61AB"])),
            Ok(NegMessage::Open {
                id: sid("n1"),
                filter: Box::new(Filter::new().kind(Kind::TextNote)),
                message: vec![0x61, 0xab],
            })
        );
        assert_eq!(
            parse(json!(["NEG-MSG", "n1", "6100"])),
            Ok(NegMessage::Msg {
                id: sid("n1"),
                message: vec![0x61, 0],
            })
        );
        assert_eq!(
            parse(json!(["NEG-CLOSE", "n1"])),
            Ok(NegMessage::Close { id: sid("n1") })
        );
        // Extra trailing elements are ignored, as NIP-01 clients may add them.
        assert!(parse(json!(["NEG-CLOSE", "n1", 5])).is_ok());
    }

    #[test]
    fn refusals_name_the_subscription_when_they_can() {
        let err = |v: Value| parse(v).unwrap_err();
        // No readable id: NOTICE.
        for bad in [
            json!(["NEG-OPEN"]),
            json!(["NEG-MSG", 7, "61"]),
            json!(["NEG-CLOSE", ""]),
            json!(["NEG-OPEN", "x".repeat(65), {}, "61"]),
        ] {
            let r = err(bad.clone());
            assert_eq!(r.id, None, "{bad}");
            assert!(r.reason.starts_with("invalid:"), "{r:?}");
        }
        // Id readable: NEG-ERR for that id.
        for bad in [
            json!(["NEG-OPEN", "s"]),
            json!(["NEG-OPEN", "s", {}]),
            json!(["NEG-OPEN", "s", "not a filter", "61"]),
            json!(["NEG-OPEN", "s", {"kinds": "x"}, "61"]),
            json!(["NEG-OPEN", "s", {}, "zz"]),
            json!(["NEG-OPEN", "s", {}, "612"]),
            json!(["NEG-OPEN", "s", {}, 97]),
            json!(["NEG-MSG", "s"]),
            json!(["NEG-MSG", "s", "6g"]),
        ] {
            let r = err(bad.clone());
            assert_eq!(r.id, Some(sid("s")), "{bad}");
            assert!(r.reason.starts_with("invalid:"), "{r:?}");
            assert!(matches!(r.into_message(), RelayMessage::NegErr { .. }));
        }
    }

    #[test]
    fn refusal_messages_are_nip77_shaped() {
        let m = Refusal::neg_err(&sid("a"), "blocked: too big").into_message();
        assert_eq!(m.as_json(), r#"["NEG-ERR","a","blocked: too big"]"#);
        assert_eq!(
            Refusal::notice("invalid: x").into_message().as_json(),
            r#"["NOTICE","invalid: x"]"#
        );
        assert_eq!(neg_msg(sid("a"), &[0x61, 0xff]).as_json(), r#"["NEG-MSG","a","61ff"]"#);
    }

    fn id(n: u8) -> EventId {
        EventId::from_byte_array([n; 32])
    }

    /// Runs a whole reconciliation between a client holding `mine` and a session over `theirs`;
    /// returns (ids only the client has, ids only the server has).
    fn reconcile(
        mine: &[(EventId, Timestamp)],
        theirs: &[(EventId, Timestamp)],
    ) -> (Vec<EventId>, Vec<EventId>) {
        let mut storage = NegentropyStorageVector::new();
        for (id, at) in mine {
            storage.insert(at.as_secs(), Id::from_byte_array(id.to_bytes())).unwrap();
        }
        storage.seal().unwrap();
        let mut client = Negentropy::owned(storage, 4096).unwrap();
        let mut server = Session::new(theirs.to_vec()).unwrap();
        let (mut have, mut need) = (Vec::new(), Vec::new());
        let mut msg = client.initiate().unwrap();
        for _ in 0..100 {
            let reply = server.reconcile(&msg).unwrap();
            match client.reconcile_with_ids(&reply, &mut have, &mut need).unwrap() {
                Some(next) => msg = next,
                None => {
                    let ev = |ids: Vec<Id>| {
                        let mut v: Vec<EventId> =
                            ids.into_iter().map(|i| EventId::from_byte_array(i.to_bytes())).collect();
                        v.sort();
                        v
                    };
                    return (ev(have), ev(need));
                }
            }
        }
        panic!("reconciliation did not end");
    }

    #[test]
    fn session_finds_the_differences() {
        let at = |s: u64| Timestamp::from(s);
        let common: Vec<_> = (0..200u8).map(|n| (id(n), at(1000 + n as u64 / 3))).collect();
        let mut mine = common.clone();
        mine.push((id(230), at(5)));
        let mut theirs = common;
        theirs.push((id(240), at(1050)));
        theirs.push((id(241), at(9_999_999)));
        assert_eq!(reconcile(&mine, &theirs), (vec![id(230)], vec![id(240), id(241)]));
        assert_eq!(reconcile(&[], &[]), (vec![], vec![]));
    }

    #[test]
    fn large_sets_take_several_rounds_within_the_frame_limit() {
        let theirs: Vec<_> = (0..20_000u32)
            .map(|n| {
                let mut b = [0u8; 32];
                b[..4].copy_from_slice(&n.to_be_bytes());
                (EventId::from_byte_array(b), Timestamp::from(n as u64))
            })
            .collect();
        let mut server = Session::new(theirs.clone()).unwrap();
        let mut client = Negentropy::owned(
            {
                let mut s = NegentropyStorageVector::new();
                s.seal().unwrap();
                s
            },
            0,
        )
        .unwrap();
        let first = client.initiate().unwrap();
        let reply = server.reconcile(&first).unwrap();
        assert!(reply.len() as u64 <= FRAME_SIZE_LIMIT, "{}", reply.len());
        assert_eq!(reconcile(&[], &theirs).1.len(), 20_000);
    }

    #[test]
    fn the_budget_is_shared_and_given_back_when_sessions_end() {
        let budget = ItemBudget::new(10);
        let other_connection = budget.clone();
        let a = budget.reserve(6).unwrap();
        assert!(other_connection.reserve(5).is_none(), "6 + 5 > 10");
        let b = other_connection.reserve(4).unwrap();
        assert_eq!(budget.held(), 10);
        assert!(budget.reserve(1).is_none());
        assert!(budget.reserve(0).is_some());
        drop(a);
        assert_eq!(other_connection.held(), 4);
        assert!(budget.reserve(6).is_some());
        drop(b);
        assert_eq!(budget.held(), 0);
        assert!(budget.reserve(usize::MAX).is_none());
    }

    /// A store with `n` kind-1 events by one author, one per second.
    async fn store_with(n: u64) -> (Store, tempfile::TempDir) {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path()).await.unwrap();
        let keys = Keys::generate();
        for i in 0..n {
            let e = EventBuilder::new(Kind::TextNote, format!("{i}"))
                .custom_created_at(Timestamp::from(1_000 + i))
                .finalize(&keys)
                .unwrap();
            store.save(&e).await.unwrap();
        }
        (store, tmp)
    }

    fn open_msg(id: &str, limit: usize) -> Vec<Value> {
        let mut storage = NegentropyStorageVector::new();
        storage.seal().unwrap();
        let first = Negentropy::owned(storage, 4096).unwrap().initiate().unwrap();
        json!(["NEG-OPEN", id, {"kinds": [1], "limit": limit}, faster_hex::hex_string(&first)])
            .as_array()
            .unwrap()
            .clone()
    }

    fn refusal(reply: Option<RelayMessage<'static>>) -> Option<String> {
        match reply? {
            RelayMessage::NegErr { message, .. } => Some(message.into_owned()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_connection_and_the_relay_hold_at_most_their_items() {
        let (store, _tmp) = store_with(10).await;
        let limits = NegentropyLimits { max_items: 6, max_items_per_connection: 8, ..NegentropyLimits::default() };
        let budget = ItemBudget::new(10);
        let t0 = Instant::now();
        let mut one = Sessions::new(limits, budget.clone());
        assert_eq!(refusal(one.handle(&open_msg("a", 5), &store, t0).await), None);
        assert_eq!(refusal(one.handle(&open_msg("b", 3), &store, t0).await), None);
        assert_eq!((one.items(), budget.held()), (8, 8));
        // The connection holds 8 of its 8: one more event is refused, naming NEG-CLOSE.
        let err = refusal(one.handle(&open_msg("c", 1), &store, t0).await).unwrap();
        assert!(err.starts_with("blocked:") && err.contains("NEG-CLOSE"), "{err}");
        // Re-opening "b" frees its 3 first, so 3 fit again.
        assert_eq!(refusal(one.handle(&open_msg("b", 3), &store, t0).await), None);
        // The per-session bound still speaks for itself.
        one.handle(json!(["NEG-CLOSE", "a"]).as_array().unwrap(), &store, t0).await;
        let err = refusal(one.handle(&open_msg("a", 7), &store, t0).await).unwrap();
        assert!(err.starts_with("blocked: the filter matches more than 6"), "{err}");
        assert_eq!(budget.held(), 3);
        // Another connection: 3 + 6 of 10 fit, 3 + 6 + 2 do not (the relay's total).
        let mut two = Sessions::new(limits, budget.clone());
        assert_eq!(refusal(two.handle(&open_msg("x", 6), &store, t0).await), None);
        let err = refusal(two.handle(&open_msg("y", 2), &store, t0).await).unwrap();
        assert!(err.starts_with("rate-limited:") && err.contains("10"), "{err}");
        drop(one);
        assert_eq!(budget.held(), 6, "a connection's sessions give their items back when it ends");
        assert_eq!(refusal(two.handle(&open_msg("y", 2), &store, t0).await), None);
    }

    #[tokio::test]
    async fn idle_sessions_expire_and_neg_msg_keeps_one_alive() {
        let (store, _tmp) = store_with(3).await;
        let idle = Duration::from_secs(60);
        let limits = NegentropyLimits { idle_timeout: idle, ..NegentropyLimits::default() };
        let budget = ItemBudget::new(100);
        let mut sessions = Sessions::new(limits, budget.clone());
        assert_eq!(sessions.next_expiry(), None);
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        assert_eq!(refusal(sessions.handle(&open_msg("quiet", 3), &store, t0).await), None);
        assert_eq!(refusal(sessions.handle(&open_msg("busy", 3), &store, t0).await), None);
        assert_eq!(sessions.next_expiry(), Some(at(60)));
        // A NEG-MSG at 40 s (an empty client's first message again) keeps "busy" alive.
        let msg = open_msg("busy", 3)[3].clone();
        let reply = sessions.handle(json!(["NEG-MSG", "busy", msg]).as_array().unwrap(), &store, at(40)).await;
        assert!(matches!(reply, Some(RelayMessage::NegMsg { .. })), "{reply:?}");
        assert!(sessions.expire(at(59)).is_empty());
        let closed = sessions.expire(at(61));
        assert_eq!(closed.len(), 1);
        let json = closed[0].as_json();
        assert!(json.starts_with(r#"["NEG-ERR","quiet","closed: "#), "{json}");
        assert_eq!(budget.held(), 3, "the expired session's items are given back");
        assert_eq!(sessions.next_expiry(), Some(at(100)));
        // NEG-MSG on the expired session: closed, as for any unknown id.
        let err = refusal(sessions.handle(json!(["NEG-MSG", "quiet", "61"]).as_array().unwrap(), &store, at(62)).await).unwrap();
        assert!(err.starts_with("closed:"), "{err}");
        assert_eq!(sessions.expire(at(100)).len(), 1);
        assert!(sessions.is_empty() && sessions.next_expiry().is_none());
        assert_eq!(budget.held(), 0);
    }

    proptest! {
        /// Hostile negentropy bytes never panic a session: they are answered or refused.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), prefix in any::<bool>()) {
            let items: Vec<_> = (0..50u8).map(|n| (id(n), Timestamp::from(n as u64 * 7))).collect();
            let mut session = Session::new(items).unwrap();
            let mut msg = bytes;
            if prefix {
                msg.insert(0, 0x61);
            }
            let _ = session.reconcile(&msg);
            let _ = session.reconcile(&[0x61]);
        }

        #[test]
        fn parse_never_panics(s in ".{0,80}", id in "[a-z]{1,8}") {
            let _ = parse(json!(["NEG-MSG", id, s]));
            let _ = parse(json!(["NEG-OPEN", id, {}, s]));
        }
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::config::Config;
    use clap::Parser;

    #[test]
    fn negentropy_is_on_unless_switched_off() {
        assert_eq!(NegentropyLimits::from_config(&LimitsConfig::default()), Some(NegentropyLimits::default()));
        assert_eq!(NegentropyLimits::default().max_items, 500_000);
        let limits = LimitsConfig { negentropy_max_items: 3, ..LimitsConfig::default() };
        assert_eq!(NegentropyLimits::from_config(&limits).map(|l| l.max_items), Some(3));
        let cfg = Config::parse_from(["grasp-relay", "--negentropy-max-items", "3"]);
        assert_eq!(cfg.limits.negentropy_max_items, 3);
        let cfg = Config::parse_from(["grasp-relay", "--no-negentropy"]);
        assert_eq!(NegentropyLimits::from_config(&cfg.limits), None);
    }
}
