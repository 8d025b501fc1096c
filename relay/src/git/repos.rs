//! Bare repositories on disk: creation, deletion and read-only queries, by running `git`.
//!
//! All functions block (they run `git` through [`crate::git::runner`] and touch the file system); call them from
//! `tokio::task::spawn_blocking`. Paths come from [`RepoLayout::repo_path`] only.
//!
//! Creation is atomic: the repository is initialised and configured in
//! `<git_root>/<npub>/.tmp-<unique>` and renamed into place, so nobody (git http-backend, the
//! hooks) ever sees a half-made repository. Temporary and deleted directories never end in `.git`,
//! so they can never be mistaken for a repository by [`RepoLayout::locate`] or a URL.

use std::path::{Path, PathBuf};

use grasp_state::names::identifier::{RepoLayout, RepoSpace};
use nostr::key::PublicKey;

use grasp_state::names::identifier::GRASP_GIT_CONFIG;

use crate::git::build::{append_config, build_aside, io_err, unique_name};
pub use crate::git::build::RepoError;
use crate::git::GitCommand;

/// Creates `<git_root>/<npub>/<identifier>.git` as a configured bare repository, atomically.
/// If it already exists, returns its path without touching it.
pub fn create_bare_repo(
    layout: &RepoLayout,
    owner: &PublicKey,
    identifier: &str,
    hooks_dir: &Path,
) -> Result<PathBuf, RepoError> {
    create_repo(layout, RepoSpace::Hosted, owner, identifier, hooks_dir, false).map(|(path, _)| path)
}

/// [`create_bare_repo`] in `space` (a GRASP-06 contributor repository is made the same way,
/// under `<git_root>/prs/`), joining the identifier family's object pool when `join_pool` (a
/// hosted repository only; the caller holds the pool lock and saw the pool exist;
/// docs/architecture.md, "Object pools"): the alternates file is written before the repository
/// is renamed in, so it is a member from its first moment. Returns its path and whether this call
/// made it.
pub fn create_repo(
    layout: &RepoLayout,
    space: RepoSpace,
    owner: &PublicKey,
    identifier: &str,
    hooks_dir: &Path,
    join_pool: bool,
) -> Result<(PathBuf, bool), RepoError> {
    let path = layout.repo_path_in(space, owner, identifier)?;
    if path.is_dir() {
        return Ok((path, false));
    }
    let created = build_aside(&path, |tmp| {
        init_configured(tmp, hooks_dir)?;
        if join_pool && space == RepoSpace::Hosted {
            crate::git::pools::join(tmp, identifier).map_err(io_err("joining the object pool of", tmp))?;
        }
        Ok(())
    })?;
    Ok((path, created))
}

