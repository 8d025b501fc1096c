//! The event store's gate: saves that arrive while other events are still being admitted wait a
//! little and go on together (group commit). When a batch goes is a pure decision,
//! [`grasp_state::nostr::group_commit::flush_now`]: full, old enough (at most
//! [`Linger::max_wait`]), or nothing else being admitted could join it, so a lone event is
//! never held.
//!
//! Two ways to durability (docs/architecture.md, "Acknowledged before commit"):
//!
//! - A regular event (not replaceable, addressable, ephemeral or a deletion request: it changes
//!   no other event) is answered once its batch is appended to the log of acknowledged events
//!   and synced ([`crate::store::ack_log`]), and kept in memory for reads
//!   ([`crate::store::acknowledged`]) until the store committed it. At most
//!   [`Linger::max_acknowledged`] events ([`Linger::max_acknowledged_bytes`]) wait so; beyond,
//!   an event takes the second way.
//! - Any other save is answered once nostr-lmdb committed it (with its disk sync): its outcome
//!   (replaced, superseded, deleted) is the store's.
//!
//! Every save reaches nostr-lmdb in the order it came to the gate (one task, one queue).
//! The queue is handed to the store when [`grasp_state::nostr::group_commit::hand_over_now`] says so:
//! a save someone waits for at once; acknowledged events when no save came for
//! [`Linger::commit_idle`], when [`Linger::commit_backlog`] of them wait, or after
//! [`Linger::commit_delay`]. A
//! commit's disk sync delays every `OK` whose sync is issued meanwhile (the disk's flush is
//! shared), so acknowledged events go in quiet moments, or many at once. One commit at a time,
//! of at most `max_batch` saves someone waits for and `commit_batch` in all: nostr-lmdb puts
//! everything queued to it into one transaction, and LMDB keeps as many dirty pages cached as
//! the largest transaction touched.
//!
//! Saves sent together ([`Gate::save_many`], a release's events) arrive as one message, so they
//! are never split over two batches or two commits, however the gate's task is scheduled.
//!
//! The pipeline says which events may still save: each event being admitted holds an
//! [`Admitting`] guard from the moment it is read until its admission ends. The task that forms
//! batches ends when the gate is dropped (with the store), after handing the store its queue.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use grasp_state::nostr::group_commit::{acknowledge_early, expected, flush_now, hand_over_now, Linger, Queued};
use nostr::prelude::{Event, EventId};
use nostr_database::{NostrDatabase, RejectedReason, SaveEventStatus};
use nostr_lmdb::NostrLmdb;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;

use crate::store::ack_log::{AckLog, Retired};
use crate::store::acknowledged::{weight, Acknowledged};

type SaveResult = Result<SaveEventStatus, nostr_database::error::Error>;

struct Save {
    event: Arc<Event>,
    reply: oneshot::Sender<SaveResult>,
}

impl std::fmt::Debug for Save {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Save").field("event", &self.event.id).finish()
    }
}

/// What the gate's task receives.
enum Msg {
    /// Saves that go in one batch.
    Saves(Vec<Save>),
    /// Answered once everything sent before is committed by the store.
    Flush(oneshot::Sender<()>),
}

/// A save waiting for the store.
enum Item {
    /// Answered already (the event is in the log of acknowledged events).
    Acknowledged(Arc<Event>),
    /// Answered once committed.
    Waiting(Save),
}

/// One message's saves as they wait for the store, and when the first of them was
/// acknowledged.
struct Queue {
    messages: VecDeque<(Option<Instant>, Vec<Item>)>,
}

impl Queue {
    fn queued(&self) -> Queued {
        let mut q = Queued::default();
        for (at, items) in &self.messages {
            for item in items {
                match item {
                    Item::Acknowledged(_) => q.acknowledged += 1,
                    Item::Waiting(_) => q.waiting += 1,
                }
            }
            if let Some(at) = at {
                q.oldest = q.oldest.max(at.elapsed());
            }
        }
        q
    }

    /// When acknowledged events go to the store unless more saves come first: the oldest waited
    /// `commit_delay`, or the gate was idle `commit_idle` after `last_save`.
    fn due(&self, last_save: Instant, linger: &Linger) -> Option<Instant> {
        let oldest = self.messages.iter().filter_map(|(at, _)| *at).min()?;
        Some((oldest + linger.commit_delay).min(last_save + linger.commit_idle))
    }
}

