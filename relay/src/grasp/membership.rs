//! Who may read and write a private (GRASP-08) service: its members (`--member`,
//! `--members-file`, the admin), and the other replicas of its set (docs/scaling.md, "A private
//! replica set"), recognised by their own keys, which this server reads from their NIP-11
//! documents (`self`) at the URLs its operator named (`--replica`). A public service lets
//! everybody in; these are asked only on a private one.

use nostr::prelude::PublicKey;

use super::Grasp;

impl Grasp {
    /// Is `key` a member or another replica of this set? An unknown key has the replicas'
    /// documents read again (at most every few seconds, within a bound: see
    /// `crate::peers::replica_reads::ReplicaReads::is_replica`).
    pub async fn is_member(&self, key: &PublicKey) -> bool {
        if self.trust.is_member(key) {
            return true;
        }
        match self.replica_reads.get() {
            Some(reads) => reads.is_replica(key).await,
            None => false,
        }
    }

    /// Is any of `keys` (what a connection authenticated as) a member or a replica already
    /// recognised? No waiting: a connection's `AUTH` is answered once [`Grasp::is_member`] has
    /// looked its key up.
    pub fn any_member(&self, keys: &[PublicKey]) -> bool {
        self.trust.any_member(keys) || self.replica_reads.get().is_some_and(|reads| keys.iter().any(|k| reads.is_known(k)))
    }
}
