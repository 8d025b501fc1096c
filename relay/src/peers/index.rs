//! The relay-sync interest kept up to date (pure): every accepted announcement (stored: level
//! full; held: level state-only), its maintainer set, its relays and (at level full) its root
//! events, indexed by repository `(owner, identifier)` and by relay URL, so one accepted event
//! changes the interest with work independent of how many repositories exist
//! (docs/architecture.md, "Relay sync").
//!
//! - Built once at startup from the store (paged) and the purgatory ([`super::interest::load`]),
//!   then updated from the feed of stored events ([`InterestIndex::note_stored`]: announcements
//!   and their replacements, deletions, new events tagging a repository) and from the
//!   purgatory's held announcements ([`InterestIndex::set_held`], compared by event id: held
//!   announcements are not broadcast).
//! - Per relay it keeps the repositories counting for it and how many distinct owners of served
//!   and of held ones list it, so the ranking ([`super::wanted::rank_counted`]) looks at relays,
//!   never at repositories; each relay's consolidated filters are rebuilt only when one of its
//!   repositories changed ([`InterestIndex::plans`]).
//! - No cap drops a served repository: every stored announcement is followed. Held ones are
//!   bounded by the purgatory's own caps (`--purgatory-total`, `--purgatory-per-author`).
//!
//! Its plans equal those of [`Interest::plans`] over the same repositories (the property test
//! `incremental_updates_equal_a_full_rebuild`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use grasp_state::authority::maintainers::MaintainerSet;
use grasp_state::nostr::roles::{ClaimsRef, Lead};
use grasp_state::nostr::recency::Recency;
use grasp_state::nostr::nip34::{Announcement, Source, KIND_ANNOUNCEMENT, KIND_DELETION};
use nostr::prelude::{Event, EventId, PublicKey, Timestamp};

use crate::sync::relay_url::RelayUrl;
use super::wanted::{plan_for, rank_counted, Interest, RelayPlan, RepoInterest, RootIds, SyncLevel, MAX_RELAYS_PER_ANNOUNCEMENT, MAX_ROOTS};

/// A repository: (owner, identifier).
pub type RepoKey = (PublicKey, String);

/// Relays that are never connected to (this server, unsafe addresses).
pub type Excluded = Box<dyn Fn(&RelayUrl) -> bool + Send + Sync>;

/// What the index keeps of one announcement (filed under its repository): what the interest
/// and the maintainer sets of its identifier need, relays parsed once (shared with the
/// repository's [`RepoInterest`]).
#[derive(Debug)]
struct Listed {
    event_id: EventId,
    created_at: Timestamp,
    relays: Arc<[RelayUrl]>,
    /// What the announcement claims (grasp_state::nostr::roles): whom it lists, its lead, whether its
    /// author declined.
    maintainers: Box<[PublicKey]>,
    lead: Lead,
    declines: bool,
}

impl Listed {
    fn new(a: Announcement) -> Box<Listed> {
        let relays: BTreeSet<RelayUrl> = a.relays.iter().filter_map(|r| RelayUrl::parse(r).ok()).collect();
        Box::new(Listed {
            event_id: a.event_id,
            created_at: a.created_at,
            relays: relays.into_iter().collect(),
            maintainers: a.claims.maintainers.into(),
            lead: a.claims.lead,
            declines: a.claims.declines,
        })
    }

    fn claims(&self) -> ClaimsRef<'_> {
        ClaimsRef { maintainers: &self.maintainers, lead: self.lead, declines: self.declines }
    }

    fn recency(&self) -> Recency {
        Recency::new(self.created_at, self.event_id)
    }
}

/// The stored and the held announcement of one repository; the held one counts only when
/// strictly newer (as [`grasp_state::authority::announcements::merge`]). Boxed: most repositories have
/// one of the two, and the map's buckets stay small.
#[derive(Debug, Default)]
struct Slot {
    stored: Option<Box<Listed>>,
    held: Option<Box<Listed>>,
}

impl Slot {
    fn effective(&self) -> Option<(&Listed, Source)> {
        match (self.stored.as_deref(), self.held.as_deref()) {
            (Some(s), Some(h)) if h.recency() > s.recency() => Some((h, Source::Purgatory)),
            (Some(s), _) => Some((s, Source::Stored)),
            (None, Some(h)) => Some((h, Source::Purgatory)),
            (None, None) => None,
        }
    }
}

/// One relay's share of the interest.
#[derive(Debug, Default)]
struct RelayEntry {
    /// Repositories counting for it (it is among their first [`MAX_RELAYS_PER_ANNOUNCEMENT`]
    /// relays not excluded), in the plan's order, with the root lists of the served ones
    /// (shared with them): a new root takes them again without looking a repository up.
    repos: BTreeMap<RepoKey, Option<RootIds>>,
    /// Repositories per owner, of served and of held repositories (distinct owners = `len`).
    full: HashMap<PublicKey, usize>,
    held: HashMap<PublicKey, usize>,
}

