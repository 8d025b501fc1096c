//! A replica set's push routed by repository (docs/scaling.md, "nginx in front"): nginx sends a
//! repository's git requests to one replica, while the client's announcement and state event
//! went over the WebSocket to another a moment before, and relay sync carries them over in
//! about a second. When a push would be refused for want of a state (or finds no repository at
//! all), the relay first asks the other replicas for that identifier's announcements (30617) and
//! states (30618), admits what they answer as relay sync would, and decides again.
//!
//! Each replica is asked once, all in parallel, with one `REQ` ([`super::query::Reach`]: the
//! relay sync's bounded frames, every event checked against the filter and its signature
//! verified), within [`ASK_DEADLINE`] for all of them together. Only the operator's replicas are
//! asked, never another relay. What they answer goes through the door of relay sync's events
//! ([`Grasp::submit_verified`] as relay sync), in a task of its own: a state whose git data is
//! already here is released under the repository's push lock, which the push being decided
//! holds; that release waits (at most `--event-lock-wait`, then deferred, as for any state that
//! arrives during a push) without holding the push up, which is decided again once the state is
//! held or stored, at most [`ADMIT_GRACE`] after the deadline.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use grasp_state::trust::auth::Submitter;
use grasp_state::nostr::nip34::{KIND_ANNOUNCEMENT, KIND_STATE};
use nostr::prelude::{Event, Filter, Keys, Kind, PublicKey, SingleLetterTag};

use super::query::Reach;
use super::tls::{Tls, TlsSetupError};
use crate::grasp::replica_set::{Asked, OtherReplicas};
use crate::grasp::Grasp;
use crate::sync::relay_url::RelayUrl;
use crate::sync::UrlPolicy;

/// How long a push waits, at most, for the other replicas' answers (all asked at once).
pub const ASK_DEADLINE: Duration = Duration::from_secs(2);

/// Past [`ASK_DEADLINE`], how long the admission of what arrived is waited for, at most.
pub const ADMIT_GRACE: Duration = Duration::from_secs(1);

/// Events taken from one replica's answer, at most (one identifier's announcements and states:
/// one of each per author).
const MAX_EVENTS: usize = 500;

/// Who submits what the replicas answer: relay sync (no client address, see
/// `super::intake`).
const FROM_SYNC: Submitter<'static> = Submitter { authenticated: &[], from_sync: true, address: None };

/// Unknown keys that authenticated trigger a new look at the replicas' keys at most this often.
const KEYS_REFRESH: Duration = Duration::from_secs(10);

/// The other replicas, as asked for one repository's events, and as recognised when they ask.
pub struct ReplicaReads {
    grasp: Weak<Grasp>,
    replicas: Vec<(String, RelayUrl)>,
    policy: UrlPolicy,
    tls: Tls,
    /// The keys this server authenticates as when it asks (NIP-42): its own (NIP-11 `self`),
    /// and a private service's key.
    keys: Vec<Keys>,
    /// The `AUTH` events' `relay` tag: the service's public URL, the same on every replica.
    relay_tag: String,
    /// The other replicas' own keys (their NIP-11 `self`).
    known: std::sync::RwLock<BTreeSet<PublicKey>>,
    /// When the replicas' NIP-11 documents were last read (one reading at a time).
    read_at: tokio::sync::Mutex<Option<tokio::time::Instant>>,
}

impl ReplicaReads {
    /// The reader of `grasp`'s replicas (`--replica`); `None` without any.
    /// `keys`: what this server authenticates as when it asks ([`ReplicaReads::keys`]).
    pub fn new(grasp: &Arc<Grasp>, keys: Vec<Keys>, tls_ca: Option<&std::path::Path>) -> Result<Option<Arc<ReplicaReads>>, TlsSetupError> {
        if grasp.replicas().is_empty() {
            return Ok(None);
        }
        let hosts: Vec<String> = grasp.replicas().iter().map(|r| r.host_port.clone()).collect();
        let replicas = grasp
            .replicas()
            .iter()
            .filter_map(|r| match RelayUrl::parse(&r.relay) {
                Ok(url) => Some((r.base.clone(), url)),
                Err(error) => {
                    tracing::warn!(replica = %r.base, %error, "replica not asked for repositories' events");
                    None
                }
            })
            .collect();
        Ok(Some(Arc::new(ReplicaReads {
            grasp: Arc::downgrade(grasp),
            replicas,
            policy: UrlPolicy::new(false, &[], &[]).trusting(&hosts),
            tls: Tls::new(tls_ca)?,
            keys,
            relay_tag: format!("wss://{}", grasp_state::names::host::public_authority(grasp.public_host())),
            known: Default::default(),
            read_at: tokio::sync::Mutex::new(None),
        })))
    }

