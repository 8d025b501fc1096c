//! Which events this relay accepts (GRASP.md "GRASP-01 requirements" and decisions 1-3, 6, 8),
//! and where they go: straight to the store, or to the purgatory until their git data arrives.

use grasp_state::identifier::validate_identifier;
use grasp_state::nip34::{
    references, Announcement, PullRequest, RepoState, KIND_ANNOUNCEMENT, KIND_DELETION, KIND_PR,
    KIND_PR_UPDATE, KIND_STATE, KIND_USER_GRASP_LIST,
};
use grasp_state::purgatory::{PurgatoryFull, RepoId, Removed};
use nostr::prelude::{Event, Filter, Kind, SingleLetterTag, ToBech32};

use crate::git;
use crate::grasp::{Grasp, Source};
use crate::policy::Admission;

/// The answer for events accepted into the purgatory.
pub const PURGATORY_MESSAGE: &str = "purgatory: won't be served until git data arrives";

fn full(e: PurgatoryFull) -> Admission {
    Admission::Reject(format!("{}: {e}", e.ok_prefix()))
}

impl Grasp {
    /// Decides what happens to a verified event.
    pub async fn admit(&self, ev: &Event) -> Admission {
        if self.relay.store().is_deleted(ev).await.unwrap_or(false) {
            return Admission::Reject(
                "blocked: this event was deleted by its author (kind 5) and cannot be republished".into(),
            );
        }
        match ev.kind.as_u16() {
            KIND_ANNOUNCEMENT => self.admit_announcement(ev).await,
            KIND_STATE => self.admit_state(ev).await,
            KIND_PR | KIND_PR_UPDATE => self.admit_pr(ev).await,
            KIND_DELETION => self.admit_deletion(ev).await,
            KIND_USER_GRASP_LIST => Admission::Store,
            _ => self.admit_related(ev).await,
        }
    }

    async fn admit_announcement(&self, ev: &Event) -> Admission {
        let a = match Announcement::from_event(ev) {
            Ok(a) => a,
            Err(e) => return Admission::Reject(format!("invalid: {e}")),
        };
        if let Err(e) = validate_identifier(&a.identifier) {
            return Admission::Reject(format!("invalid: repository identifier: {e}"));
        }
        let all = self.announcements(&a.identifier).await;
        let existing = all.iter().find(|(x, _)| x.owner == a.owner);
        if let Some((old, _)) = existing {
            if (old.created_at, std::cmp::Reverse(old.event_id)) > (a.created_at, std::cmp::Reverse(a.event_id)) {
                return Admission::Reject(
                    "duplicate: a newer announcement of this repository by this author is already known".into(),
                );
            }
        }
        let npub = a.owner.to_bech32().unwrap_or_default();
        if !a.lists_service(&self.public_host) {
            // Service change: a newer announcement dropping this service ends the owner's
            // purgatory entry and its bare repository (decision 3).
            if let Some((_, Source::Purgatory)) = existing {
                self.drop_held_announcement(&a.owner, &a.identifier, "service no longer listed").await;
                return Admission::Store;
            }
            let trusted = all.iter().any(|(x, _)| x.owner == a.owner || x.maintainers.contains(&a.owner));
            if trusted {
                return Admission::Store;
            }
            return Admission::Reject(format!(
                "blocked: this announcement does not list this service; add a clone URL \
                 http(s)://{host}/{npub}/{id}.git and a relays URL ws(s)://{host}",
                host = self.public_host,
                id = a.identifier
            ));
        }
        // Refuse before creating a bare repository the caps would leave orphaned.
        let repo_exists = self.repo_path(&a.owner, &a.identifier).is_some_and(|p| p.exists());
        if existing.is_none() && !repo_exists {
            if let Err(e) = self.purgatory.lock().unwrap().check_room(&a.owner) {
                return full(e);
            }
        }
        let repo = match self.ensure_repo(&a.owner, &a.identifier).await {
            Ok(repo) => repo,
            Err(e) => return Admission::Reject(format!("error: could not create the repository: {e}")),
        };
        match existing {
            Some((_, Source::Stored)) => Admission::Store,
            Some((_, Source::Purgatory)) => {
                let mut p = self.purgatory.lock().unwrap();
                match p.add_announcement(ev.clone(), a.owner, a.identifier.clone(), repo, a.relays.iter().cloned().collect()) {
                    Ok(_) => Admission::Purgatory(PURGATORY_MESSAGE.into()),
                    Err(e) => full(e),
                }
            }
            None => {
                // A repository that already holds git data (restored from a crash, or synced)
                // proves itself: serve the announcement at once.
                let has_data = tokio::task::spawn_blocking({
                    let repo = repo.clone();
                    move || git::read_refs(&repo).map(|r| !r.is_empty()).unwrap_or(false)
                })
                .await
                .unwrap_or(false);
                if has_data {
                    return Admission::Store;
                }
                let mut p = self.purgatory.lock().unwrap();
                match p.add_announcement(ev.clone(), a.owner, a.identifier.clone(), repo, a.relays.iter().cloned().collect()) {
                    Ok(_) => {
                        tracing::info!(repo = %format!("{npub}/{}", a.identifier), event = %ev.id, "announcement held in purgatory");
                        Admission::Purgatory(PURGATORY_MESSAGE.into())
                    }
                    Err(e) => full(e),
                }
            }
        }
    }

