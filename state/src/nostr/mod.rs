//! Nostr events as GRASP reads them: the NIP-34 kinds as types, what an announcement says about
//! maintainership, which version of an event is newer, how large an event may be, what the relay
//! publishes about itself, the Sync+ plan over participants' relay lists, and when saves go to
//! the event store together. Pure; built on [`crate::names`].
//!
//! - [`nip34`]: NIP-34 events as types: [`nip34::Announcement`] (30617),
//!   [`nip34::RepoState`] (30618), [`nip34::PullRequest`] (1618/1619), the kind constants, what
//!   an event references, and "does this announcement list this service"
//!   (docs/protocol.md#decisions, decision 1).
//! - [`roles`]: what one announcement says about maintainership (NIP-34 role tags `M`/`m`/`o`
//!   with their boundaries, or `maintainers`), read into [`roles::Claims`].
//! - [`recency`]: the NIP-01 "which event is newer" order as one type, [`recency::Recency`].
//! - [`event_size`]: the most bytes an event of each kind may have.
//! - [`relay_profile`]: the relay's own profile (kind 0) and relay list (kind 10002), as
//!   published to the index relays.
//! - [`outbox`]: GRASP-03 Sync+: a repository's participants, their lists' relays, and the
//!   bounded plan of one pass over them.
//! - [`group_commit`]: when the saves waiting at the event store's gate go to the store in one
//!   commit.

pub mod event_size;
pub mod group_commit;
pub mod nip34;
pub mod outbox;
pub mod recency;
pub mod relay_profile;
pub mod roles;
