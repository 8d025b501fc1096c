//! What strangers may store (docs/protocol.md#budgets): the contributor-data ledger
//! ([`grasp_state::trust::contributor_data`]) kept in memory, written beside the purgatory checkpoint
//! (`<data>/contributor-data.json`, atomically, when it changed), checked and charged by the
//! pre-receive decisions, reconciled with the disk, and pruned.
//!
//! - **Charged** at pre-receive: a push bringing the commit of a pull request event (held or
//!   stored) whose author is no confirmed maintainer of the repository; and when a pull request
//!   event claims a git-first placeholder, its unsigned bytes move here.
//! - **Reconciled** ([`reconcile`]): each entry's bytes are what its commit reaches on disk that
//!   no branch or tag of the repository does (`git rev-list --disk-usage`); 0 (merged) or no
//!   ref left removes it. Statuses (kinds 1630-1633) by the pull request's author or a
//!   maintainer start, or stop, the prune grace.
//! - **Pruned**: the `refs/nostr/<id>` refs of a pull request closed or merged for longer than
//!   the grace (`--pr-data-grace`) are deleted; the event stays.
//! - **Purged** with its author (`purge-author`).
//!
//! The stranger watermark: unsigned and contributor data is refused while the free disk is
//! below twice `--min-free-disk`, so strangers stop well before maintainers do.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use grasp_state::contract::layout::CONTRIBUTOR_DATA_FILE;
use grasp_state::trust::contributor_data::{Charge, ContributorBudget, ContributorFull, ContributorLedger, ContributorView, LedgerFile};
use nostr::prelude::{EventId, Filter, Kind, PublicKey, Timestamp};

use crate::git;
use crate::grasp::Grasp;
use crate::shutdown::Shutdown;

/// How many authors and addresses the operator view names.
pub const LISTED: usize = 10;
/// Most entries one reconciliation pass measures (round robin over passes).
const PER_PASS: usize = 500;
/// One reconciliation pass in this many also looks for data the ledger misses on disk.
const DISCOVER_EVERY: u64 = 6;

/// The ledger, its budget and its file.
#[derive(Debug)]
pub struct ContributorData {
    ledger: Mutex<ContributorLedger>,
    budget: Mutex<ContributorBudget>,
    grace_secs: AtomicU64,
    file: OnceLock<PathBuf>,
    dirty: AtomicBool,
    /// Where the next reconciliation pass starts.
    cursor: Mutex<Option<EventId>>,
}

impl Default for ContributorData {
    fn default() -> Self {
        ContributorData {
            ledger: Mutex::default(),
            budget: Mutex::new(ContributorBudget::default()),
            grace_secs: AtomicU64::new(grasp_state::trust::contributor_data::DEFAULT_PRUNE_GRACE_SECS),
            file: OnceLock::new(),
            dirty: AtomicBool::new(false),
            cursor: Mutex::new(None),
        }
    }
}

impl ContributorData {
    fn ledger(&self) -> std::sync::MutexGuard<'_, ContributorLedger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn budget(&self) -> ContributorBudget {
        *self.budget.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the budgets and the prune grace (startup, SIGHUP).
    pub fn configure(&self, budget: ContributorBudget, grace: Duration) {
        *self.budget.lock().unwrap_or_else(|e| e.into_inner()) = budget;
        self.grace_secs.store(grace.as_secs(), Ordering::Relaxed);
    }

    pub fn grace_secs(&self) -> u64 {
        self.grace_secs.load(Ordering::Relaxed)
    }

