//! The sync queue: which identifiers need a background fetch, and when.
//!
//! Pure bookkeeping over an injected `now`; no I/O, no clock of its own. One entry per repository
//! identifier. An entry waits until its `next_attempt`, is then started (at most one task per
//! identifier), and is either removed when the task completes or scheduled again with backoff.
//!
//! Ordering uses a `BTreeSet<(Instant, String)>` index of the waiting entries, so `ready` and
//! `next_deadline` never scan the whole queue.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

/// Who caused an identifier to be enqueued (defined by the domain, which reports it).
pub use crate::grasp::Origin;

/// How a sync task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing is waiting any more: remove the entry.
    Complete,
    /// Something is still missing: retry after backoff (20 s, 40 s, then the cap).
    Incomplete,
    /// Some candidate domains were throttled: retry when they free, without counting an attempt.
    Throttled { until: Instant },
}

impl Outcome {
    /// The outcome as the metrics label it (`complete`, `incomplete`, `throttled`).
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::Incomplete => "incomplete",
            Outcome::Throttled { .. } => "throttled",
        }
    }
}

/// Timings of the queue. Defaults follow the purgatory design.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueTimings {
    /// Delay after a user-submitted event (default 3 minutes).
    pub user_delay: Duration,
    /// Delay after a sync-submitted event (default 500 ms).
    pub sync_delay: Duration,
    /// First retry delay; the second is twice this (default 20 s).
    pub backoff_base: Duration,
    /// Delay from the third retry on, and upper bound of every retry delay (default 2 minutes).
    pub backoff_cap: Duration,
}

impl Default for QueueTimings {
    fn default() -> Self {
        QueueTimings {
            user_delay: Duration::from_secs(180),
            sync_delay: Duration::from_millis(500),
            backoff_base: Duration::from_secs(20),
            backoff_cap: Duration::from_secs(120),
        }
    }
}

impl QueueTimings {
    /// Delay before the next try after `attempt_count` failed attempts (1-based), as in the
    /// design: base (20 s), then twice the base (40 s), then the cap (2 minutes) from the third.
    pub fn backoff(&self, attempt_count: u32) -> Duration {
        let delay = match attempt_count {
            0 | 1 => self.backoff_base,
            2 => self.backoff_base.saturating_mul(2),
            _ => self.backoff_cap,
        };
        delay.min(self.backoff_cap)
    }

    fn delay(&self, origin: Origin) -> Duration {
        match origin {
            Origin::User => self.user_delay,
            Origin::Sync => self.sync_delay,
        }
    }
}

/// The state of one identifier in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncQueueEntry {
    /// When to attempt the next sync (meaningless while `in_progress`).
    pub next_attempt: Instant,
    /// Failed attempts since the last new event for this identifier.
    pub attempt_count: u32,
    /// Whether a sync task is currently running for this identifier.
    pub in_progress: bool,
    /// The delay chosen when the entry was last (re)scheduled: the initial delay, a backoff, or
    /// the wait for a throttled domain.
    pub last_delay: Duration,
    /// A new event arrived while the task was running: reschedule even if it completes.
    requeue: Option<Origin>,
    /// Removed while running: drop the entry when the task finishes.
    removed: bool,
}

/// Per-identifier schedule of background syncs.
#[derive(Debug, Default)]
pub struct SyncQueue {
    timings: QueueTimings,
    entries: HashMap<String, SyncQueueEntry>,
    /// Waiting (not in progress) entries by next attempt.
    waiting: BTreeSet<(Instant, String)>,
    /// The catch-up pass of a replica back from a stop: the identifiers queued when it began
    /// that have not had an attempt since ([`SyncQueue::begin_catch_up`]).
    catching_up: Option<HashSet<String>>,
}

