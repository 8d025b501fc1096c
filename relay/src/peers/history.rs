//! The history of a relay's filters: NIP-77 negentropy reconciliation where the relay speaks
//! it (only the ids this server lacks are then fetched, by id), else `REQ` + `EOSE` pages
//! walking back with `until`. Either way every event goes through [`super::intake`].
//!
//! A relay is taken to speak NIP-77 when its NIP-11 document lists 77, or when it has no
//! document and answers `NEG-OPEN` with `NEG-MSG`; without a document, a `NOTICE` instead, or
//! silence, switches the connection to paging. A `NEG-ERR` (e.g. too many events), or silence
//! from a relay that lists 77, makes that one filter page. Paging that meets more events in one
//! second than a page holds reconciles that second alone by NIP-77 where it can
//! ([`Session::page`]). A reconciliation is bounded in rounds, time and ids found missing
//! ([`super::reconcile`]); past a bound the filter is paged.

use std::collections::{BTreeSet, HashSet};

use negentropy::{Id, Negentropy, NegentropyStorageVector};
use nostr::prelude::*;
use serde_json::json;

use super::peer::{is_rate_limited, Ended, Session};
use super::reconcile::{NegBounds, NegClient, NegStop};
use super::stats::PeerState;
use super::wanted::{filter_key, RelayPlan};
use super::wire::{Incoming, WireError};

/// Negentropy messages this client sends stay under this size (bytes before hex), and under
/// what the relay's `max_message_length` leaves, but never under [`MIN_FRAME_SIZE`] (the
/// negentropy crate's floor).
const FRAME_SIZE_LIMIT: u64 = 60_000;
const MIN_FRAME_SIZE: u64 = 4_096;

/// Local events one reconciliation lists at most; beyond it the filter is paged.
const MAX_LOCAL_ITEMS: usize = 500_000;

/// Pages one filter's history walks at most.
const MAX_PAGES: usize = 10_000;

/// Most events one history REQ yields (pages and id fetches ask for at most 500); a relay
/// sending more until EOSE has them refused, not buffered.
const MAX_COLLECTED: usize = 500;

/// Why one negentropy reconciliation did not complete.
enum NegFailure {
    /// The relay does not speak NIP-77.
    Unsupported(String),
    /// This filter was refused (`NEG-ERR`): page it instead.
    Refused(String),
    Fatal(Ended),
}

impl From<WireError> for NegFailure {
    fn from(e: WireError) -> Self {
        NegFailure::Fatal(e.into())
    }
}

fn to_event_id(id: Id) -> EventId {
    EventId::from_byte_array(id.to_bytes())
}

