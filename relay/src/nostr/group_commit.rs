//! The event store's gate: saves that arrive while other events are still being admitted wait a
//! little and go to nostr-lmdb together, so one commit (its index pages and its disk sync)
//! carries many events (group commit). When a batch goes is a pure decision,
//! [`grasp_state::group_commit::flush_now`]: full, old enough (at most
//! [`Linger::max_wait`]), or nothing else being admitted could join it, so a lone event is
//! never held.
//!
//! Nothing changes for durability: each save is answered only once nostr-lmdb committed its
//! batch (with its disk sync), and saves reach nostr-lmdb in the order they came to the gate
//! (one channel, one task handing batches over in order; nostr-lmdb's own queue is in order).
//!
//! The pipeline says which events may still save: each event being admitted holds an
//! [`Admitting`] guard from the moment it is read until its admission ends. The task that forms
//! batches ends when the gate is dropped (with the store).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use grasp_state::group_commit::{expected, flush_now, Linger};
use nostr::prelude::Event;
use nostr_database::{NostrDatabase, SaveEventStatus};
use nostr_lmdb::NostrLmdb;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;

type SaveResult = Result<SaveEventStatus, nostr_database::error::Error>;

struct Save {
    event: Arc<Event>,
    reply: oneshot::Sender<SaveResult>,
}

/// What the batching task reads to know whether more saves may come.
#[derive(Debug, Default)]
struct Counts {
    /// Events being admitted ([`Admitting`] guards alive).
    admitting: AtomicUsize,
    /// Saves sent to the gate, not yet handed to the store.
    at_gate: AtomicUsize,
    /// Saves handed to the store, not yet answered.
    committing: AtomicUsize,
    /// Told when an admission ends (the batch may have nothing more to wait for).
    admission_ended: Notify,
}

/// The gate in front of the store's writes.
#[derive(Debug)]
pub struct Gate {
    saves: mpsc::UnboundedSender<Save>,
    counts: Arc<Counts>,
}

impl std::fmt::Debug for Save {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Save").field("event", &self.event.id).finish()
    }
}

/// Held by an event while it is being admitted: its save may still come.
#[derive(Debug)]
pub struct Admitting(Arc<Counts>);

impl Drop for Admitting {
    fn drop(&mut self) {
        self.0.admitting.fetch_sub(1, Ordering::AcqRel);
        self.0.admission_ended.notify_one();
    }
}

impl Gate {
    /// Starts the batching task in front of `db` (on the current tokio runtime).
    pub fn start(db: Arc<NostrLmdb>, linger: Linger) -> Gate {
        let (saves, rx) = mpsc::unbounded_channel();
        let counts = Arc::new(Counts::default());
        tokio::spawn(run(db, rx, counts.clone(), linger));
        Gate { saves, counts }
    }

    /// Marks an event as being admitted until the guard drops.
    pub fn admitting(&self) -> Admitting {
        self.counts.admitting.fetch_add(1, Ordering::AcqRel);
        Admitting(self.counts.clone())
    }

    /// Saves `event` with the batch it joins; answers once that batch is committed.
    pub async fn save(&self, event: Arc<Event>) -> SaveResult {
        let (reply, answer) = oneshot::channel();
        self.counts.at_gate.fetch_add(1, Ordering::AcqRel);
        if self.saves.send(Save { event, reply }).is_err() {
            self.counts.at_gate.fetch_sub(1, Ordering::AcqRel);
            return Err(nostr_database::error::Error::storage("the event store is closed"));
        }
        answer.await.unwrap_or_else(|_| Err(nostr_database::error::Error::storage("the event store stopped")))
    }
}

/// Forms batches and hands each to nostr-lmdb, in order.
async fn run(db: Arc<NostrLmdb>, mut rx: mpsc::UnboundedReceiver<Save>, counts: Arc<Counts>, linger: Linger) {
    while let Some(first) = rx.recv().await {
        let started = Instant::now();
        let mut batch = vec![first];
        loop {
            while batch.len() < linger.max_batch {
                match rx.try_recv() {
                    Ok(save) => batch.push(save),
                    Err(_) => break,
                }
            }
            let load = |n: &AtomicUsize| n.load(Ordering::Acquire);
            let more = expected(load(&counts.admitting), load(&counts.at_gate), load(&counts.committing));
            if flush_now(batch.len(), started.elapsed(), more, &linger) {
                break;
            }
            tokio::select! {
                save = rx.recv() => match save {
                    Some(save) => batch.push(save),
                    None => break,
                },
                _ = counts.admission_ended.notified() => {}
                _ = tokio::time::sleep_until(started + linger.max_wait) => {}
            }
        }
        let n = batch.len();
        counts.committing.fetch_add(n, Ordering::AcqRel);
        counts.at_gate.fetch_sub(n, Ordering::AcqRel);
        // Handed over now, in order (each save is queued to nostr-lmdb at its first poll);
        // the answers come in their own task so the next batch forms meanwhile.
        let mut saves = Vec::with_capacity(n);
        let mut replies = Vec::with_capacity(n);
        for Save { event, reply } in batch {
            let db = db.clone();
            let mut save = Box::pin(async move { db.save_event(&event).await });
            // First poll: queued to nostr-lmdb's writer, in this order.
            let first = futures_util::FutureExt::now_or_never(&mut save);
            saves.push((first, save));
            replies.push(reply);
        }
        let counts = counts.clone();
        tokio::spawn(async move {
            for ((first, save), reply) in saves.into_iter().zip(replies) {
                let result = match first {
                    Some(result) => result,
                    None => save.await,
                };
                let _ = reply.send(result);
            }
            counts.committing.fetch_sub(n, Ordering::AcqRel);
        });
    }
}
