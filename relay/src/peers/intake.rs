//! Synced events enter through the same door as clients' ([`Grasp::submit`] with a relay-sync
//! [`Submitter`], hence the sync origin): verification, acceptance policy, caps, deletions and
//! tombstones all apply. Protected events (NIP-70 `["-"]`) are refused there (a peer is not their
//! author) and never wait. An event refused only because what it tags is not here yet waits
//! in the [`Waiting`] index and is tried again when that arrives.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use grasp_state::nostr::nip34::{KIND_ANNOUNCEMENT, KIND_DELETION, KIND_STATE, KIND_USER_GRASP_LIST};
use nostr::prelude::Event;

use crate::sync::relay_url::RelayUrl;
use super::waiting::{NotParked, Waiting};
use crate::grasp::acceptance::{DELETED_MESSAGE, EXPIRED_STATE_MESSAGE};
use crate::grasp::Grasp;
use grasp_state::trust::auth::Submitter;

/// What became of one synced event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Refused,
    /// Refused for now; waits for what it tags.
    Waiting,
}

/// The door for synced events.
pub struct Intake {
    pub grasp: Arc<Grasp>,
    pub waiting: Mutex<Waiting>,
    /// Told when a synced announcement is accepted: held ones are not broadcast, and the
    /// manager should register them without waiting for its timer.
    pub announcement_accepted: tokio::sync::Notify,
}

/// Who submits synced events. No client address: this relay fetched them itself (from the
/// relays it follows, for repositories it serves or holds), so they count per author and in the
/// purgatory's totals but against no address's share (docs/protocol.md#caps): counting them
/// under the peer's address would let one busy peer's events refuse another's, and a
/// peer's address says nothing about who wrote them.
const FROM_SYNC: Submitter<'static> = Submitter { authenticated: &[], from_sync: true, address: None };

/// Keys under which children of `event` wait: its id, its coordinate, and for an announcement
/// `d:<identifier>` (states wait for any announcement of their identifier).
pub fn arrival_keys(event: &Event) -> Vec<String> {
    let mut keys = vec![event.id.to_hex()];
    if let Some(c) = event.coordinate() {
        keys.push(c.to_string());
    }
    if event.kind.as_u16() == KIND_ANNOUNCEMENT {
        if let Some(d) = event.tags.identifier() {
            keys.push(format!("d:{d}"));
        }
    }
    keys
}

/// Did the policy refuse `event` only because what it tags is missing here?
fn missing_parent(event: &Event, message: &str) -> bool {
    let kind = event.kind.as_u16();
    message.starts_with("blocked:")
        && message != DELETED_MESSAGE
        && message != EXPIRED_STATE_MESSAGE
        && !matches!(kind, KIND_ANNOUNCEMENT | KIND_DELETION | KIND_USER_GRASP_LIST)
        && (kind != KIND_STATE || message.contains("is not announced"))
}

impl Intake {
    pub fn new(grasp: Arc<Grasp>, waiting: Waiting) -> Self {
        Intake { grasp, waiting: Mutex::new(waiting), announcement_accepted: tokio::sync::Notify::new() }
    }

    /// Submits `event` from `relay`; children waiting for it are tried again after it. Returns
    /// the verdict on `event` and on each child retried: (accepted, refused) of the children.
    pub async fn submit(&self, event: Arc<Event>, relay: &RelayUrl) -> (Verdict, u64) {
        let verdict = self.submit_one(&event, relay).await;
        let readmitted = if verdict == Verdict::Accepted { self.readmit(&event).await } else { 0 };
        (verdict, readmitted)
    }

    /// `parent` was accepted (by sync or any other path): tries the children waiting for it
    /// again, and theirs in turn; returns how many were accepted.
    pub async fn readmit(&self, parent: &Event) -> u64 {
        let mut readmitted = 0;
        let mut queue = self.arrived(parent);
        while let Some((child, from)) = queue.pop() {
            if self.submit_one(&child, &from).await == Verdict::Accepted {
                readmitted += 1;
                tracing::info!(relay = %from, event = %child.id, parent = %parent.id, "waiting synced event admitted after what it tags arrived");
                queue.extend(self.arrived(&child));
            }
        }
        readmitted
    }

