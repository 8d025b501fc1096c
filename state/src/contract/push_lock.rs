//! The push lock of a repository, `<repo>/grasp.lock` ([`PUSH_LOCK_FILE`]): the
//! one definition a push (taken by the relay's listener or `grasp-cgi`, held by the push's git
//! processes for a whole receive-pack, hooks included) and the relay (release, alignment, copies,
//! background sync, maintenance, orphan purge) share, so pushes and the relay's own changes to a
//! repository never interleave, across processes (docs/architecture.md, "Lock order": it is the
//! outermost lock).
//!
//! It is only ever *tried* (`flock` without blocking, [`PushLock::try_take`]): no one waits on it
//! inside the kernel with no way out. A bounded wait is a series of tries
//! ([`PushLock::take_within`] for a process of its own such as `grasp-cgi`; the relay retries
//! asynchronously in `relay/src/grasp/locks.rs`). Closing the file (dropping the value, or the
//! process ending however it ends) releases it.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::layout::PUSH_LOCK_FILE;

/// How long a bounded wait sleeps between two tries.
pub const RETRY: Duration = Duration::from_millis(25);

/// The push lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum PushLockError {
    /// Another push (or the relay's work on the repository) held it for the whole wait.
    #[error("another push to {} is in progress (waited {waited:?}); retry later", repo.display())]
    Busy { repo: PathBuf, waited: Duration },
    /// The repository was removed (or removed and made again) while the lock was waited for:
    /// the lock taken is the old directory's, which no one else will ever take. Look the
    /// repository up again.
    #[error("{} was removed while its push lock was waited for", repo.display())]
    Gone { repo: PathBuf },
    /// The lock file cannot be opened or locked (the repository is gone, or unreadable).
    #[error("cannot take the push lock {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

impl PushLockError {
    /// The repository whose lock this is.
    pub fn repo(&self) -> &Path {
        match self {
            PushLockError::Busy { repo, .. } | PushLockError::Gone { repo } => repo,
            PushLockError::Io { path, .. } => path.parent().unwrap_or(path),
        }
    }
}

/// A repository's push lock file, open; held while [`PushLock::is_held`].
#[derive(Debug)]
pub struct PushLock {
    repo: PathBuf,
    file: File,
    held: bool,
}

impl PushLock {
    /// Opens `repo`'s lock file (created when missing; the repository directory must exist),
    /// without taking the lock.
    pub fn open(repo: &Path) -> Result<PushLock, PushLockError> {
        let path = repo.join(PUSH_LOCK_FILE);
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| PushLockError::Io { path, source })?;
        Ok(PushLock { repo: repo.to_path_buf(), file, held: false })
    }

    /// Tries once, without blocking: true when the lock is now held here. A lock taken on a file
    /// that is no longer the repository's lock file (the repository was removed by whoever held
    /// the lock meanwhile, and perhaps made again) is let go: [`PushLockError::Gone`].
    pub fn try_take(&mut self) -> Result<bool, PushLockError> {
        if self.held {
            return Ok(true);
        }
        match self.file.try_lock() {
            Ok(()) => {
                if !self.names_the_current_file() {
                    let _ = self.file.unlock();
                    return Err(PushLockError::Gone { repo: self.repo.clone() });
                }
                self.held = true;
                Ok(true)
            }
            Err(TryLockError::WouldBlock) => Ok(false),
            Err(TryLockError::Error(source)) => Err(PushLockError::Io { path: self.repo.join(PUSH_LOCK_FILE), source }),
        }
    }

    /// Whether the open file is still the one at `<repo>/grasp.lock`.
    fn names_the_current_file(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (self.file.metadata(), std::fs::metadata(self.repo.join(PUSH_LOCK_FILE))) {
            (Ok(open), Ok(current)) => open.dev() == current.dev() && open.ino() == current.ino(),
            _ => false,
        }
    }

    /// Lets go of the lock (the file stays open for another try).
    pub fn release(&mut self) {
        if self.held {
            let _ = self.file.unlock();
            self.held = false;
        }
    }

    pub fn is_held(&self) -> bool {
        self.held
    }

    /// The repository whose lock this is.
    pub fn repo(&self) -> &Path {
        &self.repo
    }

    /// The open lock file: a process that hands the lock on to a program it becomes or starts
    /// keeps it open across the exec ([`keep_open_across_exec`]; the lock goes with the last
    /// process holding the file open).
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.file)
    }

    /// Takes `repo`'s push lock, trying every [`RETRY`] for at most `wait` (one try when `wait`
    /// is zero), sleeping the calling thread in between: for a process of its own (`grasp-cgi`),
    /// never for an async runtime's worker.
    pub fn take_within(repo: &Path, wait: Duration) -> Result<PushLock, PushLockError> {
        let mut lock = PushLock::open(repo)?;
        let deadline = Instant::now() + wait;
        loop {
            if lock.try_take()? {
                return Ok(lock);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(PushLockError::Busy { repo: repo.to_path_buf(), waited: wait });
            }
            std::thread::sleep(left.min(RETRY));
        }
    }
}

