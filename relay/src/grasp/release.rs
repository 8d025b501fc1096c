//! Git data arrival: promotion and release of held events, ref alignment, copies to other owners
//! (docs/protocol.md#release-and-alignment, decision 7).
//!
//! [`Grasp::process_repo`] is the one routine behind every arrival of git data: the
//! post-receive hook, a background sync fetch, and the reconciliation at startup. It is
//! idempotent: running it twice releases nothing twice.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use grasp_state::hook_api::{PostReceiveResponse, ReleasedEvent};
use grasp_state::maintainers::MaintainerSet;
use grasp_state::nip34::RepoState;
use grasp_state::refs::{served_refs, RefUpdate, ZERO_OID};
use nostr::prelude::{Event, PublicKey, ToBech32};

use crate::git;
use crate::grasp::{Grasp, Source};
use grasp_state::purgatory::RepoId;

fn released(ev: &Event, summary: impl Into<String>) -> ReleasedEvent {
    ReleasedEvent { id: ev.id.to_hex(), kind: ev.kind.as_u16(), summary: summary.into() }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking git task panicked")
}

impl Grasp {
    /// Stores `ev` and broadcasts it to subscribers.
    pub async fn publish(&self, ev: &Event) -> Result<(), String> {
        match self.relay.publish(ev).await {
            Ok(crate::nostr::store::SaveOutcome::Saved) => Ok(()),
            Ok(other) => Err(other.ok_reply().1),
            Err(e) => Err(format!("error: could not save the event: {e}")),
        }
    }

    /// Creates `owner`'s bare repository for `identifier` if it is missing.
    pub async fn ensure_repo(&self, owner: &PublicKey, identifier: &str) -> Result<PathBuf, String> {
        let (layout, hooks, owner, id) = (self.layout.clone(), self.hooks_dir.clone(), *owner, identifier.to_string());
        blocking(move || crate::git::repos::create_bare_repo(&layout, &owner, &id, &hooks).map_err(|e| e.to_string())).await
    }

    /// Deletes `owner`'s bare repository for `identifier` (purgatory expiry, deletion, service
    /// change).
    pub async fn delete_repo(&self, owner: &PublicKey, identifier: &str) {
        let Some(repo) = self.repo_path(owner, identifier) else { return };
        let _guard = self.locks.lock(&repo).await;
        let (layout, owner2, id) = (self.layout.clone(), *owner, identifier.to_string());
        if let Err(e) = blocking(move || crate::git::repos::delete_repo(&layout, &owner2, &id)).await {
            tracing::warn!(repo = %repo.display(), error = %e, "could not delete repository");
        }
    }

    /// Removes `owner`'s held announcement and its bare repository.
    pub async fn drop_held_announcement(&self, owner: &PublicKey, identifier: &str, reason: &str) {
        let entry = self.purgatory.remove_announcement(owner, identifier);
        if let Some(entry) = entry {
            tracing::info!(identifier, event = %entry.event.id, reason, "held announcement removed");
            self.delete_repo(owner, identifier).await;
        }
    }

    /// Resets the purgatory timer of the held announcements of `owners` (recreating the bare
    /// repository of soft-expired ones: revival).
    pub async fn extend_held_announcements(&self, owners: &[(PublicKey, Source)], identifier: &str) {
        for (owner, source) in owners {
            if *source != Source::Purgatory {
                continue;
            }
            let ext = self.purgatory.extend_announcement(owner, identifier);
            if ext.is_some_and(|e| e.revived) {
                match self.ensure_repo(owner, identifier).await {
                    Ok(_) => tracing::info!(identifier, owner = %owner, "soft-expired announcement revived"),
                    Err(e) => tracing::warn!(identifier, error = %e, "could not recreate revived repository"),
                }
            }
        }
    }

    /// Releases what every owner's repository for `identifier` satisfies, with no push running
    /// on them meanwhile (their push locks are held). For callers outside a push: a state event
    /// whose data is already here, a background sync. Never call it from code a hook waits on
    /// (that push holds its repository's lock). Returns the number of events released.
    pub async fn process_identifier(&self, identifier: &str) -> usize {
        let owners: Vec<_> = self.announcements(identifier).await.into_iter().map(|(a, _)| a.owner).collect();
        let mut repos: Vec<PathBuf> =
            owners.iter().filter_map(|owner| self.repo_path(owner, identifier)).filter(|repo| repo.exists()).collect();
        // One order for everyone who takes several: no lock-order deadlocks.
        repos.sort();
        let mut push_locks = Vec::new();
        for repo in repos {
            push_locks.extend(push_lock(repo).await);
        }
        let mut released = 0;
        for owner in &owners {
            released += self.process_repo(owner, identifier).await.len();
        }
        drop(push_locks);
        released
    }

