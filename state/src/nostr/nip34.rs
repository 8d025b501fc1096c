//! NIP-34 events as typed data.
//!
//! The relay receives signed [`Event`]s; this module turns the ones GRASP
//! cares about into plain structs and says clearly what is wrong with the rest:
//!
//! - [`Announcement`] (kind 30617): who owns a repository, where it is served,
//!   who maintains it. [`Announcement::lists_service`] implements decision 1
//!   ("lists this service", docs/protocol.md#decisions).
//! - [`RepoState`] (kind 30618): the exact refs a maintainer wants served.
//! - [`PullRequest`] (kinds 1618 and 1619): the commit to expect at
//!   `refs/nostr/<event-id>`.
//! - [`references`]: the coordinates and event ids any event points at, for
//!   "tags, or is tagged by" acceptance.
//!
//! Signatures are not checked here; the relay verifies every event first.

use nostr::prelude::{Event, EventId, PublicKey, Timestamp};

use crate::nostr::recency::Recency;
use crate::nostr::roles::Claims;
use crate::names::refs::{is_valid_oid, is_valid_ref_name, RefMap, HEADS_PREFIX, TAGS_PREFIX};
use crate::names::host::{url_authority, HostPort};

/// Repository announcement.
pub const KIND_ANNOUNCEMENT: u16 = 30617;
/// Repository state.
pub const KIND_STATE: u16 = 30618;
/// Patch.
pub const KIND_PATCH: u16 = 1617;
/// Pull request.
pub const KIND_PR: u16 = 1618;
/// Pull request update.
pub const KIND_PR_UPDATE: u16 = 1619;
/// Issue.
pub const KIND_ISSUE: u16 = 1621;
/// Status: open.
pub const KIND_STATUS_OPEN: u16 = 1630;
/// Status: applied / merged / resolved.
pub const KIND_STATUS_APPLIED: u16 = 1631;
/// Status: closed.
pub const KIND_STATUS_CLOSED: u16 = 1632;
/// Status: draft.
pub const KIND_STATUS_DRAFT: u16 = 1633;
/// All status kinds.
pub const KINDS_STATUS: std::ops::RangeInclusive<u16> = KIND_STATUS_OPEN..=KIND_STATUS_DRAFT;
/// NIP-22 comment.
pub const KIND_COMMENT: u16 = 1111;
/// NIP-09 deletion request.
pub const KIND_DELETION: u16 = 5;
/// User grasp server list.
pub const KIND_USER_GRASP_LIST: u16 = 10317;

/// Why an event cannot be read as the NIP-34 event it claims to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The event has a different kind than the parser expects.
    #[error("event kind {found} is not a {expected}")]
    WrongKind { expected: &'static str, found: u16 },
    /// No `d` tag.
    #[error("kind {kind} event has no `d` tag: add [\"d\", \"<repository identifier>\"]")]
    MissingIdentifier { kind: u16 },
    /// A ref tag's value is not an oid.
    #[error("state event ref {name:?} has invalid object id {value:?}: use the full 40 (sha1) or 64 (sha256) character lowercase hex commit id")]
    InvalidRefOid { name: String, value: String },
    /// A ref tag's name breaks git's rules.
    #[error("state event ref name {name:?} is not a valid git ref name: fix or drop that tag")]
    InvalidRefName { name: String },
    /// The same ref is declared twice with different oids.
    #[error(
        "state event declares ref {name:?} twice with different object ids: keep one tag per ref"
    )]
    DuplicateRef { name: String },
    /// `HEAD` tag is not `ref: refs/heads/<branch>`.
    #[error(
        "state event HEAD {value:?} is malformed: use [\"HEAD\", \"ref: refs/heads/<branch>\"]"
    )]
    InvalidHead { value: String },
    /// PR without `c` tag.
    #[error("pull request has no `c` tag: add [\"c\", \"<tip commit id>\"]")]
    MissingCommit,
    /// PR `c` tag is not an oid.
    #[error("pull request `c` tag {value:?} is not a commit id: use the full 40 (sha1) or 64 (sha256) character lowercase hex id")]
    InvalidCommit { value: String },
}

/// Repository announcement (kind 30617).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub event_id: EventId,
    pub owner: PublicKey,
    /// The `d` tag, unvalidated (see the `identifier` module before touching the disk).
    pub identifier: String,
    /// All values of all `clone` tags, in order.
    pub clone_urls: Vec<String>,
    /// All values of all `relays` tags, in order.
    pub relays: Vec<String>,
    /// What it says about maintainership: role tags, or `maintainers` (crate::nostr::roles).
    pub claims: Claims,
    pub created_at: Timestamp,
}

impl Announcement {
    /// Where this announcement stands in the NIP-01 order.
    pub fn recency(&self) -> Recency {
        Recency::new(self.created_at, self.event_id)
    }

