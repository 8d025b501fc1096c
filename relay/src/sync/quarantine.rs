//! Fetching without the repository lock: a quarantine repository the remote's objects land in
//! first (docs/protocol.md#background-sync).
//!
//! A `git fetch` from a peer can take minutes (up to `--sync-fetch-timeout`) when the peer is slow
//! or stalls. Holding the repository lock that long would stall the release after a user's push
//! to the same repository. So the syncer fetches into a [`Quarantine`]: a throwaway repository
//! inside the target's `objects/` directory that borrows the target's objects through
//! `objects/info/alternates`, so only what is missing is transferred and thin packs resolve
//! against the target. Only then, under the repository lock, [`Quarantine::apply`] moves the new
//! packs and loose objects into the target: renames within one file system, the way git migrates
//! a push's own quarantine. A reader never sees a pack index before its pack.
//!
//! The quarantine is removed when dropped. One left behind by a crash is named like a push
//! quarantine (`tmp_objdir-incoming-*`), so the startup cleanup of stale push quarantines
//! (`git::repos::remove_stale_quarantines`) removes it too. The sweeps while the relay runs
//! leave these alone: a live fetch may wait on a slow peer without writing, and takes no lock.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Name prefix of quarantine directories inside `<repo>/objects` (defined with the sweep that
/// knows them, in `crate::git::repos`).
pub use crate::git::repos::SYNC_QUARANTINE_PREFIX as PREFIX;

/// A temporary repository borrowing a target repository's objects. Removed on drop.
#[derive(Debug)]
pub struct Quarantine {
    /// The quarantine repository (a git dir).
    dir: PathBuf,
    /// The target repository.
    repo: PathBuf,
}

impl Quarantine {
    /// Creates a quarantine for the bare repository `repo`: its `config` (object format) and
    /// `HEAD` are copied, its object store is borrowed.
    pub async fn create(repo: &Path) -> io::Result<Quarantine> {
        let repo = repo.to_path_buf();
        tokio::task::spawn_blocking(move || Quarantine::create_blocking(&repo)).await.map_err(io::Error::other)?
    }

    fn create_blocking(repo: &Path) -> io::Result<Quarantine> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = format!("{PREFIX}{}-{nanos}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let objects = repo.join("objects");
        let dir = objects.join(name);
        let quarantine = Quarantine { dir, repo: repo.to_path_buf() };
        std::fs::create_dir(&quarantine.dir)?;
        std::fs::create_dir(quarantine.dir.join("refs"))?;
        std::fs::create_dir_all(quarantine.dir.join("objects").join("pack"))?;
        std::fs::create_dir_all(quarantine.dir.join("objects").join("info"))?;
        std::fs::copy(repo.join("config"), quarantine.dir.join("config"))?;
        std::fs::write(quarantine.dir.join("HEAD"), "ref: refs/heads/main\n")?;
        let borrowed = std::fs::canonicalize(&objects)?;
        let mut line = borrowed.into_os_string().into_encoded_bytes();
        line.push(b'\n');
        std::fs::write(quarantine.dir.join("objects").join("info").join("alternates"), line)?;
        Ok(quarantine)
    }

    /// The quarantine repository, to fetch into.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Moves what the quarantine received into the target repository. Call it holding the
    /// target's repository lock. Returns how many files were moved.
    pub async fn apply(&self) -> io::Result<usize> {
        let (from, to) = (self.dir.join("objects"), self.repo.join("objects"));
        tokio::task::spawn_blocking(move || migrate(&from, &to)).await.map_err(io::Error::other)?
    }
}

impl Drop for Quarantine {
    fn drop(&mut self) {
        // Off the async runtime: a large quarantine takes a while to delete.
        let dir = std::mem::take(&mut self.dir);
        std::thread::spawn(move || match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %dir.display(), error = %e, "cannot remove a sync quarantine"),
        });
    }
}

/// Bytes of the files a fetch into the git directory `git_dir` wrote: everything under its
/// `objects/` except `objects/info/` (the alternates link to the target). What the fetch cap
/// (`--sync-max-fetch-bytes`) measures.
pub fn received_bytes(git_dir: &Path) -> u64 {
    fn walk(dir: &Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() && e.file_name() != "info" => walk(&e.path()),
                Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
                _ => 0,
            })
            .sum()
    }
    walk(&git_dir.join("objects"))
}