/// Clears `FD_CLOEXEC` on `fd`, so the program this process becomes by exec keeps it open: how a
/// push lock ([`PushLock::as_fd`]) is handed to `git http-backend`, by `grasp-cgi` before its
/// exec, by the relay in its child between fork and exec (only `fcntl`: async-signal-safe).
pub fn keep_open_across_exec(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor number; an invalid one is an error, never undefined behaviour.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_waited_for_only_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let held = PushLock::take_within(dir.path(), Duration::ZERO).unwrap();
        assert!(held.is_held());
        let started = Instant::now();
        let err = PushLock::take_within(dir.path(), Duration::from_millis(100)).unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(100) && started.elapsed() < Duration::from_secs(5));
        assert!(matches!(err, PushLockError::Busy { .. }), "{err}");
        assert!(err.to_string().contains("another push") && err.to_string().contains("retry later"), "{err}");
        let mut other = PushLock::open(dir.path()).unwrap();
        assert!(!other.try_take().unwrap(), "held elsewhere");
        drop(held);
        assert!(other.try_take().unwrap(), "released on drop");
        other.release();
        assert!(!other.is_held());
        assert!(PushLock::take_within(dir.path(), Duration::ZERO).is_ok(), "released by release()");
    }

    #[test]
    fn a_missing_repository_is_an_error_not_a_wait() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone.git");
        let err = PushLock::take_within(&gone, Duration::from_secs(30)).unwrap_err();
        assert!(matches!(err, PushLockError::Io { .. }), "{err}");
        assert_eq!(err.repo(), gone.as_path());
        assert!(!gone.exists(), "no repository is created by a lock");
    }

    #[test]
    fn a_lock_kept_open_across_exec_loses_its_close_on_exec_flag() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let lock = PushLock::take_within(dir.path(), Duration::ZERO).unwrap();
        let fd = lock.as_fd().as_raw_fd();
        let flags = || unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_ne!(flags() & libc::FD_CLOEXEC, 0, "std opens files close-on-exec");
        keep_open_across_exec(fd).unwrap();
        assert_eq!(flags() & libc::FD_CLOEXEC, 0);
        assert!(keep_open_across_exec(-1).is_err());
    }

    #[test]
    fn a_lock_whose_repository_was_removed_meanwhile_is_gone_not_taken() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("r.git");
        std::fs::create_dir(&repo).unwrap();
        let mut waiting = PushLock::open(&repo).unwrap();
        // Whoever held the lock removed the repository and another made it again.
        std::fs::rename(&repo, dir.path().join("aside")).unwrap();
        assert!(matches!(waiting.try_take(), Err(PushLockError::Gone { .. })), "removed");
        assert!(!waiting.is_held());
        std::fs::create_dir(&repo).unwrap();
        assert!(matches!(waiting.try_take(), Err(PushLockError::Gone { .. })), "made again: another file");
        let mut fresh = PushLock::open(&repo).unwrap();
        assert!(fresh.try_take().unwrap(), "the new repository's lock is free");
    }
}
