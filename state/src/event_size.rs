//! The most bytes an event of each kind may have (docs/security.md).
//!
//! Kinds anyone may publish without owning a repository here (kind 5 deletions, 10317 grasp
//! lists) and the kinds the purgatory holds before any git data exists (30617 announcements,
//! 30618 states, 1618/1619 pull requests) have small caps of their own, so that a key with
//! nothing to lose cannot fill the store or the purgatory with large events. Every other kind
//! (issues, comments, patches, ...) keeps the general limit, `--max-message-bytes`.
//! The size of an event is the length of its JSON serialisation.

use crate::nip34::{KIND_ANNOUNCEMENT, KIND_DELETION, KIND_PR, KIND_PR_UPDATE, KIND_STATE, KIND_USER_GRASP_LIST};

const KIB: usize = 1024;

/// The per-kind caps: `(kind, most bytes)`. Kinds not listed take the general limit.
pub const KIND_CAPS: &[(u16, usize)] = &[
    // A deletion names events by id (`e`) or coordinate (`a`): about 200 of them.
    (KIND_DELETION, 16 * KIB),
    // A user's list of GRASP servers.
    (KIND_USER_GRASP_LIST, 16 * KIB),
    // Name, description, clone URLs, relays, maintainers.
    (KIND_ANNOUNCEMENT, 64 * KIB),
    // One tag per branch and tag: about 1,000 refs.
    (KIND_STATE, 128 * KIB),
    // A pull request's description and its commit references.
    (KIND_PR, 64 * KIB),
    (KIND_PR_UPDATE, 64 * KIB),
];

/// The most bytes an event of `kind` may have, given the general limit (never above it).
pub fn max_event_bytes(kind: u16, general_max: usize) -> usize {
    KIND_CAPS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(general_max, |(_, cap)| (*cap).min(general_max))
}

/// An event of `kind` serialised in `bytes` bytes: within its cap, or the complete `invalid:`
/// refusal saying what to do.
pub fn check_event_size(kind: u16, bytes: usize, general_max: usize) -> Result<(), String> {
    let max = max_event_bytes(kind, general_max);
    if bytes <= max {
        return Ok(());
    }
    Err(format!(
        "invalid: this event is {bytes} bytes, this relay takes at most {max} for kind {kind}; \
         make it smaller (shorter content, fewer tags) and sign it again"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn capped_kinds_take_their_cap_and_others_the_general_limit() {
        let general = 512 * KIB;
        assert_eq!(max_event_bytes(KIND_DELETION, general), 16 * KIB);
        assert_eq!(max_event_bytes(KIND_USER_GRASP_LIST, general), 16 * KIB);
        assert_eq!(max_event_bytes(KIND_ANNOUNCEMENT, general), 64 * KIB);
        assert_eq!(max_event_bytes(KIND_STATE, general), 128 * KIB);
        assert_eq!(max_event_bytes(KIND_PR, general), 64 * KIB);
        // Issues (1621), comments (1111), patches (1617) keep the general limit.
        for kind in [1621, 1111, 1617, 1] {
            assert_eq!(max_event_bytes(kind, general), general);
        }
        // A smaller general limit wins.
        assert_eq!(max_event_bytes(KIND_STATE, 10 * KIB), 10 * KIB);
    }

    #[test]
    fn the_refusal_names_the_size_the_cap_and_the_kind() {
        let msg = check_event_size(KIND_DELETION, 20_000, 512 * KIB).unwrap_err();
        assert!(msg.starts_with("invalid: this event is 20000 bytes, this relay takes at most 16384 for kind 5;"), "{msg}");
        assert!(check_event_size(KIND_DELETION, 16 * KIB, 512 * KIB).is_ok());
    }

    proptest! {
        #[test]
        fn accepted_exactly_within_the_cap(kind in prop_oneof![Just(5u16), Just(10317), Just(30617), Just(30618), Just(1618), any::<u16>()],
                                           bytes in 0usize..1 << 20, general in 0usize..1 << 20) {
            let max = max_event_bytes(kind, general);
            prop_assert!(max <= general);
            prop_assert_eq!(check_event_size(kind, bytes, general).is_ok(), bytes <= max);
        }
    }
}
