//! Object pools on disk (docs/architecture.md, "Object pools"): one bare repository per
//! identifier family, `<git_root>/.pools/<identifier>.git` (built only by
//! `RepoLayout::pool_path`), whose objects the family's repositories borrow through
//! `objects/info/alternates`.
//!
//! The git work, blocking or under tokio with a deadline; what enters a pool and what a gc keeps
//! is decided in `grasp_state::git::pool`, who may write when (the pool lock, the members' locks) in
//! `crate::grasp::pools`.
//!
//! - [`create_pool`]: `git init --bare` aside, configured (no auto gc, no reflogs, bitmaps),
//!   renamed in.
//! - [`join`]: a repository's alternates file names the pool (written whole, atomically).
//! - [`promote`]: a pack of what a member's entering refs reach and the pool lacks, written
//!   into the pool by `git pack-objects --revs --local` run in the member, then the pool's refs.
//! - [`dedupe`]: `git repack -A -d -l` in a member: its copies of objects the pool has go.
//! - [`repack_pool`]: geometric repack with a multi-pack-index bitmap, or a full `-A` repack
//!   before a prune; [`prune_pool`]: `git prune` keeping a list of objects.
//! - [`remove_pool`]: a pool nobody borrows from, renamed aside and deleted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use grasp_state::contract::atomic_file::write_atomic;
use grasp_state::names::identifier::{pool_alternate, RepoLayout};
use grasp_state::git::pool::Promotion;

use crate::git::build::{append_config, build_aside, io_err, unique_name, RepoError};
use crate::git::{GitCommand, GitError};

/// Longest a repack or prune of a pool, or a dedupe of a member, may take before it is killed.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The settings of a pool, appended to the `config` `git init` wrote: the relay runs its
/// maintenance (no auto gc), no reflog keeps anything alive, and repacks write bitmaps (clones
/// of every member use them).
const POOL_CONFIG: &str = "[gc]\n\tauto = 0\n[core]\n\tlogAllRefUpdates = false\n[repack]\n\twriteBitmaps = true\n";

/// The alternates file of a repository.
fn alternates_file(repo: &Path) -> PathBuf {
    repo.join("objects").join("info").join("alternates")
}

/// Creates the pool of `identifier` if it does not exist, atomically (built in
/// `.pools/.tmp-<unique>`, renamed in); returns its path. The caller holds the pool lock.
pub fn create_pool(layout: &RepoLayout, identifier: &str) -> Result<PathBuf, RepoError> {
    let path = layout.pool_path(identifier)?;
    if path.is_dir() {
        return Ok(path);
    }
    build_aside(&path, |tmp| {
        GitCommand::without_repo().args(["init", "--bare", "--quiet", "--template="]).arg(tmp).run()?;
        append_config(tmp, POOL_CONFIG)
    })?;
    Ok(path)
}

/// Whether `repo` borrows from the pool of `identifier` (its alternates file is exactly the
/// line [`join`] writes).
pub fn is_member(repo: &Path, identifier: &str) -> bool {
    std::fs::read_to_string(alternates_file(repo)).is_ok_and(|text| text.trim_end_matches('\n') == pool_alternate(identifier))
}

/// Whether `repo` borrows objects from anywhere (has a non-empty alternates file).
pub fn borrows(repo: &Path) -> bool {
    std::fs::metadata(alternates_file(repo)).is_ok_and(|m| m.len() > 0)
}

/// Whether `repo` has objects of its own (a pack, or a loose object): cheap, without git.
pub fn has_local_objects(repo: &Path) -> bool {
    let objects = repo.join("objects");
    let packed = std::fs::read_dir(objects.join("pack"))
        .is_ok_and(|rd| rd.flatten().any(|e| e.path().extension().is_some_and(|x| x == "pack")));
    packed
        || std::fs::read_dir(&objects).is_ok_and(|rd| {
            rd.flatten().any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.len() == 2
                    && name.bytes().all(|b| b.is_ascii_hexdigit())
                    && std::fs::read_dir(e.path()).is_ok_and(|mut inner| inner.next().is_some())
            })
        })
}

