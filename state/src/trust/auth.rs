//! Who a client is, as pure decisions (docs/protocol.md#trust).
//!
//! - NIP-42: [`verify_auth`] turns a kind 22242 `AUTH` event, the challenge the connection was
//!   sent, this service's public host and the clock into the authenticated public key or an
//!   [`AuthError`] that says what to fix.
//! - GRASP-08 git over HTTP: [`verify_git_proof`] checks an `Authorization: Nostr <base64>`
//!   header (a kind 27235 event) against the repository asked for and the clock.
//! - NIP-70: [`is_protected`] finds the `["-"]` tag; [`check_protected`] decides whether a
//!   submitter may publish a protected event: only a connection authenticated as the event's
//!   author, never relay-to-relay sync.

use nostr::prelude::{Event, PublicKey};

use crate::nostr::nip34::url_names_host;

/// The kind of NIP-42 authentication events.
pub const KIND_AUTH: u16 = 22242;

/// How far an `AUTH` event's `created_at` may be from the relay's clock, either way (seconds).
pub const AUTH_MAX_SKEW_SECS: u64 = 600;

/// Why an `AUTH` event does not authenticate anybody. Displayed after an `invalid: ` prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("an AUTH event must be kind 22242, not kind {0}")]
    WrongKind(u16),
    #[error("the AUTH event's `challenge` tag does not match the challenge this relay sent on this connection; sign a new AUTH event with the latest [\"AUTH\", <challenge>]")]
    ChallengeMismatch,
    #[error("the AUTH event's `relay` tag must be this relay's URL (ws://{0}/ or wss://{0}/)")]
    RelayMismatch(String),
    #[error("the AUTH event's created_at is {0} seconds away from the relay's clock (at most 600 allowed); sign it with the current time")]
    Stale(u64),
    #[error("the AUTH event's id does not match its content; recompute the id (NIP-01)")]
    BadId,
    #[error("the AUTH event's signature is not valid; sign the event id with the key you authenticate as")]
    BadSignature,
}

/// The first value of the first tag named `name`.
fn tag_value<'a>(event: &'a Event, name: &str) -> Option<&'a str> {
    event.tags.iter().find_map(|t| match t.as_slice() {
        [n, v, ..] if n == name => Some(v.as_str()),
        _ => None,
    })
}

/// Verifies a NIP-42 `AUTH` event sent on a connection that was challenged with `challenge`, for a
/// relay whose public host is `public_host` (`host[:port]`), at unix time `now`. Cheap checks come
/// first; the signature is checked last. Returns the authenticated public key.
pub fn verify_auth(event: &Event, challenge: &str, public_host: &str, now: u64) -> Result<PublicKey, AuthError> {
    let kind = event.kind.as_u16();
    if kind != KIND_AUTH {
        return Err(AuthError::WrongKind(kind));
    }
    if challenge.is_empty() || tag_value(event, "challenge") != Some(challenge) {
        return Err(AuthError::ChallengeMismatch);
    }
    let relay_ok = event.tags.iter().any(|t| match t.as_slice() {
        [n, v, ..] if n == "relay" => url_names_host(v, &["ws", "wss"], public_host),
        _ => false,
    });
    if !relay_ok {
        return Err(AuthError::RelayMismatch(public_host.to_string()));
    }
    let skew = event.created_at.as_secs().abs_diff(now);
    if skew > AUTH_MAX_SKEW_SECS {
        return Err(AuthError::Stale(skew));
    }
    if !event.verify_id() {
        return Err(AuthError::BadId);
    }
    if !event.verify_signature() {
        return Err(AuthError::BadSignature);
    }
    Ok(event.pubkey)
}

/// The kind of the HTTP authorization event of a private service's git requests.
pub const KIND_HTTP_AUTH: u16 = 27235;

/// How far a git proof's `created_at` may be from the server's clock, either way (seconds).
pub const GIT_PROOF_MAX_SKEW_SECS: u64 = 60;

/// Why a git request's `Authorization` header proves nothing. Logged by the relay; the client
/// only ever sees `401`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GitProofError {
    #[error("no Authorization header")]
    Missing,
    #[error("the Authorization header is not `Nostr <base64 event>`")]
    Malformed,
    #[error("the proof is kind {0}, not 27235")]
    WrongKind(u16),
    #[error("the proof's `u` tag is not this repository's root URL")]
    WrongUrl,
    #[error("the proof's `method` tag is not GET")]
    WrongMethod,
    #[error("the proof's created_at is {0} seconds away from the server's clock (at most 60)")]
    Stale(u64),
    #[error("the proof's id or signature is not valid")]
    BadSignature,
}

