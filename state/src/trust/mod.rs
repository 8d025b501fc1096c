//! Who a client is and how much it may do: NIP-42 and GRASP-08 authentication, the NIP-70 rule,
//! the operator's lists (allow, deny, archive, replicas, address ranges), write rates, the
//! budgets and quotas of stored data, and the resource verdicts (free disk, file descriptors)
//! (docs/protocol.md#trust, docs/security.md). Pure: the relay measures and counts, these
//! decide, with the time passed in.
//!
//! - [`auth`]: NIP-42 `AUTH` verification, the GRASP-08 git proof and the NIP-70
//!   protected-event rule.
//! - [`curation`]: the operator's allow and deny lists (authors, events, repositories).
//! - [`archive`]: GRASP-05 archive mode, which announcements not listing this service are
//!   accepted anyway (with a repository, read-only unless configured otherwise).
//! - [`replica`]: the other members of a replica set, as the operator names them.
//! - [`cidr`]: address ranges (`--sync-deny`).
//! - [`rate`]: write limits as token buckets (alone and per key).
//! - [`owner_quota`]: the quota of bytes per owner and the daily budget per address for new
//!   owners' repositories.
//! - [`contributor_data`]: the ledger and budgets of pull request data that no maintainer
//!   signed (per author, address and in total), and when a closed one is pruned.
//! - [`free_disk`]: the low-disk verdict (`--min-free-disk`) for events and pushes.
//! - [`fd_budget`]: the file descriptors the configured limits need (checked at startup).

pub mod archive;
pub mod auth;
pub mod cidr;
pub mod contributor_data;
pub mod curation;
pub mod fd_budget;
pub mod free_disk;
pub mod owner_quota;
pub mod rate;
pub mod replica;
