//! The operator's allow and deny lists, as pure data (docs/protocol.md#trust).
//!
//! A [`Curation`] is built from command-line values and from a curation file (one rule per line,
//! `#` comments):
//!
//! ```text
//! block-author npub1...          # every event by this key is refused `blocked:`
//! block-event  <64-hex id>       # this event is refused `blocked:`
//! allow-repo   npub1...          # when any allow-repo rule exists, only matching
//! allow-repo   npub1.../ident    #   repositories are accepted
//! allow-repo   ident
//! deny-repo    <same patterns>   # matching repositories are refused
//! ```
//!
//! Public keys may be given as npub or hex. [`Curation::check_author`],
//! [`Curation::check_event`] and [`Curation::check_repo`] are the verdicts; refusals are complete
//! NIP-01 `blocked:` messages.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use nostr::prelude::{EventId, FromBech32, PublicKey};

use crate::names::identifier::npub_of;

/// Which repositories a rule names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum RepoPattern {
    /// Every repository of this owner.
    Owner(PublicKey),
    /// One owner's repository.
    Repo(PublicKey, String),
    /// This identifier, whoever owns it.
    Identifier(String),
}

impl RepoPattern {
    pub fn matches(&self, owner: &PublicKey, identifier: &str) -> bool {
        match self {
            RepoPattern::Owner(o) => o == owner,
            RepoPattern::Repo(o, i) => o == owner && i == identifier,
            RepoPattern::Identifier(i) => i == identifier,
        }
    }
}

impl fmt::Display for RepoPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepoPattern::Owner(o) => write!(f, "{}", npub_of(o)),
            RepoPattern::Repo(o, i) => write!(f, "{}/{i}", npub_of(o)),
            RepoPattern::Identifier(i) => write!(f, "{i}"),
        }
    }
}

/// A public key given as npub or 64 hex characters.
pub fn parse_pubkey(s: &str) -> Option<PublicKey> {
    let s = s.trim();
    if s.starts_with("npub1") {
        PublicKey::from_bech32(s).ok()
    } else if s.len() == 64 {
        PublicKey::from_hex(s).ok()
    } else {
        None
    }
}

impl FromStr for RepoPattern {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty repository pattern; give npub, npub/identifier or identifier".into());
        }
        if let Some((owner, ident)) = s.split_once('/') {
            let owner = parse_pubkey(owner).ok_or_else(|| format!("{s:?}: {owner:?} is not an npub or hex public key"))?;
            crate::names::identifier::validate_identifier(ident).map_err(|e| format!("{s:?}: {e}"))?;
            return Ok(RepoPattern::Repo(owner, ident.to_string()));
        }
        if let Some(owner) = parse_pubkey(s) {
            return Ok(RepoPattern::Owner(owner));
        }
        if s.starts_with("npub1") {
            return Err(format!("{s:?} is not a valid npub"));
        }
        crate::names::identifier::validate_identifier(s).map_err(|e| format!("{s:?}: {e}"))?;
        Ok(RepoPattern::Identifier(s.to_string()))
    }
}

/// The allow and deny lists in force.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Curation {
    pub blocked_authors: BTreeSet<PublicKey>,
    pub blocked_events: BTreeSet<EventId>,
    pub repo_allow: BTreeSet<RepoPattern>,
    pub repo_deny: BTreeSet<RepoPattern>,
}

/// A line of a curation file that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct CurationError {
    pub line: usize,
    pub message: String,
}

