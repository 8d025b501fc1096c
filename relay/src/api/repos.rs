//! Repositories on the hook API: the repository page's data (`GET /v1/repo/<npub>/<id>`, read
//! by `grasp-cgi`), the operator listing (`GET /v1/repos`), the orphan purge
//! (`POST /v1/repos/purge`), and the `grasp-relay repos` command that calls them.
//!
//! A repository directory is *served* when a stored announcement justifies it, *held* when only
//! an announcement waiting in the purgatory does, and *orphaned* otherwise. *Leftovers* are
//! directories the layout cannot name (`.tmp-*` of a creation or `.del-*` of a deletion cut short
//! by a crash, unparseable names, empty owner directories). A purge removes only what is still
//! an orphan or leftover when it runs, at least [`MIN_ORPHAN_AGE`] old (so a repository being
//! created right now is never taken), never while a push to it runs.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use grasp_state::contract::hook_api::{
    Leftover, PoolEntry, PurgeKept, PurgeRequest, PurgeResponse, RefView, RepoEntry, RepoInfo, RepoListing, RepoStatus,
    HOOK_API_VERSION, PATH_REPOS, PATH_REPOS_PURGE, PATH_REPO_PREFIX,
};
use grasp_state::names::identifier::{npub_of, parse_npub, validate_identifier, POOLS_DIR, PRS_DIR};
use grasp_state::nostr::nip34::{Announcement, KIND_ANNOUNCEMENT};
use grasp_state::purgatory::EntryKind;
use nostr::prelude::{Coordinate, Filter, Kind, Nip19Coordinate, PublicKey, RelayUrl, ToBech32};

use crate::grasp::locks::{PushLocks, RepoGuards, RepoLocks};
use crate::grasp::Grasp;
use grasp_state::names::host::PublicUrls;
use grasp_state::nostr::nip34::first_value;

/// Where a repository is shown with issues, patches and pull requests (`<naddr>` appended).
pub const WEB_CLIENT_BASE: &str = "https://gitworkshop.dev/";

/// Orphans and leftovers younger than this are never purged (they may be in the making).
pub const MIN_ORPHAN_AGE: Duration = Duration::from_secs(10 * 60);

/// The repository page's data for `owner`'s `identifier`; `None` when this server has no such
/// repository (no directory, or nothing stored or held names it).
pub async fn repo_info(grasp: &Grasp, owner: &PublicKey, identifier: &str) -> Option<RepoInfo> {
    let repo = grasp.repo_path(owner, identifier)?;
    if !repo.is_dir() {
        return None;
    }
    let filter = Filter::new().kind(Kind::Custom(KIND_ANNOUNCEMENT)).author(*owner).identifier(identifier);
    let stored = grasp.query(vec![filter]).await.into_iter().next();
    let (event, status) = match stored {
        Some(ev) => (ev, RepoStatus::Served),
        None => {
            let held = grasp.purgatory.announcement_events(identifier).into_iter().find(|e| e.pubkey == *owner).map(|e| (*e).clone());
            match held {
                Some(ev) => (ev, RepoStatus::Held),
                None => return None,
            }
        }
    };
    Announcement::from_event(&event).ok()?;
    let all = grasp.announcements(identifier).await;
    let set = grasp.maintainer_set(*owner, &all);
    let state = grasp.latest_stored_state(identifier, &set).await;
    let urls = PublicUrls::new(grasp.public_host());
    let npub = npub_of(owner);
    let coordinate = Coordinate::new(Kind::Custom(KIND_ANNOUNCEMENT), *owner).identifier(identifier);
    let relays = RelayUrl::parse(&urls.relay_url()).ok();
    let naddr = Nip19Coordinate::new(coordinate, relays).to_bech32().unwrap_or_default();
    let maintainers = set.iter().filter(|m| *m == owner).chain(set.iter().filter(|m| *m != owner)).map(npub_of).collect();
    let invited = set.invited().map(|(pk, _)| npub_of(pk)).collect();
    Some(RepoInfo {
        version: HOOK_API_VERSION,
        http_clone_url: urls.repo_http_url(&npub, identifier),
        nostr_clone_url: urls.repo_nostr_url(&npub, identifier),
        web_client_url: format!("{WEB_CLIENT_BASE}{naddr}"),
        naddr,
        npub,
        identifier: identifier.to_string(),
        status,
        name: first_value(&event, "name").map(str::to_string),
        description: first_value(&event, "description").map(str::to_string),
        maintainers,
        invited,
        web: event
            .tags
            .iter()
            .filter(|t| t.as_slice().first().map(String::as_str) == Some("web"))
            .flat_map(|t| t.as_slice().iter().skip(1).cloned())
            .collect(),
        default_branch: state.as_ref().and_then(|s| s.head.clone()),
        refs: state
            .as_ref()
            .map(|s| s.refs.iter().map(|(name, oid)| RefView { name: name.clone(), oid: oid.clone() }).collect())
            .unwrap_or_default(),
        state_created_at: state.as_ref().map(|s| s.created_at.as_secs()),
    })
}