/// The interest, indexed (see the module doc).
pub struct InterestIndex {
    excluded: Excluded,
    bootstraps: BTreeSet<RelayUrl>,
    only: Option<BTreeSet<RelayUrl>>,
    /// The announcements of each identifier, per owner (an identifier's maintainer sets depend
    /// on each other).
    slots: HashMap<String, HashMap<PublicKey, Slot>>,
    /// The held announcements, by repository (bounded by the purgatory's caps): what
    /// [`InterestIndex::set_held`] compares with.
    held_ids: HashMap<RepoKey, EventId>,
    /// Stored announcements by event id (deletions by `e`).
    stored_ids: HashMap<EventId, RepoKey>,
    repos: HashMap<RepoKey, RepoInterest>,
    relays: BTreeMap<RelayUrl, RelayEntry>,
    /// Served repositories whose roots are still to be read from the store.
    roots_wanted: BTreeSet<RepoKey>,
    /// Relays whose plan must be rebuilt (`None`: all of them).
    dirty: Option<BTreeSet<RelayUrl>>,
    /// Relays whose plan's root events changed, and nothing else (`None`: all of them).
    roots_dirty: Option<BTreeSet<RelayUrl>>,
    /// The root lists of every served repository, shared: kept only by a private service (its
    /// one plan asks for every repository), empty otherwise.
    served_roots: BTreeMap<RepoKey, RootIds>,
    /// Shared with the peers following them: a plan is never copied whole after it is built.
    plans: BTreeMap<RelayUrl, Arc<RelayPlan>>,
    /// The operator's replicas (`--replica`): always followed, each for everything it holds
    /// (one plan, shared, [`crate::peers::wanted::replica_plan`]).
    replicas: BTreeSet<RelayUrl>,
}

impl InterestIndex {
    pub fn new(excluded: Excluded, bootstraps: BTreeSet<RelayUrl>, only: Option<BTreeSet<RelayUrl>>) -> Self {
        InterestIndex {
            excluded,
            bootstraps,
            only,
            slots: HashMap::new(),
            held_ids: HashMap::new(),
            stored_ids: HashMap::new(),
            repos: HashMap::new(),
            relays: BTreeMap::new(),
            roots_wanted: BTreeSet::new(),
            dirty: None,
            roots_dirty: Some(BTreeSet::new()),
            served_roots: BTreeMap::new(),
            plans: BTreeMap::new(),
            replicas: BTreeSet::new(),
        }
    }

    /// Follows `replicas` too, each for everything ([`InterestIndex::plans`]).
    pub fn with_replicas(mut self, replicas: BTreeSet<RelayUrl>) -> Self {
        self.replicas = replicas;
        self
    }

    /// Repositories followed.
    pub fn len(&self) -> usize {
        self.repos.len()
    }

    /// Relays named by the repositories followed (counted ones, before `--sync-max-relays`).
    pub fn relays_named(&self) -> usize {
        self.relays.len()
    }

    pub fn is_empty(&self) -> bool {
        self.repos.is_empty()
    }

    /// The sync level of a repository, if followed.
    pub fn level(&self, owner: &PublicKey, identifier: &str) -> Option<SyncLevel> {
        self.repos.get(&(*owner, identifier.to_string())).map(|r| r.level)
    }

    /// A followed repository.
    pub fn repo(&self, key: &RepoKey) -> Option<&RepoInterest> {
        self.repos.get(key)
    }

    /// Every served repository (level full), sorted by key: what a Sync+ pass looks at.
    pub fn served(&self) -> Vec<RepoInterest> {
        let mut served: Vec<RepoInterest> = self.repos.values().filter(|r| r.level == SyncLevel::Full).cloned().collect();
        served.sort_by(|a, b| (a.owner, &a.identifier).cmp(&(b.owner, &b.identifier)));
        served
    }

    /// Served repositories whose roots have not been read yet (at most `n`), taken.
    pub fn take_roots_wanted(&mut self, n: usize) -> Vec<RepoKey> {
        let keys: Vec<RepoKey> = self.roots_wanted.iter().take(n).cloned().collect();
        for key in &keys {
            self.roots_wanted.remove(key);
        }
        keys
    }

    /// The roots read from the store for `key` (oldest first): placed before any the feed added
    /// meanwhile, at most [`MAX_ROOTS`]. Ignored unless `key` is served.
    pub fn set_roots(&mut self, key: &RepoKey, read: Vec<EventId>) {
        let Some(repo) = self.repos.get_mut(key) else { return };
        if repo.level != SyncLevel::Full {
            return;
        }
        let mut roots = read;
        for id in repo.roots.iter() {
            if !roots.contains(id) {
                roots.push(*id);
            }
        }
        roots.truncate(MAX_ROOTS);
        repo.roots = roots.into();
        self.touch_roots(key);
    }

