//! Generations of repositories' refs: counters the relay bumps after every ref change it makes
//! or hears of, part of the ref cache's fingerprint ([`super::ref_fingerprint`],
//! docs/architecture.md, "The ref cache").
//!
//! The fingerprint's stat data already changes with every ref write git makes (a lock file
//! renamed over the ref, `packed-refs` or `HEAD`: a new inode, new times). The generation makes
//! that independent of timestamp granularity and inode reuse for every change the relay knows
//! of: its own ref updates ([`super::update_refs`], [`super::set_head`]), maintenance (`git gc`,
//! `git maintenance run`), every push (its post-receive report, which reaches the relay before
//! the pusher is answered) and the deletion of a repository. A bump comes *after* the change, so an answer cached from a fingerprint read
//! before it never matches again.
//!
//! One counter per stripe of repositories (by the repository directory's device and inode),
//! fixed in number: memory does not grow with repositories, and a bump to a repository sharing
//! a stripe only costs the other one a cache miss. A repository that cannot be stat'ed bumps
//! every stripe.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

const STRIPES: usize = 1024;

static GENERATIONS: [AtomicU64; STRIPES] = [const { AtomicU64::new(0) }; STRIPES];
/// Bumped when the repository of a change could not be identified: every stripe changes.
static EVERYWHERE: AtomicU64 = AtomicU64::new(0);

/// A repository directory's identity on disk (device, inode): the same whatever path names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RepoIdentity {
    pub dev: u64,
    pub ino: u64,
}

impl RepoIdentity {
    pub fn of(meta: &std::fs::Metadata) -> RepoIdentity {
        RepoIdentity { dev: meta.dev(), ino: meta.ino() }
    }

    fn stripe(&self) -> &'static AtomicU64 {
        let mixed = (self.ino ^ self.dev.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &GENERATIONS[(mixed >> 54) as usize % STRIPES]
    }
}

/// The current generation of the repository `id` (read before its stat data).
pub fn current(id: RepoIdentity) -> (u64, u64) {
    (EVERYWHERE.load(Ordering::SeqCst), id.stripe().load(Ordering::SeqCst))
}

/// Records that the refs of the repository at `repo` changed (call it after the change).
pub fn bump(repo: &Path) {
    match std::fs::metadata(repo) {
        Ok(meta) => {
            RepoIdentity::of(&meta).stripe().fetch_add(1, Ordering::SeqCst);
        }
        Err(_) => {
            EVERYWHERE.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bump_changes_the_repositorys_generation_only() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let id = |p: &Path| RepoIdentity::of(&std::fs::metadata(p).unwrap());
        let before = current(id(&a));
        bump(&a);
        assert_ne!(current(id(&a)), before);
        // Another path to the same directory is the same repository.
        let again = current(id(&a));
        bump(&tmp.path().join("b/../a"));
        assert_ne!(current(id(&a)), again);
        // A repository that is gone bumps everything.
        let other = current(id(&b));
        bump(&tmp.path().join("gone"));
        assert_ne!(current(id(&b)), other);
    }
}
