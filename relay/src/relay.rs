//! The relay core shared by all connections: store, policy and the live-event broadcast.

use std::sync::Arc;

use nostr::event::Event;
use tokio::sync::broadcast;

use crate::policy::{Admission, Policy};
use crate::store::{SaveOutcome, Store, StoreError};

/// Capacity of the live-event channel; a connection lagging further behind is told so by NOTICE.
const BROADCAST_CAPACITY: usize = 4096;

/// Store, policy and subscribers of the relay.
#[derive(Debug)]
pub struct Relay {
    store: Store,
    policy: Policy,
    live: broadcast::Sender<Arc<Event>>,
}

impl Relay {
    pub fn new(store: Store, policy: Policy) -> Self {
        let (live, _) = broadcast::channel(BROADCAST_CAPACITY);
        Self {
            store,
            policy,
            live,
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// A receiver of every event stored (or ephemeral) from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.live.subscribe()
    }

    /// The full `EVENT` pipeline for a client-submitted event: verify, admit, store, broadcast.
    /// Returns the NIP-01 `OK` status and message.
    pub async fn submit(&self, event: &Event) -> (bool, String) {
        if !event.verify_id() {
            return (
                false,
                "invalid: event id does not match the event's content; recompute the id (NIP-01)"
                    .into(),
            );
        }
        if !event.verify_signature() {
            return (
                false,
                "invalid: bad signature; sign the event id with the author's key".into(),
            );
        }
        match self.policy.admit(event).await {
            Admission::Reject(msg) => (false, msg),
            Admission::Purgatory(msg) => (true, format!("purgatory: {msg}")),
            Admission::Store => match self.publish(event).await {
                Ok(outcome) => outcome.ok_reply(),
                Err(e) => {
                    tracing::error!(error = %e, id = %event.id, "saving event failed");
                    (
                        false,
                        "error: could not save the event; try again later".into(),
                    )
                }
            },
        }
    }

    /// Stores `event` (no policy check) and broadcasts it to subscribers if it was stored or is
    /// ephemeral. Used for client events after admission and for events released from purgatory.
    pub async fn publish(&self, event: &Event) -> Result<SaveOutcome, StoreError> {
        let outcome = self.store.save(event).await?;
        if matches!(outcome, SaveOutcome::Saved | SaveOutcome::Ephemeral) {
            tracing::debug!(id = %event.id, kind = event.kind.as_u16(), "event published");
            // No receivers is fine.
            let _ = self.live.send(Arc::new(event.clone()));
        }
        Ok(outcome)
    }
}