/// Makes `repo` borrow the objects of the pool of `identifier`: its alternates file is
/// replaced whole by the one line (`grasp_state::names::identifier::pool_alternate`), atomically and
/// durably. Returns whether it was written (false: it was a member already). The caller holds
/// the pool lock.
pub fn join(repo: &Path, identifier: &str) -> std::io::Result<bool> {
    if is_member(repo, identifier) {
        return Ok(false);
    }
    let file = alternates_file(repo);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    write_atomic(&file, format!("{}\n", pool_alternate(identifier)).as_bytes(), None)?;
    Ok(true)
}

/// What a promotion wrote into the pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Promoted {
    /// Objects in the pack it added (0: none added).
    pub objects: u64,
    /// Bytes of that pack.
    pub bytes: u64,
}

/// Carries out `plan` for `member` into `pool`: packs what the plan's tips reach and the pool
/// lacks (`git pack-objects --revs --local --delta-base-offset`, run in the member, excluding
/// what the pool's refs reach; objects the pool already holds are left out by `--local`), then
/// applies the pool's ref changes in one compare-and-swap transaction. git writes the pack beside
/// the member, syncs it and links it into the pool's `objects/pack` with its index last, so no
/// reader sees an index without its pack; an empty pack is removed again. The caller holds the
/// member's repository lock and the pool lock.
pub fn promote(member: &Path, pool: &Path, plan: &Promotion) -> Result<Promoted, GitError> {
    let mut promoted = Promoted::default();
    if !plan.pack.is_empty() {
        let mut input: String = plan.pack.iter().map(|oid| format!("{oid}\n")).collect();
        if !plan.exclude.is_empty() {
            input.push_str("--not\n");
            input.extend(plan.exclude.iter().map(|oid| format!("{oid}\n")));
        }
        let base = pool.join("objects").join("pack").join("pack");
        let out = GitCommand::in_repo(member)
            .args(["pack-objects", "--revs", "--local", "--delta-base-offset", "-q"])
            .arg(&base)
            .stdin(input)
            .run()?;
        let name = String::from_utf8_lossy(&out).trim().to_string();
        let pack = |ext: &str| pool.join("objects").join("pack").join(format!("pack-{name}.{ext}"));
        match crate::git::objects::pack_object_count(&pack("idx")) {
            Some(0) => {
                // Nothing the pool lacked: no empty pack left behind (index first).
                for ext in ["idx", "rev", "pack"] {
                    let _ = std::fs::remove_file(pack(ext));
                }
            }
            Some(n) => {
                promoted.objects = n;
                promoted.bytes = std::fs::metadata(pack("pack")).map_or(0, |m| m.len());
            }
            None => {}
        }
    }
    crate::git::update_refs(pool, &plan.changes)?;
    Ok(promoted)
}

/// Drops a member's own copies of objects its pool holds: `git repack -A -d -l` (`-l` leaves
/// out of the new pack every object found in an alternate; `-d` deletes the old packs and, with
/// `prune-packed`, the loose objects that are now in a pack, the pool's included; unreachable
/// objects the pool lacks become loose and follow the member's own prune). Never writes a bitmap
/// (a member's pack is not closed under reachability). Writes only in the member.
pub async fn dedupe(member: &Path) -> Result<(), GitError> {
    GitCommand::in_repo(member)
        .config("repack.writeBitmaps", false)
        .args(["repack", "-A", "-d", "-l", "-q"])
        .run_async(RUN_TIMEOUT)
        .await
        .map(|_| ())
}

/// How a pool is repacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repack {
    /// After promotions: `--geometric=2` (whole packs rolled together, nothing dropped) with a
    /// multi-pack-index and its bitmap.
    Geometric,
    /// Before a prune: everything the pool's refs reach in one pack (with its bitmap), every
    /// other object loose (`-A`), so the prune can reclaim it; nothing is deleted.
    Full,
}

/// Repacks `pool` (see [`Repack`]); runs beside promotions (git repacks beside writers).
pub async fn repack_pool(pool: &Path, how: Repack) -> Result<(), GitError> {
    let args: &[&str] = match how {
        Repack::Geometric => &["repack", "--geometric=2", "-d", "--write-midx", "--write-bitmap-index", "-q"],
        Repack::Full => &["repack", "-A", "-d", "--write-midx", "--write-bitmap-index", "-q"],
    };
    GitCommand::in_repo(pool).args(args).run_async(RUN_TIMEOUT).await.map(|_| ())
}

