//! One relay followed by one task: connect, reconcile the history of its filters, then follow
//! it live until its plan changes (new filters get their history, subscriptions are renewed),
//! it fails (exponential backoff), it answers `rate-limited:` (cooldown), it has failed for a
//! day (dead: the task ends until something needs the relay again), or its owner drops the plan
//! sender or shuts down.

use std::collections::{BTreeSet, HashMap, HashSet};

use grasp_state::nostr::nip34::references;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nostr::prelude::*;
use tokio::sync::{mpsc, watch};

use crate::sync::relay_url::RelayUrl;
use super::fetches::Fetches;
use super::health::Health;
use super::intake::Verdict;
use super::quiet::{QuietStep, QuietWatch};
use super::stats::{PeerState, RelayStats};
use super::wanted::{batches, RelayPlan};
use super::wire::{fetch_nip11, Incoming, RelayLimits, Wire, WireError};
use super::Shared;
use crate::nostr::pipeline::{runs_alongside, MAX_IN_FLIGHT};
use crate::shutdown::Shutdown;

/// Asks for events by id (missing parents of waiting events).
#[derive(Debug, Clone)]
pub enum PeerCommand {
    Fetch(Vec<EventId>),
}

/// How a session ended.
#[derive(Debug)]
pub enum Ended {
    /// Shutdown, or the owner dropped the plan: the task ends.
    Stop,
    RateLimited(String),
    Failed(String),
}

impl From<WireError> for Ended {
    fn from(e: WireError) -> Self {
        match e {
            WireError::Shutdown => Ended::Stop,
            e => Ended::Failed(e.to_string()),
        }
    }
}

/// Text of a `rate-limited:` refusal.
pub fn is_rate_limited(message: &str) -> bool {
    message.starts_with("rate-limited:")
}

/// The task following one relay.
pub struct Peer {
    pub url: RelayUrl,
    pub shared: Arc<Shared>,
    pub plan: watch::Receiver<Arc<RelayPlan>>,
    pub commands: mpsc::Receiver<PeerCommand>,
    pub stats: Arc<Mutex<RelayStats>>,
    pub shutdown: Shutdown,
    pub health: Health,
    /// Its write bucket (`--relay-sync-rate`, `--relay-sync-burst`): every event it sends takes
    /// a token; reading from it pauses while the bucket is empty.
    pub bucket: grasp_state::trust::rate::TokenBucket,
}

/// An open connection and what it knows of the relay.
pub struct Session<'a> {
    pub peer: &'a mut Peer,
    pub wire: Wire,
    pub limits: RelayLimits,
    /// Subscription counter (ids are `<purpose>-<n>`).
    pub next_sub: u64,
    /// Open live subscriptions.
    pub live: Vec<SubscriptionId>,
    /// The filters of each open live and fetch subscription: an event arriving on one must
    /// match one of them (history exchanges check their own).
    pub subs: HashMap<SubscriptionId, Vec<Filter>>,
    /// The relay's byte counts before this connection.
    pub bytes_before: (u64, u64),
    /// Ids to ask for by id, one fetch subscription at a time.
    pub fetches: Fetches,
}

impl Peer {
    pub fn set_state(&self, state: PeerState) {
        self.stats.lock().unwrap().state = state;
    }

    pub(super) fn note_error(&self, error: &str) {
        self.stats.lock().unwrap().last_error = Some(error.chars().take(300).collect());
    }