/// Verifies a GRASP-08 git proof: `authorization` is the HTTP `Authorization` header value,
/// `Nostr <base64 of a kind 27235 event>`, whose `u` tag must be the root URL of `owner`'s
/// repository `identifier` on `public_host` (`http(s)://HOST/<npub>/<identifier>.git`, no query,
/// no trailing slash; scheme and host case-insensitive, percent-encoding normalised), whose
/// `method` tag is `GET` (one credential for every request of a clone, fetch or push), created
/// within 60 s of `now`, validly signed. Returns the signer; membership is the caller's check.
pub fn verify_git_proof(
    authorization: Option<&str>,
    public_host: &str,
    owner: &PublicKey,
    identifier: &str,
    now: u64,
) -> Result<PublicKey, GitProofError> {
    use base64::Engine as _;
    let header = authorization.map(str::trim).filter(|h| !h.is_empty()).ok_or(GitProofError::Missing)?;
    let (scheme, token) = header.split_once(' ').ok_or(GitProofError::Malformed)?;
    if !scheme.eq_ignore_ascii_case("nostr") || token.len() > 64 * 1024 {
        return Err(GitProofError::Malformed);
    }
    let token = token.trim();
    let json = base64::engine::general_purpose::STANDARD
        .decode(token)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(token))
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(token))
        .map_err(|_| GitProofError::Malformed)?;
    let event: Event = serde_json::from_slice(&json).map_err(|_| GitProofError::Malformed)?;
    let kind = event.kind.as_u16();
    if kind != KIND_HTTP_AUTH {
        return Err(GitProofError::WrongKind(kind));
    }
    let url = tag_value(&event, "u").ok_or(GitProofError::WrongUrl)?;
    if !is_repo_root_url(url, public_host, owner, identifier) {
        return Err(GitProofError::WrongUrl);
    }
    if tag_value(&event, "method") != Some("GET") {
        return Err(GitProofError::WrongMethod);
    }
    let skew = event.created_at.as_secs().abs_diff(now);
    if skew > GIT_PROOF_MAX_SKEW_SECS {
        return Err(GitProofError::Stale(skew));
    }
    if !event.verify_id() || !event.verify_signature() {
        return Err(GitProofError::BadSignature);
    }
    Ok(event.pubkey)
}

/// Is `url` exactly the root URL of `owner`'s repository `identifier` on `public_host`?
fn is_repo_root_url(url: &str, public_host: &str, owner: &PublicKey, identifier: &str) -> bool {
    crate::nostr::nip34::repo_url_on_host(url, public_host)
        .is_some_and(|p| p.space.is_hosted() && p.owner == *owner && p.identifier == identifier)
}

/// NIP-70: does the event carry the `["-"]` tag?
pub fn is_protected(event: &Event) -> bool {
    event.tags.iter().any(|t| t.as_slice().first().is_some_and(|n| n == "-"))
}

/// Why a protected event is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtectedRefusal {
    /// The connection has not authenticated at all.
    AuthRequired,
    /// The connection authenticated, but not as the author.
    Restricted,
    /// The event came through relay-to-relay sync, never "published by its author".
    FromSync,
}

impl ProtectedRefusal {
    /// The complete NIP-01 `OK` message.
    pub fn message(&self) -> &'static str {
        match self {
            ProtectedRefusal::AuthRequired => {
                "auth-required: this event is protected ([\"-\"], NIP-70) and may only be published by its author; answer the relay's AUTH challenge as the author (NIP-42), then send it again"
            }
            ProtectedRefusal::Restricted => {
                "restricted: this event is protected ([\"-\"], NIP-70) and this connection is not authenticated as its author; AUTH as the author's key to publish it"
            }
            ProtectedRefusal::FromSync => {
                "blocked: protected events ([\"-\"], NIP-70) are only accepted from their author, not through relay sync"
            }
        }
    }
}

/// Who submits an event: the public keys its connection authenticated as (NIP-42), whether
/// it arrives through relay-to-relay sync rather than from a client, and the client's address
/// as per-address limits count it ([`crate::names::client_key::limit_key`]; `None` for relay sync).
#[derive(Debug, Clone, Copy, Default)]
pub struct Submitter<'a> {
    pub authenticated: &'a [PublicKey],
    pub from_sync: bool,
    pub address: Option<std::net::IpAddr>,
}

