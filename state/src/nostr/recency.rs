//! The NIP-01 order of replaceable and addressable events, in one place.
//!
//! Of two versions of the same replaceable event, the one with the later `created_at` is newer;
//! on the same second, the one with the lower event id wins (docs/protocol.md, "Newer event
//! order"). [`Recency`] is that order as a type: `a.recency() > b.recency()` means "a replaces
//! b". Every comparison of event versions in the project goes through it.

use std::cmp::Ordering;

use nostr::prelude::{Event, EventId, Timestamp};

/// Where an event version stands in the NIP-01 order: greater is newer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Recency {
    pub created_at: Timestamp,
    pub id: EventId,
}

impl Recency {
    pub fn new(created_at: Timestamp, id: EventId) -> Self {
        Recency { created_at, id }
    }

    pub fn of(event: &Event) -> Self {
        Recency::new(event.created_at, event.id)
    }
}

impl Ord for Recency {
    fn cmp(&self, other: &Self) -> Ordering {
        self.created_at.cmp(&other.created_at).then_with(|| other.id.cmp(&self.id))
    }
}

impl PartialOrd for Recency {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rec(secs: u64, id: u8) -> Recency {
        Recency::new(Timestamp::from_secs(secs), EventId::from_byte_array([id; 32]))
    }

    #[test]
    fn later_second_wins_then_lower_id() {
        assert!(rec(2, 9) > rec(1, 0));
        assert!(rec(1, 1) > rec(1, 2));
        assert_eq!(rec(1, 1).cmp(&rec(1, 1)), Ordering::Equal);
    }

    proptest! {
        #[test]
        fn total_order_matches_nip01(a in 0u64..4, b in 0u64..4, x in any::<u8>(), y in any::<u8>()) {
            let (ra, rb) = (rec(a, x), rec(b, y));
            let nip01_newer = a > b || (a == b && x < y);
            prop_assert_eq!(ra > rb, nip01_newer);
            prop_assert_eq!(ra.cmp(&rb), rb.cmp(&ra).reverse());
        }
    }
}