    /// Reads `<data_dir>/contributor-data.json` (none yet: empty; unreadable: empty, rebuilt
    /// from disk by reconciliation) and writes there from now on.
    pub fn load(&self, data_dir: &Path) {
        let path = data_dir.join(CONTRIBUTOR_DATA_FILE);
        let loaded = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<LedgerFile>(&bytes) {
                Ok(file) => ContributorLedger::from_file(file),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "contributor data file unreadable; rebuilt from disk");
                    ContributorLedger::default()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ContributorLedger::default(),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "contributor data file unreadable; rebuilt from disk");
                ContributorLedger::default()
            }
        };
        *self.ledger() = loaded;
        let _ = self.file.set(path);
    }

    /// Writes the ledger if it changed since the last write (the checkpoint's cadence, and at
    /// shutdown).
    pub fn save(&self) -> std::io::Result<()> {
        let Some(path) = self.file.get() else { return Ok(()) };
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let json = serde_json::to_vec(&self.ledger().to_file()).map_err(std::io::Error::other)?;
        let written = grasp_state::contract::atomic_file::write_atomic(path, &json, None);
        if written.is_err() {
            self.dirty.store(true, Ordering::Release);
        }
        written
    }

    fn changed(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// Whether `incoming` bytes for pull request `id` by `author` from `address` fit.
    pub fn check(&self, author: &PublicKey, address: Option<IpAddr>, id: &EventId, incoming: u64) -> Result<(), ContributorFull> {
        let budget = self.budget();
        self.ledger().check(&budget, author, address, id, incoming)
    }

    /// Checks every charge, then records them all (or none): [`ContributorLedger::charge_all`].
    pub fn charge_all(&self, charges: &[Charge], address: Option<IpAddr>) -> Result<(), ContributorFull> {
        let budget = self.budget();
        self.ledger().charge_all(&budget, charges, address, now_secs())?;
        if !charges.is_empty() {
            self.changed();
        }
        Ok(())
    }

    /// Records `charge` whatever the budget says (what is on disk is counted).
    pub fn force(&self, charge: &Charge, address: Option<IpAddr>) {
        if self.ledger().charge(charge.id, charge.author, address, &charge.identifier, charge.bytes, now_secs()) {
            self.changed();
        }
    }

    pub fn remove(&self, id: &EventId) -> bool {
        let removed = self.ledger().remove(id).is_some();
        if removed {
            self.changed();
        }
        removed
    }

    /// Removes every entry of `author` (`purge-author`): how many.
    pub fn remove_author(&self, author: &PublicKey) -> usize {
        let mut ledger = self.ledger();
        let ids = ledger.of_author(author);
        for id in &ids {
            ledger.remove(id);
        }
        drop(ledger);
        if !ids.is_empty() {
            self.changed();
        }
        ids.len()
    }

    pub fn view(&self) -> ContributorView {
        let budget = self.budget();
        self.ledger().view(&budget, LISTED)
    }

    pub fn len(&self) -> usize {
        self.ledger().len()
    }

    pub fn is_empty(&self) -> bool {
        self.ledger().is_empty()
    }

    pub fn entry(&self, id: &EventId) -> Option<grasp_state::trust::contributor_data::ContributorEntry> {
        self.ledger().get(id).cloned()
    }

    /// The next entries to measure, round robin: at most [`PER_PASS`].
    fn next_batch(&self) -> Vec<(EventId, grasp_state::trust::contributor_data::ContributorEntry)> {
        let ledger = self.ledger();
        let mut cursor = self.cursor.lock().unwrap_or_else(|e| e.into_inner());
        let after: Vec<_> = ledger
            .entries()
            .filter(|(id, _)| cursor.is_none_or(|c| **id > c))
            .take(PER_PASS)
            .map(|(id, e)| (*id, e.clone()))
            .collect();
        let batch = if after.is_empty() {
            ledger.entries().take(PER_PASS).map(|(id, e)| (*id, e.clone())).collect()
        } else {
            after
        };
        *cursor = batch.last().map(|(id, _)| *id);
        batch
    }

    fn due_for_prune(&self, now: u64) -> Vec<(EventId, String)> {
        self.ledger().due_for_prune(now, self.grace_secs())
    }

    fn set_bytes(&self, id: &EventId, bytes: u64) {
        let mut ledger = self.ledger();
        if ledger.get(id).is_some_and(|e| e.bytes != bytes) {
            ledger.set_bytes(id, bytes);
            drop(ledger);
            self.changed();
        }
    }

    fn set_closed(&self, id: &EventId, closed_at: Option<u64>) {
        let mut ledger = self.ledger();
        let changed = match closed_at {
            Some(at) => ledger.mark_closed(id, at),
            None => ledger.mark_open(id),
        };
        drop(ledger);
        if changed {
            self.changed();
        }
    }
}

/// What a measurement of one pull request's data found.
enum Measured {
    Bytes(u64),
    /// No repository holds its ref.
    NoRef,
    /// Git failed: measured again at the next pass.
    Unknown,
}

fn now_secs() -> u64 {
    Timestamp::now().as_secs()
}

/// Splits a push's `incoming` bytes over the pull requests it brings (the first takes the
/// remainder), as the unsigned data of placeholders is shared.
pub fn shares(prs: Vec<(EventId, PublicKey, String)>, incoming: u64) -> Vec<Charge> {
    let n = prs.len() as u64;
    prs.into_iter()
        .enumerate()
        .map(|(i, (id, author, identifier))| Charge { id, author, identifier, bytes: incoming / n + if i == 0 { incoming % n } else { 0 } })
        .collect()
}