impl Submitter<'_> {
    /// A client connection that has not authenticated.
    pub const ANONYMOUS: Submitter<'static> = Submitter { authenticated: &[], from_sync: false, address: None };

    /// Has the connection authenticated as `pk`?
    pub fn is(&self, pk: &PublicKey) -> bool {
        !self.from_sync && self.authenticated.contains(pk)
    }
}

/// NIP-70: may `submitter` publish `event`? Unprotected events always may.
pub fn check_protected(event: &Event, submitter: &Submitter<'_>) -> Result<(), ProtectedRefusal> {
    if !is_protected(event) {
        return Ok(());
    }
    if submitter.from_sync {
        return Err(ProtectedRefusal::FromSync);
    }
    if submitter.authenticated.is_empty() {
        return Err(ProtectedRefusal::AuthRequired);
    }
    if submitter.is(&event.pubkey) {
        Ok(())
    } else {
        Err(ProtectedRefusal::Restricted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind, Tag, Timestamp};

    const HOST: &str = "git.example.com";
    const NOW: u64 = 1_700_000_000;

    fn auth_event(keys: &Keys, kind: u16, tags: &[&[&str]], at: u64) -> Event {
        let tags: Vec<Tag> = tags.iter().map(|t| Tag::parse(t.iter().copied()).unwrap()).collect();
        EventBuilder::new(Kind::Custom(kind), "")
            .tags(tags)
            .custom_created_at(Timestamp::from_secs(at))
            .finalize(keys)
            .unwrap()
    }

    #[test]
    fn a_good_auth_event_authenticates_its_author() {
        let keys = Keys::generate();
        for relay in ["wss://git.example.com", "wss://GIT.example.com/", "ws://git.example.com:80/", "wss://git.example.com:443"] {
            let ev = auth_event(&keys, KIND_AUTH, &[&["relay", relay], &["challenge", "abc"]], NOW - 30);
            assert_eq!(verify_auth(&ev, "abc", HOST, NOW), Ok(keys.public_key()), "{relay}");
        }
    }

    #[test]
    fn each_check_refuses() {
        let keys = Keys::generate();
        let ok_tags: &[&[&str]] = &[&["relay", "wss://git.example.com/"], &["challenge", "abc"]];
        let ev = auth_event(&keys, 1, ok_tags, NOW);
        assert_eq!(verify_auth(&ev, "abc", HOST, NOW), Err(AuthError::WrongKind(1)));
        let ev = auth_event(&keys, KIND_AUTH, ok_tags, NOW);
        assert_eq!(verify_auth(&ev, "abd", HOST, NOW), Err(AuthError::ChallengeMismatch));
        assert_eq!(verify_auth(&ev, "", HOST, NOW), Err(AuthError::ChallengeMismatch));
        let ev = auth_event(&keys, KIND_AUTH, &[&["relay", "wss://git.example.com/"]], NOW);
        assert_eq!(verify_auth(&ev, "abc", HOST, NOW), Err(AuthError::ChallengeMismatch));
        for relay in ["wss://git.example.com.evil.net/", "https://git.example.com/", "wss://git.example.com:8080/", "git.example.com"] {
            let ev = auth_event(&keys, KIND_AUTH, &[&["relay", relay], &["challenge", "abc"]], NOW);
            assert!(matches!(verify_auth(&ev, "abc", HOST, NOW), Err(AuthError::RelayMismatch(_))), "{relay}");
        }
        let ev = auth_event(&keys, KIND_AUTH, ok_tags, NOW - 601);
        assert_eq!(verify_auth(&ev, "abc", HOST, NOW), Err(AuthError::Stale(601)));
        let ev = auth_event(&keys, KIND_AUTH, ok_tags, NOW + 601);
        assert_eq!(verify_auth(&ev, "abc", HOST, NOW), Err(AuthError::Stale(601)));
        let ev = auth_event(&keys, KIND_AUTH, ok_tags, NOW + 600);
        assert!(verify_auth(&ev, "abc", HOST, NOW).is_ok());
        // A tampered event: content changed after signing.
        let mut json = serde_json::to_value(auth_event(&keys, KIND_AUTH, ok_tags, NOW)).unwrap();
        json["content"] = "changed".into();
        let ev: Event = serde_json::from_value(json).unwrap();
        assert_eq!(verify_auth(&ev, "abc", HOST, NOW), Err(AuthError::BadId));
        // Someone else's signature under the author's pubkey.
        let other = auth_event(&Keys::generate(), KIND_AUTH, ok_tags, NOW);
        let mut json = serde_json::to_value(auth_event(&keys, KIND_AUTH, ok_tags, NOW)).unwrap();
        json["sig"] = serde_json::to_value(other.sig).unwrap();
        let ev: Event = serde_json::from_value(json).unwrap();
        assert_eq!(verify_auth(&ev, "abc", HOST, NOW), Err(AuthError::BadSignature));
    }

    fn proof(keys: &Keys, url: &str, method: &str, at: u64) -> String {
        use base64::Engine as _;
        let ev = auth_event(keys, KIND_HTTP_AUTH, &[&["u", url], &["method", method]], at);
        format!("Nostr {}", base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&ev).unwrap()))
    }

    #[test]
    fn git_proofs() {
        let keys = Keys::generate();
        let owner = Keys::generate().public_key();
        let npub = crate::names::identifier::npub_of(&owner);
        let root = format!("https://git.example.com/{npub}/my%20repo.git");
        let check = |h: &str| verify_git_proof(Some(h), HOST, &owner, "my repo", NOW);
        assert_eq!(check(&proof(&keys, &root, "GET", NOW - 59)), Ok(keys.public_key()));
        let upper = format!("HTTP://GIT.EXAMPLE.COM:80/{npub}/my%20repo.git");
        assert_eq!(check(&proof(&keys, &upper, "GET", NOW)), Ok(keys.public_key()));
        assert_eq!(check(&proof(&keys, &root, "POST", NOW)), Err(GitProofError::WrongMethod));
        assert_eq!(check(&proof(&keys, &root, "GET", NOW - 61)), Err(GitProofError::Stale(61)));
        for url in [
            format!("{root}/"),
            format!("{root}?x=1"),
            format!("{root}/info/refs"),
            format!("https://git.example.com/{npub}/other.git"),
            format!("https://evil.example.com/{npub}/my%20repo.git"),
            "garbage".to_string(),
        ] {
            assert_eq!(check(&proof(&keys, &url, "GET", NOW)), Err(GitProofError::WrongUrl), "{url}");
        }
        assert_eq!(verify_git_proof(None, HOST, &owner, "my repo", NOW), Err(GitProofError::Missing));
        assert_eq!(check("Basic abc"), Err(GitProofError::Malformed));
        assert_eq!(check("Nostr !!!"), Err(GitProofError::Malformed));
        let other_kind = {
            use base64::Engine as _;
            let ev = auth_event(&keys, 1, &[&["u", &root], &["method", "GET"]], NOW);
            format!("Nostr {}", base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&ev).unwrap()))
        };
        assert_eq!(check(&other_kind), Err(GitProofError::WrongKind(1)));
    }

    #[test]
    fn protected_events_need_their_author() {
        let author = Keys::generate();
        let other = Keys::generate().public_key();
        let ev = auth_event(&author, 1, &[&["-"]], NOW);
        let plain = auth_event(&author, 1, &[&["t", "x"]], NOW);
        assert!(is_protected(&ev) && !is_protected(&plain));
        assert_eq!(check_protected(&plain, &Submitter::ANONYMOUS), Ok(()));
        assert_eq!(check_protected(&ev, &Submitter::ANONYMOUS), Err(ProtectedRefusal::AuthRequired));
        let others = [other];
        assert_eq!(check_protected(&ev, &Submitter { authenticated: &others, from_sync: false, address: None }), Err(ProtectedRefusal::Restricted));
        let both = [other, author.public_key()];
        assert_eq!(check_protected(&ev, &Submitter { authenticated: &both, from_sync: false, address: None }), Ok(()));
        assert_eq!(check_protected(&ev, &Submitter { authenticated: &both, from_sync: true, address: None }), Err(ProtectedRefusal::FromSync));
        assert_eq!(check_protected(&plain, &Submitter { authenticated: &[], from_sync: true, address: None }), Ok(()));
        for r in [ProtectedRefusal::AuthRequired, ProtectedRefusal::Restricted, ProtectedRefusal::FromSync] {
            let prefix = r.message().split(':').next().unwrap();
            assert!(["auth-required", "restricted", "blocked"].contains(&prefix));
        }
    }
}