/// Moves packs (every pack's index last) and loose objects from the object directory `from`
/// into `to`. Objects `to` already has are left where they are.
fn migrate(from: &Path, to: &Path) -> io::Result<usize> {
    let mut moved = 0;
    let pack_dir = from.join("pack");
    let mut packs: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(&pack_dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with("pack-") && !name.ends_with(".keep") {
            packs.push(name);
        }
    }
    // git finds a pack through its index: move the index only once the rest is in place.
    packs.sort_by_key(|name| (name.ends_with(".idx"), name.clone()));
    for name in packs {
        moved += move_new(&pack_dir.join(&name), &to.join("pack").join(&name))?;
    }
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let fanout = name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit());
        if !fanout || !entry.file_type()?.is_dir() {
            continue;
        }
        let target_dir = to.join(&name);
        std::fs::create_dir_all(&target_dir)?;
        for object in std::fs::read_dir(entry.path())? {
            let object = object?;
            let file = object.file_name();
            if file.to_string_lossy().starts_with("tmp_") {
                continue;
            }
            moved += move_new(&object.path(), &target_dir.join(&file))?;
        }
    }
    Ok(moved)
}

/// Renames `from` to `to` unless `to` exists (same content: objects are named by their hash).
fn move_new(from: &Path, to: &Path) -> io::Result<usize> {
    if std::fs::symlink_metadata(to).is_ok() {
        return Ok(0);
    }
    std::fs::rename(from, to)?;
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::test_git;

    fn bare(path: &Path) {
        std::fs::create_dir_all(path).unwrap();
        test_git(path, &["init", "--quiet", "--bare"]);
    }

    /// A work repository with `n` commits; the tip and the work tree.
    fn commits(dir: &Path, n: usize) -> (PathBuf, Vec<String>) {
        let work = dir.join("work");
        std::fs::create_dir_all(&work).unwrap();
        test_git(&work, &["init", "--quiet"]);
        let mut ids = Vec::new();
        for i in 0..n {
            std::fs::write(work.join("f"), format!("{i}\n")).unwrap();
            test_git(&work, &["add", "f"]);
            test_git(&work, &["commit", "--quiet", "-m", &format!("c{i}")]);
            ids.push(test_git(&work, &["rev-parse", "HEAD"]).trim().to_string());
        }
        (work, ids)
    }

    #[tokio::test]
    async fn objects_fetched_into_a_quarantine_reach_the_repository_only_when_applied() {
        let dir = tempfile::tempdir().unwrap();
        let (work, ids) = commits(dir.path(), 3);
        let repo = dir.path().join("repo.git");
        bare(&repo);
        // The repository already has the first commit: the quarantine borrows it.
        test_git(&work, &["push", "--quiet", repo.to_str().unwrap(), &format!("{}:refs/heads/main", ids[0])]);
        let tip = ids[2].clone();

        let quarantine = Quarantine::create(&repo).await.unwrap();
        let path = quarantine.path().to_path_buf();
        assert!(path.starts_with(repo.join("objects")));
        // Loose objects (below git's unpack limit) and a pack both migrate.
        test_git(&work, &["push", "--quiet", path.to_str().unwrap(), &format!("{}:refs/heads/x", ids[1])]);
        test_git(&work, &["repack", "-q", "-a", "-d"]);
        let packs = work.join(".git").join("objects").join("pack");
        for entry in std::fs::read_dir(&packs).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), path.join("objects").join("pack").join(entry.file_name())).unwrap();
        }
        assert!(crate::git::missing_objects(&path, std::slice::from_ref(&tip)).unwrap().is_empty());
        assert_eq!(crate::git::missing_objects(&repo, std::slice::from_ref(&tip)).unwrap(), std::slice::from_ref(&tip), "not before apply");

        assert!(quarantine.apply().await.unwrap() > 0);
        assert!(crate::git::missing_objects(&repo, &ids).unwrap().is_empty());
        test_git(&repo, &["fsck", "--no-dangling", "--connectivity-only", &tip]);
        // Applying again moves nothing; dropping removes the quarantine.
        assert_eq!(quarantine.apply().await.unwrap(), 0);
        drop(quarantine);
        let gone = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            !path.exists()
        });
        assert!(gone, "quarantine removed");
        assert!(crate::git::read_refs(&repo).unwrap().keys().all(|r| r == "refs/heads/main"), "no ref from the quarantine");
    }
}
