//! A repository's refs and HEAD read from its files, without a git process, where that is safe.
//!
//! Each of a push's hooks asks for the repository's refs; `git for-each-ref` costs a process start
//! (milliseconds) each time. A repository with the files backend (every repository the relay
//! creates) keeps them in loose files under `refs/` and in `packed-refs`, which
//! `grasp_state::git::ref_files` parses. This reads them in git's order (loose files first, then
//! `packed-refs`), so a concurrent `git pack-refs` or ref deletion never hides a ref; a ref
//! update is a rename of a complete file, and git's `*.lock` files (an update in progress) are
//! not refs. In pre-receive the refs read are the old ones (receive-pack updates them after the
//! hook), in post-receive the new ones.
//!
//! [`read`] answers `None` for anything unusual and the caller asks git: a reftable repository
//! (`reftable/`, `extensions.refStorage` in its config), a linked worktree (`commondir`), a
//! symbolic ref other than HEAD, a file that is not a regular file or does not parse, a name
//! that is not a valid ref name, any read error but a file or directory vanishing meanwhile.
//! One difference from `git for-each-ref`: git leaves out refs whose object is missing (a
//! damaged repository); this lists them.

use std::io::ErrorKind;
use std::path::Path;

use grasp_state::git::ref_files::{merge, parse_loose_ref, parse_packed_refs, LooseRef};
use grasp_state::names::refs::{is_valid_ref_name, RefMap};

/// The repository's refs (`refs/...` -> oid) and what HEAD points at (`None` when detached),
/// read from its files; `None` when git must be asked instead.
pub fn read(repo: &Path) -> Option<(RefMap, Option<String>)> {
    if repo.join("reftable").exists() || repo.join("commondir").exists() || !uses_files_backend(repo)? {
        return None;
    }
    let head = match parse_loose_ref(&std::fs::read_to_string(repo.join("HEAD")).ok()?)? {
        LooseRef::Symbolic(target) => Some(target),
        LooseRef::Oid(_) => None,
    };
    let mut loose = Vec::new();
    read_loose(&repo.join("refs"), "refs", &mut loose)?;
    let packed = match std::fs::read_to_string(repo.join("packed-refs")) {
        Ok(text) => parse_packed_refs(&text)?,
        Err(e) if e.kind() == ErrorKind::NotFound => RefMap::new(),
        Err(_) => return None,
    };
    Some((merge(packed, loose), head))
}

/// Whether the repository's config leaves the ref storage at the files backend (names no
/// `refStorage`); `None` when the config cannot be read.
fn uses_files_backend(repo: &Path) -> Option<bool> {
    let config = std::fs::read(repo.join("config")).ok()?;
    Some(!config.to_ascii_lowercase().windows(b"refstorage".len()).any(|w| w == b"refstorage"))
}