/// The refusal of new stranger data while the disk is below twice `--min-free-disk`.
pub const STRANGER_LOW_DISK: &str = "this server keeps its remaining disk space for its maintainers' pushes; \
     publish your pull request on another GRASP server listed for the repository, or retry later";

impl Grasp {
    /// Charges the contributor data of a push bringing `charges` (pull requests of authors that
    /// are not maintainers) from `address`: refused (one line) when a budget or the stranger
    /// watermark says no; nothing is recorded then.
    pub(crate) fn charge_contributor_push(&self, charges: &[Charge], address: Option<IpAddr>) -> Result<(), String> {
        if charges.iter().all(|c| c.bytes == 0) {
            return Ok(());
        }
        if !self.trust.disk.has_room_for_strangers() {
            self.metrics.contributor_refused("disk");
            return Err(STRANGER_LOW_DISK.to_string());
        }
        self.contributor_data.charge_all(charges, address).map_err(|full| {
            self.metrics.contributor_refused(full.scope.as_str());
            tracing::info!(author = %full.author, scope = full.scope.as_str(), held = full.held, budget = full.budget, "contributor data refused");
            full.to_string()
        })
    }

    /// The pull requests among `prs` (id → its event) whose authors are not confirmed
    /// maintainers of `owner`'s repository of `identifier` (`None`: a contributor repository,
    /// where every author that maintains no announced repository of the identifier counts).
    pub(crate) async fn stranger_prs(&self, owner: Option<&PublicKey>, identifier: &str, prs: Vec<(EventId, PublicKey)>) -> Vec<(EventId, PublicKey, String)> {
        if prs.is_empty() {
            return Vec::new();
        }
        let all = self.announcements(identifier).await;
        let owners: Vec<PublicKey> = match owner {
            Some(owner) => vec![*owner],
            None => all.iter().map(|(a, _)| a.owner).collect(),
        };
        let sets: Vec<_> = owners.iter().map(|o| self.maintainer_set(*o, &all)).collect();
        prs.into_iter()
            .filter(|(_, author)| !sets.iter().any(|set| set.contains(author)))
            .map(|(id, author)| (id, author, identifier.to_string()))
            .collect()
    }

    /// An accepted push's contributor data: the pull requests it brings the commits of (`acc.
    /// pr_matches`, authors in `authors`) whose authors are strangers to the repository share
    /// its `incoming` bytes, refused when they do not fit. A push that also reserves git-first
    /// placeholders counts as unsigned data only.
    pub(crate) async fn charge_pr_matches(
        &self,
        owner: Option<&PublicKey>,
        identifier: &str,
        decision: grasp_state::git::push::PushDecision,
        authors: &std::collections::BTreeMap<EventId, PublicKey>,
        address: Option<IpAddr>,
        incoming: u64,
    ) -> grasp_state::git::push::PushDecision {
        use grasp_state::git::push::{PushDecision, Rejection};
        let PushDecision::Accept(acc) = decision else { return decision };
        if incoming == 0 || !acc.placeholders.is_empty() || acc.pr_matches.is_empty() {
            return PushDecision::Accept(acc);
        }
        let prs = acc.pr_matches.iter().filter_map(|id| authors.get(id).map(|a| (*id, *a))).collect();
        let strangers = self.stranger_prs(owner, identifier, prs).await;
        match self.charge_contributor_push(&shares(strangers, incoming), address) {
            Ok(()) => PushDecision::Accept(acc),
            Err(line) => PushDecision::Reject(Rejection { reasons: vec![line] }),
        }
    }