impl Session<'_> {
    /// Runs the history of `plan`'s filters but those whose key is in `skip` (made one at a
    /// time); `resume` lets each filter start from the relay's cursor (a reconnect within the
    /// resume window).
    pub async fn history(&mut self, plan: &RelayPlan, skip: &BTreeSet<String>, resume: bool) -> Result<(), Ended> {
        self.peer.set_state(PeerState::SyncingHistory);
        let url = self.peer.url.clone();
        let cursor = self.peer.shared.cursor(&url);
        let now = Timestamp::now().as_secs();
        let mut full = true;
        let mut keys = BTreeSet::new();
        let started = std::time::Instant::now();
        let received_before = self.peer.stats.lock().unwrap().received;
        for filter in plan.filters() {
            let key = filter_key(&filter);
            if skip.contains(&key) {
                continue;
            }
            let since = if resume { cursor.since(url.as_str(), &key, now) } else { None };
            let filter = match since {
                Some(s) => {
                    full = false;
                    filter.since(Timestamp::from(s))
                }
                None => filter,
            };
            let mut done = false;
            if self.limits.negentropy != Some(false) {
                match self.reconcile(&filter).await {
                    Ok(()) => done = true,
                    Err(NegFailure::Unsupported(reason)) => {
                        tracing::info!(relay = %url, reason = %reason, "relay does not reconcile by NIP-77; paging with REQ");
                        self.limits.negentropy = Some(false);
                        self.peer.stats.lock().unwrap().negentropy = Some(false);
                    }
                    Err(NegFailure::Refused(reason)) => {
                        tracing::info!(relay = %url, reason = %reason, "relay refused a NIP-77 reconciliation; paging this filter");
                    }
                    Err(NegFailure::Fatal(e)) => return Err(e),
                }
            }
            if !done {
                self.page(&filter).await?;
            }
            keys.insert(key);
        }
        let received = self.peer.stats.lock().unwrap().received - received_before;
        let filters = keys.len();
        self.history_done(keys, resume, full);
        self.count_bytes();
        tracing::info!(relay = %url, filters, received, resumed = !full, took = ?started.elapsed(), negentropy = ?self.limits.negentropy, "relay history complete");
        Ok(())
    }

    /// Waits for the next message, handling live traffic (events of other subscriptions, rate
    /// limits) on the way.
    async fn next(&mut self) -> Result<RelayMessage<'static>, WireError> {
        let timeout = self.peer.shared.config.timeout;
        loop {
            let incoming = tokio::select! {
                incoming = self.wire.recv(timeout) => incoming?,
                _ = self.peer.shutdown.recv() => return Err(WireError::Shutdown),
            };
            match incoming {
                Incoming::Message(m) => return Ok(m),
                // Not a refusal of what is being asked (taking it for one used to switch a
                // NIP-77 relay to paging): skipped.
                Incoming::Unparsable(text) => tracing::debug!(relay = %self.peer.url, message = %text, "unparsable message from relay"),
            }
        }
    }

    /// One NIP-77 reconciliation of `filter`, then the missing events fetched by id.
    async fn reconcile(&mut self, filter: &Filter) -> Result<(), NegFailure> {
        let items = self
            .peer
            .shared
            .grasp()
            .relay
            .store()
            .negentropy_items(filter.clone(), MAX_LOCAL_ITEMS)
            .await
            .map_err(|e| NegFailure::Fatal(Ended::Failed(format!("event store: {e}"))))?;
        // Hex doubles the bytes; NEG-OPEN also carries the filter.
        let room = self.limits.max_message_length.saturating_sub(filter_key(filter).len() + super::wanted::REQ_OVERHEAD) / 2;
        let frame_size = (room as u64).clamp(MIN_FRAME_SIZE, FRAME_SIZE_LIMIT);
        let items_len = items.len();
        let build = tokio::task::spawn_blocking(move || -> Result<(Negentropy<'static, NegentropyStorageVector>, Vec<u8>), negentropy::Error> {
            let mut storage = NegentropyStorageVector::with_capacity(items.len());
            for (id, at) in items {
                storage.insert(at.as_secs(), Id::from_byte_array(id.to_bytes()))?;
            }
            storage.seal()?;
            let mut neg = Negentropy::owned(storage, frame_size)?;
            let first = neg.initiate()?;
            Ok((neg, first))
        })
        .await;
        let local_items = items_len;
        let (neg, first) = match build {
            Ok(Ok(built)) => built,
            Ok(Err(e)) => return Err(NegFailure::Refused(format!("negentropy: {e}"))),
            Err(e) => return Err(NegFailure::Refused(format!("negentropy: {e}"))),
        };
        let sub = self.sub_id("neg");
        let open = json!(["NEG-OPEN", sub.as_str(), filter, faster_hex::hex_string(&first)]).to_string();
        self.wire.send_text(open).await?;
        let mut client = NegClient::new(neg, NegBounds::for_items(local_items, std::time::Instant::now()));
        let mut answered = false;
        loop {
            let message = match self.next().await {
                Ok(m) => m,
                // Silence from a relay that lists 77 is this filter's problem (too big to answer
                // in time, say): it is paged; from another, the relay does not speak NIP-77.
                Err(WireError::ReadTimeout(_)) if !answered && self.limits.negentropy == Some(true) => {
                    return Err(NegFailure::Refused("no answer to NEG-OPEN in time".into()))
                }
                Err(WireError::ReadTimeout(_)) if !answered => return Err(NegFailure::Unsupported("no answer to NEG-OPEN".into())),
                Err(e) => return Err(e.into()),
            };
            match message {
                RelayMessage::NegMsg { subscription_id, message } if *subscription_id == sub => {
                    answered = true;
                    let mut bytes = vec![0u8; message.len() / 2];
                    if faster_hex::hex_decode(message.as_bytes(), &mut bytes).is_err() {
                        return Err(NegFailure::Refused("NEG-MSG is not hex".into()));
                    }
                    match client.answer(&bytes, std::time::Instant::now()) {
                        Ok(Some(next)) => {
                            let msg = json!(["NEG-MSG", sub.as_str(), faster_hex::hex_string(&next)]).to_string();
                            self.wire.send_text(msg).await?;
                        }
                        Ok(None) => {
                            self.wire.send_text(json!(["NEG-CLOSE", sub.as_str()]).to_string()).await?;
                            break;
                        }
                        Err(stop) => {
                            let _ = self.wire.send_text(json!(["NEG-CLOSE", sub.as_str()]).to_string()).await;
                            return Err(NegFailure::Refused(match stop {
                                NegStop::Protocol(e) => format!("bad NEG-MSG: {e}"),
                                NegStop::Exceeded(reason) => reason,
                            }));
                        }
                    }
                }
                RelayMessage::NegErr { subscription_id, message } if *subscription_id == sub => {
                    if is_rate_limited(&message) {
                        return Err(NegFailure::Fatal(Ended::RateLimited(message.into_owned())));
                    }
                    return Err(NegFailure::Refused(message.into_owned()));
                }
                // A NOTICE instead of an answer means "unknown message" only from a relay whose
                // NIP-11 did not list 77: one that did may send unrelated notices meanwhile, and
                // taking them for a refusal would page a NIP-77 relay's history.
                RelayMessage::Notice(message) if !answered && self.limits.negentropy.is_none() && !is_rate_limited(&message) => {
                    return Err(NegFailure::Unsupported(message.into_owned()));
                }
                other => {
                    if let Some(end) = self.on_message(other).await {
                        return Err(NegFailure::Fatal(end));
                    }
                }
            }
        }
        let rounds = client.rounds();
        let need: Vec<EventId> = client.into_need().into_iter().map(to_event_id).collect();
        tracing::debug!(relay = %self.peer.url, need = need.len(), rounds, "negentropy reconciliation done");
        self.fetch_ids(&need).await.map_err(NegFailure::Fatal)
    }

    /// Fetches events by id, in REQs the relay's `max_limit` and `max_message_length` allow.
    pub async fn fetch_ids(&mut self, ids: &[EventId]) -> Result<(), Ended> {
        let chunk = self.ids_per_req();
        for ids in ids.chunks(chunk) {
            let filter = Filter::new().ids(ids.iter().copied()).limit(ids.len());
            let events = self.collect(filter).await?;
            self.take(events).await;
        }
        Ok(())
    }

    /// `REQ` pages of `filter`, newest first, walking back with `until` until a page is empty.
    ///
    /// `until` is inclusive, so the next page asks for the boundary second again; the ids seen
    /// at that second tell the new from the known. A full page of nothing new, all in one
    /// second, is a run of same-second events larger than the relay's page: REQ cannot reach the rest of
    /// that second, so it is reconciled alone by NIP-77 when the relay speaks it (else it is
    /// logged as possibly incomplete), and paging goes on below it.
    async fn page(&mut self, filter: &Filter) -> Result<(), Ended> {
        let size = self.limits.max_limit.clamp(1, 500);
        let mut until = filter.until;
        let mut seen: HashSet<EventId> = HashSet::new();
        for _ in 0..MAX_PAGES {
            let mut f = filter.clone().limit(size);
            if let Some(u) = until {
                f = f.until(u);
            }
            let events = self.collect(f).await?;
            let (Some(oldest), Some(newest)) = (events.iter().map(|e| e.created_at).min(), events.iter().map(|e| e.created_at).max()) else {
                break;
            };
            if until.is_some_and(|u| newest > u) {
                tracing::info!(relay = %self.peer.url, "relay ignores `until` in REQ; history paging stops");
                break;
            }
            let full = events.len() >= size;
            let fresh: Vec<Event> = events.into_iter().filter(|e| !seen.contains(&e.id)).collect();
            if fresh.is_empty() {
                // A page that is not full, or spans seconds, holds everything left.
                if !full || oldest != newest {
                    break;
                }
                // Stuck at one crowded second.
                self.crowded_second(filter, oldest).await?;
                let Some(below) = oldest.as_secs().checked_sub(1) else { break };
                if filter.since.is_some_and(|since| since.as_secs() > below) {
                    break;
                }
                until = Some(Timestamp::from(below));
                seen.clear();
                continue;
            }
            if until != Some(oldest) {
                seen.clear();
            }
            seen.extend(fresh.iter().filter(|e| e.created_at == oldest).map(|e| e.id));
            until = Some(oldest);
            self.take(fresh).await;
        }
        Ok(())
    }

    /// The events of `filter` at second `at`, more than one REQ page holds: by NIP-77 when the
    /// relay may speak it.
    async fn crowded_second(&mut self, filter: &Filter, at: Timestamp) -> Result<(), Ended> {
        let second = filter.clone().since(at).until(at);
        let url = self.peer.url.clone();
        if self.limits.negentropy != Some(false) {
            match self.reconcile(&second).await {
                Ok(()) => {
                    tracing::info!(relay = %url, second = at.as_secs(), "more events in one second than a REQ page; reconciled that second by NIP-77");
                    return Ok(());
                }
                Err(NegFailure::Fatal(e)) => return Err(e),
                Err(NegFailure::Unsupported(reason) | NegFailure::Refused(reason)) => {
                    tracing::debug!(relay = %url, reason = %reason, "per-second NIP-77 reconciliation failed");
                }
            }
        }
        tracing::info!(relay = %url, second = at.as_secs(), page = self.limits.max_limit, "more events in one second than the relay's REQ page and no NIP-77: the rest of that second may be missing; paging on below it");
        self.peer.note_error(&format!("more events at {} than one REQ page; some of that second may be missing (the relay does not speak NIP-77)", at.as_secs()));
        Ok(())
    }

    /// One REQ until EOSE; its events.
    async fn collect(&mut self, filter: Filter) -> Result<Vec<Event>, Ended> {
        let sub = self.sub_id("hist");
        self.wire.send(&ClientMessage::req(sub.clone(), vec![filter.clone()])).await?;
        let mut events = Vec::new();
        let most = filter.limit.unwrap_or(MAX_COLLECTED).min(MAX_COLLECTED);
        let asked = [filter];
        loop {
            match self.next().await? {
                RelayMessage::Event { subscription_id, event } if *subscription_id == sub => {
                    // Each costs a token; one not matching the request, or past its limit, is
                    // refused as unrequested.
                    let event = event.into_owned();
                    if events.len() >= most {
                        if !self.throttle().await {
                            return Err(Ended::Stop);
                        }
                        self.refuse_unrequested(event).await;
                        continue;
                    }
                    events.extend(self.screen(vec![event], &asked).await);
                }
                RelayMessage::EndOfStoredEvents(id) if *id == sub => break,
                RelayMessage::Closed { subscription_id, message } if *subscription_id == sub => {
                    if is_rate_limited(&message) {
                        return Err(Ended::RateLimited(message.into_owned()));
                    }
                    // This filter is refused (too big, auth, ...): keep what came, go on with
                    // the others.
                    tracing::info!(relay = %self.peer.url, reason = %message, "relay refused a history request");
                    self.peer.stats.lock().unwrap().last_error = Some(message.chars().take(300).collect());
                    return Ok(events);
                }
                other => {
                    if let Some(end) = self.on_message(other).await {
                        return Err(end);
                    }
                }
            }
        }
        self.wire.send(&ClientMessage::close(sub)).await?;
        Ok(events)
    }
}