    /// The post-receive hook's report: record git-first placeholders, then release.
    pub async fn git_arrived(&self, owner: &PublicKey, identifier: &str, updates: &[RefUpdate]) -> PostReceiveResponse {
        for u in updates {
            let Some(id) = u.name.strip_prefix("refs/nostr/") else { continue };
            let Ok(event_id) = nostr::prelude::EventId::from_hex(id) else { continue };
            if u.new == ZERO_OID || self.event_by_id(&event_id).await.is_some() {
                continue;
            }
            match self.purgatory.record_placeholder(event_id, u.new.clone(), RepoId::new(*owner, identifier)) {
                Some(Ok(())) => tracing::info!(event = %event_id, commit = %u.new, identifier, "git-first placeholder recorded"),
                Some(Err(e)) => tracing::warn!(event = %event_id, error = %e, "placeholder not recorded"),
                None => {}
            }
        }
        let released = self.process_repo(owner, identifier).await;
        let mut messages = Vec::new();
        if released.is_empty() {
            messages.push("grasp: push received; no held events were waiting for this data".to_string());
        }
        PostReceiveResponse::new(released, messages)
    }

    /// Releases what `owner`'s repository for `identifier` now satisfies, aligns it, and copies
    /// the data to the repositories of the other owners for whom the released state is
    /// authoritative. Returns what was released.
    pub async fn process_repo(&self, owner: &PublicKey, identifier: &str) -> Vec<ReleasedEvent> {
        let mut out = self.process_one(owner, identifier).await;
        // Copy to the other owners whose maintainer set trusts the latest state, each under its
        // own lock (never two repository locks at once: no lock-order deadlocks).
        let Some(src) = self.repo_path(owner, identifier) else { return out };
        let all = self.announcements(identifier).await;
        let set = Grasp::maintainer_set(*owner, &all);
        let Some(state) = self.latest_stored_state(identifier, &set).await else { return out };
        for other in all.iter().map(|(a, _)| &a.owner) {
            if other == owner || !Grasp::maintainer_set(*other, &all).contains(&state.author) {
                continue;
            }
            let Some(dst) = self.repo_path(other, identifier) else { continue };
            if !dst.exists() {
                continue;
            }
            {
                let _guard = self.locks.lock(&dst).await;
                let (dst2, src2) = (dst.clone(), src.clone());
                let oids: Vec<String> = state.refs.values().cloned().collect();
                let res = blocking(move || {
                    let missing = git::missing_objects(&dst2, &oids)?;
                    git::fetch_objects_local(&dst2, &src2, &missing)
                })
                .await;
                if let Err(e) = res {
                    tracing::warn!(identifier, to = %dst.display(), error = %e, "could not copy objects to another owner's repository");
                    continue;
                }
            }
            out.extend(self.process_one(other, identifier).await);
        }
        out
    }

