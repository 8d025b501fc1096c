//! The most bytes an event of each kind may have (docs/security.md).
//!
//! Kinds anyone may publish without owning a repository here (kind 5 deletions, 10317 grasp
//! lists: 16 KiB) and the kinds the purgatory holds before any git data exists (1618/1619 pull
//! requests: 64 KiB; 30617 announcements and 30618 states: `--max-repo-event-bytes`, 256 KiB,
//! since they grow with the repository) have caps of their own, so that a key with nothing to
//! lose cannot fill the store or the purgatory with large events. Every other kind (issues,
//! comments, patches, ...) keeps the general limit, `--max-message-bytes`.
//! The size of an event is the length of its JSON serialisation.

use crate::nostr::nip34::{KIND_ANNOUNCEMENT, KIND_DELETION, KIND_PR, KIND_PR_UPDATE, KIND_STATE, KIND_USER_GRASP_LIST};

const KIB: usize = 1024;

/// The default cap of a repository's own events, announcements (30617) and states (30618),
/// `--max-repo-event-bytes`: their size grows with the repository (maintainers, branches and
/// tags), so 256 KiB, about 3,000 refs.
pub const DEFAULT_MAX_REPO_EVENT_BYTES: usize = 256 * KIB;

/// The fixed per-kind caps: `(kind, most bytes)`. 30617 and 30618 take the repository event
/// cap; kinds not listed take the general limit.
pub const KIND_CAPS: &[(u16, usize)] = &[
    // A deletion names events by id (`e`) or coordinate (`a`): about 200 of them.
    (KIND_DELETION, 16 * KIB),
    // A user's list of GRASP servers.
    (KIND_USER_GRASP_LIST, 16 * KIB),
    // A pull request's description and its commit references.
    (KIND_PR, 64 * KIB),
    (KIND_PR_UPDATE, 64 * KIB),
];

/// The size limits of events: the general one and the repository events' cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSizes {
    /// `--max-message-bytes`: every event.
    pub general: usize,
    /// `--max-repo-event-bytes`: announcements and states.
    pub repo_events: usize,
}

impl Default for EventSizes {
    fn default() -> Self {
        EventSizes { general: 512 * KIB, repo_events: DEFAULT_MAX_REPO_EVENT_BYTES }
    }
}

impl EventSizes {
    /// The kinds with a cap of their own and that cap (never above the general limit).
    pub fn capped_kinds(&self) -> Vec<(u16, usize)> {
        [KIND_ANNOUNCEMENT, KIND_STATE]
            .into_iter()
            .map(|k| (k, self.repo_events))
            .chain(KIND_CAPS.iter().copied())
            .map(|(k, cap)| (k, cap.min(self.general)))
            .collect()
    }

    /// The most bytes an event of `kind` may have (never above the general limit).
    pub fn max_event_bytes(&self, kind: u16) -> usize {
        let cap = match kind {
            KIND_ANNOUNCEMENT | KIND_STATE => Some(self.repo_events),
            _ => KIND_CAPS.iter().find(|(k, _)| *k == kind).map(|(_, c)| *c),
        };
        cap.map_or(self.general, |c| c.min(self.general))
    }

    /// An event of `kind` serialised in `bytes` bytes: within its cap, or the complete
    /// `invalid:` refusal saying what to do.
    pub fn check(&self, kind: u16, bytes: usize) -> Result<(), String> {
        let max = self.max_event_bytes(kind);
        if bytes <= max {
            return Ok(());
        }
        Err(format!(
            "invalid: this event is {bytes} bytes, this relay takes at most {max} for kind {kind}; \
             make it smaller (shorter content, fewer tags) and sign it again"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn capped_kinds_take_their_cap_and_others_the_general_limit() {
        let sizes = EventSizes::default();
        assert_eq!(sizes.max_event_bytes(KIND_DELETION), 16 * KIB);
        assert_eq!(sizes.max_event_bytes(KIND_USER_GRASP_LIST), 16 * KIB);
        assert_eq!(sizes.max_event_bytes(KIND_ANNOUNCEMENT), 256 * KIB);
        assert_eq!(sizes.max_event_bytes(KIND_STATE), 256 * KIB);
        assert_eq!(sizes.max_event_bytes(KIND_PR), 64 * KIB);
        // Issues (1621), comments (1111), patches (1617) keep the general limit.
        for kind in [1621, 1111, 1617, 1] {
            assert_eq!(sizes.max_event_bytes(kind), 512 * KIB);
        }
        // A smaller general limit wins; a larger repository cap lets big repositories in.
        assert_eq!(EventSizes { general: 10 * KIB, ..sizes }.max_event_bytes(KIND_STATE), 10 * KIB);
        let big = EventSizes { general: 4 << 20, repo_events: 4 << 20 };
        assert_eq!(big.max_event_bytes(KIND_ANNOUNCEMENT), 4 << 20);
        assert_eq!(big.max_event_bytes(KIND_DELETION), 16 * KIB);
        assert_eq!(sizes.capped_kinds().len(), 6);
    }

    #[test]
    fn the_refusal_names_the_size_the_cap_and_the_kind() {
        let msg = EventSizes::default().check(KIND_DELETION, 20_000).unwrap_err();
        assert!(msg.starts_with("invalid: this event is 20000 bytes, this relay takes at most 16384 for kind 5;"), "{msg}");
        assert!(EventSizes::default().check(KIND_DELETION, 16 * KIB).is_ok());
    }

    proptest! {
        #[test]
        fn accepted_exactly_within_the_cap(kind in prop_oneof![Just(5u16), Just(10317), Just(30617), Just(30618), Just(1618), any::<u16>()],
                                           bytes in 0usize..1 << 20, general in 0usize..1 << 20, repo_events in 0usize..1 << 20) {
            let sizes = EventSizes { general, repo_events };
            let max = sizes.max_event_bytes(kind);
            prop_assert!(max <= general);
            prop_assert_eq!(sizes.check(kind, bytes).is_ok(), bytes <= max);
            prop_assert!(sizes.capped_kinds().iter().all(|(k, cap)| sizes.max_event_bytes(*k) == *cap));
        }
    }
}