    /// `event` came from `relay` unasked (it matches none of the filters of its subscription):
    /// it never reaches the acceptance policy now; it may wait for an event id it tags (within
    /// the relay's slots), once its id and signature are verified (on the pool client events
    /// use): the index is keyed by id, and a forged copy must not take the place of the real
    /// event. Returns whether it waits.
    pub async fn unrequested(&self, event: Event, relay: &RelayUrl) -> bool {
        if grasp_state::trust::auth::is_protected(&event) {
            return false;
        }
        let id = event.id;
        // Cheap checks first: most junk never costs a signature check.
        if self.waiting.lock().unwrap().would_park_unrequested(&event, relay).is_err() {
            tracing::debug!(relay = %relay, event = %id, "event the relay was not asked for; not admitted");
            return false;
        }
        let verified = {
            let _permit = crate::nostr::pipeline::verify_pool().acquire().await;
            crate::grasp::verify(&event)
        };
        if let Err(reason) = verified {
            tracing::debug!(relay = %relay, event = %id, reason = %reason, "forged event the relay was not asked for; dropped");
            return false;
        }
        let parked = self.waiting.lock().unwrap().park_unrequested(Arc::new(event), relay, Instant::now());
        tracing::debug!(relay = %relay, event = %id, waits = parked.is_ok(), "event the relay was not asked for; not admitted");
        parked.is_ok()
    }

    /// Children waiting for `event` (accepted here by any path), taken out of the index.
    pub fn arrived(&self, event: &Event) -> Vec<(Arc<Event>, RelayUrl)> {
        let mut w = self.waiting.lock().unwrap();
        if w.is_empty() {
            return Vec::new();
        }
        arrival_keys(event).iter().flat_map(|k| w.arrived(k)).collect()
    }

    async fn submit_one(&self, event: &Arc<Event>, relay: &RelayUrl) -> Verdict {
        if grasp_state::trust::auth::is_protected(event) {
            tracing::debug!(relay = %relay, event = %event.id, "protected event refused from sync");
            return Verdict::Refused;
        }
        // Verified on the pool client events use (one check per core at a time).
        let verified = {
            let _permit = crate::nostr::pipeline::verify_pool().acquire().await;
            crate::grasp::verify(event)
        };
        if let Err(reason) = verified {
            tracing::debug!(relay = %relay, event = %event.id, reason = %reason, "synced event refused");
            return Verdict::Refused;
        }
        let (ok, message) = self.grasp.submit_verified(event, &FROM_SYNC).await;
        if ok {
            if event.kind.as_u16() == KIND_ANNOUNCEMENT {
                self.announcement_accepted.notify_one();
            }
            return Verdict::Accepted;
        }
        if missing_parent(event, &message) {
            let parked = self.waiting.lock().unwrap().park(event.clone(), relay, Instant::now());
            match parked {
                Ok(()) | Err(NotParked::AlreadyWaiting) => return Verdict::Waiting,
                Err(NotParked::Full) => {
                    tracing::debug!(relay = %relay, event = %event.id, "waiting index full; synced event dropped")
                }
                Err(NotParked::NoParents) => {}
            }
        }
        tracing::debug!(relay = %relay, event = %event.id, reason = %message, "synced event refused");
        Verdict::Refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::*;

    #[test]
    fn only_missing_parents_make_events_wait() {
        let keys = Keys::generate();
        let comment = EventBuilder::new(Kind::Custom(1111), "x").finalize(&keys).unwrap();
        assert!(missing_parent(&comment, "blocked: this relay only accepts git repository events"));
        assert!(!missing_parent(&comment, "invalid: bad"));
        assert!(!missing_parent(&comment, DELETED_MESSAGE));
        let ann = EventBuilder::new(Kind::Custom(KIND_ANNOUNCEMENT), "").finalize(&keys).unwrap();
        assert!(!missing_parent(&ann, "blocked: does not list this server"));
        let state = EventBuilder::new(Kind::Custom(KIND_STATE), "").tag(Tag::identifier("r")).finalize(&keys).unwrap();
        assert!(missing_parent(&state, "blocked: repository 'r' is not announced on this relay"));
        assert!(!missing_parent(&state, "blocked: x is not the owner or a maintainer"));
        assert!(arrival_keys(&EventBuilder::new(Kind::Custom(KIND_ANNOUNCEMENT), "").tag(Tag::identifier("r")).finalize(&keys).unwrap())
            .contains(&"d:r".to_string()));
    }
}