/// The `GET` endpoints of this module: `Some(answer)` when `path` is one of them.
pub(super) async fn route_get(path: &str, grasp: &Grasp) -> Option<hyper::Response<crate::net::http::Body>> {
    use hyper::StatusCode;
    if path == PATH_REPOS {
        return Some(super::json(StatusCode::OK, &listing(grasp).await));
    }
    let rest = path.strip_prefix(PATH_REPO_PREFIX)?;
    let Some(repo) = grasp_state::names::identifier::parse_repo_url_path(&format!("/{rest}.git")).filter(|r| r.space.is_hosted()) else {
        return Some(super::error(StatusCode::BAD_REQUEST, "expected /v1/repo/<npub>/<percent-encoded identifier>"));
    };
    Some(match repo_info(grasp, &repo.owner, &repo.identifier).await {
        Some(info) => super::json(StatusCode::OK, &info),
        None => super::error(StatusCode::NOT_FOUND, "no such repository on this server"),
    })
}

/// `POST /v1/repos/purge` with its body.
pub(super) async fn route_purge(body: &[u8], grasp: &Grasp) -> hyper::Response<crate::net::http::Body> {
    match super::parse::<PurgeRequest>(body) {
        Ok(req) => super::json(hyper::StatusCode::OK, &purge(grasp, &req).await),
        Err(resp) => *resp,
    }
}

impl super::Versioned for PurgeRequest {
    fn version(&self) -> u32 {
        self.version
    }
}

/// Bytes of the files under `path` (symlinks not followed).
fn disk_usage(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path).map(|rd| rd.flatten().map(|e| disk_usage(&e.path())).sum()).unwrap_or(0)
}

fn subdirs(path: &Path) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(path)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// What justifies repositories: `(owner, identifier)` of stored and of held announcements.
pub struct Justified {
    pub stored: HashSet<(PublicKey, String)>,
    pub held: HashSet<(PublicKey, String)>,
}

impl Justified {
    pub async fn gather(grasp: &Grasp) -> Justified {
        let filter = Filter::new().kind(Kind::Custom(KIND_ANNOUNCEMENT));
        let stored = grasp
            .query(vec![filter])
            .await
            .iter()
            .filter_map(|ev| Announcement::from_event(ev).ok())
            .map(|a| (a.owner, a.identifier))
            .collect();
        let held = grasp
            .purgatory
            .listing()
            .entries
            .into_iter()
            .filter(|e| e.kind == EntryKind::Announcement && !e.soft_expired)
            .filter_map(|e| Some((PublicKey::from_hex(e.pubkey.as_deref()?).ok()?, e.identifier?)))
            .collect();
        Justified { stored, held }
    }

    fn status(&self, owner: &PublicKey, identifier: &str) -> RepoStatus {
        let key = (*owner, identifier.to_string());
        if self.stored.contains(&key) {
            RepoStatus::Served
        } else if self.held.contains(&key) {
            RepoStatus::Held
        } else {
            RepoStatus::Orphaned
        }
    }
}

