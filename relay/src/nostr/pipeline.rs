//! Pipelining of one connection's `EVENT` messages.
//!
//! A client may send many `EVENT`s without waiting for each `OK`. Instead of handling them one
//! after another, the connection hands each to an [`EventPipeline`]: its signature is verified
//! on a bounded pool (at most one verification per core at a time, process-wide) and its
//! submission runs as its own task, so several events of one connection are verified, admitted
//! and stored at once (the store then commits their writes in one transaction). The `OK`
//! answers still leave in the order the `EVENT`s came: the pipeline is an ordered queue of
//! futures.
//!
//! Overlap never changes an answer. Only *independent* events run side by side: regular kinds
//! whose acceptance reads what others write, never writes what others read
//! ([`runs_alongside`]), that neither reference (`e`/`E`/`q`) an event in flight nor are
//! referenced by one, and that are not themselves in flight. Everything else (announcements,
//! states, pull requests, deletions, replaceable and ephemeral kinds, a reply to an event still
//! in flight) first waits for every earlier event to finish, and later events wait for it, so
//! it sees exactly what it would have seen had the client waited for each `OK`. The connection
//! also drains the pipeline before any other message (`REQ`, `CLOSE`, `NEG-*`, notices).
//!
//! An event is *admitted* when its submission returns, and *answered* once what it changed is
//! durable (a held event's purgatory journal record is synced, docs/protocol.md#checkpoints).
//! Ordering waits only for admission: the next event runs while the disk syncs the previous one,
//! so a stream of held events shares journal syncs (group commit) instead of paying one each. The
//! `OK`s still leave in order, each only once its event is durable.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesOrdered, StreamExt};
use grasp_state::trust::auth::Submitter;
use grasp_state::nostr::nip34::{references, KIND_DELETION, KIND_PR, KIND_PR_UPDATE};
use nostr::prelude::{Event, EventId, PublicKey};
use tokio::sync::Semaphore;

use crate::grasp::journal::Durable;
use crate::grasp::Grasp;

/// Most events of one connection in flight at once; the connection stops reading until the
/// oldest is answered (backpressure on a client that never reads its `OK`s). Large enough for
/// one connection's events to fill a store commit (`crate::store::group_commit`).
pub const MAX_IN_FLIGHT: usize = 256;

/// Most bytes of `EVENT` messages of one connection being admitted at once (one event always
/// may, whatever its size): many large events wait like many small ones.
pub const MAX_IN_FLIGHT_BYTES: usize = 4 << 20;

/// The bounded pool signature checks run on: one permit per core, shared by every connection
/// (and relay sync).
pub fn verify_pool() -> &'static Semaphore {
    static POOL: OnceLock<Semaphore> = OnceLock::new();
    POOL.get_or_init(|| Semaphore::new(std::thread::available_parallelism().map_or(2, |n| n.get())))
}

/// Can events of this kind run alongside other events of the same connection? Only regular
/// kinds whose admission is a read-only check followed by a store write (issues, comments,
/// patches, statuses, ...). Pull requests (held in the purgatory, ref writes), deletions,
/// replaceable, addressable and ephemeral kinds run alone.
pub fn runs_alongside(event: &Event) -> bool {
    let kind = event.kind.as_u16();
    event.kind.is_regular() && !matches!(kind, KIND_DELETION | KIND_PR | KIND_PR_UPDATE)
}

/// The `OK` answer for one `EVENT`, in the order the `EVENT`s came.
#[derive(Debug)]
pub struct Answer {
    pub id: EventId,
    pub ok: bool,
    pub message: String,
    /// What this event held in the in-flight sets (`None` for refusals made before submission).
    tracked: Option<Tracked>,
}

#[derive(Debug)]
struct Tracked {
    alone: bool,
    refs: Vec<EventId>,
    /// Bytes of its `EVENT` message.
    bytes: usize,
}

/// One connection's events in flight.
pub struct EventPipeline {
    grasp: Arc<Grasp>,
    /// The client's address as counted (see [`EventPipeline::new`]).
    address: Option<std::net::IpAddr>,
    /// Events being admitted, in order; each yields its answer and what it waits to be durable.
    queue: FuturesOrdered<BoxFuture<'static, (Answer, Durable)>>,
    /// Admitted events whose answers wait for durability, in order (all older than `queue`'s).
    settling: FuturesOrdered<BoxFuture<'static, Answer>>,
    /// Ids of the submitted events in flight (a count: a client may repeat an event).
    ids: HashMap<EventId, usize>,
    /// Ids referenced by events in flight.
    refs: HashMap<EventId, usize>,
    /// Events in flight that run alone (0 or 1).
    alone: usize,
    /// Bytes of the `EVENT` messages being admitted.
    bytes: usize,
    /// The connection is another replica confirming (`--replica-acks`, [`REPLICA_QUERY`]): its
    /// events are not sent on to the replicas again (that would have them wait for each other).
    from_replica: bool,
}