    /// Runs until shutdown, until the plan sender is dropped, or until the relay is dead.
    pub async fn run(mut self) {
        loop {
            let now = Instant::now();
            let t = self.shared.config.health;
            if self.health.is_dead(now, &t) {
                self.set_state(PeerState::Dead);
                tracing::info!(relay = %self.url, failures = self.health.failures, "relay dead: failing for a day; dropped until a repository needs it again");
                return;
            }
            let wait = self.health.wait(now);
            if !wait.is_zero() {
                {
                    let mut s = self.stats.lock().unwrap();
                    s.state = PeerState::BackingOff;
                    s.cooling_down = self.health.cooling_down;
                    s.failures = self.health.failures;
                    s.next_attempt_in_ms = wait.as_millis() as u64;
                }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = self.shutdown.recv() => return,
                    changed = self.plan.changed() => if changed.is_err() { return },
                }
                continue;
            }
            {
                let mut s = self.stats.lock().unwrap();
                s.state = PeerState::Connecting;
                s.next_attempt_in_ms = 0;
            }
            let ended = self.session().await;
            match ended {
                Ended::Stop => return,
                Ended::RateLimited(message) => {
                    let pause = self.health.rate_limited(Instant::now(), &t);
                    self.note_error(&message);
                    tracing::info!(relay = %self.url, cooldown = ?pause, reason = %message, "relay rate-limits us; cooling down");
                }
                Ended::Failed(message) => {
                    let delay = self.health.failed(Instant::now(), &t);
                    self.note_error(&message);
                    tracing::info!(relay = %self.url, failures = self.health.failures, backoff = ?delay, reason = %message, "relay sync failed; backing off");
                }
            }
            let mut s = self.stats.lock().unwrap();
            s.failures = self.health.failures;
            s.cooling_down = self.health.cooling_down;
            s.next_attempt_in_ms = self.health.wait(Instant::now()).as_millis() as u64;
            s.state = PeerState::BackingOff;
        }
    }

    async fn session(&mut self) -> Ended {
        let cfg = &self.shared.config;
        let timeout = cfg.timeout;
        let addresses = match self.url.resolve(&self.shared.policy).await {
            Ok(a) => a,
            Err(e) => return Ended::Failed(e.to_string()),
        };
        let limits = match fetch_nip11(&self.url, &addresses, &self.shared.tls, timeout).await {
            Some(doc) => RelayLimits::from_nip11(&doc),
            None => RelayLimits::default(),
        };
        let wire = tokio::select! {
            w = Wire::connect(&self.url, &addresses, &self.shared.tls, timeout) => match w {
                Ok(w) => w,
                Err(e) => return e.into(),
            },
            _ = self.shutdown.recv() => return Ended::Stop,
        };
        self.stats.lock().unwrap().negentropy = limits.negentropy;
        tracing::info!(relay = %self.url, negentropy = ?limits.negentropy, max_filters = limits.max_filters, "relay connected");
        let (bytes_in, bytes_out) = {
            let s = self.stats.lock().unwrap();
            (s.bytes_in, s.bytes_out)
        };
        let fetches = Fetches::new(timeout);
        let mut session = Session { peer: self, wire, limits, next_sub: 0, live: Vec::new(), subs: HashMap::new(), bytes_before: (bytes_in, bytes_out), fetches };
        let ended = match session.authenticate_first().await {
            Ok(()) => session.follow().await,
            Err(e) => e,
        };
        session.count_bytes();
        let last_heard = session.wire.last_heard;
        session.wire.close().await;
        self.shared.touch_cursor(&self.url, last_heard);
        tracing::info!(relay = %self.url, reason = ?ended, "relay disconnected");
        ended
    }
}