    /// Steps 1-4 of the release for one repository, under its lock.
    async fn process_one(&self, owner: &PublicKey, identifier: &str) -> Vec<ReleasedEvent> {
        let mut out = Vec::new();
        let Some(repo) = self.repo_path(owner, identifier) else { return out };
        if !repo.exists() {
            return out;
        }
        let _guard = self.locks.lock(&repo).await;
        let shown = format!("{}/{identifier}", owner.to_bech32().unwrap_or_default());
        let refs = match blocking({
            let repo = repo.clone();
            move || git::read_refs(&repo)
        })
        .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(repo = %shown, error = %e, "cannot read refs");
                return out;
            }
        };
        let all = self.announcements(identifier).await;
        let set: MaintainerSet = Grasp::maintainer_set(*owner, &all);

        // 1. Held states whose objects all exist here, oldest first (one object lookup for all).
        let held = self.held_states(identifier, &set);
        let wanted: Vec<String> =
            held.iter().flat_map(|s| s.refs.values().cloned()).collect::<BTreeSet<_>>().into_iter().collect();
        // None: the repository could not be asked, so nothing is released from it now.
        let missing: Option<BTreeSet<String>> = match blocking({
            let repo = repo.clone();
            move || git::missing_objects(&repo, &wanted)
        })
        .await
        {
            Ok(m) => Some(m.into_iter().collect()),
            Err(e) => {
                tracing::warn!(repo = %shown, error = %e, "cannot check objects");
                None
            }
        };
        for state in held {
            if missing.as_ref().is_none_or(|m| state.refs.values().any(|oid| m.contains(oid))) {
                continue;
            }
            let entry = self.purgatory.remove_state(identifier, &state.event_id);
            let Some(ev) = entry.map(|e| e.event) else { continue };
            match self.publish(&ev).await {
                Ok(()) => {
                    tracing::info!(repo = %shown, event = %ev.id, "state event released");
                    out.push(released(&ev, format!("repository state of {identifier}")));
                }
                Err(e) => tracing::info!(repo = %shown, event = %ev.id, reason = %e, "released state event not stored"),
            }
        }

        // 2. Held pull requests for this repository whose commit exists here.
        let prs = self.purgatory.pr_events_for(&RepoId::new(*owner, identifier));
        for (ev, commit) in prs {
            let name = format!("refs/nostr/{}", ev.id.to_hex());
            let (repo2, current) = (repo.clone(), refs.get(&name).cloned());
            let ok = blocking(move || -> Result<bool, git::GitError> {
                if current.as_deref() == Some(commit.as_str()) {
                    return Ok(true);
                }
                if !git::missing_objects(&repo2, std::slice::from_ref(&commit))?.is_empty() {
                    return Ok(false);
                }
                let old = current.unwrap_or_else(|| ZERO_OID.to_string());
                git::update_refs(&repo2, &[git::RefChange::Set { name, old, new: commit }])?;
                Ok(true)
            })
            .await;
            if !matches!(ok, Ok(true)) {
                continue;
            }
            self.purgatory.remove_pr(&ev.id);
            match self.publish(&ev).await {
                Ok(()) => {
                    tracing::info!(repo = %shown, event = %ev.id, "pull request released");
                    out.push(released(&ev, "pull request"));
                }
                Err(e) => tracing::info!(repo = %shown, event = %ev.id, reason = %e, "released pull request not stored"),
            }
        }

        // 3. Align branches, tags and HEAD to the latest state of the maintainer set.
        let latest = self.latest_stored_state(identifier, &set).await;
        let has_data = !served_refs(&refs).is_empty() || latest.is_some();
        if let Some(state) = latest {
            self.align(&repo, &shown, &state).await;
        }

        // 4. Promote the owner's announcement once the repository holds data.
        if has_data {
            let ev = self.purgatory.promote_announcement(owner, identifier);
            if let Some(ev) = ev {
                match self.publish(&ev).await {
                    Ok(()) => {
                        tracing::info!(repo = %shown, event = %ev.id, "announcement promoted");
                        out.insert(0, released(&ev, format!("announcement of {identifier}")));
                    }
                    Err(e) => tracing::info!(repo = %shown, event = %ev.id, reason = %e, "promoted announcement not stored"),
                }
            }
        }
        self.metrics.released(&out);
        out
    }

    /// Makes `repo`'s branches and tags equal `state` (when every object is present) and points
    /// HEAD where it says. Caller holds the repository lock.
    async fn align(&self, repo: &Path, shown: &str, state: &RepoState) {
        let (repo2, state2) = (repo.to_path_buf(), state.clone());
        let res = blocking(move || -> Result<usize, git::GitError> {
            let oids: Vec<String> = state2.refs.values().cloned().collect();
            if !git::missing_objects(&repo2, &oids)?.is_empty() {
                return Ok(0);
            }
            let current = git::read_refs(&repo2)?;
            let changes = git::alignment(&current, &state2.refs);
            git::update_refs(&repo2, &changes)?;
            let current_head = git::head(&repo2)?;
            if let Some(head) = head_for(&state2, current_head.as_deref()) {
                if current_head.as_deref() != Some(head.as_str()) {
                    git::set_head(&repo2, &head)?;
                }
            }
            Ok(changes.len())
        })
        .await;
        match res {
            Ok(0) => {}
            Ok(n) => tracing::info!(repo = %shown, state = %state.event_id, changes = n, "refs aligned to state"),
            Err(e) => tracing::warn!(repo = %shown, state = %state.event_id, error = %e, "could not align refs"),
        }
    }

    /// Reconciles every repository with the purgatory (startup, after a crash between the hooks),
    /// and removes push quarantines abandoned by a crash mid-push.
    pub async fn reconcile_all(&self) {
        let git_root = self.layout.git_root().to_path_buf();
        blocking(move || crate::git::repos::remove_stale_quarantines(&git_root, STALE_QUARANTINE)).await;
        let identifiers = self.purgatory.waiting_identifiers();
        for identifier in identifiers {
            for (a, _) in self.announcements(&identifier).await {
                let released = self.process_repo(&a.owner, &identifier).await;
                if !released.is_empty() {
                    tracing::info!(identifier, count = released.len(), "reconciled: released held events");
                }
            }
        }
    }
}

