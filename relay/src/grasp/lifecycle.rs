//! The purgatory's lifecycle around the pure model: restore at startup, the expiry task that
//! carries out what [`Purgatory::sweep`] decides, and crash-safe checkpoints
//! (docs/protocol.md#checkpoints, #soft-expiry, #placeholders).
//!
//! - [`restore`]: read `<data>/purgatory-state.json`, replay the journal written since
//!   ([`crate::grasp::journal`]), subtract downtime, set a bad file aside.
//! - [`run_expiry`]: sleeps until the model's next deadline (at most a second), sweeps,
//!   and does the I/O the sweep asks for (delete soft-expired repositories, compare-and-delete
//!   expired `refs/nostr/<id>` placeholder refs, retrying failures later).
//! - [`run_checkpoints`] / [`checkpoint`]: snapshot (and journal cut) under the lock, write
//!   outside it (temp file, fsync, rename, directory fsync), one writer at a time, then delete
//!   the journal segments the checkpoint covers.
//!
//! Durations come from `--purgatory-ttl`, `--soft-expiry-ttl` and `--checkpoint-interval`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use grasp_state::contract::checkpoint_file::{read_checkpoint, set_aside, write_checkpoint};
use grasp_state::contract::layout::CHECKPOINT_FILE;
use grasp_state::names::identifier::RepoLayout;
use grasp_state::purgatory::{
    journal::replay, Purgatory, PurgatoryConfig, PurgatoryState, RepoId, SweepAction, SystemClock,
};
use nostr::prelude::ToBech32;

use crate::git;
use crate::grasp::locks::{PushLocks, RepoGuards};
use crate::grasp::Grasp;
use crate::shutdown::Shutdown;

/// The longest the expiry task sleeps between sweeps. A sweep pops only due deadlines, so
/// waking is cheap.
const SWEEP_TICK: Duration = Duration::from_secs(1);

/// Loads the purgatory from `<data>/purgatory-state.json` and the journal segments written since
/// (`<data>/purgatory-journal.<n>`, replayed in order over it), subtracting downtime from every
/// deadline. A corrupt or unknown-version checkpoint is reported and renamed aside, never lost,
/// and the journal is replayed over an empty purgatory. Neither file is changed here: the caller
/// attaches a new journal segment (the returned number) and writes a checkpoint, which compacts
/// them.
pub fn restore(data_dir: &Path, layout: &RepoLayout, config: PurgatoryConfig) -> (Purgatory, u64) {
    let path = data_dir.join(CHECKPOINT_FILE);
    let clock = Arc::new(SystemClock);
    let checkpoint = match read_checkpoint(&path) {
        Ok(state) => state,
        Err(e) => {
            match set_aside(&path) {
                Ok(aside) => tracing::error!(error = %e, kept_as = %aside.display(), "purgatory checkpoint unreadable; set aside, starting from the journal only"),
                Err(io) => tracing::error!(error = %e, rename_error = %io, "purgatory checkpoint unreadable and could not be set aside; starting from the journal only"),
            }
            None
        }
    };
    let (records, next_segment) = crate::grasp::journal::read_segments(data_dir);
    let journalled = records.len();
    let state = match checkpoint {
        None if records.is_empty() => return (Purgatory::new(config, clock), next_segment),
        None => {
            let mut state = PurgatoryState::default();
            replay(&mut state, records);
            state
        }
        Some(mut state) => {
            replay(&mut state, records);
            state
        }
    };
    let (p, report) = Purgatory::restore(state, config, clock, |owner, identifier| layout.repo_path(owner, identifier).is_ok_and(|repo| repo.exists()));
    tracing::info!(
        downtime_secs = report.downtime.as_secs(),
        journal_records = journalled,
        announcements = report.announcements,
        states = report.states,
        prs = report.prs,
        placeholders = report.placeholders,
        expired_during_downtime = report.expired_during_downtime,
        skipped = report.skipped.len(),
        "purgatory restored from checkpoint and journal"
    );
    for s in &report.skipped {
        tracing::warn!(entry = %s.entry, reason = %s.reason, "purgatory entry not restored");
    }
    (p, next_segment)
}