/// Every directory under `git_root`, classified (blocking: walks the disk).
pub fn classify(git_root: &Path, justified: &Justified) -> RepoListing {
    let mut repos = Vec::new();
    let mut leftovers = Vec::new();
    let mut leftover = |rel: String, path: &Path, reason: &str| {
        leftovers.push(Leftover { path: rel, reason: reason.to_string(), size_bytes: disk_usage(path) });
    };
    let mut pools = Vec::new();
    for (owner_name, owner_dir) in subdirs(git_root) {
        if owner_name == PRS_DIR {
            classify_contributor_repos(&owner_dir, &mut repos, &mut leftover);
            continue;
        }
        if owner_name == POOLS_DIR {
            classify_pools(git_root, &owner_dir, &mut pools, &mut leftover);
            continue;
        }
        let Some(owner) = parse_npub(&owner_name) else {
            if owner_name != "lost+found" {
                leftover(owner_name, &owner_dir, "not an npub: no repository can live here");
            }
            continue;
        };
        let entries = subdirs(&owner_dir);
        let empty = std::fs::read_dir(&owner_dir).is_ok_and(|mut rd| rd.next().is_none());
        if empty {
            leftover(owner_name.clone(), &owner_dir, "empty owner directory");
        }
        for (name, path) in entries {
            let rel = format!("{owner_name}/{name}");
            if name.starts_with(".tmp-") {
                leftover(rel, &path, "repository creation cut short (crash)");
            } else if name.starts_with(".del-") {
                leftover(rel, &path, "repository deletion cut short (crash)");
            } else if let Some(identifier) = name.strip_suffix(".git").filter(|id| validate_identifier(id).is_ok()) {
                repos.push(RepoEntry {
                    owner: owner_name.clone(),
                    identifier: identifier.to_string(),
                    status: justified.status(&owner, identifier),
                    size_bytes: disk_usage(&path),
                    path: rel,
                    maintainers: Vec::new(),
                    invited: Vec::new(),
                });
            } else {
                leftover(rel, &path, "not a repository name (<identifier>.git)");
            }
        }
    }
    RepoListing { version: HOOK_API_VERSION, repos, leftovers, pools }
}

/// The object pools under `<git_root>/.pools` (docs/architecture.md, "Object pools"), each with
/// the number of repositories borrowing from it; crash leftovers there (`.tmp-*`, `.del-*`) are
/// leftovers like any other.
fn classify_pools(git_root: &Path, pools_dir: &Path, pools: &mut Vec<PoolEntry>, leftover: &mut impl FnMut(String, &Path, &str)) {
    let owners: Vec<PathBuf> = subdirs(git_root).into_iter().filter(|(name, _)| parse_npub(name).is_some()).map(|(_, p)| p).collect();
    for (name, path) in subdirs(pools_dir) {
        let rel = format!("{POOLS_DIR}/{name}");
        if name.starts_with(".tmp-") {
            leftover(rel, &path, "object pool creation cut short (crash)");
        } else if name.starts_with(".del-") {
            leftover(rel, &path, "object pool removal cut short (crash)");
        } else if let Some(identifier) = name.strip_suffix(".git").filter(|id| validate_identifier(id).is_ok()) {
            let members = owners.iter().filter(|o| crate::git::pools::is_member(&o.join(&name), identifier)).count();
            pools.push(PoolEntry { identifier: identifier.to_string(), members, size_bytes: disk_usage(&path), path: rel });
        } else {
            leftover(rel, &path, "not an object pool name (<identifier>.git)");
        }
    }
}

/// The GRASP-06 contributor repositories under `<git_root>/prs` (`prs_root`): listed as
/// [`RepoStatus::Contributions`], never orphans (the relay removes an empty one itself); anything
/// else there is a leftover.
fn classify_contributor_repos(prs_root: &Path, repos: &mut Vec<RepoEntry>, leftover: &mut impl FnMut(String, &Path, &str)) {
    for (owner_name, owner_dir) in subdirs(prs_root) {
        let rel_owner = format!("{PRS_DIR}/{owner_name}");
        if parse_npub(&owner_name).is_none() {
            leftover(rel_owner, &owner_dir, "not an npub: no contributor repository can live here");
            continue;
        }
        if std::fs::read_dir(&owner_dir).is_ok_and(|mut rd| rd.next().is_none()) {
            leftover(rel_owner.clone(), &owner_dir, "empty owner directory");
        }
        for (name, path) in subdirs(&owner_dir) {
            let rel = format!("{rel_owner}/{name}");
            match name.strip_suffix(".git").filter(|id| validate_identifier(id).is_ok()) {
                Some(identifier) if !name.starts_with(".tmp-") && !name.starts_with(".del-") => repos.push(RepoEntry {
                    owner: rel_owner.clone(),
                    identifier: identifier.to_string(),
                    status: RepoStatus::Contributions,
                    size_bytes: disk_usage(&path),
                    path: rel,
                    maintainers: Vec::new(),
                    invited: Vec::new(),
                }),
                _ => leftover(rel, &path, "not a contributor repository (<identifier>.git), or cut short by a crash"),
            }
        }
    }
}