/// Moves a waiting entry's next attempt to `at`, keeping the index of waiting entries in step.
fn move_waiting(waiting: &mut BTreeSet<(Instant, String)>, identifier: &str, entry: &mut SyncQueueEntry, at: Instant) {
    waiting.remove(&(entry.next_attempt, identifier.to_string()));
    entry.next_attempt = at;
    waiting.insert((at, identifier.to_string()));
}

impl SyncQueue {
    pub fn new(timings: QueueTimings) -> Self {
        SyncQueue {
            timings,
            entries: HashMap::new(),
            waiting: BTreeSet::new(),
            catching_up: None,
        }
    }

    /// Begins the catch-up pass of a replica that has relayed the others' events since it started
    /// (docs/scaling.md, "Convergence and catch-up"): every identifier queued now is due at once,
    /// whatever its delay or backoff, and joins the pass; it leaves the pass when an attempt for it
    /// ends (complete or incomplete, not throttled) or it is removed, so each is tried once and a
    /// repository nobody can serve holds nothing back. There is one pass: true when this call
    /// began it, false once it had begun.
    pub fn begin_catch_up(&mut self, now: Instant) -> bool {
        if self.catching_up.is_some() {
            return false;
        }
        for (identifier, entry) in &mut self.entries {
            if !entry.in_progress && entry.next_attempt > now {
                move_waiting(&mut self.waiting, identifier, entry, now);
            }
        }
        self.catching_up = Some(self.entries.keys().cloned().collect());
        true
    }

    /// How many identifiers of the catch-up pass are still to be tried (0 before it begins).
    pub fn catching_up(&self) -> usize {
        self.catching_up.as_ref().map_or(0, HashSet::len)
    }

    /// Marks `identifier`'s part of the catch-up pass as done.
    fn caught_up(&mut self, identifier: &str) {
        if let Some(pass) = &mut self.catching_up {
            pass.remove(identifier);
        }
    }

    /// Schedule a sync for `identifier` because a new event arrived. Resets the attempt count and
    /// (re)sets the next attempt to `now + delay(origin)`, so bursts are batched. If a task is
    /// running, it is rescheduled when it finishes.
    pub fn enqueue(&mut self, identifier: &str, origin: Origin, now: Instant) {
        let next_attempt = now + self.timings.delay(origin);
        match self.entries.get_mut(identifier) {
            Some(entry) if entry.in_progress => {
                entry.attempt_count = 0;
                entry.removed = false;
                entry.requeue = Some(match (entry.requeue, origin) {
                    (Some(Origin::Sync), _) | (_, Origin::Sync) => Origin::Sync,
                    _ => Origin::User,
                });
            }
            Some(entry) => {
                entry.attempt_count = 0;
                entry.last_delay = self.timings.delay(origin);
                move_waiting(&mut self.waiting, identifier, entry, next_attempt);
            }
            None => {
                self.entries.insert(
                    identifier.to_string(),
                    SyncQueueEntry {
                        next_attempt,
                        attempt_count: 0,
                        in_progress: false,
                        last_delay: self.timings.delay(origin),
                        requeue: None,
                        removed: false,
                    },
                );
                self.waiting.insert((next_attempt, identifier.to_string()));
            }
        }
    }

    /// Identifiers whose next attempt is due and that are not running, earliest first.
    pub fn ready(&self, now: Instant) -> Vec<String> {
        self.waiting
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// The earliest next attempt among waiting entries.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting.first().map(|(at, _)| *at)
    }

    /// Mark a task as running. Returns false if the identifier is unknown or already running.
    pub fn start(&mut self, identifier: &str) -> bool {
        match self.entries.get_mut(identifier) {
            Some(entry) if !entry.in_progress => {
                self.waiting
                    .remove(&(entry.next_attempt, identifier.to_string()));
                entry.in_progress = true;
                true
            }
            _ => false,
        }
    }

