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
//! A batch is handed over only once the one before it is answered: nostr-lmdb puts everything
//! queued to it into one transaction, so a backlog would make one transaction of any size
//! (and LMDB keeps as many dirty pages cached as the largest transaction touched).
//!
//! Saves sent together ([`Gate::save_many`], a release's events) arrive as one message, so they
//! are never split over two batches, however the gate's task is scheduled.
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
    /// Batches handed to the store so far.
    batches: AtomicUsize,
}

/// The gate in front of the store's writes.
#[derive(Debug)]
pub struct Gate {
    /// Each message: saves that go in one batch.
    saves: mpsc::UnboundedSender<Vec<Save>>,
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

    /// Batches handed to the store so far (each one commit, unless nostr-lmdb merges queued
    /// ones).
    pub fn batches(&self) -> usize {
        self.counts.batches.load(Ordering::Acquire)
    }

    /// Saves `event` with the batch it joins; answers once that batch is committed.
    pub async fn save(&self, event: Arc<Event>) -> SaveResult {
        self.save_many(vec![event]).await.pop().expect("one answer per save")
    }

    /// Saves `events`, in this order, in one batch (with whatever else joins it); one answer per
    /// event, once that batch is committed.
    pub async fn save_many(&self, events: Vec<Arc<Event>>) -> Vec<SaveResult> {
        let n = events.len();
        if n == 0 {
            return Vec::new();
        }
        let (saves, answers): (Vec<Save>, Vec<_>) = events
            .into_iter()
            .map(|event| {
                let (reply, answer) = oneshot::channel();
                (Save { event, reply }, answer)
            })
            .unzip();
        self.counts.at_gate.fetch_add(n, Ordering::AcqRel);
        if self.saves.send(saves).is_err() {
            self.counts.at_gate.fetch_sub(n, Ordering::AcqRel);
            return (0..n).map(|_| Err(nostr_database::error::Error::storage("the event store is closed"))).collect();
        }
        let mut out = Vec::with_capacity(n);
        for answer in answers {
            out.push(answer.await.unwrap_or_else(|_| Err(nostr_database::error::Error::storage("the event store stopped"))));
        }
        out
    }
}

/// Forms batches and hands each to nostr-lmdb, in order.
async fn run(db: Arc<NostrLmdb>, mut rx: mpsc::UnboundedReceiver<Vec<Save>>, counts: Arc<Counts>, linger: Linger) {
    // The batch nostr-lmdb is committing: the next one is handed over only once it is answered.
    let mut in_store: Option<tokio::task::JoinHandle<()>> = None;
    // `save_many` never sends an empty message: a batch starts with at least one save.
    while let Some(first) = rx.recv().await {
        let started = Instant::now();
        let mut batch = first;
        loop {
            take_queued(&mut rx, &mut batch, linger.max_batch);
            let load = |n: &AtomicUsize| n.load(Ordering::Acquire);
            let more = expected(load(&counts.admitting), load(&counts.at_gate), load(&counts.committing));
            if flush_now(batch.len(), started.elapsed(), more, &linger) {
                break;
            }
            tokio::select! {
                saves = rx.recv() => match saves {
                    Some(saves) => batch.extend(saves),
                    None => break,
                },
                _ = counts.admission_ended.notified() => {}
                _ = tokio::time::sleep_until(started + linger.max_wait) => {}
            }
        }
        if let Some(previous) = in_store.take() {
            let _ = previous.await;
            take_queued(&mut rx, &mut batch, linger.max_batch);
        }
        let n = batch.len();
        counts.batches.fetch_add(1, Ordering::AcqRel);
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
        in_store = Some(tokio::spawn(async move {
            for ((first, save), reply) in saves.into_iter().zip(replies) {
                let result = match first {
                    Some(result) => result,
                    None => save.await,
                };
                let _ = reply.send(result);
            }
            counts.committing.fetch_sub(n, Ordering::AcqRel);
        }));
    }
}

