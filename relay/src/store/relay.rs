//! The relay core shared by all connections: the event store, the live-event broadcast, and the
//! budget of items all NIP-77 sessions may hold (`crate::store::item_budget::ItemBudget`).
//!
//! Deciding what to store is the GRASP brain's job (`crate::grasp::Grasp::submit`); this type only
//! stores and broadcasts.

use std::sync::Arc;

use nostr::event::Event;
use tokio::sync::broadcast;

use crate::store::item_budget::ItemBudget;
use crate::store::{SaveOutcome, Store, StoreError};

/// Capacity of the live-event channel; a connection lagging further behind is told so by NOTICE.
const BROADCAST_CAPACITY: usize = 4096;

/// Store and subscribers of the relay.
#[derive(Debug)]
pub struct Relay {
    store: Store,
    live: broadcast::Sender<Arc<Event>>,
    negentropy_items: ItemBudget,
}

impl Relay {
    pub fn new(store: Store) -> Self {
        let (live, _) = broadcast::channel(BROADCAST_CAPACITY);
        Self {
            store,
            live,
            negentropy_items: ItemBudget::default(),
        }
    }

    /// The same relay, its NIP-77 sessions holding at most `total` items together.
    pub fn with_negentropy_items(mut self, total: usize) -> Self {
        self.negentropy_items = ItemBudget::new(total);
        self
    }

    /// The items held by every connection's NIP-77 sessions.
    pub fn negentropy_items(&self) -> &ItemBudget {
        &self.negentropy_items
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// A receiver of every event stored (or ephemeral) from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.live.subscribe()
    }

    /// Stores `event` (no policy check) and broadcasts it to subscribers if it was stored or is
    /// ephemeral. Used for client events after admission and for events released from purgatory.
    pub async fn publish(&self, event: &Event) -> Result<SaveOutcome, StoreError> {
        self.publish_shared(Arc::new(event.clone())).await
    }

    /// [`Relay::publish`] of an event already shared: subscribers get the same `Arc`, no copy.
    pub async fn publish_shared(&self, event: Arc<Event>) -> Result<SaveOutcome, StoreError> {
        let outcome = self.store.save(&event).await?;
        self.broadcast(event, outcome);
        Ok(outcome)
    }

    /// [`Relay::publish`] of several events, stored together ([`Store::save_all`]), in this
    /// order; each one stored is broadcast. One outcome per event.
    pub async fn publish_all(&self, events: &[&Event]) -> Vec<Result<SaveOutcome, StoreError>> {
        let outcomes = self.store.save_all(events).await;
        for (event, outcome) in events.iter().zip(&outcomes) {
            if let Ok(outcome) = outcome {
                self.broadcast(Arc::new((*event).clone()), *outcome);
            }
        }
        outcomes
    }

    /// [`Relay::publish_shared`] of a client event the acceptance policy just admitted (it
    /// checked the event's deletion first): stored with [`Store::save_admitted`].
    pub async fn publish_admitted(&self, event: Arc<Event>) -> Result<SaveOutcome, StoreError> {
        let outcome = self.store.save_admitted_shared(event.clone()).await?;
        self.broadcast(event, outcome);
        Ok(outcome)
    }

    fn broadcast(&self, event: Arc<Event>, outcome: SaveOutcome) {
        if matches!(outcome, SaveOutcome::Saved | SaveOutcome::Ephemeral) {
            tracing::debug!(id = %event.id, kind = event.kind.as_u16(), "event published");
            // No receivers is fine.
            let _ = self.live.send(event);
        }
    }
}