    /// A stored announcement (read at startup or from the feed): replaces the repository's
    /// stored one when newer.
    pub fn add_stored(&mut self, a: Announcement) {
        let slot = self.slots.entry(a.identifier.clone()).or_default().entry(a.owner).or_default();
        if slot.stored.as_ref().is_some_and(|old| old.recency() >= a.recency()) {
            return;
        }
        let key = (a.owner, a.identifier.clone());
        let id = a.event_id;
        if let Some(old) = slot.stored.replace(Listed::new(a)) {
            self.stored_ids.remove(&old.event_id);
        }
        self.stored_ids.insert(id, key.clone());
        self.recompute(&key.1, &BTreeSet::from([key.0]));
    }

    /// The purgatory's held announcements now (compacted by the caller only when new: `changed`
    /// parses one). Entries no longer held are dropped; returns whether anything changed. The
    /// work is that of the held announcements, whatever the number of stored ones.
    pub fn set_held(&mut self, held: &[Arc<Event>], compact: impl Fn(&Event) -> Option<Announcement>) -> bool {
        let mut now: HashMap<RepoKey, &Arc<Event>> = HashMap::new();
        for ev in held {
            let Some(identifier) = ev.tags.identifier() else { continue };
            now.insert((ev.pubkey, identifier.to_string()), ev);
        }
        let mut touched: BTreeMap<String, BTreeSet<PublicKey>> = BTreeMap::new();
        let gone: Vec<RepoKey> = self.held_ids.keys().filter(|key| !now.contains_key(*key)).cloned().collect();
        for key in gone {
            self.held_ids.remove(&key);
            if let Some(slot) = self.slots.get_mut(&key.1).and_then(|slots| slots.get_mut(&key.0)) {
                slot.held = None;
            }
            touched.entry(key.1).or_default().insert(key.0);
        }
        for (key, ev) in now {
            if self.held_ids.get(&key) == Some(&ev.id) {
                continue;
            }
            let Some(a) = compact(ev) else { continue };
            self.held_ids.insert(key.clone(), ev.id);
            self.slots.entry(key.1.clone()).or_default().entry(key.0).or_default().held = Some(Listed::new(a));
            touched.entry(key.1).or_default().insert(key.0);
        }
        let changed = !touched.is_empty();
        for (identifier, owners) in touched {
            self.recompute(&identifier, &owners);
        }
        changed
    }

    /// Takes an event just stored (the feed): an announcement (`compact` reads it), a deletion
    /// of stored announcements, or a new event tagging a served repository (a root, until it
    /// has [`MAX_ROOTS`]). Returns whether the interest changed. The work is that of the
    /// repositories the event names, whatever the number of repositories.
    pub fn note_stored(&mut self, event: &Event, compact: impl Fn(&Event) -> Option<Announcement>) -> bool {
        match event.kind.as_u16() {
            KIND_ANNOUNCEMENT => {
                let Some(a) = compact(event) else { return false };
                let key = (a.owner, a.identifier.clone());
                let stored_id = |ix: &Self| ix.stored(&key).map(|s| s.event_id);
                let before = stored_id(self);
                self.add_stored(a);
                stored_id(self) != before
            }
            KIND_DELETION => self.note_deletion(event),
            _ => self.note_root(event),
        }
    }

    /// The stored announcement of `key`, if any.
    fn stored(&self, key: &RepoKey) -> Option<&Listed> {
        self.slots.get(&key.1)?.get(&key.0)?.stored.as_deref()
    }

    /// NIP-09: the author's stored announcements named by `e` (id) or `a` (coordinate, those
    /// not newer than the deletion) leave the interest.
    fn note_deletion(&mut self, event: &Event) -> bool {
        let mut gone: Vec<RepoKey> = Vec::new();
        for tag in event.tags.iter() {
            match tag.as_slice() {
                [name, value, ..] if name == "e" => {
                    let Ok(id) = EventId::from_hex(value) else { continue };
                    if let Some(key) = self.stored_ids.get(&id).filter(|k| k.0 == event.pubkey) {
                        gone.push(key.clone());
                    }
                }
                [name, value, ..] if name == "a" => {
                    let Some(key) = announcement_key(value).filter(|k| k.0 == event.pubkey) else { continue };
                    let older = self.stored(&key).is_some_and(|a| a.created_at <= event.created_at);
                    if older {
                        gone.push(key);
                    }
                }
                _ => {}
            }
        }
        let changed = !gone.is_empty();
        for key in gone {
            if let Some(old) = self.slots.get_mut(&key.1).and_then(|slots| slots.get_mut(&key.0)).and_then(|s| s.stored.take()) {
                self.stored_ids.remove(&old.event_id);
            }
            self.recompute(&key.1, &BTreeSet::from([key.0]));
        }
        changed
    }