/// `GET /v1/repos`: the classified directories, each served or held repository with its
/// confirmed maintainers and pending invitations (one read of each identifier's announcements).
pub async fn listing(grasp: &Grasp) -> RepoListing {
    let justified = Justified::gather(grasp).await;
    let root = grasp.git_root().to_path_buf();
    let mut listing = tokio::task::spawn_blocking(move || classify(&root, &justified))
        .await
        .unwrap_or(RepoListing { version: HOOK_API_VERSION, repos: Vec::new(), leftovers: Vec::new(), pools: Vec::new() });
    let mut by_identifier: std::collections::BTreeMap<String, Vec<&mut RepoEntry>> = std::collections::BTreeMap::new();
    for r in listing.repos.iter_mut().filter(|r| matches!(r.status, RepoStatus::Served | RepoStatus::Held)) {
        by_identifier.entry(r.identifier.clone()).or_default().push(r);
    }
    for (identifier, repos) in by_identifier {
        let all = grasp.announcements(&identifier).await;
        for r in repos {
            let Some(owner) = parse_npub(&r.owner) else { continue };
            let set = grasp.maintainer_set(owner, &all);
            r.maintainers = set.iter().map(npub_of).collect();
            r.invited = set.invited().map(|(pk, _)| npub_of(pk)).collect();
        }
    }
    listing
}

fn old_enough(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| SystemTime::now().duration_since(t).is_ok_and(|age| age >= MIN_ORPHAN_AGE))
}

/// How long a purge tries for a repository's locks (a push to it keeps it: try again later).
const PURGE_LOCK_WAIT: Duration = Duration::from_secs(2);

/// `POST /v1/repos/purge`: removes each requested path that is still an orphan or a leftover.
pub async fn purge(grasp: &Grasp, req: &PurgeRequest) -> PurgeResponse {
    let now = listing(grasp).await;
    let root = grasp.git_root().to_path_buf();
    let mut resp = PurgeResponse { version: HOOK_API_VERSION, removed: Vec::new(), kept: Vec::new() };
    for rel in &req.paths {
        let keep = |resp: &mut PurgeResponse, reason: &str| resp.kept.push(PurgeKept { path: rel.clone(), reason: reason.to_string() });
        let repo = now.repos.iter().find(|r| &r.path == rel);
        let is_leftover = now.leftovers.iter().any(|l| &l.path == rel);
        match repo {
            Some(r) if r.status != RepoStatus::Orphaned => {
                keep(&mut resp, &format!("{:?} now: an announcement justifies it", r.status).to_lowercase());
                continue;
            }
            None if !is_leftover => {
                keep(&mut resp, "not an orphan or leftover in the current listing");
                continue;
            }
            _ => {}
        }
        let path = root.join(rel);
        if !old_enough(&path) {
            keep(&mut resp, "younger than 10 minutes: it may be in the making; try again later");
            continue;
        }
        let shown = rel.clone();
        let result = remove_unless_pushing(&grasp.locks, path).await;
        match result {
            Ok(()) => {
                tracing::info!(path = %shown, "orphan purged");
                if let Some(r) = repo {
                    // What only it reached may leave its family's object pool.
                    crate::grasp::maintenance::after_family_refs_left(grasp, &r.identifier);
                }
                resp.removed.push(rel.clone());
            }
            Err(e) => {
                tracing::info!(path = %shown, reason = %e, "orphan not purged");
                keep(&mut resp, &e);
            }
        }
    }
    resp
}

