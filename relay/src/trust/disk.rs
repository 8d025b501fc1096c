//! The free-disk watermark (`--min-free-disk`, docs/security.md): the free bytes of the data
//! directory's file system, measured with `statvfs` at most every [`RECHECK`], against the
//! watermark. Below it [`crate::trust::Trust::admit`] refuses every event and the pre-receive
//! decision rejects every push; the verdict itself is [`grasp_state::trust::free_disk::has_room`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one measurement is reused.
pub const RECHECK: Duration = Duration::from_secs(2);

/// The watermark and the last measurement.
#[derive(Debug, Default)]
pub struct FreeDisk {
    /// The directory measured (none: never low).
    path: Option<PathBuf>,
    /// Free bytes kept (0: never low); replaced on SIGHUP.
    min_free: AtomicU64,
    /// When last measured, whether there was room then, and the free bytes measured.
    last: Mutex<Option<(Instant, bool, u64)>>,
}

impl FreeDisk {
    /// Keeps `min_free` bytes free on the file system of `path`.
    pub fn new(path: PathBuf, min_free: u64) -> Self {
        FreeDisk { path: Some(path), min_free: AtomicU64::new(min_free), last: Mutex::new(None) }
    }

    /// Replaces the watermark (SIGHUP); the next check measures again.
    pub fn set_min_free(&self, min_free: u64) {
        self.min_free.store(min_free, Ordering::Relaxed);
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Is there room for writes? Measured at most every [`RECHECK`]; a file system that cannot
    /// be measured counts as having room (the write itself then fails with its own error).
    pub fn has_room(&self) -> bool {
        let min_free = self.min_free.load(Ordering::Relaxed);
        let Some(path) = self.path.as_ref().filter(|_| min_free > 0) else { return true };
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, room, _)) = *last {
            if now.saturating_duration_since(at) < RECHECK {
                return room;
            }
        }
        let (room, free) = match available_bytes(path) {
            Ok(free) => {
                let room = grasp_state::trust::free_disk::has_room(free, min_free);
                if last.is_none_or(|(_, was, _)| was != room) {
                    if room {
                        tracing::info!(free, min_free, "disk space back above --min-free-disk: writes accepted again");
                    } else {
                        tracing::warn!(free, min_free, reason = "low disk", "free disk space below --min-free-disk: refusing events and pushes");
                    }
                }
                (room, free)
            }
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "could not measure free disk space");
                (true, u64::MAX)
            }
        };
        *last = Some((now, room, free));
        room
    }

    /// Is there room for data no maintainer signed (unsigned and contributor data)? Only above
    /// twice the watermark, so strangers stop well before maintainers do
    /// ([`grasp_state::trust::free_disk::has_room_for_strangers`]).
    pub fn has_room_for_strangers(&self) -> bool {
        if !self.has_room() {
            return false;
        }
        let min_free = self.min_free.load(Ordering::Relaxed);
        let free = self.last.lock().unwrap_or_else(|e| e.into_inner()).map_or(u64::MAX, |(_, _, free)| free);
        grasp_state::trust::free_disk::has_room_for_strangers(free, min_free)
    }
}

/// Bytes available to unprivileged writers on the file system holding `path`.
pub fn available_bytes(path: &std::path::Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statvfs buffer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // the field widths differ between platforms
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watermark_above_the_disk_is_low_and_zero_never_is() {
        let dir = tempfile::tempdir().unwrap();
        assert!(available_bytes(dir.path()).unwrap() > 0);
        assert!(!FreeDisk::new(dir.path().into(), u64::MAX).has_room());
        assert!(FreeDisk::new(dir.path().into(), 1).has_room());
        assert!(FreeDisk::new(dir.path().into(), 0).has_room());
        assert!(FreeDisk::default().has_room());
    }

    #[test]
    fn a_new_watermark_is_measured_against_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let disk = FreeDisk::new(dir.path().into(), u64::MAX);
        assert!(!disk.has_room());
        disk.set_min_free(1);
        assert!(disk.has_room(), "not the measurement of the old watermark");
        disk.set_min_free(u64::MAX);
        assert!(!disk.has_room());
    }
}
