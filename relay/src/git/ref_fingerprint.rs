//! A cheap fingerprint of everything a repository's ref advertisement is made from: the key
//! the ref cache checks an answer against before serving it ([`super::ref_cache`],
//! docs/architecture.md, "The ref cache").
//!
//! What `git upload-pack` reads to advertise refs (protocol v0/v1, v2 `ls-refs`, the v2
//! capabilities) is the ref storage (`HEAD`, `packed-refs`, every loose ref under `refs/`), the
//! repository's `config` (hidden refs, `uploadpack.*`), the objects tags peel to (immutable)
//! and the git program and per-request config the relay runs it with. The fingerprint is a
//! digest of: the repository's [`ref_generation`](super::ref_generation) (read first), the stat
//! data (inode, size, mode, modification and change times to the nanosecond) of `HEAD`,
//! `packed-refs`, `config`, `shallow` and of every directory and file under `refs/` (by name,
//! in order), and the caller's digest of the program and its setup. git never rewrites one of
//! these in place: every change creates a lock file and renames it over the old one, so the
//! file gets a new inode and times and its directory new times. A repository whose refs are
//! not plain files (`reftable/`, a symbolic link under `refs/`) or that holds more than
//! [`MAX_REF_ENTRIES`] loose entries has no fingerprint: git answers it every time.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use bitcoin_hashes::{sha256, HashEngine};

use super::ref_generation::{self, RepoIdentity};

/// Most entries (files and directories) under `refs/` walked for a fingerprint; beyond it the
/// walk would cost more than it saves.
pub const MAX_REF_ENTRIES: usize = 4096;

/// The files beside `refs/` that git reads to advertise refs.
const ROOT_FILES: &[&str] = &["HEAD", "packed-refs", "config", "shallow"];

/// The digest of a repository's ref state at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

/// The repository at `repo`'s identity and fingerprint, with `setup` (the caller's digest of
/// how git runs) mixed in; `None` when it has none (see the module doc). Blocking: a few
/// `stat`s and a walk of `refs/`.
pub fn read(repo: &Path, setup: &[u8]) -> Option<(RepoIdentity, Fingerprint)> {
    let meta = std::fs::metadata(repo).ok()?;
    let id = RepoIdentity::of(&meta);
    let mut engine = sha256::HashEngine::default();
    let (everywhere, generation) = ref_generation::current(id);
    engine.input(&everywhere.to_le_bytes());
    engine.input(&generation.to_le_bytes());
    engine.input(&(setup.len() as u64).to_le_bytes());
    engine.input(setup);
    if std::fs::symlink_metadata(repo.join("reftable")).is_ok() {
        return None;
    }
    for name in ROOT_FILES {
        engine.input(name.as_bytes());
        match std::fs::symlink_metadata(repo.join(name)) {
            Ok(meta) if meta.file_type().is_symlink() => return None,
            Ok(meta) => stat_into(&mut engine, &meta),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => engine.input(b"\0absent"),
            Err(_) => return None,
        }
    }
    let mut budget = MAX_REF_ENTRIES;
    walk(&repo.join("refs"), &mut engine, &mut budget)?;
    Some((id, Fingerprint(sha256::Hash::from_engine(engine).to_byte_array())))
}

/// Most bytes of a repository's `config` read to key an empty repository's answer.
const MAX_CONFIG_BYTES: u64 = 64 * 1024;

/// For a repository without refs, alternates or shallow file (what `git receive-pack`
/// advertises nothing of but its capabilities): its `config`'s bytes, which with the setup
/// make the key of the answer every such repository gets (`super::ref_cache`, empty
/// answers). `None` for any other repository. Blocking: a few `stat`s and one small read.
pub fn empty_for_push(repo: &Path) -> Option<Vec<u8>> {
    for absent in ["packed-refs", "shallow", "objects/info/alternates"] {
        match std::fs::symlink_metadata(repo.join(absent)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            _ => return None,
        }
    }
    let mut budget = MAX_REF_ENTRIES;
    if !holds_no_files(&repo.join("refs"), &mut budget)? {
        return None;
    }
    let config = repo.join("config");
    let meta = std::fs::symlink_metadata(&config).ok()?;
    if !meta.is_file() || meta.len() > MAX_CONFIG_BYTES {
        return None;
    }
    std::fs::read(config).ok()
}

/// Whether `dir` and its subdirectories hold no file; `None` for anything unreadable, a
/// symbolic link or more than `budget` entries.
fn holds_no_files(dir: &Path, budget: &mut usize) -> Option<bool> {
    let entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir).ok()?.collect::<Result<_, _>>().ok()?;
    *budget = budget.checked_sub(entries.len())?;
    for entry in entries {
        let kind = entry.file_type().ok()?;
        if !kind.is_dir() || !holds_no_files(&entry.path(), budget)? {
            return Some(false);
        }
    }
    Some(true)
}