    /// Record how a running task ended: remove on completion, otherwise schedule the retry.
    pub fn finish(&mut self, identifier: &str, outcome: Outcome, now: Instant) {
        if !matches!(outcome, Outcome::Throttled { .. }) {
            self.caught_up(identifier);
        }
        let Some(entry) = self.entries.get_mut(identifier) else {
            return;
        };
        entry.in_progress = false;
        if entry.removed {
            self.entries.remove(identifier);
            return;
        }
        let next_attempt = if let Some(origin) = entry.requeue.take() {
            // A new event arrived meanwhile: schedule as if it arrived now (count already reset).
            now + self.timings.delay(origin)
        } else {
            match outcome {
                Outcome::Complete => {
                    self.entries.remove(identifier);
                    return;
                }
                Outcome::Incomplete => {
                    entry.attempt_count = entry.attempt_count.saturating_add(1);
                    now + self.timings.backoff(entry.attempt_count)
                }
                Outcome::Throttled { until } => until.max(now),
            }
        };
        entry.next_attempt = next_attempt;
        entry.last_delay = next_attempt.saturating_duration_since(now);
        self.waiting.insert((next_attempt, identifier.to_string()));
    }

    /// Every entry, by identifier.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &SyncQueueEntry)> {
        self.entries.iter().map(|(id, entry)| (id.as_str(), entry))
    }

    /// Drop an identifier entirely (e.g. its purgatory entries expired). A running entry is
    /// dropped when its task finishes, unless a new event arrives before that.
    pub fn remove(&mut self, identifier: &str) {
        self.caught_up(identifier);
        match self.entries.get_mut(identifier) {
            Some(entry) if entry.in_progress => {
                entry.removed = true;
                entry.requeue = None;
            }
            Some(entry) => {
                let key = (entry.next_attempt, identifier.to_string());
                self.waiting.remove(&key);
                self.entries.remove(identifier);
            }
            None => {}
        }
    }

    pub fn is_running(&self, identifier: &str) -> bool {
        self.entries
            .get(identifier)
            .is_some_and(|entry| entry.in_progress)
    }

    pub fn entry(&self, identifier: &str) -> Option<&SyncQueueEntry> {
        self.entries.get(identifier)
    }

    /// Number of identifiers queued (waiting or running).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Identifiers with a running task, sorted.
    pub fn in_progress(&self) -> Vec<String> {
        let mut running: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, entry)| entry.in_progress)
            .map(|(id, _)| id.clone())
            .collect();
        running.sort();
        running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn queue() -> SyncQueue {
        SyncQueue::new(QueueTimings::default())
    }

    #[test]
    fn user_events_wait_three_minutes_sync_events_half_a_second() {
        let t0 = Instant::now();
        let mut q = queue();
        q.enqueue("user", Origin::User, t0);
        q.enqueue("sync", Origin::Sync, t0);
        assert_eq!(q.entry("user").unwrap().last_delay, 180 * S);
        assert_eq!(
            q.entry("sync").unwrap().last_delay,
            Duration::from_millis(500)
        );
        assert!(q.ready(t0).is_empty());
        assert_eq!(
            q.ready(t0 + Duration::from_millis(499)),
            Vec::<String>::new()
        );
        assert_eq!(q.ready(t0 + Duration::from_millis(500)), vec!["sync"]);
        assert_eq!(q.ready(t0 + 179 * S), vec!["sync"]);
        assert_eq!(q.ready(t0 + 180 * S), vec!["sync", "user"]);
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_millis(500)));
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn ready_is_ordered_by_next_attempt() {
        let t0 = Instant::now();
        let mut q = queue();
        q.enqueue("b", Origin::User, t0);
        q.enqueue("a", Origin::User, t0 + S);
        q.enqueue("c", Origin::Sync, t0 + 2 * S);
        assert_eq!(q.ready(t0 + 1000 * S), vec!["c", "b", "a"]);
    }

    #[test]
    fn backoff_is_20_40_then_capped_at_two_minutes() {
        let t0 = Instant::now();
        let mut q = queue();
        q.enqueue("r", Origin::Sync, t0);
        let mut now = t0 + S;
        let mut delays = Vec::new();
        for _ in 0..5 {
            assert_eq!(q.ready(now), vec!["r"]);
            assert!(q.start("r"));
            assert!(q.is_running("r"));
            assert!(
                q.ready(now + 1000 * S).is_empty(),
                "running entries are not ready"
            );
            q.finish("r", Outcome::Incomplete, now);
            let next = q.entry("r").unwrap().next_attempt;
            delays.push((next - now).as_secs());
            assert_eq!(q.entry("r").unwrap().last_delay, next - now);
            assert!(q.ready(next - Duration::from_millis(1)).is_empty());
            now = next;
        }
        assert_eq!(delays, vec![20, 40, 120, 120, 120]);
        assert_eq!(q.entry("r").unwrap().attempt_count, 5);
    }

    #[test]
    fn backoff_formula_saturates() {
        let t = QueueTimings::default();
        assert_eq!(t.backoff(0), 20 * S);
        assert_eq!(t.backoff(1), 20 * S);
        assert_eq!(t.backoff(2), 40 * S);
        assert_eq!(t.backoff(3), 120 * S);
        assert_eq!(t.backoff(u32::MAX), 120 * S);
    }

    #[test]
    fn complete_removes_the_entry() {
        let t0 = Instant::now();
        let mut q = queue();
        q.enqueue("r", Origin::Sync, t0);
        assert!(q.start("r"));
        assert!(!q.start("r"), "a running identifier cannot start twice");
        q.finish("r", Outcome::Complete, t0);
        assert!(q.is_empty());
        assert!(!q.is_running("r"));
        assert_eq!(q.next_deadline(), None);
    }

    #[test]
    fn a_new_event_resets_the_attempt_count() {
        let t0 = Instant::now();
        let mut q = queue();
        q.enqueue("r", Origin::Sync, t0);
        for _ in 0..3 {
            q.start("r");
            q.finish("r", Outcome::Incomplete, t0);
        }
        assert_eq!(q.entry("r").unwrap().attempt_count, 3);
        q.enqueue("r", Origin::Sync, t0 + S);
        let entry = q.entry("r").unwrap();
        assert_eq!(entry.attempt_count, 0);
        assert_eq!(entry.next_attempt, t0 + S + Duration::from_millis(500));
        assert_eq!(entry.last_delay, Duration::from_millis(500));
        assert_eq!(
            q.ready(t0 + 10 * S),
            vec!["r"],
            "old waiting slot was replaced"
        );
        q.start("r");
        q.finish("r", Outcome::Incomplete, t0 + 10 * S);
        assert_eq!(
            q.entry("r").unwrap().next_attempt,
            t0 + 30 * S,
            "back to 20 s"
        );
    }

    #[test]
    fn an_event_during_a_running_task_reschedules_even_on_completion() {
        let t0 = Instant::now();
        let mut q = queue();
        q.enqueue("r", Origin::Sync, t0);
        q.start("r");
        q.enqueue("r", Origin::User, t0 + S);
        assert!(q.ready(t0 + 1000 * S).is_empty(), "still running");
        q.finish("r", Outcome::Complete, t0 + 2 * S);
        let entry = q.entry("r").unwrap();
        assert_eq!(entry.next_attempt, t0 + 182 * S);
        assert_eq!(entry.attempt_count, 0);
        assert!(!entry.in_progress);
    }

    #[test]
    fn throttled_retries_when_the_domain_frees_without_counting_an_attempt() {
        let t0 = Instant::now();
        let mut q = queue();
        q.enqueue("r", Origin::Sync, t0);
        q.start("r");
        q.finish("r", Outcome::Throttled { until: t0 + 7 * S }, t0 + S);
        let entry = q.entry("r").unwrap();
        assert_eq!(entry.next_attempt, t0 + 7 * S);
        assert_eq!(entry.last_delay, 6 * S);
        assert_eq!(entry.attempt_count, 0);
        q.start("r");
        q.finish("r", Outcome::Throttled { until: t0 }, t0 + 9 * S);
        assert_eq!(
            q.entry("r").unwrap().next_attempt,
            t0 + 9 * S,
            "never in the past"
        );
    }

    #[test]
    fn removing_a_running_entry_drops_it_when_the_task_ends() {
        let t0 = Instant::now();
        let mut q = queue();
        q.enqueue("r", Origin::Sync, t0);
        q.start("r");
        q.remove("r");
        assert!(q.is_running("r"), "the task still runs");
        q.finish("r", Outcome::Incomplete, t0);
        assert!(q.is_empty());

        q.enqueue("r", Origin::Sync, t0);
        q.start("r");
        q.remove("r");
        q.enqueue("r", Origin::Sync, t0 + S);
        q.finish("r", Outcome::Complete, t0 + 2 * S);
        assert_eq!(q.ready(t0 + 10 * S), vec!["r"], "a later event revives it");
    }

    #[test]
    fn stats_and_remove() {
        let t0 = Instant::now();
        let mut q = queue();
        q.enqueue("b", Origin::Sync, t0);
        q.enqueue("a", Origin::Sync, t0);
        q.enqueue("c", Origin::Sync, t0);
        q.start("c");
        q.start("a");
        assert_eq!(q.in_progress(), vec!["a", "c"]);
        assert_eq!(q.len(), 3);
        q.remove("b");
        q.remove("a");
        assert_eq!(q.len(), 2, "a and c still run");
        assert!(q.ready(t0 + 1000 * S).is_empty());
        q.finish("a", Outcome::Incomplete, t0);
        assert_eq!(q.len(), 1);
        q.finish("a", Outcome::Incomplete, t0); // unknown now: ignored
        assert_eq!(q.len(), 1);
        assert!(!q.start("unknown"));
    }

    #[test]
    fn a_catch_up_pass_tries_every_queued_identifier_once_at_once() {
        let t0 = Instant::now();
        let mut q = queue();
        q.enqueue("held", Origin::User, t0);
        q.enqueue("synced", Origin::Sync, t0);
        q.enqueue("running", Origin::Sync, t0);
        q.enqueue("removed", Origin::Sync, t0);
        q.enqueue("throttled", Origin::Sync, t0);
        q.enqueue("failing", Origin::Sync, t0);
        let now = t0 + Duration::from_millis(600);
        for started in ["running", "throttled", "failing"] {
            assert!(q.start(started));
        }
        q.finish("failing", Outcome::Incomplete, now);
        assert!(q.ready(now).len() < 3, "a user's event waits three minutes, a failed one its backoff");

        assert_eq!(q.catching_up(), 0, "no pass before it begins");
        assert!(q.begin_catch_up(now));
        assert_eq!(q.catching_up(), 6, "everything queued joins the pass");
        let mut due = q.ready(now);
        due.sort();
        assert_eq!(due, vec!["failing", "held", "removed", "synced"], "and is due at once, delays and backoff aside");

        q.remove("removed");
        q.start("held");
        q.finish("held", Outcome::Complete, now);
        q.start("synced");
        q.finish("synced", Outcome::Incomplete, now);
        q.finish("throttled", Outcome::Throttled { until: now + S }, now);
        assert_eq!(q.catching_up(), 3, "removed, complete and incomplete attempts leave it; a throttled one stays");
        q.finish("running", Outcome::Complete, now);
        q.start("throttled");
        q.finish("throttled", Outcome::Incomplete, now + S);
        q.start("failing");
        q.finish("failing", Outcome::Incomplete, now + S);
        assert_eq!(q.catching_up(), 0, "each tried once");

        q.enqueue("later", Origin::User, now + S);
        assert!(!q.begin_catch_up(now + S), "one pass");
        assert_eq!(q.catching_up(), 0, "what is queued after it keeps its delay");
        assert_eq!(q.entry("later").unwrap().next_attempt, now + S + 180 * S);
    }
}