    async fn admit_state(&self, ev: &Event) -> Admission {
        let s = match RepoState::from_event(ev) {
            Ok(s) => s,
            Err(e) => return Admission::Reject(format!("invalid: {e}")),
        };
        if let Err(e) = validate_identifier(&s.identifier) {
            return Admission::Reject(format!("invalid: repository identifier: {e}"));
        }
        let all = self.announcements(&s.identifier).await;
        let owners = Grasp::owners_trusting(&s.author, &all);
        if owners.is_empty() {
            return Admission::Reject(format!(
                "blocked: no announcement of repository '{}' on this relay lists {} as owner or maintainer; \
                 publish the repository announcement (kind 30617) here first",
                s.identifier,
                s.author.to_bech32().unwrap_or_default()
            ));
        }
        // Trigger 1 of the expiry extensions; revives soft-expired announcements.
        self.extend_held_announcements(&owners, &s.identifier).await;
        // Git data already here (in some authorised repository)?
        for (owner, _) in &owners {
            let Some(repo) = self.repo_path(owner, &s.identifier) else { continue };
            let oids: Vec<String> = s.refs.values().cloned().collect();
            let missing = tokio::task::spawn_blocking(move || git::missing_objects(&repo, &oids))
                .await
                .ok()
                .and_then(|r| r.ok());
            if missing.is_some_and(|m| m.is_empty()) && !s.refs.is_empty() {
                if let Err(e) = self.publish(ev).await {
                    return Admission::Reject(e);
                }
                for (owner, _) in &owners {
                    self.process_repo(owner, &s.identifier).await;
                }
                return Admission::Published;
            }
        }
        let mut p = self.purgatory.lock().unwrap();
        match p.add_state(ev.clone(), s.author, s.identifier.clone()) {
            Ok(_) => {
                drop(p);
                tracing::info!(identifier = %s.identifier, event = %ev.id, "state event held in purgatory");
                self.note_waiting(&s.identifier);
                Admission::Purgatory(PURGATORY_MESSAGE.into())
            }
            Err(e) => full(e),
        }
    }