impl Curation {
    /// Reads a curation file's text (see the module documentation).
    pub fn parse(text: &str) -> Result<Curation, CurationError> {
        let mut c = Curation::default();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |message: String| CurationError { line: n + 1, message };
            let (rule, value) = line.split_once(char::is_whitespace).ok_or_else(|| err(format!("{line:?} has no value")))?;
            let value = value.trim();
            match rule {
                "block-author" => {
                    c.blocked_authors.insert(parse_pubkey(value).ok_or_else(|| err(format!("{value:?} is not an npub or hex public key")))?);
                }
                "block-event" => {
                    c.blocked_events.insert(EventId::from_hex(value).map_err(|_| err(format!("{value:?} is not a 64-hex event id")))?);
                }
                "allow-repo" => {
                    c.repo_allow.insert(value.parse().map_err(err)?);
                }
                "deny-repo" => {
                    c.repo_deny.insert(value.parse().map_err(err)?);
                }
                other => {
                    return Err(err(format!(
                        "unknown rule {other:?}; use block-author, block-event, allow-repo or deny-repo"
                    )))
                }
            }
        }
        Ok(c)
    }

    /// Both lists together.
    pub fn merged(mut self, other: &Curation) -> Curation {
        self.blocked_authors.extend(other.blocked_authors.iter().copied());
        self.blocked_events.extend(other.blocked_events.iter().copied());
        self.repo_allow.extend(other.repo_allow.iter().cloned());
        self.repo_deny.extend(other.repo_deny.iter().cloned());
        self
    }

    /// Is any rule in force?
    pub fn is_active(&self) -> bool {
        !(self.blocked_authors.is_empty() && self.blocked_events.is_empty() && self.repo_allow.is_empty() && self.repo_deny.is_empty())
    }

    /// Every event by a blocked author is refused.
    pub fn check_author(&self, author: &PublicKey) -> Result<(), String> {
        if self.blocked_authors.contains(author) {
            return Err(format!(
                "blocked: events by {} are not accepted on this server (operator's deny list)",
                npub_of(author)
            ));
        }
        Ok(())
    }

    /// An event: its author, then its id.
    pub fn check_event(&self, author: &PublicKey, id: &EventId) -> Result<(), String> {
        self.check_author(author)?;
        if self.blocked_events.contains(id) {
            return Err("blocked: this event is not accepted on this server (operator's deny list)".into());
        }
        Ok(())
    }

    /// A repository (owner, identifier): refused when denied, or when an allow list exists and
    /// does not name it.
    pub fn check_repo(&self, owner: &PublicKey, identifier: &str) -> Result<(), String> {
        let name = format!("{}/{identifier}", npub_of(owner));
        if self.repo_deny.iter().any(|p| p.matches(owner, identifier)) {
            return Err(format!("blocked: repository {name} is not accepted on this server (operator's deny list)"));
        }
        if !self.repo_allow.is_empty() && !self.repo_allow.iter().any(|p| p.matches(owner, identifier)) {
            return Err(format!(
                "blocked: this server only hosts repositories on its operator's allow list, and {name} is not on it; ask the operator or use another GRASP server"
            ));
        }
        Ok(())
    }

    /// The NIP-11 `curation` summary (only meaningful when [`is_active`](Self::is_active)).
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if !self.repo_allow.is_empty() {
            parts.push(format!("only repositories on an allow list of {} entries are accepted", self.repo_allow.len()));
        }
        if !self.repo_deny.is_empty() {
            parts.push(format!("{} repository patterns are refused", self.repo_deny.len()));
        }
        if !self.blocked_authors.is_empty() {
            parts.push(format!("events by {} blocked public keys are refused", self.blocked_authors.len()));
        }
        if !self.blocked_events.is_empty() {
            parts.push(format!("{} blocked event ids are refused", self.blocked_events.len()));
        }
        format!("Curated by the operator: {}.", parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{Keys, ToBech32};

    #[test]
    fn parses_rules_and_decides() {
        let (a, b) = (Keys::generate().public_key(), Keys::generate().public_key());
        let id = EventId::from_byte_array([7u8; 32]);
        let text = format!(
            "# comment\nblock-author {}\nblock-event {}\n\nallow-repo {}\nallow-repo {}/tools # one repo\ndeny-repo secret\n",
            a.to_bech32().unwrap(),
            id.to_hex(),
            a.to_hex(),
            b.to_bech32().unwrap()
        );
        let c = Curation::parse(&text).unwrap();
        assert!(c.is_active());
        assert!(c.check_author(&a).unwrap_err().starts_with("blocked:"));
        assert!(c.check_author(&b).is_ok());
        assert!(c.check_event(&b, &id).unwrap_err().starts_with("blocked:"));
        assert!(c.check_repo(&a, "anything").is_ok());
        assert!(c.check_repo(&a, "secret").is_err(), "deny wins over allow");
        assert!(c.check_repo(&b, "tools").is_ok());
        assert!(c.check_repo(&b, "other").unwrap_err().contains("allow list"));
        assert!(c.summary().contains("allow list of 2"));
        assert!(!Curation::default().is_active());
        assert!(Curation::default().check_repo(&a, "x").is_ok());
    }

    #[test]
    fn bad_lines_name_their_line() {
        assert_eq!(Curation::parse("block-author nope").unwrap_err().line, 1);
        assert_eq!(Curation::parse("\nfrobnicate x").unwrap_err().line, 2);
        assert!(Curation::parse("deny-repo a/b/c").is_err());
        assert!(Curation::parse("deny-repo ..").is_err());
        assert!(Curation::parse("block-event 12").is_err());
        assert!(Curation::parse("allow-repo").is_err());
    }
}