    /// Read a kind 30617 event. Requires a `d` tag; malformed role entries grant nothing
    /// ([`Claims::read`]).
    pub fn from_event(event: &Event) -> Result<Self, EventError> {
        expect_kind(
            event,
            KIND_ANNOUNCEMENT,
            "repository announcement (kind 30617)",
        )?;
        let identifier = identifier(event)?;
        let claims = Claims::read(&event.pubkey, event.tags.iter().map(|t| t.as_slice()));
        Ok(Self {
            event_id: event.id,
            owner: event.pubkey,
            identifier,
            clone_urls: tag_values(event, "clone").map(str::to_owned).collect(),
            relays: tag_values(event, "relays").map(str::to_owned).collect(),
            claims,
            created_at: event.created_at,
        })
    }

    /// Decision 1 (docs/protocol.md#decisions): true when some `clone` URL (http/https) and some
    /// `relays` URL (ws/wss) have exactly `public_host` as `host[:port]`.
    ///
    /// `public_host` is `host` or `host:port` (a leading scheme and trailing `/`
    /// are tolerated). Comparison is case-insensitive; a URL's explicit default
    /// port (80 for http/ws, 443 for https/wss) equals no port. A configured
    /// port matches a URL whose effective port is that port. No substring
    /// matching; userinfo (`user@`) is never part of the host.
    pub fn lists_service(&self, public_host: &str) -> bool {
        let Some(wanted) = parse_public_host(public_host) else {
            return false;
        };
        let clone_ok = self
            .clone_urls
            .iter()
            .any(|u| url_matches(u, &["http", "https"], &wanted));
        let relay_ok = self
            .relays
            .iter()
            .any(|u| url_matches(u, &["ws", "wss"], &wanted));
        clone_ok && relay_ok
    }

    /// `30617:<owner hex>:<identifier>`, the `a` tag value pointing here.
    pub fn coordinate(&self) -> String {
        format!(
            "{KIND_ANNOUNCEMENT}:{}:{}",
            self.owner.to_hex(),
            self.identifier
        )
    }
}

/// Repository state (kind 30618).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoState {
    pub event_id: EventId,
    pub author: PublicKey,
    pub identifier: String,
    /// Declared `refs/heads/*` and `refs/tags/*` (peeled `^{}` entries dropped). Values are
    /// lowercase object ids, except those of [`RepoState::unsatisfiable_refs`].
    pub refs: RefMap,
    /// `Some("refs/heads/<b>")` from `["HEAD", "ref: refs/heads/<b>"]` (or `refs/heads/<b>`).
    pub head: Option<String>,
    pub created_at: Timestamp,
}

impl RepoState {
    /// Read a kind 30618 event. Requires `d`; rejects invalid ref names, refs without a value,
    /// conflicting duplicates and a malformed `HEAD`. Other tags are ignored. Lenient where
    /// clients differ: `HEAD` may omit the `ref: ` prefix, and a value that is not a full object
    /// id is kept (see [`RepoState::unsatisfiable_refs`]).
    pub fn from_event(event: &Event) -> Result<Self, EventError> {
        expect_kind(event, KIND_STATE, "repository state (kind 30618)")?;
        let identifier = identifier(event)?;
        let mut refs = RefMap::new();
        let mut head = None;
        for tag in event.tags.iter() {
            let slice = tag.as_slice();
            let Some(name) = slice.first().map(String::as_str) else {
                continue;
            };
            let value = slice.get(1).map(String::as_str);
            if name == "HEAD" {
                let value = value.unwrap_or("");
                // Lenient: some clients write `refs/heads/<b>` without the `ref: ` prefix.
                let target = value.strip_prefix("ref: ").unwrap_or(value);
                if !(target.starts_with(HEADS_PREFIX) && is_valid_ref_name(target)) {
                    return Err(EventError::InvalidHead {
                        value: truncate(value),
                    });
                }
                head = Some(target.to_owned());
                continue;
            }
            if !(name.starts_with(HEADS_PREFIX) || name.starts_with(TAGS_PREFIX)) {
                continue;
            }
            if name.ends_with("^{}") {
                continue;
            }
            if !is_valid_ref_name(name) {
                return Err(EventError::InvalidRefName {
                    name: truncate(name),
                });
            }
            let value = match value.map(declared_oid) {
                Some(Some(oid)) => oid,
                _ => {
                    return Err(EventError::InvalidRefOid {
                        name: name.to_owned(),
                        value: truncate(value.unwrap_or("")),
                    })
                }
            };
            if let Some(previous) = refs.insert(name.to_owned(), value.clone()) {
                if previous != value {
                    return Err(EventError::DuplicateRef {
                        name: name.to_owned(),
                    });
                }
            }
        }
        Ok(Self {
            event_id: event.id,
            author: event.pubkey,
            identifier,
            refs,
            head,
            created_at: event.created_at,
        })
    }