/// `git init --bare` with no template (an empty `--template=`) and `HEAD` where git puts it
/// (clients that clone an empty repository create their first branch themselves, so an empty
/// repository's `HEAD` must not name one: docs/protocol.md#release-and-alignment): only what git
/// needs (`HEAD`, `config`, `objects/`, `refs/`), none of the sample hooks, `description` and
/// `info/exclude` git's default template copies, plus the empty push lock file
/// (`grasp_state::contract::layout::PUSH_LOCK_FILE`), made here rather than by the first push (a file
/// created is one less in every push's path), so a held announcement costs about 36 kB and 10
/// inodes. The GRASP settings ([`GRASP_GIT_CONFIG`], `core.hooksPath`) are appended to the `config` git
/// wrote in one atomic write (`grasp_state::names::identifier::grasp_config_text`), not one `git
/// config` process each (an announcement's repository then costs one process, not eight); a
/// hooks path that cannot be written that way is set by `git config`.
fn init_configured(dir: &Path, hooks_dir: &Path) -> Result<(), RepoError> {
    GitCommand::without_repo().args(["init", "--bare", "--quiet", "--template="]).arg(dir).run()?;
    let hooks = hooks_dir.to_str().ok_or_else(|| RepoError::Io {
        what: "hooks directory is not UTF-8:",
        path: hooks_dir.to_path_buf(),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    let lock = dir.join(grasp_state::contract::layout::PUSH_LOCK_FILE);
    std::fs::File::create_new(&lock).map_err(io_err("creating", &lock))?;
    if let Some(section) = grasp_state::names::identifier::grasp_config_text(hooks) {
        return append_config(dir, &section);
    }
    for (key, value) in GRASP_GIT_CONFIG {
        GitCommand::in_repo(dir).args(["config", key, value]).run()?;
    }
    GitCommand::in_repo(dir).args(["config", "core.hooksPath", hooks]).run()?;
    Ok(())
}

/// Removes a repository: renamed aside first (so it disappears at once), then deleted.
/// Returns whether it existed.
pub fn delete_repo(
    layout: &RepoLayout,
    owner: &PublicKey,
    identifier: &str,
) -> Result<bool, RepoError> {
    delete_repo_in(layout, RepoSpace::Hosted, owner, identifier)
}

/// [`delete_repo`] in `space`.
pub fn delete_repo_in(
    layout: &RepoLayout,
    space: RepoSpace,
    owner: &PublicKey,
    identifier: &str,
) -> Result<bool, RepoError> {
    let path = layout.repo_path_in(space, owner, identifier)?;
    let aside = layout.owner_dir_in(space, owner).join(unique_name(".del-"));
    match std::fs::rename(&path, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err("moving aside", &path)(e)),
    }
    // A repository made later on a reused inode never matches the ref cache's answers of this one.
    super::ref_generation::bump(&aside);
    std::fs::remove_dir_all(&aside).map_err(io_err("removing", &aside))?;
    remove_owner_dir_if_empty_in(layout, space, owner);
    Ok(true)
}

/// Removes `<git_root>/<npub>` when no repository (or anything else) is left in it. A repository
/// created meanwhile keeps it: removing a non-empty directory fails, and creation recreates it.
pub fn remove_owner_dir_if_empty(layout: &RepoLayout, owner: &PublicKey) {
    remove_owner_dir_if_empty_in(layout, RepoSpace::Hosted, owner)
}

/// [`remove_owner_dir_if_empty`] in `space`.
pub fn remove_owner_dir_if_empty_in(layout: &RepoLayout, space: RepoSpace, owner: &PublicKey) {
    let dir = layout.owner_dir_in(space, owner);
    match std::fs::remove_dir(&dir) {
        Ok(()) => tracing::debug!(dir = %dir.display(), "removed empty owner directory"),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::DirectoryNotEmpty) => {}
        Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "could not remove empty owner directory"),
    }
}

/// All refs of `repo` (not `HEAD`): refname -> object id. One implementation, in [`crate::git`].
pub use crate::git::read_refs;

/// Prefix of the quarantine directories `git receive-pack` writes a push's objects into before
/// its hooks accept it.
pub const QUARANTINE_PREFIX: &str = "tmp_objdir-incoming-";

/// Name prefix of background sync's quarantine directories inside `<repo>/objects` (made by
/// `crate::sync::quarantine`): swept while the relay runs only at startup.
pub const SYNC_QUARANTINE_PREFIX: &str = "tmp_objdir-incoming-grasp-sync-";

/// Every repository directory under `git_root`, of both spaces: `<npub>/<identifier>.git` and
/// `prs/<npub>/<identifier>.git` (names checked only as far as ending in `.git`; a crash's
/// `.tmp-*` and `.del-*` never do). The one walk of the repositories on disk.
pub fn repo_dirs(git_root: &Path) -> Vec<PathBuf> {
    let mut dirs = repo_dirs_in(git_root);
    dirs.extend(repo_dirs_in(&git_root.join(grasp_state::names::identifier::PRS_DIR)));
    dirs
}

/// The repository directories of one space's root (`RepoLayout::space_root`):
/// `<root>/<owner>/<name>.git`, the contributor space's directory and the object pools
/// (`.pools`, no one's repositories) left out of the hosted one.
pub fn repo_dirs_in(root: &Path) -> Vec<PathBuf> {
    use grasp_state::names::identifier::{POOLS_DIR, PRS_DIR};
    subdirs(root)
        .into_iter()
        .filter(|owner| owner.file_name().is_some_and(|n| n != PRS_DIR && n != POOLS_DIR))
        .flat_map(|owner| subdirs(&owner))
        .filter(|repo| repo.extension().is_some_and(|e| e == "git"))
        .collect()
}

/// The repository directories of one owner's directory (`<root>/<owner>/<name>.git`).
pub fn repo_dirs_in_owner(owner_dir: &Path) -> Vec<PathBuf> {
    subdirs(owner_dir).into_iter().filter(|repo| repo.extension().is_some_and(|e| e == "git")).collect()
}