/// The file listing the objects a prune keeps, inside the repository for the time of the run.
pub const KEEP_LIST: &str = "grasp-keep-objects";

/// `git prune --expire=now` in `pool`: drops the loose objects its refs do not reach, except
/// everything `keep` (objects of the pool: git's `gc.recentObjectsHook` lists them; git looks at
/// that list only for objects of the repository's own store) and `heads` (objects elsewhere,
/// named on the command line) reach. `lent`: object directories (a
/// `GIT_ALTERNATE_OBJECT_DIRECTORIES` value) holding `heads`, which the walk may read (git prune
/// deletes only in the pool's own object directory). The caller holds every member's locks and
/// the pool lock.
pub async fn prune_pool(pool: &Path, keep: &[String], heads: &[String], lent: Option<&str>) -> Result<(), GitError> {
    let list = pool.join(KEEP_LIST);
    let text: String = keep.iter().map(|oid| format!("{oid}\n")).collect();
    std::fs::write(&list, text).map_err(|e| GitError::Spawn(std::io::Error::new(e.kind(), format!("writing {}: {e}", list.display()))))?;
    let hook = format!("cat '{}'", list.display().to_string().replace('\'', "'\\''"));
    let mut command = GitCommand::in_repo(pool);
    if let Some(lent) = lent {
        command = command.env("GIT_ALTERNATE_OBJECT_DIRECTORIES", lent);
    }
    let result = command
        .config("gc.recentObjectsHook", hook)
        .args(["prune", "--expire=now", "--"])
        .args(heads)
        .run_async(RUN_TIMEOUT)
        .await
        .map(|_| ());
    let _ = std::fs::remove_file(&list);
    result
}

