//! GRASP-05 archive mode: which announcements that do not list this service are accepted anyway,
//! with a repository served read-only (docs/protocol.md#archive-mode).
//!
//! The operator names what to archive ([`Archive`]): every announcement (`--archive-all`), owners,
//! repositories or identifiers (`--archive`, the patterns of the allow and deny lists), or the
//! repositories hosted on given GRASP services (`--archive-grasp-service`: an announcement with a
//! `clone` URL on that host). An announcement that lists this service is hosted, never archived,
//! whatever the archive says ([`Archive::archives`] is asked only for the others). Archived
//! repositories refuse pushes unless `--archive-writable`.

use crate::trust::curation::RepoPattern;
use crate::nostr::nip34::{url_names_host, Announcement};

/// The archive configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Archive {
    /// `--archive-all`: every announcement.
    pub all: bool,
    /// `--archive`: owners, repositories, identifiers.
    pub patterns: Vec<RepoPattern>,
    /// `--archive-grasp-service`: `host[:port]` of GRASP services whose repositories are archived.
    pub services: Vec<String>,
    /// `--archive-writable`: archived repositories take pushes authorised by state events, as
    /// hosted ones do.
    pub writable: bool,
}

impl Archive {
    /// Is any archive configured?
    pub fn is_active(&self) -> bool {
        self.all || !self.patterns.is_empty() || !self.services.is_empty()
    }

    /// Does `a` (an announcement that does not list this service) belong to the archive?
    pub fn archives(&self, a: &Announcement) -> bool {
        self.all
            || self.patterns.iter().any(|p| p.matches(&a.owner, &a.identifier))
            || self.services.iter().any(|host| a.clone_urls.iter().any(|url| url_names_host(url, &["http", "https"], host)))
    }

    /// The archive's scope in words, for NIP-11 `curation` and the acceptance criteria.
    pub fn summary(&self) -> String {
        let access = if self.writable { "Writable" } else { "Read-only" };
        if self.all {
            return format!("{access} archive (GRASP-05) of every repository announced on the relays this server follows");
        }
        let mut scope = Vec::new();
        if !self.patterns.is_empty() {
            let shown: Vec<String> = self.patterns.iter().take(20).map(|p| p.to_string()).collect();
            let more = self.patterns.len().saturating_sub(shown.len());
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            scope.push(format!("the repositories matching {}{more} (an npub: all its repositories; an identifier: whoever owns it)", shown.join(", ")));
        }
        if !self.services.is_empty() {
            scope.push(format!("the repositories hosted on {}", self.services.join(", ")));
        }
        format!("{access} archive (GRASP-05) of {}", scope.join(", and of "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nostr::nip34::tests::{event, tag};
    use nostr::prelude::Keys;

    fn announcement(keys: &Keys, d: &str, clone: &str) -> Announcement {
        let ev = event(keys, crate::nostr::nip34::KIND_ANNOUNCEMENT, vec![tag(&["d", d]), tag(&["clone", clone]), tag(&["relays", "wss://r.example"])]);
        Announcement::from_event(&ev).unwrap()
    }

    #[test]
    fn the_archive_takes_what_its_patterns_or_services_name() {
        let (alice, bob) = (Keys::generate(), Keys::generate());
        let a = announcement(&alice, "linux", "https://git.example.com/x/linux.git");
        let b = announcement(&bob, "bitcoin", "https://other.example.org:8443/y/bitcoin.git");
        let none = Archive::default();
        assert!(!none.is_active() && !none.archives(&a));
        let all = Archive { all: true, ..Archive::default() };
        assert!(all.archives(&a) && all.archives(&b));
        let owner = Archive { patterns: vec![RepoPattern::Owner(alice.public_key())], ..Archive::default() };
        assert!(owner.archives(&a) && !owner.archives(&b));
        let ident = Archive { patterns: vec!["bitcoin".parse().unwrap()], ..Archive::default() };
        assert!(!ident.archives(&a) && ident.archives(&b));
        let service = Archive { services: vec!["other.example.org:8443".into()], ..Archive::default() };
        assert!(!service.archives(&a) && service.archives(&b));
        let wrong_port = Archive { services: vec!["other.example.org".into()], ..Archive::default() };
        assert!(!wrong_port.archives(&b), "the host and port are compared as in decision 1");
        assert!(Archive { services: vec!["git.example.com".into()], ..Archive::default() }.archives(&a));
    }

    #[test]
    fn the_summary_states_the_scope_and_whether_pushes_are_taken() {
        let all = Archive { all: true, ..Archive::default() };
        assert!(all.summary().starts_with("Read-only archive (GRASP-05) of every repository"), "{}", all.summary());
        let some = Archive { patterns: vec!["linux".parse().unwrap()], services: vec!["git.example.com".into()], writable: true, ..Archive::default() };
        let s = some.summary();
        assert!(s.starts_with("Writable archive") && s.contains("linux") && s.contains("hosted on git.example.com"), "{s}");
    }
}