    /// A pull request event claimed a git-first placeholder holding `bytes` of unsigned data
    /// pushed from `address`: they become its author's contributor data (unless the author
    /// maintains the repository). Refused (one NIP-01 line) when they do not fit.
    /// `charge` false: only checks (before the event's refs are set), true: records.
    pub(crate) async fn claim_unsigned(&self, ev: &nostr::prelude::Event, identifier: &str, charge: bool) -> Result<(), String> {
        let Some(unsigned) = self.purgatory.placeholder_unsigned(&ev.id).filter(|s| !s.is_empty()) else { return Ok(()) };
        if self.stranger_prs(None, identifier, vec![(ev.id, ev.pubkey)]).await.is_empty() {
            return Ok(());
        }
        let charge_of = |bytes| Charge { id: ev.id, author: ev.pubkey, identifier: identifier.to_string(), bytes };
        if !charge {
            if !self.trust.disk.has_room_for_strangers() {
                self.metrics.contributor_refused("disk");
                return Err(format!("rate-limited: {STRANGER_LOW_DISK}"));
            }
            // Each address's share against its budget, all of them against the author's.
            let total: u64 = unsigned.iter().map(|(_, b)| *b).sum();
            let checks = std::iter::once((None, total)).chain(unsigned.iter().copied().filter(|(a, _)| a.is_some()));
            for (address, bytes) in checks {
                let c = charge_of(bytes);
                self.contributor_data.check(&c.author, address, &c.id, c.bytes).map_err(|full| {
                    self.metrics.contributor_refused(full.scope.as_str());
                    format!("rate-limited: {full}")
                })?;
            }
            return Ok(());
        }
        // Checked before the refs were set; the data is on disk now, so it is counted whatever a
        // racing charge did meanwhile. The entry keeps the first share's address.
        for (address, bytes) in unsigned {
            self.contributor_data.force(&charge_of(bytes), address);
        }
        Ok(())
    }

    /// Rebuilds what the ledger misses from disk (a crash before its file was written, a file
    /// lost): every `refs/nostr/<id>` of every repository whose stored pull request event is by an
    /// author that maintains no repository of its identifier gets an entry, measured (at most
    /// [`PER_PASS`] per call; the rest at the next). The addresses of rebuilt entries are unknown.
    /// Returns how many entries were added.
    pub async fn discover_contributor_data(&self) -> usize {
        let root = self.layout.git_root().to_path_buf();
        let repos = crate::grasp::blocking(move || crate::git::repos::repo_dirs(&root)).await;
        let mut added = 0;
        let mut seen = std::collections::BTreeSet::new();
        for repo in repos {
            if added >= PER_PASS {
                break;
            }
            let Ok((_, _, identifier)) = self.layout.locate_in(&repo) else { continue };
            let path = repo.clone();
            let Ok(refs) = crate::grasp::blocking(move || git::read_refs(&path)).await else { continue };
            let refs_copy = refs.clone();
            for (name, tip) in refs {
                let Some(id) = name.strip_prefix("refs/nostr/").and_then(|h| EventId::from_hex(h).ok()) else { continue };
                if !seen.insert(id) || self.contributor_data.entry(&id).is_some() || self.purgatory.placeholder_unsigned(&id).is_some() {
                    continue;
                }
                let Some(ev) = self.event_by_id(&id).await else { continue };
                if !matches!(ev.kind.as_u16(), 1618 | 1619) {
                    continue;
                }
                if self.stranger_prs(None, &identifier, vec![(id, ev.pubkey)]).await.is_empty() {
                    continue;
                }
                let (path, tip, before) = (repo.clone(), tip.clone(), counted_before(&refs_copy, &name));
                let Ok(bytes) = crate::grasp::blocking(move || git::exclusive_disk_usage(&path, &tip, &before)).await else { continue };
                if bytes == 0 {
                    continue;
                }
                self.contributor_data.force(&Charge { id, author: ev.pubkey, identifier: identifier.clone(), bytes }, None);
                tracing::info!(event = %id, identifier, bytes, "contributor data found on disk and counted");
                added += 1;
            }
        }
        added
    }

    /// One reconciliation pass: measures up to [`PER_PASS`] entries on disk, follows their
    /// pull requests' statuses, prunes the ones due. Returns (measured, pruned).
    pub async fn reconcile_contributor_data(&self) -> (usize, usize) {
        let batch = self.contributor_data.next_batch();
        if batch.is_empty() {
            return (0, 0);
        }
        self.follow_statuses(&batch).await;
        let mut measured = 0;
        for (id, entry) in &batch {
            let bytes = match self.measure_pr_data(id, &entry.identifier, &entry.author).await {
                Measured::Bytes(bytes) => bytes,
                // No ref anywhere just after a charge: its push is still landing.
                Measured::NoRef if now_secs().saturating_sub(entry.charged_at) < grasp_state::trust::contributor_data::MEASURE_GRACE_SECS => continue,
                Measured::NoRef => 0,
                Measured::Unknown => continue,
            };
            measured += 1;
            if bytes == 0 {
                tracing::info!(event = %id, identifier = %entry.identifier, "contributor data left the budget: merged, or its refs are gone");
            }
            self.contributor_data.set_bytes(id, bytes);
        }
        let now = Timestamp::now().as_secs();
        let due = self.contributor_data.due_for_prune(now);
        let mut pruned = 0;
        for (id, identifier) in due {
            if self.prune_pr_data(&id, &identifier).await {
                pruned += 1;
            }
        }
        (measured, pruned)
    }

