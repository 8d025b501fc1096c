//! The low-disk verdict (`--min-free-disk`, docs/security.md): below the watermark of free bytes
//! on the data directory's file system, events are refused and pushes rejected, so that no
//! client can fill the disk the store, the purgatory checkpoint and the repositories share.
//! The relay measures (statvfs, at most every few seconds); this decides.

/// The default watermark: 1 GiB.
pub const DEFAULT_MIN_FREE_DISK: u64 = 1 << 30;

/// The refusal of an event while the disk is low (NIP-01 `blocked:`).
pub const LOW_DISK_EVENT: &str =
    "blocked: this server is low on disk space; try another relay listed for the repository";

/// The rejection of a push while the disk is low.
pub const LOW_DISK_PUSH: &str =
    "this server is low on disk space; push to another GRASP server listed for the repository";

/// Is there room for writes: `free` bytes available against a watermark of `min_free` (0: never
/// low)?
pub fn has_room(free: u64, min_free: u64) -> bool {
    min_free == 0 || free >= min_free
}

/// Is there room for data no maintainer signed (git-first placeholders, pull request data)?
/// Only while twice the watermark is free (docs/security.md): strangers stop first, and the last
/// `min_free` bytes above the maintainers' own watermark stay theirs.
pub fn has_room_for_strangers(free: u64, min_free: u64) -> bool {
    has_room(free, min_free.saturating_mul(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_the_watermark_is_low_and_zero_turns_it_off() {
        assert!(has_room(DEFAULT_MIN_FREE_DISK, DEFAULT_MIN_FREE_DISK));
        assert!(!has_room(DEFAULT_MIN_FREE_DISK - 1, DEFAULT_MIN_FREE_DISK));
        assert!(has_room(0, 0));
        assert!(LOW_DISK_EVENT.starts_with("blocked: "));
        assert!(has_room_for_strangers(2 * DEFAULT_MIN_FREE_DISK, DEFAULT_MIN_FREE_DISK));
        assert!(!has_room_for_strangers(2 * DEFAULT_MIN_FREE_DISK - 1, DEFAULT_MIN_FREE_DISK));
        assert!(has_room_for_strangers(0, 0));
    }
}