/// The query of the WebSocket URL another replica confirms events on (`ws://host:port/?` this).
/// Anyone may use it: it skips the wait for the replicas' confirmations of the connection's own
/// events, and has them counted as relay sync's (background sync fetches their data after
/// `--sync-delay`, not the user's delay; NIP-70 protected events are refused), nothing more: a
/// private service's membership and the write limits are checked on the connection as on any.
pub const REPLICA_QUERY: &str = "grasp-replica";

fn bump(map: &mut HashMap<EventId, usize>, id: EventId) {
    *map.entry(id).or_default() += 1;
}

fn drop_one(map: &mut HashMap<EventId, usize>, id: &EventId) {
    if let Some(n) = map.get_mut(id) {
        *n -= 1;
        if *n == 0 {
            map.remove(id);
        }
    }
}

impl EventPipeline {
    /// `address`: the client's address as per-address limits count it
    /// ([`grasp_state::names::client_key::limit_key`]), given to every event it submits.
    pub fn new(grasp: Arc<Grasp>, address: Option<std::net::IpAddr>) -> Self {
        EventPipeline {
            grasp,
            address,
            queue: FuturesOrdered::new(),
            settling: FuturesOrdered::new(),
            ids: HashMap::new(),
            refs: HashMap::new(),
            alone: 0,
            bytes: 0,
            from_replica: false,
        }
    }

    /// Events of a connection another replica opened to confirm them ([`REPLICA_QUERY`]).
    pub fn forwarded_by_replica(mut self, yes: bool) -> Self {
        self.from_replica = yes;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.settling.is_empty()
    }

    pub fn len(&self) -> usize {
        self.queue.len() + self.settling.len()
    }

    /// At the bounds: the oldest answer must leave first.
    fn full(&self) -> bool {
        self.len() >= MAX_IN_FLIGHT || self.bytes >= MAX_IN_FLIGHT_BYTES
    }

    /// May `event` start now, next to the events in flight, without changing any answer?
    fn may_start(&self, event: &Event, alone: bool, refs: &[EventId]) -> bool {
        if self.queue.is_empty() {
            return true;
        }
        if alone || self.alone > 0 || self.full() {
            return false;
        }
        !self.ids.contains_key(&event.id)
            && !self.refs.contains_key(&event.id)
            && !refs.iter().any(|r| self.ids.contains_key(r))
    }

    /// Submits a parsed event. Returns the answers of earlier events it had to wait for (in
    /// order), which the caller sends before anything else. Waiting for an earlier event means
    /// waiting for its admission; its answer may still wait for durability, and then comes from
    /// [`Self::next`] in its turn.
    /// `authenticated`: the keys the connection has authenticated as (NIP-42) when it sent it;
    /// `bytes`: the size of its `EVENT` message.
    pub async fn submit(&mut self, event: Event, authenticated: Vec<PublicKey>, bytes: usize) -> Vec<Answer> {
        let alone = !runs_alongside(&event);
        let refs: Vec<EventId> = if alone { Vec::new() } else { references(&event).event_ids };
        let mut earlier = Vec::new();
        while !self.may_start(&event, alone, &refs) {
            if self.queue.is_empty() || self.full() {
                // At the bound (or only answers waiting for durability are left): the oldest
                // answer leaves, which frees its slot.
                match self.next().await {
                    Some(answer) => earlier.push(answer),
                    None => break,
                }
            } else {
                self.admit_next().await;
            }
        }
        // Answers already durable leave now, in order.
        while let Some(answer) = self.ready_answer() {
            earlier.push(answer);
        }
        if alone {
            self.alone += 1;
        }
        bump(&mut self.ids, event.id);
        for r in &refs {
            bump(&mut self.refs, *r);
        }
        self.bytes += bytes;
        let tracked = Tracked { alone, refs, bytes };
        let grasp = self.grasp.clone();
        let address = self.address;
        let from_replica = self.from_replica;
        let id = event.id;
        // Until its admission ends, the store's gate may hold other saves for this one to join.
        let admitting = grasp.relay.store().admitting();
        let task = tokio::spawn(async move {
            let _admitting = admitting;
            let verified = {
                // Closed never: the semaphore lives for the whole process.
                let _permit = verify_pool().acquire().await;
                crate::grasp::verify(&event)
            };
            let event = Arc::new(event);
            let (ok, message, durable) = match verified {
                Ok(()) => {
                    // Another replica's events are relay sync's: this server did not get them
                    // from their author (background sync fetches their data at once, not after
                    // the user's delay).
                    let submitter = Submitter { authenticated: &authenticated, from_sync: from_replica, address };
                    let (ok, message, durable) = grasp.submit_verified_deferred(&event, &submitter).await;
                    // A replica set's durability (`--replica-acks`): the others hold it first.
                    match grasp.replica_acks() {
                        Some(acks) if ok && !from_replica => match acks.confirm(&event).await {
                            Ok(()) => (ok, message, durable),
                            Err(line) => (false, line, durable),
                        },
                        _ => (ok, message, durable),
                    }
                }
                Err(reason) => (false, reason.to_string(), Durable::now()),
            };
            grasp.metrics().event(Some(event.kind.as_u16()), ok, &message);
            tracing::debug!(id = %event.id, kind = event.kind.as_u16(), ok, %message, "EVENT");
            (ok, message, durable)
        });
        self.queue.push_back(Box::pin(async move {
            let (ok, message, durable) = task.await.unwrap_or_else(|e| {
                tracing::error!(event = %id, error = %e, "event submission failed");
                (false, "error: the relay failed while handling this event; send it again".into(), Durable::now())
            });
            (Answer { id, ok, message, tracked: Some(tracked) }, durable)
        }));
        earlier
    }