/// Removes push quarantines idle for `older_than` or more from every repository under
/// `git_root`. A receive-pack killed mid-push (the relay or the web server died) leaves its
/// quarantine behind: invisible to git, but as large as the push. A live push writes into its
/// quarantine, and one that sends nothing for the git idle timeout is ended by the relay (or by
/// grasp-cgi behind nginx), so a quarantine untouched for that long belongs to no live push.
/// With `Sweep::Startup`, background sync's quarantines go too (no sync runs yet); while the
/// relay runs they are left alone (a live fetch may wait on a slow peer without writing, and
/// holds no lock; it removes its own). Returns how many were removed.
pub fn remove_stale_quarantines(git_root: &Path, older_than: std::time::Duration, sweep: Sweep) -> usize {
    repo_dirs(git_root).iter().map(|repo| remove_quarantines_in(repo, older_than, sweep)).sum()
}

/// When a quarantine sweep runs, which decides whether background sync's quarantines are fair
/// game.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// Before background sync starts: every abandoned quarantine.
    Startup,
    /// While the relay runs: push quarantines only.
    Running,
}

/// Removes the push quarantines of `repo` idle for `older_than` or more (`Duration::ZERO`: all
/// of them, for a caller holding the repository's push lock, under which no push runs); see
/// [`Sweep`] for background sync's.
pub fn remove_quarantines_in(repo: &Path, older_than: std::time::Duration, sweep: Sweep) -> usize {
    let now = std::time::SystemTime::now();
    let mut removed = 0;
    for tmp in subdirs(&repo.join("objects")) {
        let name = tmp.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let is_quarantine = name.starts_with(QUARANTINE_PREFIX)
            && (sweep == Sweep::Startup || !name.starts_with(SYNC_QUARANTINE_PREFIX));
        if !is_quarantine || last_activity(&tmp).is_some_and(|t| now.duration_since(t).unwrap_or_default() < older_than) {
            continue;
        }
        match std::fs::remove_dir_all(&tmp) {
            Ok(()) => {
                tracing::info!(path = %tmp.display(), "removed an abandoned push quarantine");
                removed += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %tmp.display(), error = %e, "cannot remove an abandoned push quarantine"),
        }
    }
    removed
}

fn subdirs(p: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(p)
        .map(|rd| rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// The newest modification time in a quarantine: the directory, its entries, and theirs (a
/// receiving push writes its pack into `pack/`, loose objects into `xx/`).
fn last_activity(dir: &Path) -> Option<std::time::SystemTime> {
    let mtime = |p: &Path| std::fs::symlink_metadata(p).and_then(|m| m.modified()).ok();
    let mut newest = mtime(dir);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        newest = newest.max(mtime(&path));
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            for inner in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                newest = newest.max(mtime(&inner.path()));
            }
        }
    }
    newest
}

#[cfg(test)]
mod tests {
    #[test]
    fn stale_quarantines_are_removed_fresh_ones_kept() {
        let root = tempfile::tempdir().unwrap();
        let objects = root.path().join("npub1x").join("r.git").join("objects");
        let old = objects.join("tmp_objdir-incoming-old");
        let fresh = objects.join("tmp_objdir-incoming-new");
        let busy = objects.join("tmp_objdir-incoming-busy");
        let pack = objects.join("pack");
        for d in [&old, &fresh, &busy, &pack] {
            std::fs::create_dir_all(d.join("pack")).unwrap();
        }
        std::fs::write(busy.join("pack").join("tmp_pack_x"), b"PACK").unwrap();
        let minute_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
        for d in [&old, &old.join("pack"), &pack, &busy, &busy.join("pack")] {
            std::fs::File::open(d).unwrap().set_modified(minute_ago).unwrap();
        }
        // An old quarantine whose pack is still being written belongs to a live push.
        // A background sync's fetch may wait without writing: only a startup sweep removes it.
        let sync = objects.join("tmp_objdir-incoming-grasp-sync-1");
        std::fs::create_dir_all(&sync).unwrap();
        std::fs::File::open(&sync).unwrap().set_modified(minute_ago).unwrap();
        let removed = super::remove_stale_quarantines(root.path(), std::time::Duration::from_secs(60), Sweep::Running);
        assert_eq!(removed, 1);
        assert!(!old.exists() && fresh.exists() && busy.exists() && pack.exists() && sync.exists());
        // Under the push lock every push quarantine is abandoned.
        let repo = root.path().join("npub1x").join("r.git");
        assert_eq!(super::remove_quarantines_in(&repo, std::time::Duration::ZERO, Sweep::Running), 2);
        assert!(pack.exists() && sync.exists());
        assert_eq!(super::remove_stale_quarantines(root.path(), std::time::Duration::from_secs(60), Sweep::Startup), 1);
        assert!(!sync.exists());
    }