    fn note_root(&mut self, event: &Event) -> bool {
        let mut changed = false;
        for tag in event.tags.iter() {
            let [name, value, ..] = tag.as_slice() else { continue };
            if name != "a" {
                continue;
            }
            let Some(key) = announcement_key(value) else { continue };
            let Some(repo) = self.repos.get_mut(&key) else { continue };
            if repo.level != SyncLevel::Full || repo.roots.len() >= MAX_ROOTS || repo.roots.contains(&event.id) {
                continue;
            }
            // A new list of exactly its ids (at most MAX_ROOTS copied); plans keep the old one
            // until their next refresh.
            repo.roots = repo.roots.iter().copied().chain([event.id]).collect();
            self.touch_roots(&key);
            changed = true;
        }
        changed
    }

    /// Recomputes the repositories of `identifier` whose announcements `changed` and those
    /// whose maintainer sets reach one of them (a maintainer set reads only announcements
    /// reached along "lists as maintainer" from its owner, so only owners reaching a changed one
    /// can see a difference):
    /// the work of one identifier's announcements, never of every repository.
    fn recompute(&mut self, identifier: &str, changed: &BTreeSet<PublicKey>) {
        let updates: Vec<(PublicKey, Option<RepoInterest>)> = match self.slots.get_mut(identifier) {
            None => changed.iter().map(|owner| (*owner, None)).collect(),
            Some(slots) => {
                slots.retain(|_, slot| slot.stored.is_some() || slot.held.is_some());
                let effective: HashMap<PublicKey, (&Listed, Source)> =
                    slots.iter().filter_map(|(owner, slot)| slot.effective().map(|e| (*owner, e))).collect();
                let mut listed_by: HashMap<PublicKey, Vec<PublicKey>> = HashMap::new();
                for (owner, (listed, _)) in &effective {
                    for m in listed.maintainers.iter() {
                        listed_by.entry(*m).or_default().push(*owner);
                    }
                }
                let mut affected = changed.clone();
                let mut walk: Vec<PublicKey> = changed.iter().copied().collect();
                while let Some(pk) = walk.pop() {
                    for owner in listed_by.get(&pk).into_iter().flatten() {
                        if affected.insert(*owner) {
                            walk.push(*owner);
                        }
                    }
                }
                let lookup = |pk: &PublicKey| effective.get(pk).map(|(listed, _)| listed.claims());
                affected
                    .into_iter()
                    .map(|owner| {
                        let repo = effective.get(&owner).map(|(listed, source)| RepoInterest {
                            owner,
                            identifier: identifier.to_string(),
                            maintainers: MaintainerSet::compute(owner, lookup).iter().copied().collect(),
                            relays: listed.relays.clone(),
                            level: match source {
                                Source::Stored => SyncLevel::Full,
                                Source::Purgatory => SyncLevel::StateOnly,
                            },
                            roots: Arc::default(),
                        });
                        (owner, repo)
                    })
                    .collect()
            }
        };
        if self.slots.get(identifier).is_some_and(HashMap::is_empty) {
            self.slots.remove(identifier);
        }
        for (owner, repo) in updates {
            self.replace(&(owner, identifier.to_string()), repo);
        }
    }

    /// Puts `new` in place of the repository `key` (keeping its roots while it stays served),
    /// moving its relay counts; nothing when it is unchanged.
    fn replace(&mut self, key: &RepoKey, new: Option<RepoInterest>) {
        let old = self.repos.get(key);
        let old_full = old.is_some_and(|o| o.level == SyncLevel::Full);
        let mut new = new;
        if let (Some(old), Some(new)) = (old, new.as_mut()) {
            if old.level == SyncLevel::Full && new.level == SyncLevel::Full {
                new.roots.clone_from(&old.roots);
            }
            if old == new {
                return;
            }
        }
        if let Some(old) = self.repos.remove(key) {
            for relay in self.counted(&old) {
                self.mark(&relay);
                let Some(entry) = self.relays.get_mut(&relay) else { continue };
                entry.repos.remove(key);
                let owners = if old.level == SyncLevel::Full { &mut entry.full } else { &mut entry.held };
                if let Some(n) = owners.get_mut(&old.owner) {
                    *n -= 1;
                    if *n == 0 {
                        owners.remove(&old.owner);
                    }
                }
                if entry.repos.is_empty() {
                    self.relays.remove(&relay);
                }
            }
        }
        self.served_roots.remove(key);
        let was_wanted = self.roots_wanted.remove(key);
        let Some(new) = new else {
            self.mark_only();
            return;
        };
        // Newly served (or still waiting): its roots are read from the store.
        if new.level == SyncLevel::Full && (!old_full || was_wanted) {
            self.roots_wanted.insert(key.clone());
        }
        for relay in self.counted(&new) {
            self.mark(&relay);
            let entry = self.relays.entry(relay).or_default();
            entry.repos.insert(key.clone(), (new.level == SyncLevel::Full).then(|| new.roots.clone()));
            let owners = if new.level == SyncLevel::Full { &mut entry.full } else { &mut entry.held };
            *owners.entry(new.owner).or_default() += 1;
        }
        if new.level == SyncLevel::Full && self.only.is_some() {
            self.served_roots.insert(key.clone(), new.roots.clone());
        }
        self.repos.insert(key.clone(), new);
        self.mark_only();
    }