    /// The newest status of each pull request in `batch` by its author or a maintainer of its
    /// identifier: closed (1632) or merged (1631) start the prune grace, open (1630) or draft
    /// (1633) stop it.
    async fn follow_statuses(&self, batch: &[(EventId, grasp_state::trust::contributor_data::ContributorEntry)]) {
        let kinds = [1630u16, 1631, 1632, 1633].map(Kind::from);
        for chunk in batch.chunks(100) {
            let filter = Filter::new().kinds(kinds).events(chunk.iter().map(|(id, _)| *id));
            let statuses = self.query(vec![filter]).await;
            for (id, entry) in chunk {
                let all = self.announcements(&entry.identifier).await;
                let sets: Vec<_> = all.iter().map(|(a, _)| self.maintainer_set(a.owner, &all)).collect();
                let newest = statuses
                    .iter()
                    .filter(|s| s.tags.event_ids().any(|e| e == *id))
                    .filter(|s| s.pubkey == entry.author || sets.iter().any(|set| set.contains(&s.pubkey)))
                    .max_by_key(|s| grasp_state::nostr::recency::Recency::of(s));
                let closed_at = match newest {
                    Some(s) if matches!(s.kind.as_u16(), 1631 | 1632) => Some(s.created_at.as_secs().min(Timestamp::now().as_secs())),
                    _ => None,
                };
                self.contributor_data.set_closed(id, closed_at);
            }
        }
    }

    /// The repositories that may hold `refs/nostr/<id>` of a pull request of `identifier` by
    /// `author`: every owner's, then the author's contributor repository.
    async fn pr_data_repos(&self, identifier: &str, author: &PublicKey) -> Vec<PathBuf> {
        let all = self.announcements(identifier).await;
        let mut repos: Vec<PathBuf> = all.iter().filter_map(|(a, _)| self.repo_path(&a.owner, identifier)).filter(|p| p.exists()).collect();
        if let Some(p) = self.path_of(&grasp_state::purgatory::RepoId::prs(*author, identifier)).filter(|p| p.exists()) {
            repos.push(p);
        }
        repos
    }

    /// What pull request `id`'s data adds on disk: its commit's objects that no branch or tag of
    /// the first repository holding its ref reaches, nor a pull request of a lower id (0: merged).
    async fn measure_pr_data(&self, id: &EventId, identifier: &str, author: &PublicKey) -> Measured {
        let name = format!("refs/nostr/{}", id.to_hex());
        for repo in self.pr_data_repos(identifier, author).await {
            let (repo2, name2) = (repo.clone(), name.clone());
            let measured = crate::grasp::blocking(move || -> Result<Option<u64>, git::GitError> {
                let refs = git::read_refs(&repo2)?;
                let Some(tip) = refs.get(&name2) else { return Ok(None) };
                git::exclusive_disk_usage(&repo2, tip, &counted_before(&refs, &name2)).map(Some)
            })
            .await;
            match measured {
                Ok(Some(bytes)) => return Measured::Bytes(bytes),
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(repo = %self.shown_repo(&repo), event = %id, %error, "contributor data not measured");
                    return Measured::Unknown;
                }
            }
        }
        Measured::NoRef
    }

    /// Deletes the data of every pull request of `author` (`purge-author`); entries whose refs
    /// could not be deleted now leave the budgets anyway. How many.
    pub(crate) async fn purge_contributor_data(&self, author: &PublicKey) -> usize {
        let ids = self.contributor_data.ledger().of_author(author);
        for id in &ids {
            if let Some(entry) = self.contributor_data.entry(id) {
                self.prune_pr_data(id, &entry.identifier).await;
            }
        }
        self.contributor_data.remove_author(author);
        ids.len()
    }

    /// Deletes the refs of a closed or merged pull request whose grace has passed; its entry
    /// goes once no ref is left. The event stays.
    async fn prune_pr_data(&self, id: &EventId, identifier: &str) -> bool {
        let Some(entry) = self.contributor_data.entry(id) else { return false };
        let name = format!("refs/nostr/{}", id.to_hex());
        let mut left = false;
        for repo in self.pr_data_repos(identifier, &entry.author).await {
            let guards = match crate::grasp::locks::RepoGuards::acquire(&self.locks, [repo.clone()], crate::grasp::locks::PushLocks::Take).await {
                Ok(guards) => guards,
                Err(error) => {
                    tracing::info!(repo = %self.shown_repo(&repo), %error, "pull request data not pruned now; retried later");
                    left = true;
                    continue;
                }
            };
            let (repo2, name2) = (repo.clone(), name.clone());
            let deleted = crate::grasp::blocking(move || -> Result<bool, git::GitError> {
                let refs = git::read_refs(&repo2)?;
                let Some(old) = refs.get(&name2) else { return Ok(false) };
                git::update_refs(&repo2, &[git::RefChange::Delete { name: name2, old: old.clone() }]).map(|()| true)
            })
            .await;
            drop(guards);
            match deleted {
                Ok(true) => crate::grasp::maintenance::after_ref_removal(self, &repo),
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(repo = %self.shown_repo(&repo), event = %id, %error, "pull request data not pruned");
                    left = true;
                }
            }
        }
        if left {
            return false;
        }
        self.contributor_data.remove(id);
        self.metrics.contributor_pruned();
        tracing::info!(event = %id, identifier, author = %entry.author, bytes = entry.bytes, "pruned the data of a closed or merged pull request");
        true
    }
}