/// Collects the loose refs under `dir` (named `prefix/...`) into `out`; `None` on anything
/// unusual.
fn read_loose(dir: &Path, prefix: &str, out: &mut Vec<(String, String)>) -> Option<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // Removed meanwhile (git removes emptied directories after deleting a ref).
        Err(e) if e.kind() == ErrorKind::NotFound => return Some(()),
        Err(_) => return None,
    };
    for entry in entries {
        let entry = entry.ok()?;
        let file_name = entry.file_name();
        let name = format!("{prefix}/{}", file_name.to_str()?);
        if name.ends_with(".lock") {
            continue;
        }
        let kind = match entry.file_type() {
            Ok(kind) => kind,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(_) => return None,
        };
        if kind.is_dir() {
            read_loose(&entry.path(), &name, out)?;
        } else if kind.is_file() {
            let text = match std::fs::read_to_string(entry.path()) {
                Ok(text) => text,
                // Deleted or packed meanwhile: `packed-refs`, read after, has it if it is there.
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(_) => return None,
            };
            match parse_loose_ref(&text)? {
                LooseRef::Oid(oid) if is_valid_ref_name(&name) => out.push((name, oid)),
                _ => return None,
            }
        } else {
            return None;
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::test_git;

    /// What git says: `for-each-ref` and `symbolic-ref -q HEAD`.
    fn from_git(repo: &Path) -> (RefMap, Option<String>) {
        let refs = test_git(repo, &["for-each-ref", "--format=%(objectname) %(refname)"])
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(oid, name)| (name.to_string(), oid.to_string()))
            .collect();
        (refs, crate::git::head(repo).unwrap())
    }

    #[test]
    fn the_files_say_what_git_says() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("r.git");
        let work = dir.path().join("w");
        test_git(dir.path(), &["init", "--bare", "--quiet", "--template=", repo.to_str().unwrap()]);
        // An empty repository with an unborn HEAD.
        let (refs, head) = read(&repo).unwrap();
        assert!(refs.is_empty() && head.is_some());
        assert_eq!((refs, head), from_git(&repo));
        test_git(dir.path(), &["init", "--quiet", work.to_str().unwrap()]);
        let commit = |name: &str| crate::git::test_commit(&work, name);
        let url = repo.to_str().unwrap();
        let one = commit("one");
        test_git(&work, &["tag", "-a", "-m", "v1", "v1"]);
        test_git(&work, &["push", "-q", url, "HEAD:refs/heads/main", "HEAD:refs/heads/a/b", "v1", "HEAD:refs/nostr/x"]);
        assert_eq!(read(&repo).unwrap(), from_git(&repo));
        // Packed (with peeled tags), then some updated loose over the packed ones, one deleted.
        test_git(&repo, &["pack-refs", "--all"]);
        assert!(repo.join("packed-refs").exists());
        assert_eq!(read(&repo).unwrap(), from_git(&repo));
        let two = commit("two");
        test_git(&work, &["push", "-q", url, "HEAD:refs/heads/main", "HEAD:refs/heads/new", ":refs/heads/a/b"]);
        let (refs, _) = read(&repo).unwrap();
        assert_eq!((refs["refs/heads/main"].as_str(), refs.get("refs/heads/a/b")), (two.as_str(), None));
        assert_eq!(refs["refs/nostr/x"], one);
        assert_eq!(read(&repo).unwrap(), from_git(&repo));
        // HEAD set, then detached.
        test_git(&repo, &["symbolic-ref", "HEAD", "refs/heads/main"]);
        assert_eq!(read(&repo).unwrap(), from_git(&repo));
        test_git(&repo, &["update-ref", "--no-deref", "HEAD", &one]);
        assert_eq!(read(&repo).unwrap(), (from_git(&repo).0, None));
        // A ref update in progress (its lock file) is not a ref.
        std::fs::write(repo.join("refs/heads/main.lock"), format!("{one}\n")).unwrap();
        assert_eq!(read(&repo).unwrap().0["refs/heads/main"], two);
    }

    #[test]
    fn anything_unusual_is_left_to_git() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("r.git");
        test_git(dir.path(), &["init", "--bare", "--quiet", repo.to_str().unwrap()]);
        assert!(read(&repo).is_some());
        // A symbolic ref other than HEAD.
        test_git(&repo, &["symbolic-ref", "refs/heads/alias", "refs/heads/main"]);
        assert_eq!(read(&repo), None);
        std::fs::remove_file(repo.join("refs/heads/alias")).unwrap();
        // A torn or foreign file.
        std::fs::write(repo.join("refs/heads/torn"), "4f3c").unwrap();
        assert_eq!(read(&repo), None);
        std::fs::remove_file(repo.join("refs/heads/torn")).unwrap();
        std::fs::write(repo.join("packed-refs"), "garbage\n").unwrap();
        assert_eq!(read(&repo), None);
        std::fs::remove_file(repo.join("packed-refs")).unwrap();
        assert!(read(&repo).is_some());
        // The reftable backend, however it is named in the config.
        let mut config = std::fs::read_to_string(repo.join("config")).unwrap();
        config.push_str("[extensions]\n\trefStorage = reftable\n");
        std::fs::write(repo.join("config"), config).unwrap();
        assert_eq!(read(&repo), None);
        let table = dir.path().join("t.git");
        if crate::git::GitCommand::without_repo().args(["init", "--bare", "--quiet", "--ref-format=reftable"]).arg(&table).run().is_ok() {
            assert_eq!(read(&table), None);
            // git itself still answers through the fallback.
            assert_eq!(crate::git::read_refs_and_head(&table).unwrap().0, RefMap::new());
        }
    }
}