    /// The relays `repo` counts for: its first [`MAX_RELAYS_PER_ANNOUNCEMENT`] not excluded.
    fn counted(&self, repo: &RepoInterest) -> Vec<RelayUrl> {
        repo.relays.iter().filter(|r| !(self.excluded)(r)).take(MAX_RELAYS_PER_ANNOUNCEMENT).cloned().collect()
    }

    /// The root events of the relays `key` counts for must be taken again (the rest of their
    /// plans stands).
    fn touch_roots(&mut self, key: &RepoKey) {
        let Some(repo) = self.repos.get(key) else { return };
        let roots = repo.roots.clone();
        if self.only.is_some() {
            self.served_roots.insert(key.clone(), roots.clone());
        }
        for relay in self.counted(repo) {
            if let Some(entry) = self.relays.get_mut(&relay) {
                entry.repos.insert(key.clone(), Some(roots.clone()));
            }
            if let Some(dirty) = self.roots_dirty.as_mut() {
                dirty.insert(relay);
            }
        }
        if self.only.is_some() {
            self.roots_dirty = None;
        }
    }

    fn mark(&mut self, relay: &RelayUrl) {
        if let Some(dirty) = self.dirty.as_mut() {
            dirty.insert(relay.clone());
        }
    }

    /// A private service asks its peers for every repository: any change changes every plan.
    fn mark_only(&mut self) {
        if self.only.is_some() {
            self.dirty = None;
        }
    }

    /// The plan of every relay to connect to, as [`Interest::plans`] gives it: ranked from the
    /// per-relay counts, each plan rebuilt only when one of its repositories changed since the
    /// last call.
    pub fn plans(&mut self, max_relays: usize) -> BTreeMap<RelayUrl, Arc<RelayPlan>> {
        let excluded = &self.excluded;
        let taken: BTreeSet<RelayUrl> = match &self.only {
            Some(only) => only.iter().filter(|r| !excluded(r)).take(max_relays).cloned().collect(),
            None => {
                let bootstraps = self.bootstraps.iter().filter(|r| !excluded(r) && !self.relays.contains_key(*r)).map(|r| (r, 0, 0));
                let counted = self.relays.iter().map(|(r, e)| (r, e.full.len(), e.held.len()));
                rank_counted(counted.chain(bootstraps), &self.bootstraps, max_relays)
            }
        };
        let dirty = self.dirty.take();
        let roots_dirty = self.roots_dirty.replace(BTreeSet::new());
        let replicas = &self.replicas;
        self.plans.retain(|relay, _| replicas.contains(relay) || (taken.contains(relay) && dirty.as_ref().is_some_and(|d| !d.contains(relay))));
        // A private service asks each of its peers for the same: one plan, shared.
        let mut all: Option<Arc<RelayPlan>> = None;
        for relay in &taken {
            let kept = self.plans.get(relay);
            if kept.is_some() && roots_dirty.as_ref().is_some_and(|d| !d.contains(relay)) {
                continue;
            }
            let plan = match &self.only {
                Some(_) => all
                    .get_or_insert_with(|| {
                        Arc::new(match kept {
                            Some(plan) => plan.with_roots(shared_roots(self.served_roots.values())),
                            None => {
                                let mut repos: Vec<&RepoInterest> = self.repos.values().collect();
                                repos.sort_by(|a, b| (a.owner, &a.identifier).cmp(&(b.owner, &b.identifier)));
                                plan_for(&repos, true)
                            }
                        })
                    })
                    .clone(),
                None => {
                    let entry = self.relays.get(relay);
                    Arc::new(match (kept, entry) {
                        (Some(plan), Some(entry)) => plan.with_roots(shared_roots(entry.repos.values().flatten())),
                        _ => {
                            let keys = entry.into_iter().flat_map(|e| e.repos.keys());
                            let repos: Vec<&RepoInterest> = keys.filter_map(|k| self.repos.get(k)).collect();
                            plan_for(&repos, self.bootstraps.contains(relay))
                        }
                    })
                }
            };
            self.plans.insert(relay.clone(), plan);
        }
        // The replicas: everything they hold (a replica is a full copy), one filter matching
        // every event, never rebuilt: what this one does not take, its admission refuses.
        if !self.replicas.is_empty() {
            let plan = self.replicas.iter().find_map(|r| self.plans.get(r)).cloned().unwrap_or_else(|| Arc::new(crate::peers::wanted::replica_plan()));
            for replica in &self.replicas {
                self.plans.insert(replica.clone(), plan.clone());
            }
        }
        self.dirty = Some(BTreeSet::new());
        self.plans.clone()
    }

