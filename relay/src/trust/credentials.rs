//! What this server presents to other servers to be let in: NIP-42 `AUTH` events, and GRASP-08
//! git proofs (`Authorization: Nostr <base64 of a kind 27235 event>`, the form
//! [`grasp_state::trust::auth::verify_git_proof`] checks).
//!
//! A replica of a private set (docs/scaling.md, "A private replica set") presents its own key,
//! which the other replicas read from its NIP-11 document (`self`) at the URL their operator
//! named, and names the service's public URLs, the same on every replica: `wss://<domain>` as
//! the `AUTH` event's `relay` tag, `https://<domain>/<npub>/<identifier>.git` as a git proof's
//! `u` tag. A private service following a `--private-sync-peer` presents its service key and
//! names that peer's own URLs.

use base64::Engine as _;
use grasp_state::names::host::PublicUrls;
use grasp_state::trust::auth::KIND_HTTP_AUTH;
use nostr::prelude::{Event, EventBuilder, FinalizeEvent, Keys, Kind, Tag, Timestamp};

/// A NIP-42 `AUTH` event of `keys` answering `challenge`, for the relay whose URL is `relay`.
pub fn auth_event(keys: &Keys, relay: &str, challenge: &str) -> Result<Event, String> {
    let tags = [Tag::parse(["relay", relay]), Tag::parse(["challenge", challenge])];
    let tags: Vec<Tag> = tags.into_iter().collect::<Result<_, _>>().map_err(|e| format!("AUTH tags: {e}"))?;
    EventBuilder::new(Kind::Authentication, "").tags(tags).finalize(keys).map_err(|e| format!("signing AUTH: {e}"))
}

/// Who this server is to a private repository's git service: a key and the repository root URL
/// its proofs name. A proof is valid a minute, so one is signed for every git run
/// ([`GitCredential::header`]). Printed (`Debug`), it shows the public key only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitCredential {
    keys: Keys,
    url: String,
}

impl GitCredential {
    /// Proofs of `keys` for the repository whose root URL is `url`.
    pub fn new(keys: Keys, url: impl Into<String>) -> GitCredential {
        GitCredential { keys, url: url.into() }
    }

    /// The `Authorization` header value, created now.
    pub fn header(&self) -> Result<String, String> {
        let tags = [Tag::parse(["u", self.url.as_str()]), Tag::parse(["method", "GET"])];
        let tags: Vec<Tag> = tags.into_iter().collect::<Result<_, _>>().map_err(|e| format!("git proof tags: {e}"))?;
        let event = EventBuilder::new(Kind::Custom(KIND_HTTP_AUTH), "")
            .tags(tags)
            .custom_created_at(Timestamp::now())
            .finalize(&self.keys)
            .map_err(|e| format!("signing a git proof: {e}"))?;
        Ok(format!("Nostr {}", base64::engine::general_purpose::STANDARD.encode(event.as_json())))
    }
}

/// A replica's way in to the other replicas of a private set: its own key (their view of it is
/// its NIP-11 `self`), naming the service's public URLs.
#[derive(Debug, Clone)]
pub struct ReplicaIdentity {
    keys: Keys,
    public: PublicUrls,
}

impl ReplicaIdentity {
    /// `keys`: this server's own key; `public_host`: the service's domain (`--public-host`).
    pub fn new(keys: Keys, public_host: &str) -> ReplicaIdentity {
        ReplicaIdentity { keys, public: PublicUrls::new(public_host) }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The `AUTH` events' `relay` tag: the service's public relay URL.
    pub fn relay_tag(&self) -> String {
        self.public.relay_url()
    }

    /// Proofs for the repository at `path` (`/<npub>/<identifier>.git`, as on a replica's own
    /// listener), naming it on the service's domain.
    pub fn git_credential(&self, path: &str) -> GitCredential {
        GitCredential::new(self.keys.clone(), format!("{}{path}", self.public.http_base()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grasp_state::trust::auth::{verify_auth, verify_git_proof};

    #[test]
    fn what_a_replica_presents_is_what_another_replica_verifies() {
        let keys = Keys::generate();
        let owner = Keys::generate().public_key();
        let npub = grasp_state::names::identifier::npub_of(&owner);
        let now = Timestamp::now().as_secs();
        for domain in ["git.example.com", "git.example.com:8443", "http://git.example.com:8080"] {
            let me = ReplicaIdentity::new(keys.clone(), domain);
            let header = me.git_credential(&format!("/{npub}/my%20repo.git")).header().unwrap();
            assert_eq!(verify_git_proof(Some(&header), domain, &owner, "my repo", now), Ok(keys.public_key()), "{domain}");
            let auth = auth_event(me.keys(), &me.relay_tag(), "chal").unwrap();
            assert_eq!(verify_auth(&auth, "chal", domain, now), Ok(keys.public_key()), "{domain}");
        }
        // Another repository's proof does not open this one.
        let me = ReplicaIdentity::new(keys, "git.example.com");
        let header = me.git_credential(&format!("/{npub}/other.git")).header().unwrap();
        assert!(verify_git_proof(Some(&header), "git.example.com", &owner, "my repo", now).is_err());
    }
}