/// What the batching task reads to know whether more saves may come.
#[derive(Debug, Default)]
struct Counts {
    /// Events being admitted ([`Admitting`] guards alive).
    admitting: AtomicUsize,
    /// Saves sent to the gate, not yet answered or queued for the store.
    at_gate: AtomicUsize,
    /// Saves queued for the store, not yet answered.
    committing: AtomicUsize,
    /// Told when an admission ends (the batch may have nothing more to wait for).
    admission_ended: Notify,
    /// Commits asked of the store so far.
    batches: AtomicUsize,
}

/// The gate in front of the store's writes.
#[derive(Debug)]
pub struct Gate {
    saves: mpsc::UnboundedSender<Msg>,
    counts: Arc<Counts>,
    acknowledged: Arc<Acknowledged>,
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

/// Whether an event of this kind may be answered before its commit: it changes no other event
/// (not replaceable, addressable, ephemeral, or a deletion request).
pub fn may_acknowledge_early(event: &Event) -> bool {
    event.kind.is_regular() && event.kind != nostr::prelude::Kind::EventDeletion
}

impl Gate {
    /// Starts the batching task in front of `db` (on the current tokio runtime), acknowledging
    /// regular events once in `log`.
    pub fn start(db: Arc<NostrLmdb>, log: AckLog, linger: Linger) -> Gate {
        let (saves, rx) = mpsc::unbounded_channel();
        let counts = Arc::new(Counts::default());
        let acknowledged = Arc::new(Acknowledged::default());
        let task = Task { db, log, counts: counts.clone(), acknowledged: acknowledged.clone(), linger };
        tokio::spawn(task.run(rx));
        Gate { saves, counts, acknowledged }
    }

    /// Marks an event as being admitted until the guard drops.
    pub fn admitting(&self) -> Admitting {
        self.counts.admitting.fetch_add(1, Ordering::AcqRel);
        Admitting(self.counts.clone())
    }

    /// Commits asked of the store so far (each one transaction, unless nostr-lmdb merges
    /// queued ones).
    pub fn batches(&self) -> usize {
        self.counts.batches.load(Ordering::Acquire)
    }

    /// The events answered and not yet committed, which every read adds to the store's answer.
    pub fn acknowledged(&self) -> &Acknowledged {
        &self.acknowledged
    }

    /// Saves `event` with the batch it joins; answers once it is durable (see the module doc).
    pub async fn save(&self, event: Arc<Event>) -> SaveResult {
        self.save_many(vec![event]).await.pop().expect("one answer per save")
    }

    /// Saves `events`, in this order, in one batch (with whatever else joins it); one answer per
    /// event, once it is durable.
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
        if self.saves.send(Msg::Saves(saves)).is_err() {
            self.counts.at_gate.fetch_sub(n, Ordering::AcqRel);
            return (0..n).map(|_| Err(nostr_database::error::Error::storage("the event store is closed"))).collect();
        }
        let mut out = Vec::with_capacity(n);
        for answer in answers {
            out.push(answer.await.unwrap_or_else(|_| Err(nostr_database::error::Error::storage("the event store stopped"))));
        }
        out
    }