    /// Queues an answer decided without submission (a malformed or rate-limited event), behind
    /// the events already in flight. Refusals count toward the same bound as admissions: at the
    /// bound the oldest answers leave first (returned, in order, for the caller to send), so the
    /// queue cannot grow behind a slow event however fast a client sends.
    pub async fn refuse(&mut self, id: EventId, message: String) -> Vec<Answer> {
        let mut earlier = Vec::new();
        while self.full() {
            match self.next().await {
                Some(answer) => earlier.push(answer),
                None => break,
            }
        }
        self.queue.push_back(Box::pin(async move { (Answer { id, ok: false, message, tracked: None }, Durable::now()) }));
        earlier
    }

    /// Waits for the oldest event being admitted, releases what it held in the in-flight sets
    /// (later events may start) and moves its answer to wait for durability.
    async fn admit_next(&mut self) -> bool {
        let Some((answer, durable)) = self.queue.next().await else { return false };
        if let Some(t) = &answer.tracked {
            if t.alone {
                self.alone -= 1;
            }
            self.bytes -= t.bytes;
            drop_one(&mut self.ids, &answer.id);
            for r in &t.refs {
                drop_one(&mut self.refs, r);
            }
        }
        self.settling.push_back(Box::pin(async move {
            let (ok, message) = durable.answer(answer.ok, answer.message).await;
            Answer { ok, message, ..answer }
        }));
        true
    }

    /// The oldest answer if it is already durable (and no older one is pending).
    fn ready_answer(&mut self) -> Option<Answer> {
        use futures_util::FutureExt;
        self.settling.next().now_or_never().flatten()
    }

    /// The next answer, in `EVENT` order; `None` when nothing is in flight. Cancel-safe: an
    /// admitted event's answer stays queued.
    pub async fn next(&mut self) -> Option<Answer> {
        if self.settling.is_empty() && !self.admit_next().await {
            return None;
        }
        self.settling.next().await
    }

    /// Every answer still in flight, in order.
    pub async fn drain(&mut self) -> Vec<Answer> {
        let mut out = Vec::with_capacity(self.queue.len());
        while let Some(answer) = self.next().await {
            out.push(answer);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::*;

    fn ev(kind: u16, tags: Vec<Tag>) -> Event {
        EventBuilder::new(Kind::from(kind), "x").tags(tags).finalize(&Keys::generate()).unwrap()
    }

    /// A pipeline over a fresh store and an empty purgatory.
    async fn pipeline(dir: &std::path::Path) -> EventPipeline {
        use grasp_state::purgatory::{clock::SystemClock, Purgatory, PurgatoryConfig};
        let store = crate::store::Store::open(&dir.join("events")).await.unwrap();
        let relay = Arc::new(crate::store::relay::Relay::new(store));
        let purgatory = Purgatory::new(PurgatoryConfig::default(), Arc::new(SystemClock));
        let layout = grasp_state::names::identifier::RepoLayout::new(dir.join("git"));
        let metrics = Arc::new(crate::metrics::Metrics::new());
        EventPipeline::new(Arc::new(Grasp::new(relay, purgatory, layout, dir.join("hooks"), "localhost".into(), metrics)), None)
    }

    /// Refusals count toward the in-flight bound: past it, the oldest answers leave (in order)
    /// before another refusal is queued, so a client streaming refused events behind a slow one
    /// cannot grow the queue.
    #[tokio::test]
    async fn refusals_are_bounded_like_admissions_and_keep_their_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut pipeline = pipeline(dir.path()).await;
        let ids: Vec<EventId> = (0..MAX_IN_FLIGHT + 50).map(|_| ev(1, vec![]).id).collect();
        let mut answered = Vec::new();
        for id in &ids {
            answered.extend(pipeline.refuse(*id, "rate-limited: slow down".into()).await.into_iter().map(|a| a.id));
            assert!(pipeline.len() <= MAX_IN_FLIGHT, "{} answers queued", pipeline.len());
        }
        assert_eq!(answered.len(), 50, "the oldest answers left to make room");
        answered.extend(pipeline.drain().await.into_iter().map(|a| a.id));
        assert_eq!(answered, ids, "answers in the order of the EVENTs");
    }

    #[test]
    fn only_plain_regular_kinds_run_alongside() {
        for kind in [1, 7, 1111, 1617, 1621, 1630, 1631] {
            assert!(runs_alongside(&ev(kind, vec![])), "{kind}");
        }
        for kind in [0, 3, 5, 1618, 1619, 10002, 10317, 20001, 30617, 30618] {
            assert!(!runs_alongside(&ev(kind, vec![])), "{kind}");
        }
    }
}