/// Where HEAD should point once the repository matches `state`: the branch the state names, if
/// it declares that branch; otherwise HEAD stays where it is if that branch exists, else the
/// first of `main`, `master` or any declared branch (so that clones check something out).
/// `None`: leave HEAD alone.
fn head_for(state: &RepoState, current: Option<&str>) -> Option<String> {
    if let Some(head) = state.head.as_deref().filter(|h| state.refs.contains_key(*h)) {
        return Some(head.to_string());
    }
    if current.is_some_and(|h| state.refs.contains_key(h)) {
        return current.map(str::to_string);
    }
    ["refs/heads/main", "refs/heads/master"]
        .into_iter()
        .find(|b| state.refs.contains_key(*b))
        .map(str::to_string)
        .or_else(|| state.refs.keys().find(|r| r.starts_with("refs/heads/")).cloned())
}

/// Push quarantines older than this are abandoned (no push runs for a day).
const STALE_QUARANTINE: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// Waits for pushes to `repo` to finish and keeps new ones out until the returned file is
/// dropped (`grasp-cgi` holds the same lock for a whole receive-pack, hooks included).
async fn push_lock(repo: PathBuf) -> Option<std::fs::File> {
    let path = repo.join(grasp_state::identifier::PUSH_LOCK_FILE);
    let shown = path.clone();
    let locked = tokio::task::spawn_blocking(move || {
        let file = std::fs::File::options().create(true).truncate(false).write(true).open(&path)?;
        file.lock()?;
        Ok::<_, std::io::Error>(file)
    })
    .await;
    match locked {
        Ok(Ok(file)) => Some(file),
        Ok(Err(error)) => {
            tracing::warn!(lock = %shown.display(), %error, "cannot take the push lock; releasing without it");
            None
        }
        Err(error) => {
            tracing::warn!(%error, "push lock task failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{EventId, Keys, Timestamp};

    fn st(branches: &[&str], head: Option<&str>) -> RepoState {
        RepoState {
            event_id: EventId::from_slice(&[0; 32]).unwrap(),
            author: Keys::generate().public_key(),
            identifier: "r".into(),
            refs: branches.iter().map(|b| (b.to_string(), "a".repeat(40))).collect(),
            head: head.map(str::to_string),
            created_at: Timestamp::from_secs(1),
        }
    }

    #[test]
    fn head_follows_the_state_or_falls_back_to_a_declared_branch() {
        let (main, dev, tag) = ("refs/heads/main", "refs/heads/dev", "refs/tags/v1");
        assert_eq!(head_for(&st(&[main, dev], Some(dev)), Some(main)).as_deref(), Some(dev));
        // HEAD naming an undeclared branch is ignored.
        assert_eq!(head_for(&st(&[main, dev], Some("refs/heads/gone")), Some(dev)).as_deref(), Some(dev));
        assert_eq!(head_for(&st(&[main, dev], None), Some("refs/heads/master")).as_deref(), Some(main));
        assert_eq!(head_for(&st(&["refs/heads/master", dev], None), None).as_deref(), Some("refs/heads/master"));
        assert_eq!(head_for(&st(&[dev, tag], None), Some("refs/heads/master")).as_deref(), Some(dev));
        assert_eq!(head_for(&st(&[tag], None), Some("refs/heads/master")), None);
        assert_eq!(head_for(&st(&[], None), None), None);
    }
}