impl Session<'_> {
    pub fn sub_id(&mut self, purpose: &str) -> SubscriptionId {
        self.next_sub += 1;
        SubscriptionId::new(format!("{purpose}-{}", self.next_sub))
    }

    /// With a key to authenticate with (a private service): a relay that sends its NIP-42
    /// challenge on connecting (as a private service of this server does) is answered before anything is asked, so
    /// no request meets `auth-required:`. A relay that sends none within a moment is not waited
    /// for; a challenge that comes later is answered when it comes ([`Session::on_message`]).
    async fn authenticate_first(&mut self) -> Result<(), Ended> {
        if self.credentials().is_none() {
            return Ok(());
        }
        let wait = self.peer.shared.config.timeout.min(Duration::from_secs(2));
        let challenge = match self.wire.recv(wait).await {
            Ok(Incoming::Message(RelayMessage::Auth { challenge })) => challenge.into_owned(),
            Ok(Incoming::Message(other)) => {
                return match self.on_message(other).await {
                    Some(end) => Err(end),
                    None => Ok(()),
                };
            }
            Ok(Incoming::Unparsable(_)) | Err(WireError::ReadTimeout(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let id = self.send_auth(&challenge).await?;
        let deadline = Instant::now() + self.peer.shared.config.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.wire.recv(left).await? {
                Incoming::Message(RelayMessage::Ok { event_id, status, message }) if event_id == id => {
                    if status {
                        tracing::info!(relay = %self.peer.url, "authenticated to relay (NIP-42)");
                        return Ok(());
                    }
                    return Err(Ended::Failed(format!("the relay refused our NIP-42 AUTH: {message}")));
                }
                Incoming::Message(other) => {
                    if let Some(end) = self.on_message(other).await {
                        return Err(end);
                    }
                }
                Incoming::Unparsable(_) => {}
            }
        }
    }

    /// The key this server answers this relay's NIP-42 challenges with, and the `relay` tag it
    /// names: to another replica of a private set, its own key and the service's public relay
    /// URL (`crate::trust::credentials::ReplicaIdentity`); to a `--private-sync-peer`, the service
    /// key and the peer's URL. `None`: challenges are not answered.
    fn credentials(&self) -> Option<(Keys, String)> {
        let config = &self.peer.shared.config;
        if let Some(me) = config.replica_identity.as_ref().filter(|_| config.replicas.iter().any(|r| RelayUrl::parse(&r.relay).is_ok_and(|u| u == self.peer.url))) {
            return Some((me.keys().clone(), me.relay_tag()));
        }
        config.auth_keys.clone().map(|keys| (keys, self.peer.url.as_str().to_string()))
    }

    /// Answers a NIP-42 challenge ([`Session::credentials`]); the AUTH event's id (nothing is
    /// sent without a key).
    async fn send_auth(&mut self, challenge: &str) -> Result<EventId, Ended> {
        let Some((keys, relay)) = self.credentials() else {
            return Ok(EventId::from_byte_array([0; 32]));
        };
        let event = crate::trust::credentials::auth_event(&keys, &relay, challenge).map_err(Ended::Failed)?;
        let id = event.id;
        self.wire.send(&ClientMessage::auth(event)).await?;
        Ok(id)
    }

    /// History of the plan's filters, then live until something ends the session.
    async fn follow(&mut self) -> Ended {
        let plan = self.peer.plan.borrow_and_update().clone();
        self.publish_plan(&plan);
        // Live first, then history: whatever the relay stores meanwhile arrives live.
        if let Err(e) = self.subscribe_live(&plan).await {
            return e;
        }
        if let Err(e) = self.history(&plan, &BTreeSet::new(), true).await {
            return e;
        }
        // The first exchange is answered: only now does the failing streak end (a relay that
        // accepts connections and then drops them keeps backing off, and is dead after a day).
        self.peer.health.connected();
        {
            let mut s = self.peer.stats.lock().unwrap();
            s.failures = 0;
            s.cooling_down = false;
        }
        self.now_live();
        let mut plan = plan;
        // One deadline for the quiet watch, moved only by what the relay sends and our pings:
        // the other branches below never restart it.
        let mut quiet = QuietWatch::new(self.peer.shared.config.timeout);
        let mut touch = tokio::time::interval(Duration::from_secs(10));
        let mut touched = self.wire.last_heard;
        loop {
            let quiet_until = quiet.deadline(self.wire.last_heard);
            tokio::select! {
                changed = self.peer.plan.changed() => {
                    if changed.is_err() {
                        return Ended::Stop;
                    }
                    let next = self.peer.plan.borrow_and_update().clone();
                    if next.fixed == plan.fixed && next.roots == plan.roots {
                        self.publish_plan(&next);
                        plan = next;
                        continue;
                    }
                    // Only the filters the last plan did not have get their history.
                    let old = plan.filter_keys();
                    self.publish_plan(&next);
                    if let Err(e) = self.subscribe_live(&next).await {
                        return e;
                    }
                    if let Err(e) = self.history(&next, &old, false).await {
                        return e;
                    }
                    self.now_live();
                    plan = next;
                }
                command = self.peer.commands.recv() => match command {
                    Some(PeerCommand::Fetch(ids)) => {
                        let dropped = self.fetches.queue(ids);
                        if dropped > 0 {
                            tracing::info!(relay = %self.peer.url, dropped, "fetch queue full; missing events not asked for by id");
                        }
                        if let Err(e) = self.start_fetch().await {
                            return e;
                        }
                    }
                    None => return Ended::Stop,
                },
                _ = sleep_until_or_never(self.fetches.deadline()) => {
                    if let Some(id) = self.fetches.expire(Instant::now()) {
                        tracing::debug!(relay = %self.peer.url, subscription = %id, "fetch by id unanswered in time; closed");
                        if let Err(e) = self.close_all(&[id]).await {
                            return e;
                        }
                        if let Err(e) = self.start_fetch().await {
                            return e;
                        }
                    }
                },
                incoming = self.wire.recv_until(quiet_until) => match incoming {
                    Ok(Incoming::Message(message)) => {
                        if let Some(end) = self.on_message(message).await {
                            return end;
                        }
                    }
                    Ok(Incoming::Unparsable(text)) => {
                        tracing::debug!(relay = %self.peer.url, message = %text, "unparsable message from relay");
                    }
                    // A pong may have come meanwhile: the watch decides from when it last heard.
                    Err(WireError::ReadTimeout(_)) if quiet.deadline(self.wire.last_heard) > Instant::now() => {}
                    Err(WireError::ReadTimeout(_)) => match quiet.elapsed(self.wire.last_heard, Instant::now()) {
                        QuietStep::Ping => {
                            if let Err(e) = self.wire.ping().await {
                                return e.into();
                            }
                        }
                        QuietStep::GiveUp => {
                            let quiet_for = self.wire.last_heard.elapsed();
                            return Ended::Failed(format!("the relay stopped answering pings (nothing heard for {} s)", quiet_for.as_secs()));
                        }
                    },
                    Err(e) => return e.into(),
                },
                // Live up to the last moment the relay was heard from, never further.
                _ = touch.tick() => if self.wire.last_heard > touched {
                    touched = self.wire.last_heard;
                    self.peer.shared.touch_cursor(&self.peer.url, touched);
                },
                _ = self.peer.shutdown.recv() => return Ended::Stop,
            }
        }
    }

    /// With no fetch open, asks for the next chunk of queued ids (one subscription at a time).
    async fn start_fetch(&mut self) -> Result<(), Ended> {
        let id = SubscriptionId::new(format!("fetch-{}", self.next_sub + 1));
        let Some(chunk) = self.fetches.start(id.clone(), self.ids_per_req(), Instant::now()) else { return Ok(()) };
        self.next_sub += 1;
        let filters = vec![Filter::new().ids(chunk).limit(self.ids_per_req())];
        self.subs.insert(id.clone(), filters.clone());
        self.wire.send(&ClientMessage::req(id, filters)).await.map_err(Ended::from)
    }

    /// Event ids one REQ asks for: the relay's `max_limit`, and what fits its
    /// `max_message_length` (67 bytes per quoted hex id and comma).
    pub fn ids_per_req(&self) -> usize {
        let by_size = self.limits.max_message_length.saturating_sub(super::wanted::REQ_OVERHEAD + 16) / 67;
        self.limits.max_limit.min(by_size).clamp(1, 500)
    }

    fn publish_plan(&self, plan: &RelayPlan) {
        let mut s = self.peer.stats.lock().unwrap();
        s.repositories = plan.repos.to_vec();
        s.filters = plan.filter_count();
        s.bootstrap = plan.bootstrap;
        s.outbox = plan.outbox;
    }

    /// (Re)opens the live subscriptions for `plan`: `limit: 0` (NIP-01: no stored events, only
    /// new ones, whatever their `created_at`; history covers the stored ones). The new ones are
    /// opened before the old ones are closed when the relay allows that many, so no event slips
    /// through between them.
    async fn subscribe_live(&mut self, plan: &RelayPlan) -> Result<(), Ended> {
        // Keep two subscriptions free for history and fetches.
        let room = self.limits.max_subscriptions.saturating_sub(2).max(1);
        let mut all = batches(plan.filters().map(|f| f.limit(0)), self.limits.max_filters, self.limits.max_message_length);
        let reqs: Vec<Vec<Filter>> = all.by_ref().take(room).collect();
        let left = all.count();
        if left > 0 {
            tracing::warn!(relay = %self.peer.url, needed = room + left, allowed = room, "relay allows too few subscriptions; following part of the plan live");
        }
        let old = std::mem::take(&mut self.live);
        let overlap = old.len() + reqs.len() <= room;
        if !overlap {
            self.close_all(&old).await?;
        }
        for filters in reqs {
            let id = self.sub_id("live");
            self.subs.insert(id.clone(), filters.clone());
            self.wire.send(&ClientMessage::req(id.clone(), filters)).await.map_err(|e| Ended::Failed(e.to_string()))?;
            self.live.push(id);
        }
        if overlap {
            self.close_all(&old).await?;
        }
        Ok(())
    }

    /// History done, subscriptions open.
    fn now_live(&self) {
        self.peer.set_state(PeerState::Live);
        self.peer.shared.touch_cursor(&self.peer.url, self.wire.last_heard);
    }

    async fn close_all(&mut self, ids: &[SubscriptionId]) -> Result<(), Ended> {
        for id in ids {
            self.subs.remove(id);
            self.wire.send(&ClientMessage::close(id.clone())).await.map_err(|e| Ended::Failed(e.to_string()))?;
        }
        Ok(())
    }

    /// Handles a message outside a history exchange; `Some` ends the session.
    pub(super) async fn on_message(&mut self, message: RelayMessage<'static>) -> Option<Ended> {
        match message {
            RelayMessage::Event { subscription_id, event } => {
                let filters = self.subs.get(subscription_id.as_ref()).cloned().unwrap_or_default();
                let events = self.screen(vec![event.into_owned()], &filters).await;
                self.take(events).await;
                self.peer.shared.touch_cursor(&self.peer.url, self.wire.last_heard);
            }
            RelayMessage::EndOfStoredEvents(id) if id.as_str().starts_with("fetch-") => {
                self.subs.remove(id.as_ref());
                let _ = self.wire.send(&ClientMessage::close(id.clone().into_owned())).await;
                if self.fetches.ended(id.as_str()) {
                    if let Err(end) = self.start_fetch().await {
                        return Some(end);
                    }
                }
            }
            RelayMessage::Closed { subscription_id, message } => {
                if is_rate_limited(&message) {
                    return Some(Ended::RateLimited(message.into_owned()));
                }
                self.subs.remove(subscription_id.as_ref());
                if self.live.contains(&subscription_id) {
                    tracing::info!(relay = %self.peer.url, subscription = %subscription_id, reason = %message, "relay closed a live subscription");
                    self.peer.note_error(&message);
                    self.live.retain(|s| *s != *subscription_id);
                }
                if self.fetches.ended(subscription_id.as_str()) {
                    tracing::debug!(relay = %self.peer.url, subscription = %subscription_id, reason = %message, "relay refused a fetch by id");
                    if let Err(end) = self.start_fetch().await {
                        return Some(end);
                    }
                }
            }
            RelayMessage::Auth { challenge } if self.credentials().is_some() => {
                if let Err(end) = self.send_auth(&challenge).await {
                    return Some(end);
                }
            }
            RelayMessage::Notice(message) | RelayMessage::Ok { message, .. } if is_rate_limited(&message) => {
                return Some(Ended::RateLimited(message.into_owned()));
            }
            RelayMessage::Notice(message) => tracing::debug!(relay = %self.peer.url, notice = %message, "relay notice"),
            _ => {}
        }
        None
    }

    /// Takes a token from the relay's write bucket, waiting while it is empty; false at
    /// shutdown.
    pub async fn throttle(&mut self) -> bool {
        loop {
            let wait = match self.peer.bucket.try_take(Instant::now()) {
                Ok(()) => return true,
                Err(wait) => wait.min(Duration::from_secs(1)),
            };
            self.peer.stats.lock().unwrap().throttled_ms += wait.as_millis() as u64;
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.peer.shutdown.recv() => return false,
            }
        }
    }

    /// Received events, each through the relay's write bucket: those matching one of
    /// `filters` (the filters of the subscription they came on) are returned; the others are
    /// refused as unrequested (they may only wait for an event id they tag, see
    /// [`super::intake::Intake::unrequested`]).
    pub async fn screen(&mut self, events: Vec<Event>, filters: &[Filter]) -> Vec<Event> {
        let mut asked = Vec::with_capacity(events.len());
        for event in events {
            if !self.throttle().await {
                break;
            }
            if filters.iter().any(|f| f.match_event(&event, MatchEventOptions::new())) {
                asked.push(event);
                continue;
            }
            self.refuse_unrequested(event).await;
        }
        asked
    }

    /// Counts `event` (sent unasked) as received and refused; it may wait for an id it tags.
    pub async fn refuse_unrequested(&self, event: Event) {
        let id = event.id;
        self.peer.shared.intake.unrequested(event, &self.peer.url).await;
        let mut s = self.peer.stats.lock().unwrap();
        s.received += 1;
        s.refused += 1;
        s.unrequested += 1;
        if s.unrequested.is_power_of_two() {
            tracing::info!(relay = %self.peer.url, event = %id, unrequested = s.unrequested, "relay sends events it was not asked for; refused");
        }
    }

    /// Submits received events (announcements first, then states, then the rest, oldest first,
    /// so parents tend to come before children) and counts them. Runs of independent events
    /// ([`steps`]) are admitted side by side (signatures checked on the client pipeline's
    /// bounded pool); everything else one at a time, in order.
    pub async fn take(&mut self, mut events: Vec<Event>) {
        events.sort_by_key(|e| (kind_rank(e.kind.as_u16()), e.created_at, e.id));
        let steps = steps(&events);
        let mut events = events.into_iter();
        for step in steps {
            let run: Vec<Event> = events.by_ref().take(step.len()).collect();
            let mut verdicts = Vec::with_capacity(run.len());
            if run.len() == 1 {
                let event = run.into_iter().next().expect("one event");
                verdicts.push(self.peer.shared.intake.submit(Arc::new(event), &self.peer.url).await);
            } else {
                let mut set = tokio::task::JoinSet::new();
                for event in run {
                    let (shared, url) = (self.peer.shared.clone(), self.peer.url.clone());
                    // The run's saves share store commits (`crate::store::group_commit`).
                    let admitting = shared.grasp().relay.store().admitting();
                    set.spawn(async move {
                        let _admitting = admitting;
                        shared.intake.submit(Arc::new(event), &url).await
                    });
                }
                while let Some(done) = set.join_next().await {
                    match done {
                        Ok(v) => verdicts.push(v),
                        Err(e) => {
                            tracing::error!(relay = %self.peer.url, error = %e, "admitting a synced event failed");
                            verdicts.push((Verdict::Refused, 0));
                        }
                    }
                }
            }
            let mut s = self.peer.stats.lock().unwrap();
            let accepted_before = s.accepted;
            for (verdict, readmitted) in verdicts {
                s.received += 1;
                s.accepted += readmitted;
                match verdict {
                    Verdict::Accepted => s.accepted += 1,
                    Verdict::Refused | Verdict::Waiting => s.refused += 1,
                }
            }
            let gained = s.accepted - accepted_before;
            drop(s);
            if self.peer.plan.borrow().outbox {
                self.peer.shared.outbox_gained(gained);
            }
        }
        let waiting = self.peer.shared.intake.waiting.lock().unwrap().from_relay(&self.peer.url);
        self.peer.stats.lock().unwrap().waiting = waiting;
        self.count_bytes();
    }

    /// Brings the relay's byte counts up to date with this connection's.
    pub fn count_bytes(&self) {
        let mut s = self.peer.stats.lock().unwrap();
        s.bytes_in = self.bytes_before.0 + self.wire.bytes_in;
        s.bytes_out = self.bytes_before.1 + self.wire.bytes_out;
    }

    /// Keys of filters whose history is complete are remembered for resuming.
    /// `initial`: the run after connecting (its keys replace the remembered ones); `full`: it
    /// ran without a resume `since`.
    pub fn history_done(&self, keys: BTreeSet<String>, initial: bool, full: bool) {
        self.peer.shared.history_done(&self.peer.url, keys, initial, full);
        self.peer.stats.lock().unwrap().history_runs += 1;
    }
}