/// Removes `path` under its push lock, then the relay's lock of it (the lock order, taken the
/// one way, [`RepoGuards`]), tried for [`PURGE_LOCK_WAIT`]: a push to it keeps it.
async fn remove_unless_pushing(locks: &RepoLocks, path: PathBuf) -> Result<(), String> {
    let guards = if path.is_dir() {
        Some(RepoGuards::acquire_within(locks, [path.clone()], PushLocks::Take, PURGE_LOCK_WAIT).await.map_err(|e| e.to_string())?)
    } else {
        None
    };
    let result = tokio::task::spawn_blocking(move || remove_aside(&path)).await;
    drop(guards);
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("purge task failed: {e}")),
    }
}

/// Removes `path` (a directory renamed aside first).
fn remove_aside(path: &Path) -> std::io::Result<()> {
    if !path.is_dir() {
        return std::fs::remove_file(path);
    }
    if std::fs::read_dir(path)?.next().is_none() {
        return std::fs::remove_dir(path);
    }
    let parent = path.parent().ok_or_else(|| std::io::Error::other("no parent directory"))?;
    let aside = parent.join(format!(".del-purge-{}", std::process::id()));
    let aside = (0..).map(|i| aside.with_extension(i.to_string())).find(|p| !p.exists()).unwrap_or(aside);
    std::fs::rename(path, &aside)?;
    // A repository made later on a reused inode never matches the ref cache's answers of this one.
    crate::git::ref_generation::bump(&aside);
    std::fs::remove_dir_all(&aside)
}

/// The relay running on `data_dir`, through the one hook API client (operator commands may wait
/// long: a purge removes directories).
fn operator_client(data_dir: &Path) -> Result<grasp_hooks::client::ApiClient> {
    grasp_hooks::client::ApiClient::from_data_dir(data_dir, Duration::from_secs(120))
}

fn human_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// The listing as a table; with `orphans_only`, only orphaned repositories and leftovers.
pub fn render_table(listing: &RepoListing, orphans_only: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "{:<13} {:>10}  {:<67} IDENTIFIER", "STATUS", "SIZE", "OWNER");
    let shown: Vec<&RepoEntry> =
        listing.repos.iter().filter(|r| !orphans_only || r.status == RepoStatus::Orphaned).collect();
    for r in &shown {
        let status = format!("{:?}", r.status).to_lowercase();
        let _ = writeln!(out, "{status:<13} {:>10}  {:<67} {}", human_size(r.size_bytes), r.owner, r.identifier);
        // Co-maintainers and invitations apart (the owner alone, the usual case, says nothing).
        let others: Vec<&String> = r.maintainers.iter().filter(|m| **m != r.owner).collect();
        if !others.is_empty() || !r.maintainers.contains(&r.owner) && matches!(r.status, RepoStatus::Served | RepoStatus::Held) {
            let shown: Vec<&str> = r.maintainers.iter().map(String::as_str).collect();
            let _ = writeln!(out, "{:<13} maintainers: {}", "", if shown.is_empty() { "none confirmed".to_string() } else { shown.join(", ") });
        }
        if !r.invited.is_empty() {
            let _ = writeln!(out, "{:<13} invited (not accepted): {}", "", r.invited.join(", "));
        }
    }
    if !orphans_only {
        for p in &listing.pools {
            let _ = writeln!(out, "{:<13} {:>10}  {:<67} {} ({} members)", "pool", human_size(p.size_bytes), POOLS_DIR, p.identifier, p.members);
        }
    }
    for l in &listing.leftovers {
        let _ = writeln!(out, "{:<13} {:>10}  {} ({})", "leftover", human_size(l.size_bytes), l.path, l.reason);
    }
    let count = |s: RepoStatus| listing.repos.iter().filter(|r| r.status == s).count();
    let contributions = match count(RepoStatus::Contributions) {
        0 => String::new(),
        n => format!("{n} contributor repositories (GRASP-06), "),
    };
    let _ = writeln!(
        out,
        "{} served, {} held, {} orphaned, {contributions}{} leftovers, {} object pools",
        count(RepoStatus::Served),
        count(RepoStatus::Held),
        count(RepoStatus::Orphaned),
        listing.leftovers.len(),
        listing.pools.len()
    );
    out
}