    /// The refs whose declared value is not a full object id (e.g. an abbreviated `abc123`), as
    /// declared. A state naming one is held like any other but can never be satisfied: no
    /// repository can serve such a ref, so it authorises no push, sync never fetches for it, it
    /// is never released or served and it expires normally (docs/protocol.md#event-kinds).
    pub fn unsatisfiable_refs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.refs
            .iter()
            .filter(|(_, value)| !is_valid_oid(value))
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }

    /// Whether some repository could ever serve exactly this state: every declared value is a
    /// full object id (see [`RepoState::unsatisfiable_refs`]).
    pub fn is_satisfiable(&self) -> bool {
        self.unsatisfiable_refs().next().is_none()
    }

    /// NIP-01 order for replaceable events: true when `self` replaces `other`
    /// (newer `created_at`, or same second and lower event id).
    pub fn is_newer_than(&self, other: &RepoState) -> bool {
        self.recency() > other.recency()
    }

    /// Where this state stands in the NIP-01 order.
    pub fn recency(&self) -> Recency {
        Recency::new(self.created_at, self.event_id)
    }
}

/// Longest value read as an (abbreviated or malformed) object id: a SHA-256 id's length.
const MAX_DECLARED_OID: usize = 64;

/// The value a state event declares for a ref, read leniently: a full hex object id in any case
/// is lowercased; any other value of 1 to 64 characters (an abbreviated or malformed id) is kept
/// as declared and makes the state unsatisfiable ([`RepoState::unsatisfiable_refs`]). `None` for
/// an empty value (the tag names nothing) or a longer one (it cannot be an object id).
fn declared_oid(value: &str) -> Option<String> {
    let lower = value.to_ascii_lowercase();
    if is_valid_oid(&lower) {
        Some(lower)
    } else if value.is_empty() || value.chars().count() > MAX_DECLARED_OID {
        None
    } else {
        Some(value.to_owned())
    }
}

/// Where a known announcement or state event lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// In the event store (served).
    Stored,
    /// In purgatory, waiting for its git data.
    Purgatory,
}

/// Pull request (kind 1618) or pull request update (kind 1619).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    pub event_id: EventId,
    pub author: PublicKey,
    /// [`KIND_PR`] or [`KIND_PR_UPDATE`].
    pub kind: u16,
    /// The `c` tag: tip commit expected at `refs/nostr/<event_id>`.
    pub commit: String,
    /// (owner, identifier) of every repository named by a valid `a` tag.
    pub repos: Vec<(PublicKey, String)>,
    /// All values of all `clone` tags.
    pub clone_urls: Vec<String>,
    /// For updates: the `E` tag, the PR being updated.
    pub root: Option<EventId>,
}

impl PullRequest {
    /// Read a kind 1618 or 1619 event. Requires a valid `c` tag.
    pub fn from_event(event: &Event) -> Result<Self, EventError> {
        let kind = event.kind.as_u16();
        if kind != KIND_PR && kind != KIND_PR_UPDATE {
            return Err(EventError::WrongKind {
                expected: "pull request (kind 1618) or pull request update (kind 1619)",
                found: kind,
            });
        }
        let commit = first_value(event, "c").ok_or(EventError::MissingCommit)?;
        if !is_valid_oid(commit) {
            return Err(EventError::InvalidCommit {
                value: truncate(commit),
            });
        }
        let mut repos = Vec::new();
        for value in first_values(event, "a") {
            if let Some(c) = parse_coordinate(value) {
                if c.kind == KIND_ANNOUNCEMENT && !repos.contains(&(c.pubkey, c.identifier.clone()))
                {
                    repos.push((c.pubkey, c.identifier));
                }
            }
        }
        let root = if kind == KIND_PR_UPDATE {
            first_values(event, "E").find_map(parse_event_id)
        } else {
            None
        };
        Ok(Self {
            event_id: event.id,
            author: event.pubkey,
            kind,
            commit: commit.to_owned(),
            repos,
            clone_urls: tag_values(event, "clone").map(str::to_owned).collect(),
            root,
        })
    }
}

/// A user grasp list (kind 10317): the GRASP servers its author uses for NIP-34 activity, in
/// order of preference (`g` tags, each a server's WebSocket URL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserGraspList {
    pub author: PublicKey,
    /// The `g` values as published (non-empty), in order.
    pub servers: Vec<String>,
}

impl UserGraspList {
    /// Reads a kind 10317 event.
    pub fn from_event(event: &Event) -> Result<Self, EventError> {
        let kind = event.kind.as_u16();
        if kind != KIND_USER_GRASP_LIST {
            return Err(EventError::WrongKind { expected: "user grasp list (kind 10317)", found: kind });
        }
        Ok(UserGraspList {
            author: event.pubkey,
            servers: first_values(event, "g").map(str::to_owned).collect(),
        })
    }
}

/// An addressable event coordinate `<kind>:<pubkey hex>:<identifier>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Coordinate {
    pub kind: u16,
    pub pubkey: PublicKey,
    pub identifier: String,
}

impl std::fmt::Display for Coordinate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.kind,
            self.pubkey.to_hex(),
            self.identifier
        )
    }
}

/// What an event points at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct References {
    /// From `a`, `A` and coordinate-shaped `q` tags.
    pub coordinates: Vec<Coordinate>,
    /// From `e`, `E` and id-shaped `q` tags.
    pub event_ids: Vec<EventId>,
}