/// The commits of the other pull requests in `refs` counted before `name` (`refs/nostr/<id>`):
/// those of lower ids. Objects two pull requests share count once, for the lower id, whichever
/// order they arrived in: the sum over a repository is what they add on disk together.
fn counted_before(refs: &grasp_state::names::refs::RefMap, name: &str) -> Vec<String> {
    refs.range("refs/nostr/".to_string()..name.to_string()).filter(|(n, _)| n.starts_with("refs/nostr/")).map(|(_, oid)| oid.clone()).collect()
}

/// Reconciles the contributor data every `interval` (the first pass a moment after startup)
/// until shutdown, writing the ledger when it changed.
pub async fn run_reconciliation(grasp: std::sync::Arc<Grasp>, interval: Duration, mut shutdown: Shutdown) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_secs(1)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut passes: u64 = 0;
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                // What the disk holds and the ledger misses: at startup, then every
                // DISCOVER_EVERY passes.
                if passes.is_multiple_of(DISCOVER_EVERY) {
                    grasp.discover_contributor_data().await;
                }
                passes += 1;
                let (measured, pruned) = grasp.reconcile_contributor_data().await;
                if measured > 0 || pruned > 0 {
                    tracing::debug!(measured, pruned, "contributor data reconciled");
                }
                if let Err(error) = grasp.contributor_data.save() {
                    tracing::warn!(%error, "contributor data file not written");
                }
            }
            _ = shutdown.recv() => break,
        }
    }
    if let Err(error) = grasp.contributor_data.save() {
        tracing::warn!(%error, "contributor data file not written at shutdown");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;

    #[test]
    fn a_push_is_shared_over_its_pull_requests() {
        let k = Keys::generate().public_key();
        let prs = (1u8..=3).map(|n| (EventId::from_byte_array([n; 32]), k, "r".to_string())).collect();
        let charges = shares(prs, 10);
        assert_eq!(charges.iter().map(|c| c.bytes).collect::<Vec<_>>(), [4, 3, 3]);
    }

    #[test]
    fn the_ledger_file_is_written_only_when_it_changed() {
        let dir = tempfile::tempdir().unwrap();
        let data = ContributorData::default();
        data.load(dir.path());
        data.save().unwrap();
        assert!(!dir.path().join(CONTRIBUTOR_DATA_FILE).exists(), "nothing changed");
        let k = Keys::generate().public_key();
        let id = EventId::from_byte_array([1; 32]);
        data.charge_all(&[Charge { id, author: k, identifier: "r".into(), bytes: 5 }], None).unwrap();
        data.save().unwrap();
        let again = ContributorData::default();
        again.load(dir.path());
        assert_eq!(again.entry(&id).unwrap().bytes, 5);
        let budget = ContributorBudget { per_author: 6, ..ContributorBudget::default() };
        again.configure(budget, Duration::from_secs(1));
        let full = again.charge_all(&[Charge { id: EventId::from_byte_array([2; 32]), author: k, identifier: "r".into(), bytes: 2 }], None);
        assert!(full.is_err());
        assert_eq!(again.len(), 1, "a refused charge records nothing");
    }
}