    /// The whole interest, for tests and comparison with [`Interest::plans`] (repositories in
    /// `(owner, identifier)` order).
    pub fn interest(&self) -> Interest {
        let mut repos: Vec<RepoInterest> = self.repos.values().cloned().collect();
        repos.sort_by(|a, b| (a.owner, &a.identifier).cmp(&(b.owner, &b.identifier)));
        Interest { repos, bootstraps: self.bootstraps.clone(), only: self.only.clone() }
    }
}

/// The non-empty root lists of `roots`, in key order (the order [`plan_for`] gives them).
fn shared_roots<'a>(roots: impl Iterator<Item = &'a RootIds>) -> Vec<RootIds> {
    roots.filter(|r| !r.is_empty()).cloned().collect()
}

/// `30617:<owner hex>:<identifier>` as a repository key.
fn announcement_key(coordinate: &str) -> Option<RepoKey> {
    let mut parts = coordinate.splitn(3, ':');
    let (kind, owner, identifier) = (parts.next()?, parts.next()?, parts.next()?);
    if kind != KIND_ANNOUNCEMENT.to_string() {
        return None;
    }
    Some((PublicKey::from_hex(owner).ok()?, identifier.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind, Tag, Timestamp};
    use proptest::prelude::*;

    fn url(s: &str) -> RelayUrl {
        RelayUrl::parse(s).unwrap()
    }

    fn compact(ev: &Event) -> Option<Announcement> {
        Announcement::from_event(ev).ok()
    }

    fn announcement(keys: &Keys, identifier: &str, relays: &[String], maintainers: &[PublicKey], at: u64) -> Event {
        let mut tags = vec![Tag::identifier(identifier)];
        if !relays.is_empty() {
            tags.push(Tag::parse(std::iter::once("relays".to_string()).chain(relays.iter().cloned())).unwrap());
        }
        if !maintainers.is_empty() {
            tags.push(Tag::parse(std::iter::once("maintainers".to_string()).chain(maintainers.iter().map(|m| m.to_hex()))).unwrap());
        }
        EventBuilder::new(Kind::Custom(KIND_ANNOUNCEMENT), "").tags(tags).custom_created_at(Timestamp::from(at)).finalize(keys).unwrap()
    }

    fn tagging(keys: &Keys, owner: &PublicKey, identifier: &str, n: u64) -> Event {
        EventBuilder::new(Kind::Custom(1621), format!("{n}"))
            .tags([Tag::parse(["a", &format!("30617:{}:{identifier}", owner.to_hex())]).unwrap()])
            .custom_created_at(Timestamp::from(1000 + n))
            .finalize(keys)
            .unwrap()
    }

    #[test]
    fn a_new_root_takes_only_the_root_ids_again_and_shares_the_rest_of_the_plan() {
        for only in [false, true] {
            let owner = Keys::generate();
            let mut ix = index(only);
            let relay = if only { url("wss://peer.example") } else { url("wss://a.example") };
            for n in 0..50 {
                ix.note_stored(&announcement(&owner, &format!("r{n}"), &["wss://a.example".into()], &[], 10), compact);
            }
            let before = ix.plans(10)[&relay].clone();
            assert!(ix.note_stored(&tagging(&owner, &owner.public_key(), "r7", 1), compact));
            let after = ix.plans(10)[&relay].clone();
            assert_eq!(after.root_count(), before.root_count() + 1);
            assert!(Arc::ptr_eq(&after.fixed, &before.fixed) && Arc::ptr_eq(&after.repos, &before.repos), "only the root ids were taken again (only: {only})");
            // A repository change rebuilds the rest.
            ix.note_stored(&announcement(&owner, "r50", &["wss://a.example".into()], &[], 10), compact);
            let changed = ix.plans(10)[&relay].clone();
            assert!(!Arc::ptr_eq(&changed.fixed, &after.fixed) && changed.repos.len() == 51);
        }
    }

    fn index(only: bool) -> InterestIndex {
        let only = only.then(|| [url("wss://peer.example"), url("wss://self.example")].into());
        InterestIndex::new(Box::new(|r: &RelayUrl| r.as_str().contains("self")), [url("wss://boot.example")].into(), only)
    }

    #[test]
    fn a_stored_announcement_is_served_and_a_newer_held_one_takes_its_place_until_it_goes() {
        let keys = Keys::generate();
        let relays = vec!["wss://a.example".to_string()];
        let mut ix = index(false);
        let stored = announcement(&keys, "r", &relays, &[], 10);
        assert!(ix.note_stored(&stored, compact));
        assert_eq!(ix.level(&keys.public_key(), "r"), Some(SyncLevel::Full));
        assert_eq!(ix.take_roots_wanted(10), vec![(keys.public_key(), "r".to_string())]);
        let held = Arc::new(announcement(&keys, "r", &relays, &[], 20));
        assert!(ix.set_held(std::slice::from_ref(&held), compact));
        assert_eq!(ix.level(&keys.public_key(), "r"), Some(SyncLevel::StateOnly));
        assert!(!ix.set_held(std::slice::from_ref(&held), compact), "same held events: nothing to do");
        assert!(ix.set_held(&[], compact));
        assert_eq!(ix.level(&keys.public_key(), "r"), Some(SyncLevel::Full));
        // An older stored announcement of the same repository changes nothing.
        assert!(!ix.note_stored(&announcement(&keys, "r", &[], &[], 5), compact));
    }

    #[test]
    fn deletions_remove_stored_announcements_by_id_and_by_coordinate() {
        let keys = Keys::generate();
        let mut ix = index(false);
        let a = announcement(&keys, "x", &[], &[], 10);
        let b = announcement(&keys, "y", &[], &[], 10);
        ix.note_stored(&a, compact);
        ix.note_stored(&b, compact);
        let someone = Keys::generate();
        let foreign = EventBuilder::new(Kind::Custom(5), "").tags([Tag::event(a.id)]).finalize(&someone).unwrap();
        assert!(!ix.note_stored(&foreign, compact), "only the author deletes");
        let by_id = EventBuilder::new(Kind::Custom(5), "").tags([Tag::event(a.id)]).finalize(&keys).unwrap();
        assert!(ix.note_stored(&by_id, compact));
        let coordinate = format!("30617:{}:y", keys.public_key().to_hex());
        let by_a = EventBuilder::new(Kind::Custom(5), "").tags([Tag::parse(["a", &coordinate]).unwrap()]).finalize(&keys).unwrap();
        assert!(ix.note_stored(&by_a, compact));
        assert!(ix.is_empty());
    }

    #[test]
    fn roots_are_added_from_the_feed_once_and_only_to_served_repositories() {
        let (owner, other) = (Keys::generate(), Keys::generate());
        let mut ix = index(false);
        ix.note_stored(&announcement(&owner, "x", &["wss://a.example".into()], &[], 10), compact);
        ix.set_held(&[Arc::new(announcement(&other, "y", &["wss://a.example".into()], &[], 10))], compact);
        let before = ix.plans(10)[&url("wss://a.example")].filter_keys();
        let issue = tagging(&other, &owner.public_key(), "x", 1);
        assert!(ix.note_stored(&issue, compact));
        assert!(!ix.note_stored(&issue, compact), "once");
        assert!(!ix.note_stored(&tagging(&owner, &other.public_key(), "y", 2), compact), "held: no roots");
        let after = ix.plans(10)[&url("wss://a.example")].filter_keys();
        assert_eq!(after.difference(&before).count(), 3, "#e, #E, #q of the new root");
        // Roots read from the store go first; the feed's follow.
        let read = vec![EventId::from_byte_array([7; 32])];
        ix.set_roots(&(owner.public_key(), "x".into()), read.clone());
        let repo = ix.interest().repos.into_iter().find(|r| r.identifier == "x").unwrap();
        assert_eq!(*repo.roots, vec![read[0], issue.id]);
    }

    #[test]
    fn a_flood_of_announcements_never_drops_a_served_repository_and_each_costs_the_same() {
        let owner = Keys::generate();
        let mut ix = index(false);
        ix.note_stored(&announcement(&owner, "old", &["wss://old.example".into()], &[], 1), compact);
        for n in 0..3000u64 {
            let keys = Keys::generate();
            ix.note_stored(&announcement(&keys, &format!("r{n}"), &[format!("wss://r{}.example", n % 7)], &[], 100 + n), compact);
        }
        assert_eq!(ix.len(), 3001);
        assert_eq!(ix.level(&owner.public_key(), "old"), Some(SyncLevel::Full));
        let plans = ix.plans(50);
        assert!(plans[&url("wss://old.example")].repos.iter().any(|r| r.ends_with("/old")));
        // After the plans are made, one more announcement rebuilds only its relay's plan.
        ix.note_stored(&announcement(&Keys::generate(), "new", &["wss://r1.example".into()], &[], 9999), compact);
        assert_eq!(ix.dirty.as_ref().map(BTreeSet::len), Some(1));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Stored { owner: usize, id: usize, relays: Vec<usize>, maintainers: Vec<usize>, at: u64 },
        Held { owner: usize, id: usize, relays: Vec<usize>, at: u64 },
        Unhold { owner: usize, id: usize },
        Delete { owner: usize, id: usize },
        Root { owner: usize, id: usize, n: u64 },
        Plans,
    }

    fn op() -> impl Strategy<Value = Op> {
        let relays = proptest::collection::vec(0usize..14, 0..4);
        prop_oneof![
            (0usize..4, 0usize..3, relays.clone(), proptest::collection::vec(0usize..4, 0..2), 1u64..50)
                .prop_map(|(owner, id, relays, maintainers, at)| Op::Stored { owner, id, relays, maintainers, at }),
            (0usize..4, 0usize..3, relays, 1u64..50).prop_map(|(owner, id, relays, at)| Op::Held { owner, id, relays, at }),
            (0usize..4, 0usize..3).prop_map(|(owner, id)| Op::Unhold { owner, id }),
            (0usize..4, 0usize..3).prop_map(|(owner, id)| Op::Delete { owner, id }),
            (0usize..4, 0usize..3, 0u64..6).prop_map(|(owner, id, n)| Op::Root { owner, id, n }),
            Just(Op::Plans),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any sequence of stored, held, dropped and deleted announcements and new roots, applied
        /// one at a time (plans asked for in between), gives the same repositories and the same
        /// plans as an index built at once from what is left, and as `Interest::plans` of it.
        #[test]
        fn incremental_updates_equal_a_full_rebuild(ops in proptest::collection::vec(op(), 1..40), only in any::<bool>(), max_relays in 1usize..8) {
            let keys: Vec<Keys> = (0..4).map(|_| Keys::generate()).collect();
            let relay = |n: &usize| if *n == 13 { "wss://self.example".to_string() } else { format!("wss://h{}.example/{}", n % 5, n) };
            let mut ix = index(only);
            let mut stored: BTreeMap<(usize, usize), Event> = BTreeMap::new();
            let mut held: BTreeMap<(usize, usize), Arc<Event>> = BTreeMap::new();
            let mut roots: BTreeMap<(usize, usize), Vec<EventId>> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Stored { owner, id, relays, maintainers, at } => {
                        let m: Vec<PublicKey> = maintainers.iter().map(|m| keys[*m].public_key()).collect();
                        let ev = announcement(&keys[owner], &format!("i{id}"), &relays.iter().map(relay).collect::<Vec<_>>(), &m, at);
                        // NIP-01 order: on equal seconds the lower id is the newer.
                        if stored.get(&(owner, id)).is_none_or(|old| compact(old).unwrap().recency() < compact(&ev).unwrap().recency()) {
                            stored.insert((owner, id), ev.clone());
                        }
                        ix.note_stored(&ev, compact);
                    }
                    Op::Held { owner, id, relays, at } => {
                        held.insert((owner, id), Arc::new(announcement(&keys[owner], &format!("i{id}"), &relays.iter().map(relay).collect::<Vec<_>>(), &[], at)));
                        ix.set_held(&held.values().cloned().collect::<Vec<_>>(), compact);
                    }
                    Op::Unhold { owner, id } => {
                        held.remove(&(owner, id));
                        ix.set_held(&held.values().cloned().collect::<Vec<_>>(), compact);
                    }
                    Op::Delete { owner, id } => {
                        if let Some(ev) = stored.remove(&(owner, id)) {
                            let del = EventBuilder::new(Kind::Custom(5), "").tags([Tag::event(ev.id)]).finalize(&keys[owner]).unwrap();
                            ix.note_stored(&del, compact);
                        }
                    }
                    Op::Root { owner, id, n } => {
                        let ev = tagging(&keys[0], &keys[owner].public_key(), &format!("i{id}"), n);
                        let served = ix.level(&keys[owner].public_key(), &format!("i{id}")) == Some(SyncLevel::Full);
                        if ix.note_stored(&ev, compact) || served {
                            let r = roots.entry((owner, id)).or_default();
                            if !r.contains(&ev.id) { r.push(ev.id); }
                        }
                    }
                    Op::Plans => { ix.plans(max_relays); }
                }
                // Roots of repositories no longer served are forgotten, as the index does.
                roots.retain(|(owner, id), _| ix.level(&keys[*owner].public_key(), &format!("i{id}")) == Some(SyncLevel::Full));
            }
            let mut whole = index(only);
            for ev in stored.values() {
                whole.note_stored(ev, compact);
            }
            whole.set_held(&held.values().cloned().collect::<Vec<_>>(), compact);
            for ((owner, id), r) in &roots {
                whole.set_roots(&(keys[*owner].public_key(), format!("i{id}")), r.clone());
            }
            prop_assert_eq!(ix.interest(), whole.interest());
            let plans = ix.plans(max_relays);
            prop_assert_eq!(&plans, &whole.plans(max_relays));
            let excluded = |r: &RelayUrl| r.as_str().contains("self");
            let plans: BTreeMap<RelayUrl, RelayPlan> = plans.into_iter().map(|(url, plan)| (url, (*plan).clone())).collect();
            prop_assert_eq!(&plans, &whole.interest().plans(excluded, max_relays));
        }
    }
}