/// Every coordinate and event id `event` references; malformed values are
/// ignored and duplicates dropped.
pub fn references(event: &Event) -> References {
    let mut out = References::default();
    for tag in event.tags.iter() {
        let slice = tag.as_slice();
        let (Some(name), Some(value)) = (slice.first(), slice.get(1)) else {
            continue;
        };
        let name = name.as_str();
        if matches!(name, "a" | "A" | "q") {
            if let Some(c) = parse_coordinate(value) {
                if !out.coordinates.contains(&c) {
                    out.coordinates.push(c);
                }
                continue;
            }
        }
        if matches!(name, "e" | "E" | "q") {
            if let Some(id) = parse_event_id(value) {
                if !out.event_ids.contains(&id) {
                    out.event_ids.push(id);
                }
            }
        }
    }
    out
}

/// Parse `<kind>:<64 lowercase hex pubkey>:<identifier>`; the identifier may
/// contain `:` and may be empty (for replaceable kinds).
pub fn parse_coordinate(value: &str) -> Option<Coordinate> {
    let mut parts = value.splitn(3, ':');
    let kind_str = parts.next()?;
    let pk_str = parts.next()?;
    let identifier = parts.next()?;
    if kind_str.is_empty() || kind_str.len() > 5 || !kind_str.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let kind: u16 = kind_str.parse().ok()?;
    let pubkey = parse_hex_pubkey(pk_str)?;
    Some(Coordinate {
        kind,
        pubkey,
        identifier: identifier.to_owned(),
    })
}

/// 64 lowercase hex characters naming an event.
pub fn parse_event_id(value: &str) -> Option<EventId> {
    if is_hex64(value) {
        EventId::from_hex(value).ok()
    } else {
        None
    }
}

/// 64 lowercase hex characters naming a valid public key.
pub fn parse_hex_pubkey(value: &str) -> Option<PublicKey> {
    if is_hex64(value) {
        PublicKey::from_hex(value).ok()
    } else {
        None
    }
}

fn is_hex64(value: &str) -> bool {
    value.len() == 64
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn expect_kind(event: &Event, kind: u16, expected: &'static str) -> Result<(), EventError> {
    let found = event.kind.as_u16();
    if found == kind {
        Ok(())
    } else {
        Err(EventError::WrongKind { expected, found })
    }
}

fn identifier(event: &Event) -> Result<String, EventError> {
    first_value(event, "d")
        .map(str::to_owned)
        .ok_or(EventError::MissingIdentifier {
            kind: event.kind.as_u16(),
        })
}

/// Value (second element) of the first tag named `name`.
/// The value of the first tag named `name` that has one.
pub fn first_value<'a>(event: &'a Event, name: &'a str) -> Option<&'a str> {
    first_values(event, name).next()
}

/// Value (second element) of every tag named `name`.
fn first_values<'a>(event: &'a Event, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    event
        .tags
        .iter()
        .filter(move |t| t.as_slice().first().is_some_and(|n| n == name))
        .filter_map(|t| t.as_slice().get(1).map(String::as_str))
}

/// All values (every element after the name) of every tag named `name`, empty ones skipped.
fn tag_values<'a>(event: &'a Event, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    event
        .tags
        .iter()
        .filter(move |t| t.as_slice().first().is_some_and(|n| n == name))
        .flat_map(|t| t.as_slice().iter().skip(1).map(String::as_str))
        .filter(|v| !v.is_empty())
}

fn truncate(value: &str) -> String {
    value.chars().take(100).collect()
}

/// Does `url` (one of `schemes`, e.g. `["ws", "wss"]`) name exactly the configured public host
/// `public_host`? The same comparison as [`Announcement::lists_service`] (case-insensitive host,
/// explicit default ports equal none, no substring matching, userinfo ignored); the path is not
/// compared.
pub fn url_names_host(url: &str, schemes: &[&str], public_host: &str) -> bool {
    parse_public_host(public_host).is_some_and(|wanted| url_matches(url, schemes, &wanted))
}

/// The repository `url` is the root URL of on the configured public host `public_host`:
/// `http(s)://<host>/<npub>/<identifier>.git` or `http(s)://<host>/prs/<npub>/<identifier>.git`
/// exactly (host compared as in [`url_names_host`], no query, fragment or trailing path; the
/// identifier percent-decoded). `None` for anything else.
pub fn repo_url_on_host(url: &str, public_host: &str) -> Option<crate::names::identifier::RepoUrlPath> {
    if !url_names_host(url, &["http", "https"], public_host) || url.contains(['?', '#']) {
        return None;
    }
    let (_, rest) = url.trim().split_once("://")?;
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    crate::names::identifier::parse_repo_url_path(path).filter(|p| p.rest.is_empty())
}

/// A configured public host: `host[:port]`, a leading scheme and a trailing `/` tolerated.
fn parse_public_host(configured: &str) -> Option<HostPort> {
    HostPort::parse(crate::names::host::public_authority(configured))
}

