//! The items all NIP-77 negentropy sessions hold together, against a total
//! (`--negentropy-max-items-total`): kept with the store, which every connection shares.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The items held by the negentropy sessions of every connection, against a total
/// (`--negentropy-max-items-total`). Cloning shares the count.
#[derive(Debug, Clone)]
pub struct ItemBudget {
    held: Arc<AtomicUsize>,
    total: usize,
}

impl ItemBudget {
    pub fn new(total: usize) -> Self {
        Self {
            held: Arc::new(AtomicUsize::new(0)),
            total,
        }
    }

    /// Reserves `n` items until the reservation is dropped; `None` when fewer than `n` remain.
    pub fn reserve(&self, n: usize) -> Option<Reservation> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|&after| after <= self.total)
            })
            .ok()?;
        Some(Reservation {
            held: self.held.clone(),
            n,
        })
    }

    /// Items reserved now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    pub fn total(&self) -> usize {
        self.total
    }
}

impl Default for ItemBudget {
    fn default() -> Self {
        Self::new(crate::config::DEFAULT_NEGENTROPY_MAX_ITEMS_TOTAL)
    }
}

/// Items of an [`ItemBudget`] held by one session; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    held: Arc<AtomicUsize>,
    n: usize,
}

impl Reservation {
    /// Items reserved.
    pub fn items(&self) -> usize {
        self.n
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.held.fetch_sub(self.n, Ordering::AcqRel);
    }
}
