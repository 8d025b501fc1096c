//! What the hub asks of the other replicas of its set (docs/scaling.md), as two ports that the
//! replica machinery of `crate::peers` fills once at startup: the hub decides, the peers reach
//! the network. [`Confirmations`] is `--replica-acks` (`peers::acks`), [`OtherReplicas`] the
//! replicas asked for one identifier's events and recognised by their keys
//! (`peers::replica_reads`). Outside a replica set neither is set and nothing is asked.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use grasp_state::names::refs::RefMap;
use nostr::prelude::{Event, Filter, PublicKey};

use super::Grasp;

/// `--replica-acks N`: the other replicas confirm before the client is answered.
pub trait Confirmations: Send + Sync {
    /// Sends `event` to the others and waits until enough hold it. `Err`: the `OK` line for
    /// the client (NIP-01 `error:`).
    fn confirm<'a>(&'a self, event: &'a Arc<Event>) -> BoxFuture<'a, Result<(), String>>;

    /// Waits until enough others serve `refs` for `npub`'s repository `identifier`; one line for
    /// the pusher either way.
    fn confirm_push<'a>(&'a self, npub: &'a str, identifier: &'a str, refs: &'a RefMap) -> BoxFuture<'a, String>;
}

/// What asking the replicas came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asked {
    /// Replicas that answered within the deadline.
    pub answered: usize,
    /// Events they answered that this server did not have (handed to admission).
    pub new_here: usize,
    /// Events this server did not have, admitted (held or stored).
    pub admitted: usize,
}

/// The other replicas: asked for what a push needs, recognised when they ask.
pub trait OtherReplicas: Send + Sync {
    /// Asks every replica for `identifier`'s announcements and states and admits those this
    /// server lacks, within a bound. `repo`: the repository as logged.
    fn ask<'a>(&'a self, identifier: &'a str, repo: &'a str) -> BoxFuture<'a, Asked>;

    /// Before a push reaches git: a push to a hosted repository this server does not have has
    /// the replicas asked for its identifier's events first; any other request passes at once.
    fn before_push_to_missing<'a>(&'a self, grasp: &'a Grasp, method: &'a str, path: &'a str, query: &'a str) -> BoxFuture<'a, ()>;

    /// The held announcements and states matching `filters` that a replica authenticated as one
    /// of `authenticated` may read (none for anybody else).
    fn held_for<'a>(&'a self, grasp: &'a Grasp, authenticated: &'a [PublicKey], filters: &'a [Filter]) -> BoxFuture<'a, Vec<Arc<Event>>>;

    /// Is `key` another replica's own key? An unknown key has the replicas looked at again
    /// (bounded).
    fn is_replica<'a>(&'a self, key: &'a PublicKey) -> BoxFuture<'a, bool>;

    /// Is `key` a replica's key known already? No waiting.
    fn is_known(&self, key: &PublicKey) -> bool;
}