/// Digests `dir` and everything under it, by name; `None` for a symbolic link, an unreadable
/// entry or more than `budget` entries.
fn walk(dir: &Path, engine: &mut sha256::HashEngine, budget: &mut usize) -> Option<()> {
    let meta = std::fs::symlink_metadata(dir).ok()?;
    if !meta.is_dir() {
        return None;
    }
    stat_into(engine, &meta);
    let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir).ok()?.collect::<Result<_, _>>().ok()?;
    *budget = budget.checked_sub(entries.len())?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        engine.input(&(name.len() as u64).to_le_bytes());
        engine.input(name.as_encoded_bytes());
        let kind = entry.file_type().ok()?;
        if kind.is_dir() {
            walk(&entry.path(), engine, budget)?;
            engine.input(b"\0end");
        } else if kind.is_file() {
            stat_into(engine, &entry.metadata().ok()?);
        } else {
            return None;
        }
    }
    Some(())
}

fn stat_into(engine: &mut sha256::HashEngine, meta: &std::fs::Metadata) {
    for value in [
        meta.ino(),
        meta.size(),
        u64::from(meta.mode()),
        meta.mtime() as u64,
        meta.mtime_nsec() as u64,
        meta.ctime() as u64,
        meta.ctime_nsec() as u64,
    ] {
        engine.input(&value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::{set_head, test_commit, test_git, test_repo_and_work, update_refs, RefChange};

    fn fixture() -> (tempfile::TempDir, std::path::PathBuf, String) {
        let (tmp, repo, work) = test_repo_and_work();
        let tip = test_commit(&work, "a");
        test_git(&work, &["push", "-q", repo.to_str().unwrap(), "HEAD:refs/heads/main"]);
        (tmp, repo, tip)
    }

    #[test]
    fn only_a_repository_without_refs_is_empty_for_a_push() {
        let (_tmp, repo, work) = test_repo_and_work();
        let config = empty_for_push(&repo).expect("a new repository is empty");
        assert_eq!(config, std::fs::read(repo.join("config")).unwrap());
        let tip = test_commit(&work, "a");
        test_git(&work, &["push", "-q", repo.to_str().unwrap(), "HEAD:refs/nostr/x"]);
        assert_eq!(empty_for_push(&repo), None, "a ref in a subdirectory");
        test_git(&repo, &["update-ref", "-d", "refs/nostr/x"]).truncate(0);
        assert!(empty_for_push(&repo).is_some(), "its directory left empty");
        test_git(&repo, &["update-ref", "refs/heads/main", &tip]).truncate(0);
        test_git(&repo, &["pack-refs", "--all"]).truncate(0);
        assert_eq!(empty_for_push(&repo), None, "packed refs");
        let (_tmp2, other, _) = test_repo_and_work();
        std::fs::write(other.join("objects/info/alternates"), "../x\n").unwrap();
        assert_eq!(empty_for_push(&other), None, "alternates");
    }

    #[test]
    fn every_kind_of_ref_change_changes_the_fingerprint() {
        let (_tmp, repo, tip) = fixture();
        let fp = || read(&repo, b"setup").unwrap().1;
        let mut last = fp();
        assert_eq!(last, fp(), "stable while nothing changes");
        assert_ne!(last, read(&repo, b"other setup").unwrap().1);
        let mut changed = |what: &str, change: &dyn Fn()| {
            change();
            let now = fp();
            assert_ne!(now, last, "{what}");
            last = now;
        };
        // Outside the relay (no generation bump): the stat data alone.
        changed("a new branch", &|| test_git(&repo, &["update-ref", "refs/heads/dev", &tip]).truncate(0));
        changed("a tag", &|| test_git(&repo, &["tag", "v1", &tip]).truncate(0));
        changed("packed", &|| test_git(&repo, &["pack-refs", "--all"]).truncate(0));
        changed("a packed ref deleted", &|| test_git(&repo, &["update-ref", "-d", "refs/tags/v1"]).truncate(0));
        changed("HEAD moved", &|| test_git(&repo, &["symbolic-ref", "HEAD", "refs/heads/dev"]).truncate(0));
        changed("config", &|| test_git(&repo, &["config", "uploadpack.hideRefs", "refs/nostr/"]).truncate(0));
        changed("a nostr ref", &|| test_git(&repo, &["update-ref", &format!("refs/nostr/{}", "a".repeat(64)), &tip]).truncate(0));
        // The relay's own changes (also a generation bump).
        changed("update_refs", &|| {
            update_refs(&repo, &[RefChange::Delete { name: "refs/heads/dev".into(), old: tip.clone() }]).unwrap()
        });
        changed("set_head", &|| set_head(&repo, "refs/heads/main").unwrap());
        changed("a bump alone", &|| ref_generation::bump(&repo));
    }

    #[test]
    fn refs_that_are_not_plain_files_have_no_fingerprint() {
        let (_tmp, repo, _) = fixture();
        std::os::unix::fs::symlink("main", repo.join("refs/heads/link")).unwrap();
        assert!(read(&repo, b"").is_none());
        std::fs::remove_file(repo.join("refs/heads/link")).unwrap();
        assert!(read(&repo, b"").is_some());
        std::fs::create_dir(repo.join("reftable")).unwrap();
        assert!(read(&repo, b"").is_none());
    }
}