    /// Returns once every save sent before is committed by the store (acknowledged events
    /// included), e.g. before events are removed from it; or once a commit failed (the store
    /// cannot take them now; they stay in the log).
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.saves.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// The gate's task and what it owns.
struct Task {
    db: Arc<NostrLmdb>,
    log: AckLog,
    counts: Arc<Counts>,
    acknowledged: Arc<Acknowledged>,
    linger: Linger,
}

/// A commit of the store running: answers the saves it holds when done.
type InStore = tokio::task::JoinHandle<Vec<(Option<Instant>, Vec<Item>)>>;

impl Task {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut queue = Queue { messages: VecDeque::new() };
        let mut in_store: Option<InStore> = None;
        let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
        let mut closing = false;
        let mut last_save = Instant::now();
        loop {
            if in_store.is_none() {
                if hand_over_now(queue.queued(), last_save.elapsed(), closing || !flushes.is_empty(), &self.linger) {
                    in_store = Some(self.hand_over(&mut queue, &mut flushes));
                    continue;
                }
                if queue.messages.is_empty() {
                    for flush in flushes.drain(..) {
                        let _ = flush.send(());
                    }
                    if closing {
                        return;
                    }
                }
            }
            let due = if in_store.is_none() { queue.due(last_save, &self.linger) } else { None };
            tokio::select! {
                msg = rx.recv(), if !closing => match msg {
                    None => closing = true,
                    Some(Msg::Flush(flush)) => flushes.push(flush),
                    Some(Msg::Saves(first)) => {
                        let batch = self.form_batch(first, &mut rx, &mut flushes).await;
                        self.admit(batch, &mut queue).await;
                        last_save = Instant::now();
                    }
                },
                failed = async { in_store.as_mut().expect("guarded").await }, if in_store.is_some() => {
                    in_store = None;
                    let failed = failed.unwrap_or_default();
                    if closing && !failed.is_empty() {
                        // No retrying while the relay stops: the next start commits them from the log.
                        tracing::warn!(messages = failed.len(), "acknowledged events left in the log for the next start");
                    } else {
                        if !failed.is_empty() {
                            // The store fails: a flush waiting for it would wait as long.
                            for flush in flushes.drain(..) {
                                let _ = flush.send(());
                            }
                        }
                        // Acknowledged events the store failed to take: first in line again.
                        for message in failed.into_iter().rev() {
                            queue.messages.push_front(message);
                        }
                    }
                }
                _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {}
            }
        }
    }

