//! What owners may store (docs/protocol.md#budgets): the quota per owner over all their
//! repositories and the daily budget per address for new owners' repositories
//! ([`grasp_state::trust::owner_quota`]). This gathers the facts (what an owner's repositories and
//! their object pools hold on disk, whether the owner is new here), remembers the pushes of the
//! last day per address, and asks the pure decision.
//!
//! An owner's bytes are a walk of their repositories' `objects/` and of the object pools of
//! their identifiers, at most every [`REMEASURE`], growing by each accepted push in between;
//! whether the owner is new is looked at every push (one `stat` per repository). The day's pushes per address are kept in memory only: a restart forgets them.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use grasp_state::trust::owner_quota::{NewOwnerWindow, OwnerFacts, OwnerQuotas, NEW_OWNER_FOR_SECS};
use grasp_state::git::push::{PushDecision, Rejection};
use nostr::prelude::{PublicKey, Timestamp};

use crate::grasp::Grasp;

/// How long an owner's measured bytes are reused.
const REMEASURE: Duration = Duration::from_secs(30);
/// Most owners whose measurement is remembered.
const MAX_CACHED: usize = 10_000;

/// The quotas, the exempt owners, the day's pushes and the owners measured.
#[derive(Debug, Default)]
pub struct OwnerQuotaState {
    quotas: Mutex<OwnerQuotas>,
    exempt: Mutex<HashSet<PublicKey>>,
    window: Mutex<NewOwnerWindow>,
    measured: Mutex<HashMap<PublicKey, (Instant, u64)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl OwnerQuotaState {
    /// Sets the quotas and the exempt owners (startup, SIGHUP).
    pub fn configure(&self, quotas: OwnerQuotas, exempt: impl IntoIterator<Item = PublicKey>) {
        *lock(&self.quotas) = quotas;
        *lock(&self.exempt) = exempt.into_iter().collect();
    }

    pub fn quotas(&self) -> OwnerQuotas {
        *lock(&self.quotas)
    }
}

/// Bytes of the files under `dir` (0 when it does not exist), without push quarantines (the
/// push being decided is counted by its own bytes). Symbolic links are not followed.
fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                if entry.file_name().to_str().is_some_and(|n| n.starts_with(crate::git::repos::QUARANTINE_PREFIX)) {
                    continue;
                }
                stack.push(entry.path());
            } else if meta.is_file() {
                total = total.saturating_add(meta.len());
            }
        }
    }
    total
}

/// What `owner`'s repositories hold on disk: their objects, and the object pool of each of their
/// identifiers.
fn measure_used(layout: &grasp_state::names::identifier::RepoLayout, owner: &PublicKey) -> u64 {
    let mut used = 0u64;
    for repo in crate::git::repos::repo_dirs_in_owner(&layout.owner_dir(owner)) {
        used = used.saturating_add(dir_bytes(&repo.join("objects")));
        if let Some(identifier) = repo.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".git")) {
            if let Ok(pool) = layout.pool_path(identifier) {
                used = used.saturating_add(dir_bytes(&pool.join("objects")));
            }
        }
    }
    used
}

/// Whether none of `owner`'s repositories with refs is a day old (one `stat` per repository,
/// refs read only for the old ones).
fn is_new_owner(layout: &grasp_state::names::identifier::RepoLayout, owner: &PublicKey) -> bool {
    let now = std::time::SystemTime::now();
    !crate::git::repos::repo_dirs_in_owner(&layout.owner_dir(owner)).into_iter().any(|repo| {
        // Made when the repository was (grasp's `git init`), never written again.
        let born = std::fs::metadata(repo.join(grasp_state::contract::layout::PUSH_LOCK_FILE)).and_then(|m| m.modified()).ok();
        let old = born.and_then(|b| now.duration_since(b).ok()).is_some_and(|age| age.as_secs() >= NEW_OWNER_FOR_SECS);
        old && crate::git::read_refs(&repo).is_ok_and(|refs| !refs.is_empty())
    })
}

impl Grasp {
    /// The quotas' verdict on an accepted push of `incoming` bytes from `address` to `owner`'s
    /// repository: only a push of the owner's own history (no pull request data, no git-first
    /// placeholders: those have budgets of their own) is asked. Recorded when it goes in.
    pub(crate) async fn check_owner_quota(&self, owner: &PublicKey, decision: PushDecision, address: Option<IpAddr>, incoming: u64) -> PushDecision {
        let PushDecision::Accept(acc) = decision else { return decision };
        if incoming == 0 || !acc.placeholders.is_empty() || !acc.pr_matches.is_empty() {
            return PushDecision::Accept(acc);
        }
        let state = &self.owner_quotas;
        let quotas = state.quotas();
        let exempt = lock(&state.exempt).contains(owner);
        if exempt || (quotas.per_owner == 0 && quotas.new_owner_per_address_per_day == 0) {
            return PushDecision::Accept(acc);
        }
        let cached = lock(&state.measured).get(owner).copied().filter(|(at, _)| at.elapsed() < REMEASURE).map(|(_, used)| used);
        let (layout, who) = (self.layout.clone(), *owner);
        let (used, new_owner) = crate::grasp::blocking(move || {
            let used = cached.unwrap_or_else(|| measure_used(&layout, &who));
            (used, is_new_owner(&layout, &who))
        })
        .await;
        if cached.is_none() {
            let mut measured = lock(&state.measured);
            if measured.len() >= MAX_CACHED {
                measured.retain(|_, (at, _)| at.elapsed() < REMEASURE);
            }
            measured.insert(*owner, (Instant::now(), used));
        }
        let now = Timestamp::now().as_secs();
        let mut window = lock(&state.window);
        let address_used = address.map(|a| window.used(a, now));
        match quotas.check(OwnerFacts { used, new_owner, exempt }, address_used, incoming) {
            Ok(()) => {
                if let (Some(a), true) = (address, new_owner) {
                    window.record(a, now, incoming);
                }
                drop(window);
                if let Some(entry) = lock(&state.measured).get_mut(owner) {
                    entry.1 = entry.1.saturating_add(incoming);
                }
                PushDecision::Accept(acc)
            }
            Err(full) => {
                drop(window);
                self.metrics.quota_refused(full.scope());
                tracing::info!(owner = %owner, scope = full.scope(), reason = %full, "push refused by a quota");
                PushDecision::Reject(Rejection { reasons: vec![full.to_string()] })
            }
        }
    }
}
