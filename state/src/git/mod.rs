//! What happens to git data, as pure decisions over facts the relay gathers: whether a push may
//! land (decisions 5 and 6), what to release and align when data arrives (decision 7), what
//! enters an identifier family's object pool, GRASP-06 contributor repositories, which clone URLs
//! a background sync tries, repository work deferred past its lock bound, and which small git
//! reads the ref cache answers. Refs are read by the caller and handed in; nothing here runs
//! git or touches a repository.
//!
//! - [`push`]: the push decision as one function, [`push::decide_push`], plus helpers for
//!   releasing events after a push.
//! - [`push_index`]: held states indexed by the refs they declare, for the same decision over
//!   thousands of held states ([`push_index::IndexedCandidates`]).
//! - [`release`]: what to do when git data arrives, as a [`release::ReleasePlan`] (states to
//!   store, pull request refs, alignment of refs and HEAD, promotion) and copy targets.
//! - [`pool`]: one object store per identifier family: what of a member's refs enters the pool
//!   (only what a signed, stored event released; the rest is staged) and what a gc in the pool
//!   keeps.
//! - [`prs`]: GRASP-06 contributor repositories (`/prs/<npub>/<identifier>.git`): which clone
//!   URLs name one, which a pull request binds to and is copied from, the empty answer of a path
//!   with no repository.
//! - [`clone_sources`]: which clone URLs one background git sync attempt tries, in which order
//!   (by trust, capped per source and per attempt).
//! - [`deferred`]: repository work an event could not do within its lock bound, retried later
//!   with backoff ([`deferred::DeferredWork`]).
//! - [`ref_files`]: a files-backend repository's `packed-refs` and loose ref files parsed
//!   without git (the text is read by the caller).
//! - [`ref_read`]: which small git reads (the upload-pack and receive-pack ref advertisements,
//!   v2 `ls-refs`) the relay's ref cache may answer, and their key.
//! - [`receive_pack`]: a push the relay's listener runs from end to end: its commands read from
//!   the request, the updates git applied, the release's lines in git's side band.
//! - [`pkt_line`]: git's pkt-line framing, read and written.

pub mod clone_sources;
pub mod deferred;
pub mod pkt_line;
pub mod pool;
pub mod prs;
pub mod push;
pub mod push_index;
pub mod receive_pack;
pub mod ref_files;
pub mod ref_read;
pub mod release;