    #[test]
    fn repositories_of_both_spaces_are_walked_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        for dir in ["npub1a/r.git", "npub1a/.tmp-1", "npub1b/s.git", "prs/npub1c/t.git", "prs/npub1c/.del-2", "lost+found"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        let mut found: Vec<String> =
            super::repo_dirs(root.path()).iter().map(|p| p.strip_prefix(root.path()).unwrap().display().to_string()).collect();
        found.sort();
        assert_eq!(found, ["npub1a/r.git", "npub1b/s.git", "prs/npub1c/t.git"]);
    }

    use super::*;

    fn owner() -> PublicKey {
        PublicKey::from_hex("79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798")
            .unwrap()
    }

    fn config(repo: &Path, key: &str) -> String {
        String::from_utf8(GitCommand::in_repo(repo).args(["config", "--get", key]).run().unwrap())
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn creates_configured_repo_atomically_and_idempotently() {
        let root = tempfile::tempdir().unwrap();
        let layout = RepoLayout::new(root.path());
        let hooks = root.path().join("hooks");
        let path = create_bare_repo(&layout, &owner(), "my repo", &hooks).unwrap();
        assert_eq!(path, layout.repo_path(&owner(), "my repo").unwrap());
        // HEAD where a plain `git init --bare` puts it: no branch chosen for the clients.
        let plain = root.path().join("plain.git");
        GitCommand::without_repo().args(["init", "--bare", "--quiet"]).arg(&plain).run().unwrap();
        assert_eq!(std::fs::read_to_string(path.join("HEAD")).unwrap(), std::fs::read_to_string(plain.join("HEAD")).unwrap());
        assert!(path.join(grasp_state::contract::layout::PUSH_LOCK_FILE).is_file(), "the push lock file comes with the repository");
        for (k, v) in GRASP_GIT_CONFIG {
            assert_eq!(config(&path, k), *v, "{k}");
        }
        assert_eq!(config(&path, "core.hooksPath"), hooks.to_str().unwrap());
        assert_eq!(config(&path, "core.bare"), "true");
        // Idempotent, and no temporary directories are left behind.
        assert_eq!(
            create_bare_repo(&layout, &owner(), "my repo", &hooks).unwrap(),
            path
        );
        let names: Vec<_> = std::fs::read_dir(layout.owner_dir(&owner()))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("my repo.git")]);
        assert!(read_refs(&path).unwrap().is_empty());
    }

    #[test]
    fn settings_written_in_one_go_read_back_through_git() {
        let root = tempfile::tempdir().unwrap();
        let layout = RepoLayout::new(root.path().join("git"));
        let hooks = root.path().join("ho\"oks \\ dir");
        let path = create_bare_repo(&layout, &owner(), "quoted", &hooks).unwrap();
        for (k, v) in GRASP_GIT_CONFIG {
            assert_eq!(config(&path, k), *v, "{k}");
        }
        assert_eq!(config(&path, "core.hooksPath"), hooks.to_str().unwrap());
        assert_eq!(config(&path, "core.bare"), "true");
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(path.join("config")).unwrap().permissions());
        assert_eq!(mode & 0o600, 0o600, "git can still rewrite its config");
    }

    #[test]
    fn concurrent_creation_yields_one_repo() {
        let root = tempfile::tempdir().unwrap();
        let layout = RepoLayout::new(root.path());
        let hooks = root.path().join("hooks");
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (layout, hooks) = (layout.clone(), hooks.clone());
                std::thread::spawn(move || create_bare_repo(&layout, &owner(), "race", &hooks))
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        let names: Vec<_> = std::fs::read_dir(layout.owner_dir(&owner()))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("race.git")]);
    }

    #[test]
    fn rejects_bad_identifiers_and_deletes() {
        let root = tempfile::tempdir().unwrap();
        let layout = RepoLayout::new(root.path());
        for id in ["..", "../x", "a/b", ""] {
            assert!(
                matches!(
                    create_bare_repo(&layout, &owner(), id, root.path()),
                    Err(RepoError::Identifier(_))
                ),
                "{id}"
            );
        }
        let path = create_bare_repo(&layout, &owner(), "gone", root.path()).unwrap();
        assert!(delete_repo(&layout, &owner(), "gone").unwrap());
        assert!(!path.exists());
        assert!(!delete_repo(&layout, &owner(), "gone").unwrap());
        // Nothing is left behind: the emptied owner directory goes too.
        assert!(!layout.owner_dir(&owner()).exists());
    }
}