/// Does `url` use one of `schemes` and have exactly `wanted` as its host and port? A wanted
/// host without a port means the URL scheme's default port.
fn url_matches(url: &str, schemes: &[&str], wanted: &HostPort) -> bool {
    let Some(found) = url_authority(url.trim()) else {
        return false;
    };
    schemes.contains(&found.scheme.as_str())
        && found.host == wanted.host
        && wanted.port_or_default(&found.scheme) == Some(found.port)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind, Tag};

    pub(crate) const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    pub(crate) const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    pub(crate) fn tag(parts: &[&str]) -> Tag {
        Tag::parse(parts.iter().copied()).unwrap()
    }

    pub(crate) fn event(keys: &Keys, kind: u16, tags: Vec<Tag>) -> Event {
        EventBuilder::new(Kind::Custom(kind), "")
            .tags(tags)
            .finalize(keys)
            .unwrap()
    }

    pub(crate) fn event_at(keys: &Keys, kind: u16, tags: Vec<Tag>, secs: u64) -> Event {
        EventBuilder::new(Kind::Custom(kind), "")
            .tags(tags)
            .custom_created_at(Timestamp::from_secs(secs))
            .finalize(keys)
            .unwrap()
    }

    fn announcement(clone: &[&str], relays: &[&str]) -> Announcement {
        let keys = Keys::generate();
        let mut c = vec!["clone"];
        c.extend_from_slice(clone);
        let mut r = vec!["relays"];
        r.extend_from_slice(relays);
        let ev = event(
            &keys,
            KIND_ANNOUNCEMENT,
            vec![tag(&["d", "repo"]), tag(&c), tag(&r)],
        );
        Announcement::from_event(&ev).unwrap()
    }

    #[test]
    fn announcement_fields() {
        let owner = Keys::generate();
        let m1 = Keys::generate().public_key();
        let m2 = Keys::generate().public_key();
        let ev = event(
            &owner,
            KIND_ANNOUNCEMENT,
            vec![
                tag(&["d", "my repo"]),
                tag(&[
                    "clone",
                    "https://a.example/x.git",
                    "https://b.example/x.git",
                ]),
                tag(&["clone", "https://c.example/x.git"]),
                tag(&["relays", "wss://a.example"]),
                tag(&["relays", "wss://b.example", "wss://c.example"]),
                tag(&[
                    "maintainers",
                    &m1.to_hex(),
                    &owner.public_key().to_hex(),
                    &m1.to_hex(),
                    &m1.to_hex().to_uppercase(),
                ]),
                tag(&["maintainers", &m2.to_hex()]),
            ],
        );
        let a = Announcement::from_event(&ev).unwrap();
        assert_eq!(a.identifier, "my repo");
        assert_eq!(a.owner, owner.public_key());
        assert_eq!(a.event_id, ev.id);
        assert_eq!(a.created_at, ev.created_at);
        assert_eq!(a.clone_urls.len(), 3);
        assert_eq!(
            a.relays,
            vec!["wss://a.example", "wss://b.example", "wss://c.example"]
        );
        assert_eq!(a.claims.maintainers, vec![m1, m2]);
        assert_eq!(
            a.coordinate(),
            format!("30617:{}:my repo", owner.public_key().to_hex())
        );
        // One value that is no key and the list grants nothing (crate::nostr::roles).
        let ev = event(&owner, KIND_ANNOUNCEMENT, vec![tag(&["d", "x"]), tag(&["maintainers", &m1.to_hex(), "not-a-key"])]);
        let a = Announcement::from_event(&ev).unwrap();
        assert!(a.claims.maintainers.is_empty() && a.claims.malformed == 1);
    }

    #[test]
    fn announcement_requires_d_and_kind() {
        let keys = Keys::generate();
        let ev = event(&keys, KIND_ANNOUNCEMENT, vec![tag(&["clone", "https://x"])]);
        let err = Announcement::from_event(&ev).unwrap_err();
        assert_eq!(err, EventError::MissingIdentifier { kind: 30617 });
        assert!(err.to_string().contains("add [\"d\""));
        let ev = event(&keys, KIND_STATE, vec![tag(&["d", "x"])]);
        assert!(matches!(
            Announcement::from_event(&ev),
            Err(EventError::WrongKind { found: 30618, .. })
        ));
        // A `d` tag with an empty value is present: validation happens elsewhere.
        let ev = event(&keys, KIND_ANNOUNCEMENT, vec![tag(&["d", ""])]);
        assert_eq!(Announcement::from_event(&ev).unwrap().identifier, "");
    }

    #[test]
    fn lists_service_exact_host() {
        let a = announcement(&["https://example.com/npub/x.git"], &["wss://example.com"]);
        assert!(a.lists_service("example.com"));
        assert!(a.lists_service("EXAMPLE.com"));
        assert!(a.lists_service("https://example.com/"));
        assert!(a.lists_service("example.com:443"));
        assert!(!a.lists_service("example.com:80"));
        assert!(!a.lists_service("example.co"));
        assert!(!a.lists_service("xample.com"));
        assert!(!a.lists_service(""));
        assert!(!a.lists_service("example.com/path"));
    }

    #[test]
    fn lists_service_needs_both_lists() {
        assert!(
            !announcement(&["https://example.com/x.git"], &["wss://other.com"])
                .lists_service("example.com")
        );
        assert!(
            !announcement(&["https://other.com/x.git"], &["wss://example.com"])
                .lists_service("example.com")
        );
        assert!(!announcement(&[], &["wss://example.com"]).lists_service("example.com"));
        // Several entries: one match in each is enough.
        let a = announcement(
            &["https://other.com/x.git", "http://Example.COM/npub/x.git"],
            &["wss://other.com", "ws://example.com/"],
        );
        assert!(a.lists_service("example.com"));
    }

    #[test]
    fn lists_service_schemes() {
        // Clone must be http(s), relay must be ws(s).
        assert!(
            !announcement(&["wss://example.com/x.git"], &["wss://example.com"])
                .lists_service("example.com")
        );
        assert!(
            !announcement(&["https://example.com/x.git"], &["https://example.com"])
                .lists_service("example.com")
        );
        assert!(
            !announcement(&["ssh://example.com/x.git"], &["wss://example.com"])
                .lists_service("example.com")
        );
        assert!(
            !announcement(&["example.com/x.git"], &["wss://example.com"])
                .lists_service("example.com")
        );
        assert!(
            announcement(&["HTTPS://example.com/x.git"], &["WSS://example.com"])
                .lists_service("example.com")
        );
    }

    #[test]
    fn lists_service_ports() {
        let a = announcement(&["http://127.0.0.1:7000/x.git"], &["ws://127.0.0.1:7000"]);
        assert!(a.lists_service("127.0.0.1:7000"));
        assert!(!a.lists_service("127.0.0.1"));
        assert!(!a.lists_service("127.0.0.1:7001"));
        let a = announcement(
            &["https://example.com:443/x.git"],
            &["wss://example.com:443/"],
        );
        assert!(a.lists_service("example.com"));
        let a = announcement(&["http://example.com:80/x.git"], &["ws://example.com"]);
        assert!(a.lists_service("example.com"));
        let a = announcement(
            &["https://example.com:8443/x.git"],
            &["wss://example.com:8443"],
        );
        assert!(!a.lists_service("example.com"));
        assert!(a.lists_service("example.com:8443"));
        let a = announcement(&["https://example.com:/x.git"], &["wss://example.com"]);
        assert!(!a.lists_service("example.com"));
        let a = announcement(&["https://example.com:99999/x.git"], &["wss://example.com"]);
        assert!(!a.lists_service("example.com"));
        let a = announcement(&["http://[::1]:7000/x.git"], &["ws://[::1]:7000"]);
        assert!(a.lists_service("[::1]:7000"));
        assert!(!a.lists_service("[::2]:7000"));
    }

    #[test]
    fn lists_service_no_tricks() {
        for (clone, relay) in [
            (
                "https://example.com.evil.net/x.git",
                "wss://example.com.evil.net",
            ),
            ("https://evil.com/example.com", "wss://evil.com/example.com"),
            (
                "http://example.com@evil.net/x.git",
                "ws://example.com@evil.net/",
            ),
            (
                "http://evil.net\\@example.com/x.git",
                "ws://evil.net\\@example.com",
            ),
            ("https://evil.net?example.com", "wss://evil.net#example.com"),
            ("https://notexample.com/x", "wss://notexample.com"),
            ("https://example.com.", "wss://example.com."),
            (
                "https://example.com%2f.evil.net/",
                "wss://example.com%2f.evil.net/",
            ),
        ] {
            let a = announcement(&[clone], &[relay]);
            assert!(!a.lists_service("example.com"), "{clone} {relay}");
        }
        // Userinfo before the real host is fine.
        let a = announcement(&["https://user@example.com/x.git"], &["wss://example.com"]);
        assert!(a.lists_service("example.com"));
    }

    #[test]
    fn hostile_urls_never_panic() {
        let weird = [
            "",
            "://",
            "http://",
            "https://[",
            "https://[::1",
            "https://[::1]x",
            "https://]:",
            "http://:80",
            "http://@",
            "http://é.com:８０/",
            "wss://\u{0}",
            "ws://a:b:c",
            "http://::::",
            "https://x:-1",
            "https://[::1]:",
            "ws://ä@ö/",
            "http://example.com:0080",
            "\u{feff}https://example.com",
        ];
        for u in weird {
            let a = announcement(&[u], &[u]);
            for host in ["example.com", "", "[::1]", ":", "[", "é"] {
                let _ = a.lists_service(host);
            }
        }
        // Leading zeros in the port are still the same port number.
        assert!(
            announcement(&["http://example.com:0080/"], &["ws://example.com"])
                .lists_service("example.com")
        );
        for c in [
            "",
            ":",
            "::",
            "1:",
            "x:y:z",
            "30617::",
            "30617:é:x",
            "999999:aa:b",
        ] {
            assert_eq!(parse_coordinate(c), None, "{c:?}");
        }
    }

    fn state(keys: &Keys, tags: Vec<Tag>) -> Result<RepoState, EventError> {
        RepoState::from_event(&event(keys, KIND_STATE, tags))
    }

    #[test]
    fn state_fields() {
        let keys = Keys::generate();
        let s = state(
            &keys,
            vec![
                tag(&["d", "repo"]),
                tag(&["refs/heads/main", A]),
                tag(&["refs/tags/v1", B]),
                tag(&["refs/tags/v1^{}", A]),
                tag(&["refs/heads/main", A]),
                tag(&["refs/remotes/x", "junk"]),
                tag(&["HEAD", "ref: refs/heads/main"]),
                tag(&["other", "x"]),
            ],
        )
        .unwrap();
        assert_eq!(s.identifier, "repo");
        assert_eq!(s.author, keys.public_key());
        assert_eq!(s.head.as_deref(), Some("refs/heads/main"));
        let mut expected = RefMap::new();
        expected.insert("refs/heads/main".into(), A.into());
        expected.insert("refs/tags/v1".into(), B.into());
        assert_eq!(s.refs, expected);
        // No HEAD, no refs: fine.
        let s = state(&keys, vec![tag(&["d", "repo"])]).unwrap();
        assert!(s.refs.is_empty() && s.head.is_none());
    }

    #[test]
    fn state_errors() {
        let keys = Keys::generate();
        let d = || tag(&["d", "repo"]);
        assert_eq!(
            state(&keys, vec![tag(&["refs/heads/main", A])]).unwrap_err(),
            EventError::MissingIdentifier { kind: KIND_STATE }
        );
        assert!(matches!(
            state(&keys, vec![d(), tag(&["refs/heads/main", ""])]).unwrap_err(),
            EventError::InvalidRefOid { .. }
        ));
        assert!(matches!(
            state(&keys, vec![d(), tag(&["refs/heads/main"])]).unwrap_err(),
            EventError::InvalidRefOid { .. }
        ));
        assert!(matches!(
            state(&keys, vec![d(), tag(&["refs/heads/a..b", A])]).unwrap_err(),
            EventError::InvalidRefName { .. }
        ));
        assert!(matches!(
            state(
                &keys,
                vec![d(), tag(&["refs/heads/x", A]), tag(&["refs/heads/x", B])]
            )
            .unwrap_err(),
            EventError::DuplicateRef { .. }
        ));
        for head in [
            "refs/tags/v1",
            "ref: refs/tags/v1",
            "ref:refs/heads/main",
            "refs/heads/a..b",
            "ref: refs/heads/a..b",
            "",
        ] {
            assert!(matches!(
                state(&keys, vec![d(), tag(&["HEAD", head])]).unwrap_err(),
                EventError::InvalidHead { .. }
            ));
        }
        let ev = event(&keys, KIND_ANNOUNCEMENT, vec![d()]);
        assert!(matches!(
            RepoState::from_event(&ev),
            Err(EventError::WrongKind { .. })
        ));
    }

    #[test]
    fn head_without_ref_prefix_is_read_as_the_branch() {
        let keys = Keys::generate();
        let s = state(
            &keys,
            vec![tag(&["d", "repo"]), tag(&["HEAD", "refs/heads/main"])],
        )
        .unwrap();
        assert_eq!(s.head.as_deref(), Some("refs/heads/main"));
        let prefixed = state(
            &keys,
            vec![tag(&["d", "repo"]), tag(&["HEAD", "ref: refs/heads/main"])],
        )
        .unwrap();
        assert_eq!(prefixed.head, s.head);
    }

    #[test]
    fn non_full_object_ids_make_a_state_unsatisfiable() {
        let keys = Keys::generate();
        let d = || tag(&["d", "repo"]);
        let ok = state(&keys, vec![d(), tag(&["refs/heads/main", A])]).unwrap();
        assert!(ok.is_satisfiable());
        assert_eq!(ok.unsatisfiable_refs().count(), 0);
        for bad in ["abc123", &A[..39], "HEAD", "--upload-pack=x", "g".repeat(40).as_str()] {
            let s = state(
                &keys,
                vec![d(), tag(&["refs/heads/main", A]), tag(&["refs/tags/v1", bad])],
            )
            .unwrap_or_else(|e| panic!("{bad:?} refused: {e}"));
            assert!(!s.is_satisfiable(), "{bad:?}");
            assert_eq!(s.unsatisfiable_refs().collect::<Vec<_>>(), [("refs/tags/v1", bad)]);
            assert_eq!(s.refs["refs/heads/main"], A);
        }
        // A value longer than any object id is not one: refused.
        let long = "x".repeat(65);
        assert!(matches!(
            state(&keys, vec![d(), tag(&["refs/heads/main", &long])]).unwrap_err(),
            EventError::InvalidRefOid { .. }
        ));
        assert!(state(&keys, vec![d(), tag(&["refs/heads/main", &long[..64]])]).is_ok());
        // A full id in upper case is a full id.
        let s = state(&keys, vec![d(), tag(&["refs/heads/main", &A.to_uppercase()])]).unwrap();
        assert!(s.is_satisfiable());
        assert_eq!(s.refs["refs/heads/main"], A);
    }

    #[test]
    fn state_ordering() {
        let keys = Keys::generate();
        let s1 = RepoState::from_event(&event_at(&keys, KIND_STATE, vec![tag(&["d", "r"])], 100))
            .unwrap();
        let s2 = RepoState::from_event(&event_at(&keys, KIND_STATE, vec![tag(&["d", "r"])], 200))
            .unwrap();
        assert!(s2.is_newer_than(&s1));
        assert!(!s1.is_newer_than(&s2));
        let s3 = RepoState::from_event(&event_at(
            &keys,
            KIND_STATE,
            vec![tag(&["d", "r"]), tag(&["x", "1"])],
            200,
        ))
        .unwrap();
        assert_eq!(s2.is_newer_than(&s3), s2.event_id < s3.event_id);
        assert_eq!(s3.is_newer_than(&s2), s3.event_id < s2.event_id);
        assert!(!s2.is_newer_than(&s2));
    }

    #[test]
    fn pull_requests() {
        let keys = Keys::generate();
        let owner = Keys::generate().public_key();
        let coord = format!("30617:{}:repo", owner.to_hex());
        let ev = event(
            &keys,
            KIND_PR,
            vec![
                tag(&["a", &coord]),
                tag(&["a", &coord]),
                tag(&["a", "30617:nothex:repo"]),
                tag(&["a", &format!("1617:{}:repo", owner.to_hex())]),
                tag(&["c", A]),
                tag(&["clone", "https://a/x.git", "https://b/x.git"]),
            ],
        );
        let pr = PullRequest::from_event(&ev).unwrap();
        assert_eq!(pr.kind, KIND_PR);
        assert_eq!(pr.commit, A);
        assert_eq!(pr.repos, vec![(owner, "repo".to_owned())]);
        assert_eq!(pr.clone_urls.len(), 2);
        assert_eq!(pr.root, None);
        assert_eq!(pr.event_id, ev.id);

        let update = event(
            &keys,
            KIND_PR_UPDATE,
            vec![
                tag(&["a", &coord]),
                tag(&["E", &ev.id.to_hex()]),
                tag(&["c", B]),
            ],
        );
        let pu = PullRequest::from_event(&update).unwrap();
        assert_eq!(pu.kind, KIND_PR_UPDATE);
        assert_eq!(pu.root, Some(ev.id));
        assert_eq!(pu.commit, B);

        let no_c = event(&keys, KIND_PR, vec![tag(&["a", &coord])]);
        assert_eq!(
            PullRequest::from_event(&no_c).unwrap_err(),
            EventError::MissingCommit
        );
        let bad_c = event(&keys, KIND_PR, vec![tag(&["c", "HEAD"])]);
        assert!(matches!(
            PullRequest::from_event(&bad_c),
            Err(EventError::InvalidCommit { .. })
        ));
        let wrong = event(&keys, KIND_PATCH, vec![tag(&["c", A])]);
        assert!(matches!(
            PullRequest::from_event(&wrong),
            Err(EventError::WrongKind { found: 1617, .. })
        ));
    }

    #[test]
    fn references_of_events() {
        let keys = Keys::generate();
        let pk = Keys::generate().public_key();
        let id = event(&keys, 1, vec![]).id;
        let coord = format!("30617:{}:re:po", pk.to_hex());
        let ev = event(
            &keys,
            KIND_COMMENT,
            vec![
                tag(&["A", &coord]),
                tag(&["a", &coord]),
                tag(&["q", &format!("30618:{}:repo", pk.to_hex())]),
                tag(&["a", "30617:zz:repo"]),
                tag(&["a", "x:y"]),
                tag(&["a", &format!("99999:{}:x", pk.to_hex())]),
                tag(&["a"]),
                tag(&["E", &id.to_hex()]),
                tag(&["e", &id.to_hex()]),
                tag(&["q", &id.to_hex(), "wss://relay"]),
                tag(&["e", &id.to_hex().to_uppercase()]),
                tag(&["e", "1234"]),
                tag(&["p", &pk.to_hex()]),
            ],
        );
        let refs = references(&ev);
        assert_eq!(
            refs.coordinates,
            vec![
                Coordinate {
                    kind: 30617,
                    pubkey: pk,
                    identifier: "re:po".into()
                },
                Coordinate {
                    kind: 30618,
                    pubkey: pk,
                    identifier: "repo".into()
                },
            ]
        );
        assert_eq!(refs.coordinates[0].to_string(), coord);
        assert_eq!(refs.event_ids, vec![id]);
        assert_eq!(references(&event(&keys, 1, vec![])), References::default());
    }

    #[test]
    fn error_messages_say_what_to_do() {
        for err in [
            EventError::MissingCommit,
            EventError::InvalidCommit { value: "x".into() },
            EventError::InvalidHead { value: "x".into() },
            EventError::DuplicateRef { name: "x".into() },
            EventError::InvalidRefName { name: "x".into() },
            EventError::InvalidRefOid {
                name: "x".into(),
                value: "y".into(),
            },
            EventError::MissingIdentifier { kind: 1 },
        ] {
            let msg = err.to_string();
            assert!(
                msg.contains("use")
                    || msg.contains("add")
                    || msg.contains("keep")
                    || msg.contains("fix"),
                "{msg}"
            );
        }
    }
}
