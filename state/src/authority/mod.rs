//! Who speaks for a repository: the announcements of an identifier merged newest per owner, the
//! confirmed maintainers read from them (reciprocal and bounded, decision 4), and where an
//! incoming announcement or state event goes given what is already known
//! (docs/protocol.md#maintainer-authority, #acceptance). Pure verdicts over facts the relay looked
//! up; built on [`crate::nostr`] and [`crate::names`].
//!
//! - [`announcements`]: the announcements of an identifier, stored and held merged newest per
//!   owner; maintainer sets and "which owners trust this author" through a reverse index
//!   ([`announcements::TrustIndex`]).
//! - [`maintainers`]: the confirmed maintainers of an (owner, identifier), reciprocal and
//!   bounded ([`maintainers::MaintainerSet`]), and where any key stands.
//! - [`admission`]: where an incoming announcement or state event goes, as verdicts over
//!   looked-up facts.

pub mod admission;
pub mod announcements;
pub mod maintainers;