/// Moves the saves already queued into `batch` until it holds `max_batch` (a message's saves
/// are never split: the batch may pass `max_batch` by the last one).
fn take_queued(rx: &mut mpsc::UnboundedReceiver<Vec<Save>>, batch: &mut Vec<Save>, max_batch: usize) {
    while batch.len() < max_batch {
        match rx.try_recv() {
            Ok(saves) => batch.extend(saves),
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::*;
    use std::time::Duration;

    /// A gate that would hold a batch for a minute: every flush below is decided by the
    /// admissions, never by the clock.
    async fn gate() -> (Gate, tempfile::TempDir) {
        let tmp = tempfile::tempdir().unwrap();
        let db = NostrLmdb::builder(tmp.path()).build().await.unwrap();
        (Gate::start(Arc::new(db), Linger { max_wait: Duration::from_secs(60), ..Linger::default() }), tmp)
    }

    fn note(i: usize) -> Arc<Event> {
        Arc::new(EventBuilder::new(Kind::TextNote, format!("note {i}")).finalize(&Keys::generate()).unwrap())
    }

    #[tokio::test]
    async fn a_lone_save_is_not_held() {
        let (gate, _t) = gate().await;
        let saved = tokio::time::timeout(Duration::from_secs(10), gate.save(note(0))).await;
        assert!(matches!(saved, Ok(Ok(SaveEventStatus::Success))), "{saved:?}");
        assert_eq!(gate.batches(), 1);
    }

    #[tokio::test]
    async fn saves_of_events_admitted_together_share_one_batch() {
        let (gate, _t) = gate().await;
        let gate = Arc::new(gate);
        let n = 20;
        let guards: Vec<Admitting> = (0..n).map(|_| gate.admitting()).collect();
        let mut saves = Vec::new();
        // Each event saves a little after the previous one, while the others are still admitted.
        for (i, guard) in guards.into_iter().enumerate() {
            let g = gate.clone();
            saves.push(tokio::spawn(async move {
                let saved = g.save(note(i)).await;
                drop(guard);
                saved
            }));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        for s in saves {
            assert!(matches!(s.await.unwrap(), Ok(SaveEventStatus::Success)));
        }
        assert_eq!(gate.batches(), 1, "one commit for all {n}");
    }

    /// A backlog goes to the store in commits of at most `max_batch` saves (LMDB keeps, for the
    /// life of the process, as many page buffers as its largest transaction dirtied).
    #[tokio::test]
    async fn a_backlog_is_committed_in_batches_of_at_most_max_batch() {
        let (gate, _t) = gate().await;
        let gate = Arc::new(gate);
        let max = Linger::default().max_batch;
        let n = 2 * max + max / 3;
        // Every event is being admitted: the gate has no reason to flush but a full batch.
        let guards: Vec<Admitting> = (0..n).map(|_| gate.admitting()).collect();
        let saves: Vec<_> = guards
            .into_iter()
            .enumerate()
            .map(|(i, guard)| {
                let g = gate.clone();
                tokio::spawn(async move {
                    let saved = g.save(note(i)).await;
                    drop(guard);
                    saved
                })
            })
            .collect();
        for s in saves {
            let saved = tokio::time::timeout(Duration::from_secs(30), s).await.expect("a full batch goes at once").unwrap();
            assert!(matches!(saved, Ok(SaveEventStatus::Success)), "{saved:?}");
        }
        assert!(gate.batches() >= n.div_ceil(max), "{} commits for {n} saves of at most {max}", gate.batches());
    }

    #[tokio::test]
    async fn saves_sent_together_share_one_batch_even_with_nothing_being_admitted() {
        let (gate, _t) = gate().await;
        let answers = gate.save_many((0..5).map(note).collect()).await;
        assert!(answers.iter().all(|a| matches!(a, Ok(SaveEventStatus::Success))), "{answers:?}");
        assert_eq!(gate.batches(), 1, "a release's events were split over several commits");
        // Nothing to save (every event of a release already stored): answered at once, and the
        // gate still takes the next save.
        assert!(gate.save_many(Vec::new()).await.is_empty());
        let next = tokio::time::timeout(Duration::from_secs(10), gate.save(note(9))).await;
        assert!(matches!(next, Ok(Ok(SaveEventStatus::Success))), "{next:?}");
    }

    #[tokio::test]
    async fn a_save_waits_for_an_admission_then_goes_when_it_ends() {
        let (gate, _t) = gate().await;
        let gate = Arc::new(gate);
        let (other, own) = (gate.admitting(), gate.admitting());
        let g = gate.clone();
        let mut save = tokio::spawn(async move {
            let saved = g.save(note(1)).await;
            drop(own);
            saved
        });
        // Held while the other event may still save...
        assert!(tokio::time::timeout(Duration::from_millis(100), &mut save).await.is_err());
        // ...and sent once it is refused (its admission ends without a save).
        drop(other);
        let saved = tokio::time::timeout(Duration::from_secs(10), save).await.unwrap().unwrap();
        assert!(matches!(saved, Ok(SaveEventStatus::Success)));
        // Duplicates are answered by the store as before.
        let e = note(2);
        assert!(matches!(gate.save(e.clone()).await, Ok(SaveEventStatus::Success)));
        assert!(matches!(gate.save(e).await, Ok(SaveEventStatus::Rejected(nostr_database::RejectedReason::Duplicate))));
    }
}
