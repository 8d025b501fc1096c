//! grasp-state: everything the GRASP relay, its git hooks and its CGI wrapper agree on.
//!
//! The crate is rooms by concern, each built only on the rooms listed before it (no room reaches
//! back to one listed after it):
//!
//! - [`names`]: what things are called: repository identifiers and their paths, ref names and
//!   object ids, hosts and ports, the key a client address is counted under.
//! - [`nostr`]: events as GRASP reads them: the NIP-34 kinds, maintainership claims, which
//!   version is newer, event sizes, the relay's own profile, the Sync+ plan, group commit.
//! - [`purgatory`]: the events held until their git data arrives (entries, deadlines, caps,
//!   expiry sweep, journal) and the checkpoint format.
//! - [`trust`]: who a client is and how much it may do: authentication, the operator's lists,
//!   rates, quotas, budgets, free disk, file descriptors.
//! - [`authority`]: who speaks for a repository: announcements merged, maintainer sets, where an
//!   incoming announcement or state event goes.
//! - [`git`]: decisions about git data: pushes, release and alignment, object pools, contributor
//!   repositories, clone sources, deferred work, which reads the ref cache answers.
//! - [`contract`]: what the four processes (relay, grasp-cgi, the two hooks) share: the hook
//!   API's wire types, the hooks' configuration, the CGI and git environment, every
//!   data-directory file name ([`contract::layout`]) and `GRASP_*` variable
//!   ([`contract::env_names`]), atomic files, push locks, the checkpoint file.
//!
//! All of the crate's I/O (files, locks, the environment, building git commands) lives in
//! [`contract`]; every other room is pure data and pure functions, with no async runtime. Two
//! things outside it touch the machine, both on purpose: [`purgatory::SystemClock`] reads the
//! clock (every rule takes the time from a [`purgatory::Clock`], so tests drive it), and the
//! purgatory logs expiry extensions through `tracing`.
//!
//! Everything that reaches this crate may come from the network: bad input yields a typed error
//! whose message says what is wrong and what to do, never a panic.

pub mod names;
pub mod nostr;
pub mod purgatory;
pub mod trust;
pub mod authority;
pub mod git;
pub mod contract;