    /// Waits for more saves to join `first` as [`flush_now`] says.
    async fn form_batch(&self, first: Vec<Save>, rx: &mut mpsc::UnboundedReceiver<Msg>, flushes: &mut Vec<oneshot::Sender<()>>) -> Vec<Vec<Save>> {
        let started = Instant::now();
        let mut batch = vec![first];
        loop {
            let pending: usize = batch.iter().map(Vec::len).sum();
            let load = |n: &AtomicUsize| n.load(Ordering::Acquire);
            let more = expected(load(&self.counts.admitting), load(&self.counts.at_gate), load(&self.counts.committing));
            if flush_now(pending, started.elapsed(), more, &self.linger) {
                return batch;
            }
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(Msg::Saves(saves)) => batch.push(saves),
                    Some(Msg::Flush(flush)) => flushes.push(flush),
                    None => return batch,
                },
                _ = self.counts.admission_ended.notified() => {}
                _ = tokio::time::sleep_until(started + self.linger.max_wait) => {}
            }
        }
    }

    /// Answers the batch's regular events once they are in the log (and in memory for reads),
    /// and queues every save for the store.
    async fn admit(&mut self, batch: Vec<Vec<Save>>, queue: &mut Queue) {
        let n: usize = batch.iter().map(Vec::len).sum();
        let mut early: Vec<Arc<Event>> = Vec::new();
        let mut early_ids: std::collections::HashSet<EventId> = std::collections::HashSet::new();
        let (mut held, mut held_bytes) = self.acknowledged.size();
        let mut messages: Vec<Vec<(Save, bool)>> = Vec::with_capacity(batch.len());
        for message in batch {
            let mut marked = Vec::with_capacity(message.len());
            for save in message {
                let bytes = weight(&save.event);
                let is_early = may_acknowledge_early(&save.event)
                    && !self.acknowledged.contains(&save.event.id)
                    && !early_ids.contains(&save.event.id)
                    && acknowledge_early(held, held_bytes, bytes, &self.linger);
                if is_early {
                    held += 1;
                    held_bytes += bytes;
                    early_ids.insert(save.event.id);
                    early.push(save.event.clone());
                }
                marked.push((save, is_early));
            }
            messages.push(marked);
        }
        let logged = if early.is_empty() {
            true
        } else {
            let log = self.log.clone();
            let events = early.clone();
            match tokio::task::spawn_blocking(move || log.append(&events)).await {
                Ok(Ok(())) => true,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, events = early.len(), dir = %self.log.dir().display(), "the log of acknowledged events could not be written: those events are answered after their commit");
                    false
                }
                Err(_) => false,
            }
        };
        let now = Instant::now();
        let mut waiting = 0;
        for marked in messages {
            let mut items = Vec::with_capacity(marked.len());
            let mut first_acknowledged = None;
            for (save, is_early) in marked {
                if is_early && logged {
                    self.acknowledged.insert(save.event.clone());
                    first_acknowledged.get_or_insert(now);
                    let _ = save.reply.send(Ok(SaveEventStatus::Success));
                    items.push(Item::Acknowledged(save.event));
                } else if may_acknowledge_early(&save.event) && self.acknowledged.contains(&save.event.id) {
                    // Acknowledged already, not yet committed.
                    let _ = save.reply.send(Ok(SaveEventStatus::Rejected(RejectedReason::Duplicate)));
                } else {
                    waiting += 1;
                    items.push(Item::Waiting(save));
                }
            }
            if !items.is_empty() {
                queue.messages.push_back((first_acknowledged, items));
            }
        }
        self.counts.committing.fetch_add(waiting, Ordering::AcqRel);
        self.counts.at_gate.fetch_sub(n, Ordering::AcqRel);
    }

    /// Hands the store the front of the queue in one commit: whole messages, up to `max_batch`
    /// saves someone waits for and `commit_batch` in all (or a little more: a message is never
    /// split). The log rotates when every acknowledged event goes.
    fn hand_over(&mut self, queue: &mut Queue, flushes: &mut Vec<oneshot::Sender<()>>) -> InStore {
        let mut taken = Vec::new();
        let (mut n, mut waiting) = (0, 0);
        while n < self.linger.commit_batch && waiting < self.linger.max_batch {
            let Some(message) = queue.messages.pop_front() else { break };
            n += message.1.len();
            waiting += message.1.iter().filter(|item| matches!(item, Item::Waiting(_))).count();
            taken.push(message);
        }
        let all_acknowledged_go = !queue.messages.iter().any(|(at, _)| at.is_some());
        let retired: Option<Retired> = (all_acknowledged_go && taken.iter().any(|(at, _)| at.is_some())).then(|| self.log.rotate());
        let done = if queue.messages.is_empty() { std::mem::take(flushes) } else { Vec::new() };
        self.counts.batches.fetch_add(1, Ordering::AcqRel);
        let (db, log, counts, acknowledged) = (self.db.clone(), self.log.clone(), self.counts.clone(), self.acknowledged.clone());
        // Queued to nostr-lmdb's writer now, in order (each save at its first poll).
        let mut saves = Vec::with_capacity(n);
        for (_, items) in &taken {
            for item in items {
                let event = match item {
                    Item::Acknowledged(event) => event.clone(),
                    Item::Waiting(save) => save.event.clone(),
                };
                let db = db.clone();
                let mut save = Box::pin(async move { db.save_event(&event).await });
                let first = futures_util::FutureExt::now_or_never(&mut save);
                saves.push((first, save));
            }
        }
        tokio::spawn(async move {
            let mut results = Vec::with_capacity(saves.len());
            for (first, save) in saves {
                results.push(match first {
                    Some(result) => result,
                    None => save.await,
                });
            }
            let mut results = results.into_iter();
            let mut failed = Vec::new();
            let mut committed: Vec<EventId> = Vec::new();
            for (_, items) in taken {
                let mut again = Vec::new();
                for item in items {
                    let result = results.next().expect("one result per save");
                    match item {
                        Item::Waiting(save) => {
                            let _ = save.reply.send(result);
                            counts.committing.fetch_sub(1, Ordering::AcqRel);
                        }
                        Item::Acknowledged(event) => match result {
                            Ok(status) => {
                                if let SaveEventStatus::Rejected(reason) = &status {
                                    if !matches!(reason, RejectedReason::Duplicate) {
                                        // A deletion request committed meanwhile (NIP-09).
                                        tracing::info!(event = %event.id, ?reason, "acknowledged event not kept by the store");
                                    }
                                }
                                committed.push(event.id);
                            }
                            Err(e) => {
                                tracing::warn!(event = %event.id, error = %e, "acknowledged event not committed yet: kept in the log, tried again");
                                again.push(Item::Acknowledged(event));
                            }
                        },
                    }
                }
                if !again.is_empty() {
                    // Tried again after the commit delay, not at once.
                    failed.push((Some(Instant::now()), again));
                }
            }
            acknowledged.remove(committed);
            if let (Some(retired), true) = (retired, failed.is_empty()) {
                let emptied = tokio::task::spawn_blocking(move || log.empty(retired)).await;
                if let Ok(Err(e)) = emptied {
                    // Its events are committed: replaying them is harmless.
                    tracing::warn!(error = %e, "the log of acknowledged events could not be emptied");
                }
            }
            for flush in done {
                let _ = flush.send(());
            }
            failed
        })
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
        let (gate, _, tmp) = gate_with(Linger { max_wait: Duration::from_secs(60), ..Linger::default() }).await;
        (gate, tmp)
    }

    async fn gate_with(linger: Linger) -> (Gate, Arc<NostrLmdb>, tempfile::TempDir) {
        let tmp = tempfile::tempdir().unwrap();
        let db = Arc::new(NostrLmdb::builder(tmp.path()).build().await.unwrap());
        let (log, _) = AckLog::open(tmp.path()).unwrap();
        (Gate::start(db.clone(), log, linger), db, tmp)
    }

    /// A replaceable event (of its own author): answered after its commit.
    fn note(i: usize) -> Arc<Event> {
        Arc::new(EventBuilder::new(Kind::from(10_002), format!("note {i}")).finalize(&Keys::generate()).unwrap())
    }

    /// A regular event: answered once in the log of acknowledged events.
    fn issue(i: usize) -> Arc<Event> {
        Arc::new(EventBuilder::new(Kind::Custom(1621), format!("issue {i}")).finalize(&Keys::generate()).unwrap())
    }

    /// Acknowledged events would wait a minute for the store: only a flush, a save someone
    /// waits for or a full batch hands them over.
    fn slow_commits() -> Linger {
        Linger { commit_delay: Duration::from_secs(60), commit_idle: Duration::from_secs(60), ..Linger::default() }
    }

    #[tokio::test]
    async fn a_regular_event_is_answered_from_the_log_and_committed_later() {
        let (gate, db, tmp) = gate_with(slow_commits()).await;
        let e = issue(0);
        let saved = tokio::time::timeout(Duration::from_secs(10), gate.save(e.clone())).await;
        assert!(matches!(saved, Ok(Ok(SaveEventStatus::Success))), "{saved:?}");
        assert_eq!(gate.batches(), 0, "answered before any commit");
        assert!(gate.acknowledged().contains(&e.id));
        assert_eq!(db.event_by_id(&e.id).await.unwrap(), None);
        assert!(matches!(gate.save(e.clone()).await, Ok(SaveEventStatus::Rejected(RejectedReason::Duplicate))));
        // In the log until committed.
        let logged = AckLog::open(tmp.path()).unwrap().1;
        assert_eq!(logged.iter().map(|e| e.id).collect::<Vec<_>>(), vec![e.id]);
        gate.flush().await;
        assert_eq!(gate.batches(), 1);
        assert_eq!(db.event_by_id(&e.id).await.unwrap().as_ref(), Some(e.as_ref()));
        assert!(!gate.acknowledged().contains(&e.id));
        assert!(AckLog::open(tmp.path()).unwrap().1.is_empty(), "the log is emptied once the store holds its events");
    }

    #[tokio::test]
    async fn acknowledged_events_go_to_the_store_once_no_save_comes() {
        let linger = Linger { commit_idle: Duration::from_millis(50), ..slow_commits() };
        let (gate, db, _t) = gate_with(linger).await;
        let e = issue(1);
        assert!(matches!(gate.save(e.clone()).await, Ok(SaveEventStatus::Success)));
        let deadline = Instant::now() + Duration::from_secs(10);
        while gate.batches() == 0 || gate.acknowledged().contains(&e.id) {
            assert!(Instant::now() < deadline, "never committed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(db.event_by_id(&e.id).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn beyond_the_cap_an_event_waits_for_its_commit_with_those_before_it() {
        let linger = Linger { max_acknowledged: 2, ..slow_commits() };
        let (gate, db, _t) = gate_with(linger).await;
        let events: Vec<Arc<Event>> = (0..3).map(issue).collect();
        for e in &events[..2] {
            assert!(matches!(gate.save(e.clone()).await, Ok(SaveEventStatus::Success)));
        }
        assert_eq!(gate.batches(), 0);
        // The third is answered only once committed, and the two before it go in the same commit.
        assert!(matches!(gate.save(events[2].clone()).await, Ok(SaveEventStatus::Success)));
        assert_eq!(gate.batches(), 1);
        for e in &events {
            assert!(db.event_by_id(&e.id).await.unwrap().is_some(), "{} not committed", e.id);
        }
        assert_eq!(gate.acknowledged().size(), (0, 0));
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