/// Sleeps until `at`, or for ever without one (a `select!` branch that never fires).
async fn sleep_until_or_never(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Splits sorted events into steps run one after another (pure): a run of independent events
/// (kinds that may run alongside others, as for a client's pipeline, none referencing or
/// repeating another of the run; at most [`MAX_IN_FLIGHT`]) is one step, admitted side by
/// side; any other event is a step of its own. Parents before children stays true: an event
/// referencing one of the run starts the next step.
pub fn steps(events: &[Event]) -> Vec<std::ops::Range<usize>> {
    let mut steps = Vec::new();
    let mut start = 0;
    let mut in_run: HashSet<EventId> = HashSet::new();
    for (i, event) in events.iter().enumerate() {
        if !runs_alongside(event) {
            if i > start {
                steps.push(start..i);
            }
            steps.push(i..i + 1);
            start = i + 1;
            in_run.clear();
            continue;
        }
        let depends = in_run.contains(&event.id) || references(event).event_ids.iter().any(|r| in_run.contains(r));
        if depends || i - start >= MAX_IN_FLIGHT {
            steps.push(start..i);
            start = i;
            in_run.clear();
        }
        in_run.insert(event.id);
    }
    if start < events.len() {
        steps.push(start..events.len());
    }
    steps
}

fn kind_rank(kind: u16) -> u8 {
    match kind {
        grasp_state::nostr::nip34::KIND_ANNOUNCEMENT => 0,
        grasp_state::nostr::nip34::KIND_STATE => 1,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: u16, tags: Vec<Tag>) -> Event {
        EventBuilder::new(Kind::Custom(kind), "x").tags(tags).finalize(&Keys::generate()).unwrap()
    }

    #[test]
    fn independent_events_run_side_by_side_and_children_after_their_parents() {
        let ann = ev(30617, vec![Tag::identifier("r")]);
        let issue = ev(1621, vec![]);
        let other = ev(1621, vec![]);
        let comment = ev(1111, vec![Tag::event(issue.id)]);
        let third = ev(1621, vec![]);
        let deletion = ev(5, vec![Tag::event(third.id)]);
        let last = ev(1621, vec![]);
        let events = vec![ann, issue, other, comment, third.clone(), deletion, last];
        assert_eq!(steps(&events), vec![0..1, 1..3, 3..5, 5..6, 6..7]);
        // A repeated event never runs beside itself.
        assert_eq!(steps(&[third.clone(), third]), vec![0..1, 1..2]);
        // Runs are bounded.
        let many: Vec<Event> = (0..MAX_IN_FLIGHT + 1).map(|_| ev(1621, vec![])).collect();
        assert_eq!(steps(&many), vec![0..MAX_IN_FLIGHT, MAX_IN_FLIGHT..MAX_IN_FLIGHT + 1]);
        assert!(steps(&[]).is_empty());
    }
}
