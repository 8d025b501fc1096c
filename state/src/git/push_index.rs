//! Held states indexed by the branches and tags they declare, so that a push is matched against
//! thousands of held states with one map lookup instead of a comparison with each.
//!
//! [`HeldStateIndex`] is built once from the held states of an identifier (the relay keeps it
//! while they do not change) and keeps, per declared ref map, only the newest state: the only
//! one a push can match, since the newest matching state wins. [`IndexedCandidates`] adds the
//! latest stored state and applies the rule the relay applies to a slice of candidates (a held
//! state authorises only when it is newer than the latest stored one), so
//! `decide_push_among(req, &indexed)` answers exactly what `decide_push` answers for the
//! stored state plus the held states newer than it (property-tested in `state/tests/props.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::nostr::nip34::{RepoState, Source};
use crate::git::push::Candidates;
use crate::names::refs::RefMap;

/// Held states by declared refs; the newest of each ref map, and the newest of all.
#[derive(Debug, Default, Clone)]
pub struct HeldStateIndex {
    by_refs: HashMap<RefMap, Arc<RepoState>>,
    newest: Option<Arc<RepoState>>,
    /// The newest state that can never be satisfied (kept out of the maps: it matches nothing).
    newest_unsatisfiable: Option<Arc<RepoState>>,
    len: usize,
}

impl HeldStateIndex {
    pub fn new(states: impl IntoIterator<Item = Arc<RepoState>>) -> Self {
        let mut index = HeldStateIndex::default();
        for state in states {
            index.insert(state);
        }
        index
    }

    /// Adds one held state.
    pub fn insert(&mut self, state: Arc<RepoState>) {
        self.len += 1;
        if !state.is_satisfiable() {
            if self.newest_unsatisfiable.as_ref().is_none_or(|n| state.is_newer_than(n)) {
                self.newest_unsatisfiable = Some(state);
            }
            return;
        }
        if self.newest.as_ref().is_none_or(|n| state.is_newer_than(n)) {
            self.newest = Some(state.clone());
        }
        match self.by_refs.get_mut(&state.refs) {
            Some(kept) if state.is_newer_than(kept) => *kept = state,
            Some(_) => {}
            None => {
                self.by_refs.insert(state.refs.clone(), state);
            }
        }
    }

    /// How many states were indexed.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The candidates of one push: the latest stored state of the maintainer set, and the held
/// states (already limited to the maintainer set) that are newer than it.
#[derive(Debug, Clone, Copy)]
pub struct IndexedCandidates<'a> {
    pub stored: Option<&'a RepoState>,
    pub held: &'a HeldStateIndex,
}

impl IndexedCandidates<'_> {
    /// A held state authorises only if it is newer than the latest stored state.
    fn usable(&self, held: &RepoState) -> bool {
        self.stored.is_none_or(|stored| held.is_newer_than(stored))
    }

    fn pick<'s>(&self, stored: Option<&'s RepoState>, held: Option<&'s RepoState>) -> Option<(&'s RepoState, Source)> {
        // A held state that is usable is newer than the stored one: it wins.
        match held.filter(|h| self.usable(h)) {
            Some(h) => Some((h, Source::Purgatory)),
            None => stored.map(|s| (s, Source::Stored)),
        }
    }
}

impl Candidates for IndexedCandidates<'_> {
    fn newest_matching(&self, refs: &RefMap) -> Option<(&RepoState, Source)> {
        let stored = self.stored.filter(|s| s.refs == *refs);
        // The newest held state with these refs: if it is not newer than the stored state, no
        // held state with these refs is.
        self.pick(stored, self.held.by_refs.get(refs).map(|s| &**s))
    }

    fn newest(&self) -> Option<(&RepoState, Source)> {
        self.pick(self.stored, self.held.newest.as_deref())
    }

    fn newest_unsatisfiable(&self) -> Option<&RepoState> {
        self.held.newest_unsatisfiable.as_deref().filter(|h| self.usable(h))
    }
}
