//! `grasp-relay purge-author NPUB`: the operator removes everything of one author: stored events,
//! held events, and the repositories under `<git>/<npub>/` and `<git>/prs/<npub>/`
//! (docs/protocol.md#trust). Blocking
//! an author (curation) refuses new events but keeps what is stored; this is the deliberate
//! second step. Also [`run_curation_watch`]: the held events of authors who become blocked are
//! dropped at once.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use grasp_state::contract::hook_api::{PurgeAuthorRequest, PurgeAuthorResponse, HOOK_API_VERSION, PATH_PURGE_AUTHOR};
use grasp_state::names::identifier::{npub_of, RepoSpace};
use grasp_state::purgatory::RepoId;
use nostr::prelude::{Filter, PublicKey};

use crate::grasp::Grasp;
use crate::shutdown::Shutdown;

/// A purge of a prolific author deletes many events and repositories: give it time.
const PURGE_TIMEOUT: Duration = Duration::from_secs(300);

/// Removes `author`'s held events, stored events and repositories.
pub async fn purge_author(grasp: &Grasp, author: &PublicKey) -> Result<PurgeAuthorResponse, String> {
    let held_removed = drop_held_of(grasp, author).await;
    // Their pull requests' data goes from every repository holding it, and leaves the budgets.
    let contributions = grasp.purge_contributor_data(author).await;
    let filter = Filter::new().author(*author);
    let events = grasp.relay.store().query(vec![filter.clone()], usize::MAX).await.map_err(|e| e.to_string())?;
    grasp.relay.store().delete(filter).await.map_err(|e| e.to_string())?;
    // Their repositories, and their GRASP-06 contributor repositories.
    let mut removed = 0;
    for space in [RepoSpace::Hosted, RepoSpace::Prs] {
        let owner_dir = grasp.layout.owner_dir_in(space, author);
        let identifiers: Vec<String> = std::fs::read_dir(&owner_dir)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".git")).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        for identifier in &identifiers {
            grasp.delete_repo_id(&RepoId { owner: *author, identifier: identifier.clone(), space }).await;
        }
        let _ = std::fs::remove_dir(&owner_dir);
        removed += identifiers.len();
    }
    tracing::info!(author = %npub_of(author), events = events.len(), held = held_removed, repositories = removed, contributions, "author purged by the operator");
    Ok(PurgeAuthorResponse {
        version: HOOK_API_VERSION,
        events_removed: events.len(),
        held_removed,
        repositories_removed: removed,
    })
}

/// The CLI side: asks the relay running on `data_dir` to purge `author` (through the one hook
/// API client, `grasp_hooks::ApiClient`); returns a summary line.
pub fn run_purge_author(data_dir: &Path, author: &str) -> Result<String> {
    let pk = grasp_state::trust::curation::parse_pubkey(author).with_context(|| format!("{author:?} is not an npub or hex public key"))?;
    let request = PurgeAuthorRequest { version: HOOK_API_VERSION, author: npub_of(&pk) };
    let r: PurgeAuthorResponse = grasp_hooks::ApiClient::from_data_dir(data_dir, PURGE_TIMEOUT)
        .with_context(|| format!("is grasp-relay running with --data-dir {}?", data_dir.display()))?
        .post(PATH_PURGE_AUTHOR, &request)?;
    Ok(format!(
        "purged {}: {} stored events, {} held events, {} repositories removed",
        npub_of(&pk),
        r.events_removed,
        r.held_removed,
        r.repositories_removed
    ))
}

/// Every second, looks at the curation in force; when authors become blocked, drops their held
/// announcements (and the bare repositories created for them) and state events. Stored events
/// stay: `grasp-relay purge-author` removes them (docs/protocol.md#trust).
pub async fn run_curation_watch(grasp: Arc<Grasp>, mut shutdown: Shutdown) {
    let mut blocked: BTreeSet<PublicKey> = BTreeSet::new();
    loop {
        let now_blocked = grasp.trust.curation().blocked_authors.clone();
        let new: Vec<PublicKey> = now_blocked.difference(&blocked).copied().collect();
        for author in new {
            drop_held_of(&grasp, &author).await;
        }
        blocked = now_blocked;
        tokio::select! {
            _ = shutdown.recv() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Drops what `author` has waiting in the purgatory (held announcements with their bare
/// repositories, held state events, held pull requests); returns how many entries went.
pub async fn drop_held_of(grasp: &Grasp, author: &PublicKey) -> usize {
    let (announcements, states) = grasp.purgatory.held_by(author);
    let mut dropped = 0;
    for identifier in announcements {
        grasp.drop_held_announcement(author, &identifier, "author blocked by the operator").await;
        dropped += 1;
    }
    for (identifier, id) in states {
        if grasp.purgatory.remove_state(&identifier, &id).is_some() {
            tracing::info!(identifier, event = %id, reason = "author blocked by the operator", "held state event removed");
            dropped += 1;
        }
    }
    for id in grasp.purgatory.pr_events_by(author) {
        grasp.purgatory.remove_pr(&id);
        tracing::info!(event = %id, reason = "author blocked by the operator", "held pull request removed");
        dropped += 1;
    }
    dropped
}