/// Removes the pool of `identifier` (renamed aside first, so it disappears at once). The
/// caller holds the pool lock and made sure no repository borrows from it.
pub fn remove_pool(layout: &RepoLayout, identifier: &str) -> Result<bool, RepoError> {
    let path = layout.pool_path(identifier)?;
    let aside = layout.pools_dir().join(unique_name(".del-"));
    match std::fs::rename(&path, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err("moving aside", &path)(e)),
    }
    std::fs::remove_dir_all(&aside).map_err(io_err("removing", &aside))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::{missing_objects, read_refs, test_commit, test_git};
    use grasp_state::git::pool::{plan_promotion, Released};

    /// A layout with one owner's repository holding `main` (two commits) and a staged ref;
    /// returns (tmp, layout, repo, [first, second, staged]).
    fn fixture() -> (tempfile::TempDir, RepoLayout, PathBuf, Vec<String>) {
        let tmp = tempfile::tempdir().unwrap();
        let layout = RepoLayout::new(tmp.path().join("git"));
        let owner = nostr::prelude::Keys::generate().public_key();
        let repo = crate::git::repos::create_bare_repo(&layout, &owner, "fam", &tmp.path().join("hooks")).unwrap();
        let work = tmp.path().join("w");
        test_git(tmp.path(), &["init", "-q", work.to_str().unwrap()]);
        let first = test_commit(&work, "a");
        let second = test_commit(&work, "b");
        test_git(&work, &["push", "-q", repo.to_str().unwrap(), "HEAD:refs/heads/main"]);
        let staged = test_commit(&work, "c");
        test_git(&work, &["push", "-q", repo.to_str().unwrap(), &format!("HEAD:refs/nostr/{}", "1".repeat(64))]);
        (tmp, layout, repo, vec![first, second, staged])
    }

    fn released_main(oid: &str) -> Released {
        let state = grasp_state::nostr::nip34::RepoState {
            event_id: nostr::prelude::EventId::from_slice(&[1; 32]).unwrap(),
            author: nostr::prelude::Keys::generate().public_key(),
            identifier: "fam".into(),
            refs: [("refs/heads/main".to_string(), oid.to_string())].into(),
            head: None,
            created_at: nostr::prelude::Timestamp::from_secs(1),
        };
        Released::new([&state], [])
    }

    fn local_objects(repo: &Path) -> u64 {
        let out = test_git(repo, &["count-objects", "-v"]);
        out.lines()
            .filter_map(|l| l.split_once(": "))
            .filter(|(k, _)| *k == "count" || *k == "in-pack")
            .map(|(_, v)| v.parse::<u64>().unwrap())
            .sum()
    }

    #[tokio::test]
    async fn released_objects_move_to_the_pool_and_staged_ones_stay() {
        let (_tmp, layout, repo, c) = fixture();
        let pool = create_pool(&layout, "fam").unwrap();
        assert_eq!(create_pool(&layout, "fam").unwrap(), pool, "idempotent");
        assert!(join(&repo, "fam").unwrap());
        assert!(!join(&repo, "fam").unwrap(), "already a member");
        assert!(is_member(&repo, "fam") && borrows(&repo));
        let plan = plan_promotion("npub1x", &read_refs(&repo).unwrap(), &released_main(&c[1]), &read_refs(&pool).unwrap()).unwrap();
        let promoted = promote(&repo, &pool, &plan).unwrap();
        assert_eq!(promoted.objects, 6, "two commits, two trees, two blobs");
        assert_eq!(read_refs(&pool).unwrap(), [("refs/members/npub1x/heads/main".to_string(), c[1].clone())].into());
        assert!(missing_objects(&pool, &c[..2]).unwrap().is_empty());
        assert_eq!(missing_objects(&pool, &c[2..]).unwrap(), c[2..], "the staged commit never enters the pool");
        // Promoting again adds nothing (no empty pack either).
        let packs = || std::fs::read_dir(pool.join("objects/pack")).unwrap().count();
        let before = packs();
        let plan = plan_promotion("npub1x", &read_refs(&repo).unwrap(), &released_main(&c[1]), &read_refs(&pool).unwrap()).unwrap();
        assert!(plan.pack.is_empty());
        assert_eq!(promote(&repo, &pool, &plan).unwrap(), Promoted::default());
        assert_eq!(packs(), before);

        // The dedupe keeps only the staged objects (commit, tree, blob) in the member.
        assert!(local_objects(&repo) >= 9 && has_local_objects(&repo));
        dedupe(&repo).await.unwrap();
        assert_eq!(local_objects(&repo), 3);
        test_git(&repo, &["fsck", "--connectivity-only", "--no-dangling"]);
        assert!(missing_objects(&repo, &c).unwrap().is_empty(), "everything is still readable in the member");

        // Pool repacks drop nothing; a prune drops what no ref and no keep-list entry reaches.
        repack_pool(&pool, Repack::Geometric).await.unwrap();
        assert!(std::fs::read_dir(pool.join("objects/pack")).unwrap().flatten().any(|e| e.file_name().to_string_lossy().ends_with(".bitmap")));
        crate::git::update_refs(&pool, &[grasp_state::names::refs::RefChange::Delete { name: "refs/members/npub1x/heads/main".into(), old: c[1].clone() }]).unwrap();
        repack_pool(&pool, Repack::Full).await.unwrap();
        assert!(missing_objects(&pool, &c[..2]).unwrap().is_empty(), "a full repack loosens, never deletes");
        // A staged commit in the member sits on that history: named as a head, with the member's
        // objects lent to the walk, it keeps its ancestors in the pool.
        let lent = format!("\"{}\"", repo.join("objects").display());
        prune_pool(&pool, &[], std::slice::from_ref(&c[2]), Some(&lent)).await.unwrap();
        assert!(missing_objects(&pool, &c[..2]).unwrap().is_empty(), "a member's staged commit keeps its history");
        prune_pool(&pool, std::slice::from_ref(&c[0]), &[], None).await.unwrap();
        assert!(missing_objects(&pool, &c[..1]).unwrap().is_empty(), "kept through the list");
        assert_eq!(missing_objects(&pool, &c[1..2]).unwrap(), c[1..2], "pruned");
        assert!(!pool.join(KEEP_LIST).exists());
        assert!(remove_pool(&layout, "fam").unwrap());
        assert!(!pool.exists() && !remove_pool(&layout, "fam").unwrap());
    }
}