/// Serialises checkpoint writers (periodic task, final checkpoint): two writers would share the
/// temp file, and an older snapshot must never be renamed over a newer one.
static CHECKPOINT_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Writes one checkpoint. The snapshot is taken under the purgatory lock (the held events'
/// `Arc`s and plain fields), together with a cut of the journal; building the file, serialising
/// and the disk writes happen outside it, so request handling is not blocked for long. Once the
/// checkpoint is durably in place, the journal segments it covers are deleted.
pub async fn checkpoint(grasp: &Grasp, data_dir: &Path) -> std::io::Result<()> {
    let _writer = CHECKPOINT_LOCK.lock().await;
    let started = std::time::Instant::now();
    let (snapshot, cut) = grasp.purgatory.snapshot_and_cut();
    let path: PathBuf = data_dir.join(CHECKPOINT_FILE);
    let written = tokio::task::spawn_blocking(move || write_checkpoint(&path, &snapshot).map(|()| std::fs::metadata(&path).map_or(0, |m| m.len())))
        .await
        .map_err(std::io::Error::other)?;
    grasp.metrics.checkpoint_written(started.elapsed(), written.as_ref().copied().map_err(drop));
    // The contributor data's ledger goes with it, when it changed (docs/protocol.md#budgets).
    if let Err(error) = grasp.contributor_data.save() {
        tracing::warn!(%error, "contributor data file not written");
    }
    if written.is_ok() {
        if let (Some(cut), Some(journal)) = (cut, grasp.purgatory.journal()) {
            // No new segment (the writer could not create one): the old ones stay.
            if let Ok(segment) = cut.await {
                journal.remove_before(segment);
            }
        }
    }
    written.map(drop)
}

/// Checkpoints every `interval` until shutdown, and early when the journal grew past its
/// bound (the final checkpoint is the caller's, after background mutation has stopped).
pub async fn run_checkpoints(grasp: Arc<Grasp>, data_dir: PathBuf, interval: Duration, mut shutdown: Shutdown) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let journal_full = grasp.purgatory.journal().map(|j| j.wants_checkpoint()).unwrap_or_default();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = journal_full.notified() => {
                tracing::info!("purgatory journal past its bound: checkpoint now");
            }
            _ = shutdown.recv() => return,
        }
        if let Err(e) = checkpoint(&grasp, &data_dir).await {
            tracing::error!(error = %e, "purgatory checkpoint failed");
        }
    }
}

/// Runs the expiry sweep until shutdown: it sleeps until the earliest deadline, but never
/// longer than `SWEEP_TICK` or a quarter of the entry TTL (entries added meanwhile may be due
/// sooner than anything armed now).
pub async fn run_expiry(grasp: Arc<Grasp>, mut shutdown: Shutdown) {
    loop {
        let wake = grasp.purgatory.next_wake(SWEEP_TICK);
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => expire(&grasp).await,
            _ = shutdown.recv() => return,
        }
    }
}

/// One sweep: the model decides, this carries out the I/O. Held states due to expire whose git
/// data is present (a push whose post-receive notice was lost, data that arrived otherwise) are
/// released first, never expired: expiring them would let the next alignment rewind the
/// repository off the commits they name.
pub async fn expire(grasp: &Grasp) {
    release_present_states(grasp).await;
    let actions = grasp.purgatory.sweep();
    for action in actions {
        grasp.metrics.purgatory_expired(&action);
        match action {
            SweepAction::SoftExpireAnnouncement { owner, identifier, event_id, .. } => {
                if delete_soft_expired_repo(grasp, &owner, &identifier).await {
                    tracing::info!(owner = %npub(&owner), identifier, event = %event_id, "purgatory: announcement soft-expired: repository deleted, event kept for revival");
                }
            }
            SweepAction::ExpireAnnouncement { owner, identifier, event_id } => {
                tracing::info!(owner = %npub(&owner), identifier, event = %event_id, "purgatory: announcement expired and forgotten");
            }
            SweepAction::ExpireState { event_id, identifier, author } => {
                tracing::info!(identifier, event = %event_id, author = %npub(&author), "purgatory: state event expired without its git data");
            }
            SweepAction::ExpirePr { event_id, commit, destinations } => {
                tracing::info!(event = %event_id, commit, "purgatory: pull request expired without its commit");
                remove_nostr_refs(grasp, &event_id, &commit, &destinations).await;
            }
            SweepAction::ExpirePlaceholder { event_id, commit, destinations } => {
                expire_placeholder(grasp, &event_id, &commit, &destinations).await;
            }
        }
    }
}