/// What `--purge` would remove: orphaned repositories and leftovers, as paths under the git root.
pub fn purge_candidates(listing: &RepoListing) -> Vec<String> {
    listing
        .repos
        .iter()
        .filter(|r| r.status == RepoStatus::Orphaned)
        .map(|r| r.path.clone())
        .chain(listing.leftovers.iter().map(|l| l.path.clone()))
        .collect()
}

/// `grasp-relay repos [--json] [--orphans] [--purge [--yes]]`.
pub fn run_command(data_dir: &Path, json: bool, orphans: bool, purge: bool, yes: bool) -> Result<()> {
    let body = operator_client(data_dir)?.get(PATH_REPOS)?;
    let listing: RepoListing = serde_json::from_str(&body).context("the relay's listing is not understood")?;
    if !purge {
        if json {
            println!("{body}");
        } else {
            print!("{}", render_table(&listing, orphans));
        }
        return Ok(());
    }
    let paths = purge_candidates(&listing);
    if paths.is_empty() {
        println!("nothing to purge: no orphaned repository or leftover directory");
        return Ok(());
    }
    if !yes {
        println!("would remove (under {}):", data_dir.join(grasp_state::contract::layout::GIT_DIR).display());
        for p in &paths {
            println!("  {p}");
        }
        println!("dry run: nothing removed. Run `grasp-relay repos --purge --yes` to remove them.");
        return Ok(());
    }
    let resp: PurgeResponse = operator_client(data_dir)?.post(PATH_REPOS_PURGE, &PurgeRequest { version: HOOK_API_VERSION, paths })?;
    if json {
        println!("{}", serde_json::to_string(&resp)?);
        return Ok(());
    }
    for p in &resp.removed {
        println!("removed {p}");
    }
    for k in &resp.kept {
        println!("kept {} ({})", k.path, k.reason);
    }
    println!("{} removed, {} kept", resp.removed.len(), resp.kept.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use grasp_state::contract::layout::PUSH_LOCK_FILE;
    use nostr::prelude::Keys;

    #[test]
    fn classifies_repos_and_leftovers() {
        let root = tempfile::tempdir().unwrap();
        let (a, b, c) = (Keys::generate().public_key(), Keys::generate().public_key(), Keys::generate().public_key());
        let mk = |owner: &PublicKey, name: &str| std::fs::create_dir_all(root.path().join(npub_of(owner)).join(name)).unwrap();
        mk(&a, "served.git");
        mk(&a, "held.git");
        mk(&b, "orphan.git");
        mk(&b, ".tmp-123");
        mk(&b, ".del-9");
        mk(&b, "junk");
        std::fs::create_dir_all(root.path().join(npub_of(&c))).unwrap();
        std::fs::create_dir_all(root.path().join("not-an-npub")).unwrap();
        std::fs::write(root.path().join(npub_of(&b)).join("orphan.git").join("HEAD"), "ref: x\n").unwrap();
        let justified = Justified {
            stored: [(a, "served".to_string())].into(),
            held: [(a, "held".to_string())].into(),
        };
        let l = classify(root.path(), &justified);
        let status = |id: &str| l.repos.iter().find(|r| r.identifier == id).unwrap().status;
        assert_eq!(status("served"), RepoStatus::Served);
        assert_eq!(status("held"), RepoStatus::Held);
        assert_eq!(status("orphan"), RepoStatus::Orphaned);
        assert_eq!(l.repos.iter().find(|r| r.identifier == "orphan").unwrap().size_bytes, 7);
        let left: Vec<&str> = l.leftovers.iter().map(|x| x.path.as_str()).collect();
        assert_eq!(left.len(), 5, "{left:?}");
        assert!(left.contains(&"not-an-npub"));
        assert!(left.iter().any(|p| p.ends_with("/.tmp-123")) && left.iter().any(|p| p.ends_with("/junk")));
        let candidates = purge_candidates(&l);
        assert_eq!(candidates.len(), 6);
        assert!(!candidates.iter().any(|p| p.ends_with("served.git") || p.ends_with("held.git")));
        let table = render_table(&l, true);
        assert!(table.contains("orphaned") && !table.contains("served  ") && table.contains("1 served, 1 held, 1 orphaned, 5 leftovers"), "{table}");
    }

    #[test]
    fn contributor_repositories_are_listed_never_purged() {
        let root = tempfile::tempdir().unwrap();
        let c = Keys::generate().public_key();
        let prs = root.path().join(PRS_DIR);
        std::fs::create_dir_all(prs.join(npub_of(&c)).join("proj.git")).unwrap();
        std::fs::create_dir_all(prs.join(npub_of(&c)).join(".tmp-1")).unwrap();
        std::fs::create_dir_all(prs.join("not-an-npub")).unwrap();
        let l = classify(root.path(), &Justified { stored: Default::default(), held: Default::default() });
        let entry = l.repos.iter().find(|r| r.identifier == "proj").unwrap();
        assert_eq!((entry.status, entry.owner.as_str()), (RepoStatus::Contributions, format!("{PRS_DIR}/{}", npub_of(&c)).as_str()));
        assert_eq!(entry.path, format!("{PRS_DIR}/{}/proj.git", npub_of(&c)));
        let left: Vec<&str> = l.leftovers.iter().map(|x| x.path.as_str()).collect();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(!purge_candidates(&l).iter().any(|p| p.ends_with("proj.git")), "a contributor repository is never an orphan");
        assert!(render_table(&l, false).contains("1 contributor repositories (GRASP-06)"));
    }

    #[test]
    fn object_pools_are_listed_with_their_members_and_never_purged() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (Keys::generate().public_key(), Keys::generate().public_key());
        for owner in [&a, &b] {
            let repo = root.path().join(npub_of(owner)).join("fam.git");
            std::fs::create_dir_all(repo.join("objects/info")).unwrap();
        }
        crate::git::pools::join(&root.path().join(npub_of(&a)).join("fam.git"), "fam").unwrap();
        std::fs::create_dir_all(root.path().join(".pools/fam.git/objects")).unwrap();
        std::fs::create_dir_all(root.path().join(".pools/.tmp-1")).unwrap();
        let justified = Justified { stored: [(a, "fam".to_string()), (b, "fam".to_string())].into(), held: Default::default() };
        let l = classify(root.path(), &justified);
        assert_eq!(l.pools.len(), 1);
        assert_eq!((l.pools[0].identifier.as_str(), l.pools[0].members, l.pools[0].path.as_str()), ("fam", 1, ".pools/fam.git"));
        let left: Vec<&str> = l.leftovers.iter().map(|x| x.path.as_str()).collect();
        assert_eq!(left, [".pools/.tmp-1"], "the pools directory is no leftover, a crashed creation in it is");
        assert!(!purge_candidates(&l).iter().any(|p| p == ".pools" || p.ends_with("fam.git")));
        assert!(render_table(&l, false).contains("1 object pools"));
    }

    #[tokio::test]
    async fn removal_waits_for_no_push() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("r.git");
        std::fs::create_dir_all(repo.join("objects")).unwrap();
        let lock = std::fs::File::create(repo.join(PUSH_LOCK_FILE)).unwrap();
        lock.lock().unwrap();
        let locks = RepoLocks::default();
        assert!(remove_unless_pushing(&locks, repo.clone()).await.unwrap_err().contains("push lock"));
        assert!(repo.exists());
        drop(lock);
        // The relay's own lock is taken after the push lock, never before (the lock order).
        let relay = locks.lock_within(&repo, Duration::ZERO).await.unwrap();
        let err = remove_unless_pushing(&locks, repo.clone()).await.unwrap_err();
        assert!(err.contains("repository lock"), "{err}");
        let file = std::fs::File::options().write(true).open(repo.join(PUSH_LOCK_FILE)).unwrap();
        assert!(file.try_lock().is_ok(), "the push lock is not kept while the relay's lock is busy");
        drop((file, relay));
        remove_unless_pushing(&locks, repo.clone()).await.unwrap();
        assert!(!repo.exists());
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
    }
}
