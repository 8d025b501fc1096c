//! grasp-state: everything the GRASP relay, its git hooks and its CGI wrapper
//! agree on, as pure data and pure functions (no I/O, no async runtime).
//!
//! Layout, one concept per module:
//!
//! - [`refs`]: ref names, object ids, [`refs::RefUpdate`] (one line of
//!   `pre-receive` input) and [`refs::RefMap`] (a repository's refs).
//! - [`ref_files`]: a files-backend repository's `packed-refs` and loose ref files parsed
//!   without git (the relay reads refs without a process where that is safe).
//! - [`ref_read`]: which small git reads (the upload-pack ref advertisement, v2 `ls-refs`) the
//!   relay's ref cache may answer, and their key.
//! - [`nip34`]: NIP-34 events as types: [`nip34::Announcement`] (30617),
//!   [`nip34::RepoState`] (30618), [`nip34::PullRequest`] (1618/1619), the kind
//!   constants, what an event references, and "does this announcement list
//!   this service" (docs/protocol.md#decisions, decision 1).
//! - [`outbox`]: GRASP-03 Sync+: a repository's participants, their lists' relays, and the
//!   bounded plan of one pass over them.
//! - [`roles`]: what one announcement says about maintainership (NIP-34 role tags `M`/`m`/`o`
//!   with their boundaries, or `maintainers`), read into [`roles::Claims`].
//! - [`maintainers`]: the confirmed maintainers of an (owner, identifier), reciprocal and
//!   bounded ([`maintainers::MaintainerSet`], decision 4), and where any key stands.
//! - [`push`]: the push decision (decisions 5 and 6) as one function,
//!   [`push::decide_push`], plus helpers for releasing events after a push.
//! - [`announcements`]: the announcements of an identifier, stored and held merged newest per
//!   owner; maintainer sets and "which owners trust this author" through a reverse index
//!   ([`announcements::TrustIndex`]).
//! - [`admission`]: where an incoming announcement or state event goes, as verdicts over
//!   looked-up facts.
//! - [`archive`]: GRASP-05 archive mode, which announcements not listing this service are
//!   accepted anyway (with a repository, read-only unless configured otherwise).
//! - [`release`]: what to do when git data arrives, as a [`release::ReleasePlan`] (states to
//!   store, pull request refs, alignment of refs and HEAD, promotion) and copy targets.
//! - [`pool`]: one object store per identifier family: what of a member's refs enters the pool
//!   (only what a signed, stored event released; the rest is staged) and what a gc in the pool
//!   keeps.
//! - [`prs`]: GRASP-06 contributor repositories (`/prs/<npub>/<identifier>.git`): which clone
//!   URLs name one, which a pull request binds to and is copied from, the empty answer of a path
//!   with no repository.
//! - [`push_limits`]: how many bytes one push may bring (`--max-push-bytes`,
//!   `--max-pr-push-bytes`), checked on the quarantine in `pre-receive`.
//! - [`hook_config`]: the file beside the installed hooks that tells them the data directory
//!   and the push limits (the hooks are the binaries themselves, started without a shell).
//! - [`push_lock`]: a repository's push lock (`<repo>/grasp.lock`), only ever tried, waited
//!   for within a bound ([`push_lock::PushLock`]); shared by `grasp-cgi` and the relay.
//! - [`push_index`]: held states indexed by the refs they declare, for the same decision
//!   over thousands of held states ([`push_index::IndexedCandidates`]).
//! - [`relay_profile`]: the relay's own profile (kind 0) and relay list (kind 10002), as
//!   published to the index relays.
//! - [`recency`]: the NIP-01 "which event is newer" order as one type,
//!   [`recency::Recency`].
//! - [`auth`]: NIP-42 `AUTH` verification and the NIP-70 protected-event rule.
//! - [`rate`]: write limits as token buckets (alone and per key) with the time passed in.
//! - [`client_key`]: the key a client address is counted under by every per-address limit
//!   (IPv6 by its prefix, `--ipv6-prefix-len`).
//! - [`event_size`]: the most bytes an event of each kind may have.
//! - [`free_disk`]: the low-disk verdict (`--min-free-disk`) for events and pushes.
//! - [`replica`]: the other members of a replica set, as the operator names them.
//! - [`owner_quota`]: the quota of bytes per owner and the daily budget per address for new
//!   owners' repositories.
//! - [`contributor_data`]: the ledger and budgets of pull request data that no maintainer
//!   signed (per author, address and in total), and when a closed one is pruned.
//! - [`transfer`]: the minimum rate a git request body must keep (`--git-min-rate`).
//! - [`fd_budget`]: the file descriptors the configured limits need (checked at startup).
//! - [`curation`]: the operator's allow and deny lists (authors, events, repositories).
//! - [`clone_sources`]: which clone URLs one background git sync attempt tries, in which order
//!   (by trust, capped per source and per attempt).
//! - [`deferred`]: repository work an event could not do within its lock bound, retried later
//!   with backoff ([`deferred::DeferredWork`]).
//! - [`hook_api`]: the versioned JSON request/response types the hooks send to
//!   the relay's internal API.
//! - [`html`]: the one HTML escaping function of every page.
//! - [`identifier`]: repository path layout and identifier validation (decision 2).
//! - [`host`]: the one `host[:port]` parser (configuration and URLs, default ports per
//!   scheme).
//! - [`cors`]: the CORS headers and preflight answer of every public response.
//! - [`cgi`]: the CGI response header block (what `grasp-cgi` and `git http-backend` print).
//! - [`git_env`]: the environment policy of every git process (no system/global config, no
//!   inherited `GIT_*`).
//! - [`git_backend`]: how `git http-backend` runs for one request (for `grasp-cgi` and the
//!   relay's listener alike) and whether a service is private.
//! - [`group_commit`]: when the saves waiting at the event store's gate go to the store in one
//!   commit.
//! - [`atomic_file`]: the one crash-safe file replacement (tmp, fsync, rename, dir fsync).
//! - [`key_file`]: a secret key kept in a file (the relay's identity): hex or nsec on one line,
//!   readable by its owner only.
//! - [`purgatory`]: the purgatory data model (entries, deadlines, caps, expiry
//!   sweep) and its crash-safe checkpoint format.
//!
//! Everything that reaches this crate may come from the network: bad input
//! yields a typed error whose message says what is wrong and what to do, never
//! a panic.

pub mod contract;
pub mod git;
pub mod trust;
pub mod authority;
pub mod nostr;
pub mod names;
pub mod purgatory;