/// Releases the due held states whose git data is present (docs/protocol.md#purgatory). One
/// that cannot be released now (its repositories stay busy past the lock wait) gets a new
/// deadline instead of expiring.
async fn release_present_states(grasp: &Grasp) {
    let due = grasp.purgatory.due_states();
    let mut done = std::collections::BTreeSet::new();
    for (identifier, ev) in due {
        if !grasp.held_state_data_present(&ev).await {
            continue;
        }
        // The repositories this author's states govern; busy ones are deferred and retried.
        if done.insert((identifier.clone(), ev.pubkey)) {
            grasp.process_governed(&identifier, &ev.pubkey).await;
        }
        if grasp.purgatory.held_state(&identifier, &ev.id).is_some() {
            grasp.purgatory.extend_states(&identifier, &[ev.id]);
            tracing::warn!(identifier, event = %ev.id, "held state's git data is present but it could not be released now; not expired, retried later");
        } else {
            tracing::info!(identifier, event = %ev.id, "purgatory: held state due to expire had its git data; released instead");
        }
    }
}

/// Removes the refs of an expired git-first placeholder (docs/protocol.md#placeholders). For each
/// destination, under its repository lock, it re-checks the record (a pull request event that
/// arrived, or a push of the same commit that re-armed the placeholder, keeps every ref) and the
/// store (an event accepted while an older checkpoint still held its placeholder keeps its ref),
/// then compare-and-deletes `refs/nostr/<id>` and forgets that destination before the lock is
/// released: a push of the same commit right after records the destination anew, so its ref is
/// never left without a record. A failed deletion is retried later.
async fn expire_placeholder(grasp: &Grasp, event_id: &nostr::prelude::EventId, commit: &str, destinations: &[RepoId]) {
    let name = format!("refs/nostr/{}", event_id.to_hex());
    let mut failed = 0;
    for dest in destinations {
        let Some(repo) = grasp.path_of(dest) else {
            grasp.purgatory.placeholder_cleaned(event_id, std::slice::from_ref(dest));
            continue;
        };
        // Busy past the lock wait: not cleaned now, retried like a failed removal.
        let _guards = match RepoGuards::acquire(&grasp.locks, [repo.clone()], PushLocks::Skip).await {
            Ok(guards) => guards,
            Err(error) => {
                tracing::warn!(repo = %repo.display(), %error, "expired refs/nostr ref not removed yet");
                failed += 1;
                continue;
            }
        };
        if !grasp.purgatory.placeholder_cleanup_pending(event_id, commit) {
            tracing::info!(event = %event_id, commit, "purgatory: expired placeholder taken over by its event or a new push; refs kept");
            return;
        }
        if grasp.event_by_id(event_id).await.is_some() {
            grasp.purgatory.remove_placeholder(event_id);
            tracing::info!(event = %event_id, commit, "purgatory: expired placeholder's event is stored; refs kept");
            return;
        }
        match delete_ref_at(&repo, &name, commit).await {
            Ok(()) => {
                grasp.purgatory.placeholder_cleaned(event_id, std::slice::from_ref(dest));
                // What only that ref reached is pruned by the next maintenance pass.
                crate::grasp::maintenance::after_ref_removal(grasp, &repo);
            }
            Err(e) => {
                tracing::warn!(repo = %repo.display(), event = %event_id, error = %e, "could not remove expired refs/nostr ref");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        if let Some(retry) = grasp.purgatory.retry_placeholder_cleanup(event_id) {
            tracing::warn!(event = %event_id, failed, retry_secs = retry.as_secs(), "placeholder ref removal failed; will retry");
        }
        return;
    }
    if destinations.is_empty() {
        // A record from an old checkpoint that does not say where its refs are: no ref is
        // touched, the record is forgotten.
        grasp.purgatory.placeholder_cleaned(event_id, &[]);
    }
    tracing::info!(event = %event_id, commit, destinations = destinations.len(), "purgatory: placeholder expired, refs/nostr ref removed");
}

/// Compare-and-deletes `name` in `repo` if it still points at `commit` (a missing repository or
/// ref is already clean). The caller holds the repository lock.
async fn delete_ref_at(repo: &Path, name: &str, commit: &str) -> Result<(), String> {
    let (repo, name, commit) = (repo.to_path_buf(), name.to_string(), commit.to_string());
    tokio::task::spawn_blocking(move || -> Result<(), git::GitError> {
        if !repo.exists() {
            return Ok(());
        }
        let refs = git::read_refs(&repo)?;
        if refs.get(&name) == Some(&commit) {
            git::update_refs(&repo, &[git::RefChange::Delete { name, old: commit }])?;
        }
        Ok(())
    })
    .await
    .map_err(|e| format!("ref removal task failed: {e}"))?
    .map_err(|e| e.to_string())
}

/// Deletes the bare repository of a soft-expired announcement, unless a state event revived it
/// since the sweep. The check and the move-aside happen under the purgatory lock, which revival
/// also takes (clearing `soft_expired` before it recreates the repository), so the two cannot
/// interleave: either the revival comes first and the repository stays, or the repository is
/// moved away first and the revival creates a fresh one. Returns whether it was deleted.
async fn delete_soft_expired_repo(grasp: &Grasp, owner: &nostr::prelude::PublicKey, identifier: &str) -> bool {
    let Some(repo) = grasp.repo_path(owner, identifier) else { return false };
    let _guards = match RepoGuards::acquire(&grasp.locks, [repo.clone()], PushLocks::Skip).await {
        Ok(guards) => guards,
        Err(error) => {
            tracing::warn!(repo = %repo.display(), %error, "soft-expired repository not deleted");
            return false;
        }
    };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let aside = repo.with_file_name(format!(".del-expired-{}-{nanos}", std::process::id()));
    match grasp.purgatory.while_soft_expired(owner, identifier, || std::fs::rename(&repo, &aside)) {
        None => {
            tracing::info!(identifier, "purgatory: announcement revived before its repository was deleted; kept");
            return false;
        }
        Some(Ok(())) => grasp.trust.limits.repo_removed(),
        Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => return true,
        Some(Err(e)) => {
            tracing::warn!(repo = %repo.display(), error = %e, "could not delete soft-expired repository");
            return false;
        }
    }
    // A repository made later on a reused inode never matches the ref cache's answers of this one.
    crate::git::ref_generation::bump(&aside);
    match tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&aside).map_err(|e| (aside, e))).await {
        Ok(Err((aside, e))) => tracing::warn!(path = %aside.display(), error = %e, "could not remove a deleted repository"),
        Err(e) => tracing::warn!(error = %e, "repository removal task failed"),
        Ok(Ok(())) => crate::git::repos::remove_owner_dir_if_empty(&grasp.layout, owner),
    }
    true
}