    /// Is `key` one of the other replicas' own keys? Read from their NIP-11 documents (`self`;
    /// the operator named their URLs), again when a key not known yet asks, at most every
    /// [`KEYS_REFRESH`], within [`ASK_DEADLINE`].
    pub async fn is_replica(&self, key: &PublicKey) -> bool {
        if self.is_known(key) {
            return true;
        }
        let mut read_at = self.read_at.lock().await;
        // Read meanwhile by the holder of the lock before us?
        if self.is_known(key) || read_at.is_some_and(|at| at.elapsed() < KEYS_REFRESH) {
            return self.is_known(key);
        }
        *read_at = Some(tokio::time::Instant::now());
        let reads = self.replicas.iter().map(|(base, url)| async move {
            let addresses = url.resolve(&self.policy).await.ok()?;
            let doc = super::wire::fetch_nip11(url, &addresses, &self.tls, ASK_DEADLINE).await;
            let key = doc.as_ref().and_then(|d| d.get("self")).and_then(|v| v.as_str()).and_then(|hex| PublicKey::from_hex(hex).ok());
            if key.is_none() {
                tracing::info!(replica = %base, "replica's own key (NIP-11 `self`) not read; it is not recognised as a replica until it is");
            }
            key
        });
        let read: Vec<PublicKey> = futures_util::future::join_all(reads).await.into_iter().flatten().collect();
        self.known.write().unwrap_or_else(|e| e.into_inner()).extend(read);
        self.is_known(key)
    }

    /// Is `key` one of the other replicas' keys read so far ([`ReplicaReads::is_replica`] reads
    /// them)? No waiting.
    pub fn is_known(&self, key: &PublicKey) -> bool {
        self.known.read().unwrap_or_else(|e| e.into_inner()).contains(key)
    }

    /// The held announcements and states matching `filters` that a replica authenticated as
    /// one of `authenticated` may read: those of the identifiers the filters name (`#d`, at
    /// most 16); none for anyone else. A replica asks for them before refusing a push
    /// ([`ReplicaReads::ask`]); they are never served to clients.
    pub async fn held_for(&self, grasp: &Grasp, authenticated: &[PublicKey], filters: &[Filter]) -> Vec<Arc<Event>> {
        let Ok(d) = SingleLetterTag::from_char('d') else { return Vec::new() };
        let identifiers: BTreeSet<&String> = filters.iter().filter_map(|f| f.generic_tags.get(&d)).flatten().take(16).collect();
        if identifiers.is_empty() || authenticated.is_empty() {
            return Vec::new();
        }
        let mut replica = false;
        for key in authenticated {
            if self.is_replica(key).await {
                replica = true;
                break;
            }
        }
        if !replica {
            return Vec::new();
        }
        identifiers
            .into_iter()
            .flat_map(|identifier| grasp.purgatory.repository_events(identifier))
            .filter(|event| filters.iter().any(|f| f.match_event(event, nostr::prelude::MatchEventOptions::new())))
            .collect()
    }

    /// Asks every replica for `identifier`'s announcements and states and admits those this
    /// server lacks; returns once every replica answered and what they answered is admitted, or
    /// at the deadline ([`ASK_DEADLINE`], then at most [`ADMIT_GRACE`]). `repo`: the repository
    /// as logged.
    pub async fn ask(&self, identifier: &str, repo: &str) -> Asked {
        let Some(grasp) = self.grasp.upgrade() else { return Asked::default() };
        let started = tokio::time::Instant::now();
        let deadline = started + ASK_DEADLINE;
        let reach = Reach { policy: &self.policy, tls: &self.tls, timeout: ASK_DEADLINE };
        let filter = Filter::new().kinds([Kind::Custom(KIND_ANNOUNCEMENT), Kind::Custom(KIND_STATE)]).identifier(identifier);
        let mut pending: FuturesUnordered<_> = self
            .replicas
            .iter()
            .map(|(base, url)| {
                let filter = filter.clone();
                async move { (base, reach.query_as(url, vec![filter], MAX_EVENTS, &self.keys, &self.relay_tag).await) }
            })
            .collect();
        let mut asked = Asked::default();
        let mut admissions = Vec::new();
        let mut handed = std::collections::HashSet::new();
        loop {
            match tokio::time::timeout_at(deadline, pending.next()).await {
                Ok(Some((replica, Ok(events)))) => {
                    asked.answered += 1;
                    let mut events = unknown(&grasp, events).await;
                    // What another replica answered too is admitted once.
                    events.retain(|e| handed.insert(e.id));
                    tracing::info!(repo, replica = %replica, new_here = events.len(), "replica asked for a repository's announcements and states before refusing a push");
                    asked.new_here += events.len();
                    if !events.is_empty() {
                        // Admitted in a task of its own: see the module docs.
                        admissions.push(tokio::spawn(admit(grasp.clone(), events, replica.clone(), repo.to_string())));
                    }
                }
                Ok(Some((replica, Err(error)))) => {
                    tracing::info!(repo, replica = %replica, %error, "replica asked for a repository's announcements and states did not answer");
                }
                Ok(None) => break,
                Err(_) => {
                    tracing::info!(repo, unanswered = pending.len(), deadline_ms = ASK_DEADLINE.as_millis() as u64, "replicas asked for a repository's events did not all answer in time");
                    break;
                }
            }
        }
        drop(pending);
        for admission in admissions {
            match tokio::time::timeout_at(deadline.max(tokio::time::Instant::now()) + ADMIT_GRACE, admission).await {
                Ok(Ok(n)) => asked.admitted += n,
                Ok(Err(_)) => {}
                Err(_) => tracing::info!(repo, "events from a replica still being admitted; the push is decided without waiting longer"),
            }
        }
        tracing::info!(repo, answered = asked.answered, replicas = self.replicas.len(), new_here = asked.new_here, admitted = asked.admitted, elapsed_ms = started.elapsed().as_millis() as u64, "replicas asked");
        asked
    }
}

