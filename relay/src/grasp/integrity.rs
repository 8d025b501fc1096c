//! The authorization-integrity pass (docs/protocol.md#maintainer-authority): every repository's
//! served refs checked against the newest state of its *confirmed* maintainers, and realigned
//! where an earlier rule (a listed key was a maintainer at once, without accepting) let someone
//! else's state move them. It runs at every startup (carried out, each change logged and
//! counted in `grasp_authority_realignments{reason="integrity"}`), and an operator can run it
//! alone: `grasp-relay authority` reports (a dry run), `--apply` carries it out.
//!
//! The decision is the release plan's alignment (`grasp_state::git::release::plan_alignment`): the
//! refs become exactly the newest authoritative state's, only when all its objects are here,
//! and never nothing: a repository without an authoritative state keeps its refs.

use std::time::Duration;

use grasp_state::contract::hook_api::{AuthorityFinding, AuthorityReport, HOOK_API_VERSION};
use grasp_state::nostr::nip34::{Announcement, KIND_ANNOUNCEMENT};
use grasp_state::names::refs::RefChange;
use grasp_state::git::release::{alignment, plan_alignment};
use nostr::prelude::{Filter, Kind, ToBech32};

use crate::git;
use crate::grasp::Grasp;

/// How long the pass waits for a repository a push keeps busy before reporting it unapplied.
const LOCK_WAIT: Duration = Duration::from_secs(2);

impl Grasp {
    /// Checks every repository of every announced identifier; with `apply`, realigns those
    /// whose refs are not their confirmed maintainers' newest state.
    pub async fn authority_integrity(&self, apply: bool) -> AuthorityReport {
        let mut identifiers: Vec<String> = self
            .query(vec![Filter::new().kind(Kind::Custom(KIND_ANNOUNCEMENT))])
            .await
            .iter()
            .filter_map(|ev| Announcement::from_event(ev).ok())
            .map(|a| a.identifier)
            .chain(self.purgatory.held_announcement_events().iter().filter_map(|ev| Announcement::from_event(ev).ok()).map(|a| a.identifier))
            .collect();
        identifiers.sort();
        identifiers.dedup();
        let mut report = AuthorityReport { version: HOOK_API_VERSION, checked: 0, findings: Vec::new() };
        for identifier in &identifiers {
            let all = self.announcements(identifier).await;
            for (owner, repo) in self.existing_repos(all.iter().map(|(a, _)| a.owner), identifier) {
                report.checked += 1;
                let set = self.maintainer_set(owner, &all);
                let Some(state) = self.latest_stored_state(identifier, &set).await else { continue };
                let path = repo.clone();
                let wanted: Vec<String> = state.refs.values().cloned().collect();
                let target = state.refs.clone();
                let facts = tokio::task::spawn_blocking(move || -> Result<_, git::GitError> {
                    // Refs from the files (no process); objects asked only where the refs differ.
                    let (refs, head) = git::read_refs_and_head(&path)?;
                    let missing: std::collections::BTreeSet<String> = if alignment(&refs, &target).is_empty() {
                        Default::default()
                    } else {
                        git::missing_objects(&path, &wanted)?.into_iter().collect()
                    };
                    Ok((refs, head, missing))
                })
                .await;
                let Ok(Ok((refs, head, missing))) = facts else { continue };
                let Some(alignment) = plan_alignment(&refs, head.as_deref(), &state, Some(&missing)) else { continue };
                if alignment.changes.is_empty() {
                    continue;
                }
                let shown = format!("{}/{identifier}", owner.to_bech32().unwrap_or_default());
                let mut finding = AuthorityFinding {
                    repo: shown.clone(),
                    state: state.event_id.to_hex(),
                    author: state.author.to_bech32().unwrap_or_default(),
                    changes: alignment.changes.iter().map(describe).collect(),
                    applied: false,
                };
                if apply {
                    // A busy repository is reported unapplied: its next push or start realigns it.
                    finding.applied = self.realign_within(&owner, identifier, &repo, LOCK_WAIT).await.is_some();
                    tracing::info!(repo = %shown, state = %state.event_id, author = %state.author, changes = ?finding.changes, applied = finding.applied, "authorization integrity: refs realigned to the confirmed maintainers' newest state");
                }
                report.findings.push(finding);
            }
        }
        let applied = report.findings.iter().filter(|f| f.applied).count();
        self.metrics.integrity_realigned(applied);
        tracing::info!(checked = report.checked, found = report.findings.len(), applied, dry_run = !apply, "authorization-integrity pass done");
        report
    }
}

/// One ref change as a report line.
fn describe(change: &RefChange) -> String {
    match change {
        RefChange::Set { name, old, new } if old == grasp_state::names::refs::ZERO_OID => format!("{name} created at {}", short(new)),
        RefChange::Set { name, old, new } => format!("{name} {} -> {}", short(old), short(new)),
        RefChange::Delete { name, old } => format!("{name} {} deleted", short(old)),
    }
}

fn short(oid: &str) -> &str {
    &oid[..oid.len().min(12)]
}