/// Compare-and-deletes `refs/nostr/<id>` (still at `commit`) in each destination, under its
/// lock, unless the PR event arrived meanwhile. Returns the destinations that are clean.
async fn remove_nostr_refs(grasp: &Grasp, event_id: &nostr::prelude::EventId, commit: &str, destinations: &[RepoId]) -> Vec<RepoId> {
    let mut cleaned = Vec::new();
    let name = format!("refs/nostr/{}", event_id.to_hex());
    for dest in destinations {
        let Some(repo) = grasp.path_of(dest) else {
            cleaned.push(dest.clone());
            continue;
        };
        // Busy past the lock wait: not cleaned now, retried like a failed removal.
        let _guards = match RepoGuards::acquire(&grasp.locks, [repo.clone()], PushLocks::Skip).await {
            Ok(guards) => guards,
            Err(error) => {
                tracing::warn!(repo = %repo.display(), %error, "expired refs/nostr ref not removed yet");
                continue;
            }
        };
        if grasp.purgatory.holds_pr_event(event_id) {
            cleaned.push(dest.clone());
            continue;
        }
        match delete_ref_at(&repo, &name, commit).await {
            Ok(()) => {
                cleaned.push(dest.clone());
                crate::grasp::maintenance::after_ref_removal(grasp, &repo);
            }
            Err(e) => tracing::warn!(repo = %repo.display(), error = %e, "could not remove expired refs/nostr ref"),
        }
    }
    cleaned
}

fn npub(pk: &nostr::prelude::PublicKey) -> String {
    pk.to_bech32().unwrap_or_else(|_| pk.to_hex())
}