impl ReplicaReads {
    /// Before a push (its advertisement or its `POST`) reaches git: when it is addressed to a
    /// hosted repository this server does not have, the replicas are asked for the identifier's
    /// announcements and states first ([`ReplicaReads::ask`]): an announcement they hold makes
    /// the repository here, which the push then finds. Any other request passes at once.
    pub async fn before_push_to_missing(&self, grasp: &Grasp, method: &str, path: &str, query: &str) {
        let Some(repo) = grasp_state::names::identifier::parse_repo_url_path(path) else { return };
        if repo.space != grasp_state::names::identifier::RepoSpace::Hosted || !grasp_state::contract::git_backend::is_push(method, &repo.rest, query) {
            return;
        }
        let Some(dir) = grasp.repo_path(&repo.owner, &repo.identifier) else { return };
        if tokio::fs::try_exists(&dir).await.unwrap_or(true) {
            return;
        }
        let shown = format!("{}/{}", repo.npub, repo.identifier);
        tracing::info!(repo = %shown, "push to a repository this replica does not have; asking the other replicas for its announcement");
        self.ask(&repo.identifier, &shown).await;
    }
}

impl OtherReplicas for ReplicaReads {
    fn ask<'a>(&'a self, identifier: &'a str, repo: &'a str) -> BoxFuture<'a, Asked> {
        Box::pin(ReplicaReads::ask(self, identifier, repo))
    }

    fn before_push_to_missing<'a>(&'a self, grasp: &'a Grasp, method: &'a str, path: &'a str, query: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(ReplicaReads::before_push_to_missing(self, grasp, method, path, query))
    }

    fn held_for<'a>(&'a self, grasp: &'a Grasp, authenticated: &'a [PublicKey], filters: &'a [Filter]) -> BoxFuture<'a, Vec<Arc<Event>>> {
        Box::pin(ReplicaReads::held_for(self, grasp, authenticated, filters))
    }

    fn is_replica<'a>(&'a self, key: &'a PublicKey) -> BoxFuture<'a, bool> {
        Box::pin(ReplicaReads::is_replica(self, key))
    }

    fn is_known(&self, key: &PublicKey) -> bool {
        ReplicaReads::is_known(self, key)
    }
}

/// The events of `events` this server holds neither stored nor in the purgatory (protected
/// ones dropped: relay sync never takes them), announcements first, each kind oldest first.
async fn unknown(grasp: &Grasp, mut events: Vec<Event>) -> Vec<Event> {
    events.retain(|e| !grasp_state::trust::auth::is_protected(e) && matches!(e.kind.as_u16(), KIND_ANNOUNCEMENT | KIND_STATE));
    events.sort_by_key(|e| (e.kind.as_u16() != KIND_ANNOUNCEMENT, e.created_at, e.id));
    events.dedup_by_key(|e| e.id);
    let mut fresh = Vec::new();
    for event in events {
        let identifier = event.tags.identifier().unwrap_or_default().to_string();
        let held = match event.kind.as_u16() {
            KIND_ANNOUNCEMENT => grasp.purgatory.held_announcement(&event.pubkey, &identifier).is_some_and(|h| h.id == event.id),
            _ => grasp.purgatory.held_state(&identifier, &event.id).is_some(),
        };
        if !held && grasp.event_by_id(&event.id).await.is_none() {
            fresh.push(event);
        }
    }
    fresh
}

/// Admits `events` (from `replica`) as relay sync's; returns how many were accepted.
async fn admit(grasp: Arc<Grasp>, events: Vec<Event>, replica: String, repo: String) -> usize {
    let mut accepted = 0;
    for event in events {
        let (ok, message) = grasp.submit_verified(&Arc::new(event.clone()), &FROM_SYNC).await;
        tracing::info!(repo = %repo, replica = %replica, event = %event.id, kind = event.kind.as_u16(), ok, reply = %message, "event from a replica admitted before deciding a push");
        accepted += usize::from(ok);
    }
    accepted
}