    async fn admit_pr(&self, ev: &Event) -> Admission {
        let pr = match PullRequest::from_event(ev) {
            Ok(pr) => pr,
            Err(e) => return Admission::Reject(format!("invalid: {e}")),
        };
        let mut repos = Vec::new();
        for (owner, identifier) in &pr.repos {
            let all = self.announcements(identifier).await;
            if all.iter().any(|(a, _)| &a.owner == owner) {
                if let Some(path) = self.repo_path(owner, identifier) {
                    repos.push((*owner, identifier.clone(), path));
                }
            }
        }
        if repos.is_empty() {
            return Admission::Reject(
                "blocked: this pull request does not tag (`a` tag) a repository announced on this relay".into(),
            );
        }
        let ref_name = format!("refs/nostr/{}", ev.id.to_hex());
        let mut served = false;
        for (_, _, repo) in &repos {
            if !repo.exists() {
                continue;
            }
            let _guard = self.locks.lock(repo).await;
            let (repo, ref_name, commit) = (repo.clone(), ref_name.clone(), pr.commit.clone());
            let ok = tokio::task::spawn_blocking(move || -> Result<bool, git::GitError> {
                let refs = git::read_refs(&repo)?;
                match refs.get(&ref_name) {
                    Some(oid) if *oid == commit => return Ok(true),
                    Some(oid) => {
                        // A git-first push under this id brought another commit: remove it; the
                        // event waits for the right one.
                        git::update_refs(&repo, &[git::RefChange::Delete { name: ref_name.clone(), old: oid.clone() }])?;
                    }
                    None => {}
                }
                if git::missing_objects(&repo, std::slice::from_ref(&commit))?.is_empty() {
                    git::update_refs(
                        &repo,
                        &[git::RefChange::Set { name: ref_name, old: grasp_state::refs::ZERO_OID.into(), new: commit }],
                    )?;
                    return Ok(true);
                }
                Ok(false)
            })
            .await;
            if matches!(ok, Ok(Ok(true))) {
                served = true;
            }
        }
        {
            let mut p = self.purgatory.lock().unwrap();
            if p.find_pr(&ev.id).is_some_and(|entry| entry.event.is_none()) {
                // The placeholder's ref was checked above; it has done its job either way.
                p.remove_pr(&ev.id);
            }
        }
        if served {
            return match self.publish(ev).await {
                Ok(()) => Admission::Published,
                Err(e) => Admission::Reject(e),
            };
        }
        let mut p = self.purgatory.lock().unwrap();
        let targets = repos.iter().map(|(o, i, _)| RepoId::new(*o, i.clone())).collect();
        match p.add_pr(ev.clone(), pr.commit.clone(), targets) {
            Ok(_) => {
                drop(p);
                tracing::info!(event = %ev.id, commit = %pr.commit, "pull request held in purgatory");
                for (_, identifier, _) in &repos {
                    self.note_waiting(identifier);
                }
                Admission::Purgatory(PURGATORY_MESSAGE.into())
            }
            Err(e) => full(e),
        }
    }

    async fn admit_deletion(&self, ev: &Event) -> Admission {
        let ids: Vec<_> = ev.tags.event_ids().collect();
        let coords: Vec<_> = ev
            .tags
            .coordinates()
            .filter(|c| c.public_key == ev.pubkey)
            .map(|c| (c.kind.as_u16(), c.public_key, c.identifier.clone()))
            .collect();
        let removed = {
            let mut p = self.purgatory.lock().unwrap();
            p.remove_by_deletion(&ev.pubkey, &ids, &coords, ev.created_at)
        };
        for r in removed {
            tracing::info!(event = %r.event_id(), "purgatory entry removed by deletion {}", ev.id);
            if let Removed::Announcement(a) = r {
                if !a.soft_expired {
                    self.delete_repo(&a.owner, &a.identifier).await;
                }
            }
        }
        Admission::Store
    }

    async fn admit_related(&self, ev: &Event) -> Admission {
        let refs = references(ev);
        for c in &refs.coordinates {
            if c.kind == KIND_ANNOUNCEMENT {
                let all = self.announcements(&c.identifier).await;
                if all.iter().any(|(a, _)| a.owner == c.pubkey) {
                    return Admission::Store;
                }
            } else {
                let f = Filter::new().kind(Kind::Custom(c.kind)).author(c.pubkey).identifier(&c.identifier).limit(1);
                if !self.query(vec![f]).await.is_empty() {
                    return Admission::Store;
                }
            }
        }
        for id in &refs.event_ids {
            if self.event_by_id(id).await.is_some() {
                return Admission::Store;
            }
        }
        // Tagged by a stored event (it arrived first and referenced this one).
        let id = ev.id.to_hex();
        let mut filters: Vec<Filter> = ['e', 'E', 'q']
            .iter()
            .filter_map(|c| single_letter(*c))
            .map(|t| Filter::new().custom_tag(t, id.clone()).limit(1))
            .collect();
        if let Some(coord) = ev.coordinate() {
            let coord = coord.to_string();
            filters.extend(
                ['a', 'A', 'q'].iter().filter_map(|c| single_letter(*c)).map(|t| Filter::new().custom_tag(t, coord.clone()).limit(1)),
            );
        }
        if !self.query(filters).await.is_empty() {
            return Admission::Store;
        }
        Admission::Reject(
            "blocked: this relay only accepts git repository events (NIP-34) and events that reference a \
             repository, issue, patch or other event it holds; tag one with an `a`, `e` or `q` tag"
                .into(),
        )
    }
}

fn single_letter(c: char) -> Option<SingleLetterTag> {
    SingleLetterTag::from_char(c).ok()
}
